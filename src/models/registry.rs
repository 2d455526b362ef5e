//! The registry of known models: what a hub name stands for before anything is downloaded.
//!
//! [`load_embedder`](crate::load_embedder) and the rerankers' `load_reranker` look a name up
//! here to refuse a model the crate cannot run before fetching gigabytes, and to fill in the
//! prompts a model card asks for when the model's own `config_sentence_transformers.json` leaves them out (bge's query
//! instruction, e5's `query: ` / `passage: `). Everything else is read from the model's
//! directory, which wins where the two differ. `docs/models.md` is this table with the
//! figures each model was tested to.

use std::path::{Path, PathBuf};

use crate::models::PoolingMode;
use crate::{Error, Result};

/// What a model does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Task {
    /// A bi-encoder: texts to vectors ([`Embedder`](crate::Embedder)).
    Embedding,
    /// A sequence classifier scoring (query, document) pairs
    /// ([`CrossEncoder`](crate::CrossEncoder)).
    CrossEncoder,
    /// A generative model scoring with a yes/no answer ([`Qwen3Reranker`](crate::Qwen3Reranker),
    /// [`MxbaiReranker`](crate::MxbaiReranker), [`MonoT5Reranker`](crate::MonoT5Reranker)).
    LlmReranker,
}

/// Whether the crate runs a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Loads and matches its reference.
    Supported,
    /// Refused at load, with the reason.
    Unsupported(&'static str),
}

/// One model of the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownModel {
    /// The hub id, e.g. `BAAI/bge-small-en-v1.5`.
    pub id: &'static str,
    /// What it does.
    pub task: Task,
    /// `model_type` in its `config.json` (`bert`, `xlm-roberta`, `qwen3`, ...; `static` for a
    /// static-embedding model, which has no `config.json`).
    pub model_type: &'static str,
    /// The pooling of an embedder (`None` for rerankers).
    pub pooling: Option<PoolingMode>,
    /// The prompt its model card puts before queries (used when the directory has none).
    pub query_prompt: Option<&'static str>,
    /// The prompt its model card puts before documents (used when the directory has none).
    pub document_prompt: Option<&'static str>,
    /// The embedding dimension (`None` for rerankers).
    pub dim: Option<usize>,
    /// The longest input in tokens that sentence-transformers gives it (`usize::MAX`: no
    /// limit, as for a static-embedding model).
    pub max_length: usize,
    /// Dimensions the model card says the embedding may be cut to (Matryoshka), largest first.
    pub matryoshka: &'static [usize],
    /// The licence, as an SPDX id.
    pub licence: &'static str,
    /// Whether the crate runs it.
    pub support: Support,
}

/// The query instruction of bge-*-en-v1.5, mxbai-embed and arctic-embed.
const BGE_QUERY: &str = "Represent this sentence for searching relevant passages: ";
/// Qwen3-Embedding's default query instruction.
const QWEN3_QUERY: &str =
    "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:";

const fn embedder(
    id: &'static str,
    model_type: &'static str,
    pooling: PoolingMode,
    dim: usize,
    max_length: usize,
    licence: &'static str,
) -> KnownModel {
    KnownModel {
        id,
        task: Task::Embedding,
        model_type,
        pooling: Some(pooling),
        query_prompt: None,
        document_prompt: None,
        dim: Some(dim),
        max_length,
        matryoshka: &[],
        licence,
        support: Support::Supported,
    }
}

/// A nomic-embed model (768 wide, 8192 tokens, mean pooling) with its `search_query: ` and
/// `search_document: ` prompts.
const fn nomic_embedder(id: &'static str, model_type: &'static str) -> KnownModel {
    embedder(id, model_type, Mean, 768, 8192, "Apache-2.0")
        .prompts(Some("search_query: "), Some("search_document: "))
}

/// EmbeddingGemma's retrieval prompts (its `config_sentence_transformers.json`'s `query` and
/// `document`).
const EMBEDDINGGEMMA_QUERY: &str = "task: search result | query: ";
const EMBEDDINGGEMMA_DOCUMENT: &str = "title: none | text: ";

/// The Matryoshka dimensions of sentence-transformers' static embedding models.
const STATIC_MATRYOSHKA: &[usize] = &[1024, 512, 256, 128, 64, 32];

/// The Matryoshka dimensions of nomic-embed-text-v1.5 and modernbert-embed-base.
const NOMIC_MATRYOSHKA: &[usize] = &[768, 512, 256, 128, 64];

/// A GTE v1.5 / multilingual embedder (`"new"` model type, 8192 tokens, CLS pooling) `dim`
/// wide.
const fn gte_embedder(id: &'static str, dim: usize) -> KnownModel {
    embedder(id, "new", Cls, dim, 8192, "Apache-2.0")
}

const fn reranker(
    id: &'static str,
    task: Task,
    model_type: &'static str,
    max_length: usize,
    licence: &'static str,
) -> KnownModel {
    KnownModel {
        id,
        task,
        model_type,
        pooling: None,
        query_prompt: None,
        document_prompt: None,
        dim: None,
        max_length,
        matryoshka: &[],
        licence,
        support: Support::Supported,
    }
}

impl KnownModel {
    const fn prompts(
        mut self,
        query: Option<&'static str>,
        document: Option<&'static str>,
    ) -> Self {
        self.query_prompt = query;
        self.document_prompt = document;
        self
    }

    const fn matryoshka(mut self, dims: &'static [usize]) -> Self {
        self.matryoshka = dims;
        self
    }

    const fn unsupported(mut self, why: &'static str) -> Self {
        self.support = Support::Unsupported(why);
        self
    }

    /// The repository name without its owner (`bge-small-en-v1.5`).
    pub fn name(&self) -> &'static str {
        self.id.rsplit('/').next().unwrap_or(self.id)
    }
}

use PoolingMode::{Cls, LastToken, Mean};
use Task::{CrossEncoder, LlmReranker};

/// Every known model, embedders first.
pub const MODELS: &[KnownModel] = &[
    embedder(
        "sentence-transformers/all-MiniLM-L6-v2",
        "bert",
        Mean,
        384,
        256,
        "Apache-2.0",
    ),
    embedder(
        "sentence-transformers/all-MiniLM-L12-v2",
        "bert",
        Mean,
        384,
        256,
        "Apache-2.0",
    ),
    embedder("BAAI/bge-small-en-v1.5", "bert", Cls, 384, 512, "MIT").prompts(Some(BGE_QUERY), None),
    embedder("BAAI/bge-base-en-v1.5", "bert", Cls, 768, 512, "MIT").prompts(Some(BGE_QUERY), None),
    embedder("BAAI/bge-large-en-v1.5", "bert", Cls, 1024, 512, "MIT")
        .prompts(Some(BGE_QUERY), None),
    embedder("intfloat/e5-small-v2", "bert", Mean, 384, 512, "MIT")
        .prompts(Some("query: "), Some("passage: ")),
    embedder("intfloat/e5-base-v2", "bert", Mean, 768, 512, "MIT")
        .prompts(Some("query: "), Some("passage: ")),
    embedder(
        "intfloat/multilingual-e5-small",
        "xlm-roberta",
        Mean,
        384,
        512,
        "MIT",
    )
    .prompts(Some("query: "), Some("passage: ")),
    embedder(
        "intfloat/multilingual-e5-base",
        "xlm-roberta",
        Mean,
        768,
        512,
        "MIT",
    )
    .prompts(Some("query: "), Some("passage: ")),
    embedder(
        "intfloat/multilingual-e5-large",
        "xlm-roberta",
        Mean,
        1024,
        512,
        "MIT",
    )
    .prompts(Some("query: "), Some("passage: ")),
    embedder("BAAI/bge-m3", "xlm-roberta", Cls, 1024, 8192, "MIT"),
    embedder(
        "Snowflake/snowflake-arctic-embed-s",
        "bert",
        Cls,
        384,
        512,
        "Apache-2.0",
    )
    .prompts(Some(BGE_QUERY), None),
    embedder(
        "mixedbread-ai/mxbai-embed-large-v1",
        "bert",
        Cls,
        1024,
        512,
        "Apache-2.0",
    )
    .prompts(Some(BGE_QUERY), None),
    embedder(
        "Qwen/Qwen3-Embedding-0.6B",
        "qwen3",
        LastToken,
        1024,
        32768,
        "Apache-2.0",
    )
    .prompts(Some(QWEN3_QUERY), None)
    .matryoshka(&[1024, 768, 512, 256, 128, 64, 32]),
    embedder(
        "Alibaba-NLP/gte-modernbert-base",
        "modernbert",
        Cls,
        768,
        8192,
        "Apache-2.0",
    ),
    nomic_embedder("nomic-ai/modernbert-embed-base", "modernbert").matryoshka(NOMIC_MATRYOSHKA),
    nomic_embedder("nomic-ai/nomic-embed-text-v1.5", "nomic_bert").matryoshka(NOMIC_MATRYOSHKA),
    nomic_embedder("nomic-ai/nomic-embed-text-v1", "nomic_bert"),
    embedder(
        "google/embeddinggemma-300m",
        "gemma3_text",
        Mean,
        768,
        2048,
        "Gemma",
    )
    .prompts(Some(EMBEDDINGGEMMA_QUERY), Some(EMBEDDINGGEMMA_DOCUMENT))
    .matryoshka(&[768, 512, 256, 128]),
    embedder(
        "sentence-transformers/static-retrieval-mrl-en-v1",
        "static",
        Mean,
        1024,
        usize::MAX,
        "Apache-2.0",
    )
    .matryoshka(STATIC_MATRYOSHKA),
    embedder(
        "sentence-transformers/static-similarity-mrl-multilingual-v1",
        "static",
        Mean,
        1024,
        usize::MAX,
        "Apache-2.0",
    )
    .matryoshka(STATIC_MATRYOSHKA),
    gte_embedder("Alibaba-NLP/gte-multilingual-base", 768),
    gte_embedder("Alibaba-NLP/gte-base-en-v1.5", 768),
    gte_embedder("Alibaba-NLP/gte-large-en-v1.5", 1024),
    embedder(
        "sentence-transformers/all-mpnet-base-v2",
        "mpnet",
        Mean,
        768,
        384,
        "Apache-2.0",
    ),
    // CLS pooling without Normalize: its model card ranks by dot product. No licence is
    // declared on its model card.
    embedder(
        "sentence-transformers/multi-qa-mpnet-base-dot-v1",
        "mpnet",
        Cls,
        768,
        512,
        "NOASSERTION",
    ),
    // CLS pooling without Normalize: TAS-B ranks by dot product.
    embedder(
        "sentence-transformers/msmarco-distilbert-base-tas-b",
        "distilbert",
        Cls,
        768,
        512,
        "Apache-2.0",
    ),
    embedder(
        "sentence-transformers/multi-qa-distilbert-cos-v1",
        "distilbert",
        Mean,
        768,
        512,
        "NOASSERTION",
    ),
    // Mean pooling, then a 768 -> 512 Dense with tanh.
    embedder(
        "sentence-transformers/distiluse-base-multilingual-cased-v2",
        "distilbert",
        Mean,
        512,
        128,
        "Apache-2.0",
    ),
    // Mistral-7B (MistralModel, a 4096-token sliding window on every layer), last token,
    // normalized; its task prompts are in its own config_sentence_transformers.json.
    embedder(
        "intfloat/e5-mistral-7b-instruct",
        "mistral",
        LastToken,
        4096,
        32768,
        "MIT",
    ),
    // Mean pooling, a 768 -> 768 Dense without bias, Normalize; a T5-base encoder whose
    // config.json says relu (d_ff 3072).
    embedder(
        "sentence-transformers/gtr-t5-base",
        "t5",
        Mean,
        768,
        512,
        "Apache-2.0",
    ),
    // jina's XLM-R with rotary positions and a LoRA adapter per task: queries through
    // retrieval.query, documents through retrieval.passage, each with its instruction (from
    // config.json's task_instructions).
    embedder(
        "jinaai/jina-embeddings-v3",
        "xlm-roberta",
        Mean,
        1024,
        8194,
        "CC-BY-NC-4.0",
    )
    .matryoshka(&[1024, 768, 512, 256, 128, 64, 32]),
    embedder(
        "jinaai/jina-embeddings-v2-base-en",
        "bert",
        Mean,
        768,
        8192,
        "Apache-2.0",
    )
    .unsupported("jina_bert (ALiBi attention, remote code) is not supported"),
    reranker(
        "cross-encoder/ms-marco-MiniLM-L-6-v2",
        CrossEncoder,
        "bert",
        512,
        "Apache-2.0",
    ),
    reranker(
        "cross-encoder/ms-marco-MiniLM-L-12-v2",
        CrossEncoder,
        "bert",
        512,
        "Apache-2.0",
    ),
    reranker(
        "cross-encoder/ms-marco-electra-base",
        CrossEncoder,
        "electra",
        512,
        "Apache-2.0",
    ),
    reranker(
        "BAAI/bge-reranker-base",
        CrossEncoder,
        "xlm-roberta",
        512,
        "MIT",
    ),
    reranker(
        "BAAI/bge-reranker-large",
        CrossEncoder,
        "xlm-roberta",
        512,
        "MIT",
    ),
    reranker(
        "BAAI/bge-reranker-v2-m3",
        CrossEncoder,
        "xlm-roberta",
        8192,
        "Apache-2.0",
    ),
    reranker(
        "Qwen/Qwen3-Reranker-0.6B",
        LlmReranker,
        "qwen3",
        8192,
        "Apache-2.0",
    ),
    reranker(
        "Qwen/Qwen3-Reranker-4B",
        LlmReranker,
        "qwen3",
        8192,
        "Apache-2.0",
    ),
    reranker(
        "Qwen/Qwen3-Reranker-8B",
        LlmReranker,
        "qwen3",
        8192,
        "Apache-2.0",
    ),
    reranker(
        "tomaarsen/Qwen3-Reranker-0.6B-seq-cls",
        LlmReranker,
        "qwen3",
        8192,
        "Apache-2.0",
    ),
    reranker(
        "tomaarsen/Qwen3-Reranker-4B-seq-cls",
        LlmReranker,
        "qwen3",
        8192,
        "Apache-2.0",
    ),
    reranker(
        "tomaarsen/Qwen3-Reranker-8B-seq-cls",
        LlmReranker,
        "qwen3",
        8192,
        "Apache-2.0",
    ),
    reranker(
        "Alibaba-NLP/gte-reranker-modernbert-base",
        CrossEncoder,
        "modernbert",
        8192,
        "Apache-2.0",
    ),
    reranker(
        "mixedbread-ai/mxbai-rerank-base-v1",
        CrossEncoder,
        "deberta-v2",
        512,
        "Apache-2.0",
    ),
    reranker(
        "mixedbread-ai/mxbai-rerank-large-v1",
        CrossEncoder,
        "deberta-v2",
        512,
        "Apache-2.0",
    ),
    reranker(
        "mixedbread-ai/mxbai-rerank-base-v2",
        LlmReranker,
        "qwen2",
        8192,
        "Apache-2.0",
    ),
    reranker(
        "mixedbread-ai/mxbai-rerank-large-v2",
        LlmReranker,
        "qwen2",
        8192,
        "Apache-2.0",
    ),
    reranker(
        "jinaai/jina-reranker-v2-base-multilingual",
        CrossEncoder,
        "xlm-roberta",
        1024,
        "CC-BY-NC-4.0",
    ),
    // monoT5: no licence is declared on their model cards.
    reranker(
        "castorini/monot5-base-msmarco",
        LlmReranker,
        "t5",
        512,
        "NOASSERTION",
    ),
    reranker(
        "castorini/monot5-base-msmarco-10k",
        LlmReranker,
        "t5",
        512,
        "NOASSERTION",
    ),
    reranker(
        "Alibaba-NLP/gte-multilingual-reranker-base",
        CrossEncoder,
        "new",
        8192,
        "Apache-2.0",
    ),
];

/// The model with hub id `id` (compared without case), if the registry knows it.
pub fn find(id: &str) -> Option<&'static KnownModel> {
    MODELS.iter().find(|m| m.id.eq_ignore_ascii_case(id))
}

/// The model whose repository name (the part after the owner) is `name`, if exactly one
/// known model has it: how a local copy in a folder named after the model
/// (`models/bge-small-en-v1.5`) is recognised.
pub fn find_by_name(name: &str) -> Option<&'static KnownModel> {
    let mut found = MODELS
        .iter()
        .filter(|m| m.name().eq_ignore_ascii_case(name));
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

/// The local directory `model` names, as every loader, command and config resolves it:
/// - an existing directory is that directory;
/// - a hub id (`owner/name`) or a bare name whose folder the fetch scripts made under
///   `$RERANK_MODELS_DIR` (default `models`) is that folder (`BAAI/bge-small-en-v1.5` finds
///   `models/bge-small-en-v1.5`);
/// - a path that is local by its look (absolute, `./`, `../`, or under a folder that exists,
///   such as `models/`) and does not exist is an error naming the nearest names in its folder;
/// - any other hub id is fetched from the hub (feature `hf-hub`), and a failed fetch says how
///   to get the model without network.
///
/// A hub id the registry marks unsupported, or knows as a model of the other kind than `task`
/// asks for, is refused before anything is downloaded.
pub fn resolve(model: &Path, task: Task) -> Result<PathBuf> {
    Ok(locate(model, task)?.0)
}

/// [`resolve`], with the model's registry entry when it has one for `task` (an embedder, or
/// either kind of reranker).
pub(crate) fn locate(model: &Path, task: Task) -> Result<(PathBuf, Option<&'static KnownModel>)> {
    let for_task = |m: &&KnownModel| (m.task == Task::Embedding) == (task == Task::Embedding);
    let by_name = |dir: &Path| {
        dir.file_name()
            .and_then(|n| n.to_str())
            .and_then(find_by_name)
            .filter(for_task)
    };
    if model.is_dir() {
        return Ok((model.to_path_buf(), by_name(model)));
    }
    let id = hub_id(model);
    if let Some(dir) = in_models_dir(model) {
        let known = id.and_then(find).filter(for_task).or_else(|| by_name(&dir));
        return Ok((dir, known));
    }
    let Some(id) = id.filter(|_| !looks_local(model)) else {
        if model.exists() {
            // A file, or a directory without config.json: its own error.
            crate::models::ModelDir::open(model)?;
        }
        return Err(missing_local(model));
    };
    let known = find(id);
    if let Some(known) = known {
        let embedder = known.task == Task::Embedding;
        if embedder != (task == Task::Embedding) {
            let (is, with) = match embedder {
                true => ("an embedding model, not a reranker", "load_embedder"),
                false => ("a reranker, not an embedding model", "load_reranker"),
            };
            return Err(Error::model(format!("{id} is {is} (load it with {with})")));
        }
        if let Support::Unsupported(why) = known.support {
            return Err(Error::model(format!("{id}: {why}")));
        }
    }
    let dir = fetch(id).map_err(|e| match e {
        Error::Model { message, source } => Error::Model {
            message: format!(
                "{message}. Without network: `scripts/fetch_model.sh {id}` on a machine that \
                 has it puts the model folder in $RERANK_MODELS_DIR (default models/), where \
                 `{id}` then resolves; HF_HUB_OFFLINE=1 reads only the hub cache \
                 ($HF_HUB_CACHE, else $HF_HOME/hub); HF_ENDPOINT names a mirror"
            ),
            source,
        },
        other => other,
    })?;
    Ok((dir, known))
}

/// Where the fetch scripts put models: `$RERANK_MODELS_DIR`, else `models`.
fn models_dir() -> PathBuf {
    std::env::var_os("RERANK_MODELS_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from("models"), PathBuf::from)
}

/// Whether `model` is a name rather than a path: a hub id (`owner/name`) or a bare name (one
/// plain component), the forms [`resolve`] looks up in `$RERANK_MODELS_DIR`.
pub(crate) fn names_a_model(model: &Path) -> bool {
    use std::path::Component;
    let bare = matches!(
        model.components().collect::<Vec<_>>()[..],
        [Component::Normal(n)] if !n.to_string_lossy().starts_with('.')
    );
    bare || hub_id(model).is_some()
}

/// The folder of `$RERANK_MODELS_DIR` named after `model` (a hub id's repository name, or a
/// bare name), when it holds a model.
fn in_models_dir(model: &Path) -> Option<PathBuf> {
    if !names_a_model(model) {
        return None;
    }
    let name = model.file_name()?;
    let dir = models_dir().join(name);
    // A static-embedding model has a modules.json and no config.json.
    let model = [crate::models::CONFIG_FILE, crate::models::MODULES_FILE];
    model.iter().any(|f| dir.join(f).is_file()).then_some(dir)
}

/// Whether `model` reads as a local path rather than a hub id: absolute, relative to `.` or
/// `..`, or under a folder that exists here (`models/name` when `models/` exists).
fn looks_local(model: &Path) -> bool {
    use std::path::Component;
    let mut parts = model.components();
    match parts.next() {
        Some(Component::Normal(first)) => {
            parts.next().is_some()
                && (Path::new(first).is_dir() || first == models_dir().as_os_str())
        }
        Some(_) => true,
        None => false,
    }
}

/// The error for a local path that does not exist: the nearest names in its folder, and where
/// to get a model.
fn missing_local(model: &Path) -> Error {
    let parent = model
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let wanted = model
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let mut names: Vec<String> = std::fs::read_dir(parent)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter(|e| e.path().is_dir())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    names.sort_by_key(|n| (edit_distance(&n.to_lowercase(), &wanted), n.clone()));
    let nearest = match names.is_empty() {
        true if parent.is_dir() => format!("; {} holds no model folder", parent.display()),
        true => format!("; {} does not exist either", parent.display()),
        false => format!(
            "; nearest in {}: {}",
            parent.display(),
            names.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
        ),
    };
    Error::model(format!(
        "{}: does not exist{nearest} ({})",
        model.display(),
        crate::models::dir::FETCH_HINT
    ))
}

/// The Levenshtein distance between `a` and `b`, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// `model` as a hub id (`owner/name`, no other path syntax), if it is one.
pub(crate) fn hub_id(model: &Path) -> Option<&str> {
    let s = model.to_str()?;
    let (owner, name) = s.split_once('/')?;
    let part = |p: &str| {
        !p.is_empty()
            && !p.starts_with('.')
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    (part(owner) && part(name)).then_some(s)
}

#[cfg(feature = "hf-hub")]
fn fetch(id: &str) -> Result<PathBuf> {
    let dir = crate::models::HubModel::new(id).fetch_sentence_transformers()?;
    Ok(dir.path().to_path_buf())
}

#[cfg(not(feature = "hf-hub"))]
fn fetch(id: &str) -> Result<PathBuf> {
    Err(Error::model(format!(
        "{id}: no such directory, and downloading from the hub needs the `hf-hub` feature \
         of rerank (or fetch the model folder first: scripts/fetch_model.sh {id})"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_ids_are_owner_slash_name() {
        for id in [
            "BAAI/bge-small-en-v1.5",
            "intfloat/multilingual-e5-small",
            "a/b",
        ] {
            assert_eq!(hub_id(Path::new(id)), Some(id));
        }
        for not in [
            "models",
            "/abs/path",
            "./x/y",
            "a/b/c",
            "a/",
            "/b",
            "a b/c",
            "../x",
        ] {
            assert_eq!(hub_id(Path::new(not)), None, "{not}");
        }
    }

    #[test]
    fn edit_distance_counts_insertions_deletions_and_substitutions() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("all-minilm-l6", "all-minilm-l6-v2"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn a_missing_local_path_names_the_nearest_folders() {
        let dir = std::env::temp_dir().join(format!("rerank-resolve-{}", std::process::id()));
        for name in [
            "all-MiniLM-L6-v2",
            "bge-small-en-v1.5",
            "ms-marco-MiniLM-L-6-v2",
        ] {
            std::fs::create_dir_all(dir.join(name)).unwrap();
        }
        let wanted = dir.join("all-MiniLM-L6");
        let e = locate(&wanted, Task::Embedding).unwrap_err().to_string();
        assert!(e.contains("all-MiniLM-L6: does not exist"), "{e}");
        let nearest = e.split("nearest in ").nth(1).unwrap();
        assert!(
            nearest.starts_with(&format!("{}: all-MiniLM-L6-v2, ", dir.display())),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ids_are_unique_and_names_resolve() {
        for (i, m) in MODELS.iter().enumerate() {
            assert!(m.id.contains('/'), "{}", m.id);
            assert!(
                MODELS[i + 1..]
                    .iter()
                    .all(|o| !o.id.eq_ignore_ascii_case(m.id)),
                "{} twice",
                m.id
            );
            assert_eq!(find(&m.id.to_uppercase()), Some(m));
            assert_eq!(find_by_name(m.name()), Some(m));
        }
        assert_eq!(find("BAAI/bge-small"), None);
    }

    #[test]
    fn embedders_have_a_dim_and_a_pooling_and_matryoshka_dims_fit() {
        for m in MODELS {
            assert_eq!(m.task == Task::Embedding, m.dim.is_some(), "{}", m.id);
            assert_eq!(m.dim.is_some(), m.pooling.is_some(), "{}", m.id);
            if let (Some(dim), Some(&first)) = (m.dim, m.matryoshka.first()) {
                assert_eq!(first, dim, "{}", m.id);
                assert!(m.matryoshka.windows(2).all(|w| w[0] > w[1]), "{}", m.id);
            }
        }
    }
}
