//! What a ColBERT model directory says about its texts and its projection, in either of the
//! two layouts models are published in:
//!
//! - PyLate's (sentence-transformers files; answerai-colbert-small-v1, GTE-ModernColBERT-v1,
//!   mxbai-edge-colbert): `modules.json` lists the `Transformer` and one or more PyLate
//!   `Dense` modules; `config_sentence_transformers.json` holds `query_prefix`,
//!   `document_prefix` (tokens of the vocabulary), `query_length`, `document_length`,
//!   `attend_to_expansion_tokens`, `skiplist_words` and `do_query_expansion`;
//! - Stanford's (colbert-ir/colbertv2.0): a BERT checkpoint whose `model.safetensors` holds the
//!   projection `linear.weight` beside `bert.*`, and `artifact.metadata` with `query_token_id`,
//!   `doc_token_id`, `query_maxlen`, `doc_maxlen` and `attend_to_mask_tokens` (read the way
//!   PyLate converts such a folder: the skiplist is always the punctuation);
//! - BAAI/bge-m3's (`embed/bge_m3.rs`): an XLM-R encoder and the `colbert_linear` head
//!   (`colbert_linear.safetensors`, converted from the published `.pt`), read as FlagEmbedding
//!   1.4.0 encodes: no prefix, no query expansion, no skiplist, texts not stripped, the first
//!   token's (`<s>`) vector dropped, queries and documents cut to 512 tokens.
//!
//! Anything the crate cannot reproduce (another module, a residual or non-linear projection, a
//! prefix that is not one token, a similarity other than MaxSim, a head that is not
//! `Linear(hidden, dim)`) is refused naming the file and the key.

use std::collections::HashSet;
use std::path::Path;

use serde_json::{Map, Value};
use tokenizers::Tokenizer;

use crate::embed::bge_m3::{self, COLBERT_HEAD, DEFAULT_MAX_LENGTH};
use crate::embed::layout::{read_dense, DenseLayer};
use crate::models::layers::config::{bad, count, flag_or, object, string};
use crate::models::layers::weights::Weights;
use crate::models::ModelDir;
use crate::{Error, Result};

/// PyLate's default skiplist: every character of Python's `string.punctuation`.
pub(crate) const PUNCTUATION: &str = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

/// Stanford ColBERT's metadata file.
const STANFORD_FILE: &str = "artifact.metadata";

/// PyLate's settings file (sentence-transformers' name).
const ST_CONFIG_FILE: &str = "config_sentence_transformers.json";

/// The projection from the encoder's states to the token vectors.
#[derive(Debug, Clone)]
pub(crate) enum Projection {
    /// PyLate's Dense modules, in order.
    Dense(Vec<DenseLayer>),
    /// Stanford's `linear.weight` (`(dim, hidden)`, no bias).
    Linear { weight: Vec<f32>, hidden: usize },
}

impl Projection {
    /// The projected vectors of `states`, rows of the encoder's width (row-major), in one
    /// matrix product per layer on the calling thread.
    pub fn apply_rows(&self, states: Vec<f32>) -> Vec<f32> {
        match self {
            Projection::Dense(layers) => {
                layers.iter().fold(states, |x, layer| layer.apply_rows(&x))
            }
            Projection::Linear { weight, hidden } => {
                let dim = weight.len() / (*hidden).max(1);
                crate::embed::layout::project_rows(&states, weight, (dim, *hidden))
            }
        }
    }

    /// The width of the token vectors.
    pub fn dim(&self, hidden: usize) -> usize {
        match self {
            Projection::Dense(layers) => layers.last().map_or(hidden, |l| l.outputs),
            Projection::Linear { weight, hidden } => weight.len() / hidden,
        }
    }
}

/// A ColBERT model's text rules and projection.
#[derive(Debug, Clone)]
pub(crate) struct ColbertLayout {
    /// `pylate`, `stanford` or `bge-m3`.
    pub kind: &'static str,
    /// The token put after `[CLS]` of a query, and its id (`None`: none).
    pub query_prefix: Option<(String, u32)>,
    /// The token put after `[CLS]` of a document, and its id (`None`: none).
    pub document_prefix: Option<(String, u32)>,
    /// Whether texts are stripped of leading and trailing whitespace first (PyLate's rule;
    /// FlagEmbedding does not).
    pub strip: bool,
    /// Whether the first token's (`[CLS]`'s) vector is dropped (FlagEmbedding's BGE-M3).
    pub skip_first: bool,
    /// Tokens of a query, prefix and expansion included.
    pub query_length: usize,
    /// The most tokens of a document, prefix included.
    pub document_length: usize,
    /// Whether queries are padded to `query_length` with `[MASK]` (query expansion).
    pub query_expansion: bool,
    /// Whether the expansion tokens are keys too (else they only attend).
    pub attend_to_expansion: bool,
    /// The `[MASK]` id the expansion tokens carry.
    pub mask_id: u32,
    /// Token ids left out of a document's vectors.
    pub skiplist: HashSet<u32>,
    pub projection: Projection,
}

impl ColbertLayout {
    /// Reads the layout of `dir` (BGE-M3's when it has either BGE-M3 head, else PyLate's
    /// when it has `modules.json`, Stanford's when it has `artifact.metadata`), whose encoder
    /// has `hidden`-wide states and `max_positions` positions; `tokenizer` turns the prefixes
    /// and skiplist words into ids.
    pub fn read(
        dir: &ModelDir,
        tokenizer: &Tokenizer,
        hidden: usize,
        max_positions: usize,
    ) -> Result<Self> {
        let mut layout = if bge_m3::is_bge_m3_dir(dir.path()) {
            Self::read_bge_m3(dir, hidden, max_positions)?
        } else if dir.path().join("modules.json").is_file() {
            Self::read_pylate(dir, tokenizer, hidden)?
        } else if dir.path().join(STANFORD_FILE).is_file() {
            Self::read_stanford(dir, tokenizer, hidden)?
        } else {
            return Err(Error::model(format!(
                "{}: not a ColBERT model (neither PyLate's modules.json and {ST_CONFIG_FILE} \
                 nor Stanford's {STANFORD_FILE})",
                dir.path().display()
            )));
        };
        for (name, n) in [
            ("query_length", layout.query_length),
            ("document_length", layout.document_length),
        ] {
            if !(3..=max_positions).contains(&n) {
                return Err(Error::model(format!(
                    "{}: {name} {n} must be between 3 and the encoder's {max_positions} \
                     positions",
                    dir.path().display()
                )));
            }
        }
        if layout.query_expansion {
            layout.mask_id = mask_id(dir, tokenizer)?;
        }
        Ok(layout)
    }

    /// BGE-M3's layout: its `colbert_linear` head over the encoder's states.
    fn read_bge_m3(dir: &ModelDir, hidden: usize, max_positions: usize) -> Result<Self> {
        let head = bge_m3::read_head(dir, COLBERT_HEAD, hidden, None)?;
        let length = DEFAULT_MAX_LENGTH.min(max_positions);
        Ok(ColbertLayout {
            kind: "bge-m3",
            query_prefix: None,
            document_prefix: None,
            strip: false,
            skip_first: true,
            query_length: length,
            document_length: length,
            query_expansion: false,
            attend_to_expansion: false,
            mask_id: 0,
            skiplist: HashSet::new(),
            projection: Projection::Dense(vec![head]),
        })
    }

    fn read_pylate(dir: &ModelDir, tokenizer: &Tokenizer, hidden: usize) -> Result<Self> {
        let modules_file = dir.path().join("modules.json");
        let Value::Array(modules) = dir.json("modules.json")? else {
            return Err(Error::model(format!(
                "{}: expected a list of modules",
                modules_file.display()
            )));
        };
        let mut dense = Vec::new();
        let mut width = hidden;
        for (i, module) in modules.into_iter().enumerate() {
            let module = object(module, &modules_file)?;
            let key = format!("[{i}].type");
            let kind = string(&module, "type", &modules_file)?.unwrap_or("");
            let path = string(&module, "path", &modules_file)?.unwrap_or("");
            match (i, kind.rsplit('.').next().unwrap_or(kind)) {
                (0, "Transformer") if path.is_empty() => {}
                (_, "Dense") if i > 0 => {
                    let layer = read_dense(dir, path, width)?;
                    width = layer.outputs;
                    dense.push(layer);
                }
                _ => {
                    return Err(bad(
                        &modules_file,
                        &key,
                        format!(
                            "{kind:?} at {path:?} is not supported in a ColBERT model (the \
                             Transformer at \"\", then PyLate Dense modules)"
                        ),
                    ))
                }
            }
        }
        let file = dir.path().join(ST_CONFIG_FILE);
        let obj = object(dir.json(ST_CONFIG_FILE)?, &file)?;
        if let Some(sim) = string(&obj, "similarity_fn_name", &file)? {
            if sim != "MaxSim" {
                return Err(bad(
                    &file,
                    "similarity_fn_name",
                    format!("{sim:?} is not MaxSim"),
                ));
            }
        }
        let need = |key: &str| -> Result<usize> {
            count(&obj, key, &file)?.ok_or_else(|| bad(&file, key, "missing"))
        };
        let prefix = |key: &str| -> Result<(String, u32)> {
            let text = string(&obj, key, &file)?.ok_or_else(|| bad(&file, key, "missing"))?;
            prefix_id(tokenizer, text).map_err(|what| bad(&file, key, what))
        };
        let skiplist = match obj.get("skiplist_words") {
            None | Some(Value::Null) => words_to_ids(tokenizer, &punctuation()),
            Some(Value::Array(words)) => {
                let words = words
                    .iter()
                    .map(|w| w.as_str().map(str::to_string))
                    .collect::<Option<Vec<String>>>()
                    .ok_or_else(|| bad(&file, "skiplist_words", "expected a list of strings"))?;
                words_to_ids(tokenizer, &words)
            }
            Some(_) => return Err(bad(&file, "skiplist_words", "expected a list of strings")),
        };
        Ok(ColbertLayout {
            kind: "pylate",
            query_prefix: Some(prefix("query_prefix")?),
            document_prefix: Some(prefix("document_prefix")?),
            strip: true,
            skip_first: false,
            query_length: need("query_length")?,
            document_length: need("document_length")?,
            query_expansion: flag_or(&obj, "do_query_expansion", true, &file)?,
            attend_to_expansion: flag_or(&obj, "attend_to_expansion_tokens", false, &file)?,
            mask_id: 0,
            skiplist,
            projection: Projection::Dense(dense),
        })
    }

    fn read_stanford(dir: &ModelDir, tokenizer: &Tokenizer, hidden: usize) -> Result<Self> {
        let file = dir.path().join(STANFORD_FILE);
        let obj: Map<String, Value> = object(dir.json(STANFORD_FILE)?, &file)?;
        let need = |key: &str| -> Result<usize> {
            count(&obj, key, &file)?.ok_or_else(|| bad(&file, key, "missing"))
        };
        let marker = |key: &str, default: &str| -> Result<(String, u32)> {
            let text = string(&obj, key, &file)?.unwrap_or(default);
            prefix_id(tokenizer, text).map_err(|what| bad(&file, key, what))
        };
        if let Some(sim) = string(&obj, "similarity", &file)? {
            if sim != "cosine" {
                return Err(bad(
                    &file,
                    "similarity",
                    format!("{sim:?} is not supported (cosine: MaxSim over normalized vectors)"),
                ));
            }
        }
        let dim = need("dim")?;
        let weights = Weights::open(dir.path())?;
        let weight = weights.f32("linear.weight", &[dim, hidden]).map_err(|e| {
            Error::model_caused(
                format!(
                    "{}: a Stanford ColBERT checkpoint needs linear.weight [{dim}, {hidden}] \
                     ({STANFORD_FILE} dim {dim})",
                    dir.path().display()
                ),
                e,
            )
        })?;
        Ok(ColbertLayout {
            kind: "stanford",
            query_prefix: Some(marker("query_token_id", "[unused0]")?),
            document_prefix: Some(marker("doc_token_id", "[unused1]")?),
            strip: true,
            skip_first: false,
            query_length: need("query_maxlen")?,
            document_length: need("doc_maxlen")?,
            query_expansion: true,
            attend_to_expansion: flag_or(&obj, "attend_to_mask_tokens", false, &file)?,
            mask_id: 0,
            skiplist: words_to_ids(tokenizer, &punctuation()),
            projection: Projection::Linear { weight, hidden },
        })
    }

    /// A description of the settings that change the vectors, for the encoder's id.
    pub fn describe(&self) -> String {
        let digests: Vec<&str> = match &self.projection {
            Projection::Dense(layers) => layers.iter().map(|l| l.digest.as_str()).collect(),
            Projection::Linear { .. } => vec!["linear"],
        };
        let mut skip: Vec<u32> = self.skiplist.iter().copied().collect();
        skip.sort_unstable();
        // A missing prefix is `-` (the ids of the layouts with prefixes read as they did).
        let id = |p: &Option<(String, u32)>| {
            p.as_ref()
                .map_or_else(|| "-".to_string(), |(_, id)| id.to_string())
        };
        format!(
            "{}|q{}:{}|d{}:{}|x{}{}|{skip:?}|{}",
            self.kind,
            id(&self.query_prefix),
            self.query_length,
            id(&self.document_prefix),
            self.document_length,
            self.query_expansion,
            self.attend_to_expansion,
            digests.join(",")
        )
    }
}

/// The id of a prefix, which must be one token of the vocabulary (PyLate adds its prefixes as
/// tokens; `"[Q] "` with its space is one).
fn prefix_id(tokenizer: &Tokenizer, text: &str) -> std::result::Result<(String, u32), String> {
    match tokenizer.token_to_id(text) {
        Some(id) => Ok((text.to_string(), id)),
        None => Err(format!(
            "{text:?} is not a token of tokenizer.json (a ColBERT prefix is one token)"
        )),
    }
}

fn punctuation() -> Vec<String> {
    PUNCTUATION.chars().map(String::from).collect()
}

/// The ids of skiplist words as PyLate computes them (`convert_tokens_to_ids`): a word that is
/// not a token stands for the unknown token, as it does there.
fn words_to_ids(tokenizer: &Tokenizer, words: &[String]) -> HashSet<u32> {
    let unk = unknown_token(tokenizer);
    words
        .iter()
        .filter_map(|w| {
            tokenizer.token_to_id(w).or_else(|| {
                tracing::warn!(word = %w, "ColBERT skiplist word is not a token: it skips the unknown token");
                unk
            })
        })
        .collect()
}

/// The unknown token's id, when the model has one.
fn unknown_token(tokenizer: &Tokenizer) -> Option<u32> {
    ["[UNK]", "<unk>"]
        .iter()
        .find_map(|t| tokenizer.token_to_id(t))
}

/// The `[MASK]` id: `mask_token` of `tokenizer_config.json` when it names one, else `[MASK]`
/// or `<mask>`.
fn mask_id(dir: &ModelDir, tokenizer: &Tokenizer) -> Result<u32> {
    let configured =
        dir.optional_json("tokenizer_config.json")?
            .and_then(|v| match v.get("mask_token") {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Object(o)) => {
                    o.get("content").and_then(|c| c.as_str()).map(String::from)
                }
                _ => None,
            });
    let id = configured
        .iter()
        .map(String::as_str)
        .chain(["[MASK]", "<mask>"])
        .find_map(|t| tokenizer.token_to_id(t));
    id.ok_or_else(|| {
        Error::model(format!(
            "{}: no mask token (ColBERT pads queries with [MASK])",
            Path::new(dir.path()).join("tokenizer.json").display()
        ))
    })
}
