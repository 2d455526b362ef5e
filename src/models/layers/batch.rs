//! Length batching: group inputs of similar length under a token budget per batch, counted as
//! `inputs x longest` (the padded size; for the packed encoder an upper bound of the tokens
//! computed) by [`plan_batches`], or as the real tokens of a packed batch by
//! [`plan_packed_batches`]; and, within a large packed batch on the crate's kernels, groups of
//! sequences that each core runs alone ([`run_in_groups`]).

use std::ops::Range;

use rayon::prelude::*;

use crate::models::layers::kernels::{on_own_thread, threads};

/// Where a run of batches hands each batch's output, with the batch's number: the first
/// error it returns stops the run.
pub(crate) type BatchSink<'a> = &'a mut dyn FnMut(usize, Vec<f32>) -> crate::Result<()>;

/// Inputs run through the model together: their indices in the caller's order, and the padded
/// length (the longest of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Positions of the inputs in the caller's slice.
    pub indices: Vec<usize>,
    /// Padded sequence length of the batch.
    pub seq_len: usize,
}

impl Batch {
    /// Padded tokens this batch computes (`indices.len() * seq_len`).
    #[cfg(test)]
    pub fn padded_tokens(&self) -> usize {
        self.indices.len() * self.seq_len
    }
}

/// Where each of a packed batch's sequences starts: the running sum of `lengths`.
pub(crate) fn packed_starts(lengths: &[usize]) -> Vec<usize> {
    lengths
        .iter()
        .scan(0, |acc, &l| {
            let start = *acc;
            *acc += l;
            Some(start)
        })
        .collect()
}

/// Splits inputs of the given `lengths` into batches: longest first, each batch at most
/// `max_batch_size` inputs and at most `max_tokens` padded tokens (an input longer than the
/// budget gets a batch of its own). Every index appears exactly once.
pub fn plan_batches(lengths: &[usize], max_tokens: usize, max_batch_size: usize) -> Vec<Batch> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    // Longest first; ties keep input order, so plans are deterministic.
    order.sort_by(|&a, &b| lengths[b].cmp(&lengths[a]).then(a.cmp(&b)));
    let max_batch_size = max_batch_size.max(1);
    let mut batches = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut seq_len = 0;
    for i in order {
        // Inputs arrive longest first, so the batch's padded length is its first input's.
        let fits = current.len() < max_batch_size && (current.len() + 1) * seq_len <= max_tokens;
        if !current.is_empty() && !fits {
            batches.push(Batch {
                indices: std::mem::take(&mut current),
                seq_len,
            });
        }
        if current.is_empty() {
            seq_len = lengths[i];
        }
        current.push(i);
    }
    if !current.is_empty() {
        batches.push(Batch {
            indices: current,
            seq_len,
        });
    }
    batches
}

/// Like [`plan_batches`], but the budget counts the real tokens of a packed (padding-free)
/// batch: the sum of its inputs' lengths is at most `max_tokens` (an input longer than the
/// budget gets a batch of its own). Longest first, every index exactly once.
pub fn plan_packed_batches(
    lengths: &[usize],
    max_tokens: usize,
    max_batch_size: usize,
) -> Vec<Batch> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by(|&a, &b| lengths[b].cmp(&lengths[a]).then(a.cmp(&b)));
    let max_batch_size = max_batch_size.max(1);
    let mut batches = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut tokens = 0usize;
    for i in order {
        let n = lengths[i];
        let fits = current.len() < max_batch_size && tokens.saturating_add(n) <= max_tokens;
        if !current.is_empty() && !fits {
            let seq_len = lengths[current[0]];
            batches.push(Batch {
                indices: std::mem::take(&mut current),
                seq_len,
            });
            tokens = 0;
        }
        current.push(i);
        tokens = tokens.saturating_add(n);
    }
    if !current.is_empty() {
        let seq_len = lengths[current[0]];
        batches.push(Batch {
            indices: current,
            seq_len,
        });
    }
    batches
}

/// Tokens per group of [`run_in_groups`]: at width 384 a group's states, stacked queries, keys
/// and values and attention context take about 4 MB, what the two cores' level-2 caches hold
/// on the Xeon (2 MB a core). With all-MiniLM-L6-v2 and MiniLM ColBERT documents there, groups
/// took 8-14 % less time than one product per step over the whole batch, whose steps read
/// their inputs back from memory or from the other core's cache; groups of 1,024 tokens
/// measured within 2 % of these.
const GROUP_TOKENS: usize = 512;

/// The widest encoder whose large batches run in groups. Wider ones run whole: at width 768,
/// groups gained nothing on ModernBERT and cost GTE 5-7 %, whose layers' weights (28 MB)
/// rather than the activations are what streams from memory; with every thread on the same
/// product, the threads share each block of weights as it passes.
const GROUPED_MAX_WIDTH: usize = 512;

/// Consecutive runs of the sequences of `lengths` (a packed batch's, in order), each of at
/// most [`GROUP_TOKENS`] tokens (a longer sequence alone).
fn cache_groups(lengths: &[usize]) -> Vec<Range<usize>> {
    let mut groups = Vec::new();
    let (mut start, mut tokens) = (0, 0);
    for (i, &len) in lengths.iter().enumerate() {
        if i > start && tokens + len > GROUP_TOKENS {
            groups.push(start..i);
            (start, tokens) = (i, 0);
        }
        tokens += len;
    }
    if start < lengths.len() {
        groups.push(start..lengths.len());
    }
    groups
}

/// `run(sequences)` over a packed batch of sequences of `lengths` (states `hidden` wide), its
/// rows concatenated in order. When the encoder is at most [`GROUPED_MAX_WIDTH`] wide and the
/// batch makes at least two groups of [`GROUP_TOKENS`] per thread, each group runs alone, the
/// groups spread over the pool, each on its thread's kernels ([`on_own_thread`]), so that a
/// step reads what the step before it left in the core's caches; otherwise the batch runs
/// whole, every step spread over the threads. `run` returns a sequence's rows in order (one
/// per token, or one per sequence), so the concatenation is the whole batch's.
pub(crate) fn run_in_groups(
    lengths: &[usize],
    hidden: usize,
    run: impl Fn(Range<usize>) -> crate::Result<Vec<f32>> + Sync,
) -> crate::Result<Vec<f32>> {
    if hidden > GROUPED_MAX_WIDTH {
        return run(0..lengths.len());
    }
    let groups = cache_groups(lengths);
    if groups.len() < 2 * threads() {
        return run(0..lengths.len());
    }
    let parts: Vec<Vec<f32>> = groups
        .into_par_iter()
        .map(|group| on_own_thread(|| run(group)))
        .collect::<crate::Result<_>>()?;
    Ok(parts.concat())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn groups_similar_lengths_under_the_budget() {
        let lengths = [10, 300, 12, 290, 11, 5];
        let plan = plan_batches(&lengths, 600, 32);
        // 300 and 290 fill 600; the short ones go together.
        assert_eq!(plan[0].indices, vec![1, 3]);
        assert_eq!(plan[0].seq_len, 300);
        assert_eq!(plan[1].indices, vec![2, 4, 0, 5]);
        assert_eq!(plan[1].seq_len, 12);
        // An input over the budget runs alone.
        let plan = plan_batches(&[50, 700, 40], 90, 32);
        assert_eq!(plan[0].indices, vec![1]);
        assert_eq!(plan[1].indices, vec![0]);
        assert_eq!(plan[2].indices, vec![2]);
        // The batch size caps too.
        let plan = plan_batches(&[3; 5], 1000, 2);
        assert_eq!(plan.len(), 3);
        assert!(plan_batches(&[], 10, 2).is_empty());
    }

    #[test]
    fn packed_batches_count_real_tokens() {
        let lens = [50, 40, 30, 200, 10];
        let plan = plan_packed_batches(&lens, 80, usize::MAX);
        let indices: Vec<Vec<usize>> = plan.iter().map(|b| b.indices.clone()).collect();
        // 200 alone (over the budget), 50 alone (50 + 40 > 80), then 40 + 30 + 10 = 80.
        assert_eq!(indices, vec![vec![3], vec![0], vec![1, 2, 4]]);
        assert_eq!(plan[2].seq_len, 40);
        let pairs = plan_packed_batches(&lens, usize::MAX, 2);
        assert_eq!(pairs.len(), 3);
        assert!(plan_packed_batches(&[], 10, 2).is_empty());
    }

    #[test]
    fn groups_are_consecutive_sequences_under_the_budget() {
        // At most 512 tokens a group; a sequence over the budget alone.
        let lens = [300, 200, 100, 600, 12, 500];
        assert_eq!(cache_groups(&lens), vec![0..2, 2..3, 3..4, 4..6]);
        assert_eq!(cache_groups(&[1500, 10]), vec![0..1, 1..2]);
        assert!(cache_groups(&[]).is_empty());
    }

    #[test]
    fn grouped_runs_concatenate_their_rows_in_order() {
        // Each sequence's rows are its index repeated over its length.
        let lens = vec![300usize; 200];
        let run = |group: Range<usize>| -> crate::Result<Vec<f32>> {
            Ok(group.flat_map(|s| vec![s as f32; lens[s]]).collect())
        };
        let whole = run(0..lens.len()).unwrap();
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let counted = |group: Range<usize>| {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            run(group)
        };
        let calls_for = |lens: &[usize], hidden: usize| {
            calls.store(0, std::sync::atomic::Ordering::Relaxed);
            let rows = run_in_groups(lens, hidden, counted).unwrap();
            assert_eq!(rows, whole[..rows.len()], "rows in order");
            calls.load(std::sync::atomic::Ordering::Relaxed)
        };
        // 200 sequences of 300 tokens: a group each.
        assert_eq!(calls_for(&lens, 384), 200);
        // A wide encoder, or a batch of one group, runs whole: one call.
        assert_eq!(calls_for(&lens, 768), 1);
        assert_eq!(calls_for(&lens[..1], 384), 1);
        // The first error stops the run.
        let failing = |group: Range<usize>| match group.contains(&7) {
            true => Err(crate::Error::model("seven")),
            false => run(group),
        };
        assert!(run_in_groups(&lens, 384, failing).is_err());
    }

    proptest! {
        #[test]
        fn packed_plans_hold_every_input_once_within_the_budget(
            lengths in proptest::collection::vec(1usize..600, 0..200),
            max_tokens in 1usize..5000,
            max_batch in 1usize..64,
        ) {
            let plan = plan_packed_batches(&lengths, max_tokens, max_batch);
            let mut seen: Vec<usize> = plan.iter().flat_map(|b| b.indices.clone()).collect();
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..lengths.len()).collect::<Vec<_>>());
            for b in &plan {
                let tokens: usize = b.indices.iter().map(|&i| lengths[i]).sum();
                prop_assert!(!b.indices.is_empty() && b.indices.len() <= max_batch);
                prop_assert!(b.indices.len() == 1 || tokens <= max_tokens);
                prop_assert_eq!(b.seq_len, b.indices.iter().map(|&i| lengths[i]).max().unwrap());
            }
        }

        #[test]
        fn every_input_once_and_within_limits(
            lengths in proptest::collection::vec(1usize..600, 0..200),
            max_tokens in 1usize..5000,
            max_batch in 1usize..64,
        ) {
            let plan = plan_batches(&lengths, max_tokens, max_batch);
            let mut seen: Vec<usize> = plan.iter().flat_map(|b| b.indices.clone()).collect();
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..lengths.len()).collect::<Vec<_>>());
            for b in &plan {
                prop_assert!(!b.indices.is_empty());
                prop_assert!(b.indices.len() <= max_batch);
                prop_assert_eq!(b.seq_len, b.indices.iter().map(|&i| lengths[i]).max().unwrap());
                prop_assert!(b.indices.len() == 1 || b.padded_tokens() <= max_tokens);
            }
            // Sorted by length: a later batch never holds a longer input than an earlier one.
            for w in plan.windows(2) {
                prop_assert!(w[1].seq_len <= w[0].seq_len);
            }
        }
    }
}
