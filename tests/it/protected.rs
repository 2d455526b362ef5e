//! Protected reranking end to end: BM25 recall, a reranker that prefers general travel text,
//! and the rule classifier deciding which queries are factual.

use rerank::pipeline::DedupKey;
use rerank::rerankers::{ProtectPolicy, RerankQuery};
use rerank::{Bm25Index, Document, Hit, Pipeline, Reranker, Result, RuleClassifier};

/// Scores a document by how many general travel words it holds (more = better).
struct PrefersTravel;

const TRAVEL: [&str; 12] = [
    "travel",
    "trip",
    "flight",
    "flights",
    "airport",
    "security",
    "packing",
    "tips",
    "booking",
    "lounge",
    "luggage",
    "itinerary",
];

fn travel_score(text: &str) -> f32 {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| TRAVEL.contains(w))
        .count() as f32
}

impl Reranker for PrefersTravel {
    fn score(&self, _q: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
        Ok(docs.iter().map(|d| travel_score(d)).collect())
    }
    fn name(&self) -> &str {
        "prefers-travel"
    }
}

fn corpus() -> Vec<Document> {
    let mut docs =
        vec![
        Document::new("taylor", "Taylor's KTN: TT11YZS7J").with_source("Taylor.md"),
        Document::new("sarah-1", "Meeting with Sarah about the Q3 roadmap; prepare slides.")
            .with_source("sarah-1.md"),
        Document::new(
            "sarah-2",
            "Sarah prefers short meetings. Travel tips: prepare the itinerary and booking early.",
        )
        .with_source("sarah-2.md"),
        Document::new("sarah-3", "Notes to prepare for the airport meeting with the security team.")
            .with_source("sarah-3.md"),
        Document::new("sarah-4", "Sarah asked for the flight booking before the meeting.")
            .with_source("sarah-4.md"),
        Document::new("sarah-5", "Prepare luggage and packing list for the trip with Sarah.")
            .with_source("sarah-5.md"),
        Document::new("sarah-6", "meeting minutes").with_source("sarah-6.md"),
    ];
    let travel = [
        "Travel tips: add your KTN to every flight booking so airport security goes faster.",
        "A KTN (known traveler number) speeds up airport security on domestic flights.",
        "Packing tips for a long trip: luggage, itinerary, and your KTN for the flight.",
        "Airport lounge and security tips; remember the KTN when booking travel.",
        "Where to enter a KTN during flight booking, and other travel tips.",
        "Renewing a KTN before an international trip: airport security and travel tips.",
        "Flight itinerary checklist: KTN, luggage tags, lounge access, travel insurance.",
        "Travel security tips: keep the KTN private, check flights and airport rules.",
    ];
    for (i, text) in travel.iter().enumerate() {
        docs.push(
            Document::new(format!("travel-{i}"), *text).with_source(format!("travel-{i}.md")),
        );
    }
    docs
}

fn index() -> Bm25Index {
    let index = Bm25Index::new();
    index.add(corpus()).unwrap();
    index
}

fn ids(hits: &[Hit]) -> Vec<&str> {
    hits.iter().map(|h| h.id()).collect()
}

#[test]
fn taylors_ktn_stays_first() {
    // Without protection, the travel-loving reranker pushes Taylor.md out of the top 5.
    let plain = Pipeline::builder()
        .retriever(index())
        .reranker(PrefersTravel)
        .top_k(5)
        .build()
        .unwrap();
    let response = plain.search("Taylor's KTN").unwrap();
    assert!(response.reranked);
    assert!(
        response.candidates > 5,
        "the reranker must have something to reorder"
    );
    assert!(
        !ids(&response.hits).contains(&"taylor"),
        "precondition: the reranker alone drops Taylor.md: {:?}",
        ids(&response.hits)
    );
    // Stage 1 ranks it first.
    let stage1 = Pipeline::builder()
        .retriever(index())
        .top_k(5)
        .build()
        .unwrap();
    assert_eq!(
        stage1.search("Taylor's KTN").unwrap().hits[0].id(),
        "taylor"
    );

    // With the classifier (factual query) protected reranking keeps it at #1.
    let protected = Pipeline::builder()
        .retriever(index())
        .reranker(PrefersTravel)
        .classifier(RuleClassifier::default())
        .top_k(5)
        .build()
        .unwrap();
    let response = protected.search("Taylor's KTN").unwrap();
    let c = response.classification.as_ref().unwrap();
    assert_eq!(c.kind, rerank::classify::QueryKind::Factual);
    let top = &response.hits[0];
    assert_eq!(top.id(), "taylor");
    assert!(top.protected);
    assert_eq!(top.stage1_rank, 1);
    assert_eq!(top.document.source.as_deref(), Some("Taylor.md"));
    assert_eq!(
        top.rerank_score,
        Some(0.0),
        "it was still scored by the reranker"
    );

    // Protected hits come first in stage-1 order (at most 3, from every candidate); the rest
    // follow in the reranker's order.
    let n_protected = response.hits.iter().filter(|h| h.protected).count();
    assert!((1..=3).contains(&n_protected));
    let (head, tail) = response.hits.split_at(n_protected);
    assert!(head.windows(2).all(|w| w[0].stage1_rank < w[1].stage1_rank));
    assert!(tail.iter().all(|h| !h.protected));
    assert!(tail
        .windows(2)
        .all(|w| w[0].rerank_score >= w[1].rerank_score));
}

#[test]
fn protection_survives_a_score_threshold() {
    let pipeline = Pipeline::builder()
        .retriever(index())
        .reranker(PrefersTravel)
        .classifier(RuleClassifier::default())
        .score_threshold(1.0)
        .top_k(5)
        .build()
        .unwrap();
    let response = pipeline.search("Taylor's KTN").unwrap();
    assert_eq!(response.hits[0].id(), "taylor");
    assert!(response.hits.iter().all(|h| h.protected || h.score >= 1.0));
}

#[test]
fn semantic_query_uses_the_rerankers_order_unchanged() {
    let query = "prepare me for meeting with Sarah";
    let classifier = || {
        RuleClassifier::builder()
            .alias("Sarah", "Sarah Lee")
            .build()
            .unwrap()
    };
    // Stage-1 candidates in order (the same recall text: "Sarah Lee" added by the alias map),
    // then the reranker's scores, sorted (stable) by hand.
    let stage1 = Pipeline::builder()
        .retriever(index())
        .classifier(classifier())
        .top_k(50)
        .dedup(DedupKey::None)
        .build()
        .unwrap()
        .search(query)
        .unwrap();
    assert!(stage1.hits.len() > 5);
    let mut expected: Vec<(f32, String)> = stage1
        .hits
        .iter()
        .map(|h| (travel_score(&h.document.full_text()), h.id().to_string()))
        .collect();
    expected.sort_by(|a, b| b.0.total_cmp(&a.0));
    let expected: Vec<&str> = expected.iter().take(5).map(|(_, id)| id.as_str()).collect();

    let pipeline = Pipeline::builder()
        .retriever(index())
        .reranker(PrefersTravel)
        .classifier(classifier())
        .top_k(5)
        .dedup(DedupKey::None)
        .build()
        .unwrap();
    let response = pipeline.search(query).unwrap();
    assert_eq!(
        response.classification.as_ref().unwrap().kind,
        rerank::classify::QueryKind::Semantic
    );
    assert!(response.reranked);
    assert_eq!(ids(&response.hits), expected);
    assert!(response.hits.iter().all(|h| !h.protected));
    // The reranker moved things: this is not stage-1 order.
    assert_ne!(ids(&response.hits), ids(&stage1.hits[..5]));
}

#[test]
fn protection_off_or_without_classifier_is_plain_reranking() {
    for pipeline in [
        Pipeline::builder()
            .retriever(index())
            .reranker(PrefersTravel)
            .classifier(RuleClassifier::default())
            .protection(ProtectPolicy::disabled())
            .top_k(5)
            .build()
            .unwrap(),
        Pipeline::builder()
            .retriever(index())
            .reranker(PrefersTravel)
            .top_k(5)
            .build()
            .unwrap(),
    ] {
        let response = pipeline.search("Taylor's KTN").unwrap();
        assert!(!ids(&response.hits).contains(&"taylor"));
        assert!(response.hits.iter().all(|h| !h.protected));
    }
}

#[test]
fn a_wider_policy_protects_more() {
    let pipeline = Pipeline::builder()
        .retriever(index())
        .reranker(PrefersTravel)
        .classifier(RuleClassifier::default())
        .protection(ProtectPolicy::top(1))
        .top_k(5)
        .build()
        .unwrap();
    let response = pipeline.search("Taylor's KTN").unwrap();
    assert_eq!(response.hits[0].id(), "taylor");
    assert_eq!(response.hits.iter().filter(|h| h.protected).count(), 1);
    // An inconsistent policy is rejected at build time.
    let bad = ProtectPolicy {
        max_protected: 4,
        window: Some(2),
        ..ProtectPolicy::default()
    };
    assert!(Pipeline::builder()
        .retriever(index())
        .protection(bad)
        .build()
        .is_err());
}

/// Returns the documents in a fixed order (a hybrid fusion that put the exact note 5th).
struct Fixed(Vec<Document>);

impl rerank::Retriever for Fixed {
    fn retrieve(&self, _q: &rerank::recall::SearchQuery, k: usize) -> Result<Vec<Hit>> {
        Ok(self
            .0
            .iter()
            .take(k)
            .enumerate()
            .map(|(i, d)| Hit::new(std::sync::Arc::new(d.clone()), 1.0 / (i + 1) as f32))
            .collect())
    }
}

#[test]
fn the_exact_note_fifth_after_fusion_comes_out_first() {
    // Stage 1 puts four travel texts (each with "KTN") before Taylor's note.
    let docs = corpus();
    let mut order: Vec<Document> = docs
        .iter()
        .filter(|d| d.id.starts_with("travel"))
        .take(4)
        .cloned()
        .collect();
    order.push(docs[0].clone());
    order.extend(docs.iter().filter(|d| d.id.starts_with("sarah")).cloned());
    let build = |policy: ProtectPolicy| {
        Pipeline::builder()
            .retriever(Fixed(order.clone()))
            .reranker(PrefersTravel)
            .classifier(
                RuleClassifier::builder()
                    .alias("tay", "Taylor Smith")
                    .build()
                    .unwrap(),
            )
            .protection(policy)
            .top_k(3)
            .build()
            .unwrap()
    };
    // The old window of three never sees it: the reranker buries it.
    let windowed = build(ProtectPolicy::top(3)).search("Taylor's KTN").unwrap();
    assert_ne!(windowed.hits[0].id(), "taylor");
    // Every candidate is scanned by default; the note holding both keywords wins a place.
    let pipeline = build(ProtectPolicy {
        max_protected: 1,
        ..ProtectPolicy::default()
    });
    let response = pipeline.search("Taylor's KTN").unwrap();
    assert_eq!(response.hits[0].id(), "taylor", "{:?}", ids(&response.hits));
    assert!(response.hits[0].protected);
    assert_eq!(response.hits[0].stage1_rank, 5);
    // By alias: "tay" is Taylor Smith, whose name counts as keywords; the possessive of a
    // known name is factual, and the name goes to recall too.
    let response = pipeline.search("tay's KTN").unwrap();
    let c = response.classification.as_ref().unwrap();
    assert_eq!(c.kind, rerank::classify::QueryKind::Factual);
    assert_eq!(c.people, ["Taylor Smith"]);
    assert!(
        c.signals.contains(&"known_name_possessive".to_string()),
        "{:?}",
        c.signals
    );
    assert_eq!(response.hits[0].id(), "taylor", "{:?}", ids(&response.hits));
    let plan = pipeline
        .plan(&rerank::pipeline::SearchRequest::new("tay's KTN"))
        .unwrap();
    assert_eq!(plan.recall_text, "tay's KTN Taylor Smith");
    // A known name's possessive stays factual even beside words that read as semantic.
    let c = rerank::QueryClassifier::classify(
        &RuleClassifier::builder()
            .alias("tay", "Taylor Smith")
            .build()
            .unwrap(),
        "explain how I should prepare and organize tay's travel documents for the long trip",
    );
    assert_eq!(
        c.kind,
        rerank::classify::QueryKind::Factual,
        "{:?}",
        c.signals
    );
}
