//! `StatsStore`: database-wide figures (each test needs a database of its own).

use std::sync::Arc;

use memmachine::store::{Store, StoreStats};

use crate::conformance::support::{TestEmbedder, add, embed_all, numbered, project};

pub async fn stats_count_episodes_and_the_embedding_queue(store: Arc<dyn Store>) {
    assert_eq!(store.stats().await.unwrap(), StoreStats::default());
    let embedder = TestEmbedder::new(8);
    let k = project(&store).await;
    add(&store, &k, numbered("plain", 2)).await;
    let stats = store.stats().await.unwrap();
    assert_eq!(
        stats,
        StoreStats {
            episodes: 2,
            ..Default::default()
        },
        "no embedder, no queue"
    );
    store
        .add_episodes(&k, numbered("queued", 3), Some(embedder.id()))
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.episodes, stats.embedding_queue), (5, 3));
    assert!(
        stats.embedding_lag_secs >= 0.02 && stats.embedding_lag_secs < 60.0,
        "the oldest waits since it was added: {}",
        stats.embedding_lag_secs
    );
    // Leased is still waiting.
    store
        .claim_embeddings(embedder.id(), 1, crate::conformance::support::LONG)
        .await
        .unwrap();
    assert_eq!(store.stats().await.unwrap().embedding_queue, 3);
    // queue_missing counts too.
    store
        .queue_missing(vec![(k.key().clone(), Some(embedder.id().to_string()))])
        .await
        .unwrap();
    assert_eq!(store.stats().await.unwrap().embedding_queue, 5);
    assert_eq!(embed_all(&store, &embedder).await, 4, "one is still leased");
    let leased = store.stats().await.unwrap();
    assert_eq!(leased.embedding_queue, 1);
    let h = crate::conformance::support::queued_for(&store, embedder.id()).await;
    assert!(h.is_empty(), "the leased one is not claimable");
    store
        .queue_missing(vec![(k.key().clone(), None)])
        .await
        .unwrap();
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.episodes, stats.embedding_queue), (5, 0));
    assert_eq!(stats.embedding_lag_secs, 0.0);
    store.delete_project(&k).await.unwrap();
    assert_eq!(store.stats().await.unwrap(), StoreStats::default());
}
