//! Moving data between stores: `memmachine export` and `import`, on real SQLite files
//! (through `memmachine::transfer` and through the real binary).
//!
//! sqlite-only: moves data between stores it opens itself.

use memmachine_core::access::{Access, ProjectAccess};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use crate::common;
use crate::common::child::{self, Run};
use memmachine::store::Store;
use memmachine::store::sqlite::SqliteStore;
use memmachine_core::model::{
    EpisodeHandle, EpisodicConfigUpdate, NewEpisode, ProjectConfig, ProjectKey,
};
use memmachine_domain::embed::hash::HashEmbedder;
use memmachine_domain::semantic::features::new_feature;
use memmachine_domain::semantic::model::{
    CategoryOwner, NewCategory, NewSet, NewSetType, SetConfig, SetKind, Summary,
};
use memmachine_domain::transfer::{Counts, ExportOptions, ImportOptions, export, import};

async fn sqlite(dir: &Path) -> Arc<dyn Store> {
    Arc::new(SqliteStore::open_async(dir).await.unwrap())
}

fn key(org: &str, project: &str) -> ProjectAccess {
    Access::system(ProjectKey::parse(org, project).unwrap())
}

fn episode(content: &str, producer: &str, meta: &[(&str, &str)], at: i64) -> NewEpisode {
    NewEpisode {
        expires_at_micros: None,
        idempotency: None,
        uid: uuid::Uuid::new_v4(),
        content: content.into(),
        producer_id: producer.into(),
        producer_role: if producer == "bot" {
            "assistant"
        } else {
            "user"
        }
        .into(),
        produced_for_id: if producer == "bot" { "alice" } else { "" }.into(),
        episode_type: "message".into(),
        content_type: "string".into(),
        created_at_micros: at,
        metadata: meta
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
    }
}

fn id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Adds episodes with vectors from the hash embedder; returns their handles.
async fn add_embedded(
    store: &Arc<dyn Store>,
    key: &ProjectAccess,
    new: Vec<NewEpisode>,
) -> Vec<EpisodeHandle> {
    let embedder = HashEmbedder::new(16);
    let uids: Vec<uuid::Uuid> = new.iter().map(|e| e.uid).collect();
    let contents: Vec<String> = new.iter().map(|e| e.content.clone()).collect();
    store.add_episodes(key, new, Some("hash:16")).await.unwrap();
    let handles: Vec<EpisodeHandle> = store
        .episode_handles(key, &uids)
        .await
        .unwrap()
        .into_iter()
        .map(Option::unwrap)
        .collect();
    let vectors = handles
        .iter()
        .zip(&contents)
        .map(|(h, c)| (*h, embedder.embed_one(c)))
        .collect();
    store.store_embeddings("hash:16", vectors).await.unwrap();
    handles
}

/// Two orgs: acme (support, sales) and beta (main), with episodes (one deleted: a gap in
/// the sequence), vectors, a summary, set types (project- and org-level), sets (project,
/// org-level, custom), categories of sets and of set types, tags, a disabled default
/// category, features with citations (an org-level one citing two projects) and vectors.
async fn populate(store: &Arc<dyn Store>) {
    let support = key("acme", "support");
    let sales = key("acme", "sales");
    let main = key("beta", "main");
    let config = ProjectConfig {
        embedder: "hash".into(),
        reranker: "none".into(),
    };
    store
        .create_project(&support, "the help desk", &config)
        .await
        .unwrap();
    store
        .update_episodic_config(
            &support,
            EpisodicConfigUpdate {
                short_term_memory_enabled: Some(false),
                participant_aware: Some(false),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    store
        .create_project(&sales, "", &ProjectConfig::default())
        .await
        .unwrap();
    store
        .create_project(&main, "beta's", &ProjectConfig::default())
        .await
        .unwrap();

    let support_episodes = vec![
        episode(
            "I adopted a dog named Max",
            "alice",
            &[("topic", "pets")],
            10,
        ),
        episode("What breed is Max?", "bot", &[("topic", "pets")], 11),
        episode("A golden retriever", "alice", &[("dia_id", "D1:3")], 12),
        episode(
            "Billing question: my invoice is wrong",
            "alice",
            &[("topic", "billing")],
            13,
        ),
        episode("Let me check the invoice", "bot", &[], 14),
    ];
    let support_uids: Vec<uuid::Uuid> = support_episodes.iter().map(|e| e.uid).collect();
    add_embedded(store, &support, support_episodes).await;
    // A gap: sequence numbers survive as they are.
    store
        .delete_episodes(&support, &support_uids[2..3])
        .await
        .unwrap();
    let sales_episodes = vec![
        episode("We want 30 seats", "carol", &[], 20),
        episode("The quote is attached", "bot", &[("quote", "Q-7")], 21),
    ];
    let sales_uids: Vec<uuid::Uuid> = sales_episodes.iter().map(|e| e.uid).collect();
    add_embedded(store, &sales, sales_episodes).await;
    let main_episodes = vec![episode("Hello from beta", "dave", &[], 30)];
    let main_uids: Vec<uuid::Uuid> = main_episodes.iter().map(|e| e.uid).collect();
    // Without vectors.
    store
        .add_episodes(&main, main_episodes, None)
        .await
        .unwrap();
    // The summariser has looked since the deletion.
    store.projects_changed(0).await.unwrap();
    assert!(
        store
            .put_summary(
                &support,
                Summary {
                    text: "Alice has a dog, Max.".into(),
                    first_seq: 1,
                    last_seq: 2,
                    updated_at_micros: 99,
                },
                None,
            )
            .await
            .unwrap()
    );

    // Semantic memory.
    let topic_type = store
        .create_set_type(
            &support,
            NewSetType {
                id: id(),
                is_org_level: false,
                name: "topics".into(),
                description: "by topic".into(),
                tags: vec!["topic".into()],
            },
        )
        .await
        .unwrap();
    let team_type = store
        .create_set_type(
            &support,
            NewSetType {
                id: id(),
                is_org_level: true,
                name: "teams".into(),
                description: "by team".into(),
                tags: vec!["team".into()],
            },
        )
        .await
        .unwrap();
    let sets = store
        .ensure_sets(
            &support,
            vec![
                NewSet {
                    set_id: format!("project-{}", id()),
                    kind: SetKind::Project,
                    org_level: false,
                    set_type: None,
                    tags: BTreeMap::new(),
                },
                NewSet {
                    set_id: format!("org-{}", id()),
                    kind: SetKind::Org,
                    org_level: true,
                    set_type: None,
                    tags: BTreeMap::new(),
                },
                NewSet {
                    set_id: format!("custom-{}", id()),
                    kind: SetKind::Custom,
                    org_level: false,
                    set_type: Some(topic_type.internal_id),
                    tags: [("topic".to_string(), "billing".to_string())].into(),
                },
                NewSet {
                    set_id: format!("team-{}", id()),
                    kind: SetKind::Custom,
                    org_level: true,
                    set_type: Some(team_type.internal_id),
                    tags: [("team".to_string(), "red".to_string())].into(),
                },
            ],
        )
        .await
        .unwrap();
    let (project_set, org_set, custom_set) = (&sets[0], &sets[1], &sets[2]);
    store
        .configure_set(
            custom_set.internal_id,
            SetConfig {
                embedder: "hash".into(),
                llm: "gpt-x".into(),
            },
        )
        .await
        .unwrap();
    let profile = store
        .add_category(
            CategoryOwner::Set(project_set.internal_id),
            NewCategory {
                id: id(),
                name: "Pets".into(),
                prompt: "What pets they have".into(),
                description: "pets".into(),
            },
        )
        .await
        .unwrap();
    let template = store
        .add_category(
            CategoryOwner::SetType(topic_type.internal_id),
            NewCategory {
                id: id(),
                name: "Billing".into(),
                prompt: "Invoices".into(),
                description: String::new(),
            },
        )
        .await
        .unwrap();
    store
        .add_tag(profile.internal_id, &id(), "Dogs", "dogs they have")
        .await
        .unwrap();
    store
        .add_tag(profile.internal_id, &id(), "Cats", "")
        .await
        .unwrap();
    store
        .add_tag(template.internal_id, &id(), "Invoices", "")
        .await
        .unwrap();
    store
        .disable_category(project_set.internal_id, "Profile")
        .await
        .unwrap();
    store
        .disable_category(org_set.internal_id, "Work")
        .await
        .unwrap();

    let cite = store
        .resolve_episodes(&support, &[support_uids[0], support_uids[1]])
        .await
        .unwrap();
    let dog = store
        .add_feature(
            project_set.internal_id,
            new_feature(
                "Pets",
                &profile.id,
                "Dogs",
                "name",
                "Max",
                serde_json::json!({"source": "chat", "confidence": 0.9}),
            ),
            &cite,
            None,
        )
        .await
        .unwrap();
    let mut cite = store
        .resolve_episodes(&sales, &[sales_uids[0]])
        .await
        .unwrap();
    cite.extend(
        store
            .resolve_episodes(&support, &[support_uids[3]])
            .await
            .unwrap(),
    );
    store
        .add_feature(
            org_set.internal_id,
            new_feature("Work", "", "Deals", "seats", "30", serde_json::json!({})),
            &cite,
            None,
        )
        .await
        .unwrap();
    let cite = store
        .resolve_episodes(&support, &[support_uids[3]])
        .await
        .unwrap();
    store
        .add_feature(
            custom_set.internal_id,
            new_feature(
                "Billing",
                &template.id,
                "Invoices",
                "issue",
                "wrong amount",
                serde_json::json!({"n": 3}),
            ),
            &cite,
            None,
        )
        .await
        .unwrap();
    // Fact history: dog's first value kept, and a feature deleted (its versions stay).
    store
        .update_feature(
            dog.internal_id,
            memmachine_domain::semantic::model::FeatureUpdate {
                value: Some("Maximus".into()),
                value_key: Some("maximus".into()),
                ..Default::default()
            },
            None,
        )
        .await
        .unwrap();
    let cat = store
        .add_feature(
            project_set.internal_id,
            new_feature(
                "Pets",
                &profile.id,
                "Cats",
                "name",
                "Tom",
                serde_json::json!({}),
            ),
            &[],
            None,
        )
        .await
        .unwrap();
    store.delete_features(&[cat.internal_id]).await.unwrap();
    let embedder = HashEmbedder::new(16);
    store
        .store_feature_embeddings(
            "hash:16",
            vec![(dog.internal_id, embedder.embed_one("name: Max"))],
        )
        .await
        .unwrap();

    // beta's own set with a feature.
    let beta_set = store
        .ensure_sets(
            &main,
            vec![NewSet {
                set_id: format!("beta-{}", id()),
                kind: SetKind::Project,
                org_level: false,
                set_type: None,
                tags: BTreeMap::new(),
            }],
        )
        .await
        .unwrap()
        .remove(0);
    let cite = store.resolve_episodes(&main, &main_uids).await.unwrap();
    store
        .add_feature(
            beta_set.internal_id,
            new_feature(
                "Greetings",
                "",
                "hello",
                "said",
                "hello",
                serde_json::json!({}),
            ),
            &cite,
            None,
        )
        .await
        .unwrap();
}

async fn export_bytes(store: &Arc<dyn Store>, options: &ExportOptions) -> Vec<u8> {
    let mut out = Vec::new();
    export(store.as_ref(), options, &mut out, &mut |_| {})
        .await
        .unwrap();
    out
}

fn all_with_vectors() -> ExportOptions {
    ExportOptions {
        vectors: true,
        ..Default::default()
    }
}

async fn import_file(
    store: &Arc<dyn Store>,
    file: &Path,
    replace: bool,
) -> memmachine_core::error::Result<Counts> {
    import(
        store.as_ref(),
        file,
        &ImportOptions { replace },
        &mut |_| {},
    )
    .await
}

fn lines_of(bytes: &[u8]) -> Vec<serde_json::Value> {
    std::str::from_utf8(bytes)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn kinds(bytes: &[u8]) -> BTreeMap<String, usize> {
    let mut kinds = BTreeMap::new();
    for line in lines_of(bytes) {
        *kinds
            .entry(line["kind"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    kinds
}

/// Export -> import into `target` -> export again: the same bytes, and what matters
/// (uids, sequence numbers, feature ids, citations, vectors) is in the target. Takes the
/// target from the caller so that every backend runs it.
async fn round_trip(target: Arc<dyn Store>) {
    let source_dir = tempfile::tempdir().unwrap();
    let source = sqlite(source_dir.path()).await;
    populate(&source).await;
    let exported = export_bytes(&source, &all_with_vectors()).await;
    let file = source_dir.path().join("export.jsonl");
    std::fs::write(&file, &exported).unwrap();

    let counts = import_file(&target, &file, false).await.unwrap();
    assert_eq!(
        (
            counts.projects,
            counts.episodes,
            counts.vectors,
            counts.features
        ),
        (4, 7, 6, 4),
        "{counts}"
    );
    let again = export_bytes(&target, &all_with_vectors()).await;
    assert_eq!(
        String::from_utf8(again).unwrap(),
        String::from_utf8(exported.clone()).unwrap()
    );
    let kinds = kinds(&exported);
    for (kind, n) in [
        ("format", 1),
        ("project", 4),
        ("episode", 7),
        ("vector", 6),
        ("summary", 1),
        ("set_type", 2),
        ("set", 5),
        ("category", 2),
        ("tag", 3),
        ("disabled_category", 2),
        ("feature", 4),
        ("feature_vector", 1),
        ("feature_version", 7),
    ] {
        assert_eq!(kinds.get(kind), Some(&n), "{kind}: {kinds:?}");
    }

    // Spot checks through the traits.
    let versions = |store: Arc<dyn Store>, id: String| async move {
        store
            .feature_history(&id)
            .await
            .unwrap()
            .into_iter()
            .map(|mut v| {
                // Cited in handle order, which differs between stores.
                v.citations.sort_unstable();
                (
                    v.value,
                    v.changed_by,
                    v.valid_from_micros,
                    v.valid_to_micros,
                    v.citations,
                )
            })
            .collect::<Vec<_>>()
    };
    let kept: Vec<String> = lines_of(&exported)
        .iter()
        .filter(|l| l["kind"] == "feature_version")
        .map(|l| l["feature_id"].as_str().unwrap().to_string())
        .collect();
    for id in kept {
        let before = versions(source.clone(), id.clone()).await;
        assert!(!before.is_empty());
        assert_eq!(versions(target.clone(), id).await, before);
    }
    let support = key("acme", "support");
    let before = source.list_episodes(&support, None, 0, 100).await.unwrap();
    let after = target.list_episodes(&support, None, 0, 100).await.unwrap();
    assert_eq!(after, before);
    let seqs: Vec<i64> = after.iter().map(|e| e.sequence_num).collect();
    assert_eq!(seqs, [1, 2, 4, 5]);
    let project = target.get_project(&support).await.unwrap().unwrap();
    let original = source.get_project(&support).await.unwrap().unwrap();
    assert_eq!(
        (
            &project.description,
            &project.config,
            project.episodic,
            project.created_at_micros
        ),
        (
            &original.description,
            &original.config,
            original.episodic,
            original.created_at_micros
        )
    );
    assert!(!project.episodic.short_term_memory_enabled && !project.episodic.participant_aware);
    // The next episode comes after the highest imported sequence number.
    let next = target
        .add_episodes(&support, vec![episode("new", "alice", &[], 50)], None)
        .await
        .unwrap();
    assert_eq!(next[0].sequence_num, 6);
    // The change feed saw the imported episodes and their vectors.
    let head = target.feed_head(&support).await.unwrap();
    let page = target
        .index_page(head.project, Some("hash:16"), 0, 100)
        .await
        .unwrap();
    assert_eq!(page.len(), 5);
    assert!(page[..4].iter().all(|e| e.vector.is_some()));
    let vectors = target.episode_vectors(&support, 0, 100).await.unwrap();
    assert_eq!(
        vectors,
        source.episode_vectors(&support, 0, 100).await.unwrap()
    );

    let source_sets = source.list_sets(&support).await.unwrap();
    let target_sets = target.list_sets(&support).await.unwrap();
    let ids = |sets: &[memmachine_domain::semantic::model::SetRow]| {
        sets.iter().map(|s| s.set_id.clone()).collect::<Vec<_>>()
    };
    assert_eq!(ids(&target_sets), ids(&source_sets));
    let source_features = source
        .list_features(
            &source_sets
                .iter()
                .map(|s| s.internal_id)
                .collect::<Vec<_>>(),
            None,
            100,
        )
        .await
        .unwrap();
    assert_eq!(source_features.len(), 3);
    for feature in &source_features {
        let copy = target.find_feature(&feature.id).await.unwrap().unwrap();
        // The same episodes (listed in the target's order: an org-level feature cites
        // episodes of several projects, imported project by project).
        let sorted = |uids: &[uuid::Uuid]| {
            let mut uids = uids.to_vec();
            uids.sort();
            uids
        };
        assert_eq!(
            (
                &copy.set_id,
                &copy.value,
                &copy.metadata,
                sorted(&copy.citations),
                copy.created_at_micros,
                copy.updated_at_micros
            ),
            (
                &feature.set_id,
                &feature.value,
                &feature.metadata,
                sorted(&feature.citations),
                feature.created_at_micros,
                feature.updated_at_micros
            )
        );
        assert!(!copy.citations.is_empty());
    }
    // Features are found by their keys as before (the keys were made again).
    let pets = target
        .category_features(
            target_sets[target_sets
                .iter()
                .position(|s| s.set_id.starts_with("project-"))
                .unwrap()]
            .internal_id,
            "pets",
        )
        .await
        .unwrap();
    assert_eq!(pets.len(), 1);
    assert_eq!(
        target.summary(&support).await.unwrap(),
        source.summary(&support).await.unwrap()
    );
}

#[tokio::test]
async fn export_import_export_gives_the_same_file_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    round_trip(sqlite(dir.path()).await).await;
}

/// SQLite -> file -> PostgreSQL -> file: the same bytes.
#[tokio::test]
async fn export_import_export_gives_the_same_file_on_postgres() {
    let Some(url) = common::postgres::fresh_database().await else {
        return;
    };
    let location = memmachine::store::StoreLocation::Postgres(url);
    round_trip(memmachine::store::open(&location, true).await.unwrap()).await;
}

#[tokio::test]
async fn an_import_refuses_existing_projects_unless_replacing() {
    let dir = tempfile::tempdir().unwrap();
    let source = sqlite(&dir.path().join("source")).await;
    populate(&source).await;
    let exported = export_bytes(&source, &all_with_vectors()).await;
    let file = dir.path().join("export.jsonl");
    std::fs::write(&file, &exported).unwrap();

    let target = sqlite(&dir.path().join("target")).await;
    import_file(&target, &file, false).await.unwrap();
    // Something changed in the target since.
    target
        .add_episodes(
            &key("beta", "main"),
            vec![episode("later", "dave", &[], 40)],
            None,
        )
        .await
        .unwrap();
    let changed = export_bytes(&target, &all_with_vectors()).await;

    let err = import_file(&target, &file, false).await.unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(err, memmachine_core::error::Error::AlreadyExists(_)),
        "{message}"
    );
    assert!(
        message.contains("acme/support") && message.contains("--replace"),
        "{message}"
    );
    assert!(message.contains("nothing was written"), "{message}");
    assert_eq!(export_bytes(&target, &all_with_vectors()).await, changed);

    // --replace: the file's version of every project it names.
    import_file(&target, &file, true).await.unwrap();
    assert_eq!(
        String::from_utf8(export_bytes(&target, &all_with_vectors()).await).unwrap(),
        String::from_utf8(exported.clone()).unwrap()
    );

    // The universal project is always there: imported into while it holds no episodes,
    // refused once it does.
    let other = sqlite(&dir.path().join("other")).await;
    other
        .add_episodes(
            &Access::system(ProjectKey::universal()),
            vec![episode("u", "x", &[], 1)],
            None,
        )
        .await
        .unwrap();
    let err = import_file(&other, &file, false)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("universal/universal"), "{err}");
    assert_eq!(other.list_projects(None, None, 100).await.unwrap().len(), 1);
    import_file(&other, &file, true).await.unwrap();
    assert_eq!(
        other
            .count_episodes(&Access::system(ProjectKey::universal()))
            .await
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn org_and_project_filters_choose_what_is_exported() {
    let dir = tempfile::tempdir().unwrap();
    let source = sqlite(dir.path()).await;
    populate(&source).await;
    let projects = |bytes: &[u8]| {
        lines_of(bytes)
            .into_iter()
            .filter(|l| l["kind"] == "project")
            .map(|l| {
                format!(
                    "{}/{}",
                    l["org_id"].as_str().unwrap(),
                    l["project_id"].as_str().unwrap()
                )
            })
            .collect::<Vec<_>>()
    };
    let all = export_bytes(&source, &ExportOptions::default()).await;
    assert_eq!(
        projects(&all),
        [
            "acme/sales",
            "acme/support",
            "beta/main",
            "universal/universal"
        ]
    );
    assert!(!kinds(&all).contains_key("vector"));
    assert!(!kinds(&all).contains_key("feature_vector"));

    let acme = ExportOptions {
        org: Some("acme".into()),
        ..Default::default()
    };
    let bytes = export_bytes(&source, &acme).await;
    assert_eq!(projects(&bytes), ["acme/sales", "acme/support"]);
    let kinds_of_acme = kinds(&bytes);
    assert_eq!(kinds_of_acme["set"], 4, "{kinds_of_acme:?}");
    assert_eq!(kinds_of_acme["feature"], 3);
    assert!(
        lines_of(&bytes)
            .iter()
            .all(|l| l["org_id"].is_null() || l["org_id"] == "acme")
    );

    // One project: its own rows only (the org-level ones go with the whole org).
    let support = ExportOptions {
        org: Some("acme".into()),
        project: Some("support".into()),
        vectors: true,
    };
    let bytes = export_bytes(&source, &support).await;
    assert_eq!(projects(&bytes), ["acme/support"]);
    let k = kinds(&bytes);
    assert_eq!(
        (
            k["episode"],
            k["vector"],
            k["set_type"],
            k["set"],
            k["feature"]
        ),
        (4, 4, 1, 2, 2),
        "{k:?}"
    );
    assert!(
        lines_of(&bytes)
            .iter()
            .filter(|l| l["kind"] == "set" || l["kind"] == "set_type")
            .all(|l| l["project_id"] == "support")
    );
    // It imports into an empty store and exports back the same.
    let file = dir.path().join("support.jsonl");
    std::fs::write(&file, &bytes).unwrap();
    let target = sqlite(&dir.path().join("target")).await;
    import_file(&target, &file, false).await.unwrap();
    assert_eq!(export_bytes(&target, &support).await, bytes);

    let err = memmachine_domain::transfer::export(
        source.as_ref(),
        &ExportOptions {
            project: Some("support".into()),
            ..Default::default()
        },
        &mut Vec::new(),
        &mut |_| {},
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("--org"), "{err}");
    let missing = ExportOptions {
        org: Some("nobody".into()),
        ..Default::default()
    };
    let err = export(source.as_ref(), &missing, &mut Vec::new(), &mut |_| {})
        .await
        .unwrap_err();
    assert!(err.to_string().contains("nobody"), "{err}");
}

#[tokio::test]
async fn a_bad_file_is_refused_with_its_line_and_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    let target = sqlite(dir.path()).await;
    let project = r#"{"kind":"project","org_id":"o","project_id":"p","description":"","config":{"embedder":"","reranker":""},"episodic":{"enabled":true,"long_term_memory_enabled":true,"short_term_memory_enabled":true},"created_at_micros":1}"#;
    let format = r#"{"kind":"format","version":1}"#;
    let cases: Vec<(Vec<&str>, &[&str])> = vec![
        (vec![format, project, "{not json"], &["line 3", "not JSON"]),
        (
            vec![format, project, r#"{"kind":"api_key","id":"k"}"#],
            &["line 3", "unknown kind \"api_key\""],
        ),
        (
            vec![format, r#"{"kind":"project","org_id":"o"}"#],
            &["line 2", "missing field"],
        ),
        (vec![project], &["line 1", "not a memmachine export"]),
        (
            vec![
                format,
                project,
                r#"{"kind":"disabled_category","set_id":"nowhere","name":"x"}"#,
            ],
            &[
                "line 3",
                "set nowhere is neither earlier in the file nor in the target",
            ],
        ),
        (
            vec![
                format,
                project,
                r#"{"kind":"episode","org_id":"o","project_id":"q","uid":"7f1c8a52-3d4e-4a9b-8c1d-2e3f4a5b6c7d","sequence_num":1,"content":"c","producer_id":"u","producer_role":"","produced_for_id":"","episode_type":"message","content_type":"string","created_at_micros":1,"metadata":{}}"#,
            ],
            &["line 3", "project o/q is not declared earlier"],
        ),
    ];
    for (lines, expected) in cases {
        let file = dir.path().join("bad.jsonl");
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();
        let err = import_file(&target, &file, false)
            .await
            .unwrap_err()
            .to_string();
        for part in expected {
            assert!(err.contains(part), "{err:?} should say {part:?}");
        }
        assert_eq!(
            target.list_projects(None, None, 10).await.unwrap().len(),
            1,
            "{err}"
        );
    }
}

fn memmachine(args: &[&str], stdin: Option<&[u8]>) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_memmachine"));
    command
        .args(args)
        .env_remove("MEMMACHINE_DATA_DIR")
        .env_remove("MEMMACHINE_STORE")
        .env_remove("MEMMACHINE_CONFIG");
    match stdin {
        Some(bytes) => child::run_with_input(&mut command, bytes.to_vec()),
        None => command.run(),
    }
}

#[tokio::test]
async fn the_cli_moves_a_store_from_one_data_dir_to_another() {
    let dir = tempfile::tempdir().unwrap();
    let (from, to) = (dir.path().join("from"), dir.path().join("to"));
    {
        let store = sqlite(&from).await;
        populate(&store).await;
        store.close().await.unwrap();
    }
    let file = dir.path().join("export.jsonl");
    let (from_s, to_s, file_s) = (
        from.to_str().unwrap(),
        to.to_str().unwrap(),
        file.to_str().unwrap(),
    );
    let out = memmachine(
        &[
            "export",
            "--data-dir",
            from_s,
            "--vectors",
            "--output",
            file_s,
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("exported ") && stderr.contains("7 episodes"),
        "{stderr}"
    );
    let exported = std::fs::read(&file).unwrap();

    let out = memmachine(&["import", "--data-dir", to_s, "--input", file_s], None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("imported "), "{stderr}");

    // Standard output and input, and the same bytes back.
    let out = memmachine(&["export", "--data-dir", to_s, "--vectors"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout.clone()).unwrap(),
        String::from_utf8(exported.clone()).unwrap()
    );

    // Again: refused, then --replace from standard input.
    let again = memmachine(&["import", "--data-dir", to_s, "--input", file_s], None);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success());
    assert!(stderr.contains("--replace"), "{stderr}");
    let replaced = memmachine(
        &["import", "--data-dir", to_s, "--replace", "--input", "-"],
        Some(&out.stdout),
    );
    assert!(
        replaced.status.success(),
        "{}",
        String::from_utf8_lossy(&replaced.stderr)
    );

    // One project, by the flags.
    let out = memmachine(
        &[
            "export",
            "--data-dir",
            to_s,
            "--org",
            "beta",
            "--project",
            "main",
        ],
        None,
    );
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("Hello from beta") && !text.contains("acme"),
        "{text}"
    );
    let out = memmachine(&["export", "--data-dir", to_s, "--project", "main"], None);
    assert!(!out.status.success());
    // A data dir with no store is not created by export.
    let none = dir.path().join("none");
    let out = memmachine(&["export", "--data-dir", none.to_str().unwrap()], None);
    assert!(!out.status.success());
    assert!(!none.exists());
}

#[tokio::test]
async fn long_transfers_report_progress() {
    let dir = tempfile::tempdir().unwrap();
    let source = sqlite(&dir.path().join("source")).await;
    let big = key("big", "p");
    source
        .create_project(&big, "", &ProjectConfig::default())
        .await
        .unwrap();
    for chunk in 0..11 {
        let batch = (0..1000)
            .map(|i| episode(&format!("message {chunk} {i}"), "u", &[], i))
            .collect();
        source.add_episodes(&big, batch, None).await.unwrap();
    }
    let mut out = Vec::new();
    let mut reports = Vec::new();
    let counts = export(
        source.as_ref(),
        &ExportOptions::default(),
        &mut out,
        &mut |c| reports.push(c.rows()),
    )
    .await
    .unwrap();
    assert_eq!(counts.episodes, 11_000);
    assert_eq!(reports, [10_000]);
    let file = dir.path().join("big.jsonl");
    std::fs::write(&file, &out).unwrap();
    let target = sqlite(&dir.path().join("target")).await;
    let mut reports = Vec::new();
    import(
        target.as_ref(),
        &file,
        &ImportOptions::default(),
        &mut |c| reports.push(c.rows()),
    )
    .await
    .unwrap();
    assert_eq!(reports, [10_000]);
    assert_eq!(target.count_episodes(&big).await.unwrap(), 11_000);
}
