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
