//! Pair tokenization exactly as sentence-transformers' `CrossEncoder` does it.
//!
//! `tokenizer([query], [document], truncation="longest_first", max_length=L)`: the tokenizer's
//! own post-processor adds the special tokens (`[CLS] q [SEP] d [SEP]` with token types 0 then
//! 1 for BERT, `<s> q </s></s> d </s>` for XLM-RoBERTa) and the `LongestFirst` rule cuts the
//! two sides to fit `L`. Truncation and padding baked into `tokenizer.json` are turned off:
//! padding is done per batch by the caller.
//!
//! Each side is tokenized in full before the pair is cut. Letting the `tokenizers` crate
//! truncate (0.23) is not exact: it stops tokenizing each side at `L` tokens first, so two
//! sides longer than `L` look equally long and the tie rule gives the query one token fewer
//! than Python does when the query is in fact the longer side.

use tokenizers::utils::truncation::truncate_encodings;
use tokenizers::{
    PostProcessor, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy,
};

use crate::{Error, Result};

/// The token ids of one (query, document) pair, special tokens included, without padding.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PairEncoding {
    /// Input ids.
    pub input_ids: Vec<u32>,
    /// Token type (segment) ids, one per input id.
    pub token_type_ids: Vec<u32>,
    /// Whether the pair was cut to `max_length` (the model judged part of it only).
    pub truncated: bool,
}

impl PairEncoding {
    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.input_ids.len()
    }

    /// Whether there are no tokens (never the case for a real pair).
    pub fn is_empty(&self) -> bool {
        self.input_ids.is_empty()
    }
}

/// A tokenizer set up for pairs: `longest_first` truncation to `max_length`, no padding.
#[derive(Clone)]
pub struct PairTokenizer {
    tokenizer: Tokenizer,
    max_length: usize,
    /// Truncation of the two sides to the content budget (`max_length` minus specials).
    content: TruncationParams,
}

impl std::fmt::Debug for PairTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PairTokenizer")
            .field("max_length", &self.max_length)
            .finish_non_exhaustive()
    }
}

impl PairTokenizer {
    /// Wraps `tokenizer` for `longest_first` truncation to `max_length` total tokens, turning
    /// off the truncation and padding baked into it. `max_length` must leave room for at least
    /// one content token beside the special tokens of a pair.
    pub fn new(mut tokenizer: Tokenizer, max_length: usize) -> Result<Self> {
        let specials = Self::special_tokens_of(&tokenizer);
        if max_length <= specials {
            return Err(Error::Config(format!(
                "max_length {max_length} leaves no room for text: a pair already has {specials} \
                 special tokens"
            )));
        }
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| Error::tokenizer(e.to_string()))?;
        Ok(PairTokenizer {
            tokenizer,
            max_length,
            content: TruncationParams {
                max_length: max_length - specials,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
                direction: TruncationDirection::Right,
            },
        })
    }

    /// The number of special tokens the tokenizer's post-processor adds to a pair.
    pub fn special_tokens_of(tokenizer: &Tokenizer) -> usize {
        tokenizer
            .get_post_processor()
            .map_or(0, |p| p.added_tokens(true))
    }

    /// The total length limit, special tokens included.
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// Encodes one pair. An empty `document` still yields the pair form (`[CLS] q [SEP] [SEP]`).
    pub fn encode(&self, query: &str, document: &str) -> Result<PairEncoding> {
        let err = |e: tokenizers::Error| Error::tokenizer(e.to_string());
        let q = self.tokenizer.encode_fast(query, false).map_err(err)?;
        let d = self.tokenizer.encode_fast(document, false).map_err(err)?;
        let truncated = q.len() + d.len() > self.content.max_length;
        let (q, d) = truncate_encodings(q, Some(d), &self.content).map_err(err)?;
        let enc = self.tokenizer.post_process(q, d, true).map_err(err)?;
        Ok(PairEncoding {
            input_ids: enc.get_ids().to_vec(),
            token_type_ids: enc.get_type_ids().to_vec(),
            truncated,
        })
    }

    /// The tokens `document` alone has, with their byte ranges (for [`Passages`]).
    ///
    /// [`Passages`]: crate::text::passages::Passages
    pub(crate) fn document_tokens(
        &self,
        document: &str,
    ) -> Result<Vec<crate::text::passages::Token>> {
        crate::text::passages::document_tokens(&self.tokenizer, document)
    }

    /// How many document tokens fit beside `query` without cutting either: the content
    /// budget less the query's tokens, and at least half the budget (a longer query is cut
    /// to make room, as `longest_first` cuts it).
    pub(crate) fn room(&self, query: &str) -> Result<usize> {
        let q = self
            .tokenizer
            .encode_fast(query, false)
            .map_err(|e| Error::tokenizer(e.to_string()))?;
        let content = self.content.max_length;
        Ok(content.saturating_sub(q.len()).max(content / 2))
    }

    /// Encodes many pairs, in input order (in parallel on the current rayon pool).
    pub fn encode_all(&self, pairs: &[(&str, &str)]) -> Result<Vec<PairEncoding>> {
        use rayon::prelude::*;
        pairs.par_iter().map(|(q, d)| self.encode(q, d)).collect()
    }
}
