//! The KV cache of generation: every layer's keys and values for the positions decoded so
//! far. The packed forward pass (`forward`) fills it at prefill; the decode step (`generate`)
//! appends to it and attends over it.

use super::ops::QkvLayout;

/// Every layer's keys and values (after the k norm and RoPE) for the positions decoded so far:
/// per layer two `(capacity, kv_heads * head_dim)` row-major buffers.
#[derive(Debug, Default)]
pub(crate) struct KvCache {
    pub(super) keys: Vec<Vec<f32>>,
    pub(super) values: Vec<Vec<f32>>,
    pub(super) width: usize,
    pub(super) capacity: usize,
    pub(super) len: usize,
}

impl KvCache {
    /// An empty cache for `layers` layers of `width` (kv heads x head dim) values per position,
    /// with room for no position yet.
    pub fn new(layers: usize, width: usize) -> Self {
        KvCache {
            keys: vec![Vec::new(); layers],
            values: vec![Vec::new(); layers],
            width,
            capacity: 0,
            len: 0,
        }
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions the buffers have room for.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forgets every position (the buffers stay).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Grows the buffers to hold at least `positions` positions (the held ones are kept).
    pub(super) fn reserve(&mut self, positions: usize) {
        if positions <= self.capacity {
            return;
        }
        for buffer in self.keys.iter_mut().chain(self.values.iter_mut()) {
            buffer.resize(positions * self.width, 0.0);
        }
        self.capacity = positions;
    }

    /// Stores the keys and values of every row of a packed `[q | k | v]` matrix (positions
    /// `0..rows`, one prompt) for `layer`. The caller checked the capacity.
    pub(super) fn store(&mut self, layer: usize, qkv: &[f32], layout: QkvLayout) {
        let (qw, kw) = (layout.q_width(), layout.kv_width());
        debug_assert_eq!(kw, self.width);
        let (keys, values) = (&mut self.keys[layer], &mut self.values[layer]);
        for (pos, row) in qkv.chunks_exact(layout.width()).enumerate() {
            keys[pos * kw..(pos + 1) * kw].copy_from_slice(&row[qw..qw + kw]);
            values[pos * kw..(pos + 1) * kw].copy_from_slice(&row[qw + kw..]);
        }
    }

    /// Sets the number of positions held after [`KvCache::store`] filled them.
    pub(super) fn set_len(&mut self, len: usize) {
        debug_assert!(len <= self.capacity);
        self.len = len;
    }
}
