//! BERT-family sentence embeddings (sentence-transformers bi-encoders such as all-MiniLM-L6-v2,
//! bge-small-en-v1.5, e5-small-v2, and on XLM-RoBERTa multilingual-e5 and bge-m3's dense
//! vector) on the packed encoder, with the pooling, projection,
//! normalization and prompts their directory declares (see `layout`).

use std::path::Path;

use super::builder::EmbedderBuilder;
use super::encoder::{config_path, encoder_embedder, EncoderEmbedder, EncoderSpec};
use super::{Embedder, Role};
use crate::models::bert::encoder::{Encoder, EncoderConfig, EncoderWeights, Output};
use crate::models::engine::{EncoderFamily, PackedEncoder};
use crate::models::layers::encoder::single_texts;
use crate::models::{ModelDir, Precision};
use crate::{Error, Result};

/// Default [`ModelOptions::token_budget`](crate::models::ModelOptions::token_budget) (texts x longest text; no padding is computed).
pub const DEFAULT_TOKEN_BUDGET: usize = 8192;

/// Default [`ModelOptions::max_batch_size`](crate::models::ModelOptions::max_batch_size).
pub const DEFAULT_MAX_BATCH_SIZE: usize = 128;

/// A BERT bi-encoder loaded from a local sentence-transformers (or plain transformers)
/// directory.
///
/// The directory holds `config.json` (a BERT config), `tokenizer.json` and
/// `model.safetensors` (memory-mapped while loading), and, for a sentence-transformers model:
/// - `modules.json`: Transformer, Pooling, then any Dense and Normalize modules, in order;
/// - `1_Pooling/config.json`: pooling modes `cls`, `mean`, `max`, `mean_sqrt_len_tokens`,
///   `lasttoken` (several are concatenated, as sentence-transformers does), and
///   `include_prompt`;
/// - a Dense module's `config.json` (`in_features`, `out_features`, `bias`,
///   `activation_function` Identity or Tanh) and `model.safetensors`;
/// - `sentence_bert_config.json`: `max_seq_length`, `do_lower_case`;
/// - `config_sentence_transformers.json`: `prompts` (the query prompt is `prompts.query`, the
///   document prompt `prompts.document`, `passage` or `corpus`, either falling back to
///   `default_prompt_name`) and `similarity_fn_name`.
///
/// Without `modules.json` it does what sentence-transformers does with a plain transformers
/// directory: mean pooling, no normalization, no prompts, `max_seq_length` the smaller of
/// `max_position_embeddings` and `model_max_length` in `tokenizer_config.json`. Anything it
/// cannot reproduce (another module, pooling mode or activation, a similarity that does not
/// rank as cosine) is refused at load with an [`Error::Model`] naming the file and the key.
///
/// Each text is prefixed with its role's prompt ([`Role`]; builder methods override the
/// prompts), lower-cased if the model says so, tokenized as `[CLS] text [SEP]` and
/// truncated on the right to `max_seq_length` tokens (the truncation and padding baked into
/// `tokenizer.json` are ignored, as sentence-transformers does), run through the encoder,
/// pooled over its real tokens (leaving the prompt's tokens out when `include_prompt` is
/// false), then projected and normalized as the modules say. Texts are sorted by length and
/// grouped into batches under a token budget; each batch runs *packed* (the texts' tokens
/// concatenated, attention within each text), so no compute goes to padding. Rows come back
/// in input order.
///
/// One instance can be shared (`Arc`) and called from many threads at once. With
/// [`ModelOptions::threads`](crate::models::ModelOptions::threads) the work runs in a dedicated thread pool of that size;
/// otherwise in the caller's rayon pool (the global one by default).
///
/// ```no_run
/// use rerank::models::ModelOptions;
/// use rerank::{BertEmbedder, Embedder};
/// let embedder = BertEmbedder::builder("models/all-MiniLM-L6-v2")
///     .options(ModelOptions::default().threads(4))
///     .build()?;
/// let m = embedder.embed(&["hello world", "BM25 is a ranking function"])?;
/// assert_eq!(m.shape(), &[2, 384]);
/// let q = embedder.embed_query("what ranks documents?")?;
/// assert_eq!(q.len(), 384);
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct BertEmbedder(EncoderEmbedder);

encoder_embedder!(BertEmbedder, BertEmbedderBuilder, "bert", read);

/// The BERT-family encoder (`bert`, `xlm-roberta`, `roberta`, `camembert`) of `model_dir`, whose parsed
/// `config.json` is `value`: its shape, and its native loader in `precision`.
pub(super) fn read(
    model_dir: &ModelDir,
    value: &serde_json::Value,
    precision: Precision,
) -> Result<(EncoderSpec, impl FnOnce(&ModelDir) -> Result<Encoder>)> {
    let config_path = config_path(model_dir);
    let family = Family::of(value, &config_path)?;
    let config = EncoderConfig::from_value(value, &config_path, family.roberta_positions())?;
    let spec = EncoderSpec {
        hidden: config.hidden,
        max_positions: config.max_length(),
        vocab: config.vocab,
        family: match family {
            Family::Bert => EncoderFamily::Bert,
            Family::Roberta => EncoderFamily::Roberta,
        },
        id_prefix: family.id_prefix(),
        tasks: None,
    };
    Ok((spec, move |dir: &ModelDir| {
        let weights = EncoderWeights::open(dir, &[family.prefix()])?;
        Encoder::load(&weights, config, precision)
    }))
}

impl PackedEncoder for Encoder {
    fn hidden(&self) -> usize {
        self.config().hidden
    }

    /// One token type (0) per token: the embedders encode single texts.
    fn encode(&self, rows: &[&[u32]], output: Output) -> Result<Vec<f32>> {
        single_texts(rows, |seqs| self.forward(seqs, output))
    }

    fn encode_keys(&self, rows: &[&[u32]], keys: &[usize], output: Output) -> Result<Vec<f32>> {
        single_texts(rows, |seqs| {
            self.forward_attending(seqs, Some(keys), output)
        })
    }
}

/// The BERT-family encoders the embedder runs, told apart by `model_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    /// `bert` (all-MiniLM, bge-*-en, e5-*-v2, arctic, mxbai-embed).
    Bert,
    /// `xlm-roberta` (multilingual-e5, bge-m3), `roberta` (all-distilroberta-v1) and
    /// `camembert` (sentence-camembert): BERT's layers with positions numbered from
    /// `pad_token_id + 1` and one token type.
    Roberta,
}

impl Family {
    /// The family `config.json` names (`model_type`; a config without one is read as BERT).
    fn of(config: &serde_json::Value, file: &Path) -> Result<Self> {
        match config.get("model_type").and_then(|v| v.as_str()) {
            None | Some("bert") => Ok(Family::Bert),
            Some("xlm-roberta" | "roberta" | "camembert") => Ok(Family::Roberta),
            Some(other) => Err(Error::model(format!(
                "{}: unsupported model_type {other:?}; BertEmbedder loads bert, xlm-roberta, \
                 roberta and camembert encoders (load_embedder picks the loader for the \
                 others)",
                file.display()
            ))),
        }
    }

    /// Whether positions start after the padding id (RoBERTa's numbering).
    fn roberta_positions(self) -> bool {
        self == Family::Roberta
    }

    /// The prefix of the encoder's tensors in a checkpoint with a head (a bare encoder has
    /// none).
    fn prefix(self) -> &'static str {
        match self {
            Family::Bert => "bert",
            Family::Roberta => "roberta",
        }
    }

    /// The prefix of [`Embedder::id`].
    fn id_prefix(self) -> &'static str {
        match self {
            Family::Bert => "bert",
            Family::Roberta => "xlmr",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{plan_batches, ModelOptions};

    #[test]
    fn batches_respect_budget_and_cover_every_index_once() {
        let lens = [5usize, 1, 9, 9, 3, 7, 2, 20, 4];
        let batches: Vec<Vec<usize>> = plan_batches(&lens, 18, 3)
            .into_iter()
            .map(|b| b.indices)
            .collect();
        // longest first: 20 alone (over budget), then 9+9 (2x9 = 18), 7+5 (3x7 = 21 > 18),
        // 4+3+2 (3x4 = 12, then max_batch), 1
        assert_eq!(
            batches,
            vec![vec![7], vec![2, 3], vec![5, 0], vec![8, 4, 6], vec![1]]
        );
        let mut seen: Vec<usize> = batches.concat();
        seen.sort_unstable();
        assert_eq!(seen, (0..lens.len()).collect::<Vec<_>>());
        for b in &batches {
            let longest = b.iter().map(|&i| lens[i]).max().unwrap();
            assert!(b.len() == 1 || b.len() * longest <= 18);
            assert!(b.len() <= 3);
        }
    }

    #[test]
    fn no_batches_for_no_input() {
        assert!(plan_batches(&[], 10, 10).is_empty());
    }

    #[test]
    fn missing_directory_and_files_are_named() {
        let e = BertEmbedder::from_dir("does/not/exist").unwrap_err();
        assert!(matches!(e, Error::Model { .. }));
        assert!(e.to_string().contains("does/not/exist"), "{e}");
        let dir = std::env::temp_dir().join(format!("rerank-bert-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = BertEmbedder::from_dir(&dir).unwrap_err();
        assert!(e.to_string().contains("config.json"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn builder_rejects_bad_options() {
        for b in [
            BertEmbedder::builder(".").options(ModelOptions::default().threads(0)),
            BertEmbedder::builder(".").options(ModelOptions::default().token_budget(0)),
            BertEmbedder::builder(".").options(ModelOptions::default().max_batch_size(0)),
            BertEmbedder::builder(".").options(ModelOptions::default().max_length(1)),
        ] {
            assert!(matches!(b.build(), Err(Error::Config(_))));
        }
    }

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<BertEmbedder>();
    }
}
