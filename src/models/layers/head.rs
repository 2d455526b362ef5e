//! The classification heads' shared steps: the packed encoders' inputs for pair encodings and
//! a first-token head `out(act(dense(first)))` (BERT's, GTE's and DeBERTa's).

use super::encoder::Sequence;
use super::kernels::Linear;
use crate::models::pair::PairEncoding;

/// The packed encoders' inputs for pair encodings (ids and token types).
pub(crate) fn sequences<'a>(encodings: &[&'a PairEncoding]) -> Vec<Sequence<'a>> {
    encodings
        .iter()
        .map(|e| Sequence {
            ids: &e.input_ids,
            types: &e.token_type_ids,
        })
        .collect()
}

/// `tanh` on every value (BERT's pooler activation).
pub(crate) fn tanh(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = v.tanh());
}

/// A first-token classification head: `out(act(dense(first)))` for the rows of `first` (one
/// per sequence), one row of logits each. BERT's, GTE's and DeBERTa's heads.
pub(crate) fn pooled_logits(
    first: &[f32],
    dense: &Linear,
    act: impl Fn(&mut [f32]),
    out: &Linear,
) -> Vec<Vec<f32>> {
    let n = first.len() / dense.inputs;
    let mut pooled = vec![0.0; n * dense.outputs];
    dense.forward(first, n, &mut pooled);
    act(&mut pooled);
    let labels = out.outputs;
    let mut logits = vec![0.0; n * labels];
    out.forward(&pooled, n, &mut logits);
    logits.chunks_exact(labels).map(<[f32]>::to_vec).collect()
}
