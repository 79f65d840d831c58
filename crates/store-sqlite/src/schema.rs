//! Schema and migrations, versioned with `PRAGMA user_version`.

use rusqlite::{Connection, OptionalExtension};

use super::error::storage_error;
use memmachine_core::error::{Error, Result};

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
    // 4: semantic memory. Set types (org-level ones are seen by every project of their
    // org), feature sets (project NULL: org-level), categories owned by a set or a set
    // type (a template), their tags, the default categories a set disabled, features
    // with the episodes they cite, the ingestion queue of episodes per set (claimed
    // under leases), each org's semantic version (bumped by every change of one of its
    // features), the features waiting for a vector and their vectors, and each
    // project's short-term summary with the projects that lost episodes since the
    // summariser last looked (a deleted episode a summary covers deletes the summary; one
    // it does not cover may be in a summary being written). Every column a cascade follows is indexed, so deleting a large
    // project stays fast.
    "CREATE TABLE semantic_set_types (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        public_id TEXT NOT NULL UNIQUE,
        org_id TEXT NOT NULL,
        -- The project of a project-level set type; NULL for org-level ones, which the
        -- org's projects share and which outlive the project that made them.
        project INTEGER REFERENCES projects (id) ON DELETE CASCADE,
        is_org_level INTEGER NOT NULL,
        name TEXT NOT NULL,
        description TEXT NOT NULL,
        tags TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX semantic_set_types_by_project ON semantic_set_types (project);
    CREATE INDEX semantic_set_types_by_org ON semantic_set_types (org_id, is_org_level);
    CREATE TABLE semantic_sets (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        set_id TEXT NOT NULL UNIQUE,
        org_id TEXT NOT NULL,
        project INTEGER REFERENCES projects (id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        set_type INTEGER REFERENCES semantic_set_types (id) ON DELETE SET NULL,
        tags TEXT NOT NULL,
        embedder TEXT NOT NULL DEFAULT '',
        llm TEXT NOT NULL DEFAULT '',
        created_at INTEGER NOT NULL
    );
    CREATE INDEX semantic_sets_by_project ON semantic_sets (project);
    CREATE INDEX semantic_sets_by_org ON semantic_sets (org_id, project);
    CREATE INDEX semantic_sets_by_type ON semantic_sets (set_type);
    CREATE TABLE semantic_categories (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        public_id TEXT NOT NULL UNIQUE,
        set_ref INTEGER REFERENCES semantic_sets (id) ON DELETE CASCADE,
        set_type INTEGER REFERENCES semantic_set_types (id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        prompt TEXT NOT NULL,
        description TEXT NOT NULL,
        CHECK ((set_ref IS NULL) != (set_type IS NULL))
    );
    CREATE UNIQUE INDEX semantic_categories_of_set
        ON semantic_categories (set_ref, name COLLATE NOCASE) WHERE set_ref IS NOT NULL;
    CREATE UNIQUE INDEX semantic_categories_of_type
        ON semantic_categories (set_type, name COLLATE NOCASE) WHERE set_type IS NOT NULL;
    CREATE TABLE semantic_tags (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        public_id TEXT NOT NULL UNIQUE,
        category INTEGER NOT NULL REFERENCES semantic_categories (id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        description TEXT NOT NULL,
        UNIQUE (category, name COLLATE NOCASE)
    );
    CREATE TABLE semantic_disabled (
        set_ref INTEGER NOT NULL REFERENCES semantic_sets (id) ON DELETE CASCADE,
        name TEXT NOT NULL COLLATE NOCASE,
        PRIMARY KEY (set_ref, name)
    ) WITHOUT ROWID;
    CREATE TABLE semantic_features (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        public_id TEXT NOT NULL UNIQUE,
        set_ref INTEGER NOT NULL REFERENCES semantic_sets (id) ON DELETE CASCADE,
        category TEXT NOT NULL,
        category_id TEXT NOT NULL,
        tag TEXT NOT NULL,
        feature TEXT NOT NULL,
        value TEXT NOT NULL,
        metadata TEXT NOT NULL,
        match_key TEXT NOT NULL,
        value_key TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE INDEX semantic_features_by_key ON semantic_features (set_ref, match_key, value_key);
    CREATE TABLE semantic_citations (
        feature INTEGER NOT NULL REFERENCES semantic_features (id) ON DELETE CASCADE,
        episode INTEGER NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
        PRIMARY KEY (feature, episode)
    ) WITHOUT ROWID;
    CREATE INDEX semantic_citations_by_episode ON semantic_citations (episode);
    CREATE TABLE semantic_queue (
        set_ref INTEGER NOT NULL REFERENCES semantic_sets (id) ON DELETE CASCADE,
        episode INTEGER NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
        queued_at INTEGER NOT NULL,
        not_before INTEGER NOT NULL DEFAULT 0,
        attempts INTEGER NOT NULL DEFAULT 0,
        lease TEXT,
        lease_until INTEGER NOT NULL DEFAULT 0,
        failed TEXT,
        PRIMARY KEY (set_ref, episode)
    ) WITHOUT ROWID;
    CREATE INDEX semantic_queue_by_episode ON semantic_queue (episode);
    CREATE INDEX semantic_queue_claim ON semantic_queue
        (set_ref, queued_at, not_before, lease_until, lease) WHERE failed IS NULL;
    CREATE INDEX semantic_queue_leased ON semantic_queue (set_ref, lease_until)
        WHERE lease IS NOT NULL;
    CREATE TABLE semantic_versions (
        org_id TEXT PRIMARY KEY,
        version INTEGER NOT NULL
    );
    CREATE TRIGGER semantic_sets_deleted AFTER DELETE ON semantic_sets BEGIN
        INSERT INTO semantic_versions (org_id, version) VALUES (OLD.org_id, 1)
            ON CONFLICT (org_id) DO UPDATE SET version = version + 1;
    END;
    CREATE TABLE feature_embedding_queue (
        feature INTEGER PRIMARY KEY REFERENCES semantic_features (id) ON DELETE CASCADE,
        embedder TEXT NOT NULL
    );
    CREATE TABLE feature_embeddings (
        feature INTEGER PRIMARY KEY REFERENCES semantic_features (id) ON DELETE CASCADE,
        embedder TEXT NOT NULL,
        vector BLOB NOT NULL
    );
    CREATE TABLE episode_summaries (
        project INTEGER PRIMARY KEY REFERENCES projects (id) ON DELETE CASCADE,
        text TEXT NOT NULL,
        first_seq INTEGER NOT NULL,
        last_seq INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE TABLE summary_dirty (
        project INTEGER PRIMARY KEY REFERENCES projects (id) ON DELETE CASCADE
    );
    CREATE TRIGGER episodes_deleted_from_summary AFTER DELETE ON episodes BEGIN
        DELETE FROM episode_summaries
            WHERE project = OLD.project AND OLD.seq BETWEEN first_seq AND last_seq;
        INSERT OR IGNORE INTO summary_dirty (project) VALUES (OLD.project);
    END;",
    // 5: the change feed that keeps every in-memory index current (ids per project,
    // from `last_change`; `feed_floor`: the log was pruned through it), and leases on
    // the vector queues, whose rows now name the embedder the domain chose.
    "ALTER TABLE projects ADD COLUMN last_change INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE projects ADD COLUMN feed_floor INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE episode_changes (
        project INTEGER NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
        id INTEGER NOT NULL,
        kind INTEGER NOT NULL,
        episode INTEGER NOT NULL,
        at INTEGER NOT NULL,
        PRIMARY KEY (project, id)
    ) WITHOUT ROWID;
    CREATE INDEX episode_changes_by_age ON episode_changes (at);
    ALTER TABLE embedding_queue ADD COLUMN embedder TEXT NOT NULL DEFAULT '';
    ALTER TABLE embedding_queue ADD COLUMN lease_until INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX embedding_queue_claim ON embedding_queue (embedder, episode);
    ALTER TABLE feature_embedding_queue ADD COLUMN lease_until INTEGER NOT NULL DEFAULT 0;",
    // 6: the legacy v1 API's sessions and group configurations, by project (they go
    // with it). Member lists are sorted JSON arrays of strings; configurations JSON
    // objects.
    "CREATE TABLE legacy_sessions (
        project INTEGER NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
        session_id TEXT NOT NULL,
        agent_ids TEXT NOT NULL,
        user_ids TEXT NOT NULL,
        configuration TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (project, session_id)
    ) WITHOUT ROWID;
    CREATE TABLE legacy_groups (
        project INTEGER PRIMARY KEY REFERENCES projects (id) ON DELETE CASCADE,
        agent_list TEXT NOT NULL,
        user_list TEXT NOT NULL,
        configuration TEXT NOT NULL
    );",
    // 7: whether ranking treats the participants a question names apart.
    "ALTER TABLE projects ADD COLUMN participant_aware INTEGER NOT NULL DEFAULT 1;",
    // 8: the server-wide settings changed at run time (`/api/v2/config`): one row.
    "CREATE TABLE runtime_settings (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        version INTEGER NOT NULL,
        settings TEXT NOT NULL,
        updated_at INTEGER NOT NULL
    );",
    // usage: language-model and embedder figures per org, project, purpose and UTC
    // hour (one row per bucket, added to); the orgs' daily token budgets and pauses.
    "CREATE TABLE usage_hours (
        org_id TEXT NOT NULL,
        project_id TEXT NOT NULL,
        purpose TEXT NOT NULL,
        hour INTEGER NOT NULL,
        calls INTEGER NOT NULL,
        prompt_tokens INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        PRIMARY KEY (org_id, hour, project_id, purpose)
    ) WITHOUT ROWID;
    CREATE TABLE usage_budgets (
        org_id TEXT PRIMARY KEY,
        daily_tokens INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE usage_pauses (
        org_id TEXT PRIMARY KEY,
        until_micros INTEGER NOT NULL
    ) WITHOUT ROWID;",
    // Retention (issue 29): a message's own expiry, the project's retention (micros;
    // NULL keeps forever), indexes the sweeper reads by, and named leases so that one
    // process at a time sweeps a batch.
    "ALTER TABLE episodes ADD COLUMN expires_at INTEGER;
    ALTER TABLE projects ADD COLUMN episode_retention INTEGER;
    CREATE INDEX episodes_by_expiry ON episodes (expires_at) WHERE expires_at IS NOT NULL;
    CREATE INDEX episodes_by_project_time ON episodes (project, created_at);
    CREATE TABLE leases (
        name TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        until INTEGER NOT NULL
    );",
    // Fact history. A feature row is its current version (`valid_from`, 0: since
    // `created_at`; `changed_by`: what made it, as `FeatureChange`); triggers keep
    // every earlier one (and a deletion's final one with a zero-length tombstone) in
    // the same statement as the change, so no path can forget it. `feature` names the
    // owner (a consolidation re-points its sources' versions to the survivor),
    // `origin_id` the feature the version belonged to. Versions of features whose set
    // is being deleted with its project are not kept. At most `keep` per feature.
    "ALTER TABLE semantic_features ADD COLUMN valid_from INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE semantic_features ADD COLUMN changed_by INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE feature_history_settings (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        keep INTEGER NOT NULL
    );
    INSERT INTO feature_history_settings (id, keep) VALUES (1, 50);
    CREATE TABLE feature_versions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        feature INTEGER NOT NULL,
        feature_public_id TEXT NOT NULL,
        origin_id TEXT NOT NULL,
        org_id TEXT NOT NULL,
        project INTEGER REFERENCES projects (id) ON DELETE CASCADE,
        set_ref INTEGER NOT NULL,
        set_id TEXT NOT NULL,
        category TEXT NOT NULL,
        category_id TEXT NOT NULL,
        tag TEXT NOT NULL,
        feature_name TEXT NOT NULL,
        value TEXT NOT NULL,
        metadata TEXT NOT NULL,
        valid_from INTEGER NOT NULL,
        valid_to INTEGER NOT NULL,
        changed_by INTEGER NOT NULL
    );
    CREATE INDEX feature_versions_by_feature ON feature_versions (feature, id);
    CREATE INDEX feature_versions_by_public_id ON feature_versions (feature_public_id);
    CREATE INDEX feature_versions_by_set ON feature_versions (set_ref, valid_from);
    CREATE INDEX feature_versions_by_project ON feature_versions (project);
    CREATE TABLE feature_version_citations (
        version INTEGER NOT NULL REFERENCES feature_versions (id) ON DELETE CASCADE,
        episode INTEGER NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
        PRIMARY KEY (version, episode)
    ) WITHOUT ROWID;
    CREATE INDEX feature_version_citations_by_episode ON feature_version_citations (episode);
    CREATE TRIGGER feature_versions_on_update
        AFTER UPDATE OF category, tag, feature, value ON semantic_features
        WHEN OLD.category IS NOT NEW.category OR OLD.tag IS NOT NEW.tag
            OR OLD.feature IS NOT NEW.feature OR OLD.value IS NOT NEW.value
    BEGIN
        INSERT INTO feature_versions (feature, feature_public_id, origin_id, org_id, project,
                set_ref, set_id, category, category_id, tag, feature_name, value, metadata,
                valid_from, valid_to, changed_by)
            SELECT OLD.id, OLD.public_id, OLD.public_id, s.org_id, s.project, OLD.set_ref,
                s.set_id, OLD.category, OLD.category_id, OLD.tag, OLD.feature, OLD.value,
                OLD.metadata, MAX(OLD.valid_from, OLD.created_at),
                MAX(NEW.updated_at, OLD.valid_from, OLD.created_at), OLD.changed_by
            FROM semantic_sets s WHERE s.id = OLD.set_ref;
        INSERT INTO feature_version_citations (version, episode)
            SELECT last_insert_rowid(), episode FROM semantic_citations
            WHERE feature = OLD.id AND EXISTS (SELECT 1 FROM semantic_sets WHERE id = OLD.set_ref);
        UPDATE semantic_features SET valid_from = MAX(NEW.updated_at, OLD.valid_from, OLD.created_at)
            WHERE id = NEW.id;
        DELETE FROM feature_versions WHERE feature = OLD.id AND id <= (
            SELECT id FROM feature_versions WHERE feature = OLD.id ORDER BY id DESC
            LIMIT 1 OFFSET (SELECT keep FROM feature_history_settings WHERE id = 1));
    END;
    CREATE TRIGGER feature_versions_on_delete BEFORE DELETE ON semantic_features
    BEGIN
        INSERT INTO feature_versions (feature, feature_public_id, origin_id, org_id, project,
                set_ref, set_id, category, category_id, tag, feature_name, value, metadata,
                valid_from, valid_to, changed_by)
            SELECT OLD.id, OLD.public_id, OLD.public_id, s.org_id, s.project, OLD.set_ref,
                s.set_id, OLD.category, OLD.category_id, OLD.tag, OLD.feature, OLD.value,
                OLD.metadata, MAX(OLD.valid_from, OLD.created_at),
                MAX(mm_now_micros(), OLD.valid_from, OLD.created_at),
                OLD.changed_by
            FROM semantic_sets s WHERE s.id = OLD.set_ref;
        INSERT INTO feature_version_citations (version, episode)
            SELECT last_insert_rowid(), episode FROM semantic_citations
            WHERE feature = OLD.id AND EXISTS (SELECT 1 FROM semantic_sets WHERE id = OLD.set_ref);
        INSERT INTO feature_versions (feature, feature_public_id, origin_id, org_id, project,
                set_ref, set_id, category, category_id, tag, feature_name, value, metadata,
                valid_from, valid_to, changed_by)
            SELECT feature, feature_public_id, origin_id, org_id, project, set_ref, set_id,
                category, category_id, tag, feature_name, value, metadata, valid_to, valid_to, 4
            FROM feature_versions
            WHERE id = last_insert_rowid() AND feature = OLD.id
                AND EXISTS (SELECT 1 FROM semantic_sets WHERE id = OLD.set_ref);
        DELETE FROM feature_versions WHERE feature = OLD.id AND id <= (
            SELECT id FROM feature_versions WHERE feature = OLD.id ORDER BY id DESC
            LIMIT 1 OFFSET (SELECT keep FROM feature_history_settings WHERE id = 1));
    END;",
    // Receipts of forgetting a subject (counts per project as JSON, never content),
    // and the episodes by producer and recipient, so a forget finds them by index.
    "CREATE TABLE forget_receipts (
        receipt_id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL,
        subject TEXT NOT NULL,
        completed_at INTEGER NOT NULL,
        projects TEXT NOT NULL
    );
    CREATE INDEX episodes_by_producer ON episodes (project, producer_id);
    CREATE INDEX episodes_by_recipient ON episodes (project, produced_for_id);",
    // Idempotency keys: the client's key of a message and when it was stored, indexed
    // only where present (messages without one cost nothing), unique per project.
    "ALTER TABLE episodes ADD COLUMN idempotency_key TEXT;
    ALTER TABLE episodes ADD COLUMN idempotency_at INTEGER;
    CREATE UNIQUE INDEX episodes_by_idempotency_key ON episodes (project, idempotency_key)
        WHERE idempotency_key IS NOT NULL;",
    // The change feed clients follow (`MemoryFeed`): an episode entry carries the
    // episode's uid (it outlives the row), feature entries (kinds 4 to 6) the feature's
    // public id, summary entries (7) neither; `episode` is 0 for both. Triggers log
    // the features of a project's own sets and its summary, so no write path can skip
    // them; each entry takes the next id from `last_change` like `log_changes`, and
    // inserts only while the project row exists (its deletion logs nothing). A set's
    // features are logged before the set goes, as the cascade deletes them after.
    "ALTER TABLE episode_changes ADD COLUMN uid BLOB;
    ALTER TABLE episode_changes ADD COLUMN feature TEXT;
    CREATE TRIGGER feed_feature_added AFTER INSERT ON semantic_features BEGIN
        UPDATE projects SET last_change = last_change + 1
            WHERE id = (SELECT project FROM semantic_sets WHERE id = NEW.set_ref);
        INSERT INTO episode_changes (project, id, kind, episode, at, feature)
            SELECT p.id, p.last_change, 4, 0, mm_now_micros(), NEW.public_id
            FROM semantic_sets s JOIN projects p ON p.id = s.project WHERE s.id = NEW.set_ref;
    END;
    CREATE TRIGGER feed_feature_updated
        AFTER UPDATE OF category, tag, feature, value, metadata ON semantic_features
        WHEN OLD.category IS NOT NEW.category OR OLD.tag IS NOT NEW.tag
            OR OLD.feature IS NOT NEW.feature OR OLD.value IS NOT NEW.value
            OR OLD.metadata IS NOT NEW.metadata
    BEGIN
        UPDATE projects SET last_change = last_change + 1
            WHERE id = (SELECT project FROM semantic_sets WHERE id = NEW.set_ref);
        INSERT INTO episode_changes (project, id, kind, episode, at, feature)
            SELECT p.id, p.last_change, 5, 0, mm_now_micros(), NEW.public_id
            FROM semantic_sets s JOIN projects p ON p.id = s.project WHERE s.id = NEW.set_ref;
    END;
    CREATE TRIGGER feed_feature_deleted AFTER DELETE ON semantic_features BEGIN
        UPDATE projects SET last_change = last_change + 1
            WHERE id = (SELECT project FROM semantic_sets WHERE id = OLD.set_ref);
        INSERT INTO episode_changes (project, id, kind, episode, at, feature)
            SELECT p.id, p.last_change, 6, 0, mm_now_micros(), OLD.public_id
            FROM semantic_sets s JOIN projects p ON p.id = s.project WHERE s.id = OLD.set_ref;
    END;
    CREATE TRIGGER feed_set_deleted BEFORE DELETE ON semantic_sets
        WHEN OLD.project IS NOT NULL
    BEGIN
        INSERT INTO episode_changes (project, id, kind, episode, at, feature)
            SELECT p.id, p.last_change + ROW_NUMBER() OVER (ORDER BY f.id), 6, 0,
                mm_now_micros(), f.public_id
            FROM projects p JOIN semantic_features f ON f.set_ref = OLD.id
            WHERE p.id = OLD.project;
        UPDATE projects SET last_change = last_change
            + (SELECT COUNT(*) FROM semantic_features WHERE set_ref = OLD.id)
            WHERE id = OLD.project;
    END;
    CREATE TRIGGER feed_summary_added AFTER INSERT ON episode_summaries BEGIN
        UPDATE projects SET last_change = last_change + 1 WHERE id = NEW.project;
        INSERT INTO episode_changes (project, id, kind, episode, at)
            SELECT id, last_change, 7, 0, mm_now_micros() FROM projects WHERE id = NEW.project;
    END;
    CREATE TRIGGER feed_summary_updated AFTER UPDATE ON episode_summaries
        WHEN OLD.text IS NOT NEW.text
    BEGIN
        UPDATE projects SET last_change = last_change + 1 WHERE id = NEW.project;
        INSERT INTO episode_changes (project, id, kind, episode, at)
            SELECT id, last_change, 7, 0, mm_now_micros() FROM projects WHERE id = NEW.project;
    END;
    CREATE TRIGGER feed_summary_deleted AFTER DELETE ON episode_summaries BEGIN
        UPDATE projects SET last_change = last_change + 1 WHERE id = OLD.project;
        INSERT INTO episode_changes (project, id, kind, episode, at)
            SELECT id, last_change, 7, 0, mm_now_micros() FROM projects WHERE id = OLD.project;
    END;",
    // 15: an episode's uid is unique in its project, not across the store: a uid taken
    // in another project (a v1 client's own, say) must answer as a free one does, or it
    // would tell that the id exists elsewhere. SQLite cannot drop a column's UNIQUE, so
    // the table is rebuilt (`migrate` turns foreign keys off around it, or dropping the
    // old table would cascade to the vectors and citations), with its indexes and
    // trigger.
    "CREATE TABLE episodes_rebuilt (
        id INTEGER PRIMARY KEY,
        project INTEGER NOT NULL,
        uid BLOB NOT NULL,
        seq INTEGER NOT NULL,
        content TEXT NOT NULL,
        producer_id TEXT NOT NULL,
        producer_role TEXT,
        produced_for_id TEXT,
        episode_type TEXT NOT NULL,
        content_type TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        metadata TEXT,
        expires_at INTEGER,
        idempotency_key TEXT,
        idempotency_at INTEGER
    );
    INSERT INTO episodes_rebuilt (id, project, uid, seq, content, producer_id, producer_role,
            produced_for_id, episode_type, content_type, created_at, metadata, expires_at,
            idempotency_key, idempotency_at)
        SELECT id, project, uid, seq, content, producer_id, producer_role, produced_for_id,
            episode_type, content_type, created_at, metadata, expires_at, idempotency_key,
            idempotency_at
        FROM episodes;
    DROP TABLE episodes;
    ALTER TABLE episodes_rebuilt RENAME TO episodes;
    CREATE UNIQUE INDEX episodes_by_project_uid ON episodes (project, uid);
    CREATE UNIQUE INDEX episodes_by_project_seq ON episodes (project, seq);
    CREATE INDEX episodes_by_expiry ON episodes (expires_at) WHERE expires_at IS NOT NULL;
    CREATE INDEX episodes_by_project_time ON episodes (project, created_at);
    CREATE INDEX episodes_by_producer ON episodes (project, producer_id);
    CREATE INDEX episodes_by_recipient ON episodes (project, produced_for_id);
    CREATE UNIQUE INDEX episodes_by_idempotency_key ON episodes (project, idempotency_key)
        WHERE idempotency_key IS NOT NULL;
    CREATE TRIGGER episodes_deleted_from_summary AFTER DELETE ON episodes BEGIN
        DELETE FROM episode_summaries
            WHERE project = OLD.project AND OLD.seq BETWEEN first_seq AND last_seq;
        INSERT OR IGNORE INTO summary_dirty (project) VALUES (OLD.project);
    END;",
    // 16: projects whose semantic extraction is paused (a row while paused): the
    // queue's claim skips their episodes' rows, so every process sharing the file agrees.
    // A queued row names its episode's project, so the claim's scan compares a column
    // with the few paused projects instead of looking up each row's episode.
    "CREATE TABLE extraction_pauses (
        project INTEGER PRIMARY KEY REFERENCES projects (id) ON DELETE CASCADE,
        paused_at INTEGER NOT NULL
    );
    ALTER TABLE semantic_queue ADD COLUMN project INTEGER;
    UPDATE semantic_queue SET project =
        (SELECT e.project FROM episodes e WHERE e.id = semantic_queue.episode);",
    // 17: how hybrid ranking weighs its parts, per project: one JSON object (NULL, or a
    // field it lacks, takes the default), so that fields are added without a migration.
    "ALTER TABLE projects ADD COLUMN ranking_weights TEXT;",
    // 18: the database's identity, made once (index segments beside it name it).
    "CREATE TABLE store_meta (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        store_id TEXT NOT NULL
    );
    INSERT INTO store_meta (id, store_id) VALUES (1, lower(hex(randomblob(16))));",
];

/// Brings the database to the latest schema, and makes sure universal/universal exists.
pub(super) fn migrate(conn: &mut Connection) -> Result<()> {
    // A rebuilt table is dropped and replaced (15): with foreign keys on, the drop would
    // delete what references its rows. The pragma is a no-op inside a transaction.
    conn.pragma_update(None, "foreign_keys", false)
        .map_err(storage_error)?;
    let migrated = migrate_in_transaction(conn);
    conn.pragma_update(None, "foreign_keys", true)
        .map_err(storage_error)?;
    migrated
}

fn migrate_in_transaction(conn: &mut Connection) -> Result<()> {
    // IMMEDIATE: take the write lock before reading the version, so a second process
    // migrating at the same time waits (busy timeout) instead of failing its upgrade.
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(storage_error)?;
    let version: usize = tx
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(storage_error)?;
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(version) {
        tracing::info!(version = index + 1, "applying schema migration");
        tx.execute_batch(sql).map_err(storage_error)?;
        tx.pragma_update(None, "user_version", index + 1)
            .map_err(storage_error)?;
    }
    // What foreign keys would have enforced during the migrations still holds (checked
    // only after one ran: it reads every table).
    let broken: Option<String> = if version == MIGRATIONS.len() {
        None
    } else {
        tx.query_row("PRAGMA foreign_key_check", [], |row| row.get(0))
            .optional()
            .map_err(storage_error)?
    };
    if let Some(table) = broken {
        return Err(Error::Internal(format!(
            "the schema migration left a dangling reference in {table}"
        )));
    }
    let universal = memmachine_core::model::ProjectKey::universal();
    if super::projects::find(&tx, &universal)?.is_none() {
        super::projects::insert(&tx, &universal, "", &Default::default())?;
    }
    tx.commit().map_err(storage_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store made before uids were per project keeps its episodes, their vectors and
    /// queue entries through the rebuild, and takes a uid of another project after it.
    #[test]
    fn the_per_project_uid_migration_keeps_every_row() {
        let path = std::env::temp_dir().join(format!(
            "memmachine-migration-{}-{}.db",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        let mut conn =
            crate::connection::open_connection(&path, crate::connection::CACHE_TOTAL_KIB).unwrap();
        // The version just before migration 15.
        let before = 14;
        for sql in &MIGRATIONS[..before] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", before).unwrap();
        conn.execute_batch(
            "INSERT INTO projects (id, org_id, project_id, created_at) VALUES (7, 'o', 'a', 0);
             INSERT INTO projects (id, org_id, project_id, created_at) VALUES (8, 'o', 'b', 0);
             INSERT INTO episodes (id, project, uid, seq, content, producer_id, episode_type,
                 content_type, created_at, idempotency_key, idempotency_at)
                 VALUES (1, 7, x'00112233445566778899aabbccddeeff', 1, 'kept', 'u', 'message',
                     'string', 5, 'k1', 6);
             INSERT INTO embeddings (episode, embedder, vector) VALUES (1, 'e', x'00');
             INSERT INTO embedding_queue (episode, queued_at) VALUES (1, 9);",
        )
        .unwrap();
        migrate(&mut conn).unwrap();
        let count = |sql: &str| -> i64 { conn.query_row(sql, [], |row| row.get(0)).unwrap() };
        assert_eq!(
            count("SELECT COUNT(*) FROM embeddings WHERE episode = 1"),
            1
        );
        assert_eq!(
            count("SELECT COUNT(*) FROM embedding_queue WHERE episode = 1"),
            1
        );
        assert_eq!(
            count(
                "SELECT COUNT(*) FROM episodes WHERE content = 'kept' AND idempotency_key = 'k1'"
            ),
            1
        );
        assert_eq!(count("PRAGMA foreign_keys"), 1, "foreign keys back on");
        // The same uid in the other project, but not twice in one.
        let insert = |id: i64, project: i64, seq: i64| {
            conn.execute(
                "INSERT INTO episodes (id, project, uid, seq, content, producer_id, episode_type,
                     content_type, created_at)
                 VALUES (?1, ?2, x'00112233445566778899aabbccddeeff', ?3, 'x', 'u', 'message',
                     'string', 0)",
                rusqlite::params![id, project, seq],
            )
        };
        insert(2, 8, 1).unwrap();
        assert!(insert(3, 7, 2).is_err());
        // Deleting an episode still cascades to its vector.
        conn.execute("DELETE FROM episodes WHERE id = 1", [])
            .unwrap();
        assert_eq!(count("SELECT COUNT(*) FROM embeddings"), 0);
        drop(conn);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }

    /// Rows queued before migration 16 name their episode's project after it, so a
    /// pause holds them back as it does rows queued later.
    #[test]
    fn queued_rows_learn_their_project() {
        let path = std::env::temp_dir().join(format!(
            "memmachine-migration-{}-{}.db",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        let mut conn =
            crate::connection::open_connection(&path, crate::connection::CACHE_TOTAL_KIB).unwrap();
        // The version just before migration 16.
        let before = 15;
        for sql in &MIGRATIONS[..before] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", before).unwrap();
        conn.execute_batch(
            "INSERT INTO projects (id, org_id, project_id, created_at) VALUES (7, 'o', 'a', 0);
             INSERT INTO episodes (id, project, uid, seq, content, producer_id, episode_type,
                 content_type, created_at)
                 VALUES (1, 7, x'00112233445566778899aabbccddeeff', 1, 'queued', 'u',
                     'message', 'string', 0);
             INSERT INTO semantic_sets (id, set_id, org_id, project, kind, tags, created_at)
                 VALUES (3, 's', 'o', 7, 'project', '{}', 0);
             INSERT INTO semantic_queue (set_ref, episode, queued_at) VALUES (3, 1, 0);",
        )
        .unwrap();
        migrate(&mut conn).unwrap();
        let project: Option<i64> = conn
            .query_row("SELECT project FROM semantic_queue", [], |row| row.get(0))
            .unwrap();
        assert_eq!(project, Some(7));
        drop(conn);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
}
