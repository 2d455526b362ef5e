//! Query latency and memory of stage-1 late interaction (`LateInteractionIndex`: every
//! document's ColBERT token vectors as f16, an exact MaxSim scan) at a given collection size,
//! on synthetic token vectors of the model's width, in one JSON line.
//!
//! ```text
//! RERANK_BENCH_COLBERT_MODEL=DIR RERANK_BENCH_DOCS=100000 cargo bench --bench late_interaction
//! ```
//! Inputs: the ColBERT model (`RERANK_BENCH_COLBERT_MODEL`: its width, and the query encoder),
//! `RERANK_BENCH_DOCS` documents (default 100,000) of `RERANK_BENCH_TOKENS` tokens on average
//! (default 128; each document between half and 1.5 times that), random unit vectors (seeded);
//! `RERANK_BENCH_THREADS` threads (default 2), `RERANK_BENCH_QUERIES` timed searches (default
//! 10, top 100). The line has the bytes of vectors per document and in all, the seconds of
//! each search (query encoding included) and of encoding a query alone.
//!
//! MUVERA: with `RERANK_BENCH_MUVERA=1` the index picks its MaxSim candidates by MUVERA's
//! encodings (`MuveraConfig`'s defaults, or `RERANK_BENCH_MUVERA_REPETITIONS`, `_BITS`,
//! `_PROJECTION`, `_CANDIDATES`). The line adds, over `RERANK_BENCH_RECALL_QUERIES` queries
//! (default 20), the share of the exact top 10 that the candidates' top 10 holds, for the text
//! queries and for queries made of 16 of one document's tokens moved by noise (N(0, 0.05) per
//! value, renormalized), with the share of those whose source document comes first; and the
//! seconds of an exact search for comparison.
//!
//! Real collection: with `RERANK_BENCH_BEIR=DIR` (a BEIR folder, e.g. SciFact) the documents
//! are the collection's, encoded by the model, and the queries its judged test queries; for
//! each `RERANK_BENCH_MUVERA_CANDIDATES` in a comma-separated list (default `100,250,1000`),
//! the line has the share of the exact top 10 that MUVERA's top 10 holds, nDCG@10 of both
//! rankings against the qrels, and the median seconds of a search of each kind.

mod common;

#[cfg(feature = "models")]
fn main() {
    use std::time::Instant;

    use ndarray::Array2;
    use rand::{Rng, SeedableRng};
    use rerank::embed::ColbertEncoder;
    use rerank::models::ModelOptions;
    use rerank::recall::{LateInteractionIndex, Retriever, SearchQuery};
    use rerank::{Document, Role};

    use common::{count, setting as env};
    let Some(model) = env("RERANK_BENCH_COLBERT_MODEL") else {
        eprintln!("set RERANK_BENCH_COLBERT_MODEL; nothing to run");
        return;
    };
    let (docs, tokens) = (
        count("RERANK_BENCH_DOCS", 100_000),
        count("RERANK_BENCH_TOKENS", 128),
    );
    let threads = count("RERANK_BENCH_THREADS", 2);
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .expect("the global pool is set once");
    let options = ModelOptions::default().threads(threads);
    let encoder = ColbertEncoder::builder(&model)
        .options(options)
        .build()
        .expect("the model loads");
    if let Some(dir) = env("RERANK_BENCH_BEIR") {
        beir::run(encoder, &dir, env("RERANK_BENCH_MUVERA_CANDIDATES"));
        return;
    }
    let dim = encoder.dim();
    let mut index = LateInteractionIndex::new(encoder);
    let muvera = env("RERANK_BENCH_MUVERA").is_some_and(|v| v == "1");
    if muvera {
        let d = rerank::recall::MuveraConfig::default();
        let config = rerank::recall::MuveraConfig {
            repetitions: count("RERANK_BENCH_MUVERA_REPETITIONS", d.repetitions),
            simhash_bits: count("RERANK_BENCH_MUVERA_BITS", d.simhash_bits),
            projection: count("RERANK_BENCH_MUVERA_PROJECTION", d.projection),
            candidates: count("RERANK_BENCH_MUVERA_CANDIDATES", d.candidates),
            seed: d.seed,
        };
        index = index.with_muvera(config).expect("valid MUVERA settings");
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let start = Instant::now();
    const BATCH: usize = 10_000;
    for first in (0..docs).step_by(BATCH) {
        let n = BATCH.min(docs - first);
        let mut batch = Vec::with_capacity(n);
        let mut vectors = Vec::with_capacity(n);
        for i in first..first + n {
            let t = rng.random_range(tokens / 2..=tokens * 3 / 2).max(1);
            let mut m = Array2::from_shape_fn((t, dim), |_| rng.random::<f32>() - 0.5);
            for mut row in m.rows_mut() {
                let norm = row.dot(&row).sqrt();
                row.mapv_inplace(|x| x / norm);
            }
            batch.push(Document::new(format!("d{i}"), ""));
            vectors.push(m);
        }
        index.add_encoded(batch, vectors).expect("adds");
    }
    let build_seconds = start.elapsed().as_secs_f64();
    let queries = [
        "what causes antibiotic resistance in bacteria",
        "vitamin d deficiency and bone density",
        "does smoking increase the risk of lung cancer",
        "gene expression in t cells",
        "effects of exercise on blood pressure",
    ];
    let mut search = Vec::new();
    let mut encode = Vec::new();
    for i in 0..count("RERANK_BENCH_QUERIES", 10) {
        let q = queries[i % queries.len()];
        let t = Instant::now();
        let hits = index.retrieve(&SearchQuery::new(q), 100).expect("searches");
        search.push(t.elapsed().as_secs_f64());
        assert_eq!(hits.len(), 100.min(docs));
        let t = Instant::now();
        std::hint::black_box(index.encoder().encode(&[q], Role::Query).expect("encodes"));
        encode.push(t.elapsed().as_secs_f64());
    }
    let per_doc = index.bytes_per_document();
    let mut recall = serde_json::Value::Null;
    if muvera {
        let overlap = |a: &[rerank::Hit], b: &[rerank::Hit]| -> f64 {
            let ids: std::collections::HashSet<&str> =
                b.iter().map(|h| h.document.id.as_str()).collect();
            a.iter()
                .filter(|h| ids.contains(h.document.id.as_str()))
                .count() as f64
                / b.len().max(1) as f64
        };
        let n = count("RERANK_BENCH_RECALL_QUERIES", 20);
        let (mut text_recall, mut noisy_recall, mut found, mut exact_seconds) =
            (0.0, 0.0, 0usize, Vec::new());
        for i in 0..n {
            let q = index
                .encoder()
                .encode(&[queries[i % queries.len()]], Role::Query)
                .expect("encodes")
                .remove(0);
            let t = Instant::now();
            let truth = index.search_vectors_exact(q.view(), 10).expect("searches");
            exact_seconds.push(t.elapsed().as_secs_f64());
            text_recall += overlap(
                &index.search_vectors(q.view(), 10).expect("searches"),
                &truth,
            );
            let source = rng.random_range(0..docs);
            let m = index.vectors(&format!("d{source}")).expect("indexed");
            let mut q = m.slice(ndarray::s![..16.min(m.nrows()), ..]).to_owned();
            q.mapv_inplace(|x| {
                let (u, v): (f32, f32) = (rng.random(), rng.random());
                x + 0.05 * (-2.0 * (1.0 - u).ln()).sqrt() * (std::f32::consts::TAU * v).cos()
            });
            for mut row in q.rows_mut() {
                let norm = row.dot(&row).sqrt();
                row.mapv_inplace(|x| x / norm);
            }
            let truth = index.search_vectors_exact(q.view(), 10).expect("searches");
            let got = index.search_vectors(q.view(), 10).expect("searches");
            noisy_recall += overlap(&got, &truth);
            found += usize::from(got[0].document.id == format!("d{source}"));
        }
        recall = serde_json::json!({
            "config": index.muvera(),
            "text_recall_at_10": text_recall / n as f64,
            "noisy_recall_at_10": noisy_recall / n as f64,
            "noisy_source_first": found as f64 / n as f64,
            "exact_search_seconds": exact_seconds,
        });
    }
    println!(
        "{}",
        serde_json::json!({
            "muvera": recall,
            "impl": "rerank",
            "docs": docs,
            "mean_tokens": tokens,
            "dim": dim,
            "threads": threads,
            "bytes_per_document": per_doc,
            "vector_gib": per_doc * docs as f64 / (1u64 << 30) as f64,
            "build_seconds": build_seconds,
            "search_seconds": search,
            "query_encode_seconds": encode,
        })
    );
}

#[cfg(feature = "models")]
mod beir {
    use std::sync::Arc;
    use std::time::Instant;

    use rerank::embed::ColbertEncoder;
    use rerank::eval::metrics::ndcg_at;
    use rerank::eval::BeirDataset;
    use rerank::recall::{LateInteractionIndex, MuveraConfig};
    use rerank::Role;

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    }

    pub fn run(encoder: ColbertEncoder, dir: &str, candidates: Option<String>) {
        let data = BeirDataset::load(dir).expect("a BEIR folder");
        let encoder = Arc::new(encoder);
        let start = Instant::now();
        let exact = LateInteractionIndex::new(Arc::clone(&encoder));
        exact.add(data.corpus.clone()).expect("encodes the corpus");
        let encode_seconds = start.elapsed().as_secs_f64();
        let queries = data.judged_queries();
        let texts: Vec<&str> = queries.iter().map(|q| q.text.as_str()).collect();
        let encoded = encoder
            .encode(&texts, Role::Query)
            .expect("encodes the queries");
        let ids = |hits: &[rerank::Hit]| -> Vec<String> {
            hits.iter().map(|h| h.document.id.clone()).collect()
        };
        let mut truth = Vec::new();
        let mut exact_seconds = Vec::new();
        for q in &encoded {
            let t = Instant::now();
            truth.push(ids(&exact.search_vectors(q.view(), 10).expect("searches")));
            exact_seconds.push(t.elapsed().as_secs_f64());
        }
        let ndcg = |rankings: &[Vec<String>]| -> f64 {
            queries
                .iter()
                .zip(rankings)
                .map(|(q, r)| data.qrels.get(&q.id).map_or(0.0, |j| ndcg_at(r, j, 10)))
                .sum::<f64>()
                / queries.len().max(1) as f64
        };
        let mut rows = Vec::new();
        let list = candidates.unwrap_or_else(|| "100,250,1000".into());
        for c in list
            .split(',')
            .filter_map(|c| c.trim().parse::<usize>().ok())
        {
            let config = MuveraConfig {
                candidates: c,
                ..MuveraConfig::default()
            };
            let approx = LateInteractionIndex::new(Arc::clone(&encoder))
                .with_muvera(config)
                .expect("valid settings");
            let docs: Vec<rerank::Document> = data.corpus.clone();
            let vectors: Vec<ndarray::Array2<f32>> = docs
                .iter()
                .map(|d| exact.vectors(&d.id).expect("indexed"))
                .collect();
            approx.add_encoded(docs, vectors).expect("adds");
            let mut got = Vec::new();
            let mut seconds = Vec::new();
            for q in &encoded {
                let t = Instant::now();
                got.push(ids(&approx.search_vectors(q.view(), 10).expect("searches")));
                seconds.push(t.elapsed().as_secs_f64());
            }
            let overlap: f64 = got
                .iter()
                .zip(&truth)
                .map(|(g, t)| g.iter().filter(|id| t.contains(id)).count() as f64 / 10.0)
                .sum::<f64>()
                / got.len().max(1) as f64;
            rows.push(serde_json::json!({
                "candidates": c,
                "recall_of_exact_top10": overlap,
                "ndcg_at_10": ndcg(&got),
                "search_seconds_median": median(seconds),
            }));
        }
        println!(
            "{}",
            serde_json::json!({
                "impl": "rerank",
                "collection": dir,
                "documents": data.corpus.len(),
                "queries": queries.len(),
                "corpus_encode_seconds": encode_seconds,
                "bytes_per_document": exact.bytes_per_document(),
                "exact_ndcg_at_10": ndcg(&truth),
                "exact_search_seconds_median": median(exact_seconds),
                "muvera": MuveraConfig::default(),
                "rows": rows,
            })
        );
    }
}

#[cfg(not(feature = "models"))]
fn main() {
    eprintln!("the late_interaction bench needs the `models` feature");
}
