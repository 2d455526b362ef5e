//! A serde description of a pipeline, readable from JSON, YAML or TOML.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{PipelineBuilder, SearchOptions};
use crate::recall::{Bm25Params, Fusion};
use crate::{Bm25Index, Document, Error, Hybrid, Pipeline, Result, Retriever};

/// A whole pipeline as data.
///
/// ```
/// use rerank::pipeline::PipelineConfig;
/// use rerank::Document;
/// let yaml = "
/// retriever: { type: bm25, k1: 1.2, b: 0.75 }
/// search: { top_k: 3, dedup: none }
/// ";
/// let config = PipelineConfig::from_yaml_str(yaml)?;
/// let pipeline = config.build(vec![Document::new("1", "hello world")])?;
/// assert_eq!(pipeline.search("hello")?.hits.len(), 1);
/// # Ok::<(), rerank::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    /// Stage 1.
    pub retriever: RetrieverConfig,
    /// Stage 2 (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reranker: Option<RerankerConfig>,
    /// Depth, threshold, dedup, filters.
    #[serde(default)]
    pub search: SearchOptions,
    /// A JSONL corpus to index when building (see [`Document`] for the line format).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corpus: Option<PathBuf>,
    /// Keep the corpus in an SQLite store (feature `sqlite`): documents given to
    /// [`PipelineConfig::build`] (and the `corpus` file) are upserted into it, vectors are
    /// computed only for content the store has none for, and recall reads the file. BM25 over
    /// a store uses k1 0.9 and b 0.4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<StoreConfig>,
}

/// Where the pipeline's store lives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// The SQLite file (created if missing).
    pub path: PathBuf,
}

/// A stage-1 retriever as data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum RetrieverConfig {
    /// [`Bm25Index`] with the English analyzer.
    Bm25 {
        /// k1 (default 0.9).
        #[serde(default = "default_k1")]
        k1: f32,
        /// b (default 0.4).
        #[serde(default = "default_b")]
        b: f32,
    },
    /// A [`DenseIndex`](crate::DenseIndex) fed by a BERT embedder loaded from a local directory
    /// (needs the `models` feature).
    Dense {
        /// The embedding model directory.
        model: PathBuf,
    },
    /// A [`Hybrid`] fusion of several retrievers.
    Hybrid {
        /// RRF (default, k 60) or weighted.
        #[serde(default)]
        fusion: Fusion,
        /// The retrievers.
        retrievers: Vec<RetrieverConfig>,
        /// One weight per retriever (default: all 1).
        #[serde(default)]
        weights: Vec<f32>,
        /// Hits fetched from each retriever before fusing (default: as many as asked).
        #[serde(default)]
        depth: Option<usize>,
    },
}

fn default_k1() -> f32 {
    Bm25Params::default().k1
}

fn default_b() -> f32 {
    Bm25Params::default().b
}

/// A stage-2 reranker as data (model-backed rerankers need the `models` feature).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum RerankerConfig {
    /// A candle cross-encoder from a local directory.
    CrossEncoder {
        /// The model directory.
        model: PathBuf,
    },
    /// A Qwen3-Reranker from a local directory.
    Qwen3 {
        /// The model directory.
        model: PathBuf,
    },
    /// Cosine between BERT embeddings from a local directory.
    Embedding {
        /// The model directory.
        model: PathBuf,
    },
}

impl PipelineConfig {
    /// Parses JSON.
    pub fn from_json_str(text: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|e| Error::parse("pipeline config (JSON)", e))
    }

    /// Parses YAML.
    pub fn from_yaml_str(text: &str) -> Result<Self> {
        serde_yaml_ng::from_str(text).map_err(|e| Error::parse("pipeline config (YAML)", e))
    }

    /// Parses TOML.
    pub fn from_toml_str(text: &str) -> Result<Self> {
        toml::from_str(text).map_err(|e| Error::parse("pipeline config (TOML)", e))
    }

    /// Reads a file, choosing the format by extension (`.json`, `.yaml`/`.yml`, `.toml`).
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        let parsed = match ext.to_ascii_lowercase().as_str() {
            "json" => Self::from_json_str(&text),
            "yaml" | "yml" => Self::from_yaml_str(&text),
            "toml" => Self::from_toml_str(&text),
            other => {
                return Err(Error::Config(format!(
                    "{}: unknown config extension {other:?}; use .json, .yaml, .yml or .toml",
                    path.display()
                )))
            }
        };
        parsed.map_err(|e| match e {
            Error::Parse { source, .. } => Error::parse(path.display().to_string(), source),
            e => e,
        })
    }

    /// A builder holding the configured stages, with `docs` (plus the `corpus` file, if set)
    /// indexed; add what the config does not describe (classifier, generator) and `build()`.
    pub fn builder(&self, mut docs: Vec<Document>) -> Result<PipelineBuilder> {
        if let Some(path) = &self.corpus {
            docs.extend(Document::read_jsonl(path)?);
        }
        let retriever = match &self.store {
            Some(store) => store_recall::build(&store.path, &self.retriever, docs)?,
            None => build_retriever(&self.retriever, &docs)?,
        };
        let mut builder = Pipeline::builder()
            .retriever(retriever)
            .options(self.search.clone());
        if let Some(r) = &self.reranker {
            builder = builder.reranker(build_reranker(r)?);
        }
        Ok(builder)
    }

    /// Builds the pipeline over `docs` (plus the `corpus` file, if set).
    pub fn build(&self, docs: Vec<Document>) -> Result<Pipeline> {
        self.builder(docs)?.build()
    }
}

fn build_retriever(config: &RetrieverConfig, docs: &[Document]) -> Result<Box<dyn Retriever>> {
    build_tree(config, &|leaf| match leaf {
        RetrieverConfig::Bm25 { k1, b } => {
            let index = Bm25Index::with_params(Bm25Params { k1: *k1, b: *b })?;
            index.add(docs.iter().cloned())?;
            Ok(Box::new(index))
        }
        RetrieverConfig::Dense { model } => build_dense(model, docs),
        RetrieverConfig::Hybrid { .. } => unreachable_leaf(),
    })
}

/// Builds `config`: a hybrid is assembled here, every other retriever by `leaf`.
fn build_tree(
    config: &RetrieverConfig,
    leaf: &dyn Fn(&RetrieverConfig) -> Result<Box<dyn Retriever>>,
) -> Result<Box<dyn Retriever>> {
    let RetrieverConfig::Hybrid {
        fusion,
        retrievers,
        weights,
        depth,
    } = config
    else {
        return leaf(config);
    };
    check_weights(weights, retrievers)?;
    let mut hybrid = Hybrid::new(*fusion);
    for (i, r) in retrievers.iter().enumerate() {
        let w = weights.get(i).copied().unwrap_or(1.0);
        hybrid = hybrid.with(build_tree(r, leaf)?, w);
    }
    if let Some(d) = depth {
        hybrid = hybrid.depth(*d);
    }
    hybrid.validate()?;
    Ok(Box::new(hybrid))
}

/// `build_tree` never hands a hybrid to a leaf builder.
fn unreachable_leaf() -> Result<Box<dyn Retriever>> {
    Err(Error::Config("a hybrid is not a leaf retriever".into()))
}

/// A hybrid's weights: none (all 1) or one per retriever.
fn check_weights(weights: &[f32], retrievers: &[RetrieverConfig]) -> Result<()> {
    if !weights.is_empty() && weights.len() != retrievers.len() {
        return Err(Error::Config(format!(
            "hybrid: {} weights for {} retrievers",
            weights.len(),
            retrievers.len()
        )));
    }
    Ok(())
}

#[cfg(not(feature = "models"))]
fn build_dense(_model: &Path, _docs: &[Document]) -> Result<Box<dyn Retriever>> {
    Err(Error::Config(
        "a dense retriever needs the `models` feature of rerank".into(),
    ))
}

#[cfg(feature = "models")]
fn build_dense(model: &Path, docs: &[Document]) -> Result<Box<dyn Retriever>> {
    let embedder = crate::embed::BertEmbedder::from_dir(model)?;
    let index = crate::DenseIndex::new(std::sync::Arc::new(embedder));
    index.add(docs.to_vec())?;
    Ok(Box::new(index))
}

fn build_reranker(config: &RerankerConfig) -> Result<Box<dyn crate::Reranker>> {
    match config {
        #[cfg(feature = "models")]
        RerankerConfig::CrossEncoder { model } => {
            Ok(Box::new(crate::rerankers::CrossEncoder::from_dir(model)?))
        }
        #[cfg(feature = "models")]
        RerankerConfig::Qwen3 { model } => {
            Ok(Box::new(crate::rerankers::Qwen3Reranker::from_dir(model)?))
        }
        #[cfg(feature = "models")]
        RerankerConfig::Embedding { model } => {
            let embedder = crate::embed::BertEmbedder::from_dir(model)?;
            Ok(Box::new(crate::rerankers::EmbeddingReranker::new(
                std::sync::Arc::new(embedder),
            )))
        }
        #[cfg(not(feature = "models"))]
        _ => Err(Error::Config(
            "this reranker is not available in this build (model-backed rerankers need the \
             `models` feature of rerank)"
                .into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_formats_give_the_same_config() {
        let json = r#"{"retriever": {"type": "hybrid", "fusion": {"method": "weighted"},
            "retrievers": [{"type": "bm25"}, {"type": "bm25", "k1": 1.2, "b": 0.75}],
            "weights": [0.3, 0.7]},
            "search": {"top_k": 5, "candidate_multiplier": 4, "max_candidates": 40,
                       "score_threshold": 0.1, "dedup": "metadata:path",
                       "filters": [{"op": "prefix", "field": "source", "prefix": "docs/"}]}}"#;
        let yaml = r#"
retriever:
  type: hybrid
  fusion: { method: weighted }
  retrievers: [ { type: bm25 }, { type: bm25, k1: 1.2, b: 0.75 } ]
  weights: [0.3, 0.7]
search:
  top_k: 5
  candidate_multiplier: 4
  max_candidates: 40
  score_threshold: 0.1
  dedup: "metadata:path"
  filters: [ { op: prefix, field: source, prefix: "docs/" } ]
"#;
        let toml = r#"
[retriever]
type = "hybrid"
fusion = { method = "weighted" }
retrievers = [ { type = "bm25" }, { type = "bm25", k1 = 1.2, b = 0.75 } ]
weights = [0.3, 0.7]
[search]
top_k = 5
candidate_multiplier = 4
max_candidates = 40
score_threshold = 0.1
dedup = "metadata:path"
filters = [ { op = "prefix", field = "source", prefix = "docs/" } ]
"#;
        let a = PipelineConfig::from_json_str(json).unwrap();
        let b = PipelineConfig::from_yaml_str(yaml).unwrap();
        let c = PipelineConfig::from_toml_str(toml).unwrap();
        assert_eq!(a, b);
        assert_eq!(a, c);
        assert_eq!(a.search.top_k, 5);
        assert_eq!(
            a.search.dedup,
            super::super::DedupKey::Metadata("path".into())
        );
        let p = a
            .build(vec![Document::new("1", "hello").with_source("docs/a.md")])
            .unwrap();
        assert_eq!(p.options().candidates_for(5), 20);
        assert_eq!(p.search("hello").unwrap().hits.len(), 1);
    }

    #[test]
    fn errors_name_the_problem() {
        let e = PipelineConfig::from_yaml_str("retriever: { type: nope }").unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
        let e = PipelineConfig::from_json_str(r#"{"retriever": {"type": "bm25", "k1": -1}}"#)
            .unwrap()
            .build(vec![])
            .unwrap_err();
        assert!(e.to_string().contains("k1"), "{e}");
        let e = PipelineConfig::from_json_str(
            r#"{"retriever": {"type": "hybrid", "retrievers": [{"type": "bm25"}], "weights": [1, 2]}}"#,
        )
        .unwrap()
        .build(vec![])
        .unwrap_err();
        assert!(e.to_string().contains("weights"), "{e}");
        let e = PipelineConfig::from_json_str(
            r#"{"retriever": {"type": "bm25"}, "search": {"top_k": 0}}"#,
        )
        .unwrap()
        .build(vec![])
        .unwrap_err();
        assert!(matches!(e, Error::Config(_)));
        assert!(PipelineConfig::from_path("/nonexistent/x.yaml").is_err());
    }
}

#[cfg(not(feature = "sqlite"))]
mod store_recall {
    use std::path::Path;

    use super::RetrieverConfig;
    use crate::{Document, Error, Result, Retriever};

    pub(super) fn build(
        _path: &Path,
        _config: &RetrieverConfig,
        _docs: Vec<Document>,
    ) -> Result<Box<dyn Retriever>> {
        Err(Error::Config(
            "a `store` section needs the `sqlite` feature of rerank".into(),
        ))
    }
}

#[cfg(feature = "sqlite")]
mod store_recall {
    use std::path::Path;
    use std::sync::Arc;

    use super::RetrieverConfig;
    use crate::recall::Bm25Params;
    use crate::store::Store;
    use crate::{Document, Error, Result, Retriever};

    /// Upserts `docs` into the store at `path`, fills in the vectors every dense retriever of
    /// `config` needs, and builds the recall `config` describes over the store.
    pub(super) fn build(
        path: &Path,
        config: &RetrieverConfig,
        docs: Vec<Document>,
    ) -> Result<Box<dyn Retriever>> {
        let store = Arc::new(Store::open(path)?);
        store.upsert(docs)?;
        over(&store, config)
    }

    fn over(store: &Arc<Store>, config: &RetrieverConfig) -> Result<Box<dyn Retriever>> {
        super::build_tree(config, &|leaf| match leaf {
            RetrieverConfig::Bm25 { k1, b } => {
                let default = Bm25Params::default();
                if *k1 != default.k1 || *b != default.b {
                    return Err(Error::Config(format!(
                        "BM25 over a store uses k1 {} and b {}; remove k1 and b from the \
                         retriever",
                        default.k1, default.b
                    )));
                }
                Ok(Box::new(store.bm25()))
            }
            RetrieverConfig::Dense { model } => dense(store, model),
            RetrieverConfig::Hybrid { .. } => super::unreachable_leaf(),
        })
    }

    #[cfg(feature = "models")]
    fn dense(store: &Arc<Store>, model: &Path) -> Result<Box<dyn Retriever>> {
        let embedder: Arc<dyn crate::Embedder> = Arc::new(crate::BertEmbedder::from_dir(model)?);
        store.embed_missing(&*embedder)?;
        Ok(Box::new(store.dense(embedder)?))
    }

    #[cfg(not(feature = "models"))]
    fn dense(_store: &Arc<Store>, _model: &Path) -> Result<Box<dyn Retriever>> {
        Err(Error::Config(
            "a dense retriever needs the `models` feature of rerank".into(),
        ))
    }
}
