//! Long documents cut into passages ([`Passages`], opt-in): the windows of a text's tokens and
//! how their scores become the document's; `rerankers` scores them.
//!
//! A model reranker judges a document beside the query inside a fixed number of tokens; a
//! longer document is cut, so the model judges its first page. With passages on, a document
//! that does not fit is split into overlapping windows of its own tokens, every window is
//! scored beside the query in the same packed batches as the other documents, and the
//! document gets the best window's score ([`PassageAggregate::Max`], the default; the first
//! window's or the mean as options). [`RerankScores::passages`] says which byte range of each
//! document gave its score.
//!
//! Windows start at the start of a word and end at the end of a token, so a window's text
//! tokenizes back to the same tokens: scoring a window is scoring its text as a document.
//!
//! [`RerankScores::passages`]: crate::rerankers::RerankScores::passages

// The windows and the scoring plan serve the model-backed rerankers only.
#![cfg_attr(not(feature = "models"), allow(dead_code))]

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// How a document's window scores become its score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PassageAggregate {
    /// The best window's score (the default): a document is as relevant as its most relevant
    /// passage.
    #[default]
    Max,
    /// The first window's score: what truncation gives, with the passage reported.
    First,
    /// The mean of the windows' scores (the reported passage is still the best one).
    Mean,
}

/// Scoring documents longer than the model's window by passages: opt-in with
/// [`ModelOptions::passages`](crate::models::ModelOptions::passages) or the config's
/// `reranker.passages`.
///
/// ```yaml
/// reranker:
///   type: cross_encoder
///   model: models/bge-reranker-v2-m3
///   passages: { window: 256, stride: 192, aggregate: max }   # or just `passages: {}`
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Passages {
    /// Document tokens per window (default: all the room the model's `max_length` leaves
    /// beside the query, less a margin of two tokens).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<usize>,
    /// Tokens from the start of one window to the start of the next, at most `window`
    /// (default: three quarters of the window, so consecutive windows share a quarter).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stride: Option<usize>,
    /// How the windows' scores become the document's (default [`PassageAggregate::Max`]).
    pub aggregate: PassageAggregate,
}

/// Tokens kept free in each window: a window's text may tokenize to a token or two more
/// beside the query than alone (byte-level BPE merges at its edges).
const MARGIN: usize = 2;

impl Passages {
    /// Sets [`Passages::window`].
    pub fn window(mut self, tokens: usize) -> Self {
        self.window = Some(tokens);
        self
    }

    /// Sets [`Passages::stride`].
    pub fn stride(mut self, tokens: usize) -> Self {
        self.stride = Some(tokens);
        self
    }

    /// Sets [`Passages::aggregate`].
    pub fn aggregate(mut self, aggregate: PassageAggregate) -> Self {
        self.aggregate = aggregate;
        self
    }

    /// Checks the values: a window and a stride of at least one token, the stride no longer
    /// than the window.
    pub fn validate(&self) -> Result<()> {
        if self.window == Some(0) || self.stride == Some(0) {
            return Err(Error::Config(
                "passages: window and stride must be at least 1 token".into(),
            ));
        }
        if let (Some(w), Some(s)) = (self.window, self.stride) {
            if s > w {
                return Err(Error::Config(format!(
                    "passages: stride {s} is longer than the window {w} (text between windows \
                     would never be scored)"
                )));
            }
        }
        Ok(())
    }

    /// The byte ranges of `text` to score for one document whose tokens are `tokens`, with
    /// `room` tokens free beside the query: the whole text when it fits, else the windows.
    pub(crate) fn windows(&self, text: &str, tokens: &[Token], room: usize) -> Vec<Range<usize>> {
        let n = tokens.len();
        if n <= room {
            return std::iter::once(0..text.len()).collect();
        }
        let window = self
            .window
            .unwrap_or(room)
            .min(room.saturating_sub(MARGIN))
            .max(1);
        let stride = self.stride.unwrap_or(window - window / 4).clamp(1, window);
        // The last word start at or before `i` and after `after`, else `i` itself (a word
        // longer than the window is cut inside).
        let snap = |i: usize, after: usize| -> usize {
            (after + 1..=i)
                .rev()
                .find(|&j| tokens[j].word_start)
                .unwrap_or(i)
        };
        let mut out = Vec::new();
        let mut start = 0;
        loop {
            let end = if start + window >= n {
                n
            } else {
                snap(start + window, start)
            };
            out.push(tokens[start].start..tokens[end - 1].end);
            if end == n {
                return out;
            }
            // The next window starts a stride on, at a word start; where words are long
            // (byte-level BPE on a small vocabulary), at the last word start before this
            // window's end, so that consecutive windows still share text.
            let next = snap(start + stride, start).min(end);
            start = if next < end || stride >= window {
                next
            } else {
                (start + 1..end)
                    .rev()
                    .find(|&j| tokens[j].word_start)
                    .unwrap_or(end)
            };
        }
    }
}

/// One token of a document: its byte range in the text, and whether it starts a word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Token {
    pub start: usize,
    pub end: usize,
    pub word_start: bool,
}

/// The tokens `document` alone has (no special tokens) under `tokenizer`, with their byte
/// ranges: what [`Passages`] cuts a document by.
#[cfg(feature = "models")]
pub(crate) fn document_tokens(
    tokenizer: &tokenizers::Tokenizer,
    document: &str,
) -> Result<Vec<Token>> {
    let encoding = tokenizer
        .encode(document, false)
        .map_err(|e| Error::tokenizer(e.to_string()))?;
    Ok(tokens_of(&encoding))
}

/// The tokens of a document as a tokenizer's `encoding` of it (byte offsets, word ids)
/// gives them; tokens that cover no text (special tokens) are left out.
#[cfg(feature = "models")]
pub(crate) fn tokens_of(encoding: &tokenizers::Encoding) -> Vec<Token> {
    let mut previous = None;
    encoding
        .get_offsets()
        .iter()
        .zip(encoding.get_word_ids())
        .filter(|((start, end), _)| end > start)
        .map(|(&(start, end), &word)| {
            let word_start = word.is_none() || word != previous;
            previous = word;
            Token {
                start,
                end,
                word_start,
            }
        })
        .collect()
}

/// Every window to score for a batch of documents, in document order.
#[derive(Debug, Clone, Default)]
pub(crate) struct PassagePlan {
    /// (document index, byte range of its text) per window.
    windows: Vec<(usize, Range<usize>)>,
}

impl PassagePlan {
    /// The windows of `docs`: `tokens(doc)` tokenizes one document alone, and `room` tokens
    /// are free beside the query.
    pub(crate) fn new(
        passages: &Passages,
        docs: &[&str],
        room: usize,
        tokens: impl Fn(&str) -> Result<Vec<Token>> + Sync,
    ) -> Result<Self> {
        use rayon::prelude::*;
        let per_doc = docs
            .par_iter()
            .map(|d| Ok(passages.windows(d, &tokens(d)?, room)))
            .collect::<Result<Vec<_>>>()?;
        let windows: Vec<(usize, Range<usize>)> = per_doc
            .into_iter()
            .enumerate()
            .flat_map(|(i, ranges)| ranges.into_iter().map(move |r| (i, r)))
            .collect();
        tracing::debug!(
            stage = "rerank",
            documents = docs.len(),
            windows = windows.len(),
            room,
            "documents scored by passages"
        );
        Ok(PassagePlan { windows })
    }

    /// The text of every window (an error, never a panic, should a tokenizer's offsets
    /// fall inside a character).
    pub(crate) fn texts<'a>(&self, docs: &[&'a str]) -> Result<Vec<&'a str>> {
        self.windows
            .iter()
            .map(|(i, r)| {
                docs[*i].get(r.clone()).ok_or_else(|| {
                    Error::tokenizer(format!(
                        "token offsets {r:?} are not on character boundaries of document {i}"
                    ))
                })
            })
            .collect()
    }

    /// Per document (`documents` of them): its score from its windows' `scores` (one per
    /// window, in plan order) and the byte range of the window that gave it (the first one
    /// for [`PassageAggregate::First`], else the best one).
    pub(crate) fn aggregate(
        &self,
        documents: usize,
        scores: &[f32],
        aggregate: PassageAggregate,
    ) -> Result<(Vec<f32>, Vec<Range<usize>>)> {
        if scores.len() != self.windows.len() {
            return Err(Error::rerank(format!(
                "{} scores for {} passages",
                scores.len(),
                self.windows.len()
            )));
        }
        let mut best: Vec<Option<(f32, Range<usize>)>> = vec![None; documents];
        let mut first = vec![(f32::NAN, 0..0); documents];
        let mut sum = vec![0f64; documents];
        let mut count = vec![0usize; documents];
        for ((doc, range), &s) in self.windows.iter().zip(scores) {
            let slot = &mut best[*doc];
            // NaN never wins over a number.
            if slot
                .as_ref()
                .is_none_or(|(b, _)| b.is_nan() || (!s.is_nan() && s > *b))
            {
                *slot = Some((s, range.clone()));
            }
            if count[*doc] == 0 {
                first[*doc] = (s, range.clone());
            }
            sum[*doc] += f64::from(s);
            count[*doc] += 1;
        }
        let mut out_scores = Vec::with_capacity(documents);
        let mut ranges = Vec::with_capacity(documents);
        for d in 0..documents {
            let (max, range) = best[d]
                .clone()
                .ok_or_else(|| Error::rerank(format!("document {d} has no passage")))?;
            let (score, range) = match aggregate {
                PassageAggregate::Max => (max, range),
                PassageAggregate::First => first[d].clone(),
                PassageAggregate::Mean => ((sum[d] / count[d] as f64) as f32, range),
            };
            out_scores.push(score);
            ranges.push(range);
        }
        Ok((out_scores, ranges))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whitespace tokens of `text`, each a word start.
    fn words(text: &str) -> Vec<Token> {
        let mut out = Vec::new();
        let mut start = None;
        for (i, c) in text.char_indices().chain([(text.len(), ' ')]) {
            match (c.is_whitespace(), start) {
                (true, Some(s)) => {
                    out.push(Token {
                        start: s,
                        end: i,
                        word_start: true,
                    });
                    start = None;
                }
                (false, None) => start = Some(i),
                _ => {}
            }
        }
        out
    }

    #[test]
    fn a_document_that_fits_is_one_window_of_its_whole_text() {
        let text = "a b c";
        let p = Passages::default();
        let whole = |w: Vec<Range<usize>>| (w.len(), w[0].clone());
        assert_eq!(whole(p.windows(text, &words(text), 3)), (1, 0..5));
        assert_eq!(whole(p.windows("", &[], 3)), (1, 0..0));
    }

    #[test]
    fn windows_overlap_cover_every_token_and_stay_in_the_room() {
        let text: String = (0..50).map(|i| format!("w{i} ")).collect();
        let tokens = words(&text);
        for (window, stride) in [(10, 10), (10, 5), (7, 1), (12, 9)] {
            let p = Passages::default().window(window).stride(stride);
            let ranges = p.windows(&text, &tokens, 100 - 60); // room 40, fewer than 50 tokens
            let mut covered = vec![false; tokens.len()];
            for r in &ranges {
                let inside: Vec<usize> = (0..tokens.len())
                    .filter(|&t| tokens[t].start >= r.start && tokens[t].end <= r.end)
                    .collect();
                assert!(inside.len() <= window, "{r:?} has {} tokens", inside.len());
                assert_eq!(text[r.clone()].split_whitespace().count(), inside.len());
                inside.iter().for_each(|&t| covered[t] = true);
            }
            assert!(
                covered.iter().all(|&c| c),
                "window {window} stride {stride}"
            );
            assert_eq!(ranges.last().unwrap().end, text.trim_end().len());
            assert_eq!(ranges.len(), (50 - window).div_ceil(stride) + 1);
        }
    }

    #[test]
    fn windows_start_at_word_starts() {
        // "ab" + "##cd" style: only every other token starts a word.
        let tokens: Vec<Token> = (0..20)
            .map(|i| Token {
                start: i,
                end: i + 1,
                word_start: i % 2 == 0,
            })
            .collect();
        let text = "x".repeat(20);
        let ranges = Passages::default()
            .window(5)
            .stride(3)
            .windows(&text, &tokens, 8);
        for r in &ranges {
            assert!(tokens[r.start].word_start, "{ranges:?}");
            assert!(r.end == 20 || tokens[r.end].word_start, "{ranges:?}");
        }
    }

    #[test]
    fn the_default_window_is_the_room_less_the_margin() {
        let text: String = (0..30).map(|i| format!("w{i} ")).collect();
        let ranges = Passages::default().windows(&text, &words(&text), 12);
        assert_eq!(text[ranges[0].clone()].split_whitespace().count(), 10);
    }

    #[test]
    fn aggregates_and_reports_the_best_window() {
        let plan = PassagePlan {
            windows: vec![(0, 0..3), (0, 2..5), (0, 4..6), (1, 0..2)],
        };
        let scores = [0.1, 0.9, f32::NAN, 0.5];
        let (s, r) = plan.aggregate(2, &scores, PassageAggregate::Max).unwrap();
        assert_eq!((s, r), (vec![0.9, 0.5], vec![2..5, 0..2]));
        let (s, r) = plan.aggregate(2, &scores, PassageAggregate::First).unwrap();
        assert_eq!((s, r), (vec![0.1, 0.5], vec![0..3, 0..2]));
        let (s, _) = plan
            .aggregate(2, &[0.1, 0.9, 0.2, 0.5], PassageAggregate::Mean)
            .unwrap();
        assert!((s[0] - 0.4).abs() < 1e-6 && s[1] == 0.5);
        assert!(plan.aggregate(2, &[0.0], PassageAggregate::Max).is_err());
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(Passages::default().validate().is_ok());
        assert!(Passages::default().window(0).validate().is_err());
        assert!(Passages::default().stride(0).validate().is_err());
        let e = Passages::default().window(4).stride(5).validate();
        assert!(e.unwrap_err().to_string().contains("stride 5"));
    }
}
