//! `VectorStore`: the queue of episodes waiting for a vector, claimed under leases.

use std::sync::Arc;

use memmachine::store::{Change, Store};
use memmachine_core::model::EpisodeHandle;

use crate::conformance::support::{
    LONG, PAST_SHORT, SHORT, TestEmbedder, add, embed_all, episode, handle_of, handles, numbered,
    project, queued_for,
};

fn sorted(mut handles: Vec<EpisodeHandle>) -> Vec<EpisodeHandle> {
    handles.sort_unstable();
    handles
}

pub async fn queue_missing_queues_and_dequeues_per_project(store: Arc<dyn Store>) {
    let (e1, e2) = (TestEmbedder::new(8), TestEmbedder::new(8));
    let (a, b, c) = (
        project(&store).await,
        project(&store).await,
        project(&store).await,
    );
    let (in_a, in_b, in_c) = (numbered("a", 3), numbered("b", 2), numbered("c", 1));
    add(&store, &a, in_a.clone()).await;
    add(&store, &b, in_b.clone()).await;
    add(&store, &c, in_c.clone()).await;
    assert!(
        queued_for(&store, e1.id()).await.is_empty(),
        "added for no embedder"
    );
    // Each project is queued for the embedder it names; `None` queues nothing.
    let waiting = store
        .queue_missing(vec![
            (a.key().clone(), Some(e1.id().to_string())),
            (b.key().clone(), Some(e2.id().to_string())),
            (c.key().clone(), None),
        ])
        .await
        .unwrap();
    assert_eq!(waiting, 5, "in all (this database is the test's own)");
    let (ha, hb) = (
        handles(&store, &a, &in_a).await,
        handles(&store, &b, &in_b).await,
    );
    assert_eq!(
        sorted(queued_for(&store, e1.id()).await),
        sorted(ha.clone())
    );
    assert_eq!(
        sorted(queued_for(&store, e2.id()).await),
        sorted(hb.clone())
    );
    // Queueing again adds nothing; an embedded episode is not queued again.
    embed_all(&store, &e1).await;
    let again = store
        .queue_missing(vec![(a.key().clone(), Some(e1.id().to_string()))])
        .await
        .unwrap();
    assert_eq!(again, 2, "b's two still wait");
    assert!(queued_for(&store, e1.id()).await.is_empty());
    // `None`: the project keeps no vectors and leaves the queue; others are untouched.
    assert_eq!(
        store
            .queue_missing(vec![(b.key().clone(), None)])
            .await
            .unwrap(),
        0
    );
    assert!(queued_for(&store, e2.id()).await.is_empty());
    // A project not listed is untouched; an unknown one is skipped.
    let ghost = crate::conformance::support::key(&crate::conformance::support::org(), "ghost");
    store
        .queue_missing(vec![
            (c.key().clone(), Some(e2.id().to_string())),
            (ghost.key().clone(), Some(e2.id().into())),
        ])
        .await
        .unwrap();
    assert_eq!(
        queued_for(&store, e2.id()).await,
        handles(&store, &c, &in_c).await
    );
    assert!(
        queued_for(&store, e1.id()).await.is_empty(),
        "a stays embedded"
    );
}

pub async fn a_new_embedder_requeues_everything(store: Arc<dyn Store>) {
    let (first, second) = (TestEmbedder::new(8), TestEmbedder::new(12));
    let k = project(&store).await;
    let batch = numbered("note", 5);
    store
        .add_episodes(&k, batch.clone(), Some(first.id()))
        .await
        .unwrap();
    assert_eq!(embed_all(&store, &first).await, 5);
    let waiting = store
        .queue_missing(vec![(k.key().clone(), Some(second.id().to_string()))])
        .await
        .unwrap();
    assert_eq!(waiting, 5, "another embedder's vectors do not count");
    assert!(queued_for(&store, first.id()).await.is_empty());
    assert_eq!(embed_all(&store, &second).await, 5);
    let page = store
        .index_page(handle_of(&store, &k).await, Some(second.id()), 0, 10)
        .await
        .unwrap();
    assert!(
        page.iter()
            .all(|s| s.vector.as_ref().map(Vec::len) == Some(12))
    );
    // Switching back queues every episode again: each keeps one vector.
    let waiting = store
        .queue_missing(vec![(k.key().clone(), Some(first.id().to_string()))])
        .await
        .unwrap();
    assert_eq!(waiting, 5);
}

pub async fn a_claim_leases_what_it_returns_oldest_first(store: Arc<dyn Store>) {
    let embedder = TestEmbedder::new(8);
    let k = project(&store).await;
    let mut batch = numbered("m", 5);
    batch[1].producer_id = "bob".into();
    store
        .add_episodes(&k, batch.clone(), Some(embedder.id()))
        .await
        .unwrap();
    let h = handles(&store, &k, &batch).await;
    let first = store
        .claim_embeddings(embedder.id(), 2, LONG)
        .await
        .unwrap();
    let got: Vec<(EpisodeHandle, &str, &str, &str)> = first
        .iter()
        .map(|p| {
            (
                p.episode,
                p.content.as_str(),
                p.producer_id.as_str(),
                p.embedder.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (h[0], "m 0", "u", embedder.id()),
            (h[1], "m 1", "bob", embedder.id())
        ],
        "oldest first, at most the limit"
    );
    let second = store
        .claim_embeddings(embedder.id(), 10, LONG)
        .await
        .unwrap();
    let second: Vec<EpisodeHandle> = second.iter().map(|p| p.episode).collect();
    assert_eq!(second, &h[2..], "not the leased ones");
    assert!(
        store
            .claim_embeddings(embedder.id(), 10, LONG)
            .await
            .unwrap()
            .is_empty()
    );
    let other = TestEmbedder::new(8);
    assert!(
        store
            .claim_embeddings(other.id(), 10, LONG)
            .await
            .unwrap()
            .is_empty(),
        "queued for another embedder"
    );
}

pub async fn an_expired_lease_is_taken_over(store: Arc<dyn Store>) {
    let embedder = TestEmbedder::new(8);
    let k = project(&store).await;
    let batch = numbered("m", 3);
    store
        .add_episodes(&k, batch.clone(), Some(embedder.id()))
        .await
        .unwrap();
    let h = handles(&store, &k, &batch).await;
    let short = store
        .claim_embeddings(embedder.id(), 2, SHORT)
        .await
        .unwrap();
    assert_eq!(short.len(), 2);
    let held = store
        .claim_embeddings(embedder.id(), 10, LONG)
        .await
        .unwrap();
    assert_eq!(held.iter().map(|p| p.episode).collect::<Vec<_>>(), [h[2]]);
    tokio::time::sleep(PAST_SHORT).await;
    let taken = store
        .claim_embeddings(embedder.id(), 10, LONG)
        .await
        .unwrap();
    assert_eq!(
        taken.iter().map(|p| p.episode).collect::<Vec<_>>(),
        &h[..2],
        "the expired leases, not the one still held"
    );
}

pub async fn released_episodes_are_claimable_at_once(store: Arc<dyn Store>) {
    let embedder = TestEmbedder::new(8);
    let k = project(&store).await;
    let batch = numbered("m", 3);
    store
        .add_episodes(&k, batch.clone(), Some(embedder.id()))
        .await
        .unwrap();
    let h = handles(&store, &k, &batch).await;
    let claimed = store
        .claim_embeddings(embedder.id(), 10, LONG)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    store.release_embeddings(&[h[2], h[0]]).await.unwrap();
    let again = store
        .claim_embeddings(embedder.id(), 10, LONG)
        .await
        .unwrap();
    assert_eq!(
        again.iter().map(|p| p.episode).collect::<Vec<_>>(),
        [h[0], h[2]]
    );
    // Releasing what is not queued is harmless.
    store
        .release_embeddings(&[EpisodeHandle::from_raw(i64::MAX)])
        .await
        .unwrap();
    store.release_embeddings(&[]).await.unwrap();
}

pub async fn abandoned_episodes_leave_the_queue(store: Arc<dyn Store>) {
    let embedder = TestEmbedder::new(8);
    let k = project(&store).await;
    let batch = vec![
        episode("an ordinary note", "u", &[], 1),
        episode("a text the model refuses", "u", &[], 2),
    ];
    store
        .add_episodes(&k, batch.clone(), Some(embedder.id()))
        .await
        .unwrap();
    let h = handles(&store, &k, &batch).await;
    let claimed = store
        .claim_embeddings(embedder.id(), 10, LONG)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    assert_eq!(store.abandon_embeddings(&[h[1]]).await.unwrap(), 1);
    assert_eq!(
        store.abandon_embeddings(&[h[1]]).await.unwrap(),
        0,
        "already off"
    );
    store.release_embeddings(&[h[0], h[1]]).await.unwrap();
    assert_eq!(queued_for(&store, embedder.id()).await, [h[0]]);
    // Abandoned, it has no vector, and the episode stays.
    assert_eq!(store.count_episodes(&k).await.unwrap(), 2);
    let page = store
        .index_page(handle_of(&store, &k).await, Some(embedder.id()), 0, 10)
        .await
        .unwrap();
    assert!(page.iter().all(|s| s.vector.is_none()));
}

pub async fn stored_vectors_dequeue_and_deleted_episodes_are_skipped(store: Arc<dyn Store>) {
    let embedder = TestEmbedder::new(8);
    let k = project(&store).await;
    let batch = numbered("m", 3);
    store
        .add_episodes(&k, batch.clone(), Some(embedder.id()))
        .await
        .unwrap();
    let h = handles(&store, &k, &batch).await;
    let project = handle_of(&store, &k).await;
    let claimed = store
        .claim_embeddings(embedder.id(), 10, LONG)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    // Deleted while its vector was being made.
    store.delete_episodes(&k, &[batch[1].uid]).await.unwrap();
    let head = store.feed_head(&k).await.unwrap().change;
    let vectors: Vec<(EpisodeHandle, Vec<f32>)> =
        h.iter().map(|h| (*h, vec![h.raw() as f32, 1.0])).collect();
    store
        .store_embeddings(embedder.id(), vectors)
        .await
        .unwrap();
    store.release_embeddings(&h).await.unwrap();
    assert!(
        queued_for(&store, embedder.id()).await.is_empty(),
        "all dequeued"
    );
    let read = store
        .changes_since(project, head, Some(embedder.id()), 100)
        .await
        .unwrap()
        .unwrap();
    let logged: Vec<EpisodeHandle> = read
        .changes
        .iter()
        .map(|c| match c {
            Change::Vector { handle, .. } => *handle,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(sorted(logged), [h[0], h[2]], "the deleted one skipped");
    let page = store
        .index_page(project, Some(embedder.id()), 0, 10)
        .await
        .unwrap();
    let stored: Vec<(EpisodeHandle, Option<Vec<f32>>)> =
        page.into_iter().map(|s| (s.handle, s.vector)).collect();
    assert_eq!(
        stored,
        [
            (h[0], Some(vec![h[0].raw() as f32, 1.0])),
            (h[2], Some(vec![h[2].raw() as f32, 1.0]))
        ]
    );
    // An episode added queued and deleted before it was claimed leaves the queue.
    let gone = numbered("gone", 1);
    store
        .add_episodes(&k, gone.clone(), Some(embedder.id()))
        .await
        .unwrap();
    store.delete_episodes(&k, &[gone[0].uid]).await.unwrap();
    assert!(queued_for(&store, embedder.id()).await.is_empty());
    store.store_embeddings(embedder.id(), vec![]).await.unwrap();
}

pub async fn a_vector_for_the_old_embedder_leaves_the_new_queue_alone(store: Arc<dyn Store>) {
    let (old, new) = (TestEmbedder::new(8), TestEmbedder::new(8));
    let a = project(&store).await;
    let episodes = numbered("switch", 2);
    add(&store, &a, episodes.clone()).await;
    store
        .queue_missing(vec![(a.key().clone(), Some(old.id().to_string()))])
        .await
        .unwrap();
    let claimed = store.claim_embeddings(old.id(), 10, LONG).await.unwrap();
    assert_eq!(claimed.len(), 2);
    // The project moves to another embedder while the old one's worker is embedding.
    store
        .queue_missing(vec![(a.key().clone(), Some(new.id().to_string()))])
        .await
        .unwrap();
    let late = claimed
        .iter()
        .map(|p| (p.episode, old.embed_one(&p.content)))
        .collect();
    store.store_embeddings(old.id(), late).await.unwrap();
    let waiting = sorted(queued_for(&store, new.id()).await);
    assert_eq!(
        waiting,
        sorted(handles(&store, &a, &episodes).await),
        "still queued for the embedder the project uses now"
    );
}

pub async fn vectors_are_read_by_handle_for_the_project_and_embedder(store: Arc<dyn Store>) {
    let (embedder, other) = (TestEmbedder::new(3), TestEmbedder::new(4));
    let (k, elsewhere) = (project(&store).await, project(&store).await);
    let batch = numbered("v", 4);
    add(&store, &k, batch.clone()).await;
    let theirs = numbered("w", 1);
    add(&store, &elsewhere, theirs.clone()).await;
    let h = handles(&store, &k, &batch).await;
    let foreign = handles(&store, &elsewhere, &theirs).await[0];
    let vector = |h: EpisodeHandle| vec![h.raw() as f32, 0.5, -1.25];
    store
        .store_embeddings(
            embedder.id(),
            [h[0], h[1], h[2], foreign]
                .iter()
                .map(|h| (*h, vector(*h)))
                .collect(),
        )
        .await
        .unwrap();
    // h[3] has a vector from another embedder only.
    store
        .store_embeddings(other.id(), vec![(h[3], vec![1.0; 4])])
        .await
        .unwrap();
    store.delete_episodes(&k, &[batch[1].uid]).await.unwrap();
    let asked = [
        h[2],
        h[3],
        foreign,
        h[1],
        h[0],
        EpisodeHandle::from_raw(987_654_321),
    ];
    let read = store.vectors(&k, embedder.id(), &asked).await.unwrap();
    assert_eq!(
        read,
        [(h[2], vector(h[2])), (h[0], vector(h[0]))],
        "in the order asked; deleted, other embedders', other projects' and unknown left out"
    );
    assert_eq!(
        store.vectors(&k, other.id(), &[h[3]]).await.unwrap(),
        [(h[3], vec![1.0; 4])]
    );
    assert!(
        store
            .vectors(&k, embedder.id(), &[])
            .await
            .unwrap()
            .is_empty()
    );
    let ghost = crate::conformance::support::key(&crate::conformance::support::org(), "ghost");
    let missing = store.vectors(&ghost, embedder.id(), &[h[0]]).await;
    assert!(
        matches!(missing, Err(memmachine_core::error::Error::NotFound(_))),
        "{missing:?}"
    );
}
