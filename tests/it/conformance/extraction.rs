//! `ExtractionStore`: the per-project pause of extraction (kept until changed, gone with
//! its project), honoured by the semantic queue's claim on another handle (a replica) in
//! the project's own sets and the org's shared ones, and the queued rows per set.

use std::collections::BTreeMap;
use std::sync::Arc;

use memmachine::store::{QueuedForSet, Store};
use memmachine_core::error::Error;
use memmachine_core::model::NewEpisode;
use memmachine_domain::semantic::model::ClaimRule;
use memmachine_domain::semantic::sets::{org_set, project_set};
use memmachine_domain::semantic::store::Routing;

use crate::conformance::support::{key, org, project_in as project};

fn message(content: &str) -> NewEpisode {
    NewEpisode {
        uid: uuid::Uuid::new_v4(),
        content: content.into(),
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

pub async fn extraction_pauses_are_kept_per_project(store: Arc<dyn Store>) {
    let o = org();
    let (a, b) = (
        project(&store, &o, "a").await,
        project(&store, &o, "b").await,
    );
    assert!(!store.extraction_paused(&a).await.unwrap());
    store.set_extraction_paused(&a, true).await.unwrap();
    store.set_extraction_paused(&a, true).await.unwrap();
    assert!(store.extraction_paused(&a).await.unwrap());
    assert!(!store.extraction_paused(&b).await.unwrap(), "per project");
    store.set_extraction_paused(&a, false).await.unwrap();
    store.set_extraction_paused(&a, false).await.unwrap();
    assert!(!store.extraction_paused(&a).await.unwrap());

    // Gone with its project: a project made again under the name is not paused.
    store.set_extraction_paused(&b, true).await.unwrap();
    store.delete_project(&b).await.unwrap();
    let b = project(&store, &o, "b").await;
    assert!(!store.extraction_paused(&b).await.unwrap());

    let absent = key(&o, "absent");
    assert!(matches!(
        store.extraction_paused(&absent).await,
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        store.set_extraction_paused(&absent, true).await,
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        store.queued_for_extraction(&absent).await,
        Err(Error::NotFound(_))
    ));
}

pub async fn a_paused_projects_messages_are_not_claimed_in_any_set(
    one: Arc<dyn Store>,
    other: Arc<dyn Store>,
) {
    let o = org();
    let (paused, going) = (project(&one, &o, "a").await, project(&one, &o, "b").await);
    // Each project's message lands in its project's set and the org's one shared set;
    // the paused project's is queued first, so the claim would take it first.
    for (k, content) in [(&paused, "kept back"), (&going, "goes on")] {
        let routing = vec![
            Routing {
                set: project_set(k),
                episodes: vec![0],
            },
            Routing {
                set: org_set(k),
                episodes: vec![0],
            },
        ];
        one.add_episodes_routed(k, vec![message(content)], routing, None)
            .await
            .unwrap();
    }
    one.set_extraction_paused(&paused, true).await.unwrap();
    let now = chrono::Utc::now().timestamp_micros();
    let mut claimed = Vec::new();
    while let Some(batch) = other.claim_batch(rule(now)).await.unwrap() {
        let contents: Vec<String> = batch
            .messages
            .iter()
            .map(|(_, e)| e.content.clone())
            .collect();
        claimed.push((batch.set.set_id.clone(), contents));
        assert!(claimed.len() <= 4, "claimed again: {claimed:?}");
    }
    claimed.sort();
    let mut expected = vec![
        (org_set(&going).set_id, vec!["goes on".to_string()]),
        (project_set(&going).set_id, vec!["goes on".to_string()]),
    ];
    expected.sort();
    assert_eq!(claimed, expected, "only the running project's messages");
    assert_eq!(other.stats().await.unwrap().semantic_queue, 4, "queue kept");

    // Resumed: its messages are claimable again, in both sets.
    one.set_extraction_paused(&paused, false).await.unwrap();
    let later = now + 120_000_000;
    let mut resumed = Vec::new();
    while let Some(batch) = other.claim_batch(rule(later)).await.unwrap() {
        let contents: Vec<String> = batch
            .messages
            .iter()
            .map(|(_, e)| e.content.clone())
            .collect();
        resumed.push((batch.set.set_id.clone(), contents));
        assert!(resumed.len() <= 4, "claimed again: {resumed:?}");
    }
    resumed.sort();
    // The shared set's batch now holds both; the running project's own batch, not
    // applied, came back once its lease ended.
    let both = vec!["kept back".to_string(), "goes on".to_string()];
    let mut expected = vec![
        (org_set(&paused).set_id, both),
        (project_set(&paused).set_id, vec!["kept back".to_string()]),
        (project_set(&going).set_id, vec!["goes on".to_string()]),
    ];
    expected.sort();
    assert_eq!(resumed, expected);
}

pub async fn queued_messages_are_counted_per_set_for_their_project(store: Arc<dyn Store>) {
    let o = org();
    let (a, b) = (
        project(&store, &o, "a").await,
        project(&store, &o, "b").await,
    );
    let routing = |k, n: usize| {
        vec![
            Routing {
                set: project_set(k),
                episodes: (0..n).collect(),
            },
            Routing {
                set: org_set(k),
                episodes: vec![0],
            },
        ]
    };
    store
        .add_episodes_routed(
            &a,
            vec![message("héllo"), message("world!")],
            routing(&a, 2),
            None,
        )
        .await
        .unwrap();
    store
        .add_episodes_routed(&b, vec![message("elsewhere")], routing(&b, 1), None)
        .await
        .unwrap();
    let mut expected = vec![
        QueuedForSet {
            set_id: project_set(&a).set_id,
            messages: 2,
            chars: 11,
        },
        QueuedForSet {
            set_id: org_set(&a).set_id,
            messages: 1,
            chars: 5,
        },
    ];
    expected.sort_by(|x, y| x.set_id.cmp(&y.set_id));
    let queued = store.queued_for_extraction(&a).await.unwrap();
    assert_eq!(queued.messages, 2, "distinct messages");
    assert_eq!(
        queued.sets, expected,
        "characters, not bytes; the shared set's rows of this project only"
    );
    let other = store.queued_for_extraction(&b).await.unwrap();
    assert_eq!((other.messages, other.sets.len()), (1, 2));
}
