//! [`Chunker`]: sentence-aware chunks with an overlap.

use serde::{Deserialize, Serialize};

use crate::text::split_sentences;
use crate::{Error, Result};

/// What chunk sizes count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChunkUnit {
    /// Characters (Unicode scalar values), the default.
    #[default]
    Chars,
    /// Tokens, counted as whitespace-separated words (about 0.75 of a model's subword tokens
    /// for English; leave room when a model's limit matters).
    Tokens,
}

/// Splits text into chunks of at most `size` units that end at sentence boundaries, each
/// starting with the last sentences of the previous chunk (at most `overlap` units of them).
/// A sentence longer than `size` is cut at word boundaries.
///
/// ```
/// use rerank::ingest::{Chunker, ChunkUnit};
/// let chunker = Chunker::new(60, 25, ChunkUnit::Chars)?;
/// let chunks = chunker.chunk("Leave is 25 days. Carry over five days. Sick leave is ten days. Ask HR.");
/// assert_eq!(chunks, [
///     "Leave is 25 days. Carry over five days.",
///     "Carry over five days. Sick leave is ten days. Ask HR.",
/// ]);
/// # Ok::<(), rerank::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Chunker {
    size: usize,
    overlap: usize,
    unit: ChunkUnit,
}

impl Default for Chunker {
    /// 800 characters with 100 of overlap.
    fn default() -> Self {
        Chunker {
            size: 800,
            overlap: 100,
            unit: ChunkUnit::Chars,
        }
    }
}

impl Chunker {
    /// Chunks of at most `size` units overlapping by at most `overlap` (less than `size`).
    pub fn new(size: usize, overlap: usize, unit: ChunkUnit) -> Result<Self> {
        if size == 0 || overlap >= size {
            return Err(Error::Config(format!(
                "chunker: need 0 <= overlap < size, got size {size} and overlap {overlap}"
            )));
        }
        Ok(Chunker {
            size,
            overlap,
            unit,
        })
    }

    fn len(&self, text: &str) -> usize {
        match self.unit {
            ChunkUnit::Chars => text.chars().count(),
            ChunkUnit::Tokens => text.split_whitespace().count(),
        }
    }

    /// The length of sentences joined by spaces.
    fn joined_len(&self, sentences: &[String]) -> usize {
        let words: usize = sentences.iter().map(|s| self.len(s)).sum();
        match self.unit {
            ChunkUnit::Chars => words + sentences.len().saturating_sub(1),
            ChunkUnit::Tokens => words,
        }
    }

    /// The chunks of `text` (none for blank text).
    pub fn chunk(&self, text: &str) -> Vec<String> {
        let mut pieces: Vec<String> = Vec::new();
        for sentence in split_sentences(text) {
            if self.len(&sentence) <= self.size {
                pieces.push(sentence);
            } else {
                pieces.extend(self.cut(&sentence));
            }
        }
        let mut chunks: Vec<String> = Vec::new();
        let mut current: Vec<String> = Vec::new();
        let mut fresh = 0; // sentences in `current` not yet in a chunk
        for piece in pieces {
            let mut candidate = current.clone();
            candidate.push(piece.clone());
            if self.joined_len(&candidate) > self.size && fresh > 0 {
                chunks.push(current.join(" "));
                // Carry the trailing sentences that fit in the overlap.
                let mut carry: Vec<String> = Vec::new();
                for s in current.iter().rev() {
                    let mut c = vec![s.clone()];
                    c.extend(carry.iter().cloned());
                    if self.joined_len(&c) > self.overlap {
                        break;
                    }
                    carry = c;
                }
                current = carry;
                current.push(piece.clone());
                // The carried sentences must leave room for the new one.
                while self.joined_len(&current) > self.size && current.len() > 1 {
                    current.remove(0);
                }
                fresh = 1;
            } else {
                current = candidate;
                fresh += 1;
            }
        }
        if fresh > 0 {
            chunks.push(current.join(" "));
        }
        chunks
    }

    /// A sentence longer than the size, cut at words.
    fn cut(&self, sentence: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut current: Vec<&str> = Vec::new();
        for word in sentence.split_whitespace() {
            current.push(word);
            let text = current.join(" ");
            if self.len(&text) > self.size && current.len() > 1 {
                current.pop();
                out.push(current.join(" "));
                current = vec![word];
            }
        }
        if !current.is_empty() {
            out.push(current.join(" "));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_respect_size_and_sentence_boundaries() {
        let text =
            "One two three. Four five six seven. Eight nine. Ten eleven twelve thirteen fourteen.";
        let c = Chunker::new(7, 4, ChunkUnit::Tokens).unwrap();
        let chunks = c.chunk(text);
        for ch in &chunks {
            assert!(ch.split_whitespace().count() <= 7, "{ch}");
            assert!(ch.ends_with('.'), "{ch}");
        }
        // Each chunk starts with the last sentence of the previous one (it fits the overlap).
        assert_eq!(
            chunks,
            [
                "One two three. Four five six seven.",
                "Four five six seven. Eight nine.",
                "Eight nine. Ten eleven twelve thirteen fourteen.",
            ]
        );
        assert!(Chunker::new(10, 10, ChunkUnit::Chars).is_err());
        assert!(c.chunk("  ").is_empty());
    }

    #[test]
    fn a_long_sentence_is_cut_at_words() {
        let c = Chunker::new(10, 0, ChunkUnit::Chars).unwrap();
        let chunks = c.chunk("alpha beta gamma delta epsilon");
        assert!(
            chunks.iter().all(|ch| ch.chars().count() <= 10),
            "{chunks:?}"
        );
        assert_eq!(chunks.join(" "), "alpha beta gamma delta epsilon");
    }
}
