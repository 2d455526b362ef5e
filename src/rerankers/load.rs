//! [`load_reranker`]: the reranker a local model directory holds, chosen by its `config.json`.

use std::path::Path;
use std::sync::Arc;

use super::{CrossEncoder, EmbeddingReranker, Qwen3Reranker};
use crate::embed::BertEmbedder;
use crate::models::{Architecture, ModelDir, ModelOptions, CONFIG_FILE};
use crate::{Error, Reranker, Result};

/// Loads the reranker in `dir`, chosen by `architectures` in its `config.json`:
///
/// | architecture | reranker |
/// |---|---|
/// | `BertForSequenceClassification`, `XLMRobertaForSequenceClassification` | [`CrossEncoder`] |
/// | `Qwen3ForCausalLM` | [`Qwen3Reranker`] (the model card's instruction by default) |
/// | `BertModel` (a sentence-transformers bi-encoder) | [`EmbeddingReranker`] over a [`BertEmbedder`] |
///
/// The model gets `options` ([`ModelOptions::default`] for the model's own defaults). Any
/// other architecture is an [`Error::Model`] that names
/// the file and the supported ones.
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
pub fn load_reranker(dir: impl AsRef<Path>, options: &ModelOptions) -> Result<Box<dyn Reranker>> {
    let dir = dir.as_ref();
    let model = ModelDir::open(dir)?;
    match model.architecture()? {
        Architecture::BertForSequenceClassification
        | Architecture::XlmRobertaForSequenceClassification => {
            let builder = CrossEncoder::builder(dir).options(options.clone());
            Ok(Box::new(builder.build()?))
        }
        Architecture::Qwen3ForCausalLm => {
            let builder = Qwen3Reranker::builder(dir).options(options.clone());
            Ok(Box::new(builder.build()?))
        }
        Architecture::BertModel => {
            let builder = BertEmbedder::builder(dir).options(options.clone());
            Ok(Box::new(EmbeddingReranker::new(Arc::new(builder.build()?))))
        }
        other => Err(Error::model(format!(
            "{}: unsupported architecture {other} for a reranker (supported: \
             BertForSequenceClassification, XLMRobertaForSequenceClassification, \
             Qwen3ForCausalLM, BertModel)",
            dir.join(CONFIG_FILE).display()
        ))),
    }
}
