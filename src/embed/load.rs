//! [`load_embedder`]: an embedding model by hub name or local directory, its family chosen by
//! its `config.json`.

use std::path::Path;

use super::encoder::EncoderSpec;
use super::{
    BertEmbedder, DistilBertEmbedder, Embedder, EmbedderBuilder, Gemma3Embedder, GteEmbedder,
    ModernBertEmbedder, MpnetEmbedder, Qwen3Embedder, Role, StaticEmbedder, T5Embedder,
};
use crate::models::engine::{EncoderEngine, PackedEncoder};
use crate::models::registry::{self, KnownModel, Task};
use crate::models::{ModelDir, ModelOptions, CONFIG_FILE};
use crate::{Error, Result};

/// Loads the embedding model `model`: a local directory, or a hub id such as
/// `BAAI/bge-small-en-v1.5`.
///
/// - A directory is loaded as it is. When its folder is named after a model of the
///   [registry](crate::models::registry) (`models/bge-small-en-v1.5`), the registry's prompts
///   fill in the roles the directory declares none for.
/// - A hub id that is not a local directory is fetched with the `hf-hub` feature
///   ([`HubModel::fetch_sentence_transformers`](crate::models::HubModel): the standard hub
///   cache, `HF_ENDPOINT`, `HF_HUB_OFFLINE`); a model the registry marks unsupported is
///   refused before anything is downloaded. Without the feature, a hub id that is not a
///   directory is an error that says how to get the files.
///
/// The family comes from `model_type` in `config.json`: `bert`, `xlm-roberta`, `roberta` and
/// `camembert` load as a [`BertEmbedder`], `modernbert` as a [`ModernBertEmbedder`], `new`,
/// `gte` and `nomic_bert` (and `xlm-roberta` with rotary positions: jina-embeddings-v3, its
/// queries through the `retrieval.query` adapter and documents through `retrieval.passage`)
/// as a [`GteEmbedder`], `mpnet` as an [`MpnetEmbedder`], `distilbert`
/// as a [`DistilBertEmbedder`], `gemma3_text` as a [`Gemma3Embedder`], `t5` and `mt5` as a
/// [`T5Embedder`], `qwen3`, `qwen2`, `llama` and `mistral` as a [`Qwen3Embedder`]; a directory whose `modules.json` starts with a `StaticEmbedding` loads
/// as a [`StaticEmbedder`]; anything else is
/// an [`Error::Model`] naming the file and the supported types.
///
/// ```no_run
/// use rerank::models::ModelOptions;
/// use rerank::{load_embedder, Embedder};
/// let embedder = load_embedder("BAAI/bge-small-en-v1.5", &ModelOptions::default())?;
/// let query = embedder.embed_query("what ranks documents?")?; // with bge's instruction
/// let docs = embedder.embed(&["BM25 ranks documents by term statistics."])?;
/// assert_eq!(query.len(), docs.ncols());
/// # Ok::<(), rerank::Error>(())
/// ```
pub fn load_embedder(model: impl AsRef<Path>, options: &ModelOptions) -> Result<Box<dyn Embedder>> {
    load_embedder_with_tasks(model, options, &[])
}

/// [`load_embedder`] with a task adapter chosen for each role in `tasks`
/// ([`EmbedderBuilder::task`]; a config's `query_task` / `document_task`, the CLI's `--task`),
/// for a model that has them (jina-embeddings-v3); a model without task adapters, or a task
/// the model does not have, is an [`Error::Config`].
///
/// ```no_run
/// use rerank::models::ModelOptions;
/// use rerank::{load_embedder_with_tasks, Role};
/// let sts = load_embedder_with_tasks(
///     "jinaai/jina-embeddings-v3",
///     &ModelOptions::default(),
///     &[(Role::Query, "text-matching"), (Role::Document, "text-matching")],
/// )?;
/// # Ok::<(), rerank::Error>(())
/// ```
pub fn load_embedder_with_tasks(
    model: impl AsRef<Path>,
    options: &ModelOptions,
    tasks: &[(Role, &str)],
) -> Result<Box<dyn Embedder>> {
    let (dir, known) = registry::locate(model.as_ref(), Task::Embedding)?;
    // A static-embedding model has no config.json: its modules.json says what it is.
    if ModelDir::folder(&dir)?.static_embedding_module()?.is_some() {
        let builder = with_registry(StaticEmbedder::builder(&dir), options, known, tasks);
        return Ok(Box::new(builder.build()?));
    }
    let model_dir = ModelDir::open(&dir)?;
    let config = model_dir.config()?;
    // A cross-encoder's body would embed, but its vectors mean nothing as embeddings (its
    // training scored pairs): refused, unless sentence-transformers' modules say it embeds.
    let classifier = config
        .get("architectures")
        .and_then(|a| a.as_array())
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str())
        .find(|a| a.ends_with("ForSequenceClassification"));
    if let Some(arch) = classifier.filter(|_| !dir.join("modules.json").is_file()) {
        return Err(Error::model(format!(
            "{}: {arch} is a cross-encoder (it scores query-document pairs), not an embedding \
             model; load it with load_reranker (`rerank score --model`, `--reranker`), and \
             embed with a sentence-transformers model",
            dir.join(CONFIG_FILE).display()
        )));
    }
    let model_type = config
        .get("model_type")
        .and_then(|v| v.as_str())
        .unwrap_or("bert");
    // jina's XLM-RoBERTa with rotary positions (jina-embeddings-v3) is the rotary encoders'.
    let rotary = config
        .get("position_embedding_type")
        .and_then(|v| v.as_str())
        == Some("rotary");
    match model_type {
        "xlm-roberta" if rotary => {
            let builder = with_registry(GteEmbedder::builder(&dir), options, known, tasks);
            Ok(Box::new(builder.build()?))
        }
        "bert" | "xlm-roberta" | "roberta" | "camembert" => {
            let builder = with_registry(BertEmbedder::builder(&dir), options, known, tasks);
            Ok(Box::new(builder.build()?))
        }
        "modernbert" => {
            let builder = with_registry(ModernBertEmbedder::builder(&dir), options, known, tasks);
            Ok(Box::new(builder.build()?))
        }
        "new" | "gte" | "nomic_bert" => {
            let builder = with_registry(GteEmbedder::builder(&dir), options, known, tasks);
            Ok(Box::new(builder.build()?))
        }
        "mpnet" => {
            let builder = with_registry(MpnetEmbedder::builder(&dir), options, known, tasks);
            Ok(Box::new(builder.build()?))
        }
        "distilbert" => {
            let builder = with_registry(DistilBertEmbedder::builder(&dir), options, known, tasks);
            Ok(Box::new(builder.build()?))
        }
        "gemma3_text" => {
            let builder = with_registry(Gemma3Embedder::builder(&dir), options, known, tasks);
            Ok(Box::new(builder.build()?))
        }
        "t5" | "mt5" => {
            let builder = with_registry(T5Embedder::builder(&dir), options, known, tasks);
            Ok(Box::new(builder.build()?))
        }
        // Qwen2 (gte-Qwen2), Llama and Mistral (e5-mistral) decoders are the Qwen3 decoder's
        // family (`DecoderFamily`).
        "qwen3" | "qwen2" | "llama" | "mistral" => {
            let builder = with_registry(Qwen3Embedder::builder(&dir), options, known, tasks);
            Ok(Box::new(builder.build()?))
        }
        other => Err(Error::model(format!(
            "{}: model_type {other:?} is not supported for embeddings (supported: bert, \
             xlm-roberta, roberta, camembert, modernbert, new, gte, nomic_bert, mpnet, \
             distilbert, gemma3_text, t5, mt5, qwen3, qwen2, llama, mistral)",
            dir.join(CONFIG_FILE).display()
        ))),
    }
}

/// The token encoder of `model_dir` (whose parsed `config.json` is `value`) on `options`'
/// engine, by `model_type`: BERT, XLM-R and RoBERTa, or ModernBERT (the encoders ColBERT models
/// are built on); its shape, for the text side to check its inputs against.
pub(crate) fn load_token_encoder(
    model_dir: &ModelDir,
    value: &serde_json::Value,
    options: &crate::models::ModelOptions,
) -> Result<(EncoderSpec, EncoderEngine<Box<dyn PackedEncoder>>)> {
    let precision = options.precision;
    fn boxed(e: impl PackedEncoder + 'static) -> Box<dyn PackedEncoder> {
        Box::new(e)
    }
    match super::encoder::model_type(value) {
        None | Some("bert" | "xlm-roberta" | "roberta" | "camembert") => {
            let (spec, native) = super::bert::read(model_dir, value, precision)?;
            let engine = EncoderEngine::load(options, model_dir, spec.family, || {
                native(model_dir).map(boxed)
            })?;
            Ok((spec, engine))
        }
        Some("modernbert") => {
            let (spec, native) = super::modernbert::read(model_dir, value, precision)?;
            let engine = EncoderEngine::load(options, model_dir, spec.family, || {
                native(model_dir).map(boxed)
            })?;
            Ok((spec, engine))
        }
        Some(other) => Err(crate::Error::model(format!(
            "{}: model_type {other:?} is not supported here (supported: bert, xlm-roberta, \
             roberta, camembert, modernbert)",
            super::encoder::config_path(model_dir).display()
        ))),
    }
}

/// The builder with `options` and the registry entry's prompts as defaults.
fn with_registry<M>(
    builder: EmbedderBuilder<M>,
    options: &ModelOptions,
    known: Option<&KnownModel>,
    tasks: &[(Role, &str)],
) -> EmbedderBuilder<M> {
    let mut builder = builder.options(options.clone());
    for &(role, task) in tasks {
        builder = builder.task(role, task);
    }
    if let Some(known) = known {
        if let Some(p) = known.query_prompt {
            builder = builder.default_prompt(Role::Query, p);
        }
        if let Some(p) = known.document_prompt {
            builder = builder.default_prompt(Role::Document, p);
        }
    }
    builder
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_directory_that_is_not_a_hub_id_says_so() {
        let e = load_embedder("no/such/dir", &ModelOptions::default())
            .err()
            .unwrap();
        assert!(e.to_string().contains("no/such/dir: does not exist"), "{e}");
    }

    #[test]
    fn unsupported_and_reranker_ids_are_refused_before_any_download() {
        let o = ModelOptions::default();
        let e = load_embedder("jinaai/jina-embeddings-v2-base-en", &o)
            .err()
            .unwrap();
        assert!(e.to_string().contains("ALiBi"), "{e}");
        let e = load_embedder("BAAI/bge-reranker-base", &o).err().unwrap();
        assert!(e.to_string().contains("load_reranker"), "{e}");
    }
}
