//! LocalChat on Qwen2, Llama and Mistral chat models (tests/fixtures/chat_decoders_tiny, made
//! by the make.py there against transformers 5.24) and on the real Qwen3 chat template
//! (`qwen3_template.json` over ../shared/fixtures/qwen3_tiny_a): prompts rendered from each
//! model's own chat template as `apply_chat_template` renders them, their token ids, the first
//! step's logits, 20 greedy ids, the stop tokens, a system message a template refuses, and
//! what is refused at build.
#![cfg(feature = "models")]

use std::path::{Path, PathBuf};

use rerank::answer::{DecodeParams, GenerationRequest, LocalChat, Message, Role};
use rerank::Generator;
use serde_json::Value;

use crate::common::u32s;

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/chat_decoders_tiny"
);
const QWEN3: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/fixtures/qwen3_tiny_a/model"
);
const VARIANTS: [&str; 4] = ["qwen2", "llama", "mistral", "phi3"];
/// The date the Llama conversations were rendered with (`template_kwargs.date_string`).
const DATE: &str = "26 Jul 2024";

fn dir(variant: &str) -> PathBuf {
    Path::new(FIXTURES).join(variant)
}

fn expected(variant: &str) -> Value {
    let path = dir(variant).join("expected.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn load(variant: &str) -> LocalChat {
    LocalChat::builder(dir(variant))
        .template_variable("date_string", Value::from(DATE))
        .build()
        .unwrap()
}

fn messages(v: &Value) -> Vec<Message> {
    serde_json::from_value(v.clone()).unwrap()
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn conversations(e: &Value) -> &Vec<Value> {
    e["conversations"].as_array().unwrap()
}

/// Runs `check` on every conversation of every variant, with the variant's model and the
/// conversation's name.
fn each_conversation(mut check: impl FnMut(&LocalChat, &Value, &str)) {
    for variant in VARIANTS {
        let (chat, e) = (load(variant), expected(variant));
        for c in conversations(&e) {
            check(&chat, c, &format!("{variant}/{}", c["name"]));
        }
    }
}

/// The messages the reference rendered: the conversation's, or the folded ones where its
/// template refused a system message.
fn rendered_messages(c: &Value) -> Vec<Message> {
    messages(c.get("merged_messages").unwrap_or(&c["messages"]))
}

#[test]
fn prompts_are_the_models_chat_template_rendered_as_transformers_does() {
    each_conversation(|chat, c, name| {
        let prompt = chat.prompt(&messages(&c["messages"])).unwrap();
        assert_eq!(prompt, c["rendered"].as_str().unwrap(), "{name}");
        assert_eq!(
            chat.encode(&prompt, false).unwrap(),
            u32s(&c["prompt_ids"]),
            "{name}"
        );
    });
}

#[test]
fn a_system_message_the_template_refuses_is_folded_into_the_first_user_message() {
    let (chat, e) = (load("mistral"), expected("mistral"));
    let c = conversations(&e)
        .iter()
        .find(|c| c.get("raises").is_some())
        .expect("the mistral fixture has a conversation its template refuses");
    let asked = messages(&c["messages"]);
    assert_eq!(asked[0].role, Role::System);
    let folded = rendered_messages(c);
    assert_eq!(
        folded[0].content,
        format!("{}\n\n{}", asked[0].content, asked[1].content)
    );
    // The fold is what the reference rendered for the folded messages.
    assert_eq!(chat.prompt(&asked).unwrap(), chat.prompt(&folded).unwrap());
    // A conversation the template refuses for another reason is an error with its message.
    let bad = [Message::new(Role::User, "a"), Message::new(Role::User, "b")];
    let err = chat.prompt(&bad).unwrap_err().to_string();
    assert!(err.contains(c["raises"].as_str().unwrap()), "{err}");
}

#[test]
fn llama_templates_get_todays_date_from_strftime_now() {
    let (e, chat) = (
        expected("llama"),
        LocalChat::from_dir(dir("llama")).unwrap(),
    );
    let date =
        regex::Regex::new(r"^\d{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4}$")
            .unwrap();
    for c in conversations(&e) {
        let (reference, today) = (
            c["rendered_default_date"].as_str().unwrap(),
            c["today"].as_str().unwrap(),
        );
        let (before, after) = reference.split_once(today).unwrap();
        let prompt = chat.prompt(&messages(&c["messages"])).unwrap();
        let ours = prompt
            .strip_prefix(before)
            .and_then(|p| p.strip_suffix(after))
            .unwrap_or_else(|| panic!("{prompt:?} is not {reference:?} with another date"));
        assert!(date.is_match(ours), "{ours:?}");
        let year: u32 = ours[7..].parse().unwrap();
        assert!(year >= 2026, "{ours}");
    }
}

#[test]
fn first_step_logits_match_transformers() {
    each_conversation(|chat, c, name| {
        let logits = chat.next_token_logits(&u32s(&c["prompt_ids"])).unwrap();
        let reference = f64s(&c["first_step_logits"]);
        assert_eq!(logits.len(), reference.len(), "{name}");
        let worst = logits
            .iter()
            .zip(&reference)
            .map(|(&a, &b)| (a as f64 - b).abs() / (1.0 + b.abs()))
            .fold(0.0, f64::max);
        assert!(worst < 2e-5, "{name}: relative error {worst:e}");
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        let top5: Vec<u32> = order[..5].iter().map(|&i| i as u32).collect();
        assert_eq!(top5, u32s(&c["first_step_top5_ids"]), "{name}");
    });
}

#[test]
fn greedy_decoding_reproduces_transformers_with_and_without_the_cache() {
    each_conversation(|chat, c, name| {
        let reference = u32s(&c["greedy_new_ids"]);
        let margins = f64s(&c["step_top1_top2_margin"]);
        assert!(margins.iter().all(|&m| m > 1e-3), "{name}: {margins:?}");
        let prompt = u32s(&c["prompt_ids"]);
        for use_kv_cache in [true, false] {
            let params = DecodeParams {
                max_new_tokens: reference.len(),
                use_kv_cache,
                ..Default::default()
            };
            let out = chat.generate_ids(&prompt, &params).unwrap();
            assert_eq!(out.ids, reference, "{name}, cache {use_kv_cache}");
            assert!(!out.stopped);
        }
    });
}

#[test]
fn decoding_stops_at_the_config_generation_config_and_tokenizer_eos() {
    for variant in VARIANTS {
        let (chat, e) = (load(variant), expected(variant));
        let mut ours = chat.stop_ids().to_vec();
        ours.sort_unstable();
        assert_eq!(ours, u32s(&e["stop_ids"]), "{variant}");
    }
    // Llama 3: config.json names <|end_of_text|> only; <|eot_id|>, which ends a turn, comes
    // from generation_config.json and the tokenizer's eos_token.
    let e = expected("llama");
    let eot = e["special_token_ids"]["<|eot_id|>"].as_u64().unwrap() as u32;
    assert_ne!(e["config_eos_token_id"].as_u64(), Some(eot as u64));
    assert!(load("llama").stop_ids().contains(&eot));
}

#[test]
fn the_generator_writes_until_the_turn_ends() {
    // Conversations whose greedy reference reaches a stop token: the generator's text is what
    // came before it, and it says it stopped.
    let mut seen = 0;
    each_conversation(|chat, c, name| {
        let reference = u32s(&c["greedy_new_ids"]);
        let Some(end) = reference.iter().position(|id| chat.stop_ids().contains(id)) else {
            return;
        };
        seen += 1;
        let request = GenerationRequest {
            messages: messages(&c["messages"]),
            max_new_tokens: reference.len(),
            temperature: 0.0,
            ..GenerationRequest::default()
        };
        let out = chat.generate(&request).unwrap();
        assert_eq!(out.text, chat.decode(&reference[..end]).unwrap(), "{name}");
        assert_eq!(out.finish_reason.as_deref(), Some("stop"), "{name}");
    });
    assert!(
        seen >= 2,
        "the fixtures reach a stop token in {seen} conversations"
    );
}

#[test]
fn the_real_qwen3_template_renders_as_transformers_renders_it() {
    let file = Path::new(FIXTURES).join("qwen3_template.json");
    if !Path::new(QWEN3).join("tokenizer_config.json").is_file() {
        crate::common::skip(&format!("skipping: {QWEN3} is absent"));
        return;
    }
    let e: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let chat = LocalChat::from_dir(QWEN3).unwrap();
    for c in conversations(&e) {
        assert_eq!(c["template_kwargs"]["enable_thinking"], false);
        let prompt = chat.prompt(&messages(&c["messages"])).unwrap();
        assert_eq!(prompt, c["rendered"].as_str().unwrap(), "{}", c["name"]);
        assert_eq!(chat.encode(&prompt, false).unwrap(), u32s(&c["prompt_ids"]));
    }
    // Thinking on: the same prompt without the empty thinking block.
    let thinking = LocalChat::builder(QWEN3).thinking(true).build().unwrap();
    let c = &conversations(&e)[0];
    let on = thinking.prompt(&messages(&c["messages"])).unwrap();
    let off = c["rendered"].as_str().unwrap();
    assert_eq!(
        off.strip_suffix("<think>\n\n</think>\n\n"),
        Some(on.as_str())
    );
}

fn scratch(variant: &str, tag: &str) -> PathBuf {
    let to = std::env::temp_dir().join(format!(
        "rerank-local-chat-{}-{variant}-{tag}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&to);
    crate::common::copy_dir(&dir(variant), &to);
    to
}

fn edit_json(path: &Path, edit: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(path, serde_json::to_string(&v).unwrap()).unwrap();
}

#[test]
fn a_llama_checkpoint_without_a_template_needs_one_from_the_builder() {
    let to = scratch("llama", "no-template");
    let source = {
        let v: Value = serde_json::from_str(
            &std::fs::read_to_string(to.join("tokenizer_config.json")).unwrap(),
        )
        .unwrap();
        v["chat_template"].as_str().unwrap().to_string()
    };
    edit_json(&to.join("tokenizer_config.json"), |v| {
        v.as_object_mut().unwrap().remove("chat_template");
    });
    let err = LocalChat::from_dir(&to).unwrap_err().to_string();
    assert!(
        err.contains("no chat template") && err.contains("LlamaForCausalLM"),
        "{err}"
    );
    // The template given to the builder, or saved as chat_template.jinja, is used.
    let e = expected("llama");
    let c = &conversations(&e)[0];
    let renders = |builder: rerank::answer::LocalChatBuilder| {
        let chat = builder
            .template_variable("date_string", Value::from(DATE))
            .build()
            .unwrap();
        assert_eq!(
            chat.prompt(&messages(&c["messages"])).unwrap(),
            c["rendered"].as_str().unwrap()
        );
    };
    renders(LocalChat::builder(&to).chat_template(source.clone()));
    std::fs::write(to.join("chat_template.jinja"), &source).unwrap();
    renders(LocalChat::builder(&to));
    // A template that does not compile is refused at build, naming the directory.
    std::fs::write(to.join("chat_template.jinja"), "{% for m in messages %}").unwrap();
    let err = LocalChat::from_dir(&to).unwrap_err().to_string();
    assert!(
        err.contains("chat template") && err.contains(&*to.to_string_lossy()),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&to);
}

#[test]
fn a_qwen2_checkpoint_without_a_template_writes_chat_ml() {
    let to = scratch("qwen2", "no-template");
    edit_json(&to.join("tokenizer_config.json"), |v| {
        v.as_object_mut().unwrap().remove("chat_template");
    });
    let chat = LocalChat::from_dir(&to).unwrap();
    let prompt = chat.prompt(&[Message::new(Role::User, " Hi ")]).unwrap();
    assert_eq!(
        prompt,
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    let _ = std::fs::remove_dir_all(&to);
}

#[test]
fn other_architectures_are_refused_naming_the_supported_ones() {
    let to = scratch("llama", "arch");
    for (architectures, model_type, wanted) in [
        (
            "GPT2LMHeadModel",
            "gpt2",
            "LocalChat generates with Qwen3ForCausalLM",
        ),
        ("LlamaForSequenceClassification", "llama", "load_reranker"),
        ("LlamaModel", "llama", "MistralForCausalLM"),
    ] {
        edit_json(&to.join("config.json"), |v| {
            v["architectures"] = serde_json::json!([architectures]);
            v["model_type"] = Value::from(model_type);
        });
        let err = LocalChat::from_dir(&to).unwrap_err().to_string();
        assert!(
            err.contains(wanted) && err.contains("config.json"),
            "{architectures}: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&to);
}

#[test]
fn a_pipeline_config_names_the_local_chat_generator() {
    use rerank::pipeline::GeneratorConfig;
    for kind in ["local_chat", "qwen3_chat"] {
        let yaml = format!("type: {kind}\nmodel: {:?}\n", dir("mistral"));
        let config: GeneratorConfig = serde_yaml_ng::from_str(&yaml).unwrap();
        assert_eq!(
            config,
            GeneratorConfig::LocalChat {
                model: dir("mistral"),
                precision: None
            },
            "{kind}"
        );
        let written = serde_json::to_value(&config).unwrap();
        assert_eq!(written["type"], "local_chat");
    }
    assert_eq!(load("mistral").name(), "local-chat");
}

#[test]
fn the_cli_generates_with_a_mistral_model_and_a_system_message() {
    let Some(bin) = crate::common::rerank_cli() else {
        return;
    };
    let e = expected("mistral");
    for c in conversations(&e) {
        let asked = messages(&c["messages"]);
        let (system, user) = match asked.as_slice() {
            [user] => (None, user),
            [system, user] if system.role == Role::System => (Some(system), user),
            _ => continue,
        };
        let model = dir("mistral");
        let mut args = vec![
            "generate",
            "--generator-model",
            model.to_str().unwrap(),
            "--prompt",
            &user.content,
            "--greedy",
            "--ignore-eos",
            "--max-new-tokens",
            "20",
            "--json",
        ];
        if let Some(system) = system {
            args.extend(["--system", &system.content]);
        }
        let out = std::process::Command::new(&bin)
            .args(&args)
            .output()
            .unwrap();
        let json = crate::common::json_output(&out);
        assert_eq!(
            u32s(&json["ids"]),
            u32s(&c["greedy_new_ids"]),
            "{}",
            c["name"]
        );
        assert_eq!(
            json["prompt_tokens"].as_u64(),
            Some(u32s(&c["prompt_ids"]).len() as u64)
        );
    }
}

#[test]
fn streamed_pieces_add_up_to_the_reply_and_a_break_stops_decoding() {
    use std::ops::ControlFlow;
    each_conversation(|chat, c, name| {
        let request = GenerationRequest {
            messages: messages(&c["messages"]),
            max_new_tokens: 20,
            ..GenerationRequest::default()
        };
        let whole = chat.generate(&request).unwrap();
        let usage = whole.usage.unwrap();
        assert_eq!(usage.prompt_tokens, u32s(&c["prompt_ids"]).len(), "{name}");
        let mut pieces = Vec::new();
        let streamed = chat
            .generate_stream(&request, &mut |p| {
                pieces.push(p.to_string());
                ControlFlow::Continue(())
            })
            .unwrap();
        assert_eq!(streamed, whole, "{name}");
        assert_eq!(pieces.concat(), whole.text, "{name}");
        assert!(pieces.iter().all(|p| !p.is_empty()), "{name}");
        // The caller breaking after the first piece ends the generation there.
        let mut calls = 0;
        let broken = chat
            .generate_stream(&request, &mut |_| {
                calls += 1;
                ControlFlow::Break(())
            })
            .unwrap();
        assert_eq!(calls, 1, "{name}");
        if pieces.len() > 1 {
            assert!(
                broken.usage.unwrap().completion_tokens < usage.completion_tokens,
                "{name}"
            );
        }
        // A stop string: no piece ever holds text past where the reply is cut.
        let stop: String = whole.text.chars().skip(3).take(3).collect();
        if stop.is_empty() {
            return;
        }
        let request = GenerationRequest {
            stop: vec![stop],
            ..request
        };
        let cut = chat.generate(&request).unwrap();
        let mut pieces = Vec::new();
        chat.generate_stream(&request, &mut |p| {
            pieces.push(p.to_string());
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(pieces.concat(), cut.text, "{name}");
    });
}

#[test]
fn a_phi3_config_is_checked_against_its_fused_projections() {
    let to = scratch("phi3", "sizes");
    for (key, value, wanted) in [
        ("intermediate_size", 65, "intermediate_size x 2"),
        ("num_key_value_heads", 1, "num_key_value_heads"),
    ] {
        let original = std::fs::read_to_string(to.join("config.json")).unwrap();
        edit_json(&to.join("config.json"), |v| v[key] = Value::from(value));
        let err = LocalChat::from_dir(&to).unwrap_err().to_string();
        assert!(
            err.contains(wanted) && err.contains("config.json"),
            "{key}: {err}"
        );
        std::fs::write(to.join("config.json"), original).unwrap();
    }
    assert!(LocalChat::from_dir(&to).is_ok());
    let _ = std::fs::remove_dir_all(&to);
}
