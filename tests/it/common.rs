//! What the test modules share.

/// Says why a test cannot run here (a fixture, a dataset or a model is missing) and returns,
/// so the caller can `return` early. With `RERANK_REQUIRE_FIXTURES=1` (set by `.ci/run`) it
/// fails the test instead: in CI a missing input is a failure, never a silent pass.
pub fn skip(why: &str) {
    if std::env::var_os("RERANK_REQUIRE_FIXTURES").is_some_and(|v| v == "1") {
        panic!("RERANK_REQUIRE_FIXTURES=1 and a test input is missing: {why}");
    }
    eprintln!("{why}");
}

/// The (instruction, query, document) triples of a Qwen3 fixture's `scores.json` cases.
pub fn qwen3_score_inputs(
    cases: &[serde_json::Value],
) -> Vec<rerank::rerankers::qwen3::ScoreInput<'_>> {
    cases
        .iter()
        .map(|c| rerank::rerankers::qwen3::ScoreInput {
            instruction: c["instruction"].as_str(),
            query: c["query"].as_str().unwrap(),
            document: c["document"].as_str().unwrap(),
        })
        .collect()
}

/// Reads a TOML file of `[[case]]` tables under `tests/data/`.
pub fn cases<T: serde::de::DeserializeOwned>(file: &str) -> Vec<T> {
    #[derive(serde::Deserialize)]
    struct Cases<T> {
        case: Vec<T>,
    }
    let path = format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let cases: Cases<T> = toml::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert!(!cases.case.is_empty(), "{path} has no [[case]]");
    cases.case
}

/// The `rerank` command-line example: the one `RERANK_BIN` names, else the one `cargo test`
/// builds next to the test binary (`target/<profile>/examples/rerank`; `--test it` alone does
/// not build it). `None`, through [`skip`], when there is none.
pub fn rerank_cli() -> Option<std::path::PathBuf> {
    if let Some(bin) = std::env::var_os("RERANK_BIN") {
        return Some(bin.into());
    }
    let exe = std::env::current_exe().ok()?;
    let name = format!("rerank{}", std::env::consts::EXE_SUFFIX);
    let bin = exe.parent()?.parent()?.join("examples").join(name);
    if bin.is_file() {
        Some(bin)
    } else {
        skip(&format!(
            "skipping: {} not built (cargo test builds it; --test it alone does not)",
            bin.display()
        ));
        None
    }
}

/// A loopback server in the hub's URL layout: `GET /{repo}/resolve/main/{file}` serves
/// `dir/{file}` with the headers the hub's clients read (`x-repo-commit`, `etag`, and
/// `Range` answered with `206` + `Content-Range`, as `hf-hub` asks for a file's size); any
/// other path is a 404. `GET /stop` (see [`stop_hub`]) ends it; the handle then returns how
/// many files it served.
pub fn hub_server(
    repo: &'static str,
    dir: std::path::PathBuf,
) -> (String, std::thread::JoinHandle<usize>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = std::thread::spawn(move || {
        let mut served = 0;
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            let mut range: Option<(usize, Option<usize>)> = None;
            let mut header = String::new();
            while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
                let lower = header.to_ascii_lowercase();
                if let Some(spec) = lower.trim().strip_prefix("range: bytes=") {
                    let (a, b) = spec.split_once('-').unwrap_or((spec, ""));
                    range = a.parse().ok().map(|a| (a, b.parse().ok()));
                }
                header.clear();
            }
            let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
            if path == "/stop" {
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
                break;
            }
            let prefix = format!("/{repo}/resolve/main/");
            let file = path
                .strip_prefix(&prefix)
                .filter(|f| !f.contains(".."))
                .map(|f| dir.join(f));
            let Some(body) = file.and_then(|f| std::fs::read(f).ok()) else {
                let _ = stream.write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
                continue;
            };
            served += 1;
            let size = body.len();
            let etag = format!("\"{size}-{}\"", path.len());
            let commit = "0123456789abcdef0123456789abcdef01234567";
            let (status, part, extra) = match range {
                Some((start, end)) if start < size.max(1) => {
                    let end = end
                        .unwrap_or(size.saturating_sub(1))
                        .min(size.saturating_sub(1));
                    let part = if size == 0 {
                        &body[..]
                    } else {
                        &body[start..=end]
                    };
                    let extra = format!("Content-Range: bytes {start}-{end}/{size}\r\n");
                    ("206 Partial Content", part, extra)
                }
                _ => ("200 OK", &body[..], String::new()),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\n{extra}x-repo-commit: {commit}\r\n\
                 etag: {etag}\r\nConnection: close\r\n\r\n",
                part.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(part);
        }
        served
    });
    (format!("http://{addr}"), handle)
}

/// Ends a [`hub_server`].
pub fn stop_hub(base: &str) {
    use std::io::Write;
    let addr = base.trim_start_matches("http://");
    if let Ok(mut s) = std::net::TcpStream::connect(addr) {
        let _ = s.write_all(b"GET /stop HTTP/1.1\r\nHost: x\r\n\r\n");
    }
}

/// The extractive generator, counting its calls in the shared counter (and, like it, writing
/// nothing freely): how a test sees that an answer came from a cache.
pub struct CountingGenerator(pub std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl CountingGenerator {
    /// The pipeline `config` builds, with a counting generator in place of its own, and the
    /// counter.
    pub fn pipeline(
        config: &rerank::pipeline::PipelineConfig,
    ) -> (
        rerank::Pipeline,
        std::sync::Arc<std::sync::atomic::AtomicUsize>,
    ) {
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let pipeline = config
            .builder(Vec::new())
            .unwrap()
            .generator(CountingGenerator(calls.clone()))
            .build()
            .unwrap();
        (pipeline, calls)
    }
}

impl rerank::Generator for CountingGenerator {
    fn generate(
        &self,
        request: &rerank::answer::GenerationRequest,
    ) -> rerank::Result<rerank::answer::Generation> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        rerank::Extractive::default().generate(request)
    }
    fn writes_freely(&self) -> bool {
        false
    }
}

/// A JSON list of token ids (a fixture's `input_ids`, `greedy_new_ids`, ...).
#[allow(dead_code)]
pub fn u32s(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Copies the folder `from`, subfolders included, into `to` (a model directory a test edits).
#[allow(dead_code)]
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The JSON a finished command printed on stdout, after checking it succeeded (its stderr is
/// the failure message).
pub fn json_output(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs `rerank score --reranker MODEL` (with `extra` flags, two threads) on `lines`, each a
/// JSON object such as `{"query", "document"}` written to a scratch file, and returns each
/// output line's (`score`, `logit`); the command must succeed.
pub fn cli_score(
    bin: &std::path::Path,
    model: &std::path::Path,
    lines: &[serde_json::Value],
    extra: &[&str],
) -> Vec<(f64, f64)> {
    let dir = std::env::temp_dir().join(format!(
        "rerank-cli-score-{}-{}",
        std::process::id(),
        SCRATCH.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("pairs.jsonl");
    let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    std::fs::write(&input, text.join("\n")).unwrap();
    let out = std::process::Command::new(bin)
        .args(["score", "--threads", "2", "--reranker"])
        .arg(model)
        .arg("--input")
        .arg(&input)
        .args(extra)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", model.display());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["score"].as_f64().unwrap(), v["logit"].as_f64().unwrap())
        })
        .collect()
}

static SCRATCH: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Writes `texts` to `path` as JSONL, one `{"text": ...}` a line (the CLI's `--input`).
pub fn write_texts_jsonl(path: &std::path::Path, texts: &[impl AsRef<str>]) {
    let lines: Vec<String> = texts
        .iter()
        .map(|t| serde_json::json!({ "text": t.as_ref() }).to_string())
        .collect();
    std::fs::write(path, lines.join("\n")).unwrap();
}

/// `rerank embed --model NAME --role query` with `env`, one JSON line per text.
pub fn cli_embed(
    bin: &std::path::Path,
    model: &str,
    input: &std::path::Path,
    env: &[(&str, &str)],
) -> Vec<Vec<f32>> {
    let mut cmd = std::process::Command::new(bin);
    cmd.args([
        "embed",
        "--model",
        model,
        "--role",
        "query",
        "--threads",
        "1",
    ])
    .arg("--input")
    .arg(input);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{model}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            serde_json::from_value(v["embedding"].clone()).unwrap()
        })
        .collect()
}
