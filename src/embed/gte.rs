//! GTE and NomicBERT sentence embeddings (gte-multilingual-base, gte-base-en-v1.5,
//! nomic-embed-text-v1.5), and jina-embeddings-v3's task-adapted ones, on the packed GTE
//! encoder, with the pooling, projection,
//! normalization and prompts their directory declares (the text side is the BERT embedders',
//! `packed`).

use super::builder::EmbedderBuilder;
use super::encoder::{
    config_path, encoder_embedder, single_text_encoder, EncoderEmbedder, EncoderSpec, QueryLoader,
    RoleTasks,
};
use super::{Embedder, Role};
use crate::models::engine::{EncoderFamily, PackedEncoder};
use crate::models::gte::config::{GteConfig, Spelling};
use crate::models::gte::encoder::GteEncoder;
use crate::models::layers::dense::Output;
use crate::models::layers::encoder::{single_texts, EncoderWeights};
use crate::models::ModelDir;
use crate::{Error, Result};

/// A GTE or NomicBERT bi-encoder loaded from a local sentence-transformers (or plain
/// transformers) directory: `config.json` with `model_type` `new` (the hub's GTE remote code:
/// gte-multilingual-base, gte-base-en-v1.5 / -large-en-v1.5), `gte` (transformers 5's GTE) or
/// `nomic_bert` (nomic-embed-text-v1 / v1.5, in nomic's keys or transformers 5's),
/// `tokenizer.json`, `model.safetensors`, and the sentence-transformers modules
/// [`BertEmbedder`](super::BertEmbedder) reads, with the same rules: pooling modes, Dense and
/// Normalize modules, `max_seq_length`, prompts by [`Role`] and what is refused.
///
/// The encoder is BERT with rotary position embeddings and a gated MLP, post-norm: token (and
/// token type) embeddings and a layer norm, then per layer
/// `x = LN(x + O · attention(RoPE(Q x), RoPE(K x), V x))` and
/// `x = LN(x + down · (act(gate · x) * (up · x)))` (GELU for GTE, SiLU for NomicBERT's
/// SwiGLU). GTE's NTK-scaled RoPE is read as new-impl computes it. Texts are prefixed with their
/// role's prompt, tokenized, cut on the right to `max_seq_length` tokens and run *packed* (no
/// padding is computed), in batches under a token budget; rows come back in input order. Linear
/// layers run in f32 or, with [`Precision::Int8`](crate::models::Precision::Int8), in int8; bf16
/// and the candle engine are refused.
///
/// It also loads jina-embeddings-v3 (`model_type` `xlm-roberta` with `position_embedding_type:
/// "rotary"`, jina's remote code `XLMRobertaLoRA`): XLM-RoBERTa with rotary positions instead
/// of a position table and a plain GELU MLP, in flash-attention's layout, with a LoRA adapter
/// per task (`lora_adaptations`) stored beside every linear layer's and embedding table's
/// weight. The adapters are merged into the weights at load: queries run through the
/// `retrieval.query` adapter and documents through `retrieval.passage` by default, each with
/// its task's instruction (`task_instructions`) as its prompt; a symmetric task chosen for both
/// roles ([`EmbedderBuilder::task`](super::EmbedderBuilder::task)) loads the model once, two
/// tasks load it twice. [`tasks`](Self::tasks) says which run.
///
/// One instance can be shared (`Arc`) and called from many threads at once.
///
/// ```no_run
/// use rerank::{Embedder, GteEmbedder};
/// let embedder = GteEmbedder::from_dir("models/nomic-embed-text-v1.5")?;
/// let q = embedder.embed_query("what is the capital of China?")?; // "search_query: ..."
/// let d = embedder.embed_one("The capital of China is Beijing.")?;
/// assert_eq!(q.len(), d.len());
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct GteEmbedder(EncoderEmbedder);

encoder_embedder!(GteEmbedder, GteEmbedderBuilder, "gte", read, builder);
single_text_encoder!(GteEncoder);

/// The default task of each role for a model with task adapters, where it has it.
const DEFAULT_TASKS: [(Role, &str); 2] = [
    (Role::Query, "retrieval.query"),
    (Role::Document, "retrieval.passage"),
];

/// The GTE / NomicBERT / rotary XLM-R encoder of `model_dir`, whose parsed `config.json` is
/// `value`: its shape and tasks, and its native loader in `builder`'s precision (with the
/// documents' task adapter merged in, for a model that has adapters).
fn read(
    model_dir: &ModelDir,
    value: &serde_json::Value,
    builder: &GteEmbedderBuilder,
) -> Result<(EncoderSpec, impl FnOnce(&ModelDir) -> Result<GteEncoder>)> {
    let precision = builder.options.precision;
    let config_path = config_path(model_dir);
    let spelling = Spelling::of(value).ok_or_else(|| {
        Error::model(format!(
            "{}: model_type {:?} is not new, gte or nomic_bert, nor xlm-roberta with rotary \
             positions (load_embedder picks the loader for each model_type)",
            config_path.display(),
            value.get("model_type")
        ))
    })?;
    let config = GteConfig::from_value(value, spelling, &config_path)?;
    let mut spec = EncoderSpec {
        hidden: config.hidden,
        max_positions: config.max_positions,
        vocab: config.vocab,
        family: EncoderFamily::Gte,
        id_prefix: "gte",
        tasks: None,
    };
    let mut document = None;
    if let Some(adapters) = config.adapters.clone() {
        let mut chosen = [(Role::Query, None), (Role::Document, None)];
        for (role, task) in chosen.iter_mut() {
            let default = DEFAULT_TASKS
                .iter()
                .find(|(r, t)| r == role && adapters.tasks.iter().any(|a| a == t))
                .map(|(_, t)| *t);
            let name = builder.task_for(*role).or(default).ok_or_else(|| {
                Error::Config(format!(
                    "{}: the model has no {} task (its tasks: {}); choose one for {} texts \
                     with EmbedderBuilder::task",
                    config_path.display(),
                    DEFAULT_TASKS
                        .iter()
                        .find(|(r, _)| r == role)
                        .map_or("", |t| t.1),
                    adapters.tasks.join(", "),
                    role.as_str()
                ))
            })?;
            let index = adapters
                .index(name, &config_path)
                .map_err(|e| Error::Config(e.to_string()))?;
            *task = Some(index);
        }
        let [(_, Some(q)), (_, Some(d))] = chosen else {
            unreachable!("both roles get a task above")
        };
        let query_encoder: Option<QueryLoader> = match q == d {
            true => None,
            false => {
                let (config, lora) = (config.clone(), (adapters.scale, adapters.rank));
                Some(Box::new(move |dir: &ModelDir| {
                    let prefixes = config.layout.prefixes();
                    let weights = EncoderWeights::open_adapted(dir, prefixes, Some(q), lora)?;
                    let encoder = GteEncoder::load(&weights, config, precision)?;
                    Ok(Box::new(encoder) as Box<dyn PackedEncoder>)
                }))
            }
        };
        spec.tasks = Some(RoleTasks {
            names: (adapters.tasks[q].clone(), adapters.tasks[d].clone()),
            prompts: vec![
                (Role::Query, adapters.instructions[q].clone()),
                (Role::Document, adapters.instructions[d].clone()),
            ],
            query_encoder,
        });
        document = Some((d, (adapters.scale, adapters.rank)));
    }
    Ok((spec, move |dir: &ModelDir| {
        let prefixes = config.layout.prefixes();
        let weights = match document {
            Some((task, lora)) => EncoderWeights::open_adapted(dir, prefixes, Some(task), lora)?,
            None => EncoderWeights::open(dir, prefixes)?,
        };
        GteEncoder::load(&weights, config, precision)
    }))
}
