//! The OpenAI-compatible generator against a loopback HTTP server started by each test:
//! request shape, retries with exponential backoff on 429 / 5xx / network errors, no retry on
//! 401 / 403 / 400, error messages, timeouts. The OpenAI-compatible embedder's batches and its
//! `dimensions` against the same server.
#![cfg(feature = "http")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rerank::answer::GenerationRequest;
use rerank::answer::OpenAiCompatible;
use rerank::{Error, Generator};

/// What the server does with one connection.
enum Reply {
    /// Status, extra headers, body.
    Http(u16, Vec<(&'static str, &'static str)>, String),
    /// Read the request, then close the connection without answering.
    Hangup,
    /// Read the request, wait, then answer 200 (to trigger the client's timeout).
    Slow(Duration),
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    request_line: String,
    headers: Vec<(String, String)>,
    body: serde_json::Value,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A loopback server that handles exactly `replies.len()` connections, then stops; it also
/// stops by itself after 20 s without a connection.
struct Server {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    handle: Option<JoinHandle<()>>,
}

impl Server {
    fn start(replies: Vec<Reply>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let handle = std::thread::spawn(move || {
            for reply in replies {
                let deadline = Instant::now() + Duration::from_secs(20);
                let stream = loop {
                    match listener.accept() {
                        Ok((s, _)) => break Some(s),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            if Instant::now() > deadline {
                                break None;
                            }
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Err(_) => break None,
                    }
                };
                let Some(mut stream) = stream else { return };
                stream.set_nonblocking(false).unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .unwrap();
                if let Some(s) = read_request(&mut stream) {
                    log.lock().unwrap().push(s);
                }
                match reply {
                    Reply::Http(status, headers, body) => {
                        respond(&mut stream, status, &headers, &body)
                    }
                    Reply::Hangup => {}
                    Reply::Slow(d) => {
                        // Answer late on another thread so the next connection is served.
                        std::thread::spawn(move || {
                            std::thread::sleep(d);
                            respond(&mut stream, 200, &[], &completion("late"));
                        });
                    }
                }
            }
        });
        Server {
            addr,
            seen,
            handle: Some(handle),
        }
    }

    fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Waits for the server to finish its script and returns what it saw.
    fn finish(mut self) -> Vec<Seen> {
        if let Some(h) = self.handle.take() {
            h.join().unwrap();
        }
        self.seen.lock().unwrap().clone()
    }
}

fn read_request(stream: &mut TcpStream) -> Option<Seen> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let request_line = lines.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&buf[head_end..]).unwrap_or(serde_json::Value::Null);
    Some(Seen {
        request_line,
        headers,
        body,
    })
}

fn respond(stream: &mut TcpStream, status: u16, headers: &[(&str, &str)], body: &str) {
    let mut out = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(body);
    let _ = stream.write_all(out.as_bytes());
    let _ = stream.flush();
}

fn completion(text: &str) -> String {
    serde_json::json!({
        "id": "x",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}]
    })
    .to_string()
}

fn error_body(message: &str) -> String {
    serde_json::json!({"error": {"message": message, "type": "x"}}).to_string()
}

/// A generator for `server` whose sleeps are recorded instead of slept.
fn client(server: &Server, retries: u32) -> (OpenAiCompatible, Arc<Mutex<Vec<Duration>>>) {
    let slept = Arc::new(Mutex::new(Vec::new()));
    let log = slept.clone();
    let g = OpenAiCompatible::builder()
        .base_url(server.base_url())
        .model("tiny-model")
        .api_key("sk-test")
        .max_retries(retries)
        .backoff(Duration::from_millis(100), Duration::from_millis(350))
        .timeout(Duration::from_secs(10))
        .sleeper(Arc::new(move |d| log.lock().unwrap().push(d)))
        .build()
        .unwrap();
    (g, slept)
}

fn request() -> GenerationRequest {
    let mut r = GenerationRequest::new("Be brief.", "What is 2+2?");
    r.max_new_tokens = 16;
    r.stop = vec!["\n\n".into()];
    r
}

#[test]
fn sends_a_chat_completions_request_and_reads_the_reply() {
    let server = Server::start(vec![Reply::Http(200, vec![], completion("4"))]);
    let (g, slept) = client(&server, 3);
    let out = g.generate(&request()).unwrap();
    assert_eq!(out.text, "4");
    assert_eq!(out.finish_reason.as_deref(), Some("stop"));
    let seen = server.finish();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].request_line, "POST /v1/chat/completions HTTP/1.1");
    assert_eq!(seen[0].header("authorization"), Some("Bearer sk-test"));
    let body = &seen[0].body;
    assert_eq!(body["model"], "tiny-model");
    assert_eq!(body["max_tokens"], 16);
    assert_eq!(body["temperature"], 0.0);
    assert_eq!(body["stop"], serde_json::json!(["\n\n"]));
    assert_eq!(
        body["messages"],
        serde_json::json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 2+2?"}
        ])
    );
    assert!(slept.lock().unwrap().is_empty());
}

#[test]
fn retries_429_and_5xx_with_exponential_backoff() {
    let server = Server::start(vec![
        Reply::Http(429, vec![], error_body("slow down")),
        Reply::Http(500, vec![], error_body("boom")),
        Reply::Http(503, vec![], "".into()),
        Reply::Http(200, vec![], completion("ok")),
    ]);
    let (g, slept) = client(&server, 3);
    assert_eq!(g.generate(&request()).unwrap().text, "ok");
    assert_eq!(server.finish().len(), 4);
    // 100 ms, 200 ms, then 400 ms capped at 350 ms.
    assert_eq!(
        *slept.lock().unwrap(),
        [
            Duration::from_millis(100),
            Duration::from_millis(200),
            Duration::from_millis(350)
        ]
    );
}

#[test]
fn retry_after_is_honoured_up_to_the_cap() {
    let server = Server::start(vec![
        Reply::Http(429, vec![("Retry-After", "0")], error_body("wait")),
        Reply::Http(429, vec![("Retry-After", "120")], error_body("wait")),
        Reply::Http(200, vec![], completion("ok")),
    ]);
    let (g, slept) = client(&server, 3);
    assert_eq!(g.generate(&request()).unwrap().text, "ok");
    server.finish();
    assert_eq!(
        *slept.lock().unwrap(),
        [Duration::from_secs(0), Duration::from_millis(350)]
    );
}

#[test]
fn gives_up_after_max_retries_and_says_why() {
    let server = Server::start(vec![
        Reply::Http(502, vec![], error_body("upstream down")),
        Reply::Http(502, vec![], error_body("upstream down")),
        Reply::Http(502, vec![], error_body("upstream down")),
    ]);
    let (g, slept) = client(&server, 2);
    let e = g.generate(&request()).unwrap_err();
    assert_eq!(server.finish().len(), 3);
    assert_eq!(slept.lock().unwrap().len(), 2);
    let msg = e.to_string();
    assert!(
        matches!(
            e,
            Error::Http {
                status: Some(502),
                ..
            }
        ),
        "{msg}"
    );
    assert!(msg.contains("502"), "{msg}");
    assert!(msg.contains("upstream down"), "{msg}");
    assert!(msg.contains("3 attempts"), "{msg}");
    assert!(msg.contains("/v1/chat/completions"), "{msg}");
}

#[test]
fn does_not_retry_401_or_403() {
    for status in [401, 403] {
        let server = Server::start(vec![Reply::Http(
            status,
            vec![],
            error_body("invalid api key"),
        )]);
        let (g, slept) = client(&server, 3);
        let e = g.generate(&request()).unwrap_err();
        assert!(
            matches!(e, Error::Http { status: Some(s), .. } if s == status),
            "{e:?}"
        );
        assert_eq!(server.finish().len(), 1, "no second request after {status}");
        assert!(slept.lock().unwrap().is_empty());
        let msg = e.to_string();
        assert!(msg.contains(&status.to_string()), "{msg}");
        assert!(msg.contains("invalid api key"), "{msg}");
        assert!(msg.contains("API key"), "{msg}");
        assert!(msg.contains("not retried"), "{msg}");
    }
}

#[test]
fn does_not_retry_other_client_errors_or_bad_replies() {
    let server = Server::start(vec![Reply::Http(400, vec![], error_body("unknown model"))]);
    let (g, _) = client(&server, 3);
    let msg = g.generate(&request()).unwrap_err().to_string();
    assert_eq!(server.finish().len(), 1);
    assert!(
        msg.contains("400") && msg.contains("unknown model"),
        "{msg}"
    );

    let server = Server::start(vec![Reply::Http(200, vec![], "{\"nope\": 1}".into())]);
    let (g, _) = client(&server, 3);
    let msg = g.generate(&request()).unwrap_err().to_string();
    assert_eq!(server.finish().len(), 1);
    assert!(msg.contains("choices"), "{msg}");
}

#[test]
fn retries_network_errors() {
    let server = Server::start(vec![
        Reply::Hangup,
        Reply::Http(200, vec![], completion("back")),
    ]);
    let (g, slept) = client(&server, 3);
    assert_eq!(g.generate(&request()).unwrap().text, "back");
    assert_eq!(server.finish().len(), 2);
    assert_eq!(*slept.lock().unwrap(), [Duration::from_millis(100)]);
}

#[test]
fn a_closed_port_fails_after_the_retries() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let slept = Arc::new(Mutex::new(Vec::new()));
    let log = slept.clone();
    let g = OpenAiCompatible::builder()
        .base_url(format!("http://127.0.0.1:{port}/v1"))
        .model("m")
        .max_retries(2)
        .backoff(Duration::from_millis(10), Duration::from_millis(20))
        .sleeper(Arc::new(move |d| log.lock().unwrap().push(d)))
        .build()
        .unwrap();
    let msg = g.generate(&request()).unwrap_err().to_string();
    assert_eq!(slept.lock().unwrap().len(), 2);
    assert!(msg.contains("network error"), "{msg}");
    assert!(msg.contains(&format!("127.0.0.1:{port}")), "{msg}");
    assert!(msg.contains("3 attempts"), "{msg}");
}

#[test]
fn a_timeout_is_retried() {
    // The first reply comes after a minute (on a thread of its own, so nothing waits for it);
    // the timeout, five seconds, is also what the fast second attempt has on a loaded machine.
    let server = Server::start(vec![
        Reply::Slow(Duration::from_secs(60)),
        Reply::Http(200, vec![], completion("fast")),
    ]);
    let slept = Arc::new(Mutex::new(Vec::new()));
    let log = slept.clone();
    let g = OpenAiCompatible::builder()
        .base_url(server.base_url())
        .model("m")
        .timeout(Duration::from_secs(5))
        .max_retries(1)
        .backoff(Duration::from_millis(10), Duration::from_millis(10))
        .sleeper(Arc::new(move |d| log.lock().unwrap().push(d)))
        .build()
        .unwrap();
    assert_eq!(g.generate(&request()).unwrap().text, "fast");
    assert_eq!(server.finish().len(), 2);
    assert_eq!(slept.lock().unwrap().len(), 1);
}

#[test]
fn the_api_key_comes_from_the_environment_when_not_configured() {
    let server = Server::start(vec![Reply::Http(200, vec![], completion("k"))]);
    // A variable name only this test uses, so parallel tests are not affected.
    std::env::set_var("RERANK_TEST_OPENAI_KEY", "sk-from-env");
    let g = OpenAiCompatible::builder()
        .base_url(server.base_url())
        .model("m")
        .api_key_env("RERANK_TEST_OPENAI_KEY")
        .build()
        .unwrap();
    g.generate(&request()).unwrap();
    let seen = server.finish();
    assert_eq!(seen[0].header("authorization"), Some("Bearer sk-from-env"));

    let server = Server::start(vec![Reply::Http(200, vec![], completion("k"))]);
    let g = OpenAiCompatible::builder()
        .base_url(server.base_url())
        .model("m")
        .api_key_env("RERANK_TEST_UNSET_KEY_VARIABLE")
        .build()
        .unwrap();
    g.generate(&request()).unwrap();
    assert_eq!(server.finish()[0].header("authorization"), None);
}

#[test]
fn answers_through_the_pipeline_with_the_context_in_the_request() {
    let server = Server::start(vec![Reply::Http(
        200,
        vec![],
        completion("Revenue was $5M in 2023 [Source: report.pdf, Page 3]."),
    )]);
    let (g, _) = client(&server, 0);
    let index = rerank::Bm25Index::new();
    index
        .add(vec![rerank::Document::new(
            "r1",
            "Revenue was $5M in 2023.",
        )
        .with_source("report.pdf")
        .with_page(3)])
        .unwrap();
    let p = rerank::Pipeline::builder()
        .retriever(index)
        .generator(g)
        .build()
        .unwrap();
    let a = p.answer("What was the revenue?").unwrap();
    assert_eq!(a.confidence, 1.0);
    assert_eq!(a.generator.as_deref(), Some("openai-compatible"));
    let seen = server.finish();
    let user = seen[0].body["messages"][1]["content"].as_str().unwrap();
    let block = format!(
        "[1] [Source: report.pdf, Page 3] (Score: {:.2})\nRevenue was $5M in 2023.",
        a.sources[0].score
    );
    assert!(user.contains(&block), "{user}");
}

/// An embeddings reply for a request of `n` texts, in reverse order (the client puts rows back
/// by `index`): row `i` is `[batch, i, 1, 0.5]`, so each vector says which request and which
/// input it answered.
fn embeddings(batch: usize, n: usize) -> Reply {
    let data: Vec<serde_json::Value> = (0..n)
        .rev()
        .map(|i| {
            serde_json::json!({"object": "embedding", "index": i,
                               "embedding": [batch as f32, i as f32, 1.0, 0.5]})
        })
        .collect();
    let body = serde_json::json!({"object": "list", "data": data, "model": "m"});
    Reply::Http(200, vec![], body.to_string())
}

/// Issue 53, D26: `OpenAiEmbedder` sends more texts than `batch_size` as several requests in
/// input order, each with the configured `dimensions` (and the role's prompt), and puts the
/// replies' rows back in input order; without `dimensions` the field is left out.
#[test]
fn the_embedder_splits_large_inputs_into_batches_and_sends_dimensions() {
    use rerank::embed::OpenAiEmbedder;
    use rerank::Embedder;
    // 7 texts, 3 a request: requests of 3, 3 and 1 texts.
    let server = Server::start(vec![embeddings(0, 3), embeddings(1, 3), embeddings(2, 1)]);
    let embedder = OpenAiEmbedder::builder()
        .base_url(server.base_url())
        .model("text-embedding-3-small")
        .dimensions(4)
        .batch_size(3)
        .document_prompt("passage: ")
        .max_retries(0)
        .build()
        .unwrap();
    assert_eq!(
        embedder.dim(),
        4,
        "from `dimensions`, without a probe request"
    );
    let texts: Vec<String> = (0..7).map(|i| format!("document number {i}")).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let m = embedder.embed(&refs).unwrap();
    assert_eq!(m.shape(), [7, 4]);
    for r in 0..7 {
        assert_eq!(
            m.row(r).to_vec(),
            [(r / 3) as f32, (r % 3) as f32, 1.0, 0.5],
            "row {r}"
        );
    }
    let seen = server.finish();
    assert_eq!(seen.len(), 3, "three requests");
    for (i, s) in seen.iter().enumerate() {
        assert!(
            s.request_line.starts_with("POST /v1/embeddings "),
            "{}",
            s.request_line
        );
        assert_eq!(s.body["model"], "text-embedding-3-small");
        assert_eq!(s.body["dimensions"], 4, "{}", s.body);
        assert_eq!(s.body["encoding_format"], "float");
        let want: Vec<String> = texts[i * 3..(i * 3 + 3).min(7)]
            .iter()
            .map(|t| format!("passage: {t}"))
            .collect();
        assert_eq!(s.body["input"], serde_json::json!(want), "request {i}");
    }

    // Without `dimensions` (the width given as `dim`), the field is not sent: a server that
    // takes no `dimensions` is not sent one.
    let server = Server::start(vec![embeddings(0, 2)]);
    let embedder = OpenAiEmbedder::builder()
        .base_url(server.base_url())
        .model("m")
        .dim(4)
        .max_retries(0)
        .build()
        .unwrap();
    let m = embedder.embed(&["a", "b"]).unwrap();
    assert_eq!(m.row(1).to_vec(), [0.0, 1.0, 1.0, 0.5]);
    let seen = server.finish();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].body.get("dimensions").is_none(), "{}", seen[0].body);
    assert_eq!(seen[0].body["input"], serde_json::json!(["a", "b"]));
}

/// A server-sent-events body of chat-completion chunks: `pieces` as deltas, the finish reason,
/// a usage chunk, `[DONE]`.
fn event_stream(pieces: &[&str]) -> String {
    let chunk = |choices: serde_json::Value| {
        format!(
            "data: {}\n\n",
            serde_json::json!({"id": "c", "object": "chat.completion.chunk", "choices": choices})
        )
    };
    let mut body = chunk(serde_json::json!([{"index": 0, "delta": {"role": "assistant"}}]));
    for p in pieces {
        body.push_str(&chunk(
            serde_json::json!([{"index": 0, "delta": {"content": p}, "finish_reason": null}]),
        ));
    }
    body.push_str(&chunk(
        serde_json::json!([{"index": 0, "delta": {}, "finish_reason": "length"}]),
    ));
    body.push_str(&format!(
        "data: {}\n\n",
        serde_json::json!({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}})
    ));
    body.push_str("data: [DONE]\n\n");
    body
}

#[test]
fn streams_the_reply_piece_by_piece_retrying_before_it_starts() {
    use std::ops::ControlFlow;
    let sse = vec![("Content-Type", "text/event-stream")];
    let server = Server::start(vec![
        Reply::Http(503, vec![], error_body("warming up")),
        Reply::Http(200, sse.clone(), event_stream(&["Fo", "ur", "."])),
    ]);
    let (g, slept) = client(&server, 3);
    let mut pieces = Vec::new();
    let out = g
        .generate_stream(&request(), &mut |p| {
            pieces.push(p.to_string());
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(pieces, ["Fo", "ur", "."]);
    assert_eq!(out.text, "Four.");
    assert_eq!(out.finish_reason.as_deref(), Some("length"));
    let usage = out.usage.unwrap();
    assert_eq!((usage.prompt_tokens, usage.completion_tokens), (7, 3));
    assert_eq!(slept.lock().unwrap().len(), 1);
    let seen = server.finish();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].body["stream"], true);
    assert_eq!(seen[1].body["stream_options"]["include_usage"], true);

    // An error chunk after the stream began ends it with the server's message, not retried.
    let failing = format!(
        "data: {}\n\ndata: {}\n\n",
        serde_json::json!({"choices": [{"index": 0, "delta": {"content": "Fo"}}]}),
        error_body("out of memory")
    );
    let server = Server::start(vec![Reply::Http(200, sse.clone(), failing)]);
    let (g, _) = client(&server, 3);
    let err = g
        .generate_stream(&request(), &mut |_| ControlFlow::Continue(()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("out of memory"), "{err}");
    assert_eq!(server.finish().len(), 1);

    // A break stops reading: the pieces after it are not passed on.
    let server = Server::start(vec![Reply::Http(200, sse, event_stream(&["a", "b", "c"]))]);
    let (g, _) = client(&server, 0);
    let mut pieces = Vec::new();
    let out = g
        .generate_stream(&request(), &mut |p| {
            pieces.push(p.to_string());
            ControlFlow::Break(())
        })
        .unwrap();
    assert_eq!(pieces, ["a"]);
    assert_eq!(out.text, "a");
    server.finish();
}
