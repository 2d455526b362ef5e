//! Property tests over generated inputs: fusion, protected ordering, metrics, the two-phase
//! parser, the PII detector, the classifier, the analyzer, the config parser, models'
//! `config.json` files and JSONL corpora.
//!
//! CI runs each with a few hundred cases; `scripts/fuzz.sh` runs the same properties with
//! millions (`RERANK_FUZZ_CASES`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use proptest::prelude::*;
use rerank::classify::QueryKind;
use rerank::eval::{Evaluator, Qrels, Run};
use rerank::guard::{PiiGuard, PiiKind};
use rerank::parse::TwoPhaseQuery;
use rerank::recall::{rrf_fuse, weighted_fuse};
use rerank::rerankers::ProtectPolicy;
use rerank::text::{Analyzer, EnglishAnalyzer};
use rerank::{Document, Hit, QueryClassifier, RuleClassifier};

/// Cases per property: `RERANK_FUZZ_CASES`, else 256.
fn config() -> ProptestConfig {
    config_or(256)
}

/// Cases per property: `RERANK_FUZZ_CASES`, else `default`.
fn config_or(default: u32) -> ProptestConfig {
    let cases = std::env::var("RERANK_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn hit(id: usize, text: &str, score: f32) -> Hit {
    Hit::new(Arc::new(Document::new(format!("d{id}"), text)), score)
}

/// A ranked list of distinct ids from 0..20 with descending scores (ties allowed).
fn ranked_list() -> impl Strategy<Value = Vec<Hit>> {
    proptest::collection::vec((0usize..20, 0u8..5), 0..12).prop_map(|items| {
        let mut seen = HashSet::new();
        let mut out: Vec<(usize, f32)> = items
            .into_iter()
            .filter(|(id, _)| seen.insert(*id))
            .map(|(id, s)| (id, f32::from(s)))
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        out.into_iter().map(|(id, s)| hit(id, "text", s)).collect()
    })
}

fn ids(hits: &[Hit]) -> Vec<String> {
    hits.iter().map(|h| h.id().to_string()).collect()
}

const WORDS: [&str; 10] = [
    "taylor", "ktn", "passport", "rust", "the", "search", "of", "number", "flight", "hotel",
];

proptest! {
    #![proptest_config(config())]

    #[test]
    fn fusion_has_no_duplicates_is_sorted_and_deterministic(
        lists in proptest::collection::vec(ranked_list(), 1..4),
        k in 1.0f32..100.0,
    ) {
        let weights = vec![1.0; lists.len()];
        for fused in [rrf_fuse(&lists, &weights, k), weighted_fuse(&lists, &weights)] {
            let ids = ids(&fused);
            let distinct: HashSet<&String> = ids.iter().collect();
            prop_assert_eq!(distinct.len(), ids.len());
            let all: HashSet<String> = lists.iter().flat_map(|l| self::ids(l)).collect();
            prop_assert_eq!(distinct.len(), all.len());
            prop_assert!(fused.windows(2).all(|w| w[0].score >= w[1].score));
        }
        prop_assert_eq!(ids(&rrf_fuse(&lists, &weights, k)), ids(&rrf_fuse(&lists, &weights, k)));
    }

    #[test]
    fn protected_ordering_is_a_permutation_with_protected_hits_first_in_stage1_order(
        texts in proptest::collection::vec(proptest::collection::vec(0usize..WORDS.len(), 1..6), 0..15),
        scores in proptest::collection::vec(-5.0f32..5.0, 15),
        query in proptest::collection::vec(0usize..WORDS.len(), 1..4),
        n in 0usize..5,
    ) {
        let hits: Vec<Hit> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let text: Vec<&str> = t.iter().map(|&w| WORDS[w]).collect();
                hit(i, &text.join(" "), scores[i])
            })
            .collect();
        let query: Vec<&str> = query.iter().map(|&w| WORDS[w]).collect();
        let before = ids(&hits);
        let out = ProtectPolicy::top(n).order(&query.join(" "), QueryKind::Factual, hits);
        let mut a = ids(&out);
        let mut b = before.clone();
        a.sort();
        b.sort();
        prop_assert_eq!(a, b);
        let protected: Vec<&Hit> = out.iter().take_while(|h| h.protected).collect();
        prop_assert!(protected.len() <= n);
        prop_assert_eq!(out.iter().filter(|h| h.protected).count(), protected.len());
        let positions: Vec<usize> = protected
            .iter()
            .map(|h| before.iter().position(|id| id == h.id()).unwrap())
            .collect();
        prop_assert!(positions.windows(2).all(|w| w[0] < w[1]));
        prop_assert!(out[protected.len()..].windows(2).all(|w| w[0].score >= w[1].score));
    }

    #[test]
    fn metrics_lie_in_zero_one(
        results in proptest::collection::vec((0usize..30, -10.0f64..10.0), 0..40),
        judged in proptest::collection::vec((0usize..30, -1i32..4), 0..20),
    ) {
        let mut run = Run::new();
        run.insert("q".into(), results.iter().map(|(d, s)| (format!("d{d}"), *s)).collect());
        let mut qrels = Qrels::new();
        qrels.insert("q".into(), judged.iter().map(|(d, g)| (format!("d{d}"), *g)).collect::<HashMap<_, _>>());
        let names = ["ndcg@10", "ndcg@100", "map@100", "recall@10", "mrr@10", "p@10"];
        let e = Evaluator::from_names(&names).unwrap().evaluate(&run, &qrels);
        for v in e.mean.iter().chain(e.per_query.values().flatten()) {
            prop_assert!((0.0..=1.0).contains(v), "{v}");
        }
    }

    #[test]
    fn the_two_phase_parser_never_panics(text in "\\PC{0,200}") {
        let _ = TwoPhaseQuery::parse(&text);
    }

    #[test]
    fn the_two_phase_parser_round_trips(
        search in "[a-z0-9 ]{0,30}[a-z0-9]",
        task in "[a-z0-9 ?.,]{0,60}[a-z]",
        instruction in proptest::option::of("[a-z ]{0,20}[a-z]"),
    ) {
        let mut text = format!("[SEARCH] {search} [TASK] {task}");
        if let Some(i) = &instruction {
            text.push_str(&format!(" [INSTRUCT] {i}"));
        }
        let q = TwoPhaseQuery::parse(&text).unwrap();
        prop_assert_eq!(q.search, search.trim());
        prop_assert_eq!(q.task, task.trim());
        prop_assert_eq!(q.instruction.as_deref(), instruction.as_deref().map(str::trim));
    }

    #[test]
    fn generated_card_numbers_are_found_and_luhn_invalid_ones_are_not(
        body in proptest::collection::vec(0u32..10, 15),
        first in 3u32..7,
        off in 1u32..10,
    ) {
        let mut digits: Vec<u32> = std::iter::once(first).chain(body).collect();
        digits.push(luhn_check_digit(&digits));
        let valid: String = digits.iter().map(|d| char::from_digit(*d, 10).unwrap()).collect();
        let grouped = valid.as_bytes().chunks(4).map(|c| std::str::from_utf8(c).unwrap()).collect::<Vec<_>>().join(" ");
        let guard = PiiGuard::new([PiiKind::CreditCard]);
        prop_assert_eq!(guard.detect(&format!("card {valid} thanks")), [PiiKind::CreditCard]);
        prop_assert_eq!(guard.detect(&format!("card {grouped} thanks")), [PiiKind::CreditCard]);
        let last = digits.len() - 1;
        digits[last] = (digits[last] + off) % 10;
        let invalid: String = digits.iter().map(|d| char::from_digit(*d, 10).unwrap()).collect();
        prop_assert!(guard.detect(&format!("card {invalid} thanks")).is_empty(), "{invalid}");
    }

    #[test]
    fn generated_ssns_and_emails_are_found(
        area in 1u32..900,
        group in 1u32..100,
        serial in 1u32..10000,
        user in "[a-z][a-z0-9]{0,5}(\\.[a-z0-9]{1,5})?",
        host in "[a-z]{1,10}",
    ) {
        // 666 is never a valid area.
        let area = if area == 666 { 665 } else { area };
        let ssn = format!("ssn {area:03}-{group:02}-{serial:04}");
        prop_assert_eq!(PiiGuard::default().detect(&ssn), [PiiKind::Ssn]);
        let email = format!("mail {user}@{host}.com now");
        prop_assert_eq!(PiiGuard::default().detect(&email), [PiiKind::Email]);
    }

    #[test]
    fn the_classifier_and_the_analyzer_never_panic(text in "\\PC{0,300}") {
        let c = RuleClassifier::default().classify(&text);
        prop_assert!((0.0..=1.0).contains(&c.confidence));
        let terms = EnglishAnalyzer::default().analyze(&text);
        prop_assert!(terms.iter().all(|t| !t.is_empty()));
    }

    #[test]
    fn the_config_parser_never_panics(text in "\\PC{0,200}") {
        let _ = rerank::PipelineConfig::from_yaml_str(&text);
        let _ = rerank::PipelineConfig::from_json_str(&text);
        let _ = rerank::PipelineConfig::from_toml_str(&text);
    }
}

/// The Luhn check digit that makes `digits` + it valid.
fn luhn_check_digit(digits: &[u32]) -> u32 {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            if i % 2 == 0 {
                let x = d * 2;
                if x > 9 {
                    x - 9
                } else {
                    x
                }
            } else {
                d
            }
        })
        .sum();
    (10 - sum % 10) % 10
}

/// A value to put where a model's `config.json` has one: sizes that are zero, negative, odd,
/// huge or past `usize`, floats, strings, nulls, booleans, arrays and objects.
fn config_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::{json, Value};
    prop_oneof![
        prop::sample::select(vec![
            0i64,
            1,
            -1,
            2,
            3,
            7,
            33,
            1_000_000_000,
            1 << 40,
            1 << 62,
            i64::MAX,
        ])
        .prop_map(Value::from),
        Just(json!(u64::MAX)),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "\\PC{0,12}".prop_map(Value::from),
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        Just(json!([])),
        Just(json!([1, "x"])),
        Just(json!({})),
    ]
}

/// Copies of cross-encoders (BERT, ELECTRA with projected embeddings, DistilBERT), a Qwen3
/// reranker, an mT5 monoT5 reranker and sentence-transformers embedders (BERT, ModernBERT,
/// MPNet, DistilBERT, Gemma3, T5, Mistral, Llama), whose `config.json` each case rewrites:
/// `(copy, original config, whether a reranker)`.
fn model_copies(tag: &str) -> Option<Vec<(std::path::PathBuf, serde_json::Value, bool)>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let shared = root.join("../shared/fixtures");
    let models = [
        (shared.join("ce_tiny_a/model"), true),
        (shared.join("qwen3_tiny_a/model"), true),
        (root.join("tests/fixtures/st_bert_tiny/cls_prompts"), false),
        (root.join("tests/fixtures/st_modernbert_tiny/cls"), false),
        (root.join("tests/fixtures/st_mpnet_tiny/mean"), false),
        (
            root.join("tests/fixtures/st_distilbert_tiny/mean_norm"),
            false,
        ),
        (
            root.join("tests/fixtures/st_gemma3_tiny/bias_pattern"),
            false,
        ),
        (root.join("tests/fixtures/t5_tiny/st_gtr_gated"), false),
        (root.join("tests/fixtures/t5_tiny/mt5_gated"), true),
        (
            root.join("tests/fixtures/sweep_decoders/mistral/sliding"),
            false,
        ),
        (
            root.join("tests/fixtures/sweep_decoders/llama/attention_bias"),
            false,
        ),
        (
            root.join("tests/fixtures/sweep/electra/small_shape_project"),
            true,
        ),
        (
            root.join("tests/fixtures/sweep/distilbert/gelu_heads2"),
            true,
        ),
    ];
    let scratch = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fuzz_{tag}_{}", std::process::id()));
    let mut out = Vec::new();
    for (i, (dir, reranker)) in models.into_iter().enumerate() {
        if !dir.join("config.json").is_file() {
            crate::common::skip(&format!("skipping: {} is missing", dir.display()));
            return None;
        }
        let copy = scratch.join(i.to_string());
        let _ = std::fs::remove_dir_all(&copy);
        crate::common::copy_dir(&dir, &copy);
        let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
        out.push((copy, serde_json::from_str(&text).unwrap(), reranker));
    }
    Some(out)
}

/// A JSONL corpus line: a document, one with a field of the wrong type or out of range, a
/// line that is not an object, or noise.
fn corpus_line() -> impl Strategy<Value = String> {
    use serde_json::json;
    prop_oneof![
        ("[a-z0-9-]{0,8}", "\\PC{0,40}")
            .prop_map(|(id, text)| json!({"id": id, "text": text}).to_string()),
        (any::<i64>(), "\\PC{0,20}")
            .prop_map(|(id, text)| json!({"id": id, "text": text}).to_string()),
        ("[a-z]{1,5}", any::<f64>())
            .prop_map(|(id, page)| format!(r#"{{"id": "{id}", "text": "t", "page": {page}}}"#)),
        ("[a-z]{1,5}", any::<i64>())
            .prop_map(|(id, page)| format!(r#"{{"id": "{id}", "text": "t", "page": {page}}}"#)),
        ("[a-z]{1,5}", "\\PC{0,20}").prop_map(|(id, m)| {
            json!({"id": id, "text": "t", "title": null, "metadata": {"k": m, "n": [1, {"x": m}]}})
                .to_string()
        }),
        "[a-z]{1,5}".prop_map(|id| json!({"id": id}).to_string()),
        "\\PC{0,60}",
        Just(String::new()),
        Just("[]".to_string()),
        Just("null".to_string()),
        Just("{\"id\": \"a\", \"text\": \"unterminated".to_string()),
    ]
}

proptest! {
    // A case loads thirteen models: fewer cases than the other properties by default.
    #![proptest_config(config_or(64))]

    /// A model directory whose `config.json` has keys deleted or set to any value loads or
    /// fails with a typed error: never a panic, never an allocation sized by the config
    /// before the tensors' shapes agree (which would abort the process).
    #[test]
    fn model_configs_with_any_values_load_or_fail_cleanly(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), proptest::option::of(config_value())), 1..5),
        garbage in proptest::option::weighted(0.05, "\\PC{0,40}"),
    ) {
        thread_local! {
            static MODELS: Option<Vec<(std::path::PathBuf, serde_json::Value, bool)>> =
                model_copies("configs");
        }
        MODELS.with(|models| -> Result<(), TestCaseError> {
            let Some(models) = models else { return Ok(()) };
            for (dir, original, reranker) in models {
                let mut config = original.clone();
                let keys: Vec<String> = config.as_object().unwrap().keys().cloned().collect();
                for (at, value) in &edits {
                    let key = &keys[at.index(keys.len())];
                    let object = config.as_object_mut().unwrap();
                    match value {
                        Some(v) => object.insert(key.clone(), v.clone()),
                        None => object.remove(key),
                    };
                }
                let text = garbage.clone().unwrap_or_else(|| config.to_string());
                std::fs::write(dir.join("config.json"), text).unwrap();
                let options = rerank::models::ModelOptions::default().threads(1);
                let result = if *reranker {
                    rerank::rerankers::load_reranker(dir, &options).map(|_| ())
                } else {
                    rerank::load_embedder(dir, &options).map(|_| ())
                };
                if let Err(e) = result {
                    prop_assert!(!e.to_string().is_empty());
                }
            }
            Ok(())
        })?;
    }

    /// Any corpus file loads or fails naming the file and the line; the file reader and the
    /// text parser agree on every input.
    #[test]
    fn corpora_load_or_fail_naming_the_line(
        lines in proptest::collection::vec(corpus_line(), 0..12),
        bytes in proptest::option::weighted(0.1, proptest::collection::vec(any::<u8>(), 0..200)),
    ) {
        thread_local! {
            static FILE: std::path::PathBuf = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("fuzz_corpus_{}_{:?}.jsonl", std::process::id(), std::thread::current().id()));
        }
        let content = bytes.unwrap_or_else(|| lines.join("\n").into_bytes());
        FILE.with(|path| -> Result<(), TestCaseError> {
            std::fs::write(path, &content).unwrap();
            let read = Document::read_jsonl(path);
            let origin = path.display().to_string();
            if let Ok(text) = std::str::from_utf8(&content) {
                let parsed = Document::parse_jsonl(text, &origin);
                match (&read, &parsed) {
                    (Ok(a), Ok(b)) => {
                        prop_assert_eq!(a.len(), b.len());
                        let nonblank = text.lines().filter(|l| !l.trim().is_empty()).count();
                        prop_assert_eq!(a.len(), nonblank);
                    }
                    (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
                    _ => prop_assert!(false, "read {:?} but parsed {:?}", read.is_ok(), parsed.is_ok()),
                }
            }
            if let Err(e) = read {
                prop_assert!(e.to_string().contains(&origin), "{}", e);
            }
            Ok(())
        })?;
    }
}
