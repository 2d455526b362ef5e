//! Encoders on candle: candle-transformers' BERT, XLM-RoBERTa, ModernBERT and DeBERTa-v2
//! modules run on right-padded batches, as embedders' encoders ([`CandleEncoder`], through
//! `PackedEncoder`) and as cross-encoders ([`CandleClassifier`], with the heads transformers
//! puts on them).

use candle_core::{IndexOp, Module, Tensor, D};
use candle_nn::{LayerNorm, Linear, VarBuilder};
use candle_transformers::models::{bert, debertav2, modernbert, xlm_roberta};
use serde_json::Value;

use super::{candle_device, dtype, err, to_host, var_builder, Padded};
use crate::embed::packed::PackedEncoder;
use crate::models::bert::pair::PairEncoding;
use crate::models::config::{Architecture, ClassifierConfig};
use crate::models::deberta::config::{DebertaConfig, PoolerAct};
use crate::models::dense::Output;
use crate::models::dir::{ModelDir, CONFIG_FILE};
use crate::models::kernels::Act;
use crate::models::modernbert::config::{ClassifierPooling, ModernBertConfig};
use crate::models::weights::Weights;
use crate::models::{Device, Precision};
use crate::{Error, Result};

/// The encoder families, as their `config.json` tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    /// `bert`.
    Bert,
    /// `xlm-roberta` / `roberta`: positions after the padding id.
    Roberta,
    /// `modernbert`.
    ModernBert,
    /// `deberta-v2` (DeBERTa v2 and v3).
    Deberta,
}

/// One of candle-transformers' encoder modules.
enum Body {
    Bert(bert::BertModel),
    Roberta(xlm_roberta::XLMRobertaModel),
    ModernBert(modernbert::ModernBert),
    Deberta(Box<debertav2::DebertaV2Model>),
}

/// An encoder on a candle device: token ids in, last hidden states out. `Send + Sync`.
pub(crate) struct CandleEncoder {
    body: Body,
    device: candle_core::Device,
    pad: u32,
    /// The longest input the position table covers.
    max_len: usize,
    hidden: usize,
}

impl std::fmt::Debug for CandleEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CandleEncoder")
            .field("device", &self.device)
            .field("hidden", &self.hidden)
            .finish_non_exhaustive()
    }
}

/// `config.json` with the keys candle's configs require and transformers' defaults supply
/// (a checkpoint saved by transformers has them all; older ones may not).
fn with_defaults(value: &Value, family: Family) -> Value {
    let mut v = value.clone();
    if let Some(map) = v.as_object_mut() {
        let type_vocab = if family == Family::Roberta { 1 } else { 2 };
        let defaults = [
            ("hidden_act", Value::from("gelu")),
            ("hidden_dropout_prob", Value::from(0.1)),
            ("attention_probs_dropout_prob", Value::from(0.1)),
            ("initializer_range", Value::from(0.02)),
            ("type_vocab_size", Value::from(type_vocab)),
            ("layer_norm_eps", Value::from(1e-12)),
            (
                "pad_token_id",
                Value::from(if type_vocab == 1 { 1 } else { 0 }),
            ),
            ("position_embedding_type", Value::from("absolute")),
        ];
        for (key, default) in defaults {
            map.entry(key).or_insert(default);
        }
        if family == Family::Bert {
            map.insert("model_type".into(), Value::from("bert"));
        }
    }
    v
}

fn parse<T: serde::de::DeserializeOwned>(value: Value, file: &std::path::Path) -> Result<T> {
    serde_json::from_value(value).map_err(|e| {
        Error::model(format!(
            "{}: the candle engine cannot read this config: {e}",
            file.display()
        ))
    })
}

impl CandleEncoder {
    /// Loads the encoder of `family` in `dir` (under `bert.` / `roberta.` / `model.` in a
    /// checkpoint with a head, at the root in a bare one) on `device` in `precision`.
    pub fn load(
        dir: &ModelDir,
        family: Family,
        device: Device,
        precision: Precision,
    ) -> Result<Self> {
        let file = dir.path().join(CONFIG_FILE);
        let value = dir.config()?;
        let device = candle_device(device)?;
        let dtype = dtype(precision)?;
        let weights = Weights::open(dir.path())?;
        let int =
            |key: &str, default: u64| value.get(key).and_then(Value::as_u64).unwrap_or(default);
        let hidden = int("hidden_size", 0) as usize;
        let positions = int("max_position_embeddings", 512) as usize;
        let (body, pad, max_len) = match family {
            Family::Bert => {
                let cfg: bert::Config = parse(with_defaults(&value, family), &file)?;
                let vb = var_builder(&weights, dtype, &device, |n| Some(n.to_string()))?;
                let model = bert::BertModel::load(vb, &cfg).map_err(err("loading BERT"))?;
                (Body::Bert(model), cfg.pad_token_id as u32, positions)
            }
            Family::Roberta => {
                let cfg: xlm_roberta::Config = parse(with_defaults(&value, family), &file)?;
                let prefixed = weights.has("roberta.embeddings.word_embeddings.weight");
                let vb = var_builder(&weights, dtype, &device, |n| match prefixed {
                    true => n.strip_prefix("roberta.").map(str::to_string),
                    false => Some(n.to_string()),
                })?;
                let model = xlm_roberta::XLMRobertaModel::new(&cfg, vb)
                    .map_err(err("loading XLM-RoBERTa"))?;
                let pad = cfg.pad_token_id;
                (
                    Body::Roberta(model),
                    pad,
                    positions.saturating_sub(pad as usize + 1),
                )
            }
            Family::ModernBert => {
                let native = ModernBertConfig::from_value(&value, &file)?;
                check_modernbert(&native, &file)?;
                let cfg = modernbert_config(&native, &value);
                let bare = !weights.has("model.embeddings.tok_embeddings.weight");
                let vb = var_builder(&weights, dtype, &device, |n| match bare {
                    true => Some(format!("model.{n}")),
                    false => Some(n.to_string()),
                })?;
                let model =
                    modernbert::ModernBert::load(vb, &cfg).map_err(err("loading ModernBERT"))?;
                (
                    Body::ModernBert(model),
                    cfg.pad_token_id,
                    native.max_positions,
                )
            }
            Family::Deberta => {
                let native = DebertaConfig::from_value(&value, &file)?;
                if native.type_vocab > 0 && native.embedding != native.hidden {
                    // candle's embeddings size the token-type table by hidden_size where
                    // transformers sizes it by embedding_size.
                    return Err(Error::model(format!(
                        "{}: DeBERTa with token types (type_vocab_size {}) and an \
                         embedding_size ({}) other than hidden_size ({}) is not supported on \
                         the candle engine (it runs on the cpu device)",
                        file.display(),
                        native.type_vocab,
                        native.embedding,
                        native.hidden
                    )));
                }
                let cfg: debertav2::Config = parse(deberta_config(&value), &file)?;
                let vb = var_builder(&weights, dtype, &device, |n| Some(n.to_string()))?;
                let model = debertav2::DebertaV2Model::load(vb.pp("deberta"), &cfg)
                    .map_err(err("loading DeBERTa-v2"))?;
                let pad = cfg.pad_token_id.unwrap_or(0) as u32;
                (Body::Deberta(Box::new(model)), pad, native.max_positions)
            }
        };
        Ok(CandleEncoder {
            body,
            device,
            pad,
            max_len,
            hidden,
        })
    }

    /// The last hidden states `(rows, len, hidden)` of `rows` padded on the right (with
    /// token types `types`, zeros when `None`), and the padded batch.
    fn states(&self, rows: &[&[u32]], types: Option<&[&[u32]]>) -> Result<(Tensor, Padded)> {
        let batch = Padded::new(rows, self.pad, false, self.max_len, &self.device)?;
        let types = match types {
            Some(types) => Padded::types(types, batch.len, &self.device)?,
            None => batch.ids.zeros_like().map_err(err("token types"))?,
        };
        let states = match &self.body {
            Body::Bert(m) => m.forward(&batch.ids, &types, Some(&batch.mask)),
            Body::Roberta(m) => m.forward(&batch.ids, &batch.mask, &types, None, None, None),
            Body::ModernBert(m) => m.forward(&batch.ids, &batch.mask),
            Body::Deberta(m) => m.forward(&batch.ids, Some(types), Some(batch.mask.clone())),
        };
        Ok((states.map_err(err("the encoder's forward pass"))?, batch))
    }
}

impl PackedEncoder for CandleEncoder {
    fn hidden(&self) -> usize {
        self.hidden
    }

    fn encode(&self, rows: &[&[u32]], output: Output) -> Result<Vec<f32>> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let (states, batch) = self.states(rows, None)?;
        let h = self.hidden;
        match output {
            Output::FirstToken => to_host(&states.i((.., 0, ..)).map_err(err("first tokens"))?),
            Output::AllTokens => {
                let all = to_host(&states)?;
                let mut out = Vec::with_capacity(rows.iter().map(|r| r.len()).sum::<usize>() * h);
                for (i, row) in rows.iter().enumerate() {
                    let start = i * batch.len * h;
                    out.extend_from_slice(&all[start..start + row.len() * h]);
                }
                Ok(out)
            }
        }
    }
}

/// What candle's ModernBERT computes: no biases, GeLU (erf), a global layer every
/// `global_attn_every_n_layers` starting with the first. Anything else is refused.
fn check_modernbert(cfg: &ModernBertConfig, file: &std::path::Path) -> Result<()> {
    let every = cfg
        .global
        .iter()
        .skip(1)
        .position(|&g| g)
        .map_or(cfg.layers, |i| i + 1);
    let regular = cfg
        .global
        .iter()
        .enumerate()
        .all(|(i, &g)| g == (i % every == 0));
    let unsupported = [
        (cfg.attention_bias, "attention_bias: true"),
        (cfg.mlp_bias, "mlp_bias: true"),
        (cfg.norm_bias, "norm_bias: true"),
        (cfg.act != Act::Gelu, "a hidden_activation other than gelu"),
        (!regular, "an irregular pattern of global layers"),
    ];
    match unsupported.iter().find(|(bad, _)| *bad) {
        Some((_, what)) => Err(Error::model(format!(
            "{}: ModernBERT with {what} is not supported on the candle engine (it runs on the \
             cpu device)",
            file.display()
        ))),
        None => Ok(()),
    }
}

/// candle's ModernBERT config for ours (read from `config.json` as the CPU path reads it,
/// so both engines accept the same files, old key names and transformers 5's alike).
fn modernbert_config(cfg: &ModernBertConfig, value: &Value) -> modernbert::Config {
    let every = cfg
        .global
        .iter()
        .skip(1)
        .position(|&g| g)
        .map_or(cfg.layers, |i| i + 1);
    let pad = value
        .get("pad_token_id")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    modernbert::Config {
        vocab_size: cfg.vocab,
        hidden_size: cfg.hidden,
        num_hidden_layers: cfg.layers,
        num_attention_heads: cfg.heads,
        intermediate_size: cfg.intermediate,
        max_position_embeddings: cfg.max_positions,
        layer_norm_eps: cfg.eps as f64,
        pad_token_id: pad as u32,
        global_attn_every_n_layers: every,
        global_rope_theta: cfg.global_theta,
        local_attention: cfg.window * 2,
        local_rope_theta: cfg.local_theta,
        classifier_config: None,
    }
}

/// `config.json` for candle's DeBERTa-v2 config: transformers' names of the tanh GELU
/// (`gelu_new`, `gelu_pytorch_tanh`, `gelu_fast`) spelled as candle's (`geluapproximate`);
/// the pooler's keys dropped (the head is ours: candle's pooler has no `tanh`).
fn deberta_config(value: &Value) -> Value {
    let mut v = value.clone();
    if let Some(map) = v.as_object_mut() {
        if let Some(act) = map.get_mut("hidden_act") {
            if Act::from_name(act.as_str().unwrap_or("")) == Some(Act::GeluTanh) {
                *act = Value::from("geluapproximate");
            }
        }
        map.remove("pooler_hidden_act");
    }
    v
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
        norm: LayerNorm,
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
    /// of the CPU path (BERT, XLM-RoBERTa, ModernBERT, DeBERTa-v2/v3).
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
        let candle = candle_device(device)?;
        let dt = dtype(precision)?;
        let head_weights = || -> Result<VarBuilder<'static>> {
            let weights = Weights::open(dir.path())?;
            var_builder(&weights, dt, &candle, |n| {
                let head = ["bert.pooler.", "pooler.", "classifier", "head."];
                head.iter().any(|p| n.starts_with(p)).then(|| n.to_string())
            })
        };
        let linear = |vb: &VarBuilder, out: usize, name: &str, bias: bool| {
            candle_nn::linear_b(h, out, bias, vb.pp(name)).map_err(err(name))
        };
        let tanh = PoolerAct::Tanh;
        let (encoder, head) = match &config.architecture {
            Architecture::BertForSequenceClassification => {
                let encoder = CandleEncoder::load(dir, Family::Bert, device, precision)?;
                let vb = head_weights()?;
                let head = Head::FirstToken {
                    dense: linear(&vb, h, "bert.pooler.dense", true)?,
                    act: tanh,
                    out: linear(&vb, labels, "classifier", true)?,
                };
                (encoder, head)
            }
            Architecture::XlmRobertaForSequenceClassification => {
                let encoder = CandleEncoder::load(dir, Family::Roberta, device, precision)?;
                let vb = head_weights()?;
                let head = Head::FirstToken {
                    dense: linear(&vb, h, "classifier.dense", true)?,
                    act: tanh,
                    out: linear(&vb, labels, "classifier.out_proj", true)?,
                };
                (encoder, head)
            }
            Architecture::ModernBertForSequenceClassification => {
                let cfg = ModernBertConfig::from_value(&value, &file)?;
                let encoder = CandleEncoder::load(dir, Family::ModernBert, device, precision)?;
                let vb = head_weights()?;
                let norm = candle_nn::layer_norm_no_bias(h, cfg.eps as f64, vb.pp("head.norm"))
                    .map_err(err("head.norm"))?;
                let head = Head::ModernBert {
                    mean: cfg.classifier_pooling == ClassifierPooling::Mean,
                    dense: linear(&vb, h, "head.dense", cfg.classifier_bias)?,
                    act: cfg.classifier_act,
                    norm,
                    out: linear(&vb, labels, "classifier", true)?,
                };
                (encoder, head)
            }
            Architecture::DebertaV2ForSequenceClassification => {
                let cfg = DebertaConfig::from_value(&value, &file)?;
                let encoder = CandleEncoder::load(dir, Family::Deberta, device, precision)?;
                let vb = head_weights()?;
                let head = Head::FirstToken {
                    dense: linear(&vb, h, "pooler.dense", true)?,
                    act: cfg.pooler_act,
                    out: linear(&vb, labels, "classifier", true)?,
                };
                (encoder, head)
            }
            other => {
                return Err(Error::model(format!(
                    "{}: unsupported architecture {other} for a cross-encoder on the candle \
                     engine",
                    file.display()
                )))
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
        if encodings.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<&[u32]> = encodings.iter().map(|e| e.input_ids.as_slice()).collect();
        let types: Vec<&[u32]> = encodings
            .iter()
            .map(|e| e.token_type_ids.as_slice())
            .collect();
        let labels = self.config.num_labels;
        let (states, batch) = self.encoder.states(&ids, Some(&types))?;
        let logits = self
            .head
            .forward(&states, &batch.mask)
            .map_err(err("the head"))?;
        let values = to_host(&logits)?;
        Ok(values.chunks_exact(labels).map(<[f32]>::to_vec).collect())
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

/// `act` on candle: GELU exact (erf) or tanh-approximated, or ReLU.
fn activate(x: &Tensor, act: Act) -> candle_core::Result<Tensor> {
    match act {
        Act::Gelu => x.gelu_erf(),
        Act::GeluTanh => x.gelu(),
        Act::Relu => x.relu(),
    }
}
