//! Prompt building for grounded answers: numbered context blocks with source labels, a system
//! prompt that demands citations, and a context budget filled best sources first.
//!
//! The user message looks like this (the page is left out when unknown; the score is the hit's
//! final score, to two decimals):
//!
//! ```text
//! Context:
//!
//! [1] [Source: report.pdf, Page 3] (Score: 0.92)
//! Revenue was $5M in 2023.
//!
//! [2] [Source: notes.md] (Score: 0.41)
//! ...
//!
//! Question: What was the revenue?
//! ```

use std::sync::{Arc, OnceLock};

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::{Citation, GenerationRequest};
use crate::{Error, Hit, Result};

/// The exact reply when the documents do not answer the question.
pub const NOT_ENOUGH_INFORMATION: &str =
    "I don't have enough information in the provided documents to answer this question.";

/// The default system prompt for grounded answers.
pub const SYSTEM_PROMPT: &str = "You answer questions using only the numbered context passages \
given with the question. Use no outside knowledge. After every sentence that states a fact, cite \
the passage it comes from with the label shown above that passage, written exactly as \
[Source: file, Page N], or [Source: file] when the label has no page. If the context does not \
contain the answer, reply with exactly this sentence and nothing else: I don't have enough \
information in the provided documents to answer this question.";

/// How much context the prompt may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextBudget {
    /// At most this many characters (Unicode scalar values) of context blocks.
    Chars(usize),
    /// At most this many tokens of context blocks, counted by the builder's [`TokenCounter`].
    Tokens(usize),
}

impl Default for ContextBudget {
    fn default() -> Self {
        ContextBudget::Chars(6000)
    }
}

/// Counts tokens for a [`ContextBudget::Tokens`] budget. A model-backed generator can count with
/// its own tokenizer; the default [`ApproxTokenCounter`] estimates.
pub trait TokenCounter: Send + Sync {
    /// The number of tokens in `text`.
    fn count_tokens(&self, text: &str) -> usize;
}

/// Estimates one token per four characters, rounded up (a common rule of thumb for English).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApproxTokenCounter;

impl TokenCounter for ApproxTokenCounter {
    fn count_tokens(&self, text: &str) -> usize {
        text.chars().count().div_ceil(4)
    }
}

/// One numbered context block given to the generator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextSource {
    /// 1-based block number in the prompt.
    pub number: usize,
    /// The document id.
    pub id: String,
    /// The source name used in citations: the document's `source`, or its id when it has none.
    pub source: String,
    /// The page, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
    /// The text given to the generator (cut when the budget ran out).
    pub excerpt: String,
    /// The hit's final retrieval score.
    pub score: f32,
    /// True when `excerpt` is a cut-down prefix of the document.
    #[serde(default)]
    pub truncated: bool,
}

impl ContextSource {
    /// The block for `hit` numbered `number`, with the document's full text (title first).
    pub fn from_hit(number: usize, hit: &Hit) -> Self {
        let doc = &hit.document;
        let excerpt = match &doc.title {
            Some(t) if !t.trim().is_empty() => format!("{}\n{}", t.trim(), doc.text.trim()),
            _ => doc.text.trim().to_string(),
        };
        ContextSource {
            number,
            id: doc.id.clone(),
            source: doc
                .source
                .clone()
                .filter(|s| !s.trim().is_empty())
                .unwrap_or_else(|| doc.id.clone()),
            page: doc.page,
            excerpt,
            score: hit.score,
            truncated: false,
        }
    }

    /// The citation that points at this block.
    pub fn citation(&self) -> Citation {
        Citation::new(self.source.clone(), self.page)
    }

    /// The block header: `[1] [Source: file, Page N] (Score: 0.92)`, the score being the hit's
    /// final score to two decimals. The citation a generator writes is the bracketed label
    /// alone.
    pub fn header(&self) -> String {
        format!(
            "[{}] {} (Score: {:.2})",
            self.number,
            self.citation().label(),
            self.score
        )
    }

    /// The whole block: header, newline, excerpt.
    pub fn block(&self) -> String {
        format!("{}\n{}", self.header(), self.excerpt)
    }
}

/// A built prompt: the request for the generator and the sources it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    /// System prompt plus one user message with the context and the question.
    pub request: GenerationRequest,
    /// The context blocks, best first.
    pub sources: Vec<ContextSource>,
}

/// Builds grounded-answer prompts.
///
/// ```
/// use std::sync::Arc;
/// use rerank::answer::{ContextBudget, PromptBuilder};
/// use rerank::{Document, Hit};
///
/// let hits = vec![
///     Hit::new(Arc::new(Document::new("a", "Revenue was $5M in 2023.")
///         .with_source("report.pdf").with_page(3)), 2.0),
///     Hit::new(Arc::new(Document::new("b", "Unrelated.")), 1.0),
/// ];
/// let prompt = PromptBuilder::new().build("What was the revenue?", &hits)?;
/// let user = prompt.request.last_user();
/// let first = "[1] [Source: report.pdf, Page 3] (Score: 2.00)\nRevenue was $5M in 2023.";
/// assert!(user.contains(first));
/// assert!(user.contains("[2] [Source: b] (Score: 1.00)\nUnrelated."));
/// assert!(user.ends_with("Question: What was the revenue?"));
///
/// // A budget too small for the second block keeps the best one only.
/// let small = PromptBuilder::new().budget(ContextBudget::Chars(80));
/// assert_eq!(small.build("q", &hits)?.sources.len(), 1);
/// # Ok::<(), rerank::Error>(())
/// ```
#[derive(Clone)]
pub struct PromptBuilder {
    system_prompt: String,
    budget: ContextBudget,
    counter: Arc<dyn TokenCounter>,
    max_sources: usize,
}

impl std::fmt::Debug for PromptBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptBuilder")
            .field("budget", &self.budget)
            .field("max_sources", &self.max_sources)
            .finish_non_exhaustive()
    }
}

impl Default for PromptBuilder {
    fn default() -> Self {
        PromptBuilder {
            system_prompt: SYSTEM_PROMPT.to_string(),
            budget: ContextBudget::default(),
            counter: Arc::new(ApproxTokenCounter),
            max_sources: 10,
        }
    }
}

/// Blocks are separated by one blank line.
const SEPARATOR: &str = "\n\n";

impl PromptBuilder {
    /// The default builder: [`SYSTEM_PROMPT`], 6000 characters of context, at most 10 sources.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the system prompt.
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = prompt.into();
        self
    }

    /// Sets the context budget.
    pub fn budget(mut self, budget: ContextBudget) -> Self {
        self.budget = budget;
        self
    }

    /// Sets the token counter used by [`ContextBudget::Tokens`].
    pub fn token_counter(mut self, counter: Arc<dyn TokenCounter>) -> Self {
        self.counter = counter;
        self
    }

    /// At most this many context blocks.
    pub fn max_sources(mut self, n: usize) -> Self {
        self.max_sources = n;
        self
    }

    /// The context budget.
    pub fn context_budget(&self) -> ContextBudget {
        self.budget
    }

    /// Checks the settings: a non-zero budget and source count.
    pub fn validate(&self) -> Result<()> {
        let zero = match self.budget {
            ContextBudget::Chars(n) | ContextBudget::Tokens(n) => n == 0,
        };
        if zero {
            return Err(Error::Config("the context budget must be above 0".into()));
        }
        if self.max_sources == 0 {
            return Err(Error::Config("max_sources must be at least 1".into()));
        }
        Ok(())
    }

    fn cost(&self, text: &str) -> usize {
        match self.budget {
            ContextBudget::Chars(_) => text.chars().count(),
            ContextBudget::Tokens(_) => self.counter.count_tokens(text),
        }
    }

    fn limit(&self) -> usize {
        match self.budget {
            ContextBudget::Chars(n) | ContextBudget::Tokens(n) => n,
        }
    }

    /// The context blocks for `hits` (best first, as given): whole blocks while they fit the
    /// budget; the first block that does not fit is cut at a word boundary when its header and
    /// at least one word still fit, and nothing after it is added. Hits with empty text are
    /// skipped. The separators between blocks count against the budget.
    pub fn select(&self, hits: &[Hit]) -> Vec<ContextSource> {
        let limit = self.limit();
        let mut used = 0usize;
        let mut out: Vec<ContextSource> = Vec::new();
        for hit in hits {
            if out.len() >= self.max_sources {
                break;
            }
            let mut source = ContextSource::from_hit(out.len() + 1, hit);
            if source.excerpt.is_empty() {
                continue;
            }
            let sep = if out.is_empty() {
                0
            } else {
                self.cost(SEPARATOR)
            };
            let cost = sep + self.cost(&source.block());
            if used + cost <= limit {
                used += cost;
                out.push(source);
                continue;
            }
            let room = limit.saturating_sub(used + sep);
            if let Some(cut) = self.cut_to_fit(&source, room) {
                source.excerpt = cut;
                source.truncated = true;
                out.push(source);
            }
            break;
        }
        out
    }

    /// The longest word-boundary prefix of the excerpt whose block fits in `room`.
    fn cut_to_fit(&self, source: &ContextSource, room: usize) -> Option<String> {
        let text = source.excerpt.as_str();
        // Candidate cut points: the end of every word.
        let ends: Vec<usize> = text
            .char_indices()
            .filter(|&(i, c)| {
                !c.is_whitespace()
                    && text[i + c.len_utf8()..]
                        .chars()
                        .next()
                        .is_none_or(char::is_whitespace)
            })
            .map(|(i, c)| i + c.len_utf8())
            .collect();
        let header = source.header();
        let fits = |end: usize| self.cost(&format!("{header}\n{}", &text[..end])) <= room;
        // Costs grow with the prefix: binary search for the last end that fits.
        let (mut lo, mut hi) = (0usize, ends.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if fits(ends[mid]) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        (lo > 0).then(|| text[..ends[lo - 1]].to_string())
    }

    /// The user message: the context blocks, then the question.
    pub fn user_message(question: &str, sources: &[ContextSource]) -> String {
        let blocks: Vec<String> = sources.iter().map(ContextSource::block).collect();
        format!(
            "Context:\n\n{}\n\nQuestion: {}",
            blocks.join(SEPARATOR),
            question.trim()
        )
    }

    /// The prompt for `question` over `hits` (best first).
    pub fn build(&self, question: &str, hits: &[Hit]) -> Result<Prompt> {
        self.validate()?;
        let sources = self.select(hits);
        let request = GenerationRequest::new(
            self.system_prompt.clone(),
            Self::user_message(question, &sources),
        );
        Ok(Prompt { request, sources })
    }
}

/// A context block read back from a user message built by [`PromptBuilder`].
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedBlock {
    /// The block number.
    pub number: usize,
    /// The block's source label.
    pub citation: Citation,
    /// The block's text.
    pub text: String,
}

/// A user message read back into its question and context blocks.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ParsedPrompt {
    /// The question (the text after the last `Question:` line), or the whole message when there
    /// is no such line.
    pub question: String,
    /// The context blocks, in prompt order.
    pub blocks: Vec<ParsedBlock>,
}

fn header_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        // `[1] [Source: file, Page N]`, then the score as `build` writes it (optional: a
        // header without one, as earlier versions wrote it, is read too).
        Regex::new(r"(?m)^\[(\d+)\] (\[Source: [^\]\n]*\])(?:[ \t]+\(Score: [^)\n]*\))?[ \t]*$")
            .expect("static regex is valid")
    })
}

/// Reads a user message in the [`PromptBuilder`] format back into its parts; used by the
/// [`Extractive`](super::Extractive) generator, which has no model to read the prompt.
pub fn parse_prompt(user_message: &str) -> ParsedPrompt {
    let (context, question) = match user_message.rfind("\nQuestion:") {
        Some(i) => (
            &user_message[..i],
            user_message[i + "\nQuestion:".len()..].trim(),
        ),
        None => match user_message.strip_prefix("Question:") {
            Some(q) => ("", q.trim()),
            None => ("", user_message.trim()),
        },
    };
    let headers: Vec<_> = header_regex().captures_iter(context).collect();
    let mut blocks = Vec::with_capacity(headers.len());
    for (i, cap) in headers.iter().enumerate() {
        let (Some(whole), Some(number), Some(label)) = (cap.get(0), cap.get(1), cap.get(2)) else {
            continue;
        };
        let end = headers
            .get(i + 1)
            .and_then(|next| next.get(0))
            .map_or(context.len(), |m| m.start());
        let Some(citation) = Citation::parse_all(label.as_str()).into_iter().next() else {
            continue;
        };
        blocks.push(ParsedBlock {
            number: number.as_str().parse().unwrap_or(i + 1),
            citation,
            text: context[whole.end()..end].trim().to_string(),
        });
    }
    ParsedPrompt {
        question: question.to_string(),
        blocks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Document;

    fn hit(id: &str, text: &str, source: Option<&str>, page: Option<u32>, score: f32) -> Hit {
        let mut d = Document::new(id, text);
        d.source = source.map(str::to_string);
        d.page = page;
        Hit::new(Arc::new(d), score)
    }

    #[test]
    fn blocks_are_numbered_and_labelled() {
        let hits = [
            hit("a", "Alpha text.", Some("a.pdf"), Some(2), 3.0),
            hit("b", "Beta text.", Some("b.md"), None, 2.0),
            hit("c", "Gamma.", None, Some(9), 1.0),
        ];
        let p = PromptBuilder::new().build(" Why? ", &hits).unwrap();
        assert_eq!(
            p.request.last_user(),
            "Context:\n\n[1] [Source: a.pdf, Page 2] (Score: 3.00)\nAlpha text.\n\n[2] [Source: \
             b.md] (Score: 2.00)\nBeta text.\n\n[3] [Source: c, Page 9] (Score: 1.00)\nGamma.\n\n\
             Question: Why?"
        );
        assert_eq!(p.request.system(), SYSTEM_PROMPT);
        assert!(SYSTEM_PROMPT.contains(NOT_ENOUGH_INFORMATION));
        assert!(SYSTEM_PROMPT.contains("[Source: file, Page N]"));
        assert_eq!(p.sources[1].citation(), Citation::new("b.md", None));
        assert_eq!(p.sources[2].score, 1.0);
    }

    /// The lengths of block 1 (whole) and of block 2's header line, in chars.
    fn b_header_len(hits: &[Hit]) -> (usize, usize) {
        let one = ContextSource::from_hit(1, &hits[0]).block().chars().count();
        let two = ContextSource::from_hit(2, &hits[1])
            .header()
            .chars()
            .count()
            + 1;
        (one, two)
    }

    #[test]
    fn char_budget_keeps_best_first_and_cuts_the_overflowing_block() {
        let hits = [
            hit("a", "one two three", Some("a"), None, 3.0),
            hit("b", "four five six seven", Some("b"), None, 2.0),
            hit("c", "eight", Some("c"), None, 1.0),
        ];
        // Block 1: "[1] [Source: a] (Score: 3.00)\none two three" = 43 chars; separator 2;
        // block 2 header "[2] [Source: b] (Score: 2.00)\n" = 30 chars.
        assert_eq!(b_header_len(&hits), (43, 30));
        let b = PromptBuilder::new().budget(ContextBudget::Chars(43 + 2 + 30 + 9));
        let s = b.select(&hits);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].excerpt, "one two three");
        assert!(!s[0].truncated);
        assert_eq!(s[1].excerpt, "four five");
        assert!(s[1].truncated);
        let total: usize = s.iter().map(|x| x.block().chars().count()).sum::<usize>() + 2;
        assert!(total <= 43 + 2 + 30 + 9);

        // Exactly room for block 1 only: block 2's header does not fit, nothing is cut in.
        let b = PromptBuilder::new().budget(ContextBudget::Chars(43 + 2 + 30));
        assert_eq!(b.select(&hits).len(), 1);
        // Whole budget: everything.
        assert_eq!(PromptBuilder::new().select(&hits).len(), 3);
        assert_eq!(PromptBuilder::new().max_sources(2).select(&hits).len(), 2);
    }

    #[test]
    fn token_budget_uses_the_counter() {
        struct Words;
        impl TokenCounter for Words {
            fn count_tokens(&self, text: &str) -> usize {
                text.split_whitespace().count()
            }
        }
        let hits = [
            hit("a", "w w w w", Some("a"), None, 2.0),
            hit("b", "x x x x x x", Some("b"), None, 1.0),
        ];
        // Headers "[1] [Source: a] (Score: 2.00)" are 5 words; block 1 = 9; block 2 = 11.
        let b = PromptBuilder::new()
            .budget(ContextBudget::Tokens(16))
            .token_counter(Arc::new(Words));
        let s = b.select(&hits);
        assert_eq!(s.len(), 2);
        assert_eq!(s[1].excerpt, "x x");
        assert!(PromptBuilder::new()
            .budget(ContextBudget::Tokens(0))
            .build("q", &hits)
            .is_err());
    }

    #[test]
    fn parse_reads_back_what_build_wrote() {
        let hits = [
            hit("a", "Alpha.\n\nMore alpha.", Some("a.pdf"), Some(2), 3.0),
            hit("b", "Beta.", None, None, 2.0),
        ];
        let p = PromptBuilder::new().build("What is alpha?", &hits).unwrap();
        let parsed = parse_prompt(p.request.last_user());
        assert_eq!(parsed.question, "What is alpha?");
        assert_eq!(parsed.blocks.len(), 2);
        assert_eq!(parsed.blocks[0].citation, Citation::new("a.pdf", Some(2)));
        assert_eq!(parsed.blocks[0].text, "Alpha.\n\nMore alpha.");
        assert_eq!(parsed.blocks[1].number, 2);
        assert_eq!(parsed.blocks[1].text, "Beta.");
        assert_eq!(parse_prompt("just a question").question, "just a question");
        // A header without the score (as earlier versions wrote it) is read too.
        let old = parse_prompt("Context:\n\n[1] [Source: a.pdf]\nAlpha.\n\nQuestion: q");
        assert_eq!(old.blocks.len(), 1);
        assert_eq!(old.blocks[0].text, "Alpha.");
        assert!(parse_prompt("just a question").blocks.is_empty());
    }
}
