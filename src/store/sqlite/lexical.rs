//! The BM25 indexes of the projects, kept in memory beside the SQLite file (the source
//! of truth). A project's index is loaded from the database on first use; after that the
//! writer thread applies every committed change before it acknowledges the write, so an
//! acknowledged episode is searchable at once.
//!
//! Documents enter an index in sequence order (loading reads them so, and the writer
//! applies commits in order), which `Bm25Index::newest` relies on.
//!
//! Loading registers the index before it reads, and takes its snapshot only once it
//! holds the index's lock: a write that commits meanwhile either is in that snapshot or
//! finds the registered index and waits to apply itself (applying twice is harmless).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use rusqlite::Connection;

use super::connection::storage_error;
use super::episodes::{COLUMNS, from_row};
use super::project_index::{Entry, ProjectIndex};
use super::vectors;
use crate::error::Result;
use crate::model::NewEpisode;
use crate::retrieval::episode_fields::EpisodeFields;
use crate::store::EmbedderChoice;

type Slot = Arc<RwLock<Option<ProjectIndex>>>;

#[derive(Default)]
pub(super) struct LexicalIndexes {
    projects: Mutex<HashMap<i64, Slot>>,
}

/// A change to apply to a project's index once its transaction has committed.
pub(super) enum IndexChange<'a> {
    /// Row ids with their episodes.
    Insert(&'a [(i64, &'a NewEpisode)]),
    Remove(&'a [i64]),
    /// Row ids with their new vectors.
    Vectors(&'a [(i64, Box<[f32]>)]),
}

impl LexicalIndexes {
    /// The project's index if it is loaded.
    pub(super) fn loaded(&self, project: i64) -> Option<Slot> {
        let slot = self
            .projects
            .lock()
            .expect("index map")
            .get(&project)
            .cloned()?;
        let ready = slot.read().expect("index lock").is_some();
        ready.then_some(slot)
    }

    /// Loads the project's index through `conn`, which must hold a read transaction
    /// that has not read anything yet (so its snapshot starts here).
    pub(super) fn load(
        &self,
        conn: &Connection,
        project: i64,
        embedders: &EmbedderChoice,
    ) -> Result<()> {
        let slot = self
            .projects
            .lock()
            .expect("index map")
            .entry(project)
            .or_default()
            .clone();
        let mut guard = slot.write().expect("index lock");
        if guard.is_some() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        // The snapshot starts here, with the index registered and locked.
        let embedder = vectors::embedder_of(conn, project, embedders)?;
        let mut index = ProjectIndex::new();
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT e.id, {COLUMNS}, v.vector FROM episodes e
                 LEFT JOIN embeddings v ON v.episode = e.id AND v.embedder = ?2
                 WHERE e.project = ?1 ORDER BY e.seq"
            ))
            .map_err(storage_error)?;
        let mut rows = stmt
            .query(rusqlite::params![project, embedder])
            .map_err(storage_error)?;
        while let Some(row) = rows.next().map_err(storage_error)? {
            let id: i64 = row.get(0).map_err(storage_error)?;
            let episode = from_row(row, 1).map_err(storage_error)?;
            let vector: Option<Vec<u8>> = row.get(11).map_err(storage_error)?;
            let entry = Entry {
                fields: EpisodeFields::of(&episode),
                vector: vector.as_deref().map(vectors::decode),
            };
            index.insert(id, &episode.producer_id, &episode.content, entry);
        }
        tracing::info!(
            project,
            episodes = index.text.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "lexical index loaded"
        );
        *guard = Some(index);
        Ok(())
    }

    /// Applies a committed change to the project's index, if it is registered.
    pub(super) fn apply(&self, project: i64, change: IndexChange<'_>) {
        let Some(slot) = self
            .projects
            .lock()
            .expect("index map")
            .get(&project)
            .cloned()
        else {
            return;
        };
        let mut guard = slot.write().expect("index lock");
        let Some(index) = guard.as_mut() else {
            return;
        };
        match change {
            IndexChange::Insert(docs) => {
                for (id, episode) in docs {
                    index.insert_new(*id, episode);
                }
            }
            IndexChange::Remove(ids) => {
                for id in ids {
                    index.remove(*id);
                }
            }
            IndexChange::Vectors(vectors) => {
                for (id, vector) in vectors {
                    index.set_vector(*id, vector.clone());
                }
            }
        }
    }

    /// Forgets every index (each loads again on its next use).
    pub(super) fn clear(&self) {
        self.projects.lock().expect("index map").clear();
    }

    /// Forgets a deleted project's index.
    pub(super) fn drop_project(&self, project: i64) {
        self.projects.lock().expect("index map").remove(&project);
    }
}
