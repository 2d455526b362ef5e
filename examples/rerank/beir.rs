//! `rerank beir`: evaluate retrieval on a BEIR-layout collection.
//!
//! ```text
//! cargo run --release --example rerank -- beir --data DIR --retriever bm25 [--k1 F] [--b F] \
//!     [--split test] [--depth 1000] --json
//! cargo run --release --example rerank -- beir --data DIR --retriever dense|hybrid \
//!     --embedder models/all-MiniLM-L6-v2 [--rrf-k 60] [--threads N] --json
//! cargo run --release --example rerank -- beir --data DIR --retriever bm25 \
//!     --reranker models/ce-minilm [--rerank-depth 100] [--threads N] --json
//! ```
//! `dense` embeds the corpus (`title + " " + text`) and the queries with the embedding model
//! `--embedder` and ranks by cosine; `hybrid` fuses BM25 and dense by reciprocal rank
//! (`1 / (rrf_k + rank)`, equal weights), each list `--depth` deep. Embedding the corpus counts
//! in `index_seconds`, embedding the queries in `search_seconds`.
//!
//! `--reranker MODEL` adds stage 2: the top `--rerank-depth` hits of every query are rescored
//! by that model (chosen by its `config.json`: a cross-encoder, Qwen3-Reranker, or embedding
//! cosine for a bi-encoder) and put first in that order; the hits below keep their
//! stage-1 order. Queries are reranked one after the other, each as one batched call, timed as
//! `rerank_seconds`.
//! Loads the collection, builds the stage-1 retriever (timed as `index_seconds`), runs every
//! judged query in parallel down to `--depth` (timed as `search_seconds`) and evaluates the run
//! with trec_eval conventions. `seconds` = index + search + rerank; loading the files is not counted.
//! `peak_rss_mb` is the process's peak resident memory (Linux `VmHWM`; null elsewhere).
//!
//! With `--vector-store milvus://HOST:PORT/COLLECTION` (feature `milvus`) the dense side is a
//! Milvus collection: the corpus documents it lacks are embedded and written first (counted in
//! `index_seconds`; a second run embeds nothing), then every query searches it.
//!
//! With `--db FILE` the collection is upserted into an SQLite store first (a second run over
//! the same file analyzes and embeds nothing) and recall reads the file; `indexed` in the JSON
//! says what the upsert did.
//!
//! To add a retriever: a variant in [`RetrieverKind`] and an arm in [`build_retriever`].
//! Stage 2 is [`rerank_run`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;
use rerank::eval::{trec_order, BeirDataset, BeirQuery, Evaluation, Evaluator, Run};
use rerank::recall::{Bm25Params, Fusion, SearchQuery, VectorStorage};
use rerank::rerankers::RerankQuery;
use rerank::{Bm25Index, DenseIndex, Document, Embedder, Hit, Hybrid, Reranker, Retriever};

use crate::recall::RetrieverKind;
use crate::CliResult;

/// Metrics reported, in this order.
const METRICS: [&str; 9] = [
    "ndcg@10",
    "ndcg@100",
    "map@100",
    "map@1000",
    "recall@10",
    "recall@100",
    "recall@1000",
    "mrr@10",
    "p@10",
];

#[derive(clap::Args)]
pub struct Args {
    /// The collection folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv).
    #[arg(long, value_name = "DIR")]
    data: PathBuf,
    /// Stage-1 retriever: bm25, dense (`vector` is an alias) or hybrid (BM25 + dense,
    /// reciprocal rank fusion).
    #[arg(long, value_enum, ignore_case = true, default_value_t = RetrieverKind::Bm25)]
    retriever: RetrieverKind,
    /// The embedding model of dense and hybrid (e.g. models/all-MiniLM-L6-v2: a directory, a
    /// folder name under $RERANK_MODELS_DIR, or a hub id).
    #[arg(long, value_name = "MODEL", alias = "model")]
    embedder: Option<PathBuf>,
    /// Embed through an OpenAI-compatible `/embeddings` API at this root instead of
    /// --embedder (e.g. `http://127.0.0.1:8080/v1`, a `rerank serve`; feature `http`), with
    /// `OPENAI_API_KEY` if set.
    #[arg(long, value_name = "URL", conflicts_with = "embedder")]
    embedder_url: Option<String>,
    /// RRF damping constant for hybrid.
    #[arg(long, value_name = "K", default_value_t = 60.0)]
    rrf_k: f32,
    /// Stage 2: rerank each query's top hits with this reranker (a cross-encoder,
    /// Qwen3-Reranker or a bi-encoder: a directory, a folder name under $RERANK_MODELS_DIR, or
    /// a hub id).
    #[arg(long, value_name = "MODEL")]
    reranker: Option<PathBuf>,
    /// Hits per query rescored by --reranker.
    #[arg(long, value_name = "N", default_value_t = 100)]
    rerank_depth: usize,
    #[command(flatten)]
    models: crate::flags::ModelArgs,
    /// BM25 term-frequency saturation.
    #[arg(long, default_value_t = 0.9, allow_negative_numbers = true)]
    k1: f64,
    /// BM25 length normalization.
    #[arg(long, default_value_t = 0.4, allow_negative_numbers = true)]
    b: f64,
    /// The qrels split to evaluate (qrels/<split>.tsv).
    #[arg(long, value_name = "SPLIT", default_value = "test")]
    split: String,
    /// Hits retrieved per query.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    depth: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write the run to this file in TREC format (`qid Q0 docid rank score tag`).
    #[arg(long, value_name = "FILE")]
    save_run: Option<PathBuf>,
    /// Recall from this SQLite store instead of memory: the collection is upserted into it
    /// first (only what is missing is analyzed and embedded), then every query is answered
    /// from the file (BM25 k1 0.9, b 0.4).
    #[arg(long, value_name = "FILE")]
    db: Option<PathBuf>,
    /// The dense side of dense and hybrid recall from Milvus: milvus://HOST:PORT/COLLECTION.
    /// Corpus documents the collection lacks (all of them the first time) are embedded and
    /// written first; the hybrid's BM25 side stays in memory.
    #[arg(long, value_name = "URL", conflicts_with = "db")]
    vector_store: Option<String>,
    /// What the in-memory dense index scans: f32 (exact), f16 or int8 (a compact copy, the
    /// best depth x rescore rescored in f32; f16:R or int8:R sets rescore R).
    #[arg(long, default_value = "f32", value_name = "f32|f16|int8")]
    vector_storage: VectorStorage,
    #[command(flatten)]
    log: crate::flags::LogArgs,
}

/// The stage-1 retriever chosen by `args`, and the embedder for its queries (dense, hybrid).
struct Stage1 {
    retriever: Box<dyn Retriever>,
    embedder: Option<Arc<dyn Embedder>>,
    /// What indexing into the store did (with `--db`).
    indexed: Option<rerank::store::UpsertReport>,
}

fn build_bm25(args: &Args, corpus: Vec<Document>) -> CliResult<Bm25Index> {
    let index = Bm25Index::with_params(Bm25Params {
        k1: args.k1 as f32,
        b: args.b as f32,
    })?;
    index.add(corpus)?;
    Ok(index)
}

/// Builds and fills the stage-1 retriever chosen by `args`.
fn build_retriever(args: &Args, corpus: Vec<Document>) -> CliResult<Stage1> {
    match args.retriever {
        RetrieverKind::Bm25 => Ok(Stage1 {
            retriever: Box::new(build_bm25(args, corpus)?),
            embedder: None,
            indexed: None,
        }),
        RetrieverKind::Dense => {
            let embedder = load_embedder(args)?;
            let dense = dense_side(args, embedder.clone(), corpus)?;
            Ok(Stage1 {
                retriever: dense,
                embedder: Some(embedder),
                indexed: None,
            })
        }
        RetrieverKind::Hybrid => {
            if !(args.rrf_k.is_finite() && args.rrf_k > 0.0) {
                return Err(format!("--rrf-k must be > 0, got {}", args.rrf_k).into());
            }
            let embedder = load_embedder(args)?;
            let dense = dense_side(args, embedder.clone(), corpus.clone())?;
            let bm25 = build_bm25(args, corpus)?;
            let hybrid = Hybrid::new(Fusion::Rrf { k: args.rrf_k })
                .with(bm25, 1.0)
                .with(dense, 1.0)
                .depth(args.depth);
            Ok(Stage1 {
                retriever: Box::new(hybrid),
                embedder: Some(embedder),
                indexed: None,
            })
        }
    }
}

/// Upserts the collection into the store at `path` and recalls from it.
fn build_from_store(args: &Args, path: &Path, corpus: Vec<Document>) -> CliResult<Stage1> {
    if args.k1 != 0.9 || args.b != 0.4 {
        return Err("--db scores BM25 with k1 0.9 and b 0.4; drop --k1 / --b".into());
    }
    let store = Arc::new(rerank::Store::open(path)?);
    let embedder = match args.retriever {
        RetrieverKind::Bm25 => None,
        RetrieverKind::Dense | RetrieverKind::Hybrid => Some(load_embedder(args)?),
    };
    let indexed = match &embedder {
        Some(e) => store.upsert_embedded(corpus, e.as_ref())?,
        None => store.upsert(corpus)?,
    };
    let retriever: Box<dyn Retriever> = match (args.retriever, &embedder) {
        (RetrieverKind::Dense, Some(e)) => Box::new(store.dense(e.clone())?),
        (RetrieverKind::Hybrid, Some(e)) => Box::new(
            Hybrid::new(Fusion::Rrf { k: args.rrf_k })
                .with(store.bm25(), 1.0)
                .with(store.dense(e.clone())?, 1.0)
                .depth(args.depth),
        ),
        _ => Box::new(store.bm25()),
    };
    Ok(Stage1 {
        retriever,
        embedder,
        indexed: Some(indexed),
    })
}

/// The dense retriever: in memory, or the Milvus collection of `--vector-store` (filled with
/// what it lacks).
fn dense_side(
    args: &Args,
    embedder: Arc<dyn Embedder>,
    corpus: Vec<Document>,
) -> CliResult<Box<dyn Retriever>> {
    let Some(uri) = &args.vector_store else {
        let index = build_dense(embedder, corpus)?;
        index.set_storage(args.vector_storage);
        return Ok(Box::new(index));
    };
    from_milvus(uri, embedder, corpus)
}

/// The Milvus collection of `uri`, filled with what it lacks of `corpus`.
fn from_milvus(
    uri: &str,
    embedder: Arc<dyn Embedder>,
    corpus: Vec<Document>,
) -> CliResult<Box<dyn Retriever>> {
    // Hits carry ids only; the documents come from the corpus in memory (faster replies).
    let visible = std::time::Duration::from_secs(120);
    let (milvus, written) =
        crate::recall::milvus_dense(uri, embedder, Some(&corpus), false, visible)?;
    eprintln!(
        "milvus {uri}: wrote {written} of {} documents",
        corpus.len()
    );
    let docs = corpus
        .into_iter()
        .map(|d| (d.id.clone(), Arc::new(d)))
        .collect();
    Ok(Box::new(WithCorpusDocs {
        inner: milvus,
        docs,
    }))
}

/// A retriever whose hits get their documents from the corpus by id.
struct WithCorpusDocs<R> {
    inner: R,
    docs: std::collections::HashMap<String, Arc<Document>>,
}

impl<R: Retriever> Retriever for WithCorpusDocs<R> {
    fn retrieve(&self, query: &SearchQuery, k: usize) -> rerank::Result<Vec<Hit>> {
        let mut hits = self.inner.retrieve(query, k)?;
        for h in &mut hits {
            if let Some(doc) = self.docs.get(h.id()) {
                h.document = doc.clone();
            }
        }
        Ok(hits)
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
}

/// Embeds the whole corpus in one call (so the embedder can batch by length), then indexes it.
fn build_dense(embedder: Arc<dyn Embedder>, corpus: Vec<Document>) -> CliResult<DenseIndex> {
    let texts: Vec<String> = corpus.iter().map(Document::full_text).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let embeddings = embedder.embed(&refs)?;
    Ok(DenseIndex::from_embeddings(embedder, corpus, embeddings)?)
}

/// The embedding model `--embedder` names (dense and hybrid).
fn load_embedder(args: &Args) -> CliResult<Arc<dyn Embedder>> {
    match (&args.embedder, &args.embedder_url) {
        (Some(model), _) => crate::embed::load_embedder(model, &args.models),
        (None, Some(url)) => remote_embedder(url),
        (None, None) => Err(format!(
            "--retriever {} needs --embedder MODEL or --embedder-url URL",
            args.retriever
        )
        .into()),
    }
}

/// An `OpenAiEmbedder` on the API at `url`.
#[cfg(feature = "http")]
fn remote_embedder(url: &str) -> CliResult<Arc<dyn Embedder>> {
    let embedder = rerank::embed::OpenAiEmbedder::builder()
        .base_url(url)
        .model("embedder")
        .api_key_env("OPENAI_API_KEY")
        .batch_size(256)
        .build()?;
    Ok(Arc::new(embedder))
}

#[cfg(not(feature = "http"))]
fn remote_embedder(url: &str) -> CliResult<Arc<dyn Embedder>> {
    Err(format!("--embedder-url {url}: needs the `http` feature of rerank").into())
}

/// The queries to run: text, plus the query embedding when the retriever is dense or hybrid
/// (all queries embedded in one call).
fn search_queries(
    queries: &[&BeirQuery],
    embedder: Option<&Arc<dyn Embedder>>,
) -> CliResult<Vec<SearchQuery>> {
    let plain = queries.iter().map(|q| SearchQuery::new(q.text.as_str()));
    let Some(embedder) = embedder else {
        return Ok(plain.collect());
    };
    let texts: Vec<&str> = queries.iter().map(|q| q.text.as_str()).collect();
    let embeddings = embedder.embed_queries(&texts)?;
    Ok(plain
        .zip(embeddings.rows())
        .map(|(q, e)| q.with_embedding(e.to_vec()))
        .collect())
}

/// Runs every query through `retriever` (in parallel): the hits of each query, in order.
fn run_queries(
    retriever: &dyn Retriever,
    search: &[SearchQuery],
    depth: usize,
) -> CliResult<Vec<Vec<Hit>>> {
    Ok(search
        .par_iter()
        .map(|search| retriever.retrieve(search, depth))
        .collect::<rerank::Result<_>>()?)
}

/// Stage 2: rescores the top `depth` hits of each query with `reranker` and puts them first,
/// best first; the hits below keep their stage-1 order, scored below every reranked hit.
/// Queries are reranked in parallel (a short query alone leaves most of a model's threads
/// idle).
fn rerank_run(
    reranker: &dyn Reranker,
    queries: &[&BeirQuery],
    hits: &mut [Vec<Hit>],
    depth: usize,
) -> CliResult {
    queries
        .par_iter()
        .zip(hits.par_iter_mut())
        .try_for_each(|(query, hits)| rerank_hits(reranker, query, hits, depth))
        .map_err(Into::into)
}

/// [`rerank_run`] for one query.
fn rerank_hits(
    reranker: &dyn Reranker,
    query: &BeirQuery,
    hits: &mut [Hit],
    depth: usize,
) -> Result<(), String> {
    let n = depth.min(hits.len());
    if n == 0 {
        return Ok(());
    }
    let texts: Vec<String> = hits[..n].iter().map(|h| h.document.full_text()).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let scores = reranker
        .score(&RerankQuery::new(query.text.as_str()), &refs)
        .map_err(|e| e.to_string())?;
    if scores.len() != n {
        let got = scores.len();
        return Err(format!(
            "the reranker returned {got} scores for {n} documents"
        ));
    }
    for (hit, score) in hits.iter_mut().zip(&scores) {
        hit.score = *score;
    }
    // Stable: equal scores keep the stage-1 order.
    hits[..n].sort_by(|a, b| b.score.total_cmp(&a.score));
    let floor = scores.iter().copied().fold(f32::INFINITY, f32::min);
    for (i, hit) in hits[n..].iter_mut().enumerate() {
        hit.score = floor - 1.0 - i as f32;
    }
    Ok(())
}

/// The run to evaluate: each query's hits as (doc id, score).
fn to_run(queries: &[&BeirQuery], hits: &[Vec<Hit>]) -> Run {
    queries
        .iter()
        .zip(hits)
        .map(|(q, hits)| {
            let scored = hits
                .iter()
                .map(|h| (h.id().to_string(), f64::from(h.score)))
                .collect();
            (q.id.clone(), scored)
        })
        .collect()
}

#[cfg(feature = "models")]
fn load_reranker(args: &Args) -> CliResult<Option<Box<dyn Reranker>>> {
    match &args.reranker {
        Some(model) => {
            let options = args.models.options()?;
            Ok(Some(rerank::rerankers::load_reranker(model, &options)?))
        }
        None => Ok(None),
    }
}

#[cfg(not(feature = "models"))]
fn load_reranker(args: &Args) -> CliResult<Option<Box<dyn Reranker>>> {
    match &args.reranker {
        Some(_) => Err("--reranker needs the `models` feature of rerank".into()),
        None => Ok(None),
    }
}

pub fn run(args: Args) -> CliResult {
    args.log.init()?;
    args.models.check()?;
    if args.depth == 0 {
        return Err("--depth must be at least 1".into());
    }
    if args.reranker.is_some() && args.rerank_depth == 0 {
        return Err("--rerank-depth must be at least 1".into());
    }
    let reranker = load_reranker(&args)?;
    let t = Instant::now();
    let mut data = BeirDataset::load_split(&args.data, &args.split)?;
    let load_seconds = t.elapsed().as_secs_f64();
    let docs = data.corpus.len();
    if data.qrels.is_empty() {
        return Err(format!("no judgment in split {:?}", args.split).into());
    }

    let t = Instant::now();
    let corpus = std::mem::take(&mut data.corpus);
    let stage1 = match &args.db {
        Some(path) => build_from_store(&args, path, corpus)?,
        None => build_retriever(&args, corpus)?,
    };
    let index_seconds = t.elapsed().as_secs_f64();

    // the loader guarantees that every judged query has a text
    let queries = data.judged_queries();

    let t = Instant::now();
    let search = search_queries(&queries, stage1.embedder.as_ref())?;
    let mut hits = run_queries(stage1.retriever.as_ref(), &search, args.depth)?;
    let search_seconds = t.elapsed().as_secs_f64();

    let t = Instant::now();
    if let Some(reranker) = &reranker {
        rerank_run(reranker.as_ref(), &queries, &mut hits, args.rerank_depth)?;
    }
    let rerank_seconds = t.elapsed().as_secs_f64();
    let run = to_run(&queries, &hits);

    if let Some(path) = &args.save_run {
        let tag = match &args.reranker {
            Some(_) => format!("{}+rerank", args.retriever),
            None => args.retriever.to_string(),
        };
        write_trec_run(path, &run, &tag)?;
    }
    let evaluation = Evaluator::from_names(&METRICS)?.evaluate(&run, &data.qrels);
    let report = Report {
        args: &args,
        docs,
        evaluation: &evaluation,
        load_seconds,
        index_seconds,
        search_seconds,
        rerank_seconds,
        indexed: stage1.indexed,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report.json())?);
    } else {
        report.print_table();
    }
    Ok(())
}

/// Writes `run` as a TREC run file, queries sorted by id, hits in trec_eval order.
fn write_trec_run(path: &Path, run: &Run, tag: &str) -> CliResult {
    let mut out = String::new();
    let mut ids: Vec<&String> = run.keys().collect();
    ids.sort();
    for qid in ids {
        let mut hits = run[qid].clone();
        trec_order(&mut hits);
        for (rank, (doc, score)) in hits.iter().enumerate() {
            out.push_str(&format!("{qid} Q0 {doc} {} {score} {tag}\n", rank + 1));
        }
    }
    std::fs::write(path, out).map_err(|e| rerank::Error::io(path, e))?;
    Ok(())
}

/// The process's peak resident memory in MiB (`VmHWM` of `/proc/self/status`; `None` where
/// there is no such file).
fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    let kb: f64 = kb.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb / 1024.0)
}

struct Report<'a> {
    args: &'a Args,
    docs: usize,
    evaluation: &'a Evaluation,
    load_seconds: f64,
    index_seconds: f64,
    search_seconds: f64,
    rerank_seconds: f64,
    indexed: Option<rerank::store::UpsertReport>,
}

impl Report<'_> {
    fn json(&self) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        for (name, value) in self.evaluation.means() {
            out.insert(name, value.into());
        }
        let dataset = self
            .args
            .data
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        let extra = serde_json::json!({
            "dataset": dataset,
            "split": self.args.split,
            "retriever": self.args.retriever.to_string(),
            "model": self.args.embedder,
            "embedder_url": self.args.embedder_url,
            "rrf_k": (self.args.retriever == RetrieverKind::Hybrid).then_some(self.args.rrf_k),
            "k1": self.args.k1,
            "b": self.args.b,
            "depth": self.args.depth,
            "reranker": self.args.reranker,
            "rerank_depth": self.args.reranker.as_ref().map(|_| self.args.rerank_depth),
            "docs": self.docs,
            "queries": self.evaluation.queries(),
            "load_seconds": self.load_seconds,
            "index_seconds": self.index_seconds,
            "search_seconds": self.search_seconds,
            "rerank_seconds": self.rerank_seconds,
            "seconds": self.index_seconds + self.search_seconds + self.rerank_seconds,
            "peak_rss_mb": peak_rss_mb(),
            "db": self.args.db,
            "indexed": self.indexed,
        });
        if let serde_json::Value::Object(extra) = extra {
            out.extend(extra);
        }
        serde_json::Value::Object(out)
    }

    fn print_table(&self) {
        let a = self.args;
        println!(
            "{} | retriever {} (k1 {}, b {}) | split {} | {} docs | {} queries | depth {}",
            a.data.display(),
            a.retriever,
            a.k1,
            a.b,
            a.split,
            self.docs,
            self.evaluation.queries(),
            a.depth
        );
        match (a.retriever, &a.embedder) {
            (RetrieverKind::Dense, Some(model)) => println!("  embedder {}", model.display()),
            (RetrieverKind::Hybrid, Some(model)) => {
                println!("  embedder {} | rrf k {}", model.display(), a.rrf_k)
            }
            _ => {}
        }
        if let Some(reranker) = &a.reranker {
            println!(
                "  reranker {} | rerank depth {} | {:.3} s",
                reranker.display(),
                a.rerank_depth,
                self.rerank_seconds
            );
        }
        for (name, value) in self.evaluation.means() {
            println!("  {name:<12} {value:.4}");
        }
        println!(
            "  index {:.3} s, search {:.3} s ({:.0} queries/s), load {:.3} s",
            self.index_seconds,
            self.search_seconds,
            self.evaluation.queries() as f64 / self.search_seconds.max(1e-9),
            self.load_seconds
        );
    }
}
