//! Schema and migrations, versioned with `PRAGMA user_version`.

use rusqlite::Connection;

use super::connection::storage_error;
use crate::error::Result;

/// Each entry migrates from version `index` to `index + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: projects and episodes. Project ids are never reused (AUTOINCREMENT), so
    // nothing keyed by one can be mistaken for a later project's.
    "CREATE TABLE projects (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        org_id TEXT NOT NULL,
        project_id TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        embedder TEXT NOT NULL DEFAULT '',
        reranker TEXT NOT NULL DEFAULT '',
        episodic_enabled INTEGER NOT NULL DEFAULT 1,
        long_term_enabled INTEGER NOT NULL DEFAULT 1,
        short_term_enabled INTEGER NOT NULL DEFAULT 1,
        created_at INTEGER NOT NULL,
        next_seq INTEGER NOT NULL DEFAULT 1,
        UNIQUE (org_id, project_id)
    );
    CREATE TABLE episodes (
        id INTEGER PRIMARY KEY,
        project INTEGER NOT NULL,
        uid BLOB NOT NULL UNIQUE,
        seq INTEGER NOT NULL,
        content TEXT NOT NULL,
        producer_id TEXT NOT NULL,
        producer_role TEXT,
        produced_for_id TEXT,
        episode_type TEXT NOT NULL,
        content_type TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        metadata TEXT
    );
    CREATE UNIQUE INDEX episodes_by_project_seq ON episodes (project, seq);",
    // 2: vectors, one per episode from the embedder that made it, and the durable queue
    // of episodes waiting for one (filled in the episode's own transaction, so a crash
    // before embedding loses nothing).
    "CREATE TABLE embeddings (
        episode INTEGER PRIMARY KEY REFERENCES episodes (id) ON DELETE CASCADE,
        embedder TEXT NOT NULL,
        vector BLOB NOT NULL
    );
    CREATE TABLE embedding_queue (
        episode INTEGER PRIMARY KEY REFERENCES episodes (id) ON DELETE CASCADE
    );",
    // 3: API keys (a salted hash, never the secret; org_id NULL for admin keys), and when
    // each episode joined the embedding queue (0 for those queued before), for its lag.
    "CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        org_id TEXT,
        label TEXT NOT NULL DEFAULT '',
        salt BLOB NOT NULL,
        hash BLOB NOT NULL,
        created_at INTEGER NOT NULL,
        revoked_at INTEGER
    );
    ALTER TABLE embedding_queue ADD COLUMN queued_at INTEGER NOT NULL DEFAULT 0;",
];

/// Brings the database to the latest schema, and makes sure universal/universal exists.
pub(super) fn migrate(conn: &mut Connection) -> Result<()> {
    let tx = conn.transaction().map_err(storage_error)?;
    let version: usize = tx
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(storage_error)?;
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(version) {
        tracing::info!(version = index + 1, "applying schema migration");
        tx.execute_batch(sql).map_err(storage_error)?;
        tx.pragma_update(None, "user_version", index + 1)
            .map_err(storage_error)?;
    }
    let universal = crate::model::ProjectKey::universal();
    if super::projects::find(&tx, &universal)?.is_none() {
        super::projects::insert(&tx, &universal, "", &Default::default())?;
    }
    tx.commit().map_err(storage_error)
}
