//! What the suite's modules share: unique names, episodes, the filter cases, an
//! embedder with an id of its own, and the worker's embedding loop.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use memmachine::store::Store;
use memmachine_core::access::{Access, ProjectAccess};
use memmachine_core::model::filter::{MAX_IN_VALUES, MAX_PREDICATES};
use memmachine_core::model::{
    Episode, EpisodeHandle, NewEpisode, ProjectConfig, ProjectHandle, ProjectKey,
};
use memmachine_domain::embed::hash::HashEmbedder;
use memmachine_domain::embed::{EmbedError, Embedder};

/// A lease long enough never to expire during a test.
pub const LONG: Duration = Duration::from_secs(600);
/// A lease that holds across a few calls (even on a loaded machine) and has expired
/// once the test sleeps `PAST_SHORT`.
pub const SHORT: Duration = Duration::from_millis(300);
pub const PAST_SHORT: Duration = Duration::from_millis(700);

/// A random suffix: names no other test (or earlier run on a shared database) uses.
pub fn unique() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_string()
}

/// An org id of this test alone.
pub fn org() -> String {
    format!("o-{}", unique())
}

/// The suite calls the stores as background work does: through the system door.
pub fn key(org: &str, project: &str) -> ProjectAccess {
    Access::system(ProjectKey::parse(org, project).unwrap())
}

/// Creates `org/name` with the default configuration.
pub async fn project_in(store: &Arc<dyn Store>, org: &str, name: &str) -> ProjectAccess {
    let k = key(org, name);
    store
        .create_project(&k, "", &ProjectConfig::default())
        .await
        .unwrap();
    k
}

/// Creates a project in an org of its own.
pub async fn project(store: &Arc<dyn Store>) -> ProjectAccess {
    project_in(store, &org(), "p").await
}

/// The store's handle of the project (what the change feed is read by).
pub async fn handle_of(store: &Arc<dyn Store>, key: &ProjectAccess) -> ProjectHandle {
    store.feed_head(key).await.unwrap().project
}

pub fn episode(
    content: &str,
    producer: &str,
    metadata: &[(&str, &str)],
    created_at: i64,
) -> NewEpisode {
    NewEpisode {
        expires_at_micros: None,
        idempotency: None,
        uid: uuid::Uuid::new_v4(),
        content: content.into(),
        producer_id: producer.into(),
        producer_role: String::new(),
        produced_for_id: String::new(),
        episode_type: "message".into(),
        content_type: "string".into(),
        created_at_micros: created_at,
        metadata: metadata
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
    }
}

/// Episodes `prefix 0`, `prefix 1`, ... said by `u`.
pub fn numbered(prefix: &str, n: usize) -> Vec<NewEpisode> {
    (0..n)
        .map(|i| episode(&format!("{prefix} {i}"), "u", &[], i as i64))
        .collect()
}

/// Adds episodes queued for no embedder; returns their sequence numbers.
pub async fn add(
    store: &Arc<dyn Store>,
    key: &ProjectAccess,
    episodes: Vec<NewEpisode>,
) -> Vec<i64> {
    let added = store.add_episodes(key, episodes, None).await.unwrap();
    added.iter().map(|a| a.sequence_num).collect()
}

/// The handles of these episodes, all of them in the project.
pub async fn handles(
    store: &Arc<dyn Store>,
    key: &ProjectAccess,
    episodes: &[NewEpisode],
) -> Vec<EpisodeHandle> {
    let uids: Vec<uuid::Uuid> = episodes.iter().map(|e| e.uid).collect();
    store
        .episode_handles(key, &uids)
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.expect("stored"))
        .collect()
}

pub fn contents(episodes: &[Episode]) -> Vec<String> {
    episodes.iter().map(|e| e.content.clone()).collect()
}

/// The hash embedder under an id of this test alone, so that the vector queue it
/// claims from is this test's even on a shared database.
pub struct TestEmbedder {
    id: String,
    hash: HashEmbedder,
}

impl TestEmbedder {
    pub fn new(dimensions: usize) -> Arc<TestEmbedder> {
        Arc::new(TestEmbedder {
            id: format!("hash:{dimensions}:{}", unique()),
            hash: HashEmbedder::new(dimensions),
        })
    }

    /// What the store knows it by (also `Embedder::id`).
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        self.hash.embed_one(text)
    }

    pub fn as_dyn(self: &Arc<Self>) -> Arc<dyn Embedder> {
        self.clone()
    }
}

#[async_trait]
impl Embedder for TestEmbedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn dimensions(&self) -> usize {
        self.hash.dimensions()
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.hash.embed(texts).await
    }
}

/// Embeds every episode queued for `embedder`, as the worker does; returns how many.
pub async fn embed_all(store: &Arc<dyn Store>, embedder: &TestEmbedder) -> usize {
    let mut done = 0;
    loop {
        let pending = store
            .claim_embeddings(embedder.id(), 16, LONG)
            .await
            .unwrap();
        if pending.is_empty() {
            return done;
        }
        done += pending.len();
        let vectors = pending
            .iter()
            .map(|p| {
                assert_eq!(p.embedder, embedder.id());
                (p.episode, embedder.embed_one(&p.content))
            })
            .collect();
        store
            .store_embeddings(embedder.id(), vectors)
            .await
            .unwrap();
    }
}

/// The handles queued for `embedder`, claimed and at once released (a look that leaves
/// the queue as it was).
pub async fn queued_for(store: &Arc<dyn Store>, embedder: &str) -> Vec<EpisodeHandle> {
    let pending = store
        .claim_embeddings(embedder, 10_000, LONG)
        .await
        .unwrap();
    let handles: Vec<EpisodeHandle> = pending.iter().map(|p| p.episode).collect();
    store.release_embeddings(&handles).await.unwrap();
    handles
}

/// The filter cases of `filter_language_semantics` (and of the index's evaluation in
/// `ranking`): each filter with the episodes it selects.
pub const FILTER_CASES: &[(&str, &[&str])] = &[
    ("producer_id = 'alice'", &["e1"]),
    ("producer_id != 'alice'", &["e2", "e3"]),
    ("m.topic = 'food'", &["e1"]),
    ("metadata.topic != 'food'", &["e2"]),
    ("NOT m.topic = 'food'", &["e2", "e3"]),
    ("m.turn > 5", &["e2"]),
    ("m.turn < 5", &["e1"]),
    ("m.turn >= 2 AND m.turn <= 10", &["e1", "e2"]),
    ("m.turn = 10.0", &["e2"]),
    ("m.turn < '5'", &["e1", "e2"]), // strings compare as strings
    ("m.topic IN ('food', 'travel')", &["e1", "e2"]),
    ("m.topic NOT IN ('food')", &["e2"]),
    ("m.topic IS NULL", &["e3"]),
    ("m.topic IS NOT NULL", &["e1", "e2"]),
    ("producer_role IS NULL", &["e2", "e3"]),
    ("producer_role = 'user'", &["e1"]),
    ("produced_for_id IS NULL", &["e1", "e2", "e3"]),
    ("created_at > '1970-01-01T00:00:01Z'", &["e2", "e3"]),
    ("created_at <= 2", &["e1", "e2"]),
    ("episode_type = 'message'", &["e1", "e2", "e3"]),
    (
        "m.topic = 'food' OR producer_id = 'carol' AND m.note = 'x.y'",
        &["e1", "e3"],
    ),
    (
        "(m.topic = 'food' OR producer_id = 'carol') AND m.note = 'x.y'",
        &["e3"],
    ),
    (
        "m.nothing = 'x' OR NOT (m.nothing = 'x')",
        &["e1", "e2", "e3"],
    ),
];

/// A project holding the episodes `e1`, `e2`, `e3` of `FILTER_CASES` (each also says
/// "episode", for lexical reads).
pub async fn filter_project(store: &Arc<dyn Store>) -> ProjectAccess {
    let k = project(store).await;
    let mut e1 = episode(
        "e1",
        "alice",
        &[("topic", "food"), ("turn", "2")],
        1_000_000,
    );
    e1.producer_role = "user".into();
    let e2 = episode(
        "e2",
        "bob",
        &[("topic", "travel"), ("turn", "10")],
        2_000_000,
    );
    let e3 = episode("e3", "carol", &[("note", "x.y")], 3_000_000);
    let mut batch = vec![e1, e2, e3];
    for e in &mut batch {
        e.content = format!("{} episode", e.content);
    }
    add(store, &k, batch).await;
    k
}

/// "e1 episode" -> "e1".
pub fn names(contents: Vec<String>) -> Vec<String> {
    contents
        .into_iter()
        .map(|c| c.trim_end_matches(" episode").to_string())
        .collect()
}

/// The largest filters the parser accepts, over one episode that passes each.
pub fn largest_filters() -> Vec<String> {
    let ors = (0..MAX_PREDICATES)
        .map(|i| format!("m.n = {i}"))
        .collect::<Vec<_>>()
        .join(" OR ");
    let nested = format!("{}m.n = 8{}", "(NOT NOT ".repeat(21), ")".repeat(21));
    let values = (0..MAX_IN_VALUES)
        .map(|i| {
            if i % 2 == 0 {
                i.to_string()
            } else {
                format!("'v{i}'")
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    vec![
        ors,
        nested,
        format!("m.n IN ({values})"),
        format!("m.s IN ({values})"),
    ]
}

/// A new directory for a SQLite store, under the target directory. Directories left
/// by runs more than an hour old are removed (a store cannot keep its directory's
/// guard, as it is handed out as `Arc<dyn Store>`).
pub fn scratch_dir() -> PathBuf {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("conformance");
    SWEPT.call_once(|| sweep(&root, Duration::from_secs(3600)));
    std::fs::create_dir_all(&root).unwrap();
    tempfile::Builder::new()
        .prefix("store-")
        .tempdir_in(&root)
        .unwrap()
        .keep()
}

fn sweep(root: &std::path::Path, older_than: Duration) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|at| at.elapsed().unwrap_or_default() > older_than);
        if old {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
