//! Two handles on one database, as two replicas hold them: what one writes the other
//! reads, and the vector queue's leases hold between them.

use std::collections::BTreeSet;
use std::sync::Arc;

use memmachine::store::Store;
use memmachine_core::model::EpisodeHandle;

use crate::conformance::support::{
    LONG, PAST_SHORT, SHORT, TestEmbedder, add, handles, numbered, org, project, project_in,
};

pub async fn writes_through_one_handle_are_seen_through_the_other(
    one: Arc<dyn Store>,
    other: Arc<dyn Store>,
) {
    let o = org();
    let k = project_in(&one, &o, "p").await;
    let created = other
        .get_project(&k)
        .await
        .unwrap()
        .expect("seen by the other");
    assert_eq!(created, one.get_project(&k).await.unwrap().unwrap());
    let listed = other.list_projects(Some(&o), None, 10).await.unwrap();
    assert_eq!(listed, std::slice::from_ref(&created));
    add(&one, &k, numbered("m", 3)).await;
    assert_eq!(other.count_episodes(&k).await.unwrap(), 3);
    assert_eq!(
        other.feed_head(&k).await.unwrap(),
        one.feed_head(&k).await.unwrap()
    );
    assert_eq!(other.feed_head(&k).await.unwrap().change.raw(), 3);
    // And back, with the sequence numbers continuing.
    assert_eq!(add(&other, &k, numbered("n", 1)).await, [4]);
    assert_eq!(one.feed_head(&k).await.unwrap().change.raw(), 4);
    assert!(other.delete_project(&k).await.unwrap());
    assert!(one.get_project(&k).await.unwrap().is_none());
    assert!(
        one.list_projects(Some(&o), None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Claims from `store` until nothing is left (or, should leases not hold, for as many
/// rounds as there are episodes); returns what it got.
async fn claim_until_empty(
    store: Arc<dyn Store>,
    embedder: String,
    rounds: usize,
) -> Vec<EpisodeHandle> {
    let mut got = Vec::new();
    for _ in 0..rounds {
        let claimed = store.claim_embeddings(&embedder, 7, LONG).await.unwrap();
        if claimed.is_empty() {
            break;
        }
        got.extend(claimed.into_iter().map(|p| p.episode));
        tokio::task::yield_now().await;
    }
    got
}

pub async fn concurrent_claimers_never_share_an_episode(
    one: Arc<dyn Store>,
    other: Arc<dyn Store>,
) {
    let embedder = TestEmbedder::new(8);
    let k = project(&one).await;
    let batch = numbered("m", 300);
    one.add_episodes(&k, batch.clone(), Some(embedder.id()))
        .await
        .unwrap();
    let all: BTreeSet<EpisodeHandle> = handles(&one, &k, &batch).await.into_iter().collect();
    let a = tokio::spawn(claim_until_empty(
        one.clone(),
        embedder.id().to_string(),
        batch.len(),
    ));
    let b = tokio::spawn(claim_until_empty(
        other.clone(),
        embedder.id().to_string(),
        batch.len(),
    ));
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    let (sa, sb): (BTreeSet<EpisodeHandle>, BTreeSet<EpisodeHandle>) =
        (a.iter().copied().collect(), b.iter().copied().collect());
    assert_eq!(sa.len(), a.len(), "one claimer got an episode twice");
    assert_eq!(sb.len(), b.len(), "one claimer got an episode twice");
    assert!(
        sa.is_disjoint(&sb),
        "both got {:?}",
        sa.intersection(&sb).collect::<Vec<_>>()
    );
    assert_eq!(&sa | &sb, all, "every episode claimed");
    eprintln!("claimed {} and {}", a.len(), b.len());
}

pub async fn an_expired_lease_is_taken_over_by_the_other_handle(
    one: Arc<dyn Store>,
    other: Arc<dyn Store>,
) {
    let embedder = TestEmbedder::new(8);
    let k = project(&one).await;
    let batch = numbered("m", 2);
    one.add_episodes(&k, batch.clone(), Some(embedder.id()))
        .await
        .unwrap();
    let h = handles(&one, &k, &batch).await;
    let first = one.claim_embeddings(embedder.id(), 1, SHORT).await.unwrap();
    assert_eq!(first.iter().map(|p| p.episode).collect::<Vec<_>>(), [h[0]]);
    let held = other
        .claim_embeddings(embedder.id(), 10, LONG)
        .await
        .unwrap();
    assert_eq!(
        held.iter().map(|p| p.episode).collect::<Vec<_>>(),
        [h[1]],
        "h[0] is leased"
    );
    tokio::time::sleep(PAST_SHORT).await;
    let taken = other
        .claim_embeddings(embedder.id(), 10, LONG)
        .await
        .unwrap();
    assert_eq!(taken.iter().map(|p| p.episode).collect::<Vec<_>>(), [h[0]]);
    assert!(
        one.claim_embeddings(embedder.id(), 10, LONG)
            .await
            .unwrap()
            .is_empty()
    );
    // Released by the other, it is the first handle's again at once.
    other.release_embeddings(&[h[0]]).await.unwrap();
    let back = one.claim_embeddings(embedder.id(), 10, LONG).await.unwrap();
    assert_eq!(back.iter().map(|p| p.episode).collect::<Vec<_>>(), [h[0]]);
}
