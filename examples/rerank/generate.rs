//! `rerank generate`: run a local chat model (Qwen3, Qwen2.5, Llama, Mistral, Phi-3) on one
//! prompt and print the new text, or with
//! `--json` the new ids, the text and where the time went:
//!
//! ```text
//! {"ids": [...], "text": "...", "prompt_tokens": 170, "new_tokens": 64, "stopped": false,
//!  "precision": "f32", "load_seconds": 0.9, "prefill_seconds": 1.2,
//!  "decode_seconds": 4.1, "decode_steps": 63, "decode_tokens_per_second": 15.4}
//! ```
//!
//! `load_seconds` is `LocalChat::build` (files read, weights laid out); `prefill_seconds` the
//! prompt's forward pass and the first token; `decode_tokens_per_second` the decode steps after
//! it (each a forward pass of one token) over their time. All three are measured inside the
//! process, so with tokenization and start-up they add up to the wall time.

use std::path::PathBuf;

use crate::CliResult;

#[derive(clap::Args)]
pub struct Args {
    /// The chat model's directory (config.json naming Qwen3ForCausalLM, Qwen2ForCausalLM,
    /// LlamaForCausalLM, MistralForCausalLM or Phi3ForCausalLM; model.safetensors;
    /// tokenizer.json; the chat template in tokenizer_config.json or chat_template.jinja), as
    /// `answer --generator local --generator-model` takes it.
    #[arg(long, value_name = "MODEL", alias = "model")]
    generator_model: PathBuf,
    /// A tokenizer.json to use instead of the one in the model directory.
    #[arg(long, value_name = "FILE")]
    tokenizer: Option<PathBuf>,
    /// The prompt: the user message, or the whole model input with --raw-prompt.
    #[arg(long, value_name = "TEXT")]
    prompt: String,
    /// A system message (chat template only).
    #[arg(long, value_name = "TEXT")]
    system: Option<String>,
    /// Let a model that can think first (Qwen3) do so (default: thinking off).
    #[arg(long)]
    thinking: bool,
    /// A chat template (a Jinja file) to use instead of the model's.
    #[arg(long, value_name = "FILE")]
    chat_template: Option<PathBuf>,
    /// Tokenize the prompt as given: no chat template, no special tokens added.
    #[arg(long)]
    raw_prompt: bool,
    /// Upper bound on new tokens.
    #[arg(long, value_name = "N", default_value_t = 128)]
    max_new_tokens: usize,
    /// Greedy decoding (otherwise temperature + top-p sampling).
    #[arg(long)]
    greedy: bool,
    /// Sampling temperature.
    #[arg(long, value_name = "T", default_value_t = 0.7)]
    temperature: f32,
    /// Nucleus sampling mass.
    #[arg(long, value_name = "P", default_value_t = 0.8)]
    top_p: f32,
    /// Sampling seed.
    #[arg(long, value_name = "N", default_value_t = 42)]
    seed: u64,
    /// Do not stop at end-of-turn tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// Recompute the whole sequence at every step instead of keeping a KV cache.
    #[arg(long)]
    no_kv_cache: bool,
    /// Threads for the models (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Number format of the models' linear layers (generation runs on the crate's own CPU
    /// kernels, so `generate` has no --device).
    #[arg(long, value_enum, default_value_t = WeightsArg::F32)]
    precision: WeightsArg,
    /// Print the ids, the text and the timings as one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    log: crate::flags::LogArgs,
}

/// `--precision` of `generate`: the two formats generation runs in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum WeightsArg {
    /// 32-bit float weights: exact to the reference model.
    #[default]
    F32,
    /// bfloat16 weights: half the memory and bytes per token; the layers' inputs are rounded
    /// to bf16 too, sums stay f32.
    Bf16,
}

#[cfg(feature = "models")]
pub fn run(args: Args) -> CliResult {
    use rerank::answer::{DecodeParams, LocalChat};
    use rerank::answer::{Message, Role};

    use rerank::models::{ModelOptions, Precision};
    use std::time::Instant;

    args.log.init()?;
    let options = ModelOptions {
        threads: args.threads,
        precision: match args.precision {
            WeightsArg::F32 => Precision::F32,
            WeightsArg::Bf16 => Precision::Bf16,
        },
        ..Default::default()
    };
    let mut builder = LocalChat::builder(&args.generator_model)
        .options(options)
        .thinking(args.thinking);
    if let Some(t) = &args.tokenizer {
        builder = builder.tokenizer(t);
    }
    if let Some(path) = &args.chat_template {
        let source = std::fs::read_to_string(path)
            .map_err(|e| format!("--chat-template {}: {e}", path.display()))?;
        builder = builder.chat_template(source);
    }
    let loading = Instant::now();
    let model = builder.build()?;
    let load_seconds = loading.elapsed().as_secs_f64();
    let text = if args.raw_prompt {
        args.prompt.clone()
    } else {
        let mut messages = Vec::new();
        if let Some(s) = &args.system {
            messages.push(Message::new(Role::System, s.clone()));
        }
        messages.push(Message::new(Role::User, args.prompt.clone()));
        model.prompt(&messages)?
    };
    let prompt_ids = model.encode(&text, false)?;
    let params = DecodeParams {
        max_new_tokens: args.max_new_tokens,
        temperature: if args.greedy { 0.0 } else { args.temperature },
        top_p: args.top_p,
        seed: args.seed,
        stop_ids: if args.ignore_eos {
            Vec::new()
        } else {
            model.stop_ids().to_vec()
        },
        stop_strings: Vec::new(),
        use_kv_cache: !args.no_kv_cache,
    };
    let out = model.generate_ids(&prompt_ids, &params)?;
    let decoded = model.decode(&out.ids)?;
    if args.json {
        let t = &out.timings;
        println!(
            "{}",
            serde_json::json!({
                "ids": out.ids,
                "text": decoded,
                "prompt_tokens": prompt_ids.len(),
                "new_tokens": out.ids.len(),
                "stopped": out.stopped,
                "precision": model.precision().as_str(),
                "load_seconds": load_seconds,
                "prefill_seconds": t.prefill.as_secs_f64(),
                "decode_seconds": t.decode.as_secs_f64(),
                "decode_steps": t.decode_steps,
                "decode_tokens_per_second": t.decode_tokens_per_second(),
            })
        );
    } else {
        println!("{decoded}");
    }
    Ok(())
}

#[cfg(not(feature = "models"))]
pub fn run(args: Args) -> CliResult {
    args.log.init()?;
    Err("`rerank generate` needs the `models` feature".into())
}
