//! EmbeddingGemma-style embedders (bidirectional Gemma3 text models) against
//! sentence-transformers 6.2 on transformers 5.24, on the tiny random models of
//! tests/fixtures/st_gemma3_tiny (made by the make.py beside them):
//! - both cases (EmbeddingGemma's layout: grouped-query attention, heads narrower than the
//!   hidden size, `query_pre_attn_scalar` not `head_dim`, two Dense projections without bias,
//!   its prompts, the transformers 4.x config spelling; and multi-head attention with a
//!   linearly scaled RoPE on the full layer, in the transformers 5 spelling; and attention
//!   biases, an odd window, the layer kinds from `sliding_window_pattern` and the RoPE from
//!   `rope_theta`, `rope_local_base_freq` and `rope_scaling`) through
//!   `Gemma3Embedder` and `load_embedder`, batched, in small batches and one text at a time;
//!   texts longer than the sliding window and than max_seq_length, the empty text, a literal
//!   `<eos>`, an emoji through the byte fallback;
//! - a `Gemma3ForCausalLM` checkpoint (tensors under `model.`) reads the same encoder;
//! - int8, and what is refused: bf16, the candle engine, configs the crate cannot honour
//!   (naming config.json and the key); the registry's EmbeddingGemma.
#![cfg(feature = "models")]

use std::path::{Path, PathBuf};

use rerank::embed::PoolingMode;
use rerank::models::registry::{self, Support};
use rerank::models::ModelOptions;
use rerank::{load_embedder, Embedder, Gemma3Embedder, Role};

use crate::model_fixtures::{
    each_edit_is_refused, int8_close_and_bf16_and_candle_refused, Broken, ConfigEdit,
};
use crate::st_embed_parity::{assert_matches_sentence_transformers, expected_in};

const CASES: [&str; 3] = ["bias_pattern", "embeddinggemma", "mha_linear_rope"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/st_gemma3_tiny")
}

fn options() -> ModelOptions {
    ModelOptions::default().threads(2)
}

/// The case's embedder with its prompts turned off (sentence-transformers' `encode()` without
/// a prompt).
fn bare(dir: &Path, options: ModelOptions) -> Gemma3Embedder {
    Gemma3Embedder::builder(dir)
        .options(options)
        .prompt(Role::Query, "")
        .prompt(Role::Document, "")
        .build()
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

#[test]
fn every_gemma3_case_matches_sentence_transformers_single_and_batched() {
    let expected = expected_in(&root());
    assert_eq!(
        expected.keys().map(String::as_str).collect::<Vec<_>>(),
        CASES
    );
    for (case, want) in &expected {
        let dir = root().join(case);
        let e = load_embedder(&dir, &options()).unwrap();
        assert!(e.id().unwrap().starts_with("gemma3-"), "{case}");
        let direct = bare(&dir, options());
        assert_eq!(direct.max_length(), want.max_seq_length, "{case}");
        let ids = |text: &str| direct.token_ids(text).unwrap();
        let worst = assert_matches_sentence_transformers(case, want, &*e, &direct, &ids);
        assert!(worst >= 0.99999, "{case}: {worst}");
        // The same, in batches of a few texts (the longest runs alone), through the type.
        let small = Gemma3Embedder::builder(&dir)
            .options(options().token_budget(100).max_batch_size(3))
            .build()
            .unwrap();
        let worst =
            assert_matches_sentence_transformers(case, want, &small, &bare(&dir, options()), &ids);
        assert!(worst >= 0.99999, "{case} in small batches: {worst}");
    }
}

#[test]
fn the_embeddinggemma_layout_is_read_as_declared() {
    let dir = root().join("embeddinggemma");
    let e = Gemma3Embedder::from_dir(&dir).unwrap();
    assert_eq!(e.pooling(), [PoolingMode::Mean]);
    assert_eq!((e.dim(), e.max_length()), (16, 64));
    assert_eq!(e.prompt(Role::Query), Some("task: search result | query: "));
    assert_eq!(e.prompt(Role::Document), Some("title: none | text: "));
    assert_eq!(e.similarity_fn_name(), Some("cosine"));
    // <bos> ... <eos>, the prompt inside; the literal <eos> in a text is the special token.
    let ids = e.token_ids_as("BM25 <eos> scores", Role::Query).unwrap();
    assert_eq!((ids[0], *ids.last().unwrap()), (2, 1), "{ids:?}");
    assert_eq!(ids.iter().filter(|&&id| id == 1).count(), 2, "{ids:?}");
    // Normalize is the last module.
    let v = e.embed_query("what is rust").unwrap();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "{norm}");
    // Every case has its own id.
    let a = bare(&dir, options()).id().unwrap();
    let b = bare(&root().join("mha_linear_rope"), options())
        .id()
        .unwrap();
    assert_ne!(a, b);
}

#[test]
fn a_causal_lm_checkpoint_reads_the_same_encoder_under_model() {
    let src = root().join("embeddinggemma");
    let b = Broken::of(&src, "gemma3-causal-lm");
    let weights = safetensors_prefixed(&src.join("model.safetensors"), "model.");
    std::fs::write(b.0.as_path().join("model.safetensors"), weights).unwrap();
    b.edit_config(|c| c["architectures"] = serde_json::json!(["Gemma3ForCausalLM"]));
    let texts = [
        "what is rust",
        "",
        "The quick brown fox jumps over the lazy dog.",
    ];
    let want = bare(&src, options()).embed(&texts).unwrap();
    let got = bare(b.0.as_path(), options()).embed(&texts).unwrap();
    assert_eq!(got, want);
}

/// The safetensors file at `path` with `prefix` before every tensor name.
fn safetensors_prefixed(path: &Path, prefix: &str) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let renamed: serde_json::Map<String, serde_json::Value> = header
        .into_iter()
        .map(|(k, v)| match k.as_str() {
            "__metadata__" => (k, v),
            _ => (format!("{prefix}{k}"), v),
        })
        .collect();
    let mut head = serde_json::to_vec(&renamed).unwrap();
    while !head.len().is_multiple_of(8) {
        head.push(b' ');
    }
    let mut out = (head.len() as u64).to_le_bytes().to_vec();
    out.extend(head);
    out.extend(&bytes[8 + n..]);
    out
}

#[test]
fn int8_stays_close_and_bf16_and_candle_are_refused() {
    int8_close_and_bf16_and_candle_refused(&root().join("embeddinggemma"), "Gemma3");
}

#[test]
fn gemma3_configs_that_cannot_be_honoured_are_refused_naming_config_json_and_the_key() {
    let cases: [(&str, ConfigEdit); 10] = [
        ("use_bidirectional_attention", |c| {
            c["use_bidirectional_attention"] = false.into()
        }),
        ("attn_logit_softcapping", |c| {
            c["attn_logit_softcapping"] = 50.0.into()
        }),
        ("hidden_activation", |c| {
            c["hidden_activation"] = "gelu_10".into()
        }),
        ("layer_types", |c| {
            c["layer_types"] = serde_json::json!(["full_attention"])
        }),
        // Sizes that do not match the tensors.
        ("hidden_size", |c| c["hidden_size"] = 32.into()),
        ("num_hidden_layers", |c| c["num_hidden_layers"] = 7.into()),
        ("num_attention_heads", |c| {
            c["num_attention_heads"] = 2.into()
        }),
        ("num_key_value_heads", |c| {
            c["num_key_value_heads"] = 4.into()
        }),
        ("head_dim", |c| c["head_dim"] = 4.into()),
        ("intermediate_size", |c| c["intermediate_size"] = 48.into()),
    ];
    // As a plain transformers folder: no pooling module to notice a width first.
    let plain = Broken::of(&root().join("embeddinggemma"), "gemma3-plain");
    for module in ["1_Pooling", "2_Dense", "3_Dense", "4_Normalize"] {
        std::fs::remove_dir_all(plain.0.join(module)).unwrap();
    }
    for file in [
        "modules.json",
        "sentence_bert_config.json",
        "config_sentence_transformers.json",
    ] {
        std::fs::remove_file(plain.0.join(file)).unwrap();
    }
    let e = bare(&plain.0, options());
    assert!(!e.is_sentence_transformers());
    assert_eq!((e.pooling(), e.dim()), (&[PoolingMode::Mean][..], 16));
    each_edit_is_refused(&plain.0, "embedder", &cases);
}

#[test]
fn the_registry_knows_embeddinggemma() {
    let m = registry::find("google/embeddinggemma-300m").unwrap();
    assert_eq!(m.support, Support::Supported);
    assert_eq!(
        (m.model_type, m.pooling, m.dim, m.max_length),
        ("gemma3_text", Some(PoolingMode::Mean), Some(768), 2048)
    );
    assert_eq!(m.query_prompt, Some("task: search result | query: "));
    assert_eq!(m.document_prompt, Some("title: none | text: "));
    assert_eq!(m.matryoshka, [768, 512, 256, 128]);
}

/// `rerank embed --model` on the EmbeddingGemma-style directory prints one `{"embedding"}`
/// line per text, with the role's prompt, as sentence-transformers encodes it.
#[test]
fn the_cli_embeds_with_the_role_s_prompt() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let dir = root().join("embeddinggemma");
    let want = &expected_in(&root())["embeddinggemma"];
    let input =
        std::env::temp_dir().join(format!("rerank-cli-gemma3-{}.jsonl", std::process::id()));
    let texts: Vec<&str> = want.cases().iter().map(|(text, _)| *text).collect();
    crate::common::write_texts_jsonl(&input, &texts);
    let got = crate::common::cli_embed(&cli, dir.to_str().unwrap(), &input, &[]);
    assert_eq!(got.len(), texts.len());
    for (g, (text, query)) in got.iter().zip(want.cases()) {
        let c = rerank::embed::cosine(g, query);
        assert!(c >= 0.99999, "{text:?}: {c}");
    }
    std::fs::remove_file(&input).unwrap();
}
