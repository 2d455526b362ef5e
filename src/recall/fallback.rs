//! [`FallbackRetriever`]: recall that degrades instead of failing when its primary retriever
//! (a remote vector database, say) is down.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{Retriever, SearchQuery};
use crate::{Hit, Result};

/// Asks `primary`; when it fails, answers from `fallback` and counts the fallback.
///
/// ```
/// use std::sync::Arc;
/// use rerank::recall::{FallbackRetriever, SearchQuery};
/// use rerank::{Bm25Index, Document, Error, Hit, Retriever};
///
/// struct Down;
/// impl Retriever for Down {
///     fn retrieve(&self, _: &SearchQuery, _: usize) -> rerank::Result<Vec<Hit>> {
///         Err(Error::backend("vector db", "connection refused"))
///     }
/// }
/// let bm25 = Bm25Index::new();
/// bm25.add(vec![Document::new("1", "hello world")])?;
/// let recall = FallbackRetriever::new(Arc::new(Down), Arc::new(bm25));
/// assert_eq!(recall.retrieve(&SearchQuery::new("hello"), 5)?.len(), 1);
/// assert_eq!(recall.fallbacks(), 1);
/// # Ok::<(), rerank::Error>(())
/// ```
///
/// The primary's error is not returned; [`FallbackRetriever::last_error`] keeps its message
/// for health checks and logs. When the fallback fails too, its error is returned.
pub struct FallbackRetriever {
    primary: Arc<dyn Retriever>,
    fallback: Arc<dyn Retriever>,
    fallbacks: AtomicU64,
    last_error: std::sync::Mutex<Option<String>>,
    name: String,
}

impl FallbackRetriever {
    /// Recall from `primary`, or from `fallback` when `primary` fails.
    pub fn new(primary: Arc<dyn Retriever>, fallback: Arc<dyn Retriever>) -> Self {
        let name = format!("{}|{}", primary.name(), fallback.name());
        FallbackRetriever {
            primary,
            fallback,
            fallbacks: AtomicU64::new(0),
            last_error: std::sync::Mutex::new(None),
            name,
        }
    }

    /// How many queries the fallback answered.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks.load(Ordering::Relaxed)
    }

    /// The primary's last error message, if it ever failed.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl std::fmt::Debug for FallbackRetriever {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FallbackRetriever")
            .field("name", &self.name)
            .field("fallbacks", &self.fallbacks())
            .finish_non_exhaustive()
    }
}

impl Retriever for FallbackRetriever {
    fn retrieve(&self, query: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        match self.primary.retrieve(query, k) {
            Ok(hits) => Ok(hits),
            Err(e) => {
                self.fallbacks.fetch_add(1, Ordering::Relaxed);
                *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                self.fallback.retrieve(query, k)
            }
        }
    }

    fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Bm25Index, Document, Error};

    struct Failing;
    impl Retriever for Failing {
        fn retrieve(&self, _: &SearchQuery, _: usize) -> Result<Vec<Hit>> {
            Err(Error::backend("milvus", "down"))
        }
        fn name(&self) -> &str {
            "failing"
        }
    }

    fn bm25() -> Arc<Bm25Index> {
        let index = Bm25Index::new();
        index
            .add(vec![
                Document::new("1", "alpha beta"),
                Document::new("2", "gamma"),
            ])
            .unwrap();
        Arc::new(index)
    }

    #[test]
    fn a_working_primary_is_used_and_nothing_is_counted() {
        let r = FallbackRetriever::new(bm25(), Arc::new(Failing));
        let hits = r.retrieve(&SearchQuery::new("gamma"), 5).unwrap();
        assert_eq!(hits[0].id(), "2");
        assert_eq!(r.fallbacks(), 0);
        assert_eq!(r.last_error(), None);
        assert_eq!(r.name(), "bm25|failing");
    }

    #[test]
    fn a_failing_primary_falls_back_and_is_counted() {
        let r = FallbackRetriever::new(Arc::new(Failing), bm25());
        for _ in 0..3 {
            assert_eq!(
                r.retrieve(&SearchQuery::new("alpha"), 5).unwrap()[0].id(),
                "1"
            );
        }
        assert_eq!(r.fallbacks(), 3);
        assert!(r.last_error().unwrap().contains("milvus"));
    }

    #[test]
    fn when_both_fail_the_fallback_error_is_returned() {
        let r = FallbackRetriever::new(Arc::new(Failing), Arc::new(Failing));
        assert!(r.retrieve(&SearchQuery::new("x"), 5).is_err());
    }
}
