//! The persistent store (feature `sqlite`): one SQLite file holds the documents, what BM25
//! needs, the embeddings and the semantic cache's entries, so a host reopens its corpus in
//! milliseconds instead of re-indexing and re-embedding it.
//!
//! - [`Store`] (here): open, upsert, remove, read documents; every batch is one transaction;
//! - [`StoreBm25`] (`lexical`): BM25 recall scored from the stored postings, with exactly the
//!   rankings and scores of a fresh [`Bm25Index`](crate::Bm25Index) over the same documents;
//! - [`StoreDense`] (`dense`): exact cosine recall over the stored vectors of one embedder;
//! - [`StoreLateInteraction`] and [`StoreSparse`] (`encoded`, feature `models`): ColBERT token
//!   vectors (f16) and learned sparse vectors per (content, model), and recall over them;
//! - [`SqliteCacheStore`] (`cache`): a [`CacheStore`](crate::cache::CacheStore) whose entries,
//!   TTLs, tags and counters survive a restart;
//! - the schema and its version (`schema`), documented in `docs/store.md`.
//!
//! ```
//! use std::sync::Arc;
//! use rerank::store::Store;
//! use rerank::{Document, Hybrid, Pipeline};
//!
//! let path = std::env::temp_dir().join(format!("rerank-doc-{}.db", std::process::id()));
//! let store = Arc::new(Store::open(&path)?);
//! let report = store.upsert([Document::new("1", "BM25 is a lexical ranking function")])?;
//! assert_eq!(report.added, 1);
//! let pipeline = Pipeline::builder().retriever(store.bm25()).build()?;
//! assert_eq!(pipeline.search("bm25 ranking")?.hits[0].id(), "1");
//! # drop(pipeline); drop(store);
//! # for suffix in ["", "-wal", "-shm"] { let _ = std::fs::remove_file(format!("{}{suffix}", path.display())); }
//! # Ok::<(), rerank::Error>(())
//! ```

mod cache;
mod dense;
#[cfg(feature = "models")]
mod encoded;
mod lexical;
mod lock;
mod schema;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde::Serialize;

pub use cache::SqliteCacheStore;
pub use dense::StoreDense;
#[cfg(feature = "models")]
pub use encoded::{EncodedSize, StoreLateInteraction, StoreSparse};
pub use lexical::StoreBm25;
pub use lock::WriterLock;
pub use schema::SCHEMA_VERSION;

use rayon::prelude::*;

use crate::recall::{analyze_docs, Analyzed};
use crate::text::EnglishAnalyzer;
use crate::{Document, Embedder, Error, Metadata, Result};

/// The writer connection's page cache, in KiB (a negative `cache_size` is KiB).
const WRITER_CACHE_KIB: i64 = -64 * 1024;

/// Documents embedded per call to the embedder while indexing.
const EMBED_BATCH: usize = 256;

/// What one [`Store::upsert`] (or [`Store::upsert_embedded`]) did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct UpsertReport {
    /// Documents whose id was new.
    pub added: usize,
    /// Documents whose id was stored with other content or fields.
    pub updated: usize,
    /// Documents stored exactly as given already (nothing was done for them).
    pub unchanged: usize,
    /// Vectors computed by the embedder (0 when every (content, model) pair was stored).
    pub embedded: usize,
}

/// One SQLite file (bundled SQLite, WAL journal) holding a corpus and everything derived from
/// it: documents with a content hash, BM25 postings and lengths, embeddings keyed by (content
/// hash, embedder id), and semantic-cache entries. The schema is in `docs/store.md`.
///
/// - Every write ([`upsert`](Store::upsert), [`upsert_embedded`](Store::upsert_embedded),
///   [`remove`](Store::remove)) is one transaction: all of a batch or nothing, and a process
///   killed mid-write leaves a file that opens with every committed batch.
/// - Upserting a document whose content and fields are unchanged does nothing; a changed one is
///   re-analyzed, and re-embedded only when no vector for its content and model is stored.
/// - Readers never block the writer (WAL); threads share one `Arc<Store>`, and processes can
///   share the file (one writer at a time; others wait up to 10 s for the lock).
/// - Recall: [`Store::bm25`], [`Store::dense`], and [`Hybrid`](crate::Hybrid) over both.
pub struct Store {
    path: PathBuf,
    writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
    analyzer: EnglishAnalyzer,
    /// Opened with [`Store::open_read_only`]: every write is refused.
    read_only: bool,
    /// Counts the file as open in this process (dropped last, after the connections).
    _open: schema::OpenFile,
}

impl Drop for Store {
    /// Closes the read connections first, then the writer: SQLite's last connection to a file
    /// checkpoints the write-ahead log into it and removes the log, so the store is one whole
    /// file once the last `Store` of it in any process is dropped.
    fn drop(&mut self) {
        self.readers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

/// An [`Error::Store`] for `path` caused by an SQLite error.
pub(crate) fn sql_error(path: &Path, what: &str, e: rusqlite::Error) -> Error {
    Error::Store {
        path: path.to_path_buf(),
        message: what.to_string(),
        source: Some(Box::new(e)),
    }
}

/// The content hash of a document: SHA-256 of what is analyzed and embedded
/// ([`Document::full_text`]), as 32 hex digits (the first 16 bytes).
pub fn content_hash(doc: &Document) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(doc.full_text().as_bytes());
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// A document as a stored row.
struct Row {
    doc: Document,
    hash: String,
}

impl Store {
    /// Opens the store in `path`, creating the file (and its schema) when it does not exist.
    ///
    /// A file written by a newer version of the crate is refused with
    /// [`Error::UnsupportedSchema`] and left untouched; an SQLite file that is not a store is
    /// refused with [`Error::Store`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let open = schema::OpenFile::open(&path)?;
        let mut conn =
            Connection::open(&path).map_err(|e| sql_error(&path, "cannot open the file", e))?;
        schema::prepare(&mut conn, &path)?;
        // The writer's page cache (SQLite's default is 2 MiB): a batch's postings are written in
        // key order across the whole postings B-tree, whose inner pages then stay cached.
        conn.pragma_update(None, "cache_size", WRITER_CACHE_KIB)
            .map_err(|e| sql_error(&path, "cannot open", e))?;
        Ok(Store {
            path,
            writer: Mutex::new(conn),
            readers: Mutex::new(Vec::new()),
            analyzer: EnglishAnalyzer::default(),
            read_only: false,
            _open: open,
        })
    }

    /// Opens an existing store for reading only: nothing is written to the file, not even on
    /// open, so a store on read-only media or owned by another user can be searched. A path
    /// that does not exist, an empty file and an SQLite file that is not a store are refused
    /// with [`Error::Store`] (and left as they are), as is a file shorter than its header says
    /// (truncated by a copy). Every write through it ([`Store::upsert`], the cache's entries)
    /// fails with [`Error::Store`].
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        if !path.is_file() {
            return Err(Error::Store {
                path,
                message: "no such store (fill one with `rerank index`)".into(),
                source: None,
            });
        }
        let open = schema::OpenFile::open(&path)?;
        let conn = Connection::open_with_flags(
            &path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| sql_error(&path, "cannot open the file", e))?;
        schema::check_read_only(&conn, &path)?;
        Ok(Store {
            path,
            writer: Mutex::new(conn),
            readers: Mutex::new(Vec::new()),
            analyzer: EnglishAnalyzer::default(),
            read_only: true,
            _open: open,
        })
    }

    /// Whether the store was opened with [`Store::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The store's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Copies every committed write from the write-ahead log (`FILE-wal`) into the file itself
    /// and empties the log, so that the file alone holds the whole store (to copy it, say).
    /// Dropping the last `Store` of a file does this too; call it to know that it worked. It
    /// waits for readers of other processes for up to 10 s, then fails with [`Error::Store`].
    pub fn checkpoint(&self) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        let conn = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let (busy, log, copied): (i64, i64, i64) = conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .map_err(|e| sql_error(&self.path, "checkpoint failed", e))?;
        if busy != 0 || copied < log {
            return Err(Error::Store {
                path: self.path.clone(),
                message: format!(
                    "checkpoint incomplete: {copied} of {log} log pages copied (another \
                     connection is reading); the file and its -wal file belong together until \
                     it completes"
                ),
                source: None,
            });
        }
        Ok(())
    }

    /// The number of documents.
    pub fn len(&self) -> Result<usize> {
        self.read(|tx| {
            tx.query_row("SELECT count(*) FROM documents", [], |r| r.get::<_, i64>(0))
                .map(|n| n as usize)
        })
    }

    /// Whether the store holds no document.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// The document with this id, if stored.
    pub fn get(&self, id: &str) -> Result<Option<Document>> {
        self.read(|tx| {
            tx.query_row(
                &format!("SELECT {DOC_COLUMNS} FROM documents WHERE id = ?1"),
                [id],
                doc_from_row,
            )
            .optional()
        })?
        .transpose()
    }

    /// Every document, in the order recall breaks ties in (the order they were stored).
    pub fn documents(&self) -> Result<Vec<Document>> {
        self.read(|tx| {
            let mut stmt = tx.prepare(&format!(
                "SELECT {DOC_COLUMNS} FROM documents ORDER BY slot"
            ))?;
            let rows = stmt.query_map([], doc_from_row)?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
        })?
        .into_iter()
        .collect()
    }

    /// The ids of every document.
    pub fn ids(&self) -> Result<Vec<String>> {
        self.read(|tx| {
            let mut stmt = tx.prepare("SELECT id FROM documents ORDER BY slot")?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            rows.collect()
        })
    }

    /// Adds or replaces documents, in one transaction (BM25 only; no vectors are computed).
    /// A batch repeating an id keeps the last occurrence.
    pub fn upsert(&self, docs: impl IntoIterator<Item = Document>) -> Result<UpsertReport> {
        self.write_batch(docs.into_iter().collect(), None)
    }

    /// Like [`Store::upsert`], and stores a vector from `embedder` for every document whose
    /// (content, embedder) pair has none yet. The embedder must say its
    /// [`id`](Embedder::id). Vectors are computed before the transaction starts, so a failing
    /// embedder writes nothing.
    pub fn upsert_embedded(
        &self,
        docs: impl IntoIterator<Item = Document>,
        embedder: &dyn Embedder,
    ) -> Result<UpsertReport> {
        self.write_batch(docs.into_iter().collect(), Some(embedder))
    }

    /// Computes and stores the vectors `embedder` is missing for documents already stored
    /// (e.g. after a model change); returns how many were computed.
    pub fn embed_missing(&self, embedder: &dyn Embedder) -> Result<usize> {
        let id = embedder_id(embedder)?;
        let missing = self.documents_without("embeddings", "embedder", &id)?;
        let vectors = embed_distinct(embedder, &missing)?;
        let n = vectors.len();
        self.write(|tx| store_vectors(tx, &id, embedder.dim(), &vectors))?;
        Ok(n)
    }

    /// The stored documents whose content has no row of `model` in `table` (`embeddings`,
    /// whose model column is `embedder`, or `encodings`, whose is `model`), in slot order,
    /// with their content hashes.
    pub(crate) fn documents_without(
        &self,
        table: &str,
        column: &str,
        model: &str,
    ) -> Result<Vec<(String, Document)>> {
        self.read(|tx| {
            let mut stmt = tx.prepare(&format!(
                "SELECT {DOC_COLUMNS} FROM documents d WHERE NOT EXISTS (SELECT 1 FROM {table} e \
                 WHERE e.content_hash = d.content_hash AND e.{column} = ?1) ORDER BY slot"
            ))?;
            let rows = stmt.query_map([model], doc_from_row)?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
        })?
        .into_iter()
        .map(|d| d.map(|d| (content_hash(&d), d)))
        .collect()
    }

    /// Removes documents by id, in one transaction, with their postings and, when no other
    /// document shares their content, their vectors. Returns how many were stored.
    pub fn remove<S: AsRef<str>>(&self, ids: impl IntoIterator<Item = S>) -> Result<usize> {
        let ids: Vec<String> = ids.into_iter().map(|s| s.as_ref().to_string()).collect();
        self.write(|tx| {
            let mut removed = 0;
            for id in &ids {
                removed += usize::from(delete_document(tx, id)?);
            }
            Ok(removed)
        })
    }

    /// Runs SQLite's `PRAGMA integrity_check`; `Ok(())` when the file is sound.
    pub fn integrity_check(&self) -> Result<()> {
        let report: Vec<String> = self.read(|tx| {
            let mut stmt = tx.prepare("PRAGMA integrity_check")?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            rows.collect()
        })?;
        if report == ["ok"] {
            Ok(())
        } else {
            Err(Error::Store {
                path: self.path.clone(),
                message: format!("integrity check failed: {}", report.join("; ")),
                source: None,
            })
        }
    }

    /// BM25 recall over the store (Lucene's formula, k1 0.9, b 0.4, the English analyzer).
    pub fn bm25(self: &Arc<Self>) -> StoreBm25 {
        StoreBm25::new(Arc::clone(self))
    }

    /// Dense recall over the vectors `embedder` stored (exact cosine, the results of a
    /// [`DenseIndex`](crate::DenseIndex) over the same documents and vectors). The vectors are
    /// loaded once, at the first query after a write.
    pub fn dense(self: &Arc<Self>, embedder: Arc<dyn Embedder>) -> Result<StoreDense> {
        let id = embedder_id(&*embedder)?;
        Ok(StoreDense::new(Arc::clone(self), embedder, id))
    }

    /// A cache store in this file, for a [`SemanticCache`](crate::SemanticCache) whose
    /// entries, TTLs, tags and stats survive restarts.
    pub fn cache_store<V>(self: &Arc<Self>) -> SqliteCacheStore<V> {
        SqliteCacheStore::new(Arc::clone(self))
    }

    fn write_batch(
        &self,
        docs: Vec<Document>,
        embedder: Option<&dyn Embedder>,
    ) -> Result<UpsertReport> {
        // The last occurrence of an id wins.
        let mut last: HashMap<String, usize> = HashMap::new();
        for (i, d) in docs.iter().enumerate() {
            last.insert(d.id.clone(), i);
        }
        let kept: Vec<Document> = docs
            .into_iter()
            .enumerate()
            .filter(|(i, d)| last.get(&d.id) == Some(i))
            .map(|(_, doc)| doc)
            .collect();
        let rows: Vec<Row> = kept
            .into_par_iter()
            .map(|doc| Row {
                hash: content_hash(&doc),
                doc,
            })
            .collect();
        for row in &rows {
            if row.doc.id.is_empty() {
                return Err(Error::InvalidInput("a document id is empty".into()));
            }
        }
        let vectors = match embedder {
            Some(e) => {
                let id = embedder_id(e)?;
                let missing = self.read(|tx| {
                    let mut stmt = tx.prepare(
                        "SELECT 1 FROM embeddings WHERE content_hash = ?1 AND embedder = ?2",
                    )?;
                    let mut out = Vec::new();
                    for row in &rows {
                        if !stmt.exists(params![row.hash, id])? {
                            out.push((row.hash.clone(), row.doc.clone()));
                        }
                    }
                    Ok(out)
                })?;
                Some((id, e.dim(), embed_distinct(e, &missing)?))
            }
            None => None,
        };
        // Analysis runs before the write transaction, in parallel, for the documents the file
        // lacks or holds with other content; the transaction re-checks each document and
        // analyzes there only one that another writer changed in between.
        let analysis = self.analyze_stale(&rows)?;
        self.write(|tx| {
            let mut report = UpsertReport::default();
            // the slot given to each analyzed document, per analyzed run
            let mut slots: Vec<Vec<Option<i64>>> = analysis
                .runs
                .iter()
                .map(|a| vec![None; a.lengths.len()])
                .collect();
            let mut late: Vec<(Analyzed, i64)> = Vec::new();
            for (i, row) in rows.iter().enumerate() {
                let stored = prepare_document(tx, row)?;
                match stored {
                    Stored::Unchanged => report.unchanged += 1,
                    Stored::FieldsUpdated => report.updated += 1,
                    Stored::Replaced | Stored::New => {
                        match analysis.at[i] {
                            Some((run, pos)) => {
                                let len = analysis.runs[run].lengths[pos];
                                slots[run][pos] = Some(insert_document(tx, row, len)?);
                            }
                            None => {
                                let a = analyze_docs(&self.analyzer, [&row.doc]);
                                let slot = insert_document(tx, row, a.lengths[0])?;
                                late.push((a, slot));
                            }
                        }
                        if matches!(stored, Stored::New) {
                            report.added += 1;
                        } else {
                            report.updated += 1;
                        }
                    }
                }
            }
            let mut postings: Vec<(&str, i64, u32)> = Vec::new();
            for (a, slots) in analysis.runs.iter().zip(&slots) {
                push_postings(a, |pos| slots[pos], &mut postings);
            }
            for (a, slot) in &late {
                push_postings(a, |_| Some(*slot), &mut postings);
            }
            insert_postings(tx, postings)?;
            if let Some((id, dim, vectors)) = &vectors {
                report.embedded = store_vectors(tx, id, *dim, vectors)?;
            }
            Ok(report)
        })
    }

    /// Analyzes, in parallel runs, the rows the file lacks or holds with another content hash.
    fn analyze_stale(&self, rows: &[Row]) -> Result<BatchAnalysis> {
        let stale: Vec<usize> = self.read(|tx| {
            let mut stmt = tx.prepare_cached("SELECT content_hash FROM documents WHERE id = ?1")?;
            let mut out = Vec::new();
            for (i, row) in rows.iter().enumerate() {
                let hash: Option<String> =
                    stmt.query_row([&row.doc.id], |r| r.get(0)).optional()?;
                if hash.as_deref() != Some(row.hash.as_str()) {
                    out.push(i);
                }
            }
            Ok(out)
        })?;
        let runs: Vec<Analyzed> = stale
            .par_chunks(ANALYZE_RUN)
            .map(|run| analyze_docs(&self.analyzer, run.iter().map(|&i| &rows[i].doc)))
            .collect();
        let mut at = vec![None; rows.len()];
        for (r, run) in stale.chunks(ANALYZE_RUN).enumerate() {
            for (pos, &i) in run.iter().enumerate() {
                at[i] = Some((r, pos));
            }
        }
        Ok(BatchAnalysis { runs, at })
    }

    /// Runs `f` in a write transaction (committed when `f` succeeds) and bumps the generation
    /// that tells readers to reload what they keep in memory.
    fn write<T>(&self, f: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T>) -> Result<T> {
        self.write_tx(true, f)
    }

    /// Like [`Store::write`] without bumping the generation: for the cache tables, which no
    /// reader keeps in memory.
    fn write_cache<T>(&self, f: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T>) -> Result<T> {
        self.write_tx(false, f)
    }

    fn write_tx<T>(
        &self,
        bump: bool,
        f: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T>,
    ) -> Result<T> {
        if self.read_only {
            return Err(Error::Store {
                path: self.path.clone(),
                message: "the store was opened read-only: nothing was written".into(),
                source: None,
            });
        }
        let mut conn = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let err = |e| sql_error(&self.path, "write failed (nothing was written)", e);
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(err)?;
        let out = f(&tx).map_err(err)?;
        if bump {
            tx.execute(
                "UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'",
                [],
            )
            .map_err(err)?;
        }
        tx.commit().map_err(err)?;
        Ok(out)
    }

    /// Runs `f` in a read transaction (one consistent snapshot) on a pooled connection.
    pub(crate) fn read<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T>,
    ) -> Result<T> {
        let err = |e| sql_error(&self.path, "read failed", e);
        let pooled = self.readers.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut conn = match pooled {
            Some(c) => c,
            None => {
                let c = Connection::open_with_flags(
                    &self.path,
                    rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                        | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )
                .map_err(err)?;
                c.busy_timeout(std::time::Duration::from_secs(10))
                    .map_err(err)?;
                c
            }
        };
        let out = (|| {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Deferred)?;
            let out = f(&tx)?;
            tx.commit()?;
            Ok(out)
        })()
        .map_err(err);
        self.readers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(conn);
        out
    }

    /// The write generation: it changes with every committed write, in any process.
    pub(crate) fn generation(tx: &Transaction<'_>) -> rusqlite::Result<i64> {
        tx.query_row(
            "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'generation'",
            [],
            |r| r.get(0),
        )
    }
}

/// An in-memory index built from the store's rows (dense vectors, token vectors, sparse
/// vectors), kept until a write, in any process, changes the store's generation.
pub(crate) struct Loaded<T>(RwLock<Option<(i64, Arc<T>)>>);

impl<T> Loaded<T> {
    pub(crate) fn new() -> Self {
        Loaded(RwLock::new(None))
    }

    /// The index for the store as it is now: the one held when the generation is unchanged,
    /// else the one `build` makes (with the generation of the snapshot it read).
    pub(crate) fn get(
        &self,
        store: &Store,
        build: impl FnOnce() -> Result<(i64, T)>,
    ) -> Result<Arc<T>> {
        let generation = store.read(Store::generation)?;
        if let Some((g, index)) = &*self.0.read().unwrap_or_else(|e| e.into_inner()) {
            if *g == generation {
                return Ok(Arc::clone(index));
            }
        }
        let (generation, index) = build()?;
        let index = Arc::new(index);
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Some((generation, Arc::clone(&index)));
        Ok(index)
    }
}

/// The columns [`doc_from_row`] reads, in order.
pub(crate) const DOC_COLUMNS: &str = "id, text, title, source, page, metadata";

/// A document from a row of [`DOC_COLUMNS`]; bad metadata JSON is an error, not a panic.
fn doc_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<Document>> {
    doc_from_row_at(r, 0)
}

/// A document from the [`DOC_COLUMNS`] that start at column `at`.
pub(crate) fn doc_from_row_at(
    r: &rusqlite::Row<'_>,
    at: usize,
) -> rusqlite::Result<Result<Document>> {
    let id: String = r.get(at)?;
    let metadata: String = r.get(at + 5)?;
    let page: Option<i64> = r.get(at + 4)?;
    let parsed: std::result::Result<Metadata, _> = serde_json::from_str(&metadata);
    Ok(match parsed {
        Ok(metadata) => Ok(Document {
            id,
            text: r.get(at + 1)?,
            title: r.get(at + 2)?,
            source: r.get(at + 3)?,
            page: page.and_then(|p| u32::try_from(p).ok()),
            metadata,
        }),
        Err(e) => Err(Error::parse(
            format!("metadata of stored document {id:?}"),
            e,
        )),
    })
}

/// A stored document's content hash, text, title, source, page and metadata JSON.
type StoredFields = (
    String,
    String,
    Option<String>,
    Option<String>,
    Option<i64>,
    String,
);

/// What the file held for one document, and what [`prepare_document`] did about it.
enum Stored {
    /// The same content and fields: nothing to write.
    Unchanged,
    /// The same content, other fields (source, page, metadata): updated in place.
    FieldsUpdated,
    /// Another content: the old row and its postings were deleted; insert it again.
    Replaced,
    /// A new id: insert it.
    New,
}

/// Compares one document with what the file holds and updates the fields in place, or
/// deletes a row whose content changed (a changed content gets a new slot at the end, as
/// [`Bm25Index`](crate::Bm25Index) gives an updated document, and new postings).
fn prepare_document(tx: &Transaction<'_>, row: &Row) -> rusqlite::Result<Stored> {
    let doc = &row.doc;
    let stored: Option<StoredFields> = tx
        .prepare_cached(
            "SELECT content_hash, text, title, source, page, metadata FROM documents WHERE id = ?1",
        )?
        .query_row([&doc.id], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })
        .optional()?;
    let Some((hash, text, title, source, old_page, old_metadata)) = stored else {
        return Ok(Stored::New);
    };
    if hash == row.hash && text == doc.text && title == doc.title {
        let metadata = metadata_json(doc);
        let page = doc.page.map(i64::from);
        if source == doc.source && old_page == page && old_metadata == metadata {
            return Ok(Stored::Unchanged);
        }
        tx.prepare_cached(
            "UPDATE documents SET source = ?2, page = ?3, metadata = ?4 WHERE id = ?1",
        )?
        .execute(params![doc.id, doc.source, page, metadata])?;
        return Ok(Stored::FieldsUpdated);
    }
    delete_document(tx, &doc.id)?;
    Ok(Stored::Replaced)
}

fn metadata_json(doc: &Document) -> String {
    serde_json::to_string(&doc.metadata).unwrap_or_else(|_| "{}".into())
}

/// Inserts one document's row (its postings are written with the batch's); returns its slot.
fn insert_document(tx: &Transaction<'_>, row: &Row, length: u32) -> rusqlite::Result<i64> {
    let doc = &row.doc;
    tx.prepare_cached(
        "INSERT INTO documents (id, text, title, source, page, metadata, content_hash, length) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        doc.id,
        doc.text,
        doc.title,
        doc.source,
        doc.page.map(i64::from),
        metadata_json(doc),
        row.hash,
        i64::from(length)
    ])?;
    Ok(tx.last_insert_rowid())
}

/// Documents per analyzed run of a batch (runs are analyzed in parallel).
const ANALYZE_RUN: usize = 64;

/// Postings per multi-row `INSERT` (4 parameters each).
const POSTINGS_PER_INSERT: usize = 200;

/// The analysis of a batch, done before its write transaction.
struct BatchAnalysis {
    /// Runs of documents, analyzed in parallel.
    runs: Vec<Analyzed>,
    /// Per row of the batch, its (run, position) when it was analyzed.
    at: Vec<Option<(usize, usize)>>,
}

/// Appends the (term, slot, tf) postings of `analyzed`, for the documents `slot` gives a slot.
fn push_postings<'a>(
    analyzed: &'a Analyzed,
    slot: impl Fn(usize) -> Option<i64>,
    out: &mut Vec<(&'a str, i64, u32)>,
) {
    for (t, term) in analyzed.terms.iter().enumerate() {
        for &(pos, tf) in analyzed.postings_of(t) {
            if let Some(s) = slot(pos as usize) {
                out.push((term, s, tf));
            }
        }
    }
}

/// Writes a batch's postings in key order (block, term, slot), many rows a statement: the
/// postings table is clustered by that key, and a batch's new documents fall in the last
/// block or two, so the batch writes into those blocks' pages only (`schema::BLOCK_BITS`).
fn insert_postings(
    tx: &Transaction<'_>,
    mut postings: Vec<(&str, i64, u32)>,
) -> rusqlite::Result<()> {
    let block = |slot: i64| slot >> schema::BLOCK_BITS;
    postings.sort_unstable_by(|a, b| (block(a.1), a.0, a.1).cmp(&(block(b.1), b.0, b.1)));
    let sql = |rows: usize| {
        format!(
            "INSERT INTO postings (block, term, slot, tf) VALUES {}",
            vec!["(?, ?, ?, ?)"; rows].join(", ")
        )
    };
    let blocks: Vec<i64> = postings.iter().map(|p| block(p.1)).collect();
    let mut args: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(4 * POSTINGS_PER_INSERT);
    for (chunk, blocks) in postings
        .chunks(POSTINGS_PER_INSERT)
        .zip(blocks.chunks(POSTINGS_PER_INSERT))
    {
        args.clear();
        for ((term, slot, tf), block) in chunk.iter().zip(blocks) {
            args.push(block);
            args.push(term);
            args.push(slot);
            args.push(tf);
        }
        tx.prepare_cached(&sql(chunk.len()))?.execute(&*args)?;
    }
    Ok(())
}

/// Deletes one document, its postings, and its vectors when no other document shares its
/// content. Returns whether it was stored.
fn delete_document(tx: &Transaction<'_>, id: &str) -> rusqlite::Result<bool> {
    let found: Option<(i64, String)> = tx
        .query_row(
            "SELECT slot, content_hash FROM documents WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some((slot, hash)) = found else {
        return Ok(false);
    };
    tx.execute("DELETE FROM postings WHERE slot = ?1", [slot])?;
    tx.execute("DELETE FROM documents WHERE slot = ?1", [slot])?;
    for table in ["embeddings", "encodings"] {
        tx.execute(
            &format!(
                "DELETE FROM {table} WHERE content_hash = ?1 AND NOT EXISTS \
                 (SELECT 1 FROM documents WHERE content_hash = ?1)"
            ),
            [&hash],
        )?;
    }
    Ok(true)
}

/// The embedder's id, or an error saying why the store needs one.
fn embedder_id(embedder: &dyn Embedder) -> Result<String> {
    embedder.id().ok_or_else(|| {
        Error::Config(
            "this embedder has no id (Embedder::id), so the store cannot tell its vectors from \
             another model's; implement Embedder::id"
                .into(),
        )
    })
}

/// Embeds each distinct content once, in batches; returns (content hash, vector) pairs.
fn embed_distinct(
    embedder: &dyn Embedder,
    docs: &[(String, Document)],
) -> Result<Vec<(String, Vec<f32>)>> {
    let mut seen = HashSet::new();
    let distinct: Vec<&(String, Document)> = docs
        .iter()
        .filter(|(h, _)| seen.insert(h.clone()))
        .collect();
    let mut out = Vec::with_capacity(distinct.len());
    for chunk in distinct.chunks(EMBED_BATCH) {
        let texts: Vec<String> = chunk.iter().map(|(_, d)| d.full_text()).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let m = embedder.embed(&refs)?;
        if m.nrows() != chunk.len() || m.ncols() != embedder.dim() {
            return Err(Error::InvalidInput(format!(
                "the embedder returned a {} x {} matrix for {} texts of dimension {}",
                m.nrows(),
                m.ncols(),
                chunk.len(),
                embedder.dim()
            )));
        }
        for ((hash, _), row) in chunk.iter().zip(m.rows()) {
            out.push((hash.clone(), row.to_vec()));
        }
    }
    Ok(out)
}

/// Stores vectors as little-endian f32 blobs; returns how many were new.
fn store_vectors(
    tx: &Transaction<'_>,
    embedder: &str,
    dim: usize,
    vectors: &[(String, Vec<f32>)],
) -> rusqlite::Result<usize> {
    let mut insert = tx.prepare_cached(
        "INSERT OR IGNORE INTO embeddings (content_hash, embedder, dim, vector) \
         VALUES (?1, ?2, ?3, ?4)",
    )?;
    let mut n = 0;
    for (hash, v) in vectors {
        n += insert.execute(params![hash, embedder, dim as i64, vector_to_blob(v)])?;
    }
    Ok(n)
}

/// A vector as a little-endian f32 blob (how the store keeps embeddings).
pub(crate) fn vector_to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A vector from a little-endian f32 blob.
pub(crate) fn vector_from_blob(blob: &[u8]) -> Vec<f32> {
    blob.chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}
