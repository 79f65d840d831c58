//! `SemanticStore` (the semantic memory's rows). Its queues and claims are
//! database-wide (`claim_batch`, `claim_feature_embeddings`, the stats' queue figures,
//! `projects_changed`): each test needs a database of its own, and names its orgs,
//! sets and tags uniquely all the same.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use memmachine::store::Store;
use memmachine_core::access::ProjectAccess;
use memmachine_core::error::Error;
use memmachine_core::model::{
    ChangeSeq, EpisodeHandle, FeatureId, NewEpisode, ProjectHandle, SetId,
};
use memmachine_domain::semantic::features::{category_key, new_feature};
use memmachine_domain::semantic::model::{
    Batch, CategoryOwner, ClaimRule, FeatureOp, FeatureUpdate, NewCategory, NewFeature, NewSet,
    NewSetType, PendingFeatureEmbedding, SetConfig, SetKind, SetRow, Summary,
};
use memmachine_domain::semantic::sets::{org_set, project_set, user_set};
use memmachine_domain::semantic::store::Routing;

use crate::conformance::support::{
    LONG, PAST_SHORT, SHORT, TestEmbedder, key, org, project_in as project, unique,
};

fn episode(content: &str) -> NewEpisode {
    NewEpisode {
        expires_at_micros: None,
        idempotency: None,
        uid: uuid::Uuid::new_v4(),
        content: content.into(),
        producer_id: "alice".into(),
        producer_role: "user".into(),
        produced_for_id: String::new(),
        episode_type: "message".into(),
        content_type: "string".into(),
        created_at_micros: 1,
        metadata: BTreeMap::new(),
    }
}

/// The features waiting for a vector, oldest first, claimed and at once released (a
/// look that leaves the queue as it was).
async fn pending_features(store: &Arc<dyn Store>, limit: usize) -> Vec<PendingFeatureEmbedding> {
    let pending = store.claim_feature_embeddings(limit, LONG).await.unwrap();
    let ids: Vec<_> = pending.iter().map(|p| p.feature).collect();
    store.release_feature_embeddings(&ids).await.unwrap();
    pending
}

fn now() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// Ready by count only (`min` messages), at `now`.
fn by_count(min: usize, now: i64) -> ClaimRule {
    ClaimRule {
        min_messages: min,
        max_age_micros: i64::MAX,
        max_batch: 100,
        lease_micros: 60_000_000,
        now_micros: now,
    }
}

fn fact(tag: &str, name: &str, value: &str) -> NewFeature {
    new_feature("Profile", "cat-1", tag, name, value, serde_json::json!({}))
}

/// Adds `contents` as episodes routed to `sets` (every episode to every set); returns
/// the episodes' uids.
async fn add_routed(
    store: &Arc<dyn Store>,
    k: &ProjectAccess,
    contents: &[&str],
    sets: &[&NewSet],
) -> Vec<uuid::Uuid> {
    let episodes: Vec<NewEpisode> = contents.iter().map(|c| episode(c)).collect();
    let uids = episodes.iter().map(|e| e.uid).collect();
    let routing = sets
        .iter()
        .map(|set| Routing {
            set: (*set).clone(),
            episodes: (0..contents.len()).collect(),
        })
        .collect();
    store
        .add_episodes_routed(k, episodes, routing, None)
        .await
        .unwrap();
    uids
}

/// Queued messages (pending, failed), as the store's figures report them.
async fn queued(store: &Arc<dyn Store>) -> (i64, i64) {
    let stats = store.stats().await.unwrap();
    (stats.semantic_queue, stats.semantic_failed)
}

/// Claims whatever is queued (at least one message), now.
async fn claim_any(store: &Arc<dyn Store>) -> Batch {
    store
        .claim_batch(by_count(1, now()))
        .await
        .unwrap()
        .expect("a batch")
}

async fn set_row(store: &Arc<dyn Store>, set: &NewSet) -> SetRow {
    store.find_set(&set.set_id).await.unwrap().expect("the set")
}

fn message_ids(batch: &Batch) -> Vec<EpisodeHandle> {
    batch.messages.iter().map(|(id, _)| *id).collect()
}

fn values(features: &[memmachine_domain::semantic::model::Feature]) -> Vec<&str> {
    features.iter().map(|f| f.value.as_str()).collect()
}

pub async fn keyed_duplicates_are_neither_stored_nor_queued(store: Arc<dyn Store>) {
    let o = org();
    let k = project(&store, &o, "p").await;
    let pset = project_set(&k);
    let embedder = TestEmbedder::new(8);
    let keyed = |content: &str, key: &str| NewEpisode {
        idempotency: Some(memmachine_core::model::Idempotency {
            key: key.into(),
            at_micros: now(),
            window_micros: 60_000_000,
        }),
        ..episode(content)
    };
    let route = |n: usize| {
        vec![Routing {
            set: pset.clone(),
            episodes: (0..n).collect(),
        }]
    };
    let first = store
        .add_episodes_routed(&k, vec![keyed("apple", "a")], route(1), Some(embedder.id()))
        .await
        .unwrap();
    // A stored key, a key twice in the batch, and no key.
    let batch = vec![
        keyed("apple again", "a"),
        keyed("banana", "b"),
        keyed("banana again", "b"),
        episode("cherry"),
    ];
    let uids: Vec<uuid::Uuid> = batch.iter().map(|e| e.uid).collect();
    let added = store
        .add_episodes_routed(&k, batch, route(4), Some(embedder.id()))
        .await
        .unwrap();
    let flags: Vec<bool> = added.iter().map(|a| a.duplicate).collect();
    assert_eq!(flags, [true, false, true, false]);
    assert_eq!(added[0].uid, first[0].uid);
    assert_eq!(added[0].sequence_num, first[0].sequence_num);
    assert_eq!((added[1].uid, added[2].uid), (uids[1], uids[1]));
    assert_eq!(added[2].sequence_num, added[1].sequence_num);
    assert_eq!(added[3].uid, uids[3]);
    let seqs: Vec<i64> = added.iter().map(|a| a.sequence_num).collect();
    assert_eq!(seqs, [1, 2, 2, 3], "numbers stay consecutive");
    assert_eq!(store.count_episodes(&k).await.unwrap(), 3);
    assert_eq!(store.feed_head(&k).await.unwrap().change.raw(), 3);
    let waiting = store
        .claim_embeddings(embedder.id(), 10, LONG)
        .await
        .unwrap();
    let waiting: Vec<&str> = waiting.iter().map(|p| p.content.as_str()).collect();
    assert_eq!(waiting, ["apple", "banana", "cherry"]);
    assert_eq!(
        queued(&store).await,
        (3, 0),
        "each stored message queued once"
    );
}

pub async fn routed_episodes_are_stored_queued_and_claimed_by_count(store: Arc<dyn Store>) {
    let o = org();
    let k = project(&store, &o, "p").await;
    let (pset, uset) = (project_set(&k), user_set(&k, "alice"));
    let embedder = TestEmbedder::new(8);
    let seqs = store
        .add_episodes_routed(
            &k,
            vec![episode("apple"), episode("banana"), episode("cherry")],
            vec![
                Routing {
                    set: pset.clone(),
                    episodes: vec![0, 1, 2],
                },
                Routing {
                    set: uset.clone(),
                    episodes: vec![1],
                },
            ],
            Some(embedder.id()),
        )
        .await
        .unwrap();
    let seqs: Vec<i64> = seqs.iter().map(|a| a.sequence_num).collect();
    assert_eq!(seqs, [1, 2, 3]);
    assert_eq!(store.count_episodes(&k).await.unwrap(), 3);
    // Stored as add_episodes stores them: logged in the change feed (what indexes
    // read) and queued for a vector from the embedder.
    let head = store.feed_head(&k).await.unwrap();
    assert_eq!(head.change.raw(), 3);
    let logged = store
        .changes_since(head.project, ChangeSeq::from_raw(0), None, 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(logged.changes.len(), 3);
    let waiting = store
        .claim_embeddings(embedder.id(), 10, LONG)
        .await
        .unwrap();
    let waiting: Vec<&str> = waiting.iter().map(|p| p.content.as_str()).collect();
    assert_eq!(waiting, ["apple", "banana", "cherry"]);
    assert_eq!(queued(&store).await, (4, 0));
    let listed: Vec<String> = store
        .list_sets(&k)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.set_id)
        .collect();
    let mut expected = vec![pset.set_id.clone(), uset.set_id.clone()];
    expected.sort();
    assert_eq!(listed, expected);

    let t = now();
    assert!(store.claim_batch(by_count(4, t)).await.unwrap().is_none());
    let batch = store.claim_batch(by_count(3, t)).await.unwrap().unwrap();
    assert_eq!(batch.set.set_id, pset.set_id);
    assert_eq!(batch.set.kind, SetKind::Project);
    assert_eq!(batch.attempts, 0);
    let contents: Vec<&str> = batch
        .messages
        .iter()
        .map(|(_, e)| e.content.as_str())
        .collect();
    assert_eq!(contents, ["apple", "banana", "cherry"]);
    let seqs: Vec<i64> = batch.messages.iter().map(|(_, e)| e.sequence_num).collect();
    assert_eq!(seqs, [1, 2, 3]);
    // The user set has one message: not enough by count.
    assert!(store.claim_batch(by_count(2, t)).await.unwrap().is_none());
    let user = store.claim_batch(by_count(1, t)).await.unwrap().unwrap();
    assert_eq!(user.set.set_id, uset.set_id);
    assert_eq!(user.messages.len(), 1);
    assert_eq!(user.messages[0].1.content, "banana");
    // A batch is at most max_batch messages, oldest first.
    let k2 = project(&store, &o, "q").await;
    add_routed(&store, &k2, &["a", "b", "c"], &[&project_set(&k2)]).await;
    let rule = ClaimRule {
        max_batch: 2,
        ..by_count(1, t)
    };
    let first = store.claim_batch(rule).await.unwrap().unwrap();
    let contents: Vec<&str> = first
        .messages
        .iter()
        .map(|(_, e)| e.content.as_str())
        .collect();
    assert_eq!(contents, ["a", "b"]);
}

pub async fn an_old_enough_message_makes_a_set_ready(store: Arc<dyn Store>) {
    let o = org();
    let k = project(&store, &o, "p").await;
    add_routed(&store, &k, &["only"], &[&project_set(&k)]).await;
    let rule = |now_micros, max_age_micros| ClaimRule {
        min_messages: 10,
        max_age_micros,
        max_batch: 10,
        lease_micros: 1_000_000,
        now_micros,
    };
    let t = now();
    assert!(
        store
            .claim_batch(rule(t, 3_600_000_000))
            .await
            .unwrap()
            .is_none(),
        "queued less than an hour ago"
    );
    let batch = store
        .claim_batch(rule(t + 7_200_000_000, 3_600_000_000))
        .await
        .unwrap()
        .expect("queued more than an hour before `now`");
    assert_eq!(batch.messages.len(), 1);
}

pub async fn a_lease_holds_until_it_expires_and_only_its_holder_applies(store: Arc<dyn Store>) {
    let o = org();
    let k = project(&store, &o, "p").await;
    let set = project_set(&k);
    add_routed(&store, &k, &["m1", "m2"], &[&set]).await;
    let rule = |now_micros| ClaimRule {
        lease_micros: 1_000_000,
        ..by_count(1, now_micros)
    };
    let t = now();
    let first = store.claim_batch(rule(t)).await.unwrap().unwrap();
    assert!(
        store
            .claim_batch(rule(t + 500_000))
            .await
            .unwrap()
            .is_none(),
        "leased"
    );
    // New messages of a set being distilled wait for its lease.
    add_routed(&store, &k, &["m3"], &[&set]).await;
    assert!(
        store
            .claim_batch(rule(t + 500_000))
            .await
            .unwrap()
            .is_none()
    );
    let second = store
        .claim_batch(rule(t + 2_000_000))
        .await
        .unwrap()
        .expect("the lease expired");
    assert_ne!(second.lease, first.lease);
    assert_eq!(second.messages.len(), 3);
    assert_eq!(&message_ids(&second)[..2], &message_ids(&first)[..]);

    let ops = |value: &str| {
        vec![FeatureOp::Add {
            feature: fact("preferences", "food", value),
            citations: message_ids(&first),
        }]
    };
    assert!(
        !store.apply_batch(&first, ops("pizza"), None).await.unwrap(),
        "the first lease was lost"
    );
    let set_row = set_row(&store, &set).await;
    assert!(
        store
            .list_features(&[set_row.internal_id], None, 100)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(queued(&store).await, (3, 0));
    // Releasing or failing under a lost lease changes nothing either.
    store.release_batch(&first, 0).await.unwrap();
    store.fail_batch(&first, "late").await.unwrap();
    assert_eq!(queued(&store).await, (3, 0));

    assert!(
        store
            .apply_batch(&second, ops("sushi"), None)
            .await
            .unwrap()
    );
    assert_eq!(queued(&store).await, (0, 0));
    assert!(
        !store
            .apply_batch(&second, ops("sushi"), None)
            .await
            .unwrap(),
        "applied once"
    );
    let features = store
        .list_features(&[set_row.internal_id], None, 100)
        .await
        .unwrap();
    assert_eq!(values(&features), ["sushi"]);
    assert!(
        store
            .claim_batch(rule(t + 5_000_000))
            .await
            .unwrap()
            .is_none()
    );
}

pub async fn released_batches_wait_and_failed_ones_stop(store: Arc<dyn Store>) {
    let o = org();
    let k = project(&store, &o, "p").await;
    add_routed(&store, &k, &["m1", "m2"], &[&project_set(&k)]).await;
    let t = now();
    let batch = store.claim_batch(by_count(1, t)).await.unwrap().unwrap();
    store.release_batch(&batch, t + 10_000_000).await.unwrap();
    assert!(
        store
            .claim_batch(by_count(1, t + 5_000_000))
            .await
            .unwrap()
            .is_none(),
        "not before its time"
    );
    let again = store
        .claim_batch(by_count(1, t + 20_000_000))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.attempts, 1);
    assert_eq!(message_ids(&again), message_ids(&batch));
    store.fail_batch(&again, "bad answers").await.unwrap();
    assert_eq!(queued(&store).await, (0, 2));
    assert!(
        store
            .claim_batch(by_count(1, t + 100_000_000))
            .await
            .unwrap()
            .is_none()
    );
}

pub async fn the_same_fact_again_cites_instead_of_copying(store: Arc<dyn Store>) {
    let o = org();
    let k = project(&store, &o, "p").await;
    let set = project_set(&k);
    let uids = add_routed(&store, &k, &["I love pizza", "pizza again"], &[&set]).await;
    let batch = claim_any(&store).await;
    let ids = message_ids(&batch);
    let ops = vec![
        FeatureOp::Add {
            feature: fact("preferences", "favourite food", "Pizza"),
            citations: vec![ids[0]],
        },
        FeatureOp::Add {
            feature: fact("Preferences", "Favourite  Food", "pizza "),
            citations: vec![ids[1], ids[0]],
        },
        FeatureOp::Add {
            feature: fact("preferences", "favourite food", "pasta"),
            citations: vec![ids[1]],
        },
    ];
    assert!(store.apply_batch(&batch, ops, None).await.unwrap());
    let row = set_row(&store, &set).await;
    let features = store
        .list_features(&[row.internal_id], None, 100)
        .await
        .unwrap();
    assert_eq!(
        values(&features),
        ["Pizza", "pasta"],
        "one pizza, cited twice"
    );
    assert_eq!(features[0].citations, uids, "oldest first, each once");
    assert_eq!(features[1].citations, [uids[1]]);
    assert_eq!(features[0].set_id, set.set_id);
    assert_eq!(features[0].category, "Profile");
    assert_eq!(features[0].category_id, "cat-1");
    assert_eq!(features[0].tag, "preferences");
    assert!(features[0].updated_at_micros >= features[0].created_at_micros);
}

pub async fn updates_set_values_and_deletes_remove_by_key(store: Arc<dyn Store>) {
    let o = org();
    let k = project(&store, &o, "p").await;
    let set = project_set(&k);
    let uids = add_routed(&store, &k, &["a", "b"], &[&set]).await;
    let row = set_row(&store, &set).await;
    let cited = store.resolve_episodes(&k, &uids).await.unwrap();
    let food = store
        .add_feature(
            row.internal_id,
            fact("preferences", "food", "pizza"),
            &[cited[0]],
            None,
        )
        .await
        .unwrap();
    let batch = claim_any(&store).await;
    let ops = vec![
        FeatureOp::Update {
            feature: fact("Preferences", "Food", "sushi"),
            citations: vec![cited[1]],
        },
        // No feature with these keys: added.
        FeatureOp::Update {
            feature: fact("preferences", "drink", "tea"),
            citations: vec![cited[1]],
        },
        FeatureOp::Add {
            feature: fact("plans", "trip", "Rome"),
            citations: vec![cited[0]],
        },
    ];
    assert!(store.apply_batch(&batch, ops, None).await.unwrap());
    let updated = store.find_feature(&food.id).await.unwrap().unwrap();
    assert_eq!(updated.value, "sushi");
    assert_eq!(updated.tag, "Preferences");
    assert_eq!(updated.feature, "Food");
    assert_eq!(updated.citations, uids);
    assert_eq!(updated.created_at_micros, food.created_at_micros);
    let all = store
        .list_features(&[row.internal_id], None, 100)
        .await
        .unwrap();
    assert_eq!(values(&all), ["sushi", "tea", "Rome"]);

    add_routed(&store, &k, &["c"], &[&set]).await;
    let batch = claim_any(&store).await;
    let ops = vec![FeatureOp::Delete {
        match_key: fact("preferences", "food", "").match_key,
    }];
    assert!(store.apply_batch(&batch, ops, None).await.unwrap());
    let all = store
        .list_features(&[row.internal_id], None, 100)
        .await
        .unwrap();
    assert_eq!(values(&all), ["tea", "Rome"]);
    assert!(store.find_feature(&food.id).await.unwrap().is_none());
}

pub async fn manual_feature_changes(store: Arc<dyn Store>) {
    let o = org();
    let k = project(&store, &o, "p").await;
    let row = store.ensure_sets(&k, vec![project_set(&k)]).await.unwrap()[0].clone();
    let a = store
        .add_feature(row.internal_id, fact("t", "a", "1"), &[], None)
        .await
        .unwrap();
    let b = store
        .add_feature(row.internal_id, fact("t", "b", "2"), &[], None)
        .await
        .unwrap();
    let update = FeatureUpdate {
        value: Some("one".into()),
        value_key: Some("one".into()),
        metadata: Some(serde_json::json!({"source": "manual"})),
        category: Some(("Work".into(), "cat-2".into())),
        ..Default::default()
    };
    store
        .update_feature(a.internal_id, update, None)
        .await
        .unwrap();
    let got = store.find_feature(&a.id).await.unwrap().unwrap();
    assert_eq!(
        (
            got.value.as_str(),
            got.category.as_str(),
            got.category_id.as_str()
        ),
        ("one", "Work", "cat-2")
    );
    assert_eq!(got.feature, "a", "kept");
    assert_eq!(got.metadata, serde_json::json!({"source": "manual"}));
    assert!(matches!(
        store
            .update_feature(
                FeatureId::from_raw(i64::MAX),
                FeatureUpdate::default(),
                None
            )
            .await,
        Err(Error::NotFound(_))
    ));
    let by_ids = store
        .features(&[b.internal_id, FeatureId::from_raw(i64::MAX), a.internal_id])
        .await
        .unwrap();
    let ids: Vec<&str> = by_ids.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(ids, [b.id.as_str(), a.id.as_str()], "in the order asked");
    let page = store
        .list_features(&[row.internal_id], Some(a.internal_id), 10)
        .await
        .unwrap();
    assert_eq!(values(&page), ["2"]);
    assert_eq!(
        store
            .delete_features(&[a.internal_id, FeatureId::from_raw(i64::MAX)])
            .await
            .unwrap(),
        1
    );
    assert!(store.find_feature(&a.id).await.unwrap().is_none());
    assert!(matches!(
        store
            .add_feature(SetId::from_raw(i64::MAX), fact("t", "c", "3"), &[], None)
            .await,
        Err(Error::NotFound(_))
    ));
}

pub async fn category_features_match_the_category_key_exactly(store: Arc<dyn Store>) {
    let o = org();
    let k = project(&store, &o, "p").await;
    let row = store.ensure_sets(&k, vec![project_set(&k)]).await.unwrap()[0].clone();
    for category in ["Food", "food court", "foodie", "Fo", "drinks"] {
        let feature = new_feature(category, "", "t", "f", category, serde_json::json!({}));
        store
            .add_feature(row.internal_id, feature, &[], None)
            .await
            .unwrap();
    }
    let food = store
        .category_features(row.internal_id, &category_key("FOOD"))
        .await
        .unwrap();
    assert_eq!(values(&food), ["Food"]);
    let court = store
        .category_features(row.internal_id, &category_key("Food Court"))
        .await
        .unwrap();
    assert_eq!(values(&court), ["food court"]);
    let other = store
        .ensure_sets(&k, vec![user_set(&k, "bob")])
        .await
        .unwrap()[0]
        .clone();
    assert!(
        store
            .category_features(other.internal_id, &category_key("food"))
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn deleting_an_episode_drops_its_citations_and_the_features_left_without(
    store: Arc<dyn Store>,
) {
    let o = org();
    let k = project(&store, &o, "p").await;
    let set = project_set(&k);
    let uids = add_routed(&store, &k, &["a", "b"], &[&set]).await;
    let batch = claim_any(&store).await;
    let ids = message_ids(&batch);
    let ops = vec![
        FeatureOp::Add {
            feature: fact("t", "both", "x"),
            citations: ids.clone(),
        },
        FeatureOp::Add {
            feature: fact("t", "first only", "y"),
            citations: vec![ids[0]],
        },
    ];
    assert!(store.apply_batch(&batch, ops, None).await.unwrap());
    store.delete_episodes(&k, &uids[..1]).await.unwrap();
    let row = set_row(&store, &set).await;
    let features = store
        .list_features(&[row.internal_id], None, 100)
        .await
        .unwrap();
    // "both" stays with its other citation; "first only" cited nothing else and goes.
    assert_eq!(values(&features), ["x"]);
    assert_eq!(features[0].citations, [uids[1]]);
    // Deleting queued episodes takes them off the queue.
    add_routed(&store, &k, &["c"], &[&set]).await;
    assert_eq!(queued(&store).await, (1, 0));
    let c = store.list_episodes(&k, None, 2, 10).await.unwrap()[0].uid;
    store.delete_episodes(&k, &[c]).await.unwrap();
    assert_eq!(queued(&store).await, (0, 0));
}

pub async fn deleting_a_project_keeps_only_org_level_sets_and_others_citations(
    store: Arc<dyn Store>,
) {
    let o = org();
    let a = project(&store, &o, "a").await;
    let b = project(&store, &o, "b").await;
    let org = org_set(&a);
    assert_eq!(org.set_id, org_set(&b).set_id, "one org set");
    let a_uids = add_routed(&store, &a, &["a1"], &[&org, &project_set(&a)]).await;
    let b_uids = add_routed(&store, &b, &["b1"], &[&org]).await;
    let a_cited = store.resolve_episodes(&a, &a_uids).await.unwrap();
    let b_cited = store.resolve_episodes(&b, &b_uids).await.unwrap();
    let org_row = set_row(&store, &org).await;
    assert_eq!(org_row.project, None);
    assert_eq!(org_row.org_id, o);
    let a_row = set_row(&store, &project_set(&a)).await;
    assert!(a_row.project.is_some());
    let shared = store
        .add_feature(
            org_row.internal_id,
            fact("t", "shared", "v"),
            &[a_cited[0], b_cited[0]],
            None,
        )
        .await
        .unwrap();
    let own = store
        .add_feature(
            a_row.internal_id,
            fact("t", "own", "v"),
            &[a_cited[0]],
            Some("e1".into()),
        )
        .await
        .unwrap();
    let category = store
        .add_category(CategoryOwner::Set(a_row.internal_id), new_category("Work"))
        .await
        .unwrap();
    store
        .disable_category(a_row.internal_id, "profile")
        .await
        .unwrap();
    store
        .put_summary(&a, summary(1, 1, "a summary"), None)
        .await
        .unwrap();
    assert_eq!(queued(&store).await, (3, 0));
    let version = store.semantic_version(&o).await.unwrap();

    assert!(store.delete_project(&a).await.unwrap());
    assert!(
        store
            .find_set(&project_set(&a).set_id)
            .await
            .unwrap()
            .is_none()
    );
    assert!(store.find_feature(&own.id).await.unwrap().is_none());
    assert!(store.find_category(&category.id).await.unwrap().is_none());
    assert!(
        store
            .disabled_categories(a_row.internal_id)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(pending_features(&store, 10).await.is_empty());
    let kept = store.find_feature(&shared.id).await.unwrap().unwrap();
    assert_eq!(kept.citations, b_uids, "only the other project's citations");
    assert_eq!(queued(&store).await, (1, 0), "b's message");
    let sets: Vec<String> = store
        .list_sets(&b)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.set_id)
        .collect();
    assert_eq!(sets, [org.set_id.as_str()]);
    assert!(store.semantic_version(&o).await.unwrap() > version);
    // A new project of the same name starts without semantic memory.
    let again = project(&store, &o, "a").await;
    assert!(store.summary(&again).await.unwrap().is_none());
    let sets = store.list_sets(&again).await.unwrap();
    assert_eq!(sets.len(), 1);
    assert_eq!(sets[0].set_id, org.set_id);
}

fn new_category(name: &str) -> NewCategory {
    NewCategory {
        id: uuid::Uuid::new_v4().to_string(),
        name: name.into(),
        prompt: format!("extract {name}"),
        description: String::new(),
    }
}

fn summary(first_seq: i64, last_seq: i64, text: &str) -> Summary {
    Summary {
        text: text.into(),
        first_seq,
        last_seq,
        updated_at_micros: 7,
    }
}

pub async fn consolidation_replaces_features_citing_the_union(store: Arc<dyn Store>) {
    let o = org();
    let k = project(&store, &o, "p").await;
    let set = project_set(&k);
    let uids = add_routed(&store, &k, &["a", "b", "c"], &[&set]).await;
    let ids = store.resolve_episodes(&k, &uids).await.unwrap();
    let row = set_row(&store, &set).await;
    let add = |name: &'static str, cites: Vec<EpisodeHandle>| {
        let store = store.clone();
        let set = row.internal_id;
        async move {
            store
                .add_feature(set, fact("t", name, name), &cites, None)
                .await
                .unwrap()
        }
    };
    let x = add("x", vec![ids[0], ids[1]]).await;
    let y = add("y", vec![ids[1], ids[2]]).await;
    add("z", vec![ids[2]]).await;
    let version = store.semantic_version(&o).await.unwrap();
    store
        .consolidate(
            row.internal_id,
            &[x.internal_id, y.internal_id],
            vec![fact("t", "xy", "x and y")],
            Some("e1".into()),
        )
        .await
        .unwrap();
    let features = store
        .list_features(&[row.internal_id], None, 100)
        .await
        .unwrap();
    assert_eq!(values(&features), ["z", "x and y"]);
    assert_eq!(
        features[1].citations, uids,
        "the distinct union, oldest first"
    );
    assert_eq!(features[0].citations, [uids[2]], "z untouched");
    assert!(store.find_feature(&x.id).await.unwrap().is_none());
    assert!(store.semantic_version(&o).await.unwrap() > version);
    let pending = pending_features(&store, 10).await;
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].feature, features[1].internal_id);
}

pub async fn summaries_compare_and_set_and_deleted_episodes_invalidate_them(store: Arc<dyn Store>) {
    let o = org();
    let k = project(&store, &o, "p").await;
    let uids = add_routed(&store, &k, &["1", "2", "3", "4", "5"], &[]).await;
    assert!(store.summary(&k).await.unwrap().is_none());
    let (_, cursor) = store.projects_changed(0).await.unwrap();
    assert!(
        !store
            .put_summary(&k, summary(1, 2, "s"), Some(2))
            .await
            .unwrap(),
        "there is none yet"
    );
    assert!(
        store
            .put_summary(&k, summary(1, 2, "s12"), None)
            .await
            .unwrap()
    );
    assert!(
        !store
            .put_summary(&k, summary(1, 3, "lost"), None)
            .await
            .unwrap(),
        "it changed"
    );
    assert!(
        store
            .put_summary(&k, summary(1, 3, "s123"), Some(2))
            .await
            .unwrap()
    );
    assert_eq!(
        store.summary(&k).await.unwrap().unwrap(),
        summary(1, 3, "s123")
    );
    let between = store.episodes_between(&k, 1, 4, 10).await.unwrap();
    let seqs: Vec<i64> = between.iter().map(|e| e.sequence_num).collect();
    assert_eq!(seqs, [2, 3, 4]);
    let limited = store.episodes_between(&k, 1, 4, 2).await.unwrap();
    assert_eq!(limited.len(), 2);

    // Nothing new: not changed.
    let (changed, same) = store.projects_changed(cursor).await.unwrap();
    assert!(changed.is_empty());
    assert_eq!(same, cursor);
    // An episode after the summary: the summary stays, but one being written may
    // cover it, so the next put is refused once.
    store.delete_episodes(&k, &uids[4..]).await.unwrap();
    assert_eq!(store.summary(&k).await.unwrap().unwrap().last_seq, 3);
    assert!(
        !store
            .put_summary(&k, summary(1, 5, "has 5"), Some(3))
            .await
            .unwrap()
    );
    assert!(
        store
            .put_summary(&k, summary(1, 4, "s1234"), Some(3))
            .await
            .unwrap()
    );
    // An episode it covers: the summary goes, and the project is changed once.
    store.delete_episodes(&k, &uids[1..2]).await.unwrap();
    assert!(store.summary(&k).await.unwrap().is_none());
    let (changed, next) = store.projects_changed(cursor).await.unwrap();
    assert_eq!(changed, std::slice::from_ref(&k));
    assert!(next <= cursor, "no episode was added");
    let (changed, _) = store.projects_changed(next).await.unwrap();
    assert!(changed.is_empty(), "marked once");
    assert!(
        !store
            .put_summary(&k, summary(1, 4, "stale"), Some(4))
            .await
            .unwrap(),
        "the summary it extended is gone"
    );
    assert!(
        store
            .put_summary(&k, summary(1, 4, "rebuilt"), None)
            .await
            .unwrap()
    );
    // New episodes change their project.
    let other = project(&store, &o, "other").await;
    add_routed(&store, &other, &["x"], &[]).await;
    let (changed, newer) = store.projects_changed(next).await.unwrap();
    assert_eq!(changed, std::slice::from_ref(&other));
    assert!(newer > next);
    assert!(matches!(
        store.summary(&key(&o, "ghost")).await,
        Err(Error::NotFound(_))
    ));
}

/// The org's version, asserting it moved past `before`.
async fn moved(store: &Arc<dyn Store>, o: &str, before: i64, what: &str) -> i64 {
    let now = store.semantic_version(o).await.unwrap();
    assert!(now > before, "{what} moves the version ({before} -> {now})");
    now
}

pub async fn the_semantic_version_moves_with_every_feature_change(store: Arc<dyn Store>) {
    let (o, elsewhere) = (org(), org());
    let k = project(&store, &o, "p").await;
    project(&store, &elsewhere, "p").await;
    assert_eq!(store.semantic_version(&o).await.unwrap(), 0);
    let set = project_set(&k);
    add_routed(&store, &k, &["a"], &[&set]).await;
    let row = set_row(&store, &set).await;
    assert_eq!(
        store.semantic_version(&o).await.unwrap(),
        0,
        "queueing messages changes no feature"
    );
    let f = store
        .add_feature(row.internal_id, fact("t", "f", "1"), &[], None)
        .await
        .unwrap();
    let last = moved(&store, &o, 0, "add_feature").await;
    let update = FeatureUpdate {
        value: Some("2".into()),
        value_key: Some("2".into()),
        ..Default::default()
    };
    store
        .update_feature(f.internal_id, update, None)
        .await
        .unwrap();
    let last = moved(&store, &o, last, "update_feature").await;
    let batch = claim_any(&store).await;
    let ops = vec![FeatureOp::Add {
        feature: fact("t", "g", "3"),
        citations: message_ids(&batch),
    }];
    assert!(store.apply_batch(&batch, ops, None).await.unwrap());
    let last = moved(&store, &o, last, "apply_batch").await;
    let g = store
        .list_features(&[row.internal_id], Some(f.internal_id), 10)
        .await
        .unwrap()[0]
        .clone();
    assert_eq!(g.value, "3");
    store
        .consolidate(
            row.internal_id,
            &[g.internal_id],
            vec![fact("t", "h", "4")],
            None,
        )
        .await
        .unwrap();
    let last = moved(&store, &o, last, "consolidate").await;
    let category = store
        .add_category(CategoryOwner::Set(row.internal_id), new_category("t"))
        .await
        .unwrap();
    store
        .delete_category(category.internal_id, &[row.internal_id])
        .await
        .unwrap();
    let last = moved(&store, &o, last, "delete_category").await;
    let h = store
        .add_feature(row.internal_id, fact("t", "i", "5"), &[], None)
        .await
        .unwrap();
    let last = moved(&store, &o, last, "add_feature").await;
    assert_eq!(store.delete_features(&[h.internal_id]).await.unwrap(), 1);
    let last = moved(&store, &o, last, "delete_features").await;
    assert_eq!(
        store.semantic_version(&elsewhere).await.unwrap(),
        0,
        "other orgs' versions stay"
    );
    store.delete_project(&k).await.unwrap();
    moved(&store, &o, last, "deleting the project").await;
}

pub async fn feature_vectors_are_queued_stored_and_abandoned(store: Arc<dyn Store>) {
    let o = org();
    let k = project(&store, &o, "p").await;
    let row = store.ensure_sets(&k, vec![project_set(&k)]).await.unwrap()[0].clone();
    let lexical = store
        .add_feature(row.internal_id, fact("t", "colour", "blue"), &[], None)
        .await
        .unwrap();
    let a = store
        .add_feature(
            row.internal_id,
            new_feature(
                "Profile",
                "",
                "t",
                "food",
                "pizza",
                serde_json::json!({"n": 3, "s": "text", "b": true}),
            ),
            &[],
            Some("e1".into()),
        )
        .await
        .unwrap();
    let b = store
        .add_feature(
            row.internal_id,
            fact("t", "drink", "tea"),
            &[],
            Some("e2".into()),
        )
        .await
        .unwrap();
    let pending = pending_features(&store, 10).await;
    let got: Vec<(FeatureId, &str, &str)> = pending
        .iter()
        .map(|p| (p.feature, p.text.as_str(), p.embedder.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (a.internal_id, "food: pizza", "e1"),
            (b.internal_id, "drink: tea", "e2")
        ]
    );
    assert_eq!(pending_features(&store, 1).await.len(), 1);
    let version = store.semantic_version(&o).await.unwrap();
    store
        .store_feature_embeddings("e1", vec![(a.internal_id, vec![0.5, -1.0])])
        .await
        .unwrap();
    assert!(
        store.semantic_version(&o).await.unwrap() > version,
        "the index is rebuilt with the vector"
    );
    store
        .abandon_feature_embeddings(&[b.internal_id])
        .await
        .unwrap();
    assert!(pending_features(&store, 10).await.is_empty());
    let indexed = store.indexed_features(&[row.internal_id]).await.unwrap();
    assert_eq!(indexed.len(), 3);
    let of = |id: FeatureId| indexed.iter().find(|f| f.internal_id == id).unwrap();
    assert_eq!(
        of(a.internal_id).vector,
        Some(("e1".into(), vec![0.5, -1.0]))
    );
    assert_eq!(of(b.internal_id).vector, None);
    assert_eq!(of(lexical.internal_id).vector, None);
    let metadata: Vec<(&str, &str)> = of(a.internal_id)
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(metadata, [("b", "true"), ("n", "3"), ("s", "text")]);
    assert_eq!(of(a.internal_id).set_id, row.set_id);
    assert_eq!(of(a.internal_id).value, "pizza");
    // A changed value is queued again; its vector is replaced when it comes.
    let update = FeatureUpdate {
        value: Some("pasta".into()),
        value_key: Some("pasta".into()),
        ..Default::default()
    };
    store
        .update_feature(a.internal_id, update, Some("e1".into()))
        .await
        .unwrap();
    let pending = pending_features(&store, 10).await;
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].text, "food: pasta");
    store
        .store_feature_embeddings(
            "e1",
            vec![
                (a.internal_id, vec![1.0, 0.0]),
                (FeatureId::from_raw(i64::MAX), vec![1.0]),
            ],
        )
        .await
        .unwrap();
    assert!(pending_features(&store, 10).await.is_empty());
    let indexed = store.indexed_features(&[row.internal_id]).await.unwrap();
    let a_now = indexed
        .iter()
        .find(|f| f.internal_id == a.internal_id)
        .unwrap();
    assert_eq!(a_now.vector, Some(("e1".into(), vec![1.0, 0.0])));
}

pub async fn set_types_are_unique_per_level_and_tags_and_seen_by_their_org(store: Arc<dyn Store>) {
    let (o, x) = (org(), org());
    let a = project(&store, &o, "a").await;
    let b = project(&store, &o, "b").await;
    let x = project(&store, &x, "a").await;
    let new = |org_level: bool, tags: &[&str]| NewSetType {
        id: uuid::Uuid::new_v4().to_string(),
        is_org_level: org_level,
        name: "by team".into(),
        description: "d".into(),
        tags: tags.iter().map(|t| t.to_string()).collect(),
    };
    let team = store
        .create_set_type(&a, new(true, &["team"]))
        .await
        .unwrap();
    assert_eq!(team.tags, ["team"]);
    assert!(team.is_org_level);
    assert_eq!(team.org_id, o);
    let local = store
        .create_set_type(&a, new(false, &["team"]))
        .await
        .unwrap();
    match store.create_set_type(&b, new(true, &["team"])).await {
        Err(Error::AlreadyExists(message)) => assert!(message.contains(&team.id), "{message}"),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    // Not visible to b: a's project-level type.
    let b_local = store
        .create_set_type(&b, new(false, &["team"]))
        .await
        .unwrap();
    // Another org sees none of them.
    store
        .create_set_type(&x, new(true, &["team"]))
        .await
        .unwrap();
    let ids = |types: Vec<memmachine_domain::semantic::model::SetType>| -> Vec<String> {
        types.into_iter().map(|t| t.id).collect()
    };
    assert_eq!(
        ids(store.list_set_types(&a).await.unwrap()),
        [team.id.clone(), local.id.clone()]
    );
    assert_eq!(
        ids(store.list_set_types(&b).await.unwrap()),
        [team.id.clone(), b_local.id.clone()]
    );

    // Sets of a type, with templates; deleting the type keeps its sets.
    let tags = BTreeMap::from([("team".to_string(), "red".to_string())]);
    let custom = NewSet {
        set_id: format!("mem_{}_set_red", unique()),
        kind: SetKind::Custom,
        org_level: true,
        set_type: Some(team.internal_id),
        tags: tags.clone(),
    };
    let rows = store
        .ensure_sets(&a, vec![custom.clone(), custom.clone()])
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0], rows[1], "created once");
    assert_eq!(rows[0].tags, tags);
    assert_eq!(rows[0].project, None);
    let of_type = store.sets_of_type(team.internal_id).await.unwrap();
    assert_eq!(of_type, [rows[0].clone()]);
    let template = store
        .add_category(
            CategoryOwner::SetType(team.internal_id),
            new_category("Goals"),
        )
        .await
        .unwrap();
    assert_eq!(template.owner, CategoryOwner::SetType(team.internal_id));
    assert!(store.delete_set_type(team.internal_id).await.unwrap());
    assert!(!store.delete_set_type(team.internal_id).await.unwrap());
    assert!(store.find_category(&template.id).await.unwrap().is_none());
    let kept = store.find_set(&custom.set_id).await.unwrap().unwrap();
    assert_eq!(kept.set_type, None);
    // Both of the org's projects see the org-level set.
    assert!(
        store
            .list_sets(&b)
            .await
            .unwrap()
            .iter()
            .any(|s| s.set_id == custom.set_id)
    );
    assert!(store.list_sets(&x).await.unwrap().is_empty());

    store
        .configure_set(
            kept.internal_id,
            SetConfig {
                embedder: "small".into(),
                llm: "fast".into(),
            },
        )
        .await
        .unwrap();
    let configured = store.find_set(&custom.set_id).await.unwrap().unwrap();
    assert_eq!(configured.config.embedder, "small");
    assert_eq!(configured.config.llm, "fast");
    let project = store.get_project(&a).await.unwrap().unwrap();
    assert_eq!(
        store.project_config(project.internal_id).await.unwrap(),
        Some(project.config)
    );
    assert_eq!(
        store
            .project_config(ProjectHandle::from_raw(i64::MAX))
            .await
            .unwrap(),
        None
    );
    assert!(matches!(
        store
            .create_set_type(&key(&o, "ghost"), new(true, &["q"]))
            .await,
        Err(Error::NotFound(_))
    ));
}

pub async fn categories_and_tags_are_named_once_per_owner(store: Arc<dyn Store>) {
    let o = org();
    let k = project(&store, &o, "p").await;
    let (tag1, tag2, tag3) = (unique(), unique(), unique());
    let sets = store
        .ensure_sets(&k, vec![project_set(&k), user_set(&k, "alice")])
        .await
        .unwrap();
    let (set, other) = (sets[0].internal_id, sets[1].internal_id);
    let work = store
        .add_category(CategoryOwner::Set(set), new_category("Work"))
        .await
        .unwrap();
    assert!(matches!(
        store
            .add_category(CategoryOwner::Set(set), new_category("work"))
            .await,
        Err(Error::AlreadyExists(_))
    ));
    // Another owner may use the name.
    store
        .add_category(CategoryOwner::Set(other), new_category("Work"))
        .await
        .unwrap();
    let tag = store
        .add_tag(work.internal_id, &tag1, "projects", "what they work on")
        .await
        .unwrap();
    assert!(matches!(
        store.add_tag(work.internal_id, &tag2, "Projects", "").await,
        Err(Error::AlreadyExists(_))
    ));
    store
        .add_tag(work.internal_id, &tag3, "tools", "")
        .await
        .unwrap();
    let found = store.find_category(&work.id).await.unwrap().unwrap();
    let names: Vec<&str> = found.tags.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["projects", "tools"]);
    assert_eq!(found.prompt, "extract Work");
    assert_eq!(store.find_tag(&tag1).await.unwrap(), Some(tag.clone()));
    store.delete_tag(tag.internal_id).await.unwrap();
    assert!(store.find_tag(&tag1).await.unwrap().is_none());
    let of = store
        .categories_of(&[CategoryOwner::Set(set), CategoryOwner::Set(other)])
        .await
        .unwrap();
    assert_eq!(of.len(), 2);
    assert_eq!(of[0].tags.len(), 1);
    let only = store
        .categories_of(&[CategoryOwner::Set(other)])
        .await
        .unwrap();
    assert_eq!(only.len(), 1);
    assert_eq!(only[0].owner, CategoryOwner::Set(other));

    // Deleting a category deletes the features the sets using it hold in it.
    let in_work = new_feature("WORK", "", "t", "job", "baker", serde_json::json!({}));
    let kept = new_feature("Hobbies", "", "t", "sport", "chess", serde_json::json!({}));
    let other_set = new_feature("Work", "", "t", "job", "painter", serde_json::json!({}));
    let in_work = store.add_feature(set, in_work, &[], None).await.unwrap();
    let kept = store.add_feature(set, kept, &[], None).await.unwrap();
    let other_set = store
        .add_feature(other, other_set, &[], None)
        .await
        .unwrap();
    store
        .delete_category(work.internal_id, &[set])
        .await
        .unwrap();
    assert!(store.find_category(&work.id).await.unwrap().is_none());
    assert!(
        store.find_tag(&tag3).await.unwrap().is_none(),
        "tags go too"
    );
    assert!(store.find_feature(&in_work.id).await.unwrap().is_none());
    assert!(store.find_feature(&kept.id).await.unwrap().is_some());
    assert!(store.find_feature(&other_set.id).await.unwrap().is_some());

    store.disable_category(set, "profile").await.unwrap();
    store.disable_category(set, "Profile").await.unwrap();
    store.disable_category(set, "goals").await.unwrap();
    assert_eq!(
        store.disabled_categories(set).await.unwrap(),
        ["goals", "profile"]
    );
    assert!(store.disabled_categories(other).await.unwrap().is_empty());
}

pub async fn episodes_resolve_within_their_project_only(store: Arc<dyn Store>) {
    let o = org();
    let a = project(&store, &o, "a").await;
    let b = project(&store, &o, "b").await;
    let a_uids = add_routed(&store, &a, &["1", "2"], &[]).await;
    let b_uids = add_routed(&store, &b, &["3"], &[]).await;
    let ids = store
        .resolve_episodes(&a, &[a_uids[1], a_uids[0]])
        .await
        .unwrap();
    assert_eq!(ids.len(), 2);
    assert!(ids[0] > ids[1], "in the order asked");
    match store.resolve_episodes(&a, &[a_uids[0], b_uids[0]]).await {
        Err(Error::NotFound(message)) => {
            assert!(message.contains(&b_uids[0].to_string()), "{message}");
            assert!(!message.contains(&a_uids[0].to_string()), "{message}");
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(matches!(
        store
            .add_episodes_routed(&key(&o, "ghost"), vec![episode("x")], vec![], None)
            .await,
        Err(Error::NotFound(_))
    ));
}

pub async fn each_message_knows_what_came_before_it_in_its_project(store: Arc<dyn Store>) {
    let o = org();
    let a = project(&store, &o, "one").await;
    let b = project(&store, &o, "two").await;
    let set = user_set(&a, "u");
    add_routed(&store, &a, &["question", "answer"], &[&set]).await;
    add_routed(&store, &b, &["elsewhere"], &[&user_set(&b, "u")]).await;
    add_routed(&store, &a, &["follow-up"], &[&set]).await;
    let batch = claim_any(&store).await;
    let rows = message_ids(&batch);
    let before = store.preceding_episodes(&rows).await.unwrap();
    let contents: Vec<Option<&str>> = before
        .iter()
        .map(|b| b.as_ref().map(|(_, e)| e.content.as_str()))
        .collect();
    // The first has nothing before it; another project's episode never counts.
    assert_eq!(contents, [None, Some("question"), Some("answer")]);
    assert_eq!(before[1].as_ref().unwrap().0, rows[0]);
}

pub async fn feature_vector_leases_hold_until_released_or_expired(store: Arc<dyn Store>) {
    let o = org();
    let k = project(&store, &o, "p").await;
    let row = store.ensure_sets(&k, vec![project_set(&k)]).await.unwrap()[0].clone();
    let mut features = Vec::new();
    for name in ["a", "b"] {
        let f = store
            .add_feature(
                row.internal_id,
                fact("t", name, name),
                &[],
                Some("e1".into()),
            )
            .await
            .unwrap();
        features.push(f.internal_id);
    }
    let (a, b) = (features[0], features[1]);
    let claim = |limit: usize, lease: Duration| {
        let store = store.clone();
        async move {
            let claimed = store.claim_feature_embeddings(limit, lease).await.unwrap();
            claimed
                .into_iter()
                .map(|p| p.feature)
                .collect::<Vec<FeatureId>>()
        }
    };
    assert_eq!(claim(1, LONG).await, [a], "oldest first");
    assert_eq!(claim(10, LONG).await, [b], "not the leased one");
    assert!(claim(10, LONG).await.is_empty());
    store.release_feature_embeddings(&[a]).await.unwrap();
    assert_eq!(claim(10, SHORT).await, [a], "released: at once");
    assert!(claim(10, LONG).await.is_empty());
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(claim(10, LONG).await, [a], "an expired lease is taken over");
    store
        .store_feature_embeddings("e1", vec![(a, vec![1.0, 0.0])])
        .await
        .unwrap();
    store.release_feature_embeddings(&[a, b]).await.unwrap();
    assert_eq!(claim(10, LONG).await, [b], "a's vector came: off the queue");
}

/// What a search reads of `k` (and its org `o`) through `store`, read twice so that a
/// backend keeping these rows between reads has them kept.
async fn read_per_search(
    store: &Arc<dyn Store>,
    k: &ProjectAccess,
    o: &str,
) -> (
    Option<memmachine_core::model::Project>,
    Option<memmachine::store::FeedHead>,
    Option<Summary>,
    i64,
) {
    let mut seen = None;
    for _ in 0..2 {
        let project = store.get_project(k).await.unwrap();
        let head = match store.feed_head(k).await {
            Ok(head) => Some(head),
            Err(Error::NotFound(_)) => None,
            Err(err) => panic!("feed head: {err}"),
        };
        let summary = match store.summary(k).await {
            Ok(summary) => summary,
            Err(Error::NotFound(_)) => None,
            Err(err) => panic!("summary: {err}"),
        };
        let version = store.semantic_version(o).await.unwrap();
        let now = (project, head, summary, version);
        if let Some(before) = &seen {
            assert_eq!(before, &now, "nothing was written between the two reads");
        }
        seen = Some(now);
    }
    seen.expect("read")
}

/// The rows every search reads (the project, its feed head and summary, its org's
/// semantic version) follow a write at once, the other handle's (another replica's) and
/// the reader's own, however often they were read before it.
pub async fn rows_read_per_search_follow_every_write_at_once(
    one: Arc<dyn Store>,
    other: Arc<dyn Store>,
) {
    let o = org();
    let k = project(&one, &o, "p").await;
    let (_, first_head, none, version) = read_per_search(&other, &k, &o).await;
    assert!(none.is_none());
    one.update_episodic_config(
        &k,
        memmachine_core::model::EpisodicConfigUpdate {
            long_term_memory_enabled: Some(false),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let (project_row, ..) = read_per_search(&other, &k, &o).await;
    assert!(
        !project_row
            .expect("the project")
            .episodic
            .long_term_memory_enabled
    );
    let set = project_set(&k);
    add_routed(&one, &k, &["a", "b"], &[&set]).await;
    let (_, head, ..) = read_per_search(&other, &k, &o).await;
    assert!(head.expect("the head").change > first_head.expect("the head").change);
    assert!(
        one.put_summary(&k, summary(1, 1, "s1"), None)
            .await
            .unwrap()
    );
    let (_, _, kept, _) = read_per_search(&other, &k, &o).await;
    assert_eq!(kept.expect("a summary").text, "s1");
    let row = set_row(&one, &set).await;
    one.add_feature(row.internal_id, fact("t", "f", "1"), &[], None)
        .await
        .unwrap();
    let (.., moved_to) = read_per_search(&other, &k, &o).await;
    assert!(moved_to > version, "{version} -> {moved_to}");
    // The reader's own write, then the other's delete.
    assert!(
        other
            .put_summary(&k, summary(1, 2, "s2"), Some(1))
            .await
            .unwrap()
    );
    let (_, _, kept, _) = read_per_search(&other, &k, &o).await;
    assert_eq!(kept.expect("a summary").text, "s2");
    assert!(one.delete_project(&k).await.unwrap());
    let (gone, head, kept, _) = read_per_search(&other, &k, &o).await;
    assert!(gone.is_none() && head.is_none() && kept.is_none());
}
