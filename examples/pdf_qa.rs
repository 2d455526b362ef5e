//! System 3: a document Q&A service over PDFs.
//!
//! Personal data in a question is refused; small talk is answered without retrieval
//! (confidence 1.0), and so are a question outside the documents' domain (a note saying so)
//! and one with nothing to search for (a request to clarify); recall scores `0.7 x cosine + 0.3 x keyword overlap` on raw scores, so the
//! threshold means the same for every question; one hit per source and page; the answer cites
//! `[Source: file, Page N]`, carries two figures with their bands (grounding: the share of its
//! sentences a source supports; relevance: how well the best source matches the question) and
//! the weaker band as its own, and the sources a short excerpt and a rounded score; with
//! nothing relevant the answer is "I don't have enough information ...". A request can leave
//! the sources out (`include_sources`). Configuration: `examples/configs/pdf_qa.yaml` (chunks as
//! `rerank ingest --pdf DIR` writes them); runs offline.
//!
//! ```text
//! cargo run --example pdf_qa
//! ```

use rerank::pipeline::{PipelineConfig, SearchRequest};
use rerank::Error;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = PipelineConfig::from_path(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/configs/pdf_qa.yaml"
    ))?;
    let options = config.answer_options()?;
    let pipeline = config.build(Vec::new())?;
    for question in [
        "hi there!",
        "How many days of paid annual leave do employees get per year?",
        "Are meals reimbursed during business travel?",
        "My SSN is 123-45-6789, how much sick leave do I have?",
        "Who won the 1998 football world cup?",
        "what about that one?",
    ] {
        println!("> {question}");
        match pipeline.answer_with(&SearchRequest::new(question), &options) {
            Ok(a) => {
                println!("  {}", a.text);
                println!(
                    "  {:?}: grounding {:.2} ({:?}), relevance {:.2} ({:?}){}",
                    a.confidence_band,
                    a.confidence,
                    a.grounding_band,
                    a.relevance,
                    a.relevance_band,
                    if a.flags.chitchat {
                        ", chitchat: no retrieval"
                    } else if a.flags.off_topic {
                        ", off-topic: no retrieval"
                    } else if a.flags.needs_clarification {
                        ", needs clarification: no retrieval"
                    } else {
                        ""
                    }
                );
                for s in a.brief_sources() {
                    println!(
                        "  - {} p.{} score {}: {}",
                        s.source,
                        s.page.map_or("-".into(), |p| p.to_string()),
                        s.score,
                        s.excerpt
                    );
                }
            }
            Err(Error::PiiRefused { kinds, .. }) => {
                println!(
                    "  refused: the question holds personal data ({kinds:?}); nothing was searched"
                );
            }
            Err(e) => return Err(e.into()),
        }
    }
    // The same question without the sources listed (`include_sources: false`).
    let question = "Are meals reimbursed during business travel?";
    let a = pipeline.answer_with(
        &SearchRequest::new(question),
        &options.clone().include_sources(false),
    )?;
    println!("> {question} (include_sources: false)");
    println!("  {}", a.text);
    println!("  {} sources listed", a.sources.len());
    Ok(())
}
