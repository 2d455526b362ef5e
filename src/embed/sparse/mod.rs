//! Learned sparse encoders (SPLADE): [`SparseEncoder`] turns a text into a [`SparseVector`],
//! weights over the model's vocabulary, compared by their dot product.
//!
//! - `vector`: [`SparseVector`] (ascending ids, non-zero values), its dot product and top-k;
//! - `modules` (feature `models`): the sentence-transformers 6 `SparseEncoder` layout:
//!   `MLMTransformer` + `SpladePooling`, or a `Router` with a query and a document route
//!   ([`is_sparse_encoder`]: whether a directory holds one);
//! - `splade` (feature `models`): the MLM route: a BERT or DistilBERT masked language model,
//!   its MLM head (`models::layers::mlm`) and SpladePooling;
//! - `table` (feature `models`): the inference-free route, `SparseStaticEmbedding`'s
//!   token-weight table;
//! - `m3` (feature `models`): BAAI/bge-m3's lexical weights: its XLM-R encoder and its
//!   `sparse_linear` head, reduced as FlagEmbedding does.

#[cfg(feature = "models")]
mod m3;
#[cfg(feature = "models")]
mod modules;
#[cfg(feature = "models")]
mod splade;
#[cfg(feature = "models")]
mod table;
mod vector;

pub use vector::SparseVector;

#[cfg(feature = "models")]
pub use encoder::{SparseEncoder, SparseEncoderBuilder};
#[cfg(feature = "models")]
pub use modules::is_sparse_encoder;
#[cfg(feature = "models")]
pub use modules::SpladeStrategy;

#[cfg(feature = "models")]
mod encoder {
    use std::path::{Path, PathBuf};

    use super::m3::M3Route;
    use super::modules::{Route, SparseLayout, SpladeStrategy};
    use super::splade::MlmRoute;
    use super::table::StaticRoute;
    use super::SparseVector;
    use crate::embed::bge_m3;
    use crate::embed::builder::role_index;
    use crate::embed::Role;
    use crate::models::{ModelDir, ModelOptions, ModelPool};
    use crate::{Error, Result};

    /// A learned sparse encoder (SPLADE: naver/splade-v3, prithivida/Splade_PP_en_v1, the
    /// opensearch neural sparse models; BAAI/bge-m3's lexical weights) loaded from a local
    /// sentence-transformers 6 `SparseEncoder` directory (or a plain `*ForMaskedLM`
    /// checkpoint, or a BGE-M3 folder), on the crate's CPU kernels.
    ///
    /// The directory's `modules.json` names an `MLMTransformer` (a BERT or DistilBERT masked
    /// language model: `config.json`, `tokenizer.json`, `model.safetensors`) and a
    /// `SpladePooling` (`pooling_strategy` `max` or `sum`, `activation_function` `relu` or
    /// `log1p_relu`), or one `Router` whose `router_config.json` gives the query and the
    /// document their own modules: an inference-free query side is a `SparseStaticEmbedding`,
    /// one weight per token id. `config_sentence_transformers.json`'s `max_active_dims` keeps
    /// the largest values of each vector. A document (MLM route) is, per vocabulary id,
    /// `pool over tokens of log1p(relu(logit))` (`log1p` twice with `log1p_relu`), every token
    /// counted, `[CLS]` and `[SEP]` included; see [`encode`](Self::encode).
    ///
    /// A folder with BGE-M3's sparse head (`sparse_linear.safetensors`, which
    /// `scripts/convert_bge_m3_heads.py` writes from the published `sparse_linear.pt`) is read
    /// as FlagEmbedding 1.4.0's `BGEM3FlagModel` reads it, whatever its sentence-transformers
    /// files say (they describe its dense vector): per text, the largest
    /// `relu(sparse_linear(state))` of each token id, the special and unknown tokens left out;
    /// texts cut to 512 tokens by default (FlagEmbedding's `query_max_length` and
    /// `passage_max_length`; `ModelOptions::max_length` up to the encoder's positions);
    /// queries and documents alike. The dot product of two such vectors is FlagEmbedding's
    /// `compute_lexical_matching_score`.
    ///
    /// Anything it cannot reproduce is refused at load with an [`Error::Model`] naming the file
    /// and the key: another module, pooling strategy or activation, a route it cannot run,
    /// prompts, a similarity other than `dot`, a pooling or weight table whose size is not the
    /// tokenizer's vocabulary; a BGE-M3 folder with only the `.pt` head (the error gives the
    /// command that converts it), a head that is not `Linear(hidden, 1)`.
    ///
    /// One instance can be shared (`Arc`) and called from many threads at once. With
    /// [`ModelOptions::threads`] the work runs in a dedicated thread pool of that size.
    ///
    /// ```no_run
    /// use rerank::embed::SparseEncoder;
    /// use rerank::models::ModelOptions;
    /// use rerank::Role;
    /// let splade = SparseEncoder::builder("models/splade-v3")
    ///     .options(ModelOptions::default().threads(4))
    ///     .build()?;
    /// let docs = splade.encode(&["BM25 is a ranking function"], Role::Document)?;
    /// let query = splade.encode(&["what ranks documents?"], Role::Query)?;
    /// let score = query[0].dot(&docs[0]);
    /// # let _ = score;
    /// # Ok::<(), rerank::Error>(())
    /// ```
    pub struct SparseEncoder {
        routes: Vec<Loaded>,
        /// The route of `[query, document]` (indices into `routes`).
        by_role: [usize; 2],
        max_active_dims: Option<usize>,
        pool: ModelPool,
        /// See [`SparseEncoder::id`].
        id: Option<String>,
    }

    /// A route, loaded.
    enum Loaded {
        Static(Box<StaticRoute>),
        Mlm(Box<MlmRoute>),
        M3(Box<M3Route>),
    }

    impl Loaded {
        fn vocab(&self) -> usize {
            match self {
                Loaded::Static(r) => r.vocab(),
                Loaded::Mlm(r) => r.vocab(),
                Loaded::M3(r) => r.vocab(),
            }
        }

        fn encode(&self, texts: &[&str]) -> Result<Vec<SparseVector>> {
            match self {
                Loaded::Static(r) => r.encode(texts),
                Loaded::Mlm(r) => r.encode(texts),
                Loaded::M3(r) => r.encode(texts),
            }
        }
    }

    /// Options for a [`SparseEncoder`]; checked by [`build`](Self::build).
    #[derive(Debug, Clone)]
    pub struct SparseEncoderBuilder {
        dir: PathBuf,
        options: ModelOptions,
    }

    impl SparseEncoderBuilder {
        /// Sets the [`ModelOptions`]: `max_length` (the longest text in tokens, special tokens
        /// included; default the MLM transformer's `max_seq_length`, 512 for BGE-M3),
        /// `token_budget`, `max_batch_size`, `threads`, `precision` (f32, or int8 for the
        /// encoder's layers; the MLM head and BGE-M3's sparse head stay f32). The device must
        /// be the CPU.
        pub fn options(mut self, options: ModelOptions) -> Self {
            self.options = options;
            self
        }

        /// Checks the options, then loads the model directory.
        pub fn build(self) -> Result<SparseEncoder> {
            self.options.validate("SparseEncoder", 2)?;
            if self.options.device.uses_candle() {
                return Err(Error::Config(format!(
                    "SparseEncoder: device {} is not supported (the sparse encoder runs on the \
                     crate's CPU kernels: device cpu)",
                    self.options.device
                )));
            }
            SparseEncoder::load(&self.dir, &self.options)
        }
    }

    impl SparseEncoder {
        /// A builder for the model in `dir`.
        pub fn builder(dir: impl AsRef<Path>) -> SparseEncoderBuilder {
            SparseEncoderBuilder {
                dir: dir.as_ref().to_path_buf(),
                options: ModelOptions::default(),
            }
        }

        /// Loads a model directory with default options.
        pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
            Self::builder(dir).build()
        }

        fn load(dir: &Path, options: &ModelOptions) -> Result<Self> {
            let root = ModelDir::folder(dir)?;
            if bge_m3::is_bge_m3_dir(root.path()) {
                let route = M3Route::load(&ModelDir::open(dir)?, options)?;
                return Ok(SparseEncoder {
                    id: route.id(),
                    routes: vec![Loaded::M3(Box::new(route))],
                    by_role: [0, 0],
                    max_active_dims: None,
                    pool: options.thread_pool("sparse")?,
                });
            }
            let layout = SparseLayout::read(&root)?;
            let routes = layout
                .routes
                .iter()
                .map(|route| match route {
                    Route::Static { path } => {
                        StaticRoute::load(&ModelDir::folder(root.path().join(path))?)
                            .map(|r| Loaded::Static(Box::new(r)))
                    }
                    Route::Mlm {
                        path,
                        pooling,
                        pooling_file,
                    } => {
                        let sub = ModelDir::open(root.path().join(path))?;
                        let pooling_file = root.path().join(pooling_file);
                        MlmRoute::load(&sub, *pooling, &pooling_file, options)
                            .map(|r| Loaded::Mlm(Box::new(r)))
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            let vocab = routes[layout.by_role[1]].vocab();
            if let Some(other) = routes.iter().map(Loaded::vocab).find(|&v| v != vocab) {
                return Err(Error::model(format!(
                    "{}: the query and document routes have vocabularies of {other} and \
                     {vocab} ids; their vectors could not be compared",
                    root.path().join("router_config.json").display()
                )));
            }
            // The id names what makes a document's vector: the document route's model, its
            // pooling, length and precision, and `max_active_dims` (the query side is not
            // stored).
            let id = match (
                &routes[layout.by_role[1]],
                &layout.routes[layout.by_role[1]],
            ) {
                (Loaded::Mlm(r), Route::Mlm { path, .. }) => {
                    let extra = format!(
                        "{:?} {} {} {:?}",
                        r.pooling(),
                        r.max_length(),
                        options.precision.as_str(),
                        layout.max_active_dims
                    );
                    crate::embed::builder::model_id(
                        "sparse",
                        &root.path().join(path),
                        &[extra.as_bytes()],
                    )
                }
                _ => None,
            };
            Ok(SparseEncoder {
                routes,
                by_role: layout.by_role,
                max_active_dims: layout.max_active_dims,
                pool: options.thread_pool("sparse")?,
                id,
            })
        }

        fn route(&self, role: Role) -> &Loaded {
            &self.routes[self.by_role[role_index(role)]]
        }

        /// Encodes `texts` as `role`: one [`SparseVector`] per text, in input order.
        ///
        /// On a BGE-M3 folder, see the type's documentation (texts are not trimmed there).
        /// Otherwise each text is trimmed. On an MLM route (a document, or a query of a model
        /// without an inference-free query side) it is tokenized `[CLS] text [SEP]`, truncated to
        /// [`max_length`](Self::max_length) tokens, encoded and pooled (texts run in
        /// length-sorted packed batches; a text's vector does not depend on the others). On a
        /// `SparseStaticEmbedding` route it is tokenized without special tokens and each
        /// distinct id gets the table's weight. Then, with `max_active_dims`, only the largest
        /// values stay. An empty text gives the vector of `[CLS] [SEP]` on an MLM route and an
        /// empty vector on a static one.
        pub fn encode(&self, texts: &[&str], role: Role) -> Result<Vec<SparseVector>> {
            let mut out = self.pool.install(|| self.route(role).encode(texts))?;
            if let Some(k) = self.max_active_dims {
                out.iter_mut().for_each(|v| v.keep_largest(k));
            }
            Ok(out)
        }

        /// Encodes one text as `role`.
        pub fn encode_one(&self, text: &str, role: Role) -> Result<SparseVector> {
            let mut v = self.encode(&[text], role)?;
            v.pop()
                .ok_or_else(|| Error::model("the sparse encoder returned no vector for a text"))
        }

        /// An id of what makes a document's vector (`sparse-` and a hash of the document
        /// route's model files, pooling, `max_length`, precision and `max_active_dims`; for
        /// BGE-M3, of the encoder's files, the sparse head's weights, `max_length` and
        /// precision), so that stored vectors of one model are never read as another's; `None`
        /// when a file cannot be read or the document side is a token-weight table.
        pub fn id(&self) -> Option<String> {
            self.id.clone()
        }

        /// The vocabulary size: every index of a vector is below it.
        pub fn vocab_size(&self) -> usize {
            self.route(Role::Document).vocab()
        }

        /// `max_active_dims` of `config_sentence_transformers.json`: the most non-zero values
        /// a vector keeps (`None`: all).
        pub fn max_active_dims(&self) -> Option<usize> {
            self.max_active_dims
        }

        /// The longest input in tokens for `role` (special tokens included on an MLM route).
        pub fn max_length(&self, role: Role) -> usize {
            match self.route(role) {
                Loaded::Static(r) => r.max_length(),
                Loaded::Mlm(r) => r.max_length(),
                Loaded::M3(r) => r.max_length(),
            }
        }

        /// Whether texts of `role` go through a transformer (`false`: the inference-free
        /// token-weight table).
        pub fn runs_model(&self, role: Role) -> bool {
            matches!(self.route(role), Loaded::Mlm(_) | Loaded::M3(_))
        }

        /// The pooling strategy of `role`'s route (`None` on a static route; `Max` for
        /// BGE-M3, whose weight of an id is the largest over its tokens).
        pub fn pooling(&self, role: Role) -> Option<SpladeStrategy> {
            match self.route(role) {
                Loaded::Static(_) => None,
                Loaded::Mlm(r) => Some(r.pooling().strategy),
                Loaded::M3(_) => Some(SpladeStrategy::Max),
            }
        }

        /// Whether this is BGE-M3's sparse head (`sparse_linear`) over its encoder.
        pub fn is_bge_m3(&self) -> bool {
            matches!(self.route(Role::Document), Loaded::M3(_))
        }

        /// The token ids the model sees for `text` as `role`.
        pub fn token_ids(&self, text: &str, role: Role) -> Result<Vec<u32>> {
            match self.route(role) {
                Loaded::Static(r) => r.token_ids(text),
                Loaded::Mlm(r) => r.token_ids(text),
                Loaded::M3(r) => r.token_ids(text),
            }
        }
    }

    impl std::fmt::Debug for SparseEncoder {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("SparseEncoder")
                .field("vocab_size", &self.vocab_size())
                .field("query_runs_model", &self.runs_model(Role::Query))
                .field("max_active_dims", &self.max_active_dims)
                .field("threads", &self.pool.threads())
                .finish()
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn is_send_and_sync() {
            fn check<T: Send + Sync>() {}
            check::<SparseEncoder>();
        }

        #[test]
        fn refuses_bad_options_and_missing_directories() {
            let b = SparseEncoder::builder(".").options(ModelOptions::default().threads(0));
            assert!(matches!(b.build(), Err(Error::Config(_))));
            let e = SparseEncoder::from_dir("does/not/exist").unwrap_err();
            assert!(e.to_string().contains("does/not/exist"), "{e}");
        }
    }
}
