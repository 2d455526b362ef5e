//! The integer dot-product kernels of the int8 layers (`models::layers::quant`).
//!
//! One kernel shape: up to eight rows of unsigned 8-bit activations times one panel of
//! [`NR`] columns of signed 8-bit weights, summed over `k` into 32-bit integers. The panel
//! layout is the one VNNI's `vpdpbusd` reads: per group of four `k`, 64 bytes holding four
//! consecutive weights of each of the 16 columns (column `c` at bytes `4c..4c + 4`), so one
//! 32-byte load carries 8 columns x 4 `k` and a broadcast of 4 activation bytes meets them.
//!
//! - AVX2: `vpmaddubsw` multiplies u8 x i8 and adds adjacent pairs into i16 *with
//!   saturation*; `vpmaddwd` against ones adds those pairs into i32. Weights are kept in
//!   `[-63, 63]` (see `models::layers::quant`), so a pair is at most `2 x 255 x 63 = 32130 < 32767`:
//!   the i16 step never saturates and the result is exact. The multiplies are what bound
//!   this kernel (two pipes on the CPUs measured), so a second AVX2 kernel
//!   ([`Isa::Avx2Pairs`]) adds two groups' pairs in i16 before one `vpmaddwd`, a quarter
//!   fewer multiplies, for activations in `[0, 127]`: a pair is then at most `2 x 127 x 63 =
//!   16002` and two pairs `32004`, still exact.
//! - AVX-VNNI / AVX-512 VNNI (256-bit, with VL): `vpdpbusd` does the same four-term product
//!   and accumulates in i32 in one instruction, without an i16 step. With AVX-512's 32
//!   registers the kernel takes eight rows, so each weight load feeds twice the products.
//! - AVX-512 VNNI on 512-bit vectors ([`Isa::Vnni512`]): a whole group (all 16 columns) in
//!   one register, one `vpdpbusd` per row and group where the 256-bit kernel needs two. Intel's
//!   server cores run a 512-bit `vpdpbusd` at about the rate of a 256-bit one (4.3 against 4.6
//!   billion a second on one core of the Sapphire Rapids class Xeon measured, independent
//!   chains on registers), so it is nearly twice the products there; AMD Zen 4 splits 512-bit
//!   vectors in two and measured it slower. [`Isa::detect`] times both once and keeps the
//!   faster: their sums are the same integers, so the choice never changes a result.
//! - Anything else: [`tile_scalar`], the same sums in plain integer arithmetic (also the
//!   reference the tests compare the vector kernels with, bit for bit).
//!
//! [`Isa`] values other than `Scalar` are only made by [`Isa::detect`] after the CPU reported
//! the features (and [`Isa::seven_bit`] from one of them), which is what makes calling the
//! `#[target_feature]` functions sound.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Rows per call of the widest kernel (the others take a divisor of it): parallel tasks
/// are cut in multiples of it.
pub(crate) const MR: usize = 8;
/// Columns per weight panel.
pub(crate) const NR: usize = 16;
/// Bytes per group of four `k` in a panel (`NR x 4`).
pub(crate) const GROUP: usize = NR * 4;

/// One group of a weight panel, aligned to a cache line (so the vector loads never split one).
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Group(pub [i8; GROUP]);

/// The 32-bit sums of one row against one panel.
pub(crate) type Sums = [i32; NR];

/// The instruction set the integer kernels use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isa {
    /// Plain integer arithmetic.
    Scalar,
    /// `vpmaddubsw` + `vpmaddwd` on 256-bit vectors, one group of four `k` a step.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// The same, two groups a step, their `vpmaddubsw` pairs added in i16 before one
    /// `vpmaddwd`: a quarter fewer multiplies, for activations up to 127.
    #[cfg(target_arch = "x86_64")]
    Avx2Pairs,
    /// `vpdpbusd` on 256-bit vectors (AVX-VNNI, or AVX-512 VNNI with VL).
    #[cfg(target_arch = "x86_64")]
    Vnni {
        /// Whether the AVX-512 encoding is the one present (else AVX-VNNI's VEX encoding).
        evex: bool,
    },
    /// `vpdpbusd` on 512-bit vectors (AVX-512 VNNI): a whole group a row in one instruction.
    #[cfg(target_arch = "x86_64")]
    Vnni512,
}

impl Isa {
    /// The best kernel this CPU runs (checked at run time, once) for 8-bit activations.
    pub(crate) fn detect() -> Isa {
        static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
        *ISA.get_or_init(Isa::detect_once)
    }

    fn detect_once() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if super::avx512_vnni() {
                return faster_vnni512();
            }
            if is_x86_feature_detected!("avxvnni") {
                return Isa::Vnni { evex: false };
            }
            if is_x86_feature_detected!("avx2") {
                return Isa::Avx2;
            }
        }
        Isa::Scalar
    }

    /// The largest weight magnitude this kernel takes (see the module notes): 63 for AVX2,
    /// whose `vpmaddubsw` adds two products into an i16 with saturation and whose kernel adds
    /// two of those (`2 x (2 x 127 x 63) = 32004` fits); 127 for the kernels that sum in i32
    /// (VNNI, scalar), which keeps one more bit of every weight.
    pub(crate) fn weight_max(self) -> f32 {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx2Pairs => 63.0,
            _ => 127.0,
        }
    }

    /// The faster kernel of this instruction set where it takes 7-bit activations only:
    /// [`Isa::Avx2Pairs`] for [`Isa::Avx2`], else the same kernel.
    pub(crate) fn seven_bit(self) -> Isa {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => Isa::Avx2Pairs,
            other => other,
        }
    }

    /// The largest activation code this kernel takes: 127 for [`Isa::Avx2Pairs`], which adds
    /// two groups' `vpmaddubsw` pairs in i16 before widening them (`2 x (2 x 127 x 63) =
    /// 32004` fits in an i16, with 255 it would not); 255 for the others.
    pub(crate) fn activation_max(self) -> u8 {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Pairs => 127,
            _ => 255,
        }
    }

    /// Its name, for reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Pairs => "avx2-pairs",
            #[cfg(target_arch = "x86_64")]
            Isa::Vnni { evex: true } => "avx512-vnni",
            #[cfg(target_arch = "x86_64")]
            Isa::Vnni { evex: false } => "avx-vnni",
            #[cfg(target_arch = "x86_64")]
            Isa::Vnni512 => "avx512-vnni-512",
        }
    }
}

/// Sums `rows` rows of `a` (row stride `stride`, at least `4 x panel.len()` bytes each)
/// against the panel into `out[..rows]`: `out[r][c] = Σ_k a[r][k] w[c][k]`, exact for
/// activations up to [`Isa::activation_max`] and weights within [`Isa::weight_max`] (beyond
/// them the AVX2 kernel's i16 sums may saturate).
///
/// Panics if the slices are too short (a bug in the caller).
pub(crate) fn tiles(
    isa: Isa,
    a: &[u8],
    stride: usize,
    rows: usize,
    panel: &[Group],
    out: &mut [Sums],
) {
    let k = panel.len() * 4;
    if rows == 0 {
        return;
    }
    assert!(out.len() >= rows, "output rows too few");
    assert!(
        stride >= k && a.len() >= (rows - 1) * stride + k,
        "activations too short"
    );
    match isa {
        Isa::Scalar => tiles_scalar(a, stride, rows, panel, out),
        // SAFETY (all five): an `Isa::Avx2` / `Isa::Vnni` / `Isa::Vnni512` is only made by
        // `Isa::detect` on a CPU with those features (AVX2; AVX-512 VNNI + VL for `evex` and
        // `Vnni512`, else AVX-VNNI), and an `Isa::Avx2Pairs` only by `Isa::seven_bit` from an
        // `Isa::Avx2`; the asserts above keep every activation read (rows x k bytes at
        // `stride`) inside `a` and every write inside `out`, and the panel reads cover `panel`
        // exactly.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { tiles_avx2(a.as_ptr(), stride, rows, panel, out) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Pairs => unsafe { tiles_avx2_pairs(a.as_ptr(), stride, rows, panel, out) },
        #[cfg(target_arch = "x86_64")]
        Isa::Vnni { evex: true } => unsafe { tiles_vnni512(a.as_ptr(), stride, rows, panel, out) },
        #[cfg(target_arch = "x86_64")]
        Isa::Vnni { evex: false } => unsafe { tiles_avxvnni(a.as_ptr(), stride, rows, panel, out) },
        #[cfg(target_arch = "x86_64")]
        Isa::Vnni512 => unsafe { tiles_vnni_zmm(a.as_ptr(), stride, rows, panel, out) },
    }
}

/// [`Isa::Vnni512`] where it runs a layer's product at least 10 % faster than the 256-bit
/// AVX-512 VNNI kernel, else that one; timed once, on one thread, on a block of the shape the
/// encoders run (64 rows, 384 inputs, 8 panels; well under a millisecond a kernel), the best
/// of five runs each. Both give the same sums, so a close call only costs time.
///
/// Only called where [`super::avx512_vnni`] said the CPU has AVX-512 VNNI and VL.
#[cfg(target_arch = "x86_64")]
fn faster_vnni512() -> Isa {
    let (rows, groups, panels) = (64usize, 96usize, 8usize);
    let k = groups * 4;
    let a: Vec<u8> = (0..rows * k).map(|i| (i * 37 % 251) as u8).collect();
    let panel: Vec<Group> = (0..panels * groups)
        .map(|g| {
            let mut w = [0i8; GROUP];
            for (i, v) in w.iter_mut().enumerate() {
                *v = ((g * 31 + i * 7) % 255) as i8;
            }
            Group(w)
        })
        .collect();
    let mut out = vec![[0i32; NR]; rows];
    let mut best = |isa: Isa| {
        super::shortest_run(5, || {
            for p in panel.chunks_exact(groups) {
                tiles(isa, &a, k, rows, p, &mut out);
            }
        })
    };
    let (narrow, wide) = (best(Isa::Vnni { evex: true }), best(Isa::Vnni512));
    let pays = wide.as_secs_f64() * 1.1 < narrow.as_secs_f64();
    tracing::debug!(
        ?narrow,
        ?wide,
        "int8 products on {}-bit vectors",
        if pays { 512 } else { 256 }
    );
    match pays {
        true => Isa::Vnni512,
        false => Isa::Vnni { evex: true },
    }
}

/// Defines `$name`, which runs the `R`-row kernel `$tile` over all rows, `$rows` at a time,
/// then the remainder (one of `$rest`).
macro_rules! row_loop {
    ($name:ident, $tile:ident, $features:literal, $rows:literal, [$($rest:literal),*]) => {
        /// Every row, a whole kernel's rows at a time, then the remainder.
        ///
        /// # Safety
        /// The CPU must have the features named; rows `0..rows` of `a` must hold
        /// `4 x panel.len()` readable bytes each at row stride `stride`; `out.len() >= rows`.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        unsafe fn $name(
            a: *const u8,
            stride: usize,
            rows: usize,
            panel: &[Group],
            out: &mut [Sums],
        ) {
            let mut r = 0;
            // SAFETY: every call reads rows r..r + R < rows of `a` and writes out[r..r + R].
            unsafe {
                while r + $rows <= rows {
                    $tile::<$rows>(a.add(r * stride), stride, panel, &mut out[r..r + $rows]);
                    r += $rows;
                }
                let rest = &mut out[r..rows];
                match rows - r {
                    $($rest => $tile::<$rest>(a.add(r * stride), stride, panel, rest),)*
                    _ => {}
                }
            }
        }
    };
}

// AVX2 and AVX-VNNI have 16 vector registers: four rows (8 accumulators, 2 weight vectors, a
// broadcast). AVX-512 has 32: eight rows, so each weight load feeds twice the products (the
// 512-bit kernel: 16 accumulators, each row's two groups of a step in sums of their own).
row_loop!(tiles_avx2, tile_avx2, "avx2", 4, [1, 2, 3]);
row_loop!(tiles_avx2_pairs, tile_avx2_pairs, "avx2", 4, [1, 2, 3]);
row_loop!(tiles_avxvnni, tile_avxvnni, "avx2,avxvnni", 4, [1, 2, 3]);
row_loop!(
    tiles_vnni512,
    tile_vnni512,
    "avx2,avx512f,avx512vl,avx512vnni",
    8,
    [1, 2, 3, 4, 5, 6, 7]
);
row_loop!(
    tiles_vnni_zmm,
    tile_vnni_zmm,
    "avx512f,avx512vnni",
    8,
    [1, 2, 3, 4, 5, 6, 7]
);

/// AVX-512 VNNI kernel on 512-bit vectors for `R` rows: a group's 64 bytes are one register
/// (column `c`'s four weights in lane `c`), met by a broadcast of the row's four activations
/// in one `vpdpbusd`. Two groups a step, each into accumulators of its own, added at the
/// end: 2 x `R` independent sums cover the instruction's latency (five cycles, two a cycle)
/// where `R` alone would not.
///
/// # Safety
/// The CPU must have AVX-512 VNNI; rows `0..R` of `a` must hold `4 x panel.len()` readable
/// bytes each at row stride `stride`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn tile_vnni_zmm<const R: usize>(
    a: *const u8,
    stride: usize,
    panel: &[Group],
    out: &mut [Sums],
) {
    #[inline(always)]
    unsafe fn spread(a: *const u8, stride: usize, r: usize, g: usize) -> __m512i {
        // SAFETY: the caller guarantees the four bytes are readable; the read is unaligned.
        unsafe { _mm512_set1_epi32((a.add(r * stride + g * 4) as *const i32).read_unaligned()) }
    }
    #[inline(always)]
    unsafe fn whole(group: &Group) -> __m512i {
        // SAFETY: a group is 64 bytes aligned to 64: one aligned 64-byte load.
        unsafe { _mm512_load_si512(group.0.as_ptr() as *const __m512i) }
    }
    let mut even = [_mm512_setzero_si512(); R];
    let mut odd = [_mm512_setzero_si512(); R];
    let pairs = panel.chunks_exact(2);
    let last = pairs.remainder();
    for (p, two) in pairs.enumerate() {
        let g = 2 * p;
        // SAFETY: groups are 64 aligned bytes; rows 0..R hold groups g and g + 1.
        unsafe {
            let (w0, w1) = (whole(&two[0]), whole(&two[1]));
            for r in 0..R {
                even[r] = _mm512_dpbusd_epi32(even[r], spread(a, stride, r, g), w0);
                odd[r] = _mm512_dpbusd_epi32(odd[r], spread(a, stride, r, g + 1), w1);
            }
        }
    }
    if let [group] = last {
        let g = panel.len() - 1;
        // SAFETY: as above, for the last group.
        unsafe {
            let w = whole(group);
            for (r, sums) in even.iter_mut().enumerate() {
                *sums = _mm512_dpbusd_epi32(*sums, spread(a, stride, r, g), w);
            }
        }
    }
    for ((row, e), o) in out.iter_mut().zip(&even).zip(&odd) {
        // SAFETY: a row of `out` is 16 i32, one unaligned 64-byte store.
        unsafe { _mm512_storeu_si512(row.as_mut_ptr() as *mut __m512i, _mm512_add_epi32(*e, *o)) }
    }
}

/// The reference kernel: the same sums in plain integer arithmetic.
pub(crate) fn tiles_scalar(
    a: &[u8],
    stride: usize,
    rows: usize,
    panel: &[Group],
    out: &mut [Sums],
) {
    for (r, acc) in out.iter_mut().enumerate().take(rows) {
        let row = &a[r * stride..];
        *acc = [0; NR];
        for (g, group) in panel.iter().enumerate() {
            let x = &row[g * 4..g * 4 + 4];
            for (c, sum) in acc.iter_mut().enumerate() {
                let w = &group.0[c * 4..c * 4 + 4];
                *sum += x
                    .iter()
                    .zip(w)
                    .map(|(&x, &w)| x as i32 * w as i32)
                    .sum::<i32>();
            }
        }
    }
}

/// The four activation bytes of row `r` at group `g`, broadcast to every 32-bit lane.
///
/// # Safety
/// `a + r * stride + 4 g .. + 4` must be readable.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn broadcast(a: *const u8, stride: usize, r: usize, g: usize) -> __m256i {
    // SAFETY: the caller guarantees the four bytes are readable; the read is unaligned.
    unsafe { _mm256_set1_epi32((a.add(r * stride + g * 4) as *const i32).read_unaligned()) }
}

/// Stores the accumulators of `R` rows into `out`.
///
/// # Safety
/// Needs AVX (implied by the callers' features).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn store<const R: usize>(acc: &[[__m256i; 2]; R], out: &mut [Sums]) {
    for (row, sums) in out.iter_mut().zip(acc) {
        // SAFETY: each row of `out` holds 16 i32 = two 32-byte stores, unaligned allowed.
        unsafe {
            _mm256_storeu_si256(row.as_mut_ptr() as *mut __m256i, sums[0]);
            _mm256_storeu_si256(row.as_mut_ptr().add(8) as *mut __m256i, sums[1]);
        }
    }
}

/// AVX2 kernel for `R` rows, two groups a step ([`Isa::Avx2Pairs`]).
///
/// Both groups' `vpmaddubsw` pairs are added in i16 before one `vpmaddwd` widens them: three
/// multiplies for 64 products where a group at a time takes four, and the two multiply pipes
/// are what bound this kernel. Exact because activations are at most 127 on AVX2
/// ([`Isa::activation_max`]): `2 x (2 x 127 x 63) = 32004 < 32767`.
///
/// # Safety
/// The CPU must have AVX2; rows `0..R` of `a` must hold `4 x panel.len()` readable bytes each
/// at row stride `stride`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn tile_avx2_pairs<const R: usize>(
    a: *const u8,
    stride: usize,
    panel: &[Group],
    out: &mut [Sums],
) {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_si256(); 2]; R];
    let (pairs, last) = panel.as_chunks::<2>();
    for (p, [first, second]) in pairs.iter().enumerate() {
        // SAFETY: a group is 64 aligned bytes: two aligned 32-byte loads each.
        let (u, v) = unsafe { (halves(first), halves(second)) };
        for (r, sums) in acc.iter_mut().enumerate() {
            // SAFETY: r < R and 2p + 1 < panel.len(), inside what the caller guarantees.
            let (x, y) = unsafe {
                (
                    broadcast(a, stride, r, 2 * p),
                    broadcast(a, stride, r, 2 * p + 1),
                )
            };
            for (c, sum) in sums.iter_mut().enumerate() {
                let pairs =
                    _mm256_add_epi16(_mm256_maddubs_epi16(x, u[c]), _mm256_maddubs_epi16(y, v[c]));
                *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(pairs, ones));
            }
        }
    }
    if let [group] = last {
        // SAFETY: the last group, g < panel.len().
        unsafe { group_avx2(&mut acc, a, stride, panel.len() - 1, group) }
    }
    // SAFETY: AVX2 implies AVX.
    unsafe { store(&acc, out) }
}

/// AVX2 kernel for `R` rows, one group a step ([`Isa::Avx2`]).
///
/// # Safety
/// The CPU must have AVX2; rows `0..R` of `a` must hold `4 x panel.len()` readable bytes each
/// at row stride `stride`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn tile_avx2<const R: usize>(
    a: *const u8,
    stride: usize,
    panel: &[Group],
    out: &mut [Sums],
) {
    let mut acc = [[_mm256_setzero_si256(); 2]; R];
    for (g, group) in panel.iter().enumerate() {
        // SAFETY: g < panel.len(), inside what the caller guarantees.
        unsafe { group_avx2(&mut acc, a, stride, g, group) }
    }
    // SAFETY: AVX2 implies AVX.
    unsafe { store(&acc, out) }
}

/// Group `g` of `R` rows into their sums: u8 x i8 pairs into i16 by `vpmaddubsw` (exact:
/// a pair is at most `2 x 255 x 63`), then pairs of those into i32 by `vpmaddwd`.
///
/// # Safety
/// Needs AVX2 (inlined into the kernels that enable it); rows `0..R` of `a` must hold the
/// group's four bytes at `4 g` (row stride `stride`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn group_avx2<const R: usize>(
    acc: &mut [[__m256i; 2]; R],
    a: *const u8,
    stride: usize,
    g: usize,
    group: &Group,
) {
    let ones = _mm256_set1_epi16(1);
    // SAFETY: the caller has AVX2 and guarantees the reads.
    unsafe {
        let w = halves(group);
        for (r, sums) in acc.iter_mut().enumerate() {
            let x = broadcast(a, stride, r, g);
            for (sum, w) in sums.iter_mut().zip(w) {
                let pairs = _mm256_maddubs_epi16(x, w);
                *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(pairs, ones));
            }
        }
    }
}

/// A group's two 32-byte halves: columns 0-7 and 8-15.
///
/// # Safety
/// Needs AVX (implied by the callers' features).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn halves(group: &Group) -> [__m256i; 2] {
    // SAFETY: a group is 64 bytes aligned to 64: two aligned 32-byte loads.
    unsafe {
        let p = group.0.as_ptr() as *const __m256i;
        [_mm256_load_si256(p), _mm256_load_si256(p.add(1))]
    }
}

/// AVX-VNNI kernel for `R` rows.
///
/// # Safety
/// As [`tile_avx2`], with AVX-VNNI instead of AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avxvnni")]
unsafe fn tile_avxvnni<const R: usize>(
    a: *const u8,
    stride: usize,
    panel: &[Group],
    out: &mut [Sums],
) {
    let mut acc = [[_mm256_setzero_si256(); 2]; R];
    for (g, group) in panel.iter().enumerate() {
        // SAFETY: a group is 64 aligned bytes.
        let [w0, w1] = unsafe { halves(group) };
        for (r, sums) in acc.iter_mut().enumerate() {
            // SAFETY: as in `tile_avx2`.
            let x = unsafe { broadcast(a, stride, r, g) };
            sums[0] = _mm256_dpbusd_avx_epi32(sums[0], x, w0);
            sums[1] = _mm256_dpbusd_avx_epi32(sums[1], x, w1);
        }
    }
    // SAFETY: AVX-VNNI implies AVX.
    unsafe { store(&acc, out) }
}

/// AVX-512 VNNI kernel (256-bit vectors, VL) for `R` rows.
///
/// # Safety
/// As [`tile_avx2`], with AVX-512 VNNI and VL instead of AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
unsafe fn tile_vnni512<const R: usize>(
    a: *const u8,
    stride: usize,
    panel: &[Group],
    out: &mut [Sums],
) {
    let mut acc = [[_mm256_setzero_si256(); 2]; R];
    for (g, group) in panel.iter().enumerate() {
        // SAFETY: a group is 64 aligned bytes.
        let [w0, w1] = unsafe { halves(group) };
        for (r, sums) in acc.iter_mut().enumerate() {
            // SAFETY: as in `tile_avx2`.
            let x = unsafe { broadcast(a, stride, r, g) };
            sums[0] = _mm256_dpbusd_epi32(sums[0], x, w0);
            sums[1] = _mm256_dpbusd_epi32(sums[1], x, w1);
        }
    }
    // SAFETY: AVX-512 implies AVX.
    unsafe { store(&acc, out) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift), so the test needs no crate.
    fn rng(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    /// Every kernel this CPU can run, whether or not the build lets `Isa::detect` pick it
    /// (the AVX-512 one is tested without the `avx512` feature too).
    fn available() -> Vec<Isa> {
        #[allow(unused_mut)]
        let mut isas = vec![Isa::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") {
                isas.extend([Isa::Avx2, Isa::Avx2Pairs]);
            }
            if is_x86_feature_detected!("avxvnni") {
                isas.push(Isa::Vnni { evex: false });
            }
            if is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl") {
                isas.extend([Isa::Vnni { evex: true }, Isa::Vnni512]);
            }
        }
        eprintln!("int8 kernels tested: {:?}", isas);
        isas
    }

    /// Every vector kernel this CPU has gives exactly the scalar sums, on random data at the
    /// extremes of both ranges (activations `0..=activation_max`, weights -63..=63), for
    /// every row count up to a few kernel blocks and a remainder, and for odd and even
    /// numbers of groups (the paired AVX2 kernel's last group alone).
    #[test]
    fn vector_kernels_match_the_scalar_kernel() {
        const ROWS: usize = 3 * MR - 1;
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for groups in [1usize, 3, 96, 384] {
            let k = groups * 4;
            let stride = k + 8;
            let a: Vec<u8> = (0..ROWS * stride)
                .map(|i| match i % 7 {
                    0 => 255,
                    1 => 0,
                    _ => rng(&mut seed) as u8,
                })
                .collect();
            let panel: Vec<Group> = (0..groups)
                .map(|g| {
                    let mut w = [0i8; GROUP];
                    for (i, v) in w.iter_mut().enumerate() {
                        *v = match (g + i) % 5 {
                            0 => 63,
                            1 => -63,
                            _ => (rng(&mut seed) % 127) as i8 - 63,
                        };
                    }
                    Group(w)
                })
                .collect();
            for rows in 1..=ROWS {
                let mut want = vec![[0; NR]; ROWS];
                tiles_scalar(&a, stride, rows, &panel, &mut want);
                // A naive check of the reference itself.
                let naive: i32 = (0..k)
                    .map(|kk| a[kk] as i32 * panel[kk / 4].0[kk % 4] as i32)
                    .sum();
                assert_eq!(want[0][0], naive);
                for isa in available() {
                    // The activations at this kernel's extremes.
                    let top = isa.activation_max();
                    let a: Vec<u8> = a.iter().map(|&v| v.min(top)).collect();
                    let mut want = vec![[0; NR]; ROWS];
                    tiles_scalar(&a, stride, rows, &panel, &mut want);
                    let mut got = vec![[0; NR]; ROWS];
                    tiles(isa, &a, stride, rows, &panel, &mut got);
                    assert_eq!(
                        got[..rows],
                        want[..rows],
                        "{} rows={rows} k={k}",
                        isa.name()
                    );
                }
            }
        }
        // Every activation at the top and every weight at 63 or -63 at once: the largest
        // i16 sums the kernels make.
        for w in [63i8, -63] {
            let panel = vec![Group([w; GROUP]); 96];
            for isa in available() {
                let a = vec![isa.activation_max(); MR * 96 * 4];
                let mut got = vec![[0; NR]; MR];
                tiles(isa, &a, 96 * 4, MR, &panel, &mut got);
                let want = isa.activation_max() as i32 * w as i32 * 96 * 4;
                assert_eq!(got, vec![[want; NR]; MR], "{} at the extremes", isa.name());
            }
        }
    }
}
