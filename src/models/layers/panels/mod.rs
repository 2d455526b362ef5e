//! Float32 matrix products on the crate's own micro-kernels, over a right-hand matrix packed in
//! column panels: the products of every model's f32 linear layers (the encoders', Qwen3's),
//! whose weights are packed once, at load time, and the one-row products of a Qwen3 decode
//! step over the same panels. (The encoders' attention has a fused kernel of its own on AVX-512
//! and AVX2, `simd::attention`; elsewhere its small per-head products stay on `gemm`.)
//!
//! Why not `gemm` (the crate candle uses, and these products' engine before): on the shapes
//! of a small encoder (`k` of 32 to 1536, a few hundred to a few thousand rows) its AVX2
//! micro-kernel broadcasts the left operand from unpacked, row-strided memory and reached about
//! 75% of its own peak. Packing both sides, with the weights packed once, is the textbook
//! layout (Goto & van de Geijn, "Anatomy of high-performance matrix multiplication"); the
//! kernels are its two inner loops and nothing else. This module packs the panels, copies the
//! left operand and walks the blocks; the kernels themselves (the tiles, the one-row sums, the
//! `bf16` widening and dot-product tile) are in `simd::panels`.
//!
//! Layout. [`Panels`] holds a `(k, n)` matrix as `ceil(n / NR)` panels, each `k` rows of [`NR`]
//! contiguous floats (zero past column `n`). The left operand's rows are copied per call, `kc`
//! columns of `k` at a time (see [`blocking`]: sizes from the CPU's caches), tile by tile and
//! interleaved: a tile's `mr` values of one step of `k` side by side, the tile's rows padded
//! with zero rows (`copy_tiles`; transposed in registers). The micro-kernel then reads both
//! operands in order, and every value it broadcasts lies at a constant offset from where the
//! step begins, so no address is computed per row:
//! - AVX-512: 14 rows x 32 columns (two panels side by side, two 512-bit accumulators per row:
//!   28 of 32 registers), or 14 x 16 on a last, single or partial panel;
//! - AVX2 + FMA: 6 rows x 16 columns, two 256-bit accumulators per row (12 of 16 registers);
//! - anything else: the same tiles in plain Rust.
//!
//! A product splits its rows into blocks of whole tiles, spread evenly over the threads (the
//! last block takes the rows past the last whole tile, on a kernel of about their height), and
//! walks the columns in groups of `nc` so that a block's outputs stay in the level-2 cache
//! across the blocks of `k`. The first tile on each panel prefetches the next panel's block:
//! a large model's weights come from memory, not the cache.
//!
//! A one-row product ([`PanelLinear::gemv`]) reads each panel once, in order: decoding is bound
//! by how fast the weights stream, and a panel is one contiguous run.
//!
//! Panels hold `f32` or `bf16` values ([`PanelLinear::bf16`], Qwen3 with `Precision::Bf16`):
//! half the bytes for a decode step to stream. A `bf16` product is PyTorch's: its inputs are
//! rounded to `bf16` as well, every product of two `bf16` values is exact in `f32`, and the
//! sums are `f32`. A `bf16` panel stores its rows in pairs (see [`bf16`]), the operand layout
//! of the AVX-512 `bf16` dot product (`vdpbf16ps`: two products a lane per instruction, twice
//! the `f32` tiles' rate); where the CPU lacks it, a product over many rows widens each block
//! to `f32` once (16 KB, in the level-1 cache) and runs the `f32` tiles over it, and a
//! one-row product widens in registers.
//!
//! Every tile, whatever its kernel, sums each output over `k` in the same order (one product
//! added per step, in `f32`), so the vector tiles agree with the scalar one to rounding of the
//! fused multiply-add. The one-row kernels keep a few independent sums over `k` (to hide the
//! latency of the multiply-add) and add them at the end.

use rayon::prelude::*;
use std::cell::RefCell;

use crate::models::layers::kernels::{threads, with_scratch, Linear, Then};
use crate::simd::panels::bf16::{widen, DotTile};
use crate::simd::panels::{
    interleave, panel_sums, tile_rows, Isa, Out, PairTile, PanelValue, Tile, MAX_MR, NR,
};

mod bf16;
mod blocking;

use blocking::Blocking;

/// A `(k, n)` matrix packed in panels of [`NR`] columns (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Panels {
    data: Values,
    k: usize,
    n: usize,
}

/// The values of [`Panels`], panel after panel.
#[derive(Debug, Clone, PartialEq)]
enum Values {
    F32(Vec<f32>),
    /// `bf16` bit patterns (the top half of an `f32`), each panel's rows in pairs (see
    /// [`bf16`]): `k` rounded up to even rows, the padding row zero.
    Bf16(Vec<u16>),
}

impl Panels {
    /// Packs the `(k, n)` matrix whose element `(l, j)` is `b(l, j)`.
    #[cfg(test)]
    fn from_fn(k: usize, n: usize, b: impl Fn(usize, usize) -> f32) -> Self {
        let mut w = vec![0.0; n * k];
        for j in 0..n {
            for l in 0..k {
                w[j * k + l] = b(l, j);
            }
        }
        Panels::from_torch(&w, k, n)
    }

    /// Packs torch's `(outputs, inputs)` weight matrix as the `(inputs, outputs)` right-hand
    /// side of `x · wᵀ`.
    pub fn from_torch(w: &[f32], inputs: usize, outputs: usize) -> Self {
        assert_eq!(w.len(), inputs * outputs, "weight size");
        let mut data = vec![0.0; outputs.div_ceil(NR) * NR * inputs];
        data.par_chunks_mut(NR * inputs.max(1))
            .enumerate()
            .for_each(|(p, panel)| {
                let rows = &w[p * NR * inputs..][..NR.min(outputs - p * NR) * inputs];
                // In squares of NR x NR: a square's 16 panel rows (1 KB) stay in the level-1
                // cache while each of its weight rows is read in order. A whole column per
                // weight row wrote one float per cache line, 64 KB apart at k = 1024: 0.5 s of
                // CPU in a 0.6B Qwen3's load, 0.3 s this way.
                for l0 in (0..inputs).step_by(NR) {
                    let square = &mut panel[l0 * NR..(l0 + NR).min(inputs) * NR];
                    for (c, row) in rows.chunks_exact(inputs).enumerate() {
                        for (dst, &v) in square.chunks_exact_mut(NR).zip(&row[l0..]) {
                            dst[c] = v;
                        }
                    }
                }
            });
        Panels {
            data: Values::F32(data),
            k: inputs,
            n: outputs,
        }
    }

    /// The same matrix with its values rounded to the nearest `bf16` (ties to even, as
    /// PyTorch rounds), in the paired layout.
    fn to_bf16(&self) -> Self {
        let data = match &self.data {
            Values::F32(v) => Values::Bf16(bf16::pairs(v, self.k)),
            Values::Bf16(v) => Values::Bf16(v.clone()),
        };
        Panels { data, ..*self }
    }

    /// Values per panel: `k` rows of [`NR`] (`bf16`: `k` rounded up to even).
    fn panel_len(&self) -> usize {
        NR * match self.data {
            Values::F32(_) => self.k,
            Values::Bf16(_) => self.k.next_multiple_of(2),
        }
    }

    /// Where rows `k0..k0 + kb` of panel `p` lie in the values (`k0` even; a `bf16` block of
    /// odd `kb`, the last, takes its padding row too).
    fn block(&self, p: usize, k0: usize, kb: usize) -> std::ops::Range<usize> {
        let start = p * self.panel_len() + k0 * NR;
        start
            ..start
                + NR * match self.data {
                    Values::F32(_) => kb,
                    Values::Bf16(_) => kb.next_multiple_of(2),
                }
    }

    /// The matrix as torch's `(n, k)` weight layout (the transpose, unpacked).
    #[cfg(test)]
    fn to_torch(&self) -> Vec<f32> {
        let mut w = vec![0.0; self.n * self.k];
        for j in 0..self.n {
            let panel = (j / NR) * self.panel_len();
            for l in 0..self.k {
                w[j * self.k + l] = match &self.data {
                    Values::F32(v) => v[panel + f32::at(l, j % NR)],
                    Values::Bf16(v) => v[panel + u16::at(l, j % NR)].to_f32(),
                };
            }
        }
        w
    }
}

/// The kernels a product runs: the `f32` tiles of `isa`, and for `bf16` panels whether the
/// `bf16` dot-product tiles (AVX-512 `vdpbf16ps`) run instead of widening to `f32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Kernels {
    isa: Isa,
    bf16_dot: bool,
}

impl Kernels {
    /// The best kernels this CPU has for `f32` panels: the widest `f32` tiles.
    pub fn detect() -> Kernels {
        Kernels::widening(Isa::detect())
    }

    /// The kernels for `bf16` panels, chosen once per process: [`Kernels::detect`]'s, with the
    /// `bf16` dot-product tiles where they beat widening the panels to the `f32` tiles (see
    /// [`dot_tiles_pay`]). Only `bf16` layers pay for the timing.
    pub fn for_bf16() -> Kernels {
        static CHOSEN: std::sync::OnceLock<Kernels> = std::sync::OnceLock::new();
        *CHOSEN.get_or_init(|| {
            let widening = Kernels::detect();
            match Kernels::dot(widening.isa) {
                Some(dot) if dot_tiles_pay(dot, widening) => dot,
                _ => widening,
            }
        })
    }

    /// The `bf16` dot-product kernels of `isa`, when this CPU has them (AVX-512 with its
    /// `bf16` instructions).
    fn dot(isa: Isa) -> Option<Kernels> {
        #[cfg(target_arch = "x86_64")]
        if isa == Isa::Avx512 && crate::simd::avx512_bf16() {
            return Some(Kernels {
                isa,
                bf16_dot: true,
            });
        }
        let _ = isa;
        None
    }

    /// The `f32` tiles of `isa`, `bf16` panels widened.
    fn widening(isa: Isa) -> Kernels {
        Kernels {
            isa,
            bf16_dot: false,
        }
    }

    /// Every choice this CPU runs, the portable one first (for the tests that compare them).
    #[cfg(test)]
    fn available() -> Vec<Kernels> {
        let mut all: Vec<Kernels> = Isa::available()
            .into_iter()
            .map(Kernels::widening)
            .collect();
        all.extend(Kernels::dot(Isa::detect()));
        all
    }
}

/// Whether `dot`'s `bf16` tiles run a `bf16` product at least 15 % faster than `widening`
/// (the panels widened to `f32` for the `f32` tiles), timed once on a product of a layer's
/// shape (192 x 512 x 512, a few milliseconds on one thread). On AMD Zen 4 the dot tiles ran
/// a 0.6B Qwen3 about twice as fast as `f32`; on an Intel Xeon (Sapphire Rapids class) they
/// took 36.9 s where widening took 27.8 s and `f32` 25.6 s. The margin keeps the choice
/// stable from run to run (the two differ in the order of their `f32` sums, hence in
/// rounding); a close call widens.
fn dot_tiles_pay(dot: Kernels, widening: Kernels) -> bool {
    // On a thread and a pool of their own, packing included. The first `detect` may run on a
    // thread of the global pool (layers loaded in parallel) while others wait for it: work
    // sent there would wait for them, and a rayon thread that waits steals other work, which
    // could call `detect` again inside its own initialisation.
    let time = || -> Option<(std::time::Duration, std::time::Duration)> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .ok()?;
        pool.install(|| {
            let (m, k, n) = (2 * BLOCK_ROWS, 512, 512);
            let value = |i: usize| (i.wrapping_mul(2_654_435_761) % 1999) as f32 / 1999.0 - 0.5;
            let a: Vec<f32> = (0..m * k).map(value).collect();
            let w: Vec<f32> = (0..n * k).map(|i| value(i + 7)).collect();
            let b = Panels::from_torch(&w, k, n).to_bf16();
            let (bias, mut out) = (vec![0.0; n], vec![0.0; m * n]);
            let rows = Rows {
                data: &a,
                rows: m,
                stride: k,
            };
            let mut best = |kernels: Kernels| {
                crate::simd::shortest_run(4, || {
                    product(kernels, rows, &b, &mut out, n, &bias, false)
                })
            };
            Some((best(dot), best(widening)))
        })
    };
    let timed = std::thread::scope(|s| s.spawn(time).join().ok().flatten());
    let Some((dot_time, widening_time)) = timed else {
        return false;
    };
    let pays = dot_time.as_secs_f64() * 1.15 < widening_time.as_secs_f64();
    tracing::debug!(
        ?dot_time,
        ?widening_time,
        "bf16 products: {}",
        if pays {
            "dot-product tiles"
        } else {
            "widened to the f32 tiles"
        }
    );
    pays
}

/// The rows of a left operand: row `i` is `data[i * stride..][..k]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rows<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub stride: usize,
}

/// `out (a.rows, b.n) = a · b + bias` (or `+=` when `accumulate`) on the calling thread,
/// `out`'s rows `out_stride` apart (at least `b.n`), in tiles of the chosen kernels. With
/// `bf16` panels, `a` is rounded to `bf16` as it is copied.
///
/// Panics if a slice is shorter than the shapes say (a bug in the caller).
pub(crate) fn product(
    kernels: Kernels,
    a: Rows<'_>,
    b: &Panels,
    out: &mut [f32],
    out_stride: usize,
    bias: &[f32],
    accumulate: bool,
) {
    let blocking = Blocking::detect();
    product_in(blocking, kernels, a, b, out, out_stride, bias, accumulate)
}

/// [`product`] in blocks of the given sizes.
#[allow(clippy::too_many_arguments)]
fn product_in(
    blocking: Blocking,
    kernels: Kernels,
    a: Rows<'_>,
    b: &Panels,
    out: &mut [f32],
    out_stride: usize,
    bias: &[f32],
    accumulate: bool,
) {
    let (m, k, n) = (a.rows, b.k, b.n);
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        a.stride >= k && a.data.len() >= (m - 1) * a.stride + k,
        "left operand too short"
    );
    assert!(
        out_stride >= n && out.len() >= (m - 1) * out_stride + n,
        "output too short"
    );
    assert!(bias.len() >= n, "bias too short");
    if k == 0 {
        for row in out.chunks_mut(out_stride).take(m) {
            for (o, &b) in row[..n].iter_mut().zip(bias) {
                *o = if accumulate { *o + b } else { b };
            }
        }
        return;
    }
    let isa = kernels.isa;
    let mr = tile_rows(isa);
    let blocks = m.div_ceil(mr);
    let dot = kernels.bf16_dot && matches!(b.data, Values::Bf16(_));
    // Split `k` evenly: 384 in two blocks of 192, not 256 + 128; blocks start at even rows
    // (a `bf16` panel's rows come in pairs). A panel's block of `bf16` pairs is half the
    // bytes of an `f32` one: twice the rows fill the same 16 KB.
    let Blocking { kc: most, nc } = blocking;
    let most = if dot { 2 * most } else { most };
    let kc = k.div_ceil(k.div_ceil(most)).next_multiple_of(2);
    let panels = n.div_ceil(NR);
    with_scratch(&PACKED, |packed| {
        with_scratch(&WIDE, |wide| {
            // Groups of columns outermost: a group's outputs stay in the level-2 cache while
            // every block of `k` adds to them.
            for g0 in (0..panels).step_by(nc / NR) {
                let group = g0..panels.min(g0 + nc / NR);
                for k0 in (0..k).step_by(kc) {
                    let kb = kc.min(k - k0);
                    let left = if dot {
                        Left::Pairs(bf16::copy_pairs(a, k0, kb, blocks * mr, &mut packed.1))
                    } else {
                        let round = matches!(b.data, Values::Bf16(_));
                        Left::Floats(copy_tiles(isa, a, k0, kb, blocks, mr, round, &mut packed.0))
                    };
                    let block = KBlock {
                        isa,
                        rows: a.rows,
                        left,
                        k0,
                        kb,
                    };
                    block.columns(b, group.clone(), out, out_stride, bias, accumulate, wide);
                }
            }
        })
    });
}

/// `k`'s values per copied row of a left operand block of `kb`: an odd number of cache
/// lines (of `per_line` values), so that a tile's rows fall in different sets of the
/// level-1 cache.
fn row_stride(kb: usize, per_line: usize) -> usize {
    let lines = kb.div_ceil(per_line);
    (lines + 1 - lines % 2) * per_line
}

/// A product's left operand, one block of `k` copied.
#[derive(Clone, Copy)]
enum Left<'a> {
    /// `f32` rows, interleaved tile by tile ([`copy_tiles`]).
    Floats(&'a [f32]),
    /// Rows of `bf16` pairs, one `u32` per two columns ([`bf16::copy_pairs`]).
    Pairs(Copied<'a>),
}

/// Rows of a left operand's block in `bf16` pairs, copied `lda` words apart.
#[derive(Clone, Copy)]
struct Copied<'a> {
    data: &'a [u32],
    lda: usize,
}

/// One block of `k` of a product's left operand: columns `k0..k0 + kb` of its `rows` rows,
/// copied for the `isa` kernel.
struct KBlock<'a> {
    isa: Isa,
    rows: usize,
    left: Left<'a>,
    k0: usize,
    kb: usize,
}

impl KBlock<'_> {
    /// The tiles of panels `group` over this block of `k` (see [`product`]): bias or
    /// accumulation as `product` says, each panel's first tile prefetching the next panel; a
    /// `bf16` panel's block is widened into `wide` first unless the left operand is in pairs.
    #[allow(clippy::too_many_arguments)]
    fn columns(
        &self,
        b: &Panels,
        group: std::ops::Range<usize>,
        out: &mut [f32],
        out_stride: usize,
        bias: &[f32],
        accumulate: bool,
        wide: &mut Vec<f32>,
    ) {
        let KBlock {
            isa,
            rows: m,
            left,
            k0,
            kb,
        } = *self;
        let (n, mr) = (b.n, tile_rows(isa));
        let blocks = m.div_ceil(mr);
        let first = k0 == 0;
        let end = group.end;
        let mut p = group.start;
        while p < end {
            let c0 = p * NR;
            // The first tile pulls the next panel's block into the cache as it goes (one
            // line per step of `k`), so that it need not wait for memory when its turn
            // comes: the weights of a large model stream from memory, not the cache. (A
            // block widened to `f32` is read in order as it is widened, which the hardware
            // prefetches.) Two whole `f32` panels side by side run the AVX-512 pair tiles
            // (see `PairTile`), prefetching the two after them.
            let next = if p + 1 < end { p + 1 } else { p };
            let right = match (&b.data, left) {
                (Values::F32(v), Left::Floats(_)) if self.pairs(p, end, n) => {
                    let block = |q: usize| &v[b.block(q, k0, kb)];
                    let ahead = [p + 2, p + 3].map(|q| block(if q < end { q } else { p }));
                    Right::Pair([block(p), block(p + 1)], ahead)
                }
                (Values::F32(v), _) => Right::One(
                    Operand::F32(&v[b.block(p, k0, kb)]),
                    Operand::F32(&v[b.block(next, k0, kb)]),
                ),
                (Values::Bf16(v), Left::Pairs(_)) => Right::One(
                    Operand::Bf16(&v[b.block(p, k0, kb)]),
                    Operand::Bf16(&v[b.block(next, k0, kb)]),
                ),
                (Values::Bf16(v), Left::Floats(_)) => {
                    widen(isa, &v[b.block(p, k0, kb)], wide);
                    Right::One(Operand::F32(wide), Operand::F32(wide))
                }
            };
            let (width, cols) = match right {
                Right::Pair(..) => (2, 2 * NR),
                Right::One(..) => (1, NR.min(n - c0)),
            };
            // The first block of `k` adds the bias (and replaces `out` unless
            // accumulating), the others add to the sums so far.
            let bias = first.then(|| &bias[c0..c0 + cols]);
            let add = !first || accumulate;
            for blk in 0..blocks {
                let r0 = blk * mr;
                let out = Out {
                    out: &mut out[r0 * out_stride + c0..],
                    stride: out_stride,
                    rows: mr.min(m - r0),
                    cols,
                    bias,
                    add,
                };
                match (left, right) {
                    (Left::Floats(a), Right::Pair(b, ahead)) => PairTile {
                        a: &a[r0 * kb..][..mr * kb],
                        b,
                        next: if blk == 0 { ahead } else { b },
                        k: kb,
                        out,
                    }
                    .run(isa),
                    (Left::Floats(a), Right::One(Operand::F32(b), Operand::F32(next))) => Tile {
                        a: &a[r0 * kb..][..mr * kb],
                        b,
                        next: if blk == 0 { next } else { b },
                        k: kb,
                        mr,
                        out,
                    }
                    .run(isa),
                    (Left::Pairs(a), Right::One(Operand::Bf16(b), Operand::Bf16(next))) => {
                        DotTile {
                            a: &a.data[r0 * a.lda..][..mr * a.lda],
                            lda: a.lda,
                            b,
                            next: if blk == 0 { next } else { b },
                            pairs: kb.div_ceil(2),
                            out,
                        }
                        .run()
                    }
                    _ => unreachable!("a left operand in pairs goes with bf16 panels"),
                }
            }
            p += width;
        }
    }

    /// Whether panels `p` and `p + 1` (of a group ending at `end`) run as one pair tile: both
    /// in the group, both whole (`n` columns in all), on the AVX-512 kernel.
    fn pairs(&self, p: usize, end: usize, n: usize) -> bool {
        #[cfg(target_arch = "x86_64")]
        if self.isa == Isa::Avx512 {
            return p + 1 < end && (p + 2) * NR <= n;
        }
        let _ = (p, end, n);
        false
    }
}

/// The right-hand blocks of one step of [`KBlock::columns`]: two `f32` panels' blocks and the
/// two to prefetch, or one panel's block and the one to prefetch.
#[derive(Clone, Copy)]
enum Right<'a> {
    Pair([&'a [f32]; 2], [&'a [f32]; 2]),
    One(Operand<'a>, Operand<'a>),
}

/// A panel's block as a tile reads it.
#[derive(Clone, Copy)]
enum Operand<'a> {
    F32(&'a [f32]),
    Bf16(&'a [u16]),
}

thread_local! {
    /// The left operand's block of `k` of the product running on this thread (as `f32`
    /// rows, or as rows of `bf16` pairs).
    static PACKED: RefCell<(Vec<f32>, Vec<u32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
    /// A `bf16` panel's block of `k`, widened, for the product running on this thread.
    static WIDE: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Copies columns `k0..k0 + kb` of `a`'s rows into `packed` (rounded to `bf16` when
/// `round`), `tiles` tiles of `mr` rows, each interleaved: the value of the tile's row `r` at
/// column `k0 + l` at `l * mr + r` of the tile's `mr * kb` values ([`Tile::a`]), zero for the
/// rows past the last one. The kernels read the copy, not `a`: one contiguous run per tile,
/// every broadcast at a constant offset from where the step begins.
#[allow(clippy::too_many_arguments)]
fn copy_tiles<'a>(
    isa: Isa,
    a: Rows<'_>,
    k0: usize,
    kb: usize,
    tiles: usize,
    mr: usize,
    round: bool,
    packed: &'a mut Vec<f32>,
) -> &'a [f32] {
    // Grown, never cleared: every value the kernels read is written below.
    packed.resize(tiles * mr * kb, 0.0);
    for (t, tile) in packed.chunks_exact_mut(mr * kb).take(tiles).enumerate() {
        let mut rows = [&[][..]; MAX_MR];
        let present = t * mr..a.rows.min((t + 1) * mr);
        let count = present.len();
        for (dst, row) in rows.iter_mut().zip(present) {
            *dst = &a.data[row * a.stride + k0..][..kb];
        }
        interleave(isa, &rows[..count], mr, kb, tile);
        if round {
            bf16::round(tile);
        }
    }
    &packed[..tiles * mr * kb]
}

/// A linear layer with its weights packed in panels: `out = x · wᵀ + bias`, the encoders'
/// float32 layer. Products run in blocks of rows, each followed by its [`Then`] step while the
/// block is still in cache.
#[derive(Debug, Clone)]
pub(crate) struct PanelLinear {
    weights: Panels,
    bias: Vec<f32>,
    kernels: Kernels,
}

/// Rows per block of a [`PanelLinear`] product, about: a block of the widest output (a
/// feed-forward layer's 1536 columns for MiniLM) stays within the level-2 cache.
const BLOCK_ROWS: usize = 96;

impl PanelLinear {
    /// Packs a layer's weights for the best kernel this CPU has.
    pub fn new(linear: &Linear) -> Self {
        let w = linear.weight.to_f32();
        PanelLinear {
            weights: Panels::from_torch(&w, linear.inputs, linear.outputs),
            bias: linear.bias.clone(),
            kernels: Kernels::detect(),
        }
    }

    /// Packs a layer's weights rounded to `bf16` (half the memory, and half the bytes a
    /// one-row product streams); products round their inputs to `bf16` too and sum in `f32`
    /// (see the module docs).
    pub fn bf16(linear: &Linear) -> Self {
        let f32 = PanelLinear::new(linear);
        PanelLinear {
            weights: f32.weights.to_bf16(),
            kernels: Kernels::for_bf16(),
            ..f32
        }
    }

    /// Outputs per row.
    pub fn outputs(&self) -> usize {
        self.weights.n
    }

    /// Rows per parallel block for a product over `rows` rows: whole tiles of the kernel,
    /// about [`BLOCK_ROWS`], fewer when that would leave a thread idle.
    pub fn block_rows(&self, rows: usize) -> usize {
        let mr = tile_rows(self.kernels.isa);
        let per_thread = rows.div_ceil(threads());
        per_thread.min(BLOCK_ROWS).div_ceil(mr).max(1) * mr
    }

    /// `out (rows, outputs) = x (rows, inputs) · wᵀ + bias`, then `then`, in blocks of rows
    /// on the current rayon pool.
    pub fn forward(&self, x: &[f32], rows: usize, out: &mut [f32], then: Then<'_>) {
        let (k, n) = (self.weights.k, self.weights.n);
        assert!(
            x.len() >= rows * k && out.len() >= rows * n,
            "buffers too short"
        );
        if rows == 0 {
            return;
        }
        self.blocks(rows, out, |first, count, out| {
            self.forward_here(&x[first * k..(first + count) * k], count, out, then, first);
        });
    }

    /// Runs `f(first row, rows, their output)` over blocks of `out`'s `rows` rows, in parallel:
    /// at least one block per thread, about [`BLOCK_ROWS`] rows each, whole tiles of the
    /// kernel spread evenly over the blocks and the rows past the last whole tile in the last
    /// block (170 rows in two blocks of 84 and 86 rather than 98 and 72: a partial tile costs
    /// about its rows, a whole one 14 rows).
    fn blocks(&self, rows: usize, out: &mut [f32], f: impl Fn(usize, usize, &mut [f32]) + Sync) {
        let (mr, n) = (tile_rows(self.kernels.isa), self.weights.n);
        let (tiles, rest) = (rows / mr, rows % mr);
        let count = threads().max(rows.div_ceil(BLOCK_ROWS)).min(tiles.max(1));
        let mut parts = Vec::with_capacity(count);
        let (mut first, mut out) = (0, &mut out[..rows * n]);
        for b in 0..count {
            let mut len = (tiles / count + usize::from(b < tiles % count)) * mr;
            if b + 1 == count {
                len += rest;
            }
            let (mine, tail) = out.split_at_mut(len * n);
            parts.push((first, len, mine));
            (first, out) = (first + len, tail);
        }
        parts
            .into_par_iter()
            .for_each(|(first, len, out)| f(first, len, out));
    }

    /// The same on this thread, for rows that are rows `first..` of the whole output (where
    /// `then` finds their residual).
    pub fn forward_here(
        &self,
        x: &[f32],
        rows: usize,
        out: &mut [f32],
        then: Then<'_>,
        first: usize,
    ) {
        let (k, n) = (self.weights.k, self.weights.n);
        let a = Rows {
            data: x,
            rows,
            stride: k,
        };
        product(self.kernels, a, &self.weights, out, n, &self.bias, false);
        then.run(&mut out[..rows * n], first * n);
    }

    /// Inputs per row.
    pub fn inputs(&self) -> usize {
        self.weights.k
    }

    /// `out (rows, outputs) += x (rows, inputs) · wᵀ + bias`: the product adds into `out` (a
    /// residual stream) directly, in blocks of rows on the current rayon pool; one row goes
    /// through [`PanelLinear::gemv`].
    pub fn forward_add(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        let (k, n) = (self.weights.k, self.weights.n);
        assert!(
            x.len() >= rows * k && out.len() >= rows * n,
            "buffers too short"
        );
        if rows <= 1 {
            if rows == 1 {
                self.gemv(&x[..k], &mut out[..n], true);
            }
            return;
        }
        self.blocks(rows, out, |first, count, out| {
            let a = Rows {
                data: &x[first * k..],
                rows: count,
                stride: k,
            };
            product(self.kernels, a, &self.weights, out, n, &self.bias, true);
        });
    }

    /// One input row: `out = x · wᵀ + bias`, or `out += x · wᵀ + bias` when `accumulate` (a
    /// decode step). Bound by how fast the weights stream from memory: each panel is read
    /// once, in order, against `x` (which stays in the level-1 cache), panels split over the
    /// current rayon pool.
    ///
    /// Panics when `x` is not `inputs` long or `out` not `outputs` long.
    pub fn gemv(&self, x: &[f32], out: &mut [f32], accumulate: bool) {
        let (k, n) = (self.weights.k, self.weights.n);
        assert!(x.len() == k && out.len() == n, "gemv: shapes");
        match &self.weights.data {
            Values::F32(v) => self.gemv_on(v, x, out, accumulate),
            Values::Bf16(v) => with_scratch(&ROUNDED, |rounded| {
                rounded.clear();
                rounded.extend_from_slice(x);
                bf16::round(rounded);
                self.gemv_on(v, rounded, out, accumulate)
            }),
        }
    }

    /// [`PanelLinear::gemv`] over the panels' values `v`.
    fn gemv_on<T: PanelValue + Sync>(&self, v: &[T], x: &[f32], out: &mut [f32], accumulate: bool) {
        let len = self.weights.panel_len();
        // Panels per task: about 128 KB of weights each.
        let per = (32_768 / len.max(1)).max(1);
        out.par_chunks_mut(per * NR)
            .enumerate()
            .for_each(|(task, out)| {
                for (i, out) in out.chunks_mut(NR).enumerate() {
                    let p = task * per + i;
                    let sums = panel_sums(self.kernels.isa, &v[p * len..][..len], x);
                    let bias = &self.bias[p * NR..][..out.len()];
                    for ((o, s), b) in out.iter_mut().zip(sums).zip(bias) {
                        *o = if accumulate { *o + s + b } else { s + b };
                    }
                }
            });
    }
}

thread_local! {
    /// A one-row product's input rounded to `bf16` (the product over `bf16` panels).
    static ROUNDED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::noise;

    #[test]
    fn the_chosen_kernels_are_among_those_this_cpu_runs_and_stay_chosen() {
        assert!(!Kernels::detect().bf16_dot, "f32 panels need no bf16 tiles");
        let chosen = Kernels::for_bf16();
        assert!(Kernels::available().contains(&chosen), "{chosen:?}");
        assert_eq!(chosen.isa, Isa::detect());
        assert_eq!(Kernels::for_bf16(), chosen, "chosen once per process");
        // Without the dot-product tiles, widening; with them, timing decides.
        if Kernels::dot(chosen.isa).is_none() {
            assert!(!chosen.bf16_dot);
        }
    }

    /// The block sizes change how a product walks its operands and where its sums over `k`
    /// are split (a block's sum is added to the output), nothing else: every blocking agrees
    /// with the tuned one to float rounding, with every kernel, for f32 and bf16 panels.
    #[test]
    fn every_blocking_computes_the_same_product() {
        let (m, k, n) = (45, 700, 300);
        let a = noise(m * k, 5);
        let w = noise(n * k, 6);
        let bias = noise(n, 7);
        let rows = Rows {
            data: &a,
            rows: m,
            stride: k,
        };
        for b in [
            Panels::from_torch(&w, k, n),
            Panels::from_torch(&w, k, n).to_bf16(),
        ] {
            for kernels in Kernels::available() {
                let run = |blocking: Blocking| {
                    let mut out = vec![0.0; m * n];
                    product_in(blocking, kernels, rows, &b, &mut out, n, &bias, false);
                    out
                };
                let tuned = run(Blocking { kc: 256, nc: 1024 });
                for (kc, nc) in [(32, 64), (128, 256), (160, 512), (256, 512)] {
                    let got = run(Blocking { kc, nc });
                    let scale = tuned.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                    let worst = got
                        .iter()
                        .zip(&tuned)
                        .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
                    assert!(
                        worst < 1e-6 * scale,
                        "{kernels:?} kc {kc} nc {nc}: {worst:e}"
                    );
                }
                // Only the split of `k` moves sums: the groups of columns do not.
                assert_eq!(run(Blocking { kc: 256, nc: 64 }), tuned, "{kernels:?}");
            }
        }
    }

    /// Every kernel against a float64 product, over shapes with partial tiles, partial panels
    /// and several blocks of `k` (whose sums add up in `out`), with and without a bias; the
    /// output's columns past `n` are left alone.
    #[test]
    fn kernels_match_a_float64_product() {
        for isa in Isa::available() {
            for &(m, k, n) in &[
                (1, 1, 1),
                (6, 16, 16),
                (14, 32, 16),
                (15, 33, 17),
                (29, 300, 40),
                (7, 600, 48),
                (4, 40, 16),
                (11, 20, 32),
                (3, 0, 5),
            ] {
                let stride = k + 3;
                let a = noise(m * stride, 1);
                let w = noise(n * k, 2);
                let b = Panels::from_torch(&w, k, n);
                assert_eq!(b.to_torch(), w);
                let out_stride = n + 2;
                for bias in [vec![0.0; n], noise(n, 3)] {
                    let before = noise(m * out_stride, 4);
                    let mut out = before.clone();
                    let rows = Rows {
                        data: &a,
                        rows: m,
                        stride,
                    };
                    product(
                        Kernels::widening(isa),
                        rows,
                        &b,
                        &mut out,
                        out_stride,
                        &bias,
                        false,
                    );
                    for i in 0..m {
                        for j in 0..out_stride {
                            let got = out[i * out_stride + j];
                            if j >= n {
                                assert_eq!(got, before[i * out_stride + j], "{isa:?} wrote past n");
                                continue;
                            }
                            let want: f64 = bias[j] as f64
                                + (0..k)
                                    .map(|l| a[i * stride + l] as f64 * w[j * k + l] as f64)
                                    .sum::<f64>();
                            assert!(
                                (got as f64 - want).abs() < 1e-4 * (1.0 + (k as f64).sqrt()),
                                "{isa:?} {m}x{k}x{n} ({i}, {j}): {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// The vector kernels sum in the scalar kernel's order: equal to it up to the rounding
    /// that a fused multiply-add skips, which is none here (the scalar path fuses too).
    #[test]
    fn vector_kernels_equal_the_scalar_one() {
        let (m, k, n) = (31, 515, 35);
        let a = noise(m * k, 5);
        let b = Panels::from_fn(k, n, |l, j| ((l * 7 + j * 3) % 11) as f32 - 5.0);
        let rows = Rows {
            data: &a,
            rows: m,
            stride: k,
        };
        let mut want = vec![0.0; m * n];
        let portable = Kernels::widening(Isa::Portable);
        product(portable, rows, &b, &mut want, n, &vec![0.0; n], false);
        for isa in Isa::available() {
            let mut got = vec![0.0; m * n];
            product(
                Kernels::widening(isa),
                rows,
                &b,
                &mut got,
                n,
                &vec![0.0; n],
                false,
            );
            assert_eq!(got, want, "{isa:?}");
        }
    }

    /// A layer's blocks of rows, each with its residual and layer norm, equal the whole
    /// product followed by one pass of the same steps (over block boundaries too).
    #[test]
    fn linear_blocks_carry_their_residual_rows() {
        use crate::models::layers::kernels::{layer_norm_row, Act, Weight};
        let (inputs, outputs) = (40, 24);
        let linear = Linear {
            weight: Weight::F32(noise(inputs * outputs, 7)),
            bias: noise(outputs, 8),
            inputs,
            outputs,
        };
        let layer = PanelLinear::new(&linear);
        let (weight, bias) = (noise(outputs, 9), noise(outputs, 10));
        for rows in [1, 7, 250] {
            let x = noise(rows * inputs, 11);
            let residual = noise(rows * outputs, 12);
            let mut want = vec![0.0; rows * outputs];
            product(
                Kernels::widening(Isa::Portable),
                Rows {
                    data: &x,
                    rows,
                    stride: inputs,
                },
                &layer.weights,
                &mut want,
                outputs,
                &linear.bias,
                false,
            );
            let mut activated = want.clone();
            for (row, res) in want
                .chunks_exact_mut(outputs)
                .zip(residual.chunks_exact(outputs))
            {
                row.iter_mut().zip(res).for_each(|(v, r)| *v += r);
                layer_norm_row(row, &weight, &bias, 1e-5);
            }
            Act::Gelu.apply_here(&mut activated);
            let norm = Then::AddNorm {
                residual: &residual,
                weight: &weight,
                bias: &bias,
                eps: 1e-5,
            };
            for (then, want) in [(norm, &want), (Then::Activate(Act::Gelu), &activated)] {
                let mut got = vec![0.0; rows * outputs];
                layer.forward(&x, rows, &mut got, then);
                for (g, w) in got.iter().zip(want.iter()) {
                    assert!((g - w).abs() < 1e-4, "{rows} rows: {g} vs {w}");
                }
            }
        }
    }

    /// One row through every kernel's matrix-vector path, plain and accumulating, against a
    /// float64 product (a partial last panel, `k` not a multiple of the unrolling); and
    /// `forward_add` over many rows adds exactly what `forward` computes.
    #[test]
    fn gemv_and_forward_add_match_the_product() {
        use crate::models::layers::kernels::Weight;
        for &(inputs, outputs) in &[(1, 1), (515, 35), (64, 48), (3, 17)] {
            let w = noise(inputs * outputs, 21);
            let linear = Linear {
                weight: Weight::F32(w.clone()),
                bias: noise(outputs, 22),
                inputs,
                outputs,
            };
            let x = noise(inputs, 23);
            let want: Vec<f64> = (0..outputs)
                .map(|j| {
                    linear.bias[j] as f64
                        + (0..inputs)
                            .map(|l| x[l] as f64 * w[j * inputs + l] as f64)
                            .sum::<f64>()
                })
                .collect();
            let tolerance = 1e-4 * (1.0 + (inputs as f64).sqrt());
            for isa in Isa::available() {
                let layer = PanelLinear {
                    kernels: Kernels::widening(isa),
                    ..PanelLinear::new(&linear)
                };
                let mut out = vec![0.0; outputs];
                layer.gemv(&x, &mut out, false);
                let mut added = vec![1.0; outputs];
                layer.gemv(&x, &mut added, true);
                for j in 0..outputs {
                    assert!((out[j] as f64 - want[j]).abs() < tolerance, "{isa:?} {j}");
                    assert!(
                        (added[j] as f64 - 1.0 - want[j]).abs() < tolerance,
                        "{isa:?}"
                    );
                }
                for rows in [1, 7, 250] {
                    let xs = noise(rows * inputs, 24);
                    let mut want = vec![0.0; rows * outputs];
                    layer.forward(&xs, rows, &mut want, Then::Nothing);
                    let before = noise(rows * outputs, 25);
                    let mut got = before.clone();
                    layer.forward_add(&xs, rows, &mut got);
                    for ((g, w), b) in got.iter().zip(&want).zip(&before) {
                        assert!((g - (w + b)).abs() < 1e-5, "{isa:?} {rows} rows");
                    }
                }
            }
        }
    }

    /// A layer of `bf16` panels computes the `f32` product of its rounded weights and its
    /// inputs rounded to `bf16`: bit for bit on the widening kernels (over many rows, widened
    /// blocks; accumulating; one row, widened in registers), to rounding of the sums on the
    /// dot-product ones; with odd `k`, several blocks of `k` and partial tiles and panels.
    #[test]
    fn bf16_panels_compute_the_f32_product_of_rounded_values() {
        use crate::models::layers::kernels::Weight;
        for &(inputs, outputs, rows) in &[
            (515, 35, 31),
            (64, 48, 7),
            (3, 17, 2),
            (300, 16, 250),
            (1, 16, 15),
            (600, 32, 1),
        ] {
            let linear = Linear {
                weight: Weight::F32(noise(inputs * outputs, 31)),
                bias: noise(outputs, 32),
                inputs,
                outputs,
            };
            let half = PanelLinear::bf16(&linear);
            let rounded = Linear {
                weight: Weight::F32(half.weights.to_torch()),
                ..linear.clone()
            };
            assert_ne!(rounded.weight.to_f32(), linear.weight.to_f32());
            let x = noise(rows * inputs, 33);
            let mut x_rounded = x.clone();
            bf16::round(&mut x_rounded);
            assert_ne!(x, x_rounded);
            let tolerance = 1e-5 * (1.0 + (inputs as f32).sqrt());
            for kernels in Kernels::available() {
                let run = |l: &PanelLinear, x: &[f32]| {
                    let l = PanelLinear {
                        kernels,
                        ..l.clone()
                    };
                    let mut many = vec![0.0; rows * outputs];
                    l.forward(x, rows, &mut many, Then::Nothing);
                    let mut added = noise(rows * outputs, 34);
                    l.forward_add(x, rows, &mut added);
                    let mut one = vec![0.0; outputs];
                    l.gemv(&x[..inputs], &mut one, false);
                    [many, added, one]
                };
                let got = run(&half, &x);
                let want = run(&PanelLinear::new(&rounded), &x_rounded);
                if !kernels.bf16_dot {
                    assert_eq!(got, want, "{kernels:?} {inputs}x{outputs}");
                    continue;
                }
                for (g, w) in got.iter().flatten().zip(want.iter().flatten()) {
                    assert!(
                        (g - w).abs() <= tolerance,
                        "{kernels:?} {inputs}x{outputs}: {g} vs {w}"
                    );
                }
            }
        }
    }

    /// The paired layout: every value where `at` says, the padding row of an odd `k` zero,
    /// and a widened block equal to the `f32` rows of its values on every kernel.
    #[test]
    fn bf16_pairs_hold_the_rows_of_each_panel() {
        for (k, n) in [(1, 3), (5, 17), (64, 32)] {
            // Integers below 256 are exact in `bf16`.
            let value = |l: usize, j: usize| ((l % 16) * 16 + j % 16) as f32;
            let f32s = Panels::from_fn(k, n, value);
            let half = f32s.to_bf16();
            assert_eq!(half.to_torch(), f32s.to_torch());
            let Values::Bf16(v) = &half.data else {
                unreachable!()
            };
            assert_eq!(v.len(), n.div_ceil(NR) * half.panel_len());
            if k % 2 == 1 {
                for c in 0..NR {
                    assert_eq!(v[u16::at(k, c)], 0, "padding row");
                }
            }
            let block = half.block(0, 0, k);
            for isa in Isa::available() {
                let mut wide = Vec::new();
                widen(isa, &v[block.clone()], &mut wide);
                for l in 0..k {
                    for c in 0..NR.min(n) {
                        assert_eq!(wide[l * NR + c], value(l, c), "{isa:?}");
                    }
                }
            }
        }
    }
}
