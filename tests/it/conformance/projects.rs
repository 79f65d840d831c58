//! `ProjectStore`.

use std::sync::Arc;

use memmachine::store::Store;
use memmachine_core::error::Error;
use memmachine_core::model::{
    EpisodicConfigUpdate, Project, ProjectConfig, ProjectKey, RankingWeights, RankingWeightsUpdate,
};

use crate::conformance::support::{add, episode, key, org, project, project_in, unique};

pub async fn the_universal_project_exists(store: Arc<dyn Store>) {
    let p = store
        .get_project(&memmachine_core::access::Access::system(
            ProjectKey::universal(),
        ))
        .await
        .unwrap()
        .unwrap();
    assert!(p.key.is_universal());
    assert!(p.episodic.enabled);
}

pub async fn projects_are_created_once_got_and_deleted(store: Arc<dyn Store>) {
    let k = key(&org(), "p1");
    let config = ProjectConfig {
        embedder: "hash".into(),
        reranker: "rrf".into(),
    };
    let created = store.create_project(&k, "first", &config).await.unwrap();
    assert_eq!(created.key, k);
    assert_eq!(created.description, "first");
    assert_eq!(created.config, config);
    assert_eq!(created.episodic, Default::default());
    assert!(created.created_at_micros > 0);
    match store.create_project(&k, "again", &config).await {
        Err(Error::AlreadyExists(message)) => assert!(message.contains(&k.to_string())),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    let got = store.get_project(&k).await.unwrap().unwrap();
    assert_eq!(got, created, "the second create changed nothing");
    assert!(store.delete_project(&k).await.unwrap());
    assert!(!store.delete_project(&k).await.unwrap(), "already gone");
    assert!(store.get_project(&k).await.unwrap().is_none());
    let ghost = key(&org(), "ghost");
    assert!(store.get_project(&ghost).await.unwrap().is_none());
    assert!(!store.delete_project(&ghost).await.unwrap());
}

pub async fn projects_list_in_key_order_and_page(store: Arc<dyn Store>) {
    // Two orgs of this test: `a-X` sorts before `b-X`.
    let suffix = unique();
    let (a, b) = (format!("a-{suffix}"), format!("b-{suffix}"));
    for (o, p) in [(&b, "p1"), (&a, "z"), (&b, "p0"), (&b, "p2")] {
        project_in(&store, o, p).await;
    }
    let names = |projects: Vec<memmachine_core::model::Project>| -> Vec<String> {
        projects.into_iter().map(|p| p.key.to_string()).collect()
    };
    let in_b = names(store.list_projects(Some(&b), None, 100).await.unwrap());
    assert_eq!(
        in_b,
        [format!("{b}/p0"), format!("{b}/p1"), format!("{b}/p2")]
    );
    let page = store
        .list_projects(Some(&b), Some(&key(&b, "p0")), 1)
        .await
        .unwrap();
    assert_eq!(names(page), [format!("{b}/p1")], "after p0, one");
    let last = store
        .list_projects(Some(&b), Some(&key(&b, "p2")), 10)
        .await
        .unwrap();
    assert!(last.is_empty());
    // Without an org: every project in key order; paging by the last one seen walks
    // them all once.
    let (mut seen, mut after) = (Vec::new(), None::<ProjectKey>);
    loop {
        let page = store.list_projects(None, after.as_ref(), 2).await.unwrap();
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        after = Some(last.key.clone());
        seen.extend(page.into_iter().map(|p| p.key));
    }
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "in key order: {seen:?}"
    );
    let ours: Vec<String> = seen
        .iter()
        .filter(|k| k.org_id == a || k.org_id == b)
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        ours,
        [
            format!("{a}/z"),
            format!("{b}/p0"),
            format!("{b}/p1"),
            format!("{b}/p2")
        ]
    );
    assert!(seen.contains(&ProjectKey::universal()));
}

pub async fn episodic_config_updates_are_partial(store: Arc<dyn Store>) {
    let k = project(&store).await;
    let fresh = store.get_project(&k).await.unwrap().unwrap().episodic;
    assert!(fresh.participant_aware, "on by default");
    let config = store
        .update_episodic_config(
            &k,
            EpisodicConfigUpdate {
                long_term_memory_enabled: Some(false),
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert!(config.enabled && !config.long_term_memory_enabled && config.short_term_memory_enabled);
    let config = store
        .update_episodic_config(
            &k,
            EpisodicConfigUpdate {
                enabled: Some(false),
                short_term_memory_enabled: Some(false),
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert!(
        !config.enabled && !config.long_term_memory_enabled && !config.short_term_memory_enabled
    );
    assert!(config.participant_aware, "kept when not named");
    let config = store
        .update_episodic_config(
            &k,
            EpisodicConfigUpdate {
                participant_aware: Some(false),
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert!(!config.participant_aware && !config.enabled);
    let stored = store.get_project(&k).await.unwrap().unwrap();
    assert_eq!(stored.episodic, config);
    let ghost = key(&org(), "ghost");
    let update = EpisodicConfigUpdate::default();
    assert!(
        store
            .update_episodic_config(&ghost, update)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store.get_project(&ghost).await.unwrap().is_none(),
        "not created"
    );
}

pub async fn deleting_a_project_deletes_its_episodes(store: Arc<dyn Store>) {
    let k = project(&store).await;
    let other = project(&store).await;
    add(
        &store,
        &k,
        vec![episode("the secret word is plum", "u", &[], 1)],
    )
    .await;
    add(&store, &other, vec![episode("kept", "u", &[], 1)]).await;
    assert!(store.delete_project(&k).await.unwrap());
    assert!(matches!(
        store.count_episodes(&k).await,
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        store.list_episodes(&k, None, 0, 10).await,
        Err(Error::NotFound(_))
    ));
    assert_eq!(
        store.count_episodes(&other).await.unwrap(),
        1,
        "others keep theirs"
    );
    // A new project of the same name starts empty, numbering from 1.
    project_in(&store, &k.org_id, &k.project_id).await;
    assert_eq!(store.count_episodes(&k).await.unwrap(), 0);
    assert!(
        store
            .list_episodes(&k, None, 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        add(&store, &k, vec![episode("new", "u", &[], 2)]).await,
        [1]
    );
}

pub async fn ranking_weights_round_trip_and_update_partially(store: Arc<dyn Store>) {
    let k = project(&store).await;
    let fresh = store.get_project(&k).await.unwrap().unwrap().episodic;
    assert_eq!(
        fresh.ranking_weights,
        RankingWeights::DEFAULT,
        "absent: defaults"
    );
    let config = store
        .update_episodic_config(
            &k,
            EpisodicConfigUpdate {
                ranking_weights: RankingWeightsUpdate {
                    dense: Some(2.5),
                    time: Some(0.25),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .unwrap();
    let set = RankingWeights {
        dense: 2.5,
        time: 0.25,
        ..RankingWeights::DEFAULT
    };
    assert_eq!(config.ranking_weights, set);
    assert_eq!(
        store.get_project(&k).await.unwrap().unwrap().episodic,
        config
    );
    // One field changes; the others (set or default) stay.
    let config = store
        .update_episodic_config(
            &k,
            EpisodicConfigUpdate {
                ranking_weights: RankingWeightsUpdate {
                    participant: Some(0.0),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .unwrap();
    let set = RankingWeights {
        participant: 0.0,
        ..set
    };
    assert_eq!(config.ranking_weights, set);
    // Another setting's update leaves the weights.
    let config = store
        .update_episodic_config(
            &k,
            EpisodicConfigUpdate {
                participant_aware: Some(false),
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(config.ranking_weights, set);
    let stored = store.get_project(&k).await.unwrap().unwrap();
    assert_eq!(stored.episodic.ranking_weights, set);
    // An import restores them as exported.
    let copy = key(&org(), &format!("copy-{}", unique()));
    let restored = store
        .restore_project(&Project {
            key: copy.key().clone(),
            ..stored
        })
        .await
        .unwrap();
    assert_eq!(restored.episodic.ranking_weights, set);
    let read = store.get_project(&copy).await.unwrap().unwrap();
    assert_eq!(read.episodic.ranking_weights, set);
}
