//! Imports: a stream of batches into one project, each stored exactly as `Memories::add`
//! stores it (atomically, under the same limits). The first batch names the project;
//! the first batch that fails stops the import and is reported with what was stored
//! before it, which stays stored.

use std::future::Future;

use crate::episodic::MessageInput;
use crate::error::{Error, Result};
use crate::memory::{Memories, MemoryKind};
use crate::model::{AddedEpisode, ProjectKey};

/// One batch as the transport decoded it.
#[derive(Debug, Clone, Default)]
pub struct ImportBatch {
    pub org_id: String,
    pub project_id: String,
    pub types: Vec<MemoryKind>,
    pub messages: Vec<MessageInput>,
}

/// Where the batches come from: the next one, an error standing for a batch that could
/// not be received or decoded, or `None` at the end of the stream. It is only asked for
/// the next batch while the current one is stored, so the source is read at the pace
/// of the store, one batch ahead at most.
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

impl Memories {
    /// Stores the batches of `source` in order, storing one while the next is received.
    /// `authorize` is given the first batch's org: its refusal fails the whole call
    /// (nothing is read further); every other failure ends the import in `first_error`.
    pub async fn import<S: BatchSource>(
        &self,
        source: &mut S,
        authorize: impl FnOnce(&str) -> Result<()>,
        stop: &dyn ImportStop,
    ) -> Result<Imported> {
        let mut imported = Imported::default();
        let mut pending = source.next_batch().await;
        if let Some(Ok(first)) = &pending {
            authorize(&first.org_id)?;
        }
        let mut key: Option<ProjectKey> = None;
        let mut index = 0u64;
        while let Some(received) = pending.take() {
            let checked = received.and_then(|batch| {
                let batch_key = batch_key(&mut key, &batch)?;
                Ok((batch_key, batch))
            });
            let (batch_key, batch) = match checked {
                Ok(checked) => checked,
                Err(err) => {
                    imported.first_error = Some((index, err));
                    break;
                }
            };
            if let Some(err) = stop.stop() {
                imported.first_error = Some((index, err));
                break;
            }
            let count = batch.messages.len() as u64;
            let (stored, next) = tokio::join!(
                self.add(&batch_key, &batch.types, batch.messages),
                source.next_batch()
            );
            match stored {
                Ok(uids) => {
                    imported.batches += 1;
                    imported.messages += count;
                    imported.duplicates += duplicates(&uids);
                }
                Err(err) => {
                    imported.first_error = Some((index, err));
                    break;
                }
            }
            pending = next;
            index += 1;
        }
        if let Some((batch, err)) = &imported.first_error {
            tracing::info!(batch, error = %err, stored = imported.batches, "import stopped");
        }
        Ok(imported)
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
