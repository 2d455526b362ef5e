//! The crate's HTTP client pieces, shared by the components that call a server (the
//! OpenAI-compatible generator, the Milvus retriever): one JSON POST with timeouts, and one
//! retry loop with capped exponential backoff.
//!
//! What is retried is the same everywhere: a connection that fails or times out, 408, 429 and
//! 5xx answers. Any other 4xx fails at once: asking again would get the same answer.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::{BoxError, Error, Result};

/// Sleeps between retries; replaceable so tests need not wait.
pub type Sleeper = Arc<dyn Fn(Duration) + Send + Sync>;

/// The default sleeper: [`std::thread::sleep`].
fn thread_sleeper() -> Sleeper {
    Arc::new(std::thread::sleep)
}

/// A `ureq` agent with a whole-call timeout and a connect timeout; non-2xx statuses come back
/// as responses (not errors) so callers can read the server's message.
fn agent(timeout: Duration, connect_timeout: Duration) -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .timeout_connect(Some(connect_timeout))
        .build();
    ureq::Agent::new_with_config(config)
}

/// The settings every HTTP component's builder holds: timeouts, retries, backoff.
#[derive(Clone)]
pub(crate) struct ClientSettings {
    /// Limit on one whole call.
    pub timeout: Duration,
    /// Limit on connecting.
    pub connect_timeout: Duration,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The first backoff delay.
    pub initial_backoff: Duration,
    /// The longest backoff delay.
    pub max_backoff: Duration,
    /// How to wait between attempts (default: [`std::thread::sleep`]).
    pub sleeper: Option<Sleeper>,
}

impl ClientSettings {
    /// Checks the settings (non-zero timeouts; the first delay not above the cap; errors start
    /// with `who`) and makes the agent and the retry policy.
    pub fn client(self, who: &str) -> Result<(ureq::Agent, RetryPolicy)> {
        if self.timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(Error::Config(format!("{who}timeouts must be above zero")));
        }
        let retry = RetryPolicy {
            max_retries: self.max_retries,
            initial_backoff: self.initial_backoff,
            max_backoff: self.max_backoff,
            sleeper: self.sleeper.unwrap_or_else(thread_sleeper),
        };
        retry.validate()?;
        Ok((agent(self.timeout, self.connect_timeout), retry))
    }
}

impl std::fmt::Debug for ClientSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientSettings")
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_retries", &self.max_retries)
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
            .finish_non_exhaustive()
    }
}

/// When to try again and how long to wait first.
#[derive(Clone)]
pub(crate) struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The first delay.
    pub initial_backoff: Duration,
    /// The longest delay.
    pub max_backoff: Duration,
    /// How to wait.
    pub sleeper: Sleeper,
}

impl RetryPolicy {
    /// Checks the delays: the first may not be longer than the cap.
    pub fn validate(&self) -> Result<()> {
        if self.initial_backoff > self.max_backoff {
            return Err(Error::Config(format!(
                "the initial backoff ({:?}) is longer than the maximum ({:?})",
                self.initial_backoff, self.max_backoff
            )));
        }
        Ok(())
    }

    /// The delay before retry number `retry` (0-based): `initial * 2^retry`, capped.
    pub fn delay(&self, retry: u32) -> Duration {
        let factor = 2u32.checked_pow(retry).unwrap_or(u32::MAX);
        self.initial_backoff
            .checked_mul(factor)
            .unwrap_or(self.max_backoff)
            .min(self.max_backoff)
    }

    /// Runs `attempt` until it is done, fails, or the retries are spent. `error` turns the last
    /// retryable failure (its reason and status) into the error returned.
    pub fn run<T>(
        &self,
        mut attempt: impl FnMut() -> Attempt<T>,
        error: impl Fn(Option<u16>, String) -> Error,
    ) -> Result<T> {
        let mut retry = 0u32;
        loop {
            match attempt() {
                Attempt::Done(value) => return Ok(value),
                Attempt::Fail(e) => return Err(e),
                Attempt::Retry {
                    reason,
                    status,
                    retry_after,
                } => {
                    if retry >= self.max_retries {
                        let attempts = retry + 1;
                        let plural = if attempts == 1 { "" } else { "s" };
                        return Err(error(
                            status,
                            format!("{reason}; gave up after {attempts} attempt{plural}"),
                        ));
                    }
                    let delay =
                        retry_after.map_or_else(|| self.delay(retry), |d| d.min(self.max_backoff));
                    (self.sleeper)(delay);
                    retry += 1;
                }
            }
        }
    }
}

impl std::fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("max_retries", &self.max_retries)
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
            .finish_non_exhaustive()
    }
}

/// What one attempt gave.
pub(crate) enum Attempt<T> {
    /// Success.
    Done(T),
    /// Worth another try: why, the response status (when one came back), and the server's
    /// `Retry-After`, when given.
    Retry {
        reason: String,
        status: Option<u16>,
        retry_after: Option<Duration>,
    },
    /// Not worth another try.
    Fail(Error),
}

/// A response read to its end.
pub(crate) struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The body.
    pub text: String,
    /// The `Retry-After` header in seconds, when sent.
    pub retry_after: Option<Duration>,
}

impl Reply {
    /// Whether the status asks for another try (408, 429, 5xx).
    pub fn is_retryable(&self) -> bool {
        matches!(self.status, 408 | 429 | 500..=599)
    }
}

/// A failed exchange: retryable (connection, timeout) or not, with the client's error.
pub(crate) struct Transport {
    /// Whether another try might work.
    pub retryable: bool,
    /// What happened.
    pub message: String,
    /// The client's error.
    pub source: BoxError,
}

/// One POST of `body` as JSON to `url` (with extra `headers`), read to its end.
pub(crate) fn post_json(
    agent: &ureq::Agent,
    url: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> std::result::Result<Reply, Transport> {
    let mut call = agent.post(url).header("Content-Type", "application/json");
    for (name, value) in headers {
        call = call.header(*name, *value);
    }
    let response = call.send_json(body).map_err(transport)?;
    read(response)
}

/// One POST of `body` as JSON to `url`; the response unread.
fn send_json(
    agent: &ureq::Agent,
    url: &str,
    bearer: Option<&str>,
    body: &Value,
) -> std::result::Result<ureq::http::Response<ureq::Body>, Transport> {
    let mut call = agent.post(url).header("Content-Type", "application/json");
    if let Some(key) = bearer {
        call = call.header("Authorization", format!("Bearer {key}"));
    }
    call.send_json(body).map_err(transport)
}

/// One attempt of an API call: POST `body` to `url` with an optional bearer token, then sort
/// the reply the same way for every OpenAI-style API: 2xx is parsed by `parse`; 401 and 403
/// fail at once, saying to check `key_source`; 408, 429, 5xx and network failures are worth
/// another try; any other status fails. `error` makes the [`Error`] of a failure.
pub(crate) fn api_attempt<T>(
    agent: &ureq::Agent,
    url: &str,
    bearer: Option<&str>,
    body: &Value,
    key_source: &str,
    parse: impl FnOnce(&str) -> std::result::Result<T, String>,
    error: impl Fn(Option<u16>, String, Option<BoxError>) -> Error,
) -> Attempt<T> {
    let reply = match send_json(agent, url, bearer, body).and_then(read) {
        Ok(r) => r,
        Err(t) => return transport_failure(t, &error),
    };
    match reply.status {
        200..=299 => match parse(&reply.text) {
            Ok(v) => Attempt::Done(v),
            Err(m) => Attempt::Fail(error(Some(reply.status), m, None)),
        },
        _ => refused(&reply, key_source, error),
    }
}

/// [`api_attempt`] for a reply read as it arrives: a 2xx body goes to `consume` unread (a
/// server-sent-events stream); other replies are sorted as `api_attempt` sorts them. A failure
/// while consuming is not retried: part of the reply may already have been used.
pub(crate) fn api_attempt_streamed<T>(
    agent: &ureq::Agent,
    url: &str,
    bearer: Option<&str>,
    body: &Value,
    key_source: &str,
    consume: impl FnOnce(&mut dyn std::io::BufRead) -> std::result::Result<T, String>,
    error: impl Fn(Option<u16>, String, Option<BoxError>) -> Error,
) -> Attempt<T> {
    let response = match send_json(agent, url, bearer, body) {
        Ok(r) => r,
        Err(t) => return transport_failure(t, &error),
    };
    let status = response.status().as_u16();
    if (200..300).contains(&status) {
        let mut reader = std::io::BufReader::new(response.into_body().into_reader());
        return match consume(&mut reader) {
            Ok(v) => Attempt::Done(v),
            Err(m) => Attempt::Fail(error(Some(status), m, None)),
        };
    }
    match read(response) {
        Ok(reply) => refused(&reply, key_source, error),
        Err(t) => Attempt::Retry {
            reason: t.message,
            status: Some(status),
            retry_after: None,
        },
    }
}

/// A failed exchange: worth another try when the transport says so (a connection, a timeout),
/// else a failure.
fn transport_failure<T>(
    t: Transport,
    error: &impl Fn(Option<u16>, String, Option<BoxError>) -> Error,
) -> Attempt<T> {
    if t.retryable {
        Attempt::Retry {
            reason: t.message,
            status: None,
            retry_after: None,
        }
    } else {
        Attempt::Fail(error(None, t.message, Some(t.source)))
    }
}

/// A reply that is not a success: 401 and 403 fail at once, saying to check `key_source`;
/// 408, 429 and 5xx are worth another try; any other status fails.
fn refused<T>(
    reply: &Reply,
    key_source: &str,
    error: impl Fn(Option<u16>, String, Option<BoxError>) -> Error,
) -> Attempt<T> {
    let status = reply.status;
    let detail = || format!("{} ({})", status_line(status), server_message(&reply.text));
    match status {
        401 | 403 => Attempt::Fail(error(
            Some(status),
            format!("{}; check {key_source} (not retried)", detail()),
            None,
        )),
        _ if reply.is_retryable() => Attempt::Retry {
            reason: detail(),
            status: Some(status),
            retry_after: reply.retry_after,
        },
        _ => Attempt::Fail(error(
            Some(status),
            format!("{} (not retried)", detail()),
            None,
        )),
    }
}

/// One GET of `url`, read to its end.
pub(crate) fn get(agent: &ureq::Agent, url: &str) -> std::result::Result<Reply, Transport> {
    let response = agent.get(url).call().map_err(transport)?;
    read(response)
}

fn read(mut response: ureq::http::Response<ureq::Body>) -> std::result::Result<Reply, Transport> {
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let text = response.body_mut().read_to_string().map_err(|e| {
        let mut t = transport(e);
        t.message = format!("reading the body: {}", t.message);
        t
    })?;
    Ok(Reply {
        status,
        text,
        retry_after,
    })
}

fn transport(e: ureq::Error) -> Transport {
    let retryable = matches!(
        e,
        ureq::Error::Io(_)
            | ureq::Error::Timeout(_)
            | ureq::Error::ConnectionFailed
            | ureq::Error::Protocol(_)
            | ureq::Error::BodyStalled
    );
    let message = if retryable {
        format!("network error: {e}")
    } else {
        format!("request failed: {e}")
    };
    Transport {
        retryable,
        message,
        source: e.into(),
    }
}

/// `HTTP 503 Service Unavailable`, or `HTTP 599` for a status without a known reason.
pub(crate) fn status_line(status: u16) -> String {
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

/// The server's error message: `error.message` (or `message`) from a JSON body, else the
/// body's start; at most 300 characters.
pub(crate) fn server_message(body: &str) -> String {
    let from_json = serde_json::from_str::<Value>(body).ok().and_then(|v| {
        if let Some(e) = v.get("error") {
            return e
                .get("message")
                .and_then(Value::as_str)
                .or_else(|| e.as_str())
                .map(str::to_string);
        }
        v.get("message").and_then(Value::as_str).map(str::to_string)
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn policy(max_retries: u32, slept: Arc<Mutex<Vec<Duration>>>) -> RetryPolicy {
        RetryPolicy {
            max_retries,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(350),
            sleeper: Arc::new(move |d| slept.lock().unwrap().push(d)),
        }
    }

    #[test]
    fn delays_double_up_to_the_cap() {
        let p = policy(0, Arc::default());
        let ms: Vec<u128> = (0..4).map(|r| p.delay(r).as_millis()).collect();
        assert_eq!(ms, [100, 200, 350, 350]);
        assert_eq!(p.delay(40), Duration::from_millis(350));
    }

    #[test]
    fn retries_stop_after_the_budget_and_say_how_many_attempts() {
        let slept = Arc::new(Mutex::new(Vec::new()));
        let p = policy(2, slept.clone());
        let mut calls = 0;
        let e = p
            .run::<()>(
                || {
                    calls += 1;
                    Attempt::Retry {
                        reason: "HTTP 503".into(),
                        status: Some(503),
                        retry_after: None,
                    }
                },
                |status, message| Error::Http {
                    url: "u".into(),
                    status,
                    message,
                    source: None,
                },
            )
            .unwrap_err();
        assert_eq!(calls, 3);
        assert_eq!(slept.lock().unwrap().len(), 2);
        assert!(e.to_string().contains("gave up after 3 attempts"), "{e}");
        assert!(e.to_string().contains("status 503"), "{e}");
    }

    #[test]
    fn a_failure_is_not_retried() {
        let p = policy(5, Arc::default());
        let mut calls = 0;
        let r = p.run::<()>(
            || {
                calls += 1;
                Attempt::Fail(Error::Config("no".into()))
            },
            |_, m| Error::Config(m),
        );
        assert!(r.is_err());
        assert_eq!(calls, 1);
    }

    #[test]
    fn retry_after_is_honoured_up_to_the_cap() {
        let slept = Arc::new(Mutex::new(Vec::new()));
        let p = policy(1, slept.clone());
        let mut first = true;
        let r = p.run(
            || {
                if std::mem::take(&mut first) {
                    Attempt::Retry {
                        reason: "429".into(),
                        status: Some(429),
                        retry_after: Some(Duration::from_secs(30)),
                    }
                } else {
                    Attempt::Done(7)
                }
            },
            |_, m| Error::Config(m),
        );
        assert_eq!(r.unwrap(), 7);
        assert_eq!(*slept.lock().unwrap(), [Duration::from_millis(350)]);
    }

    #[test]
    fn server_messages_come_from_json_or_the_body() {
        assert_eq!(
            server_message(r#"{"error":{"message":"bad key"}}"#),
            "bad key"
        );
        assert_eq!(
            server_message(r#"{"code":100,"message":"collection not found"}"#),
            "collection not found"
        );
        assert_eq!(server_message("  oops "), "oops");
        assert_eq!(server_message(""), "empty body");
        assert_eq!(server_message(&"x".repeat(400)).chars().count(), 303);
    }
}

/// The environment variable read for an API key by default.
pub(crate) const DEFAULT_API_KEY_ENV: &str = "OPENAI_API_KEY";

/// What an OpenAI-style API client is configured with: the API root, the key (or the
/// environment variable that holds it), and the HTTP settings. The builders of the
/// OpenAI-compatible generator and embedder hold one and share their setters
/// ([`api_builder_methods`]).
#[derive(Clone)]
pub(crate) struct ApiSettings {
    /// The API root, e.g. `http://127.0.0.1:8000/v1`.
    pub base_url: String,
    /// The key, when set directly.
    pub api_key: Option<String>,
    /// The environment variable read for the key otherwise.
    pub api_key_env: String,
    /// Timeouts and retries.
    pub http: ClientSettings,
}

impl std::fmt::Debug for ApiSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiSettings")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("api_key_env", &self.api_key_env)
            .field("http", &self.http)
            .finish()
    }
}

impl ApiSettings {
    /// `base_url`, the key from `OPENAI_API_KEY`, `timeout` per attempt, 10 s to connect, 3
    /// retries from 500 ms to 8 s.
    pub fn new(base_url: &str, timeout: Duration) -> Self {
        ApiSettings {
            base_url: base_url.into(),
            api_key: None,
            api_key_env: DEFAULT_API_KEY_ENV.into(),
            http: ClientSettings {
                timeout,
                connect_timeout: Duration::from_secs(10),
                max_retries: 3,
                initial_backoff: Duration::from_millis(500),
                max_backoff: Duration::from_secs(8),
                sleeper: None,
            },
        }
    }

    /// Checks the settings and makes the client for `{base_url}/{path}`.
    pub fn connect(self, path: &str) -> Result<ApiClient> {
        let base = self.base_url.trim().trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Error::Config(format!(
                "base_url must start with http:// or https://, got {:?}",
                self.base_url
            )));
        }
        let (agent, retry) = self.http.client("")?;
        let (api_key, key_source) = match self.api_key {
            Some(k) => (Some(k), "the configured API key".to_string()),
            None => (
                std::env::var(&self.api_key_env)
                    .ok()
                    .filter(|k| !k.trim().is_empty()),
                format!("the {} environment variable", self.api_key_env),
            ),
        };
        Ok(ApiClient {
            agent,
            url: format!("{base}/{path}"),
            api_key,
            key_source,
            retry,
        })
    }
}

/// A client of one endpoint of an OpenAI-style API: POSTs with the key, retried as
/// [`api_attempt`] sorts the replies.
pub(crate) struct ApiClient {
    agent: ureq::Agent,
    /// The endpoint.
    pub url: String,
    api_key: Option<String>,
    key_source: String,
    /// The retry policy.
    pub retry: RetryPolicy,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClient")
            .field("url", &self.url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

impl ApiClient {
    /// The [`Error::Http`] of a failed call to this endpoint.
    fn error(&self) -> impl Fn(Option<u16>, String, Option<BoxError>) -> Error + Copy + '_ {
        |status, message, source| Error::Http {
            url: self.url.clone(),
            status,
            message,
            source,
        }
    }

    /// [`call`](Self::call) for a streamed reply: `consume` reads the body of the first
    /// success as it arrives (failures before it are retried as `call` retries them).
    pub fn call_streamed<T>(
        &self,
        body: &Value,
        mut consume: impl FnMut(&mut dyn std::io::BufRead) -> std::result::Result<T, String>,
    ) -> Result<T> {
        let error = self.error();
        self.retry.run(
            || {
                api_attempt_streamed(
                    &self.agent,
                    &self.url,
                    self.api_key.as_deref(),
                    body,
                    &self.key_source,
                    &mut consume,
                    error,
                )
            },
            |status, message| error(status, message, None),
        )
    }

    /// POSTs `body` until a reply parses (`parse`), fails, or the retries are spent; errors
    /// are [`Error::Http`] naming the URL.
    pub fn call<T>(
        &self,
        body: &Value,
        parse: impl Fn(&str) -> std::result::Result<T, String>,
    ) -> Result<T> {
        let error = self.error();
        self.retry.run(
            || {
                api_attempt(
                    &self.agent,
                    &self.url,
                    self.api_key.as_deref(),
                    body,
                    &self.key_source,
                    &parse,
                    error,
                )
            },
            |status, message| error(status, message, None),
        )
    }
}

/// The setters an OpenAI-style client builder shares, over its `api: ApiSettings` field:
/// `base_url`, `api_key`, `api_key_env`, `timeout`, `connect_timeout`, `max_retries`,
/// `backoff`, `sleeper`. `$path` is the endpoint appended to the base URL (for the docs).
macro_rules! api_builder_methods {
    ($path:literal, $timeout:literal) => {
        #[doc = concat!("The API root, e.g. `http://127.0.0.1:8000/v1` (`/", $path, "` is appended).")]
        pub fn base_url(mut self, url: impl Into<String>) -> Self {
            self.api.base_url = url.into();
            self
        }

        /// The API key (sent as `Authorization: Bearer ...`); overrides the environment variable.
        pub fn api_key(mut self, key: impl Into<String>) -> Self {
            self.api.api_key = Some(key.into());
            self
        }

        /// The environment variable to read the key from when none is set (default
        /// `OPENAI_API_KEY`). With neither, no `Authorization` header is sent (local servers).
        pub fn api_key_env(mut self, name: impl Into<String>) -> Self {
            self.api.api_key_env = name.into();
            self
        }

        #[doc = concat!("The time limit for one whole attempt (default ", $timeout, ").")]
        pub fn timeout(mut self, timeout: std::time::Duration) -> Self {
            self.api.http.timeout = timeout;
            self
        }

        /// The time limit for connecting (default 10 s).
        pub fn connect_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.api.http.connect_timeout = timeout;
            self
        }

        /// Retries after the first attempt (default 3).
        pub fn max_retries(mut self, n: u32) -> Self {
            self.api.http.max_retries = n;
            self
        }

        /// The first backoff delay (default 500 ms) and the cap (default 8 s).
        pub fn backoff(mut self, initial: std::time::Duration, max: std::time::Duration) -> Self {
            self.api.http.initial_backoff = initial;
            self.api.http.max_backoff = max;
            self
        }

        /// Replaces `std::thread::sleep` between retries (for tests, or to log the delays).
        pub fn sleeper(mut self, sleeper: $crate::http::Sleeper) -> Self {
            self.api.http.sleeper = Some(sleeper);
            self
        }
    };
}
pub(crate) use api_builder_methods;
