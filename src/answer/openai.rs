//! [`OpenAiCompatible`]: chat completions over HTTP (OpenAI, vLLM, llama.cpp server, Ollama,
//! ...), with timeouts and retries.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::{Generation, GenerationRequest, Generator};
use crate::{Error, Result};

/// The environment variable read for the API key by default.
pub const DEFAULT_API_KEY_ENV: &str = "OPENAI_API_KEY";

/// Sleeps between retries; replaceable so tests need not wait.
pub type Sleeper = Arc<dyn Fn(Duration) + Send + Sync>;

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
    max_retries: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
    sleeper: Sleeper,
}

impl std::fmt::Debug for OpenAiCompatible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiCompatible")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("max_retries", &self.max_retries)
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
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
    timeout: Duration,
    connect_timeout: Duration,
    max_retries: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
    sleeper: Option<Sleeper>,
}

impl std::fmt::Debug for OpenAiCompatibleBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiCompatibleBuilder")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("api_key_env", &self.api_key_env)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
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
            timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(10),
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            sleeper: None,
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
        self.timeout = timeout;
        self
    }

    /// The time limit for connecting (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Retries after the first attempt (default 3).
    pub fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }

    /// The first backoff delay (default 500 ms) and the cap (default 8 s).
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max;
        self
    }

    /// Replaces `std::thread::sleep` between retries (for tests, or to log the delays).
    pub fn sleeper(mut self, sleeper: Sleeper) -> Self {
        self.sleeper = Some(sleeper);
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
        if self.timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(Error::Config("timeouts must be above zero".into()));
        }
        if self.initial_backoff > self.max_backoff {
            return Err(Error::Config(format!(
                "the initial backoff ({:?}) is longer than the maximum ({:?})",
                self.initial_backoff, self.max_backoff
            )));
        }
        let (api_key, api_key_source) = match self.api_key {
            Some(k) => (Some(k), "the configured API key".to_string()),
            None => (
                std::env::var(&self.api_key_env)
                    .ok()
                    .filter(|k| !k.trim().is_empty()),
                format!("the {} environment variable", self.api_key_env),
            ),
        };
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(self.timeout))
            .timeout_connect(Some(self.connect_timeout))
            .build();
        Ok(OpenAiCompatible {
            agent: ureq::Agent::new_with_config(config),
            url: format!("{base}/chat/completions"),
            model,
            api_key,
            api_key_source,
            max_retries: self.max_retries,
            initial_backoff: self.initial_backoff,
            max_backoff: self.max_backoff,
            sleeper: self.sleeper.unwrap_or_else(|| Arc::new(std::thread::sleep)),
        })
    }
}

/// What one attempt gave.
enum Attempt {
    Done(Generation),
    /// Worth another try: why, the response status (when one came back), and the server's
    /// `Retry-After`, when given.
    Retry(String, Option<u16>, Option<Duration>),
    Fail(Error),
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
        let factor = 2u32.checked_pow(retry).unwrap_or(u32::MAX);
        self.initial_backoff
            .checked_mul(factor)
            .unwrap_or(self.max_backoff)
            .min(self.max_backoff)
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

    fn attempt(&self, body: &Value) -> Attempt {
        let mut call = self
            .agent
            .post(&self.url)
            .header("Content-Type", "application/json");
        if let Some(key) = &self.api_key {
            call = call.header("Authorization", format!("Bearer {key}"));
        }
        let mut response = match call.send_json(body) {
            Ok(r) => r,
            Err(e) => return self.transport_failure(e),
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let text = match response.body_mut().read_to_string() {
            Ok(t) => t,
            Err(e) => {
                return match self.transport_failure(e) {
                    Attempt::Retry(m, _, _) => {
                        Attempt::Retry(format!("reading the body: {m}"), Some(status), None)
                    }
                    other => other,
                }
            }
        };
        match status {
            200..=299 => match parse_completion(&text) {
                Ok(g) => Attempt::Done(g),
                Err(m) => Attempt::Fail(self.http_error(
                    Some(status),
                    format!("invalid chat-completions response: {m}"),
                    None,
                )),
            },
            401 | 403 => Attempt::Fail(self.http_error(
                Some(status),
                format!(
                    "{} ({}); check {} (not retried)",
                    status_line(status),
                    server_message(&text),
                    self.api_key_source
                ),
                None,
            )),
            408 | 429 | 500..=599 => Attempt::Retry(
                format!("{} ({})", status_line(status), server_message(&text)),
                Some(status),
                retry_after,
            ),
            _ => Attempt::Fail(self.http_error(
                Some(status),
                format!(
                    "{} ({}) (not retried)",
                    status_line(status),
                    server_message(&text)
                ),
                None,
            )),
        }
    }

    fn transport_failure(&self, e: ureq::Error) -> Attempt {
        match e {
            ureq::Error::Io(_)
            | ureq::Error::Timeout(_)
            | ureq::Error::ConnectionFailed
            | ureq::Error::Protocol(_)
            | ureq::Error::BodyStalled => Attempt::Retry(format!("network error: {e}"), None, None),
            other => Attempt::Fail(self.http_error(
                None,
                format!("request failed: {other}"),
                Some(other.into()),
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

fn status_line(status: u16) -> String {
    let reason = match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    };
    if reason.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status} {reason}")
    }
}

/// The server's error message: `error.message` from a JSON body, else the body's start.
fn server_message(body: &str) -> String {
    let from_json = serde_json::from_str::<Value>(body).ok().and_then(|v| {
        let e = v.get("error")?;
        e.get("message")
            .and_then(Value::as_str)
            .or_else(|| e.as_str())
            .map(str::to_string)
    });
    let message = from_json.unwrap_or_else(|| body.trim().to_string());
    if message.is_empty() {
        return "empty body".into();
    }
    let mut short: String = message.chars().take(300).collect();
    if short.len() < message.len() {
        short.push_str("...");
    }
    short
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
        let mut retry = 0u32;
        loop {
            match self.attempt(&body) {
                Attempt::Done(g) => return Ok(g),
                Attempt::Fail(e) => return Err(e),
                Attempt::Retry(reason, status, retry_after) => {
                    if retry >= self.max_retries {
                        return Err(self.http_error(
                            status,
                            format!(
                                "{reason}; gave up after {} attempt{}",
                                retry + 1,
                                if retry == 0 { "" } else { "s" }
                            ),
                            None,
                        ));
                    }
                    let delay = retry_after
                        .map_or_else(|| self.backoff_delay(retry), |d| d.min(self.max_backoff));
                    (self.sleeper)(delay);
                    retry += 1;
                }
            }
        }
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
    fn parses_completions_and_server_messages() {
        let g = parse_completion(
            r#"{"choices":[{"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}]}"#,
        )
        .unwrap();
        assert_eq!(g.text, "Hi");
        assert_eq!(g.finish_reason.as_deref(), Some("stop"));
        assert!(parse_completion(r#"{"choices":[]}"#).is_err());
        assert!(parse_completion("<html>").is_err());
        assert_eq!(
            server_message(r#"{"error":{"message":"bad key"}}"#),
            "bad key"
        );
        assert_eq!(server_message(""), "empty body");
        assert_eq!(server_message("oops"), "oops");
    }
}
