//! `Reranker::rank`: sorted indices and scores, the shape of sentence-transformers'
//! `CrossEncoder.rank`; and `scripts/fetch_reranker.sh`, which gets a cross-encoder from a hub
//! (here a loopback server in the hub's URL layout) into a folder `load_reranker` reads.

use std::path::{Path, PathBuf};
use std::process::Command;

use rerank::rerankers::{Ranked, RerankQuery};
use rerank::{Error, Reranker, Result};

/// Scores each document with a fixed value (its position in `values`).
struct Fixed(Vec<f32>);

impl Reranker for Fixed {
    fn score(&self, _query: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
        Ok(self.0.iter().copied().take(docs.len()).collect())
    }
}

fn indices(ranked: &[Ranked]) -> Vec<usize> {
    ranked.iter().map(|r| r.index).collect()
}

#[test]
fn rank_sorts_best_first_ties_in_input_order_nan_last() {
    let docs = ["a", "b", "c", "d", "e"];
    let r = Fixed(vec![0.5, f32::NAN, 0.9, 0.5, -1.0]);
    let ranked = r.rank("q", &docs, None).unwrap();
    assert_eq!(indices(&ranked), [2, 0, 3, 4, 1]);
    assert_eq!(ranked[0].score, 0.9);
    assert!(ranked.iter().all(|x| x.document.is_none()));

    let top = r.rank("q", &docs, Some(2)).unwrap();
    assert_eq!(indices(&top), [2, 0]);
    assert!(r.rank("q", &docs, Some(0)).unwrap().is_empty());
    assert_eq!(r.rank("q", &docs, Some(99)).unwrap().len(), 5);

    let with = r.rank_with_documents("q", &docs, Some(3)).unwrap();
    let texts: Vec<_> = with
        .iter()
        .map(|x| x.document.as_deref().unwrap())
        .collect();
    assert_eq!(texts, ["c", "a", "d"]);

    // Owned strings, a boxed `dyn Reranker` and an empty list work too.
    let owned: Vec<String> = docs.iter().map(|s| s.to_string()).collect();
    let boxed: Box<dyn Reranker> = Box::new(Fixed(vec![1.0, 2.0, 3.0, 4.0, 5.0]));
    assert_eq!(
        indices(&boxed.rank("q", &owned, None).unwrap()),
        [4, 3, 2, 1, 0]
    );
    assert!(boxed
        .rank("q", &Vec::<String>::new(), None)
        .unwrap()
        .is_empty());
}

#[test]
fn rank_refuses_a_reranker_that_returns_the_wrong_number_of_scores() {
    let short = Fixed(vec![1.0]);
    let err = short.rank("q", &["a", "b"], None).unwrap_err();
    assert!(matches!(err, Error::Rerank { .. }), "{err}");
    assert!(
        err.to_string().contains("1 scores for 2 documents"),
        "{err}"
    );
}

const SHARED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures");

fn ce_tiny() -> Option<PathBuf> {
    let dir = Path::new(SHARED).join("ce_tiny_a/model");
    if dir.join("model.safetensors").is_file() {
        Some(dir)
    } else {
        crate::common::skip(&format!("skipping: {} not found", dir.display()));
        None
    }
}

/// The fixture's (document, sentence-transformers `predict` score) pairs for `query`.
fn reference(query: &str) -> Vec<(String, f32)> {
    let text = std::fs::read_to_string(Path::new(SHARED).join("ce_tiny_a/scores.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["query"] == query)
        .map(|c| {
            let doc = c["document"].as_str().unwrap().to_string();
            (doc, c["predict_default"].as_f64().unwrap() as f32)
        })
        .collect()
}

/// A cross-encoder's `rank` orders documents by the scores sentence-transformers' `predict`
/// gives them.
#[cfg(feature = "models")]
fn assert_ranks_like_sentence_transformers(dir: &Path) {
    use rerank::models::ModelOptions;
    use rerank::rerankers::load_reranker;

    let reranker = load_reranker(dir, &ModelOptions::default().threads(1)).unwrap();
    let mut checked = 0;
    for query in ["Taylor's KTN", "How many people live in Berlin?"] {
        let cases = reference(query);
        assert!(
            cases.len() >= 2,
            "{query}: the fixture has {} cases",
            cases.len()
        );
        let docs: Vec<&str> = cases.iter().map(|(d, _)| d.as_str()).collect();
        let ranked = reranker.rank(query, &docs, None).unwrap();
        let mut want: Vec<usize> = (0..cases.len()).collect();
        want.sort_by(|&a, &b| cases[b].1.total_cmp(&cases[a].1));
        assert_eq!(indices(&ranked), want, "{query}");
        for r in &ranked {
            let expected = cases[r.index].1;
            assert!(
                (r.score - expected).abs() < 1e-5,
                "{} vs {expected}",
                r.score
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 2);
}

#[cfg(feature = "models")]
#[test]
fn a_cross_encoder_ranks_like_sentence_transformers() {
    if let Some(dir) = ce_tiny() {
        assert_ranks_like_sentence_transformers(&dir);
    }
}

fn fetch_script(base: &str, name: &str, dest: &Path) -> std::process::Output {
    Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/fetch_reranker.sh"
        ))
        .arg(name)
        .arg(dest)
        .env("HF_ENDPOINT", base)
        .output()
        .unwrap()
}

#[cfg(feature = "models")]
#[test]
fn the_fetch_script_gets_a_cross_encoder_from_a_hub() {
    let Some(fixture) = ce_tiny() else {
        return;
    };
    let (base, server) = crate::common::hub_server("test-org/ce-tiny", fixture.clone());
    let tmp = std::env::temp_dir().join(format!("rerank-fetch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let dest = tmp.join("ce-tiny");

    let out = fetch_script(&base, "test-org/ce-tiny", &dest);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in [
        "config.json",
        "tokenizer.json",
        "model.safetensors",
        "tokenizer_config.json",
    ] {
        assert_eq!(
            std::fs::read(dest.join(f)).unwrap(),
            std::fs::read(fixture.join(f)).unwrap(),
            "{f}"
        );
    }
    assert_ranks_like_sentence_transformers(&dest);

    // A repository the hub does not have fails, names the file, and leaves nothing behind.
    let missing = tmp.join("missing");
    let out = fetch_script(&base, "test-org/nope", &missing);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("config.json: HTTP 404"), "{stderr}");
    assert!(!missing.exists());
    let leftovers: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".fetch"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    crate::common::stop_hub(&base);
    // config, tokenizer, weights and the tokenizer's two side files.
    assert!(server.join().unwrap() >= 5);
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// The default length is the tokenizer's `model_max_length` capped by the position table, as
/// sentence-transformers has it (not a flat 512), and every pair cut to it is counted.
#[cfg(feature = "models")]
#[test]
fn truncated_pairs_are_counted_and_the_default_length_is_the_tokenizers() {
    use rerank::models::ModelOptions;
    let Some(dir) = ce_tiny() else {
        return;
    };
    // A copy whose tokenizer says 128, under the table's 512.
    let tmp = std::env::temp_dir().join(format!("rerank-maxlen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    crate::common::copy_dir(&dir, &tmp);
    let config = tmp.join("tokenizer_config.json");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("\"model_max_length\": 512", "\"model_max_length\": 128"),
    )
    .unwrap();
    assert_eq!(
        rerank::CrossEncoder::from_dir(&dir).unwrap().max_length(),
        512
    );
    let ce = rerank::CrossEncoder::from_dir(&tmp).unwrap();
    assert_eq!(ce.max_length(), 128);

    let long = "a long document about ranking functions ".repeat(40);
    let docs = [
        "a short one",
        long.as_str(),
        "another short one",
        long.as_str(),
    ];
    let query = RerankQuery::new("what ranks documents");
    let out = ce.score_detailed(&query, &docs).unwrap();
    assert_eq!(out.truncated, 2);
    assert_eq!(out.scores, ce.score(&query, &docs).unwrap());
    let wide = rerank::CrossEncoder::builder(&tmp)
        .options(ModelOptions::default().max_length(512))
        .build()
        .unwrap();
    assert_eq!(wide.score_detailed(&query, &docs).unwrap().truncated, 0);
    std::fs::remove_dir_all(&tmp).unwrap();
}
