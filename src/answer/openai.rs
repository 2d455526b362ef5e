//! [`OpenAiCompatible`]: chat completions over HTTP (OpenAI, vLLM, llama.cpp server, Ollama,
//! ...), with timeouts and retries.

use std::time::Duration;

use serde_json::{json, Value};

use super::{Generation, GenerationRequest, Generator};
use crate::http::{self, Attempt, ClientSettings, RetryPolicy};
use crate::{Error, Result};

/// The environment variable read for the API key by default.
pub const DEFAULT_API_KEY_ENV: &str = "OPENAI_API_KEY";

pub use crate::http::Sleeper;

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
    agent: ureq::Agent,
    url: String,
    model: String,
    api_key: Option<String>,
    api_key_source: String,
    retry: RetryPolicy,
}

impl std::fmt::Debug for OpenAiCompatible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiCompatible")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

/// Configures an [`OpenAiCompatible`] generator; [`OpenAiCompatibleBuilder::build`] checks it.
#[derive(Clone)]
pub struct OpenAiCompatibleBuilder {
    base_url: String,
    model: Option<String>,
    api_key: Option<String>,
    api_key_env: String,
    http: ClientSettings,
}

impl std::fmt::Debug for OpenAiCompatibleBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiCompatibleBuilder")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("api_key_env", &self.api_key_env)
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

impl Default for OpenAiCompatibleBuilder {
    fn default() -> Self {
        OpenAiCompatibleBuilder {
            base_url: "https://api.openai.com/v1".into(),
            model: None,
            api_key: None,
            api_key_env: DEFAULT_API_KEY_ENV.into(),
            http: ClientSettings {
                timeout: Duration::from_secs(120),
                connect_timeout: Duration::from_secs(10),
                max_retries: 3,
                initial_backoff: Duration::from_millis(500),
                max_backoff: Duration::from_secs(8),
                sleeper: None,
            },
        }
    }
}

impl OpenAiCompatibleBuilder {
    /// The API root, e.g. `http://127.0.0.1:8000/v1` (`/chat/completions` is appended).
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into();
        self
    }

    /// The model name sent with each request (required).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// The API key (sent as `Authorization: Bearer ...`); overrides the environment variable.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// The environment variable to read the key from when none is set (default
    /// `OPENAI_API_KEY`). With neither, no `Authorization` header is sent (local servers).
    pub fn api_key_env(mut self, name: impl Into<String>) -> Self {
        self.api_key_env = name.into();
        self
    }

    /// The time limit for one whole attempt (default 120 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.http.timeout = timeout;
        self
    }

    /// The time limit for connecting (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.http.connect_timeout = timeout;
        self
    }

    /// Retries after the first attempt (default 3).
    pub fn max_retries(mut self, n: u32) -> Self {
        self.http.max_retries = n;
        self
    }

    /// The first backoff delay (default 500 ms) and the cap (default 8 s).
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.http.initial_backoff = initial;
        self.http.max_backoff = max;
        self
    }

    /// Replaces `std::thread::sleep` between retries (for tests, or to log the delays).
    pub fn sleeper(mut self, sleeper: Sleeper) -> Self {
        self.http.sleeper = Some(sleeper);
        self
    }

    /// Checks the settings and builds the generator.
    pub fn build(self) -> Result<OpenAiCompatible> {
        let model = self.model.filter(|m| !m.trim().is_empty()).ok_or_else(|| {
            Error::Config(
                "the OpenAI-compatible generator needs a model name: call .model(...)".into(),
            )
        })?;
        let base = self.base_url.trim().trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Error::Config(format!(
                "base_url must start with http:// or https://, got {:?}",
                self.base_url
            )));
        }
        let (agent, retry) = self.http.client("")?;
        let (api_key, api_key_source) = match self.api_key {
            Some(k) => (Some(k), "the configured API key".to_string()),
            None => (
                std::env::var(&self.api_key_env)
                    .ok()
                    .filter(|k| !k.trim().is_empty()),
                format!("the {} environment variable", self.api_key_env),
            ),
        };
        Ok(OpenAiCompatible {
            agent,
            url: format!("{base}/chat/completions"),
            model,
            api_key,
            api_key_source,
            retry,
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
        &self.url
    }

    /// The delay before retry number `retry` (0-based): `initial * 2^retry`, capped.
    pub fn backoff_delay(&self, retry: u32) -> Duration {
        self.retry.delay(retry)
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

    fn attempt(&self, body: &Value) -> Attempt<Generation> {
        let bearer = self.api_key.as_ref().map(|k| format!("Bearer {k}"));
        let headers: Vec<(&str, &str)> = bearer
            .as_deref()
            .map(|b| ("Authorization", b))
            .into_iter()
            .collect();
        let reply = match http::post_json(&self.agent, &self.url, &headers, body) {
            Ok(r) => r,
            Err(t) if t.retryable => {
                return Attempt::Retry {
                    reason: t.message,
                    status: None,
                    retry_after: None,
                }
            }
            Err(t) => return Attempt::Fail(self.http_error(None, t.message, Some(t.source))),
        };
        let status = reply.status;
        let detail = || {
            format!(
                "{} ({})",
                http::status_line(status),
                http::server_message(&reply.text)
            )
        };
        match status {
            200..=299 => match parse_completion(&reply.text) {
                Ok(g) => Attempt::Done(g),
                Err(m) => Attempt::Fail(self.http_error(
                    Some(status),
                    format!("invalid chat-completions response: {m}"),
                    None,
                )),
            },
            401 | 403 => Attempt::Fail(self.http_error(
                Some(status),
                format!("{}; check {} (not retried)", detail(), self.api_key_source),
                None,
            )),
            _ if reply.is_retryable() => Attempt::Retry {
                reason: detail(),
                status: Some(status),
                retry_after: reply.retry_after,
            },
            _ => Attempt::Fail(self.http_error(
                Some(status),
                format!("{} (not retried)", detail()),
                None,
            )),
        }
    }

    /// An [`Error::Http`] for a POST to this generator's URL.
    fn http_error(
        &self,
        status: Option<u16>,
        message: String,
        source: Option<crate::BoxError>,
    ) -> Error {
        Error::Http {
            url: self.url.clone(),
            status,
            message,
            source,
        }
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
    })
}

impl Generator for OpenAiCompatible {
    fn generate(&self, request: &GenerationRequest) -> Result<Generation> {
        let body = self.body(request);
        self.retry.run(
            || self.attempt(&body),
            |status, message| self.http_error(status, message, None),
        )
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
