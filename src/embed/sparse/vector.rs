//! [`SparseVector`]: a learned sparse encoder's output, the non-zero weights over a
//! vocabulary.

/// A sparse vector over a vocabulary: the ids of its non-zero entries in ascending order, and
/// their values. What [`SparseEncoder::encode`](super::SparseEncoder) returns, one per text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SparseVector {
    /// The vocabulary ids of the non-zero entries, ascending, each once.
    pub indices: Vec<u32>,
    /// The value of each entry of `indices`, none zero.
    pub values: Vec<f32>,
}

impl SparseVector {
    /// The non-zero entries of `dense`, in index order.
    pub fn from_dense(dense: &[f32]) -> Self {
        let mut v = SparseVector::default();
        for (i, &x) in dense.iter().enumerate() {
            if x != 0.0 {
                v.indices.push(i as u32);
                v.values.push(x);
            }
        }
        v
    }

    /// The number of non-zero entries.
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// Whether no entry is non-zero (an empty text's vector, for a query-side table).
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// The value at vocabulary id `index` (0 when absent).
    pub fn get(&self, index: u32) -> f32 {
        match self.indices.binary_search(&index) {
            Ok(at) => self.values[at],
            Err(_) => 0.0,
        }
    }

    /// The dot product with `other` (sentence-transformers' `dot` similarity of sparse
    /// encoders), over the ids both have. Both vectors must keep their indices ascending, as
    /// every vector this crate makes does.
    pub fn dot(&self, other: &SparseVector) -> f32 {
        let (mut i, mut j, mut sum) = (0, 0, 0.0f32);
        while i < self.indices.len() && j < other.indices.len() {
            match self.indices[i].cmp(&other.indices[j]) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    sum += self.values[i] * other.values[j];
                    i += 1;
                    j += 1;
                }
            }
        }
        sum
    }

    /// Keeps the `k` entries of largest magnitude (sentence-transformers' `max_active_dims`;
    /// ties go to the lower id), indices still ascending. Nothing changes with `k` or fewer.
    pub fn keep_largest(&mut self, k: usize) {
        if self.len() <= k {
            return;
        }
        let mut order: Vec<usize> = (0..self.len()).collect();
        order.sort_by(|&a, &b| {
            let (x, y) = (self.values[a].abs(), self.values[b].abs());
            y.total_cmp(&x).then(a.cmp(&b))
        });
        order.truncate(k);
        order.sort_unstable();
        self.indices = order.iter().map(|&i| self.indices[i]).collect();
        self.values = order.iter().map(|&i| self.values[i]).collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_round_trip_dot_and_top_k() {
        let a = SparseVector::from_dense(&[0.0, 2.0, 0.0, -1.0, 3.0]);
        assert_eq!(a.indices, [1, 3, 4]);
        assert_eq!(a.values, [2.0, -1.0, 3.0]);
        assert_eq!((a.get(4), a.get(0)), (3.0, 0.0));
        let b = SparseVector::from_dense(&[5.0, 1.0, 0.0, 0.0, 2.0]);
        assert_eq!(a.dot(&b), 2.0 + 6.0);
        assert_eq!(a.dot(&SparseVector::default()), 0.0);
        let mut top = a.clone();
        top.keep_largest(2);
        assert_eq!((top.indices, top.values), (vec![1, 4], vec![2.0, 3.0]));
        let mut ties = SparseVector::from_dense(&[1.0, 1.0, 1.0]);
        ties.keep_largest(2);
        assert_eq!(ties.indices, [0, 1]);
        let mut all = a.clone();
        all.keep_largest(5);
        assert_eq!(all, a);
    }
}
