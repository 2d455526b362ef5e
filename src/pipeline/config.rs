//! A serde description of a pipeline, readable from JSON, YAML or TOML.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use std::sync::Arc;

pub use super::sections::{
    read_lexicon, CacheSection, CacheStoreKind, ClassifierConfig, EmbedderConfig, FallbackConfig,
    GeneratorConfig, GroundingConfig, PiiConfig, RecallConfig, RerankerConfig, RerankerKind,
    ServeRoles, ServeSection,
};
use super::{AnswerOptions, PipelineBuilder, SearchOptions, HYBRID_MODE};
use crate::expand::{ExpansionConfig, HydeConfig};
use crate::parse::TwoPhaseMode;
use crate::recall::{Bm25Params, Fusion, KeywordOverlap, MatryoshkaIndex};
use crate::rerankers::ProtectPolicy;
use crate::{Bm25Index, Document, Embedder, Error, Hybrid, Pipeline, Result, Retriever};

/// A whole pipeline as data: every stage a section, every default documented.
///
/// Sections (all but `retriever` optional): `retriever` (stage 1, a tree of retrievers),
/// `recall` (which one a request uses), `embedder` (shared by `vector` retrievers, the cache
/// and HyDE), `reranker` (stage 2: type, model, depth, instruction policy, fallback),
/// `classifier`, `protection`, `pii`, `two_phase`, `hyde`, `expansion`, `cache`, `generator`,
/// `grounding`, `search` (depth, threshold, dedup, filters), `corpus`, `store`, `serve`
/// (read by `rerank serve` only).
/// [`PipelineConfig::from_path`] reads JSON, YAML or TOML, rejects unknown keys and files that
/// do not exist, and names the key (`reranker.modle`, `classifier.aliases`) in its error.
/// `examples/configs/` holds one configuration per system the crate was made for.
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
    /// Stage 1 (default: BM25 over the `corpus`, or over nothing: a config that only serves
    /// its reranker and embedder needs neither).
    #[serde(default)]
    pub retriever: RetrieverConfig,
    /// Which retriever a request uses (default: the whole `retriever`; see [`RecallConfig`]).
    #[serde(default)]
    pub recall: RecallConfig,
    /// The embedder shared by `vector` retrievers, the semantic cache and HyDE (default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedder: Option<EmbedderConfig>,
    /// Stage 2 (default: none, stage-1 order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reranker: Option<RerankerConfig>,
    /// The rule classifier (default: none; nothing is known to be factual, no routes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classifier: Option<ClassifierConfig>,
    /// Protected reranking of factual queries (default: up to 3 of the top 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protection: Option<ProtectPolicy>,
    /// The PII guard (default: on, every kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pii: Option<PiiConfig>,
    /// Two-phase `[SEARCH] ... [TASK] ... [INSTRUCT] ...` queries: `strict` or `lenient`
    /// (default: off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub two_phase: Option<TwoPhaseMode>,
    /// HyDE for the routes it names (default: off; needs `generator` and `embedder`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hyde: Option<HydeConfig>,
    /// Multi-query expansion (default: off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expansion: Option<ExpansionConfig>,
    /// The semantic cache (default: off; needs `embedder`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheSection>,
    /// The generator (default: none; answers use the extractive generator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator: Option<GeneratorConfig>,
    /// How answers are grounded and banded (default: see [`GroundingConfig`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grounding: Option<GroundingConfig>,
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
    /// Settings of `rerank serve` (default: none; see [`ServeSection`]). The pipeline itself
    /// does not read them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve: Option<ServeSection>,
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
    /// Dense recall from a Milvus collection (`MilvusRetriever`; needs the `milvus` and
    /// `models` features). Documents given to the build that the collection lacks are embedded
    /// and written first.
    Milvus {
        /// The REST endpoint, e.g. `http://127.0.0.1:19530`.
        url: String,
        /// The collection (created when missing, with the model's dimension).
        collection: String,
        /// The embedding model directory (BERT bi-encoder).
        model: PathBuf,
    },
    /// Late interaction ([`LateInteractionIndex`](crate::recall::LateInteractionIndex); needs
    /// the `models` feature): every document's ColBERT token vectors in memory (computed when
    /// the pipeline builds, or kept in the store), scored by exact MaxSim, or over the
    /// candidates MUVERA's encodings pick.
    LateInteraction {
        /// The ColBERT model (PyLate's, Stanford's or BAAI/bge-m3's layout).
        model: PathBuf,
        /// MUVERA candidates (`muvera: {}` for the defaults); exact MaxSim over every
        /// document when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        muvera: Option<crate::recall::MuveraConfig>,
    },
    /// Learned sparse recall ([`SparseIndex`](crate::recall::SparseIndex); needs the `models`
    /// feature): every document's SPLADE vector in an inverted index (computed when the
    /// pipeline builds, also over a store), scored by the dot product with the query's.
    Sparse {
        /// The sparse encoder (a sentence-transformers `SparseEncoder` folder).
        model: PathBuf,
    },
    /// [`KeywordOverlap`]: the share of the query's content words a document has, a raw
    /// score in `[0, 1]` (pair it with a vector retriever in a linear fusion).
    Keyword {},
    /// A [`DenseIndex`](crate::DenseIndex) over the `embedder` section's embedder; with
    /// `dims`, a [`MatryoshkaIndex`]: coarse search over the first `dims` dimensions, then the
    /// best `rescore` candidates rescored with the full vectors.
    Vector {
        /// Coarse dimensions (default: none, exact search over the full vectors).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dims: Option<usize>,
        /// Candidates rescored with the full vectors (default 100).
        #[serde(default = "default_rescore")]
        rescore: usize,
    },
    /// A [`Hybrid`] fusion of several retrievers.
    Hybrid {
        /// RRF (default, k 60), weighted, or linear (`{method: linear, alpha: 0.7}`: raw
        /// cosine of the first retriever and keyword overlap of the second).
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

fn default_rescore() -> usize {
    100
}

impl Default for RetrieverConfig {
    /// BM25 with its default parameters.
    fn default() -> Self {
        RetrieverConfig::Bm25 {
            k1: default_k1(),
            b: default_b(),
        }
    }
}

fn default_k1() -> f32 {
    Bm25Params::default().k1
}

fn default_b() -> f32 {
    Bm25Params::default().b
}

impl PipelineConfig {
    /// Parses JSON; an error names the key's path.
    pub fn from_json_str(text: &str) -> Result<Self> {
        let mut de = serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(&mut de)
            .map_err(|e| Error::parse("pipeline config (JSON)", with_path(e)))
    }

    /// Parses YAML; an error names the key's path.
    pub fn from_yaml_str(text: &str) -> Result<Self> {
        let de = serde_yaml_ng::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de)
            .map_err(|e| Error::parse("pipeline config (YAML)", with_path(e)))
    }

    /// Parses TOML; an error names the key's path.
    pub fn from_toml_str(text: &str) -> Result<Self> {
        let de = toml::Deserializer::parse(text)
            .map_err(|e| Error::parse("pipeline config (TOML)", e))?;
        serde_path_to_error::deserialize(de)
            .map_err(|e| Error::parse("pipeline config (TOML)", with_path(e)))
    }

    /// Serializes to YAML (reads back with [`PipelineConfig::from_yaml_str`]).
    pub fn to_yaml_string(&self) -> Result<String> {
        serde_yaml_ng::to_string(self).map_err(|e| Error::parse("pipeline config (to YAML)", e))
    }

    /// Reads a file, choosing the format by extension (`.json`, `.yaml`/`.yml`, `.toml`).
    ///
    /// Relative paths of input files (`corpus`, model directories, `classifier.aliases`,
    /// `classifier.lexicons`) are taken relative to the config file's directory; the files
    /// the pipeline writes (`store.path`, `cache.path`) relative to the working directory.
    /// Every input file must exist: the error names the key (`classifier.aliases: ...`). A
    /// model may also be named as the model resolver takes names
    /// (`models::registry::resolve`): a hub id such as `BAAI/bge-reranker-base`, or the name
    /// of a folder of `$RERANK_MODELS_DIR`, when nothing of that name is beside the config.
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
        let mut config = parsed.map_err(|e| match e {
            Error::Parse { source, .. } => Error::parse(path.display().to_string(), source),
            e => e,
        })?;
        let base = path.parent().unwrap_or(Path::new(""));
        config.for_each_input(&mut |key, p| {
            // A model key may name a hub id or a folder of $RERANK_MODELS_DIR rather than a
            // path: kept as written when nothing is at the path beside the config.
            let beside = base.join(&*p);
            if p.is_relative() && (beside.exists() || !names_a_model(key, p)) {
                *p = beside;
            }
            Ok(())
        })?;
        config.check_files().map_err(|e| match e {
            Error::Config(m) => Error::Config(format!("{}: {m}", path.display())),
            e => e,
        })?;
        Ok(config)
    }

    /// Checks that every input file the config names exists; the error names the key.
    pub fn check_files(&self) -> Result<()> {
        let mut copy = self.clone();
        copy.for_each_input(&mut |key, p| {
            if p.exists() || names_a_model(key, p) {
                // A model name is resolved (and its absence reported) when the model loads.
                Ok(())
            } else {
                Err(Error::Config(format!(
                    "{key}: {} does not exist",
                    p.display()
                )))
            }
        })
    }

    /// Calls `f(key path, input path)` for every input file of the config.
    fn for_each_input(
        &mut self,
        f: &mut dyn FnMut(&str, &mut PathBuf) -> Result<()>,
    ) -> Result<()> {
        if let Some(p) = &mut self.corpus {
            f("corpus", p)?;
        }
        retriever_inputs(&mut self.retriever, "retriever", f)?;
        if let Some(EmbedderConfig::Bert { model, .. }) = &mut self.embedder {
            f("embedder.model", model)?;
        }
        if let Some(RerankerConfig {
            model: Some(model), ..
        }) = &mut self.reranker
        {
            f("reranker.model", model)?;
        }
        if let Some(c) = &mut self.classifier {
            if let Some(p) = &mut c.aliases {
                f("classifier.aliases", p)?;
            }
            for (i, p) in c.lexicons.iter_mut().enumerate() {
                f(&format!("classifier.lexicons[{i}]"), p)?;
            }
        }
        if let Some(GeneratorConfig::LocalChat { model, .. }) = &mut self.generator {
            f("generator.model", model)?;
        }
        if let Some(ServeSection {
            sparse_model: Some(model),
            ..
        }) = &mut self.serve
        {
            f("serve.sparse_model", model)?;
        }
        Ok(())
    }

    /// The answer options of the `grounding` section (defaults without one). Without
    /// `grounding.relevance`, the relevance measure follows the reranker type: a logit's
    /// sigmoid for `cross_encoder` and `mxbai`, the probability for `qwen3` and `monot5`, the question's
    /// terms in the sources otherwise (`lexical`, `embedding`, `colbert`, `model` whose score
    /// scale the config does not know, or no reranker).
    pub fn answer_options(&self) -> Result<AnswerOptions> {
        let mut grounding = self.grounding.clone().unwrap_or_default();
        if grounding.relevance.is_none() {
            use crate::answer::RelevanceMeasure;
            grounding.relevance = Some(match self.reranker.as_ref().map(|r| r.kind) {
                Some(RerankerKind::CrossEncoder | RerankerKind::Mxbai) => {
                    RelevanceMeasure::RerankerSigmoid
                }
                Some(RerankerKind::Qwen3 | RerankerKind::MonoT5) => {
                    RelevanceMeasure::RerankerProbability
                }
                _ => RelevanceMeasure::QueryTerms,
            });
        }
        grounding.answer_options()
    }

    /// A builder holding every configured stage, with `docs` (plus the `corpus` file, if set)
    /// indexed; add what the config does not describe (a host retriever as a recall mode, a
    /// custom classifier) and `build()`.
    pub fn builder(&self, mut docs: Vec<Document>) -> Result<PipelineBuilder> {
        if let Some(path) = &self.corpus {
            docs.extend(Document::read_jsonl(path)?);
        }
        let embedder = self
            .embedder
            .as_ref()
            .map(EmbedderConfig::build)
            .transpose()?;
        let classifier = self
            .classifier
            .as_ref()
            .map(|c| c.build(&docs))
            .transpose()?;
        let mut modes = Vec::new();
        let retriever = match &self.store {
            Some(store) => store_recall::build(
                &store.path,
                &self.retriever,
                docs,
                embedder.clone(),
                &mut modes,
            )?,
            None => build_retriever(&self.retriever, &docs, embedder.as_ref(), &mut modes)?,
        };
        let mut options = self.search.clone();
        if let Some(r) = &self.reranker {
            options.rerank_depth = r.depth;
            options.skip_rerank_within_top_k = r.skip_within_top_k;
        }
        let mut builder = Pipeline::builder().retriever(retriever).options(options);
        for (name, r) in modes {
            builder = builder.recall_mode(name, r);
        }
        let fusion = self
            .recall
            .fusion
            .or(match &self.retriever {
                RetrieverConfig::Hybrid { fusion, .. } => Some(*fusion),
                _ => None,
            })
            .unwrap_or_default();
        builder = builder.mode_fusion(fusion, self.recall.vector_weight, self.recall.depth);
        if let Some(mode) = &self.recall.default_mode {
            builder = builder.default_mode(mode.clone());
        }
        if let Some(r) = &self.reranker {
            builder = builder.reranker(r.build()?).reranker_mode(r.mode());
            if let Some(i) = &r.instructions {
                builder = builder.instructions(i.clone());
            }
        }
        if let Some(e) = &embedder {
            builder = builder.embedder(Arc::clone(e));
        }
        if let Some(cache) = &self.cache {
            if embedder.is_none() {
                return Err(Error::Config(
                    "cache: the semantic cache needs an `embedder` section".into(),
                ));
            }
            // One store for both caches, whatever its kind: one invalidation drops both.
            let memory = crate::cache::SharedMemoryStore::default();
            builder = builder.cache(cache.build_in::<super::SearchResponse>(&memory)?);
            if cache.answers {
                builder = builder.answer_cache(cache.build_in::<super::Answer>(&memory)?);
            }
            for (tag, secs) in &cache.ttl_by_tag {
                builder = builder.cache_ttl_by_tag(tag, std::time::Duration::from_secs(*secs));
            }
            if cache.tag_acts {
                let extractor = classifier
                    .as_ref()
                    .map(|c| c.legal_extractor().clone())
                    .unwrap_or_default();
                builder = builder.cache_act_tags(extractor);
            }
        }
        if let Some(c) = classifier {
            builder = builder.classifier(c);
        }
        if let Some(p) = &self.protection {
            builder = builder.protection(p.clone());
        }
        builder = builder.pii_guard(self.pii.clone().unwrap_or_default().build());
        if let Some(mode) = self.two_phase {
            builder = builder.two_phase(mode);
        }
        if let Some(h) = &self.hyde {
            builder = builder.hyde(h.clone());
        }
        if let Some(x) = &self.expansion {
            builder = builder.expansion(x.clone());
        }
        if let Some(g) = &self.generator {
            builder = builder.generator(g.build()?);
        }
        Ok(builder)
    }

    /// Builds the pipeline over `docs` (plus the `corpus` file, if set).
    pub fn build(&self, docs: Vec<Document>) -> Result<Pipeline> {
        self.builder(docs)?.build()
    }
}

/// Whether the input at `key` is a model named the way the model resolver takes names
/// (`models::registry::resolve`: a hub id or a bare name). Without the `models` feature no
/// model loads, so every input is a path.
fn names_a_model(key: &str, p: &Path) -> bool {
    #[cfg(feature = "models")]
    return key.ends_with("model") && crate::models::registry::names_a_model(p);
    #[cfg(not(feature = "models"))]
    {
        let _ = (key, p);
        false
    }
}

/// A path-to-error as one message: `reranker: unknown field ...`.
fn with_path<E: std::fmt::Display>(e: serde_path_to_error::Error<E>) -> String {
    let path = e.path().to_string();
    if path == "." || path.is_empty() {
        e.inner().to_string()
    } else {
        format!("{path}: {}", e.inner())
    }
}

/// The input files of a retriever tree.
fn retriever_inputs(
    config: &mut RetrieverConfig,
    key: &str,
    f: &mut dyn FnMut(&str, &mut PathBuf) -> Result<()>,
) -> Result<()> {
    match config {
        RetrieverConfig::Dense { model }
        | RetrieverConfig::Milvus { model, .. }
        | RetrieverConfig::LateInteraction { model, .. }
        | RetrieverConfig::Sparse { model } => f(&format!("{key}.model"), model),
        RetrieverConfig::Hybrid { retrievers, .. } => {
            for (i, r) in retrievers.iter_mut().enumerate() {
                retriever_inputs(r, &format!("{key}.retrievers[{i}]"), f)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The recall-mode name of a leaf retriever: `bm25`, `keyword`, `hybrid`, else `vector`.
fn mode_name(config: &RetrieverConfig) -> &'static str {
    match config {
        RetrieverConfig::Bm25 { .. } => "bm25",
        RetrieverConfig::Keyword {} => "keyword",
        RetrieverConfig::LateInteraction { .. } => "late_interaction",
        RetrieverConfig::Sparse { .. } => "sparse",
        RetrieverConfig::Hybrid { .. } => HYBRID_MODE,
        _ => "vector",
    }
}

/// Named retrievers collected while building (recall modes).
type Modes = Vec<(String, Arc<dyn Retriever>)>;

fn register(modes: &mut Modes, name: &str, r: &Arc<dyn Retriever>) {
    let mut candidate = name.to_string();
    let mut n = 1;
    while modes.iter().any(|(m, _)| *m == candidate) {
        n += 1;
        candidate = format!("{name}_{n}");
    }
    modes.push((candidate, Arc::clone(r)));
}

fn build_retriever(
    config: &RetrieverConfig,
    docs: &[Document],
    embedder: Option<&Arc<dyn Embedder>>,
    modes: &mut Modes,
) -> Result<Box<dyn Retriever>> {
    build_tree(
        config,
        &|leaf| match leaf {
            RetrieverConfig::Bm25 { k1, b } => {
                let index = Bm25Index::with_params(Bm25Params { k1: *k1, b: *b })?;
                index.add(docs.iter().cloned())?;
                Ok(Box::new(index))
            }
            RetrieverConfig::Keyword {} => {
                let index = KeywordOverlap::new();
                index.add(docs.iter().cloned());
                Ok(Box::new(index))
            }
            RetrieverConfig::Vector { dims, rescore } => {
                let embedder = vector_embedder(embedder)?;
                match dims {
                    Some(d) => {
                        let index = MatryoshkaIndex::new(embedder, *d, *rescore)?;
                        index.add(docs.to_vec())?;
                        Ok(Box::new(index))
                    }
                    None => {
                        let index = crate::DenseIndex::new(embedder);
                        index.add(docs.to_vec())?;
                        Ok(Box::new(index))
                    }
                }
            }
            RetrieverConfig::Dense { model } => build_dense(model, docs),
            RetrieverConfig::LateInteraction { model, muvera } => {
                build_late_interaction(model, *muvera, docs)
            }
            RetrieverConfig::Sparse { model } => build_sparse(model, docs),
            RetrieverConfig::Milvus {
                url,
                collection,
                model,
            } => build_milvus(url, collection, model, docs),
            RetrieverConfig::Hybrid { .. } => unreachable_leaf(),
        },
        modes,
    )
}

/// A Milvus retriever holding at least `docs` (those it lacks are written, then visible).
#[cfg(all(feature = "milvus", feature = "models"))]
fn build_milvus(
    url: &str,
    collection: &str,
    model: &Path,
    docs: &[Document],
) -> Result<Box<dyn Retriever>> {
    let options = crate::models::ModelOptions::default();
    let embedder = std::sync::Arc::from(crate::load_embedder(model, &options)?);
    let milvus = crate::recall::MilvusRetriever::builder(url, collection, embedder).build()?;
    milvus.add_missing(docs, std::time::Duration::from_secs(60))?;
    Ok(Box::new(milvus))
}

#[cfg(not(all(feature = "milvus", feature = "models")))]
fn build_milvus(
    _url: &str,
    _collection: &str,
    _model: &Path,
    _docs: &[Document],
) -> Result<Box<dyn Retriever>> {
    Err(Error::Config(
        "a milvus retriever needs the `milvus` and `models` features of rerank".into(),
    ))
}

/// The ColBERT model a config names (a directory, or a name the model resolver takes).
#[cfg(feature = "models")]
fn load_colbert(model: &Path) -> Result<Arc<crate::ColbertEncoder>> {
    let dir = crate::models::registry::resolve(model, crate::models::registry::Task::Embedding)?;
    Ok(Arc::new(crate::ColbertEncoder::builder(dir).build()?))
}

/// The learned sparse model a config names (a directory, or a name the model resolver takes).
#[cfg(feature = "models")]
fn load_sparse(model: &Path) -> Result<Arc<crate::SparseEncoder>> {
    let dir = crate::models::registry::resolve(model, crate::models::registry::Task::Embedding)?;
    Ok(Arc::new(crate::SparseEncoder::builder(dir).build()?))
}

/// A late-interaction index of `model` over `docs`.
#[cfg(feature = "models")]
fn build_late_interaction(
    model: &Path,
    muvera: Option<crate::recall::MuveraConfig>,
    docs: &[Document],
) -> Result<Box<dyn Retriever>> {
    let mut index = crate::recall::LateInteractionIndex::new(load_colbert(model)?);
    if let Some(config) = muvera {
        index = index.with_muvera(config)?;
    }
    index.add(docs.to_vec())?;
    Ok(Box::new(index))
}

#[cfg(not(feature = "models"))]
fn build_late_interaction(
    _model: &Path,
    _muvera: Option<crate::recall::MuveraConfig>,
    _docs: &[Document],
) -> Result<Box<dyn Retriever>> {
    Err(Error::Config(
        "a late_interaction retriever needs the `models` feature of rerank".into(),
    ))
}

/// A learned sparse index of `model` over `docs`.
#[cfg(feature = "models")]
fn build_sparse(model: &Path, docs: &[Document]) -> Result<Box<dyn Retriever>> {
    let index = crate::recall::SparseIndex::new(load_sparse(model)?);
    index.add(docs.to_vec())?;
    Ok(Box::new(index))
}

#[cfg(not(feature = "models"))]
fn build_sparse(_model: &Path, _docs: &[Document]) -> Result<Box<dyn Retriever>> {
    Err(Error::Config(
        "a sparse retriever needs the `models` feature of rerank".into(),
    ))
}

/// The embedder a `vector` retriever uses.
fn vector_embedder(embedder: Option<&Arc<dyn Embedder>>) -> Result<Arc<dyn Embedder>> {
    embedder.cloned().ok_or_else(|| {
        Error::Config(
            "retriever: a `vector` retriever needs an `embedder` section (or use `dense` \
             with a model directory)"
                .into(),
        )
    })
}

/// Builds `config`: a hybrid is assembled here, every other retriever by `leaf`. Every
/// retriever is registered in `modes` under its mode name (see [`RecallConfig`]).
fn build_tree(
    config: &RetrieverConfig,
    leaf: &dyn Fn(&RetrieverConfig) -> Result<Box<dyn Retriever>>,
    modes: &mut Modes,
) -> Result<Box<dyn Retriever>> {
    let built: Arc<dyn Retriever> = Arc::from(build_node(config, leaf, modes)?);
    register(modes, mode_name(config), &built);
    Ok(Box::new(built))
}

fn build_node(
    config: &RetrieverConfig,
    leaf: &dyn Fn(&RetrieverConfig) -> Result<Box<dyn Retriever>>,
    modes: &mut Modes,
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
        hybrid = hybrid.with(build_tree(r, leaf, modes)?, w);
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
    let options = crate::models::ModelOptions::default();
    let embedder = crate::load_embedder(model, &options)?;
    let index = crate::DenseIndex::new(std::sync::Arc::from(embedder));
    index.add(docs.to_vec())?;
    Ok(Box::new(index))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_milvus_retriever_is_described_by_url_collection_and_model() {
        let yaml = "
retriever:
  type: hybrid
  retrievers:
    - { type: bm25 }
    - { type: milvus, url: 'http://127.0.0.1:19530', collection: notes, model: models/minilm }
";
        let config = PipelineConfig::from_yaml_str(yaml).unwrap();
        let RetrieverConfig::Hybrid { retrievers, .. } = &config.retriever else {
            panic!("{config:?}")
        };
        assert_eq!(
            retrievers[1],
            RetrieverConfig::Milvus {
                url: "http://127.0.0.1:19530".into(),
                collection: "notes".into(),
                model: "models/minilm".into(),
            }
        );
        let json = serde_json::to_string(&config).unwrap();
        assert_eq!(PipelineConfig::from_json_str(&json).unwrap(), config);
        let typo = "retriever: { type: milvus, url: u, collection: c, model: m, colection: d }";
        let e = PipelineConfig::from_yaml_str(typo).unwrap_err();
        assert!(e.to_string().contains("colection"), "{e}");
        // Building needs the model (and the features): a clear error, never a panic.
        let missing = "retriever: { type: milvus, url: 'http://127.0.0.1:9', collection: c, model: no/such/dir }";
        let config = PipelineConfig::from_yaml_str(missing).unwrap();
        assert!(config.build(Vec::new()).is_err());
    }

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

    use std::sync::Arc;

    use super::{Modes, RetrieverConfig};
    use crate::{Document, Embedder, Error, Result, Retriever};

    pub(super) fn build(
        _path: &Path,
        _config: &RetrieverConfig,
        _docs: Vec<Document>,
        _embedder: Option<Arc<dyn Embedder>>,
        _modes: &mut Modes,
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

    use super::{Modes, RetrieverConfig};
    use crate::recall::Bm25Params;
    use crate::store::Store;
    use crate::{Document, Embedder, Error, Result, Retriever};

    /// Upserts `docs` into the store at `path`, fills in the vectors every dense retriever of
    /// `config` needs, and builds the recall `config` describes over the store.
    pub(super) fn build(
        path: &Path,
        config: &RetrieverConfig,
        docs: Vec<Document>,
        embedder: Option<Arc<dyn Embedder>>,
        modes: &mut Modes,
    ) -> Result<Box<dyn Retriever>> {
        let store = Arc::new(Store::open(path)?);
        store.upsert(docs)?;
        over(&store, config, embedder, modes)
    }

    fn over(
        store: &Arc<Store>,
        config: &RetrieverConfig,
        embedder: Option<Arc<dyn Embedder>>,
        modes: &mut Modes,
    ) -> Result<Box<dyn Retriever>> {
        let leaf = |leaf: &RetrieverConfig| -> Result<Box<dyn Retriever>> {
            match leaf {
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
            // Token and sparse vectors are stored (the missing ones computed now).
            RetrieverConfig::LateInteraction { model, muvera } => {
                late_interaction(store, model, *muvera)
            }
            RetrieverConfig::Sparse { model } => sparse(store, model),
            // The vectors live in Milvus; the store keeps the documents.
            RetrieverConfig::Milvus {
                url,
                collection,
                model,
            } => super::build_milvus(url, collection, model, &store.documents()?),
            RetrieverConfig::Vector { dims: None, .. } => {
                let embedder = super::vector_embedder(embedder.as_ref())?;
                store.embed_missing(&*embedder)?;
                Ok(Box::new(store.dense(embedder)?))
            }
            RetrieverConfig::Keyword {} | RetrieverConfig::Vector { .. } => Err(Error::Config(
                "retriever: `keyword` and Matryoshka `vector` retrievers are in memory; remove \
                 the `store` section or use `bm25` / `vector` without dims"
                    .into(),
            )),
            RetrieverConfig::Hybrid { .. } => super::unreachable_leaf(),
        }
        };
        super::build_tree(config, &leaf, modes)
    }

    #[cfg(feature = "models")]
    fn dense(store: &Arc<Store>, model: &Path) -> Result<Box<dyn Retriever>> {
        let options = crate::models::ModelOptions::default();
        let embedder: Arc<dyn crate::Embedder> = Arc::from(crate::load_embedder(model, &options)?);
        store.embed_missing(&*embedder)?;
        Ok(Box::new(store.dense(embedder)?))
    }

    #[cfg(not(feature = "models"))]
    fn dense(_store: &Arc<Store>, _model: &Path) -> Result<Box<dyn Retriever>> {
        Err(Error::Config(
            "a dense retriever needs the `models` feature of rerank".into(),
        ))
    }

    /// Late interaction over the token vectors `model` stored, the missing ones computed.
    #[cfg(feature = "models")]
    fn late_interaction(
        store: &Arc<Store>,
        model: &Path,
        muvera: Option<crate::recall::MuveraConfig>,
    ) -> Result<Box<dyn Retriever>> {
        let encoder = super::load_colbert(model)?;
        store.encode_missing_tokens(&encoder)?;
        let mut retriever = store.late_interaction(encoder)?;
        if let Some(config) = muvera {
            retriever = retriever.with_muvera(config)?;
        }
        Ok(Box::new(retriever))
    }

    /// Sparse recall over the vectors `model` stored, the missing ones computed.
    #[cfg(feature = "models")]
    fn sparse(store: &Arc<Store>, model: &Path) -> Result<Box<dyn Retriever>> {
        let encoder = super::load_sparse(model)?;
        store.encode_missing_sparse(&encoder)?;
        Ok(Box::new(store.sparse(encoder)?))
    }

    #[cfg(not(feature = "models"))]
    fn late_interaction(
        store: &Arc<Store>,
        model: &Path,
        muvera: Option<crate::recall::MuveraConfig>,
    ) -> Result<Box<dyn Retriever>> {
        super::build_late_interaction(model, muvera, &store.documents()?)
    }

    #[cfg(not(feature = "models"))]
    fn sparse(store: &Arc<Store>, model: &Path) -> Result<Box<dyn Retriever>> {
        super::build_sparse(model, &store.documents()?)
    }
}
