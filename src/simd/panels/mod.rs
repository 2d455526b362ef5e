//! The micro-kernels of the packed linear layers (`models::panels`, whose docs describe the
//! panels' layout and how a product walks its blocks): the tiles that sum a block of copied
//! rows against a panel's block into the output, the one-row kernels that stream a whole
//! panel against one input row, and, in [`bf16`], the `bf16` panels' widening, the rounding
//! of a product's inputs to pairs and the AVX-512 `bf16` dot-product tile.
//!
//! Tiles, by instruction set:
//! - AVX-512: 14 rows x 16 columns, one 512-bit accumulator per row (15 of 32 registers);
//! - AVX2 + FMA: 6 rows x 16 columns, two 256-bit accumulators per row (12 of 16 registers);
//! - anything else: the same tiles in plain Rust.
//!
//! A tile of fewer rows (the last of a block) runs a kernel of about its height; the first
//! tile on each panel prefetches the next panel's block.
//!
//! Every tile, whatever its kernel, sums each output over `k` in the same order (one product
//! added per step, in `f32`), so the vector tiles agree with the scalar one to rounding of the
//! fused multiply-add. The one-row kernels keep a few independent sums over `k` (to hide the
//! latency of the multiply-add) and add them at the end.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

pub(crate) mod bf16;

/// Columns per panel (one 512-bit vector, two 256-bit ones).
pub(crate) const NR: usize = 16;
/// The most rows of any kernel (the size of the scratch tile).
const MAX_MR: usize = 14;

/// The micro-kernels' instruction set (see `simd`).
pub(crate) use super::FloatIsa as Isa;

/// Rows per tile of the `isa` kernel: 14 for AVX-512 (one 512-bit accumulator a row, 15 of
/// 32 registers), 6 for AVX2 + FMA (two 256-bit ones a row, 12 of 16), 4 in plain Rust.
pub(crate) fn tile_rows(isa: Isa) -> usize {
    match isa {
        Isa::Portable => 4,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => 6,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => 14,
    }
}

/// Where a tile's sums go: `rows x cols` outputs (at most the kernel's rows x [`NR`]) at the
/// start of `out`, rows `stride` apart.
pub(crate) struct Out<'a> {
    pub out: &'a mut [f32],
    pub stride: usize,
    pub rows: usize,
    pub cols: usize,
    /// Added to every row (the first block of `k`).
    pub bias: Option<&'a [f32]>,
    /// Whether the sums add to `out` rather than replace it.
    pub add: bool,
}

impl Out<'_> {
    /// Checks that `rows` rows of [`NR`] fit (the vector stores write whole rows only when
    /// `cols` is [`NR`]), and that the bias covers `cols`.
    fn check(&self, mr: usize) {
        assert!(self.rows <= mr && self.cols <= NR);
        assert!(self.out.len() >= (self.rows - 1) * self.stride + self.cols);
        assert!(self.bias.is_none_or(|b| b.len() >= self.cols));
    }

    /// Writes `sums` the way the tile says (the partial tiles' path).
    fn store(self, sums: &[[f32; NR]; MAX_MR]) {
        for (r, sum) in sums.iter().enumerate().take(self.rows) {
            let out = &mut self.out[r * self.stride..][..self.cols];
            for (c, o) in out.iter_mut().enumerate() {
                let v = sum[c] + self.bias.map_or(0.0, |b| b[c]);
                *o = if self.add { *o + v } else { v };
            }
        }
    }

    /// Writes the first `rows` of `acc`, one vector of [`NR`] a row.
    ///
    /// # Safety
    /// AVX-512F is present, and `cols` is [`NR`] (checked by [`Out::check`]).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn store_avx512(&mut self, acc: &[__m512]) {
        debug_assert_eq!(self.cols, NR);
        let out = self.out.as_mut_ptr();
        let bias = match self.bias {
            Some(b) => _mm512_loadu_ps(b.as_ptr()),
            None => _mm512_setzero_ps(),
        };
        for (r, v) in acc.iter().enumerate().take(self.rows) {
            let o = out.add(r * self.stride);
            let mut v = _mm512_add_ps(*v, bias);
            if self.add {
                v = _mm512_add_ps(v, _mm512_loadu_ps(o));
            }
            _mm512_storeu_ps(o, v);
        }
    }

    /// Writes the first `rows` of `acc`, two vectors of 8 a row.
    ///
    /// # Safety
    /// AVX2 is present, and `cols` is [`NR`] (checked by [`Out::check`]).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn store_avx2(&mut self, acc: &[[__m256; 2]]) {
        debug_assert_eq!(self.cols, NR);
        let out = self.out.as_mut_ptr();
        let (b0, b1) = match self.bias {
            Some(b) => (
                _mm256_loadu_ps(b.as_ptr()),
                _mm256_loadu_ps(b.as_ptr().add(8)),
            ),
            None => (_mm256_setzero_ps(), _mm256_setzero_ps()),
        };
        for (r, pair) in acc.iter().enumerate().take(self.rows) {
            let o = out.add(r * self.stride);
            let (mut v0, mut v1) = (_mm256_add_ps(pair[0], b0), _mm256_add_ps(pair[1], b1));
            if self.add {
                v0 = _mm256_add_ps(v0, _mm256_loadu_ps(o));
                v1 = _mm256_add_ps(v1, _mm256_loadu_ps(o.add(8)));
            }
            _mm256_storeu_ps(o, v0);
            _mm256_storeu_ps(o.add(8), v1);
        }
    }
}

/// One `f32` tile: the sums over `k` of the copied rows of the left operand against a panel
/// block, into [`Out`].
pub(crate) struct Tile<'a> {
    /// `mr` rows of `k` values, `lda` apart.
    pub a: &'a [f32],
    pub lda: usize,
    /// `k x NR` values.
    pub b: &'a [f32],
    /// `k x NR` values to prefetch, one line per step of `k` (the next panel's block, or `b`).
    pub next: &'a [f32],
    pub k: usize,
    /// Rows of the kernel (of the copied block).
    pub mr: usize,
    pub out: Out<'a>,
}

impl Tile<'_> {
    /// Runs the tile on the `isa` kernel.
    pub fn run(mut self, isa: Isa) {
        let mr = self.mr;
        assert!(mr == tile_rows(isa));
        self.out.check(mr);
        assert!(self.lda >= self.k && self.a.len() >= (mr - 1) * self.lda + self.k);
        assert!(self.b.len() >= self.k * NR && self.next.len() >= self.k * NR);
        // SAFETY (all four): an `Isa::Avx2` / `Isa::Avx512` is only made (`FloatIsa::detect`) on
        // a CPU with AVX2 + FMA / AVX-512F; the asserts above keep the reads (`k` x at most
        // `mr` and `k x NR` floats) inside `a` and `b`, and the writes (`rows` rows of `NR`)
        // inside `out`.
        #[cfg(target_arch = "x86_64")]
        if self.out.cols == NR {
            // A tile of fewer rows (the last of a block) runs a kernel of about its height.
            match isa {
                Isa::Avx2 => {
                    return unsafe {
                        match self.out.rows {
                            1..=2 => tile_avx2_store::<2>(&mut self),
                            3..=4 => tile_avx2_store::<4>(&mut self),
                            _ => tile_avx2_store::<6>(&mut self),
                        }
                    }
                }
                Isa::Avx512 => {
                    return unsafe {
                        match self.out.rows {
                            1..=2 => tile_avx512_store::<2>(&mut self),
                            3..=4 => tile_avx512_store::<4>(&mut self),
                            5..=7 => tile_avx512_store::<7>(&mut self),
                            _ => tile_avx512_store::<14>(&mut self),
                        }
                    }
                }
                Isa::Portable => {}
            }
        }
        let mut sums = [[0.0f32; NR]; MAX_MR];
        match isa {
            Isa::Portable => tile_scalar(self.a, self.lda, self.b, self.k, mr, &mut sums),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe {
                tile_avx2(
                    self.a.as_ptr(),
                    self.lda,
                    self.b.as_ptr(),
                    self.k,
                    &mut sums,
                )
            },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe {
                tile_avx512(
                    self.a.as_ptr(),
                    self.lda,
                    self.b.as_ptr(),
                    self.k,
                    &mut sums,
                )
            },
        }
        self.out.store(&sums);
    }
}

/// The sums of a tile in plain Rust.
fn tile_scalar(
    a: &[f32],
    lda: usize,
    b: &[f32],
    k: usize,
    mr: usize,
    sums: &mut [[f32; NR]; MAX_MR],
) {
    for l in 0..k {
        let bl = &b[l * NR..][..NR];
        for (r, sum) in sums.iter_mut().enumerate().take(mr) {
            let av = a[r * lda + l];
            for (s, &bv) in sum.iter_mut().zip(bl) {
                *s = av.mul_add(bv, *s);
            }
        }
    }
}

/// The AVX2 sums of a 6 x 16 tile into `sums`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2(
    a: *const f32,
    lda: usize,
    b: *const f32,
    k: usize,
    sums: &mut [[f32; NR]; MAX_MR],
) {
    let acc = sums_avx2::<6>(a, lda, b, b, k);
    for (r, pair) in acc.iter().enumerate() {
        _mm256_storeu_ps(sums[r].as_mut_ptr(), pair[0]);
        _mm256_storeu_ps(sums[r].as_mut_ptr().add(8), pair[1]);
    }
}

/// The AVX2 kernel on a tile of [`NR`] columns and at most `R` rows, written into `out`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2_store<const R: usize>(t: &mut Tile<'_>) {
    let acc = sums_avx2::<R>(t.a.as_ptr(), t.lda, t.b.as_ptr(), t.next.as_ptr(), t.k);
    t.out.store_avx2(&acc);
}

/// The inner loop of the AVX2 kernel: `R` (up to 6) rows x 2 vectors of sums over `k`, prefetching one
/// line of `next` per step.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn sums_avx2<const R: usize>(
    a: *const f32,
    lda: usize,
    b: *const f32,
    next: *const f32,
    k: usize,
) -> [[__m256; 2]; R] {
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    let step = |acc: &mut [[__m256; 2]; R], l: usize| {
        _mm_prefetch::<_MM_HINT_T0>(next.add(l * NR) as *const i8);
        let b0 = _mm256_loadu_ps(b.add(l * NR));
        let b1 = _mm256_loadu_ps(b.add(l * NR + 8));
        for (r, pair) in acc.iter_mut().enumerate() {
            let av = _mm256_broadcast_ss(&*a.add(r * lda + l));
            pair[0] = _mm256_fmadd_ps(av, b0, pair[0]);
            pair[1] = _mm256_fmadd_ps(av, b1, pair[1]);
        }
    };
    // Two steps per iteration: the rows' addresses, computed once, serve both.
    for l in (0..k / 2).map(|i| 2 * i) {
        step(&mut acc, l);
        step(&mut acc, l + 1);
    }
    if k % 2 == 1 {
        step(&mut acc, k - 1);
    }
    acc
}

/// The AVX-512 sums of a 14 x 16 tile into `sums`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512(
    a: *const f32,
    lda: usize,
    b: *const f32,
    k: usize,
    sums: &mut [[f32; NR]; MAX_MR],
) {
    let acc = sums_avx512::<14>(a, lda, b, b, k);
    for (r, v) in acc.iter().enumerate() {
        _mm512_storeu_ps(sums[r].as_mut_ptr(), *v);
    }
}

/// The AVX-512 kernel on a tile of [`NR`] columns and at most `R` rows, written into `out`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512_store<const R: usize>(t: &mut Tile<'_>) {
    let acc = sums_avx512::<R>(t.a.as_ptr(), t.lda, t.b.as_ptr(), t.next.as_ptr(), t.k);
    t.out.store_avx512(&acc);
}

/// The inner loop of the AVX-512 kernel: `R` (up to 14) rows x 1 vector of sums over `k`, prefetching one
/// line of `next` per step.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn sums_avx512<const R: usize>(
    a: *const f32,
    lda: usize,
    b: *const f32,
    next: *const f32,
    k: usize,
) -> [__m512; R] {
    let mut acc = [_mm512_setzero_ps(); R];
    for l in 0..k {
        _mm_prefetch::<_MM_HINT_T0>(next.add(l * NR) as *const i8);
        let bl = _mm512_loadu_ps(b.add(l * NR));
        let al = a.add(l);
        for (r, v) in acc.iter_mut().enumerate() {
            *v = _mm512_fmadd_ps(_mm512_set1_ps(*al.add(r * lda)), bl, *v);
        }
    }
    acc
}

/// A value that panels store, in its panel layout: `f32` (row after row), or `bf16` bits
/// (`u16`) in pairs of rows (see [`bf16`]), widened to `f32` as they are read (exactly: a
/// `bf16` is the top half of an `f32`). In both layouts rows `2q` and `2q + 1` start at
/// `2q` x [`NR`].
pub(crate) trait PanelValue: Copy {
    /// Where row `l`, column `c` of a panel lies in it.
    fn at(l: usize, c: usize) -> usize;

    /// Values in a panel of `k` rows.
    fn len(k: usize) -> usize;

    fn to_f32(self) -> f32;

    /// Rows `2q` and `2q + 1` of a panel from `p` (their start), [`NR`] columns each.
    ///
    /// # Safety
    /// AVX-512F is present, and `2 NR` values from `p` are readable.
    #[cfg(target_arch = "x86_64")]
    unsafe fn pair_avx512(p: *const Self) -> [__m512; 2];

    /// Row `2q` alone (the last row of an odd `k`), from `p` as in `pair_avx512`.
    ///
    /// # Safety
    /// AVX-512F is present, and the row's values are readable (`2 NR` values for `bf16`, whose
    /// padding row follows).
    #[cfg(target_arch = "x86_64")]
    unsafe fn row_avx512(p: *const Self) -> __m512;

    /// Rows `2q` and `2q + 1` as `[row][half]`, 8 columns a vector.
    ///
    /// # Safety
    /// AVX2 is present, and `2 NR` values from `p` are readable.
    #[cfg(target_arch = "x86_64")]
    unsafe fn pair_avx2(p: *const Self) -> [[__m256; 2]; 2];

    /// Row `2q` alone, two vectors of 8.
    ///
    /// # Safety
    /// As `row_avx512`, with AVX2.
    #[cfg(target_arch = "x86_64")]
    unsafe fn row_avx2(p: *const Self) -> [__m256; 2];
}

impl PanelValue for f32 {
    fn at(l: usize, c: usize) -> usize {
        l * NR + c
    }

    fn len(k: usize) -> usize {
        k * NR
    }

    fn to_f32(self) -> f32 {
        self
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn pair_avx512(p: *const f32) -> [__m512; 2] {
        [_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(NR))]
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn row_avx512(p: *const f32) -> __m512 {
        _mm512_loadu_ps(p)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn pair_avx2(p: *const f32) -> [[__m256; 2]; 2] {
        [Self::row_avx2(p), Self::row_avx2(p.add(NR))]
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn row_avx2(p: *const f32) -> [__m256; 2] {
        [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))]
    }
}

/// `Σ_l x[l] panel[l]`: the [`NR`] sums of one panel (`x.len()` rows of [`NR`]) against `x`,
/// in the same order whatever the values' type (so `bf16` panels give the sums of the `f32`
/// panel of the same values).
pub(crate) fn panel_sums<T: PanelValue>(isa: Isa, panel: &[T], x: &[f32]) -> [f32; NR] {
    assert!(panel.len() >= T::len(x.len()));
    let mut sums = [0.0f32; NR];
    match isa {
        // SAFETY (both): an `Isa::Avx2` / `Isa::Avx512` is only made (`FloatIsa::detect`) on a
        // CPU with AVX2 + FMA / AVX-512F; the assert above keeps the reads inside `panel`
        // (`T::len` counts a `bf16` panel's padding row, which its last pair reads).
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { panel_sums_avx512(panel.as_ptr(), x, &mut sums) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { panel_sums_avx2(panel.as_ptr(), x, &mut sums) },
        Isa::Portable => {
            for (l, &xv) in x.iter().enumerate() {
                for (c, s) in sums.iter_mut().enumerate() {
                    *s = xv.mul_add(panel[T::at(l, c)].to_f32(), *s);
                }
            }
        }
    }
    sums
}

/// [`panel_sums`] with AVX-512: four independent sums over `l` (by `l % 4`), added at the end.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn panel_sums_avx512<T: PanelValue>(panel: *const T, x: &[f32], sums: &mut [f32; NR]) {
    let mut acc = [_mm512_setzero_ps(); 4];
    let quads = x.chunks_exact(4);
    let tail = quads.remainder();
    let mut w = panel;
    let fma =
        |acc: &mut __m512, x: f32, w: __m512| *acc = _mm512_fmadd_ps(_mm512_set1_ps(x), w, *acc);
    for q in quads {
        let [w0, w1] = T::pair_avx512(w);
        let [w2, w3] = T::pair_avx512(w.add(2 * NR));
        fma(&mut acc[0], q[0], w0);
        fma(&mut acc[1], q[1], w1);
        fma(&mut acc[2], q[2], w2);
        fma(&mut acc[3], q[3], w3);
        w = w.add(4 * NR);
    }
    let mut rest = tail.chunks_exact(2);
    for (j, p) in rest.by_ref().enumerate() {
        let [w0, w1] = T::pair_avx512(w);
        fma(&mut acc[2 * j], p[0], w0);
        fma(&mut acc[2 * j + 1], p[1], w1);
        w = w.add(2 * NR);
    }
    if let Some(&xv) = rest.remainder().first() {
        fma(&mut acc[tail.len() - 1], xv, T::row_avx512(w));
    }
    let total = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    _mm512_storeu_ps(sums.as_mut_ptr(), total);
}

/// [`panel_sums`] with AVX2 + FMA: two independent pairs of sums over `l` (by `l % 2`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn panel_sums_avx2<T: PanelValue>(panel: *const T, x: &[f32], sums: &mut [f32; NR]) {
    let mut acc = [[_mm256_setzero_ps(); 2]; 2];
    let pairs = x.chunks_exact(2);
    let tail = pairs.remainder();
    let mut w = panel;
    let fma = |acc: &mut [__m256; 2], x: f32, w: [__m256; 2]| {
        let xv = _mm256_set1_ps(x);
        acc[0] = _mm256_fmadd_ps(xv, w[0], acc[0]);
        acc[1] = _mm256_fmadd_ps(xv, w[1], acc[1]);
    };
    for q in pairs {
        let [w0, w1] = T::pair_avx2(w);
        fma(&mut acc[0], q[0], w0);
        fma(&mut acc[1], q[1], w1);
        w = w.add(2 * NR);
    }
    if let Some(&xv) = tail.first() {
        fma(&mut acc[0], xv, T::row_avx2(w));
    }
    _mm256_storeu_ps(sums.as_mut_ptr(), _mm256_add_ps(acc[0][0], acc[1][0]));
    _mm256_storeu_ps(
        sums.as_mut_ptr().add(8),
        _mm256_add_ps(acc[0][1], acc[1][1]),
    );
}
