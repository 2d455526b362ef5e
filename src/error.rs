//! The crate's one error type and its `Result` alias.

use std::path::PathBuf;

use crate::query::PiiKind;

/// A `Result` whose error is the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `rerank`.
///
/// The enum is `#[non_exhaustive]`: match the variants you care about and keep a wildcard arm.
/// Every message says what was wrong and, where it can, how to fix it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A builder or configuration value is invalid (checked at `build()` time).
    #[error("invalid configuration: {0}")]
    Config(String),

    /// A caller-supplied argument is invalid (empty query, mismatched lengths, ...).
    #[error("invalid input: {0}")]
    InvalidInput(String),

    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },

    /// A file or string could not be parsed (JSON, YAML, TOML, TSV, ...).
    #[error("could not parse {what}: {message}")]
    Parse {
        /// What was being parsed, e.g. a file path with a line number.
        what: String,
        /// The parser's explanation.
        message: String,
    },

    /// A model directory is missing a file, has an unsupported architecture, or its config does
    /// not match its weights; or a tensor operation failed.
    #[error("model error: {0}")]
    Model(String),

    /// A tokenizer could not be loaded or failed to encode or decode.
    #[error("tokenizer error: {0}")]
    Tokenizer(String),

    /// The query contains personal data and was refused before any retrieval.
    ///
    /// Only the kinds are named; the values themselves are never stored in the error.
    #[error("query refused: it contains personal data ({})", PiiKind::join(.kinds))]
    PiiRefused {
        /// The kinds of personal data found, in a fixed order, without duplicates.
        kinds: Vec<PiiKind>,
    },

    /// A two-phase `[SEARCH] ... [TASK] ...` query is malformed (strict mode).
    #[error("{0}")]
    QueryFormat(String),

    /// A retriever failed.
    #[error("retrieval failed: {0}")]
    Retrieval(String),

    /// A reranker failed (the pipeline falls back to stage-1 order and reports it).
    #[error("reranking failed: {0}")]
    Rerank(String),

    /// A generator failed.
    #[error("generation failed: {0}")]
    Generation(String),

    /// An HTTP call failed (the OpenAI-compatible generator).
    #[error("http request failed: {0}")]
    Http(String),

    /// A time budget was exceeded.
    #[error("timed out: {0}")]
    Timeout(String),
}

impl Error {
    /// An [`Error::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// An [`Error::Parse`] for `what` with the parser's `message`.
    pub fn parse(what: impl Into<String>, message: impl ToString) -> Self {
        Error::Parse {
            what: what.into(),
            message: message.to_string(),
        }
    }
}
