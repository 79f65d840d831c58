//! Lexical search: BM25 over the project's own FTS5 index.

use rusqlite::types::Value;
use rusqlite::{Connection, params_from_iter};

use super::connection::storage_error;
use super::episodes::{COLUMNS, from_row};
use super::filter_sql;
use super::projects::{self, fts_table};
use crate::error::Result;
use crate::model::filter::Expr;
use crate::model::{ProjectKey, ScoredEpisode};
use crate::store::lexical::match_query;

pub(super) fn search(
    conn: &Connection,
    key: &ProjectKey,
    query: &str,
    filter: Option<&Expr>,
    limit: usize,
) -> Result<Vec<ScoredEpisode>> {
    let project = projects::require(conn, key)?;
    let Some(fts_query) = match_query(query) else {
        return Ok(Vec::new());
    };
    let fts = fts_table(project);
    let mut params = vec![Value::Text(fts_query)];
    // Without a filter FTS5 ranks and cuts on its own; with one, the filter applies to
    // every match before the cut.
    let sql = match filter {
        None => format!(
            "SELECT {COLUMNS}, -f.rank FROM (SELECT rowid, rank FROM {fts} WHERE {fts} MATCH ? \
             ORDER BY rank LIMIT ?) f JOIN episodes e ON e.id = f.rowid ORDER BY f.rank"
        ),
        Some(filter) => {
            let mut sql = format!(
                "SELECT {COLUMNS}, -{fts}.rank FROM {fts} JOIN episodes e ON e.id = {fts}.rowid \
                 WHERE {fts} MATCH ? AND "
            );
            filter_sql::compile(filter, &mut sql, &mut params);
            sql.push_str(&format!(" ORDER BY {fts}.rank LIMIT ?"));
            sql
        }
    };
    params.push(Value::Integer(limit as i64));
    let mut stmt = conn.prepare_cached(&sql).map_err(storage_error)?;
    stmt.query_map(params_from_iter(params), |row| {
        Ok(ScoredEpisode {
            episode: from_row(row)?,
            score: row.get(10)?,
        })
    })
    .and_then(|rows| rows.collect())
    .map_err(storage_error)
}
