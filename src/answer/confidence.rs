//! Confidence bands: a grounded answer's confidence as `high`, `medium` or `low`, and the short
//! form of its sources that a user sees.

use serde::{Deserialize, Serialize};

use super::ContextSource;
use crate::{Error, Result};

/// A confidence band.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfidenceBand {
    /// At or above [`ConfidenceBands::high`]: show the answer as is.
    High,
    /// At or above [`ConfidenceBands::medium`]: show it with a caution.
    Medium,
    /// Below: a possible hallucination; show the sources rather than the answer.
    Low,
}

/// Where the bands start.
///
/// ```
/// use rerank::answer::{ConfidenceBand, ConfidenceBands};
/// let bands = ConfidenceBands::default();
/// assert_eq!(bands.band(1.0), ConfidenceBand::High);
/// assert_eq!(bands.band(0.6), ConfidenceBand::Medium);
/// assert_eq!(bands.band(0.2), ConfidenceBand::Low);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ConfidenceBands {
    /// The lowest `high` confidence (default 0.8).
    pub high: f32,
    /// The lowest `medium` confidence (default 0.5).
    pub medium: f32,
}

impl Default for ConfidenceBands {
    fn default() -> Self {
        ConfidenceBands {
            high: 0.8,
            medium: 0.5,
        }
    }
}

impl ConfidenceBands {
    /// Bands starting at `high` and `medium`; needs `0 <= medium <= high <= 1`.
    pub fn new(high: f32, medium: f32) -> Result<Self> {
        if !(0.0..=1.0).contains(&medium) || !(medium..=1.0).contains(&high) {
            return Err(Error::Config(format!(
                "confidence bands need 0 <= medium <= high <= 1, got medium {medium}, high {high}"
            )));
        }
        Ok(ConfidenceBands { high, medium })
    }

    /// The band of `confidence`.
    pub fn band(&self, confidence: f32) -> ConfidenceBand {
        if confidence >= self.high {
            ConfidenceBand::High
        } else if confidence >= self.medium {
            ConfidenceBand::Medium
        } else {
            ConfidenceBand::Low
        }
    }
}

/// A source as a user sees it: where, a short excerpt, a rounded score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceBrief {
    /// The source name (file, URL, or the document id).
    pub source: String,
    /// The page, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
    /// At most [`EXCERPT_CHARS`] characters of the text, cut at a word, with `...` when cut.
    pub excerpt: String,
    /// The retrieval score rounded to 3 decimals.
    pub score: f32,
}

/// The length of a [`SourceBrief::excerpt`] in characters.
pub const EXCERPT_CHARS: usize = 160;

impl SourceBrief {
    /// The brief form of a prompt source.
    pub fn from_source(s: &ContextSource) -> Self {
        SourceBrief {
            source: s.source.clone(),
            page: s.page,
            excerpt: excerpt(&s.excerpt, EXCERPT_CHARS),
            score: round3(s.score),
        }
    }
}

/// `x` rounded to 3 decimals.
pub fn round3(x: f32) -> f32 {
    ((f64::from(x) * 1000.0).round() / 1000.0) as f32
}

/// The first `max` characters of `text` (whitespace collapsed), cut at the last word boundary,
/// with `...` when anything was cut.
pub fn excerpt(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        return flat;
    }
    let cut: String = flat.chars().take(max).collect();
    let cut = match cut.rfind(' ') {
        Some(i) if i > max / 2 => &cut[..i],
        _ => cut.as_str(),
    };
    format!("{}...", cut.trim_end_matches([',', ';', ':', '.', ' ']))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_cut_at_words() {
        assert_eq!(excerpt("short  text\nhere", 50), "short text here");
        let e = excerpt("alpha beta gamma delta epsilon", 14);
        assert_eq!(e, "alpha beta...");
        assert_eq!(round3(0.123456), 0.123);
        assert!(ConfidenceBands::new(0.4, 0.5).is_err());
    }
}
