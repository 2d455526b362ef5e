//! LocalChat parity with the transformers reference (`qwen3_tiny_a/greedy.json`): prompt
//! tokenization, first-step logits, 24 greedy ids per prompt; KV cache vs none; seeded sampling;
//! stop tokens; the chat template.
#![cfg(feature = "models")]

use std::path::Path;

use rerank::answer::{DecodeParams, LocalChat};
use rerank::answer::{GenerationRequest, Message, Role};
use rerank::models::{ModelOptions, Precision};
use rerank::Generator;
use serde_json::Value;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/fixtures/qwen3_tiny_a"
);

struct Case {
    prompt: String,
    prompt_ids: Vec<u32>,
    new_ids: Vec<u32>,
    margins: Vec<f64>,
    top5_ids: Vec<u32>,
    top5_logits: Vec<f32>,
}

fn load() -> Option<(LocalChat, Vec<Case>)> {
    let dir = Path::new(FIXTURE);
    if !dir.join("model/model.safetensors").is_file() || !dir.join("greedy.json").is_file() {
        crate::common::skip(&format!("skipping: {FIXTURE} is absent"));
        return None;
    }
    let model = LocalChat::from_dir(dir.join("model")).unwrap();
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("greedy.json")).unwrap()).unwrap();
    let u32s = crate::common::u32s;
    let cases = json["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            prompt: c["prompt"].as_str().unwrap().to_string(),
            prompt_ids: u32s(&c["prompt_ids"]),
            new_ids: u32s(&c["greedy_new_ids"]),
            margins: c["step_top1_top2_margin"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect(),
            top5_ids: u32s(&c["first_step_top5_ids"]),
            top5_logits: c["first_step_top5_logits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect(),
        })
        .collect();
    Some((model, cases))
}

fn greedy(n: usize) -> DecodeParams {
    DecodeParams {
        max_new_tokens: n,
        ..Default::default()
    }
}

#[test]
fn tokenizes_raw_prompts_like_the_reference() {
    let Some((model, cases)) = load() else { return };
    assert_eq!(cases.len(), 4);
    for c in &cases {
        assert_eq!(
            model.encode(&c.prompt, false).unwrap(),
            c.prompt_ids,
            "{:?}",
            c.prompt
        );
    }
}

#[test]
fn first_step_logits_match_the_reference() {
    let Some((model, cases)) = load() else { return };
    for c in &cases {
        let logits = model.next_token_logits(&c.prompt_ids).unwrap();
        assert_eq!(logits.len(), 151936);
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        let top5: Vec<u32> = order[..5].iter().map(|&i| i as u32).collect();
        assert_eq!(top5, c.top5_ids, "{:?}", c.prompt);
        assert_eq!(c.top5_ids.len(), c.top5_logits.len());
        for (id, want) in c.top5_ids.iter().zip(&c.top5_logits) {
            let got = logits[*id as usize];
            assert!((got - want).abs() < 1e-4, "id {id}: {got} vs {want}");
        }
    }
}

#[test]
fn greedy_decoding_reproduces_the_reference_ids() {
    let Some((model, cases)) = load() else { return };
    for c in &cases {
        let out = model.generate_ids(&c.prompt_ids, &greedy(24)).unwrap();
        assert_eq!(out.ids.len(), 24);
        assert!(!out.stopped);
        assert_eq!(out.ids.len(), c.new_ids.len());
        for (step, (got, want)) in out.ids.iter().zip(&c.new_ids).enumerate() {
            if c.margins[step] < 1e-3 {
                // A near-tie in the reference: this step and the rest are not comparable.
                eprintln!("{:?}: near-tie at step {step}, stopped comparing", c.prompt);
                break;
            }
            assert_eq!(got, want, "{:?}: step {step}", c.prompt);
        }
    }
}

#[test]
fn decoding_without_the_kv_cache_gives_the_same_ids() {
    let Some((model, cases)) = load() else { return };
    for c in &cases {
        let cached = model.generate_ids(&c.prompt_ids, &greedy(24)).unwrap();
        let uncached = model
            .generate_ids(
                &c.prompt_ids,
                &DecodeParams {
                    use_kv_cache: false,
                    ..greedy(24)
                },
            )
            .unwrap();
        assert_eq!(cached.ids, uncached.ids, "{:?}", c.prompt);
    }
}

/// With a sliding window (every layer from layer 1 on sees its last 5 keys, transformers'
/// `max_window_layers` rule; the 24 new tokens go past it) the decode steps read the cache within the window as the prompt
/// pass does: cached and uncached decoding agree, and the window changes what is generated.
#[test]
fn a_sliding_window_decodes_the_same_with_and_without_the_cache() {
    let Some((model, cases)) = load() else { return };
    let dir = std::env::temp_dir().join(format!("rerank-qwen3-sliding-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    crate::common::copy_dir(&Path::new(FIXTURE).join("model"), &dir);
    let path = dir.join("config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["use_sliding_window"] = Value::Bool(true);
    config["sliding_window"] = Value::from(5);
    config["max_window_layers"] = Value::from(1);
    config.as_object_mut().unwrap().remove("layer_types");
    std::fs::write(&path, config.to_string()).unwrap();
    let sliding = LocalChat::from_dir(&dir).unwrap();
    let mut changed = 0;
    for c in &cases {
        let cached = sliding.generate_ids(&c.prompt_ids, &greedy(24)).unwrap();
        let uncached = sliding
            .generate_ids(
                &c.prompt_ids,
                &DecodeParams {
                    use_kv_cache: false,
                    ..greedy(24)
                },
            )
            .unwrap();
        assert_eq!(cached.ids, uncached.ids, "{:?}", c.prompt);
        let full = model.generate_ids(&c.prompt_ids, &greedy(24)).unwrap();
        changed += usize::from(full.ids != cached.ids);
    }
    assert!(changed > 0, "the window changed no generation");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sampling_is_reproducible_with_a_seed() {
    let Some((model, cases)) = load() else { return };
    let sample = |seed: u64| {
        let p = DecodeParams {
            max_new_tokens: 24,
            temperature: 0.8,
            top_p: 0.9,
            seed,
            ..Default::default()
        };
        model.generate_ids(&cases[0].prompt_ids, &p).unwrap().ids
    };
    let a = sample(7);
    assert_eq!(a.len(), 24);
    assert_eq!(a, sample(7));
    assert_ne!(a, sample(8));
    assert_ne!(a, cases[0].new_ids, "sampling differs from greedy decoding");
}

#[test]
fn stop_tokens_and_max_new_tokens_end_decoding() {
    let Some((model, cases)) = load() else { return };
    let c = &cases[0];
    // Stop at the 6th greedy id (first occurrence): the first five come out, stopped = true.
    let stop = c.new_ids[5];
    let first = c.new_ids.iter().position(|&x| x == stop).unwrap();
    let out = model
        .generate_ids(
            &c.prompt_ids,
            &DecodeParams {
                stop_ids: vec![stop],
                ..greedy(24)
            },
        )
        .unwrap();
    assert!(out.stopped);
    assert_eq!(out.ids, c.new_ids[..first]);

    let out = model.generate_ids(&c.prompt_ids, &greedy(3)).unwrap();
    assert_eq!(out.ids, c.new_ids[..3]);
    assert!(!out.stopped);
    assert!(model.generate_ids(&[], &greedy(3)).is_err());
    assert!(model.generate_ids(&[u32::MAX], &greedy(3)).is_err());
}

#[test]
fn the_generator_uses_the_chat_template_without_thinking() {
    let Some((model, cases)) = load() else { return };
    // Case 0 is the chat template applied to one user message; case 1 to system + user.
    let user_only = [Message::new(Role::User, "What is Taylor's KTN?")];
    assert_eq!(LocalChat::chat_prompt(&user_only), cases[0].prompt);
    let with_system = [
        Message::new(Role::System, "Answer only from the context."),
        Message::new(
            Role::User,
            "Context:\n[1] report.pdf p.3: Revenue was $5M in 2023.\n\nQuestion: What was the revenue?",
        ),
    ];
    assert_eq!(LocalChat::chat_prompt(&with_system), cases[1].prompt);

    let request = GenerationRequest {
        messages: with_system.to_vec(),
        max_new_tokens: 24,
        ..Default::default()
    };
    let g = model.generate(&request).unwrap();
    // The reference ids contain no stop token, so all 24 are decoded.
    assert!(cases[1]
        .new_ids
        .iter()
        .all(|id| !model.stop_ids().contains(id)));
    assert_eq!(g.text, model.decode(&cases[1].new_ids).unwrap());
    assert_eq!(g.finish_reason.as_deref(), Some("length"));
}

#[test]
fn timings_count_the_decode_steps() {
    let Some((model, cases)) = load() else { return };
    let out = model
        .generate_ids(&cases[0].prompt_ids, &greedy(12))
        .unwrap();
    assert_eq!(out.ids.len(), 12);
    // The first new token comes from the prefill; each later one from a decode step.
    assert_eq!(out.timings.decode_steps, 11);
    assert!(out.timings.prefill > std::time::Duration::ZERO);
    assert!(out.timings.decode_tokens_per_second() > 0.0);
    let one = model
        .generate_ids(&cases[0].prompt_ids, &greedy(1))
        .unwrap();
    assert_eq!(one.timings.decode_steps, 0);
    assert_eq!(one.timings.decode_tokens_per_second(), 0.0);
    assert_eq!(one.ids, cases[0].new_ids[..1]);
}

/// bf16 weights: the first-step logits track f32 closely, and the top token agrees wherever
/// the f32 model's top two are not a near-tie.
#[test]
fn bf16_weights_track_f32() {
    let Some((f32_model, cases)) = load() else {
        return;
    };
    let bf16 = LocalChat::builder(Path::new(FIXTURE).join("model"))
        .options(ModelOptions::default().precision(Precision::Bf16))
        .build()
        .unwrap();
    assert_eq!(bf16.precision(), Precision::Bf16);
    for c in &cases {
        let a = f32_model.next_token_logits(&c.prompt_ids).unwrap();
        let b = bf16.next_token_logits(&c.prompt_ids).unwrap();
        assert_eq!(a.len(), b.len());
        let range = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let worst = a
            .iter()
            .zip(&b)
            .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(worst < 0.05 * range, "{:?}: {worst} of {range}", c.prompt);
        assert_ne!(a, b, "bf16 rounding changed nothing: not bf16");
        if c.margins[0] > 0.05 * f64::from(range) {
            let top = |l: &[f32]| (0..l.len()).max_by(|&i, &j| l[i].total_cmp(&l[j])).unwrap();
            assert_eq!(top(&a), top(&b), "{:?}", c.prompt);
        }
        // Greedy decoding runs to the end in bf16 too.
        let out = bf16.generate_ids(&c.prompt_ids, &greedy(8)).unwrap();
        assert_eq!(out.ids.len(), 8);
    }
}

#[test]
fn precisions_other_than_f32_and_bf16_are_refused() {
    let dir = Path::new(FIXTURE).join("model");
    if !dir.join("model.safetensors").is_file() {
        crate::common::skip(&format!("skipping: {FIXTURE} is absent"));
        return;
    }
    let e = LocalChat::builder(&dir)
        .options(ModelOptions::default().precision(Precision::Int8))
        .build()
        .unwrap_err()
        .to_string();
    assert!(e.contains("int8"), "{e}");
}
