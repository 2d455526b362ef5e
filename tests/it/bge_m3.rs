//! BAAI/bge-m3's lexical weights (`SparseEncoder`) and ColBERT vectors (`ColbertEncoder`)
//! against FlagEmbedding 1.4.0's `BGEM3FlagModel` (transformers 4.57, torch 2.15, float32) on
//! the tiny random models of tests/fixtures/bge_m3_tiny (made by the make.py there, the heads
//! saved as `.pt` and converted by scripts/convert_bge_m3_heads.py):
//! - every case (`m3`: the published shapes; `short`: max_length 12; `wide`: another hidden
//!   size and a 24-wide ColBERT head), queries and documents, one text at a time and batched:
//!   the token ids, the sparse indices equal and values within 1e-5, the ColBERT vectors with
//!   per-token cosine >= 0.99999; every query x document lexical score, MaxSim sum and
//!   FlagEmbedding's `colbert_score` (MaxSim / query vectors) within 1e-5 (relative above 1);
//! - the empty text, punctuation only, repeated tokens, unknown characters, a literal `<mask>`,
//!   leading and trailing spaces, texts over max_length;
//! - the folder stays a dense embedder for `load_embedder`; `ColbertReranker` over it ranks as
//!   FlagEmbedding's `colbert_score` (its score the MaxSim sum); the ids follow the head weights;
//! - refusals naming the file and the key: only the `.pt` heads (with the command that
//!   converts them), a sparse head whose width is not the hidden size or with more than one
//!   output, a ColBERT head of the wrong shape, a bias of the wrong length, an extra tensor;
//! - the ColBERT vectors on the candle engine (feature `candle`).
#![cfg(feature = "models")]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use ndarray::Array2;
use rerank::embed::{is_bge_m3_dir, maxsim, ColbertEncoder, SparseEncoder, SparseVector};
use rerank::models::ModelOptions;
use rerank::{load_embedder, Error, Role};
use serde_json::Value;

use crate::splade::numbers;

use crate::model_fixtures::Broken;

const CASES: [&str; 3] = ["m3", "short", "wide"];

/// The hidden size of the `m3` folder.
const HIDDEN: usize = 32;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bge_m3_tiny")
}

fn expected() -> serde_json::Map<String, Value> {
    crate::splade::expected_object(&root())
}

fn options() -> ModelOptions {
    ModelOptions::default().threads(2)
}

/// The case's encoders: its folder, with the case's max_length where it is not the default.
fn encoders(case: &str, want: &Value) -> (SparseEncoder, ColbertEncoder) {
    let dir = root().join(want["folder"].as_str().unwrap());
    let length = want["max_length"].as_u64().unwrap() as usize;
    let (mut sparse_options, mut colbert) = (options(), ColbertEncoder::builder(&dir));
    if case == "short" {
        sparse_options = sparse_options.max_length(length);
        colbert = colbert.query_length(length).document_length(length);
    }
    let sparse = SparseEncoder::builder(&dir)
        .options(sparse_options)
        .build()
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    let colbert = colbert
        .options(options())
        .build()
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    (sparse, colbert)
}

/// The largest difference between `got` and the expected `indices` / `values`, after
/// checking the indices are the same.
fn sparse_error(got: &SparseVector, item: &Value, suffix: &str, what: &str) -> f64 {
    let indices: Vec<u32> = numbers(item, &format!("indices{suffix}"));
    let values: Vec<f32> = numbers(item, &format!("values{suffix}"));
    assert_eq!(got.indices, indices, "{what}: indices");
    let mut largest = 0f64;
    for (g, w) in got.values.iter().zip(&values) {
        let err = (g - w).abs() as f64;
        assert!(err <= 1e-5, "{what}: {g} vs {w}");
        largest = largest.max(err);
    }
    largest
}

/// The largest `1 - cosine` over the tokens of `got` and `want` (which must have as many
/// rows).
fn cosine_error(got: &Array2<f32>, want: &Value, what: &str) -> f64 {
    let want: Vec<Vec<f32>> = serde_json::from_value(want.clone()).unwrap();
    assert_eq!(got.nrows(), want.len(), "{what}: vector count");
    let mut worst = 0f64;
    for (g, w) in got.rows().into_iter().zip(&want) {
        assert_eq!(g.len(), w.len(), "{what}: width");
        let dot: f64 = g.iter().zip(w).map(|(a, b)| *a as f64 * *b as f64).sum();
        let ng: f64 = g.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
        let nw: f64 = w.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
        let err = 1.0 - dot / (ng * nw);
        assert!(err <= 1e-5, "{what}: 1 - cosine {err}");
        worst = worst.max(err);
    }
    worst
}

/// A text's sparse vector and ColBERT vectors, encoded alone and in the batch.
type Encoded = (SparseVector, Array2<f32>, SparseVector, Array2<f32>);

#[test]
fn sparse_weights_and_colbert_vectors_match_flagembedding_single_and_batched() {
    let expected = expected();
    assert_eq!(
        expected.keys().map(String::as_str).collect::<Vec<_>>(),
        CASES
    );
    let mut table = Vec::new();
    for (case, want) in &expected {
        let (sparse, colbert) = encoders(case, want);
        let length = want["max_length"].as_u64().unwrap() as usize;
        assert!(sparse.is_bge_m3(), "{case}");
        assert_eq!(
            sparse.vocab_size() as u64,
            want["vocab_size"].as_u64().unwrap()
        );
        assert_eq!(sparse.max_length(Role::Query), length, "{case}");
        assert_eq!(sparse.max_length(Role::Document), length, "{case}");
        assert_eq!(colbert.layout(), "bge-m3");
        assert_eq!(colbert.dim() as u64, want["dim"].as_u64().unwrap());
        assert_eq!(
            (colbert.query_length(), colbert.document_length()),
            (length, length)
        );
        // [sparse single, sparse batched, colbert single, colbert batched]
        let mut errors = [0f64; 4];
        let mut encoded = Vec::new();
        for (role, key) in [(Role::Query, "queries"), (Role::Document, "documents")] {
            let items = want[key].as_array().unwrap();
            let texts: Vec<&str> = items.iter().map(|t| t["text"].as_str().unwrap()).collect();
            let sparse_batched = sparse.encode(&texts, role).unwrap();
            let colbert_batched = colbert.encode(&texts, role).unwrap();
            assert_eq!(
                (sparse_batched.len(), colbert_batched.len()),
                (texts.len(), texts.len())
            );
            let mut singles: Vec<Encoded> = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let what = format!("{case} {key}[{i}] {:?}", texts[i]);
                let ids: Vec<u32> = numbers(item, "ids");
                assert_eq!(sparse.token_ids(texts[i], role).unwrap(), ids, "{what}");
                let (colbert_ids, keys) = colbert.token_ids(texts[i], role).unwrap();
                assert_eq!((colbert_ids, keys), (ids.clone(), ids.len()), "{what}");
                let s = sparse.encode_one(texts[i], role).unwrap();
                errors[0] = errors[0].max(sparse_error(&s, item, "", &what));
                errors[1] = errors[1].max(sparse_error(
                    &sparse_batched[i],
                    item,
                    "_batched",
                    &format!("{what} batched"),
                ));
                let c = colbert.encode(&texts[i..=i], role).unwrap().remove(0);
                errors[2] = errors[2].max(cosine_error(&c, &item["vectors"], &what));
                errors[3] = errors[3].max(cosine_error(
                    &colbert_batched[i],
                    &item["vectors_batched"],
                    &format!("{what} batched"),
                ));
                singles.push((s, c, sparse_batched[i].clone(), colbert_batched[i].clone()));
            }
            encoded.push(singles);
        }
        let grid =
            |key: &str| -> Vec<Vec<f64>> { serde_json::from_value(want[key].clone()).unwrap() };
        let (lexical, flag_colbert, sums) = (
            grid("lexical_scores"),
            grid("colbert_scores"),
            grid("maxsim"),
        );
        // [lexical, MaxSim sum, colbert_score] x [single, batched]
        let mut score_errors = [[0f64; 2]; 3];
        for (b, batched) in [false, true].into_iter().enumerate() {
            let pick = |e: &Encoded| match batched {
                true => (e.2.clone(), e.3.clone()),
                false => (e.0.clone(), e.1.clone()),
            };
            for (qi, q) in encoded[0].iter().map(pick).enumerate() {
                for (di, d) in encoded[1].iter().map(pick).enumerate() {
                    let sum = maxsim(q.1.view(), d.1.view()) as f64;
                    let got = [q.0.dot(&d.0) as f64, sum, sum / q.1.nrows() as f64];
                    let want = [lexical[qi][di], sums[qi][di], flag_colbert[qi][di]];
                    for k in 0..3 {
                        // Relative above 1: a MaxSim sum of 63 query vectors is ~40.
                        let err = (got[k] - want[k]).abs() / want[k].abs().max(1.0);
                        assert!(
                            err <= 1e-5,
                            "{case} q{qi} d{di} score {k} (batched {batched}): {got:?} vs {want:?}"
                        );
                        score_errors[k][b] = score_errors[k][b].max(err);
                    }
                }
            }
        }
        let [lex, sum, flag] = score_errors;
        table.push(format!(
            "| {case} | {:.1e} / {:.1e} | {:.1e} / {:.1e} | {:.1e} / {:.1e} | {:.1e} / {:.1e} | \
             {:.1e} / {:.1e} |",
            errors[0],
            errors[1],
            lex[0],
            lex[1],
            errors[2],
            errors[3],
            sum[0],
            sum[1],
            flag[0],
            flag[1]
        ));
    }
    println!(
        "| case | sparse value | lexical score | ColBERT 1 - cos | MaxSim (relative) | \
         colbert_score |\n|---|---|---|---|---|---|\n{}",
        table.join("\n")
    );
}

#[test]
fn edge_texts_give_what_flagembedding_gives() {
    let (sparse, colbert) = encoders("m3", &expected()["m3"]);
    // The empty text: <s> </s>, no weight, one vector (</s>'s).
    assert!(sparse.encode_one("", Role::Query).unwrap().is_empty());
    assert_eq!(colbert.encode(&[""], Role::Document).unwrap()[0].nrows(), 1);
    // No text, no vector.
    assert!(sparse.encode(&[], Role::Document).unwrap().is_empty());
    assert!(colbert.encode(&[], Role::Document).unwrap().is_empty());
    // Unknown characters are <unk> (id 3), which never gets a weight.
    let text = "a snowman \u{2603}";
    assert!(sparse.token_ids(text, Role::Document).unwrap().contains(&3));
    assert_eq!(sparse.encode_one(text, Role::Document).unwrap().get(3), 0.0);
    // Repeated tokens give one weight per id: the largest of theirs.
    let v = sparse.encode_one("rust rust rust", Role::Query).unwrap();
    let ids = sparse.token_ids("rust rust rust", Role::Query).unwrap();
    let mut distinct = ids[1..ids.len() - 1].to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(v.indices.iter().all(|i| distinct.contains(i)));
    // Leading and trailing spaces are not stripped (FlagEmbedding does not strip).
    assert_ne!(
        sparse.token_ids(" rust ", Role::Query).unwrap(),
        sparse.token_ids("rust", Role::Query).unwrap()
    );
}

#[test]
fn a_bge_m3_folder_stays_a_dense_embedder() {
    let dir = root().join("m3");
    assert!(is_bge_m3_dir(&dir));
    assert!(!is_bge_m3_dir(root()));
    assert!(!ColbertEncoder::is_colbert_dir(&dir));
    assert!(!rerank::embed::sparse::is_sparse_encoder(&dir));
    let dense = load_embedder(&dir, &options()).unwrap();
    let v = dense.embed(&["what is rust"]).unwrap();
    assert_eq!(v.ncols(), 32);
}

/// A copy of the `m3` folder (`tag` in its name).
fn copy(tag: &str) -> Broken {
    Broken::of(&root().join("m3"), tag)
}

/// A tensor to write: its name, shape and values.
type Tensor<'a> = (&'a str, &'a [usize], Vec<f32>);

/// Writes `tensors` as the safetensors file `file` of `dir`.
fn write_head(dir: &Path, file: &str, tensors: &[Tensor<'_>]) {
    let device = candle_core::Device::Cpu;
    let map: HashMap<String, candle_core::Tensor> = tensors
        .iter()
        .map(|(name, shape, values)| {
            let t = candle_core::Tensor::from_vec(values.clone(), *shape, &device).unwrap();
            (name.to_string(), t)
        })
        .collect();
    candle_core::safetensors::save(&map, dir.join(file)).unwrap();
}

#[test]
fn the_ids_follow_the_head_weights() {
    let dir = root().join("m3");
    let (sparse, colbert) = encoders("m3", &expected()["m3"]);
    let (sparse_id, colbert_id) = (sparse.id().unwrap(), colbert.id().unwrap());
    assert!(sparse_id.starts_with("sparse-") && colbert_id.starts_with("colbert-"));
    // A copy reads the same; other head weights give other ids, the other head's unchanged.
    let b = copy("ids");
    assert_eq!(
        SparseEncoder::from_dir(&b.0).unwrap().id().unwrap(),
        sparse_id
    );
    write_head(
        &b.0,
        "sparse_linear.safetensors",
        &[
            ("weight", &[1, HIDDEN], vec![0.5; HIDDEN]),
            ("bias", &[1], vec![0.0]),
        ],
    );
    write_head(
        &b.0,
        "colbert_linear.safetensors",
        &[("weight", &[4, HIDDEN], vec![0.25; 4 * HIDDEN])],
    );
    let sparse2 = SparseEncoder::from_dir(&b.0).unwrap();
    assert_ne!(sparse2.id().unwrap(), sparse_id);
    let colbert2 = ColbertEncoder::from_dir(&b.0).unwrap();
    assert_ne!(colbert2.id().unwrap(), colbert_id);
    // A bias-free head of another width loads (FlagEmbedding's colbert_dim).
    assert_eq!(colbert2.dim(), 4);
    // Another max_length is another id.
    let short = SparseEncoder::builder(&dir)
        .options(options().max_length(12))
        .build()
        .unwrap();
    assert_ne!(short.id().unwrap(), sparse_id);
}

/// The error of loading `dir` as a sparse encoder, or as a ColBERT encoder (`colbert`).
fn refusal(dir: &Path, colbert: bool) -> String {
    let e = match colbert {
        true => ColbertEncoder::from_dir(dir).unwrap_err(),
        false => SparseEncoder::from_dir(dir).unwrap_err(),
    };
    assert!(matches!(e, Error::Model { .. }), "{e:?}");
    e.to_string()
}

#[test]
fn heads_the_crate_cannot_read_are_refused_naming_file_and_key() {
    // Only the published .pt files: the error names the file and the command.
    let b = copy("pt-only");
    for head in ["sparse_linear", "colbert_linear"] {
        std::fs::remove_file(b.0.join(format!("{head}.safetensors"))).unwrap();
    }
    for (colbert, head) in [(false, "sparse_linear"), (true, "colbert_linear")] {
        let e = refusal(&b.0, colbert);
        let pt = b.0.join(format!("{head}.pt")).display().to_string();
        assert!(e.contains(&pt), "{e}");
        let command = format!("python scripts/convert_bge_m3_heads.py {}", b.0.display());
        assert!(e.contains(&command), "{e}");
    }
    // One head only: the other encoder names the file it misses.
    for (colbert, gone, kept) in [(false, "sparse", "colbert"), (true, "colbert", "sparse")] {
        let b = copy(&format!("no-{gone}"));
        for ext in ["pt", "safetensors"] {
            std::fs::remove_file(b.0.join(format!("{gone}_linear.{ext}"))).unwrap();
        }
        assert!(is_bge_m3_dir(&b.0), "{kept} head only");
        let e = refusal(&b.0, colbert);
        let file =
            b.0.join(format!("{gone}_linear.safetensors"))
                .display()
                .to_string();
        assert!(e.contains(&file) && e.contains("missing"), "{e}");
    }
    // (file, whether it is the ColBERT head, its tensors, the key the error names)
    let cases: Vec<(&str, bool, Vec<Tensor<'_>>, &str)> = vec![
        // A sparse head over another hidden size (wide's, 48).
        (
            "sparse_linear.safetensors",
            false,
            vec![
                ("weight", &[1, 48], vec![0.1; 48]),
                ("bias", &[1], vec![0.0]),
            ],
            "\"weight\"",
        ),
        // A sparse head of two outputs.
        (
            "sparse_linear.safetensors",
            false,
            vec![("weight", &[2, HIDDEN], vec![0.1; 2 * HIDDEN])],
            "\"weight\"",
        ),
        // A ColBERT head over another hidden size.
        (
            "colbert_linear.safetensors",
            true,
            vec![("weight", &[24, 48], vec![0.1; 24 * 48])],
            "\"weight\"",
        ),
        // A ColBERT head that is not a matrix.
        (
            "colbert_linear.safetensors",
            true,
            vec![("weight", &[HIDDEN], vec![0.1; HIDDEN])],
            "\"weight\"",
        ),
        // A bias of the wrong length.
        (
            "colbert_linear.safetensors",
            true,
            vec![
                ("weight", &[HIDDEN, HIDDEN], vec![0.1; HIDDEN * HIDDEN]),
                ("bias", &[HIDDEN - 1], vec![0.0; HIDDEN - 1]),
            ],
            "\"bias\"",
        ),
        // A tensor a Linear layer does not have: an unknown projection.
        (
            "sparse_linear.safetensors",
            false,
            vec![
                ("weight", &[1, HIDDEN], vec![0.1; HIDDEN]),
                ("scale", &[1], vec![2.0]),
            ],
            "\"scale\"",
        ),
        // No weight at all.
        (
            "sparse_linear.safetensors",
            false,
            vec![("bias", &[1], vec![0.0])],
            "\"weight\"",
        ),
    ];
    for (i, (file, colbert, tensors, key)) in cases.into_iter().enumerate() {
        let b = copy(&format!("head-{i}"));
        write_head(&b.0, file, &tensors);
        let e = refusal(&b.0, colbert);
        let path = b.0.join(file).display().to_string();
        assert!(e.contains(&path) && e.contains(key), "case {i}: {e}");
    }
}

#[test]
fn lengths_are_checked() {
    let dir = root().join("m3");
    let e = SparseEncoder::builder(&dir)
        .options(options().max_length(65))
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
    let e = ColbertEncoder::builder(&dir)
        .query_length(65)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("query_length"), "{e}");
    // A shorter length cuts the text, </s> kept last.
    let short = SparseEncoder::builder(&dir)
        .options(options().max_length(4))
        .build()
        .unwrap();
    let ids = short
        .token_ids("rust is a systems language", Role::Document)
        .unwrap();
    assert_eq!((ids.len(), ids[0], ids[3]), (4, 0, 2));
}

#[test]
fn a_colbert_reranker_over_bge_m3_ranks_as_flagembedding_s_colbert_score() {
    use rerank::rerankers::ColbertReranker;
    use rerank::Reranker;
    let want = &expected()["m3"];
    let reranker = ColbertReranker::from_dir(root().join("m3"), &options()).unwrap();
    let documents: Vec<&str> = want["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["text"].as_str().unwrap())
        .collect();
    let scores: Vec<Vec<f64>> = serde_json::from_value(want["colbert_scores"].clone()).unwrap();
    for (qi, query) in want["queries"].as_array().unwrap().iter().enumerate() {
        let query = query["text"].as_str().unwrap();
        let n = reranker
            .encoder()
            .token_ids(query, Role::Query)
            .unwrap()
            .0
            .len()
            - 1;
        let ranked = reranker.rank(query, &documents, None).unwrap();
        assert_eq!(ranked.len(), documents.len());
        for r in &ranked {
            // The reranker's score is the MaxSim sum: FlagEmbedding's times the vector count.
            let flag = scores[qi][r.index] * n as f64;
            let err = (r.score as f64 - flag).abs() / flag.abs().max(1.0);
            assert!(err <= 1e-5, "{query:?} d{}: {} vs {flag}", r.index, r.score);
        }
        let mut order: Vec<usize> = (0..documents.len()).collect();
        order.sort_by(|&a, &b| scores[qi][b].total_cmp(&scores[qi][a]));
        let got: Vec<usize> = ranked.iter().map(|r| r.index).collect();
        assert_eq!(got, order, "{query:?}");
    }
}

/// The ColBERT head runs on candle's encoder too (the sparse encoder is the crate's kernels
/// only, and says so).
#[cfg(feature = "candle")]
#[test]
fn the_colbert_vectors_match_on_the_candle_engine() {
    use rerank::models::Device;
    let want = &expected()["m3"];
    let dir = root().join("m3");
    let colbert = ColbertEncoder::builder(&dir)
        .options(options().device(Device::CandleCpu))
        .build()
        .unwrap();
    let items = want["documents"].as_array().unwrap();
    let texts: Vec<&str> = items.iter().map(|t| t["text"].as_str().unwrap()).collect();
    let got = colbert.encode(&texts, Role::Document).unwrap();
    let mut worst = 0f64;
    for (i, item) in items.iter().enumerate() {
        let what = format!("candle documents[{i}]");
        worst = worst.max(cosine_error(&got[i], &item["vectors_batched"], &what));
    }
    println!("candle: ColBERT 1 - cos <= {worst:.1e}");
    let e = SparseEncoder::builder(&dir)
        .options(options().device(Device::CandleCpu))
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
}
