//! Embedding reranking from stored vectors: SciFact, BM25 (k1 0.9, b 0.4) top 1000, the top 20
//! of each of the 300 test queries rescored by all-MiniLM-L6-v2 cosine, as `rerank beir
//! --retriever bm25 --reranker DIR --rerank-depth 20` does (the 20 put first by cosine, the
//! rest in BM25 order), with the corpus embedded once into a [`DenseIndex`] and the reranker
//! reading the candidates' vectors from it ([`EmbeddingReranker::with_vectors`]): only the
//! queries are embedded. `--baseline` also runs the reranker without stored vectors (every
//! candidate embedded with its query, as before), for the same nDCG@10 and the time ratio.
//!
//! ```text
//! cargo bench --bench rerank_stored_vectors -- [--baseline] [--threads N]
//! ```
//! Reads `../shared/datasets/scifact` and `$RERANK_MODELS_DIR/all-MiniLM-L6-v2`; prints one
//! JSON line (nDCG@10 of BM25 alone and reranked, embedding and rerank seconds).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;
use rerank::embed::BertEmbedder;
use rerank::eval::{BeirDataset, Evaluator, Run};
use rerank::rerankers::{EmbeddingReranker, RerankQuery};
use rerank::{Bm25Index, DenseIndex, Embedder, Hit, Reranker};

const DEPTH: usize = 1000;
const RERANK_DEPTH: usize = 20;

fn ndcg10(queries: &[(String, String)], hits: &[Vec<Hit>], data: &BeirDataset) -> f64 {
    let run: Run = queries
        .iter()
        .zip(hits)
        .map(|((id, _), hits)| {
            let scored = hits
                .iter()
                .map(|h| (h.id().to_string(), f64::from(h.score)))
                .collect();
            (id.clone(), scored)
        })
        .collect();
    let eval = Evaluator::from_names(&["ndcg@10"])
        .expect("metric")
        .evaluate(&run, &data.qrels);
    eval.means()
        .into_iter()
        .find(|(n, _)| n == "ndcg@10")
        .map_or(f64::NAN, |(_, v)| v)
}

/// `rerank beir`'s stage 2: the top `depth` rescored and put first (stable), the rest below;
/// queries in parallel, as `rerank beir` runs them.
fn rerank(reranker: &dyn Reranker, queries: &[(String, String)], hits: &mut [Vec<Hit>]) -> f64 {
    let t = Instant::now();
    queries
        .par_iter()
        .zip(hits.par_iter_mut())
        .for_each(|((_, text), hits)| {
            let n = RERANK_DEPTH.min(hits.len());
            if n == 0 {
                return;
            }
            let texts: Vec<String> = hits[..n].iter().map(|h| h.document.full_text()).collect();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let scores = reranker
                .score(&RerankQuery::new(text.as_str()), &refs)
                .expect("rerank");
            for (hit, score) in hits.iter_mut().zip(&scores) {
                hit.score = *score;
            }
            hits[..n].sort_by(|a, b| b.score.total_cmp(&a.score));
            let floor = scores.iter().copied().fold(f32::INFINITY, f32::min);
            for (i, hit) in hits[n..].iter_mut().enumerate() {
                hit.score = floor - 1.0 - i as f32;
            }
        });
    t.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let baseline = args.iter().any(|a| a == "--baseline");
    let threads = args
        .iter()
        .position(|a| a == "--threads")
        .and_then(|i| args.get(i + 1))
        .and_then(|t| t.parse().ok());
    let data_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/datasets/scifact");
    let models = std::env::var_os("RERANK_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/models")));
    let model = models.join("all-MiniLM-L6-v2");
    let (Ok(data), true) = (BeirDataset::load(data_dir), model.exists()) else {
        eprintln!("skipping: needs {data_dir} and {}", model.display());
        return;
    };
    let options = rerank::models::ModelOptions {
        threads,
        ..Default::default()
    };
    let embedder: Arc<dyn Embedder> = Arc::new(
        BertEmbedder::builder(&model)
            .options(options)
            .build()
            .expect("model"),
    );
    let queries: Vec<(String, String)> = data
        .judged_queries()
        .iter()
        .map(|q| (q.id.clone(), q.text.clone()))
        .collect();
    let bm25 = Bm25Index::new();
    bm25.add(data.corpus.clone()).expect("index");
    let hits: Vec<Vec<Hit>> = queries
        .par_iter()
        .map(|(_, q)| bm25.search(q, DEPTH))
        .collect();
    let bm25_ndcg = ndcg10(&queries, &hits, &data);

    let t = Instant::now();
    let texts: Vec<String> = data.corpus.iter().map(|d| d.full_text()).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let vectors = embedder.embed(&refs).expect("embed the corpus");
    let dense = DenseIndex::from_embeddings(embedder.clone(), data.corpus.clone(), vectors)
        .expect("dense index");
    let embed_corpus_seconds = t.elapsed().as_secs_f64();

    let stored = EmbeddingReranker::new(embedder.clone()).with_vectors(dense);
    let mut reranked = hits.clone();
    let rerank_seconds = rerank(&stored, &queries, &mut reranked);
    let mut report = serde_json::json!({
        "dataset": "scifact",
        "queries": queries.len(),
        "rerank_depth": RERANK_DEPTH,
        "bm25_ndcg@10": bm25_ndcg,
        "stored_ndcg@10": ndcg10(&queries, &reranked, &data),
        "stored_rerank_seconds": rerank_seconds,
        "embed_corpus_seconds": embed_corpus_seconds,
    });
    if baseline {
        let plain = EmbeddingReranker::new(embedder.clone());
        let mut reranked = hits.clone();
        let seconds = rerank(&plain, &queries, &mut reranked);
        report["baseline_ndcg@10"] = ndcg10(&queries, &reranked, &data).into();
        report["baseline_rerank_seconds"] = seconds.into();
    }
    println!("{report}");
}
