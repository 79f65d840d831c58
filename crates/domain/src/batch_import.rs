//! Imports: a stream of batches into one project, each stored exactly as `Memories::add`
//! stores it (atomically, under the same limits). The first batch names the project;
//! the first batch that fails stops the import and is reported with what was stored
//! before it, which stays stored.

use std::future::Future;

use crate::episodic::MessageInput;
use crate::error::{Error, Result};
use crate::memory::{Memories, MemoryKind};
use memmachine_core::access::OrgAccess;
use tokio::sync::mpsc;

use crate::model::{AddedEpisode, NewEpisode, ProjectKey};

/// One batch as the transport decoded it.
#[derive(Debug, Clone, Default)]
pub struct ImportBatch {
    pub org_id: String,
    pub project_id: String,
    pub types: Vec<MemoryKind>,
    pub messages: Vec<MessageInput>,
}

/// Where the batches come from: the next one, an error standing for a batch that could
/// not be received or decoded, or `None` at the end of the stream. It is asked for more
/// only while few batches wait to be stored, so the source is read at the pace of the
/// store.
pub trait BatchSource: Send {
    fn next_batch(&mut self) -> impl Future<Output = Option<Result<ImportBatch>>> + Send;
}

/// Why the import should stop before storing its next batch (the server drains).
pub trait ImportStop: Send + Sync {
    fn stop(&self) -> Option<Error>;
}

/// What an import stored, and the batch that stopped it.
#[derive(Debug, Default)]
pub struct Imported {
    pub batches: u64,
    /// Stored or found stored (duplicates included).
    pub messages: u64,
    pub duplicates: u64,
    /// The failing batch's position (from 0) and its error.
    pub first_error: Option<(u64, Error)>,
}

/// Batches received while a group is stored wait here; with the group under way, at
/// most this many plus one are held.
const WAITING: usize = 3;
/// The most messages stored in one transaction (several batches received together).
const GROUP_MESSAGES: usize = 4_000;

/// A batch received and checked, waiting to be stored.
struct Ready {
    index: u64,
    types: Vec<MemoryKind>,
    episodes: Vec<NewEpisode>,
}

impl Memories {
    /// Stores the batches of `source` in order. Batches that arrive while others are
    /// stored wait (a few at most, so the stream is read at the pace of the store) and
    /// are then stored together in one transaction: each batch stays atomic, and one
    /// commit serves several. `authorize` is given the first batch's org and project
    /// (every later batch must name the same): its refusal
    /// fails the whole call (nothing is read further); every other failure ends the
    /// import in `first_error` (a group that fails to store names its first batch).
    pub async fn import<S: BatchSource>(
        &self,
        source: &mut S,
        authorize: impl FnOnce(&str, &str) -> Result<OrgAccess>,
        stop: &dyn ImportStop,
    ) -> Result<Imported> {
        let first = source.next_batch().await;
        let mut org = None;
        if let Some(Ok(first)) = &first {
            org = Some(authorize(&first.org_id, &first.project_id)?);
        }
        let (tx, rx) = mpsc::channel(WAITING);
        let receive = async move {
            let mut received = first;
            while let Some(batch) = received.take() {
                let failed = batch.is_err();
                if tx.send(batch).await.is_err() || failed {
                    return;
                }
                received = tokio::select! {
                    next = source.next_batch() => next,
                    // The writer has stopped: nothing more is read.
                    () = tx.closed() => return,
                };
            }
        };
        let (imported, ()) = tokio::join!(self.store_batches(org, rx, stop), receive);
        if let Some((batch, err)) = &imported.first_error {
            tracing::info!(batch, error = %err, stored = imported.batches, "import stopped");
        }
        Ok(imported)
    }

    /// Takes the received batches off `rx`, checks each, and stores those waiting
    /// together, until the stream ends or a batch fails.
    async fn store_batches(
        &self,
        org: Option<OrgAccess>,
        mut rx: mpsc::Receiver<Result<ImportBatch>>,
        stop: &dyn ImportStop,
    ) -> Imported {
        let mut imported = Imported::default();
        let mut key: Option<ProjectKey> = None;
        let mut index = 0u64;
        let mut carried: Option<Ready> = None;
        let mut ended = false;
        loop {
            let mut group: Vec<Ready> = carried.take().into_iter().collect();
            let mut failed = None;
            let mut waited = group.is_empty();
            loop {
                let size: usize = group.iter().map(|r| r.episodes.len()).sum();
                if size >= GROUP_MESSAGES {
                    break;
                }
                let received = if waited {
                    waited = false;
                    rx.recv().await
                } else {
                    match rx.try_recv() {
                        Ok(received) => Some(received),
                        Err(_) => break,
                    }
                };
                let Some(received) = received else {
                    ended = true;
                    break;
                };
                let checked = received.and_then(|batch| {
                    let batch_key = batch_key(&mut key, &batch)?;
                    Ok((batch_key, batch.types, self.prepare(batch.messages)?))
                });
                let ready = match checked {
                    Ok((_, types, episodes)) => Ready {
                        index,
                        types,
                        episodes,
                    },
                    Err(err) => {
                        failed = Some((index, err));
                        break;
                    }
                };
                index += 1;
                // Batches asking for other memory types are stored apart.
                if group.first().is_some_and(|g| g.types != ready.types) {
                    carried = Some(ready);
                    break;
                }
                group.push(ready);
            }
            if let Some(first) = group.first() {
                if let Some(err) = stop.stop() {
                    imported.first_error = Some((first.index, err));
                    return imported;
                }
                // The first batch named the project and was authorised.
                let key = key.clone().expect("a batch was checked");
                let access = match org.as_ref().map(|org| org.project_key(key)) {
                    Some(Ok(access)) => access,
                    Some(Err(err)) => {
                        imported.first_error = Some((first.index, err));
                        return imported;
                    }
                    None => {
                        let err = Error::Internal("an import batch was not authorised".into());
                        imported.first_error = Some((first.index, err));
                        return imported;
                    }
                };
                let first_index = first.index;
                let types = first.types.clone();
                let batches = group.len() as u64;
                let episodes: Vec<NewEpisode> =
                    group.into_iter().flat_map(|r| r.episodes).collect();
                let count = episodes.len() as u64;
                match self.add_prepared(&access, &types, episodes).await {
                    Ok(added) => {
                        imported.batches += batches;
                        imported.messages += count;
                        imported.duplicates += duplicates(&added);
                    }
                    Err(err) => {
                        imported.first_error = Some((first_index, err));
                        return imported;
                    }
                }
            }
            if failed.is_some() {
                imported.first_error = failed;
                return imported;
            }
            if ended && carried.is_none() {
                return imported;
            }
        }
    }
}

/// How many messages of a stored batch were already stored (their idempotency key
/// seen before): the one place the add result is counted from.
fn duplicates(added: &[AddedEpisode]) -> u64 {
    added.iter().filter(|a| a.duplicate).count() as u64
}

/// The project of a batch: the first batch's names it; later ones leave it empty or
/// repeat it.
fn batch_key(key: &mut Option<ProjectKey>, batch: &ImportBatch) -> Result<ProjectKey> {
    match key {
        None => {
            let parsed = ProjectKey::parse(&batch.org_id, &batch.project_id)?;
            *key = Some(parsed.clone());
            Ok(parsed)
        }
        Some(key) => {
            let unnamed = batch.org_id.is_empty() && batch.project_id.is_empty();
            if unnamed
                || matches!(ProjectKey::parse(&batch.org_id, &batch.project_id), Ok(k) if k == *key)
            {
                return Ok(key.clone());
            }
            Err(Error::invalid(
                "project_id",
                format!(
                    "{}/{} is not this import's project ({key}): later batches leave \
                     org_id and project_id empty or repeat them",
                    batch.org_id, batch.project_id
                ),
            ))
        }
    }
}
