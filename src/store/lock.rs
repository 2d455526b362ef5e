//! [`WriterLock`]: one indexing run at a time per store file, across processes.
//!
//! SQLite serializes transactions, not runs: two processes each upserting a different corpus
//! in batches would interleave their batches and leave a mix that is neither. A run that must
//! not interleave (the CLI's `rerank index`) holds this lock from its first read of the store
//! to its last write. It is an advisory lock (`flock` on Unix, `LockFileEx` on Windows,
//! through [`std::fs::File::try_lock`]) on an empty file beside the store, `FILE-lock` (as
//! SQLite names its `FILE-wal` and `FILE-shm`), which stays there and holds nothing: a copy of
//! the store file alone is still the whole store. Not on the store file itself: closing any
//! descriptor of a file drops every POSIX lock the process holds on it, SQLite's included,
//! and two processes then write the file at once (SQLite's documentation, "How To Corrupt An
//! SQLite Database File", 2.2; a test here found it so). The operating system releases the
//! lock when the process ends, however it ends, so a killed run never leaves it held.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::PathBuf;

use super::Store;
use crate::{Error, Result};

/// Held while a run writes to a store (see [`Store::lock_writer`]); released on drop.
#[derive(Debug)]
pub struct WriterLock {
    _file: File,
}

impl Store {
    /// Takes the store's writer lock (on `FILE-lock`, created empty beside the store when
    /// missing), or fails at once with [`Error::Store`] when another run (in this process or
    /// another) holds it: "the store is being written by another run".
    /// Plain [`upsert`](Store::upsert) and [`remove`](Store::remove) calls do not need it
    /// (each is one transaction); a run of many batches that must not interleave with another
    /// run's does.
    pub fn lock_writer(&self) -> Result<WriterLock> {
        let path = PathBuf::from(format!("{}-lock", self.path().display()));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(WriterLock { _file: file }),
            Err(TryLockError::WouldBlock) => Err(Error::Store {
                path: self.path().to_path_buf(),
                message: "the store is being written by another run (one indexing run at a \
                          time per store: wait for it to finish, then run again)"
                    .into(),
                source: None,
            }),
            Err(TryLockError::Error(e)) => Err(Error::io(&path, e)),
        }
    }
}
