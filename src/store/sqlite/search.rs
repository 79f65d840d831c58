//! Lexical search: BM25 candidates from the project's in-memory index, then the episode
//! rows (and the filter) from SQLite, in rank order.

use std::collections::HashMap;
use std::rc::Rc;

use rusqlite::types::Value;
use rusqlite::{Connection, params_from_iter};

use super::connection::storage_error;
use super::episodes::{COLUMNS, from_row};
use super::filter_sql;
use super::lexical::LexicalIndexes;
use crate::error::Result;
use crate::model::filter::Expr;
use crate::model::{Episode, ScoredEpisode};

/// What a search found, or that the project's index must be loaded first.
pub(super) enum Outcome {
    Found(Vec<ScoredEpisode>),
    NeedsIndex,
}

/// Ranks the project's episodes for `terms` (already analysed), filtered before the cut
/// to `limit`. Candidates are fetched in growing rounds until `limit` pass the filter or
/// every match has been tried.
pub(super) fn search(
    conn: &Connection,
    indexes: &LexicalIndexes,
    project: i64,
    terms: &[String],
    filter: Option<&Expr>,
    limit: usize,
) -> Result<Outcome> {
    let Some(slot) = indexes.loaded(project) else {
        return Ok(Outcome::NeedsIndex);
    };
    let mut want = if filter.is_some() {
        (limit * 4).max(64)
    } else {
        limit
    };
    loop {
        let candidates = {
            let guard = slot.read().expect("index lock");
            guard
                .as_ref()
                .map(|index| index.search(terms, want))
                .unwrap_or_default()
        };
        let exhausted = candidates.len() < want;
        let mut rows = fetch(conn, project, &candidates, filter)?;
        let found: Vec<ScoredEpisode> = candidates
            .iter()
            .filter_map(|(id, score)| {
                rows.remove(id).map(|episode| ScoredEpisode {
                    episode,
                    score: f64::from(*score),
                })
            })
            .take(limit)
            .collect();
        if found.len() >= limit || exhausted {
            return Ok(Outcome::Found(found));
        }
        want = want.saturating_mul(8);
    }
}

/// The rows of `candidates` that are still stored and pass the filter, by row id.
fn fetch(
    conn: &Connection,
    project: i64,
    candidates: &[(i64, f32)],
    filter: Option<&Expr>,
) -> Result<HashMap<i64, Episode>> {
    if candidates.is_empty() {
        return Ok(HashMap::new());
    }
    let ids: Vec<Value> = candidates
        .iter()
        .map(|(id, _)| Value::Integer(*id))
        .collect();
    // CROSS JOIN keeps the candidate list as the outer loop: one row-id lookup each.
    let mut sql = format!(
        "SELECT e.id, {COLUMNS} FROM rarray(?) r CROSS JOIN episodes e ON e.id = r.value \
         WHERE e.project = ?"
    );
    let mut params = vec![Value::Integer(project)];
    if let Some(filter) = filter {
        sql.push_str(" AND ");
        filter_sql::compile(filter, &mut sql, &mut params);
    }
    let mut stmt = conn.prepare_cached(&sql).map_err(storage_error)?;
    let mut bound: Vec<Box<dyn rusqlite::ToSql>> = Vec::with_capacity(params.len() + 1);
    bound.push(Box::new(Rc::new(ids)));
    bound.extend(
        params
            .into_iter()
            .map(|p| Box::new(p) as Box<dyn rusqlite::ToSql>),
    );
    let rows = stmt
        .query_map(params_from_iter(bound.iter()), |row| {
            Ok((row.get::<_, i64>(0)?, from_row_offset(row)?))
        })
        .and_then(|rows| rows.collect::<rusqlite::Result<HashMap<_, _>>>())
        .map_err(storage_error)?;
    Ok(rows)
}

/// `from_row` for rows that start with the episode's row id.
fn from_row_offset(row: &rusqlite::Row<'_>) -> rusqlite::Result<Episode> {
    from_row(row, 1)
}
