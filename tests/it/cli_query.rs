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
    assert!(
        !dir.join("legal-cache.db").exists(),
        "--dry-run opens no cache file"
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
    // Grounding and relevance, each with its band, beside the answer's band (the weaker);
    // the lexical reranker's relevance is the share of the question's terms in a source.
    assert!(first["confidence"].is_number(), "{first}");
    let relevance = first["relevance"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&relevance), "{first}");
    assert_eq!(first["relevance_basis"], "query_terms", "{first}");
    let bands = ["grounding_band", "relevance_band", "confidence_band"].map(|b| {
        first[b]
            .as_str()
            .unwrap_or_else(|| panic!("{b}: {first}"))
            .to_string()
    });
    let rank = |b: &str| {
        ["low", "medium", "high"]
            .iter()
            .position(|x| *x == b)
            .unwrap()
    };
    assert_eq!(
        rank(&bands[2]),
        rank(&bands[0]).min(rank(&bands[1])),
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

/// The question as `--query TEXT` is the positional question: the same output; both at once
/// is refused by the parser, and neither names both ways of giving it.
#[test]
fn the_question_can_be_given_with_query() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let (config, dir) = legal_config("flag");
    let q = "What does section 420 of the Penal Code say?";
    let positional = query(&cli, &config, &["--classify-only", q]);
    let flag = query(&cli, &config, &["--classify-only", "--query", q]);
    assert_eq!(flag, positional);
    assert_eq!(flag["classification"]["route"], "simple", "{flag}");

    let run = |args: &[&str]| {
        Command::new(&cli)
            .arg("query")
            .arg("--config")
            .arg(&config)
            .args(args)
            .output()
            .unwrap()
    };
    let both = run(&["--classify-only", "--query", q, q]);
    assert_eq!(both.status.code(), Some(2), "a usage error");
    let e = String::from_utf8_lossy(&both.stderr);
    assert!(e.contains("cannot be used with"), "{e}");
    let neither = run(&["--classify-only"]);
    assert!(!neither.status.success());
    let e = String::from_utf8_lossy(&neither.stderr);
    assert!(e.contains("--query TEXT"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--dry-run` has no side effects: with the store and the cache file in a folder that holds
/// only the config, the folder is unchanged afterwards; the plan still routes and classifies
/// with the corpus's words and names what a full query would use.
#[test]
fn dry_run_writes_nothing() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let (config, dir) = legal_config("dry");
    let store = dir.join("store.db");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!("store: {{ path: {} }}\n", store.display()));
    std::fs::write(&config, text).unwrap();
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(listing(), ["legal_router.yaml"]);

    let out = query(
        &cli,
        &config,
        &[
            "--dry-run",
            "--query",
            "Compare the Delhi High Court and the Bombay High Court on bail",
        ],
    );
    assert_eq!(listing(), ["legal_router.yaml"], "{out}");
    assert_eq!(out["plan"]["route"], "analytical", "{out}");
    assert_eq!(out["plan"]["cache"], true, "{out}");
    assert_eq!(out["would_use"]["store"], store.to_str().unwrap(), "{out}");
    assert_eq!(out["would_use"]["cache"]["store"], "sqlite", "{out}");
    assert!(out["would_use"]["documents"].as_u64().unwrap() > 0, "{out}");

    // The classification is the one the full query makes (the classifier sees the corpus and
    // the lexicon), as --classify-only shows it.
    for q in [
        "recipe for pancakes",
        "What does section 420 of the Penal Code say?",
    ] {
        let plan = query(&cli, &config, &["--dry-run", q]);
        let only = query(&cli, &config, &["--classify-only", q]);
        assert_eq!(
            plan["plan"]["classification"], only["classification"],
            "{q}"
        );
    }
    assert_eq!(listing(), ["legal_router.yaml"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 53, D10 through the CLI, on the PDF system whose plan asks for it: `rerank query`
/// answers an off-topic question with a note that it is outside the knowledge base's domain
/// and an unclear one with a request to clarify, neither searched (no search timings, no
/// sources), and the JSON's flags say which; the text form says so too. A copy of the config
/// with `grounding.route_intents: false` searches them as before.
#[test]
fn the_pdf_system_answers_off_topic_and_unclear_questions_without_searching() {
    use rerank::pipeline::{CLARIFICATION_REPLY, OFF_TOPIC_REPLY};
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = root.join("examples/configs/pdf_qa.yaml");
    let world_cup = "Who won the 1998 football world cup?";

    let off = query(&cli, &config, &[world_cup]);
    assert_eq!(off["answer"], OFF_TOPIC_REPLY, "{off}");
    assert_eq!(off["classification"]["intent"], "off_topic", "{off}");
    assert_eq!(off["flags"]["off_topic"], true, "{off}");
    assert_eq!(off["flags"]["needs_clarification"], false, "{off}");
    assert_eq!(off["flags"]["not_enough_information"], false, "{off}");
    assert_eq!(off["sources"], serde_json::json!([]), "{off}");
    assert!(
        off["timings"].get("search").is_none(),
        "not searched: {off}"
    );
    assert_eq!(off["confidence_band"], "low", "{off}");

    let unclear = query(&cli, &config, &["--query", "what about that one?"]);
    assert_eq!(unclear["answer"], CLARIFICATION_REPLY, "{unclear}");
    assert_eq!(unclear["classification"]["intent"], "clarification");
    assert_eq!(unclear["flags"]["needs_clarification"], true, "{unclear}");
    assert!(unclear["timings"].get("search").is_none(), "{unclear}");

    // The text form prints the note and says nothing was searched.
    let out = Command::new(&cli)
        .args(["query", "--config"])
        .arg(&config)
        .arg(world_cup)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with(OFF_TOPIC_REPLY), "{text}");
    assert!(text.contains("nothing was searched"), "{text}");

    // grounding.route_intents: false, one key away: searched, and nothing relevant found.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cli_query_route_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let yaml = std::fs::read_to_string(&config).unwrap();
    assert!(yaml.contains("route_intents: true"));
    let yaml = yaml
        .replace("route_intents: true", "route_intents: false")
        .replace(
            "../data/",
            &format!("{}/", root.join("examples/data").display()),
        );
    let searched_config = dir.join("pdf_qa.yaml");
    std::fs::write(&searched_config, yaml).unwrap();
    let searched = query(&cli, &searched_config, &[world_cup]);
    assert_eq!(searched["classification"]["intent"], "off_topic");
    assert_eq!(searched["flags"]["off_topic"], false, "{searched}");
    assert_eq!(
        searched["flags"]["not_enough_information"], true,
        "{searched}"
    );
    assert!(searched["timings"]["search"].is_object(), "{searched}");
    let unclear = query(&cli, &searched_config, &["what about that one?"]);
    assert_eq!(unclear["flags"]["needs_clarification"], false, "{unclear}");
    assert!(unclear["timings"]["search"].is_object(), "{unclear}");
    std::fs::remove_dir_all(&dir).unwrap();

    // The legal config's lexicon marks what is not law: answered the same way.
    let (legal, dir) = legal_config("route");
    let pancakes = query(&cli, &legal, &["recipe for pancakes"]);
    assert_eq!(pancakes["answer"], OFF_TOPIC_REPLY, "{pancakes}");
    assert_eq!(pancakes["flags"]["off_topic"], true, "{pancakes}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--dry-run` reaches no Milvus server: a config whose hybrid retriever reads dense hits from
/// a Milvus collection (here at a port where nothing listens) plans with the same recall modes
/// as the full query would hold, and names the collection it would use.
#[cfg(feature = "models")]
#[test]
fn dry_run_reaches_no_milvus_server() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cli_query_milvus_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // A port of this machine where nothing listens: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.join("milvus.yaml");
    let model = root.join("tests/fixtures/st_bert_tiny/plain");
    let text = format!(
        "corpus: {}\nretriever:\n  type: hybrid\n  retrievers:\n    - {{ type: bm25 }}\n    - \
         {{ type: milvus, url: \"http://127.0.0.1:{port}\", collection: handbook, model: {} }}\n",
        root.join("examples/data/handbook.jsonl").display(),
        model.display()
    );
    std::fs::write(&config, text).unwrap();
    let out = query(
        &cli,
        &config,
        &["--dry-run", "how many days can I work remotely"],
    );
    let modes: Vec<&str> = out["plan"]["modes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert!(
        modes.contains(&"bm25") && modes.contains(&"vector"),
        "{out}"
    );
    assert_eq!(
        out["would_use"]["milvus"],
        serde_json::json!([{"url": format!("http://127.0.0.1:{port}"), "collection": "handbook"}]),
        "{out}"
    );
    // The full query does reach for the server, and says so.
    let full = Command::new(&cli)
        .args(["query", "--config"])
        .arg(&config)
        .arg("how many days can I work remotely")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&full.stderr);
    assert!(
        !full.status.success() && err.contains(&port.to_string()),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
