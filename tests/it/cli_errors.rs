//! The `rerank` command-line example (`examples/rerank/`), run as a user runs it: what its
//! errors say (the real problem and the next step) and what it writes to stderr.
#![cfg(feature = "sqlite")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const HANDBOOK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/handbook.jsonl");

/// The example's binary (see [`crate::common::rerank_cli`]); these tests need it.
fn rerank_bin() -> PathBuf {
    crate::common::rerank_cli().expect("the rerank example is built by `cargo test`")
}

/// Runs `rerank ARGS` in `dir` (the crate's folder when `None`), stdin closed; stdout and
/// stderr are pipes, not terminals.
fn run_in(dir: Option<&Path>, args: &[&str]) -> Output {
    Command::new(rerank_bin())
        .args(args)
        .current_dir(dir.unwrap_or(Path::new(env!("CARGO_MANIFEST_DIR"))))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("the rerank example runs")
}

/// Where the tests' models are: `$RERANK_MODELS_DIR`, else `models/` in the checkout.
fn models_dir() -> PathBuf {
    std::env::var_os("RERANK_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/models")))
}

/// Runs `rerank ARGS`, which must fail, and returns its stderr.
fn fails(args: &[&str]) -> String {
    let out = run_in(None, args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "rerank {args:?} succeeded:\n{stderr}"
    );
    stderr
}

/// A scratch folder under the target directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("cli_{tag}_{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn file(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn an_unknown_retriever_is_refused_with_the_valid_values() {
    for command in ["search", "answer"] {
        let e = fails(&[
            command,
            "--corpus",
            HANDBOOK,
            "--retriever",
            "semantic",
            "leave",
        ]);
        assert!(
            e.contains("invalid value 'semantic' for '--retriever <RETRIEVER>'"),
            "{e}"
        );
        assert!(e.contains("[possible values: bm25, dense, hybrid]"), "{e}");
        assert!(!e.contains("--model"), "{e}");
    }
    let e = fails(&["beir", "--data", HANDBOOK, "--retriever", "semantic"]);
    assert!(e.contains("[possible values: bm25, dense, hybrid]"), "{e}");
}

#[test]
fn the_flags_that_need_a_model_are_the_ones_given() {
    let corpus = ["search", "--corpus", HANDBOOK];
    let cases: [(&[&str], &str); 3] = [
        (
            &["--retriever", "dense"],
            "error: --retriever dense needs --embedder MODEL",
        ),
        (
            &["--cache", "redis://127.0.0.1:1"],
            "error: --cache needs --embedder MODEL",
        ),
        (
            &[
                "--retriever",
                "hybrid",
                "--vector-store",
                "milvus://127.0.0.1:1/notes",
                "--cache",
                "redis://127.0.0.1:1",
            ],
            "error: --retriever hybrid, --vector-store and --cache need --embedder MODEL",
        ),
    ];
    for (flags, want) in cases {
        let args: Vec<&str> = corpus
            .iter()
            .chain(flags)
            .copied()
            .chain(["leave"])
            .collect();
        let e = fails(&args);
        assert!(e.starts_with(want), "{args:?}:\n{e}");
        assert!(e.contains("scripts/fetch_models.sh"), "{e}");
        for flag in ["--retriever", "--vector-store", "--cache"] {
            assert_eq!(
                e.contains(flag),
                flags.contains(&flag),
                "{flag} in {args:?}:\n{e}"
            );
        }
    }
    // The retriever's value is checked whatever its case, as before.
    let out = run_in(
        None,
        &[
            "search",
            "--corpus",
            HANDBOOK,
            "--retriever",
            "BM25",
            "leave",
        ],
    );
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn a_corpus_that_is_not_jsonl_names_the_file_the_line_and_the_format() {
    let scratch = Scratch::new("corpus");
    let csv = scratch.file("notes.csv", "id,text\nd1,annual leave\n");
    for command in ["search", "answer"] {
        let e = fails(&[command, "--corpus", &csv, "leave"]);
        assert!(
            e.contains(&format!(
                "could not parse {csv}:1: expected value at column 1; "
            )),
            "{e}"
        );
        assert!(
            e.contains("one JSON object per line with \"id\" and \"text\""),
            "{e}"
        );
    }
    let db = scratch.0.join("notes.db").display().to_string();
    let e = fails(&["index", "--db", &db, "--corpus", &csv]);
    assert!(e.contains(&format!("{csv}:1:")), "{e}");
}

#[cfg(feature = "models")]
#[test]
fn a_missing_model_directory_says_so_and_where_to_get_one() {
    let scratch = Scratch::new("model");
    let input = scratch.file("pairs.jsonl", "{\"query\": \"q\", \"document\": \"d\"}\n");
    let missing = scratch.0.join("no-such-model").display().to_string();
    let empty = scratch.0.display().to_string();
    for (args, problem) in [
        (
            vec!["score", "--model", &missing, "--input", &input],
            format!("{missing}: does not exist; {empty} holds no model folder ("),
        ),
        (
            vec!["score", "--model", &empty, "--input", &input],
            format!("{empty}: has no config.json ("),
        ),
        (
            vec!["score", "--model", &input, "--input", &input],
            format!("{input}: is not a directory ("),
        ),
        (
            vec![
                "search",
                "--corpus",
                HANDBOOK,
                "--reranker",
                &missing,
                "leave",
            ],
            format!("{missing}: does not exist; {empty} holds no model folder ("),
        ),
    ] {
        let e = fails(&args);
        assert!(e.contains(&problem), "{args:?}:\n{e}");
        assert!(!e.contains("not a model directory"), "{e}");
        assert!(e.contains("`scripts/fetch_models.sh`"), "{e}");
        assert!(e.contains("`scripts/fetch_reranker.sh NAME`"), "{e}");
    }
}

/// One resolver for every command: a hub id whose folder the fetch scripts made under
/// `$RERANK_MODELS_DIR` is that folder (for `embed` and `score` alike; `score` said "does not
/// exist" before); a mistyped local path says it does not exist and names the nearest folders
/// (it became a download that failed on DNS before); a cross-encoder is no embedder.
#[cfg(feature = "models")]
#[test]
fn models_resolve_the_same_way_in_every_command() {
    let base = models_dir();
    if !base.join("all-MiniLM-L6-v2/model.safetensors").is_file() {
        crate::common::skip(&format!(
            "skipping: {} has no all-MiniLM-L6-v2",
            base.display()
        ));
        return;
    }
    let scratch = Scratch::new("resolve");
    let texts = scratch.file("texts.jsonl", "{\"text\": \"annual leave\"}\n");
    let pairs = scratch.file(
        "pairs.jsonl",
        "{\"query\": \"leave\", \"document\": \"annual leave\"}\n",
    );
    let run_with_models = |args: &[&str]| {
        Command::new(rerank_bin())
            .args(args)
            .env("RERANK_MODELS_DIR", &base)
            .env("HF_ENDPOINT", "http://127.0.0.1:9")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let by_id = "sentence-transformers/all-MiniLM-L6-v2";
    for args in [
        &["embed", "--model", by_id, "--input", &texts][..],
        &["score", "--model", by_id, "--input", &pairs][..],
    ] {
        let out = run_with_models(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    }
    // `score --input -` reads stdin, as `embed --input -` does (it failed on the path `-`).
    let mut child = Command::new(rerank_bin())
        .args(["score", "--model", by_id, "--input", "-"])
        .env("RERANK_MODELS_DIR", &base)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    let text = std::fs::read_to_string(&pairs).unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let piped = child.wait_with_output().unwrap();
    assert!(
        piped.status.success(),
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );
    let from_file = run_with_models(&["score", "--model", by_id, "--input", &pairs]);
    assert_eq!(piped.stdout, from_file.stdout);
    let typo = base.join("all-MiniLM-L6").display().to_string();
    let e = fails(&["embed", "--model", &typo, "--input", &texts]);
    assert!(
        e.contains("all-MiniLM-L6: does not exist") && e.contains("nearest in"),
        "{e}"
    );
    // A hub id that is nowhere: the failed download says how to get it without network.
    let out = run_with_models(&[
        "embed",
        "--model",
        "nobody/no-such-model",
        "--input",
        &texts,
    ]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        e.contains("scripts/fetch_model.sh nobody/no-such-model") && e.contains("HF_HUB_OFFLINE"),
        "{e}"
    );
}

/// `score` takes an embedder directory, as `search --reranker` does: the score (and the
/// logit) is the embeddings' cosine, the one `load_reranker`'s reranker gives.
#[cfg(feature = "models")]
#[test]
fn score_takes_an_embedder_directory_as_search_reranker_does() {
    use rerank::models::ModelOptions;
    use rerank::rerankers::{load_reranker, RerankQuery};

    let model = models_dir().join("all-MiniLM-L6-v2");
    if !model.join("model.safetensors").is_file() {
        crate::common::skip(&format!("skipping: {} has no model", model.display()));
        return;
    }
    let pairs = [
        (
            "how many days of annual leave",
            "Employees get 25 days of annual leave a year.",
        ),
        ("how do vaccines work", "Vaccines train the immune system."),
        (
            "how many days of annual leave",
            "The cafeteria opens at eight.",
        ),
    ];
    let scratch = Scratch::new("score");
    let lines: String = pairs
        .iter()
        .map(|(q, d)| format!("{}\n", serde_json::json!({"query": q, "document": d})))
        .collect();
    let input = scratch.file("pairs.jsonl", &lines);
    let model_arg = model.display().to_string();
    let out = run_in(None, &["score", "--model", &model_arg, "--input", &input]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Vec<(f64, f64)> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["score"].as_f64().unwrap(), v["logit"].as_f64().unwrap())
        })
        .collect();
    assert_eq!(got.len(), pairs.len(), "{got:?}");
    let reranker = load_reranker(&model, &ModelOptions::default()).unwrap();
    for ((query, doc), (score, logit)) in pairs.iter().zip(&got) {
        assert_eq!(score, logit);
        let want = reranker.score(&RerankQuery::new(*query), &[doc]).unwrap()[0];
        assert!(
            (score - f64::from(want)).abs() < 1e-4,
            "{query}: {score} vs {want}"
        );
    }
    // The leave policy answers the leave question better than the cafeteria does.
    assert!(got[0].0 > got[2].0 + 0.2, "{got:?}");
}

#[cfg(feature = "redis")]
#[test]
fn a_redis_that_is_down_is_named_with_what_to_check() {
    // A port nothing listens on: one the system just handed out and took back.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://reader:s3cret@127.0.0.1:{port}/0");
    let e = fails(&["cache", "stats", "--cache", &url]);
    assert!(
        e.contains(&format!(
            "redis://reader:***@127.0.0.1:{port}/0 is unreachable: "
        )),
        "{e}"
    );
    assert!(
        e.contains(&format!("is redis-server running at 127.0.0.1:{port}?")),
        "{e}"
    );
    assert!(e.contains("`scripts/redis.sh start PORT DIR`"), "{e}");
    assert!(!e.contains("s3cret"), "{e}");
}

/// A fake Redis on loopback: answers the client's setup and the first `PING`, then hands
/// every later read's connection to `then` (which writes what it likes); returns its URL.
#[cfg(feature = "redis")]
fn fake_redis(then: fn(&mut std::net::TcpStream)) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            std::thread::spawn(move || {
                let (mut buf, mut answered) = ([0u8; 4096], false);
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    if answered {
                        then(&mut stream);
                        continue;
                    }
                    let data = &buf[..n];
                    // Any CLIENT SETINFO commands, then the PING.
                    let setinfo = data.windows(7).filter(|w| w == b"SETINFO").count();
                    let mut reply = b"+OK\r\n".repeat(setinfo);
                    if data.windows(4).any(|w| w == b"PING") {
                        reply.extend_from_slice(b"+PONG\r\n");
                        answered = true;
                    }
                    let _ = stream.write_all(&reply);
                }
            });
        }
    });
    format!("redis://127.0.0.1:{port}/0")
}

/// A Redis that answers the connection and the PING, then nothing: `cache clear` and
/// `cache invalidate` fail naming the store (they printed `"cleared": true` and
/// `"removed": 0`, exit 0, before).
#[cfg(feature = "redis")]
#[test]
fn a_redis_that_stops_answering_fails_cache_clear_and_invalidate() {
    let url = fake_redis(|_| {});
    for args in [
        &["cache", "clear", "--cache", url.as_str()][..],
        &[
            "cache",
            "invalidate",
            "--tag",
            "act:x",
            "--cache",
            url.as_str(),
        ][..],
    ] {
        let e = fails(args);
        assert!(e.contains("redis cache store failed"), "{args:?}: {e}");
    }
}

/// A Redis that answers the PING, then streams an endless array to the next command: the
/// reply is cut at its byte bound or its deadline and the command fails in well under a
/// second (the client grew by about 280 MB/s with no end before).
#[cfg(feature = "redis")]
#[test]
fn a_redis_that_streams_an_endless_reply_is_cut_off() {
    let url = fake_redis(|stream| {
        use std::io::Write;
        let element = b"$1\r\nx\r\n".repeat(4096);
        let _ = stream.write_all(b"*1000000000\r\n");
        while stream.write_all(&element).is_ok() {}
    });
    for args in [
        &["cache", "stats", "--cache", url.as_str()][..],
        &["cache", "clear", "--cache", url.as_str()][..],
    ] {
        let t = std::time::Instant::now();
        let e = fails(args);
        assert!(e.contains("redis cache store failed"), "{args:?}: {e}");
        assert!(
            e.contains("reply longer than") || e.contains("not complete within the timeout"),
            "{args:?}: {e}"
        );
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "{:?}",
            t.elapsed()
        );
    }
}

/// Log lines written to a pipe carry no colour codes (a terminal still gets them).
#[test]
fn logs_to_a_pipe_have_no_escape_codes() {
    let scratch = Scratch::new("logs");
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/configs/legal_router.yaml"
    );
    // The cache file lands in the scratch folder (the working directory).
    let out = run_in(
        Some(&scratch.0),
        &[
            "query",
            "--config",
            config,
            "--log-level",
            "debug",
            "Compare the Delhi High Court and the Bombay High Court on bail",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("DEBUG"), "no log line:\n{stderr}");
    assert!(!stderr.contains('\u{1b}'), "escape codes in:\n{stderr:?}");
}
