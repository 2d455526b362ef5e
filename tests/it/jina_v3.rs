//! jina-embeddings-v3 (jina's XLM-RoBERTa with rotary positions and a LoRA adapter per task,
//! in flash-attention's layout) against transformers 5.24's `JinaEmbeddingsV3Model` on the same
//! weights, on the tiny random checkpoints of tests/fixtures/jina_v3_tiny (its make.py):
//! `v3` (f32, rank-4 adapters of scale 1/4, rotary base 20000) and `heads2_bf16` (stored in bf16
//! as jina publishes it, rank-2 adapters of scale 2, base 10000, 3 layers); every task's vectors,
//! one text at a time and batched, a text of 114 tokens; queries and documents through their own
//! adapters by default; the errors of a task the model lacks and of a task on a model without
//! adapters; int8.
#![cfg(feature = "models")]

use std::path::{Path, PathBuf};

use rerank::models::{ModelOptions, Precision};
use rerank::{load_embedder, Embedder, Error, GteEmbedder, Role};
use serde_json::Value;

use crate::model_fixtures::Broken;

const VARIANTS: [&str; 2] = ["v3", "heads2_bf16"];
const TASKS: [&str; 5] = [
    "retrieval.query",
    "retrieval.passage",
    "separation",
    "classification",
    "text-matching",
];

fn fixture(variant: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/jina_v3_tiny")
        .join(variant)
}

fn expected(variant: &str) -> Value {
    let text = std::fs::read_to_string(fixture(variant).join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn rows(v: &Value) -> Vec<Vec<f32>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect()
}

fn texts(expected: &Value) -> Vec<String> {
    expected["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect()
}

/// The largest difference between `got` (rows) and the reference vectors.
fn worst(got: &ndarray::Array2<f32>, want: &[Vec<f32>]) -> f32 {
    assert_eq!(got.nrows(), want.len());
    got.outer_iter()
        .zip(want)
        .flat_map(|(g, w)| {
            assert_eq!(g.len(), w.len());
            g.iter()
                .zip(w)
                .map(|(a, b)| (a - b).abs())
                .collect::<Vec<_>>()
        })
        .fold(0.0, f32::max)
}

fn options() -> ModelOptions {
    ModelOptions::default().threads(2)
}

#[test]
fn jina_v3_embeds_every_task_as_transformers_does() {
    for variant in VARIANTS {
        let dir = fixture(variant);
        let expected = expected(variant);
        let texts = texts(&expected);
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let task = |name: &str| &expected["tasks"][name];
        assert!(texts.iter().any(|t| t.len() > 200), "a long text");
        // By default queries run through retrieval.query, documents through retrieval.passage,
        // each with its instruction.
        let e = GteEmbedder::builder(&dir)
            .options(options())
            .build()
            .unwrap();
        assert_eq!(e.tasks(), Some("retrieval.query / retrieval.passage"));
        assert_eq!(e.dim(), 32);
        for (role, name) in [(Role::Query, TASKS[0]), (Role::Document, TASKS[1])] {
            let want = task(name);
            assert_eq!(
                e.prompt(role).unwrap_or(""),
                want["instruction"].as_str().unwrap()
            );
            for (i, text) in refs.iter().enumerate() {
                let ids: Vec<u32> = want["input_ids"][i]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap() as u32)
                    .collect();
                assert_eq!(
                    e.token_ids_as(text, role).unwrap(),
                    ids,
                    "{variant} {name} {i}"
                );
            }
            let single: Vec<Vec<f32>> = refs
                .iter()
                .map(|t| e.embed_as(&[t], role).unwrap().row(0).to_vec())
                .collect();
            let single = ndarray::Array2::from_shape_vec(
                (single.len(), 32),
                single.into_iter().flatten().collect(),
            )
            .unwrap();
            let batched = e.embed_as(&refs, role).unwrap();
            let (a, b) = (
                worst(&single, &rows(&want["embeddings"])),
                worst(&batched, &rows(&want["embeddings_batched"])),
            );
            println!("{variant} {name}: largest difference {a:.1e} alone, {b:.1e} batched");
            assert!(a < 2e-6 && b < 2e-6, "{variant} {name}: {a} / {b}");
        }
        // The adapters matter: the original weights' vectors are not the tasks'.
        let none = rows(&task("none")["embeddings_batched"]);
        let passages = e.embed_as(&refs, Role::Document).unwrap();
        assert!(
            worst(&passages, &none) > 0.01,
            "{variant}: adapters change nothing"
        );
        // Every other task, for both roles (one encoder), with its (empty) instruction.
        for name in &TASKS[2..] {
            let e = GteEmbedder::builder(&dir)
                .options(options())
                .task(Role::Query, *name)
                .task(Role::Document, *name)
                .build()
                .unwrap();
            assert_eq!(e.tasks(), Some(format!("{name} / {name}").as_str()));
            let want = rows(&task(name)["embeddings_batched"]);
            for role in [Role::Query, Role::Document] {
                let got = e.embed_as(&refs, role).unwrap();
                let d = worst(&got, &want);
                assert!(d < 2e-6, "{variant} {name} {role:?}: {d}");
            }
        }
        // load_embedder reads the directory the same way.
        let loaded = load_embedder(&dir, &options()).unwrap();
        let (a, b) = (
            loaded.embed_query(refs[0]).unwrap(),
            e.embed_query(refs[0]).unwrap(),
        );
        assert_eq!(a, b, "{variant}: load_embedder");
    }
}

#[test]
fn jina_v3_task_choices_are_checked_and_part_of_the_id() {
    let dir = fixture("v3");
    let build = |q: &str, d: &str| {
        GteEmbedder::builder(&dir)
            .task(Role::Query, q)
            .task(Role::Document, d)
            .build()
    };
    let e = build("retrieval.query", "clustering").unwrap_err();
    assert!(
        matches!(e, Error::Config(_)) && e.to_string().contains("clustering"),
        "{e}"
    );
    assert!(
        e.to_string().contains("text-matching"),
        "names the tasks: {e}"
    );
    // Ids differ by task even where the instructions do not (all three are empty).
    let ids: Vec<String> = ["separation", "classification", "text-matching"]
        .iter()
        .map(|t| build(t, t).unwrap().id().unwrap())
        .collect();
    assert!(
        ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2],
        "{ids:?}"
    );
    let default = GteEmbedder::from_dir(&dir).unwrap().id().unwrap();
    assert_eq!(
        default,
        build("retrieval.query", "retrieval.passage")
            .unwrap()
            .id()
            .unwrap()
    );
    // A task on a model without adapters.
    let plain = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/st_gte_tiny/nomic_mean");
    let e = GteEmbedder::builder(&plain)
        .task(Role::Query, "retrieval.query")
        .build()
        .unwrap_err();
    assert!(
        matches!(e, Error::Config(_)) && e.to_string().contains("no task adapters"),
        "{e}"
    );
    // Nor on the embedders that are not encoders (static embeddings here).
    let root =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/st_static_tiny/retrieval");
    let e = rerank::StaticEmbedder::builder(&root)
        .task(Role::Document, "retrieval.passage")
        .build()
        .unwrap_err();
    assert!(
        matches!(e, Error::Config(_)) && e.to_string().contains("no task adapters"),
        "{e}"
    );
}

#[test]
fn jina_v3_configs_and_checkpoints_it_cannot_read_are_refused() {
    // Interleaved rotary embeddings, and factors of another rank than lora_rank says.
    let b = Broken::of(&fixture("v3"), "jina-interleaved");
    b.edit_config(|c| c["rotary_emb_interleaved"] = true.into());
    b.refused("embedder", "rotary_emb_interleaved");
    let b = Broken::of(&fixture("v3"), "jina-rank");
    b.edit_config(|c| c["lora_rank"] = 8.into());
    let e = load_embedder(&b.0, &options()).err().unwrap().to_string();
    assert!(e.contains("lora_A") && e.contains("8"), "{e}");
    // As a reranker it is the embedding-cosine one: a query's vector (its adapter) against
    // each document's (theirs).
    let reranker = rerank::rerankers::load_reranker(fixture("v3"), &options()).unwrap();
    assert_eq!(reranker.name(), "embedding");
    let e = GteEmbedder::from_dir(fixture("v3")).unwrap();
    let docs = [
        "Bananas are yellow.",
        "Rust is a systems programming language.",
    ];
    let q = e.embed_query("what is rust").unwrap();
    let d = e.embed(&docs).unwrap();
    let scores = reranker
        .score(&rerank::rerankers::RerankQuery::new("what is rust"), &docs)
        .unwrap();
    for (row, s) in d.outer_iter().zip(&scores) {
        let cos: f32 = row.iter().zip(&q).map(|(a, b)| a * b).sum();
        assert!((cos - s).abs() < 1e-6, "{cos} vs {s}");
    }
}

#[test]
fn jina_v3_runs_in_int8_close_to_f32() {
    let dir = fixture("v3");
    let expected = expected("v3");
    let texts = texts(&expected);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let int8 = GteEmbedder::builder(&dir)
        .options(options().precision(Precision::Int8))
        .build()
        .unwrap();
    assert_eq!(int8.precision(), Precision::Int8);
    let want = rows(&expected["tasks"]["retrieval.query"]["embeddings_batched"]);
    let got = int8.embed_as(&refs, Role::Query).unwrap();
    for (g, w) in got.outer_iter().zip(&want) {
        let cos: f32 = g.iter().zip(w).map(|(a, b)| a * b).sum();
        assert!(cos > 0.99, "int8 cosine {cos}");
    }
}

/// By hub id from a loopback hub in the hub's layout: the CLI fetches jina's files (its
/// config, the checkpoint with the adapters, the sentence-transformers modules) and embeds
/// queries through the retrieval.query adapter.
#[cfg(feature = "hf-hub")]
#[test]
fn jina_v3_loads_by_hub_id_from_a_loopback_hub() {
    let Some(bin) = crate::common::rerank_cli() else {
        return;
    };
    let expected = expected("v3");
    let texts = texts(&expected);
    let want = rows(&expected["tasks"]["retrieval.query"]["embeddings"]);
    let (base, server) = crate::common::hub_server("test-org/tiny-jina-v3", fixture("v3"));
    let tmp = std::env::temp_dir().join(format!("rerank-jina-hub-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let input = tmp.join("texts.jsonl");
    crate::common::write_texts_jsonl(&input, &texts);
    let cache = tmp.join("hub-cache");
    let env = [
        ("HF_ENDPOINT", base.as_str()),
        ("HF_HUB_CACHE", cache.to_str().unwrap()),
    ];
    let got = crate::common::cli_embed(&bin, "test-org/tiny-jina-v3", &input, &env);
    crate::common::stop_hub(&base);
    server.join().unwrap();
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let c = rerank::embed::cosine(g, w);
        assert!(c >= 0.999999, "text {i}: cosine {c}");
    }
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// A config's embedder section chooses the tasks (`query_task`, `document_task`); a task on a
/// model without adapters is refused when the pipeline is built.
#[test]
fn a_config_chooses_the_task_adapters() {
    let expected = expected("v3");
    let texts = texts(&expected);
    let want = rows(&expected["tasks"]["text-matching"]["embeddings"]);
    let yaml = format!(
        "embedder: {{ type: model, model: {:?}, query_task: text-matching, document_task: \
         text-matching }}\n",
        fixture("v3").display().to_string()
    );
    let config = rerank::PipelineConfig::from_yaml_str(&yaml).unwrap();
    assert_eq!(
        rerank::PipelineConfig::from_yaml_str(&config.to_yaml_string().unwrap()).unwrap(),
        config
    );
    let pipeline = config.build(Vec::new()).unwrap();
    let embedder = pipeline.embedder().unwrap();
    for (text, w) in texts.iter().zip(&want) {
        for got in [
            embedder.embed_query(text).unwrap(),
            embedder
                .embed_as(&[text], Role::Document)
                .unwrap()
                .row(0)
                .to_vec(),
        ] {
            let d = got
                .iter()
                .zip(w)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(d < 2e-6, "{text}: {d}");
        }
    }
    let plain = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/st_gte_tiny/nomic_mean");
    let yaml = format!(
        "embedder: {{ type: model, model: {:?}, query_task: retrieval.query }}\n",
        plain.display().to_string()
    );
    let e = rerank::PipelineConfig::from_yaml_str(&yaml)
        .unwrap()
        .build(Vec::new())
        .err()
        .unwrap();
    assert!(
        matches!(e, Error::Config(_)) && e.to_string().contains("no task adapters"),
        "{e}"
    );
}

/// `rerank embed --task` runs the texts through the task it names; a task on a model without
/// adapters fails naming it.
#[test]
fn the_cli_embeds_through_the_task_it_is_given() {
    let Some(bin) = crate::common::rerank_cli() else {
        return;
    };
    let expected = expected("v3");
    let texts = texts(&expected);
    let input = std::env::temp_dir().join(format!("rerank-jina-cli-{}.jsonl", std::process::id()));
    crate::common::write_texts_jsonl(&input, &texts);
    let run = |model: &Path, task: &str| {
        std::process::Command::new(&bin)
            .args(["embed", "--threads", "1", "--role", "query", "--task", task])
            .arg("--embedder")
            .arg(model)
            .arg("--input")
            .arg(&input)
            .output()
            .unwrap()
    };
    let out = run(&fixture("v3"), "text-matching");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = rows(&expected["tasks"]["text-matching"]["embeddings"]);
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), want.len());
    for (line, w) in lines.iter().zip(&want) {
        let got: Vec<f32> = line["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        let c = rerank::embed::cosine(&got, w);
        assert!(c >= 0.999999, "cosine {c}");
    }
    let plain = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/st_gte_tiny/nomic_mean");
    let out = run(&plain, "retrieval.query");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no task adapters"),
        "{err}"
    );
    std::fs::remove_file(&input).unwrap();
}

/// A checkpoint whose config.json lists adapters it does not hold (a fine-tune saved with its
/// weights plain): read as it is, without tasks or instructions (the original weights' vectors).
#[test]
fn adapters_listed_but_not_stored_are_read_without_tasks() {
    use safetensors::tensor::{SafeTensors, TensorView};
    let b = Broken::of(&fixture("v3"), "jina-plain");
    let path = b.0.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let plain: Vec<(String, TensorView<'_>)> = st
        .tensors()
        .into_iter()
        .filter(|(name, _)| !name.contains(".lora_"))
        .map(|(name, view)| {
            (
                name.replace(".parametrizations.weight.original", ".weight"),
                view,
            )
        })
        .collect();
    safetensors::tensor::serialize_to_file(plain, None, &path).unwrap();
    // The instructions come from the sentence-transformers prompts' names, which no role uses.
    let e = GteEmbedder::from_dir(&b.0).unwrap();
    assert_eq!(e.tasks(), None);
    assert_eq!(e.prompt(Role::Query), None);
    let expected = expected("v3");
    let texts = texts(&expected);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let got = e.embed_as(&refs, Role::Query).unwrap();
    let d = worst(
        &got,
        &rows(&expected["tasks"]["none"]["embeddings_batched"]),
    );
    assert!(d < 2e-6, "{d}");
    let err = GteEmbedder::builder(&b.0)
        .task(Role::Query, "retrieval.query")
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("no task adapters"), "{err}");
}
