//! ColBERT token vectors and learned sparse (SPLADE) vectors in the store: one row of the
//! `encodings` table per (content, model), filled by [`Store::encode_missing_tokens`] and
//! [`Store::encode_missing_sparse`], and the retrievers that load them,
//! [`StoreLateInteraction`] and [`StoreSparse`].
//!
//! A row's `data` is, for token vectors, `rows x dim` little-endian f16 values (the
//! [`LateInteractionIndex`]'s own format, so a store and an in-memory index score alike); for
//! a sparse vector, its `rows` vocabulary ids (little-endian u32, ascending) then their values
//! (little-endian f32), exactly the encoder's output.

use std::collections::HashSet;
use std::sync::Arc;

use rusqlite::params;

use super::{doc_from_row_at, Loaded, Store, DOC_COLUMNS};
use crate::embed::{ColbertEncoder, SparseEncoder, SparseVector};
use crate::recall::{LateInteractionIndex, MuveraConfig, Retriever, SearchQuery, SparseIndex};
use crate::simd::dense::f32_to_f16;
use crate::{Document, Error, Hit, Result, Role};

/// Documents encoded per call to an encoder while filling in the store.
const ENCODE_BATCH: usize = 256;

/// How much the store holds for one model ([`Store::encoded_size`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct EncodedSize {
    /// Stored encodings: one per distinct content (documents with the same content share one).
    pub documents: usize,
    /// Their bytes in total (the vectors, without SQLite's page overhead).
    pub bytes: u64,
}

impl EncodedSize {
    /// The mean bytes of one document's encoding (0 when none is stored).
    pub fn bytes_per_document(&self) -> f64 {
        self.bytes as f64 / self.documents.max(1) as f64
    }
}

/// What the store keeps for one kind of encoder, and the index it loads into.
trait Encoding: Send + Sync {
    type Index: Send + Sync;
    /// What the error messages call the vectors.
    const WHAT: &'static str;
    /// The method that fills in missing rows, for the error messages.
    const FILL: &'static str;

    fn model(&self) -> Result<String>;
    /// `(rows, data)` per document, from its full text.
    fn encode(&self, texts: &[&str]) -> Result<Vec<(usize, Vec<u8>)>>;
    /// An index of `docs` with their stored `(rows, data)`.
    fn index(&self, docs: Vec<Document>, rows: Vec<(usize, Vec<u8>)>) -> Result<Self::Index>;
}

/// A ColBERT model's token vectors, loaded into an index with or without MUVERA candidates.
struct Tokens {
    encoder: Arc<ColbertEncoder>,
    muvera: Option<MuveraConfig>,
}

impl Encoding for Tokens {
    type Index = LateInteractionIndex;
    const WHAT: &'static str = "token vectors";
    const FILL: &'static str = "Store::encode_missing_tokens";

    fn model(&self) -> Result<String> {
        self.encoder.id().ok_or_else(|| no_id("ColBERT"))
    }

    fn encode(&self, texts: &[&str]) -> Result<Vec<(usize, Vec<u8>)>> {
        Ok(self
            .encoder
            .encode(texts, Role::Document)?
            .into_iter()
            .map(|m| {
                let data = m
                    .iter()
                    .flat_map(|&x| f32_to_f16(x).to_le_bytes())
                    .collect();
                (m.nrows(), data)
            })
            .collect())
    }

    fn index(&self, docs: Vec<Document>, rows: Vec<(usize, Vec<u8>)>) -> Result<Self::Index> {
        let mut index = LateInteractionIndex::new(Arc::clone(&self.encoder));
        if let Some(config) = self.muvera {
            index = index.with_muvera(config)?;
        }
        let halves = rows
            .into_iter()
            .map(|(tokens, data)| {
                let bits = data
                    .chunks_exact(2)
                    .map(|b| u16::from_le_bytes([b[0], b[1]]))
                    .collect();
                (tokens, bits)
            })
            .collect();
        index.add_f16(docs, halves)?;
        Ok(index)
    }
}

impl Encoding for Arc<SparseEncoder> {
    type Index = SparseIndex;
    const WHAT: &'static str = "sparse vectors";
    const FILL: &'static str = "Store::encode_missing_sparse";

    fn model(&self) -> Result<String> {
        self.id().ok_or_else(|| no_id("sparse"))
    }

    fn encode(&self, texts: &[&str]) -> Result<Vec<(usize, Vec<u8>)>> {
        Ok(SparseEncoder::encode(self, texts, Role::Document)?
            .into_iter()
            .map(|v| {
                let mut data = Vec::with_capacity(v.len() * 8);
                data.extend(v.indices.iter().flat_map(|i| i.to_le_bytes()));
                data.extend(v.values.iter().flat_map(|x| x.to_le_bytes()));
                (v.len(), data)
            })
            .collect())
    }

    fn index(&self, docs: Vec<Document>, rows: Vec<(usize, Vec<u8>)>) -> Result<Self::Index> {
        let mut vectors = Vec::with_capacity(rows.len());
        for (doc, (n, data)) in docs.iter().zip(&rows) {
            if n.checked_mul(8) != Some(data.len()) {
                return Err(Error::InvalidInput(format!(
                    "document {:?}: its stored sparse vector is not {n} (id, value) pairs",
                    doc.id
                )));
            }
            let (ids, values) = data.split_at(n * 4);
            let four = |b: &[u8]| [b[0], b[1], b[2], b[3]];
            vectors.push(SparseVector {
                indices: ids
                    .chunks_exact(4)
                    .map(|b| u32::from_le_bytes(four(b)))
                    .collect(),
                values: values
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes(four(b)))
                    .collect(),
            });
        }
        let index = SparseIndex::new(Arc::clone(self));
        index.add_vectors(docs.into_iter().zip(vectors))?;
        Ok(index)
    }
}

fn no_id(kind: &str) -> Error {
    Error::Config(format!(
        "this {kind} encoder has no id (a model file could not be read, or its document side \
         is a token-weight table), so the store cannot tell its vectors from another model's"
    ))
}

impl Store {
    /// Computes and stores the ColBERT token vectors (as f16) that `encoder` is missing for
    /// the stored documents, one per distinct content; returns how many were computed. Nothing
    /// is written when none is missing, so a read-only store whose vectors are complete is
    /// fine.
    pub fn encode_missing_tokens(&self, encoder: &Arc<ColbertEncoder>) -> Result<usize> {
        self.encode_missing(&Tokens {
            encoder: Arc::clone(encoder),
            muvera: None,
        })
    }

    /// Computes and stores the learned sparse vectors that `encoder` is missing for the stored
    /// documents (their document side), one per distinct content; returns how many were
    /// computed. Nothing is written when none is missing.
    pub fn encode_missing_sparse(&self, encoder: &Arc<SparseEncoder>) -> Result<usize> {
        self.encode_missing(encoder)
    }

    /// How many encodings, of how many bytes, the store holds for the model whose id is
    /// `model` ([`ColbertEncoder::id`], [`SparseEncoder::id`]).
    pub fn encoded_size(&self, model: &str) -> Result<EncodedSize> {
        self.read(|tx| {
            tx.query_row(
                "SELECT count(*), coalesce(sum(length(data)), 0) FROM encodings WHERE model = ?1",
                [model],
                |r| {
                    Ok(EncodedSize {
                        documents: r.get::<_, i64>(0)? as usize,
                        bytes: r.get::<_, i64>(1)? as u64,
                    })
                },
            )
        })
    }

    /// Late-interaction recall over the token vectors `encoder` stored (exact MaxSim, the
    /// results of a [`LateInteractionIndex`] over the same documents): loaded into memory at
    /// the first query and again after a write. Every document must have its vectors
    /// ([`Store::encode_missing_tokens`]).
    pub fn late_interaction(
        self: &Arc<Self>,
        encoder: Arc<ColbertEncoder>,
    ) -> Result<StoreLateInteraction> {
        let tokens = Tokens {
            encoder,
            muvera: None,
        };
        Ok(StoreLateInteraction(Loader::new(self, tokens)?))
    }

    /// Learned sparse recall over the vectors `encoder` stored (the results of a
    /// [`SparseIndex`] over the same documents): loaded into memory at the first query and
    /// again after a write. Every document must have its vector
    /// ([`Store::encode_missing_sparse`]).
    pub fn sparse(self: &Arc<Self>, encoder: Arc<SparseEncoder>) -> Result<StoreSparse> {
        Ok(StoreSparse(Loader::new(self, encoder)?))
    }

    fn encode_missing<E: Encoding>(&self, encoder: &E) -> Result<usize> {
        let model = encoder.model()?;
        let mut seen = HashSet::new();
        let distinct: Vec<(String, Document)> = self
            .documents_without("encodings", "model", &model)?
            .into_iter()
            .filter(|(h, _)| seen.insert(h.clone()))
            .collect();
        let mut computed = 0;
        for chunk in distinct.chunks(ENCODE_BATCH) {
            let texts: Vec<String> = chunk.iter().map(|(_, d)| d.full_text()).collect();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let rows = encoder.encode(&refs)?;
            if rows.len() != chunk.len() {
                return Err(Error::model(format!(
                    "the encoder returned {} encodings for {} texts",
                    rows.len(),
                    chunk.len()
                )));
            }
            // One transaction per batch: a long fill keeps what it computed if it stops.
            computed += self.write(|tx| {
                let mut insert = tx.prepare_cached(
                    "INSERT OR IGNORE INTO encodings (content_hash, model, rows, data) \
                     VALUES (?1, ?2, ?3, ?4)",
                )?;
                let mut n = 0;
                for ((hash, _), (count, data)) in chunk.iter().zip(&rows) {
                    n += insert.execute(params![hash, model, *count as i64, data])?;
                }
                Ok(n)
            })?;
        }
        Ok(computed)
    }
}

/// Loads one model's stored encodings into its in-memory index, again after each write.
struct Loader<E: Encoding> {
    store: Arc<Store>,
    encoder: E,
    model: String,
    loaded: Loaded<E::Index>,
}

impl<E: Encoding> Loader<E> {
    fn new(store: &Arc<Store>, encoder: E) -> Result<Self> {
        Ok(Loader {
            store: Arc::clone(store),
            model: encoder.model()?,
            encoder,
            loaded: Loaded::new(),
        })
    }

    fn index(&self) -> Result<Arc<E::Index>> {
        self.loaded.get(&self.store, || self.load())
    }

    fn load(&self) -> Result<(i64, E::Index)> {
        let (generation, rows) = self.store.read(|tx| {
            let generation = Store::generation(tx)?;
            let mut stmt = tx.prepare(&format!(
                "SELECT e.rows, e.data, {DOC_COLUMNS} FROM documents d LEFT JOIN encodings e \
                 ON e.content_hash = d.content_hash AND e.model = ?1 ORDER BY d.slot"
            ))?;
            let rows = stmt.query_map([&self.model], |r| {
                let count: Option<i64> = r.get(0)?;
                let data: Option<Vec<u8>> = r.get(1)?;
                Ok((count.zip(data), doc_from_row_at(r, 2)?))
            })?;
            Ok((generation, rows.collect::<rusqlite::Result<Vec<_>>>()?))
        })?;
        let total = rows.len();
        let mut docs = Vec::with_capacity(total);
        let mut encodings = Vec::with_capacity(total);
        for (stored, doc) in rows {
            if let Some((count, data)) = stored {
                docs.push(doc?);
                encodings.push((usize::try_from(count).unwrap_or(usize::MAX), data));
            }
        }
        if docs.len() < total {
            return Err(Error::Store {
                path: self.store.path().to_path_buf(),
                message: format!(
                    "{} of {total} documents have no {} from the model searched with ({}); \
                     compute them with {} (a pipeline config whose retriever names the model \
                     does when it is built)",
                    total - docs.len(),
                    E::WHAT,
                    self.model,
                    E::FILL
                ),
                source: None,
            });
        }
        Ok((generation, self.encoder.index(docs, encodings)?))
    }
}

/// Late-interaction recall over a [`Store`]'s ColBERT token vectors ([`Store::late_interaction`]):
/// exact MaxSim over every document, as a [`LateInteractionIndex`] of the same documents scores
/// them. Only the query is encoded.
pub struct StoreLateInteraction(Loader<Tokens>);

impl StoreLateInteraction {
    /// Picks the documents MaxSim ranks by MUVERA's encodings, computed when the vectors are
    /// loaded (see [`LateInteractionIndex::with_muvera`]). Settings out of range are an
    /// [`Error::Config`] naming the key.
    pub fn with_muvera(self, config: MuveraConfig) -> Result<Self> {
        let Loader { store, encoder, .. } = self.0;
        crate::recall::check_muvera(config, encoder.encoder.dim())?;
        let tokens = Tokens {
            encoder: encoder.encoder,
            muvera: Some(config),
        };
        Ok(StoreLateInteraction(Loader::new(&store, tokens)?))
    }

    /// The in-memory index of the store as it is now (loaded again after a write): its
    /// vectors can feed a [`ColbertReranker`](crate::rerankers::ColbertReranker).
    pub fn index(&self) -> Result<Arc<LateInteractionIndex>> {
        self.0.index()
    }
}

impl std::fmt::Debug for StoreLateInteraction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreLateInteraction")
            .field("store", &self.0.store.path())
            .field("model", &self.0.model)
            .finish()
    }
}

impl Retriever for StoreLateInteraction {
    fn retrieve(&self, query: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        self.0.index()?.retrieve(query, k)
    }

    fn name(&self) -> &str {
        "late_interaction"
    }
}

/// Learned sparse recall over a [`Store`]'s sparse vectors ([`Store::sparse`]): the dot
/// product over an inverted index, as a [`SparseIndex`] of the same documents scores them.
/// Only the query is encoded (for an inference-free model, looked up in its table).
pub struct StoreSparse(Loader<Arc<SparseEncoder>>);

impl std::fmt::Debug for StoreSparse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreSparse")
            .field("store", &self.0.store.path())
            .field("model", &self.0.model)
            .finish()
    }
}

impl Retriever for StoreSparse {
    fn retrieve(&self, query: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        self.0.index()?.retrieve(query, k)
    }

    fn name(&self) -> &str {
        "sparse"
    }
}
