//! The classifier, PII and two-phase cases kept as data in `tests/data/*.toml`, one runner each.
//! Every failing case is reported, not only the first.

use rerank::classify::{Intent, QueryKind, Route, TaskType};
use rerank::guard::{PiiGuard, PiiKind};
use rerank::parse::{TwoPhaseQuery, EXAMPLE, FORMAT};
use rerank::{Error, QueryClassifier, RuleClassifier};
use serde::Deserialize;

use crate::common::cases;

/// Runs `check` on every case and fails with all the failures listed.
fn run_all<T>(file: &str, cases: &[T], check: impl Fn(&T) -> Result<(), String>) {
    let failures: Vec<String> = cases.iter().filter_map(|c| check(c).err()).collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases in tests/data/{file} failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PiiCase {
    text: String,
    kinds: Vec<PiiKind>,
}

#[test]
fn pii_cases() {
    let all: Vec<PiiCase> = cases("pii_cases.toml");
    let guard = PiiGuard::default();
    run_all("pii_cases.toml", &all, |c| {
        let got = guard.detect(&c.text);
        if got != c.kinds {
            return Err(format!("{:?}: got {got:?}, want {:?}", c.text, c.kinds));
        }
        // A refusal names the kinds and never echoes the text.
        match (guard.check(&c.text), c.kinds.is_empty()) {
            (Ok(()), true) => Ok(()),
            (Err(Error::PiiRefused { kinds, .. }), false) if kinds == c.kinds => Ok(()),
            (other, _) => Err(format!("{:?}: check gave {other:?}", c.text)),
        }
    });
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TwoPhaseCase {
    query: String,
    search: Option<String>,
    task: Option<String>,
    instruction: Option<String>,
    problem: Option<String>,
}

#[test]
fn two_phase_cases() {
    let all: Vec<TwoPhaseCase> = cases("two_phase_cases.toml");
    run_all("two_phase_cases.toml", &all, |c| {
        let parsed = TwoPhaseQuery::parse(&c.query);
        match (&c.problem, parsed) {
            (None, Ok(q)) => {
                let want = (
                    c.search.as_deref(),
                    c.task.as_deref(),
                    c.instruction.as_deref(),
                );
                let got = (
                    Some(q.search.as_str()),
                    Some(q.task.as_str()),
                    q.instruction.as_deref(),
                );
                let rerank = format!("{}\n\nRelevant concepts: {}", q.task, q.search);
                if got != want || q.rerank_text() != rerank {
                    return Err(format!("{:?}: parsed {got:?}, want {want:?}", c.query));
                }
                Ok(())
            }
            (Some(problem), Err(Error::QueryFormat(message))) => {
                let echo: String = c.query.chars().take(200).collect();
                let teaches = message.starts_with("malformed two-phase query: ")
                    && message.contains(problem.as_str())
                    && message.contains(FORMAT)
                    && message.contains(EXAMPLE)
                    && message.contains(&format!("\"{echo}\""));
                if teaches {
                    Ok(())
                } else {
                    Err(format!(
                        "{:?}: the message does not teach {problem:?}:\n{message}",
                        c.query
                    ))
                }
            }
            (want, got) => Err(format!("{:?}: want problem {want:?}, got {got:?}", c.query)),
        }
    });
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClassifyCase {
    query: String,
    kind: Option<QueryKind>,
    intent: Option<Intent>,
    route: Option<Route>,
    task_type: Option<TaskType>,
    confidence: Option<f32>,
    #[serde(default)]
    signals: Vec<String>,
}

#[test]
fn classify_cases() {
    let all: Vec<ClassifyCase> = cases("classify_cases.toml");
    let classifier = RuleClassifier::builder()
        .alias("Taylor", "Taylor Smith")
        .build()
        .unwrap();
    run_all("classify_cases.toml", &all, |c| {
        let out = classifier.classify(&c.query);
        let mut wrong = Vec::new();
        if c.kind.is_some_and(|k| k != out.kind) {
            wrong.push(format!("kind {:?} (want {:?})", out.kind, c.kind));
        }
        if c.intent.is_some_and(|i| i != out.intent) {
            wrong.push(format!("intent {:?} (want {:?})", out.intent, c.intent));
        }
        if c.route.is_some_and(|r| r != out.route) {
            wrong.push(format!("route {:?} (want {:?})", out.route, c.route));
        }
        if c.task_type.is_some_and(|t| t != out.task_type) {
            wrong.push(format!(
                "task type {:?} (want {:?})",
                out.task_type, c.task_type
            ));
        }
        if c.confidence.is_some_and(|x| x != out.confidence) {
            wrong.push(format!(
                "confidence {} (want {:?})",
                out.confidence, c.confidence
            ));
        }
        for prefix in &c.signals {
            if !out.signals.iter().any(|s| s.starts_with(prefix.as_str())) {
                wrong.push(format!("no signal {prefix:?} in {:?}", out.signals));
            }
        }
        if wrong.is_empty() {
            Ok(())
        } else {
            Err(format!("{:?}: {}", c.query, wrong.join("; ")))
        }
    });
}
