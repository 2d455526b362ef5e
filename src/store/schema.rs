//! The store's schema (documented in `docs/store.md`) and the checks done when a file is opened.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use rusqlite::Connection;

use super::sql_error;
use crate::{Error, Result};

/// The schema version this crate reads and writes (`PRAGMA user_version`). Older versions are
/// upgraded when a store is opened for writing: 1 (postings keyed by term) to 2 (postings keyed
/// by block, then term), and 2 to 3 (the `encodings` table: ColBERT token vectors and learned
/// sparse vectors).
pub const SCHEMA_VERSION: i64 = 3;

/// Documents per postings block: a posting's block is its slot shifted right by this many bits
/// (16,384 documents). Postings are keyed by (block, term, slot), so a batch of new documents
/// writes into the last block only, whose pages stay in the writer's cache: indexing is linear
/// in the number of documents, where a key led by the term spread every batch over the whole
/// table. A query term is one lookup per block.
pub(crate) const BLOCK_BITS: u32 = 14;

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
{encodings}
INSERT INTO meta (key, value) VALUES
    ('generation', '0'),
    ('analyzer', 'english: lucene stopwords, snowball english, tokens \\b\\w\\w+\\b'),
    ('bm25_k1', '0.9'),
    ('bm25_b', '0.4');
INSERT INTO cache_counters (name, value) VALUES ('hits', 0), ('misses', 0);
";

/// The table of token (ColBERT) and sparse (SPLADE) vectors, one row per (content, model);
/// schema 3. A rowid table (not `WITHOUT ROWID`): a document's token vectors are tens of KB.
const ENCODINGS: &str = "
CREATE TABLE IF NOT EXISTS encodings (
    content_hash TEXT NOT NULL,
    model        TEXT NOT NULL,
    rows         INTEGER NOT NULL,
    data         BLOB NOT NULL,
    UNIQUE (content_hash, model)
);
";

/// The postings table (schema 2) under the name `{table}`, for a new file and the upgrade.
const POSTINGS: &str = "
CREATE TABLE {table} (
    block INTEGER NOT NULL,
    term  TEXT NOT NULL,
    slot  INTEGER NOT NULL,
    tf    INTEGER NOT NULL,
    PRIMARY KEY (block, term, slot)
) WITHOUT ROWID;
";

/// The postings table's index by slot (deletes of a document find its postings with it).
const POSTINGS_INDEX: &str = "CREATE INDEX postings_slot ON postings (slot);";

/// Sets the connection up (WAL, foreign keys off, a busy timeout) and creates the schema in a
/// new file, or checks an existing one: a newer schema or a truncated file is refused before
/// anything is written.
pub(super) fn prepare(conn: &mut Connection, path: &Path) -> Result<()> {
    let err = |e| sql_error(path, "cannot open", e);
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(err)?;
    let Identity {
        version,
        app,
        tables,
    } = identity(conn).map_err(err)?;
    refuse_newer(path, version)?;
    if version == 0 && (tables > 0 || app != 0) || version > 0 && app != APPLICATION_ID {
        return Err(Error::Store {
            path: path.to_path_buf(),
            message: "this SQLite file is not a rerank store (pick a new file name)".into(),
            source: None,
        });
    }
    // Switching a new file to WAL takes its lock without waiting on the busy handler: another
    // process opening the same new file at that moment makes it busy for a moment, so retry.
    let mut tries = 0;
    loop {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy && tries < 200 =>
            {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(25));
            }
            other => break other.map_err(err)?,
        }
    }
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(err)?;
    if version == 0 {
        // Two processes may create the same new file at once: the write lock decides, and the
        // one that waited finds the schema the other wrote.
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(err)?;
        let Identity { version, app, .. } = identity(&tx).map_err(err)?;
        if version > 0 {
            tx.commit().map_err(err)?;
            if app != APPLICATION_ID || version > SCHEMA_VERSION {
                return Err(Error::Store {
                    path: path.to_path_buf(),
                    message: "another process made this file something other than a rerank \
                              store of this version while it was being created"
                        .into(),
                    source: None,
                });
            }
            return Ok(());
        }
        tx.execute_batch(&CREATE.replace("{encodings}", ENCODINGS))
            .map_err(err)?;
        tx.execute_batch(&POSTINGS.replace("{table}", "postings"))
            .map_err(err)?;
        tx.execute_batch(POSTINGS_INDEX).map_err(err)?;
        tx.pragma_update(None, "application_id", APPLICATION_ID)
            .map_err(err)?;
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(err)?;
        tx.commit().map_err(err)?;
    } else {
        if version == 1 {
            upgrade_to_blocks(conn).map_err(err)?;
        }
        if version <= 2 {
            add_encodings(conn).map_err(err)?;
        }
    }
    Ok(())
}

/// Schema 1 to 2: the postings re-keyed by (block, term, slot), in one transaction (another
/// process upgrading the same file at once waits, then finds it done).
fn upgrade_to_blocks(conn: &mut Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    if identity(&tx)?.version != 1 {
        return tx.commit();
    }
    tx.execute_batch(&POSTINGS.replace("{table}", "postings_v2"))?;
    tx.execute_batch(&format!(
        "INSERT INTO postings_v2 (block, term, slot, tf)
             SELECT slot >> {BLOCK_BITS}, term, slot, tf FROM postings
             ORDER BY slot >> {BLOCK_BITS}, term, slot;
         DROP TABLE postings;
         ALTER TABLE postings_v2 RENAME TO postings;"
    ))?;
    tx.execute_batch(POSTINGS_INDEX)?;
    tx.pragma_update(None, "user_version", 2)?;
    tx.commit()
}

/// Schema 2 to 3: the `encodings` table, in one transaction (another process upgrading the
/// same file at once waits, then finds it done).
fn add_encodings(conn: &mut Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    if identity(&tx)?.version != 2 {
        return tx.commit();
    }
    tx.execute_batch(ENCODINGS)?;
    tx.pragma_update(None, "user_version", 3)?;
    tx.commit()
}

/// Checks an existing store opened read-only (nothing is written): long enough for its header,
/// a store's application id and a schema this version reads.
pub(super) fn check_read_only(conn: &Connection, path: &Path) -> Result<()> {
    let err = |e| sql_error(path, "cannot open", e);
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(err)?;
    let Identity { version, app, .. } = identity(conn).map_err(err)?;
    refuse_newer(path, version)?;
    if version == 0 || app != APPLICATION_ID {
        return Err(Error::Store {
            path: path.to_path_buf(),
            message: "not a rerank store (an empty file, or another SQLite file; fill a store \
                      with `rerank index`)"
                .into(),
            source: None,
        });
    }
    if version < SCHEMA_VERSION {
        return Err(Error::Store {
            path: path.to_path_buf(),
            message: format!(
                "the store has schema {version}, which this version upgrades to \
                 {SCHEMA_VERSION} when it opens the file for writing (`Store::open`, or \
                 `rerank index`); a read-only open cannot"
            ),
            source: None,
        });
    }
    Ok(())
}

/// What a file says it is: its schema version, application id and number of schema objects.
struct Identity {
    version: i64,
    app: i64,
    tables: i64,
}

/// Reads the [`Identity`] in one statement, so one snapshot: a creator in another process
/// commits all three at once.
fn identity(conn: &Connection) -> rusqlite::Result<Identity> {
    conn.query_row(
        "SELECT (SELECT user_version FROM pragma_user_version), \
                (SELECT application_id FROM pragma_application_id), \
                (SELECT count(*) FROM sqlite_master)",
        [],
        |r| {
            Ok(Identity {
                version: r.get(0)?,
                app: r.get(1)?,
                tables: r.get(2)?,
            })
        },
    )
}

/// Refuses a schema newer than this version reads, before anything is written.
fn refuse_newer(path: &Path, version: i64) -> Result<()> {
    if version > SCHEMA_VERSION {
        return Err(Error::UnsupportedSchema {
            path: path.to_path_buf(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// Refuses a file shorter than the database size its SQLite header records (a copy or a
/// download cut short): SQLite would open it and fail, or miss rows, only when a query reaches
/// the missing pages. A file too short for a header, or one that is not SQLite, is left to
/// SQLite's own checks.
fn check_length(path: &Path) -> Result<()> {
    use std::io::Read;
    let Ok(mut file) = std::fs::File::open(path) else {
        return Ok(());
    };
    let mut header = [0u8; 100];
    if file.read_exact(&mut header).is_err() || !header.starts_with(b"SQLite format 3\0") {
        return Ok(());
    }
    let be32 = |at: usize| {
        u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let page_size = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65_536u64,
        n => u64::from(n),
    };
    // The page count is valid only when the "version-valid-for" number matches the change
    // counter (files written by SQLite 3.7.0 and later).
    let (pages, change_counter, valid_for) = (be32(28), be32(24), be32(92));
    if pages == 0 || change_counter != valid_for {
        return Ok(());
    }
    let expected = page_size * u64::from(pages);
    let actual = file.metadata().map(|m| m.len()).unwrap_or(expected);
    if actual < expected {
        return Err(Error::Store {
            path: path.to_path_buf(),
            message: format!(
                "the file is truncated: {actual} bytes where its header records {pages} pages \
                 of {page_size} bytes ({expected} bytes); restore it from a whole copy"
            ),
            source: None,
        });
    }
    Ok(())
}

/// A store file this process has open, counted so that its length is checked (by reading its
/// header through a descriptor of our own) only while no other store of this process has it
/// open: closing any descriptor of a file drops every POSIX lock the process holds on it,
/// SQLite's included, and another process could then write the file under a reader that
/// believes it holds a lock (SQLite's "How To Corrupt An SQLite Database File", 2.2). Found by
/// a test: a store opened beside two open handles of the same file while another process
/// indexed it read "database disk image is malformed".
#[derive(Debug)]
pub(super) struct OpenFile {
    key: PathBuf,
}

fn open_files() -> &'static Mutex<HashMap<PathBuf, usize>> {
    static OPEN: OnceLock<Mutex<HashMap<PathBuf, usize>>> = OnceLock::new();
    OPEN.get_or_init(Default::default)
}

impl OpenFile {
    /// Counts `path` as open by a store of this process until the value is dropped; the first
    /// store of the file in the process (before its connection takes any lock) checks its
    /// length against its header, so a truncated copy is refused before it is read.
    pub(super) fn open(path: &Path) -> Result<OpenFile> {
        let key = Self::key(path);
        let mut open = open_files().lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(key.clone()).or_default();
        if *count == 0 {
            if let Err(e) = check_length(path) {
                open.remove(&key);
                return Err(e);
            }
        }
        *open.get_mut(&key).expect("just counted") += 1;
        Ok(OpenFile { key })
    }

    /// The file's identity: its folder resolved (links, `..`) and its name, which holds
    /// before the file exists.
    fn key(path: &Path) -> PathBuf {
        let name = path.file_name().map(PathBuf::from).unwrap_or_default();
        let folder = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        std::fs::canonicalize(folder)
            .map(|f| f.join(&name))
            .unwrap_or_else(|_| path.to_path_buf())
    }
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        let mut open = open_files().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}
