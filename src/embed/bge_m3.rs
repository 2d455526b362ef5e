//! BAAI/bge-m3's two extra heads, shared by the sparse encoder (`sparse/m3.rs`) and the ColBERT
//! layout (`colbert/layout.rs`).
//!
//! The hub's folder is an XLM-RoBERTa encoder saved as a sentence-transformers dense model
//! (what [`load_embedder`](super::load_embedder) reads) plus two heads FlagEmbedding saves with
//! `torch.save(linear.state_dict())`: `sparse_linear.pt` (`Linear(hidden, 1)`: a token's lexical
//! weight) and `colbert_linear.pt` (`Linear(hidden, colbert_dim)`: its ColBERT vector). The crate
//! reads safetensors only: `scripts/convert_bge_m3_heads.py DIR` writes
//! `sparse_linear.safetensors` and `colbert_linear.safetensors` (tensors `weight`, `bias`) beside
//! them, and a folder with only the `.pt` files is refused with that command.
//!
//! The rules are FlagEmbedding 1.4.0's (`BGEM3FlagModel`, its `M3Embedder`): texts are
//! tokenized as `tokenizer.json` says (not stripped; FlagEmbedding runs on transformers 4.x,
//! which does not rebuild XLM-R's tokenizer as transformers 5 does) and cut to `max_length`
//! tokens (default 512, its `query_max_length` and `passage_max_length`).

use std::path::{Path, PathBuf};

use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use crate::embed::layout::DenseLayer;
use crate::models::layers::config::bad;
use crate::models::layers::weights::Weights;
use crate::models::{ModelDir, TOKENIZER_FILE};
use crate::{Error, Result};

/// The sparse head's file stem.
pub(crate) const SPARSE_HEAD: &str = "sparse_linear";
/// The ColBERT head's file stem.
pub(crate) const COLBERT_HEAD: &str = "colbert_linear";
/// FlagEmbedding's `query_max_length` and `passage_max_length`: the default length in tokens,
/// special tokens included (the encoder's positions when it has fewer).
pub(crate) const DEFAULT_MAX_LENGTH: usize = 512;

/// The tokens whose sparse weight FlagEmbedding drops: `special_tokens_map`'s `cls_token`,
/// `eos_token`, `pad_token` and `unk_token`, with XLM-R's names when the files name none.
const UNUSED_TOKENS: [(&str, &str); 4] = [
    ("cls_token", "<s>"),
    ("eos_token", "</s>"),
    ("pad_token", "<pad>"),
    ("unk_token", "<unk>"),
];

/// Whether `dir` holds BGE-M3's head `head` (its `.pt` as published, or the `.safetensors` the
/// conversion writes).
fn has_head(dir: &Path, head: &str) -> bool {
    ["pt", "safetensors"]
        .iter()
        .any(|ext| dir.join(format!("{head}.{ext}")).is_file())
}

/// Whether `dir` is a BGE-M3 folder: it has the sparse or the ColBERT head (`.pt` or
/// `.safetensors`). Such a folder is a dense embedder for
/// [`load_embedder`](crate::load_embedder) and the rerankers; its lexical weights come from
/// [`SparseEncoder`](crate::embed::SparseEncoder) and its token vectors from
/// [`ColbertEncoder`](crate::embed::ColbertEncoder), each refusing the folder, naming the
/// file, when its own head is missing.
pub fn is_bge_m3_dir(dir: impl AsRef<Path>) -> bool {
    let dir = dir.as_ref();
    has_head(dir, SPARSE_HEAD) || has_head(dir, COLBERT_HEAD)
}

/// Reads head `head` of `dir` from its safetensors file: a `Linear(hidden, outputs)` (`weight`
/// `(outputs, hidden)`, `bias` `(outputs,)`), `outputs` given (the sparse head's 1) or read from
/// the weight (the ColBERT head's `colbert_dim`). A folder with only the `.pt` file is refused
/// with the command that converts it; a head of another shape, or with other tensors, naming
/// the file and the tensor.
pub(crate) fn read_head(
    dir: &ModelDir,
    head: &str,
    hidden: usize,
    outputs: Option<usize>,
) -> Result<DenseLayer> {
    let file = dir.path().join(format!("{head}.safetensors"));
    if !file.is_file() {
        let pt = dir.path().join(format!("{head}.pt"));
        return Err(Error::model(match pt.is_file() {
            true => format!(
                "{}: the crate reads safetensors, not PyTorch files: run `python \
                 scripts/convert_bge_m3_heads.py {}` (it writes {head}.safetensors beside it)",
                pt.display(),
                dir.path().display()
            ),
            false => format!("{}: missing (BGE-M3's {head} head)", file.display()),
        }));
    }
    let weights = Weights::open_files(std::slice::from_ref(&file))?;
    if let Some(other) = weights.names().find(|n| !matches!(*n, "weight" | "bias")) {
        return Err(bad(
            &file,
            other,
            "not a tensor of a Linear layer (weight, bias): the head cannot be reproduced",
        ));
    }
    let shape = weights
        .shape("weight")
        .map_err(|e| Error::model_caused(format!("{}: key \"weight\"", file.display()), e))?
        .to_vec();
    let outputs = match (shape.as_slice(), outputs) {
        ([rows, cols], want) if *cols == hidden && want.is_none_or(|w| w == *rows) && *rows > 0 => {
            *rows
        }
        _ => {
            let want = match outputs {
                Some(n) => format!("[{n}, {hidden}]"),
                None => format!("[dim, {hidden}]"),
            };
            return Err(bad(
                &file,
                "weight",
                format!(
                    "shape {shape:?}, but the head must be {want} (the encoder's hidden size is \
                     {hidden})"
                ),
            ));
        }
    };
    let weight = weights.f32("weight", &[outputs, hidden])?;
    let bias = match weights.has("bias") {
        true => {
            let found = weights.shape("bias")?.to_vec();
            if found != [outputs] {
                return Err(bad(
                    &file,
                    "bias",
                    format!("shape {found:?}, but the weight has {outputs} rows"),
                ));
            }
            Some(weights.f32("bias", &[outputs])?)
        }
        false => None,
    };
    Ok(DenseLayer::linear(
        weight,
        bias,
        (outputs, hidden),
        digest(&file)?,
    ))
}

/// SHA-256 (hex, 16 bytes) of a file, for the encoders' ids.
fn digest(file: &Path) -> Result<String> {
    use sha2::{Digest, Sha256};
    let bytes = std::fs::read(file).map_err(|e| Error::io(file, e))?;
    let hash = Sha256::digest(&bytes);
    Ok(hash[..16].iter().map(|b| format!("{b:02x}")).collect())
}

/// `tokenizer.json` of `dir` as saved (FlagEmbedding's transformers 4.x reads it so), padding
/// off, and with `max_length` cutting texts to that many tokens on the right (the last `</s>`
/// kept); a tokenizer with more tokens than the encoder's `vocab` rows is refused.
pub(crate) fn tokenizer(
    dir: &ModelDir,
    vocab: usize,
    max_length: Option<usize>,
) -> Result<Tokenizer> {
    let path: PathBuf = dir.file(TOKENIZER_FILE)?;
    let mut tokenizer = Tokenizer::from_file(&path)
        .map_err(|e| Error::tokenizer(format!("{}: {e}", path.display())))?;
    let n = tokenizer.get_vocab_size(true);
    if n > vocab {
        return Err(Error::model(format!(
            "{}: {n} tokens, more than the encoder's vocab_size {vocab}",
            path.display()
        )));
    }
    tokenizer.with_padding(None);
    let Some(max_length) = max_length else {
        return Ok(tokenizer);
    };
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length,
            strategy: TruncationStrategy::LongestFirst,
            direction: TruncationDirection::Right,
            stride: 0,
        }))
        .map_err(|e| Error::tokenizer(format!("{}: {e}", path.display())))?;
    Ok(tokenizer)
}

/// The length texts are cut to: `requested`, or FlagEmbedding's 512 within the encoder's
/// `positions`; at least `min` (and at most `positions`) tokens.
pub(crate) fn max_length(requested: Option<usize>, positions: usize, min: usize) -> Result<usize> {
    let n = requested.unwrap_or(DEFAULT_MAX_LENGTH.min(positions));
    if n < min || n > positions {
        return Err(Error::Config(format!(
            "max_length {n} must be between {min} and the encoder's {positions} positions"
        )));
    }
    Ok(n)
}

/// The ids of the tokens FlagEmbedding gives no sparse weight (`cls_token`, `eos_token`,
/// `pad_token`, `unk_token` of `tokenizer_config.json` or `special_tokens_map.json`), sorted.
pub(crate) fn unused_tokens(dir: &ModelDir, tokenizer: &Tokenizer) -> Result<Vec<u32>> {
    let files = [
        dir.optional_json("tokenizer_config.json")?,
        dir.optional_json("special_tokens_map.json")?,
    ];
    let named = |key: &str| -> Option<String> {
        files.iter().flatten().find_map(|v| match v.get(key)? {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Object(o) => Some(o.get("content")?.as_str()?.to_string()),
            _ => None,
        })
    };
    let mut ids: Vec<u32> = UNUSED_TOKENS
        .iter()
        .filter_map(|(key, default)| {
            let token = named(key).unwrap_or_else(|| default.to_string());
            tokenizer.token_to_id(&token)
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}
