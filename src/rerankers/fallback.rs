//! [`FallbackReranker`]: a primary reranker with a stand-in for when it fails or is too slow.
//!
//! The primary (e.g. Qwen3-Reranker) scores the documents. When it returns an error, the wrong
//! number of scores, or (with a latency budget) no answer within the budget, the fallback
//! (e.g. an embedding reranker) scores them instead, and
//! [`Reranker::score_detailed`] says so: `scorer` names the reranker that produced the
//! scores and `fallback_reason` says why the primary did not. Without a fallback the call
//! fails, and the pipeline keeps the stage-1 order and reports the error.
//!
//! A primary call that exceeds the budget cannot be interrupted: it finishes on its own
//! thread and its result is dropped. While such a call is still running, further calls go
//! straight to the fallback, so a slow primary cannot pile up work under load.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use super::{RerankQuery, RerankScores, Reranker};
use crate::{Error, Result};

/// A reranker that falls back to a second one (or to stage-1 order) when the first fails or
/// exceeds a latency budget. Build it with [`FallbackReranker::builder`].
///
/// ```
/// use std::time::Duration;
/// use rerank::rerankers::FallbackReranker;
/// use rerank::{Reranker, Result};
/// use rerank::rerankers::RerankQuery;
///
/// struct Broken;
/// impl Reranker for Broken {
///     fn score(&self, _: &RerankQuery, _: &[&str]) -> Result<Vec<f32>> {
///         Err(rerank::Error::rerank("model not loaded"))
///     }
///     fn name(&self) -> &str { "broken" }
/// }
/// struct Length;
/// impl Reranker for Length {
///     fn score(&self, _: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
///         Ok(docs.iter().map(|d| d.len() as f32).collect())
///     }
///     fn name(&self) -> &str { "length" }
/// }
///
/// let reranker = FallbackReranker::builder(Broken)
///     .fallback(Length)
///     .budget(Duration::from_millis(500))
///     .build()?;
/// let out = reranker.score_detailed(&RerankQuery::new("q"), &["a", "abc"])?;
/// assert_eq!(out.scores, vec![1.0, 3.0]);
/// assert_eq!(out.scorer, "length");
/// assert!(out.fallback_reason.unwrap().contains("model not loaded"));
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct FallbackReranker {
    primary: Arc<dyn Reranker>,
    fallback: Option<Arc<dyn Reranker>>,
    budget: Option<Duration>,
    abandoned: Arc<AtomicUsize>,
}

impl std::fmt::Debug for FallbackReranker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FallbackReranker")
            .field("primary", &self.primary.name())
            .field("fallback", &self.fallback.as_ref().map(|r| r.name()))
            .field("budget", &self.budget)
            .finish()
    }
}

/// Why the primary did not produce the scores.
enum Miss {
    Failed(String),
    OverBudget(Duration),
    Busy(usize),
}

const RUNNING: u8 = 0;
const DONE: u8 = 1;
const ABANDONED: u8 = 2;

/// Marks a worker's call done when it ends (normally or by panic); if the caller had given up
/// on it, takes it off the abandoned count.
struct DoneGuard {
    state: Arc<AtomicU8>,
    abandoned: Arc<AtomicUsize>,
}

impl Drop for DoneGuard {
    fn drop(&mut self) {
        if self.state.swap(DONE, Ordering::AcqRel) == ABANDONED {
            self.abandoned.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl FallbackReranker {
    /// A builder around `primary`.
    pub fn builder(primary: impl Reranker + 'static) -> FallbackRerankerBuilder {
        Self::builder_arc(Arc::new(primary))
    }

    /// A builder around a shared `primary`.
    pub fn builder_arc(primary: Arc<dyn Reranker>) -> FallbackRerankerBuilder {
        FallbackRerankerBuilder {
            primary,
            fallback: None,
            budget: None,
        }
    }

    /// The latency budget, when one is set.
    pub fn budget(&self) -> Option<Duration> {
        self.budget
    }

    /// Primary calls that exceeded the budget and are still running in the background.
    pub fn abandoned_calls(&self) -> usize {
        self.abandoned.load(Ordering::Acquire)
    }

    fn describe(&self, miss: &Miss) -> String {
        let name = self.primary.name();
        match miss {
            Miss::Failed(e) => format!("{name} failed: {e}"),
            Miss::OverBudget(b) => {
                format!("{name} exceeded the latency budget of {} ms", b.as_millis())
            }
            Miss::Busy(n) => format!(
                "{name} is still running {n} earlier call(s) that exceeded the latency budget"
            ),
        }
    }

    /// The primary's scores, or why there are none.
    fn primary_scores(&self, query: &RerankQuery, docs: &[&str]) -> Result<RerankScores, Miss> {
        let scores = match self.budget {
            None => self
                .primary
                .score_detailed(query, docs)
                .map_err(|e| Miss::Failed(e.to_string()))?,
            Some(budget) => self.primary_within(budget, query, docs)?,
        };
        if scores.scores.len() != docs.len() {
            return Err(Miss::Failed(format!(
                "returned {} scores for {} documents",
                scores.scores.len(),
                docs.len()
            )));
        }
        Ok(scores)
    }

    /// Runs the primary on its own thread and waits at most `budget` for it.
    fn primary_within(
        &self,
        budget: Duration,
        query: &RerankQuery,
        docs: &[&str],
    ) -> Result<RerankScores, Miss> {
        let busy = self.abandoned_calls();
        if busy > 0 {
            return Err(Miss::Busy(busy));
        }
        let (tx, rx) = mpsc::channel();
        let state = Arc::new(AtomicU8::new(RUNNING));
        let guard = DoneGuard {
            state: state.clone(),
            abandoned: self.abandoned.clone(),
        };
        let primary = self.primary.clone();
        let query = query.clone();
        let docs: Vec<String> = docs.iter().map(|d| d.to_string()).collect();
        std::thread::Builder::new()
            .name("rerank-primary".into())
            .spawn(move || {
                let _guard = guard;
                let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
                let _ = tx.send(primary.score_detailed(&query, &refs));
            })
            .map_err(|e| Miss::Failed(format!("cannot start a thread: {e}")))?;
        let received = match rx.recv_timeout(budget) {
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // Count the call as abandoned first, then claim it; if it finished meanwhile,
                // undo the count and take its result.
                self.abandoned.fetch_add(1, Ordering::AcqRel);
                if state
                    .compare_exchange(RUNNING, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return Err(Miss::OverBudget(budget));
                }
                self.abandoned.fetch_sub(1, Ordering::AcqRel);
                rx.recv()
                    .map_err(|_| Miss::Failed("the scoring thread panicked".into()))?
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Miss::Failed("the scoring thread panicked".into()))
            }
            Ok(received) => received,
        };
        received.map_err(|e| Miss::Failed(e.to_string()))
    }
}

impl Reranker for FallbackReranker {
    fn score(&self, query: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
        Ok(self.score_detailed(query, docs)?.scores)
    }

    fn score_detailed(&self, query: &RerankQuery, docs: &[&str]) -> Result<RerankScores> {
        let miss = match self.primary_scores(query, docs) {
            Ok(scores) => return Ok(scores),
            Err(miss) => miss,
        };
        let reason = self.describe(&miss);
        let Some(fallback) = &self.fallback else {
            return Err(Error::rerank(format!(
                "{reason}; no fallback reranker is set"
            )));
        };
        let out = fallback.score_detailed(query, docs).map_err(|e| {
            Error::rerank(format!(
                "{reason}; the fallback {} failed too: {e}",
                fallback.name()
            ))
        })?;
        if out.scores.len() != docs.len() {
            return Err(Error::rerank(format!(
                "{reason}; the fallback {} returned {} scores for {} documents",
                out.scorer,
                out.scores.len(),
                docs.len()
            )));
        }
        let reason = match out.fallback_reason {
            Some(inner) => format!("{reason}; then {inner}"),
            None => reason,
        };
        Ok(RerankScores {
            fallback_reason: Some(reason),
            ..out
        })
    }

    fn name(&self) -> &str {
        self.primary.name()
    }

    /// The primary's raw scores (a fallback's scores are not the model's: a failure is an
    /// error here).
    fn raw_score_pairs(&self, pairs: &[(&RerankQuery, &str)]) -> Result<Option<Vec<f32>>> {
        self.primary.raw_score_pairs(pairs)
    }

    /// The primary's count.
    fn token_count(&self, query: &RerankQuery, document: &str) -> Option<usize> {
        self.primary.token_count(query, document)
    }
}

/// Builds a [`FallbackReranker`].
pub struct FallbackRerankerBuilder {
    primary: Arc<dyn Reranker>,
    fallback: Option<Arc<dyn Reranker>>,
    budget: Option<Duration>,
}

impl FallbackRerankerBuilder {
    /// The reranker that takes over (default: none, i.e. the call fails and the pipeline keeps
    /// stage-1 order).
    pub fn fallback(self, fallback: impl Reranker + 'static) -> Self {
        self.fallback_arc(Arc::new(fallback))
    }

    /// A shared fallback reranker.
    pub fn fallback_arc(mut self, fallback: Arc<dyn Reranker>) -> Self {
        self.fallback = Some(fallback);
        self
    }

    /// The longest the primary may take per call (default: no limit).
    pub fn budget(mut self, budget: Duration) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Checks the budget and builds.
    pub fn build(self) -> Result<FallbackReranker> {
        if self.budget == Some(Duration::ZERO) {
            return Err(Error::Config(
                "a zero latency budget would never use the primary reranker".into(),
            ));
        }
        Ok(FallbackReranker {
            primary: self.primary,
            fallback: self.fallback,
            budget: self.budget,
            abandoned: Arc::new(AtomicUsize::new(0)),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Instant;

    use super::*;

    /// Scores each document by its length.
    struct Length;
    impl Reranker for Length {
        fn score(&self, _: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
            Ok(docs.iter().map(|d| d.len() as f32).collect())
        }
        fn name(&self) -> &str {
            "length"
        }
    }

    /// Scores by negative length.
    struct Short;
    impl Reranker for Short {
        fn score(&self, _: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
            Ok(docs.iter().map(|d| -(d.len() as f32)).collect())
        }
        fn name(&self) -> &str {
            "short"
        }
    }

    struct Failing;
    impl Reranker for Failing {
        fn score(&self, _: &RerankQuery, _: &[&str]) -> Result<Vec<f32>> {
            Err(Error::model("weights missing"))
        }
        fn name(&self) -> &str {
            "failing"
        }
    }

    struct WrongCount;
    impl Reranker for WrongCount {
        fn score(&self, _: &RerankQuery, _: &[&str]) -> Result<Vec<f32>> {
            Ok(vec![1.0])
        }
        fn name(&self) -> &str {
            "wrong-count"
        }
    }

    struct Panicking;
    impl Reranker for Panicking {
        fn score(&self, _: &RerankQuery, _: &[&str]) -> Result<Vec<f32>> {
            panic!("boom")
        }
        fn name(&self) -> &str {
            "panicking"
        }
    }

    /// Blocks every call until the test releases it (no timing guesses: it is over any budget
    /// until released), then scores like [`Length`].
    struct Gate {
        release: Mutex<mpsc::Receiver<()>>,
    }
    impl Reranker for Gate {
        fn score(&self, q: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
            let _ = self.release.lock().unwrap().recv();
            Length.score(q, docs)
        }
        fn name(&self) -> &str {
            "gate"
        }
    }

    fn gate() -> (Gate, mpsc::Sender<()>) {
        let (tx, rx) = mpsc::channel();
        (
            Gate {
                release: Mutex::new(rx),
            },
            tx,
        )
    }

    const DOCS: [&str; 3] = ["aa", "a", "aaa"];

    fn q() -> RerankQuery {
        RerankQuery::new("q")
    }

    #[test]
    fn the_primary_is_used_when_it_works() {
        for budget in [None, Some(Duration::from_secs(60))] {
            let mut b = FallbackReranker::builder(Length).fallback(Short);
            if let Some(d) = budget {
                b = b.budget(d);
            }
            let out = b.build().unwrap().score_detailed(&q(), &DOCS).unwrap();
            assert_eq!(out.scores, vec![2.0, 1.0, 3.0]);
            assert_eq!(out.scorer, "length");
            assert_eq!(out.fallback_reason, None);
        }
    }

    #[test]
    fn a_failing_primary_hands_over_with_its_error() {
        for primary in [
            Arc::new(Failing) as Arc<dyn Reranker>,
            Arc::new(WrongCount),
            Arc::new(Panicking),
        ] {
            let name = primary.name().to_string();
            let r = FallbackReranker::builder_arc(primary)
                .fallback(Short)
                .budget(Duration::from_secs(60))
                .build()
                .unwrap();
            let out = r.score_detailed(&q(), &DOCS).unwrap();
            assert_eq!(out.scores, vec![-2.0, -1.0, -3.0], "{name}");
            assert_eq!(out.scorer, "short");
            let reason = out.fallback_reason.unwrap();
            assert!(reason.starts_with(&format!("{name} ")), "{reason}");
            assert_eq!(r.abandoned_calls(), 0);
        }
        let r = FallbackReranker::builder(Failing)
            .fallback(Short)
            .build()
            .unwrap();
        let reason = r
            .score_detailed(&q(), &DOCS)
            .unwrap()
            .fallback_reason
            .unwrap();
        assert!(reason.contains("weights missing"), "{reason}");
    }

    #[test]
    fn without_a_fallback_the_call_fails_so_stage_one_order_stays() {
        let r = FallbackReranker::builder(Failing).build().unwrap();
        let e = r.score_detailed(&q(), &DOCS).unwrap_err();
        assert!(matches!(e, Error::Rerank { .. }));
        let msg = e.to_string();
        assert!(
            msg.contains("weights missing") && msg.contains("no fallback"),
            "{msg}"
        );
    }

    #[test]
    fn when_both_fail_the_error_names_both() {
        let r = FallbackReranker::builder(Failing)
            .fallback(WrongCount)
            .build()
            .unwrap();
        let msg = r.score_detailed(&q(), &DOCS).unwrap_err().to_string();
        assert!(
            msg.contains("failing failed") && msg.contains("wrong-count"),
            "{msg}"
        );
    }

    #[test]
    fn a_slow_primary_is_abandoned_and_the_fallback_answers() {
        let (slow, release) = gate();
        let r = FallbackReranker::builder(slow)
            .fallback(Short)
            .budget(Duration::from_millis(20))
            .build()
            .unwrap();
        let out = r.score_detailed(&q(), &DOCS).unwrap();
        assert_eq!(out.scorer, "short");
        assert_eq!(out.scores, vec![-2.0, -1.0, -3.0]);
        let reason = out.fallback_reason.unwrap();
        assert!(
            reason.contains("gate exceeded the latency budget of 20 ms"),
            "{reason}"
        );
        assert_eq!(r.abandoned_calls(), 1);

        // While the abandoned call runs, the fallback answers at once.
        let out = r.score_detailed(&q(), &DOCS).unwrap();
        assert!(out.fallback_reason.unwrap().contains("still running 1"));

        // Once it finishes, the primary is tried again (and answers within the budget).
        release.send(()).unwrap();
        let start = Instant::now();
        while r.abandoned_calls() > 0 && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(r.abandoned_calls(), 0);
        release.send(()).unwrap();
        let out = r.score_detailed(&q(), &DOCS).unwrap();
        // The released gate answers at once, though a loaded machine might still take longer
        // than 20 ms; either way the primary was tried again (no "still running" shortcut).
        match out.scorer.as_str() {
            "gate" => assert_eq!(out.scores, vec![2.0, 1.0, 3.0]),
            "short" => assert!(out.fallback_reason.unwrap().contains("exceeded")),
            other => panic!("unexpected scorer {other}"),
        }
    }

    #[test]
    fn a_zero_budget_is_rejected() {
        let e = FallbackReranker::builder(Length)
            .budget(Duration::ZERO)
            .build()
            .unwrap_err();
        assert!(matches!(e, Error::Config(_)));
    }

    #[test]
    fn nested_fallbacks_report_the_whole_chain() {
        let inner = FallbackReranker::builder(Failing)
            .fallback(Short)
            .build()
            .unwrap();
        let outer = FallbackReranker::builder(Failing)
            .fallback(inner)
            .build()
            .unwrap();
        let out = outer.score_detailed(&q(), &DOCS).unwrap();
        assert_eq!(out.scorer, "short");
        let reason = out.fallback_reason.unwrap();
        assert_eq!(reason.matches("failing failed").count(), 2, "{reason}");
    }
}
