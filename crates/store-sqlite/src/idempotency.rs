//! Idempotency keys: a keyed message is looked up (on the episodes' partial index
//! over the key) before an add stores anything, in the add's transaction.

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, params};

use super::error::storage_error;
use memmachine_core::error::Result;
use memmachine_core::model::NewEpisode;

/// What to do with one message of a batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Resolution {
    Store,
    /// Its key is stored within the window: this episode answers for it.
    Stored {
        uid: uuid::Uuid,
        seq: i64,
    },
    /// An earlier message of the batch (this index) holds its key.
    Earlier(usize),
}

/// One resolution per episode. A key stored before its window is released here (the
/// old episode keeps its content, no longer the key), so the message is stored anew.
pub(super) fn resolve(
    conn: &Connection,
    project: i64,
    episodes: &[NewEpisode],
) -> Result<Vec<Resolution>> {
    let mut find = conn
        .prepare_cached(
            "SELECT id, uid, seq, idempotency_at FROM episodes
             WHERE project = ?1 AND idempotency_key = ?2",
        )
        .map_err(storage_error)?;
    let mut in_batch: HashMap<&str, usize> = HashMap::new();
    let mut resolved = Vec::with_capacity(episodes.len());
    for (index, episode) in episodes.iter().enumerate() {
        let Some(key) = &episode.idempotency else {
            resolved.push(Resolution::Store);
            continue;
        };
        if let Some(&first) = in_batch.get(key.key.as_str()) {
            resolved.push(Resolution::Earlier(first));
            continue;
        }
        in_batch.insert(&key.key, index);
        let found = find
            .query_row(params![project, key.key], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    uuid::Uuid::from_bytes(row.get(1)?),
                    row.get::<_, i64>(2)?,
                    row.get::<_, i64>(3)?,
                ))
            })
            .optional()
            .map_err(storage_error)?;
        match found {
            Some((_, uid, seq, at)) if at >= key.at_micros.saturating_sub(key.window_micros) => {
                resolved.push(Resolution::Stored { uid, seq });
            }
            Some((id, ..)) => {
                conn.prepare_cached(
                    "UPDATE episodes SET idempotency_key = NULL, idempotency_at = NULL
                     WHERE id = ?1",
                )
                .and_then(|mut stmt| stmt.execute([id]))
                .map_err(storage_error)?;
                resolved.push(Resolution::Store);
            }
            None => resolved.push(Resolution::Store),
        }
    }
    Ok(resolved)
}
