//! `GET /metrics`: requests by route and status, requests in flight, latency histograms, batch
//! sizes (requests, items and tokens per model call), queue refusals, cache hits and
//! fallbacks, in Prometheus' text format.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds (seconds) of the latency buckets.
const LATENCY: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Upper bounds of the batch-size buckets (items in one model call).
const SIZES: [f64; 10] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 512.0, 2048.0];
/// Upper bounds of the batch-token buckets (tokens in one model call).
const TOKENS: [f64; 13] = [
    16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0,
    65536.0,
];

#[derive(Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], value: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; bounds.len()];
        }
        for (c, &b) in self.counts.iter_mut().zip(bounds) {
            if value <= b {
                *c += 1;
            }
        }
        self.sum += value;
        self.count += 1;
    }

    fn write(&self, out: &mut String, name: &str, labels: &str, bounds: &[f64]) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (c, b) in self.counts.iter().zip(bounds) {
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {c}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

#[derive(Default)]
struct Inner {
    requests: BTreeMap<(String, u16), u64>,
    in_flight: BTreeMap<String, u64>,
    latency: BTreeMap<String, Histogram>,
    batch_items: BTreeMap<&'static str, Histogram>,
    batch_requests: BTreeMap<&'static str, Histogram>,
    batch_tokens: BTreeMap<&'static str, Histogram>,
    cancelled: BTreeMap<&'static str, u64>,
    expired: BTreeMap<&'static str, u64>,
    cache_hits: u64,
    fallbacks: u64,
}

/// The server's counters (one lock; every update is a few additions).
#[derive(Default)]
pub struct Metrics(Mutex<Inner>);

impl Metrics {
    fn with(&self, f: impl FnOnce(&mut Inner)) {
        let mut inner = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut inner);
    }

    /// A request on `route` has started; it counts as in flight until the guard drops (when
    /// its response is ready, or when its client leaves and the server drops the request).
    pub fn begin(self: &std::sync::Arc<Self>, route: &str) -> InFlight {
        self.with(|m| *m.in_flight.entry(route.to_string()).or_default() += 1);
        InFlight {
            metrics: self.clone(),
            route: route.to_string(),
        }
    }

    /// One finished request.
    pub fn request(&self, route: &str, status: u16, took: Duration) {
        self.with(|m| {
            *m.requests.entry((route.to_string(), status)).or_default() += 1;
            m.latency
                .entry(route.to_string())
                .or_default()
                .observe(&LATENCY, took.as_secs_f64());
        });
    }

    /// One model call of `model` over `requests` requests, `items` items and `tokens` tokens.
    pub fn batch(&self, model: &'static str, requests: usize, items: usize, tokens: usize) {
        self.with(|m| {
            m.batch_tokens
                .entry(model)
                .or_default()
                .observe(&TOKENS, tokens as f64);
            m.batch_items
                .entry(model)
                .or_default()
                .observe(&SIZES, items as f64);
            m.batch_requests
                .entry(model)
                .or_default()
                .observe(&SIZES, requests as f64);
        });
    }

    /// A queued request whose client left before its batch ran (not computed).
    pub fn cancelled(&self, model: &'static str) {
        self.with(|m| *m.cancelled.entry(model).or_default() += 1);
    }

    /// A queued request whose deadline passed before its batch ran.
    pub fn expired(&self, model: &'static str) {
        self.with(|m| *m.expired.entry(model).or_default() += 1);
    }

    /// A search answered from the semantic cache.
    pub fn cache_hit(&self) {
        self.with(|m| m.cache_hits += 1);
    }

    /// A search whose reranker fell back.
    pub fn fallback(&self) {
        self.with(|m| m.fallbacks += 1);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.with(|m| {
            out.push_str("# TYPE rerank_requests_total counter\n");
            for ((route, status), n) in &m.requests {
                let _ = writeln!(
                    out,
                    "rerank_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
                );
            }
            out.push_str("# TYPE rerank_requests_in_flight gauge\n");
            for (route, n) in &m.in_flight {
                let _ = writeln!(out, "rerank_requests_in_flight{{route=\"{route}\"}} {n}");
            }
            out.push_str("# TYPE rerank_request_seconds histogram\n");
            for (route, h) in &m.latency {
                h.write(
                    &mut out,
                    "rerank_request_seconds",
                    &format!("route=\"{route}\""),
                    &LATENCY,
                );
            }
            out.push_str("# TYPE rerank_batch_items histogram\n");
            for (model, h) in &m.batch_items {
                h.write(
                    &mut out,
                    "rerank_batch_items",
                    &format!("model=\"{model}\""),
                    &SIZES,
                );
            }
            out.push_str("# TYPE rerank_batch_requests histogram\n");
            for (model, h) in &m.batch_requests {
                h.write(
                    &mut out,
                    "rerank_batch_requests",
                    &format!("model=\"{model}\""),
                    &SIZES,
                );
            }
            out.push_str("# TYPE rerank_batch_tokens histogram\n");
            for (model, h) in &m.batch_tokens {
                h.write(
                    &mut out,
                    "rerank_batch_tokens",
                    &format!("model=\"{model}\""),
                    &TOKENS,
                );
            }
            out.push_str("# TYPE rerank_cancelled_total counter\n");
            for (model, n) in &m.cancelled {
                let _ = writeln!(out, "rerank_cancelled_total{{model=\"{model}\"}} {n}");
            }
            out.push_str("# TYPE rerank_expired_total counter\n");
            for (model, n) in &m.expired {
                let _ = writeln!(out, "rerank_expired_total{{model=\"{model}\"}} {n}");
            }
            let _ = writeln!(
                out,
                "# TYPE rerank_cache_hits_total counter\nrerank_cache_hits_total {}",
                m.cache_hits
            );
            let _ = writeln!(
                out,
                "# TYPE rerank_fallbacks_total counter\nrerank_fallbacks_total {}",
                m.fallbacks
            );
        });
        out
    }
}

/// One request in flight (see [`Metrics::begin`]).
pub struct InFlight {
    metrics: std::sync::Arc<Metrics>,
    route: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.metrics.with(|m| {
            if let Some(n) = m.in_flight.get_mut(&self.route) {
                *n = n.saturating_sub(1);
            }
        });
    }
}
