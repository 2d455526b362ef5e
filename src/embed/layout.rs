//! The sentence-transformers layout of an embedding model directory: what happens to a text
//! before and after the encoder.
//!
//! `modules.json` lists the modules in order: a `Transformer` (the encoder, at the directory's
//! root), a `Pooling` (`1_Pooling/config.json`), then any number of `Dense` projections
//! (`2_Dense/config.json` + `2_Dense/model.safetensors`) and `Normalize` steps.
//! `sentence_bert_config.json` gives `max_seq_length` and `do_lower_case`;
//! `config_sentence_transformers.json` the prompts, `default_prompt_name` and
//! `similarity_fn_name`. A plain transformers directory (no `modules.json`) is read as
//! sentence-transformers reads it: mean pooling, no normalization, no prompts,
//! `max_seq_length` = min(`max_position_embeddings`, the tokenizer's `model_max_length`).
//!
//! Whatever this crate cannot reproduce exactly is refused when the model loads, with an
//! [`Error::Model`] that names the file and the key.

use std::path::Path;

use serde_json::{Map, Value};

use super::chat::ChatSettings;
use super::Role;
use crate::models::layers::config::{bad, count, flag_or, object, string};
use crate::models::layers::weights::Weights;
pub use crate::models::PoolingMode;
use crate::models::{token_count, token_mean, token_sum, ModelDir};
use crate::{Error, Result};

pub(crate) use crate::models::MODULES_FILE;
/// `max_seq_length` and `do_lower_case`, relative to the model directory.
pub(crate) const SENTENCE_BERT_FILE: &str = "sentence_bert_config.json";
/// Prompts and the similarity function, relative to the model directory.
pub(crate) const ST_CONFIG_FILE: &str = "config_sentence_transformers.json";
/// The tokenizer's settings (`model_max_length`), relative to the model directory.
const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";
/// A module's settings, relative to its folder.
const MODULE_CONFIG_FILE: &str = "config.json";

/// Torch's `F.normalize` epsilon: norms below it are clamped.
const NORMALIZE_EPS: f32 = 1e-12;
/// What sentence-transformers' max pooling writes over the tokens it leaves out.
const MAX_POOL_FILL: f32 = f32::NEG_INFINITY;

/// A Dense module's activation function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Activation {
    Identity,
    Tanh,
}

/// A `Dense` module: `activation(W x + b)`.
#[derive(Debug, Clone)]
pub(crate) struct DenseLayer {
    /// `(outputs, inputs)`, row-major.
    weight: Vec<f32>,
    bias: Option<Vec<f32>>,
    inputs: usize,
    /// The width of the vectors it makes.
    pub outputs: usize,
    activation: Activation,
    /// SHA-256 (hex) of the module's `config.json` and weights, for the embedder id.
    pub digest: String,
}

impl DenseLayer {
    /// A linear layer without activation: `W x + b` with `weight` `(outputs, inputs)`
    /// row-major and `bias` of `outputs` values (BGE-M3's heads, `embed/bge_m3.rs`);
    /// `digest` names its weights in the embedder id.
    pub fn linear(
        weight: Vec<f32>,
        bias: Option<Vec<f32>>,
        (outputs, inputs): (usize, usize),
        digest: String,
    ) -> Self {
        DenseLayer {
            weight,
            bias,
            inputs,
            outputs,
            activation: Activation::Identity,
            digest,
        }
    }

    /// [`apply`](Self::apply) of each of the `x.len() / inputs` rows of `x` (row-major), in
    /// one matrix product on the calling thread: the rows' outputs, row-major.
    pub fn apply_rows(&self, x: &[f32]) -> Vec<f32> {
        let mut out = project_rows(x, &self.weight, (self.outputs, self.inputs));
        for row in out.chunks_exact_mut(self.outputs.max(1)) {
            for (o, y) in row.iter_mut().enumerate() {
                if let Some(b) = &self.bias {
                    *y += b[o];
                }
                if self.activation == Activation::Tanh {
                    *y = y.tanh();
                }
            }
        }
        out
    }

    /// `activation(W x + b)` of one vector `x` of the module's `in_features` values.
    pub fn apply(&self, x: &[f32]) -> Vec<f32> {
        let dot = crate::simd::dot::kernel();
        (0..self.outputs)
            .map(|o| {
                let row = &self.weight[o * self.inputs..(o + 1) * self.inputs];
                let mut y = dot(row, x);
                if let Some(b) = &self.bias {
                    y += b[o];
                }
                match self.activation {
                    Activation::Identity => y,
                    Activation::Tanh => y.tanh(),
                }
            })
            .collect()
    }
}

/// `x · wᵀ` for the `x.len() / inputs` rows of `x` and `w` of shape `(outputs, inputs)`, both
/// row-major: one matrix product on the calling thread, the rows' outputs row-major.
pub(crate) fn project_rows(x: &[f32], w: &[f32], (outputs, inputs): (usize, usize)) -> Vec<f32> {
    use crate::simd::gemm::{matmul, Mat, Threads};
    let rows = x.len() / inputs.max(1);
    let mut out = vec![0f32; rows * outputs];
    let a = Mat::new(&x[..rows * inputs], rows, inputs);
    let w = Mat::new(w, outputs, inputs).t();
    matmul(a, w, &mut out, outputs, 1.0, false, Threads::One);
    out
}

/// A step after pooling, in `modules.json` order.
#[derive(Debug, Clone)]
enum Step {
    Dense(DenseLayer),
    Normalize,
}

/// The prompt put before a text of each role (`None`: none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Prompts {
    pub query: Option<String>,
    pub document: Option<String>,
}

impl Prompts {
    /// The prompt for `role`.
    pub fn get(&self, role: Role) -> Option<&str> {
        match role {
            Role::Query => self.query.as_deref(),
            Role::Document => self.document.as_deref(),
        }
    }

    /// Sets the prompt for `role`; an empty prompt means none (as in sentence-transformers).
    pub fn set(&mut self, role: Role, prompt: String) {
        let prompt = (!prompt.is_empty()).then_some(prompt);
        match role {
            Role::Query => self.query = prompt,
            Role::Document => self.document = prompt,
        }
    }
}

/// Everything of a sentence-transformers directory besides the encoder's weights.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub modes: Vec<PoolingMode>,
    /// Whether the prompt's tokens take part in pooling (`include_prompt`).
    pub include_prompt: bool,
    steps: Vec<Step>,
    /// `max_seq_length`: from `sentence_bert_config.json`, else the fallback.
    pub max_seq_length: usize,
    pub do_lower_case: bool,
    pub prompts: Prompts,
    /// `similarity_fn_name` (`None` when the directory does not say; the crate uses cosine).
    pub similarity: Option<String>,
    /// Whether the directory has a `modules.json`.
    pub sentence_transformers: bool,
    /// The chat template texts go through (sentence-transformers 6's `message` modality).
    pub chat: Option<ChatSettings>,
    /// The width of the encoder's hidden states.
    hidden: usize,
    /// Whether the first module is a `StaticEmbedding`, in place of a Transformer and a
    /// Pooling: the model is the mean of per-token vectors (its folder:
    /// `ModelDir::static_embedding_module`).
    pub is_static: bool,
}

/// The last component of a dotted Python name (`sentence_transformers.models.Pooling`:
/// `Pooling`).
pub(crate) fn short_name(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

impl Layout {
    /// Reads the layout of `dir`, whose encoder has `hidden`-wide states and
    /// `max_positions` positions. A static-embedding directory is refused (it has no encoder:
    /// [`Layout::read_static`]).
    pub fn read(dir: &ModelDir, hidden: usize, max_positions: usize) -> Result<Self> {
        let layout = Layout::read_any(dir, hidden, max_positions)?;
        if layout.is_static {
            return Err(Error::model(format!(
                "{}: a StaticEmbedding model (the mean of per-token vectors, no transformer): \
                 load it with load_embedder or StaticEmbedder",
                dir.path().join(MODULES_FILE).display()
            )));
        }
        Ok(layout)
    }

    /// Reads the layout of a static-embedding directory (`modules.json` starts with a
    /// `StaticEmbedding`) whose vectors have `dim` values; anything else is an
    /// [`Error::Model`] naming `modules.json`.
    pub fn read_static(dir: &ModelDir, dim: usize) -> Result<Self> {
        let layout = Layout::read_any(dir, dim, usize::MAX)?;
        if !layout.is_static {
            return Err(Error::model(format!(
                "{}: not a static-embedding model (its first module is not a StaticEmbedding)",
                dir.path().join(MODULES_FILE).display()
            )));
        }
        Ok(layout)
    }

    /// [`Layout::read`] or [`Layout::read_static`], whichever the directory is.
    fn read_any(dir: &ModelDir, hidden: usize, max_positions: usize) -> Result<Self> {
        let root = dir.path();
        let mut layout = Layout::plain(dir, hidden, max_positions)?;
        let Some(modules) = dir.optional_json(MODULES_FILE)? else {
            // A plain transformers directory: sentence-transformers wraps it in a Transformer
            // and a mean Pooling, and reads none of its own files.
            return Ok(layout);
        };
        layout.sentence_transformers = true;
        layout.read_modules(dir, modules)?;
        if !layout.is_static {
            layout.read_sentence_bert(dir, "feature-extraction")?;
        }
        if let Some(v) = dir.optional_json(ST_CONFIG_FILE)? {
            layout.read_st_config(v, &root.join(ST_CONFIG_FILE))?;
        }
        Ok(layout)
    }

    /// The layout of a Transformer module that is only tokenized and encoded here (a sparse
    /// encoder's `MLMTransformer`, whose head and pooling are not this layout's): no pooling,
    /// Dense or Normalize steps, no prompts; `max_seq_length` and `do_lower_case` read as
    /// [`Layout::read`] reads them, the module's `transformer_task` `fill-mask`.
    pub fn text_only(dir: &ModelDir, max_positions: usize) -> Result<Self> {
        let mut layout = Layout::plain(dir, 0, max_positions)?;
        layout.modes.clear();
        layout.sentence_transformers = true;
        layout.read_sentence_bert(dir, "fill-mask")?;
        Ok(layout)
    }

    /// What a plain transformers directory means (see [`Layout::read`]).
    fn plain(dir: &ModelDir, hidden: usize, max_positions: usize) -> Result<Self> {
        Ok(Layout {
            modes: vec![PoolingMode::Mean],
            include_prompt: true,
            steps: Vec::new(),
            max_seq_length: fallback_max_seq_length(dir, max_positions)?,
            do_lower_case: false,
            prompts: Prompts::default(),
            similarity: None,
            sentence_transformers: false,
            chat: None,
            hidden,
            is_static: false,
        })
    }

    /// Reads `sentence_bert_config.json`, if any: `max_seq_length`, `do_lower_case`, the chat
    /// template's settings, and what the Transformer module computes (`transformer_task`
    /// must be `task`, `module_output_name` `token_embeddings`).
    fn read_sentence_bert(&mut self, dir: &ModelDir, task: &str) -> Result<()> {
        if let Some(v) = dir.optional_json(SENTENCE_BERT_FILE)? {
            let file = dir.path().join(SENTENCE_BERT_FILE);
            let obj = object(v, &file)?;
            if let Some(n) = count(&obj, "max_seq_length", &file)? {
                self.max_seq_length = n;
            }
            self.do_lower_case = flag_or(&obj, "do_lower_case", false, &file)?;
            // sentence-transformers 6 saves, for a tokenizer with a chat template, a "message"
            // modality, and then feeds every text through that template (`chat`).
            if let Some(Value::Object(modalities)) = obj.get("modality_config") {
                if let Some(message) = modalities.get("message") {
                    let processing = obj.get("processing_kwargs");
                    self.chat = Some(ChatSettings::read(dir, message, processing, &file)?);
                }
            }
            // sentence-transformers 6 also records what the Transformer module outputs.
            for (key, want) in [
                ("transformer_task", task),
                ("module_output_name", "token_embeddings"),
            ] {
                if let Some(got) = string(&obj, key, &file)?.filter(|g| *g != want) {
                    return Err(bad(
                        &file,
                        key,
                        format!("{got:?} is not supported (only {want:?})"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Reads `modules.json` and the modules it names.
    fn read_modules(&mut self, dir: &ModelDir, modules: Value) -> Result<()> {
        let file = dir.path().join(MODULES_FILE);
        let Value::Array(modules) = modules else {
            return Err(Error::model(format!(
                "{}: expected a list of modules",
                file.display()
            )));
        };
        let mut pooling = false;
        for (i, module) in modules.into_iter().enumerate() {
            let module = object(module, &file)?;
            let key = |k: &str| format!("[{i}].{k}");
            let kind = string(&module, "type", &file)
                .map_err(|_| bad(&file, &key("type"), "expected a string"))?
                .ok_or_else(|| bad(&file, &key("type"), "missing"))?;
            let path = string(&module, "path", &file)
                .map_err(|_| bad(&file, &key("path"), "expected a string"))?
                .unwrap_or("");
            match (i, short_name(kind)) {
                (0, "Transformer") => {
                    if !path.is_empty() {
                        return Err(bad(
                            &file,
                            &key("path"),
                            format!(
                                "the Transformer module must be the directory itself (\"\"), \
                                 not {path:?}"
                            ),
                        ));
                    }
                }
                (0, "StaticEmbedding") => {
                    // Tokens to their vectors, averaged: a Transformer and a mean Pooling in
                    // one module.
                    self.is_static = true;
                    self.modes = vec![PoolingMode::Mean];
                    pooling = true;
                }
                (_, "Transformer" | "StaticEmbedding") => {
                    return Err(bad(
                        &file,
                        &key("type"),
                        format!("a {kind} module must come first, and only once"),
                    ))
                }
                (0, _) => {
                    return Err(bad(
                        &file,
                        &key("type"),
                        format!(
                            "the first module must be a Transformer or a StaticEmbedding, got \
                             {kind:?}"
                        ),
                    ))
                }
                (1, "Pooling") if !self.is_static => {
                    self.read_pooling(dir, path)?;
                    pooling = true;
                }
                (_, "Pooling") => {
                    return Err(bad(
                        &file,
                        &key("type"),
                        "the Pooling module must come right after the Transformer, once",
                    ))
                }
                (_, "Dense") if pooling => {
                    let layer = read_dense(dir, path, self.dim())?;
                    self.steps.push(Step::Dense(layer));
                }
                (_, "Normalize") if pooling => {
                    let name = format!("{path}/{MODULE_CONFIG_FILE}");
                    if let Some(v) = dir.optional_json(&name)? {
                        let file = dir.path().join(&name);
                        check_sentence_embedding(&object(v, &file)?, &file)?;
                    }
                    self.steps.push(Step::Normalize);
                }
                (_, "Dense" | "Normalize") => {
                    return Err(bad(
                        &file,
                        &key("type"),
                        format!("{kind:?} before a Pooling module is not supported"),
                    ))
                }
                _ => {
                    return Err(bad(
                        &file,
                        &key("type"),
                        format!(
                            "unsupported module {kind:?} (supported: Transformer, Pooling, \
                             Dense, Normalize, StaticEmbedding)"
                        ),
                    ))
                }
            }
        }
        if !pooling {
            return Err(Error::model(format!(
                "{}: no Pooling module (a Transformer followed by a Pooling is required)",
                file.display()
            )));
        }
        Ok(())
    }

    /// Reads `{path}/config.json` of the Pooling module: `pooling_mode` (a name or a list of
    /// names, concatenated in that order) or the older `pooling_mode_*_tokens` flags (none set:
    /// mean, as sentence-transformers reads them), `include_prompt`, and the
    /// `embedding_dimension` (older: `word_embedding_dimension`), which must be the encoder's.
    /// Other keys are ignored, as sentence-transformers ignores them.
    fn read_pooling(&mut self, dir: &ModelDir, path: &str) -> Result<()> {
        let name = format!("{path}/{MODULE_CONFIG_FILE}");
        let file = dir.path().join(&name);
        let obj = object(dir.json(&name)?, &file)?;
        for key in ["embedding_dimension", "word_embedding_dimension"] {
            if let Some(d) = count(&obj, key, &file)?.filter(|&d| d != self.hidden) {
                return Err(bad(
                    &file,
                    key,
                    format!(
                        "{d} does not match hidden_size {} of the encoder",
                        self.hidden
                    ),
                ));
            }
        }
        self.include_prompt = flag_or(&obj, "include_prompt", true, &file)?;
        let unsupported = |key: &str, mode: &str| {
            bad(
                &file,
                key,
                format!(
                    "unsupported pooling mode {mode:?} (supported: cls, max, mean, \
                     mean_sqrt_len_tokens, lasttoken)"
                ),
            )
        };
        let modes = match obj.get("pooling_mode") {
            None | Some(Value::Null) => {
                if flag_or(&obj, "pooling_mode_weightedmean_tokens", false, &file)? {
                    return Err(unsupported(
                        "pooling_mode_weightedmean_tokens",
                        "weightedmean",
                    ));
                }
                let mut modes = Vec::new();
                for (mode, key) in PoolingMode::LEGACY_KEYS {
                    if flag_or(&obj, key, false, &file)? {
                        modes.push(mode);
                    }
                }
                modes
            }
            Some(Value::String(name)) => {
                vec![PoolingMode::from_name(name)
                    .ok_or_else(|| unsupported("pooling_mode", name))?]
            }
            Some(Value::Array(names)) => names
                .iter()
                .map(|v| {
                    let name = v.as_str().ok_or_else(|| {
                        bad(
                            &file,
                            "pooling_mode",
                            format!("expected mode names, got {v}"),
                        )
                    })?;
                    PoolingMode::from_name(name).ok_or_else(|| unsupported("pooling_mode", name))
                })
                .collect::<Result<Vec<_>>>()?,
            Some(v) => {
                return Err(bad(
                    &file,
                    "pooling_mode",
                    format!("expected a mode name or a list of them, got {v}"),
                ))
            }
        };
        if modes.is_empty() {
            // sentence-transformers' default.
            self.modes = vec![PoolingMode::Mean];
        } else {
            self.modes = modes;
        }
        Ok(())
    }

    /// The width of the pooled vector (before any Dense).
    fn pooled_width(&self) -> usize {
        self.modes.len() * self.hidden
    }

    /// The width of the final vector.
    pub fn dim(&self) -> usize {
        self.steps
            .iter()
            .rev()
            .find_map(|s| match s {
                Step::Dense(d) => Some(d.outputs),
                Step::Normalize => None,
            })
            .unwrap_or_else(|| self.pooled_width())
    }

    /// Reads `config_sentence_transformers.json`: prompts by role and the similarity.
    fn read_st_config(&mut self, value: Value, file: &Path) -> Result<()> {
        let obj = object(value, file)?;
        let mut prompts = std::collections::BTreeMap::new();
        match obj.get("prompts") {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                for (name, p) in map {
                    let Value::String(p) = p else {
                        return Err(bad(
                            file,
                            &format!("prompts.{name}"),
                            format!("expected a string, got {p}"),
                        ));
                    };
                    prompts.insert(name.as_str(), p.as_str());
                }
            }
            Some(v) => return Err(bad(file, "prompts", format!("expected an object, got {v}"))),
        }
        let default = string(&obj, "default_prompt_name", file)?;
        if let Some(name) = default {
            if !prompts.contains_key(name) {
                return Err(bad(
                    file,
                    "default_prompt_name",
                    format!("{name:?} is not one of the prompts"),
                ));
            }
        }
        // As sentence-transformers' encode_query / encode_document: the first of the role's
        // prompt names that is set and not empty. (sentence-transformers 6.2 stops at
        // "document" even when it is empty, so it never uses a "passage" prompt; e5-style
        // models that name theirs "passage" get it here.) `default_prompt_name` applies to
        // neither, as in those two methods.
        let pick = |names: &[&str]| {
            names
                .iter()
                .filter_map(|n| prompts.get(n))
                .find(|p| !p.is_empty())
                .map(|p| p.to_string())
        };
        self.prompts
            .set(Role::Query, pick(&["query"]).unwrap_or_default());
        self.prompts.set(
            Role::Document,
            pick(&["document", "passage", "corpus"]).unwrap_or_default(),
        );
        let normalized = matches!(self.steps.last(), Some(Step::Normalize));
        match string(&obj, "similarity_fn_name", file)? {
            None | Some("cosine") => {}
            // On unit vectors these rank as cosine does.
            Some("dot" | "euclidean") if normalized => {}
            Some(other) => {
                return Err(bad(
                    file,
                    "similarity_fn_name",
                    format!(
                        "{other:?} is not supported: this crate ranks by cosine (supported: \
                         cosine; dot and euclidean when the model ends with Normalize)"
                    ),
                ))
            }
        }
        self.similarity = string(&obj, "similarity_fn_name", file)?.map(str::to_string);
        Ok(())
    }

    /// Whether this is what the crate always did (mean pooling, then normalization; no
    /// prompts, no lower-casing): embedder ids of such models stay what they were.
    pub fn is_mean_normalize(&self) -> bool {
        self.modes == [PoolingMode::Mean]
            && matches!(self.steps[..], [Step::Normalize])
            && !self.do_lower_case
            && self.prompts == Prompts::default()
    }

    /// A canonical description of the pooling, the steps after it and the text preparation
    /// (prompts, lower-casing), for the embedder id.
    pub fn describe(&self) -> String {
        let modes: Vec<&str> = self.modes.iter().map(|m| m.as_str()).collect();
        let steps: Vec<String> = self
            .steps
            .iter()
            .map(|s| match s {
                Step::Dense(d) => format!("dense:{}", d.digest),
                Step::Normalize => "normalize".to_string(),
            })
            .collect();
        let mut out = format!(
            "pooling={};include_prompt={};steps={};lower={};query={:?};document={:?}",
            modes.join("+"),
            self.include_prompt,
            steps.join(","),
            self.do_lower_case,
            self.prompts.query,
            self.prompts.document,
        );
        if let Some(chat) = &self.chat {
            out.push_str(&format!(
                ";chat={:?};kwargs={};template={}",
                chat.format,
                Value::Object(chat.kwargs.clone()),
                chat.template
            ));
        }
        out
    }

    /// Whether pooling needs only the first token of each sequence.
    pub fn first_token_only(&self) -> bool {
        self.modes == [PoolingMode::Cls]
    }

    /// The text the tokenizer sees for `text` as `role`: the role's prompt, then the text
    /// (sentence-transformers joins them as strings; lower-casing is the tokenizer's job).
    pub fn prepare(&self, text: &str, role: Role) -> String {
        match self.prompts.get(role) {
            Some(p) => format!("{p}{text}"),
            None => text.to_string(),
        }
    }

    /// Pools one sequence's hidden states (`len` rows of `hidden` values, or the first row
    /// only when [`first_token_only`](Self::first_token_only)), leaving its first `skip`
    /// tokens (sentence-transformers' `include_prompt: false`; cls then takes the first token
    /// after them), then runs the Dense and Normalize steps.
    pub fn finish(&self, rows: &[f32], len: usize, skip: usize) -> Vec<f32> {
        let h = self.hidden;
        let mut out = Vec::with_capacity(self.pooled_width());
        let skip = skip.min(len);
        let kept = &rows[skip * h..len * h];
        for mode in &self.modes {
            match mode {
                PoolingMode::Cls => {
                    let first = if skip < len { skip } else { 0 };
                    out.extend_from_slice(&rows[first * h..(first + 1) * h]);
                }
                PoolingMode::Max => {
                    let mut m = vec![MAX_POOL_FILL; h];
                    for row in kept.chunks_exact(h) {
                        m.iter_mut().zip(row).for_each(|(m, v)| *m = m.max(*v));
                    }
                    out.extend(m);
                }
                PoolingMode::Mean => out.extend(token_mean(rows, len, skip, h)),
                PoolingMode::MeanSqrtLen => {
                    let n = token_count(len, skip).sqrt();
                    out.extend(token_sum(rows, len, skip, h).into_iter().map(|s| s / n));
                }
                PoolingMode::LastToken => {
                    if kept.is_empty() {
                        out.extend(std::iter::repeat_n(0.0, h));
                    } else {
                        out.extend_from_slice(&rows[(len - 1) * h..len * h]);
                    }
                }
            }
        }
        self.finish_pooled(out)
    }

    /// Whether the pooling is the mean over the tokens alone: what an encoder can pool
    /// itself (`PackedEncoder::encode_mean_batches`), leaving [`finish_pooled`] to the
    /// caller.
    ///
    /// [`finish_pooled`]: Self::finish_pooled
    pub fn mean_only(&self) -> bool {
        self.modes == [PoolingMode::Mean]
    }

    /// The Dense and Normalize steps on a pooled vector: what [`finish`](Self::finish) does
    /// after the pooling.
    pub fn finish_pooled(&self, mut out: Vec<f32>) -> Vec<f32> {
        for step in &self.steps {
            match step {
                Step::Dense(d) => out = d.apply(&out),
                Step::Normalize => l2_normalize(&mut out),
            }
        }
        out
    }
}

/// Reads `{path}/config.json` and `{path}/model.safetensors` of a Dense module that takes
/// vectors of `expected` values (sentence-transformers' `Dense`, PyLate's too).
pub(crate) fn read_dense(dir: &ModelDir, path: &str, expected: usize) -> Result<DenseLayer> {
    use sha2::{Digest, Sha256};
    let name = format!("{path}/{MODULE_CONFIG_FILE}");
    let file = dir.path().join(&name);
    let value = dir.json(&name)?;
    let mut hash = Sha256::new();
    hash.update(value.to_string().as_bytes());
    let obj = object(value, &file)?;
    let need = |key: &str| -> Result<usize> {
        count(&obj, key, &file)?.ok_or_else(|| bad(&file, key, "missing"))
    };
    let inputs = need("in_features")?;
    let outputs = need("out_features")?;
    if inputs != expected {
        return Err(bad(
            &file,
            "in_features",
            format!("{inputs}, but the vector before it has {expected} values"),
        ));
    }
    if outputs == 0 {
        return Err(bad(&file, "out_features", "must be at least 1"));
    }
    if flag_or(&obj, "use_residual", false, &file)? {
        return Err(bad(
            &file,
            "use_residual",
            "residual Dense modules are not supported",
        ));
    }
    check_sentence_embedding(&obj, &file)?;
    let has_bias = flag_or(&obj, "bias", true, &file)?;
    let act_name =
        string(&obj, "activation_function", &file)?.unwrap_or("torch.nn.modules.activation.Tanh");
    let activation = match short_name(act_name) {
        "Identity" => Activation::Identity,
        "Tanh" => Activation::Tanh,
        _ => {
            return Err(bad(
                &file,
                "activation_function",
                format!("unsupported activation {act_name:?} (supported: Identity, Tanh)"),
            ))
        }
    };
    let module_dir = dir.path().join(path);
    let weights = Weights::open(&module_dir).map_err(|e| {
        Error::model_caused(
            format!(
                "{}: the Dense module's weights must be in model.safetensors",
                module_dir.display()
            ),
            e,
        )
    })?;
    let weight = weights.f32("linear.weight", &[outputs, inputs])?;
    let bias = if has_bias {
        Some(weights.f32("linear.bias", &[outputs])?)
    } else {
        None
    };
    for v in weight.iter().chain(bias.iter().flatten()) {
        hash.update(v.to_le_bytes());
    }
    let digest: String = hash.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(DenseLayer {
        weight,
        bias,
        inputs,
        outputs,
        activation,
        digest,
    })
}

/// Refuses a module that reads or writes anything but the sentence embedding
/// (`module_input_name` / `module_output_name`, e.g. token-level Normalize for multi-vector
/// models).
fn check_sentence_embedding(obj: &Map<String, Value>, file: &Path) -> Result<()> {
    for key in ["module_input_name", "module_output_name"] {
        match string(obj, key, file)? {
            None | Some("sentence_embedding") => {}
            Some(other) => {
                return Err(bad(
                    file,
                    key,
                    format!("{other:?}: only modules on \"sentence_embedding\" are supported"),
                ))
            }
        }
    }
    Ok(())
}

/// `max_seq_length` when no `sentence_bert_config.json` says: sentence-transformers takes
/// min(`max_position_embeddings`, the tokenizer's `model_max_length`).
fn fallback_max_seq_length(dir: &ModelDir, max_positions: usize) -> Result<usize> {
    let file = dir.path().join(TOKENIZER_CONFIG_FILE);
    let from_tokenizer = match dir.optional_json(TOKENIZER_CONFIG_FILE)? {
        Some(Value::Object(obj)) => match obj.get("model_max_length") {
            // transformers writes a huge float for "no limit".
            Some(v) => v.as_f64().filter(|n| *n >= 0.0).map(|n| {
                if n >= max_positions as f64 {
                    max_positions
                } else {
                    n as usize
                }
            }),
            None => None,
        },
        Some(other) => {
            return Err(Error::model(format!(
                "{}: expected a JSON object, got {other}",
                file.display()
            )))
        }
        None => None,
    };
    Ok(from_tokenizer.unwrap_or(max_positions).min(max_positions))
}

/// Divides `v` by its L2 norm (clamped below at [`NORMALIZE_EPS`], as torch does).
pub(crate) fn l2_normalize(v: &mut [f32]) {
    let norm = v
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt()
        .max(NORMALIZE_EPS);
    v.iter_mut().for_each(|x| *x /= norm);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(modes: Vec<PoolingMode>, steps: Vec<Step>) -> Layout {
        Layout {
            modes,
            include_prompt: true,
            steps,
            max_seq_length: 8,
            do_lower_case: false,
            prompts: Prompts::default(),
            similarity: None,
            sentence_transformers: true,
            chat: None,
            hidden: 2,
            is_static: false,
        }
    }

    #[test]
    fn pooling_modes_follow_sentence_transformers() {
        // Three tokens of width 2.
        let rows = [1.0f32, -2.0, 3.0, 4.0, -5.0, 0.0];
        let all = layout(
            vec![
                PoolingMode::Cls,
                PoolingMode::Max,
                PoolingMode::Mean,
                PoolingMode::MeanSqrtLen,
                PoolingMode::LastToken,
            ],
            vec![],
        );
        let s3 = 3f32.sqrt();
        assert_eq!(
            all.finish(&rows, 3, 0),
            vec![
                1.0,
                -2.0,
                3.0,
                4.0,
                -1.0 / 3.0,
                2.0 / 3.0,
                -1.0 / s3,
                2.0 / s3,
                -5.0,
                0.0
            ]
        );
        assert_eq!(all.dim(), 10);
        // Leaving the first token out (a prompt with include_prompt = false): cls takes the
        // first token after it.
        let v = all.finish(&rows, 3, 1);
        assert_eq!(&v[..4], &[3.0, 4.0, 3.0, 4.0]);
        assert_eq!(&v[4..6], &[-1.0, 2.0]);
    }

    #[test]
    fn dense_then_normalize() {
        let dense = DenseLayer {
            weight: vec![1.0, 0.0, 0.0, 2.0, 1.0, 1.0],
            bias: Some(vec![0.0, 0.0, 1.0]),
            inputs: 2,
            outputs: 3,
            activation: Activation::Identity,
            digest: String::new(),
        };
        let l = layout(
            vec![PoolingMode::Cls],
            vec![Step::Dense(dense), Step::Normalize],
        );
        assert_eq!(l.dim(), 3);
        // [1, 1] -> [1, 2, 3] -> / sqrt(14)
        let v = l.finish(&[1.0, 1.0], 1, 0);
        let n = 14f32.sqrt();
        assert_eq!(v, vec![1.0 / n, 2.0 / n, 3.0 / n]);
        assert!(l.first_token_only());
        assert!(!l.is_mean_normalize());
    }

    #[test]
    fn prompts_go_before_the_text() {
        let mut l = layout(vec![PoolingMode::Mean], vec![Step::Normalize]);
        assert!(l.is_mean_normalize());
        l.prompts.set(Role::Query, "Query: ".into());
        assert!(!l.is_mean_normalize());
        assert_eq!(l.prepare(" Élan ", Role::Query), "Query:  Élan ");
        assert_eq!(l.prepare("", Role::Query), "Query: ");
        assert_eq!(l.prepare(" Doc ", Role::Document), " Doc ");
        l.prompts.set(Role::Query, String::new());
        assert_eq!(l.prompts.get(Role::Query), None);
    }

    #[test]
    fn normalize_matches_torch_eps() {
        let mut v = [3.0f32, 4.0];
        l2_normalize(&mut v);
        assert_eq!(v, [0.6, 0.8]);
        let mut z = [0.0f32, 0.0];
        l2_normalize(&mut z);
        assert_eq!(z, [0.0, 0.0]);
    }
}
