//! `rerank generate`: run the Qwen3 chat model on one prompt and print the new token ids.

use std::path::PathBuf;

use crate::CliResult;

#[derive(clap::Args)]
pub struct Args {
    /// Qwen3 model directory (config.json, model.safetensors, tokenizer.json).
    #[arg(long)]
    model: PathBuf,
    /// A tokenizer.json to use instead of the one in the model directory.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// The prompt: the user message, or the whole model input with --raw-prompt.
    #[arg(long)]
    prompt: String,
    /// A system message (chat template only).
    #[arg(long)]
    system: Option<String>,
    /// Tokenize the prompt as given: no chat template, no special tokens added.
    #[arg(long)]
    raw_prompt: bool,
    /// Upper bound on new tokens.
    #[arg(long, default_value_t = 128)]
    max_new_tokens: usize,
    /// Greedy decoding (otherwise temperature + top-p sampling).
    #[arg(long)]
    greedy: bool,
    /// Sampling temperature.
    #[arg(long, default_value_t = 0.7)]
    temperature: f32,
    /// Nucleus sampling mass.
    #[arg(long, default_value_t = 0.8)]
    top_p: f32,
    /// Sampling seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Do not stop at end-of-turn tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// Recompute the whole sequence at every step instead of keeping a KV cache.
    #[arg(long)]
    no_kv_cache: bool,
    /// Print {"ids": [...], "text": ...} as JSON.
    #[arg(long)]
    json: bool,
}

#[cfg(feature = "models")]
pub fn run(args: Args) -> CliResult {
    use rerank::answer::{DecodeParams, Qwen3Chat};
    use rerank::answer::{Message, Role};

    let mut builder = Qwen3Chat::builder(&args.model);
    if let Some(t) = &args.tokenizer {
        builder = builder.tokenizer(t);
    }
    let model = builder.build()?;
    let text = if args.raw_prompt {
        args.prompt.clone()
    } else {
        let mut messages = Vec::new();
        if let Some(s) = &args.system {
            messages.push(Message::new(Role::System, s.clone()));
        }
        messages.push(Message::new(Role::User, args.prompt.clone()));
        Qwen3Chat::chat_prompt(&messages)
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
        println!(
            "{}",
            serde_json::json!({"ids": out.ids, "text": decoded, "prompt_tokens": prompt_ids.len(),
                               "stopped": out.stopped})
        );
    } else {
        println!("{decoded}");
    }
    Ok(())
}

#[cfg(not(feature = "models"))]
pub fn run(_args: Args) -> CliResult {
    Err("`rerank generate` needs the `models` feature".into())
}
