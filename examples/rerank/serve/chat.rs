//! `POST /v1/chat/completions`: OpenAI's chat completions, answered by the config's generator
//! (a `local_chat` model, or an `openai` one passed through), whole or streamed as server-sent
//! events (`stream: true`, with `stream_options.include_usage`).
//!
//! A request's `messages` (roles `system` / `developer`, `user`, `assistant`; content a string or
//! text parts) become the generator's conversation; `max_completion_tokens` (or `max_tokens`,
//! default 512), `temperature` and `top_p` (default 1, as OpenAI's), `seed` and `stop` (a string
//! or up to four) its settings. What the server cannot do is refused with a 422 naming it: more
//! than one choice (`n`), tools and tool messages, log probabilities, a JSON response format,
//! images. `model` is echoed back; the server has one generator. `usage` counts the model's
//! own tokens (the rendered prompt and the reply).

use std::convert::Infallible;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use rerank::answer::{Generation, GenerationRequest, Message, Role, TokenUsage};
use rerank::Generator;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::api::{Unknown, Warned};
use super::error::ApiError;
use super::{with_pipeline, Shared};

/// New tokens when the request names no limit.
const DEFAULT_MAX_TOKENS: usize = 512;
/// OpenAI's limit on stop sequences.
const MAX_STOPS: usize = 4;

/// `POST /v1/chat/completions`.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    messages: Vec<ChatMessage>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    max_completion_tokens: Option<usize>,
    #[serde(default)]
    max_tokens: Option<usize>,
    #[serde(default)]
    temperature: Option<f32>,
    #[serde(default)]
    top_p: Option<f32>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    stop: Option<Stop>,
    #[serde(default)]
    n: Option<usize>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    tools: Option<Vec<IgnoredAny>>,
    #[serde(default)]
    logprobs: Option<bool>,
    #[serde(default)]
    response_format: Option<Value>,
    /// Accepted and ignored, as their neutral values are what the generator does.
    #[serde(default, rename = "user")]
    _user: Option<IgnoredAny>,
    #[serde(default, rename = "tool_choice")]
    _tool_choice: Option<IgnoredAny>,
    #[serde(default, rename = "frequency_penalty")]
    _frequency_penalty: Option<IgnoredAny>,
    #[serde(default, rename = "presence_penalty")]
    _presence_penalty: Option<IgnoredAny>,
    #[serde(flatten)]
    unknown: Unknown,
}

#[derive(Debug, Deserialize)]
struct ChatMessage {
    role: String,
    #[serde(default)]
    content: Option<Content>,
    #[serde(default, rename = "name")]
    _name: Option<IgnoredAny>,
}

/// A message's content: a string, or parts of which only text is read.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "content as a string, or a list of {\"type\": \"text\", \"text\": ...} parts"
)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "stop as a string or a list of strings")]
enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Default, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Debug, Clone, Copy, Serialize)]
struct Usage {
    prompt_tokens: usize,
    completion_tokens: usize,
    total_tokens: usize,
}

impl From<TokenUsage> for Usage {
    fn from(u: TokenUsage) -> Self {
        Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.prompt_tokens + u.completion_tokens,
        }
    }
}

impl ChatRequest {
    /// The generator's request, or a 422 naming what the server does not do.
    fn generation(&self) -> Result<GenerationRequest, ApiError> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(ApiError::unprocessable(
                "n: the server writes one choice per request",
            ));
        }
        if self.tools.as_ref().is_some_and(|t| !t.is_empty()) {
            return Err(ApiError::unprocessable("tools are not supported"));
        }
        if self.logprobs == Some(true) {
            return Err(ApiError::unprocessable("logprobs are not supported"));
        }
        if let Some(kind) = self
            .response_format
            .as_ref()
            .and_then(|f| f.get("type"))
            .and_then(Value::as_str)
            .filter(|&k| k != "text")
        {
            return Err(ApiError::unprocessable(format!(
                "response_format {kind:?} is not supported (only \"text\")"
            )));
        }
        if self.messages.is_empty() {
            return Err(ApiError::unprocessable("messages is empty"));
        }
        let messages = self
            .messages
            .iter()
            .enumerate()
            .map(|(i, m)| m.message(i))
            .collect::<Result<Vec<_>, _>>()?;
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        if stop.len() > MAX_STOPS {
            return Err(ApiError::unprocessable(format!(
                "stop has {} sequences; at most {MAX_STOPS}",
                stop.len()
            )));
        }
        let max_new_tokens = self
            .max_completion_tokens
            .or(self.max_tokens)
            .unwrap_or(DEFAULT_MAX_TOKENS);
        if max_new_tokens == 0 {
            return Err(ApiError::unprocessable("max_tokens must be at least 1"));
        }
        Ok(GenerationRequest {
            messages,
            max_new_tokens,
            temperature: self.temperature.unwrap_or(1.0),
            top_p: self.top_p.unwrap_or(1.0),
            seed: self.seed.unwrap_or(0),
            stop: stop.into_iter().filter(|s| !s.is_empty()).collect(),
        })
    }
}

impl ChatMessage {
    fn message(&self, index: usize) -> Result<Message, ApiError> {
        let role = match self.role.as_str() {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => {
                return Err(ApiError::unprocessable(format!(
                    "messages[{index}].role {other:?} is not supported (system, developer, \
                     user, assistant)"
                )))
            }
        };
        let content = match &self.content {
            None => String::new(),
            Some(Content::Text(text)) => text.clone(),
            Some(Content::Parts(parts)) => {
                let mut text = String::new();
                for part in parts {
                    match (part.kind.as_str(), &part.text) {
                        ("text", Some(t)) => text.push_str(t),
                        (kind, _) => {
                            return Err(ApiError::unprocessable(format!(
                                "messages[{index}]: a {kind:?} content part is not supported \
                                 (text only)"
                            )))
                        }
                    }
                }
                text
            }
        };
        Ok(Message::new(role, content))
    }
}

/// A completion's id, unique within the process.
fn completion_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("chatcmpl-{:x}{n:x}", std::process::id())
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The config's generator, when it writes (the extractive one only quotes a prompt's sources).
fn generator(state: &Shared) -> Result<Arc<dyn Generator>, ApiError> {
    let generator = state
        .ready()?
        .pipeline
        .generator()
        .cloned()
        .ok_or_else(|| {
            ApiError::not_implemented(
                "the config has no generator (a generator section with type local_chat or openai)",
            )
        })?;
    if !generator.writes_freely() {
        return Err(ApiError::not_implemented(format!(
            "the config's generator ({}) quotes sources and does not chat; configure \
             local_chat or openai",
            generator.name()
        )));
    }
    Ok(generator)
}

pub async fn chat_completions(
    State(state): State<Shared>,
    body: Result<Json<ChatRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body?;
    let request = body.generation()?;
    state
        .limits
        .check(request.messages.iter().map(|m| m.content.as_str()))?;
    let generator = generator(&state)?;
    let model = body
        .model
        .clone()
        .unwrap_or_else(|| generator.name().to_string());
    let (id, created) = (completion_id(), unix_seconds());
    if body.stream == Some(true) {
        let include_usage = body
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage);
        let chunks = Chunks { id, created, model };
        return Ok(Warned(
            stream(generator, request, chunks, include_usage),
            body.unknown,
        )
        .into_response());
    }
    let generation = with_pipeline(&state, move |_| generator.generate(&request)).await?;
    let response = json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": generation.text},
            "logprobs": null,
            "finish_reason": finish_reason(&generation),
        }],
        "usage": generation.usage.map(Usage::from),
    });
    Ok(Warned(Json(response), body.unknown).into_response())
}

fn finish_reason(generation: &Generation) -> &str {
    generation.finish_reason.as_deref().unwrap_or("stop")
}

/// What every chunk of one streamed completion repeats.
struct Chunks {
    id: String,
    created: u64,
    model: String,
}

impl Chunks {
    fn event(&self, choices: Value, usage: Option<Usage>) -> Event {
        let mut chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        });
        if let Some(usage) = usage {
            chunk["usage"] = json!(usage);
        }
        Event::default().data(chunk.to_string())
    }

    fn delta(&self, delta: Value, finish_reason: Option<&str>) -> Event {
        self.event(
            json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}]),
            None,
        )
    }
}

/// The completion as server-sent events: the assistant's role, its text piece by piece as the
/// generator writes it, the finish reason, the usage (when asked for), then `[DONE]`. A client
/// that goes away stops the generation at its next token. An error after the first event
/// becomes an event with an `error` object (the status is already sent).
fn stream(
    generator: Arc<dyn Generator>,
    request: GenerationRequest,
    chunks: Chunks,
    include_usage: bool,
) -> impl IntoResponse {
    blocking_events(move |send| {
        if !send(chunks.delta(json!({"role": "assistant", "content": ""}), None)) {
            return;
        }
        let written = generator.generate_stream(&request, &mut |piece| match send(
            chunks.delta(json!({ "content": piece }), None),
        ) {
            true => ControlFlow::Continue(()),
            false => ControlFlow::Break(()),
        });
        match written {
            Ok(generation) => {
                send(chunks.delta(json!({}), Some(finish_reason(&generation))));
                if include_usage {
                    send(chunks.event(json!([]), generation.usage.map(Usage::from)));
                }
            }
            Err(e) => {
                send(Event::default().data(error_json(e).to_string()));
            }
        }
        send(Event::default().data("[DONE]"));
    })
}

/// An error after the stream started, as the `error` object of the JSON error bodies.
pub(super) fn error_json(e: rerank::Error) -> Value {
    let error = ApiError::from(e);
    json!({"error": {"message": error.message, "type": "server_error"}})
}

/// Server-sent events written by `produce` on a blocking thread: its `send` queues one event
/// and says whether the client is still there.
pub(super) fn blocking_events(
    produce: impl FnOnce(&(dyn Fn(Event) -> bool + Sync)) + Send + 'static,
) -> impl IntoResponse {
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Event, Infallible>>(64);
    tokio::task::spawn_blocking(move || {
        produce(&|event: Event| sender.blocking_send(Ok(event)).is_ok());
    });
    Sse::new(tokio_stream::wrappers::ReceiverStream::new(receiver))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// The models a config serves, as OpenAI's `GET /v1/models` lists them: the generator, the
/// embedder and the reranker, each named by its model directory's name (or, for a generator
/// behind another OpenAI-compatible server, the model it asks for). The server ignores a
/// request's `model`, so any of these ids works for any route.
pub(super) fn model_list(
    config: &rerank::pipeline::PipelineConfig,
    pipeline: &rerank::Pipeline,
) -> Vec<Value> {
    use rerank::pipeline::{EmbedderConfig, GeneratorConfig};
    let dir_name = |p: &std::path::Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_else(|| p.display().to_string())
    };
    let mut ids: Vec<(String, &str)> = Vec::new();
    match &config.generator {
        Some(GeneratorConfig::LocalChat { model, .. }) => ids.push((dir_name(model), "generator")),
        Some(GeneratorConfig::Openai { model, .. }) => ids.push((model.clone(), "generator")),
        _ => {}
    }
    if let Some(EmbedderConfig::Bert { model, .. }) = &config.embedder {
        ids.push((dir_name(model), "embedder"));
    } else if let Some(e) = pipeline.embedder() {
        ids.push((e.id().unwrap_or_else(|| "embedder".into()), "embedder"));
    }
    if let Some(model) = config.reranker.as_ref().and_then(|r| r.model.as_ref()) {
        ids.push((dir_name(model), "reranker"));
    } else if let Some(r) = pipeline.reranker() {
        ids.push((r.name().to_string(), "reranker"));
    }
    let mut seen = std::collections::HashSet::new();
    ids.into_iter()
        .filter(|(id, _)| seen.insert(id.clone()))
        .map(|(id, role)| {
            json!({"id": id, "object": "model", "created": 0, "owned_by": "rerank", "role": role})
        })
        .collect()
}

/// `GET /v1/models`.
pub async fn list_models(State(state): State<Shared>) -> Result<Json<Value>, ApiError> {
    let models = &state.ready()?.models;
    Ok(Json(json!({"object": "list", "data": models})))
}

/// `GET /v1/models/{id}`: the model, or a 404.
pub async fn get_model(
    State(state): State<Shared>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<Json<Value>, ApiError> {
    state
        .ready()?
        .models
        .iter()
        .find(|m| m["id"] == id.as_str())
        .cloned()
        .map(Json)
        .ok_or_else(|| {
            ApiError::new(
                axum::http::StatusCode::NOT_FOUND,
                format!("no model {id:?} (GET /v1/models lists them)"),
            )
        })
}
