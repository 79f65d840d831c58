//! `UsageStore`: usage added to one row per (org, project, purpose, hour), budgets and
//! pauses per org, and a paused org's sets skipped by the semantic queue's claim.

use std::collections::BTreeMap;
use std::sync::Arc;

use memmachine::store::{Store, UsageEntry, UsageTotals};
use memmachine_core::access::Access;
use memmachine_core::model::NewEpisode;
use memmachine_domain::semantic::model::ClaimRule;
use memmachine_domain::semantic::sets::project_set;
use memmachine_domain::semantic::store::Routing;

use crate::conformance::support::{handle_of, org, project_in as project};

const HOUR: i64 = 3_600_000_000;

fn entry(org: &str, project: &str, purpose: &str, hour: i64, tokens: (i64, i64)) -> UsageEntry {
    UsageEntry {
        org_id: org.into(),
        project_id: project.into(),
        purpose: purpose.into(),
        hour_micros: hour,
        calls: 1,
        prompt_tokens: tokens.0,
        completion_tokens: tokens.1,
    }
}

fn totals(purpose: &str, calls: i64, prompt: i64, completion: i64) -> UsageTotals {
    UsageTotals {
        purpose: purpose.into(),
        calls,
        prompt_tokens: prompt,
        completion_tokens: completion,
    }
}

pub async fn usage_adds_up_per_bucket_and_is_read_since_an_hour(store: Arc<dyn Store>) {
    let (o, other) = (org(), org());
    let h = 1_000 * HOUR;
    for e in [
        entry(&o, "p", "extraction", h, (10, 2)),
        entry(&o, "p", "extraction", h, (5, 1)),
        entry(&o, "q", "extraction", h, (100, 10)),
        entry(&o, "p", "summary", h - HOUR, (7, 3)),
        entry(&o, "", "consolidation", h, (1, 1)),
        entry(&other, "p", "extraction", h, (1000, 1000)),
    ] {
        store.record_usage(&e).await.unwrap();
    }
    assert_eq!(
        store
            .usage_since(&Access::system_org(&o), None, h - HOUR)
            .await
            .unwrap(),
        vec![
            totals("consolidation", 1, 1, 1),
            totals("extraction", 3, 115, 13),
            totals("summary", 1, 7, 3),
        ]
    );
    assert_eq!(
        store
            .usage_since(&Access::system_org(&o), Some("p"), h)
            .await
            .unwrap(),
        vec![totals("extraction", 2, 15, 3)],
        "one project, from the later hour"
    );
    assert_eq!(
        store
            .usage_since(&Access::system_org(&o), Some("absent"), 0)
            .await
            .unwrap(),
        vec![]
    );
    assert_eq!(
        store
            .usage_since(&Access::system_org(&o), None, h + HOUR)
            .await
            .unwrap(),
        vec![]
    );
}

pub async fn usage_recorded_by_two_replicas_at_once_adds_up(
    one: Arc<dyn Store>,
    other: Arc<dyn Store>,
) {
    let o = org();
    let record = |store: Arc<dyn Store>, o: String| async move {
        for _ in 0..20 {
            store
                .record_usage(&entry(&o, "p", "extraction", HOUR, (3, 1)))
                .await
                .unwrap();
        }
    };
    tokio::join!(record(one.clone(), o.clone()), record(other, o.clone()));
    assert_eq!(
        one.usage_since(&Access::system_org(&o), None, 0)
            .await
            .unwrap(),
        vec![totals("extraction", 40, 120, 40)]
    );
}

pub async fn budgets_and_pauses_are_kept_per_org(store: Arc<dyn Store>) {
    let (o, other) = (org(), org());
    assert_eq!(store.budget(&o).await.unwrap(), None);
    store.set_budget(&o, 1000).await.unwrap();
    store.set_budget(&o, 0).await.unwrap();
    assert_eq!(store.budget(&o).await.unwrap(), Some(0), "replaced");
    assert_eq!(store.budget(&other).await.unwrap(), None);
    assert_eq!(store.pause(&o).await.unwrap(), None);
    store.set_pause(&o, Some(5)).await.unwrap();
    store.set_pause(&o, Some(9)).await.unwrap();
    assert_eq!(store.pause(&o).await.unwrap(), Some(9));
    assert_eq!(store.pause(&other).await.unwrap(), None);
    store.set_pause(&o, None).await.unwrap();
    assert_eq!(store.pause(&o).await.unwrap(), None);
    let k = project(&store, &o, "p").await;
    let handle = handle_of(&store, &k).await;
    assert_eq!(
        store.project_key(handle).await.unwrap(),
        Some(k.key().clone())
    );
    store.delete_project(&k).await.unwrap();
    assert_eq!(store.project_key(handle).await.unwrap(), None);
}

fn message() -> NewEpisode {
    NewEpisode {
        uid: uuid::Uuid::new_v4(),
        content: "hello".into(),
        producer_id: "alice".into(),
        producer_role: "user".into(),
        produced_for_id: String::new(),
        episode_type: "message".into(),
        content_type: "string".into(),
        created_at_micros: 1,
        metadata: BTreeMap::new(),
        expires_at_micros: None,
        idempotency: None,
    }
}

fn rule(now: i64) -> ClaimRule {
    ClaimRule {
        min_messages: 1,
        max_age_micros: i64::MAX,
        max_batch: 100,
        lease_micros: 60_000_000,
        now_micros: now,
    }
}

pub async fn a_paused_orgs_sets_are_not_claimed_and_keep_their_queue(store: Arc<dyn Store>) {
    let (paused, other) = (org(), org());
    let now = chrono::Utc::now().timestamp_micros();
    // The paused org's message is queued first: the claim would take it first.
    for o in [&paused, &other] {
        let k = project(&store, o, "p").await;
        let routing = vec![Routing {
            set: project_set(&k),
            episodes: vec![0],
        }];
        store
            .add_episodes_routed(&k, vec![message()], routing, None)
            .await
            .unwrap();
    }
    store.set_pause(&paused, Some(now + HOUR)).await.unwrap();
    let batch = store
        .claim_batch(rule(now))
        .await
        .unwrap()
        .expect("a batch");
    assert_eq!(batch.set.org_id, other, "the paused org is skipped");
    assert!(store.claim_batch(rule(now)).await.unwrap().is_none());
    assert_eq!(store.stats().await.unwrap().semantic_queue, 2, "queue kept");
    // A pause that has ended holds nothing back.
    store.set_pause(&paused, Some(now - 1)).await.unwrap();
    let batch = store
        .claim_batch(rule(now))
        .await
        .unwrap()
        .expect("a batch");
    assert_eq!(batch.set.org_id, paused);
}
