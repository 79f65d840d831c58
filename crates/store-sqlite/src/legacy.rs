//! `LegacyStore` on SQLite: v1 sessions and group configurations, by project.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::SqliteStore;
use super::error::storage_error;
use super::helpers::{bad_column, now_micros};
use memmachine_core::access::ProjectAccess;
use memmachine_core::error::Result;
use memmachine_core::model::ProjectKey;
use memmachine_core::store::legacy::{
    GroupQuery, GroupRow, LegacyStore, SessionQuery, SessionRow, merged,
};

const SESSION_COLUMNS: &str = "p.org_id, p.project_id, s.session_id, s.agent_ids, s.user_ids, \
     s.configuration, s.created_at";

fn json<T: serde::de::DeserializeOwned>(row: &Row<'_>, at: usize) -> rusqlite::Result<T> {
    let text: String = row.get(at)?;
    serde_json::from_str(&text).map_err(|err| bad_column(at, err))
}

fn session_from_row(row: &Row<'_>) -> rusqlite::Result<SessionRow> {
    Ok(SessionRow {
        key: ProjectKey {
            org_id: row.get(0)?,
            project_id: row.get(1)?,
        },
        session_id: row.get(2)?,
        agent_ids: json(row, 3)?,
        user_ids: json(row, 4)?,
        configuration: json(row, 5)?,
        created_at_micros: row.get(6)?,
    })
}

/// A group from `p.org_id, p.project_id, g.agent_list, g.user_list, g.configuration`
/// (the `g` columns NULL when none was stored).
fn group_from_row(row: &Row<'_>) -> rusqlite::Result<GroupRow> {
    let list = |at: usize| -> rusqlite::Result<Vec<String>> {
        let text: Option<String> = row.get(at)?;
        text.map_or(Ok(Vec::new()), |t| {
            serde_json::from_str(&t).map_err(|err| bad_column(at, err))
        })
    };
    let configuration: Option<String> = row.get(4)?;
    Ok(GroupRow {
        key: ProjectKey {
            org_id: row.get(0)?,
            project_id: row.get(1)?,
        },
        agent_list: list(2)?,
        user_list: list(3)?,
        configuration: match configuration {
            None => serde_json::json!({}),
            Some(t) => serde_json::from_str(&t).map_err(|err| bad_column(4, err))?,
        },
    })
}

fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).expect("JSON of strings and values")
}

fn find_session(
    conn: &Connection,
    key: &ProjectKey,
    session_id: &str,
) -> Result<Option<SessionRow>> {
    conn.prepare_cached(&format!(
        "SELECT {SESSION_COLUMNS} FROM legacy_sessions s JOIN projects p ON p.id = s.project
         WHERE p.org_id = ?1 AND p.project_id = ?2 AND s.session_id = ?3"
    ))
    .and_then(|mut stmt| {
        stmt.query_row(
            params![key.org_id, key.project_id, session_id],
            session_from_row,
        )
        .optional()
    })
    .map_err(storage_error)
}

fn find_group(conn: &Connection, key: &ProjectKey) -> Result<Option<GroupRow>> {
    conn.prepare_cached(
        "SELECT p.org_id, p.project_id, g.agent_list, g.user_list, g.configuration
         FROM projects p LEFT JOIN legacy_groups g ON g.project = p.id
         WHERE p.org_id = ?1 AND p.project_id = ?2",
    )
    .and_then(|mut stmt| {
        stmt.query_row(params![key.org_id, key.project_id], group_from_row)
            .optional()
    })
    .map_err(storage_error)
}

fn write_group(conn: &Connection, project: i64, group: &GroupRow) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO legacy_groups (project, agent_list, user_list, configuration)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (project) DO UPDATE SET agent_list = excluded.agent_list,
             user_list = excluded.user_list, configuration = excluded.configuration",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            project,
            to_json(&group.agent_list),
            to_json(&group.user_list),
            to_json(&group.configuration)
        ])
    })
    .map_err(storage_error)?;
    Ok(())
}

fn open_session(
    conn: &Connection,
    key: &ProjectKey,
    session_id: &str,
    agents: &[String],
    users: &[String],
    configuration: Option<&serde_json::Value>,
) -> Result<SessionRow> {
    // The writer thread runs one write at a time: read, merge and write are atomic.
    let project = super::projects::require(conn, key)?;
    let current = find_session(conn, key, session_id)?;
    let session = SessionRow {
        key: key.clone(),
        session_id: session_id.to_string(),
        agent_ids: merged(current.as_ref().map_or(&[], |s| &s.agent_ids), agents),
        user_ids: merged(current.as_ref().map_or(&[], |s| &s.user_ids), users),
        configuration: configuration
            .cloned()
            .or_else(|| current.as_ref().map(|s| s.configuration.clone()))
            .unwrap_or_else(|| serde_json::json!({})),
        created_at_micros: current
            .as_ref()
            .map_or_else(now_micros, |s| s.created_at_micros),
    };
    conn.prepare_cached(
        "INSERT INTO legacy_sessions
             (project, session_id, agent_ids, user_ids, configuration, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (project, session_id) DO UPDATE SET agent_ids = excluded.agent_ids,
             user_ids = excluded.user_ids, configuration = excluded.configuration",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            project,
            session_id,
            to_json(&session.agent_ids),
            to_json(&session.user_ids),
            to_json(&session.configuration),
            session.created_at_micros
        ])
    })
    .map_err(storage_error)?;
    let group = find_group(conn, key)?.ok_or_else(|| super::projects::not_found(key))?;
    let group = GroupRow {
        agent_list: merged(&group.agent_list, agents),
        user_list: merged(&group.user_list, users),
        ..group
    };
    write_group(conn, project, &group)?;
    Ok(session)
}

/// `EXISTS` over the JSON array column `column` holding parameter `param`.
fn holds(column: &str, param: &str) -> String {
    format!("({param} IS NULL OR EXISTS (SELECT 1 FROM json_each({column}) WHERE value = {param}))")
}

#[async_trait]
impl LegacyStore for SqliteStore {
    async fn open_legacy_session(
        &self,
        key: &ProjectAccess,
        session_id: &str,
        agents: &[String],
        users: &[String],
        configuration: Option<&serde_json::Value>,
    ) -> Result<SessionRow> {
        let (key, session_id) = (key.clone(), session_id.to_string());
        let (agents, users) = (agents.to_vec(), users.to_vec());
        let configuration = configuration.cloned();
        self.writer
            .write(move |conn| {
                open_session(
                    conn,
                    &key,
                    &session_id,
                    &agents,
                    &users,
                    configuration.as_ref(),
                )
            })
            .await
    }

    async fn get_legacy_session(
        &self,
        key: &ProjectAccess,
        session_id: &str,
    ) -> Result<Option<SessionRow>> {
        let (key, session_id) = (key.clone(), session_id.to_string());
        self.readers
            .read(move |tx| find_session(tx, &key, &session_id))
            .await
    }

    async fn list_legacy_sessions(
        &self,
        org_id: &str,
        query: &SessionQuery,
        limit: usize,
    ) -> Result<Vec<SessionRow>> {
        let (org_id, query) = (org_id.to_string(), query.clone());
        self.readers
            .read(move |tx| {
                let (after_project, after_session) = query.after.clone().unwrap_or_default();
                let sql = format!(
                    "SELECT {SESSION_COLUMNS} FROM legacy_sessions s JOIN projects p ON p.id = s.project
                     WHERE p.org_id = ?1 AND (?2 IS NULL OR p.project_id = ?2)
                       AND {} AND {}
                       AND (p.project_id, s.session_id) > (?5, ?6)
                     ORDER BY p.project_id, s.session_id LIMIT ?7",
                    holds("s.user_ids", "?3"),
                    holds("s.agent_ids", "?4"),
                );
                let mut stmt = tx.prepare_cached(&sql).map_err(storage_error)?;
                stmt.query_map(
                    params![
                        org_id,
                        query.project_id,
                        query.user_id,
                        query.agent_id,
                        after_project,
                        after_session,
                        limit as i64
                    ],
                    session_from_row,
                )
                .and_then(|rows| rows.collect())
                .map_err(storage_error)
            })
            .await
    }

    async fn delete_legacy_session(&self, key: &ProjectAccess, session_id: &str) -> Result<bool> {
        let (key, session_id) = (key.clone(), session_id.to_string());
        self.writer
            .write(move |conn| {
                let deleted = conn
                    .execute(
                        "DELETE FROM legacy_sessions WHERE session_id = ?3 AND project =
                             (SELECT id FROM projects WHERE org_id = ?1 AND project_id = ?2)",
                        params![key.org_id, key.project_id, session_id],
                    )
                    .map_err(storage_error)?;
                Ok(deleted > 0)
            })
            .await
    }

    async fn put_legacy_group(&self, group: &GroupRow) -> Result<()> {
        let group = group.clone();
        self.writer
            .write(move |conn| {
                let project = super::projects::require(conn, &group.key)?;
                write_group(conn, project, &group)
            })
            .await
    }

    async fn get_legacy_group(&self, key: &ProjectAccess) -> Result<Option<GroupRow>> {
        let key = key.clone();
        self.readers.read(move |tx| find_group(tx, &key)).await
    }

    async fn list_legacy_groups(
        &self,
        org_id: &str,
        query: &GroupQuery,
        limit: usize,
    ) -> Result<Vec<GroupRow>> {
        let (org_id, query) = (org_id.to_string(), query.clone());
        self.readers
            .read(move |tx| {
                let sql = format!(
                    "SELECT p.org_id, p.project_id, g.agent_list, g.user_list, g.configuration
                     FROM projects p LEFT JOIN legacy_groups g ON g.project = p.id
                     WHERE p.org_id = ?1 AND p.project_id > ?2 AND {} AND {}
                     ORDER BY p.project_id LIMIT ?5",
                    holds("coalesce(g.user_list, '[]')", "?3"),
                    holds("coalesce(g.agent_list, '[]')", "?4"),
                );
                let mut stmt = tx.prepare_cached(&sql).map_err(storage_error)?;
                stmt.query_map(
                    params![
                        org_id,
                        query.after.clone().unwrap_or_default(),
                        query.user_id,
                        query.agent_id,
                        limit as i64
                    ],
                    group_from_row,
                )
                .and_then(|rows| rows.collect())
                .map_err(storage_error)
            })
            .await
    }
}
