//! What the model parity tests share (BERT, ModernBERT, DeBERTa, GTE): a cross-encoder
//! fixture's cases (each pair with its ids, transformers' logit alone and in the reference's
//! padded batch, and sentence-transformers' scores where the fixture recorded them), the check
//! that a `CrossEncoder` reproduces them one pair at a time and under any batching, and
//! scratch copies of fixture folders to break ([`Broken`]).
#![cfg(feature = "models")]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use rerank::models::ModelOptions;
use rerank::rerankers::{load_reranker, CrossEncoder};
use rerank::{load_embedder, Error};
use serde_json::Value;

/// One case of a cross-encoder fixture's expected.json.
pub struct Pair {
    pub query: String,
    pub document: String,
    pub input_ids: Vec<u32>,
    pub token_type_ids: Vec<u32>,
    pub logit: f32,
    pub logit_batched: f32,
    /// sentence-transformers' `CrossEncoder.predict` score (`st_score`), where recorded.
    pub st_score: Option<f32>,
    /// `CrossEncoder.predict` with its default activation (`predict_default`) and with the
    /// identity (`predict_identity`), where recorded (the shared `ce_tiny_a` fixture).
    pub predict_default: Option<f32>,
    pub predict_identity: Option<f32>,
}

/// The cases of `dir/expected.json`.
pub fn pairs_of(dir: &Path) -> Vec<Pair> {
    pairs_in(&dir.join("expected.json"))
}

/// The cases of a fixture's JSON file (`cases`, each with the fields of [`Pair`]).
pub fn pairs_in(file: &Path) -> Vec<Pair> {
    let text = std::fs::read_to_string(file).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let ids = |c: &Value, k: &str| -> Vec<u32> {
        c[k].as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Pair {
            query: c["query"].as_str().unwrap().to_string(),
            document: c["document"].as_str().unwrap().to_string(),
            input_ids: ids(c, "input_ids"),
            token_type_ids: ids(c, "token_type_ids"),
            logit: c["logit"].as_f64().unwrap() as f32,
            logit_batched: c["logit_batched"].as_f64().unwrap() as f32,
            st_score: c["st_score"].as_f64().map(|s| s as f32),
            predict_default: c["predict_default"].as_f64().map(|s| s as f32),
            predict_identity: c["predict_identity"].as_f64().map(|s| s as f32),
        })
        .collect()
}

/// The largest difference of `got` from `want`, which must be within `tol`.
pub fn assert_close(got: &[f32], want: impl Iterator<Item = f32>, tol: f32, what: &str) -> f32 {
    let want: Vec<f32> = want.collect();
    assert_eq!(got.len(), want.len(), "{what}");
    let mut worst = 0f32;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let d = (g - w).abs();
        assert!(d <= tol, "{what}: pair {i}: got {g}, want {w} (diff {d})");
        worst = worst.max(d);
    }
    worst
}

/// What [`check_cross_encoder`] leaves for the caller's own checks.
pub struct Checked {
    /// The cross-encoder with `options`.
    pub ce: CrossEncoder,
    pub cases: Vec<Pair>,
    /// Each pair's logit, scored alone.
    pub single: Vec<f32>,
}

impl Checked {
    /// The (query, document) pairs.
    pub fn pairs(&self) -> Vec<(&str, &str)> {
        self.cases
            .iter()
            .map(|c| (c.query.as_str(), c.document.as_str()))
            .collect()
    }
}

/// Checks the cross-encoder of `dir` against its expected.json: the ids and token types of
/// every pair, each pair's logit alone, then all pairs under each `(token budget, batch size)`
/// of `budgets`, every batching equal to the reference's padded batch and to the pairs alone,
/// all within `tol` (the largest difference is printed).
pub fn check_cross_encoder(
    dir: &Path,
    case: &str,
    options: ModelOptions,
    budgets: &[(usize, usize)],
    tol: f32,
) -> Checked {
    let cases = pairs_of(dir);
    let ce = CrossEncoder::builder(dir)
        .options(options.clone())
        .build()
        .unwrap();
    let pairs: Vec<(&str, &str)> = cases
        .iter()
        .map(|c| (c.query.as_str(), c.document.as_str()))
        .collect();
    for (c, p) in cases.iter().zip(&pairs) {
        let enc = ce.encode_pair(p.0, p.1).unwrap();
        assert_eq!(enc.input_ids, c.input_ids, "{case}: {p:?}");
        assert_eq!(enc.token_type_ids, c.token_type_ids, "{case}: {p:?}");
    }
    let single: Vec<f32> = pairs
        .iter()
        .map(|p| ce.logits(std::slice::from_ref(p)).unwrap()[0])
        .collect();
    let mut worst = assert_close(&single, cases.iter().map(|c| c.logit), tol, case);
    for &(tokens, size) in budgets {
        let batched = CrossEncoder::builder(dir)
            .options(options.clone().token_budget(tokens).max_batch_size(size))
            .build()
            .unwrap()
            .logits(&pairs)
            .unwrap();
        let what = format!("{case} batched ({tokens}, {size})");
        let padded = cases.iter().map(|c| c.logit_batched);
        worst = worst.max(assert_close(&batched, padded, tol, &what));
        worst = worst.max(assert_close(&batched, single.iter().copied(), tol, &what));
    }
    println!("{case}: largest logit difference from transformers {worst:.1e}");
    Checked { ce, cases, single }
}

/// A scratch copy of a fixture folder to break, removed on drop.
pub struct Broken(pub PathBuf);

impl Broken {
    /// A copy of `from` (`tag` goes into the folder's name, for the messages).
    pub fn of(from: &Path, tag: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("rerank-broken-{}-{n}-{tag}", std::process::id());
        let dir = std::env::temp_dir().join(name);
        let _ = std::fs::remove_dir_all(&dir);
        crate::common::copy_dir(from, &dir);
        Broken(dir)
    }

    /// Rewrites the copy's config.json with `f`.
    pub fn edit_config(&self, f: impl FnOnce(&mut Value)) {
        let path = self.0.join("config.json");
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        f(&mut v);
        std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    }

    /// The errors of loading the copy as `what` (`"embedder"`: `load_embedder`; else a
    /// reranker: `CrossEncoder` and `load_reranker`); each must be an [`Error::Model`] naming
    /// the copy's config.json and `key`. Returns the first message.
    pub fn refused(&self, what: &str, key: &str) -> String {
        let options = ModelOptions::default();
        let errors = match what {
            "embedder" => vec![load_embedder(&self.0, &options).err().unwrap()],
            _ => vec![
                CrossEncoder::from_dir(&self.0).unwrap_err(),
                load_reranker(&self.0, &options).err().unwrap(),
            ],
        };
        let config = self.0.join("config.json").display().to_string();
        let messages: Vec<String> = errors
            .iter()
            .map(|e| {
                let Error::Model { message, .. } = e else {
                    panic!("{key}: expected Error::Model, got {e:?}");
                };
                assert!(message.contains(&config), "{key}: {message}");
                assert!(message.contains(key), "{key}: {message}");
                message.clone()
            })
            .collect();
        messages[0].clone()
    }
}

impl Drop for Broken {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The variant folders of a sweep fixture (`tests/fixtures/<sweep>/<arch>/<variant>/`, each with
/// an `expected.json`), as (architecture, folder), sorted.
pub fn sweep_variants(sweep: &str) -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(sweep);
    let mut out = Vec::new();
    for arch in std::fs::read_dir(&root).unwrap() {
        let arch = arch.unwrap().path();
        if !arch.is_dir() {
            continue;
        }
        for variant in std::fs::read_dir(&arch).unwrap() {
            let variant = variant.unwrap().path();
            if variant.join("expected.json").is_file() {
                let name = arch.file_name().unwrap().to_string_lossy().into_owned();
                out.push((name, variant));
            }
        }
    }
    out.sort();
    out
}

/// An edit of a `config.json` that a loader must refuse.
pub type ConfigEdit = fn(&mut Value);

/// Each `(key, edit)` of `cases`, made to a copy of `base`'s config.json, is refused when
/// loaded as `what` ([`Broken::refused`]) with an [`Error::Model`] naming config.json and the
/// key.
pub fn each_edit_is_refused(base: &Path, what: &str, cases: &[(&str, ConfigEdit)]) {
    let tag = base.file_name().unwrap().to_string_lossy();
    for (i, (key, edit)) in cases.iter().enumerate() {
        let b = Broken::of(base, &format!("{tag}-{i}"));
        b.edit_config(*edit);
        b.refused(what, key);
    }
}

/// The embedder of `dir` in int8 stays within cosine 0.99 of its f32 vectors under another
/// id, and bf16 and the candle engine are refused (the latter naming `family` and
/// config.json): what every encoder that runs on the crate's kernels only promises.
pub fn int8_close_and_bf16_and_candle_refused(dir: &Path, family: &str) {
    use rerank::models::Precision;
    let options = ModelOptions::default().threads(2);
    let f32s = load_embedder(dir, &options).unwrap();
    let int8 = load_embedder(dir, &options.clone().precision(Precision::Int8)).unwrap();
    let texts = [
        "what is rust",
        "Rust is a systems programming language focused on safety, speed and concurrency.",
    ];
    let (q, f) = (int8.embed(&texts).unwrap(), f32s.embed(&texts).unwrap());
    for (a, b) in q.rows().into_iter().zip(f.rows()) {
        let c = rerank::embed::cosine(a.as_slice().unwrap(), b.as_slice().unwrap());
        assert!(c > 0.99 && c < 1.0, "{family} int8 cosine {c}");
    }
    assert_ne!(int8.id(), f32s.id());
    let e = load_embedder(dir, &ModelOptions::default().precision(Precision::Bf16))
        .err()
        .unwrap();
    assert!(
        matches!(e, Error::Config(_)) && e.to_string().contains("bf16"),
        "{e}"
    );
    #[cfg(feature = "candle")]
    {
        let e = load_embedder(dir, &options.device(rerank::models::Device::CandleCpu))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(family) && e.contains("config.json"), "{e}");
    }
}
