//! `FeatureHistory`: every earlier version of a feature, kept by the store in the same
//! transaction as the change (manual, extraction, consolidation, deletion), bounded,
//! read by id and as of a time, and dropped by feature or by cited episode.

use std::collections::BTreeMap;
use std::sync::Arc;

use memmachine::store::{ChangedBy, FeatureVersion, Store};
use memmachine_core::access::ProjectAccess;
use memmachine_core::model::NewEpisode;
use memmachine_domain::semantic::features::new_feature;
use memmachine_domain::semantic::history::features_as_of;
use memmachine_domain::semantic::model::{
    Batch, ClaimRule, FeatureOp, FeatureUpdate, NewFeature, NewSet, SetRow,
};
use memmachine_domain::semantic::sets::{org_set, project_set};
use memmachine_domain::semantic::store::Routing;

use crate::conformance::support::{org, project_in as project};

fn fact(tag: &str, name: &str, value: &str) -> NewFeature {
    new_feature("Profile", "cat-1", tag, name, value, serde_json::json!({}))
}

fn set_value(value: &str) -> FeatureUpdate {
    FeatureUpdate {
        value: Some(value.into()),
        value_key: Some(value.to_lowercase()),
        ..Default::default()
    }
}

/// Adds episodes routed to `set`; returns their handles.
async fn episodes(
    store: &Arc<dyn Store>,
    k: &ProjectAccess,
    contents: &[&str],
    set: &NewSet,
) -> Vec<memmachine_core::model::EpisodeHandle> {
    let new: Vec<NewEpisode> = contents
        .iter()
        .map(|c| NewEpisode {
            uid: uuid::Uuid::new_v4(),
            content: (*c).into(),
            producer_id: "alice".into(),
            producer_role: "user".into(),
            produced_for_id: String::new(),
            episode_type: "message".into(),
            content_type: "string".into(),
            created_at_micros: 1,
            metadata: BTreeMap::new(),
            expires_at_micros: None,
            idempotency: None,
        })
        .collect();
    let uids: Vec<uuid::Uuid> = new.iter().map(|e| e.uid).collect();
    let routing = vec![Routing {
        set: set.clone(),
        episodes: (0..contents.len()).collect(),
    }];
    store
        .add_episodes_routed(k, new, routing, None)
        .await
        .unwrap();
    store.resolve_episodes(k, &uids).await.unwrap()
}

async fn set_row(store: &Arc<dyn Store>, set: &NewSet) -> SetRow {
    store.find_set(&set.set_id).await.unwrap().expect("the set")
}

async fn claim_any(store: &Arc<dyn Store>) -> Batch {
    let rule = ClaimRule {
        min_messages: 1,
        max_age_micros: i64::MAX,
        max_batch: 100,
        lease_micros: 60_000_000,
        now_micros: chrono::Utc::now().timestamp_micros(),
    };
    store.claim_batch(rule).await.unwrap().expect("a batch")
}

fn summary(versions: &[FeatureVersion]) -> Vec<(&str, ChangedBy, bool)> {
    versions
        .iter()
        .map(|v| (v.value.as_str(), v.changed_by, v.valid_to_micros.is_some()))
        .collect()
}

pub async fn versions_are_kept_on_every_change_and_on_deletion(store: Arc<dyn Store>) {
    let o = org();
    let k = project(&store, &o, "p").await;
    let set = project_set(&k);
    let cited = episodes(&store, &k, &["likes pizza", "likes sushi"], &set).await;
    let row = set_row(&store, &set).await;
    let food = store
        .add_feature(
            row.internal_id,
            fact("t", "food", "pizza"),
            &[cited[0]],
            None,
        )
        .await
        .unwrap();
    assert_eq!(food.changed_by, ChangedBy::Manual);
    let only = store.feature_history(&food.id).await.unwrap();
    assert_eq!(summary(&only), [("pizza", ChangedBy::Manual, false)]);

    store
        .update_feature(food.internal_id, set_value("pasta"), None)
        .await
        .unwrap();
    // Metadata alone is no new version.
    let metadata = FeatureUpdate {
        metadata: Some(serde_json::json!({"k": "v"})),
        ..Default::default()
    };
    store
        .update_feature(food.internal_id, metadata, None)
        .await
        .unwrap();
    // Extraction changes it again, citing the second episode.
    let batch = claim_any(&store).await;
    let ops = vec![FeatureOp::Update {
        feature: fact("t", "food", "sushi"),
        citations: vec![cited[1]],
    }];
    assert!(store.apply_batch(&batch, ops, None).await.unwrap());
    let history = store.feature_history(&food.id).await.unwrap();
    assert_eq!(
        summary(&history),
        [
            ("pizza", ChangedBy::Manual, true),
            ("pasta", ChangedBy::Manual, true),
            ("sushi", ChangedBy::Extraction, false),
        ]
    );
    let pizza_uid = history[2].citations[0];
    assert_eq!(history[0].citations, [pizza_uid], "the first episode");
    assert_eq!(history[2].citations.len(), 2, "both episodes");
    for pair in history.windows(2) {
        assert_eq!(pair[0].valid_to_micros, Some(pair[1].valid_from_micros));
    }
    assert_eq!(history[0].valid_from_micros, food.created_at_micros);
    assert!(
        history
            .iter()
            .all(|v| v.feature_id == food.id && v.org_id == o)
    );
    assert!(history.iter().all(|v| v.project.is_some()));

    // As of each version's start, that version; before the first, nothing.
    for version in &history {
        let then = features_as_of(
            store.as_ref(),
            &[row.internal_id],
            version.valid_from_micros,
        )
        .await
        .unwrap();
        assert_eq!(then.len(), 1);
        assert_eq!(then[0].value, version.value);
        assert_eq!(then[0].id, food.id);
    }
    let before = features_as_of(
        store.as_ref(),
        &[row.internal_id],
        food.created_at_micros - 1,
    )
    .await
    .unwrap();
    assert!(before.is_empty());

    assert_eq!(store.delete_features(&[food.internal_id]).await.unwrap(), 1);
    let history = store.feature_history(&food.id).await.unwrap();
    assert_eq!(
        summary(&history),
        [
            ("pizza", ChangedBy::Manual, true),
            ("pasta", ChangedBy::Manual, true),
            ("sushi", ChangedBy::Extraction, true),
            ("sushi", ChangedBy::Deletion, true),
        ]
    );
    let ended = history[3].valid_from_micros;
    assert_eq!(history[2].valid_to_micros, Some(ended));
    assert_eq!(history[3].valid_to_micros, Some(ended), "zero length");
    let then = features_as_of(
        store.as_ref(),
        &[row.internal_id],
        history[2].valid_from_micros,
    )
    .await
    .unwrap();
    assert_eq!(then.len(), 1, "a deleted feature as it was");
    assert_eq!(then[0].value, "sushi");
    assert!(then[0].internal_id.raw() < 0, "a kept version");
    assert!(
        features_as_of(store.as_ref(), &[row.internal_id], ended)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .feature_history("no-such-feature")
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn the_bound_drops_the_oldest_versions(store: Arc<dyn Store>) {
    let o = org();
    let k = project(&store, &o, "p").await;
    let row = store.ensure_sets(&k, vec![project_set(&k)]).await.unwrap()[0].clone();
    store.set_feature_history_limit(2).await.unwrap();
    let f = store
        .add_feature(row.internal_id, fact("t", "n", "v0"), &[], None)
        .await
        .unwrap();
    for value in ["v1", "v2", "v3", "v4"] {
        store
            .update_feature(f.internal_id, set_value(value), None)
            .await
            .unwrap();
    }
    let history = store.feature_history(&f.id).await.unwrap();
    let values: Vec<&str> = history.iter().map(|v| v.value.as_str()).collect();
    assert_eq!(values, ["v2", "v3", "v4"], "two kept, and the current one");
    store.set_feature_history_limit(50).await.unwrap();
}

pub async fn consolidation_keeps_its_sources_history(store: Arc<dyn Store>) {
    let o = org();
    let k = project(&store, &o, "p").await;
    let row = store.ensure_sets(&k, vec![project_set(&k)]).await.unwrap()[0].clone();
    let x = store
        .add_feature(row.internal_id, fact("t", "x", "x0"), &[], None)
        .await
        .unwrap();
    store
        .update_feature(x.internal_id, set_value("x1"), None)
        .await
        .unwrap();
    let y = store
        .add_feature(row.internal_id, fact("t", "y", "y0"), &[], None)
        .await
        .unwrap();
    store
        .consolidate(
            row.internal_id,
            &[x.internal_id, y.internal_id],
            vec![fact("t", "xy", "x1 and y0")],
            None,
        )
        .await
        .unwrap();
    let merged = store
        .list_features(&[row.internal_id], None, 10)
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(merged.changed_by, ChangedBy::Consolidation);
    let history = store.feature_history(&merged.id).await.unwrap();
    let mut kept: Vec<(&str, &str)> = history
        .iter()
        .map(|v| (v.origin_id.as_str(), v.value.as_str()))
        .collect();
    kept.sort();
    let mut expected = vec![
        (x.id.as_str(), "x0"),
        (x.id.as_str(), "x1"),
        (y.id.as_str(), "y0"),
        (merged.id.as_str(), "x1 and y0"),
    ];
    expected.sort();
    assert_eq!(kept, expected, "the sources' versions, no tombstones");
    assert!(history.iter().all(|v| v.changed_by != ChangedBy::Deletion));
    assert!(history.iter().all(|v| v.feature_id == merged.id));
    assert!(store.feature_history(&x.id).await.unwrap().is_empty());
    // Before the merge, both sources as they were.
    let at = history
        .iter()
        .find(|v| v.value == "y0")
        .unwrap()
        .valid_from_micros;
    let mut then: Vec<String> = features_as_of(store.as_ref(), &[row.internal_id], at)
        .await
        .unwrap()
        .into_iter()
        .map(|f| f.value)
        .collect();
    then.sort();
    assert_eq!(then, ["x1", "y0"]);
}

pub async fn versions_are_dropped_by_feature_and_by_cited_episode(store: Arc<dyn Store>) {
    let o = org();
    let k = project(&store, &o, "p").await;
    let set = project_set(&k);
    let cited = episodes(&store, &k, &["a", "b"], &set).await;
    let row = set_row(&store, &set).await;
    let one = store
        .add_feature(row.internal_id, fact("t", "one", "1a"), &[cited[0]], None)
        .await
        .unwrap();
    let two = store
        .add_feature(row.internal_id, fact("t", "two", "2a"), &[cited[1]], None)
        .await
        .unwrap();
    for (f, value) in [(&one, "1b"), (&two, "2b")] {
        store
            .update_feature(f.internal_id, set_value(value), None)
            .await
            .unwrap();
    }
    assert_eq!(store.delete_versions_citing(&[cited[0]]).await.unwrap(), 1);
    let values = |h: Vec<FeatureVersion>| h.into_iter().map(|v| v.value).collect::<Vec<_>>();
    assert_eq!(
        values(store.feature_history(&one.id).await.unwrap()),
        ["1b"]
    );
    assert_eq!(
        values(store.feature_history(&two.id).await.unwrap()),
        ["2a", "2b"]
    );
    store.delete_features(&[two.internal_id]).await.unwrap();
    assert_eq!(
        store
            .delete_feature_history(&[two.internal_id])
            .await
            .unwrap(),
        3,
        "two versions and the tombstone"
    );
    assert!(store.feature_history(&two.id).await.unwrap().is_empty());
}

pub async fn deleting_a_project_drops_its_sets_history_only(store: Arc<dyn Store>) {
    let o = org();
    let a = project(&store, &o, "a").await;
    let rows = store
        .ensure_sets(&a, vec![project_set(&a), org_set(&a)])
        .await
        .unwrap();
    let own_set = rows.iter().find(|r| r.project.is_some()).unwrap();
    let org_level = rows.iter().find(|r| r.project.is_none()).unwrap();
    let own = store
        .add_feature(own_set.internal_id, fact("t", "own", "1"), &[], None)
        .await
        .unwrap();
    let shared = store
        .add_feature(org_level.internal_id, fact("t", "shared", "1"), &[], None)
        .await
        .unwrap();
    for f in [&own, &shared] {
        store
            .update_feature(f.internal_id, set_value("2"), None)
            .await
            .unwrap();
    }
    assert!(store.delete_project(&a).await.unwrap());
    assert!(store.feature_history(&own.id).await.unwrap().is_empty());
    assert_eq!(store.feature_history(&shared.id).await.unwrap().len(), 2);
}
