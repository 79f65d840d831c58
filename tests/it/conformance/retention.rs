//! `LeaseStore` and `RetentionStore`: a named lease has one holder at a time (across
//! handles, as replicas hold them), and the expired episodes are exactly those past
//! their own `expires_at` or their project's retention.

use std::sync::Arc;

use memmachine::store::Store;
use memmachine_core::model::EpisodicConfigUpdate;

use crate::conformance::support::{add, episode, project, unique};

pub async fn a_lease_has_one_holder_until_it_expires_or_is_released(
    one: Arc<dyn Store>,
    other: Arc<dyn Store>,
) {
    let name = format!("lease-{}", unique());
    let long = 60_000_000;
    assert!(one.try_lease(&name, "a", long).await.unwrap());
    assert!(
        !other.try_lease(&name, "b", long).await.unwrap(),
        "held by a"
    );
    assert!(
        other.try_lease(&name, "a", long).await.unwrap(),
        "a renews its own"
    );
    assert!(
        other
            .try_lease(&format!("{name}-2"), "b", long)
            .await
            .unwrap(),
        "another name is another lease"
    );
    other.release_lease(&name, "b").await.unwrap();
    assert!(
        !one.try_lease(&name, "b", long).await.unwrap(),
        "b cannot release a's"
    );
    one.release_lease(&name, "a").await.unwrap();
    assert!(
        other.try_lease(&name, "b", 1).await.unwrap(),
        "released: free"
    );
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert!(
        one.try_lease(&name, "a", long).await.unwrap(),
        "b's expired"
    );
    assert!(!other.try_lease(&name, "b", long).await.unwrap());
}

pub async fn expired_episodes_are_past_their_expiry_or_their_projects_retention(
    store: Arc<dyn Store>,
) {
    let now = chrono::Utc::now().timestamp_micros();
    let hour = 3_600_000_000i64;
    let own = project(&store).await;
    let with = |content: &str, created: i64, expires: Option<i64>| {
        let mut e = episode(content, "u", &[], created);
        e.expires_at_micros = expires;
        e
    };
    let past = with("own expiry passed", now - 2 * hour, Some(now - hour));
    let future = with("own expiry ahead", now - 2 * hour, Some(now + hour));
    let forever = with("no expiry", now - 100 * hour, None);
    add(&store, &own, vec![past.clone(), future, forever]).await;
    let retained = project(&store).await;
    let old = with("older than the retention", now - 3 * hour, None);
    let young = with("younger than the retention", now - hour / 2, None);
    let both = with(
        "own expiry later than the retention",
        now - 3 * hour,
        Some(now + hour),
    );
    add(&store, &retained, vec![old.clone(), young, both.clone()]).await;
    // Without a retention, only the own expiry counts.
    let mut found = store.expired_episodes(now, 100).await.unwrap();
    found.sort();
    assert_eq!(found, [(own.key().clone(), past.uid)]);
    store
        .update_episodic_config(
            &retained,
            EpisodicConfigUpdate {
                episode_retention_micros: Some(Some(hour)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let config = store
        .get_project(&retained)
        .await
        .unwrap()
        .unwrap()
        .episodic;
    assert_eq!(config.episode_retention_micros, Some(hour));
    let mut found = store.expired_episodes(now, 100).await.unwrap();
    found.sort();
    let mut expected = vec![
        (own.key().clone(), past.uid),
        (retained.key().clone(), old.uid),
        (retained.key().clone(), both.uid),
    ];
    expected.sort();
    assert_eq!(found, expected);
    assert_eq!(
        store.expired_episodes(now, 2).await.unwrap().len(),
        2,
        "bounded"
    );
    // Deleted ones are no longer expired; a cleared retention keeps the rest.
    store.delete_episodes(&own, &[past.uid]).await.unwrap();
    store
        .update_episodic_config(
            &retained,
            EpisodicConfigUpdate {
                episode_retention_micros: Some(None),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(store.expired_episodes(now, 100).await.unwrap(), []);
    let config = store
        .get_project(&retained)
        .await
        .unwrap()
        .unwrap()
        .episodic;
    assert_eq!(config.episode_retention_micros, None);
}
