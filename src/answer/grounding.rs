//! The grounding check: which sentences of an answer a source supports, and which citations
//! point at nothing that was provided.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Citation, ContextSource};
use crate::embed::cosine;
use crate::rerankers::RerankQuery;
use crate::text::{content_token_set, content_tokens, split_sentences};
use crate::{Embedder, Error, Reranker, Result};

/// Scores how well each source supports a sentence; higher is better. The checker compares the
/// best score with its threshold.
pub trait SupportScorer: Send + Sync {
    /// One score per source, in the order given.
    fn support(&self, sentence: &str, sources: &[&str]) -> Result<Vec<f32>>;

    /// A short name for reports.
    fn name(&self) -> &str;
}

/// The default scorer: the share of the sentence's distinct content tokens (stemmed, function
/// words removed, citations stripped) that occur in the source. In `[0, 1]`.
#[derive(Debug, Clone, Copy, Default)]
pub struct LexicalSupport;

impl SupportScorer for LexicalSupport {
    fn support(&self, sentence: &str, sources: &[&str]) -> Result<Vec<f32>> {
        let tokens = content_token_set(sentence);
        if tokens.is_empty() {
            return Ok(vec![0.0; sources.len()]);
        }
        Ok(sources
            .iter()
            .map(|s| {
                let have = content_token_set(s);
                let found = tokens.iter().filter(|t| have.contains(*t)).count();
                found as f32 / tokens.len() as f32
            })
            .collect())
    }

    fn name(&self) -> &str {
        "lexical"
    }
}

/// Cosine similarity between the sentence's embedding and each source's embedding.
/// Long sources dilute the similarity; use a threshold tuned for your embedder (0.6-0.7 is
/// typical for all-MiniLM-L6-v2 on sentence vs passage).
pub struct EmbeddingSupport {
    embedder: Arc<dyn Embedder>,
}

impl EmbeddingSupport {
    /// A scorer backed by `embedder`.
    pub fn new(embedder: Arc<dyn Embedder>) -> Self {
        EmbeddingSupport { embedder }
    }
}

impl SupportScorer for EmbeddingSupport {
    fn support(&self, sentence: &str, sources: &[&str]) -> Result<Vec<f32>> {
        let mut texts = Vec::with_capacity(sources.len() + 1);
        texts.push(sentence);
        texts.extend_from_slice(sources);
        let m = self.embedder.embed(&texts)?;
        if m.nrows() != texts.len() {
            return Err(Error::model(format!(
                "the embedder returned {} rows for {} texts",
                m.nrows(),
                texts.len()
            )));
        }
        let q = m.row(0).to_vec();
        Ok((1..m.nrows())
            .map(|i| cosine(&q, &m.row(i).to_vec()))
            .collect())
    }

    fn name(&self) -> &str {
        "embedding"
    }
}

/// A reranker's (e.g. a cross-encoder's) score of each source as a "document" for the sentence
/// as the "query". Use a threshold on the reranker's scale (0.5 for sigmoid outputs).
pub struct RerankerSupport {
    reranker: Arc<dyn Reranker>,
}

impl RerankerSupport {
    /// A scorer backed by `reranker`.
    pub fn new(reranker: Arc<dyn Reranker>) -> Self {
        RerankerSupport { reranker }
    }
}

impl SupportScorer for RerankerSupport {
    fn support(&self, sentence: &str, sources: &[&str]) -> Result<Vec<f32>> {
        self.reranker.score(&RerankQuery::new(sentence), sources)
    }

    fn name(&self) -> &str {
        "reranker"
    }
}

/// What the checker decided about one sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SentenceStatus {
    /// A source supports it.
    Supported,
    /// No source supports it.
    Unsupported,
    /// Only citations (or punctuation): not counted.
    CitationOnly,
    /// A sentence about the answer rather than a claim ("I don't have ...", "Based on the ...")
    /// or one without any content word: not counted.
    Meta,
}

/// The check of one sentence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SentenceCheck {
    /// The sentence as it appears in the answer.
    pub text: String,
    /// The decision.
    pub status: SentenceStatus,
    /// The best support score over the sources (0 when not scored).
    pub score: f32,
    /// The number of the best-supporting source, when scored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_source: Option<usize>,
    /// The citations in the sentence.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub citations: Vec<Citation>,
}

/// The result of a grounding check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroundingReport {
    /// Every sentence with its decision.
    pub sentences: Vec<SentenceCheck>,
    /// Sentences that were judged (supported + unsupported).
    pub counted: usize,
    /// Sentences a source supports.
    pub supported: usize,
    /// `supported / counted`, or 0 when nothing was counted.
    pub confidence: f32,
    /// The unsupported sentences' text.
    pub unsupported: Vec<String>,
    /// Citations that point at no provided source (distinct, in order of appearance).
    pub invalid_citations: Vec<Citation>,
    /// The scorer's name.
    pub scorer: String,
    /// The support threshold used.
    pub threshold: f32,
}

/// Checks an answer against the sources it was given.
///
/// A sentence is skipped when it holds only citations and punctuation, or starts like a meta
/// sentence ("I don't have ...", "Based on the ..."), or has no content word. Every other
/// sentence is scored against each source (citations stripped first); it is supported when its
/// best score is at least the threshold (default 0.5 with [`LexicalSupport`]).
///
/// ```
/// use rerank::answer::{ContextSource, GroundingChecker};
/// let sources = [ContextSource {
///     number: 1, id: "r".into(), source: "report.pdf".into(), page: Some(3),
///     excerpt: "Revenue was $5M in 2023.".into(), score: 1.0, truncated: false,
/// }];
/// let report = GroundingChecker::new().check(
///     "Revenue was $5M in 2023 [Source: report.pdf, Page 3]. Profits tripled on Mars.",
///     &sources,
/// )?;
/// assert_eq!((report.supported, report.counted), (1, 2));
/// assert_eq!(report.unsupported, ["Profits tripled on Mars."]);
/// # Ok::<(), rerank::Error>(())
/// ```
#[derive(Clone)]
pub struct GroundingChecker {
    scorer: Arc<dyn SupportScorer>,
    threshold: f32,
    meta_prefixes: Vec<String>,
}

impl std::fmt::Debug for GroundingChecker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroundingChecker")
            .field("scorer", &self.scorer.name())
            .field("threshold", &self.threshold)
            .field("meta_prefixes", &self.meta_prefixes.len())
            .finish()
    }
}

/// Lower-cased starts of sentences about the answer itself.
pub const DEFAULT_META_PREFIXES: &[&str] = &[
    "i don't have",
    "i do not have",
    "i don't know",
    "i do not know",
    "i cannot",
    "i can't",
    "i could not",
    "i couldn't",
    "i'm sorry",
    "i am sorry",
    "sorry",
    "based on the",
    "based on these",
    "according to the provided",
    "according to the context",
    "according to the documents",
    "the provided documents",
    "the provided context",
    "the context does not",
    "the documents do not",
    "let me",
];

impl Default for GroundingChecker {
    fn default() -> Self {
        GroundingChecker {
            scorer: Arc::new(LexicalSupport),
            threshold: 0.5,
            meta_prefixes: DEFAULT_META_PREFIXES
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }
    }
}

impl GroundingChecker {
    /// Lexical support with threshold 0.5 and the default meta prefixes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the support threshold (a finite number).
    pub fn threshold(mut self, threshold: f32) -> Result<Self> {
        if !threshold.is_finite() {
            return Err(Error::Config(format!(
                "the grounding threshold must be a finite number, got {threshold}"
            )));
        }
        self.threshold = threshold;
        Ok(self)
    }

    /// Replaces the support scorer (e.g. [`EmbeddingSupport`], [`RerankerSupport`]).
    pub fn scorer(mut self, scorer: Arc<dyn SupportScorer>) -> Self {
        self.scorer = scorer;
        self
    }

    /// Replaces the meta-sentence prefixes (compared lower-cased, apostrophes normalized).
    pub fn meta_prefixes<S: Into<String>>(mut self, prefixes: impl IntoIterator<Item = S>) -> Self {
        self.meta_prefixes = prefixes.into_iter().map(|p| normalize(&p.into())).collect();
        self
    }

    /// The support threshold.
    pub fn support_threshold(&self) -> f32 {
        self.threshold
    }

    fn is_meta(&self, sentence: &str) -> bool {
        let s = normalize(sentence);
        let s = s.trim_start_matches(|c: char| !c.is_alphanumeric());
        self.meta_prefixes.iter().any(|p| s.starts_with(p.as_str()))
    }

    /// Checks `answer` against `sources`.
    pub fn check(&self, answer: &str, sources: &[ContextSource]) -> Result<GroundingReport> {
        let texts: Vec<&str> = sources.iter().map(|s| s.excerpt.as_str()).collect();
        let mut sentences = Vec::new();
        let mut invalid: Vec<Citation> = Vec::new();
        for sentence in split_sentences(answer) {
            let citations = Citation::parse_all(&sentence);
            for c in &citations {
                let known = sources.iter().any(|s| c.points_to(&s.source, s.page));
                if !known && !invalid.contains(c) {
                    invalid.push(c.clone());
                }
            }
            let claim = Citation::strip(&sentence);
            let status = if !claim.chars().any(char::is_alphanumeric) {
                Some(SentenceStatus::CitationOnly)
            } else if self.is_meta(&claim) || content_tokens(&claim).is_empty() {
                Some(SentenceStatus::Meta)
            } else {
                None
            };
            let (status, score, best_source) = match status {
                Some(s) => (s, 0.0, None),
                None => {
                    let scores = if texts.is_empty() {
                        Vec::new()
                    } else {
                        self.scorer.support(&claim, &texts)?
                    };
                    let best = scores
                        .iter()
                        .enumerate()
                        .filter(|(_, s)| s.is_finite())
                        // The best score; the better-ranked source on ties.
                        .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)));
                    match best {
                        Some((i, &s)) if s >= self.threshold => {
                            (SentenceStatus::Supported, s, Some(sources[i].number))
                        }
                        Some((i, &s)) => (SentenceStatus::Unsupported, s, Some(sources[i].number)),
                        None => (SentenceStatus::Unsupported, 0.0, None),
                    }
                }
            };
            sentences.push(SentenceCheck {
                text: sentence,
                status,
                score,
                best_source,
                citations,
            });
        }
        let supported = sentences
            .iter()
            .filter(|s| s.status == SentenceStatus::Supported)
            .count();
        let unsupported: Vec<String> = sentences
            .iter()
            .filter(|s| s.status == SentenceStatus::Unsupported)
            .map(|s| s.text.clone())
            .collect();
        let counted = supported + unsupported.len();
        Ok(GroundingReport {
            confidence: if counted == 0 {
                0.0
            } else {
                supported as f32 / counted as f32
            },
            sentences,
            counted,
            supported,
            unsupported,
            invalid_citations: invalid,
            scorer: self.scorer.name().to_string(),
            threshold: self.threshold,
        })
    }
}

/// Lower-case with typographic apostrophes made plain.
fn normalize(s: &str) -> String {
    s.to_lowercase().replace(['\u{2019}', '\u{2018}'], "'")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(number: usize, source: &str, page: Option<u32>, text: &str) -> ContextSource {
        ContextSource {
            number,
            id: format!("d{number}"),
            source: source.into(),
            page,
            excerpt: text.into(),
            score: 1.0,
            truncated: false,
        }
    }

    #[test]
    fn lexical_support_is_the_share_of_content_tokens() {
        // Sentence content tokens: revenu, rose, 2023, sharp -> 4.
        let s = LexicalSupport
            .support(
                "Revenue rose in 2023, sharply.",
                &["revenues rose", "nothing", ""],
            )
            .unwrap();
        assert_eq!(s, [0.5, 0.0, 0.0]);
    }

    #[test]
    fn meta_prefixes_are_case_and_apostrophe_insensitive() {
        let c = GroundingChecker::new();
        assert!(c.is_meta("I don\u{2019}t have enough information."));
        assert!(c.is_meta("Based on the context, yes"));
        assert!(c.is_meta("  - based on the documents"));
        assert!(!c.is_meta("Basil grows fast."));
        let c = c.meta_prefixes(["Note"]);
        assert!(c.is_meta("note: x"));
        assert!(!c.is_meta("I don't have it"));
    }

    #[test]
    fn threshold_is_configurable_and_validated() {
        let sources = [src(1, "a", None, "alpha beta")];
        // "alpha gamma": 1 of 2 tokens found.
        let lenient = GroundingChecker::new().threshold(0.5).unwrap();
        let strict = GroundingChecker::new().threshold(0.51).unwrap();
        assert_eq!(
            lenient.check("Alpha gamma.", &sources).unwrap().supported,
            1
        );
        assert_eq!(strict.check("Alpha gamma.", &sources).unwrap().supported, 0);
        assert!(GroundingChecker::new().threshold(f32::NAN).is_err());
    }

    /// Embeds a text as (number of "alpha" words, number of "beta" words).
    struct CountAb;
    impl Embedder for CountAb {
        fn embed_as(&self, texts: &[&str], _role: crate::Role) -> Result<ndarray::Array2<f32>> {
            let mut m = ndarray::Array2::zeros((texts.len(), 2));
            for (i, t) in texts.iter().enumerate() {
                for w in t.split_whitespace() {
                    match w.trim_matches('.') {
                        "alpha" => m[[i, 0]] += 1.0,
                        "beta" => m[[i, 1]] += 1.0,
                        _ => {}
                    }
                }
            }
            Ok(m)
        }
        fn dim(&self) -> usize {
            2
        }
    }

    /// Scores a document 1 when it contains the query's first word, else 0.
    struct FirstWord;
    impl Reranker for FirstWord {
        fn score(&self, q: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
            let first = q
                .text
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_lowercase();
            Ok(docs
                .iter()
                .map(|d| f32::from(u8::from(d.to_lowercase().contains(&first))))
                .collect())
        }
    }

    #[test]
    fn embedding_and_reranker_scorers_plug_in() {
        let sources = [
            src(1, "x", None, "beta beta"),
            src(2, "y", None, "alpha alpha"),
        ];
        let c = GroundingChecker::new()
            .scorer(Arc::new(EmbeddingSupport::new(Arc::new(CountAb))))
            .threshold(0.9)
            .unwrap();
        // "alpha beta" has cosine 1/sqrt(2) with both sources; "alpha" has cosine 1 with
        // source 2.
        let r = c.check("Zeta alpha beta. Zeta alpha.", &sources).unwrap();
        assert_eq!(r.scorer, "embedding");
        assert_eq!(r.sentences[0].status, SentenceStatus::Unsupported);
        assert!((r.sentences[0].score - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
        assert_eq!(
            r.sentences[0].best_source,
            Some(1),
            "ties go to the first source"
        );
        assert_eq!(r.sentences[1].status, SentenceStatus::Supported);
        assert_eq!(r.sentences[1].best_source, Some(2));

        let c = GroundingChecker::new().scorer(Arc::new(RerankerSupport::new(Arc::new(FirstWord))));
        let r = c
            .check("Gamma rays. Delta waves.", &[src(1, "x", None, "delta")])
            .unwrap();
        assert_eq!(r.scorer, "reranker");
        assert_eq!((r.supported, r.counted), (1, 2));
        assert_eq!(r.unsupported, ["Gamma rays."]);
    }

    #[test]
    fn no_sources_means_unsupported() {
        let r = GroundingChecker::new()
            .check("Alpha is here.", &[])
            .unwrap();
        assert_eq!((r.supported, r.counted, r.confidence), (0, 1, 0.0));
    }
}
