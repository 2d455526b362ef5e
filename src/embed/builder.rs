//! [`EmbedderBuilder`]: the options every embedding model loads with, and the text
//! preparation the model families share (tokenizer, lower-casing, prompt lengths, the id).

use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use super::chat::ChatTemplate;
use super::layout::Layout;
use super::Role;
use crate::models::{ModelDir, ModelOptions, TOKENIZER_FILE};
use crate::{Error, Result};

/// Options for an embedding model directory, checked when the model loads:
/// `BertEmbedder::builder(dir)` ([`BertEmbedderBuilder`](super::BertEmbedderBuilder)),
/// `ModernBertEmbedder::builder(dir)`
/// ([`ModernBertEmbedderBuilder`](super::ModernBertEmbedderBuilder)) and
/// `Qwen3Embedder::builder(dir)` ([`Qwen3EmbedderBuilder`](super::Qwen3EmbedderBuilder));
/// [`load_embedder`](super::load_embedder) picks the family from `config.json`.
#[derive(Debug, Clone)]
pub struct EmbedderBuilder<M> {
    pub(crate) dir: PathBuf,
    pub(crate) options: ModelOptions,
    /// Prompts set by the host, replacing the model's.
    prompts: Vec<(Role, String)>,
    /// Prompts used where the model's directory has none for the role (a registry entry's).
    default_prompts: Vec<(Role, String)>,
    /// Task adapters chosen by the host, by role ([`EmbedderBuilder::task`]).
    pub(crate) tasks: Vec<(Role, String)>,
    model: PhantomData<fn() -> M>,
}

impl<M> EmbedderBuilder<M> {
    /// A builder for the model in `dir` with default options.
    pub(crate) fn new(dir: &Path) -> Self {
        EmbedderBuilder {
            dir: dir.to_path_buf(),
            options: ModelOptions::default(),
            prompts: Vec::new(),
            default_prompts: Vec::new(),
            tasks: Vec::new(),
            model: PhantomData,
        }
    }

    /// Sets the [`ModelOptions`]. For an embedder, `max_length` is the longest text in tokens,
    /// special tokens included (default: `max_seq_length` in `sentence_bert_config.json`, else
    /// the smaller of the position table and the tokenizer's `model_max_length`);
    /// `token_budget` defaults to [`DEFAULT_TOKEN_BUDGET`](super::DEFAULT_TOKEN_BUDGET) and
    /// `max_batch_size` to [`DEFAULT_MAX_BATCH_SIZE`](super::DEFAULT_MAX_BATCH_SIZE).
    pub fn options(mut self, options: ModelOptions) -> Self {
        self.options = options;
        self
    }

    /// Replaces the model's prompt for `role` (from `config_sentence_transformers.json`) with
    /// `prompt`, put verbatim before each text of that role; an empty prompt means none.
    /// The prompts are part of [`Embedder::id`](super::Embedder::id).
    ///
    /// ```no_run
    /// use rerank::{BertEmbedder, Role};
    /// let e5 = BertEmbedder::builder("models/e5-small-v2")
    ///     .prompt(Role::Query, "query: ")
    ///     .prompt(Role::Document, "passage: ")
    ///     .build()?;
    /// # Ok::<(), rerank::Error>(())
    /// ```
    pub fn prompt(mut self, role: Role, prompt: impl Into<String>) -> Self {
        self.prompts.push((role, prompt.into()));
        self
    }

    /// Uses `prompt` for `role` only where the model's directory declares no prompt for it
    /// (many published models leave their model card's prompts out of
    /// `config_sentence_transformers.json`; the [registry](crate::models::registry) fills them
    /// in this way). A [`prompt`](Self::prompt) set by the host still wins.
    pub fn default_prompt(mut self, role: Role, prompt: impl Into<String>) -> Self {
        self.default_prompts.push((role, prompt.into()));
        self
    }

    /// Runs texts of `role` through the model's task adapter `task`, for a model that has
    /// them (jina-embeddings-v3's LoRA adapters: `retrieval.query`, `retrieval.passage`,
    /// `separation`, `classification`, `text-matching`), with that task's instruction as the
    /// role's prompt unless [`prompt`](Self::prompt) sets one. By default queries run through
    /// `retrieval.query` and documents through `retrieval.passage`; a symmetric task (say
    /// `text-matching`) can be set for both. The documents' adapter is merged into the weights
    /// and the queries' runs beside them, so the weights are held once. A model without task
    /// adapters, or a task it does not have, is an [`Error::Config`](crate::Error::Config) at
    /// build time.
    ///
    /// ```no_run
    /// use rerank::{GteEmbedder, Role};
    /// let sts = GteEmbedder::builder("models/jina-embeddings-v3")
    ///     .task(Role::Query, "text-matching")
    ///     .task(Role::Document, "text-matching")
    ///     .build()?;
    /// # Ok::<(), rerank::Error>(())
    /// ```
    pub fn task(mut self, role: Role, task: impl Into<String>) -> Self {
        self.tasks.push((role, task.into()));
        self
    }

    /// The same options with `prompts` used first where the directory declares no prompt (a
    /// task-adapted model's instructions).
    pub(crate) fn with_default_prompts(&self, prompts: &[(Role, String)]) -> Self {
        EmbedderBuilder {
            dir: self.dir.clone(),
            options: self.options.clone(),
            prompts: self.prompts.clone(),
            default_prompts: prompts
                .iter()
                .chain(&self.default_prompts)
                .cloned()
                .collect(),
            tasks: self.tasks.clone(),
            model: PhantomData,
        }
    }

    /// An [`Error::Config`] when the host chose a task for a kind of model that has no task
    /// adapters (`what`).
    pub(crate) fn no_tasks(&self, what: &str) -> Result<()> {
        match self.tasks.first() {
            None => Ok(()),
            Some((_, task)) => Err(Error::Config(format!(
                "{}: a {what} has no task adapters, so task {task:?} cannot be chosen for it",
                self.dir.display()
            ))),
        }
    }

    /// The task the host chose for `role` (the last one set).
    pub(crate) fn task_for(&self, role: Role) -> Option<&str> {
        self.tasks
            .iter()
            .rev()
            .find(|(r, _)| *r == role)
            .map(|(_, t)| t.as_str())
    }

    /// Applies the prompts and the `max_length` option to the directory's `layout`.
    pub(crate) fn apply(&self, layout: &mut Layout) {
        for (role, prompt) in &self.default_prompts {
            if layout.prompts.get(*role).is_none() {
                layout.prompts.set(*role, prompt.clone());
            }
        }
        for (role, prompt) in &self.prompts {
            layout.prompts.set(*role, prompt.clone());
        }
        if let Some(n) = self.options.max_length {
            layout.max_seq_length = n;
        }
    }
}

/// An embedder's tokenizer: `tokenizer.json` as [`load_tokenizer`] sets it up, and the chat
/// template texts go through when the model's sentence-transformers config says so.
pub(crate) struct TextTokenizer {
    pub tokenizer: Tokenizer,
    chat: Option<ChatTemplate>,
}

/// The token ids of `texts` as `role`, in input order: each its role's prompt, then the
/// text, tokenized with the tokenizer's special tokens and truncation; or, for a model whose
/// texts go through its chat template, the template's rendering (`chat`).
pub(crate) fn encode_texts(
    tokenizer: &TextTokenizer,
    layout: &Layout,
    texts: &[&str],
    role: Role,
) -> Result<Vec<Vec<u32>>> {
    if let Some(chat) = &tokenizer.chat {
        use rayon::prelude::*;
        return texts
            .par_iter()
            .map(|t| chat.ids(t, role, layout.max_seq_length))
            .collect();
    }
    let prepared: Vec<String> = texts.iter().map(|t| layout.prepare(t, role)).collect();
    let encodings = tokenizer
        .tokenizer
        .encode_batch_fast(prepared, true)
        .map_err(|e| Error::tokenizer(e.to_string()))?;
    Ok(encodings
        .into_iter()
        .map(|e| e.get_ids().to_vec())
        .collect())
}

/// The token ids the model sees for `text` as `role` (see [`encode_texts`]).
pub(crate) fn token_ids(
    tokenizer: &TextTokenizer,
    layout: &Layout,
    text: &str,
    role: Role,
) -> Result<Vec<u32>> {
    if let Some(chat) = &tokenizer.chat {
        return chat.ids(text, role, layout.max_seq_length);
    }
    let enc = tokenizer
        .tokenizer
        .encode_fast(layout.prepare(text, role), true)
        .map_err(|e| Error::tokenizer(e.to_string()))?;
    Ok(enc.get_ids().to_vec())
}

/// 0 for [`Role::Query`], 1 for [`Role::Document`].
pub(crate) fn role_index(role: Role) -> usize {
    match role {
        Role::Query => 0,
        Role::Document => 1,
    }
}

/// How many leading tokens of a text of `role` are its prompt, left out of pooling when the
/// model's `include_prompt` is false; 0 otherwise. As sentence-transformers counts them: the
/// prompt alone tokenized with its special tokens, less a special token that ends it.
///
/// With a chat template the prompt is a system message, and sentence-transformers does not
/// count its tokens: none are left out.
pub(crate) fn prompt_length(
    tokenizer: &TextTokenizer,
    layout: &Layout,
    role: Role,
) -> Result<usize> {
    if layout.include_prompt || layout.prompts.get(role).is_none() || tokenizer.chat.is_some() {
        return Ok(0);
    }
    let enc = tokenizer
        .tokenizer
        .encode_fast(layout.prepare("", role), true)
        .map_err(|e| Error::tokenizer(e.to_string()))?;
    let n = enc.get_ids().len();
    let ends_special = enc.get_special_tokens_mask().last() == Some(&1);
    Ok(if ends_special { n - 1 } else { n })
}

/// Loads `tokenizer.json` with its baked-in padding removed and truncation set to
/// `max_seq_length` tokens (special tokens included), on the right, and lower-casing put
/// first when the layout says `do_lower_case`; with the layout's chat template, if any.
pub(crate) fn load_tokenizer(
    dir: &ModelDir,
    layout: &Layout,
    vocab_size: usize,
) -> Result<TextTokenizer> {
    let path = dir.path().join(TOKENIZER_FILE);
    let mut tokenizer = dir.tokenizer_within(vocab_size)?;
    tokenizer.with_padding(None);
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: layout.max_seq_length,
            strategy: TruncationStrategy::LongestFirst,
            direction: TruncationDirection::Right,
            stride: 0,
        }))
        .map_err(|e| Error::tokenizer(format!("{}: {e}", path.display())))?;
    if layout.do_lower_case {
        add_lowercase(&mut tokenizer)?;
    }
    let chat = match &layout.chat {
        Some(settings) => {
            let prompts =
                [Role::Query, Role::Document].map(|r| layout.prompts.get(r).map(str::to_string));
            Some(ChatTemplate::new(settings, dir, &tokenizer, prompts)?)
        }
        None => None,
    };
    Ok(TextTokenizer { tokenizer, chat })
}

/// Puts a `Lowercase` normalizer first in `tokenizer`, unless it already has one (as
/// sentence-transformers does for `do_lower_case: true`: it lower-cases the text, prompt
/// included, but not the special tokens typed in it).
fn add_lowercase(tokenizer: &mut Tokenizer) -> Result<()> {
    use tokenizers::normalizers::{Lowercase, NormalizerWrapper, Sequence};
    let current = tokenizer.get_normalizer().cloned();
    let has = match &current {
        Some(NormalizerWrapper::Lowercase(_)) => true,
        Some(NormalizerWrapper::Sequence(seq)) => seq
            .as_ref()
            .iter()
            .any(|n| matches!(n, NormalizerWrapper::Lowercase(_))),
        _ => false,
    };
    if has {
        return Ok(());
    }
    let mut chain = vec![NormalizerWrapper::Lowercase(Lowercase)];
    match current {
        Some(NormalizerWrapper::Sequence(seq)) => chain.extend(seq),
        Some(other) => chain.push(other),
        None => {}
    }
    tokenizer
        .with_normalizer(Some(Sequence::new(chain)))
        .map_err(|e| Error::tokenizer(format!("adding a Lowercase normalizer: {e}")))?;
    Ok(())
}

/// `{family}-` and the first 16 bytes (hex) of the SHA-256 of the files of `dir` that exist
/// among `config.json`, `tokenizer.json`, `model.safetensors` (or its shard index), then of
/// `extra`: the same for the same model and settings on any machine. `None` when a file that
/// exists cannot be read.
pub(crate) fn model_id(family: &str, dir: &Path, extra: &[&[u8]]) -> Option<String> {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    let weights = if dir.join(crate::models::WEIGHTS_FILE).is_file() {
        crate::models::WEIGHTS_FILE
    } else {
        "model.safetensors.index.json"
    };
    for file in [crate::models::CONFIG_FILE, TOKENIZER_FILE, weights] {
        let path = dir.join(file);
        if !path.exists() {
            continue;
        }
        let mut f = std::fs::File::open(path).ok()?;
        std::io::copy(&mut f, &mut hash).ok()?;
    }
    for bytes in extra {
        hash.update(bytes);
    }
    let digest = hash.finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    Some(format!("{family}-{hex}"))
}
