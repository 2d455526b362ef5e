//! Length batching: group inputs of similar length under a token budget per batch, counted as
//! `inputs x longest` (the padded size; for the packed encoder an upper bound of the tokens
//! computed) by [`plan_batches`], or as the real tokens of a packed batch by
//! [`plan_packed_batches`].

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
