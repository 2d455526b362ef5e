//! The command line's vocabulary, as a new user meets it: every subcommand's `--help` is read,
//! its flags collected into one table, and the table checked against the rules of
//! `examples/rerank/flags.rs`:
//!
//! - one spelling per shared concept (the embedder is `--embedder` wherever there is one,
//!   batch size `--batch-size`, ...), and no visible flag in a variant spelling (`--model`,
//!   `--batch`, `--batch-items`, `--mode`, ...);
//! - `--json` and `--log-level` on every subcommand (`serve` answers HTTP, so no `--json`);
//! - `--threads`, `--precision` and `--device` wherever a model flag is (`generate` has no
//!   `--device`: generation runs on the CPU kernels only);
//! - `--precision` lists only the values that command can run, and the defaults are shown;
//! - every JSONL input takes `-` for stdin, and does;
//! - the old spellings still parse (hidden aliases), so scripts keep working.
//!
//! The table is printed (`cargo test cli_help -- --nocapture`).
#![cfg(feature = "sqlite")]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const HANDBOOK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/handbook.jsonl");

/// Every subcommand, as `rerank --help` lists them.
const SUBCOMMANDS: [&str; 12] = [
    "answer", "beir", "cache", "embed", "generate", "ingest", "index", "search", "classify",
    "query", "serve", "score",
];

/// One flag of one subcommand's `--help`.
#[derive(Debug, Clone)]
struct Flag {
    /// `--name`.
    long: String,
    /// The value's name (`<FILE>`), when the flag takes one.
    value: Option<String>,
    /// The help text, lines joined.
    help: String,
}

impl Flag {
    /// The `[possible values: ...]` the help lists, or the values of a long help's
    /// `Possible values:` list (`- f32: ...`).
    fn possible_values(&self) -> Vec<String> {
        if let Some(at) = self.help.find("[possible values: ") {
            let rest = &self.help[at + "[possible values: ".len()..];
            let end = rest.find(']').unwrap_or(rest.len());
            return rest[..end]
                .split(',')
                .map(|v| v.trim().to_string())
                .collect();
        }
        if let Some(at) = self.help.find("Possible values:") {
            return self.help[at..]
                .split(" - ")
                .skip(1)
                .filter_map(|item| item.split(':').next())
                .map(|v| v.trim().to_string())
                .collect();
        }
        Vec::new()
    }

    /// The `[default: ...]` the help shows.
    fn default(&self) -> Option<String> {
        let at = self.help.find("[default: ")?;
        let rest = &self.help[at + "[default: ".len()..];
        Some(rest[..rest.find(']')?].to_string())
    }
}

/// The shared concepts: the one spelling each has, and the variants no subcommand may show.
const CONCEPTS: [(&str, &str, &[&str]); 12] = [
    (
        "embedding model",
        "--embedder",
        &["--model", "--embedding-model", "--embed-model"],
    ),
    (
        "reranker",
        "--reranker",
        &["--rerank-model", "--cross-encoder"],
    ),
    (
        "chat model",
        "--generator-model",
        &["--chat-model", "--llm"],
    ),
    (
        "batch size",
        "--batch-size",
        &["--batch", "--batch-items", "--max-batch"],
    ),
    ("stage-1 recall", "--retriever", &["--mode", "--recall"]),
    ("JSON output", "--json", &["--format", "--output-json"]),
    (
        "log level",
        "--log-level",
        &["--log", "--loglevel", "--verbose"],
    ),
    ("threads", "--threads", &["--jobs", "--num-threads"]),
    ("number format", "--precision", &["--dtype"]),
    ("where models run", "--device", &["--backend"]),
    ("JSONL input", "--input", &["--in", "--file"]),
    ("JSONL corpus", "--corpus", &["--docs", "--documents"]),
];

/// Subcommands without `--json`, and why.
const NO_JSON: [(&str, &str); 1] = [("serve", "a server: it answers HTTP requests")];

/// Subcommands with a model flag but no `--device`, and why.
const NO_DEVICE: [(&str, &str); 1] = [(
    "generate",
    "Qwen3 generation runs on the crate's own CPU kernels only",
)];

fn run(cli: &Path, args: &[&str]) -> Output {
    Command::new(cli)
        .args(args)
        .env("RUST_LOG", "off")
        .output()
        .unwrap()
}

/// `rerank SUB --help` (long help, as `--help` prints it); `rerank --help` for `sub` "".
fn help(cli: &Path, sub: &str) -> String {
    let args: &[&str] = match sub {
        "" => &["--help"],
        _ => &[sub, "--help"],
    };
    let out = run(cli, args);
    assert!(
        out.status.success(),
        "{sub} --help: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The flags of a `--help` text: every `--name` that starts an option line, with its value
/// name and its help (the lines up to the next option).
fn parse_flags(help: &str) -> Vec<Flag> {
    let mut flags: Vec<Flag> = Vec::new();
    let mut in_options = false;
    for line in help.lines() {
        if !line.starts_with(' ') && !line.is_empty() {
            // A section header ("Options:", "Arguments:", "Commands:", "Usage: ...").
            in_options = line.trim_end() == "Options:";
            continue;
        }
        if !in_options {
            continue;
        }
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        // An option line: `  -h, --help  Print help` or `      --corpus <FILE>`.
        if trimmed.starts_with('-') && indent <= 6 {
            let Some(at) = trimmed.find("--") else {
                continue;
            };
            let rest = &trimmed[at..];
            let long: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            let after = rest[long.len()..].trim_start();
            let (value, help) = match after.strip_prefix('<') {
                Some(v) => {
                    let end = v.find('>').unwrap_or(v.len());
                    (Some(v[..end].to_string()), v[end + 1..].trim().to_string())
                }
                None => (None, after.trim().to_string()),
            };
            flags.push(Flag { long, value, help });
        } else if let Some(last) = flags.last_mut() {
            if !trimmed.is_empty() {
                last.help.push(' ');
                last.help.push_str(trimmed);
            }
        }
    }
    flags
}

/// Every subcommand's flags, by subcommand (the ones `rerank --help` lists, which must be
/// [`SUBCOMMANDS`]: a new subcommand is classified here before it ships).
fn table(cli: &Path) -> BTreeMap<String, Vec<Flag>> {
    let top = help(cli, "");
    let mut listed = Vec::new();
    let mut in_commands = false;
    for line in top.lines() {
        if !line.starts_with(' ') && !line.is_empty() {
            in_commands = line.trim_end() == "Commands:";
            continue;
        }
        if let Some(name) = line.split_whitespace().next().filter(|_| in_commands) {
            if name != "help" {
                listed.push(name.to_string());
            }
        }
    }
    let mut want: Vec<String> = SUBCOMMANDS.iter().map(|s| s.to_string()).collect();
    want.sort();
    listed.sort();
    assert_eq!(
        listed, want,
        "rerank --help lists other subcommands:\n{top}"
    );
    SUBCOMMANDS
        .iter()
        .map(|sub| (sub.to_string(), parse_flags(&help(cli, sub))))
        .collect()
}

fn has(flags: &[Flag], long: &str) -> bool {
    flags.iter().any(|f| f.long == long)
}

fn flag<'a>(flags: &'a [Flag], long: &str) -> &'a Flag {
    flags.iter().find(|f| f.long == long).unwrap()
}

/// The table of shared flags, one row per concept: its spelling and the subcommands that
/// have it.
fn shared_table(all: &BTreeMap<String, Vec<Flag>>) -> String {
    let mut out = String::new();
    out.push_str("| concept | flag | value | default | subcommands |\n");
    out.push_str("|---|---|---|---|---|\n");
    for (concept, spelling, _) in CONCEPTS {
        let subs: Vec<&str> = SUBCOMMANDS
            .iter()
            .copied()
            .filter(|s| has(&all[*s], spelling))
            .collect();
        let first = subs.first().map(|s| flag(&all[*s], spelling));
        let value = first.and_then(|f| f.value.clone()).unwrap_or_default();
        // Each default shown, with the subcommands that show it when not all do.
        let mut defaults: Vec<(String, Vec<&str>)> = Vec::new();
        for s in &subs {
            let Some(d) = flag(&all[*s], spelling).default() else {
                continue;
            };
            match defaults.iter_mut().find(|(v, _)| *v == d) {
                Some((_, at)) => at.push(s),
                None => defaults.push((d, vec![s])),
            }
        }
        let default: Vec<String> = defaults
            .iter()
            .map(|(d, at)| match at.len() == subs.len() {
                true => d.clone(),
                false => format!("{d} ({})", at.join(", ")),
            })
            .collect();
        out.push_str(&format!(
            "| {concept} | {spelling} | {value} | {} | {} |\n",
            default.join("; "),
            subs.join(", ")
        ));
    }
    out
}

#[test]
fn every_subcommand_speaks_one_vocabulary() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let all = table(&cli);
    println!("{}", shared_table(&all));
    for (sub, why) in NO_JSON.iter().chain(&NO_DEVICE) {
        println!("exception: {sub}: {why}");
    }
    let mut problems = Vec::new();
    for (sub, flags) in &all {
        let sub = sub.as_str();
        // One spelling per concept: no variant is shown.
        for (concept, spelling, variants) in CONCEPTS {
            for variant in variants {
                if !has(flags, variant) {
                    continue;
                }
                problems.push(format!(
                    "{sub}: {variant} is shown; the {concept} is {spelling} everywhere"
                ));
            }
        }
        // --json and --log-level everywhere.
        if !has(flags, "--json") && !NO_JSON.iter().any(|(s, _)| *s == sub) {
            problems.push(format!("{sub}: no --json"));
        }
        if !has(flags, "--log-level") {
            problems.push(format!("{sub}: no --log-level"));
        }
        // The model flags come with how the models run.
        let models = ["--embedder", "--reranker", "--generator-model"];
        if models.iter().any(|m| has(flags, m)) {
            for needed in ["--threads", "--precision", "--device"] {
                let excused = needed == "--device" && NO_DEVICE.iter().any(|(s, _)| *s == sub);
                if !has(flags, needed) && !excused {
                    problems.push(format!("{sub}: loads a model but has no {needed}"));
                }
            }
        }
        // The help names no flag by an old spelling, and no model family alone.
        for f in flags {
            for stale in ["--model ", "--model,", "--model)", "BERT bi-encoder"] {
                if f.help.contains(stale) {
                    problems.push(format!("{sub} {}: help says {stale:?}: {}", f.long, f.help));
                }
            }
        }
        // Every JSONL input takes `-`.
        for input in ["--input", "--corpus"] {
            if has(flags, input) && !flag(flags, input).help.contains("`-` for stdin") {
                problems.push(format!("{sub} {input}: help does not say `-` for stdin"));
            }
        }
    }

    // The shared flags read the same and show their defaults.
    for (long, default) in [
        ("--log-level", Some("warn")),
        ("--device", Some("cpu")),
        ("--precision", Some("f32")),
        ("--threads", None),
        ("--retriever", None),
        ("--batch-size", None),
    ] {
        let with: Vec<(&String, &Flag)> = all
            .iter()
            .filter(|(_, flags)| has(flags, long))
            .map(|(sub, flags)| (sub, flag(flags, long)))
            .collect();
        for (sub, f) in &with {
            if let Some(want) = default {
                if f.default().as_deref() != Some(want) {
                    problems.push(format!(
                        "{sub} {long}: shows no [default: {want}]: {}",
                        f.help
                    ));
                }
            }
            if long == "--threads" && !f.help.contains("(default: all cores)") {
                problems.push(format!("{sub} --threads: says no default: {}", f.help));
            }
        }
        // One value name everywhere; identical help where the flag comes from one definition
        // (`--device` and `--threads` of the subcommands that load models).
        let (first_sub, first) = with[0];
        for (sub, f) in &with[1..] {
            if f.value != first.value {
                problems.push(format!(
                    "{long}: {sub} takes <{:?}>, {first_sub} <{:?}>",
                    f.value, first.value
                ));
            }
        }
        if ["--device", "--threads"].contains(&long) {
            let loaders: Vec<&(&String, &Flag)> = with
                .iter()
                .filter(|(sub, _)| {
                    ["--embedder", "--reranker", "--generator-model"]
                        .iter()
                        .any(|m| has(&all[sub.as_str()], m))
                })
                .collect();
            let (first_sub, first) = loaders[0];
            for (sub, f) in &loaders[1..] {
                if f.help != first.help {
                    problems.push(format!(
                        "{long}: {sub} says {:?}, {first_sub} says {:?}",
                        f.help, first.help
                    ));
                }
            }
        }
    }

    // --precision lists only what the command's models run: f16 needs the candle engine, and
    // generation takes f32 and bf16.
    let mut encoder_values = vec!["f32", "int8", "bf16"];
    if cfg!(feature = "candle") {
        encoder_values.push("f16");
    }
    for (sub, flags) in &all {
        if !has(flags, "--precision") {
            continue;
        }
        let want: &[&str] = match sub.as_str() {
            "generate" => &["f32", "bf16"],
            _ => &encoder_values,
        };
        let got = flag(flags, "--precision").possible_values();
        if got != want {
            problems.push(format!("{sub} --precision lists {got:?}, it runs {want:?}"));
        }
    }
    // --retriever lists the same values wherever it is a closed list.
    for sub in ["search", "answer", "beir"] {
        let got = flag(&all[sub], "--retriever").possible_values();
        if got != ["bm25", "dense", "hybrid"] {
            problems.push(format!("{sub} --retriever lists {got:?}"));
        }
        if flag(&all[sub], "--retriever").default().as_deref() != Some("bm25") {
            problems.push(format!("{sub} --retriever shows no [default: bm25]"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The spellings before the one vocabulary still parse (hidden aliases): each command below
/// gets past clap (a usage error exits 2) and fails on its missing input instead (exit 1).
#[test]
fn the_old_spellings_still_parse() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let missing = "/nonexistent/rerank-cli-help";
    let cases: [&[&str]; 8] = [
        &["embed", "--model", missing, "--input", missing],
        &["score", "--model", missing, "--input", missing],
        &["generate", "--model", missing, "--prompt", "hi"],
        &[
            "index", "--db", missing, "--corpus", missing, "--model", missing, "--batch", "8",
        ],
        &[
            "beir",
            "--data",
            missing,
            "--model",
            missing,
            "--retriever",
            "vector",
        ],
        &[
            "search",
            "--corpus",
            HANDBOOK,
            "--retriever",
            "vector",
            "--model",
            missing,
            "leave",
        ],
        &["answer", "--corpus", missing, "--model", missing, "leave"],
        &["query", "--config", missing, "--mode", "vector", "leave"],
    ];
    for args in cases {
        let out = run(&cli, args);
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}:\n{e}");
        assert!(!e.contains("unexpected argument"), "{args:?}:\n{e}");
        assert!(
            e.contains(missing),
            "{args:?} did not get to its input:\n{e}"
        );
    }
    // The new spellings, where a value is refused, name the flag as it is now spelled.
    let out = run(
        &cli,
        &[
            "index", "--db", missing, "--corpus", missing, "--batch", "0",
        ],
    );
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("--batch-size must be at least 1"), "{e}");
}

/// `-` reads a JSONL corpus from stdin, as it reads `embed` and `score` input.
#[test]
fn a_corpus_of_dash_is_read_from_stdin() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let corpus = std::fs::read(HANDBOOK).unwrap();
    let from_file = run(&cli, &["search", "--corpus", HANDBOOK, "--json", "leave"]);
    assert!(from_file.status.success());
    let mut child = Command::new(&cli)
        .args(["search", "--corpus", "-", "--json", "leave"])
        .env("RUST_LOG", "off")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&corpus).unwrap();
    }
    let from_stdin = child.wait_with_output().unwrap();
    let e = String::from_utf8_lossy(&from_stdin.stderr);
    assert!(from_stdin.status.success(), "{e}");
    let hits = |out: &Output| {
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        json["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["id"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert!(!hits(&from_file).is_empty());
    assert_eq!(hits(&from_stdin), hits(&from_file));
}

/// A `--precision` the `--device` cannot run is refused before any model loads, naming both
/// flags; a device this build has no engine for is refused while the flags are read.
#[test]
fn precision_and_device_are_checked_together() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let missing = "/nonexistent/rerank-cli-help";
    let out = run(
        &cli,
        &[
            "embed",
            "--embedder",
            missing,
            "--input",
            missing,
            "--precision",
            "int8",
            "--device",
            "candle-cpu",
        ],
    );
    let e = String::from_utf8_lossy(&out.stderr);
    if cfg!(feature = "candle") {
        assert_eq!(out.status.code(), Some(1), "{e}");
        assert!(
            e.contains("--precision int8 runs on --device cpu only"),
            "{e}"
        );
        let out = run(
            &cli,
            &[
                "score",
                "--reranker",
                missing,
                "--input",
                missing,
                "--precision",
                "f16",
            ],
        );
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(
            e.contains("--precision f16 runs through candle only"),
            "{e}"
        );
    } else {
        assert_eq!(out.status.code(), Some(2), "{e}");
        assert!(e.contains("candle"), "{e}");
    }
    let out = run(
        &cli,
        &[
            "index", "--db", missing, "--corpus", missing, "--device", "tpu",
        ],
    );
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(
        e.contains("invalid value 'tpu' for '--device <DEVICE>'"),
        "{e}"
    );
}

/// `query` speaks like the other subcommands: text without `--json`, one JSON object with it
/// (the answer's text is the same in both).
#[test]
fn query_prints_text_and_with_json_one_object() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/configs/legal_router.yaml"
    );
    // The config's cache file lands in the working directory: a scratch folder.
    let scratch = std::env::temp_dir().join(format!("rerank-cli-help-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let question = "What does section 166 of the Companies Act 2013 require of directors?";
    let query = |json: bool| {
        let mut args = vec!["query", "--config", config];
        if json {
            args.push("--json");
        }
        args.push(question);
        let out = Command::new(&cli)
            .args(&args)
            .current_dir(&scratch)
            .env("RUST_LOG", "off")
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{args:?}: {e}");
        String::from_utf8(out.stdout).unwrap()
    };
    let json: serde_json::Value = serde_json::from_str(&query(true)).unwrap();
    let answer = json["answer"].as_str().unwrap();
    assert!(!answer.is_empty());
    let text = query(false);
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(
        serde_json::from_str::<serde_json::Value>(&text).is_err(),
        "{text}"
    );
    assert!(text.starts_with(answer), "{text}");
    assert!(text.contains("confidence: "), "{text}");
    // Relevance beside grounding, with the JSON's names and values.
    let band = json["confidence_band"].as_str().unwrap();
    let grounding = json["grounding_band"].as_str().unwrap();
    assert!(
        text.contains(&format!(
            "(grounding_band {grounding}, confidence_band {band})"
        )),
        "{text}"
    );
    let relevance = json["relevance"].as_f64().unwrap();
    assert!(
        text.contains(&format!(
            "relevance: {relevance:.2} (relevance_basis query_terms, relevance_band {})",
            json["relevance_band"].as_str().unwrap()
        )),
        "{text}"
    );
}
