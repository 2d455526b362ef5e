//! The command-line example (`examples/rerank/`) as a user runs it: what it prints and what it
//! leaves on disk. `cargo test` builds the example beside the test binary.
#![cfg(feature = "sqlite")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const HANDBOOK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/handbook.jsonl");

fn run(cli: &Path, args: &[&str]) -> Output {
    Command::new(cli)
        .args(args)
        .env("RUST_LOG", "off")
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[cfg(feature = "models")]
#[test]
fn search_reranks_a_short_list_and_says_when_the_option_skips_it() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let model = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/fixtures/ce_tiny_a/model"
    );
    if !Path::new(model).join("model.safetensors").is_file() {
        crate::common::skip(&format!("skipping: {model} not found"));
        return;
    }
    let query = "how do I roll back a failed deployment";
    let base = [
        "search",
        "--corpus",
        HANDBOOK,
        "--reranker",
        model,
        "--json",
    ];
    let out = run(&cli, &[&base[..], &[query]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    // Stage 1 finds three candidates, fewer than the default top_k of 10: all are reranked.
    assert_eq!(json["candidates"], 3);
    assert_eq!(json["reranked"], true);
    assert_eq!(json["scorer"], "cross-encoder");
    assert!(json["stage2_skipped"].is_null());
    let hits = json["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 3);
    assert!(hits.iter().all(|h| h["rerank_score"].is_number()));
    let scores: Vec<f64> = hits.iter().map(|h| h["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");

    let skip = [&base[..], &["--skip-rerank-within-top-k", query]].concat();
    let json: serde_json::Value = serde_json::from_str(&stdout(&run(&cli, &skip))).unwrap();
    assert_eq!(json["reranked"], false);
    assert_eq!(json["scorer"], "stage1");
    let why = json["stage2_skipped"].as_str().unwrap();
    assert!(
        why.contains("3 candidates") && why.contains("top_k 10"),
        "{why}"
    );

    // The table says it in words.
    let table: Vec<&str> = skip.iter().copied().filter(|a| *a != "--json").collect();
    let text = stdout(&run(&cli, &table));
    assert!(
        text.contains("stage 2 did not rerank: 3 candidates"),
        "{text}"
    );
}

/// A temporary store path; the file and its side files are removed on drop.
struct TempDb(PathBuf);

impl TempDb {
    fn new(name: &str) -> Self {
        let db = TempDb(
            std::env::temp_dir().join(format!("rerank-cli-{name}-{}.db", std::process::id())),
        );
        db.clean();
        db
    }
    fn side(&self, suffix: &str) -> PathBuf {
        PathBuf::from(format!("{}{suffix}", self.0.display()))
    }
    fn clean(&self) {
        for suffix in ["", "-wal", "-shm", "-lock"] {
            let _ = std::fs::remove_file(self.side(suffix));
        }
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        self.clean();
    }
}

/// One `index` run at a time per store: while another run holds the store's writer lock
/// (here this test, through the library), `rerank index` fails at once saying so and writes
/// nothing; once it is released, the run goes through. (Two runs with different corpora
/// both succeeded before, leaving a mix of the two.)
#[test]
fn a_second_index_run_on_a_store_fails_while_one_writes() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let db = TempDb::new("lock");
    let dbs = db.0.display().to_string();
    let store = rerank::Store::open(&db.0).unwrap();
    let other_handle = rerank::Store::open(&db.0).unwrap();
    let held = store.lock_writer().unwrap();
    let e = other_handle.lock_writer().unwrap_err().to_string();
    assert!(e.contains("being written by another run"), "{e}");
    let out = run(&cli, &["index", "--db", &dbs, "--corpus", HANDBOOK]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("being written by another run"), "{err}");
    assert_eq!(store.len().unwrap(), 0);
    drop(held);
    let out = run(&cli, &["index", "--db", &dbs, "--corpus", HANDBOOK]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(rerank::Store::open(&db.0).unwrap().len().unwrap(), 25);
    // The run's lock went with its process.
    drop(other_handle.lock_writer().unwrap());
}

#[test]
fn index_leaves_one_whole_file_and_never_removes_documents_unless_asked() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let db = TempDb::new("index");
    let dbs = db.0.display().to_string();
    let index = |extra: &[&str]| {
        let mut args = vec!["index", "--db", &dbs, "--json"];
        args.extend_from_slice(extra);
        run(&cli, &args)
    };
    let out = index(&["--corpus", HANDBOOK]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["documents"], 25);
    // No model, no vectors: the run says so and how to get them.
    assert!(
        stderr(&out).contains("no vectors were computed") && stderr(&out).contains("--embedder"),
        "{}",
        stderr(&out)
    );
    // The command has returned: the file alone holds the store.
    let wal = db.side("-wal");
    assert!(!wal.exists() || std::fs::metadata(&wal).unwrap().len() == 0);
    let copy = TempDb::new("index-copy");
    std::fs::copy(&db.0, &copy.0).unwrap();
    assert_eq!(rerank::Store::open(&copy.0).unwrap().len().unwrap(), 25);

    // A second file adds to the first: the 25 documents it lacks are kept, and counted.
    let dir = std::env::temp_dir();
    let file = |name: &str, text: &str| {
        let path = dir.join(format!("rerank-cli-{name}-{}.jsonl", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path
    };
    let empty = file("empty", "\n");
    let other = file("other", "{\"id\": \"x1\", \"text\": \"another corpus\"}\n");
    let third = file("third", "{\"id\": \"x2\", \"text\": \"a third corpus\"}\n");
    let out = index(&["--corpus", &other.display().to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        (&report["documents"], &report["kept"], &report["removed"]),
        (&26.into(), &25.into(), &0.into())
    );
    let line = run(
        &cli,
        &[
            "index",
            "--db",
            &dbs,
            "--corpus",
            &other.display().to_string(),
        ],
    );
    assert!(
        stdout(&line).contains("25 not in the corpus kept"),
        "{}",
        stdout(&line)
    );

    // --sync makes the store hold the corpus, and refuses to empty it by mistake.
    for (corpus, why) in [
        (&empty, "it holds no document"),
        (&third, "it shares no id with the store"),
    ] {
        let out = index(&["--corpus", &corpus.display().to_string(), "--sync"]);
        assert!(!out.status.success());
        let err = stderr(&out);
        assert!(err.contains("would remove all 26 documents"), "{err}");
        assert!(err.contains(why) && err.contains("--replace-all"), "{err}");
    }
    assert_eq!(rerank::Store::open(&db.0).unwrap().len().unwrap(), 26);
    let out = index(&["--corpus", &other.display().to_string(), "--sync"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        (&report["documents"], &report["removed"]),
        (&1.into(), &25.into())
    );
    // Said explicitly, it replaces.
    let out = index(&["--corpus", &third.display().to_string(), "--replace-all"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(rerank::Store::open(&db.0).unwrap().ids().unwrap(), ["x2"]);

    // An empty id anywhere writes nothing and names the file and line.
    let mut text = std::fs::read_to_string(HANDBOOK).unwrap();
    text.push_str("\n{\"id\": \"\", \"text\": \"no id\"}\n");
    let bad = file("badid", &text);
    let b = bad.display().to_string();
    let out = index(&["--corpus", &b]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{b}:27: a document with an empty id")),
        "{err}"
    );
    assert_eq!(rerank::Store::open(&db.0).unwrap().ids().unwrap(), ["x2"]);

    // An id on two lines: refused with the lines, or one line kept when asked.
    let twice = file(
        "twice",
        "{\"id\": \"d\", \"text\": \"first text\"}\n\n{\"id\": \"e\", \"text\": \"other\"}\n\
         {\"id\": \"d\", \"text\": \"second text\"}\n",
    );
    let t = twice.display().to_string();
    let out = index(&["--corpus", &t]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{t}: \"d\" on lines 1, 4")) && err.contains("nothing was written"),
        "{err}"
    );
    assert_eq!(rerank::Store::open(&db.0).unwrap().ids().unwrap(), ["x2"]);
    for (policy, text) in [("first", "first text"), ("last", "second text")] {
        let out = index(&["--corpus", &t, "--duplicates", policy]);
        assert!(out.status.success(), "{}", stderr(&out));
        let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(report["duplicates"], 1);
        assert!(stderr(&out).contains("1 lines dropped"), "{}", stderr(&out));
        let store = rerank::Store::open(&db.0).unwrap();
        let kept = store.get("d").unwrap().expect("d is stored");
        assert_eq!(kept.text, text, "--duplicates {policy}");
    }
    for f in [empty, other, third, bad, twice] {
        std::fs::remove_file(f).unwrap();
    }
}

#[test]
fn search_reads_a_store_without_writing_and_refuses_an_empty_file() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let db = TempDb::new("search-ro");
    let dbs = db.0.display().to_string();
    let out = run(&cli, &["index", "--db", &dbs, "--corpus", HANDBOOK]);
    assert!(out.status.success(), "{}", stderr(&out));
    let before = std::fs::read(&db.0).unwrap();
    let out = run(&cli, &["search", "--db", &dbs, "--json", "Taylor's KTN"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["hits"][0]["id"], "people-taylor");
    assert_eq!(std::fs::read(&db.0).unwrap(), before);

    let empty = TempDb::new("search-empty");
    std::fs::write(&empty.0, b"").unwrap();
    let es = empty.0.display().to_string();
    let out = run(&cli, &["search", "--db", &es, "Taylor's KTN"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("not a rerank store"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::metadata(&empty.0).unwrap().len(), 0);
}

/// `search --corpus` over a file that gives one id to two lines is refused naming the id and
/// both lines, as `index` refuses it: a corpus read into memory keeps one document per id,
/// and the other line would be dropped without a word. A file of distinct ids searches.
#[test]
fn search_refuses_a_corpus_that_repeats_an_id() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("rerank-cli-dup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let corpus = dir.join("dup.jsonl");
    std::fs::write(
        &corpus,
        "{\"id\": \"a\", \"text\": \"hello world\"}\n\n\
         {\"id\": \"b\", \"text\": \"another line\"}\n\
         {\"id\": \"a\", \"text\": \"the same id again\"}\n",
    )
    .unwrap();
    let path = corpus.display().to_string();
    let out = run(&cli, &["search", "--corpus", &path, "hello"]);
    assert!(!out.status.success(), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains("dup.jsonl")
            && err.contains("\"a\" on lines 1, 4")
            && err.contains("an id of its own"),
        "{err}"
    );
    std::fs::write(
        &corpus,
        "{\"id\": \"a\", \"text\": \"hello world\"}\n{\"id\": \"b\", \"text\": \"x\"}\n",
    )
    .unwrap();
    let out = run(&cli, &["search", "--corpus", &path, "--json", "hello"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["hits"][0]["id"], "a");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `embed` on a SPLADE directory prints one `{"indices", "values"}` line per text, the query
/// side or the document side as `--role` says, as sentence-transformers encodes them.
#[cfg(feature = "models")]
#[test]
fn embed_prints_sparse_vectors_of_a_splade_model_by_role() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/splade_tiny");
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("expected.json")).unwrap())
            .unwrap();
    let model = fixtures.join("inference_free");
    let input =
        std::env::temp_dir().join(format!("rerank-cli-splade-{}.jsonl", std::process::id()));
    for (role, key) in [("query", "queries"), ("document", "documents")] {
        let want = expected["inference_free"][key].as_array().unwrap();
        let lines: Vec<String> = want
            .iter()
            .map(|w| serde_json::json!({"text": w["text"]}).to_string())
            .collect();
        std::fs::write(&input, lines.join("\n")).unwrap();
        let args = [
            "embed",
            "--model",
            model.to_str().unwrap(),
            "--input",
            input.to_str().unwrap(),
            "--role",
            role,
        ];
        let out = run(&cli, &args);
        assert!(out.status.success(), "{}", stderr(&out));
        let got: Vec<serde_json::Value> = stdout(&out)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(got.len(), want.len(), "{role}");
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g["indices"], w["indices"], "{role} {}", w["text"]);
            let values = |v: &serde_json::Value| -> Vec<f64> {
                v.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap())
                    .collect()
            };
            for (a, b) in values(&g["values"]).iter().zip(values(&w["values"])) {
                assert!(
                    (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                    "{role}: {a} vs {b}"
                );
            }
        }
    }
    std::fs::remove_file(&input).unwrap();
}
