//! Encoders on candle, run on right-padded batches, as embedders' encoders ([`CandleEncoder`],
//! through `PackedEncoder`) and as cross-encoders ([`CandleClassifier`], with the heads
//! transformers puts on them) over the crate's candle ports: BERT / XLM-RoBERTa
//! (`bert::candle`), DeBERTa-v2 / v3 (`deberta::candle`) and ModernBERT (`modernbert::candle`).

use candle_core::{DType, IndexOp, Tensor, D};
use candle_nn::VarBuilder;
use serde_json::Value;

use super::{EncoderFamily as Family, PackedEncoder};
use crate::models::bert::candle::Bert;
use crate::models::bert::encoder::EncoderConfig;
use crate::models::config::{Architecture, ClassifierConfig};
use crate::models::deberta::candle::Deberta;
use crate::models::deberta::config::DebertaConfig;
use crate::models::dir::{ModelDir, CONFIG_FILE};
use crate::models::layers::batch::BatchSink;
use crate::models::layers::candle::{
    activate, candle_device, dtype, err, flat_f32, linear, pipeline, read_f32, upload, var_builder,
    HostBatch, Linear, Norm, Padded, Turns,
};
use crate::models::layers::dense::Output;
use crate::models::layers::encoder::{check_sequences, read_flash_layout, Sequence};
use crate::models::layers::head::PoolerAct;
use crate::models::layers::kernels::Act;
use crate::models::layers::weights::Weights;
use crate::models::modernbert::candle::ModernBert;
use crate::models::modernbert::config::{ClassifierPooling, ModernBertConfig};
use crate::models::pair::PairEncoding;
use crate::models::{token_count, Device, Precision};
use crate::{Error, Result};

/// The encoder modules, by family.
enum Body {
    /// BERT and XLM-RoBERTa.
    Bert(Box<Bert>),
    ModernBert(Box<ModernBert>),
    Deberta(Box<Deberta>),
}

/// An encoder on a candle device: token ids in, last hidden states out. `Send + Sync`.
pub(crate) struct CandleEncoder {
    body: Body,
    device: candle_core::Device,
    /// One call at a time on the device's queue (the classifier on this encoder takes the
    /// same turns).
    turns: Turns,
    pad: u32,
    /// The longest input the position table covers.
    max_len: usize,
    hidden: usize,
    /// The rows of the word embeddings and, for a model that reads token types, of their
    /// table: ids past them are refused on the host (a device would read out of bounds).
    vocab: usize,
    type_vocab: Option<usize>,
}

impl std::fmt::Debug for CandleEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CandleEncoder")
            .field("device", &self.device)
            .field("hidden", &self.hidden)
            .finish_non_exhaustive()
    }
}

impl CandleEncoder {
    /// Loads the encoder of `family` in `dir` (under `bert.` / `roberta.` / `model.` /
    /// `deberta.` in a checkpoint with a head, at the root in a bare one) on `device` in
    /// `precision`.
    pub fn load(
        dir: &ModelDir,
        family: Family,
        device: Device,
        precision: Precision,
    ) -> Result<Self> {
        Self::load_with_root(dir, family, device, precision).map(|(encoder, _)| encoder)
    }

    /// [`load`](Self::load), with every tensor of the checkpoint on the device under its own
    /// name (`model.` put before a bare ModernBERT's): where a classifier finds its head, so
    /// that the weights are read once.
    fn load_with_root(
        dir: &ModelDir,
        family: Family,
        device: Device,
        precision: Precision,
    ) -> Result<(Self, VarBuilder<'static>)> {
        let file = dir.path().join(CONFIG_FILE);
        let value = dir.config()?;
        let device = candle_device(device)?;
        let dtype = dtype(precision)?;
        let mut weights = Weights::open(dir.path())?;
        if matches!(family, Family::Bert | Family::Roberta) {
            read_flash_layout(&mut weights, dir)?;
        }
        let int =
            |key: &str, default: u64| value.get(key).and_then(Value::as_u64).unwrap_or(default);
        let hidden = int("hidden_size", 0) as usize;
        // Each family's configuration, read before the weights: the attention scale is folded
        // into the queries' weights as they are read.
        enum Config {
            Bert(EncoderConfig),
            ModernBert(ModernBertConfig),
            Deberta(DebertaConfig),
        }
        let config = match family {
            Family::Bert | Family::Roberta => {
                let cfg = EncoderConfig::from_value(&value, &file, family == Family::Roberta)?;
                if cfg.embedding != cfg.hidden {
                    return Err(Error::model(format!(
                        "{}: embedding_size {} differs from hidden_size {} (ELECTRA's \
                         projected embeddings): the candle engine does not run it; use the \
                         device cpu",
                        file.display(),
                        cfg.embedding,
                        cfg.hidden
                    )));
                }
                Config::Bert(cfg)
            }
            Family::ModernBert => Config::ModernBert(ModernBertConfig::from_value(&value, &file)?),
            Family::Deberta => Config::Deberta(DebertaConfig::from_value(&value, &file)?),
            Family::Gte | Family::Mpnet | Family::DistilBert | Family::Gemma3 | Family::T5 => {
                return Err(native_only(family, &file))
            }
        };
        let fold = match &config {
            Config::Bert(cfg) => Some(Bert::fold(cfg)),
            Config::Deberta(cfg) => Some(Deberta::fold(cfg)),
            Config::ModernBert(cfg) => Some(ModernBert::fold(cfg)),
        };
        // A bare ModernBERT (an embedder's) is read under the `model.` names of one with a head.
        let bare_modernbert =
            family == Family::ModernBert && !weights.has("model.embeddings.tok_embeddings.weight");
        let rename = |n: &str| match bare_modernbert {
            true => Some(format!("model.{n}")),
            false => Some(n.to_string()),
        };
        let vb = var_builder(&weights, dtype, &device, rename, fold)?;
        let pad = int("pad_token_id", 0) as u32;
        // A checkpoint with a task head keeps the encoder under `prefix.`; a bare one at its root.
        let under = |prefix: &str| match weights
            .has(&format!("{prefix}.embeddings.word_embeddings.weight"))
        {
            true => vb.pp(prefix),
            false => vb.clone(),
        };
        let (body, max_len, type_vocab) = match config {
            Config::Bert(cfg) => {
                let vb = under(if family == Family::Roberta {
                    "roberta"
                } else {
                    "bert"
                });
                let body = Body::Bert(Box::new(Bert::load(vb, &cfg)?));
                (body, cfg.max_length(), Some(cfg.type_vocab))
            }
            Config::ModernBert(cfg) => {
                let model = ModernBert::load(vb.clone(), &cfg)?;
                (Body::ModernBert(Box::new(model)), cfg.max_positions, None)
            }
            Config::Deberta(cfg) => {
                let model = Deberta::load(under("deberta"), &cfg)?;
                let types = (cfg.type_vocab > 0).then_some(cfg.type_vocab);
                (Body::Deberta(Box::new(model)), cfg.max_positions, types)
            }
        };
        let encoder = CandleEncoder {
            body,
            turns: Turns::on(&device),
            device,
            pad,
            max_len,
            hidden,
            vocab: int("vocab_size", 0) as usize,
            type_vocab,
        };
        Ok((encoder, vb))
    }

    /// The last hidden states `(rows, len, hidden)` of a batch uploaded from the host (its
    /// token types zeros when it has none): the forward pass queued on the device. With
    /// `first_only`, an encoder that can stop early (BERT, XLM-R) gives each row's first token
    /// only, `(rows, 1, hidden)`.
    fn states(&self, batch: &Padded, first_only: bool) -> Result<Tensor> {
        let states = match &self.body {
            Body::Bert(m) => m.forward(&batch.ids, batch.types.as_ref(), &batch.mask, first_only),
            Body::ModernBert(m) => m.forward(&batch.ids, &batch.mask),
            Body::Deberta(m) => m.forward(&batch.ids, batch.types.as_ref(), &batch.mask),
        };
        states.map_err(err("the encoder's forward pass"))
    }

    /// Queues `host`'s forward pass and the f32 copy of its `output` (every token's states,
    /// padding included, or each row's first): what [`read_f32`] reads back. `None` for a
    /// batch of no rows.
    fn launch(&self, host: HostBatch, output: Output) -> Result<Option<(Tensor, usize)>> {
        if host.rows() == 0 {
            return Ok(None);
        }
        let batch = host.upload(&self.device)?;
        let states = self.states(&batch, output == Output::FirstToken)?;
        let out = match output {
            Output::FirstToken => states.i((.., 0, ..)).and_then(|t| flat_f32(&t)),
            Output::AllTokens => flat_f32(&states),
        };
        Ok(Some((out.map_err(err("the encoder's output"))?, batch.len)))
    }

    /// [`Self::launch`]'s output on the host: the padded values and the padded length.
    fn read(launched: Option<(Tensor, usize)>) -> Result<(Vec<f32>, usize)> {
        match launched {
            Some((out, len)) => Ok((read_f32(&out)?, len)),
            None => Ok((Vec::new(), 0)),
        }
    }

    /// [`PackedEncoder::encode`]'s layout of the padded values `all` (rows of `len` tokens)
    /// read back for `rows`: the first tokens as they are, every token's states with each
    /// row's padding left out.
    fn unpad(&self, rows: &[&[u32]], all: Vec<f32>, len: usize, output: Output) -> Vec<f32> {
        let h = self.hidden;
        match output {
            Output::FirstToken => all,
            Output::AllTokens => {
                let mut out = Vec::with_capacity(rows.iter().map(|r| r.len()).sum::<usize>() * h);
                for (i, row) in rows.iter().enumerate() {
                    let start = i * len * h;
                    if let Some(states) = all.get(start..start + row.len() * h) {
                        out.extend_from_slice(states);
                    }
                }
                out
            }
        }
    }

    /// [`PackedEncoder::encode_keys`] of every batch through [`pipeline`], every token a key
    /// without `keys` (one key count per row of every batch, batch after batch).
    fn encode_pipelined(
        &self,
        batches: &[Vec<&[u32]>],
        keys: Option<&[usize]>,
        output: Output,
        sink: BatchSink<'_>,
    ) -> Result<()> {
        // Where each batch's key counts start in `keys`.
        let starts: Vec<usize> = batches
            .iter()
            .scan(0, |at, rows| {
                let start = *at;
                *at += rows.len();
                Some(start)
            })
            .collect();
        let indexed: Vec<(usize, &Vec<&[u32]>)> = starts.into_iter().zip(batches).collect();
        pipeline(
            &self.turns,
            &indexed,
            |(start, rows)| {
                let keys = keys.map(|k| k.get(*start..).unwrap_or_default());
                self.check(rows, None)?;
                Ok(HostBatch::new(rows, keys, None, self.pad))
            },
            |host| self.launch(host, output),
            Self::read,
            |n, (all, len)| sink(n, self.unpad(&batches[n], all, len, output)),
        )
    }

    /// Queues `host`'s forward pass and its rows' means, as flat f32; `None` for a batch of
    /// no rows.
    fn launch_means(&self, host: HostBatch, pool: MeanWeights) -> Result<Option<Tensor>> {
        if host.rows() == 0 {
            return Ok(None);
        }
        let (b, t) = (host.rows(), host.len);
        let batch = host.upload(&self.device)?;
        let states = self.states(&batch, false)?;
        let means = (|| {
            let weights = upload(pool.weights, (b, 1, t), &self.device)?;
            let counts = upload(pool.counts, (b, 1, 1), &self.device)?;
            let states = states.to_dtype(DType::F32)?.contiguous()?;
            weights
                .matmul(&states)?
                .broadcast_div(&counts)?
                .flatten_all()
        })();
        Ok(Some(means.map_err(err("mean pooling"))?))
    }

    /// Refuses on the host what would index past a table on the device: an empty row, a row
    /// longer than the positions, a token id outside the vocabulary, a token type outside
    /// its table (the CPU kernels' checks, `check_sequences`).
    fn check(&self, rows: &[&[u32]], types: Option<&[&[u32]]>) -> Result<()> {
        let zeros = vec![0u32; rows.iter().map(|r| r.len()).max().unwrap_or(0)];
        let seqs: Vec<Sequence<'_>> = rows
            .iter()
            .enumerate()
            .map(|(i, &ids)| Sequence {
                ids,
                types: types
                    .and_then(|t| t.get(i).copied())
                    .unwrap_or(&zeros[..ids.len()]),
            })
            .collect();
        check_sequences(&seqs, self.max_len, self.vocab, self.type_vocab)
    }
}

impl PackedEncoder for CandleEncoder {
    fn hidden(&self) -> usize {
        self.hidden
    }

    fn encode(&self, rows: &[&[u32]], output: Output) -> Result<Vec<f32>> {
        self.encode_one(rows, None, output)
    }

    fn encode_keys(&self, rows: &[&[u32]], keys: &[usize], output: Output) -> Result<Vec<f32>> {
        self.encode_one(rows, Some(keys), output)
    }

    fn encode_batches(
        &self,
        batches: &[Vec<&[u32]>],
        output: Output,
        sink: BatchSink<'_>,
    ) -> Result<()> {
        self.encode_pipelined(batches, None, output, sink)
    }

    /// Through [`pipeline`]: each batch's means taken on the device (a product of its states
    /// with each row's 0 / 1 weights, then a division by the count), so that one
    /// `hidden`-wide row per text comes back instead of every token's states.
    fn encode_mean_batches(
        &self,
        batches: &[Vec<&[u32]>],
        skip: usize,
        sink: BatchSink<'_>,
    ) -> Result<()> {
        pipeline(
            &self.turns,
            batches,
            |rows| {
                self.check(rows, None)?;
                let host = HostBatch::new(rows, None, None, self.pad);
                let pool = MeanWeights::new(rows, host.len, skip);
                Ok((host, pool))
            },
            |(host, pool)| self.launch_means(host, pool),
            |means| match means {
                Some(means) => read_f32(&means),
                None => Ok(Vec::new()),
            },
            sink,
        )
    }
}

/// What mean pooling needs of a padded batch on the host: each row's weights over the padded
/// length (1 for a token it pools, past the first `skip`; 0 for the rest and the padding)
/// and its count of pooled tokens, clamped ([`token_count`]).
struct MeanWeights {
    weights: Vec<f32>,
    counts: Vec<f32>,
}

impl MeanWeights {
    fn new(rows: &[&[u32]], len: usize, skip: usize) -> Self {
        let mut weights = vec![0.0f32; rows.len() * len];
        let mut counts = Vec::with_capacity(rows.len());
        for (row, w) in rows.iter().zip(weights.chunks_exact_mut(len.max(1))) {
            let first = skip.min(row.len());
            w[first..row.len()].fill(1.0);
            counts.push(token_count(row.len(), skip));
        }
        MeanWeights { weights, counts }
    }
}

impl CandleEncoder {
    /// [`PackedEncoder::encode_keys`] of one batch, every token a key without `keys`.
    fn encode_one(
        &self,
        rows: &[&[u32]],
        keys: Option<&[usize]>,
        output: Output,
    ) -> Result<Vec<f32>> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        let batch = [rows.to_vec()];
        self.encode_pipelined(&batch, keys, output, &mut |_, states| {
            out = states;
            Ok(())
        })?;
        Ok(out)
    }
}

/// The head on the encoder's states.
enum Head {
    /// BERT's pooler (`tanh(W1 h[0])`) then `classifier`; RoBERTa's `classifier.dense` then
    /// `classifier.out_proj`; DeBERTa's context pooler (`pooler.dense`, `pooler_hidden_act`)
    /// then `classifier`.
    FirstToken {
        dense: Linear,
        act: PoolerAct,
        out: Linear,
    },
    /// ModernBERT's: cls or masked-mean pooling, `head.dense`, the activation, `head.norm`,
    /// then `classifier`.
    ModernBert {
        mean: bool,
        dense: Linear,
        act: Act,
        norm: Norm,
        out: Linear,
    },
}

/// A sequence classifier (a cross-encoder's model) on a candle device. `Send + Sync`.
pub(crate) struct CandleClassifier {
    encoder: CandleEncoder,
    head: Head,
    config: ClassifierConfig,
    precision: Precision,
    vocab: usize,
}

impl std::fmt::Debug for CandleClassifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CandleClassifier")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl CandleClassifier {
    /// Loads the sequence classifier in `dir` on `device` in `precision`: the architectures
    /// of the CPU path (BERT, XLM-RoBERTa, RoBERTa, CamemBERT, ModernBERT, DeBERTa-v2/v3) but
    /// ELECTRA, DistilBERT and GTE, refused by name.
    pub fn load(dir: &ModelDir, device: Device, precision: Precision) -> Result<Self> {
        let file = dir.path().join(CONFIG_FILE);
        let value = dir.config()?;
        let config = ClassifierConfig::from_value(&value, &file)?;
        let labels = config.num_labels;
        let vocab = value.get("vocab_size").and_then(Value::as_u64).unwrap_or(0) as usize;
        let h = value
            .get("hidden_size")
            .and_then(Value::as_u64)
            .unwrap_or(0) as usize;
        let family = match &config.architecture {
            Architecture::BertForSequenceClassification => Family::Bert,
            Architecture::XlmRobertaForSequenceClassification
            | Architecture::RobertaForSequenceClassification
            | Architecture::CamembertForSequenceClassification => Family::Roberta,
            Architecture::ModernBertForSequenceClassification => Family::ModernBert,
            Architecture::DebertaV2ForSequenceClassification => Family::Deberta,
            Architecture::ElectraForSequenceClassification
            | Architecture::DistilBertForSequenceClassification
            | Architecture::NewForSequenceClassification
            | Architecture::GteForSequenceClassification => {
                return Err(Error::model(format!(
                    "{}: {} cross-encoders run on the crate's CPU kernels only (device cpu); \
                     the candle engine has no module for them",
                    file.display(),
                    config.architecture
                )))
            }
            other => {
                return Err(Error::model(format!(
                    "{}: unsupported architecture {other} for a cross-encoder on the candle \
                     engine",
                    file.display()
                )))
            }
        };
        let (encoder, vb) = CandleEncoder::load_with_root(dir, family, device, precision)?;
        let linear = |out: usize, name: &str, bias: bool| linear(&vb, h, out, bias, name);
        let head = match family {
            Family::Bert => Head::FirstToken {
                dense: linear(h, "bert.pooler.dense", true)?,
                act: PoolerAct::Tanh,
                out: linear(labels, "classifier", true)?,
            },
            Family::Roberta => Head::FirstToken {
                dense: linear(h, "classifier.dense", true)?,
                act: PoolerAct::Tanh,
                out: linear(labels, "classifier.out_proj", true)?,
            },
            Family::ModernBert => {
                let cfg = ModernBertConfig::from_value(&value, &file)?;
                let norm = Norm::load_maybe_bias(&vb, h, cfg.eps, "head.norm", cfg.norm_bias)?;
                Head::ModernBert {
                    mean: cfg.classifier_pooling == ClassifierPooling::Mean,
                    dense: linear(h, "head.dense", cfg.classifier_bias)?,
                    act: cfg.classifier_act,
                    norm,
                    out: linear(labels, "classifier", true)?,
                }
            }
            Family::Deberta => Head::FirstToken {
                dense: linear(h, "pooler.dense", true)?,
                act: DebertaConfig::from_value(&value, &file)?.pooler_act,
                out: linear(labels, "classifier", true)?,
            },
            Family::Gte | Family::Mpnet | Family::DistilBert | Family::Gemma3 | Family::T5 => {
                return Err(native_only(family, &file))
            }
        };
        Ok(CandleClassifier {
            encoder,
            head,
            config,
            precision,
            vocab,
        })
    }

    /// The facts read from `config.json`.
    pub fn config(&self) -> &ClassifierConfig {
        &self.config
    }

    /// The number format on the device.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// `vocab_size` from `config.json`.
    pub fn vocab_size(&self) -> usize {
        self.vocab
    }

    /// The longest input the position table covers.
    pub fn max_length(&self) -> usize {
        self.encoder.max_len
    }

    /// Logits, one row of `num_labels` per encoding, for the encodings run as one padded
    /// batch.
    pub fn logits(&self, encodings: &[&PairEncoding]) -> Result<Vec<Vec<f32>>> {
        let mut out = Vec::new();
        self.logits_batches(&[encodings.to_vec()], &mut |_, rows| {
            out = rows;
            Ok(())
        })?;
        Ok(out)
    }

    /// [`logits`](Self::logits) of every batch of `batches` through [`pipeline`] (the next
    /// batch padded and started on the device before a batch is read back), `sink(n, rows)`
    /// called with batch `n`'s rows, batches in order.
    pub fn logits_batches(
        &self,
        batches: &[Vec<&PairEncoding>],
        sink: &mut dyn FnMut(usize, Vec<Vec<f32>>) -> Result<()>,
    ) -> Result<()> {
        let labels = self.config.num_labels.max(1);
        pipeline(
            &self.encoder.turns,
            batches,
            |encodings| {
                let ids: Vec<&[u32]> = encodings.iter().map(|e| e.input_ids.as_slice()).collect();
                let types: Vec<&[u32]> = encodings
                    .iter()
                    .map(|e| e.token_type_ids.as_slice())
                    .collect();
                self.encoder.check(&ids, Some(&types))?;
                Ok(HostBatch::new(&ids, None, Some(&types), self.encoder.pad))
            },
            |host| self.launch(host),
            |logits| match logits {
                Some(logits) => read_f32(&logits),
                None => Ok(Vec::new()),
            },
            |n, values| {
                sink(
                    n,
                    values.chunks_exact(labels).map(<[f32]>::to_vec).collect(),
                )
            },
        )
    }

    /// Queues `host`'s forward pass and head: the logits `(rows x num_labels)` as flat f32;
    /// `None` for a batch of no rows.
    fn launch(&self, host: HostBatch) -> Result<Option<Tensor>> {
        if host.rows() == 0 {
            return Ok(None);
        }
        let batch = host.upload(&self.encoder.device)?;
        let first_only = matches!(self.head, Head::FirstToken { .. });
        let states = self.encoder.states(&batch, first_only)?;
        let logits = self
            .head
            .forward(&states, &batch.mask)
            .and_then(|l| flat_f32(&l))
            .map_err(err("the head"))?;
        Ok(Some(logits))
    }
}

impl Head {
    fn forward(&self, states: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Head::FirstToken { dense, act, out } => {
                let first = states.i((.., 0, ..))?.contiguous()?;
                let x = dense.forward(&first)?;
                let x = match act {
                    PoolerAct::Tanh => x.tanh()?,
                    PoolerAct::Act(act) => activate(&x, *act)?,
                };
                x.apply(out)
            }
            Head::ModernBert {
                mean,
                dense,
                act,
                norm,
                out,
            } => {
                let pooled = match mean {
                    false => states.i((.., 0, ..))?.contiguous()?,
                    true => {
                        let m = mask.to_dtype(states.dtype())?.unsqueeze(D::Minus1)?;
                        let sum = states.broadcast_mul(&m)?.sum(1)?;
                        sum.broadcast_div(&m.sum(1)?)?
                    }
                };
                let x = activate(&dense.forward(&pooled)?, *act)?;
                norm.forward(&x)?.apply(out)
            }
        }
    }
}

/// The error for a family the candle engine has no module for (GTE / NomicBERT, MPNet,
/// DistilBERT, Gemma3, T5): they run on the crate's CPU kernels only.
fn native_only(family: Family, file: &std::path::Path) -> Error {
    let what = match family {
        Family::Mpnet => "MPNet encoders run",
        Family::DistilBert => "DistilBERT encoders run",
        Family::Gemma3 => "Gemma3 encoders (EmbeddingGemma) run",
        Family::T5 => "T5 encoders run",
        _ => "GTE and NomicBERT encoders run",
    };
    Error::model(format!(
        "{}: {what} on the crate's CPU kernels only (device cpu); the candle engine has no \
         module for them",
        file.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st_bert_tiny() -> CandleEncoder {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = ModelDir::open(root.join("tests/fixtures/st_bert_tiny/plain")).unwrap();
        CandleEncoder::load(&dir, Family::Bert, Device::CandleCpu, Precision::F32).unwrap()
    }

    #[test]
    fn means_taken_on_the_device_are_the_means_of_the_states_it_gives_back() {
        let encoder = st_bert_tiny();
        let h = encoder.hidden();
        let rows: [&[u32]; 3] = [&[2, 5, 7, 9, 3], &[2, 6, 3], &[2, 3]];
        let states = encoder.encode(&rows, Output::AllTokens).unwrap();
        // No prompt, a prompt of two tokens, and one longer than every row (zeros).
        for skip in [0, 2, 9] {
            let mut means = Vec::new();
            let batches = [rows.to_vec()];
            encoder
                .encode_mean_batches(&batches, skip, &mut |_, m| {
                    means = m;
                    Ok(())
                })
                .unwrap();
            assert_eq!(means.len(), rows.len() * h);
            let mut start = 0;
            for (row, got) in rows.iter().zip(means.chunks_exact(h)) {
                let len = row.len();
                let want = crate::models::token_mean(&states[start * h..], len, skip, h);
                start += len;
                let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs());
                assert!(
                    err.fold(0.0, f32::max) < 1e-6,
                    "skip {skip}: {got:?} {want:?}"
                );
            }
        }
        let weights = MeanWeights::new(&rows, 5, 2);
        assert_eq!(
            weights.counts,
            [3.0, 1.0, crate::models::pooling::MEAN_POOL_MIN_COUNT]
        );
        assert_eq!(
            &weights.weights[..10],
            [0., 0., 1., 1., 1., 0., 0., 1., 0., 0.]
        );
    }

    #[test]
    fn what_would_index_past_a_table_is_refused_before_the_device_sees_it() {
        let encoder = st_bert_tiny();
        let (ok, long) = ([2u32, 5, 3], vec![5u32; 513]);
        let first = encoder.encode(&[&ok], Output::FirstToken).unwrap();
        assert_eq!(first.len(), 32);
        let refused = |rows: &[&[u32]]| encoder.encode(rows, Output::AllTokens).unwrap_err();
        // The vocabulary has 800 rows, the position table 512.
        assert!(
            matches!(refused(&[&ok, &[2, 800]]), Error::Model { message, .. } if message.contains("800"))
        );
        assert!(matches!(refused(&[&ok, &[]]), Error::InvalidInput(_)));
        assert!(matches!(refused(&[&long]), Error::InvalidInput(m) if m.contains("513")));
        // A batch of several: each batch is checked before it is built.
        let batches = [vec![&ok[..]], vec![&[2, 9999][..]]];
        let mut seen = 0;
        let run = encoder.encode_batches(&batches, Output::FirstToken, &mut |_, _| {
            seen += 1;
            Ok(())
        });
        assert!(run.is_err());
        assert!(seen <= 1);
    }
}
