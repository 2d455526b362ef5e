//! Rotary position embeddings: the cos/sin tables (with transformers' "linear" scaling; NTK
//! scaling is that of a larger theta) and the rotation of one head, as every rotary model here
//! (Qwen, ModernBERT, GTE / NomicBERT) applies them.

/// RoPE cos/sin tables, `(positions, head_dim / 2)` each, computed like `transformers` in
/// float32: `inv_freq[i] = 1 / theta^(2i / head_dim)`, angle `= position * inv_freq[i]` rounded
/// to f32, then its cosine and sine.
#[derive(Debug, Clone)]
pub(crate) struct Rope {
    cos: Vec<f32>,
    sin: Vec<f32>,
    half: usize,
}

impl Rope {
    /// Tables for heads of `head_dim` (even) and positions `0..positions`.
    pub fn new(head_dim: usize, theta: f64, positions: usize) -> Self {
        Self::scaled(head_dim, theta, 1.0, positions)
    }

    /// Tables whose inverse frequencies are divided by `divisor` (transformers' "linear"
    /// scaling; GTE's NTK scaling is that of a larger theta).
    pub fn scaled(head_dim: usize, theta: f64, divisor: f64, positions: usize) -> Self {
        let half = head_dim / 2;
        let divisor = divisor as f32;
        let inv: Vec<f32> = (0..half)
            .map(|i| {
                let exponent = (2 * i) as f32 / head_dim as f32;
                1.0f32 / (theta.powf(exponent as f64) as f32) / divisor
            })
            .collect();
        let mut cos = Vec::with_capacity(positions * half);
        let mut sin = Vec::with_capacity(positions * half);
        for pos in 0..positions {
            for &f in &inv {
                let angle = (pos as f32 * f) as f64;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        Rope { cos, sin, half }
    }

    /// The number of positions the tables cover.
    pub fn positions(&self) -> usize {
        self.cos.len().checked_div(self.half).unwrap_or(0)
    }

    /// The whole `(cos, sin)` tables, `(positions, head_dim / 2)` each, row-major.
    #[cfg(feature = "candle")]
    pub fn tables(&self) -> (&[f32], &[f32]) {
        (&self.cos, &self.sin)
    }

    /// `(cos, sin)` at `pos`, `head_dim / 2` values each.
    #[inline(always)]
    pub fn at(&self, pos: usize) -> (&[f32], &[f32]) {
        let r = pos * self.half..(pos + 1) * self.half;
        (&self.cos[r.clone()], &self.sin[r])
    }
}

/// Rotates one head in place at the angles `(cos, sin)` (rotate-half layout, as Qwen3's
/// `apply_rotary_pos_emb`): `x1' = x1 cos - x2 sin`, `x2' = x2 cos + x1 sin`, with `x1` and
/// `x2` the first and second halves.
#[inline(always)]
pub(crate) fn rope_head(head: &mut [f32], cos: &[f32], sin: &[f32]) {
    let (x1, x2) = head.split_at_mut(cos.len());
    for (((a, b), &c), &s) in x1.iter_mut().zip(x2.iter_mut()).zip(cos).zip(sin) {
        let (u, v) = (*a, *b);
        *a = u * c - v * s;
        *b = v * c + u * s;
    }
}
