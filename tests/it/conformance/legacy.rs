//! `LegacyStore`: v1 sessions and group configurations, by project.

use std::sync::Arc;

use memmachine::store::Store;
use memmachine_core::error::Error;
use memmachine_domain::legacy::store::{GroupQuery, GroupRow, SessionQuery};
use serde_json::json;

use crate::conformance::support::{key, org, project_in};

fn names(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

pub async fn sessions_open_merge_and_keep_their_configuration(store: Arc<dyn Store>) {
    let org = org();
    let missing = key(&org, "missing");
    assert!(matches!(
        store
            .open_legacy_session(&missing, "s", &[], &[], None)
            .await,
        Err(Error::NotFound(_))
    ));
    let k = project_in(&store, &org, "g").await;
    assert_eq!(store.get_legacy_session(&k, "s").await.unwrap(), None);
    let first = store
        .open_legacy_session(&k, "s", &names(&["b", "a"]), &names(&["u"]), None)
        .await
        .unwrap();
    assert_eq!(first.key, k);
    assert_eq!(first.agent_ids, names(&["a", "b"]), "sorted");
    assert_eq!(first.configuration, json!({}));
    let config = json!({"tone": "dry", "n": [1, 2]});
    let again = store
        .open_legacy_session(
            &k,
            "s",
            &names(&["c", "a"]),
            &names(&["v", "u"]),
            Some(&config),
        )
        .await
        .unwrap();
    assert_eq!(again.agent_ids, names(&["a", "b", "c"]), "merged");
    assert_eq!(again.user_ids, names(&["u", "v"]));
    assert_eq!(again.configuration, config);
    assert_eq!(again.created_at_micros, first.created_at_micros);
    let kept = store
        .open_legacy_session(&k, "s", &[], &[], None)
        .await
        .unwrap();
    assert_eq!(kept, again, "nothing given, nothing changed");
    assert_eq!(store.get_legacy_session(&k, "s").await.unwrap(), Some(kept));
    // The group's lists gained the members too.
    let group = store.get_legacy_group(&k).await.unwrap().unwrap();
    assert_eq!(group.agent_list, names(&["a", "b", "c"]));
    assert_eq!(group.user_list, names(&["u", "v"]));
    assert!(store.delete_legacy_session(&k, "s").await.unwrap());
    assert!(!store.delete_legacy_session(&k, "s").await.unwrap());
    assert_eq!(store.get_legacy_session(&k, "s").await.unwrap(), None);
}

pub async fn sessions_list_by_project_user_and_agent_in_key_order(store: Arc<dyn Store>) {
    let org = org();
    let (a, b) = (
        project_in(&store, &org, "a").await,
        project_in(&store, &org, "b").await,
    );
    let elsewhere = project_in(&store, &crate::conformance::support::org(), "a").await;
    for (k, session, agents, users) in [
        (&b, "s2", vec!["bot"], vec!["ann"]),
        (&a, "s2", vec![], vec!["bob"]),
        (&a, "s1", vec!["bot"], vec!["ann", "bob"]),
        (&a, "S0", vec!["scribe"], vec![]),
        (&elsewhere, "s1", vec!["bot"], vec!["ann"]),
    ] {
        store
            .open_legacy_session(k, session, &names(&agents), &names(&users), None)
            .await
            .unwrap();
    }
    let list = |query: SessionQuery, limit: usize| {
        let (store, org) = (store.clone(), org.clone());
        async move {
            store
                .list_legacy_sessions(&org, &query, limit)
                .await
                .unwrap()
                .into_iter()
                .map(|s| format!("{}/{}", s.key.project_id, s.session_id))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        list(SessionQuery::default(), 10).await,
        ["a/S0", "a/s1", "a/s2", "b/s2"],
        "bytewise order, this org only"
    );
    let some = |f: &str| Some(f.to_string());
    let by = |project: Option<String>, user: Option<String>, agent: Option<String>| SessionQuery {
        project_id: project,
        user_id: user,
        agent_id: agent,
        after: None,
    };
    assert_eq!(
        list(by(some("a"), None, None), 10).await,
        ["a/S0", "a/s1", "a/s2"]
    );
    assert_eq!(
        list(by(None, some("ann"), None), 10).await,
        ["a/s1", "b/s2"]
    );
    assert_eq!(
        list(by(None, None, some("bot")), 10).await,
        ["a/s1", "b/s2"]
    );
    assert_eq!(
        list(by(some("a"), some("bob"), some("bot")), 10).await,
        ["a/s1"]
    );
    assert!(list(by(None, some("nobody"), None), 10).await.is_empty());
    assert_eq!(list(SessionQuery::default(), 2).await, ["a/S0", "a/s1"]);
    let after = SessionQuery {
        after: Some(("a".into(), "s1".into())),
        ..SessionQuery::default()
    };
    assert_eq!(list(after, 10).await, ["a/s2", "b/s2"]);
}

pub async fn groups_are_the_orgs_projects_with_their_configuration(store: Arc<dyn Store>) {
    let org = org();
    assert_eq!(
        store.get_legacy_group(&key(&org, "none")).await.unwrap(),
        None
    );
    let missing = GroupRow {
        key: key(&org, "none").key().clone(),
        agent_list: vec![],
        user_list: vec![],
        configuration: json!({}),
    };
    assert!(matches!(
        store.put_legacy_group(&missing).await,
        Err(Error::NotFound(_))
    ));
    let plain = project_in(&store, &org, "plain").await;
    let configured = project_in(&store, &org, "configured").await;
    let defaults = store.get_legacy_group(&plain).await.unwrap().unwrap();
    assert_eq!(
        defaults,
        GroupRow {
            key: plain.key().clone(),
            ..missing.clone()
        },
        "a project without a stored configuration"
    );
    let row = GroupRow {
        key: configured.key().clone(),
        agent_list: names(&["bot"]),
        user_list: names(&["ann", "bob"]),
        configuration: json!({"model": {"name": "x"}}),
    };
    store.put_legacy_group(&row).await.unwrap();
    assert_eq!(
        store.get_legacy_group(&configured).await.unwrap(),
        Some(row.clone())
    );
    let replaced = GroupRow {
        user_list: names(&["cat"]),
        ..row.clone()
    };
    store.put_legacy_group(&replaced).await.unwrap();
    assert_eq!(
        store.get_legacy_group(&configured).await.unwrap(),
        Some(replaced.clone())
    );
    let list = |query: GroupQuery| {
        let (store, org) = (store.clone(), org.clone());
        async move {
            store
                .list_legacy_groups(&org, &query, 10)
                .await
                .unwrap()
                .into_iter()
                .map(|g| g.key.project_id)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(list(GroupQuery::default()).await, ["configured", "plain"]);
    let user = |u: &str| GroupQuery {
        user_id: Some(u.into()),
        ..GroupQuery::default()
    };
    assert_eq!(list(user("cat")).await, ["configured"]);
    assert!(list(user("ann")).await.is_empty(), "replaced, not merged");
    let agent = GroupQuery {
        agent_id: Some("bot".into()),
        ..GroupQuery::default()
    };
    assert_eq!(list(agent).await, ["configured"]);
    let after = GroupQuery {
        after: Some("configured".into()),
        ..GroupQuery::default()
    };
    assert_eq!(list(after).await, ["plain"]);
    let listed = store
        .list_legacy_groups(&org, &GroupQuery::default(), 1)
        .await
        .unwrap();
    assert_eq!(listed, [replaced]);
}

pub async fn deleting_a_project_deletes_its_sessions_and_group(store: Arc<dyn Store>) {
    let org = org();
    let k = project_in(&store, &org, "g").await;
    let other = project_in(&store, &org, "other").await;
    for project in [&k, &other] {
        store
            .open_legacy_session(project, "s", &names(&["bot"]), &names(&["ann"]), None)
            .await
            .unwrap();
    }
    assert!(store.delete_project(&k).await.unwrap());
    assert_eq!(store.get_legacy_session(&k, "s").await.unwrap(), None);
    assert_eq!(store.get_legacy_group(&k).await.unwrap(), None);
    project_in(&store, &org, "g").await;
    assert_eq!(store.get_legacy_session(&k, "s").await.unwrap(), None);
    let fresh = store.get_legacy_group(&k).await.unwrap().unwrap();
    assert!(fresh.agent_list.is_empty() && fresh.user_list.is_empty());
    let left = store
        .list_legacy_sessions(&org, &SessionQuery::default(), 10)
        .await
        .unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].key, other, "the other project's are untouched");
}

pub async fn concurrent_opens_of_one_session_both_land(one: Arc<dyn Store>, other: Arc<dyn Store>) {
    let org = org();
    let k = project_in(&one, &org, "g").await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = if i % 2 == 0 {
            one.clone()
        } else {
            other.clone()
        };
        let k = k.clone();
        tasks.push(tokio::spawn(async move {
            store
                .open_legacy_session(&k, "s", &[format!("agent{i}")], &[format!("user{i}")], None)
                .await
                .unwrap()
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let session = one.get_legacy_session(&k, "s").await.unwrap().unwrap();
    let expected: Vec<String> = (0..8).map(|i| format!("agent{i}")).collect();
    assert_eq!(session.agent_ids, expected);
    let group = other.get_legacy_group(&k).await.unwrap().unwrap();
    assert_eq!(group.user_list.len(), 8);
}
