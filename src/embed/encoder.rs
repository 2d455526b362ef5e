//! The one sentence-transformers embedder over an encoder: [`EncoderEmbedder`] holds any
//! architecture's packed encoder on its engine (`models::engine`) with the text side
//! (`packed::PackedTexts`: layout, tokenizer, prompts, batching, pooling). The public
//! embedders ([`BertEmbedder`](super::BertEmbedder),
//! [`ModernBertEmbedder`](super::ModernBertEmbedder), [`GteEmbedder`](super::GteEmbedder),
//! [`MpnetEmbedder`](super::MpnetEmbedder)) are this embedder under the name of the
//! architectures they accept: each one's file says only how its architecture's encoder is read,
//! and [`encoder_embedder!`] writes their shared methods once.

use std::path::PathBuf;
use std::sync::OnceLock;

use ndarray::Array2;

use super::builder::EmbedderBuilder;
use super::packed::PackedTexts;
use super::Role;
use crate::models::engine::{EncoderEngine, EncoderFamily, PackedEncoder};
use crate::models::{ModelDir, ModelPool, Precision};
use crate::Result;

/// What an architecture's file tells the shared embedder about its encoder.
pub(crate) struct EncoderSpec {
    /// The width of the hidden states.
    pub hidden: usize,
    /// The position table's length (the longest input the encoder can take).
    pub max_positions: usize,
    /// The rows of the word embeddings.
    pub vocab: usize,
    /// Which module candle runs on a device.
    pub family: EncoderFamily,
    /// The prefix of [`Embedder::id`](super::Embedder::id) (`bert`, `xlmr`, `gte`, ...).
    pub id_prefix: &'static str,
    /// The model's tasks for each role ([`EmbedderBuilder::task`]): their instructions as
    /// default prompts, the tasks' names (part of the id), and, when queries run through
    /// another task's weights than documents, the loader of the queries' encoder. `None` for a
    /// model without task adapters.
    pub tasks: Option<RoleTasks>,
}

/// A task-adapted model's tasks by role ([`EncoderSpec::tasks`]).
pub(crate) struct RoleTasks {
    /// `(query task, document task)`.
    pub names: (String, String),
    /// Each role's task instruction, used where the directory declares no prompt.
    pub prompts: Vec<(Role, String)>,
    /// The queries' encoder (its task's adapter merged), when it is not the documents' one.
    pub query_encoder: Option<QueryLoader>,
}

/// Loads the encoder queries run through, from the model directory.
pub(crate) type QueryLoader = Box<dyn FnOnce(&ModelDir) -> Result<Box<dyn PackedEncoder>>>;

/// A sentence-transformers embedder over a packed encoder.
pub(crate) struct EncoderEmbedder {
    pub encoder: EncoderEngine<Box<dyn PackedEncoder>>,
    /// The encoder of queries, where it is not `encoder` (a task-adapted model whose query
    /// task is not its document task).
    query_encoder: Option<EncoderEngine<Box<dyn PackedEncoder>>>,
    /// The tasks by role (`query / document`), part of the id; empty without adapters.
    tasks: String,
    /// The layout, tokenizer and batching.
    pub text: PackedTexts,
    pool: ModelPool,
    /// The model directory, for [`Embedder::id`](super::Embedder::id).
    dir: PathBuf,
    id_prefix: &'static str,
    /// [`Embedder::id`](super::Embedder::id), computed on first use (it reads the weights once).
    id: OnceLock<Option<String>>,
}

impl EncoderEmbedder {
    /// Opens the model directory of `builder`, asks `read` for the encoder's shape and its
    /// native loader (`read` gets the directory and its parsed `config.json`), reads the text
    /// side, then loads the encoder on `builder`'s device (the native loader gets the
    /// directory). `pool_name` names the thread pool.
    pub fn load<M, N, E>(
        builder: &EmbedderBuilder<M>,
        pool_name: &str,
        read: impl FnOnce(&ModelDir, &serde_json::Value) -> Result<(EncoderSpec, N)>,
    ) -> Result<Self>
    where
        N: FnOnce(&ModelDir) -> Result<E>,
        E: PackedEncoder + 'static,
    {
        let options = &builder.options;
        let model_dir = ModelDir::open(&builder.dir)?;
        let value = model_dir.config()?;
        let (mut spec, native) = read(&model_dir, &value)?;
        let tasks = spec.tasks.take();
        if tasks.is_none() {
            builder.no_tasks("model without LoRA adapters in its checkpoint")?;
        }
        let with_prompts;
        let builder = match &tasks {
            Some(t) => {
                with_prompts = builder.with_default_prompts(&t.prompts);
                &with_prompts
            }
            None => builder,
        };
        let text = PackedTexts::load(
            builder,
            &model_dir,
            spec.hidden,
            spec.max_positions,
            spec.vocab,
        )?;
        let encoder = EncoderEngine::load(options, &model_dir, spec.family, || {
            native(&model_dir).map(|e| Box::new(e) as Box<dyn PackedEncoder>)
        })?;
        let (query_encoder, tasks) = match tasks {
            None => (None, String::new()),
            Some(t) => {
                let query = match t.query_encoder {
                    Some(load) => Some(EncoderEngine::load(
                        options,
                        &model_dir,
                        spec.family,
                        || load(&model_dir),
                    )?),
                    None => None,
                };
                (query, format!("{} / {}", t.names.0, t.names.1))
            }
        };
        Ok(EncoderEmbedder {
            encoder,
            query_encoder,
            tasks,
            text,
            pool: options.thread_pool(pool_name)?,
            dir: model_dir.path().to_path_buf(),
            id_prefix: spec.id_prefix,
            id: OnceLock::new(),
        })
    }

    /// The number format of the encoder's linear layers.
    pub fn precision(&self) -> Precision {
        self.encoder.precision()
    }

    /// The number of threads of the dedicated pool, if one was configured.
    pub fn threads(&self) -> Option<usize> {
        self.pool.threads()
    }

    /// The texts' vectors, in the dedicated pool if there is one.
    pub fn embed_as(&self, texts: &[&str], role: Role) -> Result<Array2<f32>> {
        let encoder = match (role, &self.query_encoder) {
            (Role::Query, Some(query)) => query,
            _ => &self.encoder,
        };
        self.pool.install(|| self.text.embed(encoder, texts, role))
    }

    /// The task adapters queries and documents run through, `"query task / document task"`
    /// (`None` for a model without task adapters).
    pub fn tasks(&self) -> Option<&str> {
        Some(self.tasks.as_str()).filter(|t| !t.is_empty())
    }

    /// [`Embedder::id`](super::Embedder::id): the prefix and a hash of the model's files and
    /// settings (`PackedTexts::id`).
    pub fn id(&self) -> Option<String> {
        self.id
            .get_or_init(|| {
                let (dir, precision) = (&self.dir, self.precision());
                self.text.id(self.id_prefix, dir, precision, &self.tasks)
            })
            .clone()
    }

    /// The fields every encoder embedder's `Debug` shows.
    pub fn debug(&self, f: &mut std::fmt::Formatter<'_>, name: &str) -> std::fmt::Result {
        let layout = &self.text.layout;
        f.debug_struct(name)
            .field("dim", &layout.dim())
            .field("max_length", &layout.max_seq_length)
            .field("pooling", &layout.modes)
            .field("query_prompt", &layout.prompts.get(Role::Query))
            .field("document_prompt", &layout.prompts.get(Role::Document))
            .field("token_budget", &self.text.token_budget)
            .field("max_batch_size", &self.text.max_batch_size)
            .field("precision", &self.precision())
            .field("threads", &self.threads())
            .finish()
    }

    /// Whether the directory is a sentence-transformers one (has `modules.json`).
    pub fn is_sentence_transformers(&self) -> bool {
        self.text.layout.sentence_transformers
    }
}

/// The public face of [`EncoderEmbedder`] under the name `$name` (a newtype around it, with
/// its builder alias `$builder`): the constructors, the accessors, [`Embedder`] and `Debug`,
/// written once for every encoder architecture. The architecture's file documents the type
/// and gives `$read(model_dir, config, precision)`, which reads its encoder's shape and
/// returns its native loader (`$read(model_dir, config, &builder)` with a last argument
/// `builder`: for a model whose loading depends on the builder's task choices); `$pool` names
/// the thread pool.
///
/// [`Embedder`]: super::Embedder
macro_rules! encoder_embedder {
    (@read $read:path, $builder:ident, $model_dir:ident, $value:ident) => {
        $read($model_dir, $value, $builder.options.precision)
    };
    (@read $read:path, $builder:ident, $model_dir:ident, $value:ident, builder) => {
        $read($model_dir, $value, &$builder)
    };
    ($name:ident, $builder:ident, $pool:literal, $read:path $(, $with:ident)?) => {
        /// Options for the embedder; checked by [`build`](EmbedderBuilder::build).
        pub type $builder = EmbedderBuilder<$name>;

        impl $name {
            fn load(builder: $builder) -> Result<Self> {
                EncoderEmbedder::load(&builder, $pool, |model_dir, value| {
                    encoder_embedder!(@read $read, builder, model_dir, value $(, $with)?)
                })
                .map($name)
            }
        }

        /// The embedder is shared between threads.
        const _: fn() = || {
            fn check<T: Send + Sync>() {}
            check::<$name>();
        };

        impl EmbedderBuilder<$name> {
            /// Checks the options, then loads the model directory.
            pub fn build(self) -> Result<$name> {
                self.options.validate(stringify!($name), 2)?;
                $name::load(self)
            }
        }

        impl $name {
            /// Loads a model directory with default options (see `builder`).
            pub fn from_dir(dir: impl AsRef<std::path::Path>) -> Result<Self> {
                Self::builder(dir).build()
            }

            /// A builder for a model directory.
            pub fn builder(dir: impl AsRef<std::path::Path>) -> $builder {
                EmbedderBuilder::new(dir.as_ref())
            }

            /// The longest input in tokens, special tokens included; longer texts are
            /// truncated.
            pub fn max_length(&self) -> usize {
                self.0.text.layout.max_seq_length
            }

            /// The number format of the encoder's linear layers
            /// ([`ModelOptions::precision`](crate::models::ModelOptions::precision)).
            pub fn precision(&self) -> crate::models::Precision {
                self.0.precision()
            }

            /// The number of threads of the dedicated pool, if one was configured.
            pub fn threads(&self) -> Option<usize> {
                self.0.threads()
            }

            /// The pooling modes, in the order their vectors are concatenated.
            pub fn pooling(&self) -> &[crate::models::PoolingMode] {
                &self.0.text.layout.modes
            }

            /// The prompt put before texts of `role` (`None`: none).
            pub fn prompt(&self, role: Role) -> Option<&str> {
                self.0.text.layout.prompts.get(role)
            }

            /// `similarity_fn_name` of `config_sentence_transformers.json` (`None` when
            /// absent). The crate ranks by cosine; a model that asks for `dot` or `euclidean`
            /// loads only when its vectors are normalized (where those rank as cosine does).
            pub fn similarity_fn_name(&self) -> Option<&str> {
                self.0.text.layout.similarity.as_deref()
            }

            /// Whether the directory is a sentence-transformers one (has `modules.json`).
            pub fn is_sentence_transformers(&self) -> bool {
                self.0.is_sentence_transformers()
            }

            /// The task adapters queries and documents run through, as
            /// `"query task / document task"` (`None`: the model has none;
            /// [`EmbedderBuilder::task`]).
            pub fn tasks(&self) -> Option<&str> {
                self.0.tasks()
            }

            /// The token ids the model sees for `text` as a document (special tokens
            /// included, truncated).
            pub fn token_ids(&self, text: &str) -> Result<Vec<u32>> {
                self.token_ids_as(text, Role::Document)
            }

            /// The token ids the model sees for `text` as `role`: its prompt, then the text.
            pub fn token_ids_as(&self, text: &str, role: Role) -> Result<Vec<u32>> {
                self.0.text.token_ids_as(text, role)
            }
        }

        impl Embedder for $name {
            fn embed_as(&self, texts: &[&str], role: Role) -> Result<ndarray::Array2<f32>> {
                self.0.embed_as(texts, role)
            }

            fn dim(&self) -> usize {
                self.0.text.layout.dim()
            }

            /// The architecture's prefix (`bert-`, `xlmr-` for XLM-RoBERTa and RoBERTa,
            /// `modernbert-`, `gte-`, `mpnet-`) and the first 16 bytes (hex) of the SHA-256 of
            /// `config.json`, `tokenizer.json`, `model.safetensors` and `max_length`: the same
            /// for the same model and settings on any machine. `None` when a file cannot be
            /// read.
            ///
            /// Unless the model is mean pooling + normalization with no prompts (all-MiniLM,
            /// whose id is unchanged), the hash also covers the pooling, the Dense and
            /// Normalize steps (with the Dense weights), lower-casing and both prompts, so
            /// changing a prompt changes the id. With [`Precision::Int8`] it also covers the
            /// precision (int8 vectors are close to f32 ones, not equal), so stored vectors of
            /// one are never read as the other.
            ///
            /// [`Precision::Int8`]: crate::models::Precision::Int8
            fn id(&self) -> Option<String> {
                self.0.id()
            }

            /// The length of [`token_ids_as`](Self::token_ids_as).
            fn token_count(&self, text: &str, role: Role) -> Option<usize> {
                self.token_ids_as(text, role).ok().map(|ids| ids.len())
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.debug(f, stringify!($name))
            }
        }
    };
}

pub(crate) use encoder_embedder;

/// [`PackedEncoder`] for an encoder of single texts whose `forward` takes
/// [`Sequence`](crate::models::layers::encoder::Sequence)s: every token of type 0; `ids $ty`
/// for one whose `forward` takes the token ids themselves (no token types: Gemma3, T5).
macro_rules! single_text_encoder {
    (ids $ty:ty) => {
        impl PackedEncoder for $ty {
            fn hidden(&self) -> usize {
                self.config().hidden
            }

            fn encode(&self, rows: &[&[u32]], output: Output) -> Result<Vec<f32>> {
                self.forward(rows, output)
            }
        }
    };
    ($ty:ty) => {
        impl PackedEncoder for $ty {
            fn hidden(&self) -> usize {
                self.config().hidden
            }

            fn encode(&self, rows: &[&[u32]], output: Output) -> Result<Vec<f32>> {
                single_texts(rows, |seqs| self.forward(seqs, output))
            }
        }
    };
}

pub(crate) use single_text_encoder;

/// The `config.json` path of `dir`, for errors.
pub(crate) fn config_path(dir: &ModelDir) -> PathBuf {
    dir.path().join(crate::models::CONFIG_FILE)
}

/// `model_type` of a parsed `config.json`, when it is a string.
pub(crate) fn model_type(value: &serde_json::Value) -> Option<&str> {
    value.get("model_type").and_then(|v| v.as_str())
}
