//! MUVERA's fixed-dimensional encodings (Dhulipala et al., "MUVERA: Multi-Vector Retrieval via
//! Fixed Dimensional Encodings", 2024): one vector per multi-vector text whose dot product
//! approximates the MaxSim (Chamfer) similarity of the two texts' token vectors, so that one
//! flat scan of a vector per document picks the candidates exact MaxSim then ranks.
//!
//! Per repetition, `simhash_bits` random Gaussian hyperplanes cut the token space into
//! `2^simhash_bits` buckets (a token's bucket is the sign pattern of its dot products with
//! them). Each token is projected to `projection` dimensions by a random ±1/√projection matrix
//! (none when `projection` is the model's width). A query's encoding holds, per bucket, the
//! sum of its tokens' projections; a document's, the mean of its tokens' in each bucket, and
//! for an empty bucket the projection of the token whose sign pattern is nearest (Hamming
//! distance; the first on ties). Repetitions are concatenated: the encoding has
//! `repetitions x 2^simhash_bits x projection` values. The query and document dot product is
//! then, per repetition, the sum over query tokens of their similarity with the mean of the
//! document tokens that fell in their bucket: MaxSim's sum with each max taken over one
//! bucket.

#[cfg(feature = "models")]
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

#[cfg(feature = "models")]
use crate::{Error, Result};

/// Settings of MUVERA's encodings and of the candidate stage they drive; checked when a
/// `LateInteractionIndex` takes them (`with_muvera`; feature `models`), and read from a
/// config's `retriever: {type: late_interaction, muvera: {...}}`.
///
/// The defaults (8 repetitions of 16 buckets projected to 16 dimensions: 2,048 values, 4 KB a
/// document as f16, and 1,000 candidates) keep the candidate scan a small fraction of an exact
/// scan's cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MuveraConfig {
    /// Independent repetitions, concatenated (1 to 64; default 8).
    pub repetitions: usize,
    /// SimHash hyperplanes per repetition: `2^simhash_bits` buckets (0 to 10; default 4).
    pub simhash_bits: usize,
    /// The dimensions each token is projected to (1 to the model's width, which means no
    /// projection; default 16).
    pub projection: usize,
    /// Documents ranked by exact MaxSim per search: the best by the encodings' dot product
    /// (at least the number of hits asked for; default 1,000).
    pub candidates: usize,
    /// Seed of the random hyperplanes and projections (default 42): the documents' and the
    /// query's encodings must come from the same seed.
    pub seed: u64,
}

impl Default for MuveraConfig {
    fn default() -> Self {
        MuveraConfig {
            repetitions: 8,
            simhash_bits: 4,
            projection: 16,
            candidates: 1000,
            seed: 42,
        }
    }
}

/// Checks `config` for tokens of `dim` values (what [`Muvera::new`] refuses).
#[cfg(feature = "models")]
pub(crate) fn check(config: MuveraConfig, dim: usize) -> Result<()> {
    Muvera::new(config, dim).map(|_| ())
}

/// The random hyperplanes and projections of a [`MuveraConfig`] for tokens of one width.
#[cfg(feature = "models")]
pub(crate) struct Muvera {
    config: MuveraConfig,
    dim: usize,
    /// Per repetition, `simhash_bits` rows of `dim` Gaussian values.
    hyperplanes: Vec<f32>,
    /// Per repetition, a `dim x projection` matrix of ±1/√projection (empty: no projection).
    projections: Vec<f32>,
}

#[cfg(feature = "models")]
impl Muvera {
    /// Checks `config` for tokens of `dim` values and draws its hyperplanes and projections.
    pub fn new(config: MuveraConfig, dim: usize) -> Result<Self> {
        let bad = |what: String| Err(Error::Config(format!("muvera: {what}")));
        if !(1..=64).contains(&config.repetitions) {
            return bad(format!("repetitions is {}: 1 to 64", config.repetitions));
        }
        if config.simhash_bits > 10 {
            return bad(format!("simhash_bits is {}: 0 to 10", config.simhash_bits));
        }
        if !(1..=dim).contains(&config.projection) {
            return bad(format!(
                "projection is {}: 1 to the model's width, {dim}",
                config.projection
            ));
        }
        if config.candidates == 0 {
            return bad("candidates is 0: at least 1".into());
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(config.seed);
        let hyperplanes = (0..config.repetitions * config.simhash_bits * dim)
            .map(|_| gaussian(&mut rng))
            .collect();
        let projections = if config.projection == dim {
            Vec::new()
        } else {
            let scale = 1.0 / (config.projection as f32).sqrt();
            (0..config.repetitions * dim * config.projection)
                .map(|_| if rng.random::<bool>() { scale } else { -scale })
                .collect()
        };
        Ok(Muvera {
            config,
            dim,
            hyperplanes,
            projections,
        })
    }

    /// The settings.
    pub fn config(&self) -> &MuveraConfig {
        &self.config
    }

    /// The number of values of an encoding.
    pub fn width(&self) -> usize {
        self.config.repetitions * self.buckets() * self.config.projection
    }

    fn buckets(&self) -> usize {
        1 << self.config.simhash_bits
    }

    /// A query's encoding of its token vectors (`tokens x dim` values, row-major).
    pub fn encode_query(&self, tokens: &[f32]) -> Vec<f32> {
        self.encode(tokens, false)
    }

    /// A document's encoding of its token vectors (`tokens x dim` values, row-major).
    pub fn encode_document(&self, tokens: &[f32]) -> Vec<f32> {
        self.encode(tokens, true)
    }

    fn encode(&self, tokens: &[f32], document: bool) -> Vec<f32> {
        let (dim, bits, proj) = (self.dim, self.config.simhash_bits, self.config.projection);
        let buckets = self.buckets();
        let mut out = vec![0f32; self.width()];
        let rows: Vec<&[f32]> = tokens.chunks_exact(dim).collect();
        let mut sketches = vec![0usize; rows.len()];
        let mut projected = vec![0f32; rows.len() * proj];
        let mut counts = vec![0u32; buckets];
        for r in 0..self.config.repetitions {
            let planes = &self.hyperplanes[r * bits * dim..(r + 1) * bits * dim];
            for (t, row) in rows.iter().enumerate() {
                sketches[t] = planes
                    .chunks_exact(dim)
                    .enumerate()
                    .filter(|(_, h)| dot(h, row) > 0.0)
                    .fold(0, |s, (i, _)| s | 1 << i);
                let p = &mut projected[t * proj..(t + 1) * proj];
                if self.projections.is_empty() {
                    p.copy_from_slice(row);
                } else {
                    let m = &self.projections[r * dim * proj..(r + 1) * dim * proj];
                    p.fill(0.0);
                    for (x, m_row) in row.iter().zip(m.chunks_exact(proj)) {
                        for (p, m) in p.iter_mut().zip(m_row) {
                            *p += x * m;
                        }
                    }
                }
            }
            let block = &mut out[r * buckets * proj..(r + 1) * buckets * proj];
            counts.fill(0);
            for (t, &b) in sketches.iter().enumerate() {
                counts[b] += 1;
                for (o, p) in block[b * proj..(b + 1) * proj]
                    .iter_mut()
                    .zip(&projected[t * proj..(t + 1) * proj])
                {
                    *o += p;
                }
            }
            if !document || rows.is_empty() {
                continue;
            }
            for (b, &n) in counts.iter().enumerate() {
                let cell = &mut block[b * proj..(b + 1) * proj];
                if n > 0 {
                    cell.iter_mut().for_each(|x| *x /= n as f32);
                } else {
                    // The token whose sign pattern differs from the bucket's in fewest bits.
                    let nearest = (0..rows.len())
                        .min_by_key(|&t| (sketches[t] ^ b).count_ones())
                        .unwrap_or(0);
                    cell.copy_from_slice(&projected[nearest * proj..(nearest + 1) * proj]);
                }
            }
        }
        out
    }
}

#[cfg(feature = "models")]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// A standard normal value (Box-Muller).
#[cfg(feature = "models")]
fn gaussian(rng: &mut impl Rng) -> f32 {
    let u: f64 = rng.random();
    let v: f64 = rng.random();
    ((-2.0 * (1.0 - u).ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
}

#[cfg(all(test, feature = "models"))]
mod tests {
    use super::*;

    fn config(repetitions: usize, simhash_bits: usize, projection: usize) -> MuveraConfig {
        MuveraConfig {
            repetitions,
            simhash_bits,
            projection,
            ..MuveraConfig::default()
        }
    }

    fn unit_rows(rng: &mut impl Rng, n: usize, dim: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..n * dim).map(|_| gaussian(rng)).collect();
        for row in v.chunks_exact_mut(dim) {
            let norm = dot(row, row).sqrt();
            row.iter_mut().for_each(|x| *x /= norm);
        }
        v
    }

    fn maxsim(q: &[f32], d: &[f32], dim: usize) -> f32 {
        q.chunks_exact(dim)
            .map(|q| {
                d.chunks_exact(dim)
                    .map(|d| dot(q, d))
                    .fold(f32::NEG_INFINITY, f32::max)
            })
            .sum()
    }

    #[test]
    fn settings_out_of_range_are_refused_naming_the_key() {
        for (c, key) in [
            (config(0, 4, 8), "repetitions"),
            (config(65, 4, 8), "repetitions"),
            (config(2, 11, 8), "simhash_bits"),
            (config(2, 4, 0), "projection"),
            (config(2, 4, 17), "projection"),
            (
                MuveraConfig {
                    candidates: 0,
                    ..MuveraConfig::default()
                },
                "candidates",
            ),
        ] {
            let e = Muvera::new(c, 16).err().expect("refused").to_string();
            assert!(e.contains(key), "{e}");
        }
    }

    /// One bucket and no projection: the document encoding is the mean token, the query's the
    /// sum, so their dot product is the query tokens' summed similarity with the mean.
    #[test]
    fn one_bucket_without_projection_is_the_sum_against_the_mean() {
        let dim = 8;
        let m = Muvera::new(config(1, 0, dim), dim).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let q = unit_rows(&mut rng, 3, dim);
        let d = unit_rows(&mut rng, 5, dim);
        let mean: Vec<f32> = (0..dim)
            .map(|j| d.chunks_exact(dim).map(|r| r[j]).sum::<f32>() / 5.0)
            .collect();
        let want: f32 = q.chunks_exact(dim).map(|r| dot(r, &mean)).sum();
        let got = dot(&m.encode_query(&q), &m.encode_document(&d));
        assert!((got - want).abs() < 1e-5, "{got} {want}");
        assert_eq!(m.width(), dim);
    }

    /// Every document bucket holds something (empty ones filled from the nearest token), a
    /// query's empty buckets stay zero, and the same seed gives the same encodings.
    #[test]
    fn empty_buckets_are_filled_for_documents_only() {
        let dim = 16;
        let m = Muvera::new(config(3, 4, dim), dim).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        let one = unit_rows(&mut rng, 1, dim);
        let d = m.encode_document(&one);
        assert!(d.chunks_exact(dim).all(|cell| cell == one.as_slice()));
        let q = m.encode_query(&one);
        assert_eq!(
            q.chunks_exact(dim).filter(|c| c == &one.as_slice()).count(),
            3
        );
        assert_eq!(q.iter().filter(|&&x| x == 0.0).count(), (16 - 1) * 3 * dim);
        let again = Muvera::new(config(3, 4, dim), dim).unwrap();
        assert_eq!(again.encode_document(&one), d);
        assert!(m.encode_document(&[]).iter().all(|&x| x == 0.0));
    }

    /// The encodings' dot product ranks documents as MaxSim does, for documents made of the
    /// query's own tokens with noise: the document the query came from is first among 200.
    #[test]
    fn the_encodings_find_the_document_a_query_came_from() {
        let dim = 32;
        let m = Muvera::new(config(16, 4, 16), dim).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let docs: Vec<Vec<f32>> = (0..200).map(|_| unit_rows(&mut rng, 40, dim)).collect();
        let encoded: Vec<Vec<f32>> = docs.iter().map(|d| m.encode_document(d)).collect();
        let mut found = 0;
        for (i, doc) in docs.iter().enumerate().take(20) {
            // 8 of the document's tokens, each moved by noise, renormalized.
            let mut q: Vec<f32> = doc[..8 * dim]
                .iter()
                .map(|x| x + 0.05 * gaussian(&mut rng))
                .collect();
            for row in q.chunks_exact_mut(dim) {
                let norm = dot(row, row).sqrt();
                row.iter_mut().for_each(|x| *x /= norm);
            }
            let fq = m.encode_query(&q);
            let best = (0..docs.len())
                .max_by(|&a, &b| dot(&fq, &encoded[a]).total_cmp(&dot(&fq, &encoded[b])))
                .unwrap();
            let exact = (0..docs.len())
                .max_by(|&a, &b| maxsim(&q, &docs[a], dim).total_cmp(&maxsim(&q, &docs[b], dim)))
                .unwrap();
            assert_eq!(exact, i);
            found += usize::from(best == i);
        }
        assert!(found >= 18, "{found} of 20");
    }
}
