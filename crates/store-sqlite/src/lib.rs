//! The embedded default backend: one SQLite file (WAL, `synchronous=FULL`), rows only.
//! One writer thread commits concurrent writes together; reads run on a pool of
//! connections, on blocking threads (small ones on the caller's).
//!
//! Files by what they hold: `connection` (the writer thread and the read pool),
//! `error` (the one mapping of database errors), `schema` (migrations), `helpers`
//! (what the SQL modules share), `filter_sql` (filters to SQL), `projects`,
//! `episodes`, `feed` (the change log), `vectors` (the embedding queue and vectors),
//! `keys`, `legacy` (v1 sessions and groups), `search_reads` (what a search reads, in
//! one transaction), `stats`, `runtime_settings`, `semantic*` (`SemanticStore`),
//! `lifecycle`, `transfer`: each holds its trait's impl and its SQL, with the same file
//! names in both backends.

mod connection;
mod episodes;
mod error;
mod extraction;
mod feature_history;
mod feed;
mod filter_sql;
mod forget;
mod helpers;
mod idempotency;
mod keys;
mod legacy;
mod lifecycle;
mod memory_feed;
mod projects;
mod retention;
mod runtime_settings;
mod schema;
mod search_reads;
mod semantic;
mod semantic_features;
mod semantic_queue;
mod semantic_sets;
mod semantic_summaries;
mod stats;
mod transfer;
mod usage;
mod vectors;

use std::path::{Path, PathBuf};

use self::connection::{ReadPool, Writer, open_connection};
use memmachine_core::error::{Error, Result};

/// File name of the database inside the data directory.
pub const DB_FILE: &str = "memmachine.db";

pub struct SqliteStore {
    path: PathBuf,
    writer: Writer,
    readers: ReadPool,
}

impl SqliteStore {
    /// Opens (creating if needed) the database in `data_dir` and migrates it.
    pub fn open(data_dir: &Path) -> Result<SqliteStore> {
        prepare_data_dir(data_dir)?;
        let path = data_dir.join(DB_FILE);
        let named = |err: Error| match err {
            Error::Unavailable(m) | Error::Internal(m) => {
                Error::Unavailable(format!("cannot open the database {}: {m}", path.display()))
            }
            other => other,
        };
        let readers = std::thread::available_parallelism().map_or(4, |n| n.get() * 2);
        // The writer and every reader share one page-cache total.
        let cache_kib = connection::cache_kib(readers + 1);
        let mut conn = open_connection(&path, cache_kib).map_err(named)?;
        schema::migrate(&mut conn).map_err(named)?;
        Ok(SqliteStore {
            readers: ReadPool::new(path.clone(), readers, cache_kib),
            writer: Writer::start(conn),
            path,
        })
    }

    /// `open` on a blocking thread, for async callers.
    pub async fn open_async(data_dir: &Path) -> Result<SqliteStore> {
        let dir = data_dir.to_path_buf();
        tokio::task::spawn_blocking(move || SqliteStore::open(&dir))
            .await
            .map_err(|err| Error::Internal(format!("opening the store: {err}")))?
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Makes sure `dir` is a directory the server can write, creating it if missing, and
/// says what is wrong with which path otherwise.
fn prepare_data_dir(dir: &Path) -> Result<()> {
    let shown = dir.display();
    let unusable = |what: String| Error::Unavailable(format!("--data-dir {shown} {what}"));
    match (std::fs::symlink_metadata(dir), std::fs::metadata(dir)) {
        (Ok(link), Err(_)) if link.file_type().is_symlink() => {
            let target = std::fs::read_link(dir).unwrap_or_default();
            return Err(unusable(format!(
                "is a symbolic link to {}, which does not exist",
                target.display()
            )));
        }
        (_, Ok(meta)) if !meta.is_dir() => {
            return Err(unusable("is a file, not a directory".into()));
        }
        (_, Ok(_)) => {}
        (_, Err(_)) => std::fs::create_dir_all(dir)
            .map_err(|err| unusable(format!("does not exist and cannot be created: {err}")))?,
    }
    // SQLite writes its journal beside the database: the directory must be writable.
    let probe = dir.join(format!(".memmachine-probe-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&probe)
        .map_err(|err| unusable(format!("is not writable: {err}")))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}
