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

/// A query term of a pruned search, bounded window by window.
pub(crate) trait WindowTerm {
    /// Moves to the window `from..to` (windows only go forward) and returns the largest
    /// contribution the term can make to a document there (0 without postings there).
    fn window_bound(&mut self, from: u32, to: u32) -> f32;
}

/// MaxScore's bookkeeping over the windows of a pruned search: each term's bound in the
/// current window, the terms in increasing bound order with how many of the first are
/// non-essential (their bounds together cannot pass the bar, so a document none of the others
/// holds cannot enter), the sums of those bounds, and each term's bound over its whole list
/// (which says where the next window need start).
pub(crate) struct MaxScore {
    bounds: Vec<f32>,
    order: Vec<usize>,
    /// `suffix[r]`: the sum of the non-essential bounds from the `r`-th largest on.
    suffix: Vec<f32>,
    n_rest: usize,
    /// The sum of the essential terms' bounds.
    essential: f32,
    global: Vec<f32>,
    /// The terms in increasing order of `global`.
    by_global: Vec<usize>,
    skip: Vec<bool>,
}

impl MaxScore {
    /// For terms whose bounds over their whole lists are `global`.
    pub(crate) fn new(global: Vec<f32>) -> Self {
        let m = global.len();
        let mut by_global: Vec<usize> = (0..m).collect();
        by_global.sort_by(|&a, &b| global[a].total_cmp(&global[b]));
        MaxScore {
            bounds: vec![0.0; m],
            order: (0..m).collect(),
            suffix: vec![0.0; m + 1],
            n_rest: 0,
            essential: 0.0,
            global,
            by_global,
            skip: vec![false; m],
        }
    }

    /// Bounds every term over the window `from..to` and splits them against `bar`: the
    /// smallest bounds whose sum cannot pass it are non-essential.
    #[inline]
    pub(crate) fn split<T: WindowTerm>(&mut self, terms: &mut [T], from: u32, to: u32, bar: Bar) {
        for (bound, t) in self.bounds.iter_mut().zip(terms.iter_mut()) {
            *bound = t.window_bound(from, to);
        }
        let bounds = &self.bounds;
        self.order.sort_by(|&a, &b| bounds[a].total_cmp(&bounds[b]));
        let mut rest = 0f32;
        self.n_rest = 0;
        if bar.full {
            for &j in &self.order {
                if (rest + bounds[j]) * MARGIN > bar.threshold {
                    break;
                }
                rest += bounds[j];
                self.n_rest += 1;
            }
        }
        let n = self.n_rest;
        self.suffix[n] = 0.0;
        for r in (0..n).rev() {
            self.suffix[r] = self.suffix[r + 1] + bounds[self.order[n - 1 - r]];
        }
        self.essential = self.order[n..].iter().map(|&j| bounds[j]).sum();
    }

    /// The essential terms (in increasing bound order); none when nothing in the window can
    /// enter.
    #[inline]
    pub(crate) fn essential(&self) -> &[usize] {
        &self.order[self.n_rest..]
    }

    /// The non-essential terms, largest bound first.
    #[inline]
    pub(crate) fn non_essential(&self) -> impl Iterator<Item = usize> + '_ {
        self.order[..self.n_rest].iter().rev().copied()
    }

    /// The sum of the non-essential bounds from the `r`-th largest on (`rest_bound(0)`: all).
    #[inline]
    pub(crate) fn rest_bound(&self, r: usize) -> f32 {
        self.suffix[r]
    }

    /// The best every term but the essential term `j` can add here: with a block's best of
    /// `j`, what bounds a document of that block.
    #[inline]
    pub(crate) fn others(&self, j: usize) -> f32 {
        self.essential - self.bounds[j] + self.suffix[0]
    }

    /// Adds a candidate's non-essential parts (`part(j)` for term `j`) to its `partial` score,
    /// the largest bound first, while the document can still enter: false as soon as it
    /// cannot.
    #[inline]
    pub(crate) fn add_non_essential(
        &self,
        bar: Bar,
        mut partial: f32,
        mut part: impl FnMut(usize) -> f32,
    ) -> bool {
        for (r, j) in self.non_essential().enumerate() {
            partial += part(j);
            if !bar.admits(partial + self.suffix[r + 1]) {
                return false;
            }
        }
        true
    }

    /// Per term, whether it cannot matter any more: the first terms in increasing order of
    /// their whole-list bounds whose bounds together cannot pass `bar`. A new window need
    /// only start where another term has postings.
    #[inline]
    pub(crate) fn skippable(&mut self, bar: Bar) -> &[bool] {
        self.skip.iter_mut().for_each(|s| *s = false);
        if bar.full {
            let mut sum = 0f32;
            for &j in &self.by_global {
                if (sum + self.global[j]) * MARGIN > bar.threshold {
                    break;
                }
                sum += self.global[j];
                self.skip[j] = true;
            }
        }
        &self.skip
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
    #[inline]
    pub(crate) fn bar(&self) -> Bar {
        let full = self.heap.len() == self.k;
        Bar {
            full,
            threshold: self.heap.peek().map_or(0.0, |e| e.score),
        }
    }

    /// Offers a scored slot: kept when fewer than `k` are held or it beats the worst held
    /// (a tie keeps the lower slot, offered first). Scores that are not positive are dropped.
    #[inline]
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
    #[inline]
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

    /// A term with fixed bounds, for the bookkeeping tests.
    struct Fixed(f32);

    impl WindowTerm for Fixed {
        fn window_bound(&mut self, _: u32, _: u32) -> f32 {
            self.0
        }
    }

    #[test]
    fn non_essential_terms_are_the_smallest_bounds_that_cannot_pass_the_bar() {
        let mut terms = [Fixed(3.0), Fixed(0.5), Fixed(1.0), Fixed(0.25)];
        let mut ms = MaxScore::new(vec![3.0, 0.5, 1.0, 0.25]);
        let open = Best::new(1).bar();
        ms.split(&mut terms, 0, 10, open);
        assert_eq!(ms.essential(), [3, 1, 2, 0]);
        assert_eq!(ms.skippable(open), [false; 4]);
        let bar = Bar {
            full: true,
            threshold: 1.8,
        };
        // 0.25 + 0.5 + 1.0 = 1.75 cannot pass 1.8; adding 3.0 can
        ms.split(&mut terms, 0, 10, bar);
        assert_eq!(ms.essential(), [0]);
        assert_eq!(ms.non_essential().collect::<Vec<_>>(), [2, 1, 3]);
        let rest: Vec<f32> = (0..4).map(|r| ms.rest_bound(r)).collect();
        assert_eq!(rest, [1.75, 0.75, 0.25, 0.0]);
        assert_eq!(ms.others(0), 1.75);
        assert_eq!(ms.skippable(bar), [false, true, true, true]);
        // a candidate at 0.5 with 1.0 from term 2 reaches 1.5 + 0.75: still in; with nothing
        // more it falls to 1.5 + 0.25 after term 1 and is out
        let mut asked = Vec::new();
        let can = ms.add_non_essential(bar, 0.5, |j| {
            asked.push(j);
            if j == 2 {
                1.0
            } else {
                0.0
            }
        });
        assert!(!can);
        assert_eq!(asked, [2, 1]);
        assert!(ms.add_non_essential(bar, 1.2, |_| 0.5));
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
