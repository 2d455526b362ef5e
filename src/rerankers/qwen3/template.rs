//! The official Qwen3-Reranker prompt: prefix, `<Instruct>/<Query>/<Document>` body, suffix.
//!
//! The three parts are tokenized separately (the prefix and suffix once, at load time) and
//! only the body is truncated, so the suffix that asks for the yes/no answer is never cut.

/// The system turn and the opening of the user turn.
pub const PREFIX: &str = "<|im_start|>system\nJudge whether the Document meets the requirements \
based on the Query and the Instruct provided. Note that the answer can only be \"yes\" or \
\"no\".<|im_end|>\n<|im_start|>user\n";

/// The end of the user turn and the opening of the assistant turn, with an empty think block.
pub const SUFFIX: &str = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";

/// The token whose logit means "relevant".
pub const YES_TOKEN: &str = "yes";

/// The token whose logit means "not relevant".
pub const NO_TOKEN: &str = "no";

/// The default total length (prefix + body + suffix) in tokens.
pub const DEFAULT_MAX_LENGTH: usize = 8192;

/// The body: `<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}`.
pub fn format_body(instruction: &str, query: &str, doc: &str) -> String {
    format!("<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}")
}

/// The whole prompt as one string (for display; the scorer tokenizes the parts separately).
pub fn format_prompt(instruction: &str, query: &str, doc: &str) -> String {
    format!("{PREFIX}{}{SUFFIX}", format_body(instruction, query, doc))
}

#[cfg(feature = "models")]
pub(crate) use encoder::PromptEncoder;

#[cfg(feature = "models")]
mod encoder {
    use std::path::Path;

    use tokenizers::Tokenizer;

    use super::{format_body, NO_TOKEN, PREFIX, SUFFIX, YES_TOKEN};
    use crate::{Error, Result};

    /// Tokenizes prompts the way the model card does.
    pub(crate) struct PromptEncoder {
        tokenizer: Tokenizer,
        prefix: Vec<u32>,
        suffix: Vec<u32>,
        max_length: usize,
        yes: u32,
        no: u32,
    }

    impl PromptEncoder {
        /// Loads `tokenizer.json`, turns off any truncation or padding baked into it, tokenizes
        /// the prefix and suffix, and looks up the yes/no ids.
        pub(crate) fn from_file(path: &Path, max_length: usize) -> Result<Self> {
            let mut tokenizer = Tokenizer::from_file(path)
                .map_err(|e| Error::tokenizer(format!("cannot load {}: {e}", path.display())))?;
            tokenizer
                .with_truncation(None)
                .map_err(|e| Error::tokenizer(e.to_string()))?;
            tokenizer.with_padding(None);
            let encode = |text: &str| -> Result<Vec<u32>> {
                tokenizer
                    .encode_fast(text, false)
                    .map(|e| e.get_ids().to_vec())
                    .map_err(|e| Error::tokenizer(e.to_string()))
            };
            let prefix = encode(PREFIX)?;
            let suffix = encode(SUFFIX)?;
            let lookup = |token: &str| {
                tokenizer.token_to_id(token).ok_or_else(|| {
                    Error::tokenizer(format!(
                        "{} has no token {token:?}: is it a Qwen3 tokenizer?",
                        path.display()
                    ))
                })
            };
            let yes = lookup(YES_TOKEN)?;
            let no = lookup(NO_TOKEN)?;
            if yes == no {
                return Err(Error::tokenizer(format!(
                    "{}: \"yes\" and \"no\" map to the same id {yes}",
                    path.display()
                )));
            }
            let fixed = prefix.len() + suffix.len();
            if max_length <= fixed {
                return Err(Error::Config(format!(
                    "max_length {max_length} leaves no room for the document: the prompt's \
                     prefix and suffix alone take {fixed} tokens"
                )));
            }
            Ok(PromptEncoder {
                tokenizer,
                prefix,
                suffix,
                max_length,
                yes,
                no,
            })
        }

        /// The id of `"yes"`.
        pub(crate) fn yes_id(&self) -> u32 {
            self.yes
        }

        /// The id of `"no"`.
        pub(crate) fn no_id(&self) -> u32 {
            self.no
        }

        /// The prefix and suffix ids (part of every prompt).
        pub(crate) fn fixed_ids(&self) -> impl Iterator<Item = u32> + '_ {
            self.prefix.iter().chain(&self.suffix).copied()
        }

        /// The most body tokens a prompt keeps.
        pub(crate) fn body_budget(&self) -> usize {
            self.max_length - self.prefix.len() - self.suffix.len()
        }

        /// `prefix + body (cut to the budget, from the right) + suffix`, and whether the body
        /// was cut.
        pub(crate) fn encode(
            &self,
            instruction: &str,
            query: &str,
            doc: &str,
        ) -> Result<(Vec<u32>, bool)> {
            let body = format_body(instruction, query, doc);
            let ids = self.ids(&body)?;
            let cut = ids.len() > self.body_budget();
            let body = &ids[..ids.len().min(self.body_budget())];
            let mut out = Vec::with_capacity(self.prefix.len() + body.len() + self.suffix.len());
            out.extend_from_slice(&self.prefix);
            out.extend_from_slice(body);
            out.extend_from_slice(&self.suffix);
            Ok((out, cut))
        }

        /// How many document tokens fit in a prompt beside `instruction` and `query`: the body
        /// budget less the body of an empty document, and at least half the budget (a longer
        /// query is cut with the document's end).
        pub(crate) fn room(&self, instruction: &str, query: &str) -> Result<usize> {
            let budget = self.body_budget();
            let fixed = self.ids(&format_body(instruction, query, ""))?.len();
            Ok(budget.saturating_sub(fixed).max(budget / 2))
        }

        /// The tokens `document` alone has, with their byte ranges (for passages).
        pub(crate) fn document_tokens(
            &self,
            document: &str,
        ) -> Result<Vec<crate::text::passages::Token>> {
            crate::text::passages::document_tokens(&self.tokenizer, document)
        }

        fn ids(&self, text: &str) -> Result<Vec<u32>> {
            self.tokenizer
                .encode_fast(text, false)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| Error::tokenizer(e.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_matches_the_model_card_layout() {
        let p = format_prompt("I", "Q", "D");
        assert!(p.starts_with("<|im_start|>system\nJudge whether the Document"));
        assert!(p.contains("can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n"));
        assert!(p.contains("<|im_start|>user\n<Instruct>: I\n<Query>: Q\n<Document>: D<|im_end|>"));
        assert!(p.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    }
}
