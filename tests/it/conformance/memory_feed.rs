//! `MemoryFeed`: the project's change log as clients follow it: episodes with their
//! uid, features of the project's own sets, the summary, in commit order; a deleted
//! project is gone, a pruned log says where it starts.

use std::sync::Arc;

use memmachine::store::{Change, MemoryChange, MemoryChangeKind, MemoryChanges, Store, Summary};
use memmachine_core::access::ProjectAccess;
use memmachine_core::model::{ChangeSeq, ProjectHandle};
use memmachine_domain::semantic::features::new_feature;
use memmachine_domain::semantic::model::{ClaimRule, FeatureOp, FeatureUpdate, NewFeature, SetRow};
use memmachine_domain::semantic::sets::{org_set, project_set, user_set};
use memmachine_domain::semantic::store::Routing;

use crate::conformance::support::{
    TestEmbedder, add, embed_all, handle_of, handles, numbered, org, project, project_in,
};

use MemoryChangeKind::*;

/// Everything logged after `after`, read whole; the `through` it ends at.
async fn read(
    store: &Arc<dyn Store>,
    project: ProjectHandle,
    after: ChangeSeq,
) -> (Vec<MemoryChange>, ChangeSeq) {
    match store.memory_changes(project, after, 1000).await.unwrap() {
        MemoryChanges::Read { changes, through } => (changes, through),
        other => panic!("expected entries, got {other:?}"),
    }
}

fn kinds(changes: &[MemoryChange]) -> Vec<MemoryChangeKind> {
    changes.iter().map(|c| c.kind).collect()
}

fn fact(name: &str, value: &str) -> NewFeature {
    new_feature("Profile", "cat-1", "t", name, value, serde_json::json!({}))
}

fn set_value(value: &str) -> FeatureUpdate {
    FeatureUpdate {
        value: Some(value.into()),
        value_key: Some(value.to_lowercase()),
        ..Default::default()
    }
}

async fn project_row(store: &Arc<dyn Store>, k: &ProjectAccess) -> SetRow {
    store.ensure_sets(k, vec![project_set(k)]).await.unwrap()[0].clone()
}

fn summary(first: i64, last: i64, text: &str) -> Summary {
    Summary {
        text: text.into(),
        first_seq: first,
        last_seq: last,
        updated_at_micros: chrono::Utc::now().timestamp_micros(),
    }
}

pub async fn episodes_are_logged_with_their_uid_also_once_deleted(store: Arc<dyn Store>) {
    let k = project(&store).await;
    let other = project(&store).await;
    let h = handle_of(&store, &k).await;
    let batch = numbered("m", 3);
    add(&store, &k, batch.clone()).await;
    add(&store, &other, numbered("o", 2)).await;
    let (changes, through) = read(&store, h, ChangeSeq::from_raw(0)).await;
    assert_eq!(kinds(&changes), [EpisodeAdded; 3]);
    assert_eq!(through, store.feed_head(&k).await.unwrap().change);
    for (change, new) in changes.iter().zip(&batch) {
        assert_eq!(change.episode_uid, Some(new.uid));
        let stored = change.episode.as_ref().expect("stored now");
        assert_eq!(
            (stored.uid, stored.content.as_str()),
            (new.uid, new.content.as_str())
        );
        assert!(change.feature_id.is_none() && change.feature.is_none());
        assert!(change.at_micros > 0);
    }
    let ids: Vec<i64> = changes.iter().map(|c| c.id.raw()).collect();
    assert_eq!(ids, [1, 2, 3], "gap-free from 1");

    // Deleted: both entries keep the uid, neither has the episode any more.
    assert_eq!(store.delete_episodes(&k, &[batch[1].uid]).await.unwrap(), 1);
    let (changes, _) = read(&store, h, ChangeSeq::from_raw(0)).await;
    assert_eq!(
        kinds(&changes),
        [EpisodeAdded, EpisodeAdded, EpisodeAdded, EpisodeDeleted]
    );
    assert_eq!(changes[1].episode_uid, Some(batch[1].uid));
    assert_eq!(changes[1].episode, None, "no longer stored");
    assert_eq!(changes[3].episode_uid, Some(batch[1].uid));
    assert_eq!(changes[3].episode, None);
    assert!(changes[0].episode.is_some() && changes[2].episode.is_some());

    // Forgetting deletes by the same path.
    let forgotten = store.forget_episodes(&k, &[batch[2].uid]).await.unwrap();
    assert_eq!(forgotten.counts.episodes, 1);
    let (changes, through) = read(&store, h, ChangeSeq::from_raw(4)).await;
    assert_eq!(kinds(&changes), [EpisodeDeleted]);
    assert_eq!(changes[0].episode_uid, Some(batch[2].uid));
    assert_eq!(through.raw(), 5);
    let (nothing, same) = read(&store, h, through).await;
    assert!(nothing.is_empty());
    assert_eq!(same, through, "nothing read, nothing passed");
}

pub async fn vector_entries_are_skipped_but_passed(store: Arc<dyn Store>) {
    let embedder = TestEmbedder::new(8);
    let k = project(&store).await;
    let h = handle_of(&store, &k).await;
    let batch = numbered("v", 2);
    store
        .add_episodes(&k, batch.clone(), Some(embedder.id()))
        .await
        .unwrap();
    assert_eq!(embed_all(&store, &embedder).await, 2);
    let head = store.feed_head(&k).await.unwrap().change;
    assert!(head.raw() > 2, "the vectors were logged for the indexes");
    let (changes, through) = read(&store, h, ChangeSeq::from_raw(0)).await;
    assert_eq!(kinds(&changes), [EpisodeAdded; 2]);
    assert_eq!(through, head, "read past the vector entries");
    // A page of one entry may hold no change, and still moves on.
    let MemoryChanges::Read { changes, through } = store
        .memory_changes(h, ChangeSeq::from_raw(2), 1)
        .await
        .unwrap()
    else {
        panic!("read")
    };
    assert!(changes.is_empty());
    assert_eq!(through.raw(), 3);
}

pub async fn features_are_logged_added_updated_and_deleted(store: Arc<dyn Store>) {
    let k = project(&store).await;
    let h = handle_of(&store, &k).await;
    let batch = numbered("f", 1);
    add(&store, &k, batch.clone()).await;
    let cited = handles(&store, &k, &batch).await;
    let row = project_row(&store, &k).await;
    let a = store
        .add_feature(row.internal_id, fact("a", "1"), &cited, None)
        .await
        .unwrap();
    store
        .update_feature(a.internal_id, set_value("2"), None)
        .await
        .unwrap();
    let metadata = FeatureUpdate {
        metadata: Some(serde_json::json!({"k": "v"})),
        ..Default::default()
    };
    store
        .update_feature(a.internal_id, metadata, None)
        .await
        .unwrap();
    // The same value again changes nothing a client sees.
    store
        .update_feature(a.internal_id, set_value("2"), None)
        .await
        .unwrap();
    let (changes, _) = read(&store, h, ChangeSeq::from_raw(1)).await;
    assert_eq!(
        kinds(&changes),
        [FeatureAdded, FeatureUpdated, FeatureUpdated]
    );
    for change in &changes {
        assert_eq!(change.feature_id.as_deref(), Some(a.id.as_str()));
        assert!(change.episode_uid.is_none() && change.episode.is_none());
        let now = change.feature.as_ref().expect("as it is now");
        assert_eq!(now.value, "2");
        assert_eq!(now.metadata, serde_json::json!({"k": "v"}));
        assert_eq!(now.citations, [batch[0].uid]);
    }
    let ids: Vec<i64> = changes.iter().map(|c| c.id.raw()).collect();
    assert_eq!(ids, [2, 3, 4]);

    assert_eq!(store.delete_features(&[a.internal_id]).await.unwrap(), 1);
    let (changes, _) = read(&store, h, ChangeSeq::from_raw(4)).await;
    assert_eq!(kinds(&changes), [FeatureDeleted]);
    assert_eq!(changes[0].feature_id.as_deref(), Some(a.id.as_str()));
    assert_eq!(changes[0].feature, None, "gone");
    let (earlier, _) = read(&store, h, ChangeSeq::from_raw(1)).await;
    assert!(earlier.iter().all(|c| c.feature.is_none()));
}

pub async fn a_deleted_episode_deletes_the_features_left_citing_nothing(store: Arc<dyn Store>) {
    let k = project(&store).await;
    let h = handle_of(&store, &k).await;
    let batch = numbered("c", 1);
    add(&store, &k, batch.clone()).await;
    let cited = handles(&store, &k, &batch).await;
    let row = project_row(&store, &k).await;
    let a = store
        .add_feature(row.internal_id, fact("a", "1"), &cited, None)
        .await
        .unwrap();
    store.delete_episodes(&k, &[batch[0].uid]).await.unwrap();
    let (changes, _) = read(&store, h, ChangeSeq::from_raw(2)).await;
    assert_eq!(kinds(&changes), [EpisodeDeleted, FeatureDeleted]);
    assert_eq!(changes[1].feature_id.as_deref(), Some(a.id.as_str()));
}

pub async fn a_dropped_set_logs_each_of_its_features_deleted(store: Arc<dyn Store>) {
    let k = project(&store).await;
    let h = handle_of(&store, &k).await;
    let row = store
        .ensure_sets(&k, vec![user_set(&k, "alice")])
        .await
        .unwrap()[0]
        .clone();
    let mut ids = Vec::new();
    for name in ["x", "y", "z"] {
        let f = store
            .add_feature(row.internal_id, fact(name, "v"), &[], None)
            .await
            .unwrap();
        ids.push(f.id);
    }
    let head = store.feed_head(&k).await.unwrap().change;
    assert_eq!(head.raw(), 3);
    assert_eq!(store.drop_set(row.internal_id).await.unwrap().len(), 3);
    let (changes, through) = read(&store, h, head).await;
    assert_eq!(kinds(&changes), [FeatureDeleted; 3]);
    let deleted: Vec<&str> = changes
        .iter()
        .filter_map(|c| c.feature_id.as_deref())
        .collect();
    assert_eq!(deleted, ids.iter().map(String::as_str).collect::<Vec<_>>());
    let numbers: Vec<i64> = changes.iter().map(|c| c.id.raw()).collect();
    assert_eq!(numbers, [4, 5, 6], "gap-free");
    assert_eq!(through, store.feed_head(&k).await.unwrap().change);
}

pub async fn org_level_features_are_not_followed(store: Arc<dyn Store>) {
    let o = org();
    let k = project_in(&store, &o, "p").await;
    let h = handle_of(&store, &k).await;
    let row = store.ensure_sets(&k, vec![org_set(&k)]).await.unwrap()[0].clone();
    let f = store
        .add_feature(row.internal_id, fact("o", "1"), &[], None)
        .await
        .unwrap();
    store
        .update_feature(f.internal_id, set_value("2"), None)
        .await
        .unwrap();
    store.delete_features(&[f.internal_id]).await.unwrap();
    assert_eq!(store.feed_head(&k).await.unwrap().change.raw(), 0);
    let (changes, _) = read(&store, h, ChangeSeq::from_raw(0)).await;
    assert!(changes.is_empty());
}

pub async fn summaries_are_logged_replaced(store: Arc<dyn Store>) {
    let k = project(&store).await;
    let h = handle_of(&store, &k).await;
    let batch = numbered("s", 3);
    add(&store, &k, batch.clone()).await;
    assert!(
        store
            .put_summary(&k, summary(1, 2, "first"), None)
            .await
            .unwrap()
    );
    let (changes, _) = read(&store, h, ChangeSeq::from_raw(3)).await;
    assert_eq!(kinds(&changes), [SummaryReplaced]);
    assert_eq!(changes[0].summary.as_deref(), Some("first"));
    assert!(changes[0].episode_uid.is_none() && changes[0].feature_id.is_none());
    assert!(
        store
            .put_summary(&k, summary(1, 3, "second"), Some(2))
            .await
            .unwrap()
    );
    // A deleted episode it covers drops it: the summary now is none.
    store.delete_episodes(&k, &[batch[0].uid]).await.unwrap();
    let (changes, _) = read(&store, h, ChangeSeq::from_raw(4)).await;
    assert_eq!(
        kinds(&changes),
        [SummaryReplaced, EpisodeDeleted, SummaryReplaced]
    );
    assert!(changes.iter().all(|c| c.summary.is_none()), "none now");
}

pub async fn a_deleted_project_is_gone_and_left_out_of_the_heads(store: Arc<dyn Store>) {
    let k = project(&store).await;
    let stays = project(&store).await;
    let h = handle_of(&store, &k).await;
    let kept = handle_of(&store, &stays).await;
    let batch = numbered("d", 2);
    add(&store, &k, batch.clone()).await;
    add(&store, &stays, numbered("k", 1)).await;
    let row = project_row(&store, &k).await;
    store
        .add_feature(row.internal_id, fact("a", "1"), &[], None)
        .await
        .unwrap();
    store
        .put_summary(&k, summary(1, 2, "s"), None)
        .await
        .unwrap();
    let heads = store.feed_heads(&[h, kept]).await.unwrap();
    let mut got: Vec<(ProjectHandle, i64)> =
        heads.iter().map(|f| (f.project, f.change.raw())).collect();
    got.sort_by_key(|(p, _)| p.raw());
    let mut expected = vec![(h, 4), (kept, 1)];
    expected.sort_by_key(|(p, _)| p.raw());
    assert_eq!(got, expected);

    assert!(store.delete_project(&k).await.unwrap());
    assert_eq!(
        store
            .memory_changes(h, ChangeSeq::from_raw(0), 100)
            .await
            .unwrap(),
        MemoryChanges::Gone
    );
    let heads = store.feed_heads(&[h, kept]).await.unwrap();
    let got: Vec<(ProjectHandle, i64)> =
        heads.iter().map(|f| (f.project, f.change.raw())).collect();
    assert_eq!(got, [(kept, 1)]);
    assert!(store.feed_heads(&[]).await.unwrap().is_empty());
    // The same name again is another project, with a log of its own.
    let again = project_in(&store, &k.org_id, &k.project_id).await;
    let new = handle_of(&store, &again).await;
    assert_ne!(new, h);
    assert_eq!(store.feed_head(&again).await.unwrap().change.raw(), 0);
}

pub async fn many_heads_are_read_at_once(store: Arc<dyn Store>) {
    let o = org();
    let mut handles = Vec::new();
    for i in 0..3 {
        let k = project_in(&store, &o, &format!("p{i}")).await;
        add(&store, &k, numbered("h", i + 1)).await;
        handles.push(handle_of(&store, &k).await);
    }
    // A poll of 1,000 handles, most of them no project.
    let mut asked: Vec<ProjectHandle> = (0..997)
        .map(|i| ProjectHandle::from_raw(i64::MAX - i))
        .collect();
    asked.extend(&handles);
    let heads = store.feed_heads(&asked).await.unwrap();
    let mut got: Vec<(ProjectHandle, i64)> =
        heads.iter().map(|f| (f.project, f.change.raw())).collect();
    got.sort_by_key(|(p, _)| p.raw());
    assert_eq!(got, [(handles[0], 1), (handles[1], 2), (handles[2], 3)]);
}

pub async fn a_pruned_log_names_its_oldest_change(store: Arc<dyn Store>) {
    let k = project(&store).await;
    let h = handle_of(&store, &k).await;
    add(&store, &k, numbered("p", 3)).await;
    let row = project_row(&store, &k).await;
    store
        .add_feature(row.internal_id, fact("a", "1"), &[], None)
        .await
        .unwrap();
    let future = chrono::Utc::now().timestamp_micros() + 1_000_000;
    assert_eq!(store.prune_changes(future).await.unwrap(), 3);
    assert_eq!(
        store
            .memory_changes(h, ChangeSeq::from_raw(2), 100)
            .await
            .unwrap(),
        MemoryChanges::Pruned {
            oldest: ChangeSeq::from_raw(3)
        }
    );
    let (changes, through) = read(&store, h, ChangeSeq::from_raw(3)).await;
    assert_eq!(kinds(&changes), [FeatureAdded], "the newest entry is kept");
    assert_eq!(through.raw(), 4);
}

pub async fn the_index_feed_ignores_feature_and_summary_entries(store: Arc<dyn Store>) {
    let k = project(&store).await;
    let h = handle_of(&store, &k).await;
    let batch = numbered("i", 2);
    add(&store, &k, batch.clone()).await;
    let row = project_row(&store, &k).await;
    store
        .add_feature(row.internal_id, fact("a", "1"), &[], None)
        .await
        .unwrap();
    store
        .put_summary(&k, summary(1, 1, "s"), None)
        .await
        .unwrap();
    let read = store
        .changes_since(h, ChangeSeq::from_raw(0), None, 100)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.changes.len(), 2);
    assert!(read.changes.iter().all(|c| matches!(c, Change::Added(_))));
    assert_eq!(read.through.raw(), 4, "read past the others");
}

pub async fn extraction_and_consolidation_are_logged(store: Arc<dyn Store>) {
    let k = project(&store).await;
    let h = handle_of(&store, &k).await;
    let set = project_set(&k);
    let batch = numbered("e", 2);
    let uids: Vec<uuid::Uuid> = batch.iter().map(|e| e.uid).collect();
    let routing = vec![Routing {
        set: set.clone(),
        episodes: vec![0, 1],
    }];
    store
        .add_episodes_routed(&k, batch, routing, None)
        .await
        .unwrap();
    let cited = store.resolve_episodes(&k, &uids).await.unwrap();
    let rule = ClaimRule {
        min_messages: 1,
        max_age_micros: i64::MAX,
        max_batch: 100,
        lease_micros: 60_000_000,
        now_micros: chrono::Utc::now().timestamp_micros(),
    };
    let claimed = store.claim_batch(rule).await.unwrap().expect("a batch");
    let ops = vec![
        FeatureOp::Add {
            feature: fact("x", "1"),
            citations: vec![cited[0]],
        },
        FeatureOp::Add {
            feature: fact("y", "2"),
            citations: vec![cited[1]],
        },
    ];
    assert!(store.apply_batch(&claimed, ops, None).await.unwrap());
    let (changes, through) = read(&store, h, ChangeSeq::from_raw(2)).await;
    assert_eq!(kinds(&changes), [FeatureAdded, FeatureAdded]);
    let sources: Vec<_> = changes
        .iter()
        .map(|c| c.feature.as_ref().expect("stored").internal_id)
        .collect();
    assert_eq!(changes[0].feature.as_ref().unwrap().citations, [uids[0]]);

    let row = store.find_set(&set.set_id).await.unwrap().expect("the set");
    store
        .consolidate(row.internal_id, &sources, vec![fact("xy", "1 and 2")], None)
        .await
        .unwrap();
    let (changes, _) = read(&store, h, through).await;
    let mut got = kinds(&changes);
    got.sort_by_key(|k| *k as u8);
    assert_eq!(got, [FeatureAdded, FeatureDeleted, FeatureDeleted]);
    let merged = changes
        .iter()
        .find(|c| c.kind == FeatureAdded)
        .and_then(|c| c.feature.as_ref())
        .expect("the survivor as it is now");
    assert_eq!(merged.value, "1 and 2");
    assert_eq!(merged.citations, uids, "the union");
}

/// Two replicas writing one project at once: extraction into two sets (each holding
/// the project while it applies), manual features and episode adds and deletes. No
/// write fails (no deadlock), and the log's ids run 1..=head without a gap.
pub async fn concurrent_writers_keep_the_ids_gap_free(one: Arc<dyn Store>, other: Arc<dyn Store>) {
    let k = project(&one).await;
    let h = handle_of(&one, &k).await;
    let row = project_row(&one, &k).await;
    let rounds = 4;
    for round in 0..rounds {
        // One batch for each of two sets, claimed, then applied at once.
        let batch = numbered(&format!("r{round}"), 2);
        let routing = vec![
            Routing {
                set: user_set(&k, "alice"),
                episodes: vec![0],
            },
            Routing {
                set: user_set(&k, "bob"),
                episodes: vec![1],
            },
        ];
        one.add_episodes_routed(&k, batch, routing, None)
            .await
            .unwrap();
        let rule = ClaimRule {
            min_messages: 1,
            max_age_micros: i64::MAX,
            max_batch: 100,
            lease_micros: 60_000_000,
            now_micros: chrono::Utc::now().timestamp_micros(),
        };
        let first = one.claim_batch(rule).await.unwrap().expect("a batch");
        let second = other.claim_batch(rule).await.unwrap().expect("another");
        assert_ne!(first.set.set_id, second.set.set_id);
        let apply = |store: Arc<dyn Store>, batch: memmachine_domain::semantic::model::Batch| async move {
            let ops = vec![FeatureOp::Add {
                feature: fact(&format!("f{}", uuid::Uuid::new_v4().simple()), "v"),
                citations: vec![batch.messages[0].0],
            }];
            store.apply_batch(&batch, ops, None).await
        };
        let manual = {
            let store = other.clone();
            let set = row.internal_id;
            async move {
                let f = store
                    .add_feature(set, fact(&format!("m{round}"), "1"), &[], None)
                    .await?;
                store
                    .update_feature(f.internal_id, set_value("2"), None)
                    .await
            }
        };
        let adds = {
            let store = one.clone();
            let k = k.clone();
            async move {
                let more = numbered("x", 3);
                store.add_episodes(&k, more.clone(), None).await?;
                store.delete_episodes(&k, &[more[0].uid]).await
            }
        };
        let (a, b, m, d) = tokio::join!(
            apply(one.clone(), first),
            apply(other.clone(), second),
            manual,
            adds
        );
        assert!(a.unwrap() && b.unwrap(), "both leases held");
        m.unwrap();
        d.unwrap();
    }
    let head = other.feed_head(&k).await.unwrap().change.raw();
    let mut all = Vec::new();
    let mut after = ChangeSeq::from_raw(0);
    loop {
        let MemoryChanges::Read { changes, through } =
            other.memory_changes(h, after, 7).await.unwrap()
        else {
            panic!("read")
        };
        if through == after {
            break;
        }
        all.extend(changes);
        after = through;
    }
    assert_eq!(after.raw(), head);
    let ids: Vec<i64> = all.iter().map(|c| c.id.raw()).collect();
    assert_eq!(
        ids,
        (1..=head).collect::<Vec<_>>(),
        "no gap, no vector entry"
    );
    let count = |kind| all.iter().filter(|c| c.kind == kind).count();
    let rounds = rounds as usize;
    assert_eq!(count(EpisodeAdded), 5 * rounds);
    assert_eq!(count(EpisodeDeleted), rounds);
    assert_eq!(count(FeatureAdded), 3 * rounds);
    assert_eq!(count(FeatureUpdated), rounds);
}
