//! Content tokens: the words of a text that carry a claim (function words dropped, stemmed),
//! used by the grounding check and the extractive generator.

use std::collections::HashSet;
use std::sync::OnceLock;

use super::{Analyzer, EnglishAnalyzer};

/// Function words that carry no claim of their own: they are ignored when measuring how much of
/// a sentence a source supports, and when matching a question against sentences.
const FUNCTION_WORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "also",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "down",
    "during",
    "each",
    "either",
    "else",
    "ever",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "however",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "may",
    "me",
    "might",
    "more",
    "most",
    "much",
    "must",
    "my",
    "myself",
    "neither",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "ought",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "same",
    "shall",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "thus",
    "to",
    "too",
    "under",
    "until",
    "up",
    "upon",
    "us",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "whether",
    "which",
    "while",
    "who",
    "whom",
    "whose",
    "why",
    "will",
    "with",
    "within",
    "without",
    "would",
    "yet",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
    "tell",
    "please",
    "explain",
    "describe",
    "give",
    "list",
    "show",
    "know",
];

fn analyzer() -> &'static EnglishAnalyzer {
    static A: OnceLock<EnglishAnalyzer> = OnceLock::new();
    A.get_or_init(|| EnglishAnalyzer::new(FUNCTION_WORDS.iter().copied(), true))
}

/// The content tokens of `text`: lower-cased words of two or more characters, function words
/// removed, stemmed (Snowball English), in order and with repeats.
///
/// ```
/// use rerank::text::content_tokens;
/// assert_eq!(content_tokens("What was the revenue in 2023?"), ["revenu", "2023"]);
/// ```
pub fn content_tokens(text: &str) -> Vec<String> {
    analyzer().analyze(text)
}

/// The distinct content tokens of `text`.
pub(crate) fn content_token_set(text: &str) -> HashSet<String> {
    content_tokens(text).into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_tokens_drop_function_words_and_stem() {
        assert_eq!(
            content_tokens("How has the revenue of Acme been growing?"),
            ["revenu", "acm", "grow"]
        );
        assert!(content_tokens("What is it?").is_empty());
    }
}
