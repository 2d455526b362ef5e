//! The top-k machinery the inverted indexes share (BM25 and learned sparse): the exhaustive
//! selection over a score array, the bounded heap of the best hits with the score a document
//! must beat to enter it, and the accumulator of one window of slots that block-max pruning
//! walks.
//!
//! Every strategy breaks ties the same way: the lower slot (the document added first) wins.
//! The pruned searches visit slots in increasing order and replace a hit only with a strictly
//! better one, which keeps that rule.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::document::cmp_score_desc;

/// Slots per window of a pruned search (a bit per slot, in at most 64 words of 64).
pub(crate) const WINDOW: u32 = 4096;
const _: () = assert!(WINDOW as usize / 64 <= 64);

/// Upper bounds are multiplied by this before comparing with a score: float rounding in a sum
/// of a few hundred terms is orders of magnitude below it, so a bound compared this way never
/// excludes a document that could have entered.
pub(crate) const MARGIN: f32 = 1.0 + 1e-4;

/// The best `k` of the `touched` slots by score, best first; ties go to the lower slot (the
/// document added first). Slots whose score is not positive are dropped.
pub(crate) fn top_slots(scores: &[f32], mut touched: Vec<u32>, k: usize) -> Vec<u32> {
    touched.retain(|&s| scores[s as usize] > 0.0);
    let by_score =
        |a: &u32, b: &u32| cmp_score_desc(scores[*a as usize], scores[*b as usize]).then(a.cmp(b));
    if k == 0 {
        return Vec::new();
    }
    if k < touched.len() {
        touched.select_nth_unstable_by(k - 1, by_score);
        touched.truncate(k);
    }
    touched.sort_by(by_score);
    touched
}

/// A hit in the heap; the greatest entry is the worst hit (lowest score, then highest slot).
#[derive(Clone, Copy, PartialEq)]
struct Entry {
    score: f32,
    slot: u32,
}

impl Eq for Entry {}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then(self.slot.cmp(&other.slot))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The score a document must beat to enter the best `k`, as it stood when taken (it only
/// rises, so a bound refused by an older bar is refused by the current one too).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bar {
    full: bool,
    threshold: f32,
}

impl Bar {
    /// Whether a document whose score is at most `bound` may still enter.
    #[inline]
    pub(crate) fn admits(self, bound: f32) -> bool {
        !(self.full && bound * MARGIN <= self.threshold)
    }
}

/// MaxScore's split of a window's terms: sorts `order` by increasing `bounds` and returns how
/// many of its first terms are non-essential (their bounds together cannot pass `bar`, so a
/// document none of the others holds cannot enter). `suffix[i]` is then the sum of the
/// non-essential bounds from the `i`-th largest on (`suffix[n] == 0`).
pub(crate) fn split_non_essential(
    bounds: &[f32],
    order: &mut [usize],
    suffix: &mut [f32],
    bar: Bar,
) -> usize {
    order.sort_by(|&a, &b| bounds[a].total_cmp(&bounds[b]));
    let mut rest = 0f32;
    let mut n_rest = 0;
    if bar.full {
        for &j in order.iter() {
            if (rest + bounds[j]) * MARGIN <= bar.threshold {
                rest += bounds[j];
                n_rest += 1;
            } else {
                break;
            }
        }
    }
    suffix[n_rest] = 0.0;
    for i in (0..n_rest).rev() {
        suffix[i] = suffix[i + 1] + bounds[order[n_rest - 1 - i]];
    }
    n_rest
}

/// A query term of a pruned search, bounded window by window.
pub(crate) trait WindowTerm {
    /// Moves to the window `from..to` (windows only go forward) and returns the largest
    /// contribution the term can make to a document there (0 without postings there).
    fn window_bound(&mut self, from: u32, to: u32) -> f32;
}

/// Bounds every term over the window `from..to` (into `bounds`) and splits them as
/// [`split_non_essential`] does; returns the number of non-essential terms (the first of
/// `order`) and the sum of the essential terms' bounds.
#[allow(clippy::too_many_arguments)]
pub(crate) fn split_window<T: WindowTerm>(
    terms: &mut [T],
    from: u32,
    to: u32,
    bounds: &mut [f32],
    order: &mut [usize],
    suffix: &mut [f32],
    bar: Bar,
) -> (usize, f32) {
    for (bound, t) in bounds.iter_mut().zip(terms.iter_mut()) {
        *bound = t.window_bound(from, to);
    }
    let n_rest = split_non_essential(bounds, order, suffix, bar);
    let essential = order[n_rest..].iter().map(|&j| bounds[j]).sum();
    (n_rest, essential)
}

/// Adds a candidate's non-essential parts (`part(j)` for term `j`) to its `partial` score,
/// the largest bound first, while the document can still enter: false as soon as it cannot.
pub(crate) fn add_non_essential(
    order: &[usize],
    n_rest: usize,
    suffix: &[f32],
    bar: Bar,
    mut partial: f32,
    mut part: impl FnMut(usize) -> f32,
) -> bool {
    for r in 0..n_rest {
        partial += part(order[n_rest - 1 - r]);
        if !bar.admits(partial + suffix[r + 1]) {
            return false;
        }
    }
    true
}

/// Marks in `skip` the terms that cannot matter any more: the first of `by_global` (terms in
/// increasing order of `global`, their bounds over whole lists) whose bounds together cannot
/// pass `bar`. A new window need only start where another term has postings.
pub(crate) fn mark_skippable(global: &[f32], by_global: &[usize], bar: Bar, skip: &mut [bool]) {
    skip.iter_mut().for_each(|s| *s = false);
    if !bar.full {
        return;
    }
    let mut sum = 0f32;
    for &j in by_global {
        if (sum + global[j]) * MARGIN <= bar.threshold {
            sum += global[j];
            skip[j] = true;
        } else {
            break;
        }
    }
}

/// The best `k` hits offered so far, for slots offered in increasing order.
pub(crate) struct Best {
    k: usize,
    heap: BinaryHeap<Entry>,
}

impl Best {
    pub(crate) fn new(k: usize) -> Self {
        Best {
            k,
            heap: BinaryHeap::with_capacity(k + 1),
        }
    }

    /// The score a document must beat to enter, now: none until `k` hits are held.
    pub(crate) fn bar(&self) -> Bar {
        let full = self.heap.len() == self.k;
        Bar {
            full,
            threshold: self.heap.peek().map_or(0.0, |e| e.score),
        }
    }

    /// Offers a scored slot: kept when fewer than `k` are held or it beats the worst held
    /// (a tie keeps the lower slot, offered first). Scores that are not positive are dropped.
    pub(crate) fn offer(&mut self, slot: u32, score: f32) {
        if self.k == 0 || score <= 0.0 {
            return;
        }
        if self.heap.len() < self.k {
            self.heap.push(Entry { score, slot });
        } else if self.heap.peek().is_some_and(|worst| score > worst.score) {
            self.heap.pop();
            self.heap.push(Entry { score, slot });
        }
    }

    /// The hits held, best first, as (slot, score).
    pub(crate) fn into_sorted(self) -> Vec<(u32, f32)> {
        let mut hits = self.heap.into_vec();
        hits.sort();
        hits.into_iter().map(|e| (e.slot, e.score)).collect()
    }
}

/// Per-slot partial scores over one window of [`WINDOW`] slots (`f32` bounds for BM25,
/// fixed-point sums for learned sparse), with a bit per slot touched and a bit per word of
/// those, so that draining visits only the touched slots, in order.
pub(crate) struct Window<T> {
    acc: Vec<T>,
    seen: [u64; WINDOW as usize / 64],
    seen_words: u64,
}

impl<T: Copy + Default + std::ops::AddAssign> Window<T> {
    pub(crate) fn new() -> Self {
        Window {
            acc: vec![T::default(); WINDOW as usize],
            seen: [0; WINDOW as usize / 64],
            seen_words: 0,
        }
    }

    /// Adds `value` to the slot at offset `i` of the window.
    #[inline]
    pub(crate) fn add(&mut self, i: usize, value: T) {
        self.acc[i] += value;
        self.seen[i / 64] |= 1 << (i % 64);
        self.seen_words |= 1 << (i / 64);
    }

    /// Empties the window into `out`: each touched offset with its partial score, in
    /// increasing order, kept when `keep(partial)` (without a branch per slot); returns how
    /// many were kept (the first of `out`).
    pub(crate) fn drain_into(
        &mut self,
        out: &mut Vec<(u32, T)>,
        keep: impl Fn(T) -> bool,
    ) -> usize {
        out.resize(WINDOW as usize, (0, T::default()));
        let mut n = 0;
        while self.seen_words != 0 {
            let w = self.seen_words.trailing_zeros() as usize;
            self.seen_words &= self.seen_words - 1;
            let mut bits = std::mem::take(&mut self.seen[w]);
            while bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let partial = std::mem::take(&mut self.acc[i]);
                out[n] = (i as u32, partial);
                n += keep(partial) as usize;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_keeps_the_k_best_and_the_lower_slot_on_ties() {
        let mut best = Best::new(2);
        assert!(best.bar().admits(0.0));
        for (slot, score) in [(0, 1.0), (1, 3.0), (2, 0.0), (3, 3.0), (4, 2.0), (5, -1.0)] {
            best.offer(slot, score);
        }
        // the margin keeps a bound equal to the bar, and drops a clearly lower one
        assert!(best.bar().admits(3.0));
        assert!(!best.bar().admits(2.99));
        assert_eq!(best.into_sorted(), [(1, 3.0), (3, 3.0)]);
        let mut none = Best::new(0);
        none.offer(0, 1.0);
        assert!(none.into_sorted().is_empty());
    }

    #[test]
    fn non_essential_terms_are_the_smallest_bounds_that_cannot_pass_the_bar() {
        let bounds = [3.0, 0.5, 1.0, 0.25];
        let mut order = vec![0, 1, 2, 3];
        let mut suffix = vec![0.0; 5];
        let open = Best::new(1).bar();
        assert_eq!(
            split_non_essential(&bounds, &mut order, &mut suffix, open),
            0
        );
        assert_eq!(order, [3, 1, 2, 0]);
        let bar = Bar {
            full: true,
            threshold: 1.8,
        };
        // 0.25 + 0.5 + 1.0 = 1.75 cannot pass 1.8; adding 3.0 can
        assert_eq!(
            split_non_essential(&bounds, &mut order, &mut suffix, bar),
            3
        );
        assert_eq!(&suffix[..4], &[1.75, 0.75, 0.25, 0.0]);
        let mut skip = vec![false; 4];
        mark_skippable(&bounds, &order, bar, &mut skip);
        assert_eq!(skip, [false, true, true, true]);
        mark_skippable(&bounds, &order, open, &mut skip);
        assert_eq!(skip, [false; 4]);
    }

    #[test]
    fn a_window_drains_touched_slots_in_order_and_empties() {
        let mut w = Window::<f32>::new();
        for &(i, v) in &[(4000usize, 1.0f32), (3, 2.0), (64, 0.5), (3, 1.0)] {
            w.add(i, v);
        }
        let mut out = Vec::new();
        let n = w.drain_into(&mut out, |p| p > 0.75);
        assert_eq!(&out[..n], &[(3, 3.0), (4000, 1.0)]);
        let n = w.drain_into(&mut out, |_| true);
        assert_eq!(n, 0);
    }

    #[test]
    fn top_slots_orders_by_score_then_slot() {
        let scores = [1.0, 3.0, 0.0, 3.0, 2.0];
        assert_eq!(top_slots(&scores, vec![4, 3, 2, 1, 0], 3), [1, 3, 4]);
        assert_eq!(top_slots(&scores, vec![0, 2], 5), [0]);
        assert!(top_slots(&scores, vec![0, 1], 0).is_empty());
    }
}
