//! System 1: a personal-knowledge search over notes that name people.
//!
//! Factual lookups ("Taylor's KTN") keep their exact lexical matches on top; nicknames resolve
//! to people through an aliases file; open questions are fully reranked. Everything comes from
//! `examples/configs/personal_search.yaml` and runs offline.
//!
//! ```text
//! cargo run --example personal_search
//! ```

use rerank::answer::excerpt;
use rerank::pipeline::{PipelineConfig, SearchRequest};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = PipelineConfig::from_path(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/configs/personal_search.yaml"
    ))?;
    // The same classifier the pipeline holds, to resolve nicknames into the people they name.
    let classifier = config.classifier.clone().unwrap_or_default().build(&[])?;
    let pipeline = config.build(Vec::new())?;

    for query in [
        "Taylor's KTN",
        "tay's passport",
        "what did we learn from the data migration project",
    ] {
        // A nickname names a person: the pipeline adds the full name to what recall searches
        // for and to the words protection matches (printed here from the same classifier).
        let people = classifier.known_names(query);
        let response = pipeline.search(query)?;
        println!("> {query}");
        if let Some(c) = &response.classification {
            println!(
                "  {:?} query (confidence {:.1}); people: {}; signals: {}",
                c.kind,
                c.kind_confidence,
                if people.is_empty() {
                    "-".to_string()
                } else {
                    people.join(", ")
                },
                c.signals.join(", ")
            );
        }
        for (i, h) in response.hits.iter().enumerate() {
            println!(
                "  {}. {}{}  {}",
                i + 1,
                h.document.title.as_deref().unwrap_or(&h.document.id),
                if h.protected {
                    " [exact match, kept on top]"
                } else {
                    ""
                },
                excerpt(&h.document.text, 70)
            );
        }
    }

    // Answers carry two figures: grounding (is what it says in its sources?) and relevance (are
    // those sources about the question?); their band is the weaker of the two. A question the
    // notes do not cover gets a faithful quote from an unrelated note, and a low band.
    let options = config.answer_options()?;
    for question in ["Taylor's KTN", "when is Sarah's weekly sync"] {
        let a = pipeline.answer_with(&SearchRequest::new(question), &options)?;
        println!("> {question}");
        println!("  {}", a.text);
        println!(
            "  {:?}: grounding {:.2} ({:?}), relevance {:.2} ({:?}){}",
            a.confidence_band,
            a.confidence,
            a.grounding_band,
            a.relevance,
            a.relevance_band,
            if a.flags.low_relevance {
                ": the notes do not match the question"
            } else {
                ""
            }
        );
    }
    Ok(())
}
