//! `LegacyStore` on PostgreSQL: v1 sessions and group configurations, by project.
//! Merges read the row `FOR UPDATE` and write the union back in one transaction, so
//! two contexts opening one session at once both land.

use async_trait::async_trait;
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::{PgConnection, Row};

use super::PostgresStore;
use super::error::db_error;
use super::helpers::now_micros;
use memmachine_core::access::ProjectAccess;
use memmachine_core::error::Result;
use memmachine_core::model::ProjectKey;
use memmachine_core::store::legacy::{
    GroupQuery, GroupRow, LegacyStore, SessionQuery, SessionRow, merged,
};

const SESSION_COLUMNS: &str = "p.org_id, p.project_id, s.session_id, s.agent_ids, s.user_ids, \
     s.configuration, s.created_at";
const GROUP_COLUMNS: &str = "p.org_id, p.project_id, COALESCE(g.agent_list, '{}'), \
     COALESCE(g.user_list, '{}'), COALESCE(g.configuration, '{}'::jsonb)";

fn session_from_row(row: &PgRow) -> sqlx::Result<SessionRow> {
    let configuration: Json<serde_json::Value> = row.try_get(5)?;
    Ok(SessionRow {
        key: ProjectKey {
            org_id: row.try_get(0)?,
            project_id: row.try_get(1)?,
        },
        session_id: row.try_get(2)?,
        agent_ids: row.try_get(3)?,
        user_ids: row.try_get(4)?,
        configuration: configuration.0,
        created_at_micros: row.try_get(6)?,
    })
}

fn group_from_row(row: &PgRow) -> sqlx::Result<GroupRow> {
    let configuration: Json<serde_json::Value> = row.try_get(4)?;
    Ok(GroupRow {
        key: ProjectKey {
            org_id: row.try_get(0)?,
            project_id: row.try_get(1)?,
        },
        agent_list: row.try_get(2)?,
        user_list: row.try_get(3)?,
        configuration: configuration.0,
    })
}

/// The project's internal id, locked against its deletion until the transaction ends.
async fn lock_project(conn: &mut PgConnection, key: &ProjectKey) -> Result<i64> {
    sqlx::query_scalar("SELECT id FROM projects WHERE org_id = $1 AND project_id = $2 FOR SHARE")
        .bind(&key.org_id)
        .bind(&key.project_id)
        .fetch_optional(conn)
        .await
        .map_err(db_error)?
        .ok_or_else(|| super::projects::not_found(key))
}

async fn find_session(
    conn: &mut PgConnection,
    key: &ProjectKey,
    session_id: &str,
    lock: bool,
) -> Result<Option<SessionRow>> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {SESSION_COLUMNS} FROM legacy_sessions s
         JOIN projects p ON p.org_id = s.org_id AND p.id = s.project
         WHERE p.org_id = $1 AND p.project_id = $2 AND s.session_id = $3{}",
        if lock { " FOR UPDATE OF s" } else { "" }
    )))
    .bind(&key.org_id)
    .bind(&key.project_id)
    .bind(session_id)
    .fetch_optional(conn)
    .await
    .map_err(db_error)?;
    row.as_ref()
        .map(session_from_row)
        .transpose()
        .map_err(db_error)
}

async fn find_group(
    conn: &mut PgConnection,
    key: &ProjectKey,
    lock: bool,
) -> Result<Option<GroupRow>> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        // Locking needs the row (an outer join's nullable side cannot be locked).
        "SELECT {GROUP_COLUMNS} FROM projects p
         {} legacy_groups g ON g.org_id = p.org_id AND g.project = p.id
         WHERE p.org_id = $1 AND p.project_id = $2{}",
        if lock { "JOIN" } else { "LEFT JOIN" },
        if lock { " FOR UPDATE OF g" } else { "" }
    )))
    .bind(&key.org_id)
    .bind(&key.project_id)
    .fetch_optional(conn)
    .await
    .map_err(db_error)?;
    row.as_ref()
        .map(group_from_row)
        .transpose()
        .map_err(db_error)
}

async fn write_group(conn: &mut PgConnection, project: i64, group: &GroupRow) -> Result<()> {
    sqlx::query(
        "INSERT INTO legacy_groups (org_id, project, agent_list, user_list, configuration)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (org_id, project) DO UPDATE SET agent_list = EXCLUDED.agent_list,
             user_list = EXCLUDED.user_list, configuration = EXCLUDED.configuration",
    )
    .bind(&group.key.org_id)
    .bind(project)
    .bind(&group.agent_list)
    .bind(&group.user_list)
    .bind(Json(&group.configuration))
    .execute(conn)
    .await
    .map_err(db_error)?;
    Ok(())
}

#[async_trait]
impl LegacyStore for PostgresStore {
    async fn open_legacy_session(
        &self,
        key: &ProjectAccess,
        session_id: &str,
        agents: &[String],
        users: &[String],
        configuration: Option<&serde_json::Value>,
    ) -> Result<SessionRow> {
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        let project = lock_project(&mut tx, key).await?;
        // Make sure both rows exist, then lock and merge them.
        sqlx::query(
            "INSERT INTO legacy_sessions
                 (org_id, project, session_id, agent_ids, user_ids, configuration, created_at)
             VALUES ($1, $2, $3, '{}', '{}', '{}'::jsonb, $4) ON CONFLICT DO NOTHING",
        )
        .bind(&key.org_id)
        .bind(project)
        .bind(session_id)
        .bind(now_micros())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        sqlx::query(
            "INSERT INTO legacy_groups (org_id, project, agent_list, user_list, configuration)
             VALUES ($1, $2, '{}', '{}', '{}'::jsonb) ON CONFLICT DO NOTHING",
        )
        .bind(&key.org_id)
        .bind(project)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        let current = find_session(&mut tx, key, session_id, true)
            .await?
            .ok_or_else(|| super::projects::not_found(key))?;
        let session = SessionRow {
            agent_ids: merged(&current.agent_ids, agents),
            user_ids: merged(&current.user_ids, users),
            configuration: configuration.cloned().unwrap_or(current.configuration),
            ..current
        };
        sqlx::query(
            "UPDATE legacy_sessions SET agent_ids = $4, user_ids = $5, configuration = $6
             WHERE org_id = $1 AND project = $2 AND session_id = $3",
        )
        .bind(&key.org_id)
        .bind(project)
        .bind(session_id)
        .bind(&session.agent_ids)
        .bind(&session.user_ids)
        .bind(Json(&session.configuration))
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        let group = find_group(&mut tx, key, true)
            .await?
            .ok_or_else(|| super::projects::not_found(key))?;
        let group = GroupRow {
            agent_list: merged(&group.agent_list, agents),
            user_list: merged(&group.user_list, users),
            ..group
        };
        write_group(&mut tx, project, &group).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(session)
    }

    async fn get_legacy_session(
        &self,
        key: &ProjectAccess,
        session_id: &str,
    ) -> Result<Option<SessionRow>> {
        let mut conn = self.pool().acquire().await.map_err(db_error)?;
        find_session(&mut conn, key, session_id, false).await
    }

    async fn list_legacy_sessions(
        &self,
        org_id: &str,
        query: &SessionQuery,
        limit: usize,
    ) -> Result<Vec<SessionRow>> {
        let (after_project, after_session) = query.after.clone().unwrap_or_default();
        // Ordered bytewise, as SQLite orders text.
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {SESSION_COLUMNS} FROM legacy_sessions s
             JOIN projects p ON p.org_id = s.org_id AND p.id = s.project
             WHERE s.org_id = $1 AND ($2::text IS NULL OR p.project_id = $2)
               AND ($3::text IS NULL OR $3 = ANY (s.user_ids))
               AND ($4::text IS NULL OR $4 = ANY (s.agent_ids))
               AND (p.project_id COLLATE \"C\", s.session_id COLLATE \"C\") > ($5, $6)
             ORDER BY p.project_id COLLATE \"C\", s.session_id COLLATE \"C\" LIMIT $7"
        )))
        .bind(org_id)
        .bind(&query.project_id)
        .bind(&query.user_id)
        .bind(&query.agent_id)
        .bind(after_project)
        .bind(after_session)
        .bind(limit as i64)
        .fetch_all(self.pool())
        .await
        .map_err(db_error)?;
        rows.iter()
            .map(session_from_row)
            .collect::<sqlx::Result<_>>()
            .map_err(db_error)
    }

    async fn delete_legacy_session(&self, key: &ProjectAccess, session_id: &str) -> Result<bool> {
        let deleted = sqlx::query(
            "DELETE FROM legacy_sessions s USING projects p
             WHERE p.org_id = $1 AND p.project_id = $2 AND s.org_id = p.org_id
               AND s.project = p.id AND s.session_id = $3",
        )
        .bind(&key.org_id)
        .bind(&key.project_id)
        .bind(session_id)
        .execute(self.pool())
        .await
        .map_err(db_error)?;
        Ok(deleted.rows_affected() > 0)
    }

    async fn put_legacy_group(&self, group: &GroupRow) -> Result<()> {
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        let project = lock_project(&mut tx, &group.key).await?;
        write_group(&mut tx, project, group).await?;
        tx.commit().await.map_err(db_error)
    }

    async fn get_legacy_group(&self, key: &ProjectAccess) -> Result<Option<GroupRow>> {
        let mut conn = self.pool().acquire().await.map_err(db_error)?;
        find_group(&mut conn, key, false).await
    }

    async fn list_legacy_groups(
        &self,
        org_id: &str,
        query: &GroupQuery,
        limit: usize,
    ) -> Result<Vec<GroupRow>> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {GROUP_COLUMNS} FROM projects p
             LEFT JOIN legacy_groups g ON g.org_id = p.org_id AND g.project = p.id
             WHERE p.org_id = $1 AND p.project_id COLLATE \"C\" > $2
               AND ($3::text IS NULL OR $3 = ANY (g.user_list))
               AND ($4::text IS NULL OR $4 = ANY (g.agent_list))
             ORDER BY p.project_id COLLATE \"C\" LIMIT $5"
        )))
        .bind(org_id)
        .bind(query.after.clone().unwrap_or_default())
        .bind(&query.user_id)
        .bind(&query.agent_id)
        .bind(limit as i64)
        .fetch_all(self.pool())
        .await
        .map_err(db_error)?;
        rows.iter()
            .map(group_from_row)
            .collect::<sqlx::Result<_>>()
            .map_err(db_error)
    }
}
