//! The micro-kernels of the packed linear layers (`models::layers::panels`, whose docs describe the
//! panels' layout and how a product walks its blocks): the tiles that sum a block of copied
//! rows against a panel's block into the output, the one-row kernels that stream a whole
//! panel against one input row, and, in [`bf16`], the `bf16` panels' widening, the rounding
//! of a product's inputs to pairs and the AVX-512 `bf16` dot-product tile.
//!
//! Tiles, by instruction set, each reading the copied rows interleaved (a step's values side
//! by side, [`Tile::a`]; [`interleave`] writes them):
//! - AVX-512: 14 rows x 32 columns over two panels ([`PairTile`], 28 accumulators), or 14 x 16
//!   over one, one 512-bit accumulator per row (15 of 32 registers);
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
pub(crate) const MAX_MR: usize = 14;

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

    /// Writes the first `rows` of `acc`, two vectors of [`NR`] a row (a [`PairTile`]'s).
    ///
    /// # Safety
    /// AVX-512F is present, `cols` is `2 NR`, and `out` and `bias` hold them (checked by
    /// [`PairTile::run`]).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn store_avx512_pairs(&mut self, acc: &[[__m512; 2]]) {
        debug_assert_eq!(self.cols, 2 * NR);
        let out = self.out.as_mut_ptr();
        let bias = match self.bias {
            Some(b) => [
                _mm512_loadu_ps(b.as_ptr()),
                _mm512_loadu_ps(b.as_ptr().add(NR)),
            ],
            None => [_mm512_setzero_ps(); 2],
        };
        for (r, pair) in acc.iter().enumerate().take(self.rows) {
            for (h, (v, bias)) in pair.iter().zip(bias).enumerate() {
                let o = out.add(r * self.stride + h * NR);
                let mut v = _mm512_add_ps(*v, bias);
                if self.add {
                    v = _mm512_add_ps(v, _mm512_loadu_ps(o));
                }
                _mm512_storeu_ps(o, v);
            }
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
    /// The copied rows, interleaved: `k` steps of `mr` values, the value of row `r` at step
    /// `l` at `a[l * mr + r]` (one contiguous run, read in order).
    pub a: &'a [f32],
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
        assert!(self.a.len() >= self.k * mr);
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
            Isa::Portable => tile_scalar(self.a, self.b, self.k, mr, &mut sums),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { tile_avx2(self.a.as_ptr(), self.b.as_ptr(), self.k, &mut sums) },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe {
                tile_avx512(self.a.as_ptr(), self.b.as_ptr(), self.k, &mut sums)
            },
        }
        self.out.store(&sums);
    }
}

/// Two panels side by side on the AVX-512 kernel: the sums over `k` of the copied rows
/// (interleaved as in [`Tile::a`], 14 to a step) against the blocks of two adjacent panels,
/// into [`Out`] (`2 NR` columns: both panels whole).
///
/// Each step broadcasts a row's value once for two multiply-adds: 16 loads for 28
/// multiply-adds where the one-panel tile has 15 for 14. On an Intel core with two 512-bit
/// FMA units the one-panel tile's loads, not its multiply-adds, set its pace (about 89 % of
/// the FMA peak on data in the level-1 cache, against 96 % for this one). Every output is
/// summed over `k` in the one-panel tile's order: the two give the same bits.
pub(crate) struct PairTile<'a> {
    pub a: &'a [f32],
    /// The two panels' `k x NR` blocks.
    pub b: [&'a [f32]; 2],
    /// Blocks to prefetch, one line of each per step (the next two panels', or `b`).
    pub next: [&'a [f32]; 2],
    pub k: usize,
    pub out: Out<'a>,
}

impl PairTile<'_> {
    /// Runs the tile; `isa` must be AVX-512, the only kernel with pair tiles.
    pub fn run(mut self, isa: Isa) {
        let mr = tile_rows(isa);
        let out = &self.out;
        assert!(out.rows >= 1 && out.rows <= mr && out.cols == 2 * NR);
        assert!(out.out.len() >= (out.rows - 1) * out.stride + 2 * NR);
        assert!(out.bias.is_none_or(|b| b.len() >= 2 * NR));
        assert!(self.a.len() >= self.k * mr);
        for (b, next) in self.b.iter().zip(&self.next) {
            assert!(b.len() >= self.k * NR && next.len() >= self.k * NR);
        }
        match isa {
            // SAFETY: an `Isa::Avx512` is only made (`FloatIsa::detect`) on a CPU with
            // AVX-512F; the asserts above keep the reads (`k` x `mr` floats, `k x NR` of each
            // block) inside `a` and the blocks, and the writes (`rows` rows of `2 NR`) inside
            // `out`.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe {
                match self.out.rows {
                    1..=2 => pair_tile_avx512::<2>(&mut self),
                    3..=4 => pair_tile_avx512::<4>(&mut self),
                    5..=7 => pair_tile_avx512::<7>(&mut self),
                    _ => pair_tile_avx512::<14>(&mut self),
                }
            },
            _ => unreachable!("pair tiles are AVX-512 only"),
        }
    }
}

/// The AVX-512 pair kernel on at most `R` rows, written into `out`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn pair_tile_avx512<const R: usize>(t: &mut PairTile<'_>) {
    const MR: usize = 14;
    let (a, k) = (t.a.as_ptr(), t.k);
    let [b0, b1] = t.b.map(<[f32]>::as_ptr);
    let [n0, n1] = t.next.map(<[f32]>::as_ptr);
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    for l in 0..k {
        _mm_prefetch::<_MM_HINT_T0>(n0.add(l * NR) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(n1.add(l * NR) as *const i8);
        let x = _mm512_loadu_ps(b0.add(l * NR));
        let y = _mm512_loadu_ps(b1.add(l * NR));
        let al = a.add(l * MR);
        for (r, pair) in acc.iter_mut().enumerate() {
            let av = _mm512_set1_ps(*al.add(r));
            pair[0] = _mm512_fmadd_ps(av, x, pair[0]);
            pair[1] = _mm512_fmadd_ps(av, y, pair[1]);
        }
    }
    t.out.store_avx512_pairs(&acc);
}

/// Writes `rows` (at most `mr`, each at least `kb` values; zero rows after the last up to
/// `mr`) interleaved into `dst` (`kb x mr` values): the value of row `r` at column `l` at
/// `l * mr + r`, the layout of [`Tile::a`].
pub(crate) fn interleave(isa: Isa, rows: &[&[f32]], mr: usize, kb: usize, dst: &mut [f32]) {
    assert!(rows.len() <= mr && rows.iter().all(|row| row.len() >= kb));
    assert!(dst.len() >= kb * mr);
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && (1..=16).contains(&mr) {
        // SAFETY: an `Isa::Avx512` is only made on a CPU with AVX-512F; the asserts above
        // keep the reads (columns below `kb` of each row) and the writes (`kb x mr` values)
        // inside the slices.
        done = unsafe { interleave_avx512(rows, mr, kb, dst) };
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 && (1..=8).contains(&mr) {
        // SAFETY: as above, with AVX2 (an `Isa::Avx2` is only made on a CPU with it).
        done = unsafe { interleave_avx2(rows, mr, kb, dst) };
    }
    let _ = isa;
    for l in done..kb {
        let step = &mut dst[l * mr..][..mr];
        for (r, d) in step.iter_mut().enumerate() {
            *d = rows.get(r).map_or(0.0, |row| row[l]);
        }
    }
}

/// [`interleave`] of at most 16 rows in squares of 16 columns, each transposed in registers
/// (missing rows zero) and stored `mr` values a column: the columns done (a multiple of 16).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn interleave_avx512(rows: &[&[f32]], mr: usize, kb: usize, dst: &mut [f32]) -> usize {
    let mask = ((1u32 << mr) - 1) as u16;
    let squares = kb / 16;
    for q in 0..squares {
        let c0 = q * 16;
        let mut v = [_mm512_setzero_ps(); 16];
        for (vr, row) in v.iter_mut().zip(rows) {
            *vr = _mm512_loadu_ps(row.as_ptr().add(c0));
        }
        // Pairs of rows, then quadruples, within each 128-bit lane: `u[4g + c]`'s lane `j`
        // holds column `4j + c` of rows `4g..4g + 4`.
        let mut t = [_mm512_setzero_ps(); 16];
        for i in 0..8 {
            t[2 * i] = _mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]);
        }
        let mut u = [_mm512_setzero_ps(); 16];
        for g in 0..4 {
            let (lo, hi) = (_mm512_castps_pd(t[4 * g]), _mm512_castps_pd(t[4 * g + 2]));
            let (lo2, hi2) = (
                _mm512_castps_pd(t[4 * g + 1]),
                _mm512_castps_pd(t[4 * g + 3]),
            );
            u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo, hi));
            u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo, hi));
            u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo2, hi2));
            u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo2, hi2));
        }
        // Then the four quadruples of a column, lane by lane: column `4j + c` is lane `j` of
        // `u[c]`, `u[4 + c]`, `u[8 + c]` and `u[12 + c]`.
        let out = dst.as_mut_ptr().add(c0 * mr);
        for c in 0..4 {
            let x0 = _mm512_shuffle_f32x4::<0x44>(u[c], u[4 + c]);
            let x1 = _mm512_shuffle_f32x4::<0xEE>(u[c], u[4 + c]);
            let y0 = _mm512_shuffle_f32x4::<0x44>(u[8 + c], u[12 + c]);
            let y1 = _mm512_shuffle_f32x4::<0xEE>(u[8 + c], u[12 + c]);
            let columns = [
                _mm512_shuffle_f32x4::<0x88>(x0, y0),
                _mm512_shuffle_f32x4::<0xDD>(x0, y0),
                _mm512_shuffle_f32x4::<0x88>(x1, y1),
                _mm512_shuffle_f32x4::<0xDD>(x1, y1),
            ];
            for (j, column) in columns.into_iter().enumerate() {
                _mm512_mask_storeu_ps(out.add((4 * j + c) * mr), mask, column);
            }
        }
    }
    squares * 16
}

/// [`interleave`] of at most 8 rows in squares of 8 columns, transposed in AVX2 registers and
/// stored `mr` values a column: the columns done (a multiple of 8). Element by element, the
/// copy took 4 % of an AVX2 encoder's time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn interleave_avx2(rows: &[&[f32]], mr: usize, kb: usize, dst: &mut [f32]) -> usize {
    let lanes: [i32; 8] = std::array::from_fn(|i| if i < mr { -1 } else { 0 });
    let mask = _mm256_loadu_si256(lanes.as_ptr().cast());
    let squares = kb / 8;
    for q in 0..squares {
        let c0 = q * 8;
        let mut r = [_mm256_setzero_ps(); 8];
        for (v, row) in r.iter_mut().zip(rows) {
            *v = _mm256_loadu_ps(row.as_ptr().add(c0));
        }
        let t: [__m256; 8] = std::array::from_fn(|i| {
            let (a, b) = (r[i / 2 * 2], r[i / 2 * 2 + 1]);
            if i % 2 == 0 {
                _mm256_unpacklo_ps(a, b)
            } else {
                _mm256_unpackhi_ps(a, b)
            }
        });
        // `u[4g + c]`: columns `c` and `c + 4` of rows `4g..4g + 4`, one a half.
        let mut u = [_mm256_setzero_ps(); 8];
        for g in 0..2 {
            let t = &t[4 * g..];
            u[4 * g] = _mm256_shuffle_ps::<0x44>(t[0], t[2]);
            u[4 * g + 1] = _mm256_shuffle_ps::<0xEE>(t[0], t[2]);
            u[4 * g + 2] = _mm256_shuffle_ps::<0x44>(t[1], t[3]);
            u[4 * g + 3] = _mm256_shuffle_ps::<0xEE>(t[1], t[3]);
        }
        let mut columns = [_mm256_setzero_ps(); 8];
        for c in 0..4 {
            columns[c] = _mm256_permute2f128_ps::<0x20>(u[c], u[4 + c]);
            columns[c + 4] = _mm256_permute2f128_ps::<0x31>(u[c], u[4 + c]);
        }
        // Whole vectors in column order: each one's lanes past `mr` land on the next column's
        // place, which the next store overwrites. Only a store that would pass the block's
        // `kb x mr` values is masked (masked stores made the copy twice as slow on AMD Zen 3).
        let out = dst.as_mut_ptr().add(c0 * mr);
        for (c, column) in columns.into_iter().enumerate() {
            let at = (c0 + c) * mr;
            if at + 8 <= kb * mr {
                _mm256_storeu_ps(out.add(c * mr), column);
            } else {
                _mm256_maskstore_ps(out.add(c * mr), mask, column);
            }
        }
    }
    squares * 8
}

/// The sums of a tile in plain Rust.
fn tile_scalar(a: &[f32], b: &[f32], k: usize, mr: usize, sums: &mut [[f32; NR]; MAX_MR]) {
    for l in 0..k {
        let bl = &b[l * NR..][..NR];
        for (r, sum) in sums.iter_mut().enumerate().take(mr) {
            let av = a[l * mr + r];
            for (s, &bv) in sum.iter_mut().zip(bl) {
                *s = av.mul_add(bv, *s);
            }
        }
    }
}

/// The AVX2 sums of a 6 x 16 tile into `sums`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2(a: *const f32, b: *const f32, k: usize, sums: &mut [[f32; NR]; MAX_MR]) {
    let acc = sums_avx2::<6>(a, b, b, k);
    for (r, pair) in acc.iter().enumerate() {
        _mm256_storeu_ps(sums[r].as_mut_ptr(), pair[0]);
        _mm256_storeu_ps(sums[r].as_mut_ptr().add(8), pair[1]);
    }
}

/// The AVX2 kernel on a tile of [`NR`] columns and at most `R` rows, written into `out`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2_store<const R: usize>(t: &mut Tile<'_>) {
    let acc = sums_avx2::<R>(t.a.as_ptr(), t.b.as_ptr(), t.next.as_ptr(), t.k);
    t.out.store_avx2(&acc);
}

/// The inner loop of the AVX2 kernel: `R` (up to 6) rows x 2 vectors of sums over `k`, the
/// copied rows interleaved 6 to a step (the full tile's, whatever `R`), prefetching one line of
/// `next` per step.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn sums_avx2<const R: usize>(
    a: *const f32,
    b: *const f32,
    next: *const f32,
    k: usize,
) -> [[__m256; 2]; R] {
    const MR: usize = 6;
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for l in 0..k {
        _mm_prefetch::<_MM_HINT_T0>(next.add(l * NR) as *const i8);
        let b0 = _mm256_loadu_ps(b.add(l * NR));
        let b1 = _mm256_loadu_ps(b.add(l * NR + 8));
        let al = a.add(l * MR);
        for (r, pair) in acc.iter_mut().enumerate() {
            let av = _mm256_broadcast_ss(&*al.add(r));
            pair[0] = _mm256_fmadd_ps(av, b0, pair[0]);
            pair[1] = _mm256_fmadd_ps(av, b1, pair[1]);
        }
    }
    acc
}

/// The AVX-512 sums of a 14 x 16 tile into `sums`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512(a: *const f32, b: *const f32, k: usize, sums: &mut [[f32; NR]; MAX_MR]) {
    let acc = sums_avx512::<14>(a, b, b, k);
    for (r, v) in acc.iter().enumerate() {
        _mm512_storeu_ps(sums[r].as_mut_ptr(), *v);
    }
}

/// The AVX-512 kernel on a tile of [`NR`] columns and at most `R` rows, written into `out`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512_store<const R: usize>(t: &mut Tile<'_>) {
    let acc = sums_avx512::<R>(t.a.as_ptr(), t.b.as_ptr(), t.next.as_ptr(), t.k);
    t.out.store_avx512(&acc);
}

/// The inner loop of the AVX-512 kernel: `R` (up to 14) rows x 1 vector of sums over `k`, the
/// copied rows interleaved 14 to a step (the full tile's, whatever `R`), prefetching one line
/// of `next` per step.
///
/// With the rows interleaved, every broadcast is at a constant offset from one pointer that
/// moves by a step: the multiply-adds take their broadcast from memory (`{1to16}`) and no
/// address is computed per row. Rows `lda` apart took a dozen integer additions a step,
/// which compete with the multiply-adds for two of their ports (on Intel cores with two
/// 512-bit FMA units): the tile ran at about two thirds of the FMA peak.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn sums_avx512<const R: usize>(
    a: *const f32,
    b: *const f32,
    next: *const f32,
    k: usize,
) -> [__m512; R] {
    const MR: usize = 14;
    let mut acc = [_mm512_setzero_ps(); R];
    for l in 0..k {
        _mm_prefetch::<_MM_HINT_T0>(next.add(l * NR) as *const i8);
        let bl = _mm512_loadu_ps(b.add(l * NR));
        let al = a.add(l * MR);
        for (r, v) in acc.iter_mut().enumerate() {
            *v = _mm512_fmadd_ps(_mm512_set1_ps(*al.add(r)), bl, *v);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every instruction set's interleaving equals the definition (row `r`, column `l` at
    /// `l * mr + r`, zero past the last row) for every tile height, fewer rows than the tile,
    /// and widths around the vector kernels' squares.
    #[test]
    fn interleaving_puts_each_value_where_the_tiles_read_it() {
        let source: Vec<Vec<f32>> = (0..16)
            .map(|r| (0..40).map(|l| (r * 100 + l) as f32 + 0.5).collect())
            .collect();
        for isa in Isa::available() {
            for mr in 1..=16 {
                for present in [0, 1, mr / 2, mr] {
                    for kb in [0, 1, 7, 8, 9, 16, 17, 33, 40] {
                        let rows: Vec<&[f32]> = source[..present].iter().map(|r| &r[..]).collect();
                        let mut got = vec![f32::NAN; kb * mr + 3];
                        interleave(isa, &rows, mr, kb, &mut got);
                        for l in 0..kb {
                            for r in 0..mr {
                                let want = if r < present { source[r][l] } else { 0.0 };
                                assert_eq!(
                                    got[l * mr + r],
                                    want,
                                    "{isa:?} mr {mr} {present} rows, kb {kb}: ({r}, {l})"
                                );
                            }
                        }
                        assert!(
                            got[kb * mr..].iter().all(|v| v.is_nan()),
                            "{isa:?} mr {mr}: wrote past kb x mr"
                        );
                    }
                }
            }
        }
    }
}
