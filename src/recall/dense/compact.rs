//! The compact copy of the vectors that a [`VectorStorage::F16`] or [`VectorStorage::Int8`]
//! index scans: f16 bits, or int8 codes with one scale per vector.

use std::str::FromStr;

use crate::simd::dense::f32_to_f16;
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
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
