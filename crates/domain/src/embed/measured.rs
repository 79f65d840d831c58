//! An embedder that records its latency, volume and failures in the server's metrics,
//! and knows when it is down: once a call fails for want of an answer (the endpoint is
//! down, overloaded or timing out), searches do not wait for it ([`Embedder::embed_query`]
//! answers `Unavailable` at once) until a call succeeds again (the embedding worker keeps
//! trying its queue), or [`RETRY_AFTER`] has passed and one search tries it. How the
//! last call ended is what `/config/resources` reports.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{EmbedError, Embedder, QUERY_TIMEOUT};
use crate::metrics::Metrics;

/// How long searches go without an unavailable embedder before one tries it again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Since when and why the embedder is known to be unavailable.
struct Down {
    since: Instant,
    /// Until then, searches do not ask it.
    retry_at: Instant,
    error: String,
}

pub struct Measured {
    inner: Arc<dyn Embedder>,
    metrics: Arc<Metrics>,
    /// The inner embedder's token count already recorded.
    tokens_seen: AtomicU64,
    down: Mutex<Option<Down>>,
}

impl Measured {
    pub fn new(inner: Arc<dyn Embedder>, metrics: Arc<Metrics>) -> Measured {
        metrics.set_embedder_up(inner.id(), true);
        Measured {
            tokens_seen: AtomicU64::new(inner.tokens()),
            inner,
            metrics,
            down: Mutex::default(),
        }
    }

    /// Records a call that embedded `texts` texts, begun at `started`.
    fn record(&self, texts: usize, started: Instant) {
        let total = self.inner.tokens();
        let before = self.tokens_seen.swap(total, Ordering::Relaxed);
        self.metrics.record_embedding(
            self.inner.id(),
            texts,
            total.saturating_sub(before),
            started.elapsed(),
        );
    }

    /// Notes how a call ended: its outcome for `/config/resources`, failures counted by
    /// kind, and whether the embedder is down (logged when that changes).
    fn outcome<T>(&self, result: &Result<T, EmbedError>) {
        let id = self.inner.id();
        self.metrics
            .last_calls()
            .record(crate::resource_status::Kind::Embedder, id, result);
        let mut down = self.down.lock().unwrap_or_else(|p| p.into_inner());
        let message = match result {
            Ok(_) => {
                if let Some(was) = down.take() {
                    tracing::info!(
                        embedder = id,
                        down_secs = was.since.elapsed().as_secs_f64(),
                        "the embedder answers again; searches use it"
                    );
                    self.metrics.set_embedder_up(id, true);
                }
                return;
            }
            Err(EmbedError::Failed(_)) => {
                // Refused, or an answer that is not embeddings: it answers, so searches
                // find out at once themselves.
                self.metrics.record_embedding_failure(id, "failed");
                return;
            }
            Err(EmbedError::Unavailable(message)) => message,
        };
        self.metrics.record_embedding_failure(id, "unavailable");
        let now = Instant::now();
        match down.as_mut() {
            Some(known) => {
                known.retry_at = now + RETRY_AFTER;
                known.error.clone_from(message);
            }
            None => {
                tracing::warn!(
                    embedder = id,
                    error = %message,
                    "the embedder is unavailable; searches rank without it until it answers again"
                );
                self.metrics.set_embedder_up(id, false);
                *down = Some(Down {
                    since: now,
                    retry_at: now + RETRY_AFTER,
                    error: message.clone(),
                });
            }
        }
    }
}

#[async_trait]
impl Embedder for Measured {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn dimensions(&self) -> usize {
        self.inner.dimensions()
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let started = Instant::now();
        let result = self.inner.embed(texts).await;
        if result.is_ok() {
            self.record(texts.len(), started);
        }
        self.outcome(&result);
        result
    }

    /// At once `Unavailable` while the embedder is known to be down, except for one
    /// search every [`RETRY_AFTER`], which tries it.
    async fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        {
            let mut down = self.down.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(known) = down.as_mut() {
                let now = Instant::now();
                if now < known.retry_at {
                    return Err(EmbedError::Unavailable(format!(
                        "{} has been failing for {:.0?} ({}); not waiting for it",
                        self.inner.id(),
                        known.since.elapsed(),
                        known.error
                    )));
                }
                // This search tries it; the others meanwhile do not wait.
                known.retry_at = now + QUERY_TIMEOUT + RETRY_AFTER;
            }
        }
        let started = Instant::now();
        let result = self.inner.embed_query(text).await;
        if result.is_ok() {
            self.record(1, started);
        }
        self.outcome(&result);
        result
    }

    fn tokens(&self) -> u64 {
        self.inner.tokens()
    }

    fn kernel(&self) -> Option<&'static str> {
        self.inner.kernel()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers `Unavailable` after a delay while `failing`.
    struct Flaky {
        failing: std::sync::atomic::AtomicBool,
        calls: AtomicU64,
    }

    #[async_trait]
    impl Embedder for Flaky {
        fn id(&self) -> &str {
            "flaky"
        }

        fn dimensions(&self) -> usize {
            2
        }

        async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if self.failing.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(300)).await;
                return Err(EmbedError::Unavailable("down".into()));
            }
            Ok(texts.iter().map(|_| vec![1.0, 0.0]).collect())
        }
    }

    #[tokio::test]
    async fn searches_do_not_wait_for_an_embedder_known_to_be_down() {
        let flaky = Arc::new(Flaky {
            failing: true.into(),
            calls: AtomicU64::new(0),
        });
        let metrics = Arc::new(Metrics::new());
        let measured = Measured::new(flaky.clone(), metrics.clone());
        // The worker finds it down: searches then fail at once, without calling it.
        assert!(measured.embed(&["a".into()]).await.is_err());
        let started = Instant::now();
        let err = measured.embed_query("q").await.unwrap_err();
        assert!(started.elapsed() < Duration::from_millis(100), "{err}");
        assert!(err.to_string().contains("not waiting"), "{err}");
        assert_eq!(flaky.calls.load(Ordering::SeqCst), 1);
        let text = metrics.encode();
        assert!(
            text.contains(
                r#"memmachine_embedding_failures_total{embedder="flaky",kind="unavailable"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"memmachine_embedder_up{embedder="flaky"} 0"#),
            "{text}"
        );
        // Back: the next success brings searches back to it.
        flaky.failing.store(false, Ordering::SeqCst);
        assert!(measured.embed(&["a".into()]).await.is_ok());
        assert_eq!(measured.embed_query("q").await.unwrap(), vec![1.0, 0.0]);
        assert!(
            metrics
                .encode()
                .contains(r#"memmachine_embedder_up{embedder="flaky"} 1"#)
        );
    }
}
