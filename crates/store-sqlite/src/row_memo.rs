//! Rows every search reads (the project, its feed head and summary, its org's semantic
//! version), kept between searches until the database changes. A change is seen at
//! once: this process's writes bump a counter after their commit, and any other
//! connection's (another replica's) move `PRAGMA data_version` on a connection kept for
//! asking it, which costs far less than a read of the rows on a blocking thread.

use std::collections::HashMap;
use std::hash::Hash;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

use super::connection::open_connection;
use super::error::storage_error;
use memmachine_core::error::Result;
use memmachine_core::model::{Project, ProjectKey};
use memmachine_core::store::{FeedHead, Summary};

/// Most rows of one kind held: past it the memo starts afresh (rows are cheap to read).
const MOST: usize = 4096;

/// The state of the database as far as the memo can tell: equal generations, same rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Generation {
    writes: u64,
    data_version: i64,
}

/// Tells the database's generation.
pub(super) struct Watch {
    /// Commits of this process's writer, counted by it after each commit.
    writes: Arc<AtomicU64>,
    conn: Mutex<Connection>,
}

impl Watch {
    pub(super) fn open(path: &Path) -> Result<Watch> {
        Ok(Watch {
            writes: Arc::default(),
            conn: Mutex::new(open_connection(path)?),
        })
    }

    /// The counter the writer bumps once a group is committed (or rolled back:
    /// harmless).
    pub(super) fn commits(&self) -> Arc<AtomicU64> {
        self.writes.clone()
    }

    /// Now's generation. Taken before the rows it stamps are read, so a row read later
    /// is at least as new as its stamp says, and a change in between misses next time.
    pub(super) fn now(&self) -> Result<Generation> {
        let writes = self.writes.load(Ordering::Acquire);
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let data_version = conn
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut st| st.query_row([], |row| row.get(0)))
            .map_err(storage_error)?;
        Ok(Generation {
            writes,
            data_version,
        })
    }
}

/// Rows of one kind by key, valid for one generation.
pub(super) struct Memo<K, V> {
    rows: Mutex<(Option<Generation>, HashMap<K, V>)>,
}

impl<K: Eq + Hash, V: Clone> Default for Memo<K, V> {
    fn default() -> Self {
        Memo {
            rows: Mutex::new((None, HashMap::new())),
        }
    }
}

impl<K: Eq + Hash, V: Clone> Memo<K, V> {
    pub(super) fn get(&self, now: Generation, key: &K) -> Option<V> {
        let rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        if rows.0 != Some(now) {
            return None;
        }
        rows.1.get(key).cloned()
    }

    pub(super) fn put(&self, read_at: Generation, key: K, value: V) {
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        if rows.0 != Some(read_at) || rows.1.len() >= MOST {
            *rows = (Some(read_at), HashMap::new());
        }
        rows.1.insert(key, value);
    }
}

/// The rows a search reads.
#[derive(Default)]
pub(super) struct RowMemo {
    pub(super) projects: Memo<ProjectKey, Option<Project>>,
    pub(super) heads: Memo<ProjectKey, FeedHead>,
    pub(super) summaries: Memo<ProjectKey, Option<Summary>>,
    pub(super) semantic_versions: Memo<String, i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_connections_commit_and_this_process_writes_change_the_generation() {
        let dir = std::env::temp_dir().join(format!(
            "memmachine-row-memo-{}-{}",
            std::process::id(),
            chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.db");
        let other = open_connection(&path).unwrap();
        other.execute_batch("CREATE TABLE t (x INTEGER)").unwrap();
        let watch = Watch::open(&path).unwrap();
        let memo = Memo::<u8, &str>::default();
        let first = watch.now().unwrap();
        memo.put(first, 1, "kept");
        assert_eq!(watch.now().unwrap(), first, "nothing changed");
        assert_eq!(memo.get(watch.now().unwrap(), &1), Some("kept"));
        other.execute_batch("INSERT INTO t VALUES (1)").unwrap();
        let second = watch.now().unwrap();
        assert_ne!(second, first, "another connection committed");
        assert_eq!(memo.get(second, &1), None);
        memo.put(second, 1, "again");
        watch.commits().fetch_add(1, Ordering::Release);
        assert_ne!(
            watch.now().unwrap(),
            second,
            "this process's writer committed"
        );
        assert_eq!(memo.get(watch.now().unwrap(), &1), None);
        drop((other, watch));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
