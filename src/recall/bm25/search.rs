//! Top-k over the posting lists: the exhaustive reference and block-max MaxScore.
//!
//! Both compute a document's score the same way, term contributions added in query order
//! with [`Scorer::term_with_norm`], so their floats agree to the last bit. The pruned search
//! walks the slots in windows; in each window it bounds every term by the best impact of its
//! blocks there, leaves out the terms whose bounds together cannot beat the current k-th
//! score (MaxScore's non-essential terms), accumulates the others, and scores exactly only the
//! documents whose accumulated score plus the left-out bounds can still enter the top k.
//! Bounds are compared with a relative margin far above float rounding, so pruning only ever
//! skips documents that could not have entered: the top k is exact, ties included (the
//! lower slot wins, and slots are visited in increasing order).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

use super::postings::{Cursor, PostingList};
use super::{top_slots, Scorer};
use crate::Document;

/// Slots per window.
const WINDOW: u32 = 4096;

/// Upper bounds are multiplied by this before comparing with a score (float rounding in a
/// sum of a few dozen terms is many orders of magnitude below it).
const MARGIN: f32 = 1.0 + 1e-4;

/// Lengths up to this get their normalization from a table built per query.
const NORM_TABLE_MAX: u32 = 4096;

/// What a search reads from the index.
pub(super) struct View<'a> {
    pub(super) scorer: &'a Scorer,
    pub(super) postings: &'a [PostingList],
    pub(super) df: &'a [u32],
    pub(super) lengths: &'a [u32],
    pub(super) max_len: u32,
    pub(super) docs: &'a [Option<Arc<Document>>],
}

/// A top-k strategy: (slot, score) best first, for the query's term ids (in query order,
/// repeats kept, every one with live documents).
pub(super) type TopK = fn(&View<'_>, &[u32], usize) -> Vec<(u32, f32)>;

/// Length normalizations, the same floats as [`Scorer::norm`].
struct Norms<'a> {
    scorer: &'a Scorer,
    table: Vec<f32>,
}

impl<'a> Norms<'a> {
    fn new(scorer: &'a Scorer, max_len: u32) -> Self {
        let n = max_len.min(NORM_TABLE_MAX);
        Norms {
            scorer,
            table: (0..=n).map(|dl| scorer.norm(dl)).collect(),
        }
    }

    #[inline]
    fn get(&self, dl: u32) -> f32 {
        match self.table.get(dl as usize) {
            Some(&n) => n,
            None => self.scorer.norm(dl),
        }
    }
}

/// Scores every posting of every query term.
pub(super) fn top_k_exhaustive(view: &View<'_>, terms: &[u32], k: usize) -> Vec<(u32, f32)> {
    let norms = Norms::new(view.scorer, view.max_len);
    let mut scores = vec![0f32; view.docs.len()];
    let mut touched: Vec<u32> = Vec::new();
    for &t in terms {
        let idf = view.scorer.idf(view.df[t as usize] as usize);
        view.postings[t as usize].for_each(|slot, tf| {
            if view.docs[slot as usize].is_none() {
                return;
            }
            let s = &mut scores[slot as usize];
            if *s == 0.0 {
                touched.push(slot);
            }
            *s += Scorer::term_with_norm(idf, tf, norms.get(view.lengths[slot as usize]));
        });
    }
    top_slots(&scores, touched, k)
        .into_iter()
        .map(|slot| (slot, scores[slot as usize]))
        .collect()
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

/// One distinct query term.
struct Term<'a> {
    list: &'a PostingList,
    idf: f32,
    /// Times it occurs in the query.
    count: f32,
    /// The block the window bounds have reached.
    block: usize,
    /// The best score of the unfilled tail, if any.
    tail_bound: f32,
    iter: Cursor<'a>,
    probe: Cursor<'a>,
}

impl Term<'_> {
    /// The best contribution any posting of block `b` can make.
    fn block_bound(&self, b: usize, norms: &Norms<'_>) -> f32 {
        self.list
            .block_impacts(b)
            .iter()
            .map(|&(tf, dl)| Scorer::term_with_norm(self.idf, tf, norms.get(dl)))
            .fold(0.0, f32::max)
    }

    /// The best contribution in slots `from..to` (times the query count).
    fn window_bound(&mut self, from: u32, to: u32, norms: &Norms<'_>) -> f32 {
        let n = self.list.blocks();
        while self.block < n && self.list.block_last(self.block) < from {
            self.block += 1;
        }
        let mut best = 0f32;
        let mut b = self.block;
        while b < n && self.list.block_first_bound(b) < to {
            best = best.max(self.block_bound(b, norms));
            b += 1;
        }
        if b == n {
            let tail = self.list.tail();
            if let (Some(first), Some(last)) = (tail.first(), tail.last()) {
                if first.0 < to && last.0 >= from {
                    best = best.max(self.tail_bound);
                }
            }
        }
        best * self.count
    }

    /// The lowest slot at or after `from` this term may hold (`u32::MAX`: none).
    fn next_from(&mut self, from: u32) -> u32 {
        let n = self.list.blocks();
        while self.block < n && self.list.block_last(self.block) < from {
            self.block += 1;
        }
        if self.block < n {
            return self.list.block_first_bound(self.block).max(from);
        }
        let tail = self.list.tail();
        let i = tail.partition_point(|p| p.0 < from);
        tail.get(i).map_or(u32::MAX, |p| p.0)
    }
}

/// Block-max MaxScore over windows of slots.
pub(super) fn top_k_pruned(view: &View<'_>, terms: &[u32], k: usize) -> Vec<(u32, f32)> {
    let norms = Norms::new(view.scorer, view.max_len);
    // distinct terms, and each query position's index among them
    let mut distinct: Vec<u32> = Vec::new();
    let positions: Vec<usize> = terms
        .iter()
        .map(|&t| match distinct.iter().position(|&d| d == t) {
            Some(i) => i,
            None => {
                distinct.push(t);
                distinct.len() - 1
            }
        })
        .collect();
    let mut qterms: Vec<Term<'_>> = distinct
        .iter()
        .map(|&t| {
            let list = &view.postings[t as usize];
            let idf = view.scorer.idf(view.df[t as usize] as usize);
            let tail_bound = list
                .tail()
                .iter()
                .map(|&(slot, tf)| {
                    Scorer::term_with_norm(idf, tf, norms.get(view.lengths[slot as usize]))
                })
                .fold(0.0, f32::max);
            Term {
                list,
                idf,
                count: positions.iter().filter(|&&p| distinct[p] == t).count() as f32,
                block: 0,
                tail_bound,
                iter: Cursor::new(list),
                probe: Cursor::new(list),
            }
        })
        .collect();
    let m = qterms.len();
    let end = view.docs.len() as u32;
    let mut heap: BinaryHeap<Entry> = BinaryHeap::with_capacity(k + 1);
    let mut acc = vec![0f32; WINDOW as usize];
    let mut seen = vec![0u64; WINDOW as usize / 64];
    let mut bounds = vec![0f32; m];
    let mut order: Vec<usize> = (0..m).collect();
    let mut tfs: Vec<Option<u32>> = vec![None; m];

    let mut from = qterms.iter_mut().map(|t| t.next_from(0)).min().unwrap_or(u32::MAX);
    while from < end {
        let to = from.saturating_add(WINDOW).min(end);
        for (j, t) in qterms.iter_mut().enumerate() {
            bounds[j] = t.window_bound(from, to, &norms);
        }
        let full = heap.len() == k;
        let threshold = heap.peek().map_or(0.0, |e| e.score);
        order.sort_by(|&a, &b| bounds[a].total_cmp(&bounds[b]));
        // the non-essential prefix: terms whose bounds together cannot enter the top k
        let mut rest = 0f32;
        let mut n_rest = 0;
        if full {
            for &j in &order {
                if (rest + bounds[j]) * MARGIN <= threshold {
                    rest += bounds[j];
                    n_rest += 1;
                } else {
                    break;
                }
            }
        }
        if n_rest < m {
            for &j in &order[n_rest..] {
                let t = &mut qterms[j];
                let (idf, count) = (t.idf, t.count);
                t.iter.for_range(from, to, |slot, tf| {
                    let i = (slot - from) as usize;
                    let dl = view.lengths[slot as usize];
                    acc[i] += Scorer::term_with_norm(idf, tf, norms.get(dl)) * count;
                    seen[i / 64] |= 1 << (i % 64);
                });
            }
            for w in 0..seen.len() {
                let mut bits = std::mem::take(&mut seen[w]);
                while bits != 0 {
                    let i = w * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    let partial = std::mem::take(&mut acc[i]);
                    let slot = from + i as u32;
                    if view.docs[slot as usize].is_none() {
                        continue;
                    }
                    if heap.len() == k {
                        let threshold = heap.peek().map_or(0.0, |e| e.score);
                        if (partial + rest) * MARGIN <= threshold {
                            continue;
                        }
                    }
                    // the exact score, in query order
                    for (j, t) in qterms.iter_mut().enumerate() {
                        tfs[j] = t.probe.seek(slot);
                    }
                    let norm = norms.get(view.lengths[slot as usize]);
                    let mut score = 0f32;
                    for &p in &positions {
                        if let Some(tf) = tfs[p] {
                            score += Scorer::term_with_norm(qterms[p].idf, tf, norm);
                        }
                    }
                    if score <= 0.0 {
                        continue;
                    }
                    if heap.len() < k {
                        heap.push(Entry { score, slot });
                    } else if heap.peek().is_some_and(|worst| score > worst.score) {
                        heap.pop();
                        heap.push(Entry { score, slot });
                    }
                }
            }
        }
        from = qterms.iter_mut().map(|t| t.next_from(to)).min().unwrap_or(u32::MAX);
    }
    let mut hits: Vec<Entry> = heap.into_vec();
    hits.sort();
    hits.into_iter().map(|e| (e.slot, e.score)).collect()
}
