//! The main job, offline: a two-stage pipeline over the handbook shipped in `examples/data/`.
//!
//! For each query it prints the classification, then the hits with their stage-1 (BM25) and
//! stage-2 (rerank) scores side by side, protected exact matches marked; then it answers one
//! question with citations and its grounding confidence.
//!
//! When all-MiniLM-L6-v2 is fetched (`scripts/fetch_models.sh`, into `models/` or
//! `$RERANK_MODELS_DIR`) and the crate has the `models` feature, stage 1 is hybrid (BM25 + dense,
//! reciprocal rank fusion) and stage 2 reranks by embedding cosine; otherwise stage 1 is BM25 and
//! stage 2 the model-free `LexicalReranker`. Stage 2 runs when stage 1 found more candidates than
//! the hits shown.
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

const QUESTION: &str = "How many days before departure must business flights be booked?";

fn main() -> rerank::Result<()> {
    let docs = Document::read_jsonl(CORPUS)?;
    println!(
        "indexed {} documents from examples/data/handbook.jsonl",
        docs.len()
    );
    let stages = stages(docs)?;
    println!("{}\n", stages.about);
    let pipeline = Pipeline::builder()
        .retriever(stages.retriever)
        .reranker(stages.reranker)
        .classifier(RuleClassifier::default())
        .top_k(stages.top_k)
        .candidate_multiplier(3)
        .build()?;

    for query in QUERIES {
        print_response(&pipeline.search_with(&SearchRequest::new(query))?);
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

/// The two stages, the hits shown per query, and a line saying what they are.
struct Stages {
    retriever: Box<dyn Retriever>,
    reranker: Box<dyn Reranker>,
    top_k: usize,
    about: String,
}

fn stages(docs: Vec<Document>) -> rerank::Result<Stages> {
    let bm25 = Bm25Index::new();
    bm25.add(docs.clone())?;
    #[cfg(feature = "models")]
    {
        use std::sync::Arc;

        let base = std::env::var_os("RERANK_MODELS_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/models").into());
        let dir = base.join("all-MiniLM-L6-v2");
        if dir.join("model.safetensors").is_file() {
            let embedder = Arc::new(rerank::BertEmbedder::from_dir(&dir)?);
            let dense = rerank::DenseIndex::new(embedder.clone());
            dense.add(docs)?;
            let hybrid = rerank::Hybrid::rrf([
                Box::new(bm25) as Box<dyn Retriever>,
                Box::new(dense) as Box<dyn Retriever>,
            ]);
            return Ok(Stages {
                retriever: Box::new(hybrid),
                reranker: Box::new(rerank::EmbeddingReranker::new(embedder)),
                top_k: 3,
                about: format!(
                    "stage 1: BM25 + all-MiniLM-L6-v2 dense, RRF; stage 2: embedding cosine ({})",
                    dir.display()
                ),
            });
        }
    }
    let _ = docs;
    Ok(Stages {
        retriever: Box::new(bm25),
        reranker: Box::new(LexicalReranker),
        top_k: 2,
        about: "stage 1: BM25; stage 2: LexicalReranker (model-free; run scripts/fetch_models.sh \
                for all-MiniLM-L6-v2)"
            .into(),
    })
}

fn print_response(response: &SearchResponse) {
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
        "  {:>4}  {:>6} {:>8}  {:>8}  {:<14} source",
        "rank", "stage1", "bm25", "rerank", "id"
    );
    let opt = |v: Option<f32>| v.map_or("-".to_string(), |s| format!("{s:.3}"));
    for (i, h) in response.hits.iter().enumerate() {
        let mark = if h.protected { "*" } else { " " };
        println!(
            "  {:>3}{mark}  {:>6} {:>8}  {:>8}  {:<14} {}",
            i + 1,
            h.stage1_rank,
            format!("{:.3}", h.stage1_score),
            opt(h.rerank_score),
            h.document.id,
            h.document.source.as_deref().unwrap_or("-"),
        );
    }
    let note = if response.hits.iter().any(|h| h.protected) {
        "; * = exact match kept on top (factual query)"
    } else {
        ""
    };
    println!(
        "  scorer: {}; {} candidates; {:.2} ms{note}\n",
        response.scorer, response.candidates, response.timings.total_ms
    );
}
