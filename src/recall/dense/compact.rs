//! The compact copy of the vectors that a [`VectorStorage::F16`] or [`VectorStorage::Int8`]
//! index scans: f16 bits, or int8 codes with one scale per vector.

use std::str::FromStr;

use crate::{Error, Result};

/// How a [`DenseIndex`](super::DenseIndex) stores the vectors it scans.
///
/// The f32 vectors are always kept: they are what [`DenseIndex::vector`](super::DenseIndex::vector)
/// and the [`VectorSource`](crate::rerankers::VectorSource) return, and the exact scores. A
/// compact storage adds a second, smaller copy that the query scans instead; the scan keeps the
/// best `k x rescore` rows (at least `k`), and those are rescored with the f32 vectors, so the
/// returned scores are exact f32 cosines and only the choice of candidates is approximate.
///
/// | storage | bytes per vector of `d` dimensions | bytes scanned per vector |
/// |---|---|---|
/// | `F32` | `4 d` | `4 d` |
/// | `F16` | `4 d + 2 d` | `2 d` |
/// | `Int8` | `4 d + d + 4` | `d` |
///
/// A compact storage thus costs more memory in all (1.5x or about 1.25x) and reads half or a
/// quarter of the bytes per query, which is what an exhaustive scan over many vectors is
/// bound by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VectorStorage {
    /// f32 vectors only, scanned exactly (the default).
    #[default]
    F32,
    /// An f16 copy (IEEE half precision, rounded to nearest even) is scanned against the f32
    /// query; the best `k x rescore` rows are rescored with the f32 vectors.
    F16 {
        /// Candidates per result kept by the scan (`0` counts as `1`).
        rescore: usize,
    },
    /// An int8 copy is scanned: each vector is stored as codes in `-127..=127` times one scale
    /// (its largest absolute component / 127; per vector, so adding or removing documents never
    /// re-quantizes the others), the query is quantized the same way, and the scan takes integer
    /// dot products. The best `k x rescore` rows are rescored with the f32 vectors.
    Int8 {
        /// Candidates per result kept by the scan (`0` counts as `1`).
        rescore: usize,
    },
}

impl VectorStorage {
    /// The default `rescore` of [`VectorStorage::F16`] (f16 loses little: 11 significant bits).
    pub const DEFAULT_F16_RESCORE: usize = 4;
    /// The default `rescore` of [`VectorStorage::Int8`].
    pub const DEFAULT_INT8_RESCORE: usize = 8;

    /// [`VectorStorage::F16`] with [`VectorStorage::DEFAULT_F16_RESCORE`].
    pub const fn f16() -> Self {
        VectorStorage::F16 {
            rescore: Self::DEFAULT_F16_RESCORE,
        }
    }

    /// [`VectorStorage::Int8`] with [`VectorStorage::DEFAULT_INT8_RESCORE`].
    pub const fn int8() -> Self {
        VectorStorage::Int8 {
            rescore: Self::DEFAULT_INT8_RESCORE,
        }
    }

    /// `"f32"`, `"f16"` or `"int8"`.
    pub fn name(&self) -> &'static str {
        match self {
            VectorStorage::F32 => "f32",
            VectorStorage::F16 { .. } => "f16",
            VectorStorage::Int8 { .. } => "int8",
        }
    }

    /// How many rows the scan keeps for a top `k`: `k` for `F32`, else `k x rescore` (at least
    /// `k`, saturating).
    pub fn candidates(&self, k: usize) -> usize {
        match *self {
            VectorStorage::F32 => k,
            VectorStorage::F16 { rescore } | VectorStorage::Int8 { rescore } => {
                k.saturating_mul(rescore.max(1))
            }
        }
    }

    /// Bytes held per vector of `dim` dimensions: the f32 vector plus the compact copy.
    pub fn bytes_per_vector(&self, dim: usize) -> usize {
        4 * dim
            + match self {
                VectorStorage::F32 => 0,
                VectorStorage::F16 { .. } => 2 * dim,
                VectorStorage::Int8 { .. } => dim + 4,
            }
    }
}

impl FromStr for VectorStorage {
    type Err = Error;

    /// `f32`, `f16` or `int8` (default `rescore`), or `f16:R` / `int8:R` with `rescore` R.
    fn from_str(s: &str) -> Result<Self> {
        let (kind, rescore) = match s.split_once(':') {
            Some((kind, r)) => {
                let r: usize = r.trim().parse().map_err(|_| {
                    Error::InvalidInput(format!("vector storage {s:?}: rescore must be a count"))
                })?;
                (kind.trim(), Some(r))
            }
            None => (s.trim(), None),
        };
        match (kind.to_ascii_lowercase().as_str(), rescore) {
            ("f32", None) => Ok(VectorStorage::F32),
            ("f16", r) => Ok(VectorStorage::F16 {
                rescore: r.unwrap_or(Self::DEFAULT_F16_RESCORE),
            }),
            ("int8" | "i8", r) => Ok(VectorStorage::Int8 {
                rescore: r.unwrap_or(Self::DEFAULT_INT8_RESCORE),
            }),
            _ => Err(Error::InvalidInput(format!(
                "vector storage {s:?}: expected f32, f16, int8, f16:RESCORE or int8:RESCORE"
            ))),
        }
    }
}

/// The compact copy, row-major and aligned with the f32 matrix.
#[derive(Default)]
pub(super) enum Compact {
    /// No copy ([`VectorStorage::F32`]).
    #[default]
    None,
    /// f16 bits, `dim` per row.
    F16(Vec<u16>),
    /// int8 codes, `dim` per row, and one scale per row.
    Int8 { codes: Vec<i8>, scales: Vec<f32> },
}

impl Compact {
    /// An empty copy for `storage`.
    pub(super) fn new(storage: VectorStorage) -> Self {
        match storage {
            VectorStorage::F32 => Compact::None,
            VectorStorage::F16 { .. } => Compact::F16(Vec::new()),
            VectorStorage::Int8 { .. } => Compact::Int8 {
                codes: Vec::new(),
                scales: Vec::new(),
            },
        }
    }

    /// The copy of the rows of `matrix` (`dim` columns) for `storage`.
    pub(super) fn build(storage: VectorStorage, matrix: &[f32], dim: usize) -> Self {
        let mut c = Compact::new(storage);
        if let Some(rows) = matrix.len().checked_div(dim) {
            c.reserve(rows, dim);
            for row in matrix.chunks_exact(dim) {
                c.push(row);
            }
        }
        c
    }

    /// Room for `rows` more rows.
    pub(super) fn reserve(&mut self, rows: usize, dim: usize) {
        match self {
            Compact::None => {}
            Compact::F16(bits) => bits.reserve(rows.saturating_mul(dim)),
            Compact::Int8 { codes, scales } => {
                codes.reserve(rows.saturating_mul(dim));
                scales.reserve(rows);
            }
        }
    }

    /// Appends the compact form of one row.
    pub(super) fn push(&mut self, row: &[f32]) {
        match self {
            Compact::None => {}
            Compact::F16(bits) => bits.extend(row.iter().map(|&x| f32_to_f16(x))),
            Compact::Int8 { codes, scales } => scales.push(quantize(row, codes)),
        }
    }

    /// Removes row `row` (of `dim` columns), keeping the order of the others.
    pub(super) fn remove(&mut self, row: usize, dim: usize) {
        match self {
            Compact::None => {}
            Compact::F16(bits) => {
                bits.drain(row * dim..(row + 1) * dim);
            }
            Compact::Int8 { codes, scales } => {
                codes.drain(row * dim..(row + 1) * dim);
                scales.remove(row);
            }
        }
    }

    /// Bytes held by the copy (its length, not its capacity).
    pub(super) fn bytes(&self) -> usize {
        match self {
            Compact::None => 0,
            Compact::F16(bits) => 2 * bits.len(),
            Compact::Int8 { codes, scales } => codes.len() + 4 * scales.len(),
        }
    }
}

/// Appends the int8 codes of `row` to `codes` and returns its scale: `row[i]` is about
/// `codes[i] x scale`, codes in `-127..=127` (never -128, which the SIMD kernels need),
/// `scale = max |row[i]| / 127`. A row of zeros has scale 0; a row with a NaN or infinite
/// component has a NaN scale (so it scores NaN, ranked last, as the f32 scan ranks it).
pub(super) fn quantize(row: &[f32], codes: &mut Vec<i8>) -> f32 {
    let amax = row.iter().fold(0f32, |m, x| m.max(x.abs()));
    if !amax.is_finite() || row.iter().any(|x| !x.is_finite()) {
        codes.extend(std::iter::repeat_n(0, row.len()));
        return f32::NAN;
    }
    if amax == 0.0 {
        codes.extend(std::iter::repeat_n(0, row.len()));
        return 0.0;
    }
    let inv = 127.0 / amax;
    codes.extend(
        row.iter()
            .map(|&x| (x * inv).round().clamp(-127.0, 127.0) as i8),
    );
    amax / 127.0
}

// f16 conversion by hand: the `half` crate is only a dependency of the `models` feature, and
// the model-free core needs just these two functions (the scan itself converts with F16C or
// AVX-512 instructions where the CPU has them; these are the portable path and the encoder).

/// The IEEE binary16 bits nearest to `x` (ties to even; overflow to infinity; NaN stays a
/// quiet NaN), as F16C's `vcvtps2ph` with round-to-nearest computes them.
pub(super) fn f32_to_f16(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        // infinity, or NaN (quiet, upper payload bits kept)
        let nan = if man != 0 {
            0x200 | (man >> 13) as u16
        } else {
            0
        };
        return sign | 0x7c00 | nan;
    }
    // the exponent re-biased for f16 (bias 15 instead of 127)
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        // a subnormal f16 (or zero): units of 2^-24
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32; // 14..=24
        let h = m >> shift;
        let rem = m & ((1 << shift) - 1);
        let halfway = 1 << (shift - 1);
        let h = if rem > halfway || (rem == halfway && h & 1 == 1) {
            h + 1
        } else {
            h
        };
        return sign | h as u16;
    }
    let h = ((e as u32) << 10) | (man >> 13);
    let rem = man & 0x1fff;
    // rounding up may carry into the exponent, up to infinity: both are the right bits
    let h = if rem > 0x1000 || (rem == 0x1000 && h & 1 == 1) {
        h + 1
    } else {
        h
    };
    sign | h as u16
}

/// The f32 value of IEEE binary16 bits (exact).
#[inline(always)]
pub(super) fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match exp {
        0 if man == 0 => sign,
        0 => {
            // subnormal: man x 2^-24, exact in f32
            let v = man as f32 * (1.0 / 16_777_216.0);
            return if sign != 0 { -v } else { v };
        }
        0x1f => sign | 0x7f80_0000 | (man << 13),
        _ => sign | ((exp + 112) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn f16_round_trips_every_value() {
        for h in 0..=u16::MAX {
            let x = f16_to_f32(h);
            if x.is_nan() {
                assert!(f32_to_f16(x) & 0x7c00 == 0x7c00 && f32_to_f16(x) & 0x3ff != 0);
            } else {
                assert_eq!(f32_to_f16(x), h, "{h:#x} {x}");
            }
        }
    }

    #[test]
    fn f16_known_values() {
        assert_eq!(f32_to_f16(1.0), 0x3c00);
        assert_eq!(f32_to_f16(-2.0), 0xc000);
        assert_eq!(f32_to_f16(65504.0), 0x7bff);
        assert_eq!(f32_to_f16(65520.0), 0x7c00); // rounds up to infinity
        assert_eq!(f32_to_f16(1e-8), 0); // below half the smallest subnormal
        assert_eq!(f32_to_f16(2f32.powi(-24)), 1);
        assert_eq!(f32_to_f16(-0.0), 0x8000);
        assert_eq!(f32_to_f16(f32::INFINITY), 0x7c00);
        assert_eq!(f16_to_f32(0x3555), 0.333_251_95);
        // ties to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00);
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
    }

    /// F16C's conversion (round to nearest even), where the CPU has it.
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    fn hardware_f16(x: f32) -> Option<u16> {
        #[target_feature(enable = "f16c")]
        unsafe fn convert(x: f32) -> u16 {
            use std::arch::x86_64::*;
            let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set1_ps(x));
            _mm_extract_epi16::<0>(h) as u16
        }
        // SAFETY: called only after the CPU reported F16C.
        std::arch::is_x86_feature_detected!("f16c").then(|| unsafe { convert(x) })
    }

    proptest! {
        #[test]
        fn f16_encoding_matches_the_hardware(bits in any::<u32>()) {
            let x = f32::from_bits(bits);
            #[cfg(target_arch = "x86_64")]
            if let Some(h) = hardware_f16(x) {
                prop_assert_eq!(f32_to_f16(x), h, "{:#x}", bits);
            }
            // and it is the nearest: no f16 lies strictly closer
            let h = f32_to_f16(x);
            if x.is_finite() && x.abs() < 65504.0 {
                let y = f64::from(f16_to_f32(h));
                let err = (y - f64::from(x)).abs();
                for n in [h.wrapping_add(1), h.wrapping_sub(1)] {
                    let z = f64::from(f16_to_f32(n));
                    if z.is_finite() {
                        prop_assert!(err <= (z - f64::from(x)).abs());
                    }
                }
            }
        }

        #[test]
        fn int8_codes_reconstruct_the_row(row in prop::collection::vec(-1f32..1f32, 1..100)) {
            let mut codes = Vec::new();
            let scale = quantize(&row, &mut codes);
            prop_assert_eq!(codes.len(), row.len());
            prop_assert!(codes.iter().all(|&c| c != -128));
            for (&x, &c) in row.iter().zip(&codes) {
                prop_assert!((f32::from(c) * scale - x).abs() <= scale * 0.5 + 1e-7);
            }
        }
    }

    #[test]
    fn int8_zero_and_bad_rows() {
        let mut codes = Vec::new();
        assert_eq!(quantize(&[0.0, 0.0], &mut codes), 0.0);
        assert!(quantize(&[1.0, f32::NAN], &mut codes).is_nan());
        assert!(quantize(&[f32::INFINITY, 1.0], &mut codes).is_nan());
        assert_eq!(codes, vec![0; 6]);
        let s = quantize(&[-0.5, 0.25], &mut codes);
        assert_eq!(&codes[6..], &[-127, 64]);
        assert!((s - 0.5 / 127.0).abs() < 1e-9);
    }

    #[test]
    fn storage_from_str_and_candidates() {
        assert_eq!("f32".parse::<VectorStorage>().unwrap(), VectorStorage::F32);
        assert_eq!(
            "F16".parse::<VectorStorage>().unwrap(),
            VectorStorage::f16()
        );
        assert_eq!(
            "int8".parse::<VectorStorage>().unwrap(),
            VectorStorage::int8()
        );
        assert_eq!(
            "int8:3".parse::<VectorStorage>().unwrap(),
            VectorStorage::Int8 { rescore: 3 }
        );
        for bad in ["", "f64", "f32:2", "int8:x", "int8:-1"] {
            assert!(
                matches!(bad.parse::<VectorStorage>(), Err(Error::InvalidInput(_))),
                "{bad}"
            );
        }
        assert_eq!(VectorStorage::F32.candidates(10), 10);
        assert_eq!(VectorStorage::int8().candidates(10), 80);
        assert_eq!(VectorStorage::F16 { rescore: 0 }.candidates(10), 10);
        assert_eq!(VectorStorage::f16().candidates(usize::MAX), usize::MAX);
        assert_eq!(VectorStorage::int8().bytes_per_vector(384), 384 * 5 + 4);
    }
}
