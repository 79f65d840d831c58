//! Idempotency keys: a keyed message is looked up (on the episodes' partial index
//! over the key) under the project's row lock, in the add's transaction, so two adds
//! racing with one key store it once.

use std::collections::HashMap;

use sqlx::{PgConnection, Row};

use super::error::db_error;
use super::projects;
use memmachine_core::error::Result;
use memmachine_core::model::{AddedEpisode, NewEpisode, ProjectKey};

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

/// One resolution per episode, under the project's row lock (held to commit). A key
/// stored before its window is released here (the old episode keeps its content, no
/// longer the key), so the message is stored anew.
pub(super) async fn resolve(
    tx: &mut PgConnection,
    key: &ProjectKey,
    episodes: &[NewEpisode],
) -> Result<Vec<Resolution>> {
    // The lock the add's UPDATE of next_seq takes, taken before the lookup: a racing
    // add with the same key waits here, then its lookup (a new snapshot) sees ours.
    let project: i64 = sqlx::query_scalar(
        "SELECT id FROM projects WHERE org_id = $1 AND project_id = $2 FOR NO KEY UPDATE",
    )
    .bind(&key.org_id)
    .bind(&key.project_id)
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_error)?
    .ok_or_else(|| projects::not_found(key))?;
    let keys: Vec<&str> = episodes
        .iter()
        .filter_map(|e| e.idempotency.as_ref().map(|i| i.key.as_str()))
        .collect();
    let rows = sqlx::query(
        "SELECT idempotency_key, id, uid, seq, idempotency_at FROM episodes
         WHERE org_id = $1 AND project = $2 AND idempotency_key = ANY($3)",
    )
    .bind(&key.org_id)
    .bind(project)
    .bind(&keys)
    .fetch_all(&mut *tx)
    .await
    .map_err(db_error)?;
    let mut found: HashMap<String, (i64, uuid::Uuid, i64, i64)> = HashMap::new();
    for row in &rows {
        found.insert(
            row.try_get(0).map_err(db_error)?,
            (
                row.try_get(1).map_err(db_error)?,
                row.try_get(2).map_err(db_error)?,
                row.try_get(3).map_err(db_error)?,
                row.try_get(4).map_err(db_error)?,
            ),
        );
    }
    let mut in_batch: HashMap<&str, usize> = HashMap::new();
    let mut released = Vec::new();
    let mut resolved = Vec::with_capacity(episodes.len());
    for (index, episode) in episodes.iter().enumerate() {
        let Some(idem) = &episode.idempotency else {
            resolved.push(Resolution::Store);
            continue;
        };
        if let Some(&first) = in_batch.get(idem.key.as_str()) {
            resolved.push(Resolution::Earlier(first));
            continue;
        }
        in_batch.insert(&idem.key, index);
        match found.get(&idem.key) {
            Some(&(_, uid, seq, at)) if at >= idem.at_micros.saturating_sub(idem.window_micros) => {
                resolved.push(Resolution::Stored { uid, seq });
            }
            Some(&(id, ..)) => {
                released.push(id);
                resolved.push(Resolution::Store);
            }
            None => resolved.push(Resolution::Store),
        }
    }
    if !released.is_empty() {
        sqlx::query(
            "UPDATE episodes SET idempotency_key = NULL, idempotency_at = NULL
             WHERE org_id = $1 AND id = ANY($2)",
        )
        .bind(&key.org_id)
        .bind(&released)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    }
    Ok(resolved)
}

/// The answer for each episode, given the sequence numbers of those stored, in order.
pub(super) fn answers(
    episodes: &[NewEpisode],
    resolved: &[Resolution],
    seqs: &[i64],
) -> Vec<AddedEpisode> {
    let mut answers: Vec<AddedEpisode> = Vec::with_capacity(episodes.len());
    let mut seqs = seqs.iter();
    for (episode, resolution) in episodes.iter().zip(resolved) {
        let answer = match *resolution {
            Resolution::Store => AddedEpisode {
                uid: episode.uid,
                sequence_num: seqs.next().copied().unwrap_or_default(),
                duplicate: false,
            },
            Resolution::Stored { uid, seq } => AddedEpisode {
                uid,
                sequence_num: seq,
                duplicate: true,
            },
            Resolution::Earlier(index) => AddedEpisode {
                duplicate: true,
                ..answers[index]
            },
        };
        answers.push(answer);
    }
    answers
}
