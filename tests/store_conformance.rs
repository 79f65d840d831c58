//! One conformance suite for every storage backend, written against the traits.
//! `conformance!(module, async { make a fresh Arc<dyn Store> })` instantiates it.

use std::collections::BTreeMap;
use std::sync::Arc;

use memmachine::embed::Embedder;
use memmachine::embed::hash::HashEmbedder;
use memmachine::error::Error;
use memmachine::model::filter::parse;
use memmachine::model::{
    ApiKeyRecord, EpisodicConfigUpdate, KeyScope, NewEpisode, ProjectConfig, ProjectKey,
};
use memmachine::store::{EmbedderChoice, Store, StoreStats};

fn key(org: &str, project: &str) -> ProjectKey {
    ProjectKey::parse(org, project).unwrap()
}

fn episode(
    content: &str,
    producer: &str,
    metadata: &[(&str, &str)],
    created_at: i64,
) -> NewEpisode {
    NewEpisode {
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

async fn project(store: &Arc<dyn Store>, org: &str, name: &str) -> ProjectKey {
    let k = key(org, name);
    store
        .create_project(&k, "", &ProjectConfig::default())
        .await
        .unwrap();
    k
}

pub async fn universal_project_exists(store: Arc<dyn Store>) {
    let p = store
        .get_project(&ProjectKey::universal())
        .await
        .unwrap()
        .unwrap();
    assert!(p.key.is_universal());
    assert!(p.episodic.enabled);
}

pub async fn projects_are_created_once_listed_in_order_and_deleted(store: Arc<dyn Store>) {
    let config = ProjectConfig {
        embedder: "hash".into(),
        reranker: "rrf".into(),
    };
    let created = store
        .create_project(&key("b", "p1"), "first", &config)
        .await
        .unwrap();
    assert_eq!(created.description, "first");
    assert_eq!(created.config, config);
    assert!(matches!(
        store.create_project(&key("b", "p1"), "", &config).await,
        Err(Error::AlreadyExists(_))
    ));
    project(&store, "a", "z").await;
    project(&store, "b", "p0").await;
    let all = store.list_projects(None, None, 100).await.unwrap();
    let names: Vec<String> = all.iter().map(|p| p.key.to_string()).collect();
    assert_eq!(names, ["a/z", "b/p0", "b/p1", "universal/universal"]);
    let org_b = store.list_projects(Some("b"), None, 100).await.unwrap();
    assert_eq!(org_b.len(), 2);
    let after = store
        .list_projects(None, Some(&key("b", "p0")), 1)
        .await
        .unwrap();
    assert_eq!(after[0].key, key("b", "p1"));
    assert!(store.delete_project(&key("b", "p1")).await.unwrap());
    assert!(!store.delete_project(&key("b", "p1")).await.unwrap());
    assert!(store.get_project(&key("b", "p1")).await.unwrap().is_none());
}

pub async fn deleting_a_project_deletes_its_memories(store: Arc<dyn Store>) {
    let k = project(&store, "o", "doomed").await;
    store
        .add_episodes(&k, vec![episode("the secret word is plum", "u", &[], 1)])
        .await
        .unwrap();
    store.delete_project(&k).await.unwrap();
    assert!(matches!(
        store.count_episodes(&k).await,
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        store.search_lexical(&k, "plum", None, 10).await,
        Err(Error::NotFound(_))
    ));
    // A new project of the same name starts empty.
    project(&store, "o", "doomed").await;
    assert_eq!(store.count_episodes(&k).await.unwrap(), 0);
    assert!(
        store
            .search_lexical(&k, "plum", None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn unknown_projects_are_not_found_and_never_created(store: Arc<dyn Store>) {
    let k = key("o", "ghost");
    assert!(matches!(
        store
            .add_episodes(&k, vec![episode("x", "u", &[], 1)])
            .await,
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        store.list_episodes(&k, None, 0, 10).await,
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        store.recent_episodes(&k, None, 10).await,
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        store.delete_episodes(&k, &[uuid::Uuid::new_v4()]).await,
        Err(Error::NotFound(_))
    ));
    assert!(store.get_project(&k).await.unwrap().is_none());
    let update = EpisodicConfigUpdate::default();
    assert!(
        store
            .update_episodic_config(&k, update)
            .await
            .unwrap()
            .is_none()
    );
}

pub async fn episodes_get_consecutive_sequence_numbers_and_list_in_order(store: Arc<dyn Store>) {
    let k = project(&store, "o", "seq").await;
    let first = store
        .add_episodes(
            &k,
            (0..3)
                .map(|i| episode(&format!("m{i}"), "u", &[], i))
                .collect(),
        )
        .await
        .unwrap();
    let second = store
        .add_episodes(&k, vec![episode("m3", "u", &[], 3)])
        .await
        .unwrap();
    assert_eq!(first, [1, 2, 3]);
    assert_eq!(second, [4]);
    let page = store.list_episodes(&k, None, 1, 2).await.unwrap();
    let contents: Vec<_> = page.iter().map(|e| e.content.as_str()).collect();
    assert_eq!(contents, ["m1", "m2"]);
    let recent = store.recent_episodes(&k, None, 2).await.unwrap();
    let contents: Vec<_> = recent.iter().map(|e| e.content.as_str()).collect();
    assert_eq!(contents, ["m2", "m3"], "recent episodes come oldest first");
    assert_eq!(store.count_episodes(&k).await.unwrap(), 4);
}

pub async fn episodes_round_trip_every_field(store: Arc<dyn Store>) {
    let k = project(&store, "o", "fields").await;
    let mut e = episode(
        "hello there",
        "alice",
        &[("dia_id", "D1:1"), ("k.v", "x")],
        1_683_554_160_123_456,
    );
    e.producer_role = "assistant".into();
    e.produced_for_id = "bob".into();
    store.add_episodes(&k, vec![e.clone()]).await.unwrap();
    let got = &store.list_episodes(&k, None, 0, 10).await.unwrap()[0];
    assert_eq!(got.uid, e.uid);
    assert_eq!(got.content, e.content);
    assert_eq!(got.producer_id, "alice");
    assert_eq!(got.producer_role, "assistant");
    assert_eq!(got.produced_for_id, "bob");
    assert_eq!(got.created_at_micros, e.created_at_micros);
    assert_eq!(got.metadata, e.metadata);
    assert_eq!(got.episode_type, "message");
    assert_eq!(got.content_type, "string");
}

pub async fn a_duplicate_uid_fails_the_whole_batch(store: Arc<dyn Store>) {
    let k = project(&store, "o", "atomic").await;
    let first = episode("one", "u", &[], 1);
    store.add_episodes(&k, vec![first.clone()]).await.unwrap();
    let result = store
        .add_episodes(&k, vec![episode("two", "u", &[], 2), first])
        .await;
    assert!(result.is_err());
    assert_eq!(
        store.count_episodes(&k).await.unwrap(),
        1,
        "nothing of the failed batch stays"
    );
    let next = store
        .add_episodes(&k, vec![episode("three", "u", &[], 3)])
        .await
        .unwrap();
    assert_eq!(next, [2], "a failed batch consumes no sequence numbers");
}

pub async fn deletes_stay_inside_the_project(store: Arc<dyn Store>) {
    let a = project(&store, "o", "a").await;
    let b = project(&store, "o", "b").await;
    let in_a = episode("apple pie recipe", "u", &[], 1);
    let in_b = episode("apple cider", "u", &[], 1);
    store.add_episodes(&a, vec![in_a.clone()]).await.unwrap();
    store.add_episodes(&b, vec![in_b.clone()]).await.unwrap();
    // B's id through A: not found, and nothing is deleted, not even A's own id.
    let err = store
        .delete_episodes(&a, &[in_a.uid, in_b.uid])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound(ref m) if m.contains(&in_b.uid.to_string())));
    assert_eq!(store.count_episodes(&a).await.unwrap(), 1);
    assert_eq!(store.count_episodes(&b).await.unwrap(), 1);
    assert_eq!(
        store
            .delete_episodes(&a, &[in_a.uid, in_a.uid])
            .await
            .unwrap(),
        1
    );
    assert!(
        store
            .search_lexical(&a, "apple", None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .search_lexical(&b, "apple", None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
}

pub async fn lexical_search_ranks_within_the_project_only(store: Arc<dyn Store>) {
    let a = project(&store, "o", "ranks").await;
    let other = project(&store, "p", "ranks").await;
    store
        .add_episodes(
            &a,
            vec![
                episode(
                    "I adopted a golden retriever named Max last week.",
                    "Caroline",
                    &[],
                    1,
                ),
                episode("Max loves playing fetch at the beach.", "Caroline", &[], 2),
                episode("I went hiking in Yosemite with my kids.", "Melanie", &[], 3),
            ],
        )
        .await
        .unwrap();
    store
        .add_episodes(&other, vec![episode("my retriever dog Max", "x", &[], 1)])
        .await
        .unwrap();
    let hits = store
        .search_lexical(
            &a,
            "What is the name of the retriever Caroline adopted?",
            None,
            10,
        )
        .await
        .unwrap();
    assert_eq!(
        hits[0].episode.content,
        "I adopted a golden retriever named Max last week."
    );
    assert!(
        hits.windows(2).all(|w| w[0].score >= w[1].score),
        "best first"
    );
    assert!(hits.iter().all(|h| h.score > 0.0));
    assert!(
        hits.iter()
            .all(|h| !h.episode.content.contains("my retriever dog"))
    );
    // Stemming: "hike" finds "hiking" first (its neighbours follow, through their
    // context).
    let hike = store.search_lexical(&a, "hike", None, 10).await.unwrap();
    assert_eq!(
        hike[0].episode.content,
        "I went hiking in Yosemite with my kids."
    );
    let top1 = store.search_lexical(&a, "max", None, 1).await.unwrap();
    assert_eq!(top1.len(), 1);
    assert!(
        store
            .search_lexical(&a, "???", None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .search_lexical(&a, "zebra", None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn search_sees_every_acknowledged_change(store: Arc<dyn Store>) {
    let k = project(&store, "o", "live").await;
    let first = episode("the kettle is in the cupboard", "u", &[], 1);
    store.add_episodes(&k, vec![first.clone()]).await.unwrap();
    // The first search builds the project's index; later writes must reach it.
    assert_eq!(
        store
            .search_lexical(&k, "kettle", None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    let second = episode("a new kettle arrived", "u", &[], 2);
    store.add_episodes(&k, vec![second.clone()]).await.unwrap();
    let hits = store.search_lexical(&k, "kettle", None, 10).await.unwrap();
    assert_eq!(hits.len(), 2);
    store.delete_episodes(&k, &[first.uid]).await.unwrap();
    let hits = store
        .search_lexical(&k, "kettle cupboard", None, 10)
        .await
        .unwrap();
    let uids: Vec<_> = hits.iter().map(|h| h.episode.uid).collect();
    assert_eq!(uids, [second.uid]);
    let many: Vec<_> = (0..300)
        .map(|i| episode(&format!("kettle number {i}"), "u", &[], i))
        .collect();
    store.add_episodes(&k, many).await.unwrap();
    assert_eq!(
        store
            .search_lexical(&k, "kettle", None, 1000)
            .await
            .unwrap()
            .len(),
        301
    );
}

pub async fn filters_apply_before_the_cut(store: Arc<dyn Store>) {
    let k = project(&store, "o", "cut").await;
    let mut batch: Vec<_> = (0..20)
        .map(|i| episode("coffee coffee coffee", "alice", &[], i))
        .collect();
    batch.push(episode("coffee", "bob", &[], 100));
    store.add_episodes(&k, batch).await.unwrap();
    let filter = parse("producer_id = 'bob'").unwrap();
    let hits = store
        .search_lexical(&k, "coffee", filter.as_ref(), 5)
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].episode.producer_id, "bob");
}

pub async fn filter_language_semantics(store: Arc<dyn Store>) {
    let k = project(&store, "o", "filters").await;
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
    store.add_episodes(&k, vec![e1, e2, e3]).await.unwrap();
    let cases: &[(&str, &[&str])] = &[
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
    for (text, expected) in cases {
        let filter = parse(text).unwrap();
        let got: Vec<String> = store
            .list_episodes(&k, filter.as_ref(), 0, 100)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.content)
            .collect();
        assert_eq!(&got, expected, "filter {text}");
        let recent = store
            .recent_episodes(&k, filter.as_ref(), 100)
            .await
            .unwrap();
        assert_eq!(recent.len(), expected.len(), "recent with filter {text}");
    }
}

pub async fn the_largest_filters_run(store: Arc<dyn Store>) {
    use memmachine::model::filter::{MAX_IN_VALUES, MAX_PREDICATES};
    let k = project(&store, "o", "large").await;
    store
        .add_episodes(&k, vec![episode("e", "u", &[("n", "8"), ("s", "v7")], 1)])
        .await
        .unwrap();
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
    for text in [
        ors,
        nested,
        format!("m.n IN ({values})"),
        format!("m.s IN ({values})"),
    ] {
        let filter = parse(&text).unwrap();
        let listed = store
            .list_episodes(&k, filter.as_ref(), 0, 10)
            .await
            .unwrap();
        assert_eq!(listed.len(), 1, "{}", &text[..40]);
        let found = store
            .search_lexical(&k, "e", filter.as_ref(), 10)
            .await
            .unwrap();
        assert_eq!(found.len(), 1, "{}", &text[..40]);
    }
}

/// Every project uses `default` (an embedder id), or none.
async fn use_default(store: &Arc<dyn Store>, default: Option<&str>) -> u64 {
    let choice = EmbedderChoice {
        named: BTreeMap::new(),
        default: default.map(str::to_string),
    };
    store.use_embedders(choice).await.unwrap()
}

/// Embeds every queued episode with the hash embedders, as the worker would.
async fn embed_all_with(store: &Arc<dyn Store>, embedders: &[&HashEmbedder]) -> usize {
    let mut done = 0;
    for embedder in embedders {
        loop {
            let pending = store.pending_embeddings(embedder.id(), 16).await.unwrap();
            if pending.is_empty() {
                break;
            }
            done += pending.len();
            for p in pending {
                assert_eq!(p.embedder, embedder.id());
                let vector = embedder.embed_one(&p.content);
                store
                    .store_embeddings(embedder.id(), vec![(p.episode, vector)])
                    .await
                    .unwrap();
            }
        }
    }
    done
}

async fn embed_all(store: &Arc<dyn Store>, embedder: &HashEmbedder) -> usize {
    embed_all_with(store, &[embedder]).await
}

pub async fn vectors_are_queued_stored_and_searched(store: Arc<dyn Store>) {
    let embedder = HashEmbedder::new(64);
    assert_eq!(use_default(&store, Some(embedder.id())).await, 0);
    let k = project(&store, "o", "dense").await;
    let other = project(&store, "o", "elsewhere").await;
    let doomed = episode("red apples and green pears", "bob", &[], 1);
    store
        .add_episodes(
            &k,
            vec![
                episode("the red apple is ripe", "alice", &[], 1),
                doomed.clone(),
                episode("stock prices fell", "alice", &[], 2),
            ],
        )
        .await
        .unwrap();
    store
        .add_episodes(&other, vec![episode("red apple", "x", &[], 1)])
        .await
        .unwrap();
    let query = embedder.embed_one("red apple");
    // Searchable lexically at once; by vector once embedded.
    assert!(
        store
            .search_dense(&k, &query, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(embed_all(&store, &embedder).await, 4);
    let hits = store.search_dense(&k, &query, None, 10).await.unwrap();
    assert_eq!(hits.len(), 3, "only this project's episodes");
    assert_eq!(hits[0].episode.content, "the red apple is ripe");
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
    let bob = parse("producer_id = 'bob'").unwrap();
    let filtered = store
        .search_dense(&k, &query, bob.as_ref(), 10)
        .await
        .unwrap();
    assert_eq!(filtered.len(), 1);
    store.delete_episodes(&k, &[doomed.uid]).await.unwrap();
    assert_eq!(
        store
            .search_dense(&k, &query, None, 10)
            .await
            .unwrap()
            .len(),
        2
    );
    // An episode deleted while queued leaves the queue with it.
    let queued = episode("queued then deleted", "u", &[], 3);
    store.add_episodes(&k, vec![queued.clone()]).await.unwrap();
    store.delete_episodes(&k, &[queued.uid]).await.unwrap();
    assert!(
        store
            .pending_embeddings(embedder.id(), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn hybrid_search_fuses_text_and_vectors(store: Arc<dyn Store>) {
    let embedder = HashEmbedder::new(64);
    use_default(&store, Some(embedder.id())).await;
    let k = project(&store, "o", "hybrid").await;
    let other = project(&store, "o", "other").await;
    store
        .add_episodes(
            &k,
            vec![
                episode("the red apple is ripe", "alice", &[], 1),
                episode("stock prices fell", "bob", &[], 2),
                episode("a quiet afternoon", "bob", &[], 3),
            ],
        )
        .await
        .unwrap();
    store
        .add_episodes(&other, vec![episode("red apple", "x", &[], 1)])
        .await
        .unwrap();
    let query = embedder.embed_one("red apple");
    // Before any vector exists, text alone ranks.
    let early = store
        .search_hybrid(&k, "red apple", &query, None, 10)
        .await
        .unwrap();
    assert_eq!(early[0].episode.content, "the red apple is ripe");
    embed_all(&store, &embedder).await;
    let hits = store
        .search_hybrid(&k, "red apple", &query, None, 10)
        .await
        .unwrap();
    assert_eq!(hits.len(), 3, "every episode of this project, no other");
    assert_eq!(hits[0].episode.content, "the red apple is ripe");
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
    let bob = parse("producer_id = 'bob'").unwrap();
    let filtered = store
        .search_hybrid(&k, "red apple", &query, bob.as_ref(), 1)
        .await
        .unwrap();
    assert_eq!(filtered.len(), 1);
    assert_eq!(filtered[0].episode.producer_id, "bob");
}

pub async fn episode_contexts_are_neighbours_in_order(store: Arc<dyn Store>) {
    let k = project(&store, "o", "ctx").await;
    let other = project(&store, "o", "other").await;
    let episodes: Vec<NewEpisode> = (0..8)
        .map(|i| {
            let producer = if i % 2 == 0 { "even" } else { "odd" };
            episode(&format!("turn {i}"), producer, &[], i)
        })
        .collect();
    store.add_episodes(&k, episodes.clone()).await.unwrap();
    let stranger = episode("elsewhere", "x", &[], 1);
    store
        .add_episodes(&other, vec![stranger.clone()])
        .await
        .unwrap();
    let contents = |window: &Vec<memmachine::model::Episode>| -> Vec<String> {
        window.iter().map(|e| e.content.clone()).collect()
    };
    let windows = store
        .episode_contexts(
            &k,
            &[episodes[4].uid, episodes[0].uid, stranger.uid],
            1,
            2,
            None,
        )
        .await
        .unwrap();
    assert_eq!(windows.len(), 3);
    assert_eq!(
        contents(&windows[0]),
        ["turn 3", "turn 4", "turn 5", "turn 6"]
    );
    assert_eq!(contents(&windows[1]), ["turn 0", "turn 1", "turn 2"]);
    assert!(
        windows[2].is_empty(),
        "another project's episode is not found"
    );
    let even = parse("producer_id = 'even'").unwrap();
    let filtered = store
        .episode_contexts(&k, &[episodes[4].uid], 1, 1, even.as_ref())
        .await
        .unwrap();
    assert_eq!(contents(&filtered[0]), ["turn 2", "turn 4", "turn 6"]);
    store.delete_episodes(&k, &[episodes[5].uid]).await.unwrap();
    let after = store
        .episode_contexts(&k, &[episodes[4].uid], 0, 1, None)
        .await
        .unwrap();
    assert_eq!(contents(&after[0]), ["turn 4", "turn 6"]);
}

pub async fn a_new_embedder_requeues_everything(store: Arc<dyn Store>) {
    use_default(&store, None).await;
    let k = project(&store, "o", "switch").await;
    store
        .add_episodes(
            &k,
            (0..5)
                .map(|i| episode(&format!("note {i}"), "u", &[], i))
                .collect(),
        )
        .await
        .unwrap();
    let first = HashEmbedder::new(32);
    assert!(
        store
            .pending_embeddings(first.id(), 10)
            .await
            .unwrap()
            .is_empty(),
        "no embedder, no queue"
    );
    assert_eq!(use_default(&store, Some(first.id())).await, 5);
    assert_eq!(embed_all(&store, &first).await, 5);
    assert_eq!(use_default(&store, Some(first.id())).await, 0);
    let second = HashEmbedder::new(48);
    assert_eq!(use_default(&store, Some(second.id())).await, 5);
    // Until re-embedded, the old vectors are not searched (another embedder's space)...
    let query = second.embed_one("note 1");
    assert!(
        store
            .search_dense(&k, &query, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // ...but text still is, and hybrid search ranks by it meanwhile.
    let meanwhile = store
        .search_hybrid(&k, "note 1", &query, None, 10)
        .await
        .unwrap();
    assert_eq!(meanwhile.len(), 5);
    assert_eq!(embed_all(&store, &second).await, 5);
    assert_eq!(
        store
            .search_dense(&k, &query, None, 10)
            .await
            .unwrap()
            .len(),
        5
    );
}

pub async fn projects_use_the_embedder_they_name(store: Arc<dyn Store>) {
    let (small, large) = (HashEmbedder::new(32), HashEmbedder::new(48));
    let choice = EmbedderChoice {
        named: [
            ("small".to_string(), small.id().to_string()),
            ("large".to_string(), large.id().to_string()),
        ]
        .into(),
        default: Some(small.id().to_string()),
    };
    store.use_embedders(choice.clone()).await.unwrap();
    let with = |embedder: &str| ProjectConfig {
        embedder: embedder.into(),
        reranker: String::new(),
    };
    let (default, named, without) = (key("o", "default"), key("o", "named"), key("o", "none"));
    for (k, config) in [
        (&default, with("")),
        (&named, with("large")),
        (&without, with("none")),
    ] {
        store.create_project(k, "", &config).await.unwrap();
        let turns = (0..2)
            .map(|i| episode(&format!("turn {i}"), "u", &[], i))
            .collect();
        store.add_episodes(k, turns).await.unwrap();
    }
    // Each embedder sees its own projects' episodes; `none` is never queued.
    for embedder in [&small, &large] {
        let pending = store.pending_embeddings(embedder.id(), 10).await.unwrap();
        assert_eq!(pending.len(), 2, "{}", embedder.id());
        assert!(pending.iter().all(|p| p.embedder == embedder.id()));
    }
    assert_eq!(embed_all_with(&store, &[&small, &large]).await, 4);
    let query = large.embed_one("turn 1");
    assert_eq!(
        store
            .search_dense(&named, &query, None, 10)
            .await
            .unwrap()
            .len(),
        2
    );
    assert!(
        store
            .search_dense(&default, &query, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .search_dense(&without, &query, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // A new default re-embeds the projects that follow it, and only them.
    let changed = EmbedderChoice {
        default: Some(large.id().to_string()),
        ..choice
    };
    assert_eq!(store.use_embedders(changed).await.unwrap(), 2);
    assert!(
        store
            .pending_embeddings(small.id(), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .pending_embeddings(large.id(), 10)
            .await
            .unwrap()
            .len(),
        2
    );
}

pub async fn abandoned_episodes_leave_the_queue_and_stay_searchable(store: Arc<dyn Store>) {
    let embedder = HashEmbedder::new(32);
    use_default(&store, Some(embedder.id())).await;
    let k = project(&store, "o", "abandon").await;
    store
        .add_episodes(
            &k,
            vec![
                episode("an ordinary note", "u", &[], 1),
                episode("a text the model refuses", "u", &[], 2),
            ],
        )
        .await
        .unwrap();
    let pending = store.pending_embeddings(embedder.id(), 10).await.unwrap();
    let refused = pending
        .iter()
        .find(|p| p.content.contains("refuses"))
        .unwrap()
        .episode;
    assert_eq!(store.abandon_embeddings(vec![refused]).await.unwrap(), 1);
    assert_eq!(
        store.abandon_embeddings(vec![refused]).await.unwrap(),
        0,
        "already off the queue"
    );
    let left = store.pending_embeddings(embedder.id(), 10).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].content, "an ordinary note");
    assert_eq!(embed_all(&store, &embedder).await, 1);
    let found = store
        .search_hybrid(&k, "refuses", &embedder.embed_one("refuses"), None, 10)
        .await
        .unwrap();
    assert!(
        found
            .iter()
            .any(|e| e.episode.content == "a text the model refuses"),
        "still found by its words"
    );
}

pub async fn episodic_config_updates_are_partial(store: Arc<dyn Store>) {
    let k = project(&store, "o", "config").await;
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
    let stored = store.get_project(&k).await.unwrap().unwrap();
    assert_eq!(stored.episodic, config);
}

fn api_key(id: &str, scope: KeyScope, created_at: i64) -> ApiKeyRecord {
    ApiKeyRecord {
        id: id.into(),
        scope,
        label: format!("label of {id}"),
        salt: vec![1, 2, 3],
        hash: vec![4; 32],
        created_at_micros: created_at,
        revoked_at_micros: None,
    }
}

pub async fn api_keys_are_kept_listed_and_revoked(store: Arc<dyn Store>) {
    let admin = api_key("aaaaaaaaaaaa", KeyScope::Admin, 2);
    let acme = api_key("bbbbbbbbbbbb", KeyScope::Org("acme".into()), 1);
    store.insert_key(&admin).await.unwrap();
    store.insert_key(&acme).await.unwrap();
    assert!(matches!(
        store.insert_key(&admin).await,
        Err(Error::AlreadyExists(_))
    ));
    assert_eq!(store.find_key(&acme.id).await.unwrap(), Some(acme.clone()));
    assert_eq!(store.find_key("cccccccccccc").await.unwrap(), None);
    assert_eq!(
        store.list_keys().await.unwrap(),
        vec![acme.clone(), admin.clone()],
        "oldest first"
    );
    assert!(store.revoke_key(&acme.id).await.unwrap());
    let revoked = store.find_key(&acme.id).await.unwrap().unwrap();
    let at = revoked.revoked_at_micros.expect("revoked");
    // Revoking again keeps the first time; an unknown id is false.
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    assert!(store.revoke_key(&acme.id).await.unwrap());
    assert_eq!(
        store
            .find_key(&acme.id)
            .await
            .unwrap()
            .unwrap()
            .revoked_at_micros,
        Some(at)
    );
    assert!(!store.revoke_key("cccccccccccc").await.unwrap());
    assert_eq!(
        store
            .find_key(&admin.id)
            .await
            .unwrap()
            .unwrap()
            .revoked_at_micros,
        None
    );
}

pub async fn stats_count_episodes_and_the_embedding_queue(store: Arc<dyn Store>) {
    assert_eq!(store.stats().await.unwrap(), StoreStats::default());
    let k = project(&store, "acme", "notes").await;
    store
        .add_episodes(
            &k,
            vec![episode("a", "u", &[], 1), episode("b", "u", &[], 2)],
        )
        .await
        .unwrap();
    let stats = store.stats().await.unwrap();
    assert_eq!(
        (stats.episodes, stats.embedding_queue),
        (2, 0),
        "no embedder, no queue"
    );
    let embedder = HashEmbedder::new(8);
    use_default(&store, Some(embedder.id())).await;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.episodes, stats.embedding_queue), (2, 2));
    assert!(stats.embedding_lag_secs > 0.0 && stats.embedding_lag_secs < 60.0);
    embed_all(&store, &embedder).await;
    let stats = store.stats().await.unwrap();
    assert_eq!(stats.embedding_queue, 0);
    assert_eq!(stats.embedding_lag_secs, 0.0);
}

/// Instantiates every test of the suite for one backend.
macro_rules! conformance {
    ($backend:ident, $make:expr) => {
        mod $backend {
            use super::*;
            conformance!(@tests $make;
                universal_project_exists,
                projects_are_created_once_listed_in_order_and_deleted,
                deleting_a_project_deletes_its_memories,
                unknown_projects_are_not_found_and_never_created,
                episodes_get_consecutive_sequence_numbers_and_list_in_order,
                episodes_round_trip_every_field,
                a_duplicate_uid_fails_the_whole_batch,
                deletes_stay_inside_the_project,
                lexical_search_ranks_within_the_project_only,
                filters_apply_before_the_cut,
                search_sees_every_acknowledged_change,
                filter_language_semantics,
                the_largest_filters_run,
                episodic_config_updates_are_partial,
                vectors_are_queued_stored_and_searched,
                a_new_embedder_requeues_everything,
                projects_use_the_embedder_they_name,
                abandoned_episodes_leave_the_queue_and_stay_searchable,
                hybrid_search_fuses_text_and_vectors,
                episode_contexts_are_neighbours_in_order,
                api_keys_are_kept_listed_and_revoked,
                stats_count_episodes_and_the_embedding_queue,
            );
        }
    };
    (@tests $make:expr; $($test:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $test() {
                let (store, _guard) = $make;
                super::$test(store).await;
            }
        )*
    };
}

fn sqlite_store() -> (Arc<dyn Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = memmachine::store::sqlite::SqliteStore::open(dir.path()).unwrap();
    (Arc::new(store), dir)
}

conformance!(sqlite, sqlite_store());
