//! Schema and migrations: numbered SQL scripts applied in order, each recorded in
//! `memmachine_schema`, all inside one transaction that holds an advisory lock, so that
//! replicas starting together migrate once, one after the other.
//!
//! Every table is keyed by `org_id` first, so Citus can distribute all of them by
//! `org_id`, colocated (foreign keys include it); `api_keys` alone is a reference table.
//! Internal ids (projects, episodes, sets, features...) come from identity columns and
//! are never reused. Timestamps are microseconds since the Unix epoch (BIGINT), as in
//! the SQLite backend, whose schema (its migrations 1-4) this mirrors table by table.

use sqlx::PgPool;

use super::error::db_error;
use memmachine_core::error::Result;

/// The key of the advisory lock migrations hold ("memmachine" in ASCII, truncated).
const MIGRATION_LOCK: i64 = 0x6d656d6d61636869;

/// Each entry migrates from version `index` to `index + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: projects, episodes, their change log, vectors and the queue of episodes
    // waiting for one, API keys.
    r#"
    CREATE TABLE projects (
        org_id TEXT NOT NULL,
        id BIGINT GENERATED ALWAYS AS IDENTITY,
        project_id TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        embedder TEXT NOT NULL DEFAULT '',
        reranker TEXT NOT NULL DEFAULT '',
        episodic_enabled BOOLEAN NOT NULL DEFAULT TRUE,
        long_term_enabled BOOLEAN NOT NULL DEFAULT TRUE,
        short_term_enabled BOOLEAN NOT NULL DEFAULT TRUE,
        created_at BIGINT NOT NULL,
        next_seq BIGINT NOT NULL DEFAULT 1,
        -- The id of the project's latest change (its log's counter), and how far its
        -- log was pruned (entries up to it are gone).
        last_change BIGINT NOT NULL DEFAULT 0,
        feed_floor BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (org_id, id),
        UNIQUE (org_id, project_id)
    );
    CREATE INDEX projects_by_id ON projects (id);

    CREATE TABLE episodes (
        org_id TEXT NOT NULL,
        id BIGINT GENERATED ALWAYS AS IDENTITY,
        project BIGINT NOT NULL,
        uid UUID NOT NULL,
        seq BIGINT NOT NULL,
        content TEXT NOT NULL,
        producer_id TEXT NOT NULL,
        producer_role TEXT,
        produced_for_id TEXT,
        episode_type TEXT NOT NULL,
        content_type TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        -- A JSON object of strings; NULL when empty.
        metadata JSONB,
        PRIMARY KEY (org_id, id),
        UNIQUE (org_id, uid),
        UNIQUE (org_id, project, seq),
        FOREIGN KEY (org_id, project) REFERENCES projects (org_id, id) ON DELETE CASCADE
    );
    CREATE INDEX episodes_by_id ON episodes (id);

    -- kind: 1 added, 2 removed, 3 vector set.
    CREATE TABLE episode_changes (
        org_id TEXT NOT NULL,
        project BIGINT NOT NULL,
        id BIGINT NOT NULL,
        kind SMALLINT NOT NULL,
        episode BIGINT NOT NULL,
        at BIGINT NOT NULL,
        PRIMARY KEY (org_id, project, id),
        FOREIGN KEY (org_id, project) REFERENCES projects (org_id, id) ON DELETE CASCADE
    );
    CREATE INDEX episode_changes_by_time ON episode_changes (at);

    CREATE TABLE embedding_queue (
        org_id TEXT NOT NULL,
        episode BIGINT NOT NULL,
        embedder TEXT NOT NULL,
        queued_at BIGINT NOT NULL,
        lease_until BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (org_id, episode),
        FOREIGN KEY (org_id, episode) REFERENCES episodes (org_id, id) ON DELETE CASCADE
    );
    CREATE INDEX embedding_queue_claim ON embedding_queue (embedder, queued_at, episode);
    CREATE INDEX embedding_queue_by_episode ON embedding_queue (episode);

    -- One vector per episode, from the embedder that made it. No fixed dimension:
    -- an HNSW index per dimension is made when its first vector is stored.
    CREATE TABLE embeddings (
        org_id TEXT NOT NULL,
        episode BIGINT NOT NULL,
        embedder TEXT NOT NULL,
        vector vector NOT NULL,
        PRIMARY KEY (org_id, episode),
        FOREIGN KEY (org_id, episode) REFERENCES episodes (org_id, id) ON DELETE CASCADE
    );

    -- A salted hash, never the secret; org_id NULL for admin keys. Not per org: a
    -- reference table under Citus.
    CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        org_id TEXT,
        label TEXT NOT NULL DEFAULT '',
        salt BYTEA NOT NULL,
        hash BYTEA NOT NULL,
        created_at BIGINT NOT NULL,
        revoked_at BIGINT
    );
    "#,
    // 2: semantic memory (SQLite's migration 4): set types, sets, categories owned by a
    // set or a set type, their tags, disabled default categories, features with the
    // episodes they cite, the ingestion queue (claimed under leases), each org's
    // semantic version, feature vectors and their queue, short-term summaries.
    r#"
    CREATE TABLE semantic_set_types (
        org_id TEXT NOT NULL,
        id BIGINT GENERATED ALWAYS AS IDENTITY,
        public_id TEXT NOT NULL,
        -- NULL for org-level ones, which outlive the project that made them.
        project BIGINT,
        is_org_level BOOLEAN NOT NULL,
        name TEXT NOT NULL,
        description TEXT NOT NULL,
        tags TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        PRIMARY KEY (org_id, id),
        UNIQUE (org_id, public_id),
        FOREIGN KEY (org_id, project) REFERENCES projects (org_id, id) ON DELETE CASCADE
    );
    CREATE INDEX semantic_set_types_by_id ON semantic_set_types (id);
    CREATE INDEX semantic_set_types_by_project ON semantic_set_types (org_id, project);

    CREATE TABLE semantic_sets (
        org_id TEXT NOT NULL,
        id BIGINT GENERATED ALWAYS AS IDENTITY,
        set_id TEXT NOT NULL,
        project BIGINT,
        kind TEXT NOT NULL,
        set_type BIGINT,
        tags TEXT NOT NULL,
        embedder TEXT NOT NULL DEFAULT '',
        llm TEXT NOT NULL DEFAULT '',
        created_at BIGINT NOT NULL,
        PRIMARY KEY (org_id, id),
        UNIQUE (org_id, set_id),
        FOREIGN KEY (org_id, project) REFERENCES projects (org_id, id) ON DELETE CASCADE,
        FOREIGN KEY (org_id, set_type) REFERENCES semantic_set_types (org_id, id)
            ON DELETE SET NULL (set_type)
    );
    CREATE INDEX semantic_sets_by_id ON semantic_sets (id);
    CREATE INDEX semantic_sets_by_set_id ON semantic_sets (set_id);
    CREATE INDEX semantic_sets_by_project ON semantic_sets (org_id, project);
    CREATE INDEX semantic_sets_by_type ON semantic_sets (org_id, set_type);

    CREATE TABLE semantic_categories (
        org_id TEXT NOT NULL,
        id BIGINT GENERATED ALWAYS AS IDENTITY,
        public_id TEXT NOT NULL,
        set_ref BIGINT,
        set_type BIGINT,
        name TEXT NOT NULL,
        prompt TEXT NOT NULL,
        description TEXT NOT NULL,
        PRIMARY KEY (org_id, id),
        UNIQUE (org_id, public_id),
        FOREIGN KEY (org_id, set_ref) REFERENCES semantic_sets (org_id, id) ON DELETE CASCADE,
        FOREIGN KEY (org_id, set_type) REFERENCES semantic_set_types (org_id, id)
            ON DELETE CASCADE,
        CHECK ((set_ref IS NULL) != (set_type IS NULL))
    );
    CREATE INDEX semantic_categories_by_id ON semantic_categories (id);
    CREATE INDEX semantic_categories_by_public_id ON semantic_categories (public_id);
    -- Names are unique per owner regardless of ASCII case (SQLite's NOCASE).
    CREATE UNIQUE INDEX semantic_categories_of_set
        ON semantic_categories (org_id, set_ref, lower(name COLLATE "C")) WHERE set_ref IS NOT NULL;
    CREATE UNIQUE INDEX semantic_categories_of_type
        ON semantic_categories (org_id, set_type, lower(name COLLATE "C")) WHERE set_type IS NOT NULL;

    CREATE TABLE semantic_tags (
        org_id TEXT NOT NULL,
        id BIGINT GENERATED ALWAYS AS IDENTITY,
        public_id TEXT NOT NULL,
        category BIGINT NOT NULL,
        name TEXT NOT NULL,
        description TEXT NOT NULL,
        PRIMARY KEY (org_id, id),
        UNIQUE (org_id, public_id),
        FOREIGN KEY (org_id, category) REFERENCES semantic_categories (org_id, id)
            ON DELETE CASCADE
    );
    CREATE INDEX semantic_tags_by_id ON semantic_tags (id);
    CREATE INDEX semantic_tags_by_public_id ON semantic_tags (public_id);
    CREATE UNIQUE INDEX semantic_tags_by_name
        ON semantic_tags (org_id, category, lower(name COLLATE "C"));

    CREATE TABLE semantic_disabled (
        org_id TEXT NOT NULL,
        set_ref BIGINT NOT NULL,
        name TEXT NOT NULL,
        FOREIGN KEY (org_id, set_ref) REFERENCES semantic_sets (org_id, id) ON DELETE CASCADE
    );
    CREATE UNIQUE INDEX semantic_disabled_key
        ON semantic_disabled (org_id, set_ref, lower(name COLLATE "C"));

    CREATE TABLE semantic_features (
        org_id TEXT NOT NULL,
        id BIGINT GENERATED ALWAYS AS IDENTITY,
        public_id TEXT NOT NULL,
        set_ref BIGINT NOT NULL,
        category TEXT NOT NULL,
        category_id TEXT NOT NULL,
        tag TEXT NOT NULL,
        feature TEXT NOT NULL,
        value TEXT NOT NULL,
        metadata TEXT NOT NULL,
        match_key TEXT NOT NULL,
        value_key TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        PRIMARY KEY (org_id, id),
        UNIQUE (org_id, public_id),
        FOREIGN KEY (org_id, set_ref) REFERENCES semantic_sets (org_id, id) ON DELETE CASCADE
    );
    CREATE INDEX semantic_features_by_id ON semantic_features (id);
    CREATE INDEX semantic_features_by_public_id ON semantic_features (public_id);
    CREATE INDEX semantic_features_by_key
        ON semantic_features (org_id, set_ref, match_key COLLATE "C", value_key);
    CREATE INDEX semantic_features_by_set ON semantic_features (set_ref, id);

    CREATE TABLE semantic_citations (
        org_id TEXT NOT NULL,
        feature BIGINT NOT NULL,
        episode BIGINT NOT NULL,
        PRIMARY KEY (org_id, feature, episode),
        FOREIGN KEY (org_id, feature) REFERENCES semantic_features (org_id, id)
            ON DELETE CASCADE,
        FOREIGN KEY (org_id, episode) REFERENCES episodes (org_id, id) ON DELETE CASCADE
    );
    CREATE INDEX semantic_citations_by_episode ON semantic_citations (org_id, episode);

    CREATE TABLE semantic_queue (
        org_id TEXT NOT NULL,
        set_ref BIGINT NOT NULL,
        episode BIGINT NOT NULL,
        queued_at BIGINT NOT NULL,
        not_before BIGINT NOT NULL DEFAULT 0,
        attempts INTEGER NOT NULL DEFAULT 0,
        lease TEXT,
        lease_until BIGINT NOT NULL DEFAULT 0,
        failed TEXT,
        PRIMARY KEY (org_id, set_ref, episode),
        FOREIGN KEY (org_id, set_ref) REFERENCES semantic_sets (org_id, id) ON DELETE CASCADE,
        FOREIGN KEY (org_id, episode) REFERENCES episodes (org_id, id) ON DELETE CASCADE
    );
    CREATE INDEX semantic_queue_by_episode ON semantic_queue (org_id, episode);
    CREATE INDEX semantic_queue_by_set ON semantic_queue (set_ref, episode);
    CREATE INDEX semantic_queue_claim ON semantic_queue
        (set_ref, queued_at, not_before, lease_until) WHERE failed IS NULL;

    CREATE TABLE semantic_versions (
        org_id TEXT PRIMARY KEY,
        version BIGINT NOT NULL
    );
    CREATE FUNCTION memmachine_sets_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO semantic_versions (org_id, version) VALUES (OLD.org_id, 1)
            ON CONFLICT (org_id) DO UPDATE SET version = semantic_versions.version + 1;
        RETURN NULL;
    END $$;
    CREATE TRIGGER semantic_sets_deleted AFTER DELETE ON semantic_sets
        FOR EACH ROW EXECUTE FUNCTION memmachine_sets_deleted();

    CREATE TABLE feature_embedding_queue (
        org_id TEXT NOT NULL,
        feature BIGINT NOT NULL,
        embedder TEXT NOT NULL,
        lease_until BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (org_id, feature),
        FOREIGN KEY (org_id, feature) REFERENCES semantic_features (org_id, id)
            ON DELETE CASCADE
    );
    CREATE INDEX feature_embedding_queue_by_feature ON feature_embedding_queue (feature);

    CREATE TABLE feature_embeddings (
        org_id TEXT NOT NULL,
        feature BIGINT NOT NULL,
        embedder TEXT NOT NULL,
        vector vector NOT NULL,
        PRIMARY KEY (org_id, feature),
        FOREIGN KEY (org_id, feature) REFERENCES semantic_features (org_id, id)
            ON DELETE CASCADE
    );

    CREATE TABLE episode_summaries (
        org_id TEXT NOT NULL,
        project BIGINT NOT NULL,
        text TEXT NOT NULL,
        first_seq BIGINT NOT NULL,
        last_seq BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        PRIMARY KEY (org_id, project),
        FOREIGN KEY (org_id, project) REFERENCES projects (org_id, id) ON DELETE CASCADE
    );
    CREATE TABLE summary_dirty (
        org_id TEXT NOT NULL,
        project BIGINT NOT NULL,
        PRIMARY KEY (org_id, project),
        FOREIGN KEY (org_id, project) REFERENCES projects (org_id, id) ON DELETE CASCADE
    );
    -- A deleted episode deletes the summary covering it and marks its project dirty
    -- (unless the project itself is going).
    CREATE FUNCTION memmachine_episode_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM episode_summaries
            WHERE org_id = OLD.org_id AND project = OLD.project
              AND OLD.seq BETWEEN first_seq AND last_seq;
        INSERT INTO summary_dirty (org_id, project)
            SELECT OLD.org_id, OLD.project
            WHERE EXISTS (SELECT 1 FROM projects WHERE org_id = OLD.org_id AND id = OLD.project)
            ON CONFLICT DO NOTHING;
        RETURN NULL;
    END $$;
    CREATE TRIGGER episodes_deleted_from_summary AFTER DELETE ON episodes
        FOR EACH ROW EXECUTE FUNCTION memmachine_episode_deleted();
    "#,
    // 3: `mm_num(text)`: the number a value holds (surrounding white space allowed,
    // finite only), else NULL: the rule of `filter_eval::as_number` (Rust's `f64`
    // parsing after `str::trim`), so filters compare numbers numerically as the
    // in-memory evaluation does.
    r#"
    CREATE FUNCTION mm_num(t TEXT) RETURNS DOUBLE PRECISION
        LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $$
    DECLARE
        s TEXT := btrim(t, E' \t\n\r\u000b\f\u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000');
    BEGIN
        IF s !~ '^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$' THEN
            RETURN NULL;
        END IF;
        BEGIN
            RETURN s::double precision;
        EXCEPTION WHEN numeric_value_out_of_range OR invalid_text_representation THEN
            -- Too large (Rust: infinite, not a number here) or too small (Rust: 0).
            BEGIN
                IF abs(s::numeric) < 1 THEN RETURN 0; END IF;
                RETURN NULL;
            EXCEPTION WHEN OTHERS THEN
                IF s ~ '[eE]-' THEN RETURN 0; END IF;
                RETURN NULL;
            END;
        END;
    END $$;
    "#,
    // 4: the legacy v1 API's sessions and group configurations, by project (they go
    // with it). Member lists are sorted arrays; configurations JSON objects.
    r#"
    CREATE TABLE legacy_sessions (
        org_id TEXT NOT NULL,
        project BIGINT NOT NULL,
        session_id TEXT NOT NULL,
        agent_ids TEXT[] NOT NULL,
        user_ids TEXT[] NOT NULL,
        configuration JSONB NOT NULL,
        created_at BIGINT NOT NULL,
        PRIMARY KEY (org_id, project, session_id),
        FOREIGN KEY (org_id, project) REFERENCES projects (org_id, id) ON DELETE CASCADE
    );
    CREATE TABLE legacy_groups (
        org_id TEXT NOT NULL,
        project BIGINT NOT NULL,
        agent_list TEXT[] NOT NULL,
        user_list TEXT[] NOT NULL,
        configuration JSONB NOT NULL,
        PRIMARY KEY (org_id, project),
        FOREIGN KEY (org_id, project) REFERENCES projects (org_id, id) ON DELETE CASCADE
    );
    "#,
    // 5: whether ranking treats the participants a question names apart.
    "ALTER TABLE projects ADD COLUMN participant_aware BOOLEAN NOT NULL DEFAULT TRUE;",
    // 6: the server-wide settings changed at run time (`/api/v2/config`): one row.
    "CREATE TABLE runtime_settings (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        version BIGINT NOT NULL,
        settings TEXT NOT NULL,
        updated_at BIGINT NOT NULL
    );",
    // usage: language-model and embedder figures per org, project, purpose and UTC
    // hour (one row per bucket, added to); the orgs' daily token budgets and pauses.
    "CREATE TABLE usage_hours (
        org_id TEXT NOT NULL,
        project_id TEXT NOT NULL,
        purpose TEXT NOT NULL,
        hour BIGINT NOT NULL,
        calls BIGINT NOT NULL,
        prompt_tokens BIGINT NOT NULL,
        completion_tokens BIGINT NOT NULL,
        PRIMARY KEY (org_id, hour, project_id, purpose)
    );
    CREATE TABLE usage_budgets (
        org_id TEXT PRIMARY KEY,
        daily_tokens BIGINT NOT NULL
    );
    CREATE TABLE usage_pauses (
        org_id TEXT PRIMARY KEY,
        until_micros BIGINT NOT NULL
    );",
    // Retention (issue 29): a message's own expiry, the project's retention (micros;
    // NULL keeps forever), indexes the sweeper reads by, and named leases so that one
    // replica at a time sweeps a batch.
    "ALTER TABLE episodes ADD COLUMN expires_at BIGINT;
    ALTER TABLE projects ADD COLUMN episode_retention BIGINT;
    CREATE INDEX episodes_by_expiry ON episodes (expires_at) WHERE expires_at IS NOT NULL;
    CREATE INDEX episodes_by_project_time ON episodes (project, created_at);
    CREATE TABLE leases (
        name TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        until BIGINT NOT NULL
    );",
    // Fact history. A feature row is its current version
    // (`valid_from`, 0: since `created_at`; `changed_by`: what made it, as
    // `FeatureChange`); triggers keep every earlier one (and a deletion's final one with
    // a zero-length tombstone) in the same statement as the change, so no path can
    // forget it. `feature` names the owner (a consolidation re-points its sources'
    // versions to the survivor), `origin_id` the feature the version belonged to.
    // Versions of features deleted with their project or set are not kept. At most
    // `keep` per feature.
    r#"
    ALTER TABLE semantic_features ADD COLUMN valid_from BIGINT NOT NULL DEFAULT 0;
    ALTER TABLE semantic_features ADD COLUMN changed_by BIGINT NOT NULL DEFAULT 0;
    CREATE TABLE feature_history_settings (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        keep BIGINT NOT NULL
    );
    INSERT INTO feature_history_settings (id, keep) VALUES (1, 50);
    CREATE TABLE feature_versions (
        org_id TEXT NOT NULL,
        id BIGINT GENERATED ALWAYS AS IDENTITY,
        feature BIGINT NOT NULL,
        feature_public_id TEXT NOT NULL,
        origin_id TEXT NOT NULL,
        project BIGINT,
        set_ref BIGINT NOT NULL,
        set_id TEXT NOT NULL,
        category TEXT NOT NULL,
        category_id TEXT NOT NULL,
        tag TEXT NOT NULL,
        feature_name TEXT NOT NULL,
        value TEXT NOT NULL,
        metadata TEXT NOT NULL,
        valid_from BIGINT NOT NULL,
        valid_to BIGINT NOT NULL,
        changed_by BIGINT NOT NULL,
        PRIMARY KEY (org_id, id),
        FOREIGN KEY (org_id, project) REFERENCES projects (org_id, id) ON DELETE CASCADE
    );
    CREATE INDEX feature_versions_by_feature ON feature_versions (feature, id);
    CREATE INDEX feature_versions_by_public_id ON feature_versions (feature_public_id);
    CREATE INDEX feature_versions_by_set ON feature_versions (set_ref, valid_from);
    CREATE INDEX feature_versions_by_project ON feature_versions (org_id, project);
    CREATE TABLE feature_version_citations (
        org_id TEXT NOT NULL,
        version BIGINT NOT NULL,
        episode BIGINT NOT NULL,
        PRIMARY KEY (org_id, version, episode),
        FOREIGN KEY (org_id, version) REFERENCES feature_versions (org_id, id)
            ON DELETE CASCADE,
        FOREIGN KEY (org_id, episode) REFERENCES episodes (org_id, id) ON DELETE CASCADE
    );
    CREATE INDEX feature_version_citations_by_episode
        ON feature_version_citations (org_id, episode);

    CREATE FUNCTION memmachine_trim_feature_versions(org TEXT, f BIGINT) RETURNS void
        LANGUAGE sql AS $$
        DELETE FROM feature_versions WHERE org_id = org AND feature = f AND id <= (
            SELECT id FROM feature_versions WHERE org_id = org AND feature = f
            ORDER BY id DESC LIMIT 1
            OFFSET (SELECT keep FROM feature_history_settings WHERE id = 1));
    $$;

    -- Keeps OLD as a version ending at `ended`; NULL when its set or project is going.
    CREATE FUNCTION memmachine_keep_feature_version(old semantic_features, ended BIGINT)
        RETURNS BIGINT LANGUAGE plpgsql AS $$
    DECLARE
        kept BIGINT;
    BEGIN
        INSERT INTO feature_versions (org_id, feature, feature_public_id, origin_id, project, set_ref,
                set_id, category, category_id, tag, feature_name, value, metadata, valid_from,
                valid_to, changed_by)
            SELECT old.org_id, old.id, old.public_id, old.public_id, s.project, old.set_ref,
                s.set_id, old.category, old.category_id, old.tag, old.feature, old.value,
                old.metadata, GREATEST(old.valid_from, old.created_at), ended, old.changed_by
            FROM semantic_sets s
            WHERE s.org_id = old.org_id AND s.id = old.set_ref
                AND (s.project IS NULL OR EXISTS (
                    SELECT 1 FROM projects p WHERE p.org_id = s.org_id AND p.id = s.project))
            RETURNING id INTO kept;
        IF kept IS NOT NULL THEN
            INSERT INTO feature_version_citations (org_id, version, episode)
                SELECT old.org_id, kept, episode FROM semantic_citations
                WHERE org_id = old.org_id AND feature = old.id;
        END IF;
        RETURN kept;
    END $$;

    CREATE FUNCTION memmachine_feature_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        ended BIGINT := GREATEST(NEW.updated_at, OLD.valid_from, OLD.created_at);
    BEGIN
        IF memmachine_keep_feature_version(OLD, ended) IS NOT NULL THEN
            PERFORM memmachine_trim_feature_versions(OLD.org_id, OLD.id);
        END IF;
        NEW.valid_from := ended;
        RETURN NEW;
    END $$;
    CREATE TRIGGER feature_versions_on_update
        BEFORE UPDATE OF category, tag, feature, value ON semantic_features
        FOR EACH ROW WHEN (OLD.category IS DISTINCT FROM NEW.category
            OR OLD.tag IS DISTINCT FROM NEW.tag OR OLD.feature IS DISTINCT FROM NEW.feature
            OR OLD.value IS DISTINCT FROM NEW.value)
        EXECUTE FUNCTION memmachine_feature_changed();

    CREATE FUNCTION memmachine_feature_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        ended BIGINT := GREATEST((extract(epoch FROM clock_timestamp()) * 1000000)::bigint,
            OLD.valid_from, OLD.created_at);
        kept BIGINT := memmachine_keep_feature_version(OLD, ended);
    BEGIN
        IF kept IS NOT NULL THEN
            INSERT INTO feature_versions (org_id, feature, feature_public_id, origin_id, project, set_ref,
                set_id, category, category_id, tag, feature_name, value, metadata, valid_from,
                valid_to, changed_by)
                SELECT org_id, feature, feature_public_id, origin_id, project, set_ref,
                    set_id, category, category_id, tag, feature_name, value, metadata,
                    valid_to, valid_to, 4
                FROM feature_versions WHERE org_id = OLD.org_id AND id = kept;
            PERFORM memmachine_trim_feature_versions(OLD.org_id, OLD.id);
        END IF;
        RETURN OLD;
    END $$;
    CREATE TRIGGER feature_versions_on_delete BEFORE DELETE ON semantic_features
        FOR EACH ROW EXECUTE FUNCTION memmachine_feature_deleted();
    "#,
    // Receipts of forgetting a subject (counts per project as JSON, never content),
    // and the episodes by producer and recipient, so a forget finds them by index.
    "CREATE TABLE forget_receipts (
        org_id TEXT NOT NULL,
        receipt_id TEXT NOT NULL,
        subject TEXT NOT NULL,
        completed_at BIGINT NOT NULL,
        projects TEXT NOT NULL,
        PRIMARY KEY (org_id, receipt_id)
    );
    CREATE INDEX episodes_by_producer ON episodes (org_id, project, producer_id);
    CREATE INDEX episodes_by_recipient ON episodes (org_id, project, produced_for_id);",
    // Idempotency keys: the client's key of a message and when it was stored, indexed
    // only where present (messages without one cost nothing), unique per project.
    "ALTER TABLE episodes ADD COLUMN idempotency_key TEXT;
    ALTER TABLE episodes ADD COLUMN idempotency_at BIGINT;
    CREATE UNIQUE INDEX episodes_by_idempotency_key ON episodes (org_id, project, idempotency_key)
        WHERE idempotency_key IS NOT NULL;",
    // The change feed clients follow (`MemoryFeed`; SQLite's migration of the same
    // name): an episode entry carries the episode's uid (it outlives the row), feature
    // entries (kinds 4 to 6) the feature's public id, summary entries (7) neither;
    // `episode` is 0 for both. Triggers log the features of a project's own sets and
    // its summary, so no write path can skip them; each entry takes the next id from
    // `last_change` (locking the project row, as every writer of the log does) and is
    // written only while the project row exists (its deletion logs nothing). A set's
    // features are logged before the set goes, as the cascade deletes them after.
    r#"
    ALTER TABLE episode_changes ADD COLUMN uid UUID;
    ALTER TABLE episode_changes ADD COLUMN feature TEXT;

    CREATE FUNCTION memmachine_log_change(org TEXT, p BIGINT, k SMALLINT, f TEXT)
        RETURNS void LANGUAGE plpgsql AS $$
    DECLARE
        n BIGINT;
    BEGIN
        UPDATE projects SET last_change = last_change + 1 WHERE org_id = org AND id = p
            RETURNING last_change INTO n;
        IF FOUND THEN
            INSERT INTO episode_changes (org_id, project, id, kind, episode, at, feature)
                VALUES (org, p, n, k, 0,
                    (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, f);
        END IF;
    END $$;

    CREATE FUNCTION memmachine_feed_feature() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        p BIGINT;
    BEGIN
        IF TG_OP = 'DELETE' THEN
            SELECT project INTO p FROM semantic_sets WHERE org_id = OLD.org_id AND id = OLD.set_ref;
            IF p IS NOT NULL THEN
                PERFORM memmachine_log_change(OLD.org_id, p, 6::smallint, OLD.public_id);
            END IF;
        ELSE
            SELECT project INTO p FROM semantic_sets WHERE org_id = NEW.org_id AND id = NEW.set_ref;
            IF p IS NOT NULL THEN
                PERFORM memmachine_log_change(NEW.org_id, p,
                    (CASE WHEN TG_OP = 'INSERT' THEN 4 ELSE 5 END)::smallint, NEW.public_id);
            END IF;
        END IF;
        RETURN NULL;
    END $$;
    CREATE TRIGGER feed_feature_added AFTER INSERT ON semantic_features
        FOR EACH ROW EXECUTE FUNCTION memmachine_feed_feature();
    CREATE TRIGGER feed_feature_updated
        AFTER UPDATE OF category, tag, feature, value, metadata ON semantic_features
        FOR EACH ROW WHEN (OLD.category IS DISTINCT FROM NEW.category
            OR OLD.tag IS DISTINCT FROM NEW.tag OR OLD.feature IS DISTINCT FROM NEW.feature
            OR OLD.value IS DISTINCT FROM NEW.value
            OR OLD.metadata IS DISTINCT FROM NEW.metadata)
        EXECUTE FUNCTION memmachine_feed_feature();
    CREATE TRIGGER feed_feature_deleted AFTER DELETE ON semantic_features
        FOR EACH ROW EXECUTE FUNCTION memmachine_feed_feature();

    CREATE FUNCTION memmachine_feed_set_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        n BIGINT;
        last BIGINT;
    BEGIN
        SELECT COUNT(*) INTO n FROM semantic_features
            WHERE org_id = OLD.org_id AND set_ref = OLD.id;
        IF n > 0 THEN
            UPDATE projects SET last_change = last_change + n
                WHERE org_id = OLD.org_id AND id = OLD.project
                RETURNING last_change INTO last;
            IF FOUND THEN
                INSERT INTO episode_changes (org_id, project, id, kind, episode, at, feature)
                    SELECT OLD.org_id, OLD.project, last - n + ROW_NUMBER() OVER (ORDER BY f.id),
                        6, 0, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint,
                        f.public_id
                    FROM semantic_features f WHERE f.org_id = OLD.org_id AND f.set_ref = OLD.id;
            END IF;
        END IF;
        RETURN OLD;
    END $$;
    CREATE TRIGGER feed_set_deleted BEFORE DELETE ON semantic_sets
        FOR EACH ROW WHEN (OLD.project IS NOT NULL)
        EXECUTE FUNCTION memmachine_feed_set_deleted();

    CREATE FUNCTION memmachine_feed_summary() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'DELETE' THEN
            PERFORM memmachine_log_change(OLD.org_id, OLD.project, 7::smallint, NULL);
        ELSE
            PERFORM memmachine_log_change(NEW.org_id, NEW.project, 7::smallint, NULL);
        END IF;
        RETURN NULL;
    END $$;
    CREATE TRIGGER feed_summary_written AFTER INSERT OR DELETE ON episode_summaries
        FOR EACH ROW EXECUTE FUNCTION memmachine_feed_summary();
    CREATE TRIGGER feed_summary_updated AFTER UPDATE ON episode_summaries
        FOR EACH ROW WHEN (OLD.text IS DISTINCT FROM NEW.text)
        EXECUTE FUNCTION memmachine_feed_summary();
    "#,
    // An episode's uid is unique in its project, not across its org: a uid taken in
    // another project must answer as a free one does, or it would tell that the id
    // exists elsewhere. The old constraint is found by its columns, whatever its name.
    r#"
    DO $$
    DECLARE
        old_name TEXT;
    BEGIN
        SELECT c.conname INTO old_name
            FROM pg_constraint c
            WHERE c.conrelid = 'episodes'::regclass AND c.contype = 'u'
              AND c.conkey = ARRAY[
                  (SELECT attnum FROM pg_attribute
                      WHERE attrelid = 'episodes'::regclass AND attname = 'org_id'),
                  (SELECT attnum FROM pg_attribute
                      WHERE attrelid = 'episodes'::regclass AND attname = 'uid')
              ]::smallint[];
        IF old_name IS NOT NULL THEN
            EXECUTE format('ALTER TABLE episodes DROP CONSTRAINT %I', old_name);
        END IF;
    END $$;
    ALTER TABLE episodes ADD CONSTRAINT episodes_project_uid_key UNIQUE (org_id, project, uid);
    "#,
    // Projects whose semantic extraction is paused (a row while paused): the queue's
    // claim skips their episodes' rows, so every replica agrees. A queued row names its
    // episode's project, so the claim's scan need not look up each row's episode.
    "CREATE TABLE extraction_pauses (
        org_id TEXT NOT NULL,
        project BIGINT NOT NULL,
        paused_at BIGINT NOT NULL,
        PRIMARY KEY (org_id, project),
        FOREIGN KEY (org_id, project) REFERENCES projects (org_id, id) ON DELETE CASCADE
    );
    ALTER TABLE semantic_queue ADD COLUMN project BIGINT;
    UPDATE semantic_queue q SET project = e.project
        FROM episodes e WHERE e.org_id = q.org_id AND e.id = q.episode;",
    // How hybrid ranking weighs its parts, per project: one JSON object (NULL, or a
    // field it lacks, takes the default), so that fields are added without a migration.
    // Text, as SQLite stores it; an update merges the fields it sets (as JSONB).
    "ALTER TABLE projects ADD COLUMN ranking_weights TEXT;",
    // 18: the database's identity, made once (index segments of replicas name it).
    "CREATE TABLE store_meta (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        store_id TEXT NOT NULL
    );
    INSERT INTO store_meta (id, store_id)
        VALUES (1, md5(random()::text || clock_timestamp()::text));",
];

/// Brings the database to the latest schema (creating the `vector` extension first)
/// and makes sure universal/universal exists.
pub(super) async fn migrate(pool: &PgPool) -> Result<()> {
    let mut tx = pool.begin().await.map_err(db_error)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    sqlx::query("CREATE EXTENSION IF NOT EXISTS vector")
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS memmachine_schema (
             version INTEGER PRIMARY KEY,
             applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
         )",
    )
    .execute(&mut *tx)
    .await
    .map_err(db_error)?;
    let version: i32 =
        sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM memmachine_schema")
            .fetch_one(&mut *tx)
            .await
            .map_err(db_error)?;
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tracing::info!(version = index + 1, "applying PostgreSQL schema migration");
        sqlx::raw_sql(sqlx::AssertSqlSafe(*sql))
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        sqlx::query("INSERT INTO memmachine_schema (version) VALUES ($1)")
            .bind(index as i32 + 1)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
    }
    let universal = memmachine_core::model::ProjectKey::universal();
    sqlx::query(
        "INSERT INTO projects (org_id, project_id, created_at) VALUES ($1, $2, $3)
         ON CONFLICT (org_id, project_id) DO NOTHING",
    )
    .bind(&universal.org_id)
    .bind(&universal.project_id)
    .bind(chrono::Utc::now().timestamp_micros())
    .execute(&mut *tx)
    .await
    .map_err(db_error)?;
    tx.commit().await.map_err(db_error)
}
