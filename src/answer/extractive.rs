//! The model-free [`Extractive`] generator: quotes the context sentences that best cover the
//! question, each with its citation.

use std::collections::HashSet;

use super::prompt::{parse_prompt, ParsedBlock};
use super::{Citation, Generation, GenerationRequest, Generator, NOT_ENOUGH_INFORMATION};
use crate::text::{content_token_set, split_sentences};
use crate::{Error, Result};

/// Answers by extraction, without a model: it reads the context blocks and the question from a
/// prompt built by [`PromptBuilder`](super::PromptBuilder), then picks, greedily, the sentence
/// that covers the most question words not yet covered (content words, stemmed), until no
/// sentence adds any or `max_sentences` are picked. Ties go to the better-ranked source, then to
/// the shorter sentence. The picked sentences are returned in context order, each followed by
/// its `[Source: file, Page N]` citation. When no sentence shares a content word with the
/// question, the reply is [`NOT_ENOUGH_INFORMATION`].
///
/// ```
/// use std::sync::Arc;
/// use rerank::answer::{Extractive, PromptBuilder};
/// use rerank::{Document, Generator, Hit};
///
/// let doc = Document::new("r", "The office moved in May. Revenue was $5M in 2023.")
///     .with_source("report.pdf")
///     .with_page(3);
/// let prompt = PromptBuilder::new().build("What was the revenue?", &[Hit::new(Arc::new(doc), 1.0)])?;
/// let answer = Extractive::default().generate(&prompt.request)?;
/// assert_eq!(answer.text, "Revenue was $5M in 2023 [Source: report.pdf, Page 3].");
/// # Ok::<(), rerank::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extractive {
    max_sentences: usize,
    max_sources: usize,
}

impl Default for Extractive {
    fn default() -> Self {
        Extractive {
            max_sentences: 3,
            max_sources: 3,
        }
    }
}

/// One sentence that may be quoted.
struct Candidate<'a> {
    block: usize,
    position: usize,
    sentence: String,
    tokens: HashSet<String>,
    citation: &'a Citation,
}

impl Extractive {
    /// At most 3 sentences from the top 3 sources.
    pub fn new() -> Self {
        Self::default()
    }

    /// At most `n` sentences (at least 1).
    pub fn max_sentences(mut self, n: usize) -> Result<Self> {
        if n == 0 {
            return Err(Error::Config("max_sentences must be at least 1".into()));
        }
        self.max_sentences = n;
        Ok(self)
    }

    /// Reads only the top `n` sources (at least 1).
    pub fn max_sources(mut self, n: usize) -> Result<Self> {
        if n == 0 {
            return Err(Error::Config("max_sources must be at least 1".into()));
        }
        self.max_sources = n;
        Ok(self)
    }

    fn candidates<'a>(&self, blocks: &'a [ParsedBlock]) -> Vec<Candidate<'a>> {
        blocks
            .iter()
            .take(self.max_sources)
            .enumerate()
            .flat_map(|(b, block)| {
                split_sentences(&block.text).into_iter().enumerate().map(
                    move |(position, sentence)| Candidate {
                        block: b,
                        position,
                        tokens: content_token_set(&sentence),
                        sentence,
                        citation: &block.citation,
                    },
                )
            })
            .collect()
    }

    /// The text of the answer to `question` over `blocks`.
    pub fn answer(&self, question: &str, blocks: &[ParsedBlock]) -> String {
        let query = content_token_set(question);
        let candidates = self.candidates(blocks);
        let mut covered: HashSet<&str> = HashSet::new();
        let mut picked: Vec<usize> = Vec::new();
        while picked.len() < self.max_sentences {
            let best = candidates
                .iter()
                .enumerate()
                .filter(|(i, _)| !picked.contains(i))
                .map(|(i, c)| {
                    let gain = c
                        .tokens
                        .iter()
                        .filter(|t| query.contains(*t) && !covered.contains(t.as_str()))
                        .count();
                    (i, gain)
                })
                .filter(|&(_, gain)| gain > 0)
                // Most new words, then better source, then shorter sentence, then earlier.
                .min_by_key(|&(i, gain)| {
                    let c = &candidates[i];
                    (std::cmp::Reverse(gain), c.block, c.tokens.len(), c.position)
                });
            let Some((i, _)) = best else { break };
            for t in &candidates[i].tokens {
                if query.contains(t) {
                    covered.insert(t);
                }
            }
            picked.push(i);
        }
        if picked.is_empty() {
            return NOT_ENOUGH_INFORMATION.to_string();
        }
        picked.sort_by_key(|&i| (candidates[i].block, candidates[i].position));
        picked
            .iter()
            .map(|&i| cite(&candidates[i].sentence, candidates[i].citation))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// `sentence` with `citation` placed before its final punctuation (or appended with a period).
fn cite(sentence: &str, citation: &Citation) -> String {
    let body = sentence.trim_end();
    let cut = body.trim_end_matches(['.', '!', '?', '"', '\'', ')']);
    let tail = &body[cut.len()..];
    let tail = if tail.is_empty() { "." } else { tail };
    format!("{} {}{}", cut.trim_end(), citation.label(), tail)
}

impl Generator for Extractive {
    fn generate(&self, request: &GenerationRequest) -> Result<Generation> {
        let parsed = parse_prompt(request.last_user());
        Ok(Generation {
            text: self.answer(&parsed.question, &parsed.blocks),
            finish_reason: Some("stop".into()),
            usage: None,
        })
    }

    fn name(&self) -> &str {
        "extractive"
    }

    /// `false`: it only quotes its sources (no hypothetical documents, no query variants).
    fn writes_freely(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(number: usize, source: &str, page: Option<u32>, text: &str) -> ParsedBlock {
        ParsedBlock {
            number,
            citation: Citation::new(source, page),
            text: text.into(),
        }
    }

    #[test]
    fn covers_the_question_across_sources_in_context_order() {
        let blocks = [
            block(
                1,
                "a.pdf",
                Some(1),
                "The cat sat. Alice founded Acme in Paris.",
            ),
            block(2, "b.md", None, "Nothing here. Acme was founded in 1999."),
        ];
        let text = Extractive::new().answer(
            "When and where was Acme founded, in 1999 or Paris?",
            &blocks,
        );
        // "acm", "found", "1999", "pari": sentence 1.2 covers acm found pari, 2.2 adds 1999.
        assert_eq!(
            text,
            "Alice founded Acme in Paris [Source: a.pdf, Page 1]. Acme was founded in 1999 \
             [Source: b.md]."
        );
    }

    #[test]
    fn no_shared_word_means_not_enough_information() {
        let blocks = [block(1, "a", None, "Cats purr.")];
        assert_eq!(
            Extractive::new().answer("What is the GDP of France?", &blocks),
            NOT_ENOUGH_INFORMATION
        );
        assert_eq!(
            Extractive::new().answer("GDP?", &[]),
            NOT_ENOUGH_INFORMATION
        );
    }

    #[test]
    fn limits_sentences_and_sources() {
        let blocks = [
            block(1, "a", None, "Red apples. Green apples."),
            block(2, "b", None, "Yellow apples."),
        ];
        let one = Extractive::new().max_sentences(1).unwrap();
        assert_eq!(
            one.answer("red green yellow apples", &blocks),
            "Red apples [Source: a]."
        );
        let top1 = Extractive::new().max_sources(1).unwrap();
        assert_eq!(
            top1.answer("red green yellow", &blocks),
            "Red apples [Source: a]. Green apples [Source: a]."
        );
        assert!(Extractive::new().max_sentences(0).is_err());
    }

    #[test]
    fn citation_goes_before_the_end_mark() {
        let c = Citation::new("x", Some(2));
        assert_eq!(cite("It rose!", &c), "It rose [Source: x, Page 2]!");
        assert_eq!(cite("A title", &c), "A title [Source: x, Page 2].");
    }
}
