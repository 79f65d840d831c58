//! Lexical search: BM25 over the project's in-memory index, filtered there before the
//! cut to `limit`, then the winning episodes read from SQLite in rank order.

use std::collections::HashMap;
use std::rc::Rc;

use rusqlite::types::Value;
use rusqlite::{Connection, params};

use super::connection::storage_error;
use super::episodes::{COLUMNS, from_row};
use super::lexical::LexicalIndexes;
use crate::error::Result;
use crate::model::filter::Expr;
use crate::model::filter_eval::matches;
use crate::model::{Episode, ScoredEpisode};

/// What a search found, or that the project's index must be loaded first.
pub(super) enum Outcome {
    Found(Vec<ScoredEpisode>),
    NeedsIndex,
}

/// Ranks the project's episodes for `terms` (already analysed).
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
    let hits = {
        let guard = slot.read().expect("index lock");
        guard
            .as_ref()
            .map(|index| {
                index.search(terms, limit, |fields| {
                    filter.is_none_or(|filter| matches(filter, fields))
                })
            })
            .unwrap_or_default()
    };
    let mut rows = fetch(conn, project, &hits)?;
    // A hit deleted since it was ranked is simply left out.
    Ok(Outcome::Found(
        hits.iter()
            .filter_map(|(id, score)| {
                rows.remove(id).map(|episode| ScoredEpisode {
                    episode,
                    score: f64::from(*score),
                })
            })
            .collect(),
    ))
}

/// The stored rows of `hits`, by row id.
fn fetch(conn: &Connection, project: i64, hits: &[(i64, f32)]) -> Result<HashMap<i64, Episode>> {
    if hits.is_empty() {
        return Ok(HashMap::new());
    }
    let ids: Vec<Value> = hits.iter().map(|(id, _)| Value::Integer(*id)).collect();
    // CROSS JOIN keeps the id list as the outer loop: one row-id lookup each.
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT e.id, {COLUMNS} FROM rarray(?1) r CROSS JOIN episodes e ON e.id = r.value \
             WHERE e.project = ?2"
        ))
        .map_err(storage_error)?;
    stmt.query_map(params![Rc::new(ids), project], |row| {
        Ok((row.get::<_, i64>(0)?, from_row(row, 1)?))
    })
    .and_then(|rows| rows.collect())
    .map_err(storage_error)
}
