//! The sections of a [`PipelineConfig`](super::PipelineConfig) beyond recall: embedder,
//! reranker, classifier, guard, cache, generator, grounding; each with its documented
//! defaults and what it builds.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::AnswerOptions;
use crate::answer::{GroundingChecker, PromptBuilder};
use crate::cache::{CacheConfig, SemanticCache, SharedMemoryStore};
use crate::classify::{read_aliases, RuleClassifier, RuleConfig};
use crate::guard::{PiiGuard, PiiKind};
use crate::recall::Fusion;
use crate::rerankers::qwen3::Instructions;
use crate::{Document, Embedder, Error, Generator, Precision, Reranker, Result};

/// The `recall` section: which retriever a request uses (the retrievers themselves are the
/// `retriever` section).
///
/// Every leaf of the `retriever` tree is a recall mode a request can pick by name:
/// `bm25`, `vector` (dense and vector retrievers), `keyword`; a second leaf of the same kind is
/// `bm25_2`, and so on; a hybrid at the top is `hybrid`. With a `vector` and a `bm25` (or
/// `keyword`) leaf, a request may also set a fusion weight: the two are fused for that request
/// with `fusion`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecallConfig {
    /// The mode of requests that name none (default: the whole `retriever`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_mode: Option<String>,
    /// The fusion of a per-request hybrid (default: that of the top-level hybrid, else RRF
    /// with k 60).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fusion: Option<Fusion>,
    /// The vector side's weight of a per-request hybrid when the request sets none
    /// (default 0.5).
    pub vector_weight: f32,
    /// Hits fetched from each side of a per-request hybrid (default: as many as asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depth: Option<usize>,
}

impl Default for RecallConfig {
    fn default() -> Self {
        RecallConfig {
            default_mode: None,
            fusion: None,
            vector_weight: 0.5,
            depth: None,
        }
    }
}

/// The `embedder` section: the one embedder that `vector` retrievers, the semantic cache and
/// HyDE share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum EmbedderConfig {
    /// An embedding model (feature `models`), loaded by [`load_embedder`](crate::load_embedder):
    /// BERT, XLM-RoBERTa or Qwen3-Embedding. `type: bert` or `type: model`.
    #[serde(alias = "model")]
    Bert {
        /// The model directory, or a hub id (downloaded with the `hf-hub` feature).
        model: PathBuf,
        /// Keep only the first N dimensions, re-normalized (a Matryoshka model; default: all).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dims: Option<usize>,
        /// The number format of the model's linear layers: `f32` (default), or `int8` where
        /// the model's builder takes it ([`Precision`]; refused at load otherwise).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        precision: Option<Precision>,
        /// The task adapter queries run through, for a model that has them
        /// (jina-embeddings-v3: `retrieval.query` by default;
        /// [`EmbedderBuilder::task`](crate::embed::EmbedderBuilder::task)); refused at load
        /// for a model without.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        query_task: Option<String>,
        /// The task adapter documents run through (jina-embeddings-v3: `retrieval.passage` by
        /// default).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        document_task: Option<String>,
    },
    /// An OpenAI-compatible `/embeddings` API (feature `http`): `OpenAiEmbedder`.
    Openai {
        /// The API root, e.g. `http://127.0.0.1:8080/v1`.
        url: String,
        /// The model name sent with each request.
        model: String,
        /// The environment variable holding the API key (default `OPENAI_API_KEY`; none set
        /// means no `Authorization` header).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api_key_env: Option<String>,
        /// Vector width asked of the server (the API's `dimensions`; Matryoshka models).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dimensions: Option<usize>,
        /// The model's vector width (default: asked of the server with one probe at load).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dim: Option<usize>,
        /// Put before every query (e.g. `"query: "`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        query_prompt: Option<String>,
        /// Put before every document (e.g. `"passage: "`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        document_prompt: Option<String>,
        /// Texts per request (default 64).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        batch_size: Option<usize>,
    },
    /// The model-free [`HashingEmbedder`](crate::embed::HashingEmbedder).
    Hashing {
        /// Buckets (default 512).
        #[serde(default = "default_hashing_dim")]
        dim: usize,
        /// Keep only the first N dimensions, re-normalized (default: all).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dims: Option<usize>,
    },
}

fn default_hashing_dim() -> usize {
    512
}

impl EmbedderConfig {
    pub(super) fn build(&self) -> Result<Arc<dyn Embedder>> {
        let (full, dims): (Arc<dyn Embedder>, Option<usize>) = match self {
            EmbedderConfig::Hashing { dim, dims } => {
                (Arc::new(crate::embed::HashingEmbedder::new(*dim)?), *dims)
            }
            EmbedderConfig::Bert {
                model,
                dims,
                precision,
                query_task,
                document_task,
            } => {
                let tasks: Vec<(crate::Role, &str)> = [
                    (crate::Role::Query, query_task),
                    (crate::Role::Document, document_task),
                ]
                .into_iter()
                .filter_map(|(role, t)| t.as_deref().map(|t| (role, t)))
                .collect();
                (
                    embedder(model, precision.unwrap_or_default(), &tasks)?,
                    *dims,
                )
            }
            EmbedderConfig::Openai { .. } => (self.openai()?, None),
        };
        Ok(match dims {
            Some(d) => Arc::new(crate::embed::Matryoshka::new(full, d)?),
            None => full,
        })
    }
}

impl EmbedderConfig {
    #[cfg(feature = "http")]
    fn openai(&self) -> Result<Arc<dyn Embedder>> {
        let EmbedderConfig::Openai {
            url,
            model,
            api_key_env,
            dimensions,
            dim,
            query_prompt,
            document_prompt,
            batch_size,
        } = self
        else {
            return Err(Error::Config("embedder: not an openai section".into()));
        };
        let mut b = crate::embed::OpenAiEmbedder::builder()
            .base_url(url)
            .model(model);
        if let Some(env) = api_key_env {
            b = b.api_key_env(env);
        }
        if let Some(n) = dimensions {
            b = b.dimensions(*n);
        }
        if let Some(n) = dim {
            b = b.dim(*n);
        }
        if let Some(p) = query_prompt {
            b = b.query_prompt(p);
        }
        if let Some(p) = document_prompt {
            b = b.document_prompt(p);
        }
        if let Some(n) = batch_size {
            b = b.batch_size(*n);
        }
        Ok(Arc::new(b.build()?))
    }

    #[cfg(not(feature = "http"))]
    fn openai(&self) -> Result<Arc<dyn Embedder>> {
        Err(Error::Config(
            "embedder: `type: openai` needs the `http` feature of rerank".into(),
        ))
    }
}

#[cfg(feature = "models")]
fn embedder(
    model: &Path,
    precision: Precision,
    tasks: &[(crate::Role, &str)],
) -> Result<Arc<dyn Embedder>> {
    let options = crate::models::ModelOptions::default().precision(precision);
    Ok(Arc::from(crate::load_embedder_with_tasks(
        model, &options, tasks,
    )?))
}

#[cfg(not(feature = "models"))]
fn embedder(
    _model: &Path,
    _precision: Precision,
    _tasks: &[(crate::Role, &str)],
) -> Result<Arc<dyn Embedder>> {
    Err(Error::Config(
        "embedder: a BERT embedder needs the `models` feature of rerank".into(),
    ))
}

/// The `serve` section: settings of `rerank serve` that belong with the models it serves (the
/// library itself reads none of them; the server's limits are its flags).
///
/// ```yaml
/// serve:
///   sparse_model: models/splade-v3   # answers TEI's /embed_sparse (flag: --sparse-model)
///   default_role: { embeddings: document, embed: query, embed_sparse: query }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServeSection {
    /// The learned sparse encoder (a sentence-transformers `SparseEncoder` folder) that
    /// answers text-embeddings-inference's `POST /embed_sparse` (default: none; the route then
    /// answers 501).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sparse_model: Option<PathBuf>,
    /// The role texts are embedded as on each embedding route when a request names none.
    #[serde(skip_serializing_if = "ServeRoles::is_empty")]
    pub default_role: ServeRoles,
}

/// `serve.default_role`: per route, `query` or `document` (default: `document` everywhere,
/// as the APIs default).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServeRoles {
    /// OpenAI's `POST /v1/embeddings` (a request's `input_type` overrides it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embeddings: Option<crate::Role>,
    /// text-embeddings-inference's `POST /embed` (a request's `prompt_name` overrides it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embed: Option<crate::Role>,
    /// text-embeddings-inference's `POST /embed_sparse` (a request's `prompt_name` overrides
    /// it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embed_sparse: Option<crate::Role>,
}

impl ServeRoles {
    /// Whether no route has a role set.
    pub fn is_empty(&self) -> bool {
        self == &ServeRoles::default()
    }
}

/// Which reranker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RerankerKind {
    /// A cross-encoder (needs `model`, feature `models`).
    CrossEncoder,
    /// A Qwen3-Reranker (needs `model`, feature `models`); instruction-aware.
    Qwen3,
    /// mxbai-rerank-v2 (Qwen2 with its own prompt and score; needs `model`, feature `models`);
    /// `instructions.default` becomes its instruction.
    Mxbai,
    /// monoT5 (a T5 encoder-decoder answering "true" / "false"; needs `model`, feature
    /// `models`): [`MonoT5Reranker`](crate::rerankers::MonoT5Reranker), scores `P(true)`.
    #[serde(rename = "monot5")]
    MonoT5,
    /// Whatever `model` is, read as [`load_reranker`](crate::rerankers::load_reranker) reads
    /// it (a directory or a hub id; feature `models`): a cross-encoder of any supported
    /// architecture, Qwen3, mxbai-v2, monoT5, a ColBERT model (MaxSim), or an embedding model scoring
    /// by cosine.
    Model,
    /// Cosine between BERT embeddings (needs `model`, feature `models`).
    Embedding,
    /// Late interaction: MaxSim of a ColBERT model's token vectors
    /// ([`ColbertReranker`](crate::rerankers::ColbertReranker); needs `model`, feature
    /// `models`). `model` also takes a ColBERT folder.
    Colbert,
    /// The model-free [`LexicalReranker`](crate::rerankers::LexicalReranker).
    Lexical,
}

/// The `reranker` section (stage 2).
///
/// ```yaml
/// reranker:
///   type: qwen3                   # cross_encoder | qwen3 | mxbai | monot5 | model | embedding | colbert | lexical
///   model: models/qwen3-reranker  # every type but lexical
///   depth: 30                     # rerank the first 30 candidates (default: all)
///   fallback: { budget_ms: 800 }  # lexical scores when the model fails or is late
///   # or: fallback: { embedding_model: models/all-MiniLM-L6-v2 }  (embedding cosine)
///   instructions: { entity_field: entity_type, tasks: { design: "..." } }
///   passages: { aggregate: max }  # long documents scored by windows, the best kept
///   precision: int8               # f32 (default) | int8 | bf16, where the model takes it
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RerankerConfig {
    /// The reranker type.
    #[serde(rename = "type")]
    pub kind: RerankerKind,
    /// The model directory (every type but `lexical`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<PathBuf>,
    /// Rerank only the first N candidates; the rest keep stage-1 order after them (default:
    /// every candidate). A request can override it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<usize>,
    /// Skip stage 2 when stage 1 returns no more candidates than `top_k` (default: false, the
    /// reranker orders every candidate list). The response's `stage2_skipped` says when it did.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skip_within_top_k: bool,
    /// The instruction policy (default: none; only request and `[INSTRUCT]` instructions are
    /// passed on). See [`Instructions`]: `default`, `tasks`, `entities`, `by_task`,
    /// `entity_field`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<Instructions>,
    /// Graceful degradation: the lexical reranker scores when the model fails, or takes
    /// longer than the budget (default: none; a failure keeps stage-1 order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<FallbackConfig>,
    /// Score documents longer than the model's window by overlapping passages and keep the
    /// best (cross_encoder, qwen3, mxbai, monot5 and model; default: off, long documents are truncated). Each hit's
    /// `passage` then says which part of the document won. See
    /// [`Passages`](crate::rerankers::Passages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passages: Option<crate::rerankers::Passages>,
    /// The number format of the model's linear layers: `f32` (default), or `int8` / `bf16`
    /// where the model's builder takes it ([`Precision`]; a builder refuses one it cannot
    /// run, at load). Every type but `lexical`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<Precision>,
}

/// The `reranker.fallback` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FallbackConfig {
    /// The most milliseconds the model may take before the fallback scores (default: no
    /// budget, only failures fall back).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_ms: Option<u64>,
    /// The fallback scores by embedding cosine with this embedding model (a directory or a
    /// hub id, as `load_embedder` takes; feature `models`) instead of by lexical overlap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedding_model: Option<PathBuf>,
}

impl RerankerConfig {
    /// A reranker of this type from `model`, without depth, instructions or fallback.
    pub fn new(kind: RerankerKind, model: Option<PathBuf>) -> Self {
        RerankerConfig {
            kind,
            model,
            depth: None,
            skip_within_top_k: false,
            instructions: None,
            fallback: None,
            passages: None,
            precision: None,
        }
    }

    /// The reranker mode in words, as the pipeline logs it when built: the type, its model,
    /// and what scores when it fails or is late ("qwen3 (models/qwen3), fallback: lexical
    /// overlap after 800 ms").
    ///
    /// ```
    /// use rerank::pipeline::{RerankerConfig, RerankerKind};
    /// assert_eq!(RerankerConfig::new(RerankerKind::Lexical, None).mode(), "lexical, no fallback");
    /// ```
    pub fn mode(&self) -> String {
        let kind = serde_json::to_value(self.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| format!("{:?}", self.kind));
        let mut out = match &self.model {
            Some(m) => format!("{kind} ({})", m.display()),
            None => kind,
        };
        match &self.fallback {
            None => out.push_str(", no fallback"),
            Some(f) => {
                match &f.embedding_model {
                    Some(m) => {
                        out.push_str(&format!(", fallback: embedding cosine ({})", m.display()))
                    }
                    None => out.push_str(", fallback: lexical overlap"),
                }
                match f.budget_ms {
                    Some(ms) => out.push_str(&format!(" on failure or after {ms} ms")),
                    None => out.push_str(" on failure"),
                }
            }
        }
        out
    }

    pub(super) fn build(&self) -> Result<Box<dyn Reranker>> {
        let primary = self.build_primary()?;
        let Some(fallback) = &self.fallback else {
            return Ok(primary);
        };
        let mut builder = crate::rerankers::FallbackReranker::builder(primary);
        builder = match &fallback.embedding_model {
            None => builder.fallback(crate::rerankers::LexicalReranker),
            Some(model) => {
                let embedder = embedder(model, Precision::F32, &[])?;
                builder.fallback(crate::rerankers::EmbeddingReranker::new(embedder))
            }
        };
        if let Some(ms) = fallback.budget_ms {
            builder = builder.budget(Duration::from_millis(ms));
        }
        Ok(Box::new(builder.build()?))
    }

    fn model(&self) -> Result<&Path> {
        self.model.as_deref().ok_or_else(|| {
            Error::Config(format!(
                "reranker.model: a {:?} reranker needs a model directory",
                self.kind
            ))
        })
    }

    /// The model's directory: `model` resolved as every loader resolves it (a directory, a
    /// folder of `$RERANK_MODELS_DIR`, or a hub id).
    #[cfg(feature = "models")]
    fn model_dir(&self) -> Result<PathBuf> {
        crate::models::registry::resolve(self.model()?, crate::models::registry::Task::CrossEncoder)
    }

    /// Refuses a precision on the model-free reranker, in every build.
    fn check_precision(&self) -> Result<()> {
        match (self.kind, self.precision) {
            (RerankerKind::Lexical, Some(p)) => Err(Error::Config(format!(
                "reranker.precision: the lexical reranker has no model to run in {p}"
            ))),
            _ => Ok(()),
        }
    }

    #[cfg(feature = "models")]
    fn build_primary(&self) -> Result<Box<dyn Reranker>> {
        self.check_precision()?;
        let mut options =
            crate::models::ModelOptions::default().precision(self.precision.unwrap_or_default());
        if let Some(passages) = self.passages {
            if matches!(
                self.kind,
                RerankerKind::Embedding | RerankerKind::Colbert | RerankerKind::Lexical
            ) {
                return Err(Error::Config(format!(
                    "reranker.passages: a {:?} reranker scores whole documents (passages are \
                     for cross_encoder, qwen3, mxbai, monot5 and model)",
                    self.kind
                )));
            }
            options = options.passages(passages);
        }
        Ok(match self.kind {
            RerankerKind::Lexical => Box::new(crate::rerankers::LexicalReranker),
            RerankerKind::CrossEncoder => Box::new(
                crate::rerankers::CrossEncoder::builder(self.model_dir()?)
                    .options(options)
                    .build()?,
            ),
            RerankerKind::Qwen3 => {
                let mut b =
                    crate::rerankers::Qwen3Reranker::builder(self.model_dir()?).options(options);
                if let Some(i) = &self.instructions {
                    b = b.instructions(i.clone());
                }
                Box::new(b.build()?)
            }
            RerankerKind::Mxbai => {
                let mut b =
                    crate::rerankers::MxbaiReranker::builder(self.model_dir()?).options(options);
                if let Some(i) = &self.instructions {
                    b = b.instruction(i.default.clone());
                }
                Box::new(b.build()?)
            }
            RerankerKind::MonoT5 => Box::new(
                crate::rerankers::MonoT5Reranker::builder(self.model_dir()?)
                    .options(options)
                    .build()?,
            ),
            RerankerKind::Model => crate::rerankers::load_reranker(self.model()?, &options)?,
            RerankerKind::Colbert => Box::new(crate::rerankers::ColbertReranker::from_dir(
                self.model_dir()?,
                &options,
            )?),
            RerankerKind::Embedding => {
                let embedder: Arc<dyn Embedder> =
                    Arc::from(crate::load_embedder(self.model()?, &options)?);
                Box::new(crate::rerankers::EmbeddingReranker::new(embedder))
            }
        })
    }

    #[cfg(not(feature = "models"))]
    fn build_primary(&self) -> Result<Box<dyn Reranker>> {
        self.check_precision()?;
        match self.kind {
            RerankerKind::Lexical => Ok(Box::new(crate::rerankers::LexicalReranker)),
            _ => {
                self.model()?;
                Err(Error::Config(
                    "this reranker is not available in this build (model-backed rerankers \
                     need the `models` feature of rerank)"
                        .into(),
                ))
            }
        }
    }
}

/// The `classifier` section: a [`RuleClassifier`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClassifierConfig {
    /// A JSON file of known people, `{"alias": "Canonical Name"}` (default: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aliases: Option<PathBuf>,
    /// Domain lexicon files: one word or phrase per line (`#` starts a comment), added to the
    /// domain vocabulary; a query sharing no word with it is off-topic (default: none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lexicons: Vec<PathBuf>,
    /// Add every word of the indexed documents to the domain vocabulary (default false).
    pub domain_from_corpus: bool,
    /// Word lists, patterns and thresholds (default: the English lexicon; see
    /// [`RuleConfig`]; missing keys keep their defaults).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rules: Option<RuleConfig>,
}

impl ClassifierConfig {
    /// Builds the classifier; `docs` feed `domain_from_corpus`.
    pub fn build(&self, docs: &[Document]) -> Result<RuleClassifier> {
        let mut builder = crate::classify::RuleClassifierBuilder::from_config(
            self.rules.clone().unwrap_or_default(),
        );
        if let Some(path) = &self.aliases {
            let mut aliases = builder.config_mut().aliases.clone();
            aliases.extend(read_aliases(path)?);
            builder = builder.aliases(aliases);
        }
        for path in &self.lexicons {
            builder = builder.domain_vocabulary(read_lexicon(path)?);
        }
        if self.domain_from_corpus {
            let texts: Vec<String> = docs.iter().map(Document::full_text).collect();
            builder = builder.domain_corpus(texts.iter().map(String::as_str));
        }
        builder.build()
    }
}

/// Reads a lexicon file: one entry per line, `#` comments and blank lines skipped.
pub fn read_lexicon(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    Ok(text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// The `pii` section: the guard that refuses queries holding personal data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PiiConfig {
    /// Refuse queries with personal data (default true).
    pub enabled: bool,
    /// The kinds looked for (default: all of `ssn`, `credit_card`, `email`, `phone`).
    pub kinds: Vec<PiiKind>,
    /// The refusal the user reads; `{kinds}` becomes the kinds found (default:
    /// [`DEFAULT_REFUSAL`](crate::guard::DEFAULT_REFUSAL)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Default for PiiConfig {
    fn default() -> Self {
        PiiConfig {
            enabled: true,
            kinds: PiiKind::ALL.to_vec(),
            message: None,
        }
    }
}

impl PiiConfig {
    /// The guard this section describes (a CLI that prints a query checks it with the same
    /// guard as the pipeline).
    pub fn build(&self) -> PiiGuard {
        let guard = if self.enabled {
            PiiGuard::new(self.kinds.iter().copied())
        } else {
            PiiGuard::disabled()
        };
        match &self.message {
            Some(m) => guard.message(m),
            None => guard,
        }
    }
}

/// Where the semantic cache keeps its entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheStoreKind {
    /// In the process (the default); gone when it ends.
    #[default]
    Memory,
    /// In an SQLite file (`path`; feature `sqlite`): survives restarts, shared by processes.
    Sqlite,
    /// In Redis (`url`; feature `redis`): shared by every replica.
    Redis,
}

/// The `cache` section: `{store: memory}`, `{store: sqlite, path}` or `{store: redis, url}`,
/// with the thresholds and lifetimes. Needs the `embedder` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheSection {
    /// Where entries live (default `memory`).
    pub store: CacheStoreKind,
    /// The SQLite file, for `store: sqlite` (relative to the working directory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// The Redis URL, for `store: redis` (`redis://host:port/db`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The Redis key namespace (default `rerank`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Minimum cosine similarity for a hit (default 0.92).
    pub threshold: f32,
    /// Lifetime of an entry in seconds (default 3600; 0 keeps entries until invalidated).
    pub ttl_secs: u64,
    /// Lifetime of degraded responses (reranker fallback) in seconds (default 60).
    pub short_ttl_secs: u64,
    /// Nearest entries a lookup examines (default 8).
    pub candidates: usize,
    /// Tag each response with the acts its hits cite, for invalidation by act (default false).
    pub tag_acts: bool,
    /// Also cache whole answers (`Pipeline::answer`: a hit skips retrieval and generation), in
    /// the same store (default false).
    pub answers: bool,
    /// Lifetimes in seconds by tag (a source, `area:NAME`, `act:NAME`, `route:simple`): an
    /// entry with several of these tags lives the shortest (default: none, `ttl_secs` for all).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub ttl_by_tag: std::collections::BTreeMap<String, u64>,
}

impl Default for CacheSection {
    fn default() -> Self {
        let c = CacheConfig::default();
        CacheSection {
            store: CacheStoreKind::Memory,
            path: None,
            url: None,
            namespace: None,
            threshold: c.threshold,
            ttl_secs: c.ttl.map_or(0, |t| t.as_secs()),
            short_ttl_secs: c.short_ttl.as_secs(),
            candidates: c.candidates,
            tag_acts: false,
            answers: false,
            ttl_by_tag: Default::default(),
        }
    }
}

impl CacheSection {
    /// Checks that the store has what it needs, naming the key.
    pub(super) fn check(&self) -> Result<()> {
        let wrong = |key: &str, why: &str| Err(Error::Config(format!("cache.{key}: {why}")));
        match self.store {
            CacheStoreKind::Memory if self.path.is_some() => {
                wrong("path", "only `store: sqlite` takes a path")
            }
            CacheStoreKind::Memory | CacheStoreKind::Sqlite if self.url.is_some() => {
                wrong("url", "only `store: redis` takes a url")
            }
            CacheStoreKind::Sqlite if self.path.is_none() => {
                wrong("path", "`store: sqlite` needs the path of the SQLite file")
            }
            CacheStoreKind::Redis if self.url.is_none() => {
                wrong("url", "`store: redis` needs a url (redis://host:port/db)")
            }
            CacheStoreKind::Redis if self.path.is_some() => {
                wrong("path", "`store: redis` takes a url, not a path")
            }
            _ => Ok(()),
        }?;
        match self.ttl_by_tag.iter().find(|(_, secs)| **secs == 0) {
            Some((tag, _)) => wrong(
                "ttl_by_tag",
                &format!("the TTL of {tag:?} must be at least one second"),
            ),
            None => Ok(()),
        }
    }

    /// The cache this section describes, of responses ([`SearchResponse`](super::SearchResponse)) or answers
    /// ([`Answer`](crate::pipeline::Answer)), with a store of its own when the store is
    /// `memory` (see [`build_in`](Self::build_in) for one the caches share).
    pub fn build<V>(&self) -> Result<SemanticCache<V>>
    where
        V: Clone + Send + Sync + Serialize + serde::de::DeserializeOwned + 'static,
    {
        self.build_in(&SharedMemoryStore::default())
    }

    /// The cache this section describes, its entries in `memory` when the store is `memory`:
    /// a pipeline's response and answer caches built in one [`SharedMemoryStore`] drop each
    /// other's entries on one invalidation, as the SQLite and Redis stores do.
    pub fn build_in<V>(&self, memory: &SharedMemoryStore) -> Result<SemanticCache<V>>
    where
        V: Clone + Send + Sync + Serialize + serde::de::DeserializeOwned + 'static,
    {
        self.check()?;
        let mut builder = SemanticCache::builder()
            .threshold(self.threshold)
            .short_ttl(Duration::from_secs(self.short_ttl_secs))
            .candidates(self.candidates);
        builder = match self.ttl_secs {
            0 => builder.no_ttl(),
            s => builder.ttl(Duration::from_secs(s)),
        };
        builder = match self.store {
            CacheStoreKind::Memory => builder.store(memory.typed::<V>()),
            CacheStoreKind::Sqlite => builder.store(sqlite_store(self.path.as_deref())?),
            CacheStoreKind::Redis => builder.store(redis_store(
                self.url.as_deref().unwrap_or_default(),
                self.namespace.as_deref(),
            )?),
        };
        builder.build()
    }
}

#[cfg(feature = "sqlite")]
fn sqlite_store<V>(path: Option<&Path>) -> Result<crate::store::SqliteCacheStore<V>> {
    let path = path.ok_or_else(|| Error::Config("cache.path: missing".into()))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    let store = Arc::new(crate::store::Store::open(path)?);
    Ok(store.cache_store())
}

#[cfg(not(feature = "sqlite"))]
fn sqlite_store<V: Clone>(_path: Option<&Path>) -> Result<crate::cache::MemoryStore<V>> {
    Err(Error::Config(
        "cache.store: `sqlite` needs the `sqlite` feature of rerank".into(),
    ))
}

#[cfg(feature = "redis")]
fn redis_store<V>(url: &str, namespace: Option<&str>) -> Result<crate::cache::RedisCacheStore<V>> {
    let mut b = crate::cache::RedisCacheStore::builder(url);
    if let Some(ns) = namespace {
        b = b.namespace(ns);
    }
    b.build()
}

#[cfg(not(feature = "redis"))]
fn redis_store<V: Clone>(
    _url: &str,
    _namespace: Option<&str>,
) -> Result<crate::cache::MemoryStore<V>> {
    Err(Error::Config(
        "cache.store: `redis` needs the `redis` feature of rerank".into(),
    ))
}

/// The `generator` section (answers, HyDE, query variants).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum GeneratorConfig {
    /// The model-free [`Extractive`](crate::Extractive) generator: the best-matching sentences
    /// of the sources, cited.
    Extractive {
        /// Sentences in an answer (default 3).
        #[serde(default = "default_sentences")]
        max_sentences: usize,
    },
    /// A chat model from a local directory, run on the crate's CPU kernels (feature
    /// `models`): Qwen3, Qwen2 / Qwen2.5, Llama, Mistral and Phi-3 checkpoints
    /// ([`LocalChat`](crate::answer::LocalChat)). `type: local_chat`; `qwen3_chat`, its
    /// former name, is read as the same.
    #[serde(alias = "qwen3_chat")]
    LocalChat {
        /// The model directory.
        model: PathBuf,
        /// The number format of the decoder's matrices: `f32` (default) or `bf16`
        /// ([`Precision`]; generation refuses `int8`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        precision: Option<Precision>,
    },
    /// An OpenAI-compatible chat-completions server (feature `http`).
    Openai {
        /// The base URL (`http://host:port/v1`).
        base_url: String,
        /// The model name.
        model: String,
        /// The environment variable holding the API key (default: none, no key is sent, as
        /// local servers want). When named, it must be set: building fails otherwise.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api_key_env: Option<String>,
        /// Request timeout in seconds (default 60).
        #[serde(default = "default_timeout")]
        timeout_secs: u64,
    },
}

fn default_sentences() -> usize {
    3
}

fn default_timeout() -> u64 {
    60
}

impl GeneratorConfig {
    pub(super) fn build(&self) -> Result<Arc<dyn Generator>> {
        match self {
            GeneratorConfig::Extractive { max_sentences } => Ok(Arc::new(
                crate::Extractive::new().max_sentences(*max_sentences)?,
            )),
            GeneratorConfig::LocalChat { model, precision } => {
                local_chat(model, precision.unwrap_or_default())
            }
            GeneratorConfig::Openai {
                base_url,
                model,
                api_key_env,
                timeout_secs,
            } => openai(base_url, model, api_key_env.as_deref(), *timeout_secs),
        }
    }
}

#[cfg(feature = "models")]
fn local_chat(model: &Path, precision: Precision) -> Result<Arc<dyn Generator>> {
    let options = crate::models::ModelOptions::default().precision(precision);
    Ok(Arc::new(
        crate::LocalChat::builder(model).options(options).build()?,
    ))
}

#[cfg(not(feature = "models"))]
fn local_chat(_model: &Path, _precision: Precision) -> Result<Arc<dyn Generator>> {
    Err(Error::Config(
        "generator: local_chat needs the `models` feature of rerank".into(),
    ))
}

#[cfg(feature = "http")]
fn openai(
    base_url: &str,
    model: &str,
    api_key_env: Option<&str>,
    timeout_secs: u64,
) -> Result<Arc<dyn Generator>> {
    let mut b = crate::OpenAiCompatible::builder()
        .base_url(base_url)
        .model(model)
        .timeout(Duration::from_secs(timeout_secs));
    if let Some(env) = api_key_env {
        // A key the config asks for must be there: sending keyless requests to a hosted API
        // would only fail later, at the first question, with a 401.
        if std::env::var(env).map_or(true, |v| v.trim().is_empty()) {
            return Err(Error::Config(format!(
                "generator.api_key_env: the environment variable {env} is not set (or empty); \
                 set it to the API key, or leave api_key_env out for a server without keys"
            )));
        }
        b = b.api_key_env(env);
    }
    Ok(Arc::new(b.build()?))
}

#[cfg(not(feature = "http"))]
fn openai(
    _base_url: &str,
    _model: &str,
    _api_key_env: Option<&str>,
    _timeout_secs: u64,
) -> Result<Arc<dyn Generator>> {
    Err(Error::Config(
        "generator: openai needs the `http` feature of rerank".into(),
    ))
}

/// The `grounding` section: how answers are checked and how confident they are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GroundingConfig {
    /// A sentence is supported when some source scores at least this (default 0.5).
    pub threshold: f32,
    /// Hits scoring below this are not used to answer (default: none); with none left the
    /// answer is "I don't have enough information ...".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_score: Option<f32>,
    /// Sources in the prompt (default 5).
    pub max_sources: usize,
    /// Confidence at or above which an answer is `high` (default 0.8).
    pub high: f32,
    /// Confidence at or above which an answer is `medium` (default 0.5); below, `low`.
    pub medium: f32,
    /// How chitchat is answered: `canned` (default) or `generator` (the configured generator
    /// writes the reply).
    pub chitchat: super::ChitchatMode,
    /// How the relevance of an answer's sources to its question is measured: `query_terms`,
    /// `reranker_sigmoid` or `reranker_probability` (default: from the reranker type:
    /// `reranker_sigmoid` for `cross_encoder` and `mxbai`, `reranker_probability` for `qwen3`,
    /// `query_terms` otherwise). See [`RelevanceMeasure`](crate::answer::RelevanceMeasure).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relevance: Option<crate::answer::RelevanceMeasure>,
    /// Relevance at or above which it is `high` (default 0.6).
    pub relevance_high: f32,
    /// Relevance at or above which it is `medium` (default 0.4); below, `low`. An answer's band
    /// is the weaker of its grounding band and its relevance band.
    pub relevance_medium: f32,
    /// Whether answers list their sources (default true; a request can turn it off, see
    /// [`AnswerOptions::include_sources`]).
    pub include_sources: bool,
    /// Whether off-topic questions (outside the domain the classifier knows) and questions
    /// with nothing to search for are answered without a search, with a note that the question
    /// is outside the knowledge base's domain or a request to clarify (default true; `false`
    /// searches them like any question). Needs a `classifier` section. See
    /// [`AnswerOptions::route_intents`].
    pub route_intents: bool,
}

impl Default for GroundingConfig {
    fn default() -> Self {
        let bands = crate::answer::ConfidenceBands::default();
        let relevance = crate::answer::ConfidenceBands::relevance();
        GroundingConfig {
            threshold: 0.5,
            min_score: None,
            max_sources: 5,
            high: bands.high,
            medium: bands.medium,
            chitchat: super::ChitchatMode::default(),
            relevance: None,
            relevance_high: relevance.high,
            relevance_medium: relevance.medium,
            include_sources: true,
            route_intents: true,
        }
    }
}

impl GroundingConfig {
    /// The answer options this section describes.
    pub fn answer_options(&self) -> Result<AnswerOptions> {
        let mut o = AnswerOptions::new()
            .prompt(PromptBuilder::new().max_sources(self.max_sources))
            .checker(GroundingChecker::new().threshold(self.threshold)?)
            .bands(crate::answer::ConfidenceBands::new(self.high, self.medium)?)
            .relevance(self.relevance.unwrap_or_default())
            .relevance_bands(
                crate::answer::ConfidenceBands::new(self.relevance_high, self.relevance_medium)
                    .map_err(|e| Error::Config(format!("grounding.relevance_high/medium: {e}")))?,
            )
            .chitchat(self.chitchat)
            .include_sources(self.include_sources)
            .route_intents(self.route_intents);
        if let Some(m) = self.min_score {
            o = o.min_score(m);
        }
        o.validate()?;
        Ok(o)
    }
}
