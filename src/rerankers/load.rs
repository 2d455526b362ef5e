//! [`load_reranker`]: the reranker a hub name or local model directory holds, chosen by its
//! `config.json` and its sentence-transformers modules.

use std::path::Path;
use std::sync::Arc;

use super::{
    ColbertReranker, CrossEncoder, EmbeddingReranker, MonoT5Reranker, MxbaiReranker, Qwen3Reranker,
};
use crate::embed::ColbertEncoder;
use crate::models::registry::{self, Task};
use crate::models::{Architecture, ModelDir, ModelOptions, CONFIG_FILE};
use crate::{Embedder, Error, Reranker, Result};

/// Loads the reranker `model` names: a local directory, or a hub id such as
/// `BAAI/bge-reranker-v2-m3` (fetched with the `hf-hub` feature, as
/// [`load_embedder`](crate::load_embedder) fetches; a model the
/// [registry](crate::models::registry) marks unsupported is refused before any download).
///
/// | the directory holds | reranker |
/// |---|---|
/// | `BertForSequenceClassification`, `XLMRobertaForSequenceClassification`, `RobertaForSequenceClassification`, `CamembertForSequenceClassification`, `ElectraForSequenceClassification`, `DistilBertForSequenceClassification`, `ModernBertForSequenceClassification`, `DebertaV2ForSequenceClassification`, `NewForSequenceClassification`, `GteForSequenceClassification` | [`CrossEncoder`] |
/// | `Qwen3ForCausalLM` | [`Qwen3Reranker`] (the model card's instruction by default) |
/// | `Qwen3ForSequenceClassification` (Qwen3-Reranker converted to sequence classification, e.g. `tomaarsen/Qwen3-Reranker-0.6B-seq-cls`) | [`Qwen3Reranker`], its one-row `score` head in place of `W[yes] - W[no]` |
/// | `Qwen2ForCausalLM` | [`MxbaiReranker`] (mxbai-rerank-v2: the `mxbai-rerank` package's prompt; scores are its raw logits) |
/// | `Qwen2ForSequenceClassification` (mxbai-rerank-v2 converted the same way) | [`MxbaiReranker`], its `score` head in place of `W[1] - W[0]` |
/// | `T5ForConditionalGeneration`, `MT5ForConditionalGeneration` (monoT5: castorini's, unicamp-dl's mT5) | [`MonoT5Reranker`] (pygaggle's prompt; scores are `P(true)` against `false`) |
/// | a ColBERT model (PyLate's `config_sentence_transformers.json` with `model_type` `ColBERT`, or Stanford's `artifact.metadata`) | [`ColbertReranker`] (MaxSim) |
/// | a sentence-transformers embedding model (a Pooling module in `modules.json`; also a bare `BertModel`, `XLMRobertaModel`, `RobertaModel`, `CamembertModel`, `DistilBertModel`, `MPNetModel`, `ModernBertModel`, `Qwen3Model` or `T5EncoderModel`) | [`EmbeddingReranker`] over [`load_embedder`](crate::load_embedder) |
///
/// So Qwen3-Embedding, whose `config.json` also says `Qwen3ForCausalLM`, is never taken for
/// a yes/no reranker. The model gets `options` ([`ModelOptions::default`] for the model's own
/// defaults). Any other architecture is an [`Error::Model`] that names the file and the
/// supported ones.
///
/// ```no_run
/// use rerank::models::ModelOptions;
/// use rerank::rerankers::{load_reranker, RerankQuery};
///
/// let options = ModelOptions::default().threads(2);
/// let reranker = load_reranker("models/ms-marco-MiniLM-L-6-v2", &options)?;
/// let scores = reranker.score(&RerankQuery::new("what is bm25"), &["BM25 ranks", "cats"])?;
/// assert_eq!(scores.len(), 2);
/// # Ok::<(), rerank::Error>(())
/// ```
pub fn load_reranker(model: impl AsRef<Path>, options: &ModelOptions) -> Result<Box<dyn Reranker>> {
    let (dir, _) = registry::locate(model.as_ref(), Task::CrossEncoder)?;
    let model = ModelDir::open(&dir)?;
    if ColbertEncoder::is_colbert_dir(&dir) {
        return Ok(Box::new(ColbertReranker::from_dir(&dir, options)?));
    }
    if model.is_embedding_model()? {
        return embedding_reranker(&dir, options);
    }
    match model.architecture()? {
        arch if arch.is_cross_encoder() => {
            let builder = CrossEncoder::builder(&dir).options(options.clone());
            Ok(Box::new(builder.build()?))
        }
        Architecture::Qwen3ForCausalLm | Architecture::Qwen3ForSequenceClassification => {
            let builder = Qwen3Reranker::builder(&dir).options(options.clone());
            Ok(Box::new(builder.build()?))
        }
        Architecture::Qwen2ForCausalLm | Architecture::Qwen2ForSequenceClassification => {
            let builder = MxbaiReranker::builder(&dir).options(options.clone());
            Ok(Box::new(builder.build()?))
        }
        Architecture::Other(name)
            if matches!(
                name.as_str(),
                "T5ForConditionalGeneration" | "MT5ForConditionalGeneration"
            ) =>
        {
            let builder = MonoT5Reranker::builder(&dir).options(options.clone());
            Ok(Box::new(builder.build()?))
        }
        Architecture::BertModel => embedding_reranker(&dir, options),
        Architecture::Other(name)
            if matches!(
                name.as_str(),
                "XLMRobertaModel"
                    | "RobertaModel"
                    | "CamembertModel"
                    | "DistilBertModel"
                    | "MPNetModel"
                    | "ModernBertModel"
                    | "Qwen3Model"
                    | "T5EncoderModel"
            ) =>
        {
            embedding_reranker(&dir, options)
        }
        other => Err(Error::model(format!(
            "{}: unsupported architecture {other} for a reranker (supported: \
             BertForSequenceClassification, XLMRobertaForSequenceClassification, \
             RobertaForSequenceClassification, CamembertForSequenceClassification, \
             ElectraForSequenceClassification, DistilBertForSequenceClassification, \
             ModernBertForSequenceClassification, DebertaV2ForSequenceClassification, \
             NewForSequenceClassification, GteForSequenceClassification, Qwen3ForCausalLM, \
             Qwen3ForSequenceClassification (a converted Qwen3-Reranker), Qwen2ForCausalLM and \
             Qwen2ForSequenceClassification (mxbai-rerank-v2), T5ForConditionalGeneration and \
             MT5ForConditionalGeneration (monoT5), and embedding models: BertModel, \
             XLMRobertaModel, RobertaModel, CamembertModel, DistilBertModel, MPNetModel, \
             ModernBertModel, Qwen3Model, T5EncoderModel)",
            dir.join(CONFIG_FILE).display()
        ))),
    }
}

fn embedding_reranker(dir: &Path, options: &ModelOptions) -> Result<Box<dyn Reranker>> {
    let embedder: Arc<dyn Embedder> = Arc::from(crate::load_embedder(dir, options)?);
    Ok(Box::new(EmbeddingReranker::new(embedder)))
}
