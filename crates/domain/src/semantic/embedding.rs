//! The feature embedding worker: features added or changed are queued for a vector in
//! their own transaction; this worker embeds them in batches with the embedder named in
//! the queue and stores the vectors (claimed under a lease, so replicas share the work).
//! Until then a feature is found by its words. It stops when the store closes.

use std::collections::BTreeMap;
use std::time::Duration;

use super::SemanticMemory;
use crate::backoff::Backoff;
use crate::error::Error;
use crate::model::ProjectHandle;
use crate::store::PendingFeatureEmbedding;

const BATCH: usize = 64;
const POLL: Duration = Duration::from_millis(500);
/// After a failed batch: doubling from half a second to a minute (one worker, no jitter).
const BACKOFF: Backoff = Backoff {
    first: Duration::from_millis(500),
    max: Duration::from_secs(60),
    jitter: 0.0,
};

/// Counts an embedded batch as one `embedding` call per project (or org, for
/// org-level sets), tokens estimated from the texts, as the episodes' worker does.
async fn count(memory: &SemanticMemory, batch: &[PendingFeatureEmbedding]) {
    let mut chars: BTreeMap<(&str, Option<ProjectHandle>), usize> = BTreeMap::new();
    for p in batch {
        *chars.entry((p.org_id.as_str(), p.project)).or_insert(0) += p.text.chars().count();
    }
    for ((org_id, project), chars) in chars {
        memory
            .record_set_embedding(org_id, project, crate::llm::estimate_tokens(chars))
            .await;
    }
}

/// Starts the worker; it holds what it claims for `lease` (`--embedding-lease`, as the
/// episodes' workers do): a server killed mid-batch leaves the batch to the next one
/// (or a replica) once that has passed.
pub fn spawn(memory: SemanticMemory, lease: Duration) {
    if memory.embedders().all().is_empty() {
        return;
    }
    tokio::spawn(async move {
        let mut failures = 0u32;
        loop {
            let pending = match memory.store().claim_feature_embeddings(BATCH, lease).await {
                Ok(pending) => pending,
                Err(Error::Closed) => return,
                Err(err) => {
                    tracing::warn!(error = %err, "reading the feature embedding queue failed");
                    tokio::time::sleep(BACKOFF.delay(failures)).await;
                    continue;
                }
            };
            if pending.is_empty() {
                tokio::time::sleep(POLL).await;
                continue;
            }
            // One embedder at a time: the first's batch.
            let embedder_id = pending[0].embedder.clone();
            let (batch, others): (Vec<_>, Vec<_>) =
                pending.into_iter().partition(|p| p.embedder == embedder_id);
            if !others.is_empty() {
                let ids: Vec<_> = others.iter().map(|p| p.feature).collect();
                if let Err(err) = memory.store().release_feature_embeddings(&ids).await {
                    tracing::warn!(error = %err, "releasing feature leases failed");
                }
            }
            let Some(embedder) = memory
                .embedders()
                .all()
                .into_iter()
                .find(|e| e.id() == embedder_id)
            else {
                // An embedder this server no longer runs: its features stay lexical.
                let ids: Vec<_> = batch.iter().map(|p| p.feature).collect();
                if let Err(err) = memory.store().abandon_feature_embeddings(&ids).await {
                    tracing::warn!(error = %err, "dequeuing features failed");
                }
                continue;
            };
            let texts: Vec<String> = batch.iter().map(|p| p.text.clone()).collect();
            match embedder.embed(&texts).await {
                Ok(vectors) if vectors.len() == batch.len() => {
                    let rows = batch.iter().map(|p| p.feature).zip(vectors).collect();
                    match memory
                        .store()
                        .store_feature_embeddings(&embedder_id, rows)
                        .await
                    {
                        Ok(()) => {
                            failures = 0;
                            count(&memory, &batch).await;
                        }
                        Err(Error::Closed) => return,
                        Err(err) => tracing::warn!(error = %err, "storing feature vectors failed"),
                    }
                }
                Ok(_) | Err(_) => {
                    let ids: Vec<_> = batch.iter().map(|p| p.feature).collect();
                    if let Err(err) = memory.store().release_feature_embeddings(&ids).await {
                        tracing::warn!(error = %err, "releasing feature leases failed");
                    }
                    tracing::warn!(
                        embedder = %embedder_id,
                        retry_in_ms = BACKOFF.delay(failures).as_millis() as u64,
                        "embedding features failed; they stay queued"
                    );
                    tokio::time::sleep(BACKOFF.delay(failures)).await;
                    failures = failures.saturating_add(1);
                }
            }
        }
    });
}
