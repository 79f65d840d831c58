//! Waiting for the semantic queue to drain (with progress lines) and for the vectors.

use std::time::{Duration, Instant};

use super::cost::EVENTS;
use super::options::Args;
use crate::support::Result;
use crate::support::metrics::{self as prometheus, Exposition};
use crate::support::server::Server;

/// How long the features' embedding count must stay still for the vectors to be done.
pub const EMBED_SETTLE: Duration = Duration::from_secs(3);

/// How the wait for the semantic queue ended.
#[derive(Debug, Clone, Copy, Default)]
pub struct Drain {
    /// From the first add until the queue was seen empty (or the wait ran out).
    pub wall: Duration,
    pub complete: bool,
    pub ingested: f64,
    pub failed: f64,
    pub depth: f64,
}

pub fn progress_line(metrics: &Exposition, queued: usize, elapsed: Duration) -> String {
    let event = |e: &str| metrics.sum(EVENTS, &[("event", e)]);
    let calls = |outcome: &str| metrics.sum("memmachine_llm_calls_total", &[("outcome", outcome)]);
    format!(
        "   [{:>6.0} s] semantic: {:.0} of {queued} messages done ({:.0} ingested, {:.0} failed), \
         queue depth {:.0}; batches {:.0} applied, {:.0} retried, {:.0} failed; {:.0} invalid \
         answers; model calls {:.0} ok, {:.0} unavailable, {:.0} failed",
        elapsed.as_secs_f64(),
        event("messages_ingested") + event("messages_failed"),
        event("messages_ingested"),
        event("messages_failed"),
        metrics.sum("memmachine_semantic_queue_depth", &[]),
        event("batch_applied"),
        event("batch_retried"),
        event("batch_failed"),
        event("invalid_answers"),
        calls("ok"),
        calls("unavailable"),
        calls("failed"),
    )
}

pub async fn scrape(http: &reqwest::Client, url: &str, server: &Server) -> Result<Exposition> {
    prometheus::scrape(http, url)
        .await
        .map_err(|err| server.error("cannot read the server's metrics", err))
}

/// Waits until the semantic queue is empty, at most `--max-wait` from `started`.
pub async fn wait_for_drain(
    args: &Args,
    http: &reqwest::Client,
    url: &str,
    server: &Server,
    started: Instant,
    queued: usize,
) -> Result<Drain> {
    let limit = Duration::from_secs(args.max_wait);
    let every = Duration::from_secs(args.progress_secs.max(1));
    let mut last_progress = Instant::now();
    loop {
        let metrics = scrape(http, url, server).await?;
        let ingested = metrics.sum(EVENTS, &[("event", "messages_ingested")]);
        let failed = metrics.sum(EVENTS, &[("event", "messages_failed")]);
        let depth = metrics.sum("memmachine_semantic_queue_depth", &[]);
        let complete = depth == 0.0 || ingested + failed >= queued as f64;
        let out_of_time = started.elapsed() >= limit;
        if complete || out_of_time || last_progress.elapsed() >= every {
            eprintln!("{}", progress_line(&metrics, queued, started.elapsed()));
            last_progress = Instant::now();
        }
        if complete || out_of_time {
            if !complete {
                eprintln!(
                    "   warning: the semantic queue did not drain within --max-wait {} s: \
                     {depth:.0} messages still queued; scoring what was distilled",
                    args.max_wait
                );
            }
            return Ok(Drain {
                wall: started.elapsed(),
                complete,
                ingested,
                failed,
                depth,
            });
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Waits until the server's count of embedded texts stays still for `EMBED_SETTLE` (the
/// features' vectors are made in the background), at most `limit`.
pub async fn wait_for_feature_vectors(
    http: &reqwest::Client,
    url: &str,
    server: &Server,
    limit: Duration,
) -> Result<Option<Duration>> {
    let started = Instant::now();
    let count = |m: &Exposition| m.sum("memmachine_embedded_texts_total", &[]);
    let mut last = count(&scrape(http, url, server).await?);
    let mut still_since = Instant::now();
    while started.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = count(&scrape(http, url, server).await?);
        if now != last {
            last = now;
            still_since = Instant::now();
        } else if still_since.elapsed() >= EMBED_SETTLE {
            return Ok(Some(started.elapsed()));
        }
    }
    Ok(None)
}
