//! ColBERT against PyLate 1.6 (sentence-transformers 5.3, transformers 5.3) on the tiny random
//! models of tests/fixtures/colbert_tiny (made by the make.py there; reference.py is the
//! encoding spelled out in float64):
//! - every case (PyLate's layout on BERT with and without attended expansion tokens and a
//!   biased Dense, on ModernBERT with `[Q] `/`[D] ` prefixes and sliding layers, and Stanford's
//!   colbertv2.0 layout) through `ColbertEncoder`: the token ids PyLate fed the model, and per
//!   token vector cosine >= 0.99999, one text at a time and batched; MaxSim of every query and
//!   document within 1e-5 of `pylate.scores.colbert_scores`;
//! - the empty text, punctuation only, over-long queries and documents, a literal `[MASK]`;
//! - layouts the crate cannot reproduce are refused naming the file and the key.
#![cfg(feature = "models")]

use std::path::{Path, PathBuf};

use ndarray::Array2;
use rerank::embed::{maxsim, ColbertEncoder};
use rerank::models::ModelOptions;
use rerank::Role;
use serde_json::Value;

const CASES: [&str; 4] = ["bert", "bert_attend", "modernbert", "stanford"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/colbert_tiny")
}

fn expected() -> Value {
    let text = std::fs::read_to_string(root().join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn load(dir: &Path) -> ColbertEncoder {
    ColbertEncoder::builder(dir)
        .options(ModelOptions::default().threads(2))
        .build()
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

fn matrix(v: &Value) -> Vec<Vec<f32>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect()
}

/// The smallest per-token cosine between `got` and `want` (which must have as many rows).
fn smallest_cosine(name: &str, got: &Array2<f32>, want: &[Vec<f32>]) -> f64 {
    assert_eq!(got.nrows(), want.len(), "{name}: token count");
    let mut worst = 1.0f64;
    for (g, w) in got.rows().into_iter().zip(want) {
        let dot: f64 = g.iter().zip(w).map(|(a, b)| *a as f64 * *b as f64).sum();
        let ng: f64 = g.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
        let nw: f64 = w.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
        worst = worst.min(dot / (ng * nw));
    }
    worst
}

#[test]
fn every_colbert_case_matches_pylate_single_and_batched() {
    let expected = expected();
    let cases: Vec<&str> = expected
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(cases, CASES);
    for case in CASES {
        let want = &expected[case];
        let encoder = load(&root().join(case));
        assert_eq!(encoder.layout(), want["layout"].as_str().unwrap(), "{case}");
        assert_eq!(
            encoder.dim() as u64,
            want["dim"].as_u64().unwrap(),
            "{case}"
        );
        assert_eq!(
            encoder.query_length() as u64,
            want["query_length"].as_u64().unwrap()
        );
        let mut worst = 1.0f64;
        let mut encoded = Vec::new();
        for (role, key) in [(Role::Query, "queries"), (Role::Document, "documents")] {
            let items = want[key].as_array().unwrap();
            let texts: Vec<&str> = items.iter().map(|t| t["text"].as_str().unwrap()).collect();
            let batched = encoder.encode(&texts, role).unwrap();
            for (i, item) in items.iter().enumerate() {
                let name = format!("{case} {key}[{i}] {:?}", texts[i]);
                let (got_ids, keys) = encoder.token_ids(texts[i], role).unwrap();
                assert_eq!(
                    got_ids,
                    crate::common::u32s(&item["ids"]),
                    "{name}: token ids"
                );
                let attended = crate::common::u32s(&item["attention_mask"])
                    .iter()
                    .sum::<u32>() as usize;
                assert_eq!(keys, attended, "{name}: attended tokens");
                let single = encoder.encode(&texts[i..=i], role).unwrap().remove(0);
                for (got, want_key) in [(&single, "vectors"), (&batched[i], "vectors_batched")] {
                    let cos = smallest_cosine(&name, got, &matrix(&item[want_key]));
                    assert!(cos >= 0.99999, "{name} ({want_key}): cosine {cos}");
                    worst = worst.min(cos);
                }
            }
            encoded.push(batched);
        }
        let scores = want["scores"].as_array().unwrap();
        let mut score_error = 0f64;
        for (qi, row) in scores.iter().enumerate() {
            for (di, s) in row.as_array().unwrap().iter().enumerate() {
                let got = maxsim(encoded[0][qi].view(), encoded[1][di].view()) as f64;
                score_error = score_error.max((got - s.as_f64().unwrap()).abs());
            }
        }
        println!(
            "{case}: smallest token cosine {worst:.9} (1 - cos = {:.1e}), MaxSim max |error| \
             {score_error:.1e}",
            1.0 - worst
        );
        assert!(score_error < 1e-5, "{case}: MaxSim error {score_error}");
    }
}

/// A scratch copy of a case, with `edit` applied to one of its JSON files.
fn edited(case: &str, file: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir =
        std::env::temp_dir().join(format!("rerank-colbert-{}-{case}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    crate::common::copy_dir(&root().join(case), &dir);
    let path = dir.join(file);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, v.to_string()).unwrap();
    dir
}

#[test]
fn layouts_the_crate_cannot_reproduce_are_refused_naming_file_and_key() {
    let st = "config_sentence_transformers.json";
    let cases: Vec<(PathBuf, &str)> = vec![
        (
            edited("bert", st, |v| v["query_prefix"] = "[nope]".into()),
            "query_prefix",
        ),
        (
            edited("bert", st, |v| v["similarity_fn_name"] = "cosine".into()),
            "similarity_fn_name",
        ),
        (
            edited("bert", st, |v| {
                v.as_object_mut().unwrap().remove("document_length");
            }),
            "document_length",
        ),
        (
            edited("bert", "1_Dense/config.json", |v| {
                v["use_residual"] = true.into()
            }),
            "use_residual",
        ),
        (
            edited("bert", "1_Dense/config.json", |v| {
                v["activation_function"] = "torch.nn.modules.activation.ReLU".into()
            }),
            "activation_function",
        ),
        (
            edited("bert", "modules.json", |v| {
                v.as_array_mut().unwrap().push(serde_json::json!({
                    "idx": 2, "name": "2", "path": "2_Normalize",
                    "type": "sentence_transformers.models.Normalize"}))
            }),
            "modules.json",
        ),
        (
            edited("stanford", "artifact.metadata", |v| {
                v["similarity"] = "l2".into()
            }),
            "similarity",
        ),
        (
            edited("stanford", "artifact.metadata", |v| v["dim"] = 8.into()),
            "linear.weight",
        ),
    ];
    for (dir, needle) in cases {
        let e = ColbertEncoder::from_dir(&dir).unwrap_err().to_string();
        assert!(e.contains(needle), "{}: {e}", dir.display());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn builder_lengths_are_checked_and_change_the_query_shape() {
    let dir = root().join("bert");
    let e = ColbertEncoder::builder(&dir)
        .query_length(2)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("query_length 2"), "{e}");
    let e = ColbertEncoder::builder(&dir)
        .document_length(100_000)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("document_length 100000"), "{e}");
    let longer = ColbertEncoder::builder(&dir)
        .query_length(20)
        .build()
        .unwrap();
    let q = longer.encode(&["what is rust"], Role::Query).unwrap();
    assert_eq!(q[0].nrows(), 20);
    assert!(
        longer.id() != load(&dir).id(),
        "the length is part of the id"
    );
    assert!(longer.encode(&[], Role::Document).unwrap().is_empty());
}

/// `load_reranker` takes a ColBERT folder (either layout) for a MaxSim reranker: every
/// query's scores of the documents are PyLate's.
#[test]
fn load_reranker_scores_documents_by_maxsim() {
    use rerank::rerankers::{load_reranker, RerankQuery};
    let expected = expected();
    for case in CASES {
        let want = &expected[case];
        let reranker =
            load_reranker(root().join(case), &ModelOptions::default().threads(2)).unwrap();
        assert_eq!(reranker.name(), "colbert", "{case}");
        let docs: Vec<&str> = want["documents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["text"].as_str().unwrap())
            .collect();
        for (qi, q) in want["queries"].as_array().unwrap().iter().enumerate() {
            let query = RerankQuery::new(q["text"].as_str().unwrap());
            let scores = reranker.score(&query, &docs).unwrap();
            for (di, got) in scores.iter().enumerate() {
                let s = want["scores"][qi][di].as_f64().unwrap();
                assert!(
                    (*got as f64 - s).abs() < 1e-5,
                    "{case} q{qi} d{di}: {got} {s}"
                );
            }
        }
        assert!(reranker
            .score(&RerankQuery::new("x"), &[])
            .unwrap()
            .is_empty());
    }
}

/// The CLI's stdout for `args` with `--input input --threads 2`, which must succeed.
fn run_cli(cli: &Path, args: &[&str], input: &Path) -> String {
    let out = std::process::Command::new(cli)
        .args(args)
        .args(["--input", input.to_str().unwrap(), "--threads", "2"])
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    String::from_utf8(out.stdout).unwrap()
}

/// `rerank embed` on a ColBERT model prints each text's token vectors, as PyLate encodes them.
#[test]
fn the_cli_prints_token_embeddings_of_a_colbert_model() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let want = &expected()["modernbert"];
    let dir = std::env::temp_dir().join(format!("rerank-colbert-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (role, key) in [("query", "queries"), ("document", "documents")] {
        let items = want[key].as_array().unwrap();
        let input = dir.join(format!("{key}.jsonl"));
        let lines: Vec<String> = items
            .iter()
            .map(|t| serde_json::json!({"text": t["text"]}).to_string())
            .collect();
        std::fs::write(&input, lines.join("\n")).unwrap();
        let model = root().join("modernbert");
        let model = model.to_str().unwrap();
        let stdout = run_cli(&cli, &["embed", "--model", model, "--role", role], &input);
        let printed: Vec<&str> = stdout.lines().collect();
        assert_eq!(printed.len(), items.len());
        for (line, item) in printed.iter().zip(items) {
            let v: Value = serde_json::from_str(line).unwrap();
            let got = matrix(&v["token_embeddings"]);
            let got = Array2::from_shape_vec((got.len(), got[0].len()), got.concat()).unwrap();
            let cos = smallest_cosine(key, &got, &matrix(&item["vectors"]));
            assert!(cos >= 0.99999, "{key}: {cos}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `reranker: {type: colbert}` and `{type: model}` on a ColBERT folder build a pipeline whose
/// stage 2 ranks by PyLate's MaxSim; passages are refused (a ColBERT document is cut to its
/// length).
#[test]
fn a_pipeline_config_reranks_with_colbert() {
    let want = &expected()["bert"];
    let docs: Vec<rerank::Document> = want["documents"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .filter(|(_, d)| !d["text"].as_str().unwrap().is_empty())
        .map(|(i, d)| rerank::Document::new(i.to_string(), d["text"].as_str().unwrap()))
        .collect();
    let query = want["queries"][0]["text"].as_str().unwrap();
    let dir = root().join("bert").display().to_string();
    for kind in ["colbert", "model"] {
        let yaml = format!(
            "retriever: {{ type: bm25 }}\nreranker: {{ type: {kind}, model: {dir:?} }}\n\
             search: {{ top_k: 3 }}\n"
        );
        let config = rerank::PipelineConfig::from_yaml_str(&yaml).unwrap();
        let pipeline = config.build(docs.clone()).unwrap();
        let response = pipeline.search(query).unwrap();
        assert_eq!(response.scorer, "colbert", "{kind}");
        assert!(!response.hits.is_empty(), "{kind}");
        for hit in &response.hits {
            let i: usize = hit.document.id.parse().unwrap();
            let s = want["scores"][0][i].as_f64().unwrap();
            let got = hit.rerank_score.unwrap() as f64;
            assert!((got - s).abs() < 1e-5, "{kind} doc {i}: {got} {s}");
        }
        let scores: Vec<f32> = response
            .hits
            .iter()
            .map(|h| h.rerank_score.unwrap())
            .collect();
        assert!(
            scores.windows(2).all(|w| w[0] >= w[1]),
            "{kind}: best first"
        );
    }
    let yaml =
        format!("reranker: {{ type: colbert, model: {dir:?}, passages: {{ aggregate: max }} }}\n");
    let e = rerank::PipelineConfig::from_yaml_str(&yaml)
        .and_then(|c| c.build(Vec::new()))
        .unwrap_err();
    assert!(e.to_string().contains("reranker.passages"), "{e}");
}

/// Stage-1 late interaction: the index holds every document's token vectors (f16) and ranks
/// them by MaxSim as PyLate scores them (within f16 rounding); a config retriever
/// `late_interaction` builds it; re-adding an id replaces the document.
#[test]
fn the_late_interaction_index_ranks_by_maxsim() {
    use rerank::recall::{LateInteractionIndex, Retriever, SearchQuery};
    let want = &expected()["bert"];
    let docs: Vec<rerank::Document> = want["documents"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, d)| rerank::Document::new(i.to_string(), d["text"].as_str().unwrap()))
        .collect();
    let index = LateInteractionIndex::new(load(&root().join("bert")));
    index.add(docs.clone()).unwrap();
    assert_eq!(index.len(), docs.len());
    // 16 dims of 2 bytes per kept token.
    let tokens: usize = want["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["kept_ids"].as_array().unwrap().len())
        .sum();
    let bytes = index.bytes_per_document();
    assert!(
        (bytes - (tokens * 32) as f64 / docs.len() as f64).abs() < 1e-9,
        "{bytes}"
    );
    for (qi, q) in want["queries"].as_array().unwrap().iter().enumerate() {
        let hits = index
            .retrieve(&SearchQuery::new(q["text"].as_str().unwrap()), 5)
            .unwrap();
        assert_eq!(hits.len(), 5);
        for hit in &hits {
            let i: usize = hit.document.id.parse().unwrap();
            let s = want["scores"][qi][i].as_f64().unwrap();
            assert!(
                (hit.score as f64 - s).abs() < 2e-2,
                "q{qi} d{i}: {} {s}",
                hit.score
            );
        }
        // The best by PyLate's scores is first, unless within f16 rounding of the next.
        let best = (0..docs.len())
            .max_by(|&a, &b| {
                let (x, y) = (
                    want["scores"][qi][a].as_f64(),
                    want["scores"][qi][b].as_f64(),
                );
                x.partial_cmp(&y).unwrap()
            })
            .unwrap();
        let first: usize = hits[0].document.id.parse().unwrap();
        let gap = want["scores"][qi][best].as_f64().unwrap()
            - want["scores"][qi][first].as_f64().unwrap();
        assert!(gap < 2e-2, "q{qi}: {first} ranked over {best} by {gap}");
    }
    // Vectors of another width, or a count unlike the documents', are refused whole.
    let e = index
        .add_encoded(
            vec![rerank::Document::new("x", "")],
            vec![Array2::zeros((2, 3))],
        )
        .unwrap_err();
    assert!(e.to_string().contains("16 columns"), "{e}");
    let e = index
        .add_encoded(Vec::new(), vec![Array2::zeros((2, 16))])
        .unwrap_err();
    assert!(e.to_string().contains("0 documents with 1"), "{e}");
    assert_eq!(index.len(), docs.len());
    // Replacing a document keeps one entry per id.
    index
        .add(vec![rerank::Document::new("0", "a new text")])
        .unwrap();
    assert_eq!(index.len(), docs.len());
    assert_eq!(
        index.vectors("0").unwrap().nrows(),
        index
            .encoder()
            .encode(&["a new text"], Role::Document)
            .unwrap()[0]
            .nrows()
    );

    let yaml = format!(
        "retriever: {{ type: late_interaction, model: {:?} }}\nsearch: {{ top_k: 2 }}\n",
        root().join("bert").display().to_string()
    );
    let pipeline = rerank::PipelineConfig::from_yaml_str(&yaml)
        .unwrap()
        .build(docs)
        .unwrap();
    let response = pipeline
        .search(want["queries"][0]["text"].as_str().unwrap())
        .unwrap();
    assert_eq!(response.hits.len(), 2);
}

/// `examples/configs/five_signals.yaml`: sparse, BM25 and dense recall fused, ColBERT
/// reranking, over the handbook corpus; every stage runs and is timed.
#[test]
fn the_five_signal_config_runs_every_stage() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/configs/five_signals.yaml");
    let config = rerank::PipelineConfig::from_path(&path).unwrap();
    let yaml = config.to_yaml_string().unwrap();
    assert_eq!(
        rerank::PipelineConfig::from_yaml_str(&yaml).unwrap(),
        config
    );
    let pipeline = config.build(Vec::new()).unwrap();
    let response = pipeline.search("how are business flights booked").unwrap();
    assert_eq!(response.scorer, "colbert");
    assert_eq!(response.hits.len(), 5);
    assert!(response.hits.iter().all(|h| h.rerank_score.is_some()));
    // BM25's and the dense retriever's scores reach the fused hits.
    assert!(response.hits.iter().any(|h| h.bm25_score.is_some()));
    assert!(response.hits.iter().any(|h| h.vector_score.is_some()));
    let t = &response.timings;
    assert!(
        t.retrieve_ms > 0.0 && t.rerank_ms.is_some_and(|ms| ms > 0.0),
        "{t:?}"
    );
}

/// `rerank score` takes a ColBERT folder (Stanford's layout here) as it takes a cross-encoder:
/// one line per pair, the score PyLate's MaxSim.
#[test]
fn the_cli_scores_pairs_with_a_colbert_model() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let want = &expected()["stanford"];
    let query = want["queries"][0]["text"].as_str().unwrap();
    let docs = want["documents"].as_array().unwrap();
    let dir = std::env::temp_dir().join(format!("rerank-colbert-score-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("pairs.jsonl");
    let lines: Vec<String> = docs
        .iter()
        .map(|d| serde_json::json!({"query": query, "document": d["text"]}).to_string())
        .collect();
    std::fs::write(&input, lines.join("\n")).unwrap();
    let model = root().join("stanford");
    let stdout = run_cli(&cli, &["score", "--model", model.to_str().unwrap()], &input);
    let scores: Vec<f64> = stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["score"]
                .as_f64()
                .unwrap()
        })
        .collect();
    assert_eq!(scores.len(), docs.len());
    for (i, got) in scores.iter().enumerate() {
        let s = want["scores"][0][i].as_f64().unwrap();
        assert!((got - s).abs() < 1e-5, "doc {i}: {got} {s}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ColbertReranker::with_index` reads indexed documents' vectors (f16: within rounding of
/// PyLate's scores) and encodes the others (PyLate's scores within 1e-5).
#[test]
fn a_reranker_over_the_index_reads_stored_vectors() {
    use rerank::recall::LateInteractionIndex;
    use rerank::rerankers::{ColbertReranker, RerankQuery};
    use rerank::Reranker;
    let want = &expected()["bert"];
    let texts: Vec<&str> = want["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["text"].as_str().unwrap())
        .collect();
    let index = LateInteractionIndex::new(load(&root().join("bert")));
    // The first half indexed; the rest are encoded at scoring.
    let half = texts.len() / 2;
    let docs = texts[..half]
        .iter()
        .enumerate()
        .map(|(i, t)| rerank::Document::new(i.to_string(), *t))
        .collect();
    index.add(docs).unwrap();
    let reranker = ColbertReranker::with_index(std::sync::Arc::new(index));
    let query = RerankQuery::new(want["queries"][0]["text"].as_str().unwrap());
    let scores = reranker.score(&query, &texts).unwrap();
    for (i, got) in scores.iter().enumerate() {
        let s = want["scores"][0][i].as_f64().unwrap();
        let tolerance = if i < half { 2e-2 } else { 1e-5 };
        assert!((*got as f64 - s).abs() < tolerance, "doc {i}: {got} {s}");
    }
    // Against a reranker that encodes every candidate: the indexed ones differ by f16
    // rounding (their stored vectors were read), the others agree.
    let fresh = ColbertReranker::new(load(&root().join("bert")))
        .score(&query, &texts)
        .unwrap();
    assert!((0..half).all(|i| (scores[i] - fresh[i]).abs() < 2e-2));
    assert!(
        (0..half).any(|i| scores[i] != fresh[i]),
        "no stored vector was read"
    );
    assert!((half..texts.len()).all(|i| (scores[i] - fresh[i]).abs() < 1e-5));
}

/// MUVERA candidates: the hits are the candidates' exact MaxSim scores; with as many
/// candidates as documents the ranking is the exact one; the encodings count in the bytes per
/// document; settings out of range are refused naming the key.
#[test]
fn muvera_candidates_are_ranked_by_exact_maxsim() {
    use rerank::recall::{LateInteractionIndex, MuveraConfig};
    let docs = rerank::Document::read_jsonl(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/handbook.jsonl"),
    )
    .unwrap();
    let encoder = std::sync::Arc::new(load(&root().join("bert")));
    let exact = LateInteractionIndex::new(std::sync::Arc::clone(&encoder));
    exact.add(docs.clone()).unwrap();
    let config = MuveraConfig {
        repetitions: 4,
        simhash_bits: 3,
        projection: 8,
        candidates: 6,
        seed: 1,
    };
    let approx = LateInteractionIndex::new(std::sync::Arc::clone(&encoder))
        .with_muvera(config)
        .unwrap();
    approx.add(docs.clone()).unwrap();
    // The encodings of documents added before `with_muvera` are the same as after.
    let late = LateInteractionIndex::new(std::sync::Arc::clone(&encoder));
    late.add(docs.clone()).unwrap();
    let late = late.with_muvera(config).unwrap();
    let width = 4 * 8 * 8;
    assert!(
        (approx.bytes_per_document() - exact.bytes_per_document() - 2.0 * width as f64).abs()
            < 1e-9
    );
    let all = LateInteractionIndex::new(std::sync::Arc::clone(&encoder))
        .with_muvera(MuveraConfig {
            candidates: docs.len(),
            ..config
        })
        .unwrap();
    all.add(docs.clone()).unwrap();
    for q in [
        "how are flights booked",
        "hotel receipts",
        "security badge lost",
    ] {
        let qv = encoder.encode(&[q], Role::Query).unwrap().remove(0);
        let truth = exact.search_vectors(qv.view(), docs.len()).unwrap();
        let score_of = |id: &str| truth.iter().find(|h| h.document.id == id).unwrap().score;
        let hits = approx.search_vectors(qv.view(), 4).unwrap();
        assert_eq!(hits.len(), 4);
        for h in &hits {
            assert_eq!(h.score.to_bits(), score_of(&h.document.id).to_bits(), "{q}");
        }
        let ids = |hits: &[rerank::Hit]| -> Vec<String> {
            hits.iter().map(|h| h.document.id.clone()).collect()
        };
        assert_eq!(ids(&late.search_vectors(qv.view(), 4).unwrap()), ids(&hits));
        assert_eq!(
            ids(&approx.search_vectors_exact(qv.view(), 5).unwrap()),
            ids(&truth[..5])
        );
        assert_eq!(
            ids(&all.search_vectors(qv.view(), 5).unwrap()),
            ids(&truth[..5])
        );
    }
    let e = LateInteractionIndex::new(encoder)
        .with_muvera(MuveraConfig {
            projection: 17,
            ..config
        })
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("projection") && e.contains("16"), "{e}");
}
