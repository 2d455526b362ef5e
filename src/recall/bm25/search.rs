//! Top-k over the posting lists: the exhaustive reference and block-max MaxScore.
//!
//! Both compute a document's score the same way, term contributions added in query order
//! with [`Scorer::term_with_norm`], so their floats agree to the last bit. The pruned search
//! walks the slots in windows; in each window it bounds every term by the best impact of its
//! blocks there, leaves out the terms whose bounds together cannot beat the current k-th
//! score (MaxScore's non-essential terms), accumulates bounds of the others from one-byte
//! length codes that never exceed the true lengths (a table that stays in cache), passing over
//! their blocks that cannot enter even with every other term at its best, checks the
//! left-out terms of a document while it can still enter (looking each one up, or, for a term
//! with few postings in the window against the candidates, reading the window's postings of it
//! whole first), and scores exactly only the documents that can.
//! Bounds are compared with a relative margin far above float rounding, so pruning only ever
//! skips documents that could not have entered: the top k is exact, ties included (the
//! lower slot wins, and slots are visited in increasing order).

use std::sync::Arc;

use super::postings::{Cursor, PostingList};
use super::Scorer;
use crate::recall::top_k::{top_slots, Best, MaxScore, Window, WindowTerm, WINDOW};
use crate::Document;

/// A non-essential term is read whole in a window when it holds at most this many postings
/// there per candidate, rather than looked up for each candidate.
const LIST_FACTOR: usize = 32;

/// Lengths up to this get their normalization from a table built per query.
const NORM_TABLE_MAX: u32 = 4096;

/// What a search reads from the index.
pub(super) struct View<'a> {
    pub(super) scorer: &'a Scorer,
    pub(super) postings: &'a [PostingList],
    pub(super) df: &'a [u32],
    pub(super) lengths: &'a [u32],
    pub(super) length_codes: &'a [u8],
    /// The removed-slot bits, when any slot is removed.
    pub(super) dead: Option<&'a [u64]>,
    pub(super) max_len: u32,
    pub(super) docs: &'a [Option<Arc<Document>>],
}

/// The length each one-byte code stands for: exact below 128, then steps of 6 %; a code's
/// length is at most the lengths it codes, so a score computed from it is an upper bound.
fn code_lengths() -> &'static [u32; 256] {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, v) in t.iter_mut().enumerate() {
            *v = if i < 128 {
                i as u32
            } else {
                (128.0 * 1.06f64.powi(i as i32 - 127)).floor() as u32
            };
        }
        t
    })
}

/// The largest code whose length is at most `len`.
pub(super) fn length_code(len: u32) -> u8 {
    let t = code_lengths();
    (t.partition_point(|&l| l <= len) - 1) as u8
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

/// The normalization of each length code (the lower bound of the lengths it codes, so
/// contributions computed with it are upper bounds).
fn code_norms(scorer: &Scorer) -> [f32; 256] {
    let t = code_lengths();
    std::array::from_fn(|i| scorer.norm(t[i]))
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
    /// The best score of each full block.
    block_bounds: Vec<f32>,
    iter: Cursor<'a>,
    probe: Cursor<'a>,
    /// At most how many postings the current window holds.
    span: usize,
}

impl WindowTerm for Term<'_> {
    /// The best contribution in slots `from..to` (times the query count).
    fn window_bound(&mut self, from: u32, to: u32) -> f32 {
        let n = self.list.blocks();
        while self.block < n && self.list.block_last(self.block) < from {
            self.block += 1;
        }
        let mut best = 0f32;
        let mut b = self.block;
        while b < n && self.list.block_first_bound(b) < to {
            best = best.max(self.block_bounds[b]);
            b += 1;
        }
        self.span = (b - self.block) * super::postings::BLOCK;
        if b == n {
            let tail = self.list.tail();
            if let (Some(first), Some(last)) = (tail.first(), tail.last()) {
                if first.0 < to && last.0 >= from {
                    best = best.max(self.tail_bound);
                    self.span += tail.len();
                }
            }
        }
        best * self.count
    }
}

impl Term<'_> {
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
    let code_norm = code_norms(view.scorer);
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
            let best = |score: f32, (tf, dl): (u32, u32)| {
                score.max(Scorer::term_with_norm(idf, tf, norms.get(dl)))
            };
            let tail = list.tail().iter();
            let tail_bound = tail
                .map(|&(slot, tf)| (tf, view.lengths[slot as usize]))
                .fold(0.0, best);
            // the best contribution any posting of each block can make
            let block_bounds = (0..list.blocks())
                .map(|b| list.block_impacts(b).iter().copied().fold(0.0, best))
                .collect();
            Term {
                list,
                idf,
                block_bounds,
                count: positions.iter().filter(|&&p| distinct[p] == t).count() as f32,
                block: 0,
                tail_bound,
                iter: Cursor::new(list),
                probe: Cursor::new(list),
                span: 0,
            }
        })
        .collect();
    let m = qterms.len();
    let end = view.docs.len() as u32;
    let mut best = Best::new(k);
    let mut window = Window::new();
    let mut candidates = Vec::new();
    // non-essential terms read whole in a window (when their postings there are few against
    // the candidates): their slots' bits and term frequencies, by rank
    let mut listed = vec![false; m];
    let mut present = vec![[0u64; WINDOW as usize / 64]; m];
    // (a term's frequencies are allocated the first time it is read whole)
    let mut present_tf: Vec<Vec<u32>> = vec![Vec::new(); m];
    let mut tfs: Vec<Option<u32>> = vec![None; m];
    // each term's bound over its whole list: once the k-th score passes the sum of the
    // smallest, windows are only started where another term has postings
    let mut ms = MaxScore::new(
        qterms
            .iter()
            .map(|t| t.block_bounds.iter().fold(t.tail_bound, |a, &b| a.max(b)) * t.count)
            .collect(),
    );

    let mut from = qterms
        .iter_mut()
        .map(|t| t.next_from(0))
        .min()
        .unwrap_or(u32::MAX);
    while from < end {
        let to = from.saturating_add(WINDOW).min(end);
        let bar = best.bar();
        ms.split(&mut qterms, from, to, bar);
        if !ms.essential().is_empty() {
            for &j in ms.essential() {
                let t = &mut qterms[j];
                let (idf, count) = (t.idf, t.count);
                // a block of the term's whose best, with every other term at its best here,
                // cannot enter is passed over: a document of it that another essential term
                // brings in is then bounded without this term, and cannot enter either way
                let others = ms.others(j);
                let block_bounds = &t.block_bounds;
                let keep = |b: usize| bar.admits(block_bounds[b] * count + others);
                // an upper bound of the term's part, from the one-byte length codes
                t.iter.for_range_in(from, to, keep, |slot, tf| {
                    let i = (slot - from) as usize;
                    let norm = code_norm[view.length_codes[slot as usize] as usize];
                    window.add(i, Scorer::term_with_norm(idf, tf, norm) * count);
                });
            }
            // the accumulated documents whose bound can still enter (against the bar at
            // this point: it only rises)
            let bar = best.bar();
            let n_cand = window.drain_into(&mut candidates, |partial| {
                bar.admits(partial + ms.rest_bound(0))
            });
            for j in ms.non_essential() {
                let t = &mut qterms[j];
                listed[j] = t.span <= LIST_FACTOR * n_cand;
                if listed[j] {
                    let (bits, tf_of) = (&mut present[j], &mut present_tf[j]);
                    if tf_of.is_empty() {
                        tf_of.resize(WINDOW as usize, 0);
                    }
                    t.probe.for_range(from, to, |slot, tf| {
                        let i = (slot - from) as usize;
                        bits[i / 64] |= 1 << (i % 64);
                        tf_of[i] = tf;
                    });
                }
            }
            for &(i, partial) in &candidates[..n_cand] {
                let slot = from + i;
                if let Some(dead) = view.dead {
                    if dead[slot as usize / 64] & (1 << (slot % 64)) != 0 {
                        continue;
                    }
                }
                let bar = best.bar();
                if !bar.admits(partial + ms.rest_bound(0)) {
                    continue;
                }
                // the non-essential terms, largest bound first, while the doc can enter
                // (bounds from the length code: the exact length is read only for the
                // documents that are scored)
                let code = code_norm[view.length_codes[slot as usize] as usize];
                let can = ms.add_non_essential(bar, partial, |j| {
                    let t = &mut qterms[j];
                    tfs[j] = if listed[j] {
                        let i = i as usize;
                        (present[j][i / 64] >> (i % 64) & 1 == 1).then(|| present_tf[j][i])
                    } else {
                        t.probe.seek(slot)
                    };
                    tfs[j].map_or(0.0, |tf| Scorer::term_with_norm(t.idf, tf, code) * t.count)
                });
                if !can {
                    continue;
                }
                // the exact score, in query order
                for &j in ms.essential() {
                    tfs[j] = qterms[j].probe.seek(slot);
                }
                let norm = norms.get(view.lengths[slot as usize]);
                let mut score = 0f32;
                for &p in &positions {
                    if let Some(tf) = tfs[p] {
                        score += Scorer::term_with_norm(qterms[p].idf, tf, norm);
                    }
                }
                best.offer(slot, score);
            }
            for j in 0..m {
                if std::mem::take(&mut listed[j]) {
                    present[j].fill(0);
                }
            }
        }
        // the next window starts at the next posting of a term that can still matter
        from = qterms
            .iter_mut()
            .zip(ms.skippable(best.bar()))
            .filter(|(_, &s)| !s)
            .map(|(t, _)| t.next_from(to))
            .min()
            .unwrap_or(u32::MAX);
    }
    best.into_sorted()
}
