//! [`Qwen3Chat`]: a Qwen3 causal language model as a [`Generator`]: the chat template, the
//! stop rules and sampling. The model itself (the packed prefill, the KV cache, the decode
//! step) is `models::qwen3::generate`, on the same kernels as the Qwen3 reranker.
//!
//! Weights load from a local directory (`config.json`, `model.safetensors` or a sharded
//! `model.safetensors.index.json`, `tokenizer.json`), in f32 or, opt-in, bf16
//! ([`Precision::Bf16`]). Decoding keeps a KV cache (the prompt is run once, then one token per
//! step), and is greedy when the temperature is 0, else temperature plus top-p sampling with a
//! seed. Prompts use the Qwen3 chat template with thinking disabled.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokenizers::Tokenizer;

use super::{Generation, GenerationRequest, Generator, Message, Role, TokenCounter};
use crate::models::qwen3::generate::{CausalLm, DecodeState};
use crate::models::qwen3::Qwen3Config;
use crate::models::{ModelOptions, ModelPool, Precision};
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
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// The new token ids (a stop token that ended decoding is not included).
    pub ids: Vec<u32>,
    /// True when a stop token ended decoding; false when `max_new_tokens` did.
    pub stopped: bool,
    /// Where the time went.
    pub timings: DecodeTimings,
}

/// Time spent in one [`Qwen3Chat::generate_ids`] call, measured inside it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DecodeTimings {
    /// The prompt's forward pass (up to the first new token's logits).
    pub prefill: Duration,
    /// Every step after it (forward passes, sampling, stop checks).
    pub decode: Duration,
    /// Forward passes after the prefill (new tokens minus the last, whose logits are not
    /// needed).
    pub decode_steps: usize,
}

impl DecodeTimings {
    /// Decode steps per second (0 when there were none).
    pub fn decode_tokens_per_second(&self) -> f64 {
        let s = self.decode.as_secs_f64();
        if self.decode_steps == 0 || s <= 0.0 {
            0.0
        } else {
            self.decode_steps as f64 / s
        }
    }
}

/// A Qwen3 chat model.
///
/// One model holds one decode state (the KV cache and step buffers, reused from call to
/// call), so calls on the same instance run one at a time (a mutex serializes them); share it
/// behind an `Arc` and load a second instance for parallel decoding.
pub struct Qwen3Chat {
    model: CausalLm,
    state: Mutex<DecodeState>,
    pool: ModelPool,
    tokenizer: Tokenizer,
    max_positions: usize,
    vocab_size: usize,
    stop_ids: Vec<u32>,
    use_kv_cache: bool,
    precision: Precision,
}

impl std::fmt::Debug for Qwen3Chat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qwen3Chat")
            .field("vocab_size", &self.vocab_size)
            .field("max_positions", &self.max_positions)
            .field("stop_ids", &self.stop_ids)
            .field("use_kv_cache", &self.use_kv_cache)
            .field("precision", &self.precision)
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
    options: ModelOptions,
}

/// Positions a model is loaded for when its config names no `max_position_embeddings`.
const DEFAULT_MAX_POSITIONS: usize = 32_768;

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

    /// Model options: `threads` (a private pool), `precision` ([`Precision::F32`], the
    /// default, or [`Precision::Bf16`] weights), `max_length` (the longest sequence, prompt and
    /// new tokens; default the config's `max_position_embeddings`, else 32,768). The batch
    /// options do not apply to generation.
    pub fn options(mut self, options: ModelOptions) -> Self {
        self.options = options;
        self
    }

    /// Loads the model on the CPU.
    pub fn build(self) -> Result<Qwen3Chat> {
        let dir = &self.dir;
        self.options.validate("Qwen3Chat", 1)?;
        let precision = self.options.precision;
        if self.options.device.uses_candle() {
            return Err(Error::Config(format!(
                "Qwen3Chat: generation runs on the crate's own CPU kernels only (device cpu, \
                 not {})",
                self.options.device
            )));
        }
        if !matches!(precision, Precision::F32 | Precision::Bf16) {
            return Err(Error::Config(format!(
                "Qwen3Chat: precision {precision} is not supported (f32 or bf16)"
            )));
        }
        // Says whether the directory does not exist, is not one, or has no config.json.
        let config_path = crate::models::ModelDir::open(dir)?
            .path()
            .join("config.json");
        let config = Qwen3Config::from_file(&config_path)?;
        if config.sequence_classifier {
            return Err(Error::model(format!(
                "{}: a sequence classifier (Qwen3ForSequenceClassification) has no language-model \
                 head to generate with; it loads as a reranker (load_reranker)",
                config_path.display()
            )));
        }
        let config_text =
            std::fs::read_to_string(&config_path).map_err(|e| Error::io(&config_path, e))?;
        let raw: serde_json::Value = serde_json::from_str(&config_text)
            .map_err(|e| Error::parse(config_path.display().to_string(), e))?;

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
        let load_tokenizer = || -> Result<Tokenizer> {
            let mut tokenizer = Tokenizer::from_file(&tokenizer_path)
                .map_err(|e| Error::tokenizer(format!("{}: {e}", tokenizer_path.display())))?;
            tokenizer
                .with_truncation(None)
                .map_err(|e| Error::tokenizer(e.to_string()))?;
            tokenizer.with_padding(None);
            Ok(tokenizer)
        };

        let max_positions = self
            .options
            .max_length
            .or(config.max_position_embeddings)
            .unwrap_or(DEFAULT_MAX_POSITIONS);
        let pool = self.options.thread_pool("qwen3-chat")?;
        // The tokenizer (about 0.35 s for Qwen3's) loads while the layers do.
        let (model, tokenizer) = pool.install(|| {
            rayon::join(
                || CausalLm::load(dir, config, precision, max_positions),
                load_tokenizer,
            )
        });
        let tokenizer = tokenizer?;
        let model = model?;
        let state = model.state();

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
            vocab_size: model.input_vocab().min(model.vocab_size()),
            max_positions: model.max_positions(),
            model,
            state: Mutex::new(state),
            pool,
            tokenizer,
            stop_ids,
            use_kv_cache: self.use_kv_cache,
            precision,
        })
    }
}

impl Qwen3Chat {
    /// A builder for the model in `dir`.
    pub fn builder(dir: impl Into<PathBuf>) -> Qwen3ChatBuilder {
        Qwen3ChatBuilder {
            dir: dir.into(),
            tokenizer: None,
            use_kv_cache: true,
            extra_stop_tokens: Vec::new(),
            options: ModelOptions::default(),
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

    /// The precision of the weights ([`Precision::F32`] or [`Precision::Bf16`]).
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The logits of the token after `ids` (one forward pass of the whole sequence).
    pub fn next_token_logits(&self, ids: &[u32]) -> Result<Vec<f32>> {
        if ids.is_empty() {
            return Err(Error::InvalidInput("no input tokens".into()));
        }
        self.check_prompt(ids)?;
        let mut guard = self.lock()?;
        let state: &mut DecodeState = &mut guard;
        self.pool
            .install(|| self.model.prefill(ids, state).map(<[f32]>::to_vec))
    }

    /// The decode state. A panic during an earlier call poisons the lock but leaves nothing to
    /// distrust: every call starts by clearing the cache (the prefill), so the state is reused.
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, DecodeState>> {
        Ok(self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn check_prompt(&self, prompt_ids: &[u32]) -> Result<()> {
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
        Ok(())
    }

    /// Decodes after `prompt_ids` and returns the new ids.
    pub fn generate_ids(&self, prompt_ids: &[u32], params: &DecodeParams) -> Result<Decoded> {
        if prompt_ids.is_empty() {
            return Err(Error::InvalidInput("the prompt has no tokens".into()));
        }
        self.check_prompt(prompt_ids)?;
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
        let mut sampler = Sampler::new(params);
        let mut guard = self.lock()?;
        let state: &mut DecodeState = &mut guard;
        self.pool
            .install(|| self.decode_loop(prompt_ids, params, max_new, &mut sampler, state))
    }

    fn decode_loop(
        &self,
        prompt_ids: &[u32],
        params: &DecodeParams,
        max_new: usize,
        sampler: &mut Sampler,
        state: &mut DecodeState,
    ) -> Result<Decoded> {
        let mut timings = DecodeTimings::default();
        let started = Instant::now();
        state.reserve(prompt_ids.len() + max_new);
        let mut all: Vec<u32> = Vec::with_capacity(prompt_ids.len() + max_new);
        all.extend_from_slice(prompt_ids);
        let mut new_ids: Vec<u32> = Vec::with_capacity(max_new);
        let mut stopped = false;
        let mut next = if max_new == 0 {
            None
        } else {
            Some(sampler.sample(self.model.prefill(prompt_ids, state)?))
        };
        timings.prefill = started.elapsed();
        let decoding = Instant::now();
        while let Some(id) = next.take() {
            if params.stop_ids.contains(&id) {
                stopped = true;
                break;
            }
            new_ids.push(id);
            all.push(id);
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
            let logits = if params.use_kv_cache {
                self.model.step(id, state)?
            } else {
                self.model.prefill(&all, state)?
            };
            timings.decode_steps += 1;
            next = Some(sampler.sample(logits));
        }
        timings.decode = decoding.elapsed();
        Ok(Decoded {
            ids: new_ids,
            stopped,
            timings,
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

/// Picks each next token: the arg max when greedy (the first of equal maxima, as `torch.argmax`),
/// else a draw from `softmax(logits / temperature)` restricted to the smallest set of most
/// likely tokens whose mass reaches `top_p`.
struct Sampler {
    greedy: bool,
    temperature: f32,
    top_p: f32,
    rng: StdRng,
    /// (weight, id) of the candidates, reused between steps.
    weights: Vec<(f32, u32)>,
}

impl Sampler {
    fn new(params: &DecodeParams) -> Self {
        Sampler {
            greedy: params.temperature < 1e-7,
            temperature: params.temperature,
            top_p: params.top_p,
            rng: StdRng::seed_from_u64(params.seed),
            weights: Vec::new(),
        }
    }

    fn sample(&mut self, logits: &[f32]) -> u32 {
        let mut best = (f32::NEG_INFINITY, 0u32);
        for (i, &l) in logits.iter().enumerate() {
            if l > best.0 {
                best = (l, i as u32);
            }
        }
        if self.greedy || !best.0.is_finite() {
            return best.1;
        }
        let (max, t) = (best.0, self.temperature);
        self.weights.clear();
        self.weights.extend(
            logits
                .iter()
                .enumerate()
                .map(|(i, &l)| (((l - max) / t).exp(), i as u32))
                .filter(|(w, _)| *w > 0.0),
        );
        let mut total: f32 = self.weights.iter().map(|(w, _)| w).sum();
        if self.top_p < 1.0 {
            self.weights
                .sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let (mut mass, mut keep) = (0.0f32, 0);
            for (w, _) in &self.weights {
                mass += w;
                keep += 1;
                if mass >= self.top_p * total {
                    break;
                }
            }
            self.weights.truncate(keep.max(1));
            total = mass;
        }
        let mut u = self.rng.random::<f32>() * total;
        for &(w, id) in &self.weights {
            if u < w {
                return id;
            }
            u -= w;
        }
        self.weights.last().map_or(best.1, |&(_, id)| id)
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
