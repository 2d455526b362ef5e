//! [`StoreDense`]: exact cosine recall over one embedder's vectors in the store.

use std::sync::Arc;

use ndarray::Array2;

use super::{doc_from_row_at, vector_from_blob, Loaded, Store, DOC_COLUMNS};
use crate::recall::{Retriever, SearchQuery};
use crate::{DenseIndex, Embedder, Error, Hit, Result};

/// Dense recall over a [`Store`]: the stored vectors of one embedder, loaded once into a
/// [`DenseIndex`] (in the store's order) at the first query and again after a write, so the
/// results are the in-memory index's. Only the query is embedded.
///
/// A document without a vector for this embedder is an error at load (index with
/// [`Store::upsert_embedded`] or fill in with [`Store::embed_missing`]), never a silent gap.
pub struct StoreDense {
    store: Arc<Store>,
    embedder: Arc<dyn Embedder>,
    embedder_id: String,
    loaded: Loaded<DenseIndex>,
}

impl std::fmt::Debug for StoreDense {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreDense")
            .field("store", &self.store.path())
            .field("embedder", &self.embedder_id)
            .finish()
    }
}

impl StoreDense {
    pub(super) fn new(store: Arc<Store>, embedder: Arc<dyn Embedder>, embedder_id: String) -> Self {
        StoreDense {
            store,
            embedder,
            embedder_id,
            loaded: Loaded::new(),
        }
    }

    /// The in-memory index for the store as it is now (loaded when a write changed it).
    fn index(&self) -> Result<Arc<DenseIndex>> {
        self.loaded.get(&self.store, || self.load())
    }

    /// Reads the vectors into a new index, with the generation of the snapshot read.
    fn load(&self) -> Result<(i64, DenseIndex)> {
        let dim = self.embedder.dim();
        let (generation, rows) = self.store.read(|tx| {
            let generation = Store::generation(tx)?;
            let mut stmt = tx.prepare(&format!(
                "SELECT e.vector, e.dim, {DOC_COLUMNS} FROM documents d LEFT JOIN embeddings e \
                 ON e.content_hash = d.content_hash AND e.embedder = ?1 ORDER BY d.slot"
            ))?;
            let rows = stmt.query_map([&self.embedder_id], |r| {
                let vector: Option<Vec<u8>> = r.get(0)?;
                let dim: Option<i64> = r.get(1)?;
                Ok((vector, dim, doc_from_row_at(r, 2)?))
            })?;
            Ok((generation, rows.collect::<rusqlite::Result<Vec<_>>>()?))
        })?;
        let mut docs = Vec::with_capacity(rows.len());
        let mut flat = Vec::with_capacity(rows.len() * dim);
        let mut missing = 0usize;
        for (vector, stored_dim, doc) in rows {
            let doc = doc?;
            match vector {
                Some(v) if stored_dim == Some(dim as i64) && v.len() == dim * 4 => {
                    flat.extend(vector_from_blob(&v));
                    docs.push(doc);
                }
                Some(_) => {
                    return Err(Error::Store {
                        path: self.store.path().to_path_buf(),
                        message: format!(
                            "the vector of {:?} for {} does not have {dim} dimensions",
                            doc.id, self.embedder_id
                        ),
                        source: None,
                    })
                }
                None => missing += 1,
            }
        }
        if missing > 0 {
            // Which models the store does hold vectors of: none (indexed without a model), or
            // others (searched with a model it was not indexed with).
            let held: Vec<(String, i64)> = self.store.read(|tx| {
                let mut stmt = tx.prepare(
                    "SELECT embedder, COUNT(*) FROM embeddings GROUP BY embedder ORDER BY 2 DESC",
                )?;
                let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
                rows.collect::<rusqlite::Result<Vec<_>>>()
            })?;
            let held = match held.is_empty() {
                true => "it holds no vectors at all (indexed without a model)".to_string(),
                false => format!(
                    "it holds vectors of {}",
                    held.iter()
                        .map(|(id, n)| format!("{id} ({n})"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            return Err(Error::Store {
                path: self.store.path().to_path_buf(),
                message: format!(
                    "{missing} of {} documents have no vector from the embedding model searched \
                     with ({}); {held}. Compute them with that model: `rerank index --db {} \
                     --corpus FILE --embedder MODEL` on the command line, Store::embed_missing \
                     from Rust",
                    missing + docs.len(),
                    self.embedder_id,
                    self.store.path().display()
                ),
                source: None,
            });
        }
        let matrix = Array2::from_shape_vec((docs.len(), dim), flat)
            .map_err(|e| Error::InvalidInput(e.to_string()))?;
        let index = DenseIndex::from_embeddings(Arc::clone(&self.embedder), docs, matrix)?;
        Ok((generation, index))
    }
}

impl crate::rerankers::VectorSource for StoreDense {
    /// The stored vectors (normalized) of the texts that are documents of the store, from the
    /// loaded index (loaded at the first call and again after a write).
    fn vectors(&self, texts: &[&str]) -> Result<Vec<Option<Vec<f32>>>> {
        self.index()?.vectors(texts)
    }
}

impl Retriever for StoreDense {
    fn retrieve(&self, query: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        self.index()?.retrieve(query, k)
    }

    fn name(&self) -> &str {
        "dense"
    }
}
