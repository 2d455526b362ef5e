//! Parity of `BertEmbedder` with sentence-transformers 6.2 on tiny random BERT models in every
//! layout the loader reads (tests/fixtures/st_bert_tiny, made by its make.py): CLS pooling +
//! Normalize + query/document prompts, max pooling + Dense(Tanh), mean_sqrt_len_tokens with the
//! query prompt left out of pooling and do_lower_case (older layout), lasttoken with a
//! "passage" prompt, and a plain transformers directory. Batched = one at a time, texts longer
//! than max_seq_length, empty and non-ASCII text; the prompts by role, and overridden.
//! Also: what the loader refuses, naming the file and the key.
#![cfg(feature = "models")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rerank::embed::{BertEmbedder, PoolingMode};
use rerank::models::ModelOptions;
use rerank::{Embedder, Error, Role};
use serde::Deserialize;
use serde_json::Value;

const CASES: [&str; 5] = [
    "cls_prompts",
    "max_dense_tanh",
    "mean_sqrt_len",
    "lasttoken",
    "plain",
];

/// One case of a fixture's `expected.json` (written by the make.py beside it).
#[derive(Deserialize)]
pub(crate) struct Expected {
    pub max_seq_length: usize,
    pub dim: usize,
    pub prompts: BTreeMap<String, String>,
    cases: Vec<Text>,
    /// Token ids of texts whose whitespace transformers tokenizes its own way (XLM-R).
    #[serde(default)]
    pub whitespace_ids: BTreeMap<String, Vec<u32>>,
}

impl Expected {
    /// Each text with sentence-transformers' embedding of it as a query.
    #[allow(dead_code)]
    pub fn cases(&self) -> Vec<(&str, &[f32])> {
        self.cases
            .iter()
            .map(|c| (c.text.as_str(), c.query.as_slice()))
            .collect()
    }
}

#[derive(Deserialize)]
struct Text {
    text: String,
    input_ids: Vec<u32>,
    plain: Vec<f32>,
    plain_single: Vec<f32>,
    query: Vec<f32>,
    query_single: Vec<f32>,
    document: Vec<f32>,
    document_single: Vec<f32>,
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/st_bert_tiny")
}

fn expected() -> BTreeMap<String, Expected> {
    expected_in(&fixtures())
}

/// The references of the fixture folder `dir` (`dir/expected.json`), by case.
pub(crate) fn expected_in(dir: &Path) -> BTreeMap<String, Expected> {
    let text = std::fs::read_to_string(dir.join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn load(case: &str) -> BertEmbedder {
    BertEmbedder::builder(fixtures().join(case))
        .options(ModelOptions::default().threads(2))
        .build()
        .unwrap_or_else(|e| panic!("{case}: {e}"))
}

/// Cosine in f64.
fn cosine(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "dimensions differ");
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

/// Checks every row of `got` against `want` (cosine >= 0.99999 and the same norm within
/// 1e-4 relative, since not every case normalizes); returns the smallest cosine. A reference
/// of zeros (a static model's text without tokens) must be zeros.
fn check(case: &str, how: &str, got: &ndarray::Array2<f32>, want: &[&Vec<f32>]) -> f64 {
    assert_eq!(got.nrows(), want.len(), "{case} {how}");
    let mut worst = 1.0f64;
    for (i, (row, want)) in got.rows().into_iter().zip(want).enumerate() {
        let row = row.to_vec();
        if want.iter().all(|&x| x == 0.0) {
            assert!(
                row.iter().all(|&x| x == 0.0),
                "{case} {how} text {i}: {row:?}"
            );
            continue;
        }
        let c = cosine(&row, want);
        assert!(c >= 0.99999, "{case} {how} text {i}: cosine {c}");
        let norm = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
        let (a, b) = (norm(&row), norm(want));
        assert!(
            (a - b).abs() <= 1e-4 * b.max(1e-6),
            "{case} {how} text {i}: norm {a} vs {b}"
        );
        worst = worst.min(c);
    }
    worst
}

#[test]
fn every_layout_matches_sentence_transformers() {
    let expected = expected();
    for case in CASES {
        let want = &expected[case];
        let e = load(case);
        assert_eq!(e.max_length(), want.max_seq_length, "{case}");
        // The host turns the prompts off: sentence-transformers' encode() without a prompt.
        let bare = BertEmbedder::builder(fixtures().join(case))
            .prompt(Role::Query, "")
            .prompt(Role::Document, "")
            .build()
            .unwrap();
        let ids = |text: &str| bare.token_ids(text).unwrap();
        assert_matches_sentence_transformers(case, want, &e, &bare, &ids);
    }
}

/// Checks `e` against a fixture's references: the dimension, the token ids of each text
/// (`ids`, no prompt), every text embedded as documents and as queries in one call and one
/// at a time against sentence-transformers' batched and single encodes, and `bare` (the
/// same model with its prompts turned off) against `encode()` without a prompt. Prints and
/// returns the smallest cosine.
pub(crate) fn assert_matches_sentence_transformers(
    case: &str,
    want: &Expected,
    e: &dyn Embedder,
    bare: &dyn Embedder,
    ids: &dyn Fn(&str) -> Vec<u32>,
) -> f64 {
    assert_eq!(e.dim(), want.dim, "{case}");
    let texts: Vec<&str> = want.cases.iter().map(|c| c.text.as_str()).collect();
    for (c, text) in want.cases.iter().zip(&texts) {
        assert_eq!(ids(text), c.input_ids, "{case}: {text:?}");
    }
    // Batched (one call) and one at a time, each against both references.
    let docs = e.embed(&texts).unwrap();
    let queries = e.embed_queries(&texts).unwrap();
    let doc_ref: Vec<&Vec<f32>> = want.cases.iter().map(|c| &c.document).collect();
    let query_ref: Vec<&Vec<f32>> = want.cases.iter().map(|c| &c.query).collect();
    let doc_single: Vec<&Vec<f32>> = want.cases.iter().map(|c| &c.document_single).collect();
    let query_single: Vec<&Vec<f32>> = want.cases.iter().map(|c| &c.query_single).collect();
    let mut worst = check(case, "documents", &docs, &doc_ref);
    worst = worst.min(check(case, "queries", &queries, &query_ref));
    worst = worst.min(check(case, "documents vs single", &docs, &doc_single));
    worst = worst.min(check(case, "queries vs single", &queries, &query_single));
    for (i, text) in texts.iter().enumerate() {
        let one =
            ndarray::Array2::from_shape_vec((1, e.dim()), e.embed_one(text).unwrap()).unwrap();
        worst = worst.min(check(
            case,
            "one document",
            &one,
            &[&want.cases[i].document],
        ));
        let q =
            ndarray::Array2::from_shape_vec((1, e.dim()), e.embed_query(text).unwrap()).unwrap();
        worst = worst.min(check(case, "one query", &q, &[&want.cases[i].query]));
    }
    let plain_ref: Vec<&Vec<f32>> = want.cases.iter().map(|c| &c.plain).collect();
    let plain_single: Vec<&Vec<f32>> = want.cases.iter().map(|c| &c.plain_single).collect();
    for role in [Role::Query, Role::Document] {
        let got = bare.embed_as(&texts, role).unwrap();
        worst = worst.min(check(case, "no prompt", &got, &plain_ref));
        worst = worst.min(check(case, "no prompt vs single", &got, &plain_single));
    }
    println!(
        "{case}: smallest cosine to sentence-transformers {worst:.9} (1 - cos = {:.1e})",
        1.0 - worst
    );
    worst
}

#[test]
fn layouts_are_read_as_declared() {
    let expected = expected();
    let cls = load("cls_prompts");
    assert_eq!(cls.pooling(), [PoolingMode::Cls]);
    assert_eq!(cls.prompt(Role::Query), Some("query: "));
    assert_eq!(cls.prompt(Role::Document), Some("passage: "));
    assert_eq!(cls.similarity_fn_name(), Some("cosine"));
    assert!(cls.is_sentence_transformers());
    assert_eq!(expected["cls_prompts"].prompts["query"], "query: ");
    // The prompt changes the vectors: a query is not embedded as a document.
    let q = cls.embed_query("what is rust").unwrap();
    let d = cls.embed_one("what is rust").unwrap();
    assert!(cosine(&q, &d) < 0.999, "{}", cosine(&q, &d));
    // A text past max_seq_length is cut: its ids stop at 24 with [SEP].
    let long = &expected["cls_prompts"].cases[5];
    assert_eq!(long.input_ids.len(), 24);
    assert_eq!(cls.token_ids_as(&long.text, Role::Query).unwrap().len(), 24);

    assert_eq!(load("max_dense_tanh").pooling(), [PoolingMode::Max]);
    assert_eq!(load("max_dense_tanh").dim(), 16);
    let msl = load("mean_sqrt_len");
    assert_eq!(msl.pooling(), [PoolingMode::MeanSqrtLen]);
    assert_eq!(msl.prompt(Role::Document), None);
    let last = load("lasttoken");
    assert_eq!(last.pooling(), [PoolingMode::LastToken]);
    assert_eq!(last.prompt(Role::Document), Some("passage: "));
    assert_eq!(last.prompt(Role::Query), None);
    let plain = load("plain");
    assert!(!plain.is_sentence_transformers());
    assert_eq!(plain.pooling(), [PoolingMode::Mean]);
    assert_eq!(plain.max_length(), 512);
    // No Normalize: the vectors are not unit length.
    let v = plain.embed_one("hello world").unwrap();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() > 0.01, "{norm}");
}

#[test]
fn the_id_follows_the_prompts_and_the_layout() {
    let a = load("cls_prompts").id().unwrap();
    assert_eq!(a, load("cls_prompts").id().unwrap());
    let other_prompt = BertEmbedder::builder(fixtures().join("cls_prompts"))
        .prompt(Role::Query, "search: ")
        .build()
        .unwrap();
    assert_ne!(a, other_prompt.id().unwrap());
    let no_doc_prompt = BertEmbedder::builder(fixtures().join("cls_prompts"))
        .prompt(Role::Document, "")
        .build()
        .unwrap();
    assert_ne!(a, no_doc_prompt.id().unwrap());
    assert_ne!(no_doc_prompt.id(), other_prompt.id());
    // Same encoder, different pooling / steps: different ids.
    let ids: std::collections::BTreeSet<String> =
        CASES.iter().map(|c| load(c).id().unwrap()).collect();
    assert_eq!(ids.len(), CASES.len());
}

/// A copy of one case's folder to break.
struct Broken(PathBuf);

impl Broken {
    fn of(case: &str, tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("rerank-st-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        crate::common::copy_dir(&fixtures().join(case), &dir);
        Broken(dir)
    }

    fn edit(&self, file: &str, f: impl FnOnce(&mut Value)) {
        let path = self.0.join(file);
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        f(&mut v);
        std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    }

    /// The load error's message; it must name `file` and `key`.
    fn refused(&self, file: &str, key: &str) -> String {
        let e = BertEmbedder::from_dir(&self.0).unwrap_err();
        let Error::Model { message, .. } = &e else {
            panic!("expected Error::Model, got {e:?}");
        };
        let path = self.0.join(file);
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains(key), "{message}");
        message.clone()
    }
}

impl Drop for Broken {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn unknown_pooling_modes_are_refused_naming_file_and_key() {
    let b = Broken::of("cls_prompts", "weightedmean");
    b.edit("1_Pooling/config.json", |v| {
        v["pooling_mode"] = "weightedmean".into()
    });
    let m = b.refused("1_Pooling/config.json", "pooling_mode");
    assert!(m.contains("weightedmean"), "{m}");
    b.edit("1_Pooling/config.json", |v| {
        v["pooling_mode"] = serde_json::json!(["cls", "median"])
    });
    b.refused("1_Pooling/config.json", "pooling_mode");

    // The older flags: weighted mean is refused too.
    let b = Broken::of("mean_sqrt_len", "legacy-weightedmean");
    b.edit("1_Pooling/config.json", |v| {
        v["pooling_mode_weightedmean_tokens"] = true.into()
    });
    b.refused("1_Pooling/config.json", "pooling_mode_weightedmean_tokens");
    b.edit("1_Pooling/config.json", |v| {
        v["pooling_mode_weightedmean_tokens"] = false.into();
        v["word_embedding_dimension"] = 64.into();
    });
    b.refused("1_Pooling/config.json", "word_embedding_dimension");
}

#[test]
fn unsupported_dense_modules_are_refused_naming_file_and_key() {
    let b = Broken::of("max_dense_tanh", "gelu");
    b.edit("2_Dense/config.json", |v| {
        v["activation_function"] = "torch.nn.modules.activation.GELU".into()
    });
    let m = b.refused("2_Dense/config.json", "activation_function");
    assert!(m.contains("GELU"), "{m}");
    b.edit("2_Dense/config.json", |v| {
        v["activation_function"] = "torch.nn.modules.linear.Identity".into();
        v["in_features"] = 48.into();
    });
    b.refused("2_Dense/config.json", "in_features");
    b.edit("2_Dense/config.json", |v| {
        v["in_features"] = 32.into();
        v["use_residual"] = true.into();
    });
    b.refused("2_Dense/config.json", "use_residual");
    // Identity loads (and is not Tanh: the vectors change).
    b.edit("2_Dense/config.json", |v| v["use_residual"] = false.into());
    let identity = BertEmbedder::from_dir(&b.0).unwrap();
    let tanh = load("max_dense_tanh");
    let (x, y) = (
        identity.embed_one("hello").unwrap(),
        tanh.embed_one("hello").unwrap(),
    );
    assert!(x.iter().zip(&y).all(|(a, b)| (a.tanh() - b).abs() < 1e-5));
    assert_ne!(x, y);
}

#[test]
fn other_modules_and_settings_are_refused_naming_file_and_key() {
    let b = Broken::of("cls_prompts", "modules");
    b.edit("modules.json", |v| {
        v[2]["type"] = "sentence_transformers.models.LayerNorm".into()
    });
    let m = b.refused("modules.json", "[2].type");
    assert!(m.contains("LayerNorm"), "{m}");
    b.edit("modules.json", |v| {
        v[2]["type"] = "sentence_transformers.models.Normalize".into();
        v[0]["path"] = "0_Transformer".into();
    });
    b.refused("modules.json", "[0].path");

    let b = Broken::of("max_dense_tanh", "similarity");
    b.edit("config_sentence_transformers.json", |v| {
        v["similarity_fn_name"] = "dot".into()
    });
    // Dot product on vectors that are not normalized does not rank as cosine.
    b.refused("config_sentence_transformers.json", "similarity_fn_name");
    b.edit("config_sentence_transformers.json", |v| {
        v["similarity_fn_name"] = "cosine".into();
        v["default_prompt_name"] = "missing".into();
    });
    b.refused("config_sentence_transformers.json", "default_prompt_name");

    let b = Broken::of("cls_prompts", "normalize");
    b.edit("2_Normalize/config.json", |v| {
        v["module_input_name"] = "token_embeddings".into()
    });
    b.refused("2_Normalize/config.json", "module_input_name");

    // A "message" modality (every text through the tokenizer's chat template) where the
    // tokenizer has no chat template: refused, not ignored.
    let b = Broken::of("cls_prompts", "message");
    b.edit("sentence_bert_config.json", |v| {
        v["modality_config"] = serde_json::json!({
            "text": {"method": "forward", "method_output_name": "last_hidden_state"},
            "message": {"method": "forward", "method_output_name": "last_hidden_state", "format": "flat"}
        })
    });
    let m = b.refused("sentence_bert_config.json", "modality_config.message");
    assert!(m.contains("chat"), "{m}");
}
