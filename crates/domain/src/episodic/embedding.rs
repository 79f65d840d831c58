//! The embedding workers, one per embedder: each claims its episodes off the store's
//! durable queue under a lease (so replicas never embed the same batch), embeds them in
//! batches and stores their vectors, so an embedder that
//! is down or slow holds up only its own projects. Failures never lose an episode: it
//! stays queued and is retried with backoff (a crash before embedding leaves it queued
//! for the restart). The one exception is a text the embedder refuses while it embeds
//! others (one too long for the model, say): it is set aside without a vector, logged,
//! instead of blocking the queue behind it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::backoff::Backoff;
use crate::embed::{EmbedError, Embedder, Embedders};
use crate::metrics::Metrics;
use crate::model::EpisodeHandle;
use crate::store::{PendingEmbedding, Store};

/// Episodes embedded per call to the embedder.
const BATCH: usize = 64;
/// After a failed batch: doubling from half a second to a minute (one worker, no jitter).
const BACKOFF: Backoff = Backoff {
    first: Duration::from_millis(500),
    max: Duration::from_secs(60),
    jitter: 0.0,
};
/// Embedded to tell an embedder that is broken from a text it refuses.
const PROBE: &str = "memmachine embedder check";

/// Wakes an embedder's worker when episodes are queued for it.
#[derive(Clone, Default)]
pub struct EmbeddingQueue {
    /// By embedder id.
    wake: Arc<Mutex<HashMap<String, watch::Sender<u64>>>>,
}

impl EmbeddingQueue {
    /// Episodes were queued for the embedder `id`.
    pub fn notify(&self, id: &str) {
        let wake = self
            .wake
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(sender) = wake.get(id) {
            sender.send_modify(|version| *version = version.wrapping_add(1));
        }
    }

    fn subscribe(&self, id: &str) -> watch::Receiver<u64> {
        let mut wake = self
            .wake
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        wake.entry(id.to_string())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }
}

/// The text embedded for an episode: who said it, then what was said ("Caroline: I
/// went to a support group"), as BM25 indexes the speaker too. Questions name people,
/// and a vector that carries the speaker matches them (metadata-enriched document
/// embedding; on LoCoMo it lifts hybrid recall@10 by 2 points, see BENCHMARKS.md).
pub fn embedding_text(producer: &str, content: &str) -> String {
    if producer.is_empty() {
        content.to_string()
    } else {
        format!("{producer}: {content}")
    }
}

/// Makes the store's queue match which embedder each project uses now (after a change
/// of embedder, or episodes added while there was none). Returns how many episodes wait.
pub async fn queue_missing(store: &dyn Store, embedders: &Embedders) -> crate::error::Result<u64> {
    const PAGE: usize = 500;
    let mut after = None;
    loop {
        let projects = store.list_projects(None, after.as_ref(), PAGE).await?;
        let choice = projects
            .iter()
            .map(|p| {
                let embedder = embedders.for_project(&p.config.embedder);
                (p.key.clone(), embedder.map(|e| e.id().to_string()))
            })
            .collect();
        let waiting = store.queue_missing(choice).await?;
        match projects.last() {
            Some(last) if projects.len() == PAGE => after = Some(last.key.clone()),
            _ => return Ok(waiting),
        }
    }
}

/// Starts one worker per embedder the server offers; each runs until `queue` and all its
/// clones are dropped. A worker holds what it claims for `lease`: a replica that dies
/// mid-batch leaves the batch to another once that has passed.
pub fn spawn_workers(
    store: Arc<dyn Store>,
    embedders: &Embedders,
    queue: &EmbeddingQueue,
    metrics: Arc<Metrics>,
    lease: Duration,
) {
    spawn_counted_workers(store, embedders, queue, metrics, lease, None)
}

/// As [`spawn_workers`], with `usage` counting each batch's embedding per project.
pub fn spawn_counted_workers(
    store: Arc<dyn Store>,
    embedders: &Embedders,
    queue: &EmbeddingQueue,
    metrics: Arc<Metrics>,
    lease: Duration,
    usage: Option<crate::usage::Usage>,
) {
    for embedder in embedders.all() {
        let worker = Worker {
            store: store.clone(),
            embedder,
            metrics: metrics.clone(),
            lease,
            usage: usage.clone(),
        };
        let wake = queue.subscribe(worker.embedder.id());
        tokio::spawn(worker.run(wake));
    }
}

/// Embeds the episodes queued for one embedder.
struct Worker {
    store: Arc<dyn Store>,
    embedder: Arc<dyn Embedder>,
    metrics: Arc<Metrics>,
    lease: Duration,
    usage: Option<crate::usage::Usage>,
}

impl Worker {
    async fn run(self, mut wake: watch::Receiver<u64>) {
        let (store, embedder) = (&self.store, &self.embedder);
        let mut failures = 0u32;
        let mut embedded: u64 = 0;
        loop {
            // The server that queues episodes is gone: so is the work.
            if wake.has_changed().is_err() {
                return;
            }
            // Marked seen before looking, so an episode queued meanwhile wakes us.
            wake.borrow_and_update();
            let pending = match store
                .claim_embeddings(embedder.id(), BATCH, self.lease)
                .await
            {
                Ok(pending) => pending,
                Err(crate::error::Error::Closed) => return,
                Err(err) => {
                    tracing::warn!(error = %err, "reading the embedding queue failed");
                    tokio::time::sleep(BACKOFF.first).await;
                    continue;
                }
            };
            if pending.is_empty() {
                if embedded > 0 {
                    tracing::info!(
                        embedder = embedder.id(),
                        embedded,
                        "embedding queue drained"
                    );
                    embedded = 0;
                }
                // The timeout covers anything queued behind our back (by another
                // replica, or left by one that died).
                if let Ok(Err(_)) =
                    tokio::time::timeout(Duration::from_secs(5), wake.changed()).await
                {
                    return;
                }
                continue;
            }
            let batch: Vec<&PendingEmbedding> = pending.iter().collect();
            match self.embed(&batch).await {
                Ok(count) => {
                    embedded += count;
                    failures = 0;
                }
                Err(err) => {
                    // The episodes stay queued (and searchable lexically) until this works;
                    // freed, so that another replica may try meanwhile.
                    let episodes: Vec<_> = pending.iter().map(|p| p.episode).collect();
                    if let Err(err) = store.release_embeddings(&episodes).await {
                        tracing::warn!(error = %err, "releasing embedding leases failed");
                    }
                    tracing::warn!(
                        error = %err,
                        embedder = embedder.id(),
                        retry_in_ms = BACKOFF.delay(failures).as_millis() as u64,
                        "embedding failed"
                    );
                    tokio::time::sleep(BACKOFF.delay(failures)).await;
                    failures = failures.saturating_add(1);
                }
            }
        }
    }

    /// Counts an embedded batch as one call per project, tokens estimated from its
    /// texts. (A batch embedded around a refusal is not counted: that is rare, and its
    /// calls are many small ones.)
    async fn count(&self, batch: &[&PendingEmbedding]) {
        let Some(usage) = &self.usage else {
            return;
        };
        let mut chars = std::collections::BTreeMap::new();
        for p in batch {
            *chars.entry(p.project).or_insert(0usize) +=
                embedding_text(&p.producer_id, &p.content).chars().count();
        }
        for (project, chars) in chars {
            usage
                .record_project_embedding(project, crate::llm::estimate_tokens(chars))
                .await;
        }
    }

    /// Embeds `batch` and stores the vectors; returns how many were stored. An error means
    /// the embedder (or the store) failed as a whole: the episodes stay queued.
    async fn embed(&self, batch: &[&PendingEmbedding]) -> Result<u64, String> {
        let (store, embedder) = (self.store.as_ref(), self.embedder.as_ref());
        let err = match embed_batch(embedder, batch).await {
            Ok(vectors) => {
                self.count(batch).await;
                let rows = batch.iter().map(|p| p.episode).zip(vectors).collect();
                return store_vectors(store, embedder, rows).await;
            }
            Err(err) => err,
        };
        if matches!(err, EmbedError::Unavailable(_)) || !works(embedder).await {
            return Err(err.to_string());
        }
        // The embedder works but refuses something in this batch: find what.
        let (vectors, refused, unavailable) = embed_around_refusals(embedder, batch).await;
        let stored = store_vectors(store, embedder, vectors).await?;
        if let Some(err) = unavailable {
            return Err(err.to_string());
        }
        if refused.is_empty() {
            return Ok(stored);
        }
        // Still working (if it embedded none of the batch, ask it again)?
        if stored == 0 && !works(embedder).await {
            return Err("the embedder stopped working".into());
        }
        for (pending, err) in &refused {
            tracing::warn!(
                error = %err,
                embedder = embedder.id(),
                episode = %pending.episode,
                "the embedder refuses this episode's text; it stays without a vector \
                 (lexical search still finds it)"
            );
        }
        let episodes: Vec<_> = refused.iter().map(|(p, _)| p.episode).collect();
        store
            .abandon_embeddings(&episodes)
            .await
            .map_err(|err| format!("dequeuing refused episodes: {err}"))?;
        self.metrics.record_refused(embedder.id(), refused.len());
        Ok(stored)
    }
}

async fn store_vectors(
    store: &dyn Store,
    embedder: &dyn Embedder,
    rows: Vec<(EpisodeHandle, Vec<f32>)>,
) -> Result<u64, String> {
    if rows.is_empty() {
        return Ok(0);
    }
    let count = rows.len() as u64;
    store
        .store_embeddings(embedder.id(), rows)
        .await
        .map_err(|err| format!("storing vectors: {err}"))?;
    Ok(count)
}

/// Whether the embedder embeds a short plain text: tells an embedder that is broken
/// from a text it refuses.
async fn works(embedder: &dyn Embedder) -> bool {
    embed_texts(embedder, &[PROBE.to_string()]).await.is_ok()
}

/// What embedding a batch gave: vectors by episode; the episodes whose text the
/// embedder refused (alone), with why; and why it stopped, if it became unavailable
/// (the episodes not embedded stay queued).
type Outcome<'a> = (
    Vec<(EpisodeHandle, Vec<f32>)>,
    Vec<(&'a PendingEmbedding, EmbedError)>,
    Option<EmbedError>,
);

/// Embeds `batch` with an embedder that works, halving any part it refuses until the
/// refused episodes stand alone (about a dozen calls for one bad text among 64).
async fn embed_around_refusals<'a>(
    embedder: &dyn Embedder,
    batch: &[&'a PendingEmbedding],
) -> Outcome<'a> {
    let (mut vectors, mut refused) = (Vec::new(), Vec::new());
    let mut parts = vec![batch.to_vec()];
    while let Some(part) = parts.pop() {
        match embed_batch(embedder, &part).await {
            Ok(made) => vectors.extend(part.iter().map(|p| p.episode).zip(made)),
            Err(err @ EmbedError::Unavailable(_)) => return (vectors, refused, Some(err)),
            Err(err) if part.len() == 1 => refused.push((part[0], err)),
            Err(_) => {
                let (left, right) = part.split_at(part.len() / 2);
                parts.push(right.to_vec());
                parts.push(left.to_vec());
            }
        }
    }
    (vectors, refused, None)
}

/// One vector per episode of `batch`, of the embedder's length.
async fn embed_batch(
    embedder: &dyn Embedder,
    batch: &[&PendingEmbedding],
) -> Result<Vec<Vec<f32>>, EmbedError> {
    let texts: Vec<String> = batch
        .iter()
        .map(|p| embedding_text(&p.producer_id, &p.content))
        .collect();
    embed_texts(embedder, &texts).await
}

/// One vector per text, of the embedder's length.
async fn embed_texts(
    embedder: &dyn Embedder,
    texts: &[String],
) -> Result<Vec<Vec<f32>>, EmbedError> {
    let vectors = embedder.embed(texts).await?;
    // 0: not known yet (an endpoint not probed); it checks consistency itself.
    let expected = embedder.dimensions();
    if let Some(bad) = vectors.iter().find(|v| expected > 0 && v.len() != expected) {
        return Err(EmbedError::Failed(format!(
            "the embedder returned {} dimensions, expected {expected}",
            bad.len()
        )));
    }
    if vectors.len() != texts.len() {
        return Err(EmbedError::Failed(format!(
            "the embedder returned {} vectors for {} texts",
            vectors.len(),
            texts.len()
        )));
    }
    Ok(vectors)
}
