//! A reranker that scores documents by embedding cosine with the query, reading the
//! documents' vectors from a [`VectorSource`] (a dense index, the store) when it has them.

use std::sync::Arc;

use ndarray::Array2;

use super::{RerankQuery, Reranker};
use crate::embed::cosine;
use crate::{Embedder, Error, Result};

/// Document vectors already computed by the same embedder, looked up by document text
/// (`title + " " + text`, [`Document::full_text`](crate::Document::full_text), which is what
/// rerankers are given): [`DenseIndex`](crate::DenseIndex) and, with the `sqlite` feature,
/// [`StoreDense`](crate::store::StoreDense) implement it.
pub trait VectorSource: Send + Sync {
    /// The stored vector of each text, `None` where there is none (that text is embedded).
    fn vectors(&self, texts: &[&str]) -> Result<Vec<Option<Vec<f32>>>>;
}

impl<V: VectorSource + ?Sized> VectorSource for Arc<V> {
    fn vectors(&self, texts: &[&str]) -> Result<Vec<Option<Vec<f32>>>> {
        (**self).vectors(texts)
    }
}

/// Scores each document by the cosine between its embedding and the query's.
///
/// Model-free: it wraps any [`Embedder`] (with the `models` feature, a
/// [`BertEmbedder`](crate::embed::BertEmbedder)). The query and the documents are embedded in
/// one call, so a batching embedder sees them together. With
/// [`with_vectors`](EmbeddingReranker::with_vectors), the documents' stored vectors are used
/// and only the query (and any document without one) is embedded. Scores lie in `[-1, 1]`;
/// the instruction of a [`RerankQuery`] is ignored.
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
///     fn embed_as(&self, texts: &[&str], _role: rerank::Role) -> Result<Array2<f32>> {
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
    vectors: Option<Arc<dyn VectorSource>>,
}

impl EmbeddingReranker {
    /// A reranker over `embedder` (pass an `Arc` to share one embedder with a dense index).
    pub fn new(embedder: impl Embedder + 'static) -> Self {
        EmbeddingReranker {
            embedder: Arc::new(embedder),
            vectors: None,
        }
    }

    /// Reads the documents' vectors from `source` (which must hold vectors of this reranker's
    /// embedder: a [`DenseIndex`](crate::DenseIndex) built with it, or the store's vectors of
    /// it), so scoring embeds only the query and the documents `source` lacks.
    pub fn with_vectors(mut self, source: impl VectorSource + 'static) -> Self {
        self.vectors = Some(Arc::new(source));
        self
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
            .field("stored_vectors", &self.vectors.is_some())
            .finish()
    }
}

impl Reranker for EmbeddingReranker {
    fn score(&self, query: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
        if docs.is_empty() {
            return Ok(Vec::new());
        }
        let dim = self.embedder.dim();
        let stored = match &self.vectors {
            Some(source) => {
                let v = source.vectors(docs)?;
                if v.len() != docs.len() {
                    return Err(Error::rerank(format!(
                        "the vector source returned {} entries for {} documents",
                        v.len(),
                        docs.len()
                    )));
                }
                if let Some(bad) = v.iter().flatten().find(|v| v.len() != dim) {
                    return Err(Error::rerank(format!(
                        "a stored vector has {} dimensions, the embedder {dim}",
                        bad.len()
                    )));
                }
                v
            }
            None => vec![None; docs.len()],
        };
        // The query is embedded as a query, the documents without a stored vector as
        // documents (asymmetric models prompt the two sides differently).
        let q = self.embedder.embed_queries(&[query.text.as_str()])?;
        if q.nrows() != 1 || q.ncols() != dim {
            return Err(Error::rerank(format!(
                "the embedder returned {:?} for one query of {dim} dimensions",
                q.shape()
            )));
        }
        let q = q.row(0).to_vec();
        let texts: Vec<&str> = docs
            .iter()
            .zip(&stored)
            .filter(|(_, v)| v.is_none())
            .map(|(d, _)| *d)
            .collect();
        let m = if texts.is_empty() {
            Array2::zeros((0, dim))
        } else {
            self.embedder.embed(&texts)?
        };
        if m.nrows() != texts.len() {
            return Err(Error::rerank(format!(
                "the embedder returned {} rows for {} texts",
                m.nrows(),
                texts.len()
            )));
        }
        let mut embedded = m.rows().into_iter();
        stored
            .iter()
            .map(|v| match v {
                Some(v) => Ok(cosine(&q, v)),
                None => embedded
                    .next()
                    .map(|d| cosine(&q, &d.to_vec()))
                    .ok_or_else(|| Error::rerank("the embedder returned too few rows")),
            })
            .collect()
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
    use crate::Role;

    /// Fixed 2-d vectors by text, recording every call and its role.
    struct Table {
        calls: Mutex<Vec<(Role, Vec<String>)>>,
    }

    impl Table {
        fn new() -> Self {
            Table {
                calls: Mutex::new(Vec::new()),
            }
        }
    }

    impl Embedder for Table {
        fn embed_as(&self, texts: &[&str], role: Role) -> Result<Array2<f32>> {
            self.calls
                .lock()
                .unwrap()
                .push((role, texts.iter().map(|t| t.to_string()).collect()));
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
        fn embed_as(&self, texts: &[&str], _role: Role) -> Result<Array2<f32>> {
            Ok(Array2::zeros((texts.len().saturating_sub(1), 2)))
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
        // The query as a query, then the documents as documents, in one call.
        let calls = table.calls.lock().unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0], (Role::Query, vec!["q".to_string()]));
        assert_eq!(calls[1].0, Role::Document);
        assert_eq!(calls[1].1.len(), 5);
    }

    #[test]
    fn no_documents_no_call() {
        let table = Arc::new(Table::new());
        let r = EmbeddingReranker::new(table.clone());
        assert!(r.score(&RerankQuery::new("q"), &[]).unwrap().is_empty());
        assert!(table.calls.lock().unwrap().is_empty());
        assert_eq!(r.name(), "embedding");
    }

    /// Vectors by text, as a dense index or the store would hold them.
    struct Stored(Vec<(&'static str, [f32; 2])>);
    impl VectorSource for Stored {
        fn vectors(&self, texts: &[&str]) -> Result<Vec<Option<Vec<f32>>>> {
            Ok(texts
                .iter()
                .map(|t| self.0.iter().find(|(s, _)| s == t).map(|(_, v)| v.to_vec()))
                .collect())
        }
    }

    #[test]
    fn stored_vectors_are_used_and_only_the_rest_is_embedded() {
        let docs = ["orth", "same", "diag", "opposite", "zero"];
        let q = RerankQuery::new("q");
        let plain = EmbeddingReranker::new(Arc::new(Table::new()))
            .score(&q, &docs)
            .unwrap();
        let table = Arc::new(Table::new());
        // the stored vectors are what the table embeds (scaled: cosine ignores the norm)
        let stored = Stored(vec![
            ("same", [1.0, 0.0]),
            ("diag", [2.0, 2.0]),
            ("orth", [0.0, 1.0]),
        ]);
        let r = EmbeddingReranker::new(table.clone()).with_vectors(stored);
        let s = r.score(&q, &docs).unwrap();
        assert_eq!(s, plain);
        let calls = table.calls.lock().unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0], (Role::Query, vec!["q".to_string()]));
        assert_eq!(calls[1].0, Role::Document);
        assert_eq!(calls[1].1, ["opposite", "zero"]);
    }

    #[test]
    fn stored_vectors_of_another_dimension_are_an_error() {
        struct Wrong;
        impl VectorSource for Wrong {
            fn vectors(&self, texts: &[&str]) -> Result<Vec<Option<Vec<f32>>>> {
                Ok(texts.iter().map(|_| Some(vec![1.0; 3])).collect())
            }
        }
        let r = EmbeddingReranker::new(Arc::new(Table::new())).with_vectors(Wrong);
        let e = r.score(&RerankQuery::new("q"), &["a"]).unwrap_err();
        assert!(matches!(e, Error::Rerank { .. }), "{e}");
    }

    #[test]
    fn a_wrong_row_count_is_an_error() {
        let r = EmbeddingReranker::new(Arc::new(Short));
        let e = r.score(&RerankQuery::new("q"), &["a", "b"]).unwrap_err();
        assert!(matches!(e, Error::Rerank { .. }), "{e}");
    }
}
