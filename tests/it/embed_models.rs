//! The embedding model zoo: XLM-RoBERTa (multilingual-e5's mean pooling with prompts, bge-m3's
//! cls) and Qwen3-Embedding (last token, left or right padding, an instruction on queries)
//! against sentence-transformers 6.2 on tiny random checkpoints (tests/fixtures/st_xlmr_tiny
//! and st_qwen3_tiny, made by the make.py beside each); `load_embedder` choosing the family,
//! the registry's prompts for a folder named after a known model, `load_reranker` never taking
//! an embedding model for a yes/no reranker, and a hub id fetched through a loopback hub,
//! loaded again with the server stopped and offline.
#![cfg(feature = "models")]

use std::path::{Path, PathBuf};

use rerank::models::ModelOptions;
use rerank::{load_embedder, BertEmbedder, Embedder, Qwen3Embedder, Role};

use crate::st_embed_parity::{assert_matches_sentence_transformers, expected_in};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn options() -> ModelOptions {
    ModelOptions::default().threads(2)
}

#[test]
fn xlm_roberta_embedders_match_sentence_transformers() {
    let root = fixture("st_xlmr_tiny");
    let expected = expected_in(&root);
    assert_eq!(expected.len(), 2);
    for (case, want) in &expected {
        let dir = root.join(case);
        let e = load_embedder(&dir, &options()).unwrap();
        assert!(e.id().unwrap().starts_with("xlmr-"), "{case}");
        let bare = BertEmbedder::builder(&dir)
            .prompt(Role::Query, "")
            .prompt(Role::Document, "")
            .build()
            .unwrap();
        assert_eq!(bare.max_length(), want.max_seq_length, "{case}");
        let ids = |text: &str| bare.token_ids(text).unwrap();
        assert_matches_sentence_transformers(case, want, &*e, &bare, &ids);
        // Leading, trailing and repeated whitespace, tabs and line breaks: as transformers 5
        // rebuilds an XLM-R tokenizer, not as tokenizer.json alone would tokenize them.
        assert_eq!(want.whitespace_ids.len(), 6, "{case}");
        for (text, want) in &want.whitespace_ids {
            assert_eq!(&ids(text), want, "{case}: {text:?}");
        }
    }
}

/// A CamemBERT sentence-transformers model (sentence-camembert) is XLM-R's computation under
/// `model_type` `camembert`: st_xlmr_tiny's `e5_mean` relabelled so (`CamembertModel`) loads
/// through `load_embedder` and matches sentence-transformers' vectors of the folder
/// (sentence-transformers 6.2 runs the relabelled copy, a `CamembertModel` with a
/// `CamembertTokenizer`, within 9e-8 of them, with the same ids for every whitespace case).
#[test]
fn camembert_embedders_load_as_the_roberta_family() {
    let root = fixture("st_xlmr_tiny");
    let want = &expected_in(&root)["e5_mean"];
    let dir = temp("camembert");
    crate::common::copy_dir(&root.join("e5_mean"), &dir);
    let path = dir.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["model_type"] = "camembert".into();
    config["architectures"] = serde_json::json!(["CamembertModel"]);
    std::fs::write(&path, config.to_string()).unwrap();
    // Its tokenizer class too: transformers 5 rebuilds CamembertTokenizer as XLM-R's.
    let path = dir.join("tokenizer_config.json");
    let mut tokenizer: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    tokenizer["tokenizer_class"] = "CamembertTokenizer".into();
    std::fs::write(&path, tokenizer.to_string()).unwrap();
    let e = load_embedder(&dir, &options()).unwrap();
    assert!(e.id().unwrap().starts_with("xlmr-"));
    let bare = BertEmbedder::builder(&dir)
        .prompt(Role::Query, "")
        .prompt(Role::Document, "")
        .build()
        .unwrap();
    let ids = |text: &str| bare.token_ids(text).unwrap();
    let worst = assert_matches_sentence_transformers("camembert", want, &*e, &bare, &ids);
    assert!(worst >= 0.99999, "{worst}");
    // Leading, trailing and repeated whitespace, tabs and line breaks as transformers 5
    // tokenizes them for CamembertTokenizer (the same ids as XLM-R's, checked there).
    assert_eq!(want.whitespace_ids.len(), 6);
    for (text, want) in &want.whitespace_ids {
        assert_eq!(&ids(text), want, "{text:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn qwen3_embedders_match_sentence_transformers() {
    let root = fixture("st_qwen3_tiny");
    let expected = expected_in(&root);
    assert_eq!(expected.len(), 2);
    for (case, want) in &expected {
        let dir = root.join(case);
        let e = load_embedder(&dir, &options()).unwrap();
        assert!(e.id().unwrap().starts_with("qwen3emb-"), "{case}");
        let bare = Qwen3Embedder::builder(&dir)
            .prompt(Role::Query, "")
            .prompt(Role::Document, "")
            .build()
            .unwrap();
        assert_eq!(bare.max_length(), want.max_seq_length, "{case}");
        let ids = |text: &str| bare.token_ids_as(text, Role::Document).unwrap();
        assert_matches_sentence_transformers(case, want, &*e, &bare, &ids);
    }
    // The query instruction is the model's, and a host can replace it.
    let dir = root.join("lasttoken");
    let e = Qwen3Embedder::builder(&dir).build().unwrap();
    assert!(e.prompt(Role::Query).unwrap().starts_with("Instruct: "));
    assert_eq!(e.prompt(Role::Document), None);
    let custom = Qwen3Embedder::builder(&dir)
        .prompt(Role::Query, "Instruct: find the statute\nQuery:")
        .build()
        .unwrap();
    let q = "penalty for late filing";
    assert_ne!(e.embed_query(q).unwrap(), custom.embed_query(q).unwrap());
    assert_ne!(e.id(), custom.id());
}

#[test]
fn qwen3_precisions_stay_close_to_f32() {
    let dir = fixture("st_qwen3_tiny").join("lasttoken");
    let texts = ["what is rust", "Rust is a systems programming language."];
    let f32 = Qwen3Embedder::from_dir(&dir)
        .unwrap()
        .embed(&texts)
        .unwrap();
    for precision in [
        rerank::models::Precision::Bf16,
        rerank::models::Precision::Int8,
    ] {
        let e = Qwen3Embedder::builder(&dir)
            .options(ModelOptions::default().precision(precision))
            .build()
            .unwrap();
        let got = e.embed(&texts).unwrap();
        for (a, b) in got.rows().into_iter().zip(f32.rows()) {
            let c = rerank::embed::cosine(a.as_slice().unwrap(), b.as_slice().unwrap());
            assert!(c > 0.99, "{precision:?}: cosine {c}");
        }
    }
}

fn temp(tag: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("rerank-embed-models-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn a_folder_named_after_a_known_model_gets_its_model_cards_prompts() {
    let tmp = temp("registry");
    // bge_m3_cls declares no prompts; in a folder called multilingual-e5-small it gets e5's.
    let dir = tmp.join("multilingual-e5-small");
    crate::common::copy_dir(&fixture("st_xlmr_tiny").join("bge_m3_cls"), &dir);
    let e = load_embedder(&dir, &options()).unwrap();
    let by_hand = BertEmbedder::builder(&dir)
        .prompt(Role::Query, "query: ")
        .prompt(Role::Document, "passage: ")
        .build()
        .unwrap();
    let text = "Berlin is the capital of Germany";
    assert_eq!(
        e.embed_query(text).unwrap(),
        by_hand.embed_query(text).unwrap()
    );
    assert_eq!(e.embed_one(text).unwrap(), by_hand.embed_one(text).unwrap());
    assert_ne!(e.embed_query(text).unwrap(), e.embed_one(text).unwrap());
    // A directory's own prompts win over the registry's.
    let own = tmp.join("bge-small-en-v1.5");
    crate::common::copy_dir(&fixture("st_xlmr_tiny").join("e5_mean"), &own);
    let e = load_embedder(&own, &options()).unwrap();
    let direct = BertEmbedder::from_dir(&own).unwrap();
    assert_eq!(
        e.embed_query(text).unwrap(),
        direct.embed_query(text).unwrap()
    );
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn embedding_models_are_never_taken_for_yes_no_rerankers() {
    use rerank::rerankers::{load_reranker, RerankQuery};
    // Qwen3-Embedding's config.json says Qwen3ForCausalLM; its modules make it an embedder.
    let dir = fixture("st_qwen3_tiny").join("lasttoken");
    let reranker = load_reranker(&dir, &options()).unwrap();
    assert_eq!(reranker.name(), "embedding");
    let e = Qwen3Embedder::from_dir(&dir).unwrap();
    let query = "what is rust";
    let docs = ["Rust is a language", "the cat sat"];
    let scores = reranker.score(&RerankQuery::new(query), &docs).unwrap();
    let q = e.embed_query(query).unwrap();
    for (doc, score) in docs.iter().zip(&scores) {
        let d = e.embed_one(doc).unwrap();
        assert!((rerank::embed::cosine(&q, &d) - score).abs() < 1e-6);
    }
    // An XLM-R embedder too, and a model_type nothing loads is refused naming the file.
    let reranker = load_reranker(fixture("st_xlmr_tiny").join("e5_mean"), &options()).unwrap();
    assert_eq!(reranker.name(), "embedding");
    let tmp = temp("deberta");
    crate::common::copy_dir(&fixture("st_xlmr_tiny").join("e5_mean"), &tmp);
    let config = tmp.join("config.json");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("\"xlm-roberta\"", "\"deberta-v2\"")).unwrap();
    let e = load_embedder(&tmp, &options()).err().unwrap();
    assert!(
        e.to_string()
            .contains("model_type \"deberta-v2\" is not supported"),
        "{e}"
    );
    assert!(e.to_string().contains("config.json"), "{e}");
    std::fs::remove_dir_all(&tmp).unwrap();

    // A cross-encoder is not an embedder: refused by name (it returned vectors before).
    let ce = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/xlmr_tiny"
    ));
    let e = load_embedder(ce, &options()).err().unwrap().to_string();
    assert!(
        e.contains("XLMRobertaForSequenceClassification is a cross-encoder")
            && e.contains("load_reranker"),
        "{e}"
    );
}

#[cfg(feature = "hf-hub")]
#[test]
fn a_hub_name_downloads_loads_and_loads_again_without_the_server() {
    let Some(bin) = crate::common::rerank_cli() else {
        return;
    };
    let root = fixture("st_xlmr_tiny");
    let want = &expected_in(&root)["e5_mean"];
    let (base, server) = crate::common::hub_server("test-org/tiny-e5", root.join("e5_mean"));
    let tmp = temp("hub");
    std::fs::create_dir_all(&tmp).unwrap();
    let input = tmp.join("texts.jsonl");
    let texts: Vec<&str> = want.cases().iter().map(|c| c.0).collect();
    crate::common::write_texts_jsonl(&input, &texts);
    let cache = tmp.join("hub-cache");
    let cache_s = cache.to_str().unwrap();
    let check = |got: Vec<Vec<f32>>, how: &str| {
        assert_eq!(got.len(), texts.len(), "{how}");
        for ((text, want), got) in want.cases().iter().zip(&got) {
            let c = rerank::embed::cosine(got, want);
            assert!(c >= 0.99999, "{how}: {text:?}: cosine {c}");
        }
    };
    let online = [("HF_ENDPOINT", base.as_str()), ("HF_HUB_CACHE", cache_s)];
    check(
        crate::common::cli_embed(&bin, "test-org/tiny-e5", &input, &online),
        "downloaded",
    );
    // The cache holds the sentence-transformers files in the hub's layout.
    let snapshot = cache.join("models--test-org--tiny-e5/snapshots");
    let snapshot = std::fs::read_dir(&snapshot)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    for f in [
        "modules.json",
        "1_Pooling/config.json",
        "config_sentence_transformers.json",
    ] {
        assert!(snapshot.join(f).is_file(), "{f} not fetched");
    }
    crate::common::stop_hub(&base);
    let served = server.join().unwrap();
    assert!(served >= 6, "{served} files served");
    // The server is gone: the cache answers, with and without offline mode.
    check(
        crate::common::cli_embed(&bin, "test-org/tiny-e5", &input, &online),
        "server stopped",
    );
    let offline = [("HF_HUB_OFFLINE", "1"), ("HF_HUB_CACHE", cache_s)];
    check(
        crate::common::cli_embed(&bin, "test-org/tiny-e5", &input, &offline),
        "offline",
    );
    std::fs::remove_dir_all(&tmp).unwrap();
}
