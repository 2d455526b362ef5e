//! The main job, offline: a two-stage pipeline over the handbook shipped in `examples/data/`.
//!
//! For each query it prints the classification, then the hits with their stage-1 and stage-2
//! scores side by side, each column named by what it is (`bm25`, `fused`, `lexical`, `cosine`,
//! `cross-encoder`), protected exact matches marked `*`; then it answers one question with
//! citations and its grounding confidence.
//!
//! It uses the best models it finds, and says which:
//! - stage 1 is BM25, or BM25 + all-MiniLM-L6-v2 dense fused by reciprocal rank when the
//!   embedder is in `models/` (or `$RERANK_MODELS_DIR`; `scripts/fetch_models.sh`);
//! - stage 2 is a cross-encoder when `models/ms-marco-MiniLM-L-6-v2` is there
//!   (`scripts/fetch_reranker.sh`; another one with `RERANK_DEMO_RERANKER=DIR`), else embedding
//!   cosine with the embedder, else the model-free `LexicalReranker`.
//!
//! Stage 2 reranks every query's candidates, however few.
//!
//! ```text
//! cargo run --release --example demo
//! ```

use rerank::rerankers::LexicalReranker;
use rerank::{
    Bm25Index, Document, Pipeline, Reranker, Retriever, RuleClassifier, SearchRequest,
    SearchResponse,
};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/handbook.jsonl");

const QUERIES: [&str; 4] = [
    "Taylor's KTN",
    "how do I roll back a failed deployment",
    "what was the 2023 revenue",
    "can I bring my dog on a business trip",
];

/// Without a model, stage 2 keeps documents with at least half of the query's content words.
const LEXICAL_THRESHOLD: f32 = 0.5;

const QUESTION: &str = "How many days before departure must business flights be booked?";

fn main() -> rerank::Result<()> {
    let docs = Document::read_jsonl(CORPUS)?;
    println!(
        "indexed {} documents from examples/data/handbook.jsonl",
        docs.len()
    );
    let stages = stages(docs)?;
    println!("{}\n", stages.about);
    let labels = (stages.stage1, stages.stage2);
    let mut builder = Pipeline::builder()
        .retriever(stages.retriever)
        .reranker(stages.reranker)
        .classifier(RuleClassifier::default())
        .top_k(stages.top_k)
        .candidate_multiplier(3);
    if let Some(t) = stages.threshold {
        println!("hits need a {} score of at least {t}\n", stages.stage2);
        builder = builder.score_threshold(t);
    }
    let pipeline = builder.build()?;

    for query in QUERIES {
        print_response(&pipeline.search_with(&SearchRequest::new(query))?, &labels);
    }

    let answer = pipeline.answer(QUESTION)?;
    println!("question: {QUESTION}");
    println!("answer:   {}", answer.text);
    for c in &answer.citations {
        println!("  cites {}", c.label());
    }
    println!("grounding confidence: {:.2}", answer.confidence);
    Ok(())
}

/// The two stages, the hits shown per query, and what each stage's score is.
struct Stages {
    retriever: Box<dyn Retriever>,
    reranker: Box<dyn Reranker>,
    top_k: usize,
    /// The stage-1 score: `bm25` or `fused`.
    stage1: &'static str,
    /// The stage-2 score: `lexical`, `cosine` or `cross-encoder`.
    stage2: &'static str,
    /// Hits below this final score are dropped: the lexical reranker's share of the query's
    /// content words (half of them), so that a query no document answers says so.
    threshold: Option<f32>,
    about: String,
}

fn stages(docs: Vec<Document>) -> rerank::Result<Stages> {
    let bm25 = Bm25Index::new();
    bm25.add(docs.clone())?;
    #[cfg(feature = "models")]
    {
        use std::path::PathBuf;
        use std::sync::Arc;

        let base = std::env::var_os("RERANK_MODELS_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/models").into());
        let embedder_dir = base.join("all-MiniLM-L6-v2");
        let cross_encoder_dir = std::env::var_os("RERANK_DEMO_RERANKER")
            .map(PathBuf::from)
            .unwrap_or_else(|| base.join("ms-marco-MiniLM-L-6-v2"));
        let has_model = |dir: &std::path::Path| dir.join("config.json").is_file();
        let embedder = if has_model(&embedder_dir) {
            Some(Arc::new(rerank::BertEmbedder::from_dir(&embedder_dir)?))
        } else {
            None
        };
        let (retriever, stage1, recall_about): (Box<dyn Retriever>, _, _) = match &embedder {
            Some(embedder) => {
                let dense = rerank::DenseIndex::new(embedder.clone());
                dense.add(docs)?;
                let hybrid = rerank::Hybrid::rrf([
                    Box::new(bm25) as Box<dyn Retriever>,
                    Box::new(dense) as Box<dyn Retriever>,
                ]);
                let about = format!(
                    "BM25 + dense ({}), reciprocal rank fusion",
                    embedder_dir.display()
                );
                (Box::new(hybrid), "fused", about)
            }
            None => (
                Box::new(bm25),
                "bm25",
                "BM25 (scripts/fetch_models.sh adds dense recall)".to_string(),
            ),
        };
        let (reranker, stage2, rerank_about): (Box<dyn Reranker>, _, _) =
            if has_model(&cross_encoder_dir) {
                let model = rerank::rerankers::load_reranker(
                    &cross_encoder_dir,
                    &rerank::models::ModelOptions::default(),
                )?;
                let about = format!("{} ({})", model.name(), cross_encoder_dir.display());
                (model, "cross-encoder", about)
            } else if let Some(embedder) = embedder {
                let about = format!(
                    "embedding cosine ({}; scripts/fetch_reranker.sh adds a cross-encoder)",
                    embedder_dir.display()
                );
                let cosine = rerank::EmbeddingReranker::new(embedder);
                (Box::new(cosine), "cosine", about)
            } else {
                let about = "LexicalReranker, model-free (scripts/fetch_reranker.sh adds a \
                             cross-encoder)"
                    .to_string();
                (Box::new(LexicalReranker), "lexical", about)
            };
        Ok(Stages {
            retriever,
            reranker,
            top_k: 3,
            stage1,
            stage2,
            threshold: (stage2 == "lexical").then_some(LEXICAL_THRESHOLD),
            about: format!("stage 1: {recall_about}\nstage 2: {rerank_about}"),
        })
    }
    #[cfg(not(feature = "models"))]
    {
        let _ = docs;
        Ok(Stages {
            retriever: Box::new(bm25),
            reranker: Box::new(LexicalReranker),
            top_k: 3,
            stage1: "bm25",
            stage2: "lexical",
            threshold: Some(LEXICAL_THRESHOLD),
            about: "stage 1: BM25\nstage 2: LexicalReranker, model-free (the `models` feature \
                    adds dense recall and model rerankers)"
                .into(),
        })
    }
}

fn print_response(response: &SearchResponse, (stage1, stage2): &(&str, &str)) {
    println!("query: {}", response.query);
    if let Some(c) = &response.classification {
        let signals = if c.signals.is_empty() {
            "-".to_string()
        } else {
            c.signals.join(", ")
        };
        println!(
            "  classified: {:?}, intent {:?}, route {:?}, confidence {:.1} (signals: {signals})",
            c.kind, c.intent, c.route, c.confidence
        );
    }
    println!(
        "  {:>4}  {:>6}  {:>8}  {:>13}  {:<14} source",
        "rank", "stage1", stage1, stage2, "id"
    );
    let opt = |v: Option<f32>| v.map_or("-".to_string(), |s| format!("{s:.3}"));
    for (i, h) in response.hits.iter().enumerate() {
        let mark = if h.protected { "*" } else { " " };
        println!(
            "  {:>3}{mark}  {:>6}  {:>8}  {:>13}  {:<14} {}",
            i + 1,
            h.stage1_rank,
            format!("{:.3}", h.stage1_score),
            opt(h.rerank_score),
            h.document.id,
            h.document.source.as_deref().unwrap_or("-"),
        );
    }
    if response.hits.is_empty() {
        println!(
            "  (no hit passes the threshold: no document holds half of the words of this query; \
             dense recall with scripts/fetch_models.sh finds documents by meaning)"
        );
    }
    if response.hits.iter().any(|h| h.protected) {
        println!("  * = exact match kept on top (a factual query: protected from reranking)");
    }
    let stage2_note = match (&response.stage2_skipped, &response.rerank_error) {
        (Some(why), _) => format!("stage 2 skipped: {why}"),
        (None, Some(e)) => format!("stage 2: {e}"),
        (None, None) => format!(
            "stage 2 reranked {} of {} candidates",
            response.reranked_candidates, response.candidates
        ),
    };
    println!(
        "  order by: {}; {stage2_note}; {:.2} ms\n",
        response.scorer, response.timings.total_ms
    );
}
