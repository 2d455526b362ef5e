//! What the packed encoders (`bert::encoder`, `modernbert::encoder`) share: a linear layer in
//! the precision it was loaded with ([`Dense`]: f32 panels or int8), and which rows of the
//! last layer a caller needs ([`Output`]).

use crate::models::layers::kernels::{Linear, Then};
use crate::models::layers::panels::PanelLinear;
use crate::models::layers::quant::{QuantLinear, QuantRows};
use crate::models::Precision;

/// A linear layer of an encoder in the precision it was loaded with.
#[derive(Debug, Clone)]
pub(crate) enum Dense {
    F32(PanelLinear),
    Int8(QuantLinear),
}

impl Dense {
    /// Packs `linear` for `precision`: int8 for [`Precision::Int8`], f32 panels otherwise (the
    /// encoders refuse the other precisions before loading a layer).
    pub fn new(linear: Linear, precision: Precision) -> Self {
        match precision {
            Precision::Int8 => Dense::Int8(QuantLinear::new(&linear)),
            _ => Dense::F32(PanelLinear::new(&linear)),
        }
    }

    /// `out (rows, outputs) = x (rows, inputs) · weightᵀ + bias`, then `then` on `out`, fused
    /// into the product's blocks of rows.
    pub fn forward(
        &self,
        x: &[f32],
        rows: usize,
        out: &mut [f32],
        scratch: &mut QuantRows,
        then: Then<'_>,
    ) {
        match self {
            Dense::F32(l) => l.forward(x, rows, out, then),
            Dense::Int8(q) => q.forward(x, rows, out, scratch, then),
        }
    }

    /// Rows per parallel block of a product over `rows` rows run block by block with
    /// [`Dense::forward_here`] (a feed-forward layer's two products).
    pub fn block_rows(&self, rows: usize) -> usize {
        match self {
            Dense::F32(l) => l.block_rows(rows),
            Dense::Int8(q) => q.block_rows(rows),
        }
    }

    /// [`Dense::forward`] on this thread, for rows `first..` of the whole output.
    pub fn forward_here(
        &self,
        x: &[f32],
        rows: usize,
        out: &mut [f32],
        scratch: &mut QuantRows,
        then: Then<'_>,
        first: usize,
    ) {
        match self {
            Dense::F32(l) => l.forward_here(x, rows, out, then, first),
            Dense::Int8(q) => q.forward_here(x, rows, out, scratch, then, first),
        }
    }

    /// Outputs per row.
    pub fn outputs(&self) -> usize {
        match self {
            Dense::F32(l) => l.outputs(),
            Dense::Int8(q) => q.outputs(),
        }
    }
}

/// Which rows of the last layer the caller needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    /// Every token (mean pooling).
    AllTokens,
    /// The first token of each sequence (`[CLS]` / `<s>` heads).
    FirstToken,
}

impl Output {
    /// The rows of hidden states a batch of `sequences` sequences and `tokens` tokens gives.
    pub fn rows(self, tokens: usize, sequences: usize) -> usize {
        match self {
            Output::AllTokens => tokens,
            Output::FirstToken => sequences,
        }
    }

    /// Runs every one of `layers` with `run(layer, first_only)`, `first_only` set on the last
    /// layer when only each sequence's first token is wanted: that layer computes those rows
    /// only and leaves them at the front of the states.
    pub fn each_layer<L>(self, layers: &[L], mut run: impl FnMut(&L, bool)) {
        let last = layers.len().saturating_sub(1);
        for (i, layer) in layers.iter().enumerate() {
            run(layer, self == Output::FirstToken && i == last);
        }
    }
}
