//! [`OpenAiCompatible`]: chat completions over HTTP (OpenAI, vLLM, llama.cpp server, Ollama,
//! ...), with timeouts and retries.

use std::io::BufRead;
use std::ops::ControlFlow;
use std::time::Duration;

use serde_json::{json, Value};

use super::{Generation, GenerationRequest, Generator, TokenUsage};
use crate::http::{self, ApiClient, ApiSettings};
use crate::{Error, Result};

/// A generator that calls an OpenAI-compatible `POST {base_url}/chat/completions` endpoint.
///
/// Failures are retried with exponential backoff (`initial_backoff * 2^n`, capped at
/// `max_backoff`; a `Retry-After` header in seconds is honoured up to the cap) when the server
/// answers 408, 429 or 5xx, or when the connection fails or times out. 401 and 403 (bad or
/// missing key) and other 4xx answers fail at once. Errors name the URL, the status or the
/// transport failure, the server's message, and the number of attempts.
///
/// ```no_run
/// use rerank::answer::OpenAiCompatible;
/// let generator = OpenAiCompatible::builder()
///     .base_url("http://127.0.0.1:8000/v1")
///     .model("Qwen/Qwen3-8B")
///     .max_retries(2)
///     .build()?;
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct OpenAiCompatible {
    client: ApiClient,
    model: String,
}

impl std::fmt::Debug for OpenAiCompatible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiCompatible")
            .field("client", &self.client)
            .field("model", &self.model)
            .finish()
    }
}

/// Configures an [`OpenAiCompatible`] generator; [`OpenAiCompatibleBuilder::build`] checks it.
#[derive(Clone, Debug)]
pub struct OpenAiCompatibleBuilder {
    api: ApiSettings,
    model: Option<String>,
}

impl Default for OpenAiCompatibleBuilder {
    fn default() -> Self {
        OpenAiCompatibleBuilder {
            api: ApiSettings::new("https://api.openai.com/v1", Duration::from_secs(120)),
            model: None,
        }
    }
}

impl OpenAiCompatibleBuilder {
    http::api_builder_methods!("chat/completions", "120 s");

    /// The model name sent with each request (required).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Checks the settings and builds the generator.
    pub fn build(self) -> Result<OpenAiCompatible> {
        let model = self.model.filter(|m| !m.trim().is_empty()).ok_or_else(|| {
            Error::Config(
                "the OpenAI-compatible generator needs a model name: call .model(...)".into(),
            )
        })?;
        Ok(OpenAiCompatible {
            client: self.api.connect("chat/completions")?,
            model,
        })
    }
}

impl OpenAiCompatible {
    /// A builder with the defaults (see its methods).
    pub fn builder() -> OpenAiCompatibleBuilder {
        OpenAiCompatibleBuilder::default()
    }

    /// The endpoint URL.
    pub fn url(&self) -> &str {
        &self.client.url
    }

    /// The delay before retry number `retry` (0-based): `initial * 2^retry`, capped.
    pub fn backoff_delay(&self, retry: u32) -> Duration {
        self.client.retry.delay(retry)
    }

    /// The JSON body for `request`.
    pub fn body(&self, request: &GenerationRequest) -> Value {
        let mut body = json!({
            "model": self.model,
            "messages": request.messages,
            "max_tokens": request.max_new_tokens,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "seed": request.seed,
            "stream": false,
        });
        if !request.stop.is_empty() {
            body["stop"] = json!(request.stop);
        }
        body
    }
}

fn parse_completion(text: &str) -> std::result::Result<Generation, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let choice = v
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or("no choices[0]")?;
    let content = choice
        .get("message")
        .and_then(|m| m.get("content"))
        .ok_or("no choices[0].message.content")?;
    let text = match content {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        _ => return Err("choices[0].message.content is not a string".into()),
    };
    Ok(Generation {
        text,
        finish_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_string),
        usage: usage(&v),
    })
}

/// The `usage` of a completion (or of a stream's last chunk), when it has both counts.
fn usage(v: &Value) -> Option<TokenUsage> {
    let count = |key: &str| {
        v.get("usage")
            .and_then(|u| u.get(key))
            .and_then(Value::as_u64)
            .map(|n| n as usize)
    };
    Some(TokenUsage {
        prompt_tokens: count("prompt_tokens")?,
        completion_tokens: count("completion_tokens")?,
    })
}

/// A streamed completion (server-sent events, `data: {chunk}` lines until `data: [DONE]`):
/// each chunk's `choices[0].delta.content` goes to `on_text` as it arrives; the finish reason
/// and the usage (the last chunk's, with `stream_options.include_usage`) are kept. A chunk
/// holding an `error` (a server failing after the stream began) ends it with that error;
/// `ControlFlow::Break` from `on_text` stops reading (the connection is dropped, which stops a
/// server that watches for it).
fn read_stream(
    reader: &mut dyn BufRead,
    on_text: &mut (dyn FnMut(&str) -> ControlFlow<()> + Send),
) -> std::result::Result<Generation, String> {
    let mut generation = Generation::default();
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader
            .read_line(&mut line)
            .map_err(|e| format!("reading the stream: {e}"))?;
        if n == 0 {
            break;
        }
        let Some(data) = line.trim_end().strip_prefix("data:") else {
            continue;
        };
        let data = data.trim_start();
        if data == "[DONE]" {
            break;
        }
        let chunk: Value =
            serde_json::from_str(data).map_err(|e| format!("a stream chunk is not JSON ({e})"))?;
        if let Some(error) = chunk.get("error") {
            return Err(format!(
                "the server failed during the stream: {}",
                error.get("message").and_then(Value::as_str).unwrap_or("")
            ));
        }
        if let Some(u) = usage(&chunk) {
            generation.usage = Some(u);
        }
        let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) else {
            continue;
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            generation.finish_reason = Some(reason.to_string());
        }
        match choice.pointer("/delta/content").and_then(Value::as_str) {
            Some(piece) if !piece.is_empty() => {
                generation.text.push_str(piece);
                if on_text(piece).is_break() {
                    break;
                }
            }
            _ => {}
        }
    }
    Ok(generation)
}

impl Generator for OpenAiCompatible {
    fn generate(&self, request: &GenerationRequest) -> Result<Generation> {
        self.client.call(&self.body(request), |text| {
            parse_completion(text).map_err(|m| format!("invalid chat-completions response: {m}"))
        })
    }

    /// Asks the server to stream (`stream: true`, `stream_options.include_usage`) and passes
    /// each piece on as it arrives. Failures before the first byte of the reply are retried as
    /// [`generate`](Generator::generate)'s are; the whole exchange has the same timeout.
    fn generate_stream(
        &self,
        request: &GenerationRequest,
        on_text: &mut (dyn FnMut(&str) -> ControlFlow<()> + Send),
    ) -> Result<Generation> {
        let mut body = self.body(request);
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        self.client.call_streamed(&body, |reader| {
            read_stream(reader, on_text)
                .map_err(|m| format!("invalid chat-completions stream: {m}"))
        })
    }

    fn name(&self) -> &str {
        "openai-compatible"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let g = OpenAiCompatible::builder()
            .model("m")
            .backoff(Duration::from_millis(100), Duration::from_millis(700))
            .build()
            .unwrap();
        let d: Vec<u128> = (0..6).map(|i| g.backoff_delay(i).as_millis()).collect();
        assert_eq!(d, [100, 200, 400, 700, 700, 700]);
        assert_eq!(g.backoff_delay(200), Duration::from_millis(700));
    }

    #[test]
    fn build_checks_settings() {
        assert!(OpenAiCompatible::builder().build().is_err());
        assert!(OpenAiCompatible::builder().model(" ").build().is_err());
        assert!(OpenAiCompatible::builder()
            .model("m")
            .base_url("localhost:1")
            .build()
            .is_err());
        assert!(OpenAiCompatible::builder()
            .model("m")
            .backoff(Duration::from_secs(2), Duration::from_secs(1))
            .build()
            .is_err());
        let g = OpenAiCompatible::builder()
            .model("m")
            .base_url("http://h:1/v1/")
            .build()
            .unwrap();
        assert_eq!(g.url(), "http://h:1/v1/chat/completions");
    }

    #[test]
    fn parses_completions() {
        let g = parse_completion(
            r#"{"choices":[{"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}]}"#,
        )
        .unwrap();
        assert_eq!(g.text, "Hi");
        assert_eq!(g.finish_reason.as_deref(), Some("stop"));
        assert!(parse_completion(r#"{"choices":[]}"#).is_err());
        assert!(parse_completion("<html>").is_err());
    }
}
