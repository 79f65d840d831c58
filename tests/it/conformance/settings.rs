//! `SettingsStore`: the one row of runtime settings, replaced under its version.

use std::sync::Arc;

use memmachine::store::{Store, StoredSettings};

pub async fn runtime_settings_are_replaced_under_their_version(store: Arc<dyn Store>) {
    let empty = StoredSettings {
        version: 0,
        settings: "{}".into(),
    };
    assert_eq!(store.runtime_settings().await.unwrap(), empty, "none yet");
    assert_eq!(store.runtime_settings_version().await.unwrap(), 0);
    let first = r#"{"short_term_chars":2}"#;
    assert_eq!(
        store.replace_runtime_settings(0, first).await.unwrap(),
        Some(1)
    );
    assert_eq!(
        store.replace_runtime_settings(0, "{}").await.unwrap(),
        None,
        "a writer that read version 0 lost to the first"
    );
    assert_eq!(
        store.runtime_settings().await.unwrap(),
        StoredSettings {
            version: 1,
            settings: first.into()
        }
    );
    let second = r#"{"ranking":"lexical"}"#;
    assert_eq!(
        store.replace_runtime_settings(1, second).await.unwrap(),
        Some(2)
    );
    assert_eq!(store.runtime_settings_version().await.unwrap(), 2);
    assert_eq!(store.runtime_settings().await.unwrap().settings, second);
    assert_eq!(
        store.replace_runtime_settings(5, "{}").await.unwrap(),
        None,
        "a version never reached"
    );
}

pub async fn one_of_two_replicas_racing_on_the_settings_wins(
    one: Arc<dyn Store>,
    other: Arc<dyn Store>,
) {
    assert_eq!(
        one.replace_runtime_settings(0, r#"{"a":1}"#).await.unwrap(),
        Some(1)
    );
    assert_eq!(other.runtime_settings_version().await.unwrap(), 1);
    let (a, b) = tokio::join!(
        one.replace_runtime_settings(1, r#"{"a":2}"#),
        other.replace_runtime_settings(1, r#"{"b":2}"#),
    );
    let won: Vec<Option<i64>> = vec![a.unwrap(), b.unwrap()];
    assert_eq!(
        won.iter().filter(|w| **w == Some(2)).count(),
        1,
        "exactly one wins: {won:?}"
    );
    let seen = other.runtime_settings().await.unwrap();
    assert_eq!(seen.version, 2);
    let expected = if won[0].is_some() {
        r#"{"a":2}"#
    } else {
        r#"{"b":2}"#
    };
    assert_eq!(seen.settings, expected);
    assert_eq!(one.runtime_settings().await.unwrap(), seen);
}
