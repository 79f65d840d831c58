//! Persisted project indexes: one immutable file per project snapshot ("segment"),
//! holding everything a `ProjectIndex` needs to answer exactly as one rebuilt from the
//! store's rows, and the change-feed position it covers. On start a project's newest
//! segment is read (and checked: format, server version, store, project, embedder,
//! checksum) and the feed replayed from its position; a segment that fails a check is
//! deleted and the project rebuilt from rows. Segments hold derived data (terms,
//! producer ids, metadata): erasing episodes deletes their project's segments first.
//!
//! Files: `<key hash>-p<project handle>-c<change>.seg` in one directory; a write goes
//! to a `.tmp` file, synced, renamed, and the directory synced. Temp files left by a
//! crash are removed on start.

pub mod format;
mod read;
mod write;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::model::ProjectKey;

pub use read::Loaded;

/// Episodes at which a project loaded from rows gets a segment. Below it a rebuild
/// takes a few milliseconds (5,000 LoCoMo-sized episodes index in about 50 ms), less
/// than the file's write costs in I/O, and a server with thousands of small projects
/// would keep thousands of files for nothing.
pub const WRITE_MIN_EPISODES: usize = 5_000;

/// Changes after which a project's segment is written again: at least
/// `WRITE_MIN_EPISODES`, or an eighth of the index (replaying an eighth of a million
/// changes costs about what a fresh segment's read does).
pub fn rewrite_after(episodes: usize) -> usize {
    WRITE_MIN_EPISODES.max(episodes / 8)
}

const SUFFIX: &str = ".seg";
const TEMP_SUFFIX: &str = ".seg.tmp";

/// The segments of one store, in one directory.
pub struct Segments {
    dir: PathBuf,
    store_id: String,
    /// What erasures require of a write before it is renamed into place.
    erasures: Mutex<Erasures>,
    /// One write at a time (the machines this serves have few cores).
    writing: Mutex<()>,
}

#[derive(Default)]
struct Erasures {
    /// Bumped by every erasure: a write that began before one is discarded (it may
    /// hold what was erased).
    count: u64,
    /// Per project, the position after its latest erasure (handle, change): an index
    /// behind it may hold what was erased, so it is not written.
    floors: HashMap<ProjectKey, (i64, i64)>,
}

/// What a segment must match to be used.
#[derive(Debug, Clone)]
pub struct Expected<'a> {
    pub project: i64,
    pub key: &'a ProjectKey,
    pub embedder: Option<&'a str>,
}

impl Segments {
    /// Segments in `dir` (created if missing) of the store `store_id`; temp files a
    /// crash left are removed.
    pub fn open(dir: &Path, store_id: String) -> std::io::Result<Segments> {
        std::fs::create_dir_all(dir)?;
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if name_of(&path).is_some_and(|n| n.ends_with(TEMP_SUFFIX)) {
                tracing::info!(path = %path.display(), "unfinished index segment removed");
                remove(&path);
            }
        }
        Ok(Segments {
            dir: dir.to_path_buf(),
            store_id,
            erasures: Mutex::default(),
            writing: Mutex::new(()),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file-name prefix of a project's segments.
    fn prefix(key: &ProjectKey, project: Option<i64>) -> String {
        let digest = Sha256::digest(format!("{}\0{}", key.org_id, key.project_id).as_bytes());
        let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        match project {
            Some(project) => format!("{hash}-p{project}-"),
            None => format!("{hash}-"),
        }
    }

    /// The project's segments (finished ones), as `(change, path)`.
    fn of_project(&self, key: &ProjectKey, project: Option<i64>) -> Vec<(i64, PathBuf)> {
        let prefix = Segments::prefix(key, project);
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter_map(|path| {
                let name = name_of(&path)?;
                let rest = name.strip_prefix(&prefix)?;
                // `c<change>`, after `p<project>-` when the prefix has no project.
                let change = rest.strip_suffix(SUFFIX)?.rsplit('c').next()?;
                Some((change.parse().ok()?, path.clone()))
            })
            .collect()
    }

    /// The project's newest segment, if any.
    pub fn newest(&self, key: &ProjectKey, project: i64) -> Option<PathBuf> {
        (self.of_project(key, Some(project)).into_iter())
            .max_by_key(|(change, _)| *change)
            .map(|(_, path)| path)
    }

    /// Deletes every segment of the project (any handle it had), and makes writes that
    /// began before this, or of an index behind `after` (the project's handle and
    /// position once the erasure was done), discard theirs. Returns when the files
    /// are gone.
    pub fn erase(&self, key: &ProjectKey, after: Option<(i64, i64)>) {
        let mut erasures = self.erasures.lock().expect("segment erasures");
        erasures.count += 1;
        if let Some(after) = after {
            erasures.floors.insert(key.clone(), after);
        }
        for (_, path) in self.of_project(key, None) {
            remove(&path);
        }
        sync_dir(&self.dir);
    }

    /// The erasure count, to hand to `write` (taken before the index state it writes
    /// was read from the store).
    pub fn erasures(&self) -> u64 {
        self.erasures.lock().expect("segment erasures").count
    }
}

fn name_of(path: &Path) -> Option<&str> {
    path.file_name()?.to_str()
}

/// Removes a file, saying so if that fails (a segment left behind is never trusted
/// without its checks, but erased data must not stay).
fn remove(path: &Path) {
    if let Err(err) = std::fs::remove_file(path)
        && err.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %err, "cannot remove an index segment");
    }
}

/// Makes renames and removals in `dir` durable.
fn sync_dir(dir: &Path) {
    if let Ok(dir) = std::fs::File::open(dir) {
        let _ = dir.sync_all();
    }
}

/// The server's version, written in segments: another version rebuilds.
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");

pub use write::encode_to_vec;

#[cfg(test)]
mod tests;
