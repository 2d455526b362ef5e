//! `rerank serve` on loopback, started and stopped by each test (by process id): the Cohere,
//! TEI and OpenAI routes give the library's own scores and embeddings; the pipeline's routes
//! answer; bad requests get JSON errors with the right status and the server keeps serving;
//! the API key is enforced; concurrent requests are batched together and a full queue is
//! refused with 429; SIGTERM finishes the requests in flight; the official `cohere` and
//! `openai` Python SDKs and LangChain's `CohereRerank`, unmodified, get the library's results;
//! usage is the tokenizer's count; TEI's `raw_scores` gives the logits; `--max-batch-tokens`
//! bounds every model call; `/embed_sparse` gives `SparseEncoder`'s vectors and a ColBERT
//! reranker's MaxSim scores answer the rerank routes.
#![cfg(all(feature = "models", feature = "sqlite"))]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rerank::embed::SparseEncoder;
use rerank::models::ModelOptions;
use rerank::rerankers::{ColbertReranker, CrossEncoder, RerankQuery};
use rerank::{load_embedder, Embedder, Reranker, Role};
use serde_json::{json, Value};

const CE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/fixtures/ce_tiny_a/model"
);

fn minilm() -> Option<PathBuf> {
    let base = std::env::var_os("RERANK_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/models")));
    let dir = base.join("all-MiniLM-L6-v2");
    if dir.join("model.safetensors").is_file() {
        Some(dir)
    } else {
        crate::common::skip(&format!("skipping: {} has no model", dir.display()));
        None
    }
}

const QUERY: &str = "how do vaccines train the immune system";
const DOCS: [&str; 4] = [
    "Vaccines expose the immune system to a harmless antigen so it learns to respond.",
    "The recipe needs two cups of flour and a pinch of salt.",
    "",
    "Ünïcödé naïve café: 東京タワー",
];

/// A running `rerank serve`, killed on drop.
struct Server {
    child: Child,
    addr: String,
    dir: PathBuf,
    /// What the server wrote to stderr after `ready`; complete once it has exited.
    log: std::sync::mpsc::Receiver<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A config with the shared tiny cross-encoder, all-MiniLM-L6-v2 and a three-document corpus.
fn config(dir: &Path, minilm: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let corpus = dir.join("corpus.jsonl");
    let lines: Vec<String> = DOCS
        .iter()
        .enumerate()
        .filter(|(_, d)| !d.is_empty())
        .map(|(i, d)| json!({"id": format!("d{i}"), "text": d}).to_string())
        .collect();
    std::fs::write(&corpus, lines.join("\n")).unwrap();
    let path = dir.join("serve.yaml");
    std::fs::write(
        &path,
        format!(
            "corpus: {}\nretriever: {{ type: bm25 }}\nreranker: {{ type: cross_encoder, model: {} }}\nembedder: {{ type: bert, model: {} }}\n",
            corpus.display(),
            CE,
            minilm.display()
        ),
    )
    .unwrap();
    path
}

/// Starts the server with `flags` and waits until it is ready; `None` (through `skip`) when
/// the CLI or a model is missing.
fn start(name: &str, flags: &[&str], envs: &[(&str, &str)]) -> Option<Server> {
    start_with(name, None, flags, envs)
}

/// [`start`] with the config at `config` instead of the test's own.
fn start_with(
    name: &str,
    config: Option<&Path>,
    flags: &[&str],
    envs: &[(&str, &str)],
) -> Option<Server> {
    let cli = crate::common::rerank_cli()?;
    let minilm = minilm()?;
    if !Path::new(CE).is_dir() {
        crate::common::skip(&format!("skipping: {CE} not found"));
        return None;
    }
    let dir = std::env::temp_dir().join(format!("rerank-serve-{name}-{}", std::process::id()));
    let config = match config {
        Some(path) => path.to_path_buf(),
        None => self::config(&dir, &minilm),
    };
    let mut child = Command::new(cli)
        .args(["serve", "--config"])
        .arg(&config)
        .args(["--addr", "127.0.0.1:0", "--threads", "2"])
        .args(flags)
        .envs(envs.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut addr = None;
    let mut line = String::new();
    loop {
        line.clear();
        if stderr.read_line(&mut line).unwrap() == 0 {
            panic!("the server stopped before it was ready");
        }
        if let Some(a) = line.trim().strip_prefix("listening on http://") {
            addr = Some(a.to_string());
        }
        if line.trim() == "ready" {
            break;
        }
    }
    // Keep draining stderr so the server never blocks on a full pipe; the text comes back
    // through `log` when the server exits.
    let (sender, log) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        let _ = sender.send(text);
    });
    Some(Server {
        child,
        addr: addr.expect("the listening address"),
        dir,
        log,
    })
}

/// One HTTP/1.1 exchange on a fresh connection: (status, headers, body).
fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let mut stream = TcpStream::connect(addr).unwrap();
    // Only a server that hangs meets this: the slowest request here (200 texts through MiniLM
    // in the test profile, on a loaded 2-core machine) answers in well under a minute.
    stream
        .set_read_timeout(Some(Duration::from_secs(600)))
        .unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response: {}", String::from_utf8_lossy(&raw)));
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    (status, head, body)
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let end = raw.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&raw[..end]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&raw[end + 2..end + 2 + size]);
        raw = &raw[end + 2 + size + 2..];
    }
}

fn post(addr: &str, path: &str, body: &Value) -> (u16, Value) {
    post_with(addr, path, body, &[])
}

fn post_with(addr: &str, path: &str, body: &Value, headers: &[&str]) -> (u16, Value) {
    let mut all = vec!["Content-Type: application/json"];
    all.extend_from_slice(headers);
    let (status, _, body) = http(addr, "POST", path, &all, body.to_string().as_bytes());
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

fn library_scores() -> Vec<f32> {
    let ce = CrossEncoder::builder(CE)
        .options(ModelOptions::default().threads(2))
        .build()
        .unwrap();
    ce.score(&RerankQuery::new(QUERY), &DOCS).unwrap()
}

fn library_embeddings(minilm: &Path, role: Role) -> Vec<Vec<f32>> {
    let e = load_embedder(minilm, &ModelOptions::default().threads(2)).unwrap();
    let m = e.embed_as(&DOCS, role).unwrap();
    m.outer_iter().map(|r| r.to_vec()).collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6
}

#[test]
fn serve_answers_every_api_as_the_library_does() {
    let Some(server) = start("apis", &[], &[]) else {
        return;
    };
    let addr = server.addr.as_str();
    let scores = library_scores();
    let mut best: Vec<usize> = (0..DOCS.len()).collect();
    best.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));

    // Cohere v2: every document, best first, the library's scores.
    let (status, body) = post(
        addr,
        "/v2/rerank",
        &json!({"model": "m", "query": QUERY, "documents": DOCS}),
    );
    assert_eq!(status, 200, "{body}");
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), DOCS.len());
    for (r, &i) in results.iter().zip(&best) {
        assert_eq!(r["index"], i);
        assert!(
            close(r["relevance_score"].as_f64().unwrap(), f64::from(scores[i])),
            "{r}"
        );
    }
    assert_eq!(body["meta"]["api_version"]["version"], "2");
    // Cohere v1: document objects, top_n, return_documents.
    let docs: Vec<Value> = DOCS.iter().map(|d| json!({"text": d})).collect();
    let (status, body) = post(
        addr,
        "/v1/rerank",
        &json!({"query": QUERY, "documents": docs, "top_n": 2, "return_documents": true}),
    );
    assert_eq!(status, 200, "{body}");
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["index"], best[0]);
    assert_eq!(results[0]["document"]["text"], DOCS[best[0]]);
    // TEI /rerank.
    let (status, body) = post(
        addr,
        "/rerank",
        &json!({"query": QUERY, "texts": DOCS, "return_text": true}),
    );
    assert_eq!(status, 200, "{body}");
    let ranks = body.as_array().unwrap();
    assert_eq!(ranks[0]["index"], best[0]);
    assert_eq!(ranks[0]["text"], DOCS[best[0]]);
    assert!(close(
        ranks[0]["score"].as_f64().unwrap(),
        f64::from(scores[best[0]])
    ));

    // OpenAI embeddings, float and base64; TEI /embed with the query prompt.
    let minilm = minilm().unwrap();
    let expected = library_embeddings(&minilm, Role::Document);
    let (status, body) = post(
        addr,
        "/v1/embeddings",
        &json!({"model": "x", "input": DOCS}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "list");
    for (d, e) in body["data"].as_array().unwrap().iter().zip(&expected) {
        let v: Vec<f64> = serde_json::from_value(d["embedding"].clone()).unwrap();
        assert_eq!(v.len(), 384);
        assert!(v.iter().zip(e).all(|(a, b)| close(*a, f64::from(*b))));
    }
    let (status, body) = post(
        addr,
        "/v1/embeddings",
        &json!({"input": DOCS[0], "encoding_format": "base64"}),
    );
    assert_eq!(status, 200, "{body}");
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(body["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    let v: Vec<f32> = bytes
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(v, expected[0], "base64 carries the exact floats");
    let (status, body) = post(
        addr,
        "/v1/embeddings",
        &json!({"input": "x", "dimensions": 7}),
    );
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("dimensions 7"),
        "{body}"
    );
    let (status, body) = post(
        addr,
        "/embed",
        &json!({"inputs": DOCS, "prompt_name": "query"}),
    );
    assert_eq!(status, 200, "{body}");
    let queries = library_embeddings(&minilm, Role::Query);
    for (row, e) in body.as_array().unwrap().iter().zip(&queries) {
        let v: Vec<f64> = serde_json::from_value(row.clone()).unwrap();
        assert!(v
            .iter()
            .zip(e)
            .all(|(a, b)| (a - f64::from(*b)).abs() < 1e-5));
    }
    // The OpenAI route reaches the query role through `input_type`, as Cohere and Voyage name
    // it; anything else is refused with the valid values.
    let (status, body) = post(
        addr,
        "/v1/embeddings",
        &json!({"input": DOCS, "input_type": "search_query"}),
    );
    assert_eq!(status, 200, "{body}");
    for (d, e) in body["data"].as_array().unwrap().iter().zip(&queries) {
        let v: Vec<f64> = serde_json::from_value(d["embedding"].clone()).unwrap();
        assert!(v.iter().zip(e).all(|(a, b)| close(*a, f64::from(*b))));
    }
    let (status, body) = post(
        addr,
        "/v1/embeddings",
        &json!({"input": "x", "input_type": "classification"}),
    );
    assert_eq!(status, 422, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("expected query, document"),
        "{body}"
    );

    // The pipeline's own routes.
    let (status, body) = post(
        addr,
        "/search",
        &json!({"query": "vaccines immune", "top_k": 2}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["hits"][0]["document"]["id"], "d0", "{body}");
    assert!(body["reranked"].as_bool().unwrap());
    let (status, body) = post(addr, "/answer", &json!({"query": "how do vaccines work"}));
    assert_eq!(status, 200, "{body}");
    assert!(
        body.get("text").is_some() || body.get("answer").is_some(),
        "{body}"
    );

    // Health, info, metrics.
    let (status, _, _) = http(addr, "GET", "/health", &[], b"");
    assert_eq!(status, 200);
    let (status, _, info) = http(addr, "GET", "/info", &[], b"");
    assert_eq!(status, 200);
    let info: Value = serde_json::from_slice(&info).unwrap();
    assert_eq!(info["reranker"], "cross-encoder");
    assert_eq!(info["reranker_model"], CE);
    assert_eq!(info["embedder"]["dimensions"], json!([384]));
    assert_eq!(info["embedder"]["model"], minilm.display().to_string());
    assert_eq!(
        info["precision"],
        json!({"reranker": "f32", "embedder": "f32"})
    );
    let (_, _, metrics) = http(addr, "GET", "/metrics", &[], b"");
    let metrics = String::from_utf8(metrics).unwrap();
    assert!(
        metrics.contains("rerank_requests_total{route=\"/v2/rerank\",status=\"200\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("rerank_batch_items_count{model=\"rerank\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("rerank_request_seconds_bucket{route=\"/search\",le=\"+Inf\"} 1"),
        "{metrics}"
    );
}

#[test]
fn bad_requests_get_json_errors_and_the_server_keeps_serving() {
    let Some(server) = start(
        "errors",
        &["--max-documents", "50", "--max-body-bytes", "100000"],
        &[],
    ) else {
        return;
    };
    let addr = server.addr.as_str();
    let json_headers = ["Content-Type: application/json"];
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("malformed JSON", b"{\"query\": ".to_vec(), 400),
        (
            "wrong shape",
            br#"{"query": 3, "documents": ["a"]}"#.to_vec(),
            422,
        ),
        ("no documents field", br#"{"query": "q"}"#.to_vec(), 422),
        (
            "top_n 0",
            br#"{"query": "q", "documents": ["a"], "top_n": 0}"#.to_vec(),
            422,
        ),
        (
            "51 documents",
            json!({"query": "q", "documents": vec!["a"; 51]})
                .to_string()
                .into_bytes(),
            413,
        ),
        (
            "a 200 kB body",
            json!({"query": "q", "documents": ["a".repeat(200_000)]})
                .to_string()
                .into_bytes(),
            413,
        ),
    ];
    for (what, body, expected) in cases {
        let (status, _, body) = http(addr, "POST", "/v2/rerank", &json_headers, &body);
        assert_eq!(
            status,
            expected,
            "{what}: {}",
            String::from_utf8_lossy(&body)
        );
        let body: Value =
            serde_json::from_slice(&body).unwrap_or_else(|_| panic!("{what}: not JSON"));
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}: {body}"
        );
    }
    let (status, _, body) = http(
        addr,
        "POST",
        "/v2/rerank",
        &[],
        br#"{"query":"q","documents":[]}"#,
    );
    assert_eq!(
        status,
        415,
        "no content type: {}",
        String::from_utf8_lossy(&body)
    );
    let (status, _, body) = http(addr, "GET", "/nowhere", &[], b"");
    assert_eq!(status, 404);
    assert!(String::from_utf8_lossy(&body).contains("no route GET /nowhere"));
    // Client mistakes are 4xx with a JSON body naming the field (an empty list was a 200 that
    // billed a search unit; a route's wrong method a 405 with no body; an unknown recall mode
    // and a top_k of 0 were 500s).
    for route in ["/v2/rerank", "/rerank"] {
        let body = match route {
            "/rerank" => json!({"query": "q", "texts": []}),
            _ => json!({"query": "q", "documents": []}),
        };
        let (status, body) = post(addr, route, &body);
        assert_eq!(status, 422, "{route}: {body}");
        assert!(
            body["message"].as_str().unwrap().contains("empty"),
            "{body}"
        );
    }
    // A field the API does not have is ignored, as the real services do, and named in a
    // `Warning` header; a document of the wrong shape is refused in the API's words (serde's
    // "untagged enum CohereDocument" before).
    let body = json!({"query": "q", "documents": ["a"], "model": "m", "colour": 1});
    let (status, head, body) = http(
        addr,
        "POST",
        "/v2/rerank",
        &json_headers,
        body.to_string().as_bytes(),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(
        head.contains("unknown fields ignored: colour\"") && !head.contains("model"),
        "{head}"
    );
    let (status, body) = post(addr, "/v2/rerank", &json!({"query": "q", "documents": [3]}));
    assert_eq!(status, 422, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("each document as a string, or an object with a \"text\" string")
            && !message.contains("untagged"),
        "{message}"
    );
    let (status, head, body) = http(addr, "GET", "/v2/rerank", &[], b"");
    assert_eq!(status, 405);
    assert!(head.to_ascii_lowercase().contains("allow: post"), "{head}");
    let body: Value = serde_json::from_slice(&body).expect("a JSON body");
    assert!(
        body["message"].as_str().unwrap().contains("takes POST"),
        "{body}"
    );
    for (request, says) in [
        (
            json!({"query": "vaccines", "mode": "dense"}),
            "unknown recall mode \"dense\"",
        ),
        (
            json!({"query": "vaccines", "top_k": 0}),
            "top_k must be at least 1",
        ),
    ] {
        let (status, body) = post(addr, "/search", &request);
        assert_eq!(status, 422, "{request}: {body}");
        assert!(body["message"].as_str().unwrap().contains(says), "{body}");
    }
    let (status, body) = post(addr, "/v1/embeddings", &json!({"input": [[1, 2, 3]]}));
    assert_eq!(status, 422, "{body}");

    // A 100 MB body is refused on its Content-Length, before it is read.
    let mut big = TcpStream::connect(addr).unwrap();
    big.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let started = Instant::now();
    big.write_all(
        b"POST /v2/rerank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 104857600\r\n\r\n{\"query\"",
    )
    .unwrap();
    let mut head = [0u8; 12];
    big.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 413", "{}", String::from_utf8_lossy(&head));
    assert!(started.elapsed() < Duration::from_secs(10));
    drop(big);

    // A client that leaves mid-request, and one that never finishes its headers.
    let mut leaving = TcpStream::connect(addr).unwrap();
    let body = json!({"query": QUERY, "documents": vec![DOCS[0]; 50]}).to_string();
    write!(
        leaving,
        "POST /v2/rerank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    drop(leaving);
    let mut slow = TcpStream::connect(addr).unwrap();
    slow.write_all(b"POST /v2/rerank HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    // Both still let everyone else in.
    let (status, body) = post(
        addr,
        "/v2/rerank",
        &json!({"query": QUERY, "documents": DOCS}),
    );
    assert_eq!(status, 200, "{body}");
    drop(slow);
}

#[test]
fn the_api_key_is_required_when_set_and_off_loopback() {
    let Some(server) = start(
        "auth",
        &["--api-key-env", "RERANK_TEST_KEY"],
        &[("RERANK_TEST_KEY", "s3cret")],
    ) else {
        return;
    };
    let addr = server.addr.as_str();
    let body = json!({"query": QUERY, "documents": DOCS});
    assert_eq!(post(addr, "/v2/rerank", &body).0, 401);
    assert_eq!(
        post_with(addr, "/v2/rerank", &body, &["Authorization: Bearer nope"]).0,
        401
    );
    assert_eq!(
        post_with(addr, "/v2/rerank", &body, &["Authorization: Bearer s3cret"]).0,
        200
    );
    assert_eq!(
        http(addr, "GET", "/health", &[], b"").0,
        200,
        "health needs no key"
    );
    assert_eq!(http(addr, "GET", "/metrics", &[], b"").0, 401);

    // Off loopback without a key the server does not start.
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let out = Command::new(cli)
        .args(["serve", "--config"])
        .arg(server.dir.join("serve.yaml"))
        .args(["--addr", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not a loopback address") && stderr.contains("--api-key-env"),
        "{stderr}"
    );
}

#[test]
fn concurrent_requests_are_batched_and_a_full_queue_is_refused_with_429() {
    let Some(server) = start("batching", &["--queue", "4", "--timeout-secs", "600"], &[]) else {
        return;
    };
    let addr = server.addr.clone();
    // Embeddings of 100 texts through MiniLM: a model call takes a thousand times what a
    // client takes to connect and send, so however slow or loaded the machine, the queue
    // fills while the first batch runs (the tiny cross-encoder answers about as fast as a
    // client connects, which made the outcome a race).
    let texts: Vec<String> = (0..100)
        .map(|i| format!("{} number {i}", DOCS[i % 2]))
        .collect();
    let body = json!({"input": texts});
    let start = Instant::now();
    let statuses: Vec<(u16, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..32)
            .map(|_| {
                let (addr, body) = (&addr, &body);
                s.spawn(move || {
                    let (status, head, _) = http(
                        addr,
                        "POST",
                        "/v1/embeddings",
                        &["Content-Type: application/json"],
                        body.to_string().as_bytes(),
                    );
                    (status, head)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok = statuses.iter().filter(|(s, _)| *s == 200).count();
    let refused: Vec<&String> = statuses
        .iter()
        .filter(|(s, _)| *s == 429)
        .map(|(_, h)| h)
        .collect();
    assert_eq!(ok + refused.len(), 32, "{statuses:?}");
    assert!(ok >= 4, "{ok} answered");
    assert!(
        !refused.is_empty(),
        "32 at once over a queue of 4: some are refused"
    );
    assert!(refused
        .iter()
        .all(|h| h.to_ascii_lowercase().contains("retry-after: 1")));
    eprintln!(
        "32 concurrent: {ok} answered, {} refused in {:?}",
        refused.len(),
        start.elapsed()
    );
    // Batches of more than one request happened: more items than batches x 100.
    let (_, _, metrics) = http(&addr, "GET", "/metrics", &[], b"");
    let metrics = String::from_utf8(metrics).unwrap();
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in {metrics}"))
    };
    let batches = value("rerank_batch_requests_count{model=\"embed\"}");
    let requests = value("rerank_batch_requests_sum{model=\"embed\"}");
    // A request split over two model calls (at --batch-size) counts in each.
    assert!(
        requests as usize >= ok,
        "every answered request was in a batch: {requests} for {ok}"
    );
    assert!(
        requests > batches,
        "{requests} requests in {batches} batches: none was batched"
    );
    // Still serving.
    assert_eq!(
        post(
            &addr,
            "/v2/rerank",
            &json!({"query": QUERY, "documents": DOCS})
        )
        .0,
        200
    );
}

#[test]
fn sigterm_finishes_the_requests_in_flight() {
    let Some(mut server) = start(
        "sigterm",
        &["--timeout-secs", "300", "--log-level", "info"],
        &[],
    ) else {
        return;
    };
    let addr = server.addr.clone();
    let texts: Vec<String> = (0..200)
        .map(|i| format!("{} {i}", DOCS[0].repeat(4)))
        .collect();
    let request = {
        let addr = addr.clone();
        std::thread::spawn(move || post(&addr, "/v1/embeddings", &json!({"input": texts})))
    };
    // SIGTERM once the server has the request (its in-flight gauge says so), however long the
    // client thread took to connect.
    loop {
        let (_, _, metrics) = http(&addr, "GET", "/metrics", &[], b"");
        let metrics = String::from_utf8(metrics).unwrap();
        if metrics.contains("rerank_requests_in_flight{route=\"/v1/embeddings\"} 1") {
            break;
        }
        assert!(
            !request.is_finished(),
            "the request ended before it was seen in flight"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let pid = server.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let (status, body) = request.join().unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"].as_array().unwrap().len(), 200);
    let exit = server.child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    // At `--log-level info`: a line per request and one for the shutdown.
    let log = server.log.recv().unwrap();
    assert!(
        log.contains("shutting down")
            && log.contains("route=\"/v1/embeddings\"")
            && log.contains("status=200"),
        "{log}"
    );
}

/// The Python interpreter with the `cohere`, `openai` and `langchain-cohere` packages (`RERANK_CLIENTS_PYTHON`, else
/// the virtualenv `.ci/run` makes).
fn clients_python() -> Option<PathBuf> {
    let python = std::env::var_os("RERANK_CLIENTS_PYTHON")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache/rerank/clients-venv/bin/python"))
        })?;
    if python.is_file() {
        Some(python)
    } else {
        crate::common::skip(&format!(
            "skipping: {} not found (python -m venv it, then pip install cohere openai \
             langchain-cohere)",
            python.display()
        ));
        None
    }
}

/// `examples/configs/serve.yaml`: models by name (resolved in `$RERANK_MODELS_DIR`), no corpus
/// and no retriever; the rerank and embedding routes answer as with the test's own config.
/// What the client script `tests/clients/{script}` printed, run against `server` (whose API
/// key is `k`) with the request file `request`.
fn run_client(python: &Path, script: &str, server: &Server, request: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(script);
    let out = Command::new(python)
        .arg(script)
        .arg(format!("http://{}", server.addr))
        .arg("k")
        .arg(request)
        .output()
        .unwrap();
    crate::common::json_output(&out)
}

#[test]
fn the_shipped_serve_config_names_its_models_and_needs_no_corpus() {
    let Some(minilm) = minilm() else { return };
    // A models folder as the fetch scripts leave it, the tiny cross-encoder standing in for
    // ms-marco-MiniLM-L-6-v2.
    let models = std::env::temp_dir().join(format!("rerank-serve-models-{}", std::process::id()));
    std::fs::create_dir_all(&models).unwrap();
    for (name, target) in [
        ("ms-marco-MiniLM-L-6-v2", Path::new(CE)),
        ("all-MiniLM-L6-v2", minilm.as_path()),
    ] {
        let link = models.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(target, &link).unwrap();
    }
    let config = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/configs/serve.yaml"
    ));
    let models_env = models.display().to_string();
    let Some(server) = start_with(
        "shipped",
        Some(config),
        &[],
        &[("RERANK_MODELS_DIR", models_env.as_str())],
    ) else {
        return;
    };
    let addr = server.addr.as_str();
    let (status, body) = post(
        addr,
        "/v2/rerank",
        &json!({"query": QUERY, "documents": DOCS}),
    );
    assert_eq!(status, 200, "{body}");
    let scores: Vec<f32> = {
        let mut by_index = vec![0.0; DOCS.len()];
        for r in body["results"].as_array().unwrap() {
            by_index[r["index"].as_u64().unwrap() as usize] =
                r["relevance_score"].as_f64().unwrap() as f32;
        }
        by_index
    };
    let want = library_scores();
    assert!(
        scores.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-5),
        "{scores:?} {want:?}"
    );
    let (status, body) = post(addr, "/v1/embeddings", &json!({"input": DOCS[0]}));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"][0]["embedding"].as_array().unwrap().len(), 384);
    let (_, _, info) = http(addr, "GET", "/info", &[], b"");
    let info: Value = serde_json::from_slice(&info).unwrap();
    assert_eq!(
        info["reranker_model"],
        "cross-encoder/ms-marco-MiniLM-L-6-v2"
    );
    drop(server);
    std::fs::remove_dir_all(&models).unwrap();
}

#[test]
fn the_official_cohere_and_openai_sdks_get_the_librarys_results() {
    let Some(python) = clients_python() else {
        return;
    };
    let Some(server) = start(
        "sdks",
        &["--api-key-env", "RERANK_TEST_KEY"],
        &[("RERANK_TEST_KEY", "k")],
    ) else {
        return;
    };
    let request = server.dir.join("request.json");
    std::fs::write(
        &request,
        json!({"query": QUERY, "documents": DOCS, "texts": DOCS}).to_string(),
    )
    .unwrap();
    let got = run_client(&python, "sdk_clients.py", &server, &request);
    let scores = library_scores();
    let v2 = got["cohere_v2"].as_array().unwrap();
    assert_eq!(v2.len(), DOCS.len());
    for pair in v2 {
        let i = pair[0].as_u64().unwrap() as usize;
        assert!(
            close(pair[1].as_f64().unwrap(), f64::from(scores[i])),
            "{pair}"
        );
    }
    let mut best: Vec<usize> = (0..DOCS.len()).collect();
    best.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let v1 = got["cohere_v1"].as_array().unwrap();
    assert_eq!(v1.len(), 2);
    let top = v1[0][0].as_u64().unwrap() as usize;
    assert!(scores.iter().all(|&s| s <= scores[top]));
    assert_eq!(v1[0][2], DOCS[top]);
    let expected = library_embeddings(&minilm().unwrap(), Role::Document);
    for key in ["openai_default", "openai_float"] {
        let rows: Vec<Vec<f64>> = serde_json::from_value(got[key].clone()).unwrap();
        assert_eq!(rows.len(), DOCS.len(), "{key}");
        for (row, e) in rows.iter().zip(&expected) {
            assert!(
                row.iter().zip(e).all(|(a, b)| close(*a, f64::from(*b))),
                "{key}"
            );
        }
    }
    // LangChain's Cohere reranker: the best three, with the library's scores.
    for key in ["langchain_rerank", "langchain_compress"] {
        let rows = got[key].as_array().unwrap();
        assert_eq!(rows.len(), 3, "{key}");
        for (row, &i) in rows.iter().zip(&best) {
            assert!(
                close(row[1].as_f64().unwrap(), f64::from(scores[i])),
                "{key}: {row}"
            );
        }
    }
    assert_eq!(got["langchain_compress"][0][0], DOCS[best[0]]);
    assert_eq!(got["openai_bad_dimensions"][0], 422);
    assert_eq!(got["openai_wrong_key"], 401);
}

/// A value of the metrics text (`name` with its labels), or a panic naming it.
fn metric(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} in {metrics}"))
}

fn tiny_ce() -> CrossEncoder {
    CrossEncoder::builder(CE)
        .options(ModelOptions::default().threads(2))
        .build()
        .unwrap()
}

/// Each document's pair tokens beside `query`, as the cross-encoder encodes the pair.
fn pair_tokens(query: &str, docs: &[&str]) -> Vec<usize> {
    let ce = tiny_ce();
    docs.iter()
        .map(|d| ce.encode_pair(query, d).unwrap().len())
        .collect()
}

#[test]
fn usage_counts_the_models_tokens_and_raw_scores_are_the_logits() {
    let Some(server) = start("usage", &[], &[]) else {
        return;
    };
    let addr = server.addr.as_str();
    let minilm = minilm().unwrap();

    // OpenAI's usage: the tokenizer's count of every input, special tokens included.
    // (tokenizer.json pads to 128; the model computes the text's own tokens.)
    let mut tokenizer = tokenizers::Tokenizer::from_file(minilm.join("tokenizer.json")).unwrap();
    tokenizer.with_padding(None);
    let want: usize = DOCS
        .iter()
        .map(|d| tokenizer.encode(*d, true).unwrap().len())
        .sum();
    assert!(want > 2 * DOCS.len(), "{want}");
    let (status, body) = post(addr, "/v1/embeddings", &json!({"input": DOCS}));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["usage"]["prompt_tokens"], want, "{body}");
    assert_eq!(body["usage"]["total_tokens"], want, "{body}");
    let (_, body) = post(addr, "/v1/embeddings", &json!({"input": DOCS[1]}));
    assert_eq!(
        body["usage"]["prompt_tokens"],
        tokenizer.encode(DOCS[1], true).unwrap().len()
    );

    // Cohere's meta.tokens and Jina's usage: the pairs' tokens.
    let want: usize = pair_tokens(QUERY, &DOCS).iter().sum();
    for route in ["/v2/rerank", "/v1/rerank"] {
        let (status, body) = post(addr, route, &json!({"query": QUERY, "documents": DOCS}));
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body["meta"]["tokens"]["input_tokens"], want,
            "{route}: {body}"
        );
        assert_eq!(body["usage"]["total_tokens"], want, "{route}: {body}");
    }

    // TEI's raw_scores: the logits, whose sigmoid is the default score.
    let ce = tiny_ce();
    let pairs: Vec<(&str, &str)> = DOCS.iter().map(|d| (QUERY, *d)).collect();
    let logits = ce.logits(&pairs).unwrap();
    let (status, raw) = post(
        addr,
        "/rerank",
        &json!({"query": QUERY, "texts": DOCS, "raw_scores": true}),
    );
    assert_eq!(status, 200, "{raw}");
    let (status, plain) = post(addr, "/rerank", &json!({"query": QUERY, "texts": DOCS}));
    assert_eq!(status, 200, "{plain}");
    let by_index = |ranks: &Value| -> Vec<f64> {
        let mut out = vec![f64::NAN; DOCS.len()];
        for r in ranks.as_array().unwrap() {
            out[r["index"].as_u64().unwrap() as usize] = r["score"].as_f64().unwrap();
        }
        out
    };
    let (raw, plain) = (by_index(&raw), by_index(&plain));
    for i in 0..DOCS.len() {
        assert!(close(raw[i], f64::from(logits[i])), "{raw:?} {logits:?}");
        let sigmoid = 1.0 / (1.0 + (-raw[i]).exp());
        assert!((sigmoid - plain[i]).abs() < 1e-6, "{sigmoid} {}", plain[i]);
    }
    assert!(
        raw.iter().zip(&plain).any(|(r, p)| (r - p).abs() > 1e-3),
        "the raw scores are not the scores: {raw:?} {plain:?}"
    );

    // No sparse model configured: a JSON 501 that says how to name one.
    let (status, body) = post(addr, "/embed_sparse", &json!({"inputs": "x"}));
    assert_eq!(status, 501, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("serve.sparse_model") && message.contains("--sparse-model"),
        "{message}"
    );
}

#[test]
fn max_batch_tokens_bounds_every_model_call() {
    let limit = 64;
    let Some(server) = start("batch-tokens", &["--max-batch-tokens", "64"], &[]) else {
        return;
    };
    let addr = server.addr.as_str();
    // Twelve documents, one of them longer than the limit beside the query.
    let long = DOCS[0].repeat(8);
    let mut docs: Vec<String> = (0..11).map(|i| format!("{} {i}", DOCS[i % 4])).collect();
    docs.insert(5, long);
    let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
    let tokens = pair_tokens(QUERY, &refs);
    assert!(tokens[5] > limit, "{tokens:?}");
    assert!(tokens.iter().sum::<usize>() > 3 * limit, "{tokens:?}");
    // The calls the limit allows, taking the documents in order.
    let (mut calls, mut within, mut taken, mut sum) = (0, 0, 0, 0);
    for &t in &tokens {
        if taken > 0 && sum + t > limit {
            calls += 1;
            within += usize::from(sum <= limit);
            (taken, sum) = (0, 0);
        }
        taken += 1;
        sum += t;
    }
    calls += 1;
    within += usize::from(sum <= limit);

    let (status, body) = post(
        addr,
        "/v2/rerank",
        &json!({"query": QUERY, "documents": docs}),
    );
    assert_eq!(status, 200, "{body}");
    let want = tiny_ce().score(&RerankQuery::new(QUERY), &refs).unwrap();
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), docs.len());
    for r in results {
        let i = r["index"].as_u64().unwrap() as usize;
        assert!(
            close(r["relevance_score"].as_f64().unwrap(), f64::from(want[i])),
            "{r}"
        );
    }
    assert_eq!(
        body["meta"]["tokens"]["input_tokens"],
        tokens.iter().sum::<usize>()
    );
    let (_, _, metrics) = http(addr, "GET", "/metrics", &[], b"");
    let metrics = String::from_utf8(metrics).unwrap();
    let count = metric(&metrics, "rerank_batch_tokens_count{model=\"rerank\"}");
    let at_most_limit = metric(
        &metrics,
        "rerank_batch_tokens_bucket{model=\"rerank\",le=\"64\"}",
    );
    let sum = metric(&metrics, "rerank_batch_tokens_sum{model=\"rerank\"}");
    assert_eq!(count as usize, calls, "{metrics}");
    assert_eq!(
        at_most_limit as usize, within,
        "only the long document's call is over the limit: {metrics}"
    );
    assert_eq!(within, calls - 1);
    assert_eq!(sum as usize, tokens.iter().sum::<usize>());
    assert_eq!(
        metric(&metrics, "rerank_batch_items_sum{model=\"rerank\"}") as usize,
        docs.len()
    );
}

fn colbert_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/colbert_tiny/bert")
}

fn splade_dir(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/splade_tiny")
        .join(case)
}

fn sparse_reference(case: &str, role: Role) -> Vec<rerank::embed::SparseVector> {
    SparseEncoder::builder(splade_dir(case))
        .options(ModelOptions::default().threads(2))
        .build()
        .unwrap()
        .encode(&DOCS, role)
        .unwrap()
}

/// Each `/embed_sparse` vector has the encoder's indices and values.
fn assert_sparse(body: &Value, want: &[rerank::embed::SparseVector]) {
    let rows = body.as_array().unwrap_or_else(|| panic!("{body}"));
    assert_eq!(rows.len(), want.len());
    for (row, w) in rows.iter().zip(want) {
        let entries = row.as_array().unwrap();
        let indices: Vec<u32> = entries
            .iter()
            .map(|e| e["index"].as_u64().unwrap() as u32)
            .collect();
        assert_eq!(indices, w.indices);
        for (e, v) in entries.iter().zip(&w.values) {
            let got = e["value"].as_f64().unwrap() as f32;
            assert!((got - v).abs() <= 1e-6 * v.abs().max(1.0), "{got} {v}");
        }
    }
}

/// A config with a ColBERT reranker, an embedder with query and document prompts and, in its
/// `serve` section, the inference-free SPLADE model (a static table for queries, an MLM for
/// documents), with queries as the default role of `/embed_sparse` and `/v1/embeddings`.
#[test]
fn embed_sparse_and_a_colbert_reranker_answer_as_the_library_does() {
    let dir = std::env::temp_dir().join(format!("rerank-serve-late-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("serve.yaml");
    let prompts =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/st_bert_tiny/cls_prompts");
    std::fs::write(
        &config,
        format!(
            "reranker: {{ type: colbert, model: {} }}\nembedder: {{ type: bert, model: {} }}\nserve:\n  sparse_model: {}\n  default_role: {{ embed_sparse: query, embeddings: query }}\n",
            colbert_dir().display(),
            prompts.display(),
            splade_dir("inference_free").display()
        ),
    )
    .unwrap();
    let Some(server) = start_with("late", Some(&config), &[], &[]) else {
        return;
    };
    let addr = server.addr.as_str();

    let queries = sparse_reference("inference_free", Role::Query);
    let documents = sparse_reference("inference_free", Role::Document);
    assert_ne!(queries, documents, "the two routes differ");
    let (status, body) = post(addr, "/embed_sparse", &json!({"inputs": DOCS}));
    assert_eq!(status, 200, "{body}");
    assert_sparse(&body, &queries);
    let (status, body) = post(
        addr,
        "/embed_sparse",
        &json!({"inputs": DOCS, "prompt_name": "document", "truncate": true}),
    );
    assert_eq!(status, 200, "{body}");
    assert_sparse(&body, &documents);
    let (status, body) = post(
        addr,
        "/embed_sparse",
        &json!({"inputs": DOCS[0], "prompt_name": "passage"}),
    );
    assert_eq!(status, 200, "{body}");
    assert_sparse(&body, &documents[..1]);
    let (status, body) = post(
        addr,
        "/embed_sparse",
        &json!({"inputs": "x", "prompt_name": "title"}),
    );
    assert_eq!(status, 422, "{body}");

    // The embedding routes' default roles: query on /v1/embeddings (the config's), document
    // on /embed; usage counts each text's prompt too.
    let embedder = load_embedder(&prompts, &ModelOptions::default().threads(2)).unwrap();
    let rows = |role| -> Vec<Vec<f32>> {
        let m = embedder.embed_as(&DOCS, role).unwrap();
        m.outer_iter().map(|r| r.to_vec()).collect()
    };
    let (as_query, as_document) = (rows(Role::Query), rows(Role::Document));
    assert_ne!(as_query, as_document, "the prompts differ");
    let (status, body) = post(addr, "/v1/embeddings", &json!({"input": DOCS}));
    assert_eq!(status, 200, "{body}");
    for (d, e) in body["data"].as_array().unwrap().iter().zip(&as_query) {
        let v: Vec<f64> = serde_json::from_value(d["embedding"].clone()).unwrap();
        assert!(v.iter().zip(e).all(|(a, b)| close(*a, f64::from(*b))));
    }
    let mut tokenizer = tokenizers::Tokenizer::from_file(prompts.join("tokenizer.json")).unwrap();
    tokenizer.with_padding(None);
    // The model computes at most max_seq_length tokens: with no sentence_bert_config.json,
    // the tokenizer's model_max_length (24, below the 512 positions).
    let tokenizer_config: Value = serde_json::from_str(
        &std::fs::read_to_string(prompts.join("tokenizer_config.json")).unwrap(),
    )
    .unwrap();
    let max_length = tokenizer_config["model_max_length"].as_u64().unwrap() as usize;
    let want: usize = DOCS
        .iter()
        .map(|d| {
            let n = tokenizer.encode(format!("query: {d}"), true).unwrap().len();
            n.min(max_length)
        })
        .sum();
    assert_eq!(body["usage"]["prompt_tokens"], want, "{body}");
    let (status, body) = post(addr, "/embed", &json!({"inputs": DOCS}));
    assert_eq!(status, 200, "{body}");
    for (row, e) in body.as_array().unwrap().iter().zip(&as_document) {
        let v: Vec<f64> = serde_json::from_value(row.clone()).unwrap();
        assert!(v
            .iter()
            .zip(e)
            .all(|(a, b)| (a - f64::from(*b)).abs() < 1e-5));
    }

    // MaxSim scores on every rerank route; raw scores are the same (no activation).
    let colbert =
        ColbertReranker::from_dir(colbert_dir(), &ModelOptions::default().threads(2)).unwrap();
    let want = colbert.score(&RerankQuery::new(QUERY), &DOCS).unwrap();
    for (route, body, key) in [
        (
            "/v2/rerank",
            json!({"query": QUERY, "documents": DOCS}),
            "results",
        ),
        (
            "/v1/rerank",
            json!({"query": QUERY, "documents": DOCS}),
            "results",
        ),
        ("/rerank", json!({"query": QUERY, "texts": DOCS}), ""),
        (
            "/rerank",
            json!({"query": QUERY, "texts": DOCS, "raw_scores": true}),
            "",
        ),
    ] {
        let (status, got) = post(addr, route, &body);
        assert_eq!(status, 200, "{route}: {got}");
        let rows = if key.is_empty() { &got } else { &got[key] };
        let rows = rows.as_array().unwrap();
        assert_eq!(rows.len(), DOCS.len());
        for r in rows {
            let i = r["index"].as_u64().unwrap() as usize;
            let score = r
                .get("relevance_score")
                .or_else(|| r.get("score"))
                .unwrap()
                .as_f64()
                .unwrap();
            assert!(
                (score - f64::from(want[i])).abs() <= 1e-5,
                "{route}: {score} vs {}",
                want[i]
            );
        }
    }
    // Usage: the query's tokens (padded to the query length) and the document's, per pair.
    let encoder = colbert.encoder();
    let query_tokens = encoder.token_ids(QUERY, Role::Query).unwrap().0.len();
    let want: usize = DOCS
        .iter()
        .map(|d| query_tokens + encoder.token_ids(d, Role::Document).unwrap().0.len())
        .sum();
    let (_, body) = post(
        addr,
        "/v1/rerank",
        &json!({"query": QUERY, "documents": DOCS}),
    );
    assert_eq!(body["usage"]["total_tokens"], want, "{body}");
    let (_, _, info) = http(addr, "GET", "/info", &[], b"");
    let info: Value = serde_json::from_slice(&info).unwrap();
    assert_eq!(info["reranker"], "colbert");
    assert_eq!(info["raw_scores"], true);
    assert_eq!(
        info["sparse"]["model"],
        splade_dir("inference_free").display().to_string()
    );
    assert_eq!(info["default_role"]["embed_sparse"], "query");
    assert_eq!(info["default_role"]["embed"], "document");
    assert_eq!(info["default_role"]["embeddings"], "query");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--sparse-model` names the sparse model without a `serve` section; `/embed_sparse` then
/// embeds as documents by default.
#[test]
fn the_sparse_model_flag_serves_embed_sparse() {
    let model = splade_dir("max").display().to_string();
    let Some(server) = start("sparse-flag", &["--sparse-model", model.as_str()], &[]) else {
        return;
    };
    let (status, body) = post(&server.addr, "/embed_sparse", &json!({"inputs": DOCS}));
    assert_eq!(status, 200, "{body}");
    assert_sparse(&body, &sparse_reference("max", Role::Document));
    // The other routes are unchanged.
    let (status, _) = post(
        &server.addr,
        "/v2/rerank",
        &json!({"query": QUERY, "documents": DOCS}),
    );
    assert_eq!(status, 200);
}

/// The `serve` section is checked as every section is (an unknown key, a role that is not
/// `query` or `document`, a missing model), and a sparse model that does not load stops the
/// server with a message naming it.
#[test]
fn a_wrong_serve_section_or_sparse_model_is_refused() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("rerank-serve-wrong-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |yaml: &str, flags: &[&str]| -> String {
        let config = dir.join("serve.yaml");
        std::fs::write(&config, yaml).unwrap();
        let out = Command::new(&cli)
            .args(["serve", "--config"])
            .arg(&config)
            .args(["--addr", "127.0.0.1:0"])
            .args(flags)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{yaml} {flags:?}");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let stderr = run("serve: { sparse_modle: x }\n", &[]);
    assert!(stderr.contains("serve.sparse_modle"), "{stderr}");
    let stderr = run("serve: { default_role: { embed: passage } }\n", &[]);
    assert!(
        stderr.contains("serve.default_role.embed") && stderr.contains("query"),
        "{stderr}"
    );
    let stderr = run("serve: { sparse_model: ./no-such-model }\n", &[]);
    assert!(stderr.contains("serve.sparse_model"), "{stderr}");
    let missing = dir.join("missing");
    let missing = missing.display().to_string();
    let stderr = run("{}\n", &["--sparse-model", missing.as_str()]);
    assert!(
        stderr.contains("the sparse model") && stderr.contains(&missing),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reranker without scores before an activation (the lexical one) refuses `raw_scores` with
/// a 422 that names it, and still answers without it.
#[test]
fn raw_scores_are_refused_when_the_reranker_has_none() {
    let dir = std::env::temp_dir().join(format!("rerank-serve-lexical-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("serve.yaml");
    std::fs::write(&config, "reranker: { type: lexical }\n").unwrap();
    let Some(server) = start_with("lexical", Some(&config), &[], &[]) else {
        return;
    };
    let addr = server.addr.as_str();
    let (status, body) = post(
        addr,
        "/rerank",
        &json!({"query": QUERY, "texts": DOCS, "raw_scores": true}),
    );
    assert_eq!(status, 422, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("raw_scores") && message.contains("lexical"),
        "{message}"
    );
    let (status, body) = post(addr, "/rerank", &json!({"query": QUERY, "texts": DOCS}));
    assert_eq!(status, 200, "{body}");
    // The lexical reranker counts no tokens: Cohere's and Jina's counts are left out.
    let (status, body) = post(
        addr,
        "/v2/rerank",
        &json!({"query": QUERY, "documents": DOCS}),
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        body.get("usage").is_none() && body["meta"].get("tokens").is_none(),
        "{body}"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An LLM reranker (here Qwen3-Reranker converted to sequence classification) answers TEI's
/// `raw_scores` with its logits `l_yes - l_no`, whose sigmoid is the default score, as the
/// library computes them.
#[test]
fn raw_scores_of_an_llm_reranker_are_its_logits() {
    let model = crate::seq_cls::fixture("qwen3");
    let dir = std::env::temp_dir().join(format!("rerank-serve-seq-cls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("serve.yaml");
    let yaml = format!("reranker: {{ type: model, model: {} }}\n", model.display());
    std::fs::write(&config, yaml).unwrap();
    let Some(server) = start_with("seq-cls", Some(&config), &[], &[]) else {
        return;
    };
    let addr = server.addr.as_str();
    let library = rerank::rerankers::qwen3::Qwen3Reranker::builder(&model)
        .options(ModelOptions::default().threads(2))
        .build()
        .unwrap()
        .score_with_logits(&RerankQuery::new(QUERY), &DOCS)
        .unwrap();
    let by_index = |ranks: &Value| -> Vec<f64> {
        let mut out = vec![f64::NAN; DOCS.len()];
        for r in ranks.as_array().unwrap() {
            out[r["index"].as_u64().unwrap() as usize] = r["score"].as_f64().unwrap();
        }
        out
    };
    for raw_scores in [true, false] {
        let request = json!({"query": QUERY, "texts": DOCS, "raw_scores": raw_scores});
        let (status, body) = post(addr, "/rerank", &request);
        assert_eq!(status, 200, "{body}");
        let got = by_index(&body);
        for (g, want) in got.iter().zip(&library) {
            let want = if raw_scores { want.logit } else { want.score };
            assert!(
                close(*g, f64::from(want)),
                "raw_scores {raw_scores}: {got:?} vs {library:?}"
            );
        }
    }
    let (status, _, info) = http(addr, "GET", "/info", &[], b"");
    assert_eq!(status, 200);
    let info: Value = serde_json::from_slice(&info).unwrap();
    assert_eq!(info["reranker"], "qwen3-reranker");
    assert_eq!(info["raw_scores"], true, "{info}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `POST /answer` reads `include_sources` (default true: the sources are listed; false leaves
/// them out, the answer's text unchanged); `/search` refuses the field. A question holding
/// personal data is a 400 on `/answer` (and `/search`) whose JSON error names the refusal and
/// the kind found, never the value, and the server keeps serving.
#[test]
fn answer_reads_include_sources_and_refuses_personal_data_with_400() {
    let Some(server) = start("answer", &[], &[]) else {
        return;
    };
    let addr = server.addr.as_str();
    let question = "how do vaccines train the immune system";
    let (status, listed) = post(addr, "/answer", &json!({"query": question}));
    assert_eq!(status, 200, "{listed}");
    let sources = listed["sources"].as_array().unwrap();
    assert!(!sources.is_empty(), "sources by default: {listed}");
    assert_eq!(sources[0]["id"], "d0", "{listed}");
    let (status, same) = post(
        addr,
        "/answer",
        &json!({"query": question, "include_sources": true}),
    );
    assert_eq!(status, 200, "{same}");
    assert_eq!(same["sources"], listed["sources"]);
    let (status, bare) = post(
        addr,
        "/answer",
        &json!({"query": question, "include_sources": false}),
    );
    assert_eq!(status, 200, "{bare}");
    assert_eq!(bare["sources"], json!([]), "{bare}");
    assert_eq!(bare["text"], listed["text"]);
    assert_eq!(bare["confidence"], listed["confidence"]);

    let (status, body) = post(
        addr,
        "/search",
        &json!({"query": question, "include_sources": false}),
    );
    assert_eq!(status, 422, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("include_sources and stream are fields of /answer"),
        "{body}"
    );

    let personal = "vaccines for jane.doe@example.com";
    for route in ["/answer", "/search"] {
        let (status, body) = post(addr, route, &json!({"query": personal}));
        assert_eq!(status, 400, "{route}: {body}");
        assert_eq!(body["error"]["reason"], "pii_refused", "{route}: {body}");
        assert_eq!(body["error"]["kinds"], json!(["email"]), "{route}: {body}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
        assert_eq!(body["error"]["code"], 400, "{body}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains("personal information"), "{body}");
        assert!(!body.to_string().contains("jane.doe"), "{body}");
    }
    let (status, body) = post(addr, "/answer", &json!({"query": question}));
    assert_eq!(status, 200, "still serving: {body}");
}

const CHAT_MODEL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/chat_decoders_tiny/mistral"
);

/// A server whose config's generator is the tiny Mistral chat model.
fn chat_server(name: &str, flags: &[&str], envs: &[(&str, &str)]) -> Option<Server> {
    let dir = std::env::temp_dir().join(format!("rerank-serve-{name}-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let corpus = dir.join("corpus.jsonl");
    std::fs::write(&corpus, json!({"id": "d0", "text": DOCS[0]}).to_string()).unwrap();
    let path = dir.join("serve.yaml");
    std::fs::write(
        &path,
        format!(
            "corpus: {}\nretriever: {{ type: bm25 }}\ngenerator: {{ type: local_chat, model: {CHAT_MODEL} }}\n",
            corpus.display()
        ),
    )
    .unwrap();
    let server = start_with(name, Some(&path), flags, envs);
    let _ = std::fs::remove_dir_all(&dir);
    server
}

/// A conversation with a system message (the Mistral template refuses one; the generator
/// folds it into the user's turn).
fn chat_messages() -> Vec<rerank::answer::Message> {
    use rerank::answer::{Message, Role};
    vec![
        Message::new(Role::System, "You answer in one short sentence."),
        Message::new(Role::User, "What does the borrow checker do in Rust?"),
    ]
}

/// What the library writes for [`chat_messages`], greedily, in at most `max` new tokens.
fn library_chat(max: usize, stop: &[&str]) -> rerank::answer::Generation {
    use rerank::Generator;
    let chat = rerank::answer::LocalChat::from_dir(CHAT_MODEL).unwrap();
    chat.generate(&rerank::answer::GenerationRequest {
        messages: chat_messages(),
        max_new_tokens: max,
        temperature: 0.0,
        stop: stop.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    })
    .unwrap()
}

/// The `data:` payloads of a server-sent-events body.
fn sse_data(body: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(body)
        .lines()
        .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
        .map(str::to_string)
        .collect()
}

#[test]
fn chat_completions_write_what_the_library_writes_whole_and_streamed() {
    let Some(server) = chat_server("chat", &[], &[]) else {
        return;
    };
    let reference = library_chat(24, &[]);
    let usage = reference.usage.unwrap();
    let request = json!({
        "model": "tiny-mistral",
        "messages": [
            {"role": "system", "content": "You answer in one short sentence."},
            {"role": "user", "content": [{"type": "text", "text": "What does the borrow checker do"}, {"type": "text", "text": " in Rust?"}]}
        ],
        "max_tokens": 24,
        "temperature": 0,
    });
    let (status, body) = post(&server.addr, "/v1/chat/completions", &request);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "tiny-mistral");
    assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"));
    let choice = &body["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], reference.text.as_str());
    assert_eq!(
        choice["finish_reason"],
        reference.finish_reason.as_deref().unwrap()
    );
    assert_eq!(body["usage"]["prompt_tokens"], usage.prompt_tokens);
    assert_eq!(body["usage"]["completion_tokens"], usage.completion_tokens);
    assert_eq!(
        body["usage"]["total_tokens"],
        usage.prompt_tokens + usage.completion_tokens
    );

    // Streamed: the role first, pieces that add up to the same text, the finish reason, the
    // usage chunk asked for, then [DONE].
    let mut streamed = request.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let (status, head, raw) = http(
        &server.addr,
        "POST",
        "/v1/chat/completions",
        &["Content-Type: application/json"],
        streamed.to_string().as_bytes(),
    );
    assert_eq!(status, 200);
    assert!(
        head.to_ascii_lowercase().contains("text/event-stream"),
        "{head}"
    );
    let data = sse_data(&raw);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{data:?}");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    assert!(chunks.iter().all(|c| c["id"] == chunks[0]["id"]));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, reference.text);
    let pieces = chunks
        .iter()
        .filter(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
        })
        .count();
    assert!(pieces > 1, "the text came in {pieces} piece(s)");
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(
        finish["choices"][0]["finish_reason"],
        reference.finish_reason.as_deref().unwrap()
    );
    let last = &chunks[chunks.len() - 1];
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["completion_tokens"], usage.completion_tokens);

    // A stop sequence cuts the text where it first appears, streamed or not.
    let stop: String = reference.text.chars().skip(6).take(3).collect();
    let cut = library_chat(24, &[&stop]);
    assert!(cut.text.len() < reference.text.len());
    let mut stopped = request.clone();
    stopped["stop"] = json!(stop);
    let (status, body) = post(&server.addr, "/v1/chat/completions", &stopped);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], cut.text.as_str());
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    stopped["stream"] = json!(true);
    let (_, _, raw) = http(
        &server.addr,
        "POST",
        "/v1/chat/completions",
        &["Content-Type: application/json"],
        stopped.to_string().as_bytes(),
    );
    let text: String = sse_data(&raw)
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(text, cut.text);

    // What the server does not do is a 422 naming it, and it keeps serving.
    let refused: [(Value, &str); 6] = [
        (json!({"n": 2}), "n:"),
        (json!({"tools": [{"type": "function"}]}), "tools"),
        (json!({"messages": []}), "messages is empty"),
        (
            json!({"messages": [{"role": "tool", "content": "x"}]}),
            "role \"tool\"",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
            "\"image_url\" content part",
        ),
        (
            json!({"response_format": {"type": "json_object"}}),
            "json_object",
        ),
    ];
    for (edit, wanted) in refused {
        let mut bad = request.clone();
        for (k, v) in edit.as_object().unwrap() {
            bad[k] = v.clone();
        }
        let (status, body) = post(&server.addr, "/v1/chat/completions", &bad);
        assert_eq!(status, 422, "{edit}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(wanted), "{edit}: {message}");
    }
    let (status, _) = post(&server.addr, "/v1/chat/completions", &request);
    assert_eq!(status, 200);

    // The model list clients read first names the generator by its directory.
    let (status, _, list) = http(&server.addr, "GET", "/v1/models", &[], b"");
    assert_eq!(status, 200);
    let list: Value = serde_json::from_slice(&list).unwrap();
    assert_eq!(list["object"], "list");
    assert_eq!(list["data"][0]["id"], "mistral");
    assert_eq!(list["data"][0]["object"], "model");
    let (status, _, one) = http(&server.addr, "GET", "/v1/models/mistral", &[], b"");
    assert_eq!(status, 200);
    let one: Value = serde_json::from_slice(&one).unwrap();
    assert_eq!(one, list["data"][0]);
    let (status, _, _) = http(&server.addr, "GET", "/v1/models/gpt-4", &[], b"");
    assert_eq!(status, 404);
}

#[test]
fn chat_completions_need_a_generator_that_writes() {
    let Some(server) = start("nochat", &[], &[]) else {
        return;
    };
    let (status, body) = post(
        &server.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(status, 501, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("generator"));
}

#[test]
fn the_official_openai_sdk_chats_with_the_server() {
    let Some(python) = clients_python() else {
        return;
    };
    let Some(server) = chat_server(
        "chat-sdk",
        &["--api-key-env", "RERANK_TEST_KEY"],
        &[("RERANK_TEST_KEY", "k")],
    ) else {
        return;
    };
    let reference = library_chat(20, &[]);
    let stop: String = reference.text.chars().skip(4).take(2).collect();
    let cut = library_chat(20, &[&stop]);
    let request = server.dir.join("chat.json");
    std::fs::create_dir_all(&server.dir).unwrap();
    let messages: Vec<Value> = chat_messages()
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect();
    std::fs::write(
        &request,
        json!({"messages": messages, "max_tokens": 20, "stop": [stop]}).to_string(),
    )
    .unwrap();
    let got = run_client(&python, "chat_clients.py", &server, &request);
    let usage = reference.usage.unwrap();
    let finish = reference.finish_reason.as_deref().unwrap();
    assert_eq!(got["whole"]["content"], reference.text.as_str());
    assert_eq!(got["whole"]["role"], "assistant");
    assert_eq!(got["whole"]["finish_reason"], finish);
    assert_eq!(got["whole"]["usage"]["prompt_tokens"], usage.prompt_tokens);
    let pieces: Vec<String> = serde_json::from_value(got["streamed"]["pieces"].clone()).unwrap();
    assert_eq!(pieces.concat(), reference.text);
    assert!(pieces.len() > 1, "{pieces:?}");
    assert_eq!(got["streamed"]["finish_reason"], finish);
    assert_eq!(
        got["streamed"]["usage"]["completion_tokens"],
        usage.completion_tokens
    );
    assert_eq!(got["stopped"]["content"], cut.text.as_str());
    assert_eq!(got["stopped"]["finish_reason"], "stop");
    assert_eq!(got["models"], json!(["mistral"]));
}

/// The `(event, data)` pairs of a server-sent-events body (`message` when unnamed).
fn sse_events(body: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(body);
    let mut events = Vec::new();
    for block in text.split("\n\n") {
        let mut name = "message".to_string();
        let mut data = None;
        for line in block.lines() {
            if let Some(n) = line.strip_prefix("event:") {
                name = n.trim().to_string();
            } else if let Some(d) = line.strip_prefix("data:") {
                data = Some(d.trim_start().to_string());
            }
        }
        if let Some(data) = data {
            events.push((name, data));
        }
    }
    events
}

#[test]
fn answers_stream_as_server_sent_events_that_add_up_to_the_answer() {
    let Some(server) = chat_server("answer-stream", &[], &[]) else {
        return;
    };
    let (status, whole) = post(&server.addr, "/answer", &json!({"query": QUERY}));
    assert_eq!(status, 200, "{whole}");
    let (status, head, raw) = http(
        &server.addr,
        "POST",
        "/answer",
        &["Content-Type: application/json"],
        json!({"query": QUERY, "stream": true})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(status, 200);
    assert!(
        head.to_ascii_lowercase().contains("text/event-stream"),
        "{head}"
    );
    let events = sse_events(&raw);
    let (last, answer) = events.last().unwrap();
    assert_eq!(last, "answer", "{events:?}");
    let answer: Value = serde_json::from_str(answer).unwrap();
    let deltas: Vec<String> = events[..events.len() - 1]
        .iter()
        .map(|(name, data)| {
            assert_eq!(name, "delta");
            let v: Value = serde_json::from_str(data).unwrap();
            v["text"].as_str().unwrap().to_string()
        })
        .collect();
    assert!(deltas.len() > 1, "{deltas:?}");
    assert_eq!(deltas.concat(), answer["text"].as_str().unwrap());
    assert_eq!(answer["text"], whole["text"]);
    assert_eq!(answer["generator"], "local-chat");
}

#[cfg(feature = "http")]
#[test]
fn the_openai_compatible_generator_streams_from_the_server() {
    use std::ops::ControlFlow;
    let Some(server) = chat_server("chat-proxy", &[], &[]) else {
        return;
    };
    let reference = library_chat(20, &[]);
    let generator = rerank::answer::OpenAiCompatible::builder()
        .base_url(format!("http://{}/v1", server.addr))
        .model("tiny-mistral")
        .api_key("unused")
        .build()
        .unwrap();
    let request = rerank::answer::GenerationRequest {
        messages: chat_messages(),
        max_new_tokens: 20,
        temperature: 0.0,
        ..Default::default()
    };
    use rerank::Generator;
    let whole = generator.generate(&request).unwrap();
    assert_eq!(whole, reference);
    let mut pieces = Vec::new();
    let streamed = generator
        .generate_stream(&request, &mut |p| {
            pieces.push(p.to_string());
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(streamed, reference);
    assert_eq!(pieces.concat(), reference.text);
    assert!(pieces.len() > 1, "{pieces:?}");
}
