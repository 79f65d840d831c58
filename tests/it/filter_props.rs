//! Property tests: the filter parser never panics, reports positions inside the input,
//! every filter it accepts runs against the store (SQL) and the in-memory index without
//! an internal error, and both select the same episodes.

use std::sync::Arc;

use crate::common;
use memmachine::store::Store;
use memmachine_core::access::{Access, ProjectAccess};
use memmachine_core::model::filter::{Expr, parse};
use memmachine_core::model::{EpisodeHandle, NewEpisode, ProjectConfig, ProjectKey};
use memmachine_domain::retrieval::index_cache::IndexCache;
use memmachine_domain::retrieval::tokenize::query_terms;
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
        Just("m.turn".to_string()),
        Just("producer_role".to_string()),
        Just("produced_for_id".to_string()),
        Just("'bob'".to_string()),
        Just("' 7 '".to_string()),
        Just("7".to_string()),
        Just("'1970-01-01T00:00:01Z'".to_string()),
        Just("\"x\\\"y\"".to_string()),
        Just("'2024-01-01T00:00:00Z'".to_string()),
        Just("42".to_string()),
        Just("-1.5e3".to_string()),
        "[a-z_.]{1,8}",
        any::<char>().prop_map(|c| c.to_string()),
    ]
}

/// Filters that are valid by construction: predicates over every field kind with every
/// operator, combined with AND, OR, NOT and parentheses.
fn valid_filter() -> impl Strategy<Value = String> {
    let field = prop_oneof![
        Just("m.topic"),
        Just("metadata.turn"),
        Just("m.absent"),
        Just("producer_id"),
        Just("producer_role"),
        Just("produced_for_id"),
        Just("episode_type"),
    ];
    let literal = prop_oneof![
        Just("'food'"),
        Just("'Food'"),
        Just("' 7 '"),
        Just("''"),
        Just("'alice'"),
        Just("'bob'"),
        Just("'message'"),
        Just("7"),
        Just("42"),
        Just("-1500"),
        Just("0"),
        Just("'5'"),
    ];
    let op = prop_oneof![
        Just("="),
        Just("!="),
        Just(">"),
        Just("<"),
        Just(">="),
        Just("<=")
    ];
    let time = prop_oneof![
        Just("'1970-01-01T00:00:01Z'"),
        Just("-3"),
        Just("'1969-12-31T23:59:55.5Z'"),
    ];
    let predicate = prop_oneof![
        (field.clone(), op.clone(), literal.clone()).prop_map(|(f, o, l)| format!("{f} {o} {l}")),
        (op, time).prop_map(|(o, t)| format!("created_at {o} {t}")),
        (
            field.clone(),
            prop::collection::vec(literal, 1..4),
            any::<bool>()
        )
            .prop_map(|(f, values, negated)| {
                let not = if negated { "NOT " } else { "" };
                format!("{f} {not}IN ({})", values.join(", "))
            }),
        (field, any::<bool>()).prop_map(|(f, negated)| {
            format!("{f} IS {}NULL", if negated { "NOT " } else { "" })
        }),
    ];
    predicate.prop_recursive(4, 16, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}) AND ({b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a} OR {b}")),
            inner.prop_map(|a| format!("NOT ({a})")),
        ]
    })
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

/// Episodes whose fields exercise every rule: numbers in strings (padded, negative,
/// not numbers), absent keys, empty roles and recipients, close timestamps.
fn varied_episodes() -> Vec<NewEpisode> {
    let topics = ["food", "travel", "42", " 7 ", "-1.5e3", "", "Food"];
    let producers = ["alice", "bob", "user"];
    (0..40)
        .map(|i: usize| {
            let mut metadata = std::collections::BTreeMap::new();
            if !i.is_multiple_of(3) {
                metadata.insert("topic".to_string(), topics[i % topics.len()].to_string());
            }
            if i % 4 == 1 {
                metadata.insert("turn".to_string(), (i * 7 % 13).to_string());
            }
            NewEpisode {
                expires_at_micros: None,
                idempotency: None,
                uid: uuid::Uuid::new_v4(),
                content: format!("talking about things {i}"),
                producer_id: producers[i % producers.len()].into(),
                producer_role: if i.is_multiple_of(2) {
                    "user".into()
                } else {
                    String::new()
                },
                produced_for_id: if i.is_multiple_of(5) {
                    "bob".into()
                } else {
                    String::new()
                },
                episode_type: "message".into(),
                content_type: "string".into(),
                created_at_micros: (i as i64 - 20) * 700_000,
                metadata,
            }
        })
        .collect()
}

/// The handles the project's in-memory index (kept by an `IndexCache` over `store`, as
/// the server keeps it) ranks first for "talking", filtered by `filter`.
fn ranked(
    runtime: &tokio::runtime::Runtime,
    cache: &IndexCache,
    key: &ProjectAccess,
    filter: Option<&Expr>,
    limit: usize,
) -> memmachine_core::error::Result<Vec<i64>> {
    let (terms, filter) = (query_terms("talking"), filter.cloned());
    let hits = runtime.block_on(cache.read(key, None, move |index| {
        index.lexical(&terms, filter.as_ref(), limit)
    }))?;
    Ok(hits.into_iter().map(|hit| hit.handle).collect())
}

/// The SQL the store runs (`list_episodes`) and the in-memory evaluation the index
/// applies agree on every filter: the same episodes pass both.
#[test]
fn sql_and_in_memory_filters_agree() {
    use memmachine_core::model::filter_eval::matches;
    use memmachine_domain::retrieval::episode_fields::EpisodeFields;

    let (store, key, _dir, runtime) = seeded_store("agree", varied_episodes());
    let cache = IndexCache::new(store.clone(), 64 << 20);
    let all = runtime
        .block_on(store.list_episodes(&key, None, 0, 1000))
        .unwrap();
    let uids: Vec<uuid::Uuid> = all.iter().map(|e| e.uid).collect();
    let handles: Vec<EpisodeHandle> = runtime
        .block_on(store.episode_handles(&key, &uids))
        .unwrap()
        .into_iter()
        .map(|h| h.expect("stored"))
        .collect();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(2000));
    let distinct = std::cell::RefCell::new(std::collections::HashSet::new());
    runner
        .run(&valid_filter(), |input| {
            let filter = parse(&input)
                .unwrap_or_else(|err| panic!("{input:?} should parse: {err}"))
                .expect("not blank");
            let by_sql: Vec<uuid::Uuid> = runtime
                .block_on(store.list_episodes(&key, Some(&filter), 0, 1000))
                .unwrap()
                .into_iter()
                .map(|e| e.uid)
                .collect();
            let in_memory: Vec<uuid::Uuid> = all
                .iter()
                .filter(|e| matches(&filter, &EpisodeFields::of(e)))
                .map(|e| e.uid)
                .collect();
            prop_assert_eq!(&by_sql, &in_memory, "filter {:?}", input);
            distinct.borrow_mut().insert(by_sql.len());
            // The index, loaded from the store, filters before ranking: every episode
            // says "talking", so exactly those passing the filter are ranked.
            let mut indexed: Vec<uuid::Uuid> = ranked(&runtime, &cache, &key, Some(&filter), 1000)
                .unwrap()
                .into_iter()
                .map(|h| {
                    uids[handles
                        .iter()
                        .position(|x| x.raw() == h)
                        .expect("a handle of the project")]
                })
                .collect();
            indexed.sort_by_key(|uid| in_memory.iter().position(|u| u == uid));
            prop_assert_eq!(&indexed, &in_memory, "index with filter {:?}", input);
            let recent: Vec<uuid::Uuid> = runtime
                .block_on(store.recent_episodes(&key, Some(&filter), 5))
                .unwrap()
                .into_iter()
                .map(|e| e.uid)
                .collect();
            let newest = &in_memory[in_memory.len().saturating_sub(5)..];
            prop_assert_eq!(&recent[..], newest, "recent with filter {:?}", input);
            Ok(())
        })
        .unwrap();
    let sizes = distinct.into_inner().len();
    assert!(
        sizes > 10,
        "filters should select many different subsets, got {sizes} sizes"
    );
}

/// A store holding one project with these episodes.
fn seeded_store(
    name: &str,
    episodes: Vec<NewEpisode>,
) -> (
    Arc<dyn Store>,
    ProjectAccess,
    tempfile::TempDir,
    tokio::runtime::Runtime,
) {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(memmachine::store::sqlite::SqliteStore::open(dir.path()).unwrap());
    let key = Access::system(ProjectKey::parse("props", name).unwrap());
    runtime.block_on(async {
        store
            .create_project(&key, "", &ProjectConfig::default())
            .await
            .unwrap();
        store.add_episodes(&key, episodes, None).await.unwrap();
    });
    (store, key, dir, runtime)
}

fn topical_episodes() -> Vec<NewEpisode> {
    ["food", "travel", "42"]
        .iter()
        .enumerate()
        .map(|(i, topic)| NewEpisode {
            expires_at_micros: None,
            idempotency: None,
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
        .collect()
}

#[test]
fn every_accepted_filter_runs_against_the_store() {
    let (store, key, _dir, runtime) = seeded_store("filters", topical_episodes());
    let cache = IndexCache::new(store.clone(), 64 << 20);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(3000));
    let accepted = std::cell::Cell::new(0);
    runner
        .run(&filter_text(), |input| {
            if let Ok(filter) = parse(&input) {
                accepted.set(accepted.get() + 1);
                let listed = runtime.block_on(store.list_episodes(&key, filter.as_ref(), 0, 10));
                prop_assert!(listed.is_ok(), "filter {input:?}: {listed:?}");
                let indexed = ranked(&runtime, &cache, &key, filter.as_ref(), 10);
                prop_assert!(indexed.is_ok(), "filter {input:?}: {indexed:?}");
                prop_assert_eq!(
                    indexed.unwrap().len(),
                    listed.unwrap().len(),
                    "filter {:?}: the index and the store disagree",
                    input
                );
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

/// The PostgreSQL dialect (`store/postgres/filter_sql.rs`) agrees with the in-memory
/// evaluation too, on the same filters and episodes. Skips without
/// `MEMMACHINE_TEST_POSTGRES`.
#[test]
fn postgres_and_in_memory_filters_agree() {
    use memmachine_core::model::filter_eval::matches;
    use memmachine_domain::retrieval::episode_fields::EpisodeFields;

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Some(url) = runtime.block_on(common::postgres::fresh_database()) else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(
        runtime
            .block_on(memmachine::store::postgres::PostgresStore::connect(&url))
            .unwrap(),
    );
    let key = Access::system(ProjectKey::parse("props", "agree").unwrap());
    let all = runtime.block_on(async {
        store
            .create_project(&key, "", &ProjectConfig::default())
            .await
            .unwrap();
        store
            .add_episodes(&key, varied_episodes(), None)
            .await
            .unwrap();
        store.list_episodes(&key, None, 0, 1000).await.unwrap()
    });
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(1000));
    runner
        .run(&valid_filter(), |input| {
            let filter = parse(&input)
                .unwrap_or_else(|err| panic!("{input:?} should parse: {err}"))
                .expect("not blank");
            let by_sql: Vec<uuid::Uuid> = runtime
                .block_on(store.list_episodes(&key, Some(&filter), 0, 1000))
                .unwrap()
                .into_iter()
                .map(|e| e.uid)
                .collect();
            let in_memory: Vec<uuid::Uuid> = all
                .iter()
                .filter(|e| matches(&filter, &EpisodeFields::of(e)))
                .map(|e| e.uid)
                .collect();
            prop_assert_eq!(&by_sql, &in_memory, "filter {:?}", input);
            let recent: Vec<uuid::Uuid> = runtime
                .block_on(store.recent_episodes(&key, Some(&filter), 5))
                .unwrap()
                .into_iter()
                .map(|e| e.uid)
                .collect();
            let newest = &in_memory[in_memory.len().saturating_sub(5)..];
            prop_assert_eq!(&recent[..], newest, "recent with filter {:?}", input);
            Ok(())
        })
        .unwrap();
}

/// Every filter the parser accepts runs on PostgreSQL without an error.
#[test]
fn every_accepted_filter_runs_against_postgres() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Some(url) = runtime.block_on(common::postgres::fresh_database()) else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(
        runtime
            .block_on(memmachine::store::postgres::PostgresStore::connect(&url))
            .unwrap(),
    );
    let key = Access::system(ProjectKey::parse("props", "filters").unwrap());
    runtime.block_on(async {
        store
            .create_project(&key, "", &ProjectConfig::default())
            .await
            .unwrap();
        store
            .add_episodes(&key, varied_episodes(), None)
            .await
            .unwrap();
    });
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(2000));
    runner
        .run(&filter_text(), |input| {
            if let Ok(filter) = parse(&input) {
                let listed = runtime.block_on(store.list_episodes(&key, filter.as_ref(), 0, 10));
                prop_assert!(listed.is_ok(), "filter {input:?}: {listed:?}");
            }
            Ok(())
        })
        .unwrap();
}
