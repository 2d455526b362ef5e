//! Two-phase queries: `[SEARCH] phrase [TASK] context [INSTRUCT] instruction`.
//!
//! A short search phrase is what recall (BM25, dense) is good at; a longer description of the
//! task is what a reranker judges relevance against. A two-phase query carries both: the
//! `[SEARCH]` phrase drives stage 1, and `"{task}\n\nRelevant concepts: {search}"` (with the
//! optional `[INSTRUCT]` instruction) drives stage 2.
//!
//! Markers are matched case-insensitively, each at most once, in the order shown; nothing may
//! come before `[SEARCH]`. [`TwoPhaseMode::Strict`] rejects any other query with an
//! [`Error::QueryFormat`] that names the problem, shows the format with an example and echoes
//! the start of the query; [`TwoPhaseMode::Lenient`] uses the whole query for both phases
//! instead.
//!
//! ```
//! use rerank::parse::{plan, TwoPhaseMode, TwoPhaseQuery};
//!
//! let q = TwoPhaseQuery::parse(
//!     "[SEARCH] tokio shutdown [TASK] my service hangs on exit [INSTRUCT] prefer code",
//! )?;
//! assert_eq!(q.search, "tokio shutdown");
//! assert_eq!(q.rerank_text(), "my service hangs on exit\n\nRelevant concepts: tokio shutdown");
//! assert_eq!(q.instruction.as_deref(), Some("prefer code"));
//!
//! let p = plan("plain words", Some(TwoPhaseMode::Lenient), None)?;
//! assert_eq!((p.recall.as_str(), p.rerank.text.as_str()), ("plain words", "plain words"));
//! assert!(plan("plain words", Some(TwoPhaseMode::Strict), None).is_err());
//! # Ok::<(), rerank::Error>(())
//! ```

use serde::{Deserialize, Serialize};

use crate::rerankers::RerankQuery;
use crate::{Error, Result};

/// How a pipeline treats queries with respect to the two-phase format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TwoPhaseMode {
    /// Every query must be a well-formed two-phase query; others are refused with
    /// [`Error::QueryFormat`].
    Strict,
    /// Well-formed two-phase queries are split; any other query is used whole for both phases.
    Lenient,
}

/// A parsed two-phase query.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TwoPhaseQuery {
    /// The `[SEARCH]` phrase: what recall searches for.
    pub search: String,
    /// The `[TASK]` context: what the reranker judges against.
    pub task: String,
    /// The `[INSTRUCT]` instruction for instruction-aware rerankers, when given.
    pub instruction: Option<String>,
}

/// What each stage of one search uses.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryPlan {
    /// The text stage 1 (recall) searches for.
    pub recall: String,
    /// What stage 2 (rerank) judges documents against.
    pub rerank: RerankQuery,
    /// The parsed query, when the query was a two-phase query.
    pub two_phase: Option<TwoPhaseQuery>,
}

/// The format, as shown in error messages.
pub const FORMAT: &str =
    "[SEARCH] <search phrase> [TASK] <task context> [INSTRUCT] <instruction> ([INSTRUCT] is optional)";

/// An example, as shown in error messages.
pub const EXAMPLE: &str = "[SEARCH] tokio runtime shutdown [TASK] My service hangs on exit after \
spawning background tasks; how do I stop the runtime cleanly? [INSTRUCT] Prefer passages with code";

/// How many characters of the query an error message echoes.
const ECHO_CHARS: usize = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    Search,
    Task,
    Instruct,
}

impl Marker {
    const ALL: [Marker; 3] = [Marker::Search, Marker::Task, Marker::Instruct];

    fn text(self) -> &'static str {
        match self {
            Marker::Search => "[SEARCH]",
            Marker::Task => "[TASK]",
            Marker::Instruct => "[INSTRUCT]",
        }
    }
}

impl TwoPhaseQuery {
    /// Parses a two-phase query strictly; the error names what is missing, empty, repeated or
    /// out of order.
    pub fn parse(query: &str) -> Result<Self> {
        parse(query).map_err(|problem| format_error(&problem, query))
    }

    /// The reranker's query text: `"{task}\n\nRelevant concepts: {search}"`.
    pub fn rerank_text(&self) -> String {
        format!("{}\n\nRelevant concepts: {}", self.task, self.search)
    }

    /// The reranker's query: [`TwoPhaseQuery::rerank_text`] with the `[INSTRUCT]` instruction,
    /// or `fallback_instruction` when the query has none.
    pub fn rerank_query(&self, fallback_instruction: Option<&str>) -> RerankQuery {
        RerankQuery {
            text: self.rerank_text(),
            instruction: self
                .instruction
                .clone()
                .or_else(|| fallback_instruction.map(str::to_string)),
        }
    }
}

/// Splits `query` into what recall and rerank use.
///
/// `mode` `None` (two-phase queries off): the query drives both stages. Otherwise a two-phase
/// query is parsed; when it is malformed, strict mode returns the parse error and lenient mode
/// uses the whole query for both stages. `instruction` (a per-call instruction) comes before
/// the query's own `[INSTRUCT]` part, which applies when there is none.
pub fn plan(
    query: &str,
    mode: Option<TwoPhaseMode>,
    instruction: Option<&str>,
) -> Result<QueryPlan> {
    let whole = || QueryPlan {
        recall: query.to_string(),
        rerank: RerankQuery {
            text: query.to_string(),
            instruction: instruction.map(str::to_string),
        },
        two_phase: None,
    };
    let Some(mode) = mode else {
        return Ok(whole());
    };
    match TwoPhaseQuery::parse(query) {
        Ok(parsed) => Ok(QueryPlan {
            recall: parsed.search.clone(),
            // The request's instruction comes first, then the query's own [INSTRUCT].
            rerank: match instruction {
                Some(i) => RerankQuery {
                    text: parsed.rerank_text(),
                    instruction: Some(i.to_string()),
                },
                None => parsed.rerank_query(None),
            },
            two_phase: Some(parsed),
        }),
        Err(e) => match mode {
            TwoPhaseMode::Strict => Err(e),
            TwoPhaseMode::Lenient => Ok(whole()),
        },
    }
}

/// The parser proper; the error is the problem in a few words.
fn parse(query: &str) -> std::result::Result<TwoPhaseQuery, String> {
    // ASCII lowercasing keeps byte offsets, so positions found in `lower` index `query`.
    let lower = query.to_ascii_lowercase();
    let mut found: Vec<(usize, Marker)> = Vec::new();
    for marker in Marker::ALL {
        let needle = marker.text().to_ascii_lowercase();
        let positions: Vec<usize> = lower.match_indices(&needle).map(|(i, _)| i).collect();
        if positions.len() > 1 {
            return Err(format!(
                "{} appears {} times; use each marker once",
                marker.text(),
                positions.len()
            ));
        }
        found.extend(positions.into_iter().map(|p| (p, marker)));
    }
    let missing: Vec<&str> = [Marker::Search, Marker::Task]
        .into_iter()
        .filter(|m| !found.iter().any(|(_, f)| f == m))
        .map(Marker::text)
        .collect();
    if !missing.is_empty() {
        return Err(format!("missing {}", missing.join(" and ")));
    }
    found.sort_by_key(|&(pos, _)| pos);
    let order: Vec<Marker> = found.iter().map(|&(_, m)| m).collect();
    if order[0] != Marker::Search || order[1] != Marker::Task {
        return Err(
            "the markers are out of order: [SEARCH] comes first, then [TASK], then the \
             optional [INSTRUCT]"
                .to_string(),
        );
    }
    let before = query[..found[0].0].trim();
    if !before.is_empty() {
        return Err(format!(
            "text before [SEARCH] ({:?}); the query must start with [SEARCH]",
            truncate_chars(before, 40)
        ));
    }
    let part = |i: usize| -> &str {
        let (pos, marker) = found[i];
        let start = pos + marker.text().len();
        let end = found.get(i + 1).map_or(query.len(), |&(p, _)| p);
        query[start..end].trim()
    };
    let search = part(0);
    let task = part(1);
    let instruction = (found.len() == 3).then(|| part(2));
    if search.is_empty() {
        return Err(
            "the [SEARCH] part (the search phrase) is empty: after [SEARCH], put the few \
                    words a matching document would contain (names, identifiers, error \
                    messages), not the whole question"
                .into(),
        );
    }
    if task.is_empty() {
        return Err(
            "the [TASK] part (the task context) is empty: after [TASK], say in a sentence \
                    what you are trying to do or what went wrong; the reranker judges the \
                    documents against it"
                .into(),
        );
    }
    if instruction == Some("") {
        return Err(
            "the [INSTRUCT] part is empty; write an instruction or leave out [INSTRUCT]".into(),
        );
    }
    Ok(TwoPhaseQuery {
        search: search.to_string(),
        task: task.to_string(),
        instruction: instruction.map(str::to_string),
    })
}

/// The full error: the problem, the format, an example, and the start of the query.
fn format_error(problem: &str, query: &str) -> Error {
    let echo = truncate_chars(query, ECHO_CHARS);
    let more = if echo.len() < query.len() { "..." } else { "" };
    Error::QueryFormat(format!(
        "malformed two-phase query: {problem}.\n\
         Required format: {FORMAT}\n\
         Example: {EXAMPLE}\n\
         Your query (first {ECHO_CHARS} characters): \"{echo}\"{more}"
    ))
}

/// The first `n` characters of `text` (never splits a character).
fn truncate_chars(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_counts_characters_not_bytes() {
        assert_eq!(truncate_chars("héllo", 2), "hé");
        assert_eq!(truncate_chars("ab", 5), "ab");
        assert_eq!(truncate_chars("日本語", 1), "日");
    }
}
