//! The engines a model runs on, behind one wrapper: the crate's own kernels on the CPU, or
//! candle on a device (feature `candle`). Nothing outside this module names candle's encoder:
//! a caller loads an [`EncoderEngine`] with the family's native loader, and the choice of
//! engine follows [`ModelOptions::device`](crate::models::ModelOptions::device).
//!
//! - [`PackedEncoder`]: token sequences in, last hidden states out (packed: no padding);
//! - [`EncoderEngine`]: a family's native encoder, or the same model through candle;
//! - [`EncoderFamily`]: the encoder families as `config.json` tells them apart;
//! - [`Classifier`] and [`load_classifier`]: a cross-encoder's sequence classifier, by
//!   architecture, on either engine;
//! - [`DecoderEngine`] (`decoder`): the Qwen3 / Qwen2 decoder on either engine;
//! - `candle`: candle's encoders and sequence classifiers for those families.

#[cfg(feature = "candle")]
pub(crate) mod candle;
mod decoder;

pub(crate) use decoder::DecoderEngine;

use crate::models::distilbert::classifier::DistilBertClassifier;
use crate::models::layers::batch::{run_in_groups, BatchSink};
use crate::models::layers::dense::Output;
pub(crate) use crate::models::layers::head::Classifier;
use crate::models::pair::PairEncoding;
use crate::models::{
    token_mean, Architecture, ClassifierConfig, DebertaClassifier, GteClassifier, ModelDir,
    ModelOptions, ModernBertClassifier, Precision, SequenceClassifier, CONFIG_FILE,
};
use crate::{Error, Result};

/// An encoder that runs token sequences packed (their tokens concatenated, attention within
/// each): what an embedder needs from its model.
pub(crate) trait PackedEncoder: Send + Sync {
    /// The width of the hidden states.
    fn hidden(&self) -> usize;

    /// The last hidden states of `rows` run as one packed batch, row-major with
    /// [`hidden`](Self::hidden) columns: one row per token (rows in order) for
    /// [`Output::AllTokens`], one per sequence for [`Output::FirstToken`].
    fn encode(&self, rows: &[&[u32]], output: Output) -> Result<Vec<f32>>;

    /// [`encode`](Self::encode) with row `i`'s tokens attending to its first `keys[i]` tokens
    /// only: the tokens past them are queries and never keys (ColBERT's query expansion
    /// tokens). An encoder that cannot leave keys out refuses a count short of its row.
    fn encode_keys(&self, rows: &[&[u32]], keys: &[usize], output: Output) -> Result<Vec<f32>> {
        if rows.len() != keys.len() || rows.iter().zip(keys).any(|(r, &k)| r.len() != k) {
            return Err(Error::model(
                "this encoder attends to every token of a text: tokens that are queries but \
                 not keys (ColBERT's query expansion without attend_to_expansion_tokens) are \
                 supported on BERT and ModernBERT encoders",
            ));
        }
        self.encode(rows, output)
    }

    /// [`encode`](Self::encode) of every batch of `batches`, `sink(n, states)` called with
    /// batch `n`'s states, batches in order; the first error stops the run. The crate's
    /// kernels run one batch after the other; the candle engine prepares the next batch and
    /// starts it on the device before it hands a batch to `sink`, so that the host's work
    /// (padding, pooling) runs beside the device's.
    fn encode_batches(
        &self,
        batches: &[Vec<&[u32]>],
        output: Output,
        sink: BatchSink<'_>,
    ) -> Result<()> {
        encode_in_turn(self, batches, output, sink)
    }

    /// Each row's mean over its tokens past the first `skip` ([`token_mean`]) for every batch
    /// of `batches`, `sink(n, means)` called with batch `n`'s means (one `hidden`-wide row per
    /// row, row-major), batches in order. The crate's kernels pool the states of
    /// [`encode_batches`](Self::encode_batches) on the host; the candle engine pools on the
    /// device, so that only the means are copied back.
    fn encode_mean_batches(
        &self,
        batches: &[Vec<&[u32]>],
        skip: usize,
        sink: BatchSink<'_>,
    ) -> Result<()> {
        means_on_host(self, batches, skip, sink)
    }
}

/// [`PackedEncoder::encode_mean_batches`] on the host: `encoder`'s states of every token,
/// pooled as each batch comes back.
fn means_on_host<E: PackedEncoder + ?Sized>(
    encoder: &E,
    batches: &[Vec<&[u32]>],
    skip: usize,
    sink: BatchSink<'_>,
) -> Result<()> {
    let h = encoder.hidden();
    encoder.encode_batches(batches, Output::AllTokens, &mut |n, states| {
        sink(n, means_of(&batches[n], &states, h, skip)?)
    })
}

/// The [`token_mean`] of each row of `rows` from their packed states (one `h`-wide row per
/// token, rows in order), concatenated.
fn means_of(rows: &[&[u32]], states: &[f32], h: usize, skip: usize) -> Result<Vec<f32>> {
    let tokens: usize = rows.iter().map(|r| r.len()).sum();
    if states.len() != tokens * h {
        return Err(Error::model(format!(
            "the encoder returned {} values for {tokens} tokens of width {h}",
            states.len()
        )));
    }
    let mut out = Vec::with_capacity(rows.len() * h);
    let mut start = 0;
    for row in rows {
        let len = row.len();
        out.extend(token_mean(
            &states[start * h..(start + len) * h],
            len,
            skip,
            h,
        ));
        start += len;
    }
    Ok(out)
}

/// [`PackedEncoder::encode_batches`] as the crate's kernels run it: `encoder.encode` of one
/// batch after the other, each handed to `sink` in order.
fn encode_in_turn<E: PackedEncoder + ?Sized>(
    encoder: &E,
    batches: &[Vec<&[u32]>],
    output: Output,
    sink: BatchSink<'_>,
) -> Result<()> {
    for (n, rows) in batches.iter().enumerate() {
        sink(n, encoder.encode(rows, output)?)?;
    }
    Ok(())
}

impl PackedEncoder for Box<dyn PackedEncoder> {
    fn hidden(&self) -> usize {
        (**self).hidden()
    }

    fn encode(&self, rows: &[&[u32]], output: Output) -> Result<Vec<f32>> {
        (**self).encode(rows, output)
    }

    fn encode_keys(&self, rows: &[&[u32]], keys: &[usize], output: Output) -> Result<Vec<f32>> {
        (**self).encode_keys(rows, keys, output)
    }

    fn encode_batches(
        &self,
        batches: &[Vec<&[u32]>],
        output: Output,
        sink: BatchSink<'_>,
    ) -> Result<()> {
        (**self).encode_batches(batches, output, sink)
    }

    fn encode_mean_batches(
        &self,
        batches: &[Vec<&[u32]>],
        skip: usize,
        sink: BatchSink<'_>,
    ) -> Result<()> {
        (**self).encode_mean_batches(batches, skip, sink)
    }
}

/// An embedder's encoder on its engine: `E`, the family's packed encoder on the crate's own
/// kernels, or the same model through candle on [`ModelOptions::device`].
///
/// [`ModelOptions::device`]: crate::models::ModelOptions::device
pub(crate) struct EncoderEngine<E> {
    inner: Engine<E>,
    precision: Precision,
}

enum Engine<E> {
    Native(E),
    #[cfg(feature = "candle")]
    Candle(Box<candle::CandleEncoder>),
}

impl<E: PackedEncoder> EncoderEngine<E> {
    /// The encoder of `dir` on `options.device`: `native()` on the CPU, candle's module of
    /// `family` elsewhere.
    pub fn load(
        options: &crate::models::ModelOptions,
        dir: &ModelDir,
        family: EncoderFamily,
        native: impl FnOnce() -> Result<E>,
    ) -> Result<Self> {
        let (device, precision) = (options.device, options.precision);
        let inner = if device.uses_candle() {
            #[cfg(feature = "candle")]
            {
                use candle::CandleEncoder;
                Engine::Candle(Box::new(CandleEncoder::load(
                    dir, family, device, precision,
                )?))
            }
            #[cfg(not(feature = "candle"))]
            {
                let _ = (dir, family);
                return Err(device.unavailable());
            }
        } else {
            Engine::Native(native()?)
        };
        Ok(EncoderEngine { inner, precision })
    }

    /// The number format of the encoder's weights.
    pub fn precision(&self) -> Precision {
        self.precision
    }
}

impl<E: PackedEncoder> PackedEncoder for EncoderEngine<E> {
    fn hidden(&self) -> usize {
        match &self.inner {
            Engine::Native(e) => e.hidden(),
            #[cfg(feature = "candle")]
            Engine::Candle(e) => e.hidden(),
        }
    }

    fn encode(&self, rows: &[&[u32]], output: Output) -> Result<Vec<f32>> {
        match &self.inner {
            Engine::Native(e) => {
                let lengths: Vec<usize> = rows.iter().map(|r| r.len()).collect();
                run_in_groups(&lengths, e.hidden(), |group| e.encode(&rows[group], output))
            }
            #[cfg(feature = "candle")]
            Engine::Candle(e) => e.encode(rows, output),
        }
    }

    fn encode_keys(&self, rows: &[&[u32]], keys: &[usize], output: Output) -> Result<Vec<f32>> {
        match &self.inner {
            Engine::Native(e) => {
                // A count of keys that does not match is the encoder's to refuse.
                if keys.len() != rows.len() {
                    return e.encode_keys(rows, keys, output);
                }
                let lengths: Vec<usize> = rows.iter().map(|r| r.len()).collect();
                run_in_groups(&lengths, e.hidden(), |group| {
                    e.encode_keys(&rows[group.clone()], &keys[group], output)
                })
            }
            #[cfg(feature = "candle")]
            Engine::Candle(e) => e.encode_keys(rows, keys, output),
        }
    }

    fn encode_batches(
        &self,
        batches: &[Vec<&[u32]>],
        output: Output,
        sink: BatchSink<'_>,
    ) -> Result<()> {
        match &self.inner {
            // Through this wrapper's `encode`, which runs a large batch in groups.
            Engine::Native(_) => encode_in_turn(self, batches, output, sink),
            #[cfg(feature = "candle")]
            Engine::Candle(e) => e.encode_batches(batches, output, sink),
        }
    }

    fn encode_mean_batches(
        &self,
        batches: &[Vec<&[u32]>],
        skip: usize,
        sink: BatchSink<'_>,
    ) -> Result<()> {
        match &self.inner {
            // Pooled on the host, from this wrapper's `encode_batches`.
            Engine::Native(_) => means_on_host(self, batches, skip, sink),
            #[cfg(feature = "candle")]
            Engine::Candle(e) => e.encode_mean_batches(batches, skip, sink),
        }
    }
}

/// The encoder families, as their `config.json` tells them apart: what the embedders load,
/// and (DeBERTa too) what the candle engine's encoders run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EncoderFamily {
    /// `bert`.
    Bert,
    /// `xlm-roberta` / `roberta`: positions after the padding id.
    Roberta,
    /// `modernbert`.
    ModernBert,
    /// `deberta-v2` (DeBERTa v2 and v3; cross-encoders only).
    #[cfg_attr(not(feature = "candle"), allow(dead_code))]
    Deberta,
    /// `new` / `gte` / `nomic_bert` (the crate's kernels only: the candle engine refuses it).
    Gte,
    /// `mpnet` (the crate's kernels only: the candle engine refuses it).
    Mpnet,
    /// `distilbert` (the crate's kernels only: the candle engine refuses it).
    DistilBert,
    /// `gemma3_text` (the crate's kernels only: the candle engine refuses it).
    Gemma3,
    /// `t5` / `mt5`, the encoder (the crate's kernels only: the candle engine refuses it).
    T5,
}

/// Implements [`Classifier`] for classifiers whose inherent methods have its names.
/// `Type => method` also forwards [`Classifier::logits_batches`] to that inherent
/// method.
macro_rules! classifier {
    ($($ty:ty $(=> $batches:ident)?),* $(,)?) => {$(
        impl Classifier for $ty {
            fn config(&self) -> &ClassifierConfig {
                <$ty>::config(self)
            }
            fn precision(&self) -> Precision {
                <$ty>::precision(self)
            }
            fn vocab_size(&self) -> usize {
                <$ty>::vocab_size(self)
            }
            fn max_length(&self) -> usize {
                <$ty>::max_length(self)
            }
            fn logits(&self, encodings: &[&PairEncoding]) -> Result<Vec<Vec<f32>>> {
                <$ty>::logits(self, encodings)
            }
            $(
            fn logits_batches(
                &self,
                batches: &[Vec<&PairEncoding>],
                sink: &mut dyn FnMut(usize, Vec<Vec<f32>>) -> Result<()>,
            ) -> Result<()> {
                <$ty>::$batches(self, batches, sink)
            }
            )?
        }
    )*};
}

classifier!(ModernBertClassifier);
#[cfg(feature = "candle")]
classifier!(candle::CandleClassifier => logits_batches);

/// The sequence classifier of `dir`, by the architecture `config.json` names, on
/// `options.device`: the crate's kernels on the CPU, candle elsewhere. Any other architecture
/// is an [`Error::Model`] naming the file and the supported ones.
pub(crate) fn load_classifier(
    dir: &ModelDir,
    options: &ModelOptions,
) -> Result<Box<dyn Classifier>> {
    let (precision, device) = (options.precision, options.device);
    if device.uses_candle() {
        #[cfg(feature = "candle")]
        return candle::CandleClassifier::load(dir, device, precision)
            .map(|m| Box::new(m) as Box<dyn Classifier>);
        #[cfg(not(feature = "candle"))]
        return Err(device.unavailable());
    }
    fn boxed<C: Classifier + 'static>(c: C) -> Box<dyn Classifier> {
        Box::new(c)
    }
    match dir.architecture()? {
        Architecture::BertForSequenceClassification
        | Architecture::XlmRobertaForSequenceClassification
        | Architecture::RobertaForSequenceClassification
        | Architecture::CamembertForSequenceClassification
        | Architecture::ElectraForSequenceClassification => {
            SequenceClassifier::load(dir, precision).map(boxed)
        }
        Architecture::DistilBertForSequenceClassification => {
            DistilBertClassifier::load(dir, precision).map(boxed)
        }
        Architecture::ModernBertForSequenceClassification => {
            ModernBertClassifier::load(dir, precision).map(boxed)
        }
        Architecture::DebertaV2ForSequenceClassification => {
            DebertaClassifier::load(dir, precision).map(boxed)
        }
        Architecture::NewForSequenceClassification | Architecture::GteForSequenceClassification => {
            GteClassifier::load(dir, precision).map(boxed)
        }
        other => Err(Error::model(format!(
            "{}: unsupported architecture {other} for a cross-encoder (supported: \
             BertForSequenceClassification, XLMRobertaForSequenceClassification, \
             RobertaForSequenceClassification, CamembertForSequenceClassification, \
             ElectraForSequenceClassification, DistilBertForSequenceClassification, \
             ModernBertForSequenceClassification, DebertaV2ForSequenceClassification, \
             NewForSequenceClassification, GteForSequenceClassification)",
            dir.path().join(CONFIG_FILE).display()
        ))),
    }
}
