//! Dynamic batching: the requests that arrive while a model is busy are scored together in its
//! next call, up to a number of items, from a bounded queue.
//!
//! One worker thread per model takes the first queued request, then every request already
//! waiting (up to `max_items` items in all), drops the ones whose client left or whose deadline
//! passed, and runs the model once on all their items: the library packs them into its
//! padding-free batches. A full queue is refused at once (`429` with `Retry-After`), so the
//! backlog never grows without bound.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;

use super::error::ApiError;
use super::metrics::Metrics;

/// What the worker does with one batch: one output per item, in order.
pub type Run<I, O> = Box<dyn Fn(&[I]) -> Result<Vec<O>, String> + Send>;

struct Job<I, O> {
    items: Vec<I>,
    deadline: Instant,
    reply: oneshot::Sender<Result<Vec<O>, ApiError>>,
}

/// The queue in front of one model.
pub struct Batcher<I, O> {
    name: &'static str,
    queue: SyncSender<Job<I, O>>,
    capacity: usize,
}

impl<I: Send + 'static, O: Send + 'static> Batcher<I, O> {
    /// Starts the worker thread for `name` (`rerank`, `embed`): at most `capacity` requests
    /// wait, and one model call takes at most `max_items` items (a larger request goes alone).
    pub fn start(
        name: &'static str,
        capacity: usize,
        max_items: usize,
        metrics: Arc<Metrics>,
        run: Run<I, O>,
    ) -> std::io::Result<Self> {
        let (queue, jobs) = sync_channel(capacity);
        std::thread::Builder::new()
            .name(format!("serve-{name}"))
            .spawn(move || work(name, &jobs, max_items, &metrics, &run))?;
        Ok(Batcher {
            name,
            queue,
            capacity,
        })
    }

    /// Queues `items` and waits for their outputs: `429` when the queue is full, `504` when
    /// the deadline passes first, `500` when the model fails.
    pub async fn submit(&self, items: Vec<I>, deadline: Instant) -> Result<Vec<O>, ApiError> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            items,
            deadline,
            reply,
        };
        match self.queue.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return Err(ApiError::overloaded(format!(
                    "the {} queue is full ({} requests wait); retry shortly",
                    self.name, self.capacity
                )))
            }
            Err(TrySendError::Disconnected(_)) => {
                return Err(ApiError::unavailable(format!(
                    "the {} worker stopped",
                    self.name
                )))
            }
        }
        let wait = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(wait, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(ApiError::internal(format!(
                "the {} worker dropped the request",
                self.name
            ))),
            Err(_) => Err(ApiError::timeout(format!(
                "the {} request did not finish within its deadline",
                self.name
            ))),
        }
    }
}

/// Adds `job` to the batch, or answers it at once when its client left or its deadline passed
/// (such jobs do not count toward the batch, so a backlog of stale requests drains in one
/// pass instead of one model call at a time).
fn take<I, O>(
    name: &'static str,
    job: Job<I, O>,
    metrics: &Metrics,
    live: &mut Vec<Job<I, O>>,
    items: &mut usize,
) {
    if job.reply.is_closed() {
        metrics.cancelled(name);
    } else if job.deadline <= Instant::now() {
        metrics.expired(name);
        let _ = job.reply.send(Err(ApiError::timeout(format!(
            "the {name} request waited past its deadline"
        ))));
    } else {
        *items += job.items.len();
        live.push(job);
    }
}

fn work<I, O>(
    name: &'static str,
    jobs: &Receiver<Job<I, O>>,
    max_items: usize,
    metrics: &Metrics,
    run: &Run<I, O>,
) {
    while let Ok(first) = jobs.recv() {
        let mut live = Vec::new();
        let mut items = 0;
        take(name, first, metrics, &mut live, &mut items);
        while items < max_items {
            match jobs.try_recv() {
                Ok(job) => take(name, job, metrics, &mut live, &mut items),
                Err(_) => break,
            }
        }
        if live.is_empty() {
            continue;
        }
        let mut all = Vec::new();
        let mut replies = Vec::with_capacity(live.len());
        for job in live {
            replies.push((job.reply, job.items.len()));
            all.extend(job.items);
        }
        metrics.batch(name, replies.len(), all.len());
        let result = catch_unwind(AssertUnwindSafe(|| run(&all)))
            .unwrap_or_else(|_| Err(format!("the {name} model panicked")));
        match result {
            Ok(outputs) if outputs.len() == all.len() => {
                let mut outputs = outputs.into_iter();
                for (reply, n) in replies {
                    let _ = reply.send(Ok(outputs.by_ref().take(n).collect()));
                }
            }
            Ok(outputs) => {
                let message = format!(
                    "the {name} model returned {} outputs for {} inputs",
                    outputs.len(),
                    all.len()
                );
                for (reply, _) in replies {
                    let _ = reply.send(Err(ApiError::internal(message.clone())));
                }
            }
            Err(message) => {
                for (reply, _) in replies {
                    let _ = reply.send(Err(ApiError::internal(message.clone())));
                }
            }
        }
    }
}
