//! Reads served by a project's in-memory index (BM25 ranking, and the filtered walk back
//! through recent episodes), with the winning episodes then read from SQLite.

use std::collections::HashMap;
use std::rc::Rc;

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params};

use super::connection::storage_error;
use super::episodes::{COLUMNS, from_row};
use super::project_index::{Entry, ProjectIndex};
use crate::error::Result;
use crate::model::filter::Expr;
use crate::model::filter_eval::matches;
use crate::model::{Episode, ScoredEpisode};
use crate::retrieval::ann::ANN_MIN_VECTORS;

/// Whether an index entry passes the optional filter.
fn passes(filter: Option<&Expr>) -> impl Fn(&Entry) -> bool + '_ {
    move |entry| filter.is_none_or(|filter| matches(filter, entry))
}

/// Ranks the project's episodes for `terms` (already analysed), filtering before the
/// cut to `limit`.
pub(super) fn search(
    conn: &Connection,
    index: &ProjectIndex,
    project: i64,
    terms: &[String],
    filter: Option<&Expr>,
    limit: usize,
) -> Result<Vec<ScoredEpisode>> {
    if terms.is_empty() {
        return Ok(Vec::new());
    }
    let hits = index.text.search(terms, limit, passes(filter));
    scored(conn, project, &hits)
}

/// Documents the vector graph proposes to hybrid ranking of a large project, at least.
const GRAPH_CANDIDATES: usize = 64;
/// Episodes sampled to judge how selective a filter is.
const FILTER_SAMPLE: usize = 512;

/// The `limit` episodes whose vectors are most similar to `query`, filtered first.
pub(super) fn dense(
    conn: &Connection,
    index: &ProjectIndex,
    project: i64,
    query: &[f32],
    filter: Option<&Expr>,
    limit: usize,
) -> Result<Vec<ScoredEpisode>> {
    let accept = passes(filter);
    let graph = if few_pass(index, filter, &accept) {
        None
    } else {
        nearest(index, query, limit, limit, &accept)
    };
    let hits = match graph {
        Some(hits) => hits,
        None => {
            let candidates = index.text.live().filter_map(|(id, entry)| {
                let vector = entry.vector.as_deref()?;
                accept(entry).then_some((id, vector))
            });
            crate::retrieval::dense::top_k(candidates, query, limit)
        }
    };
    scored(conn, project, &hits)
}

/// Whether the filter is selective enough to rank every episode it passes exactly
/// (cheaper than walking the graph past the many it rejects); a broad filter, in a large
/// project, is served by the graph.
fn few_pass(index: &ProjectIndex, filter: Option<&Expr>, accept: &impl Fn(&Entry) -> bool) -> bool {
    // Without a graph there is nothing to choose (and no sample to pay for).
    index.ann.is_some()
        && filter.is_some()
        && index.text.estimate_accepted(FILTER_SAMPLE, accept) <= ANN_MIN_VECTORS
}

/// Up to `want` nearest accepted episodes by the project's vector graph; `None` when
/// it has no graph, or the graph found fewer than `needed` (a selective filter: the
/// exact scan then answers).
fn nearest(
    index: &ProjectIndex,
    query: &[f32],
    want: usize,
    needed: usize,
    accept: &impl Fn(&Entry) -> bool,
) -> Option<Vec<(i64, f32)>> {
    let ann = index.ann.as_ref()?;
    let accepted = |id: i64| index.text.payload(id).is_some_and(accept);
    match ann.search(query, want, accepted) {
        Ok(hits) if hits.len() >= needed => Some(hits),
        Ok(_) => None,
        Err(err) => {
            tracing::warn!(error = %err, "vector graph search failed; scanning");
            None
        }
    }
}

/// Hybrid ranking (BM25 fused with vector similarity), filtered before the cut.
pub(super) fn hybrid(
    conn: &Connection,
    index: &ProjectIndex,
    project: i64,
    terms: &[String],
    query: &[f32],
    filter: Option<&Expr>,
    limit: usize,
) -> Result<Vec<ScoredEpisode>> {
    let accept = passes(filter);
    let similarity = |entry: &Entry| {
        let vector = entry.vector.as_deref()?;
        (vector.len() == query.len()).then(|| crate::retrieval::dense::dot(vector, query))
    };
    let proposed = if few_pass(index, filter, &accept) {
        None
    } else {
        nearest(
            index,
            query,
            GRAPH_CANDIDATES.max(limit * 4),
            limit,
            &accept,
        )
        .map(|hits| hits.into_iter().map(|(id, _)| id).collect::<Vec<i64>>())
    };
    let hits = index
        .text
        .search_hybrid(terms, similarity, limit, &accept, proposed.as_deref());
    scored(conn, project, &hits)
}

/// For each uid (an episode of this project), the episode with up to `before` and
/// `after` neighbours passing `filter`, oldest first; an unknown uid gets none.
pub(super) fn contexts(
    conn: &Connection,
    index: &ProjectIndex,
    project: i64,
    uids: &[uuid::Uuid],
    before: usize,
    after: usize,
    filter: Option<&Expr>,
) -> Result<Vec<Vec<Episode>>> {
    let mut stmt = conn
        .prepare_cached("SELECT id FROM episodes WHERE project = ?1 AND uid = ?2")
        .map_err(storage_error)?;
    let mut windows = Vec::with_capacity(uids.len());
    for uid in uids {
        let id: Option<i64> = stmt
            .query_row(params![project, uid.as_bytes()], |row| row.get(0))
            .optional()
            .map_err(storage_error)?;
        let ids = id.map_or_else(Vec::new, |id| {
            index.text.neighbours(id, before, after, passes(filter))
        });
        windows.push(ids);
    }
    let rows = fetch(conn, project, windows.iter().flatten().copied())?;
    Ok(windows
        .iter()
        .map(|ids| ids.iter().filter_map(|id| rows.get(id).cloned()).collect())
        .collect())
}

/// The rows of `hits` in their order, with their scores.
fn scored(conn: &Connection, project: i64, hits: &[(i64, f32)]) -> Result<Vec<ScoredEpisode>> {
    let mut rows = fetch(conn, project, hits.iter().map(|(id, _)| *id))?;
    // A hit deleted since it was ranked is simply left out.
    Ok(hits
        .iter()
        .filter_map(|(id, score)| {
            rows.remove(id).map(|episode| ScoredEpisode {
                episode,
                score: f64::from(*score),
            })
        })
        .collect())
}

/// The `limit` most recent episodes passing `filter`, oldest first.
pub(super) fn recent(
    conn: &Connection,
    index: &ProjectIndex,
    project: i64,
    filter: &Expr,
    limit: usize,
) -> Result<Vec<Episode>> {
    let mut ids = index.text.newest(limit, |fields| matches(filter, fields));
    ids.reverse();
    let mut rows = fetch(conn, project, ids.iter().copied())?;
    Ok(ids.iter().filter_map(|id| rows.remove(id)).collect())
}

/// The stored rows with these ids, by row id.
fn fetch(
    conn: &Connection,
    project: i64,
    ids: impl Iterator<Item = i64>,
) -> Result<HashMap<i64, Episode>> {
    let ids: Vec<Value> = ids.map(Value::Integer).collect();
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
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
