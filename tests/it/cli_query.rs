//! `rerank query`, the legal router's command, through the CLI on the SQLite store: what each
//! flag prints. `--classify-only`, `--dry-run` (the route, HyDE off and why, both caches),
//! an answer, its rephrasing answered from the answer cache in a second process with no
//! retrieval and no generation, `--cache-stats`, `--invalidate-act`, and the next answer
//! generated again.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The legal config, copied beside a fresh cache file in a scratch folder (its corpus and
/// lexicon paths made absolute).
fn legal_config(tag: &str) -> (PathBuf, PathBuf) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cli_query_{tag}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(root.join("examples/configs/legal_router.yaml")).unwrap();
    let data = root.join("examples/data");
    let db = dir.join("legal-cache.db");
    let text = text
        .replace("../data/", &format!("{}/", data.display()))
        .replace("target/legal-cache.db", db.to_str().unwrap());
    let config = dir.join("legal_router.yaml");
    std::fs::write(&config, text).unwrap();
    (config, dir)
}

/// `rerank query --config CONFIG --json ARGS...`: its JSON output (the command must
/// succeed).
fn query(cli: &Path, config: &Path, args: &[&str]) -> Value {
    let out = Command::new(cli)
        .arg("query")
        .arg("--config")
        .arg(config)
        .arg("--json")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn query_prints_what_each_flag_asks_for() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let (config, dir) = legal_config("flags");

    let c = query(
        &cli,
        &config,
        &[
            "--classify-only",
            "What does section 420 of the Penal Code say?",
        ],
    );
    assert_eq!(c["classification"]["route"], "simple");
    assert_eq!(c["classification"]["legal"]["acts"][0], "penal code");
    assert!(
        !dir.join("legal-cache.db").exists(),
        "--classify-only builds nothing"
    );

    let p = query(
        &cli,
        &config,
        &[
            "--dry-run",
            "Compare the Delhi High Court and the Bombay High Court on bail",
        ],
    )["plan"]
        .clone();
    assert_eq!(p["route"], "analytical");
    assert_eq!(p["modes"], serde_json::json!(["bm25", "vector", "hybrid"]));
    assert_eq!(p["hyde"], false);
    assert!(
        p["hyde_off"].as_str().unwrap().contains("extractive"),
        "{p}"
    );
    assert_eq!(
        (p["cache"].clone(), p["answer_cache"].clone()),
        (Value::Bool(true), Value::Bool(true))
    );

    let asked = "duties of directors under the Companies Act 2013";
    let rephrased = "What are the duties of directors under the Companies Act 2013?";
    let first = query(&cli, &config, &[asked]);
    assert_eq!(first["flags"]["cache_hit"], false);
    assert!(first["timings"]["generate_ms"].is_number(), "{first}");
    assert!(first["sources"].as_array().is_some_and(|s| !s.is_empty()));
    assert!(
        first["answer"].as_str().unwrap().contains("Companies Act"),
        "{first}"
    );

    // A second process: the rephrasing comes from the answer cache in the SQLite file,
    // without a search or a generator call.
    let second = query(&cli, &config, &[rephrased]);
    assert_eq!(second["flags"]["cache_hit"], true, "{second}");
    assert_eq!(second["answer"], first["answer"]);
    assert_eq!(second["sources"], first["sources"]);
    assert_eq!(second["query"], rephrased);
    assert!(second["timings"].get("generate_ms").is_none(), "{second}");
    assert!(second["timings"].get("search").is_none(), "{second}");

    let stats = query(&cli, &config, &["--cache-stats"]);
    assert_eq!(stats["store"], "sqlite");
    assert!(stats["cache"]["entries"].as_u64().unwrap() >= 2, "{stats}");

    let inv = query(&cli, &config, &["--invalidate-act", "Companies Act 2013"]);
    assert_eq!(inv["tag"], "act:companies act 2013");
    assert!(inv["invalidated"].as_u64().unwrap() >= 1, "{inv}");

    let third = query(&cli, &config, &[rephrased]);
    assert_eq!(third["flags"]["cache_hit"], false, "{third}");
    assert!(third["timings"]["generate_ms"].is_number());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--classify-only` classifies as the full query does: both let the classifier learn the
/// domain's words from the config's corpus (without it, an off-topic question came out
/// `knowledge_search` under `--classify-only` and `off_topic` in the full query).
#[test]
fn classify_only_classifies_as_the_full_query_does() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/configs/pdf_qa.yaml");
    for q in [
        "Who won the 1998 football world cup?",
        "How many days of annual leave do employees get?",
    ] {
        let only = query(&cli, &config, &["--classify-only", q]);
        let full = query(&cli, &config, &[q]);
        assert_eq!(only["classification"], full["classification"], "{q}");
    }
    let off = query(
        &cli,
        &config,
        &["--classify-only", "Who won the 1998 football world cup?"],
    );
    assert_eq!(off["classification"]["intent"], "off_topic", "{off}");

    // The legal config's domain lexicon (`classifier.lexicons`) marks what is not law.
    let (legal, dir) = legal_config("lexicon");
    for (q, intent) in [
        ("recipe for pancakes", "off_topic"),
        (
            "What does section 420 of the Penal Code say?",
            "knowledge_search",
        ),
    ] {
        let c = query(&cli, &legal, &["--classify-only", q]);
        assert_eq!(c["classification"]["intent"], intent, "{q}: {c}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
