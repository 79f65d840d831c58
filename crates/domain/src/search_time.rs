//! Where a search's time goes: each search logs (at debug level) its time in
//! microseconds, with its question's embedding apart from the rest (the store's reads,
//! the ranking), so what is left to cut beside the embedder is visible.

use std::cell::Cell;
use std::future::Future;
use std::time::Instant;

use crate::embed::{EmbedError, Embedder};

tokio::task_local! {
    /// Microseconds the current search has spent embedding its question.
    static EMBEDDING_US: Cell<u64>;
}

/// Runs `search` and, when debug logging is on, logs its time.
pub async fn logged<T>(search: impl Future<Output = T>) -> T {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return search.await;
    }
    let started = Instant::now();
    let timed = async {
        let found = search.await;
        (found, EMBEDDING_US.with(Cell::get))
    };
    let (found, embedding_us) = EMBEDDING_US.scope(Cell::new(0), timed).await;
    let total_us = started.elapsed().as_micros() as u64;
    tracing::debug!(
        total_us,
        embedding_us,
        rest_us = total_us.saturating_sub(embedding_us),
        "search timed"
    );
    found
}

/// The question's vector (`Embedder::embed_query`), its time counted as the current
/// search's embedding.
pub async fn embed_query(embedder: &dyn Embedder, question: &str) -> Result<Vec<f32>, EmbedError> {
    let started = Instant::now();
    let vector = embedder.embed_query(question).await;
    let us = started.elapsed().as_micros() as u64;
    let _ = EMBEDDING_US.try_with(|spent| spent.set(spent.get() + us));
    vector
}
