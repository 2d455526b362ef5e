//! A reranker that scores documents by embedding cosine with the query.

use std::sync::Arc;

use super::{RerankQuery, Reranker};
use crate::embed::cosine;
use crate::{Embedder, Error, Result};

/// Scores each document by the cosine between its embedding and the query's.
///
/// Model-free: it wraps any [`Embedder`] (with the `models` feature, a
/// [`BertEmbedder`](crate::embed::BertEmbedder)). The query and the documents are embedded in
/// one call, so a batching embedder sees them together. Scores lie in `[-1, 1]`; the
/// instruction of a [`RerankQuery`] is ignored.
///
/// ```
/// use ndarray::Array2;
/// use rerank::rerankers::EmbeddingReranker;
/// use rerank::{Embedder, Reranker, Result};
/// use rerank::rerankers::RerankQuery;
///
/// /// Counts of the letters a and b.
/// struct Ab;
/// impl Embedder for Ab {
///     fn embed(&self, texts: &[&str]) -> Result<Array2<f32>> {
///         Ok(Array2::from_shape_fn((texts.len(), 2), |(i, j)| {
///             texts[i].matches(['a', 'b'][j]).count() as f32
///         }))
///     }
///     fn dim(&self) -> usize { 2 }
/// }
///
/// let reranker = EmbeddingReranker::new(Ab);
/// let scores = reranker.score(&RerankQuery::new("aa"), &["bb", "ab", "a"])?;
/// assert!(scores[2] > scores[1] && scores[1] > scores[0]);
/// # Ok::<(), rerank::Error>(())
/// ```
#[derive(Clone)]
pub struct EmbeddingReranker {
    embedder: Arc<dyn Embedder>,
}

impl EmbeddingReranker {
    /// A reranker over `embedder` (pass an `Arc` to share one embedder with a dense index).
    pub fn new(embedder: impl Embedder + 'static) -> Self {
        EmbeddingReranker {
            embedder: Arc::new(embedder),
        }
    }

    /// The embedder behind this reranker.
    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }
}

impl std::fmt::Debug for EmbeddingReranker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddingReranker")
            .field("dim", &self.embedder.dim())
            .finish()
    }
}

impl Reranker for EmbeddingReranker {
    fn score(&self, query: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
        if docs.is_empty() {
            return Ok(Vec::new());
        }
        let mut texts = Vec::with_capacity(docs.len() + 1);
        texts.push(query.text.as_str());
        texts.extend_from_slice(docs);
        let m = self.embedder.embed(&texts)?;
        if m.nrows() != texts.len() {
            return Err(Error::rerank(format!(
                "the embedder returned {} rows for {} texts",
                m.nrows(),
                texts.len()
            )));
        }
        let q = m.row(0).to_vec();
        Ok(m.rows()
            .into_iter()
            .skip(1)
            .map(|d| cosine(&q, &d.to_vec()))
            .collect())
    }

    fn name(&self) -> &str {
        "embedding"
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use ndarray::Array2;

    use super::*;

    /// Fixed 2-d vectors by text, recording every call.
    struct Table {
        calls: Mutex<Vec<Vec<String>>>,
    }

    impl Table {
        fn new() -> Self {
            Table {
                calls: Mutex::new(Vec::new()),
            }
        }
    }

    impl Embedder for Table {
        fn embed(&self, texts: &[&str]) -> Result<Array2<f32>> {
            self.calls
                .lock()
                .unwrap()
                .push(texts.iter().map(|t| t.to_string()).collect());
            let mut m = Array2::zeros((texts.len(), 2));
            for (i, t) in texts.iter().enumerate() {
                let v = match *t {
                    "q" => [1.0, 0.0],
                    "same" => [3.0, 0.0],
                    "diag" => [1.0, 1.0],
                    "orth" => [0.0, 2.0],
                    "opposite" => [-1.0, 0.0],
                    _ => [0.0, 0.0],
                };
                m[[i, 0]] = v[0];
                m[[i, 1]] = v[1];
            }
            Ok(m)
        }
        fn dim(&self) -> usize {
            2
        }
    }

    /// Returns one row too few.
    struct Short;
    impl Embedder for Short {
        fn embed(&self, texts: &[&str]) -> Result<Array2<f32>> {
            Ok(Array2::zeros((texts.len() - 1, 2)))
        }
        fn dim(&self) -> usize {
            2
        }
    }

    #[test]
    fn scores_are_cosines_in_input_order() {
        let table = Arc::new(Table::new());
        let r = EmbeddingReranker::new(table.clone());
        let q = RerankQuery::new("q").with_instruction("ignored");
        let s = r
            .score(&q, &["orth", "same", "diag", "opposite", "zero"])
            .unwrap();
        let expect = [0.0, 1.0, std::f32::consts::FRAC_1_SQRT_2, -1.0, 0.0];
        assert_eq!(s.len(), expect.len());
        for (got, want) in s.iter().zip(expect) {
            assert!((got - want).abs() < 1e-6, "{s:?}");
        }
        // One embedder call, query first.
        let calls = table.calls.lock().unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0][0], "q");
        assert_eq!(calls[0].len(), 6);
    }

    #[test]
    fn no_documents_no_call() {
        let table = Arc::new(Table::new());
        let r = EmbeddingReranker::new(table.clone());
        assert!(r.score(&RerankQuery::new("q"), &[]).unwrap().is_empty());
        assert!(table.calls.lock().unwrap().is_empty());
        assert_eq!(r.name(), "embedding");
    }

    #[test]
    fn a_wrong_row_count_is_an_error() {
        let r = EmbeddingReranker::new(Arc::new(Short));
        let e = r.score(&RerankQuery::new("q"), &["a", "b"]).unwrap_err();
        assert!(matches!(e, Error::Rerank { .. }), "{e}");
    }
}
