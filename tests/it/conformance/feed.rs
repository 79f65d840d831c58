//! `ChangeFeed`: the per-project change log that keeps every replica's index current.

use std::sync::Arc;

use memmachine::store::{Change, Changes, Store};
use memmachine_core::error::Error;
use memmachine_core::model::{ChangeSeq, EpisodeHandle, ProjectHandle};

use crate::conformance::support::{
    TestEmbedder, add, episode, handle_of, handles, key, numbered, org, project, project_in,
};

/// Everything logged after `after`, read whole.
async fn since(
    store: &Arc<dyn Store>,
    project: ProjectHandle,
    after: ChangeSeq,
    embedder: Option<&str>,
) -> Changes {
    store
        .changes_since(project, after, embedder, 1000)
        .await
        .unwrap()
        .expect("the log reaches back")
}

pub async fn the_head_of_a_missing_project_is_not_found(store: Arc<dyn Store>) {
    let ghost = key(&org(), "ghost");
    assert!(matches!(
        store.feed_head(&ghost).await,
        Err(Error::NotFound(_))
    ));
    let k = project(&store).await;
    let head = store.feed_head(&k).await.unwrap();
    assert_eq!(head.change.raw(), 0, "nothing logged yet");
    assert_eq!(
        head.project,
        store.get_project(&k).await.unwrap().unwrap().internal_id
    );
    let empty = since(&store, head.project, ChangeSeq::from_raw(0), None).await;
    assert_eq!(
        empty,
        Changes {
            changes: vec![],
            through: ChangeSeq::from_raw(0)
        }
    );
}

pub async fn adds_are_logged_in_order_one_change_each(store: Arc<dyn Store>) {
    let k = project(&store).await;
    let other = project(&store).await;
    let batch = numbered("m", 3);
    add(&store, &k, batch.clone()).await;
    add(&store, &other, numbered("o", 2)).await;
    let more = numbered("n", 1);
    add(&store, &k, more.clone()).await;
    let head = store.feed_head(&k).await.unwrap();
    let mut expected = handles(&store, &k, &batch).await;
    expected.extend(handles(&store, &k, &more).await);
    // One entry at a time: ids strictly increase, and each is one episode's Added.
    let (mut after, mut seen) = (ChangeSeq::from_raw(0), Vec::new());
    loop {
        let read = store
            .changes_since(head.project, after, None, 1)
            .await
            .unwrap()
            .unwrap();
        if read.changes.is_empty() {
            assert_eq!(read.through, after, "nothing read, nothing passed");
            break;
        }
        assert!(
            read.through > after,
            "ids increase: {} after {after}",
            read.through
        );
        assert_eq!(read.changes.len(), 1);
        after = read.through;
        let Change::Added(stored) = &read.changes[0] else {
            panic!("expected Added, got {:?}", read.changes[0]);
        };
        assert_eq!(stored.vector, None);
        seen.push((
            stored.handle,
            stored.episode.content.clone(),
            stored.episode.sequence_num,
        ));
    }
    assert_eq!(after, head.change, "the head is the latest change");
    let want: Vec<(EpisodeHandle, String, i64)> = expected
        .into_iter()
        .zip(["m 0", "m 1", "m 2", "n 0"])
        .zip(1..)
        .map(|((h, c), seq)| (h, c.to_string(), seq))
        .collect();
    assert_eq!(seen, want, "only this project's, in order");
}

pub async fn deletes_are_logged_as_removed(store: Arc<dyn Store>) {
    let k = project(&store).await;
    let batch = numbered("m", 3);
    add(&store, &k, batch.clone()).await;
    let h = handles(&store, &k, &batch).await;
    let before = store.feed_head(&k).await.unwrap();
    store
        .delete_episodes(&k, &[batch[2].uid, batch[0].uid])
        .await
        .unwrap();
    let after = store.feed_head(&k).await.unwrap();
    assert_eq!(
        after.change.raw(),
        before.change.raw() + 2,
        "one change per episode"
    );
    let read = since(&store, before.project, before.change, None).await;
    let mut removed: Vec<EpisodeHandle> = read
        .changes
        .iter()
        .map(|c| match c {
            Change::Removed(handle) => *handle,
            other => panic!("expected Removed, got {other:?}"),
        })
        .collect();
    removed.sort_unstable();
    assert_eq!(removed, [h[0], h[2]]);
    assert_eq!(read.through, after.change);
    // Read from the start, a deleted episode's Added is left out.
    let all = since(&store, before.project, ChangeSeq::from_raw(0), None).await;
    let added: Vec<EpisodeHandle> = all
        .changes
        .iter()
        .filter_map(|c| match c {
            Change::Added(stored) => Some(stored.handle),
            _ => None,
        })
        .collect();
    assert_eq!(added, [h[1]]);
}

pub async fn stored_vectors_are_logged_for_their_embedder_only(store: Arc<dyn Store>) {
    let (embedder, other) = (TestEmbedder::new(8), TestEmbedder::new(8));
    let k = project(&store).await;
    let batch = numbered("m", 2);
    store
        .add_episodes(&k, batch.clone(), Some(embedder.id()))
        .await
        .unwrap();
    let h = handles(&store, &k, &batch).await;
    let project = handle_of(&store, &k).await;
    let before = store.feed_head(&k).await.unwrap().change;
    let vector = vec![0.25, -0.5, 0.0, 1.0];
    store
        .store_embeddings(embedder.id(), vec![(h[1], vector.clone())])
        .await
        .unwrap();
    let read = since(&store, project, before, Some(embedder.id())).await;
    assert_eq!(
        read.changes,
        [Change::Vector {
            handle: h[1],
            vector: vector.clone()
        }]
    );
    assert!(read.through > before);
    // Another embedder's reader, or one without vectors, is told nothing of it.
    for asked in [Some(other.id()), None] {
        let read = since(&store, project, before, asked).await;
        assert!(read.changes.is_empty(), "{asked:?}: {:?}", read.changes);
        assert!(
            read.through > before,
            "the entry is passed over all the same"
        );
    }
    // An Added read after the vector came carries it, for its embedder only.
    let all = since(&store, project, ChangeSeq::from_raw(0), Some(embedder.id())).await;
    let Change::Added(second) = &all.changes[1] else {
        panic!("{:?}", all.changes)
    };
    assert_eq!(
        (second.handle, second.vector.as_ref()),
        (h[1], Some(&vector))
    );
    let all = since(&store, project, ChangeSeq::from_raw(0), Some(other.id())).await;
    let Change::Added(second) = &all.changes[1] else {
        panic!("{:?}", all.changes)
    };
    assert_eq!(second.vector, None);
}

pub async fn index_pages_go_in_sequence_order_with_the_asked_vectors(store: Arc<dyn Store>) {
    let (embedder, other) = (TestEmbedder::new(8), TestEmbedder::new(8));
    let k = project(&store).await;
    let elsewhere = project(&store).await;
    let batch = numbered("m", 5);
    add(&store, &k, batch.clone()).await;
    add(&store, &elsewhere, numbered("x", 2)).await;
    let h = handles(&store, &k, &batch).await;
    let (v0, v3) = (vec![1.0, 0.0], vec![0.0, 1.0]);
    store
        .store_embeddings(embedder.id(), vec![(h[0], v0.clone())])
        .await
        .unwrap();
    store
        .store_embeddings(other.id(), vec![(h[3], v3)])
        .await
        .unwrap();
    let project = handle_of(&store, &k).await;
    let (mut after, mut pages, mut seen) = (i64::MIN, 0, Vec::new());
    loop {
        let page = store
            .index_page(project, Some(embedder.id()), after, 2)
            .await
            .unwrap();
        let Some(last) = page.last() else { break };
        assert!(page.len() <= 2);
        after = last.episode.sequence_num;
        pages += 1;
        seen.extend(
            page.into_iter()
                .map(|s| (s.handle, s.episode.sequence_num, s.vector)),
        );
    }
    assert_eq!(pages, 3);
    let want: Vec<(EpisodeHandle, i64, Option<Vec<f32>>)> = h
        .iter()
        .zip(1..)
        .map(|(h, seq)| (*h, seq, (seq == 1).then(|| v0.clone())))
        .collect();
    assert_eq!(seen, want, "in seq order; only the asked embedder's vector");
    let without = store.index_page(project, None, 0, 100).await.unwrap();
    assert!(without.iter().all(|s| s.vector.is_none()));
    assert_eq!(without.len(), 5, "only this project's");
    let tail = store.index_page(project, None, 4, 100).await.unwrap();
    assert_eq!(tail.iter().map(|s| s.handle).collect::<Vec<_>>(), [h[4]]);
}

pub async fn reads_stop_at_the_limit_and_continue_from_through(store: Arc<dyn Store>) {
    let k = project(&store).await;
    let batch = numbered("m", 5);
    add(&store, &k, batch.clone()).await;
    let h = handles(&store, &k, &batch).await;
    let project = handle_of(&store, &k).await;
    let added = |read: &Changes| -> Vec<EpisodeHandle> {
        read.changes
            .iter()
            .map(|c| match c {
                Change::Added(s) => s.handle,
                other => panic!("{other:?}"),
            })
            .collect()
    };
    let first = store
        .changes_since(project, ChangeSeq::from_raw(0), None, 2)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(added(&first), &h[..2]);
    let second = store
        .changes_since(project, first.through, None, 2)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(added(&second), &h[2..4]);
    assert!(second.through > first.through);
    let third = store
        .changes_since(project, second.through, None, 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(added(&third), &h[4..]);
    assert_eq!(third.through, store.feed_head(&k).await.unwrap().change);
    let done = store
        .changes_since(project, third.through, None, 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        done,
        Changes {
            changes: vec![],
            through: third.through
        }
    );
    // Entries left out (an Added whose episode is gone) still count toward the limit
    // and move `through`, so a reader always progresses.
    store
        .delete_episodes(&k, &[batch[0].uid, batch[1].uid])
        .await
        .unwrap();
    let read = store
        .changes_since(project, ChangeSeq::from_raw(0), None, 2)
        .await
        .unwrap()
        .unwrap();
    assert!(read.changes.is_empty(), "{:?}", read.changes);
    assert_eq!(read.through, first.through);
}

pub async fn a_pruned_log_no_longer_answers_old_readers(store: Arc<dyn Store>) {
    // Database-wide: prunes every project's log (needs a database of its own).
    let k = project(&store).await;
    let batch = numbered("m", 3);
    add(&store, &k, batch.clone()).await;
    let project = handle_of(&store, &k).await;
    let later = chrono::Utc::now().timestamp_micros() + 1;
    assert_eq!(store.prune_changes(0).await.unwrap(), 0, "nothing that old");
    assert!(
        store
            .changes_since(project, ChangeSeq::from_raw(0), None, 10)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        store.prune_changes(later).await.unwrap(),
        2,
        "all but the newest"
    );
    assert!(
        store
            .changes_since(project, ChangeSeq::from_raw(0), None, 10)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .changes_since(project, ChangeSeq::from_raw(1), None, 10)
            .await
            .unwrap()
            .is_none()
    );
    let head = store.feed_head(&k).await.unwrap();
    assert_eq!(head.change.raw(), 3, "the head stays");
    // A reader that had seen the pruned entries carries on.
    let read = store
        .changes_since(project, ChangeSeq::from_raw(2), None, 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.through.raw(), 3);
    assert_eq!(read.changes.len(), 1);
    let current = store
        .changes_since(project, ChangeSeq::from_raw(3), None, 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        current,
        Changes {
            changes: vec![],
            through: ChangeSeq::from_raw(3)
        }
    );
    // New changes after a prune are read as before; pruning again drops what became
    // old (entry 3, older than `later`), never the newest.
    add(&store, &k, numbered("n", 1)).await;
    let read = store
        .changes_since(project, ChangeSeq::from_raw(3), None, 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((read.changes.len(), read.through.raw()), (1, 4));
    assert_eq!(store.prune_changes(later).await.unwrap(), 1);
    assert!(
        store
            .changes_since(project, ChangeSeq::from_raw(2), None, 10)
            .await
            .unwrap()
            .is_none()
    );
    let read = store
        .changes_since(project, ChangeSeq::from_raw(3), None, 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((read.changes.len(), read.through.raw()), (1, 4));
}

pub async fn a_project_created_again_has_another_handle(store: Arc<dyn Store>) {
    let o = org();
    let k = project_in(&store, &o, "again").await;
    add(&store, &k, vec![episode("before", "u", &[], 1)]).await;
    let old = store.feed_head(&k).await.unwrap();
    assert!(store.delete_project(&k).await.unwrap());
    assert!(matches!(store.feed_head(&k).await, Err(Error::NotFound(_))));
    assert!(
        store
            .changes_since(old.project, ChangeSeq::from_raw(0), None, 10)
            .await
            .unwrap()
            .is_none(),
        "a reader of the deleted project reloads (and finds it gone)"
    );
    assert!(
        store
            .index_page(old.project, None, i64::MIN, 10)
            .await
            .unwrap()
            .is_empty()
    );
    project_in(&store, &o, "again").await;
    let new = store.feed_head(&k).await.unwrap();
    assert_ne!(new.project, old.project, "never reused");
    assert_eq!(new.change.raw(), 0);
    add(&store, &k, vec![episode("after", "u", &[], 2)]).await;
    let page = store
        .index_page(new.project, None, i64::MIN, 10)
        .await
        .unwrap();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].episode.content, "after");
}

/// The store's identity: one per database, the same through every handle on it (index
/// segments are checked against it).
pub async fn the_store_id_is_one_per_database(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let id = a.store_id().await.unwrap();
    assert!(id.len() >= 16, "{id}");
    assert_eq!(a.store_id().await.unwrap(), id, "stable");
    assert_eq!(b.store_id().await.unwrap(), id, "one database, one id");
}
