//! Long documents scored by passages (`ModelOptions::passages`, config `reranker.passages`),
//! on the shared tiny cross-encoder (`ce_tiny_a`, WordPiece) and Qwen3 reranker
//! (`qwen3_tiny_a`, byte-level BPE), and the tiny mxbai-rerank-v2 (`mxbai_v2_tiny`): a document that fits is scored exactly as without
//! passages; a longer one gets the best of its windows, each equal to scoring the window's text
//! alone; windows overlap and cover the document; the winning range is reported in the scores
//! and in the pipeline's hits; a passage past the first window lifts its document above one
//! that wins without passages.
#![cfg(feature = "models")]

use std::ops::Range;
use std::path::{Path, PathBuf};

use rerank::models::ModelOptions;
use rerank::rerankers::{
    CrossEncoder, MxbaiReranker, PassageAggregate, Passages, Qwen3Reranker, RerankQuery,
    RerankScores,
};
use rerank::{Document, Pipeline, PipelineConfig, Reranker};

const CE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/fixtures/ce_tiny_a/model"
);
const QWEN3: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/fixtures/qwen3_tiny_a/model"
);
/// The cross-encoder's pairs are cut at this many tokens: about 40 beside a short query.
const CE_MAX_LENGTH: usize = 48;
/// The Qwen3 prompts likewise (the template's prefix and suffix take about 60).
const QWEN3_MAX_LENGTH: usize = 110;
/// mxbai-rerank-v2's query and document together.
const MXBAI_MAX_LENGTH: usize = 56;
/// Passage scores agree with the windows scored alone to this (different batch packing).
const TOL: f32 = 1e-5;

fn model(path: &str) -> Option<PathBuf> {
    let dir = PathBuf::from(path);
    if dir.is_dir() {
        Some(dir)
    } else {
        crate::common::skip(&format!("skipping: {} not found", dir.display()));
        None
    }
}

/// `words` words of English-looking filler, different for each `seed`, with punctuation.
fn filler(words: usize, seed: usize) -> String {
    const VOCAB: &[&str] = &[
        "the",
        "river",
        "council",
        "approved",
        "budget",
        "harbour",
        "museum",
        "quietly",
        "engineers",
        "measured",
        "bridge",
        "rainfall",
        "autumn",
        "village",
        "library",
        "orchard",
        "painted",
        "market",
        "students",
        "railway",
    ];
    (0..words)
        .map(|i| {
            let w = VOCAB[(i * 7 + seed * 13 + i * i) % VOCAB.len()];
            if i % 11 == 10 {
                format!("{w}.")
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn documents() -> Vec<String> {
    vec![
        "BM25 ranks documents by term frequency.".to_string(),
        filler(120, 1),
        String::new(),
        format!(
            "{} Ünïcödé naïve café 東京タワー {}",
            filler(30, 2),
            filler(40, 3)
        ),
        filler(300, 4),
    ]
}

/// A query and document to the byte ranges of the document's windows.
type Windows = Box<dyn Fn(Passages, &str, &str) -> Vec<Range<usize>>>;

/// A reranker under test, with and without passages, and its hook to the windows.
struct Subject {
    name: &'static str,
    plain: Box<dyn Reranker>,
    with: Box<dyn Fn(Passages) -> Box<dyn Reranker>>,
    windows: Windows,
}

/// A subject for the reranker `build` makes from options: `plain` with `options`, and with
/// passages added to them; `windows` is its passage-windows hook.
fn subject<R: Reranker + 'static>(
    name: &'static str,
    options: ModelOptions,
    build: impl Fn(ModelOptions) -> R + Clone + 'static,
    windows: impl Fn(&R, &str, &str) -> Vec<Range<usize>> + 'static,
) -> Subject {
    let plain = build(options.clone());
    let (b, o) = (build.clone(), options.clone());
    Subject {
        name,
        plain: Box::new(plain),
        with: Box::new(move |p| Box::new(b(o.clone().passages(p)))),
        windows: Box::new(move |p, q, d| windows(&build(options.clone().passages(p)), q, d)),
    }
}

fn subjects() -> Vec<Subject> {
    let mut out = Vec::new();
    let base = ModelOptions::default().threads(2);
    if let Some(dir) = model(CE) {
        out.push(subject(
            "cross-encoder",
            base.clone().max_length(CE_MAX_LENGTH),
            move |o| CrossEncoder::builder(&dir).options(o).build().unwrap(),
            |r, q, d| r.passage_windows(q, d).unwrap(),
        ));
    }
    if let Some(dir) = model(QWEN3) {
        out.push(subject(
            "qwen3",
            base.clone().max_length(QWEN3_MAX_LENGTH),
            move |o| Qwen3Reranker::builder(&dir).options(o).build().unwrap(),
            |r, q, d| r.passage_windows(&RerankQuery::new(q), d).unwrap(),
        ));
    }
    let mxbai = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mxbai_v2_tiny/model");
    if let Some(dir) = model(mxbai.to_str().unwrap()) {
        // mxbai-rerank-v2's max_length counts the query and the document.
        out.push(subject(
            "mxbai",
            base.max_length(MXBAI_MAX_LENGTH),
            move |o| MxbaiReranker::builder(&dir).options(o).build().unwrap(),
            |r, q, d| r.passage_windows(&RerankQuery::new(q), d).unwrap(),
        ));
    }
    out
}

fn score(r: &dyn Reranker, query: &str, docs: &[&str]) -> RerankScores {
    r.score_detailed(&RerankQuery::new(query), docs).unwrap()
}

#[test]
fn a_document_scores_its_best_window_each_as_if_scored_alone() {
    let query = "which council approved the harbour budget";
    let docs = documents();
    let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
    for s in subjects() {
        let passages = Passages::default().window(16).stride(12);
        let reranker = (s.with)(passages);
        let plain = score(s.plain.as_ref(), query, &refs);
        let out = score(reranker.as_ref(), query, &refs);
        assert_eq!(out.passages.len(), docs.len(), "{}", s.name);
        assert_eq!(out.truncated, 0, "{}: no window is cut", s.name);
        assert!(
            plain.truncated >= 3,
            "{}: the long documents are cut without passages",
            s.name
        );
        for (i, doc) in docs.iter().enumerate() {
            let windows = (s.windows)(passages, query, doc);
            let texts: Vec<&str> = windows.iter().map(|w| &doc[w.clone()]).collect();
            let alone = score(s.plain.as_ref(), query, &texts).scores;
            let best = alone.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let winner = &windows[alone.iter().position(|&a| a == best).unwrap()];
            assert!(
                (out.scores[i] - best).abs() <= TOL,
                "{} doc {i}: {} vs best window {best}",
                s.name,
                out.scores[i]
            );
            assert_eq!(&out.passages[i], winner, "{} doc {i}", s.name);
            if windows.len() == 1 {
                // A document that fits is scored exactly as without passages.
                assert_eq!(windows[0], 0..doc.len(), "{} doc {i}", s.name);
                assert!(
                    (out.scores[i] - plain.scores[i]).abs() <= TOL,
                    "{} doc {i}",
                    s.name
                );
                continue;
            }
            // Windows overlap, cover the document, and each fits the window.
            assert_eq!(windows[0].start, 0, "{} doc {i}", s.name);
            assert_eq!(
                windows.last().unwrap().end,
                doc.trim_end().len(),
                "{}",
                s.name
            );
            for pair in windows.windows(2) {
                assert!(pair[1].start > pair[0].start, "{} {pair:?}", s.name);
                assert!(
                    pair[1].start < pair[0].end,
                    "{}: {pair:?} do not overlap",
                    s.name
                );
            }
        }
        assert!(
            (s.windows)(passages, query, &docs[4]).len() >= 20,
            "{}: 300 words in windows of 16 tokens",
            s.name
        );
    }
}

#[test]
fn first_and_mean_aggregate_the_same_windows() {
    let query = "railway museum";
    let doc = filler(150, 7);
    for s in subjects() {
        let passages = Passages::default().window(20).stride(20);
        let windows = (s.windows)(passages, query, &doc);
        let texts: Vec<&str> = windows.iter().map(|w| &doc[w.clone()]).collect();
        let alone = score(s.plain.as_ref(), query, &texts).scores;
        let first = (s.with)(passages.aggregate(PassageAggregate::First));
        let out = score(first.as_ref(), query, &[&doc]);
        assert!((out.scores[0] - alone[0]).abs() <= TOL, "{}", s.name);
        assert_eq!(out.passages[0], windows[0], "{}", s.name);
        let mean = (s.with)(passages.aggregate(PassageAggregate::Mean));
        let out = score(mean.as_ref(), query, &[&doc]);
        let expected = alone.iter().sum::<f32>() / alone.len() as f32;
        assert!((out.scores[0] - expected).abs() <= TOL, "{}", s.name);
    }
}

/// The passage the model itself judges most relevant, put past the first window of a long
/// document, lifts that document above a rival only with passages on.
#[test]
fn a_relevant_passage_past_the_first_window_ranks_its_document_first() {
    let query = "when did the engineers measure the bridge";
    // On the cross-encoder and Qwen3; mxbai's windows and scores are checked by the tests
    // above.
    for s in subjects().into_iter().filter(|s| s.name != "mxbai") {
        let passages = Passages::default().window(24).stride(16);
        // The model's favourite among candidate passages, and a long document ending with it.
        let candidates: Vec<String> = (0..40).map(|i| filler(12, 100 + i)).collect();
        let refs: Vec<&str> = candidates.iter().map(String::as_str).collect();
        let alone = score(s.plain.as_ref(), query, &refs).scores;
        let (best, _) = alone
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .unwrap();
        let long = format!("{} {}", filler(80, 1), candidates[best]);
        let windows = (s.windows)(passages, query, &long);
        assert!(
            windows[0].end < long.len() - candidates[best].len(),
            "{}: the passage lies past the first window",
            s.name
        );
        // Rivals: documents that fit, scored the same with and without passages.
        let on = (s.with)(passages);
        let long_off = score(s.plain.as_ref(), query, &[&long]).scores[0];
        let long_on = score(on.as_ref(), query, &[&long]).scores[0];
        let Some(rival) = candidates
            .iter()
            .zip(&alone)
            .find(|(_, &a)| a > long_off && a < long_on)
            .map(|(c, _)| c.clone())
        else {
            panic!(
                "{}: no rival between {long_off} (truncated) and {long_on} (passages)",
                s.name
            );
        };
        let docs = [rival.as_str(), long.as_str()];
        let ranked_on = on.rank(query, &docs, None).unwrap();
        let ranked_off = s.plain.rank(query, &docs, None).unwrap();
        assert_eq!(ranked_on[0].index, 1, "{}: with passages", s.name);
        assert_eq!(ranked_off[0].index, 0, "{}: without passages", s.name);
    }
}

#[test]
fn the_pipeline_reports_the_winning_passage_in_each_hit() {
    let Some(dir) = model(CE) else { return };
    let yaml = format!(
        "retriever: {{ type: bm25 }}\nreranker:\n  type: cross_encoder\n  model: {}\n  passages: {{ window: 16, stride: 8 }}\n",
        dir.display()
    );
    let config = PipelineConfig::from_yaml_str(&yaml).unwrap();
    // The config keeps the model's own max_length (512 tokens): 700 words do not fit.
    let docs = vec![
        Document::new("long", format!("{} bridge engineers", filler(700, 9))),
        Document::new("short", "the bridge engineers measured rainfall"),
    ];
    let pipeline: Pipeline = config.builder(docs).unwrap().build().unwrap();
    let response = pipeline.search("bridge engineers").unwrap();
    assert!(response.reranked);
    for hit in &response.hits {
        let text = hit.document.full_text();
        let range = hit.passage.clone().expect("a passage per reranked hit");
        assert!(
            text.get(range.clone()).is_some(),
            "{range:?} in {}",
            hit.id()
        );
        if hit.id() == "short" {
            assert_eq!(range, 0..text.len());
        } else {
            assert!(range.len() < text.len() / 4, "{range:?}");
        }
    }
    // Passages are for the model rerankers; the others refuse them at build time.
    let bad = "retriever: { type: bm25 }\nreranker:\n  type: lexical\n  passages: {}\n";
    let e = PipelineConfig::from_yaml_str(bad)
        .and_then(|c| c.builder(Vec::new()))
        .and_then(|b| b.build())
        .expect_err("lexical with passages is refused")
        .to_string();
    assert!(e.contains("reranker.passages"), "{e}");
    let e = CrossEncoder::builder(&dir)
        .options(ModelOptions::default().passages(Passages::default().window(4).stride(8)))
        .build()
        .unwrap_err()
        .to_string();
    assert!(e.contains("stride 8 is longer than the window 4"), "{e}");
}
