//! HyDE and multi-query expansion through the pipeline.

use std::sync::{Arc, Mutex};

use ndarray::Array2;
use rerank::answer::{Generation, GenerationRequest};
use rerank::expand::{ExpansionConfig, HydeConfig};
use rerank::pipeline::SearchRequest;
use rerank::recall::rrf_fuse;
use rerank::recall::SearchQuery;
use rerank::rerankers::RerankQuery;
use rerank::{
    Bm25Index, DenseIndex, Document, Embedder, Error, Generator, Hit, Hybrid, Pipeline, Reranker,
    Result, Retriever, RuleClassifier,
};

/// Answers with a fixed text (or fails) and records the user messages it saw.
struct Scripted {
    reply: Option<String>,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Generator for Scripted {
    fn generate(&self, request: &GenerationRequest) -> Result<Generation> {
        self.seen
            .lock()
            .unwrap()
            .push(request.last_user().to_string());
        match &self.reply {
            Some(text) => Ok(Generation {
                text: text.clone(),
                finish_reason: Some("stop".into()),
                usage: None,
            }),
            None => Err(Error::generation("model offline")),
        }
    }
}

fn scripted(reply: Option<&str>) -> (Scripted, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    (
        Scripted {
            reply: reply.map(str::to_string),
            seen: seen.clone(),
        },
        seen,
    )
}

/// One dimension per vocabulary word; counts words, records every text it embeds.
struct Vocab {
    words: Vec<&'static str>,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Embedder for Vocab {
    fn embed_as(&self, texts: &[&str], _role: rerank::Role) -> Result<Array2<f32>> {
        let mut m = Array2::zeros((texts.len(), self.words.len()));
        for (i, t) in texts.iter().enumerate() {
            self.seen.lock().unwrap().push(t.to_string());
            for w in t.to_lowercase().split(|c: char| !c.is_alphanumeric()) {
                if let Some(j) = self.words.iter().position(|v| *v == w) {
                    m[[i, j]] += 1.0;
                }
            }
        }
        Ok(m)
    }
    fn dim(&self) -> usize {
        self.words.len()
    }
}

fn vocab() -> (Arc<Vocab>, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    (
        Arc::new(Vocab {
            words: vec![
                "refund",
                "baggage",
                "lounge",
                "pets",
                "delay",
                "compensation",
            ],
            seen: seen.clone(),
        }),
        seen,
    )
}

/// Records what each retrieval asked for, then delegates.
struct Recording<R> {
    inner: R,
    seen: Arc<Mutex<Vec<(String, bool)>>>,
}

impl<R: Retriever> Retriever for Recording<R> {
    fn retrieve(&self, q: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        self.seen
            .lock()
            .unwrap()
            .push((q.text.clone(), q.embedding.is_some()));
        self.inner.retrieve(q, k)
    }
}

/// Records the query text it judged; scores every document the same (stage-1 order stays).
struct RecordingReranker {
    seen: Arc<Mutex<Vec<String>>>,
}

impl Reranker for RecordingReranker {
    fn score(&self, q: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
        self.seen.lock().unwrap().push(q.text.clone());
        Ok(vec![0.0; docs.len()])
    }
}

fn docs() -> Vec<Document> {
    vec![
        Document::new(
            "delay",
            "Compensation for a long delay is paid per passenger",
        ),
        Document::new("refund", "Refund rules for cancelled tickets"),
        Document::new("baggage", "Baggage allowance and fees"),
        Document::new("lounge", "Lounge access for members"),
        Document::new("pets", "Pets in the cabin"),
    ]
}

const ANALYTICAL: &str = "compare how the two airlines handle passengers stranded overnight";

#[test]
fn hyde_feeds_dense_recall_only_on_analytical_and_complex_routes() {
    let (generator, generated_for) = scripted(Some("Airlines owe compensation after a delay."));
    let (embedder, embedded) = vocab();
    let dense = DenseIndex::new(embedder.clone() as Arc<dyn Embedder>);
    dense.add(docs()).unwrap();
    let bm25 = Bm25Index::new();
    bm25.add(docs()).unwrap();
    let retrieved = Arc::new(Mutex::new(Vec::new()));
    let reranked = Arc::new(Mutex::new(Vec::new()));
    let pipeline = Pipeline::builder()
        .retriever(Recording {
            inner: Hybrid::rrf([
                Box::new(dense) as Box<dyn Retriever>,
                Box::new(bm25) as Box<dyn Retriever>,
            ]),
            seen: retrieved.clone(),
        })
        .reranker(RecordingReranker {
            seen: reranked.clone(),
        })
        .classifier(RuleClassifier::default())
        .generator(generator)
        .embedder(embedder)
        .hyde(HydeConfig::default())
        .top_k(1)
        .build()
        .unwrap();

    let response = pipeline.search(ANALYTICAL).unwrap();
    assert_eq!(
        response.classification.as_ref().unwrap().route,
        rerank::classify::Route::Analytical
    );
    assert!(response.hyde);
    assert!(response.timings.expand_ms.is_some());
    // The generator saw the query; the embedder embedded the hypothetical answer (the query
    // itself shares no vocabulary word, so only HyDE can find the delay document densely).
    assert_eq!(*generated_for.lock().unwrap(), [ANALYTICAL]);
    assert!(embedded
        .lock()
        .unwrap()
        .contains(&"Airlines owe compensation after a delay.".to_string()));
    // The retriever got the original text plus the embedding; the reranker the original text.
    assert_eq!(*retrieved.lock().unwrap(), [(ANALYTICAL.to_string(), true)]);
    assert_eq!(*reranked.lock().unwrap(), [ANALYTICAL]);
    assert_eq!(response.hits[0].id(), "delay");
    assert!(response.hits[0].vector_score.unwrap() > 0.0);

    // A standard-route query does not call the generator.
    let response = pipeline.search("refund rules").unwrap();
    assert!(!response.hyde);
    assert_eq!(generated_for.lock().unwrap().len(), 1);
    assert_eq!(
        retrieved.lock().unwrap().last().unwrap(),
        &("refund rules".to_string(), false)
    );
}

#[test]
fn hyde_falls_back_to_the_original_query_when_generation_fails() {
    for reply in [None, Some("   ")] {
        let (generator, generated_for) = scripted(reply);
        let (embedder, _) = vocab();
        let bm25 = Bm25Index::new();
        bm25.add(docs()).unwrap();
        let retrieved = Arc::new(Mutex::new(Vec::new()));
        let pipeline = Pipeline::builder()
            .retriever(Recording {
                inner: bm25,
                seen: retrieved.clone(),
            })
            .classifier(RuleClassifier::default())
            .generator(generator)
            .embedder(embedder)
            .hyde(HydeConfig::all_routes())
            .build()
            .unwrap();
        let response = pipeline.search("refund rules").unwrap();
        assert!(!response.hyde);
        assert_eq!(generated_for.lock().unwrap().len(), 1);
        assert_eq!(
            *retrieved.lock().unwrap(),
            [("refund rules".to_string(), false)]
        );
        assert_eq!(response.hits[0].id(), "refund");
    }
}

#[test]
fn hyde_needs_a_generator_and_an_embedder() {
    let (embedder, _) = vocab();
    let e = Pipeline::builder()
        .retriever(Bm25Index::new())
        .embedder(embedder)
        .hyde(HydeConfig::default())
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("HyDE"), "{e}");
    let (generator, _) = scripted(Some("x"));
    assert!(Pipeline::builder()
        .retriever(Bm25Index::new())
        .generator(generator)
        .hyde(HydeConfig::default())
        .build()
        .is_err());
}

#[test]
fn host_variants_are_retrieved_separately_and_fused_by_rrf() {
    let bm25 = Bm25Index::new();
    bm25.add(docs()).unwrap();
    let retrieved = Arc::new(Mutex::new(Vec::new()));
    let pipeline = Pipeline::builder()
        .retriever(Recording {
            inner: bm25,
            seen: retrieved.clone(),
        })
        .top_k(5)
        .build()
        .unwrap();
    let request = SearchRequest::new("refund rules").variants([
        "baggage fees",
        "Refund Rules",
        "lounge access",
        "",
    ]);
    let response = pipeline.search_with(&request).unwrap();
    // The copy of the query and the empty variant are dropped.
    assert_eq!(response.variants, ["baggage fees", "lounge access"]);
    let texts: Vec<String> = retrieved
        .lock()
        .unwrap()
        .iter()
        .map(|(t, _)| t.clone())
        .collect();
    assert_eq!(texts, ["refund rules", "baggage fees", "lounge access"]);

    // The fused order is exactly RRF over the three lists.
    let bm25 = Bm25Index::new();
    bm25.add(docs()).unwrap();
    let k = pipeline.options().candidates_for(5);
    let lists: Vec<Vec<Hit>> = ["refund rules", "baggage fees", "lounge access"]
        .iter()
        .map(|q| bm25.retrieve(&SearchQuery::new(*q), k).unwrap())
        .collect();
    let expected: Vec<String> = rrf_fuse(&lists, &[1.0, 1.0, 1.0], 60.0)
        .iter()
        .map(|h| h.id().to_string())
        .collect();
    let got: Vec<String> = response.hits.iter().map(|h| h.id().to_string()).collect();
    assert_eq!(got, expected);
    assert_eq!(got[0], "refund");
    assert!(got.contains(&"baggage".to_string()) && got.contains(&"lounge".to_string()));
}

#[test]
fn generated_variants_are_cleaned_capped_and_optional() {
    let (generator, generated_for) = scripted(Some(
        "1. baggage fees\n2. lounge access\n3. pets in the cabin\n4. delay compensation",
    ));
    let bm25 = Bm25Index::new();
    bm25.add(docs()).unwrap();
    let pipeline = Pipeline::builder()
        .retriever(bm25)
        .generator(generator)
        .expansion(ExpansionConfig {
            max_variants: 2,
            ..ExpansionConfig::default()
        })
        .build()
        .unwrap();
    let response = pipeline.search("refund rules").unwrap();
    assert_eq!(response.variants, ["baggage fees", "lounge access"]);
    assert_eq!(*generated_for.lock().unwrap(), ["refund rules"]);
    // Host variants win over generation.
    let response = pipeline
        .search_with(&SearchRequest::new("refund rules").variants(["pets"]))
        .unwrap();
    assert_eq!(response.variants, ["pets"]);
    assert_eq!(generated_for.lock().unwrap().len(), 1);

    // A failing generator means no variants, not a failed search.
    let (generator, _) = scripted(None);
    let bm25 = Bm25Index::new();
    bm25.add(docs()).unwrap();
    let pipeline = Pipeline::builder()
        .retriever(bm25)
        .generator(generator)
        .expansion(ExpansionConfig::default())
        .build()
        .unwrap();
    let response = pipeline.search("refund rules").unwrap();
    assert!(response.variants.is_empty());
    assert_eq!(response.hits[0].id(), "refund");

    // Generated variants need a generator.
    assert!(Pipeline::builder()
        .retriever(Bm25Index::new())
        .expansion(ExpansionConfig::default())
        .build()
        .is_err());
    assert!(Pipeline::builder()
        .retriever(Bm25Index::new())
        .expansion(ExpansionConfig::host_variants_only())
        .build()
        .is_ok());
}
