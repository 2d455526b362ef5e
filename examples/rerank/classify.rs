//! `rerank classify`: classify one query with the rule classifier.

use std::path::PathBuf;

use rerank::classify::{read_aliases, RuleClassifier};
use rerank::guard::PiiGuard;
use rerank::QueryClassifier;

use crate::CliResult;

#[derive(clap::Args)]
pub struct Args {
    /// JSON file of known people: {"alias": "Canonical Name", ...}.
    #[arg(long, value_name = "FILE")]
    aliases: Option<PathBuf>,
    /// Print one JSON object {"kind", "intent", "route", "task_type", "confidence", "signals"}
    /// instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    log: crate::flags::LogArgs,
    /// The query.
    query: String,
}

/// Builds the rule classifier, with the aliases file when one is given.
pub fn classifier(aliases: Option<&PathBuf>) -> CliResult<RuleClassifier> {
    let mut builder = RuleClassifier::builder();
    if let Some(path) = aliases {
        builder = builder.aliases(read_aliases(path)?);
    }
    Ok(builder.build()?)
}

pub fn run(args: Args) -> CliResult {
    args.log.init()?;
    if args.query.trim().is_empty() {
        return Err(rerank::Error::InvalidInput(
            "the query is empty: pass the text to classify as the last argument".into(),
        )
        .into());
    }
    // Personal data is refused before anything runs, as in a pipeline (the default guard).
    PiiGuard::default().check(&args.query)?;
    let c = classifier(args.aliases.as_ref())?.classify(&args.query);
    if args.json {
        println!("{}", serde_json::to_string(&c)?);
    } else {
        let name = |v: serde_json::Value| v.as_str().unwrap_or_default().to_string();
        println!("kind:       {}", name(serde_json::to_value(c.kind)?));
        println!("intent:     {}", name(serde_json::to_value(c.intent)?));
        println!("route:      {}", name(serde_json::to_value(c.route)?));
        println!("task type:  {}", name(serde_json::to_value(c.task_type)?));
        println!("confidence: {:.2}", c.confidence);
        println!("signals:    {}", c.signals.join(", "));
    }
    Ok(())
}
