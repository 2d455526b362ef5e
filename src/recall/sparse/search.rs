//! Top-k over a [`SparseIndex`](super::SparseIndex)'s postings: the exhaustive reference and
//! block-max MaxScore.
//!
//! A document's score is the exact sum of the query's products `q * w` in fixed point
//! ([`fixed`]): a sum that does not depend on the order its parts are added in, so both
//! strategies give the same bits however they visit the postings. The pruned search walks the
//! slots in windows of [`WINDOW`]; in each it bounds every query entry by its weight times the
//! largest document weight of its blocks there, leaves out the entries whose bounds together
//! cannot beat the current k-th score (MaxScore's non-essential entries), adds up the others'
//! contributions (passing over their blocks that cannot enter even with every other entry at
//! its best), keeps the documents whose sum and the left-out bounds can still enter, and then
//! adds the left-out entries one at a time, largest bound first, dropping the documents that
//! fall out of reach after each. Bounds need weights `>= 0` (the caller checks); they are
//! compared with the shared relative margin, so pruning only ever skips documents that could
//! not have entered.

use std::sync::Arc;

use super::{Postings, BLOCK};
use crate::embed::SparseVector;
use crate::recall::top_k::{top_slots, Best, MaxScore, Window, WindowTerm, WINDOW};
use crate::Document;

/// Fixed-point units per 1.0 (2^28): a product is rounded to a multiple of 2^-28 (to nearest)
/// and summed in an `i64`, so sums are exact. With weights of at most
/// [`SparseIndex::MAX_WEIGHT`](super::SparseIndex::MAX_WEIGHT) (2^8) in magnitude a product
/// is at most 2^44 units, and no query of at most
/// [`MAX_QUERY_ENTRIES`](super::MAX_QUERY_ENTRIES) (2^19) entries overflows.
const FIXED_ONE: f32 = (1u32 << 28) as f32;

/// The query weight as a factor of [`fixed`]: `q * 2^28` (exact: a power of two).
#[inline]
fn scaled(q: f32) -> f32 {
    q * FIXED_ONE
}

/// 1.5 x 2^52: an f64 of magnitude below 2^51 added to it is rounded to an integer, which
/// the low bits of the sum then hold (a conversion without the range checks of `as`).
const ROUNDER: f64 = 6_755_399_441_055_744.0;

/// The product of a [`scaled`] query weight and a document weight in fixed point: the f32
/// product `q * w` (as [`SparseVector::dot`] makes it) times 2^28, rounded to an integer
/// (products of weights within [`SparseIndex::MAX_WEIGHT`](super::SparseIndex::MAX_WEIGHT) are
/// below 2^44 units, well inside the 2^51 the rounding holds).
#[inline]
fn fixed(scaled_q: f32, w: f32) -> i64 {
    let x = f64::from(scaled_q * w) + ROUNDER;
    x.to_bits() as i64 - ROUNDER.to_bits() as i64
}

/// A fixed-point sum as a score.
#[inline]
fn score_of(sum: i64) -> f32 {
    sum as f32 / FIXED_ONE
}

/// A lookup of a non-essential entry costs about this many postings read in order: an
/// entry's postings in a window are read whole when they are fewer than the lookups' cost.
const LOOKUP_COST: usize = 4;

/// Scores every posting of every query entry.
pub(super) fn top_k_exhaustive(
    postings: &[Postings],
    docs: &[Option<Arc<Document>>],
    query: &SparseVector,
    k: usize,
) -> Vec<(u32, f32)> {
    let mut sums = vec![0i64; docs.len()];
    let mut seen = vec![false; docs.len()];
    let mut touched = Vec::new();
    for (&i, &q) in query.indices.iter().zip(&query.values) {
        let Some(list) = postings.get(i as usize) else {
            continue;
        };
        let q = scaled(q);
        for (&slot, &w) in list.slots.iter().zip(&list.weights) {
            let s = slot as usize;
            if !seen[s] {
                seen[s] = true;
                touched.push(slot);
            }
            sums[s] += fixed(q, w);
        }
    }
    touched.retain(|&s| docs[s as usize].is_some());
    // the touched slots' sums as scores, for the pick
    let mut scores = vec![0f32; docs.len()];
    for &s in &touched {
        scores[s as usize] = score_of(sums[s as usize]);
    }
    top_slots(&scores, touched, k)
        .into_iter()
        .map(|slot| (slot, scores[slot as usize]))
        .collect()
}

/// The first index at or after `from` whose slot is at least `slot` (`slots.len()`: none),
/// by galloping: cheap for the short steps a forward walk takes.
fn gallop(slots: &[u32], from: usize, slot: u32) -> usize {
    let mut lo = from;
    let mut step = 1;
    while lo + step < slots.len() && slots[lo + step] < slot {
        lo += step;
        step *= 2;
    }
    let hi = (lo + step + 1).min(slots.len());
    lo + slots[lo..hi].partition_point(|&s| s < slot)
}

/// One query entry (a repeated id is two entries).
struct Term<'a> {
    list: &'a Postings,
    q: f32,
    /// `q` [`scaled`] for [`fixed`].
    scaled_q: f32,
    /// The current window's postings: `start..end`.
    start: usize,
    end: usize,
    /// Where the last lookup stopped (lookups go forward within a window).
    probe: usize,
}

impl WindowTerm for Term<'_> {
    /// The query weight times the largest weight of the blocks holding its postings there.
    fn window_bound(&mut self, from: u32, to: u32) -> f32 {
        let slots = &self.list.slots;
        self.start = gallop(slots, self.end, from);
        self.end = gallop(slots, self.start, to);
        self.probe = self.start;
        if self.start == self.end {
            return 0.0;
        }
        let blocks = &self.list.block_max[self.start / BLOCK..=(self.end - 1) / BLOCK];
        self.q * blocks.iter().fold(0.0f32, |a, &b| a.max(b))
    }
}

impl Term<'_> {
    /// This entry's part of `slot`'s score (0 without a posting), for slots of the window in
    /// increasing order.
    fn seek(&mut self, slot: u32) -> i64 {
        let slots = &self.list.slots[..self.end];
        self.probe = gallop(slots, self.probe, slot);
        if slots.get(self.probe) == Some(&slot) {
            fixed(self.scaled_q, self.list.weights[self.probe])
        } else {
            0
        }
    }
}

/// Block-max MaxScore over windows of slots; every weight, the query's included, is `>= 0`.
pub(super) fn top_k_pruned(
    postings: &[Postings],
    docs: &[Option<Arc<Document>>],
    query: &SparseVector,
    k: usize,
) -> Vec<(u32, f32)> {
    // entries of weight 0 add nothing
    let mut terms: Vec<Term<'_>> = query
        .indices
        .iter()
        .zip(&query.values)
        .filter(|&(_, &q)| q > 0.0)
        .filter_map(|(&i, &q)| {
            let list = postings.get(i as usize).filter(|l| !l.slots.is_empty())?;
            Some(Term {
                list,
                q,
                scaled_q: scaled(q),
                start: 0,
                end: 0,
                probe: 0,
            })
        })
        .collect();
    let end = docs.len() as u32;
    let mut best = Best::new(k);
    let mut window = Window::<i64>::new();
    let mut candidates = Vec::new();
    // a non-essential entry's parts of the window's slots, when read whole
    let mut rest = vec![0i64; WINDOW as usize];
    // each entry's bound over its whole list, for starting windows only where an entry that
    // can still matter has postings
    let mut ms = MaxScore::new(
        terms
            .iter()
            .map(|t| t.q * t.list.block_max.iter().fold(0.0f32, |a, &b| a.max(b)))
            .collect(),
    );

    let mut from = terms.iter().map(|t| t.list.slots[0]).min().unwrap_or(end);
    while from < end {
        let to = from.saturating_add(WINDOW).min(end);
        let bar = best.bar();
        ms.split(&mut terms, from, to, bar);
        if !ms.essential().is_empty() {
            for &j in ms.essential() {
                let t = &terms[j];
                if t.start == t.end {
                    continue;
                }
                // a block whose best, with every other entry at its best here, cannot enter is
                // passed over: a document of it that another entry brings in cannot enter
                // either way (its sum, lacking this entry, is below its score)
                let others = ms.others(j);
                let list = t.list;
                for b in t.start / BLOCK..=(t.end - 1) / BLOCK {
                    if !bar.admits(t.q * list.block_max[b] + others) {
                        continue;
                    }
                    let range = (b * BLOCK).max(t.start)..((b + 1) * BLOCK).min(t.end);
                    for (&slot, &w) in list.slots[range.clone()].iter().zip(&list.weights[range]) {
                        window.add((slot - from) as usize, fixed(t.scaled_q, w));
                    }
                }
            }
            let bar = best.bar();
            let mut n_cand = window.drain_into(&mut candidates, |partial| {
                bar.admits(score_of(partial) + ms.rest_bound(0))
            });
            // the non-essential entries, largest bound first: each adds its parts to the
            // candidates (looked up, or read whole when its postings here are fewer than the
            // lookups would cost), and the candidates that cannot enter any more are dropped;
            // once a step drops almost none, the remaining entries are read whole together
            // and the candidates take their sum at the end
            let mut filtering = true;
            let mut pending = false;
            for (r, j) in ms.non_essential().enumerate() {
                if n_cand == 0 {
                    break;
                }
                let t = &mut terms[j];
                let range = t.start..t.end;
                if !filtering {
                    let (slots, weights) = (&t.list.slots[range.clone()], &t.list.weights[range]);
                    for (&slot, &w) in slots.iter().zip(weights) {
                        rest[(slot - from) as usize] += fixed(t.scaled_q, w);
                    }
                    pending = true;
                    continue;
                }
                if range.len() <= LOOKUP_COST * n_cand {
                    let (slots, weights) = (&t.list.slots[range.clone()], &t.list.weights[range]);
                    for (&slot, &w) in slots.iter().zip(weights) {
                        rest[(slot - from) as usize] = fixed(t.scaled_q, w);
                    }
                    for c in &mut candidates[..n_cand] {
                        c.1 += rest[c.0 as usize];
                    }
                    for &slot in slots {
                        rest[(slot - from) as usize] = 0;
                    }
                } else {
                    for c in &mut candidates[..n_cand] {
                        c.1 += t.seek(from + c.0);
                    }
                }
                let mut kept = 0;
                for c in 0..n_cand {
                    let (i, sum) = candidates[c];
                    candidates[kept] = (i, sum);
                    kept += bar.admits(score_of(sum) + ms.rest_bound(r + 1)) as usize;
                }
                filtering = kept * 100 < n_cand * 99;
                n_cand = kept;
            }
            if pending {
                for c in &mut candidates[..n_cand] {
                    c.1 += rest[c.0 as usize];
                }
                rest.fill(0);
            }
            // what is left has its exact score
            for &(i, sum) in &candidates[..n_cand] {
                let slot = from + i;
                if docs[slot as usize].is_some() {
                    best.offer(slot, score_of(sum));
                }
            }
        }
        from = terms
            .iter()
            .zip(ms.skippable(best.bar()))
            .filter(|(_, &s)| !s)
            .filter_map(|(t, _)| t.list.slots.get(t.end).copied())
            .min()
            .unwrap_or(end);
    }
    best.into_sorted()
}

#[cfg(test)]
mod tests {
    use super::super::SparseIndex;
    use super::*;

    #[test]
    fn fixed_point_products_round_to_nearest() {
        assert_eq!(fixed(scaled(1.0), 1.0), 1 << 28);
        assert_eq!(fixed(scaled(-0.5), 3.0), -(3 << 27));
        assert_eq!(score_of(fixed(scaled(0.25), 0.5)), 0.125);
        let max = SparseIndex::MAX_WEIGHT;
        assert_eq!(fixed(scaled(max), max), 1 << 44);
        assert_eq!(fixed(scaled(-max), max), -(1 << 44));
        let mut rng = Lcg(9);
        for _ in 0..10_000 {
            let q = (rng.next() % 100_000) as f32 / 3.0e4;
            let w = (rng.next() % 100_000) as f32 / 7.0e6 - 0.001;
            let want = (f64::from(scaled(q) * w)).round_ties_even() as i64;
            assert_eq!(fixed(scaled(q), w), want, "{q} x {w}");
        }
    }

    #[test]
    fn gallop_finds_the_first_slot_at_or_after() {
        let slots: Vec<u32> = (0..1000).map(|i| i * 3).collect();
        for from in [0, 1, 17, 500, 999, 1000] {
            for slot in [0, 2, 3, 100, 1500, 2997, 2998, 5000] {
                let want = from + slots[from..].partition_point(|&s| s < slot);
                assert_eq!(gallop(&slots, from, slot), want, "from {from} slot {slot}");
            }
        }
        assert_eq!(gallop(&[], 0, 5), 0);
    }

    /// A seeded generator (a linear congruential one: enough for test data).
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }

        /// An id in `0..vocab`, small ids far more often (so some lists are long).
        fn skewed(&mut self, vocab: u32) -> u32 {
            let u = (self.next() % 1_000_000) as f64 / 1e6;
            (u * u * u * vocab as f64) as u32
        }

        /// A weight from a few values (so scores tie) or a spread one.
        fn weight(&mut self) -> f32 {
            match self.next() % 4 {
                0 => 0.5,
                1 => 1.0,
                _ => (1 + self.next() % 3000) as f32 / 1000.0,
            }
        }

        fn vector(&mut self, vocab: u32, nnz: usize) -> SparseVector {
            let mut indices: Vec<u32> = (0..nnz).map(|_| self.skewed(vocab)).collect();
            indices.sort_unstable();
            indices.dedup();
            let values = indices.iter().map(|_| self.weight()).collect();
            SparseVector { indices, values }
        }
    }

    fn exact(top: &[(u32, f32)]) -> Vec<(u32, u32)> {
        top.iter().map(|&(s, x)| (s, x.to_bits())).collect()
    }

    /// Pruned top k equals exhaustive scoring (slots, order, score bits) over many windows,
    /// with removed documents, ties, repeated and zero-weight query entries and ids past the
    /// vocabulary.
    #[test]
    fn pruned_equals_exhaustive() {
        let vocab = 300u32;
        for (seed, n) in [(1u64, 700usize), (2, 9000), (3, 20_000)] {
            let mut rng = Lcg(seed);
            let mut postings = vec![Postings::default(); vocab as usize];
            let mut docs = Vec::with_capacity(n);
            for slot in 0..n as u32 {
                let nnz = 1 + rng.next() as usize % 40;
                let v = rng.vector(vocab, nnz);
                for (&i, &w) in v.indices.iter().zip(&v.values) {
                    postings[i as usize].push(slot, w);
                }
                let live = !rng.next().is_multiple_of(10);
                docs.push(live.then(|| Arc::new(Document::new(slot.to_string(), ""))));
            }
            for q in 0..60 {
                let mut query = rng.vector(vocab, 1 + q % 25);
                if q % 7 == 0 {
                    query.indices.push(query.indices[0]);
                    query.values.push(0.75);
                    query.indices.push(vocab + 5);
                    query.values.push(1.0);
                    query.values[0] = 0.0;
                }
                for k in [1, 3, 10, 100] {
                    let pruned = top_k_pruned(&postings, &docs, &query, k);
                    let all = top_k_exhaustive(&postings, &docs, &query, k);
                    assert_eq!(exact(&pruned), exact(&all), "seed {seed} query {q} top {k}");
                }
            }
        }
    }
}
