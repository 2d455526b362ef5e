//! GTE and NomicBERT sentence embeddings (gte-multilingual-base, gte-base-en-v1.5,
//! nomic-embed-text-v1.5), and jina-embeddings-v3's task-adapted ones, on the packed GTE
//! encoder, with the pooling, projection,
//! normalization and prompts their directory declares (the text side is the BERT embedders',
//! `packed`).

use std::sync::{Arc, Mutex};

use super::builder::EmbedderBuilder;
use super::encoder::{
    config_path, encoder_embedder, single_text_encoder, EncoderEmbedder, EncoderSpec, QueryLoader,
    RoleTasks,
};
use super::{Embedder, Role};
use crate::models::engine::{EncoderFamily, PackedEncoder};
use crate::models::gte::config::{GteConfig, Spelling};
use crate::models::gte::encoder::{AdaptedGte, Adapter, GteEncoder};
use crate::models::layers::dense::Output;
use crate::models::layers::encoder::{single_texts, EncoderWeights};
use crate::models::layers::weights::Weights;
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
/// its task's instruction (`task_instructions`) as its prompt
/// ([`EmbedderBuilder::task`](super::EmbedderBuilder::task) picks others). The weights are
/// held once whatever the tasks: the documents' adapter is merged into them, and queries of
/// another task run on the same weights with the difference of the two adapters (a low-rank
/// correction of twice the adapters' rank) added beside each product. [`tasks`](Self::tasks)
/// says which run. A checkpoint whose `config.json` lists adapters it does not hold (a
/// fine-tune saved with its weights plain) is read as it is, without tasks (a warning is
/// logged).
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
/// A GTE encoder as the embedder holds it: shared with the queries' adapted encoder, if any.
type SharedGte = Arc<GteEncoder>;

single_text_encoder!(SharedGte);
single_text_encoder!(AdaptedGte);

/// The default task of each role for a model with task adapters, where it has it.
const DEFAULT_TASKS: [(Role, &str); 2] = [
    (Role::Query, "retrieval.query"),
    (Role::Document, "retrieval.passage"),
];

/// The GTE / NomicBERT / rotary XLM-R encoder of `model_dir`, whose parsed `config.json` is
/// `value`: its shape and tasks, and its native loader in `builder`'s precision. For a model
/// with task adapters, the loader merges the documents' task into the weights, and, when
/// queries run through another task, leaves the queries' encoder (the same weights with that
/// task's corrections: `gte::encoder::AdaptedGte`) for the spec's query loader.
fn read(
    model_dir: &ModelDir,
    value: &serde_json::Value,
    builder: &GteEmbedderBuilder,
) -> Result<(EncoderSpec, impl FnOnce(&ModelDir) -> Result<SharedGte>)> {
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
    // (documents' task, queries' task where it differs, the adapters' scale and rank)
    let mut tasks = None;
    // The queries' encoder, left by the documents' loader for the query loader.
    let queries: Arc<Mutex<Option<AdaptedGte>>> = Arc::default();
    // A model with adapters in its config.json has its checkpoint opened here, once: whether
    // it holds them decides its tasks, and its loader reads it. Adapters listed but not stored
    // (a fine-tune saved with one merged, say): the checkpoint is read as it is, with no tasks.
    let mut checkpoint = None;
    if config.adapters.is_some() {
        checkpoint = Some(Weights::open(model_dir.path())?);
    }
    let adapters = match config.adapters.clone() {
        Some(a) if checkpoint.as_ref().is_some_and(Weights::has_lora) => Some(a),
        Some(_) => {
            tracing::warn!(
                target: "rerank::models",
                config = %config_path.display(),
                "config.json lists task adapters (lora_adaptations) that the checkpoint does not \
                 hold: read without tasks"
            );
            None
        }
        None => None,
    };
    if let Some(adapters) = adapters {
        let mut chosen = [(Role::Query, 0), (Role::Document, 0)];
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
            *task = adapters
                .index(name, &config_path)
                .map_err(|e| Error::Config(e.to_string()))?;
        }
        let [(_, q), (_, d)] = chosen;
        let query_encoder: Option<QueryLoader> = match q == d {
            true => None,
            false => {
                let queries = Arc::clone(&queries);
                Some(Box::new(move |dir: &ModelDir| {
                    let taken = queries.lock().unwrap_or_else(|e| e.into_inner()).take();
                    let adapted = taken.ok_or_else(|| {
                        Error::model(format!(
                            "{}: the queries' adapter was not read with the documents' encoder",
                            dir.path().display()
                        ))
                    })?;
                    Ok(Box::new(adapted) as Box<dyn PackedEncoder>)
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
        tasks = Some((d, (q != d).then_some(q), (adapters.scale, adapters.rank)));
    }
    Ok((spec, move |dir: &ModelDir| {
        let prefixes = config.layout.prefixes();
        let checkpoint = match checkpoint {
            Some(opened) => opened,
            None => Weights::open(dir.path())?,
        };
        let Some((document, query, lora)) = tasks else {
            let weights = EncoderWeights::from_checkpoint(checkpoint, dir, prefixes)?;
            return GteEncoder::load(&weights, config, precision).map(Arc::new);
        };
        let tasks = (document, query);
        let mut weights = EncoderWeights::adapted(checkpoint, dir, prefixes, tasks, lora)?;
        let adapter = match query {
            Some(_) => Some(Adapter::take(&mut weights, &config)?),
            None => None,
        };
        let encoder = Arc::new(GteEncoder::load(&weights, config, precision)?);
        if let Some(adapter) = adapter {
            let base = Arc::clone(&encoder);
            *queries.lock().unwrap_or_else(|e| e.into_inner()) = Some(AdaptedGte { base, adapter });
        }
        Ok(encoder)
    }))
}
