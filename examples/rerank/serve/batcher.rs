//! Dynamic batching: the requests that arrive while a model is busy are scored together in its
//! next call, from a bounded queue, each call bounded in items and in tokens.
//!
//! One worker thread per model takes the first queued request, then the requests already
//! waiting (as many as one call can take), drops the ones whose client left or whose deadline
//! passed, and runs the model once on the next items in arrival order: at most `max_items`
//! items and `max_tokens` tokens (each item's count, as the model tokenizes it). A request
//! larger than that is served over several calls, so one long request cannot make a single
//! call as long as itself; an item longer than `max_tokens` alone goes in a call of its own (it
//! is already cut to the model's `max_length`). The library packs each call's items into its
//! padding-free batches. A full queue is refused at once (`429` with `Retry-After`), so the
//! backlog never grows without bound.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;

use super::error::ApiError;
use super::metrics::Metrics;

/// What the worker does with one call's items: one output per item, in order.
pub type Run<I, O> = Box<dyn Fn(&[&I]) -> Result<Vec<O>, String> + Send>;

/// How many tokens the model computes for one item (`None`: the model cannot tell; the item
/// then counts as none toward `max_tokens`).
pub type Count<I> = Box<dyn Fn(&I) -> Option<usize> + Send>;

/// The most one model call takes.
#[derive(Debug, Clone, Copy)]
pub struct CallLimits {
    /// Items (documents, inputs) across requests.
    pub max_items: usize,
    /// Tokens across requests.
    pub max_tokens: usize,
}

/// A request's outputs, in input order, and the tokens its items took (`None` when the model
/// cannot count them).
pub struct Done<O> {
    pub outputs: Vec<O>,
    pub tokens: Option<usize>,
}

struct Job<I, O> {
    items: Vec<I>,
    deadline: Instant,
    reply: oneshot::Sender<Result<Done<O>, ApiError>>,
}

/// A request the worker has taken: its items' token counts and the outputs computed so far
/// (its first `outputs.len()` items).
struct Active<I, O> {
    job: Job<I, O>,
    tokens: Vec<Option<usize>>,
    outputs: Vec<O>,
}

impl<I, O> Active<I, O> {
    fn is_finished(&self) -> bool {
        self.outputs.len() == self.job.items.len()
    }

    /// The items and tokens still to compute.
    fn left(&self) -> (usize, usize) {
        let rest = &self.tokens[self.outputs.len()..];
        (rest.len(), rest.iter().map(|t| t.unwrap_or(0)).sum())
    }

    /// Answers the request with its outputs.
    fn finish(self) {
        let tokens = self.tokens.iter().copied().sum::<Option<usize>>();
        let _ = self.job.reply.send(Ok(Done {
            outputs: self.outputs,
            tokens,
        }));
    }
}

/// The queue in front of one model.
pub struct Batcher<I, O> {
    name: &'static str,
    queue: SyncSender<Job<I, O>>,
    capacity: usize,
}

impl<I: Send + 'static, O: Send + 'static> Batcher<I, O> {
    /// Starts the worker thread for `name` (`rerank`, `embed`, `sparse`): at most `capacity`
    /// requests wait, and one model call takes at most `limits`, counting each item's tokens
    /// with `count`.
    pub fn start(
        name: &'static str,
        capacity: usize,
        limits: CallLimits,
        metrics: Arc<Metrics>,
        run: Run<I, O>,
        count: Count<I>,
    ) -> std::io::Result<Self> {
        let (queue, jobs) = sync_channel(capacity);
        std::thread::Builder::new()
            .name(format!("serve-{name}"))
            .spawn(move || {
                Worker {
                    name,
                    limits,
                    metrics: &metrics,
                    run: &run,
                    count: &count,
                    active: VecDeque::new(),
                }
                .work(&jobs)
            })?;
        Ok(Batcher {
            name,
            queue,
            capacity,
        })
    }

    /// Queues `items` and waits for their outputs: `429` when the queue is full, `504` when
    /// the deadline passes first, `500` when the model fails.
    pub async fn submit(&self, items: Vec<I>, deadline: Instant) -> Result<Done<O>, ApiError> {
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

/// One model's worker: the requests it has taken, in arrival order.
struct Worker<'a, I, O> {
    name: &'static str,
    limits: CallLimits,
    metrics: &'a Metrics,
    run: &'a Run<I, O>,
    count: &'a Count<I>,
    active: VecDeque<Active<I, O>>,
}

impl<I, O> Worker<'_, I, O> {
    fn work(mut self, jobs: &Receiver<Job<I, O>>) {
        loop {
            if self.active.is_empty() {
                match jobs.recv() {
                    Ok(job) => self.admit(job),
                    Err(_) => return,
                }
            }
            // Take what already waits, until the work taken fills one call.
            loop {
                let (items, tokens) = self
                    .active
                    .iter()
                    .map(Active::left)
                    .fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
                if items >= self.limits.max_items || tokens >= self.limits.max_tokens {
                    break;
                }
                match jobs.try_recv() {
                    Ok(job) => self.admit(job),
                    Err(_) => break,
                }
            }
            self.sweep();
            if !self.active.is_empty() {
                self.call();
            }
        }
    }

    /// Takes `job`, counting its items' tokens, or answers it at once when its client left or
    /// its deadline passed (such jobs cost nothing, so a backlog of stale requests drains in
    /// one pass instead of one model call at a time).
    fn admit(&mut self, job: Job<I, O>) {
        if job.reply.is_closed() {
            self.metrics.cancelled(self.name);
        } else if job.deadline <= Instant::now() {
            self.expire(job);
        } else {
            let tokens = job.items.iter().map(|i| (self.count)(i)).collect();
            self.active.push_back(Active {
                job,
                tokens,
                outputs: Vec::new(),
            });
        }
    }

    fn expire(&self, job: Job<I, O>) {
        self.metrics.expired(self.name);
        let _ = job.reply.send(Err(ApiError::timeout(format!(
            "the {} request waited past its deadline",
            self.name
        ))));
    }

    /// Drops the requests whose client left or whose deadline passed (a request served over
    /// several calls may pass its deadline between them).
    fn sweep(&mut self) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.active.len() {
            let job = &self.active[i].job;
            if job.reply.is_closed() {
                self.metrics.cancelled(self.name);
                self.active.remove(i);
            } else if job.deadline <= now {
                if let Some(a) = self.active.remove(i) {
                    self.expire(a.job);
                }
            } else {
                i += 1;
            }
        }
    }

    /// Runs the model once on the next items in arrival order, within the call's limits (at
    /// least one item), then answers the requests it finished.
    fn call(&mut self) {
        // (request, first item, items) of this call.
        let mut plan: Vec<(usize, usize, usize)> = Vec::new();
        let (mut items, mut tokens) = (0usize, 0usize);
        'requests: for (k, a) in self.active.iter().enumerate() {
            let start = a.outputs.len();
            for (taken, t) in a.tokens[start..].iter().enumerate() {
                let t = t.unwrap_or(0);
                if items > 0
                    && (items >= self.limits.max_items || tokens + t > self.limits.max_tokens)
                {
                    if taken > 0 {
                        plan.push((k, start, taken));
                    }
                    break 'requests;
                }
                items += 1;
                tokens += t;
            }
            plan.push((k, start, a.job.items.len() - start));
        }
        self.metrics.batch(self.name, plan.len(), items, tokens);
        let result = {
            let batch: Vec<&I> = plan
                .iter()
                .flat_map(|&(k, start, n)| self.active[k].job.items[start..start + n].iter())
                .collect();
            catch_unwind(AssertUnwindSafe(|| (self.run)(&batch)))
                .unwrap_or_else(|_| Err(format!("the {} model panicked", self.name)))
        };
        match result {
            Ok(outputs) if outputs.len() == items => {
                let mut outputs = outputs.into_iter();
                for &(k, _, n) in &plan {
                    self.active[k].outputs.extend(outputs.by_ref().take(n));
                }
                let mut i = 0;
                while i < self.active.len() {
                    if self.active[i].is_finished() {
                        if let Some(a) = self.active.remove(i) {
                            a.finish();
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            Ok(outputs) => {
                let message = format!(
                    "the {} model returned {} outputs for {items} inputs",
                    self.name,
                    outputs.len(),
                );
                self.fail(&plan, &message);
            }
            Err(message) => self.fail(&plan, &message),
        }
    }

    /// Answers every request of `plan` with a 500.
    fn fail(&mut self, plan: &[(usize, usize, usize)], message: &str) {
        for &(k, _, _) in plan.iter().rev() {
            if let Some(a) = self.active.remove(k) {
                let _ = a
                    .job
                    .reply
                    .send(Err(ApiError::internal(message.to_string())));
            }
        }
    }
}
