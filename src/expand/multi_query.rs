//! Multi-query expansion: the query and its variants are retrieved separately and fused by
//! reciprocal rank ([`rrf_fuse`]).

use serde::{Deserialize, Serialize};

use crate::answer::GenerationRequest;
use crate::recall::rrf_fuse;
use crate::recall::SearchQuery;
use crate::{Error, Generator, Hit, Result, Retriever};

/// How variants are made and fused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExpansionConfig {
    /// Ask the generator for variants when the request brings none (default true).
    pub generate: bool,
    /// At most this many variants are used (default 3).
    pub max_variants: usize,
    /// The RRF constant (default 60).
    pub rrf_k: f32,
    /// The weight of the original query's list; each variant's list weighs 1 (default 1).
    pub original_weight: f32,
    /// The system prompt asking for variants; `{n}` is replaced by `max_variants`.
    pub system_prompt: String,
    /// Upper bound on the generated text in tokens (default 128).
    pub max_new_tokens: usize,
}

impl Default for ExpansionConfig {
    fn default() -> Self {
        ExpansionConfig {
            generate: true,
            max_variants: 3,
            rrf_k: 60.0,
            original_weight: 1.0,
            system_prompt: "Rewrite the search query in {n} different ways that keep its \
                            meaning. Write one rewrite per line, with no numbering and no \
                            commentary."
                .into(),
            max_new_tokens: 128,
        }
    }
}

impl ExpansionConfig {
    /// Variants given by the host only; the generator is never asked.
    pub fn host_variants_only() -> Self {
        ExpansionConfig {
            generate: false,
            ..ExpansionConfig::default()
        }
    }

    /// Checks the values.
    pub fn validate(&self) -> Result<()> {
        if self.max_variants == 0 {
            return Err(Error::Config(
                "expansion: max_variants must be at least 1".into(),
            ));
        }
        if !(self.rrf_k.is_finite() && self.rrf_k >= 0.0) {
            return Err(Error::Config(
                "expansion: rrf_k must be finite and >= 0".into(),
            ));
        }
        if !(self.original_weight.is_finite() && self.original_weight > 0.0) {
            return Err(Error::Config(
                "expansion: original_weight must be finite and > 0".into(),
            ));
        }
        if self.generate && self.max_new_tokens == 0 {
            return Err(Error::Config(
                "expansion: max_new_tokens must be at least 1".into(),
            ));
        }
        Ok(())
    }

    /// The generation request for `query` (greedy).
    pub fn request(&self, query: &str) -> GenerationRequest {
        let system = self
            .system_prompt
            .replace("{n}", &self.max_variants.to_string());
        GenerationRequest {
            max_new_tokens: self.max_new_tokens,
            ..GenerationRequest::new(system, query)
        }
    }
}

/// Cleans variants: trims each, strips list markers (`-`, `*`, `1.`, `2)`) and quotes, drops
/// empty ones, duplicates and copies of `original` (case-insensitive), and keeps at most `max`.
pub fn clean_variants<S: AsRef<str>>(
    variants: impl IntoIterator<Item = S>,
    original: &str,
    max: usize,
) -> Vec<String> {
    let mut seen = vec![original.trim().to_lowercase()];
    let mut out = Vec::new();
    for v in variants {
        if out.len() >= max {
            break;
        }
        let v = strip_marker(v.as_ref());
        let lower = v.to_lowercase();
        if v.is_empty() || seen.contains(&lower) {
            continue;
        }
        seen.push(lower);
        out.push(v.to_string());
    }
    out
}

fn strip_marker(line: &str) -> &str {
    let mut s = line.trim();
    s = s.trim_start_matches(['-', '*', '•']).trim_start();
    let digits = s.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 {
        if let Some(rest) = s[digits..].strip_prefix(['.', ')']) {
            s = rest.trim_start();
        }
    }
    s.trim_matches(['"', '\'', '`']).trim()
}

/// Asks `generator` for variants of `query`, one per line, cleaned by [`clean_variants`].
pub fn generate_variants(
    generator: &dyn Generator,
    query: &str,
    config: &ExpansionConfig,
) -> Result<Vec<String>> {
    let text = generator.generate(&config.request(query))?.text;
    Ok(clean_variants(text.lines(), query, config.max_variants))
}

/// Retrieves `k` hits for the original query and for each variant (text only: a precomputed
/// embedding in `original` applies to the original alone), and fuses the lists by RRF; the
/// fused list is cut to `k`. The original query's retrieval must succeed; a variant whose
/// retrieval fails is skipped.
pub fn retrieve_expanded(
    retriever: &dyn Retriever,
    original: &SearchQuery,
    variants: &[String],
    k: usize,
    config: &ExpansionConfig,
) -> Result<Vec<Hit>> {
    let first = retriever.retrieve(original, k)?;
    if variants.is_empty() {
        return Ok(first);
    }
    let mut lists = vec![first];
    let mut weights = vec![config.original_weight];
    for v in variants {
        if let Ok(hits) = retriever.retrieve(
            &SearchQuery::new(v.as_str()).with_filters(original.filters.clone()),
            k,
        ) {
            lists.push(hits);
            weights.push(1.0);
        }
    }
    let mut fused = rrf_fuse(&lists, &weights, config.rrf_k);
    fused.truncate(k);
    Ok(fused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleaning() {
        let text = "1. refund rules\n- \"Refund Rules\"\n\n2) Fare refunds\nwhat is the refund policy\n* baggage\n* extra";
        assert_eq!(
            clean_variants(text.lines(), "What is the refund policy", 3),
            ["refund rules", "Fare refunds", "baggage"]
        );
        assert!(clean_variants(["", "  "], "q", 3).is_empty());
    }

    #[test]
    fn validation() {
        assert!(ExpansionConfig::default().validate().is_ok());
        let bad = ExpansionConfig {
            max_variants: 0,
            ..ExpansionConfig::default()
        };
        assert!(bad.validate().is_err());
        let bad = ExpansionConfig {
            original_weight: f32::NAN,
            ..ExpansionConfig::default()
        };
        assert!(bad.validate().is_err());
    }
}
