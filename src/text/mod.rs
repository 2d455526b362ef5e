//! Text analysis shared by every stage, in one place.
//!
//! - [`Analyzer`] / [`EnglishAnalyzer`] (`analyzer`): index terms for BM25 (Lucene English
//!   stopwords, Snowball stemming);
//! - [`content_tokens`] (`content`): the words of a sentence that carry a claim, for grounding
//!   and extractive answers;
//! - [`split_sentences`] (`sentences`): sentence splitting that keeps citations, numbers and
//!   abbreviations whole;
//! - [`QUERY_STOPWORDS`] and query words with possessives (`words`): what the classifier,
//!   protected reranking and the cache guard compare.

mod analyzer;
mod content;
pub(crate) mod passages;
mod sentences;
mod words;

pub use analyzer::{Analyzer, EnglishAnalyzer, LUCENE_ENGLISH_STOPWORDS};
pub(crate) use content::content_token_set;
pub use content::content_tokens;
pub use sentences::split_sentences;
pub use words::QUERY_STOPWORDS;
pub(crate) use words::{contains_phrase, is_form_of, phrase_words, plain_words, words, Word};
