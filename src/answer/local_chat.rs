//! [`LocalChat`]: a decoder-only chat model (Qwen3, Qwen2 / Qwen2.5, Llama 2 / 3, Mistral, Phi-3) as a
//! [`Generator`]: the prompt, the stop rules and sampling. The model itself (the packed
//! prefill, the KV cache, the decode step) is `models::qwen3::generate`, on the same kernels
//! as the Qwen3 reranker and the decoder embedders.
//!
//! Weights load from a local directory (`config.json` naming `Qwen3ForCausalLM`,
//! `Qwen2ForCausalLM`, `LlamaForCausalLM`, `MistralForCausalLM` or `Phi3ForCausalLM`;
//! `model.safetensors` or a
//! sharded `model.safetensors.index.json`; `tokenizer.json`), in f32 or, opt-in, bf16
//! ([`Precision::Bf16`]). Prompts are the model's chat template (`chat_template.jinja`, else
//! `tokenizer_config.json`'s `chat_template`) rendered as transformers renders it, with
//! `add_generation_prompt` and, for Qwen3, thinking off (`chat_format`); a Qwen checkpoint
//! without a template gets ChatML. Decoding stops at the config's, `generation_config.json`'s
//! and the tokenizer's end-of-sequence tokens; it keeps a KV cache (the prompt is run once,
//! then one token per step), and is greedy when the temperature is 0, else temperature plus
//! top-p sampling with a seed.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use minijinja::value::Value;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokenizers::Tokenizer;

use super::chat_format::{chat_ml, ChatFormat};
use super::{Generation, GenerationRequest, Generator, Message, TokenCounter, TokenUsage};
use crate::models::chat_template::{self, Template};
use crate::models::qwen3::generate::{CausalLm, DecodeState};
use crate::models::qwen3::{DecoderFamily, Qwen3Config};
use crate::models::{ModelDir, ModelOptions, ModelPool, Precision};
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

/// The result of [`LocalChat::generate_ids`].
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// The new token ids (a stop token that ended decoding is not included).
    pub ids: Vec<u32>,
    /// True when a stop token ended decoding; false when `max_new_tokens` did.
    pub stopped: bool,
    /// Where the time went.
    pub timings: DecodeTimings,
}

/// Time spent in one [`LocalChat::generate_ids`] call, measured inside it.
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

/// A chat model on the crate's CPU kernels: a directory whose `config.json` names
/// `Qwen3ForCausalLM`, `Qwen2ForCausalLM`, `LlamaForCausalLM`, `MistralForCausalLM` or
/// `Phi3ForCausalLM`, with
/// `model.safetensors` (or its shards) and `tokenizer.json`, in f32 or bf16.
///
/// Its prompts are the model's chat template (`chat_template.jinja`, else `chat_template` in
/// `tokenizer_config.json`, or [`LocalChatBuilder::chat_template`]) rendered as transformers'
/// `apply_chat_template(messages, add_generation_prompt=True)` renders it, thinking off for
/// Qwen3 ([`LocalChatBuilder::thinking`]); a system message the template refuses (Mistral
/// v0.1 / v0.2) is folded into the first user message; a Qwen checkpoint without a template
/// gets ChatML. Decoding stops at the [`stop_ids`](LocalChat::stop_ids).
///
/// One model holds one decode state (the KV cache and step buffers, reused from call to
/// call), so calls on the same instance run one at a time (a mutex serializes them); share it
/// behind an `Arc` and load a second instance for parallel decoding.
pub struct LocalChat {
    model: CausalLm,
    state: Mutex<DecodeState>,
    pool: ModelPool,
    tokenizer: Tokenizer,
    format: ChatFormat,
    family: DecoderFamily,
    max_positions: usize,
    vocab_size: usize,
    stop_ids: Vec<u32>,
    use_kv_cache: bool,
    precision: Precision,
}

impl std::fmt::Debug for LocalChat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalChat")
            .field("family", &self.family)
            .field("vocab_size", &self.vocab_size)
            .field("max_positions", &self.max_positions)
            .field("stop_ids", &self.stop_ids)
            .field("use_kv_cache", &self.use_kv_cache)
            .field("precision", &self.precision)
            .finish_non_exhaustive()
    }
}

/// Loads a [`LocalChat`]; [`LocalChatBuilder::build`] checks the files.
#[derive(Debug, Clone)]
pub struct LocalChatBuilder {
    dir: PathBuf,
    tokenizer: Option<PathBuf>,
    use_kv_cache: bool,
    extra_stop_tokens: Vec<String>,
    options: ModelOptions,
    chat_template: Option<String>,
    thinking: bool,
    template_variables: serde_json::Map<String, serde_json::Value>,
}

/// Positions a model is loaded for when its config names no `max_position_embeddings`.
const DEFAULT_MAX_POSITIONS: usize = 32_768;

impl LocalChatBuilder {
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

    /// Renders prompts with this chat template (Jinja source, as `chat_template.jinja` holds)
    /// instead of the model directory's; needed for a Llama or Mistral checkpoint saved
    /// without one.
    pub fn chat_template(mut self, source: impl Into<String>) -> Self {
        self.chat_template = Some(source.into());
        self
    }

    /// Lets a model that can think before answering (Qwen3) do so: the template gets
    /// `enable_thinking` true (default false: answers come without a `<think>` block, as
    /// the answer prompts expect).
    pub fn thinking(mut self, on: bool) -> Self {
        self.thinking = on;
        self
    }

    /// Passes a variable to the chat template besides `messages` (for example Llama 3's
    /// `date_string`, or a template's own switches); the last value given for a name wins.
    pub fn template_variable(mut self, name: impl Into<String>, value: serde_json::Value) -> Self {
        self.template_variables.insert(name.into(), value);
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
    pub fn build(self) -> Result<LocalChat> {
        let dir = &self.dir;
        self.options.validate("LocalChat", 1)?;
        let precision = self.options.precision;
        if self.options.device.uses_candle() {
            return Err(Error::Config(format!(
                "LocalChat: generation runs on the crate's own CPU kernels only (device cpu, \
                 not {})",
                self.options.device
            )));
        }
        if !matches!(precision, Precision::F32 | Precision::Bf16) {
            return Err(Error::Config(format!(
                "LocalChat: precision {precision} is not supported (f32 or bf16)"
            )));
        }
        // Says whether the directory does not exist, is not one, or has no config.json.
        let model_dir = ModelDir::open(dir)?;
        let (config_path, config_text, raw) = model_dir.config_text()?;
        let family = causal_lm_family(&config_path, &config_text, &raw)?;
        let config = Qwen3Config::from_text_at(&config_path, &config_text, family)?;
        let tokenizer_config = model_dir.optional_json("tokenizer_config.json")?;
        let special_tokens = chat_template::special_tokens(tokenizer_config.as_ref());
        let format = self.chat_format(&model_dir, family, &special_tokens)?;

        let tokenizer_path = self
            .tokenizer
            .clone()
            .unwrap_or_else(|| dir.join("tokenizer.json"));
        if !tokenizer_path.is_file() {
            let hint = match family {
                DecoderFamily::Qwen3 => {
                    " (Qwen3's can be fetched with scripts/fetch_qwen3_tokenizer.sh)"
                }
                _ => "",
            };
            return Err(Error::tokenizer(format!(
                "{} not found: pass the model's tokenizer.json explicitly{hint}",
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
        let pool = self.options.thread_pool("local-chat")?;
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
        let generation = model_dir.optional_json("generation_config.json")?;
        for config in [Some(&raw), generation.as_ref()].into_iter().flatten() {
            for id in eos_ids(config.get("eos_token_id")) {
                add(id);
            }
        }
        if let Some(eos) = special_tokens
            .get("eos_token")
            .and_then(|t| t.as_str())
            .and_then(|t| tokenizer.token_to_id(t))
        {
            add(eos);
        }
        for token in &self.extra_stop_tokens {
            let id = tokenizer.token_to_id(token).ok_or_else(|| {
                Error::Config(format!("stop token {token:?} is not in the vocabulary"))
            })?;
            add(id);
        }

        Ok(LocalChat {
            vocab_size: model.input_vocab().min(model.vocab_size()),
            max_positions: model.max_positions(),
            model,
            state: Mutex::new(state),
            pool,
            tokenizer,
            format,
            family,
            stop_ids,
            use_kv_cache: self.use_kv_cache,
            precision,
        })
    }

    /// The prompt format: the builder's template, else the directory's, else the family's
    /// built-in one; a Llama, Mistral or Phi-3 checkpoint without a template is an error. The
    /// template sees `special_tokens` (`tokenizer_config.json`'s) by name.
    fn chat_format(
        &self,
        dir: &ModelDir,
        family: DecoderFamily,
        special_tokens: &BTreeMap<String, Value>,
    ) -> Result<ChatFormat> {
        let source = match &self.chat_template {
            Some(source) => Some(source.clone()),
            None => chat_template::template_source(dir)?,
        };
        let Some(source) = source else {
            return ChatFormat::builtin(family, self.thinking).ok_or_else(|| {
                Error::model(format!(
                    "{}: no chat template (no {} and no chat_template in tokenizer_config.json); \
                     a {} checkpoint needs one to write prompts: pass it with \
                     LocalChatBuilder::chat_template",
                    dir.path().display(),
                    chat_template::TEMPLATE_FILE,
                    family.architecture()
                ))
            });
        };
        let template = Template::new(source)
            .map_err(|e| Error::model(format!("{}: chat template: {e:#}", dir.path().display())))?;
        let mut variables = special_tokens.clone();
        variables.insert("add_generation_prompt".into(), Value::from(true));
        variables.insert("tools".into(), Value::from(()));
        variables.insert("documents".into(), Value::from(()));
        variables.insert("enable_thinking".into(), Value::from(self.thinking));
        for (name, value) in &self.template_variables {
            variables.insert(name.clone(), Value::from_serialize(value));
        }
        Ok(ChatFormat::Template {
            template: Box::new(template),
            variables,
        })
    }
}

/// The family of the causal LM `config.json` describes, or an error naming what it is.
fn causal_lm_family(
    path: &std::path::Path,
    text: &str,
    raw: &serde_json::Value,
) -> Result<DecoderFamily> {
    if let Some(family) = DecoderFamily::of_causal_lm(text) {
        return Ok(family);
    }
    let architectures = raw.get("architectures").cloned().unwrap_or_default();
    let names: Vec<&str> = architectures
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str())
        .collect();
    if let Some(classifier) = names
        .iter()
        .find(|a| a.ends_with("ForSequenceClassification"))
    {
        return Err(Error::model(format!(
            "{}: a sequence classifier ({classifier}) has no language-model head to generate \
             with; it loads as a reranker (load_reranker)",
            path.display()
        )));
    }
    let supported: Vec<&str> = DecoderFamily::ALL
        .iter()
        .map(|f| f.architecture())
        .collect();
    Err(Error::model(format!(
        "{}: architectures {names:?} (model_type {}): LocalChat generates with {}",
        path.display(),
        raw.get("model_type").unwrap_or(&serde_json::Value::Null),
        supported.join(", ")
    )))
}

/// The ids of an `eos_token_id` entry (a number or a list of numbers).
fn eos_ids(value: Option<&serde_json::Value>) -> Vec<u32> {
    let ids: Vec<&serde_json::Value> = match value {
        Some(serde_json::Value::Array(ids)) => ids.iter().collect(),
        Some(id) => vec![id],
        None => Vec::new(),
    };
    ids.into_iter()
        .filter_map(|v| v.as_u64())
        .filter_map(|v| u32::try_from(v).ok())
        .collect()
}

impl LocalChat {
    /// A builder for the model in `dir`.
    pub fn builder(dir: impl Into<PathBuf>) -> LocalChatBuilder {
        LocalChatBuilder {
            dir: dir.into(),
            tokenizer: None,
            use_kv_cache: true,
            extra_stop_tokens: Vec::new(),
            options: ModelOptions::default(),
            chat_template: None,
            thinking: false,
            template_variables: serde_json::Map::new(),
        }
    }

    /// Loads the model in `dir` with the defaults.
    pub fn from_dir(dir: impl Into<PathBuf>) -> Result<Self> {
        Self::builder(dir).build()
    }

    /// Qwen3's built-in prompt (used for a Qwen3 checkpoint saved without a chat template),
    /// thinking disabled: each message (content trimmed) as
    /// `<|im_start|>{role}\n{content}<|im_end|>\n`, then
    /// `<|im_start|>assistant\n<think>\n\n</think>\n\n`. [`LocalChat::prompt`] is what a
    /// loaded model writes.
    ///
    /// ```
    /// use rerank::answer::LocalChat;
    /// use rerank::answer::{Message, Role};
    /// assert_eq!(
    ///     LocalChat::chat_prompt(&[Message::new(Role::User, "Hi")]),
    ///     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    /// );
    /// ```
    pub fn chat_prompt(messages: &[Message]) -> String {
        chat_ml(messages, true, false)
    }

    /// The prompt this model is given for `messages`: its chat template rendered with the
    /// generation prompt (or the built-in ChatML of a Qwen checkpoint without one); a system
    /// message the template refuses is folded into the first user message. An error when the
    /// template raises one for these messages.
    pub fn prompt(&self, messages: &[Message]) -> Result<String> {
        if messages.is_empty() {
            return Err(Error::InvalidInput("the request has no messages".into()));
        }
        self.format.prompt(messages)
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

    /// The default stop token ids: `<|im_end|>` and `<|endoftext|>` where the vocabulary has
    /// them, the `eos_token_id` of `config.json` and `generation_config.json`, the
    /// tokenizer's `eos_token`, and the builder's [`stop_token`](LocalChatBuilder::stop_token)s.
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
        self.decode_with(prompt_ids, params, &mut |_| Ok(ControlFlow::Continue(())))
    }

    /// [`generate_ids`](Self::generate_ids) calling `on_token` with the new ids after each one
    /// that does not end decoding (`Break` stops it there).
    fn decode_with(
        &self,
        prompt_ids: &[u32],
        params: &DecodeParams,
        on_token: &mut (dyn FnMut(&[u32]) -> Result<ControlFlow<()>> + Send),
    ) -> Result<Decoded> {
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
        self.pool.install(|| {
            self.decode_loop(prompt_ids, params, max_new, &mut sampler, state, on_token)
        })
    }

    fn decode_loop(
        &self,
        prompt_ids: &[u32],
        params: &DecodeParams,
        max_new: usize,
        sampler: &mut Sampler,
        state: &mut DecodeState,
        on_token: &mut (dyn FnMut(&[u32]) -> Result<ControlFlow<()>> + Send),
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
            if new_ids.len() == max_new || on_token(&new_ids)?.is_break() {
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

impl LocalChat {
    /// What [`Generator::generate`] and [`Generator::generate_stream`] share: the prompt,
    /// decoding (`on_token` sees the new ids after each token), the text cut at the first stop
    /// string, and the usage.
    fn reply(
        &self,
        request: &GenerationRequest,
        on_token: &mut (dyn FnMut(&[u32]) -> Result<ControlFlow<()>> + Send),
    ) -> Result<Generation> {
        let prompt = self.prompt(&request.messages)?;
        let ids = self.encode(&prompt, false)?;
        let out = self.decode_with(&ids, &self.params_for(request), on_token)?;
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
            usage: Some(TokenUsage {
                prompt_tokens: ids.len(),
                completion_tokens: out.ids.len(),
            }),
        })
    }
}

impl Generator for LocalChat {
    fn generate(&self, request: &GenerationRequest) -> Result<Generation> {
        self.reply(request, &mut |_| Ok(ControlFlow::Continue(())))
    }

    /// Streams the reply as it is decoded: after each token, the text decoded so far less
    /// what may still change (an unfinished UTF-8 character, and the last bytes a stop string
    /// could begin in) goes out, so the pieces always add up to the returned text.
    fn generate_stream(
        &self,
        request: &GenerationRequest,
        on_text: &mut (dyn FnMut(&str) -> ControlFlow<()> + Send),
    ) -> Result<Generation> {
        let hold = request
            .stop
            .iter()
            .map(|s| s.len().saturating_sub(1))
            .max()
            .unwrap_or(0);
        let mut sent = String::new();
        let mut flow = ControlFlow::Continue(());
        let generation = self.reply(request, &mut |ids| {
            let text = self.decode(ids)?;
            let mut end = text.len().saturating_sub(hold);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            let ready = text[..end].trim_end_matches('\u{FFFD}');
            if ready.len() > sent.len() && ready.starts_with(sent.as_str()) {
                flow = on_text(&ready[sent.len()..]);
                sent.push_str(&ready[sent.len()..]);
            }
            Ok(flow)
        })?;
        let rest = generation.text.strip_prefix(sent.as_str()).unwrap_or("");
        if flow.is_continue() && !rest.is_empty() {
            let _ = on_text(rest);
        }
        Ok(generation)
    }

    fn name(&self) -> &str {
        "local-chat"
    }
}

impl TokenCounter for LocalChat {
    fn count_tokens(&self, text: &str) -> usize {
        match self.encode(text, false) {
            Ok(ids) => ids.len(),
            Err(_) => super::ApproxTokenCounter.count_tokens(text),
        }
    }
}
