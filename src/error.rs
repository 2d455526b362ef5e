//! The crate's one error type and its `Result` alias.

use std::path::PathBuf;

use crate::guard::PiiKind;

/// A `Result` whose error is the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Any error a host component or a library underneath can return, kept as the cause of an
/// [`Error`] (reachable through [`std::error::Error::source`] and downcastable).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in `rerank`.
///
/// The enum is `#[non_exhaustive]`: match the variants you care about and keep a wildcard arm.
/// Every message says what was wrong and, where it can, how to fix it; the variants that wrap
/// another error keep it as their [`source`](std::error::Error::source), so a host's own error
/// type survives the trip through a pipeline:
///
/// ```
/// use std::error::Error as _;
/// use rerank::Error;
///
/// let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "qdrant is down");
/// let err = Error::backend("qdrant retriever", io);
/// assert_eq!(err.to_string(), "qdrant retriever failed: qdrant is down");
/// let cause = err.source().unwrap().downcast_ref::<std::io::Error>().unwrap();
/// assert_eq!(cause.kind(), std::io::ErrorKind::ConnectionRefused);
/// ```
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
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },

    /// A file or string could not be parsed (JSON, YAML, TOML, TSV, ...).
    #[error("could not parse {what}: {source}")]
    Parse {
        /// What was being parsed, e.g. a file path with a line number.
        what: String,
        /// The parser's error.
        #[source]
        source: BoxError,
    },

    /// A model directory is missing a file, has an unsupported architecture, or its config does
    /// not match its weights; or a tensor operation failed.
    #[error("model error: {message}{}", suffix(.source))]
    Model {
        /// What went wrong, naming the file where there is one.
        message: String,
        /// The error underneath (safetensors, tokenizers, serde), when there is one.
        #[source]
        source: Option<BoxError>,
    },

    /// A tokenizer could not be loaded or failed to encode or decode.
    #[error("tokenizer error: {message}{}", suffix(.source))]
    Tokenizer {
        /// What went wrong, naming the file where there is one.
        message: String,
        /// The tokenizers library's error, when there is one.
        #[source]
        source: Option<BoxError>,
    },

    /// The query contains personal data and was refused before any retrieval.
    ///
    /// Only the kinds are named; the values themselves are never stored in the error. It
    /// displays as its `message`: by default [`DEFAULT_REFUSAL`](crate::guard::DEFAULT_REFUSAL)
    /// with the kinds, set with [`PiiGuard::message`](crate::PiiGuard::message) (config
    /// `pii.message`).
    #[error("{message}")]
    PiiRefused {
        /// The kinds of personal data found, in a fixed order, without duplicates.
        kinds: Vec<PiiKind>,
        /// What to tell the user.
        message: String,
    },

    /// A two-phase `[SEARCH] ... [TASK] ...` query is malformed (strict mode).
    #[error("{0}")]
    QueryFormat(String),

    /// A reranker failed or broke its contract (the pipeline falls back to stage-1 order and
    /// reports it).
    #[error("reranking failed: {message}{}", suffix(.source))]
    Rerank {
        /// What went wrong.
        message: String,
        /// The error underneath, when there is one.
        #[source]
        source: Option<BoxError>,
    },

    /// A generator failed or produced nothing usable.
    #[error("generation failed: {message}{}", suffix(.source))]
    Generation {
        /// What went wrong.
        message: String,
        /// The error underneath, when there is one.
        #[source]
        source: Option<BoxError>,
    },

    /// An HTTP call failed: a connection error, a timeout, or a response with an error status.
    #[error("http request to {url} failed{}: {message}", status.map(|s| format!(" with status {s}")).unwrap_or_default())]
    Http {
        /// The URL called.
        url: String,
        /// The response status, when a response came back.
        status: Option<u16>,
        /// What went wrong (the server's error message, when it sent one).
        message: String,
        /// The HTTP client's error, when there is one.
        #[source]
        source: Option<BoxError>,
    },

    /// The SQLite store failed: the file cannot be opened or written, or its content is not
    /// what the crate expects.
    #[error("store {}: {message}{}", path.display(), suffix(.source))]
    Store {
        /// The store's file.
        path: PathBuf,
        /// What went wrong.
        message: String,
        /// SQLite's error, when there is one.
        #[source]
        source: Option<BoxError>,
    },

    /// The store's file was written by a newer version of the crate; nothing was changed in it.
    #[error(
        "store {}: schema version {found} is newer than this crate knows ({supported}); \
         open it with a newer rerank",
        path.display()
    )]
    UnsupportedSchema {
        /// The store's file.
        path: PathBuf,
        /// The schema version found in the file.
        found: i64,
        /// The newest schema version this crate reads and writes.
        supported: i64,
    },

    /// A component the host plugged in (a retriever, reranker, generator, embedder or cache
    /// store of its own) failed; its error is kept as the source.
    #[error("{component} failed: {source}")]
    Backend {
        /// Which component, e.g. `"qdrant retriever"`.
        component: String,
        /// The component's own error.
        #[source]
        source: BoxError,
    },

    /// An in-memory index would hold more documents than it can number (its slots are `u32`):
    /// nothing was added.
    #[error("{index} holds at most {limit} documents; adding {adding} to {held} would exceed it")]
    CapacityExceeded {
        /// Which index, e.g. `"Bm25Index"`.
        index: &'static str,
        /// The most documents (slots) it can hold.
        limit: u64,
        /// Slots it holds now.
        held: u64,
        /// Documents the write would add.
        adding: u64,
    },
}

fn suffix(source: &Option<BoxError>) -> String {
    source
        .as_ref()
        .map(|e| format!(": {e}"))
        .unwrap_or_default()
}

impl Error {
    /// An [`Error::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// An [`Error::Parse`] for `what` with the parser's error (or a message: `&str` and
    /// `String` convert).
    pub fn parse(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Error::Parse {
            what: what.into(),
            source: source.into(),
        }
    }

    /// An [`Error::Model`] with a message and no underlying error.
    pub fn model(message: impl Into<String>) -> Self {
        Error::Model {
            message: message.into(),
            source: None,
        }
    }

    /// An [`Error::Model`] caused by `source`.
    pub fn model_caused(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Error::Model {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// An [`Error::Tokenizer`] with a message and no underlying error.
    pub fn tokenizer(message: impl Into<String>) -> Self {
        Error::Tokenizer {
            message: message.into(),
            source: None,
        }
    }

    /// An [`Error::Tokenizer`] caused by `source`.
    pub fn tokenizer_caused(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Error::Tokenizer {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// An [`Error::Rerank`] with a message.
    pub fn rerank(message: impl Into<String>) -> Self {
        Error::Rerank {
            message: message.into(),
            source: None,
        }
    }

    /// An [`Error::Generation`] with a message.
    pub fn generation(message: impl Into<String>) -> Self {
        Error::Generation {
            message: message.into(),
            source: None,
        }
    }

    /// An [`Error::Backend`]: the host's `component` failed with `source`.
    pub fn backend(component: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Error::Backend {
            component: component.into(),
            source: source.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn causes_are_kept_and_shown() {
        let json = serde_json::from_str::<u32>("x").unwrap_err();
        let e = Error::parse("config.json", json);
        assert!(e.to_string().starts_with("could not parse config.json: "));
        assert!(e.source().unwrap().is::<serde_json::Error>());

        let e = Error::model("config.json: hidden_size must be at least 1");
        assert_eq!(
            e.to_string(),
            "model error: config.json: hidden_size must be at least 1"
        );
        assert!(e.source().is_none());
    }

    #[test]
    fn http_errors_carry_their_status() {
        let e = Error::Http {
            url: "http://127.0.0.1:1/v1/chat/completions".into(),
            status: Some(503),
            message: "overloaded".into(),
            source: None,
        };
        assert_eq!(
            e.to_string(),
            "http request to http://127.0.0.1:1/v1/chat/completions failed with status 503: overloaded"
        );
    }

    #[test]
    fn the_error_is_send_sync_and_static() {
        fn check<T: Send + Sync + 'static>() {}
        check::<Error>();
    }
}
