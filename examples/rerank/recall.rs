//! The flags `search` and `answer` share: where stage 1 reads (a JSONL corpus in memory, an
//! SQLite store, a Milvus collection for the dense side), which embedding model
//! (`--embedder`), which reranker (`--reranker`), how they run (`--threads`, `--precision`,
//! `--device`), and a semantic cache shared through Redis.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rerank::recall::{Fusion, VectorStorage};
use rerank::{
    Bm25Index, DenseIndex, Document, Embedder, Hybrid, PipelineBuilder, Retriever, Store,
};

use crate::embed::load_embedder;
use crate::flags::ModelArgs;
use crate::index::Duplicates;
use crate::CliResult;

/// The stage-1 retrievers (`--retriever` of `search`, `answer` and `beir`): clap refuses any
/// other value and lists these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RetrieverKind {
    /// In-memory BM25 with the default English analyzer.
    Bm25,
    /// Exact cosine over the --embedder's embeddings (`vector` is the same: the recall mode's
    /// name in configs and `query --retriever`).
    #[value(alias = "vector")]
    Dense,
    /// Reciprocal rank fusion of BM25 and dense.
    Hybrid,
}

impl std::fmt::Display for RetrieverKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RetrieverKind::Bm25 => "bm25",
            RetrieverKind::Dense => "dense",
            RetrieverKind::Hybrid => "hybrid",
        })
    }
}

#[derive(clap::Args)]
pub struct RecallArgs {
    /// JSONL corpus: one {"id", "text", "title"?, "source"?, "page"?, "metadata"?} per line,
    /// `-` for stdin (indexed in memory; embedded at each call for a dense or hybrid retriever
    /// without --vector-store).
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "db",
        required_unless_present = "db"
    )]
    pub corpus: Option<PathBuf>,
    /// An SQLite store filled by `rerank index`: queried without re-indexing (dense recall
    /// embeds the query with the --embedder and --precision the store was indexed with).
    #[arg(long, value_name = "FILE")]
    pub db: Option<PathBuf>,
    /// Stage-1 retriever: bm25, dense (`vector` is an alias) or hybrid (BM25 + dense,
    /// reciprocal rank fusion).
    #[arg(long, value_enum, ignore_case = true, default_value_t = RetrieverKind::Bm25)]
    pub retriever: RetrieverKind,
    /// The embedding model of dense and hybrid recall and of the semantic cache (a bi-encoder
    /// of any supported family: a directory, a folder name under $RERANK_MODELS_DIR, or a hub
    /// id).
    #[arg(long, value_name = "MODEL", alias = "model")]
    pub embedder: Option<PathBuf>,
    /// The dense side in Milvus: milvus://HOST:PORT/COLLECTION. With --corpus, documents the
    /// collection lacks are embedded and written first.
    #[arg(long, value_name = "URL")]
    pub vector_store: Option<String>,
    /// Stage 2: the reranker (a cross-encoder, Qwen3-Reranker or a bi-encoder, detected from
    /// its config.json: a directory, a folder name under $RERANK_MODELS_DIR, or a hub id).
    #[arg(long, value_name = "MODEL")]
    pub reranker: Option<PathBuf>,
    /// A semantic cache of responses shared through Redis: redis://HOST:PORT[/DB] (needs
    /// --embedder for the query embeddings).
    #[arg(long, value_name = "URL")]
    pub cache: Option<String>,
    #[command(flatten)]
    pub models: ModelArgs,
    /// What the in-memory dense index (--corpus) scans: f32 (exact), f16 or int8 (a compact
    /// copy, the best k x rescore rescored in f32; f16:R or int8:R sets rescore R).
    #[arg(long, default_value = "f32", value_name = "f32|f16|int8")]
    pub vector_storage: VectorStorage,
}

/// `milvus://HOST:PORT/COLLECTION` as the REST URL and the collection.
pub fn parse_milvus_uri(uri: &str) -> CliResult<(String, String)> {
    let rest = uri
        .strip_prefix("milvus://")
        .ok_or_else(|| format!("--vector-store {uri:?}: expected milvus://HOST:PORT/COLLECTION"))?;
    match rest.split_once('/') {
        Some((host, collection)) if !host.is_empty() && !collection.is_empty() => {
            Ok((format!("http://{host}"), collection.to_string()))
        }
        _ => Err(format!("--vector-store {uri:?}: expected milvus://HOST:PORT/COLLECTION").into()),
    }
}

/// Dense recall from the Milvus collection `uri` names (`milvus://HOST:PORT/COLLECTION`), after
/// writing the documents of `corpus` it lacks (waiting up to `visible` for them to show).
/// `store_text`: whether rows keep the documents' text (hits then carry it). Returns the
/// retriever and how many documents were written.
#[cfg(feature = "milvus")]
pub fn milvus_dense(
    uri: &str,
    embedder: Arc<dyn Embedder>,
    corpus: Option<&[Document]>,
    store_text: bool,
    visible: Duration,
) -> CliResult<(Box<dyn Retriever>, usize)> {
    let (url, collection) = parse_milvus_uri(uri)?;
    let milvus = rerank::recall::MilvusRetriever::builder(url, collection, embedder)
        .store_text(store_text, 60_000)
        .build()?;
    let written = match corpus {
        Some(docs) => milvus.add_missing(docs, visible)?,
        None => 0,
    };
    Ok((Box::new(milvus), written))
}

/// Without the `milvus` feature there is no Milvus retriever.
#[cfg(not(feature = "milvus"))]
pub fn milvus_dense(
    uri: &str,
    _embedder: Arc<dyn Embedder>,
    _corpus: Option<&[Document]>,
    _store_text: bool,
    _visible: Duration,
) -> CliResult<(Box<dyn Retriever>, usize)> {
    parse_milvus_uri(uri)?;
    Err("--vector-store milvus:// needs the `milvus` feature".into())
}

impl RecallArgs {
    fn embedder(&self) -> CliResult<Arc<dyn Embedder>> {
        match &self.embedder {
            Some(dir) => load_embedder(dir, &self.models),
            None => Err(self.needs_model().into()),
        }
    }

    /// Says which of the flags given need an embedding model: only those given are named.
    fn needs_model(&self) -> String {
        let mut flags = Vec::new();
        if self.retriever != RetrieverKind::Bm25 {
            flags.push(format!("--retriever {}", self.retriever));
        }
        if self.vector_store.is_some() {
            flags.push("--vector-store".to_string());
        }
        if self.cache.is_some() {
            flags.push("--cache".to_string());
        }
        let (flags, verb) = match flags.as_slice() {
            [one] => (one.clone(), "needs"),
            [rest @ .., last] => (format!("{} and {last}", rest.join(", ")), "need"),
            [] => ("this command".to_string(), "needs"),
        };
        format!(
            "{flags} {verb} --embedder MODEL, the embedding model (a bi-encoder such as \
             all-MiniLM-L6-v2: `scripts/fetch_models.sh` fetches it)"
        )
    }

    /// A pipeline builder with the retriever, reranker, embedder and cache these flags ask
    /// for.
    pub fn builder(&self) -> CliResult<PipelineBuilder> {
        self.models.check()?;
        let wants_embedder = self.retriever != RetrieverKind::Bm25 || self.cache.is_some();
        let embedder = if wants_embedder {
            Some(self.embedder()?)
        } else {
            None
        };
        let mut builder =
            rerank::Pipeline::builder().retriever(self.retriever_box(embedder.clone())?);
        if let Some(dir) = &self.reranker {
            builder = builder.reranker(load_reranker(dir, &self.models)?);
        }
        if let Some(embedder) = embedder {
            builder = builder.embedder(embedder);
        }
        if let Some(url) = &self.cache {
            builder = builder.cache(redis_cache(url)?);
        }
        Ok(builder)
    }

    fn retriever_box(&self, embedder: Option<Arc<dyn Embedder>>) -> CliResult<Box<dyn Retriever>> {
        let kind = self.retriever;
        let docs = match &self.corpus {
            Some(path) => {
                // One document per id: a corpus that repeats one would lose all but its last
                // line, silently.
                let docs = crate::flags::read_corpus(path)?;
                let refusal = "each line needs an id of its own (`rerank index --duplicates \
                               first|last` keeps one line of each in a store)";
                Some(crate::index::dedupe(docs, Duplicates::Refuse, path, refusal)?.0)
            }
            None => None,
        };
        // Searching only reads: the store opens read-only (a missing or empty file is refused
        // and left as it is; a store on read-only media is searched).
        let store = match &self.db {
            Some(db) => Some(Arc::new(Store::open_read_only(db)?)),
            None => None,
        };
        let lexical = || -> CliResult<Box<dyn Retriever>> {
            match (&store, &docs) {
                (Some(store), _) => Ok(Box::new(store.bm25())),
                (None, Some(docs)) => {
                    let index = Bm25Index::new();
                    index.add(docs.clone())?;
                    Ok(Box::new(index))
                }
                (None, None) => Err("give --corpus FILE or --db FILE".into()),
            }
        };
        if kind == RetrieverKind::Bm25 {
            if self.vector_store.is_some() {
                return Err(
                    "--vector-store is the dense side: use --retriever dense or hybrid".into(),
                );
            }
            return lexical();
        }
        let embedder = embedder.ok_or_else(|| self.needs_model())?;
        let dense: Box<dyn Retriever> = match (&self.vector_store, &store, &docs) {
            (Some(uri), _, _) => {
                let visible = Duration::from_secs(60);
                milvus_dense(uri, embedder, docs.as_deref(), true, visible)?.0
            }
            (None, Some(store), _) => Box::new(store.dense(embedder)?),
            (None, None, Some(docs)) => {
                let index = DenseIndex::with_storage(embedder, self.vector_storage);
                index.add(docs.clone())?;
                Box::new(index)
            }
            (None, None, None) => unreachable!("clap requires --corpus or --db"),
        };
        Ok(match kind {
            RetrieverKind::Dense => dense,
            RetrieverKind::Bm25 | RetrieverKind::Hybrid => Box::new(
                Hybrid::new(Fusion::Rrf { k: 60.0 })
                    .with(lexical()?, 1.0)
                    .with(dense, 1.0)
                    .depth(100),
            ),
        })
    }
}

/// The reranker `model` names (a cross-encoder, Qwen3-Reranker or a bi-encoder), run as
/// `--threads`, `--precision` and `--device` say.
#[cfg(feature = "models")]
fn load_reranker(model: &Path, flags: &ModelArgs) -> CliResult<Box<dyn rerank::Reranker>> {
    Ok(rerank::rerankers::load_reranker(model, &flags.options()?)?)
}

/// Without the `models` feature there is no model reranker.
#[cfg(not(feature = "models"))]
fn load_reranker(dir: &Path, _flags: &ModelArgs) -> CliResult<Box<dyn rerank::Reranker>> {
    Err(format!("{}: rerankers need the `models` feature", dir.display()).into())
}

/// The response cache shared through Redis at `url`.
#[cfg(feature = "redis")]
pub fn redis_cache(url: &str) -> CliResult<rerank::SemanticCache<rerank::SearchResponse>> {
    Ok(rerank::SemanticCache::builder()
        .store(redis_store(url)?)
        .build()?)
}

/// The store of the response cache shared through Redis at `url` (not connected yet).
#[cfg(feature = "redis")]
pub fn redis_store(url: &str) -> CliResult<rerank::cache::RedisCacheStore<rerank::SearchResponse>> {
    if !url.starts_with("redis://") {
        // The URL is not echoed: it may hold a password.
        return Err("--cache expects redis://[USER:PASSWORD@]HOST:PORT[/DB]".into());
    }
    // A second at most, once, for a Redis that is down (later calls skip it for a while); a
    // working one answers in well under a millisecond, and 200 ms turned a loaded machine's
    // late wake-up into "unreachable".
    Ok(rerank::cache::RedisCacheStore::builder(url)
        .timeout(Duration::from_secs(1))
        .build()?)
}

/// Without the `redis` feature there is no shared cache.
#[cfg(not(feature = "redis"))]
pub fn redis_cache(url: &str) -> CliResult<rerank::SemanticCache<rerank::SearchResponse>> {
    Err(format!("--cache {url}: needs the `redis` feature").into())
}
