//! Qwen3-Reranker parity with the Python reference (transformers, official model-card procedure)
//! on ../shared/fixtures/qwen3_tiny_a, and with an independent float64 re-implementation on
//! random checkpoints of other shapes (GQA group sizes, head_dim, untied head, vocab sizes).
#![cfg(feature = "models")]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use rerank::models::ModelOptions;
use rerank::rerankers::qwen3::{Qwen3Reranker, ScoreInput};
use rerank::rerankers::RerankQuery;
use rerank::{Error, Reranker};
use serde_json::Value;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/fixtures/qwen3_tiny_a"
);

fn fixture() -> Option<(PathBuf, Value)> {
    let dir = Path::new(FIXTURE);
    let scores = dir.join("scores.json");
    if !scores.is_file() {
        crate::common::skip(&format!("skipping: {} not found", scores.display()));
        return None;
    }
    let json: Value = serde_json::from_str(&std::fs::read_to_string(scores).unwrap()).unwrap();
    Some((dir.join("model"), json))
}

struct Case {
    batch: u64,
    instruction: Option<String>,
    query: String,
    document: String,
    input_ids: Vec<u32>,
    logit: f64,
    score: f64,
    score_batched: f64,
    truncated: bool,
}

fn cases(json: &Value) -> Vec<Case> {
    json["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            batch: c["batch"].as_u64().unwrap(),
            instruction: c["instruction"].as_str().map(str::to_string),
            query: c["query"].as_str().unwrap().to_string(),
            document: c["document"].as_str().unwrap().to_string(),
            input_ids: c["input_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect(),
            logit: c["logit_yes"].as_f64().unwrap() - c["logit_no"].as_f64().unwrap(),
            score: c["score"].as_f64().unwrap(),
            score_batched: c["score_batched"].as_f64().unwrap(),
            truncated: c["truncated"].as_bool().unwrap(),
        })
        .collect()
}

fn input(c: &Case) -> ScoreInput<'_> {
    ScoreInput {
        instruction: c.instruction.as_deref(),
        query: &c.query,
        document: &c.document,
    }
}

const TOL: f64 = 1e-4;

#[test]
fn the_reranker_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Qwen3Reranker>();
}

#[test]
fn template_ids_and_yes_no_ids_match_the_reference_for_all_32_triples() {
    let Some((model, json)) = fixture() else {
        return;
    };
    let r = Qwen3Reranker::from_dir(&model).unwrap();
    assert_eq!((r.yes_id(), r.no_id()), (9693, 2152));
    assert_eq!(
        r.default_instruction(),
        json["default_instruction"].as_str().unwrap()
    );
    let cases = cases(&json);
    assert_eq!(cases.len(), 32);
    let mut truncated = 0;
    for (i, c) in cases.iter().enumerate() {
        let ids = r
            .encode(c.instruction.as_deref(), &c.query, &c.document)
            .unwrap();
        assert_eq!(ids, c.input_ids, "case {i}: input ids differ");
        if c.truncated {
            truncated += 1;
            assert_eq!(
                ids.len(),
                8192,
                "case {i}: the truncated prompt is 8192 tokens"
            );
            assert_eq!(&ids[ids.len() - 9..], &c.input_ids[c.input_ids.len() - 9..]);
        }
    }
    assert_eq!(
        truncated, 1,
        "the fixture has one body cut to fit 8192 tokens"
    );
}

#[test]
fn scores_match_one_triple_at_a_time() {
    let Some((model, json)) = fixture() else {
        return;
    };
    let r = Qwen3Reranker::builder(&model)
        .options(ModelOptions::default().threads(2))
        .build()
        .unwrap();
    let mut worst = 0f64;
    for (i, c) in cases(&json).iter().enumerate() {
        let out = r.score_inputs(&[input(c)]).unwrap();
        let s = out[0];
        worst = worst.max((s.score as f64 - c.score).abs());
        assert!(
            (s.score as f64 - c.score).abs() < TOL,
            "case {i}: score {} vs {}",
            s.score,
            c.score
        );
        assert!(
            (s.logit as f64 - c.logit).abs() < TOL,
            "case {i}: logit {} vs {}",
            s.logit,
            c.logit
        );
    }
    eprintln!("worst |score - reference| one at a time: {worst:.2e}");
}

#[test]
fn scores_match_in_the_mixed_length_batches() {
    let Some((model, json)) = fixture() else {
        return;
    };
    let cases = cases(&json);
    // One forward pass per fixture batch (lengths from 73 to 8192 tokens in one pass).
    let one_pass = Qwen3Reranker::builder(&model)
        .options(ModelOptions::default().token_budget(usize::MAX))
        .build()
        .unwrap();
    let mut batches: Vec<u64> = cases.iter().map(|c| c.batch).collect();
    batches.dedup();
    for b in batches {
        let members: Vec<&Case> = cases.iter().filter(|c| c.batch == b).collect();
        let ids: Vec<&[u32]> = members.iter().map(|c| c.input_ids.as_slice()).collect();
        let from_ids = one_pass.score_token_ids(&ids).unwrap();
        let inputs: Vec<ScoreInput<'_>> = members.iter().map(|c| input(c)).collect();
        let from_text = one_pass.score_inputs(&inputs).unwrap();
        assert_eq!(
            (from_ids.len(), from_text.len()),
            (members.len(), members.len())
        );
        for ((c, a), t) in members.iter().zip(&from_ids).zip(&from_text) {
            for s in [a, t] {
                assert!((s.score as f64 - c.score_batched).abs() < TOL, "batch {b}");
                assert!((s.score as f64 - c.score).abs() < TOL, "batch {b}");
                assert!((s.logit as f64 - c.logit).abs() < TOL, "batch {b}");
            }
        }
    }
    // All 32 at once with the default token budget (several passes, grouped by length).
    let default = Qwen3Reranker::from_dir(&model).unwrap();
    let inputs: Vec<ScoreInput<'_>> = cases.iter().map(input).collect();
    let all = default.score_inputs(&inputs).unwrap();
    assert_eq!(all.len(), cases.len());
    for (i, (c, s)) in cases.iter().zip(&all).enumerate() {
        assert!((s.score as f64 - c.score).abs() < TOL, "case {i}");
    }
}

#[test]
fn the_reranker_trait_uses_the_query_instruction_or_the_default() {
    let Some((model, json)) = fixture() else {
        return;
    };
    let r = Qwen3Reranker::from_dir(&model).unwrap();
    let cases = cases(&json);
    // Cases 5 (no instruction) and 6 (the default instruction spelled out) share query and
    // document: both must give the reference score through `Reranker::score`.
    for c in &cases[5..=6] {
        let mut q = RerankQuery::new(c.query.clone());
        q.instruction = c.instruction.clone();
        let s = r.score(&q, &[&c.document]).unwrap();
        assert!((s[0] as f64 - c.score).abs() < TOL);
    }
    // Case 7 has an empty instruction, used verbatim (not replaced by the default).
    let c = &cases[7];
    assert_eq!(c.instruction.as_deref(), Some(""));
    let q = RerankQuery::new(c.query.clone()).with_instruction("");
    let s = r.score_with_logits(&q, &[&c.document]).unwrap();
    assert!((s[0].score as f64 - c.score).abs() < TOL);
    assert!(r.score(&q, &[]).unwrap().is_empty());
}

#[test]
fn an_explicit_tokenizer_path_stands_in_for_a_missing_tokenizer_json() {
    let Some((model, json)) = fixture() else {
        return;
    };
    let dir = temp_dir("no-tokenizer");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(model.join(f), dir.join(f)).unwrap();
    }
    let e = Qwen3Reranker::from_dir(&dir).unwrap_err();
    assert!(matches!(e, Error::Tokenizer { .. }), "{e}");
    assert!(e.to_string().contains(".tokenizer(path)"), "{e}");
    let r = Qwen3Reranker::builder(&dir)
        .tokenizer(model.join("tokenizer.json"))
        .build()
        .unwrap();
    let c = &cases(&json)[0];
    let s = r.score_inputs(&[input(c)]).unwrap();
    assert!((s[0].score as f64 - c.score).abs() < TOL);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn max_length_cuts_only_the_body() {
    let Some((model, json)) = fixture() else {
        return;
    };
    let r = Qwen3Reranker::builder(&model)
        .options(ModelOptions::default().max_length(60))
        .build()
        .unwrap();
    let c = &cases(&json)[1];
    let ids = r
        .encode(c.instruction.as_deref(), &c.query, &c.document)
        .unwrap();
    // 39 prefix + 9 suffix tokens leave 12 body tokens.
    assert_eq!(ids.len(), 60);
    assert_eq!(&ids[..51], &c.input_ids[..51]);
    assert_eq!(&ids[51..], &c.input_ids[c.input_ids.len() - 9..]);
    let e = Qwen3Reranker::builder(&model)
        .options(ModelOptions::default().max_length(48))
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("max_length 48"), "{e}");
}

#[test]
fn prompts_that_share_their_first_tokens_score_as_they_do_alone() {
    let Some((model, json)) = fixture() else {
        return;
    };
    let r = Qwen3Reranker::builder(&model)
        .options(ModelOptions::default().threads(2))
        .build()
        .unwrap();
    let cases = cases(&json);
    // Short prompts of the fixture: same template prefix, different bodies and queries.
    let mut short: Vec<&Case> = cases.iter().filter(|c| c.input_ids.len() < 200).collect();
    short.sort_by_key(|c| c.input_ids.len());
    let (a, b, c) = (
        &short[0].input_ids,
        &short[1].input_ids,
        &short[2].input_ids,
    );
    let mut a_longer = a.clone();
    a_longer.extend_from_slice(&b[b.len() - 20..]);
    let mut other_start = b.clone();
    other_start[0] = 13;
    let batches: Vec<Vec<&[u32]>> = vec![
        // The template prefix shared by all three.
        vec![a, b, c],
        // Identical prompts: all but the last token shared.
        vec![a, a, a],
        // One prompt whole inside another: the shorter keeps its last token.
        vec![a, &a_longer],
        vec![&a_longer, a, b],
        // Nothing shared: the first tokens differ.
        vec![a, &other_start, c],
        // A one-token prompt shares nothing.
        vec![&a[..1], a],
    ];
    let mut worst = 0f32;
    for (i, batch) in batches.iter().enumerate() {
        let together = r.score_token_ids(batch).unwrap();
        assert_eq!(together.len(), batch.len());
        for (j, (ids, t)) in batch.iter().zip(&together).enumerate() {
            let alone = r.score_token_ids(&[ids]).unwrap()[0];
            let diff = (t.logit - alone.logit).abs();
            worst = worst.max(diff);
            assert!(
                diff < 1e-5,
                "batch {i}, prompt {j}: logit {} in the batch, {} alone",
                t.logit,
                alone.logit
            );
        }
    }
    // And against the reference, the three short prompts in one pass.
    let together = r.score_token_ids(&[a, b, c]).unwrap();
    for (case, s) in short.iter().zip(&together) {
        assert!((s.logit as f64 - case.logit).abs() < TOL);
    }
    eprintln!("worst |logit in a batch - alone| with shared prefixes: {worst:.2e}");
}

// ---------------------------------------------------------------------------------------------
// Random checkpoints of other shapes, checked against a float64 re-implementation.

struct Shape {
    hidden: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    ffn: usize,
    layers: usize,
    vocab: usize,
    tied: bool,
    bias: bool,
}

/// A deterministic pseudo-random generator (64-bit LCG, top bits).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize, scale: f32, offset: f32) -> Vec<f32> {
        (0..n).map(|_| offset + scale * self.next()).collect()
    }
}

type Weights = HashMap<String, (Vec<f32>, Vec<usize>)>;

fn random_weights(s: &Shape, seed: u64) -> Weights {
    let mut g = Lcg(seed);
    let mut w = Weights::new();
    let mut put = |name: String, shape: Vec<usize>, scale: f32, offset: f32, g: &mut Lcg| {
        let n = shape.iter().product();
        w.insert(name, (g.vec(n, scale, offset), shape));
    };
    let (h, qd, kvd) = (s.hidden, s.heads * s.head_dim, s.kv_heads * s.head_dim);
    put(
        "model.embed_tokens.weight".into(),
        vec![s.vocab, h],
        1.0,
        0.0,
        &mut g,
    );
    put("model.norm.weight".into(), vec![h], 0.3, 1.0, &mut g);
    if !s.tied {
        put("lm_head.weight".into(), vec![s.vocab, h], 1.0, 0.0, &mut g);
    }
    for l in 0..s.layers {
        let p = format!("model.layers.{l}");
        put(
            format!("{p}.input_layernorm.weight"),
            vec![h],
            0.3,
            1.0,
            &mut g,
        );
        put(
            format!("{p}.post_attention_layernorm.weight"),
            vec![h],
            0.3,
            1.0,
            &mut g,
        );
        put(
            format!("{p}.self_attn.q_norm.weight"),
            vec![s.head_dim],
            0.3,
            1.0,
            &mut g,
        );
        put(
            format!("{p}.self_attn.k_norm.weight"),
            vec![s.head_dim],
            0.3,
            1.0,
            &mut g,
        );
        for (name, out, inp) in [
            ("self_attn.q_proj", qd, h),
            ("self_attn.k_proj", kvd, h),
            ("self_attn.v_proj", kvd, h),
            ("self_attn.o_proj", h, qd),
            ("mlp.gate_proj", s.ffn, h),
            ("mlp.up_proj", s.ffn, h),
            ("mlp.down_proj", h, s.ffn),
        ] {
            let scale = 1.5 / (inp as f32).sqrt();
            put(
                format!("{p}.{name}.weight"),
                vec![out, inp],
                scale,
                0.0,
                &mut g,
            );
            if s.bias && name.starts_with("self_attn") {
                put(format!("{p}.{name}.bias"), vec![out], 0.2, 0.0, &mut g);
            }
        }
    }
    w
}

fn write_checkpoint(dir: &Path, s: &Shape, w: &Weights) {
    let config = serde_json::json!({
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "hidden_size": s.hidden, "intermediate_size": s.ffn, "num_hidden_layers": s.layers,
        "num_attention_heads": s.heads, "num_key_value_heads": s.kv_heads,
        "head_dim": s.head_dim, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": s.tied, "attention_bias": s.bias, "vocab_size": s.vocab,
        "hidden_act": "silu"
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let tensors: HashMap<String, Tensor> = w
        .iter()
        .map(|(k, (v, shape))| {
            let t = Tensor::from_vec(v.clone(), shape.as_slice(), &Device::Cpu).unwrap();
            (k.clone(), t)
        })
        .collect();
    candle_core::safetensors::save(&tensors, dir.join("model.safetensors")).unwrap();
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rerank-qwen3-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The float64 reference: check_numpy.py's `qwen3_last_logits`, in plain loops.
fn reference_logit(s: &Shape, w: &Weights, ids: &[u32], yes: u32, no: u32) -> f64 {
    let get = |k: &str| -> Vec<f64> { w[k].0.iter().map(|&x| x as f64).collect() };
    let eps = 1e-6;
    let n = ids.len();
    let (h, hd) = (s.hidden, s.head_dim);
    let rms = |x: &[f64], g: &[f64]| -> Vec<f64> {
        let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
        let r = 1.0 / (ms + eps).sqrt();
        x.iter().zip(g).map(|(v, g)| v * r * g).collect()
    };
    let matvec = |m: &[f64], x: &[f64], out: usize| -> Vec<f64> {
        let inp = x.len();
        (0..out)
            .map(|o| (0..inp).map(|i| m[o * inp + i] * x[i]).sum())
            .collect()
    };
    let add_bias = |mut v: Vec<f64>, name: &str| -> Vec<f64> {
        if let Some((b, _)) = w.get(name) {
            for (x, b) in v.iter_mut().zip(b) {
                *x += *b as f64;
            }
        }
        v
    };
    let rope = |x: &mut [f64], pos: usize| {
        let half = hd / 2;
        for i in 0..half {
            let inv = 1.0 / 10000f64.powf((2 * i) as f64 / hd as f64);
            let (sn, cs) = (pos as f64 * inv).sin_cos();
            let (a, b) = (x[i], x[i + half]);
            x[i] = a * cs - b * sn;
            x[i + half] = b * cs + a * sn;
        }
    };
    let embed = get("model.embed_tokens.weight");
    let mut xs: Vec<Vec<f64>> = ids
        .iter()
        .map(|&t| embed[t as usize * h..(t as usize + 1) * h].to_vec())
        .collect();
    for l in 0..s.layers {
        let p = format!("model.layers.{l}");
        let g = |k: &str| get(&format!("{p}.{k}"));
        let (wq, wk, wv, wo) = (
            g("self_attn.q_proj.weight"),
            g("self_attn.k_proj.weight"),
            g("self_attn.v_proj.weight"),
            g("self_attn.o_proj.weight"),
        );
        let (qn, kn) = (g("self_attn.q_norm.weight"), g("self_attn.k_norm.weight"));
        let mut q = Vec::new();
        let mut k = Vec::new();
        let mut v = Vec::new();
        for (pos, x) in xs.iter().enumerate() {
            let hx = rms(x, &g("input_layernorm.weight"));
            let qx = add_bias(
                matvec(&wq, &hx, s.heads * hd),
                &format!("{p}.self_attn.q_proj.bias"),
            );
            let kx = add_bias(
                matvec(&wk, &hx, s.kv_heads * hd),
                &format!("{p}.self_attn.k_proj.bias"),
            );
            let vx = add_bias(
                matvec(&wv, &hx, s.kv_heads * hd),
                &format!("{p}.self_attn.v_proj.bias"),
            );
            let mut qh: Vec<Vec<f64>> = qx.chunks(hd).map(|c| rms(c, &qn)).collect();
            let mut kh: Vec<Vec<f64>> = kx.chunks(hd).map(|c| rms(c, &kn)).collect();
            qh.iter_mut().for_each(|c| rope(c, pos));
            kh.iter_mut().for_each(|c| rope(c, pos));
            q.push(qh);
            k.push(kh);
            v.push(vx.chunks(hd).map(<[f64]>::to_vec).collect::<Vec<_>>());
        }
        let group = s.heads / s.kv_heads;
        let mut next = Vec::with_capacity(n);
        for i in 0..n {
            let mut ctx = vec![0.0; s.heads * hd];
            for head in 0..s.heads {
                let kvh = head / group;
                let scores: Vec<f64> = (0..=i)
                    .map(|j| {
                        q[i][head]
                            .iter()
                            .zip(&k[j][kvh])
                            .map(|(a, b)| a * b)
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for (j, ej) in e.iter().enumerate() {
                    for d in 0..hd {
                        ctx[head * hd + d] += ej / z * v[j][kvh][d];
                    }
                }
            }
            let o = add_bias(matvec(&wo, &ctx, h), &format!("{p}.self_attn.o_proj.bias"));
            let x: Vec<f64> = xs[i].iter().zip(&o).map(|(a, b)| a + b).collect();
            let hx = rms(&x, &g("post_attention_layernorm.weight"));
            let gate = matvec(&g("mlp.gate_proj.weight"), &hx, s.ffn);
            let up = matvec(&g("mlp.up_proj.weight"), &hx, s.ffn);
            let act: Vec<f64> = gate
                .iter()
                .zip(&up)
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            let down = matvec(&g("mlp.down_proj.weight"), &act, h);
            next.push(x.iter().zip(&down).map(|(a, b)| a + b).collect());
        }
        xs = next;
    }
    let last = rms(&xs[n - 1], &get("model.norm.weight"));
    let head = get(if s.tied {
        "model.embed_tokens.weight"
    } else {
        "lm_head.weight"
    });
    let dot = |t: u32| -> f64 {
        last.iter()
            .zip(&head[t as usize * h..(t as usize + 1) * h])
            .map(|(a, b)| a * b)
            .sum()
    };
    dot(yes) - dot(no)
}

fn tokenizer_path() -> Option<PathBuf> {
    let p = Path::new(FIXTURE).join("model/tokenizer.json");
    if p.is_file() {
        Some(p)
    } else {
        crate::common::skip(&format!("skipping: {} not found", p.display()));
        None
    }
}

#[test]
fn other_shapes_match_a_float64_reference() {
    let Some(tokenizer) = tokenizer_path() else {
        return;
    };
    // Vocab 151936 is the real weight vocab (larger than the tokenizer's 151669 tokens).
    let shapes = [
        // GQA 4:1, head_dim (12) unrelated to hidden / heads (20 / 4 = 5), untied head.
        Shape {
            hidden: 20,
            heads: 4,
            kv_heads: 1,
            head_dim: 12,
            ffn: 24,
            layers: 2,
            vocab: 151_936,
            tied: false,
            bias: false,
        },
        // Plain multi-head attention (kv = heads), tied head, attention biases.
        Shape {
            hidden: 16,
            heads: 2,
            kv_heads: 2,
            head_dim: 8,
            ffn: 40,
            layers: 3,
            vocab: 151_700,
            tied: true,
            bias: true,
        },
        // GQA 3:1 and a larger vocab than the config of the real model.
        Shape {
            hidden: 24,
            heads: 6,
            kv_heads: 2,
            head_dim: 4,
            ffn: 16,
            layers: 1,
            vocab: 160_000,
            tied: true,
            bias: false,
        },
    ];
    let docs = [
        "The capital of China is Beijing.",
        "Gravity is a force that attracts two bodies towards each other.",
        "",
    ];
    for (n, s) in shapes.iter().enumerate() {
        let dir = temp_dir(&format!("shape{n}"));
        let w = random_weights(s, 7 + n as u64);
        write_checkpoint(&dir, s, &w);
        let r = Qwen3Reranker::builder(&dir)
            .tokenizer(&tokenizer)
            .options(ModelOptions::default().max_length(120))
            .build()
            .unwrap();
        let q = RerankQuery::new("What is the capital of China?");
        let got = r.score_with_logits(&q, &docs).unwrap();
        assert_eq!(got.len(), docs.len());
        for (d, g) in docs.iter().zip(&got) {
            let ids = r.encode(None, &q.text, d).unwrap();
            let want = reference_logit(s, &w, &ids, r.yes_id(), r.no_id());
            assert!(
                (g.logit as f64 - want).abs() < 1e-4 * want.abs().max(1.0),
                "shape {n}: logit {} vs reference {want}",
                g.logit
            );
            let sig = 1.0 / (1.0 + (-want).exp());
            assert!((g.score as f64 - sig).abs() < 1e-5, "shape {n}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn weights_without_rows_for_the_tokens_are_refused_clearly() {
    let Some(tokenizer) = tokenizer_path() else {
        return;
    };
    let base = Shape {
        hidden: 8,
        heads: 2,
        kv_heads: 1,
        head_dim: 4,
        ffn: 8,
        layers: 1,
        vocab: 2000,
        tied: true,
        bias: false,
    };
    let cases = [
        // "yes" (9693) and "no" (2152) are outside 2000 rows.
        (2000, true, "token id 9693"),
        // yes/no fit, but the prompt's <think> tokens (151667, 151668) do not.
        (151_000, true, "outside the embedding matrix"),
        // An untied checkpoint without lm_head.weight.
        (151_936, false, "lm_head.weight"),
    ];
    for (i, (vocab, tied, needle)) in cases.into_iter().enumerate() {
        let dir = temp_dir(&format!("vocab{i}"));
        let s = Shape {
            vocab,
            tied,
            ..base
        };
        let mut w = random_weights(&s, 1);
        w.remove("lm_head.weight");
        write_checkpoint(&dir, &s, &w);
        let e = Qwen3Reranker::builder(&dir)
            .tokenizer(&tokenizer)
            .build()
            .unwrap_err();
        assert!(matches!(e, Error::Model { .. }), "{e}");
        assert!(e.to_string().contains(needle), "case {i}: {e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn a_config_that_does_not_match_the_weights_is_refused() {
    let Some(tokenizer) = tokenizer_path() else {
        return;
    };
    let s = Shape {
        hidden: 8,
        heads: 2,
        kv_heads: 1,
        head_dim: 4,
        ffn: 8,
        layers: 1,
        vocab: 151_936,
        tied: true,
        bias: false,
    };
    let dir = temp_dir("mismatch");
    write_checkpoint(&dir, &s, &random_weights(&s, 3));
    let config = std::fs::read_to_string(dir.join("config.json")).unwrap();
    std::fs::write(
        dir.join("config.json"),
        config.replace("\"num_key_value_heads\":1", "\"num_key_value_heads\":2"),
    )
    .unwrap();
    let e = Qwen3Reranker::builder(&dir)
        .tokenizer(&tokenizer)
        .build()
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("k_proj.weight") && msg.contains("[4, 8]"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
