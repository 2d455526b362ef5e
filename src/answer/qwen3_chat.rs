//! [`Qwen3Chat`]: a Qwen3 causal language model on candle, as a [`Generator`].
//!
//! Weights load from a local directory (`config.json`, `model.safetensors` or a sharded
//! `model.safetensors.index.json`, `tokenizer.json`). Decoding keeps a KV cache (the prompt is
//! run once, then one token per step), and is greedy when the temperature is 0, else
//! temperature plus top-p sampling with a seed. Prompts use the Qwen3 chat template with
//! thinking disabled.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::generation::{LogitsProcessor, Sampling};
use candle_transformers::models::qwen3::{Config, ModelForCausalLM};
use tokenizers::Tokenizer;

use super::{Generation, GenerationRequest, Generator, Message, Role, TokenCounter};
use crate::{Error, Result};

/// How to decode one sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeParams {
    /// Upper bound on new tokens.
    pub max_new_tokens: usize,
    /// 0 (or below 1e-7) means greedy; otherwise logits are divided by it before sampling.
    pub temperature: f32,
    /// Nucleus mass for sampling; 1 samples from the whole distribution.
    pub top_p: f32,
    /// Seed of the sampler.
    pub seed: u64,
    /// Token ids that end decoding (not included in the output).
    pub stop_ids: Vec<u32>,
    /// Strings that end decoding when the decoded output contains them (the output is cut
    /// before the string).
    pub stop_strings: Vec<String>,
    /// Keep a KV cache (true) or run the whole sequence again at every step (false, slow; for
    /// checking the cache).
    pub use_kv_cache: bool,
}

impl Default for DecodeParams {
    fn default() -> Self {
        DecodeParams {
            max_new_tokens: 256,
            temperature: 0.0,
            top_p: 1.0,
            seed: 42,
            stop_ids: Vec::new(),
            stop_strings: Vec::new(),
            use_kv_cache: true,
        }
    }
}

/// The result of [`Qwen3Chat::generate_ids`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The new token ids (a stop token that ended decoding is not included).
    pub ids: Vec<u32>,
    /// True when a stop token ended decoding; false when `max_new_tokens` did.
    pub stopped: bool,
}

/// A Qwen3 chat model.
///
/// One model holds one KV cache, so calls on the same instance run one at a time (a mutex
/// serializes them); share it behind an `Arc` and load a second instance for parallel decoding.
pub struct Qwen3Chat {
    model: Mutex<ModelForCausalLM>,
    tokenizer: Tokenizer,
    device: Device,
    max_positions: usize,
    vocab_size: usize,
    stop_ids: Vec<u32>,
    use_kv_cache: bool,
}

impl std::fmt::Debug for Qwen3Chat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qwen3Chat")
            .field("vocab_size", &self.vocab_size)
            .field("max_positions", &self.max_positions)
            .field("stop_ids", &self.stop_ids)
            .field("use_kv_cache", &self.use_kv_cache)
            .finish_non_exhaustive()
    }
}

/// Loads a [`Qwen3Chat`]; [`Qwen3ChatBuilder::build`] checks the files.
#[derive(Debug, Clone)]
pub struct Qwen3ChatBuilder {
    dir: PathBuf,
    tokenizer: Option<PathBuf>,
    use_kv_cache: bool,
    extra_stop_tokens: Vec<String>,
}

fn model_err(what: &str) -> impl Fn(candle_core::Error) -> Error + '_ {
    move |e| Error::model(format!("{what}: {}", crate::models::candle_message(&e)))
}

impl Qwen3ChatBuilder {
    /// Reads `tokenizer.json` from `path` instead of the model directory.
    pub fn tokenizer(mut self, path: impl Into<PathBuf>) -> Self {
        self.tokenizer = Some(path.into());
        self
    }

    /// Decode with a KV cache (default true).
    pub fn use_kv_cache(mut self, on: bool) -> Self {
        self.use_kv_cache = on;
        self
    }

    /// Adds a token (by its text, e.g. `"<|im_end|>"`) that ends generation.
    pub fn stop_token(mut self, token: impl Into<String>) -> Self {
        self.extra_stop_tokens.push(token.into());
        self
    }

    /// Loads the model, in f32 on the CPU.
    pub fn build(self) -> Result<Qwen3Chat> {
        let dir = &self.dir;
        let config_path = dir.join("config.json");
        let config_text =
            std::fs::read_to_string(&config_path).map_err(|e| Error::io(&config_path, e))?;
        let config: Config = serde_json::from_str(&config_text).map_err(|e| {
            Error::model(format!(
                "{}: not a Qwen3 config: {e}",
                config_path.display()
            ))
        })?;
        let raw: serde_json::Value = serde_json::from_str(&config_text)
            .map_err(|e| Error::parse(config_path.display().to_string(), e))?;
        if let Some(arch) = raw.get("model_type").and_then(|v| v.as_str()) {
            if arch != "qwen3" {
                return Err(Error::model(format!(
                    "{}: model_type is {arch:?}, expected \"qwen3\"",
                    config_path.display()
                )));
            }
        }

        let tokenizer_path = self
            .tokenizer
            .clone()
            .unwrap_or_else(|| dir.join("tokenizer.json"));
        if !tokenizer_path.is_file() {
            return Err(Error::tokenizer(format!(
                "{} not found: pass a Qwen3 tokenizer.json explicitly (the official one can be \
                 fetched with scripts/fetch_qwen3_tokenizer.sh)",
                tokenizer_path.display()
            )));
        }
        let mut tokenizer = Tokenizer::from_file(&tokenizer_path)
            .map_err(|e| Error::tokenizer(format!("{}: {e}", tokenizer_path.display())))?;
        tokenizer
            .with_truncation(None)
            .map_err(|e| Error::tokenizer(e.to_string()))?;
        tokenizer.with_padding(None);

        let device = Device::Cpu;
        let tensors = load_weights(dir, &device)?;
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &device);
        let model = ModelForCausalLM::new(&config, vb).map_err(model_err(&format!(
            "{}: loading Qwen3 weights",
            dir.display()
        )))?;

        let mut stop_ids = Vec::new();
        let mut add = |id: u32| {
            if !stop_ids.contains(&id) {
                stop_ids.push(id);
            }
        };
        for token in ["<|im_end|>", "<|endoftext|>"] {
            if let Some(id) = tokenizer.token_to_id(token) {
                add(id);
            }
        }
        match raw.get("eos_token_id") {
            Some(serde_json::Value::Number(n)) => {
                if let Some(id) = n.as_u64().and_then(|v| u32::try_from(v).ok()) {
                    add(id);
                }
            }
            Some(serde_json::Value::Array(ids)) => {
                for id in ids.iter().filter_map(|v| v.as_u64()) {
                    if let Ok(id) = u32::try_from(id) {
                        add(id);
                    }
                }
            }
            _ => {}
        }
        for token in &self.extra_stop_tokens {
            let id = tokenizer.token_to_id(token).ok_or_else(|| {
                Error::Config(format!("stop token {token:?} is not in the vocabulary"))
            })?;
            add(id);
        }

        Ok(Qwen3Chat {
            model: Mutex::new(model),
            tokenizer,
            device,
            max_positions: config.max_position_embeddings,
            vocab_size: config.vocab_size,
            stop_ids,
            use_kv_cache: self.use_kv_cache,
        })
    }
}

/// Reads `model.safetensors`, or every shard named in `model.safetensors.index.json`.
fn load_weights(dir: &Path, device: &Device) -> Result<HashMap<String, Tensor>> {
    let single = dir.join("model.safetensors");
    let index = dir.join("model.safetensors.index.json");
    let files: Vec<PathBuf> = if single.is_file() {
        vec![single]
    } else if index.is_file() {
        crate::models::shard_paths(dir, &index)?
    } else {
        return Err(Error::model(format!(
            "{}: no model.safetensors or model.safetensors.index.json",
            dir.display()
        )));
    };
    let mut tensors = HashMap::new();
    for file in files {
        let bytes = std::fs::read(&file).map_err(|e| Error::io(&file, e))?;
        let part = candle_core::safetensors::load_buffer(&bytes, device)
            .map_err(model_err(&file.display().to_string()))?;
        tensors.extend(part);
    }
    Ok(tensors)
}

impl Qwen3Chat {
    /// A builder for the model in `dir`.
    pub fn builder(dir: impl Into<PathBuf>) -> Qwen3ChatBuilder {
        Qwen3ChatBuilder {
            dir: dir.into(),
            tokenizer: None,
            use_kv_cache: true,
            extra_stop_tokens: Vec::new(),
        }
    }

    /// Loads the model in `dir` with the defaults.
    pub fn from_dir(dir: impl Into<PathBuf>) -> Result<Self> {
        Self::builder(dir).build()
    }

    /// The Qwen3 chat template with thinking disabled: each message (content trimmed) as
    /// `<|im_start|>{role}\n{content}<|im_end|>\n`, then
    /// `<|im_start|>assistant\n<think>\n\n</think>\n\n`.
    ///
    /// ```
    /// use rerank::answer::Qwen3Chat;
    /// use rerank::answer::{Message, Role};
    /// assert_eq!(
    ///     Qwen3Chat::chat_prompt(&[Message::new(Role::User, "Hi")]),
    ///     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    /// );
    /// ```
    pub fn chat_prompt(messages: &[Message]) -> String {
        let mut out = String::new();
        for m in messages {
            let role = match m.role {
                Role::System => "system",
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            out.push_str("<|im_start|>");
            out.push_str(role);
            out.push('\n');
            out.push_str(m.content.trim());
            out.push_str("<|im_end|>\n");
        }
        out.push_str("<|im_start|>assistant\n<think>\n\n</think>\n\n");
        out
    }

    /// The token ids of `text`. Special-token strings in the text (`<|im_start|>`) become their
    /// ids; `add_special_tokens` adds what the tokenizer's post-processor adds (nothing for
    /// Qwen3).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        self.tokenizer
            .encode(text, add_special_tokens)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| Error::tokenizer(format!("encoding failed: {e}")))
    }

    /// The text of `ids`, special tokens skipped.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.tokenizer
            .decode(ids, true)
            .map_err(|e| Error::tokenizer(format!("decoding failed: {e}")))
    }

    /// The default stop token ids (`<|im_end|>`, `<|endoftext|>`, the config's EOS).
    pub fn stop_ids(&self) -> &[u32] {
        &self.stop_ids
    }

    /// Whether decoding keeps a KV cache by default.
    pub fn uses_kv_cache(&self) -> bool {
        self.use_kv_cache
    }

    /// The logits of the token after `ids` (one forward pass without cache reuse).
    pub fn next_token_logits(&self, ids: &[u32]) -> Result<Vec<f32>> {
        if ids.is_empty() {
            return Err(Error::InvalidInput("no input tokens".into()));
        }
        let mut model = self.lock()?;
        model.clear_kv_cache();
        let logits = self.forward(&mut model, ids, 0);
        model.clear_kv_cache();
        logits
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, ModelForCausalLM>> {
        self.model
            .lock()
            .map_err(|_| Error::model("the Qwen3 model lock is poisoned"))
    }

    fn forward(
        &self,
        model: &mut ModelForCausalLM,
        ids: &[u32],
        offset: usize,
    ) -> Result<Vec<f32>> {
        let input = Tensor::new(ids, &self.device)
            .and_then(|t| t.unsqueeze(0))
            .map_err(model_err("building the input"))?;
        model
            .forward(&input, offset)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_dtype(DType::F32))
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(model_err("Qwen3 forward pass"))
    }

    /// Decodes after `prompt_ids` and returns the new ids.
    pub fn generate_ids(&self, prompt_ids: &[u32], params: &DecodeParams) -> Result<Decoded> {
        if prompt_ids.is_empty() {
            return Err(Error::InvalidInput("the prompt has no tokens".into()));
        }
        if let Some(&bad) = prompt_ids
            .iter()
            .find(|&&id| id as usize >= self.vocab_size)
        {
            return Err(Error::InvalidInput(format!(
                "token id {bad} is outside the vocabulary ({} ids)",
                self.vocab_size
            )));
        }
        if prompt_ids.len() >= self.max_positions {
            return Err(Error::InvalidInput(format!(
                "the prompt has {} tokens; the model handles at most {}",
                prompt_ids.len(),
                self.max_positions
            )));
        }
        if !(params.temperature.is_finite() && params.temperature >= 0.0) {
            return Err(Error::InvalidInput(format!(
                "temperature must be >= 0, got {}",
                params.temperature
            )));
        }
        if !(params.top_p > 0.0 && params.top_p <= 1.0) {
            return Err(Error::InvalidInput(format!(
                "top_p must be in (0, 1], got {}",
                params.top_p
            )));
        }
        let max_new = params
            .max_new_tokens
            .min(self.max_positions - prompt_ids.len());
        let sampling = if params.temperature < 1e-7 {
            Sampling::ArgMax
        } else if params.top_p >= 1.0 {
            Sampling::All {
                temperature: f64::from(params.temperature),
            }
        } else {
            Sampling::TopP {
                p: f64::from(params.top_p),
                temperature: f64::from(params.temperature),
            }
        };
        let mut sampler = LogitsProcessor::from_sampling(params.seed, sampling);

        let mut model = self.lock()?;
        model.clear_kv_cache();
        let mut all: Vec<u32> = prompt_ids.to_vec();
        let mut new_ids: Vec<u32> = Vec::new();
        let mut stopped = false;
        let result = (|| -> Result<()> {
            let mut logits = self.forward(&mut model, prompt_ids, 0)?;
            while new_ids.len() < max_new {
                let tensor =
                    Tensor::new(logits.as_slice(), &self.device).map_err(model_err("sampling"))?;
                let next = sampler.sample(&tensor).map_err(model_err("sampling"))?;
                if params.stop_ids.contains(&next) {
                    stopped = true;
                    break;
                }
                new_ids.push(next);
                all.push(next);
                if params.stop_strings.iter().any(|s| !s.is_empty()) {
                    let text = self.decode(&new_ids)?;
                    let hit = |s: &String| !s.is_empty() && text.contains(s.as_str());
                    if params.stop_strings.iter().any(hit) {
                        stopped = true;
                        break;
                    }
                }
                if new_ids.len() == max_new {
                    break;
                }
                logits = if params.use_kv_cache {
                    self.forward(&mut model, &[next], all.len() - 1)?
                } else {
                    model.clear_kv_cache();
                    self.forward(&mut model, &all, 0)?
                };
            }
            Ok(())
        })();
        model.clear_kv_cache();
        result?;
        Ok(Decoded {
            ids: new_ids,
            stopped,
        })
    }

    /// Decode settings for `request` with this model's stop tokens and cache setting.
    pub fn params_for(&self, request: &GenerationRequest) -> DecodeParams {
        DecodeParams {
            max_new_tokens: request.max_new_tokens,
            temperature: request.temperature,
            top_p: request.top_p,
            seed: request.seed,
            stop_ids: self.stop_ids.clone(),
            stop_strings: request.stop.clone(),
            use_kv_cache: self.use_kv_cache,
        }
    }
}

impl Generator for Qwen3Chat {
    fn generate(&self, request: &GenerationRequest) -> Result<Generation> {
        if request.messages.is_empty() {
            return Err(Error::InvalidInput("the request has no messages".into()));
        }
        let prompt = Self::chat_prompt(&request.messages);
        let ids = self.encode(&prompt, false)?;
        let params = self.params_for(request);
        let out = self.generate_ids(&ids, &params)?;
        let mut text = self.decode(&out.ids)?;
        let mut stopped = out.stopped;
        if let Some(cut) = request
            .stop
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| text.find(s.as_str()))
            .min()
        {
            text.truncate(cut);
            stopped = true;
        }
        Ok(Generation {
            text,
            finish_reason: Some(if stopped { "stop" } else { "length" }.into()),
        })
    }

    fn name(&self) -> &str {
        "qwen3-chat"
    }
}

impl TokenCounter for Qwen3Chat {
    fn count_tokens(&self, text: &str) -> usize {
        match self.encode(text, false) {
            Ok(ids) => ids.len(),
            Err(_) => super::ApproxTokenCounter.count_tokens(text),
        }
    }
}
