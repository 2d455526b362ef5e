//! The store's schema (documented in `docs/store.md`) and the checks done when a file is opened.

use std::path::Path;

use rusqlite::Connection;

use super::sql_error;
use crate::{Error, Result};

/// The schema version this crate reads and writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 1;

/// `PRAGMA application_id` of a rerank store ("RKST").
pub(super) const APPLICATION_ID: i64 = 0x524B_5354;

const CREATE: &str = "
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE documents (
    slot         INTEGER PRIMARY KEY,
    id           TEXT NOT NULL UNIQUE,
    text         TEXT NOT NULL,
    title        TEXT,
    source       TEXT,
    page         INTEGER,
    metadata     TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    length       INTEGER NOT NULL
);
CREATE INDEX documents_content_hash ON documents (content_hash);
CREATE TABLE postings (
    term TEXT NOT NULL,
    slot INTEGER NOT NULL,
    tf   INTEGER NOT NULL,
    PRIMARY KEY (term, slot)
) WITHOUT ROWID;
CREATE INDEX postings_slot ON postings (slot);
CREATE TABLE embeddings (
    content_hash TEXT NOT NULL,
    embedder     TEXT NOT NULL,
    dim          INTEGER NOT NULL,
    vector       BLOB NOT NULL,
    PRIMARY KEY (content_hash, embedder)
) WITHOUT ROWID;
CREATE TABLE cache_entries (
    scope          TEXT NOT NULL,
    key            TEXT NOT NULL,
    query          TEXT NOT NULL,
    embedding      BLOB NOT NULL,
    value          TEXT NOT NULL,
    inserted_at_ms INTEGER NOT NULL,
    expires_at_ms  INTEGER,
    PRIMARY KEY (scope, key)
) WITHOUT ROWID;
CREATE INDEX cache_entries_key ON cache_entries (key);
CREATE TABLE cache_tags (
    tag   TEXT NOT NULL,
    scope TEXT NOT NULL,
    key   TEXT NOT NULL,
    PRIMARY KEY (tag, scope, key)
) WITHOUT ROWID;
CREATE TABLE cache_counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO meta (key, value) VALUES
    ('generation', '0'),
    ('analyzer', 'english: lucene stopwords, snowball english, tokens \\b\\w\\w+\\b'),
    ('bm25_k1', '0.9'),
    ('bm25_b', '0.4');
INSERT INTO cache_counters (name, value) VALUES ('hits', 0), ('misses', 0);
";

/// Sets the connection up (WAL, foreign keys off, a busy timeout) and creates the schema in a
/// new file, or checks an existing one: a newer schema is refused before anything is written.
pub(super) fn prepare(conn: &mut Connection, path: &Path) -> Result<()> {
    let err = |e| sql_error(path, "cannot open", e);
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(err)?;
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(err)?;
    if version > SCHEMA_VERSION {
        return Err(Error::UnsupportedSchema {
            path: path.to_path_buf(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    let app: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(err)?;
    let tables: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .map_err(err)?;
    if version == 0 && (tables > 0 || app != 0) || version > 0 && app != APPLICATION_ID {
        return Err(Error::Store {
            path: path.to_path_buf(),
            message: "this SQLite file is not a rerank store (pick a new file name)".into(),
            source: None,
        });
    }
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(err)?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(err)?;
    if version == 0 {
        let tx = conn.transaction().map_err(err)?;
        tx.execute_batch(CREATE).map_err(err)?;
        tx.pragma_update(None, "application_id", APPLICATION_ID)
            .map_err(err)?;
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(err)?;
        tx.commit().map_err(err)?;
    }
    Ok(())
}
