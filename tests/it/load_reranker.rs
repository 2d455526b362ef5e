//! `load_reranker` picks the reranker from `config.json`, and `PipelineConfig` builds every
//! reranker kind: each gives the scores of the model it stands for.
#![cfg(feature = "models")]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rerank::embed::BertEmbedder;
use rerank::models::ModelOptions;
use rerank::pipeline::PipelineConfig;
use rerank::rerankers::RerankQuery;
use rerank::rerankers::{load_reranker, CrossEncoder, EmbeddingReranker, Qwen3Reranker};
use rerank::{Document, Error, Reranker};

const SHARED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures");

fn fixture(name: &str) -> Option<PathBuf> {
    let dir = Path::new(SHARED).join(name).join("model");
    if dir.join("model.safetensors").is_file() {
        Some(dir)
    } else {
        crate::common::skip(&format!("skipping: {} not found", dir.display()));
        None
    }
}

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
const DOCS: [&str; 3] = [
    "Vaccines expose the immune system to a harmless antigen so it learns to respond.",
    "The recipe needs two cups of flour and a pinch of salt.",
    "",
];

fn scores(r: &dyn Reranker) -> Vec<f32> {
    r.score(&RerankQuery::new(QUERY), &DOCS).unwrap()
}

#[test]
fn a_cross_encoder_directory_gives_the_cross_encoder() {
    let Some(dir) = fixture("ce_tiny_a") else {
        return;
    };
    let loaded = load_reranker(&dir, &ModelOptions::default().threads(1)).unwrap();
    assert_eq!(loaded.name(), "cross-encoder");
    let direct = CrossEncoder::from_dir(&dir).unwrap();
    assert_eq!(scores(loaded.as_ref()), scores(&direct));
}

#[test]
fn a_qwen3_directory_gives_the_qwen3_reranker() {
    let Some(dir) = fixture("qwen3_tiny_a") else {
        return;
    };
    let loaded = load_reranker(&dir, &ModelOptions::default()).unwrap();
    assert_eq!(loaded.name(), "qwen3-reranker");
    let direct = Qwen3Reranker::from_dir(&dir).unwrap();
    assert_eq!(scores(loaded.as_ref()), scores(&direct));
}

#[test]
fn a_bert_model_directory_gives_embedding_cosine() {
    let Some(dir) = minilm() else {
        return;
    };
    let loaded = load_reranker(&dir, &ModelOptions::default().threads(2)).unwrap();
    assert_eq!(loaded.name(), "embedding");
    let direct = EmbeddingReranker::new(Arc::new(BertEmbedder::from_dir(&dir).unwrap()));
    let got = scores(loaded.as_ref());
    assert_eq!(got, scores(&direct));
    // A real bi-encoder: the on-topic document beats the recipe.
    assert!(got[0] > got[1] + 0.2, "{got:?}");
}

#[test]
fn other_architectures_and_missing_directories_are_errors() {
    let Some(src) = fixture("ce_tiny_a") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("rerank-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["tokenizer.json", "model.safetensors"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    std::fs::write(
        dir.join("config.json"),
        r#"{"architectures": ["GPT2LMHeadModel"]}"#,
    )
    .unwrap();
    let Err(e) = load_reranker(&dir, &ModelOptions::default()) else {
        panic!("a GPT-2 directory loaded as a reranker");
    };
    let _ = std::fs::remove_dir_all(&dir);
    match e {
        Error::Model { message: m, .. } => {
            assert!(
                m.contains("GPT2LMHeadModel") && m.contains("config.json"),
                "{m}"
            );
            assert!(
                m.contains("Qwen3ForCausalLM") && m.contains("BertModel"),
                "{m}"
            );
        }
        other => panic!("expected Error::Model, got {other:?}"),
    }
    assert!(load_reranker("/nonexistent/reranker", &ModelOptions::default()).is_err());
}

#[test]
fn a_pipeline_config_builds_the_qwen3_reranker() {
    let Some(dir) = fixture("qwen3_tiny_a") else {
        return;
    };
    let json = serde_json::json!({
        "retriever": {"type": "bm25"},
        "reranker": {"type": "qwen3", "model": dir},
        "search": {"top_k": 1},
    });
    let config = PipelineConfig::from_json_str(&json.to_string()).unwrap();
    let texts = [
        "Vaccines train the immune system to fight infection.",
        "Exercise helps the immune system and the heart.",
    ];
    let docs: Vec<Document> = texts
        .iter()
        .enumerate()
        .map(|(i, d)| Document::new(i.to_string(), *d))
        .collect();
    let pipeline = config.build(docs).unwrap();
    let query = "immune system";
    let response = pipeline.search(query).unwrap();
    assert_eq!(response.scorer, "qwen3-reranker");
    let want = Qwen3Reranker::from_dir(&dir)
        .unwrap()
        .score(&RerankQuery::new(query), &texts)
        .unwrap();
    let best = if want[0] >= want[1] { 0 } else { 1 };
    assert_eq!(response.hits.len(), 1);
    assert_eq!(response.hits[0].document.id, best.to_string());
    let got = response.hits[0].rerank_score.unwrap();
    assert!((got - want[best]).abs() < 1e-6, "{got} vs {}", want[best]);
}

/// jina-reranker-v2's layout is read (tests/it/sweep.rs checks its scores); a checkpoint of
/// that layout with tensors it does not map (jina-embeddings-v3's LoRA adapters) is refused
/// naming the tensor, and one whose layers are in no known layout naming the architecture,
/// never with a missing tensor.
#[test]
fn flash_layout_checkpoints_with_more_or_unknown_layers_are_refused_by_name() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/jina_v2_tiny/xlmr_flash/heads4_f32");
    assert!(load_reranker(&src, &ModelOptions::default()).is_ok());
    let refusal = |tag: &str, edit: &dyn Fn(&mut HashMap<String, candle_core::Tensor>)| {
        let dir = std::env::temp_dir().join(format!("rerank-flash-{tag}-{}", std::process::id()));
        crate::common::copy_dir(&src, &dir);
        let path = dir.join("model.safetensors");
        let mut tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu).unwrap();
        edit(&mut tensors);
        candle_core::safetensors::save(&tensors, &path).unwrap();
        let result = load_reranker(&dir, &ModelOptions::default());
        let _ = std::fs::remove_dir_all(&dir);
        match result {
            Err(Error::Model { message, .. }) => message,
            Err(other) => panic!("{tag}: expected Error::Model, got {other:?}"),
            Ok(_) => panic!("{tag}: the checkpoint loaded"),
        }
    };
    let lora = "roberta.encoder.layers.1.mixer.Wqkv.parametrizations.weight.0.lora_A";
    let m = refusal("lora", &|t| {
        let a =
            candle_core::Tensor::zeros((4, 32), candle_core::DType::F32, &candle_core::Device::Cpu);
        t.insert(lora.to_string(), a.unwrap());
    });
    assert!(
        m.contains(lora) && m.contains("flash-attention layout") && m.contains("LoRA"),
        "{m}"
    );
    let m = refusal("unknown", &|t| {
        let names: Vec<String> = t.keys().cloned().collect();
        for name in names {
            if let Some(rest) = name.strip_prefix("roberta.encoder.layers.") {
                let v = t.remove(&name).unwrap();
                t.insert(
                    format!("roberta.encoder.layer.{}", rest.replace("mixer.", "attn.")),
                    v,
                );
            }
        }
    });
    assert!(
        m.contains("architecture XLMRobertaForSequenceClassification in an unknown layout")
            && m.contains("supported: ")
            && m.contains("encoder.layers.N.mixer.Wqkv"),
        "{m}"
    );
}

/// `Reranker::score_pairs` (how `rerank serve` scores many clients' requests together) gives
/// every pair the score its query's own call gives it: one packed call for the cross-encoder
/// and Qwen3, one call per query for the others.
#[test]
fn pairs_of_many_queries_score_as_each_query_alone() {
    let (Some(ce), Some(qwen3)) = (fixture("ce_tiny_a"), fixture("qwen3_tiny_a")) else {
        return;
    };
    let options = ModelOptions::default().threads(2);
    let rerankers: Vec<Box<dyn Reranker>> = vec![
        load_reranker(&ce, &options).unwrap(),
        load_reranker(&qwen3, &options).unwrap(),
        Box::new(rerank::rerankers::LexicalReranker),
    ];
    let q1 = RerankQuery::new(QUERY);
    let q2 = RerankQuery::new("flour and salt").with_instruction("Find recipes");
    let pairs: Vec<(&RerankQuery, &str)> = vec![
        (&q1, DOCS[0]),
        (&q2, DOCS[1]),
        (&q1, DOCS[1]),
        (&q2, DOCS[2]),
        (&q1, DOCS[2]),
    ];
    for r in &rerankers {
        let together = r.score_pairs(&pairs).unwrap();
        let one = r.score(&q1, &DOCS).unwrap();
        let two = r.score(&q2, &DOCS[1..]).unwrap();
        let expected = [one[0], two[0], one[1], two[1], one[2]];
        for (got, want) in together.iter().zip(expected) {
            assert!((got - want).abs() <= 1e-5, "{}: {got} vs {want}", r.name());
        }
    }
}

/// `rerank score` on a Qwen3-Embedding folder (its config.json says `Qwen3ForCausalLM`, its
/// modules.json has a Pooling module) scores by embedding cosine, as `load_reranker` does, and
/// never as a yes/no reranker.
#[test]
fn the_cli_scores_a_qwen3_embedding_folder_by_cosine() {
    let Some(bin) = crate::common::rerank_cli() else {
        return;
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/st_qwen3_tiny/lasttoken");
    let docs = [
        "Rust is a systems programming language.",
        "Bananas are yellow.",
    ];
    let reranker = load_reranker(&dir, &ModelOptions::default().threads(2)).unwrap();
    assert_eq!(reranker.name(), "embedding");
    let want = reranker
        .score(&RerankQuery::new("what is rust"), &docs)
        .unwrap();
    let lines: Vec<serde_json::Value> = docs
        .iter()
        .map(|d| serde_json::json!({"query": "what is rust", "document": d}))
        .collect();
    let got = crate::common::cli_score(&bin, &dir, &lines, &[]);
    assert_eq!(got.len(), want.len());
    for ((score, logit), w) in got.iter().zip(&want) {
        assert!((score - *w as f64).abs() < 1e-6, "{score} vs cosine {w}");
        assert_eq!(score, logit);
    }
}
