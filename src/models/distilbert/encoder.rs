//! The packed DistilBERT encoder forward pass (transformers' `DistilBertModel`) on the shared
//! CPU kernels.
//!
//! A batch is *packed* as in the BERT encoder: the tokens of all its sequences are
//! concatenated into one `(tokens, hidden)` matrix and attention runs within each sequence.
//! Embeddings: `LN(word[id] + position[p])`, positions 0, 1, ... per sequence, no token types.
//! Per layer (post-norm): `x = sa_layer_norm(x + out_lin · attention(q_lin x, k_lin x, v_lin
//! x))`, then `x = output_layer_norm(x + ffn.lin2 · act(ffn.lin1 · x))`: the shared
//! [`PostNormLayer`], read under DistilBERT's tensor names
//! (`transformer.layer.N.attention.{q,k,v,out}_lin`, `sa_layer_norm`, `ffn.lin1`, `ffn.lin2`,
//! `output_layer_norm`). Every layer norm has epsilon 1e-12.

use super::config::{DistilBertConfig, EPS};
use crate::models::layers::attention::{attention, Heads};
use crate::models::layers::dense::{Dense, Output};
use crate::models::layers::encoder::{
    check_f32_or_int8, check_sequences, embed_words_and_positions, stack_qkv, EncoderWeights, Norm,
    PostNormLayer, Sequence, Workspace,
};
use crate::models::layers::mlm::MlmNames;
use crate::models::{packed_starts, Precision};
use crate::Result;

/// The tensor-name prefix of the encoder in `DistilBertForMaskedLM` (a bare `DistilBertModel`
/// has its tensors at the root).
pub(crate) const PREFIXES: &[&str] = &["distilbert"];

/// Where `DistilBertForMaskedLM` keeps its MLM head (at the file's root).
pub(crate) const MLM: MlmNames = MlmNames {
    transform: "vocab_transform",
    norm: "vocab_layer_norm",
    decoder: "vocab_projector.weight",
    bias: &["vocab_projector.bias"],
};

/// A DistilBERT encoder's weights: embeddings and layer norms in f32, linear layers in f32
/// panels or int8.
#[derive(Debug)]
pub(crate) struct DistilBertEncoder {
    cfg: DistilBertConfig,
    /// `(vocab, hidden)`.
    word: Vec<f32>,
    /// `(max_position_embeddings, hidden)`.
    position: Vec<f32>,
    embed_norm: Norm,
    layers: Vec<PostNormLayer>,
    precision: Precision,
}

/// Checks every size `config.json` gives against the tensor shapes in the safetensors
/// header, before any of them sizes an allocation.
fn check_config(weights: &EncoderWeights, cfg: &DistilBertConfig) -> Result<()> {
    let name = |n: &str| weights.encoder_name(n);
    let w = weights.weights();
    let word = name("embeddings.word_embeddings.weight");
    w.check_config_size("dim", cfg.hidden, &word, 1)?;
    w.check_config_size("vocab_size", cfg.vocab, &word, 0)?;
    let position = name("embeddings.position_embeddings.weight");
    w.check_config_size("max_position_embeddings", cfg.positions, &position, 0)?;
    let last = cfg.layers - 1;
    let last_query = name(&format!("transformer.layer.{last}.attention.q_lin.weight"));
    w.check_config_tensor("n_layers", cfg.layers, &last_query)?;
    let inner = name("transformer.layer.0.ffn.lin1.weight");
    w.check_config_size("hidden_dim", cfg.intermediate, &inner, 0)
}

impl DistilBertEncoder {
    /// Loads the encoder from `w` (`embeddings.*`, `transformer.layer.N.*`, under
    /// `distilbert.` or at the root) with the shapes `cfg` implies, after checking them against
    /// the safetensors header; a missing tensor or a wrong shape is an [`Error::Model`] naming
    /// the file and the tensor. With [`Precision::Int8`] the linear layers are quantized; bf16
    /// is refused.
    pub fn load(w: &EncoderWeights, cfg: DistilBertConfig, precision: Precision) -> Result<Self> {
        check_f32_or_int8(precision, "DistilBERT encoder")?;
        check_config(w, &cfg)?;
        let (h, i) = (cfg.hidden, cfg.intermediate);
        let layers = (0..cfg.layers)
            .map(|n| layer(w, n, (h, i), precision))
            .collect::<Result<Vec<_>>>()?;
        Ok(DistilBertEncoder {
            word: w.encoder("embeddings.word_embeddings.weight", &[cfg.vocab, h])?,
            position: w.encoder("embeddings.position_embeddings.weight", &[cfg.positions, h])?,
            embed_norm: w.norm("embeddings.LayerNorm", h)?,
            layers,
            cfg,
            precision,
        })
    }

    /// The number format of the linear layers.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The configuration.
    pub fn config(&self) -> &DistilBertConfig {
        &self.cfg
    }

    /// Runs the encoder on `seqs` packed together (token types are ignored: DistilBERT has
    /// none). Returns the last hidden states, row-major with `hidden` columns: one row per
    /// token for [`Output::AllTokens`] (sequences in order), one row per sequence for
    /// [`Output::FirstToken`].
    pub fn forward(&self, seqs: &[Sequence<'_>], output: Output) -> Result<Vec<f32>> {
        check_sequences(seqs, self.cfg.positions, self.cfg.vocab, None)?;
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let (h, heads, dim) = (self.cfg.hidden, self.cfg.heads, self.cfg.head_dim());
        let lens: Vec<usize> = seqs.iter().map(|s| s.ids.len()).collect();
        let total: usize = lens.iter().sum();
        let starts = packed_starts(&lens);
        let mut ws = Workspace::new(total, h);
        self.embed(seqs, &mut ws.x);
        let shape = Heads {
            hidden: h,
            heads,
            dim,
        };
        output.each_layer(&self.layers, |l, first_only| {
            let model = (h, EPS, self.cfg.act);
            l.forward(&mut ws, (&lens, &starts), first_only, model, |qkv, ctx| {
                attention(qkv, ctx, &lens, &starts, &lens, shape, None, first_only)
            });
        });
        ws.x.truncate(output.rows(total, seqs.len()) * h);
        Ok(ws.x)
    }

    /// Word + position embeddings, then layer norm, into `x`.
    fn embed(&self, seqs: &[Sequence<'_>], x: &mut [f32]) {
        let rows: Vec<(u32, usize)> = seqs
            .iter()
            .flat_map(|s| s.ids.iter().copied().zip(0..))
            .collect();
        let tables = (&self.word[..], &self.position[..]);
        embed_words_and_positions(x, &rows, tables, &self.embed_norm, EPS);
    }
}

/// Layer `n` under DistilBERT's names, `(hidden, inner)` wide, its query, key and value
/// projections stacked into one product, every linear layer in `precision`.
fn layer(
    w: &EncoderWeights,
    n: usize,
    (h, i): (usize, usize),
    precision: Precision,
) -> Result<PostNormLayer> {
    let l = format!("transformer.layer.{n}");
    let linear =
        |name: &str, outputs, inputs| w.encoder_linear(&format!("{l}.{name}"), outputs, inputs);
    let [q, k, v] = [
        linear("attention.q_lin", h, h)?,
        linear("attention.k_lin", h, h)?,
        linear("attention.v_lin", h, h)?,
    ];
    let qkv = stack_qkv([q, k, v], h);
    let dense = |linear| Dense::new(linear, precision);
    Ok(PostNormLayer {
        qkv: dense(qkv),
        out: dense(linear("attention.out_lin", h, h)?),
        attn_norm: w.norm(&format!("{l}.sa_layer_norm"), h)?,
        ff_in: dense(linear("ffn.lin1", i, h)?),
        ff_out: dense(linear("ffn.lin2", h, i)?),
        ff_norm: w.norm(&format!("{l}.output_layer_norm"), h)?,
    })
}
