//! `rerank serve`: a pipeline config behind the HTTP APIs existing clients speak.
//!
//! | route | API | served by |
//! |---|---|---|
//! | `POST /v2/rerank`, `POST /v1/rerank` | Cohere rerank (Jina's too: `usage.total_tokens`) | the config's reranker |
//! | `POST /rerank` | text-embeddings-inference (`raw_scores`: the logits; Qwen3's and mxbai-v2's are their token-logit differences) | the config's reranker |
//! | `POST /v1/embeddings` | OpenAI embeddings (`float` or `base64`, `dimensions`, `input_type`; Jina's and Voyage's too) | the config's embedder |
//! | `POST /embed` | text-embeddings-inference | the config's embedder |
//! | `POST /embed_sparse` | text-embeddings-inference (`[{index, value}]` per input) | `serve.sparse_model` or `--sparse-model` |
//! | `POST /v1/chat/completions` | OpenAI chat completions, whole or streamed (`chat.rs`) | the config's generator |
//! | `GET /v1/models`, `GET /v1/models/{id}` | OpenAI's model list (clients that discover models first) | the config's models |
//! | `POST /search`, `POST /answer` | the pipeline's own request and response | the pipeline |
//! | `GET /health`, `GET /metrics`, `GET /info` | readiness, Prometheus text, models and limits | |
//!
//! The reranker may be any the config's `reranker` section names: a cross-encoder, Qwen3
//! (also converted to sequence classification), mxbai-rerank-v2, or a ColBERT model (`type:
//! colbert`), whose MaxSim scores the rerank routes return. Usage is counted in the model's own
//! tokens (special tokens and prompts included, after truncation): OpenAI's
//! `usage.prompt_tokens`, Cohere's `meta.tokens.input_tokens` and Jina's `usage.total_tokens`.
//! A route with a role (`/v1/embeddings`, `/embed`, `/embed_sparse`) embeds as `document`
//! unless the request says otherwise or the config's `serve.default_role` names another for
//! that route; a route whose model the config lacks answers `501`.
//!
//! The library stays synchronous: each model has a worker thread fed by a bounded queue
//! (`batcher.rs`), and the requests that wait while it runs are scored together in its next
//! call (dynamic batching over the padding-free encoder), each call bounded in items
//! (`--batch-size`) and tokens (`--max-batch-tokens`, as text-embeddings-inference's): a
//! larger request is served over several calls, and a text longer than the token limit (after
//! the model's own truncation) in a call alone, where TEI refuses to start with a limit below
//! the model's input length. Over the queue a request gets `429` with
//! `Retry-After`; past its deadline `504`; while the models load `503`. Every error is a JSON
//! body with a message (`error.rs`). SIGTERM or Ctrl-C stops accepting connections and
//! finishes the requests in flight.

mod api;
mod batcher;
mod chat;
mod error;
mod metrics;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use rerank::embed::SparseVector;
use rerank::pipeline::{EmbedderConfig, Pipeline, PipelineConfig, RerankerKind};
use rerank::rerankers::RerankQuery;
use rerank::{Embedder, Role};

use crate::CliResult;
use api::*;
use batcher::{Batcher, CallLimits, Done};
use error::ApiError;
use metrics::Metrics;

/// `rerank serve` flags.
#[derive(clap::Args)]
pub struct Args {
    /// Pipeline config (YAML, TOML or JSON): its reranker answers the rerank routes, its
    /// embedder the embedding routes, the whole pipeline /search and /answer; its `serve`
    /// section names the sparse model and the default role of each embedding route.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The learned sparse encoder (a sentence-transformers SparseEncoder folder, SPLADE) that
    /// answers /embed_sparse (default: the config's `serve.sparse_model`).
    #[arg(long)]
    sparse_model: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// Environment variable holding the API key clients send as `Authorization: Bearer KEY`
    /// (off by default on a loopback address; required on any other).
    #[arg(long)]
    api_key_env: Option<String>,
    /// Largest request body in bytes (413 beyond).
    #[arg(long, default_value_t = 4 << 20)]
    max_body_bytes: usize,
    /// Most documents (or inputs) in one request (413 beyond).
    #[arg(long, default_value_t = 1000)]
    max_documents: usize,
    /// Longest document (or input) in bytes (413 beyond); the model cuts it to its own
    /// `max_length` in tokens anyway.
    #[arg(long, default_value_t = 64 << 10)]
    max_document_bytes: usize,
    /// Requests that may wait for each model (429 beyond).
    #[arg(long, default_value_t = 256)]
    queue: usize,
    /// Most documents (or inputs) one model call takes across waiting requests.
    #[arg(
        long = "batch-size",
        alias = "batch-items",
        value_name = "N",
        default_value_t = 512
    )]
    batch_items: usize,
    /// Most tokens one model call takes across waiting requests (as text-embeddings-inference's
    /// flag): a larger request is served over several calls; one text longer than this (after
    /// the model's own truncation) goes in a call alone.
    #[arg(long, default_value_t = 16384)]
    max_batch_tokens: usize,
    /// Seconds a request may take, waiting included (504 beyond).
    #[arg(long, default_value_t = 30)]
    timeout_secs: u64,
    /// Threads for the models (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// `--log-level` (at info: a line per request, with method, route, status and latency;
    /// and the shutdown).
    #[command(flatten)]
    log: crate::flags::LogArgs,
}

/// Limits every request is checked against.
#[derive(Debug, Clone, serde::Serialize)]
struct Limits {
    max_body_bytes: usize,
    max_documents: usize,
    max_document_bytes: usize,
    queue: usize,
    batch_items: usize,
    max_batch_tokens: usize,
    timeout_secs: u64,
}

impl Limits {
    /// `413` when there are too many texts or one is too long.
    fn check<'a>(&self, texts: impl ExactSizeIterator<Item = &'a str>) -> Result<(), ApiError> {
        if texts.len() > self.max_documents {
            return Err(ApiError::too_large(format!(
                "{} documents in one request; the limit is {} (--max-documents)",
                texts.len(),
                self.max_documents
            )));
        }
        for (i, t) in texts.enumerate() {
            if t.len() > self.max_document_bytes {
                return Err(ApiError::too_large(format!(
                    "document {i} has {} bytes; the limit is {} (--max-document-bytes)",
                    t.len(),
                    self.max_document_bytes
                )));
            }
        }
        Ok(())
    }

    fn deadline(&self) -> Instant {
        Instant::now() + Duration::from_secs(self.timeout_secs)
    }

    /// What one model call may take.
    fn call(&self) -> CallLimits {
        CallLimits {
            max_items: self.batch_items,
            max_tokens: self.max_batch_tokens,
        }
    }
}

/// One (query, document) pair to score.
struct RerankItem {
    query: Arc<RerankQuery>,
    document: String,
    /// The score before the model's activation (TEI's `raw_scores`).
    raw: bool,
}

/// The queue of the sparse encoder: (role, text) in, a sparse vector out.
type SparseBatcher = Batcher<(Role, String), SparseVector>;

/// The role of each embedding route when a request names none (`serve.default_role`).
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Roles {
    embeddings: Role,
    embed: Role,
    embed_sparse: Role,
}

/// What is served once the models are loaded.
struct Ready {
    pipeline: Arc<Pipeline>,
    rerank: Option<Batcher<RerankItem, f32>>,
    /// Whether the reranker has raw scores (TEI's `raw_scores`).
    raw_scores: bool,
    embed: Option<Batcher<(Role, String), Vec<f32>>>,
    sparse: Option<SparseBatcher>,
    roles: Roles,
    /// The embedding widths `dimensions` may ask for (the model's, then its Matryoshka ones).
    dimensions: Vec<usize>,
    /// The config's `grounding` section, for `/answer`.
    answer_options: rerank::pipeline::AnswerOptions,
    info: serde_json::Value,
    /// `GET /v1/models`: the models the config serves, as OpenAI lists them.
    models: Vec<serde_json::Value>,
}

struct AppState {
    limits: Limits,
    api_key: Option<String>,
    metrics: Arc<Metrics>,
    ready: OnceLock<Ready>,
}

type Shared = Arc<AppState>;

impl AppState {
    fn ready(&self) -> Result<&Ready, ApiError> {
        self.ready
            .get()
            .ok_or_else(|| ApiError::unavailable("the models are loading; retry shortly"))
    }
}

/// Runs the server until SIGTERM or Ctrl-C.
pub fn run(args: Args) -> CliResult {
    let api_key = match &args.api_key_env {
        Some(var) => Some(
            std::env::var(var)
                .map_err(|_| format!("--api-key-env {var}: the environment variable is not set"))?,
        ),
        None if args.addr.ip().is_loopback() => None,
        None => {
            return Err(format!(
                "{} is not a loopback address: pass --api-key-env VAR so clients must \
                 authenticate",
                args.addr
            )
            .into())
        }
    };
    if api_key.as_deref() == Some("") {
        return Err("the API key is empty".into());
    }
    args.log.init()?;
    if let Some(n) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .map_err(|e| format!("--threads {n}: {e}"))?;
    }
    let config = PipelineConfig::from_path(&args.config)?;
    let sparse_model = args
        .sparse_model
        .clone()
        .or_else(|| config.serve.as_ref().and_then(|s| s.sparse_model.clone()));
    let limits = Limits {
        max_body_bytes: args.max_body_bytes,
        max_documents: args.max_documents,
        max_document_bytes: args.max_document_bytes,
        queue: args.queue.max(1),
        batch_items: args.batch_items.max(1),
        max_batch_tokens: args.max_batch_tokens.max(1),
        timeout_secs: args.timeout_secs.max(1),
    };
    let state = Arc::new(AppState {
        limits,
        api_key,
        metrics: Arc::new(Metrics::default()),
        ready: OnceLock::new(),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(serve(args.addr, config, sparse_model, state))
}

async fn serve(
    addr: SocketAddr,
    config: PipelineConfig,
    sparse_model: Option<PathBuf>,
    state: Shared,
) -> CliResult {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    // The socket answers (503) while the models load.
    eprintln!("listening on http://{}", listener.local_addr()?);
    let loading = {
        let state = state.clone();
        tokio::task::spawn_blocking(move || {
            load(&config, sparse_model.as_deref(), &state).map_err(|e| e.to_string())
        })
    };
    let app = router(state.clone());
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<String>();
    tokio::spawn(async move {
        match loading.await {
            Ok(Ok(())) => eprintln!("ready"),
            Ok(Err(e)) => {
                let _ = failed_tx.send(e);
            }
            Err(e) => {
                let _ = failed_tx.send(format!("loading panicked: {e}"));
            }
        }
    });
    let failure = Arc::new(std::sync::Mutex::new(None));
    let failure_slot = failure.clone();
    let shutdown = async move {
        tokio::select! {
            _ = signal() => {
                tracing::info!("shutting down: finishing the requests in flight");
            }
            Ok(message) = failed_rx => {
                *failure_slot.lock().unwrap() = Some(message);
            }
        }
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    let failed = failure.lock().unwrap().take();
    match failed {
        Some(message) => Err(message.into()),
        None => Ok(()),
    }
}

/// SIGTERM or Ctrl-C.
async fn signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("a SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// Builds the pipeline (and the sparse encoder), starts a worker per model and marks the
/// server ready.
fn load(config: &PipelineConfig, sparse_model: Option<&Path>, state: &Shared) -> CliResult {
    let pipeline = Arc::new(config.build(Vec::new())?);
    let limits = &state.limits;
    let (rerank, raw_scores) = match pipeline.reranker() {
        None => (None, false),
        Some(reranker) => {
            // The answer does not depend on the pairs: none tells.
            let raw_scores = matches!(reranker.raw_score_pairs(&[]), Ok(Some(_)));
            let (p, q) = (pipeline.clone(), pipeline.clone());
            let batcher = Batcher::start(
                "rerank",
                limits.queue,
                limits.call(),
                state.metrics.clone(),
                Box::new(move |items: &[&RerankItem]| {
                    let reranker = p.reranker().ok_or("the reranker is gone")?;
                    rerank_items(reranker, items)
                }),
                Box::new(move |item: &RerankItem| {
                    q.reranker()?.token_count(&item.query, &item.document)
                }),
            )?;
            (Some(batcher), raw_scores)
        }
    };
    let (embed, dimensions) = match pipeline.embedder() {
        None => (None, Vec::new()),
        Some(embedder) => {
            let (e, c) = (embedder.clone(), embedder.clone());
            let batcher = Batcher::start(
                "embed",
                limits.queue,
                limits.call(),
                state.metrics.clone(),
                Box::new(move |items: &[&(Role, String)]| {
                    by_role(items, |texts, role| {
                        let rows = e.embed_as(texts, role).map_err(|e| e.to_string())?;
                        Ok(rows.outer_iter().map(|r| r.to_vec()).collect())
                    })
                }),
                Box::new(move |(role, text): &(Role, String)| c.token_count(text, *role)),
            )?;
            (Some(batcher), embedding_dimensions(config, embedder.dim()))
        }
    };
    let (sparse, sparse_info) = match sparse_model {
        None => (None, serde_json::Value::Null),
        Some(model) => {
            let (batcher, info) = sparse_batcher(model, state)?;
            (Some(batcher), info)
        }
    };
    let defaults = config
        .serve
        .as_ref()
        .map(|s| s.default_role.clone())
        .unwrap_or_default();
    let roles = Roles {
        embeddings: defaults.embeddings.unwrap_or(Role::Document),
        embed: defaults.embed.unwrap_or(Role::Document),
        embed_sparse: defaults.embed_sparse.unwrap_or(Role::Document),
    };
    let embedder_model = match &config.embedder {
        Some(EmbedderConfig::Bert { model, .. }) => Some(model.display().to_string()),
        _ => None,
    };
    let info = serde_json::json!({
        "reranker": pipeline.reranker().map(|r| r.name().to_string()),
        // The model as the config names it (a directory or a hub id).
        "reranker_model": config
            .reranker
            .as_ref()
            .and_then(|r| r.model.as_ref())
            .map(|m| m.display().to_string()),
        "raw_scores": raw_scores,
        "embedder": pipeline.embedder().map(|e| serde_json::json!({
            "model": embedder_model,
            "id": e.id(),
            "dimensions": dimensions,
        })),
        "sparse": sparse_info,
        "default_role": roles,
        "generator": pipeline.generator().map(|g| g.name().to_string()),
        "precision": precisions(config),
        "recall_modes": pipeline.recall_modes(),
        "limits": state.limits,
        "version": env!("CARGO_PKG_VERSION"),
    });
    let models = chat::model_list(config, &pipeline);
    let ready = Ready {
        pipeline,
        rerank,
        raw_scores,
        embed,
        sparse,
        roles,
        dimensions,
        answer_options: config.answer_options()?,
        info,
        models,
    };
    if state.ready.set(ready).is_err() {
        return Err("loaded twice".into());
    }
    Ok(())
}

/// Scores a call's pairs: the plain ones with [`Reranker::score_pairs`], the raw ones with
/// [`Reranker::raw_score_pairs`]; outputs in input order.
///
/// [`Reranker::score_pairs`]: rerank::Reranker::score_pairs
/// [`Reranker::raw_score_pairs`]: rerank::Reranker::raw_score_pairs
fn rerank_items(
    reranker: &dyn rerank::Reranker,
    items: &[&RerankItem],
) -> Result<Vec<f32>, String> {
    let mut out = vec![f32::NAN; items.len()];
    for raw in [false, true] {
        let at: Vec<usize> = (0..items.len()).filter(|&i| items[i].raw == raw).collect();
        if at.is_empty() {
            continue;
        }
        let pairs: Vec<(&RerankQuery, &str)> = at
            .iter()
            .map(|&i| (items[i].query.as_ref(), items[i].document.as_str()))
            .collect();
        let scores = if raw {
            reranker
                .raw_score_pairs(&pairs)
                .map_err(|e| e.to_string())?
                .ok_or("the reranker has no raw scores")?
        } else {
            reranker.score_pairs(&pairs).map_err(|e| e.to_string())?
        };
        if scores.len() != at.len() {
            return Err(format!(
                "the reranker returned {} scores for {} pairs",
                scores.len(),
                at.len()
            ));
        }
        for (&i, score) in at.iter().zip(scores) {
            out[i] = score;
        }
    }
    Ok(out)
}

/// Runs `f` once per role over the items of that role (a call's items may have different
/// roles); outputs in input order.
fn by_role<O: Default + Clone>(
    items: &[&(Role, String)],
    f: impl Fn(&[&str], Role) -> Result<Vec<O>, String>,
) -> Result<Vec<O>, String> {
    let mut out = vec![O::default(); items.len()];
    for role in [Role::Query, Role::Document] {
        let at: Vec<usize> = (0..items.len()).filter(|&i| items[i].0 == role).collect();
        if at.is_empty() {
            continue;
        }
        let texts: Vec<&str> = at.iter().map(|&i| items[i].1.as_str()).collect();
        let rows = f(&texts, role)?;
        if rows.len() != at.len() {
            return Err(format!(
                "the model returned {} outputs for {} texts",
                rows.len(),
                at.len()
            ));
        }
        for (&i, row) in at.iter().zip(rows) {
            out[i] = row;
        }
    }
    Ok(out)
}

/// Loads the sparse encoder of `model` and starts its worker; with it, what `/info` says of it.
#[cfg(feature = "models")]
fn sparse_batcher(model: &Path, state: &Shared) -> CliResult<(SparseBatcher, serde_json::Value)> {
    use rerank::models::registry::{resolve, Task};
    let encoder = resolve(model, Task::Embedding)
        .and_then(|dir| rerank::embed::SparseEncoder::builder(dir).build())
        .map_err(|e| format!("the sparse model {}: {e}", model.display()))?;
    let encoder = Arc::new(encoder);
    let info = serde_json::json!({
        "model": model.display().to_string(),
        "vocab_size": encoder.vocab_size(),
        "max_active_dims": encoder.max_active_dims(),
    });
    let (e, c) = (encoder.clone(), encoder);
    let batcher = Batcher::start(
        "sparse",
        state.limits.queue,
        state.limits.call(),
        state.metrics.clone(),
        Box::new(move |items: &[&(Role, String)]| {
            by_role(items, |texts, role| {
                e.encode(texts, role).map_err(|e| e.to_string())
            })
        }),
        Box::new(move |(role, text): &(Role, String)| {
            c.token_ids(text, *role).ok().map(|ids| ids.len())
        }),
    )?;
    Ok((batcher, info))
}

/// Without the `models` feature no sparse encoder loads.
#[cfg(not(feature = "models"))]
fn sparse_batcher(model: &Path, _state: &Shared) -> CliResult<(SparseBatcher, serde_json::Value)> {
    Err(format!(
        "the sparse model {}: a sparse encoder needs the `models` feature of rerank",
        model.display()
    )
    .into())
}

/// The number format each model runs in (`null` for a model-free or remote one).
fn precisions(config: &PipelineConfig) -> serde_json::Value {
    let reranker = config
        .reranker
        .as_ref()
        .filter(|r| r.kind != RerankerKind::Lexical)
        .map(|r| r.precision.unwrap_or_default());
    let embedder = match &config.embedder {
        Some(EmbedderConfig::Bert { precision, .. }) => Some(precision.unwrap_or_default()),
        _ => None,
    };
    serde_json::json!({ "reranker": reranker, "embedder": embedder })
}

/// The model's width, then the Matryoshka widths the registry knows for it (the registry is
/// the `models` feature's; a build without it reports the width alone).
fn embedding_dimensions(config: &PipelineConfig, dim: usize) -> Vec<usize> {
    #[cfg(not(feature = "models"))]
    {
        let _ = config;
        vec![dim]
    }
    #[cfg(feature = "models")]
    {
        let mut dims = vec![dim];
        let model = serde_json::to_value(&config.embedder)
            .ok()
            .and_then(|v| v.get("model").and_then(|m| m.as_str().map(str::to_string)));
        if let Some(model) = model {
            let name = model
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or(&model);
            let known = rerank::models::registry::find(&model)
                .or_else(|| rerank::models::registry::find_by_name(name));
            if let Some(known) = known.filter(|k| k.dim == Some(dim)) {
                dims.extend(known.matryoshka.iter().copied().filter(|&d| d < dim));
            }
        }
        dims
    }
}

fn router(state: Shared) -> Router {
    let limit = state.limits.max_body_bytes;
    Router::new()
        .route("/v2/rerank", post(cohere_rerank))
        .route("/v1/rerank", post(cohere_rerank))
        .route("/rerank", post(tei_rerank))
        .route("/v1/embeddings", post(openai_embeddings))
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1/models", get(chat::list_models))
        .route("/v1/models/{id}", get(chat::get_model))
        .route("/embed", post(tei_embed))
        .route("/embed_sparse", post(tei_embed_sparse))
        .route("/search", post(search))
        .route("/answer", post(answer))
        .route("/health", get(health))
        .route("/metrics", get(metrics_text))
        .route("/info", get(info))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(middleware::from_fn_with_state(state.clone(), bound))
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// Counts every request by route and status, with its latency.
async fn observe(State(state): State<Shared>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |p| p.as_str())
        .to_string();
    let start = Instant::now();
    let method = request.method().clone();
    let in_flight = state.metrics.begin(&route);
    let response = next.run(request).await;
    drop(in_flight);
    let (status, took) = (response.status().as_u16(), start.elapsed());
    state.metrics.request(&route, status, took);
    tracing::info!(
        %method,
        route,
        status,
        latency_ms = took.as_secs_f64() * 1e3,
        "request"
    );
    response
}

/// A body announced over the limit is refused before it is read (413), and a request that
/// takes longer than its deadline, reading its body included (a client that sends it slowly),
/// is answered with 408 and its connection closed.
async fn bound(State(state): State<Shared>, request: Request, next: Next) -> Response {
    let announced = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let limit = state.limits.max_body_bytes;
    if let Some(n) = announced.filter(|&n| n > limit as u64) {
        return ApiError::too_large(format!(
            "a body of {n} bytes; the limit is {limit} (--max-body-bytes)"
        ))
        .into_response();
    }
    let deadline = Duration::from_secs(state.limits.timeout_secs);
    match tokio::time::timeout(deadline, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "the request did not finish within its deadline",
        )
        .into_response(),
    }
}

/// With an API key, every route but `/health` needs `Authorization: Bearer KEY`.
async fn authenticate(State(state): State<Shared>, request: Request, next: Next) -> Response {
    let Some(key) = &state.api_key else {
        return next.run(request).await;
    };
    if request.uri().path() == "/health" {
        return next.run(request).await;
    }
    let sent = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if sent.is_some_and(|s| constant_time_eq(s.as_bytes(), key.as_bytes())) {
        next.run(request).await
    } else {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing or wrong API key (Authorization: Bearer KEY)",
        )
        .into_response()
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn not_found(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no route {} {}", request.method(), request.uri().path()),
    )
}

/// A route called with a method it does not take: 405 with a JSON body like every other
/// error's, naming the method the route takes (axum adds the `Allow` header from the router).
async fn method_not_allowed(request: Request) -> ApiError {
    let path = request.uri().path();
    let allowed = match path {
        "/health" | "/metrics" | "/info" => "GET",
        _ => "POST",
    };
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{} {path}: this route takes {allowed}", request.method()),
    )
}

async fn health(State(state): State<Shared>) -> Result<Json<serde_json::Value>, ApiError> {
    state.ready()?;
    Ok(Json(serde_json::json!({ "status": "ok" })))
}

async fn metrics_text(State(state): State<Shared>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
}

async fn info(State(state): State<Shared>) -> Result<Json<serde_json::Value>, ApiError> {
    Ok(Json(state.ready()?.info.clone()))
}

/// Scores `documents` against `query` through the rerank queue, in input order (`raw`: the
/// scores before the model's activation), with the tokens they took.
async fn rerank_scores(
    state: &AppState,
    query: RerankQuery,
    documents: Vec<String>,
    raw: bool,
) -> Result<Done<f32>, ApiError> {
    let ready = state.ready()?;
    let batcher = ready.rerank.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "this server's config has no reranker (add a `reranker` section)",
        )
    })?;
    if documents.is_empty() {
        return Err(ApiError::unprocessable(
            "documents: the list is empty; send at least one document to rerank",
        ));
    }
    if raw && !ready.raw_scores {
        return Err(ApiError::unprocessable(format!(
            "raw_scores: the reranker ({}) has no scores before an activation to return",
            ready.pipeline.reranker().map_or("none", |r| r.name())
        )));
    }
    state.limits.check(documents.iter().map(String::as_str))?;
    let query = Arc::new(query);
    let items = documents
        .into_iter()
        .map(|document| RerankItem {
            query: query.clone(),
            document,
            raw,
        })
        .collect();
    batcher.submit(items, state.limits.deadline()).await
}

/// Indices best first (NaN last, ties in input order), the first `top_n`.
fn best_first(scores: &[f32], top_n: Option<usize>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| match (scores[a].is_nan(), scores[b].is_nan()) {
        (false, false) => scores[b].total_cmp(&scores[a]),
        (x, y) => x.cmp(&y),
    });
    order.truncate(top_n.unwrap_or(usize::MAX));
    order
}

async fn cohere_rerank(
    State(state): State<Shared>,
    path: MatchedPath,
    body: Result<Json<CohereRerankRequest>, JsonRejection>,
) -> Result<Warned<Json<CohereRerankResponse>>, ApiError> {
    let Json(request) = body?;
    if request.top_n == Some(0) {
        return Err(ApiError::unprocessable("top_n must be at least 1"));
    }
    let texts: Vec<String> = request
        .documents
        .iter()
        .map(|d| d.text().to_string())
        .collect();
    let done = rerank_scores(
        &state,
        RerankQuery::new(request.query),
        texts.clone(),
        false,
    )
    .await?;
    let scores = done.outputs;
    let return_documents = request.return_documents.unwrap_or(false);
    let results = best_first(&scores, request.top_n)
        .into_iter()
        .map(|i| CohereResult {
            index: i,
            relevance_score: scores[i],
            document: return_documents.then(|| CohereText {
                text: texts[i].clone(),
            }),
        })
        .collect();
    let version = if path.as_str().starts_with("/v2") {
        "2"
    } else {
        "1"
    };
    let mut meta = serde_json::json!({
        "api_version": { "version": version },
        "billed_units": { "search_units": 1 },
    });
    if let Some(tokens) = done.tokens {
        meta["tokens"] = serde_json::json!({ "input_tokens": tokens, "output_tokens": 0 });
    }
    let response = CohereRerankResponse {
        id: request_id(),
        results,
        meta,
        usage: done.tokens.map(|tokens| RerankUsage {
            prompt_tokens: tokens,
            total_tokens: tokens,
        }),
    };
    Ok(Warned(Json(response), request.unknown))
}

async fn tei_rerank(
    State(state): State<Shared>,
    body: Result<Json<TeiRerankRequest>, JsonRejection>,
) -> Result<Warned<Json<Vec<TeiRank>>>, ApiError> {
    let Json(request) = body?;
    let scores = rerank_scores(
        &state,
        RerankQuery::new(request.query),
        request.texts.clone(),
        request.raw_scores,
    )
    .await?
    .outputs;
    let ranks = best_first(&scores, None)
        .into_iter()
        .map(|i| TeiRank {
            index: i,
            score: scores[i],
            text: request.return_text.then(|| request.texts[i].clone()),
        })
        .collect();
    Ok(Warned(Json(ranks), request.unknown))
}

/// The texts of an `input` / `inputs` field; token ids are refused.
fn texts(inputs: Inputs) -> Result<Vec<String>, ApiError> {
    match inputs {
        Inputs::One(t) => Ok(vec![t]),
        Inputs::Many(v) => Ok(v),
        Inputs::Other(_) => Err(ApiError::unprocessable(
            "input must be a string or a list of strings (token ids are not accepted)",
        )),
    }
}

/// Embeds `texts` through the embed queue, in input order, with the tokens they took.
async fn embeddings(
    state: &AppState,
    texts: Vec<String>,
    role: Role,
) -> Result<Done<Vec<f32>>, ApiError> {
    let ready = state.ready()?;
    let batcher = ready.embed.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "this server's config has no embedder (add an `embedder` section)",
        )
    })?;
    state.limits.check(texts.iter().map(String::as_str))?;
    if texts.is_empty() {
        return Err(ApiError::unprocessable("input is empty"));
    }
    let items = texts.into_iter().map(|t| (role, t)).collect();
    batcher.submit(items, state.limits.deadline()).await
}

fn request_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("rerank-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

async fn openai_embeddings(
    State(state): State<Shared>,
    body: Result<Json<OpenAiEmbeddingsRequest>, JsonRejection>,
) -> Result<Warned<Json<OpenAiEmbeddingsResponse>>, ApiError> {
    let Json(request) = body?;
    let ready = state.ready()?;
    let base64 = match request.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::unprocessable(format!(
                "encoding_format {other:?}: expected float or base64"
            )))
        }
    };
    let width = match request.dimensions {
        None => None,
        Some(d) if ready.dimensions.contains(&d) => Some(d),
        Some(d) => {
            return Err(ApiError::unprocessable(format!(
                "dimensions {d}: this model gives {:?}",
                ready.dimensions
            )))
        }
    };
    let role = match request.input_type.as_deref() {
        None => ready.roles.embeddings,
        Some("document" | "search_document") => Role::Document,
        Some("query" | "search_query") => Role::Query,
        Some(other) => {
            return Err(ApiError::unprocessable(format!(
                "input_type {other:?}: expected query, document, search_query or search_document"
            )))
        }
    };
    let done = embeddings(&state, texts(request.input)?, role).await?;
    let data = done
        .outputs
        .into_iter()
        .enumerate()
        .map(|(index, mut v)| {
            if let Some(d) = width {
                v = rerank::embed::truncate_normalized(&v, d);
            }
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                serde_json::Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                serde_json::json!(v)
            };
            OpenAiEmbedding {
                object: "embedding",
                index,
                embedding,
            }
        })
        .collect();
    let model = request
        .model
        .or_else(|| ready.pipeline.embedder().and_then(|e| e.id()))
        .unwrap_or_else(|| "rerank".into());
    let response = OpenAiEmbeddingsResponse {
        object: "list",
        data,
        model,
        // 0 when the embedder cannot count tokens (a remote one).
        usage: OpenAiUsage {
            prompt_tokens: done.tokens.unwrap_or(0),
            total_tokens: done.tokens.unwrap_or(0),
        },
    };
    Ok(Warned(Json(response), request.unknown))
}

async fn tei_embed(
    State(state): State<Shared>,
    body: Result<Json<TeiEmbedRequest>, JsonRejection>,
) -> Result<Warned<Json<Vec<Vec<f32>>>>, ApiError> {
    let Json(request) = body?;
    let role = prompt_role(request.prompt_name.as_deref(), state.ready()?.roles.embed)?;
    let mut vectors = embeddings(&state, texts(request.inputs)?, role)
        .await?
        .outputs;
    if request.normalize.unwrap_or(true) {
        for v in &mut vectors {
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            if norm > 0.0 {
                v.iter_mut().for_each(|x| *x /= norm);
            }
        }
    }
    Ok(Warned(Json(vectors), request.unknown))
}

/// The role TEI's `prompt_name` asks for: `query`, or `document` (`passage`); `default` when
/// the request names none.
fn prompt_role(name: Option<&str>, default: Role) -> Result<Role, ApiError> {
    match name {
        None => Ok(default),
        Some("query") => Ok(Role::Query),
        Some("document" | "passage") => Ok(Role::Document),
        Some(other) => Err(ApiError::unprocessable(format!(
            "prompt_name {other:?}: expected query or document"
        ))),
    }
}

async fn tei_embed_sparse(
    State(state): State<Shared>,
    body: Result<Json<TeiEmbedSparseRequest>, JsonRejection>,
) -> Result<Warned<Json<Vec<Vec<SparseValue>>>>, ApiError> {
    let Json(request) = body?;
    let ready = state.ready()?;
    let batcher = ready.sparse.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "this server has no sparse model (set `serve.sparse_model` in the config, or pass \
             --sparse-model)",
        )
    })?;
    let role = prompt_role(request.prompt_name.as_deref(), ready.roles.embed_sparse)?;
    let texts = texts(request.inputs)?;
    state.limits.check(texts.iter().map(String::as_str))?;
    if texts.is_empty() {
        return Err(ApiError::unprocessable("inputs is empty"));
    }
    let items = texts.into_iter().map(|t| (role, t)).collect();
    let done = batcher.submit(items, state.limits.deadline()).await?;
    let vectors = done
        .outputs
        .into_iter()
        .map(|v| {
            v.indices
                .into_iter()
                .zip(v.values)
                .map(|(index, value)| SparseValue { index, value })
                .collect()
        })
        .collect();
    Ok(Warned(Json(vectors), request.unknown))
}

/// Runs `f` with the pipeline on a blocking thread, within the request's deadline.
async fn with_pipeline<T: Send + 'static>(
    state: &AppState,
    f: impl FnOnce(&Pipeline) -> rerank::Result<T> + Send + 'static,
) -> Result<T, ApiError> {
    let pipeline = state.ready()?.pipeline.clone();
    let deadline = Duration::from_secs(state.limits.timeout_secs);
    let task = tokio::task::spawn_blocking(move || f(&pipeline));
    match tokio::time::timeout(deadline, task).await {
        Ok(Ok(result)) => result.map_err(ApiError::from),
        Ok(Err(e)) => Err(ApiError::internal(format!("the pipeline panicked: {e}"))),
        Err(_) => Err(ApiError::timeout(
            "the request did not finish within its deadline",
        )),
    }
}

async fn search(
    State(state): State<Shared>,
    body: Result<Json<SearchBody>, JsonRejection>,
) -> Result<Json<rerank::pipeline::SearchResponse>, ApiError> {
    let Json(body) = body?;
    if body.include_sources.is_some() || body.stream.is_some() {
        return Err(ApiError::unprocessable(
            "include_sources and stream are fields of /answer, not /search",
        ));
    }
    state.limits.check(std::iter::once(body.query.as_str()))?;
    let request = body.request();
    let response = with_pipeline(&state, move |p| p.search_with(&request)).await?;
    if response.cache_hit {
        state.metrics.cache_hit();
    }
    if response.rerank_fallback {
        state.metrics.fallback();
    }
    Ok(Json(response))
}

async fn answer(
    State(state): State<Shared>,
    body: Result<Json<SearchBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body?;
    state.limits.check(std::iter::once(body.query.as_str()))?;
    // The config's `grounding.include_sources` unless the request says otherwise.
    let mut options = state.ready()?.answer_options.clone();
    if let Some(include) = body.include_sources {
        options = options.include_sources(include);
    }
    let stream = body.stream == Some(true);
    let request = body.request();
    if stream {
        let pipeline = state.ready()?.pipeline.clone();
        return Ok(chat::blocking_events(move |send| {
            let answer = pipeline.answer_stream(&request, &options, &mut |piece| {
                let event = Event::default()
                    .event("delta")
                    .data(serde_json::json!({ "text": piece }).to_string());
                match send(event) {
                    true => std::ops::ControlFlow::Continue(()),
                    false => std::ops::ControlFlow::Break(()),
                }
            });
            let event = match answer {
                Ok(answer) => Event::default()
                    .event("answer")
                    .data(serde_json::to_string(&answer).unwrap_or_default()),
                Err(e) => Event::default()
                    .event("error")
                    .data(chat::error_json(e).to_string()),
            };
            send(event);
        })
        .into_response());
    }
    let answer = with_pipeline(&state, move |p| p.answer_with(&request, &options)).await?;
    Ok(Json(answer).into_response())
}
