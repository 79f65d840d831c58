//! Property tests: the filter parser never panics, reports positions inside the input,
//! and every filter it accepts runs against the store without an internal error.

use std::sync::Arc;

use memmachine::model::filter::parse;
use memmachine::model::{NewEpisode, ProjectConfig, ProjectKey};
use memmachine::store::Store;
use proptest::prelude::*;

/// Fragments that make up filters, so generated strings reach deep into the grammar.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("m.topic".to_string()),
        Just("metadata.turn".to_string()),
        Just("producer_id".to_string()),
        Just("created_at".to_string()),
        Just("episode_type".to_string()),
        Just("AND".to_string()),
        Just("or".to_string()),
        Just("NOT".to_string()),
        Just("IN".to_string()),
        Just("IS".to_string()),
        Just("NULL".to_string()),
        Just("(".to_string()),
        Just(")".to_string()),
        Just(",".to_string()),
        Just("=".to_string()),
        Just("!=".to_string()),
        Just(">=".to_string()),
        Just("<".to_string()),
        Just("'food'".to_string()),
        Just("\"x\\\"y\"".to_string()),
        Just("'2024-01-01T00:00:00Z'".to_string()),
        Just("42".to_string()),
        Just("-1.5e3".to_string()),
        "[a-z_.]{1,8}",
        any::<char>().prop_map(|c| c.to_string()),
    ]
}

fn filter_text() -> impl Strategy<Value = String> {
    prop::collection::vec(fragment(), 0..24).prop_map(|parts| parts.join(" "))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_strings_never_panic(input in any::<String>()) {
        if let Err(err) = parse(&input) {
            prop_assert!(err.position >= 1 && err.position <= input.chars().count() + 1);
        }
    }

    #[test]
    fn grammar_shaped_strings_never_panic(input in filter_text()) {
        if let Err(err) = parse(&input) {
            prop_assert!(err.position >= 1 && err.position <= input.chars().count() + 1);
            prop_assert!(!err.message.is_empty());
        }
    }
}

fn seeded_store() -> (
    Arc<dyn Store>,
    ProjectKey,
    tempfile::TempDir,
    tokio::runtime::Runtime,
) {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(memmachine::store::sqlite::SqliteStore::open(dir.path()).unwrap());
    let key = ProjectKey::parse("props", "filters").unwrap();
    runtime.block_on(async {
        store
            .create_project(&key, "", &ProjectConfig::default())
            .await
            .unwrap();
        let episodes = ["food", "travel", "42"]
            .iter()
            .enumerate()
            .map(|(i, topic)| NewEpisode {
                uid: uuid::Uuid::new_v4(),
                content: format!("talking about {topic}"),
                producer_id: "alice".into(),
                producer_role: String::new(),
                produced_for_id: String::new(),
                episode_type: "message".into(),
                content_type: "string".into(),
                created_at_micros: i as i64 * 1_000_000,
                metadata: [("topic".to_string(), topic.to_string())].into(),
            })
            .collect();
        store.add_episodes(&key, episodes).await.unwrap();
    });
    (store, key, dir, runtime)
}

#[test]
fn every_accepted_filter_runs_against_the_store() {
    let (store, key, _dir, runtime) = seeded_store();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(3000));
    let accepted = std::cell::Cell::new(0);
    runner
        .run(&filter_text(), |input| {
            if let Ok(filter) = parse(&input) {
                accepted.set(accepted.get() + 1);
                let listed = runtime.block_on(store.list_episodes(&key, filter.as_ref(), 0, 10));
                prop_assert!(listed.is_ok(), "filter {input:?}: {listed:?}");
                let searched =
                    runtime.block_on(store.search_lexical(&key, "talking", filter.as_ref(), 10));
                prop_assert!(searched.is_ok(), "filter {input:?}: {searched:?}");
            }
            Ok(())
        })
        .unwrap();
    let accepted = accepted.get();
    assert!(
        accepted > 10,
        "the generator should produce some valid filters, got {accepted}"
    );
}
