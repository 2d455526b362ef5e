//! The `rerank` command-line example as a user runs it: a closed stdout, huge sizes, endless
//! input lines, personal data. The binary is the one `cargo test` builds next to the tests
//! (`target/debug/examples/rerank`), or the one `RERANK_BIN` names; without it these tests say
//! so and return.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rerank-cli-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A corpus of `n` documents that all hold "cat".
fn corpus(dir: &Path, n: usize) -> PathBuf {
    let path = dir.join("corpus.jsonl");
    let lines: Vec<String> = (0..n)
        .map(|i| format!("{{\"id\": \"d{i}\", \"text\": \"the cat number {i} sat on a mat\"}}"))
        .collect();
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

fn run(bin: &Path, args: &[&str]) -> Output {
    Command::new(bin).args(args).output().unwrap()
}

/// Runs `args` with stdout a pipe whose reading end is closed before the command writes.
fn run_into_a_closed_pipe(bin: &Path, args: &[&str]) -> Output {
    let mut child = Command::new(bin)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    child.wait_with_output().unwrap()
}

#[test]
fn every_command_ends_quietly_on_a_closed_stdout() {
    let Some(bin) = crate::common::rerank_cli() else {
        return;
    };
    let dir = scratch("pipe");
    let corpus = corpus(&dir, 200);
    let corpus = corpus.to_str().unwrap();
    let db = dir.join("store.db");
    let db = db.to_str().unwrap();
    let beir = dir.join("beir");
    std::fs::create_dir_all(beir.join("qrels")).unwrap();
    let docs: Vec<String> = (0..200)
        .map(|i| format!("{{\"_id\": \"d{i}\", \"title\": \"\", \"text\": \"cat {i}\"}}"))
        .collect();
    std::fs::write(beir.join("corpus.jsonl"), docs.join("\n")).unwrap();
    std::fs::write(
        beir.join("queries.jsonl"),
        "{\"_id\": \"q1\", \"text\": \"cat\"}\n",
    )
    .unwrap();
    std::fs::write(
        beir.join("qrels/test.tsv"),
        "query-id\tcorpus-id\tscore\nq1\td1\t1\n",
    )
    .unwrap();
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!("corpus: {corpus}\nretriever: {{ type: bm25 }}\n"),
    )
    .unwrap();
    let commands: Vec<Vec<&str>> = vec![
        vec!["search", "--corpus", corpus, "--top-k", "200", "cat"],
        vec!["search", "--corpus", corpus, "--json", "cat"],
        vec!["answer", "--corpus", corpus, "cat"],
        vec!["classify", "a cat"],
        vec!["classify", "--json", "a cat"],
        vec!["index", "--db", db, "--corpus", corpus],
        vec!["index", "--db", db, "--corpus", corpus, "--json"],
        vec!["beir", "--data", beir.to_str().unwrap()],
        vec![
            "query",
            "--config",
            config.to_str().unwrap(),
            "--classify-only",
            "a cat",
        ],
    ];
    for args in commands {
        let out = run_into_a_closed_pipe(&bin, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            matches!(out.status.code(), Some(0) | Some(141)),
            "{args:?}: {:?} {stderr}",
            out.status
        );
        assert!(!stderr.contains("Broken pipe"), "{args:?} said: {stderr}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_huge_top_k_returns_every_document_without_an_abort() {
    let Some(bin) = crate::common::rerank_cli() else {
        return;
    };
    let dir = scratch("topk");
    let corpus = corpus(&dir, 25);
    for k in ["4294967296", "18446744073709551615"] {
        let out = run(
            &bin,
            &[
                "search",
                "--corpus",
                corpus.to_str().unwrap(),
                "--top-k",
                k,
                "--json",
                "cat",
            ],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "k={k}: {stderr}");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["hits"].as_array().unwrap().len(), 25, "k={k}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_query_is_guarded_and_an_empty_one_refused() {
    let Some(bin) = crate::common::rerank_cli() else {
        return;
    };
    let dir = scratch("guard");
    let corpus = corpus(&dir, 3);
    let config = dir.join("config.yaml");
    let yaml = format!(
        "corpus: {}\nretriever: {{ type: bm25 }}\n",
        corpus.display()
    );
    std::fs::write(&config, yaml).unwrap();
    let ssn = "my ssn is １２３－４５－６７８９";
    let runs: [Vec<&str>; 2] = [
        vec![
            "query",
            "--config",
            config.to_str().unwrap(),
            "--classify-only",
            ssn,
        ],
        vec!["classify", "--json", ssn],
    ];
    for args in runs {
        let out = run(&bin, &args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stdout}");
        assert!(
            stderr.contains("personal information from your question (ssn)"),
            "{args:?}: {stderr}"
        );
        assert!(
            !stdout.contains("１２３") && !stderr.contains("１２３"),
            "echoed"
        );
    }
    for q in ["", "   "] {
        let out = run(&bin, &["classify", q]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{q:?}: {stderr}");
        assert!(stderr.contains("the query is empty"), "{stderr}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(all(unix, feature = "models"))]
#[test]
fn embed_input_lines_are_bounded_and_threads_too() {
    let Some(bin) = crate::common::rerank_cli() else {
        return;
    };
    let model = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/st_bert_tiny/plain"
    ));
    if !model.join("model.safetensors").is_file() {
        crate::common::skip(&format!("skipping: {} not found", model.display()));
        return;
    }
    let model = model.to_str().unwrap();
    let out = run(&bin, &["embed", "--model", model, "--input", "/dev/zero"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("/dev/zero:1") && stderr.contains("longer than 67108864 bytes"),
        "{stderr}"
    );
    let dir = scratch("threads");
    let input = dir.join("in.jsonl");
    std::fs::write(&input, "{\"text\": \"a cat\"}\n").unwrap();
    let started = std::time::Instant::now();
    let args = [
        "embed",
        "--model",
        model,
        "--input",
        input.to_str().unwrap(),
        "--threads",
        "100000",
    ];
    let out = run(&bin, &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("threads 100000 is more than"), "{stderr}");
    assert!(started.elapsed().as_secs() < 30, "{:?}", started.elapsed());
    std::fs::remove_dir_all(&dir).unwrap();
}
