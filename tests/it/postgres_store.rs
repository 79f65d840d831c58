//! The PostgreSQL backend against a real server (`scripts/postgres.sh start`; its URL in
//! `MEMMACHINE_TEST_POSTGRES`, which `scripts/test.sh` sets). Without it every test
//! skips, saying so (under CI it fails).
//!
//! What is PostgreSQL's own beyond the conformance suite (`conformance`, which runs on
//! PostgreSQL too): projects, keys and filters compared with the SQLite backend doing
//! the same, its vector index, concurrent writers and semantic claimers on one
//! database, migrations racing, and errors mapped to what a caller can do.

use memmachine_core::access::{Access, ProjectAccess};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crate::common;
use memmachine::store::postgres::{PoolSettings, PostgresStore};
use memmachine::store::sqlite::SqliteStore;
use memmachine::store::{Change, ChangeFeed, EpisodeStore, StoreLifecycle, VectorStore};
use memmachine::store::{KeyStore, ProjectStore};
use memmachine_core::error::Error;
use memmachine_core::model::filter::parse;
use memmachine_core::model::{
    ApiKeyRecord, ChangeSeq, EpisodeHandle, EpisodicConfigUpdate, FeatureId, KeyScope, NewEpisode,
    ProjectConfig, ProjectKey, SetId,
};
use sqlx::Connection;

const LONG: Duration = Duration::from_secs(600);

fn key(org: &str, project: &str) -> ProjectAccess {
    Access::system(ProjectKey::parse(org, project).unwrap())
}

fn episode(content: &str, metadata: &[(&str, &str)]) -> NewEpisode {
    NewEpisode {
        expires_at_micros: None,
        idempotency: None,
        uid: uuid::Uuid::new_v4(),
        content: content.into(),
        producer_id: "alice".into(),
        producer_role: "user".into(),
        produced_for_id: String::new(),
        episode_type: "message".into(),
        content_type: "string".into(),
        created_at_micros: 1_000_000,
        metadata: metadata
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
    }
}

/// A store on a fresh database, with its URL; `None`: skip.
async fn fresh() -> Option<(PostgresStore, String)> {
    let url = common::postgres::fresh_database().await?;
    let store = PostgresStore::connect(&url).await.unwrap();
    Some((store, url))
}

macro_rules! fresh_or_skip {
    () => {
        match fresh().await {
            Some(found) => found,
            None => return,
        }
    };
}

async fn project(store: &PostgresStore, org: &str, name: &str) -> ProjectAccess {
    let k = key(org, name);
    store
        .create_project(&k, "", &ProjectConfig::default())
        .await
        .unwrap();
    k
}

// --- Matching SQLite ---------------------------------------------------------------

/// What a script of project calls shows, without ids and times (which differ by
/// backend).
async fn project_script(store: &dyn ProjectStore) -> Vec<String> {
    let mut seen = Vec::new();
    let universal = store
        .get_project(&Access::system(ProjectKey::universal()))
        .await
        .unwrap();
    seen.push(format!("universal: {:?}", universal.map(|p| p.episodic)));
    for (org, name) in [("b", "x"), ("a", "z"), ("a", "y"), ("a", "Y"), ("c", "w")] {
        let config = ProjectConfig {
            embedder: format!("emb-{name}"),
            reranker: String::new(),
        };
        let p = store
            .create_project(&key(org, name), &format!("about {name}"), &config)
            .await
            .unwrap();
        seen.push(format!(
            "created {} {:?} {:?} {:?}",
            p.key, p.description, p.config, p.episodic
        ));
    }
    let dup = store
        .create_project(&key("a", "y"), "", &ProjectConfig::default())
        .await;
    seen.push(format!(
        "duplicate: {}",
        matches!(dup, Err(Error::AlreadyExists(_)))
    ));
    let mut after = None;
    loop {
        let page = store.list_projects(None, after.as_ref(), 2).await.unwrap();
        if page.is_empty() {
            break;
        }
        seen.push(format!(
            "page: {:?}",
            page.iter().map(|p| p.key.to_string()).collect::<Vec<_>>()
        ));
        after = page.last().map(|p| p.key.clone());
    }
    let in_a = store.list_projects(Some("a"), None, 10).await.unwrap();
    seen.push(format!(
        "org a: {:?}",
        in_a.iter().map(|p| p.key.to_string()).collect::<Vec<_>>()
    ));
    let updated = store
        .update_episodic_config(
            &key("a", "y"),
            EpisodicConfigUpdate {
                enabled: Some(false),
                long_term_memory_enabled: None,
                short_term_memory_enabled: Some(false),
                participant_aware: None,
                episode_retention_micros: None,
                ranking_weights: memmachine_core::model::RankingWeightsUpdate {
                    dense: Some(2.0),
                    ..Default::default()
                },
            },
        )
        .await
        .unwrap();
    seen.push(format!("updated: {updated:?}"));
    let missing = store
        .update_episodic_config(&key("a", "nope"), EpisodicConfigUpdate::default())
        .await
        .unwrap();
    seen.push(format!("update missing: {missing:?}"));
    let got = store.get_project(&key("a", "y")).await.unwrap().unwrap();
    seen.push(format!("after update: {:?}", got.episodic));
    seen.push(format!(
        "delete: {} then {}",
        store.delete_project(&key("a", "y")).await.unwrap(),
        store.delete_project(&key("a", "y")).await.unwrap()
    ));
    let again = store
        .create_project(&key("a", "y"), "", &ProjectConfig::default())
        .await
        .unwrap();
    seen.push(format!("recreated: {:?}", again.episodic));
    seen
}

#[tokio::test]
async fn projects_behave_as_in_sqlite() {
    let (pg, _) = fresh_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(dir.path()).unwrap();
    let expected = project_script(&sqlite).await;
    assert_eq!(project_script(&pg).await, expected);
    // Ids are never reused: a project made again has another handle.
    let first = pg.get_project(&key("b", "x")).await.unwrap().unwrap();
    pg.delete_project(&key("b", "x")).await.unwrap();
    let second = pg
        .create_project(&key("b", "x"), "", &ProjectConfig::default())
        .await
        .unwrap();
    assert!(second.internal_id > first.internal_id);
}

fn api_key(id: &str, scope: KeyScope, at: i64) -> ApiKeyRecord {
    ApiKeyRecord {
        id: id.into(),
        scope,
        label: format!("label {id}"),
        salt: vec![1, 2, 3],
        hash: vec![9; 32],
        created_at_micros: at,
        revoked_at_micros: None,
    }
}

async fn key_script(store: &dyn KeyStore) -> Vec<String> {
    let mut seen = Vec::new();
    for (id, scope, at) in [
        ("k2", KeyScope::Admin, 5),
        ("k1", KeyScope::Org("o".into()), 5),
        ("k0", KeyScope::Org("p".into()), 7),
    ] {
        store.insert_key(&api_key(id, scope, at)).await.unwrap();
    }
    let dup = store.insert_key(&api_key("k1", KeyScope::Admin, 1)).await;
    seen.push(format!(
        "duplicate: {}",
        matches!(dup, Err(Error::AlreadyExists(_)))
    ));
    seen.push(format!("find: {:?}", store.find_key("k1").await.unwrap()));
    seen.push(format!(
        "find missing: {:?}",
        store.find_key("zz").await.unwrap()
    ));
    let ids: Vec<String> = store
        .list_keys()
        .await
        .unwrap()
        .into_iter()
        .map(|k| k.id)
        .collect();
    seen.push(format!("list: {ids:?}"));
    seen.push(format!(
        "revoke: {} {}",
        store.revoke_key("k2").await.unwrap(),
        store.revoke_key("nope").await.unwrap()
    ));
    let first = store
        .find_key("k2")
        .await
        .unwrap()
        .unwrap()
        .revoked_at_micros;
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert!(store.revoke_key("k2").await.unwrap());
    let second = store
        .find_key("k2")
        .await
        .unwrap()
        .unwrap()
        .revoked_at_micros;
    seen.push(format!(
        "revoked once: {} {}",
        first.is_some(),
        first == second
    ));
    seen
}

#[tokio::test]
async fn api_keys_behave_as_in_sqlite() {
    let (pg, _) = fresh_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(dir.path()).unwrap();
    assert_eq!(key_script(&pg).await, key_script(&sqlite).await);
}

// --- Filters: the same episodes pass as in SQLite and in memory --------------------

#[tokio::test]
async fn filters_select_what_sqlite_and_the_in_memory_evaluation_select() {
    use memmachine_core::model::filter_eval::matches;
    use memmachine_domain::retrieval::episode_fields::EpisodeFields;

    let (pg, _) = fresh_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(dir.path()).unwrap();
    let k = key("f", "filters");
    let values = [
        "food",
        "Food",
        "42",
        " 7 ",
        "-1.5e3",
        "",
        "1e400",
        "1e-400",
        "\u{a0}5\u{3000}",
        "inf",
        "NaN",
        "0x10",
        "+.5",
        "5.",
        ".",
        "1_0",
        "é",
        "z",
        "10",
        "9",
        "-0",
    ];
    let episodes: Vec<NewEpisode> = (0..values.len() * 2)
        .map(|i| {
            let mut e = episode(&format!("talk {i}"), &[]);
            if i % 3 != 0 {
                e.metadata
                    .insert("topic".into(), values[i % values.len()].into());
            }
            e.producer_id = ["alice", "bob", "Ann"][i % 3].into();
            e.producer_role = if i % 2 == 0 {
                "user".into()
            } else {
                String::new()
            };
            e.created_at_micros = (i as i64 - 10) * 500_000;
            e
        })
        .collect();
    for store in [&pg as &dyn ProjectStore, &sqlite] {
        store
            .create_project(&k, "", &ProjectConfig::default())
            .await
            .unwrap();
    }
    pg.add_episodes(&k, episodes.clone(), None).await.unwrap();
    memmachine::store::EpisodeStore::add_episodes(&sqlite, &k, episodes, None)
        .await
        .unwrap();
    let all = pg.list_episodes(&k, None, 0, 1000).await.unwrap();
    let filters = [
        "m.topic = 'food'",
        "m.topic != 'food'",
        "m.topic > 'Food'",
        "m.topic < 'f'",
        "m.topic >= 'é'",
        "m.topic > 5",
        "m.topic < 0",
        "m.topic = 0",
        "m.topic >= 1e300",
        "m.topic = 5",
        "m.topic = 0.5",
        "m.topic != 7",
        "m.topic IN ('food', 42, 7)",
        "m.topic NOT IN ('food', 42, 7)",
        "m.topic NOT IN ('x')",
        "m.topic IS NULL",
        "m.topic IS NOT NULL",
        "NOT m.topic = 'food'",
        "m.absent != 'x'",
        "NOT (m.absent = 'x')",
        "producer_role IS NULL",
        "producer_role = 'user' AND producer_id != 'bob'",
        "producer_id > 'B' OR m.topic = ''",
        "produced_for_id IS NULL",
        "created_at >= 0",
        "created_at < '1970-01-01T00:00:02Z'",
        "created_at IN (0, 500000)",
        "NOT (created_at > 1 AND m.topic IN ('z', 9))",
        "episode_type = 'message'",
    ];
    for text in filters {
        let filter = parse(text).unwrap().unwrap();
        let uids = |list: Vec<memmachine_core::model::Episode>| -> Vec<uuid::Uuid> {
            list.into_iter().map(|e| e.uid).collect()
        };
        let by_pg = uids(pg.list_episodes(&k, Some(&filter), 0, 1000).await.unwrap());
        let by_sqlite: Vec<uuid::Uuid> = uids(
            memmachine::store::EpisodeStore::list_episodes(&sqlite, &k, Some(&filter), 0, 1000)
                .await
                .unwrap(),
        );
        let in_memory: Vec<uuid::Uuid> = all
            .iter()
            .filter(|e| matches(&filter, &EpisodeFields::of(e)))
            .map(|e| e.uid)
            .collect();
        assert_eq!(by_pg, in_memory, "{text}: PostgreSQL vs in memory");
        assert_eq!(by_pg, by_sqlite, "{text}: PostgreSQL vs SQLite");
        let recent = uids(pg.recent_episodes(&k, Some(&filter), 3).await.unwrap());
        assert_eq!(
            recent,
            &in_memory[in_memory.len().saturating_sub(3)..],
            "{text}"
        );
    }
}

/// `mm_num` (migration 3) holds the number `filter_eval::as_number` reads.
#[tokio::test]
async fn mm_num_reads_numbers_as_the_in_memory_evaluation_does() {
    let (pg, url) = fresh_or_skip!();
    drop(pg);
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    for text in [
        "5",
        " 5 ",
        "\t-1.5e3\n",
        "\u{a0}5\u{3000}",
        "\u{2003}7",
        "+.5",
        "5.",
        ".",
        "",
        " ",
        "1e400",
        "-1e400",
        "1e-400",
        "1e-320",
        "inf",
        "-infinity",
        "NaN",
        "0x10",
        "1_0",
        "1e",
        "e5",
        "--1",
        "1.2.3",
        "00012",
        "1E+2",
        "١٢",
        "\u{1c}5",
    ] {
        let got: Option<f64> = sqlx::query_scalar("SELECT mm_num($1)")
            .bind(text)
            .fetch_one(&mut conn)
            .await
            .unwrap_or_else(|err| panic!("mm_num({text:?}): {err}"));
        let want = memmachine_core::model::filter_eval::as_number(text);
        assert_eq!(got, want, "mm_num({text:?})");
    }
}

// --- The change feed ---------------------------------------------------------------

#[tokio::test]
async fn stored_vectors_are_in_the_feed_and_come_back() {
    let (pg, url) = fresh_or_skip!();
    let k = project(&pg, "o", "vec").await;
    pg.add_episodes(&k, vec![episode("a", &[]), episode("b", &[])], Some("e1"))
        .await
        .unwrap();
    let head = pg.feed_head(&k).await.unwrap();
    let claimed = pg.claim_embeddings("e1", 10, LONG).await.unwrap();
    assert_eq!(claimed.len(), 2);
    assert_eq!(claimed[0].content, "a");
    assert_eq!(claimed[0].embedder, "e1");
    assert!(
        pg.claim_embeddings("other", 10, LONG)
            .await
            .unwrap()
            .is_empty()
    );
    let (a, b) = (claimed[0].episode, claimed[1].episode);
    pg.store_embeddings(
        "e1",
        vec![
            (a, vec![1.0, 0.0, 0.0]),
            (a, vec![0.6, 0.8, 0.0]),
            (EpisodeHandle::from_raw(999_999), vec![1.0, 0.0, 0.0]),
        ],
    )
    .await
    .unwrap();
    let after = pg.feed_head(&k).await.unwrap();
    assert_eq!(
        after.change.raw(),
        head.change.raw() + 1,
        "one Vector change, the missing one skipped"
    );
    let changes = pg
        .changes_since(head.project, head.change, Some("e1"), 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        changes.changes,
        [Change::Vector {
            handle: a,
            vector: vec![0.6, 0.8, 0.0]
        }]
    );
    // Another embedder's reader sees no vector.
    let other = pg
        .changes_since(head.project, ChangeSeq::from_raw(0), Some("e2"), 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(other.changes.len(), 2, "the two Added, the Vector left out");
    assert!(
        other
            .changes
            .iter()
            .all(|c| matches!(c, Change::Added(e) if e.vector.is_none()))
    );
    let page = pg
        .index_page(head.project, Some("e1"), 0, 10)
        .await
        .unwrap();
    assert_eq!(page[0].vector, Some(vec![0.6, 0.8, 0.0]));
    assert_eq!(page[1].vector, None);
    // Stored ones leave the queue; the other is still claimed (its lease holds).
    assert!(
        pg.claim_embeddings("e1", 10, LONG)
            .await
            .unwrap()
            .is_empty()
    );
    pg.release_embeddings(&[b]).await.unwrap();
    assert_eq!(
        pg.claim_embeddings("e1", 10, LONG).await.unwrap()[0].episode,
        b
    );
    assert_eq!(pg.abandon_embeddings(&[b, a]).await.unwrap(), 1);
    // The HNSW index of that dimension exists, for operators.
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes WHERE tablename = 'embeddings' ORDER BY 1",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert!(
        indexes.contains(&"embeddings_hnsw_3".to_string()),
        "{indexes:?}"
    );
}

// --- Several handles (replicas) on one database --------------------------------------

#[tokio::test]
async fn concurrent_writers_get_distinct_sequence_numbers_and_change_ids() {
    let (one, url) = fresh_or_skip!();
    let two = Arc::new(PostgresStore::connect(&url).await.unwrap());
    let one = Arc::new(one);
    let k = project(&one, "o", "busy").await;
    let mut tasks = Vec::new();
    for (i, store) in [one.clone(), two.clone(), one.clone(), two.clone()]
        .into_iter()
        .enumerate()
    {
        let k = k.clone();
        tasks.push(tokio::spawn(async move {
            for j in 0..10 {
                store
                    .add_episodes(&k, vec![episode(&format!("{i}-{j}"), &[]); 1], None)
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let head = one.feed_head(&k).await.unwrap();
    assert_eq!(head.change.raw(), 40);
    let changes = two
        .changes_since(head.project, ChangeSeq::from_raw(0), None, 100)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(changes.changes.len(), 40);
    let seqs: Vec<i64> = one
        .list_episodes(&k, None, 0, 100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.sequence_num)
        .collect();
    assert_eq!(seqs, (1..=40).collect::<Vec<_>>());
}

#[tokio::test]
async fn migrations_run_concurrently_from_two_handles() {
    let Some(url) = common::postgres::fresh_database().await else {
        return;
    };
    let (a, b) = tokio::join!(PostgresStore::connect(&url), PostgresStore::connect(&url));
    let (a, b) = (a.unwrap(), b.unwrap());
    // And again, on a migrated database.
    let c = PostgresStore::connect(&url).await.unwrap();
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let versions: Vec<i32> =
        sqlx::query_scalar("SELECT version FROM memmachine_schema ORDER BY version")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    // Each migration once, in order (7: retention, issue 29; later ones append).
    assert_eq!(versions, (1..=versions.len() as i32).collect::<Vec<_>>());
    assert!(versions.len() >= 7, "{versions:?}");
    let universal: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM projects")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(universal, 1, "universal/universal, once");
    for store in [&a, &b, &c] {
        assert!(
            store
                .get_project(&Access::system(ProjectKey::universal()))
                .await
                .unwrap()
                .is_some()
        );
    }
}

// --- Errors --------------------------------------------------------------------------

#[tokio::test]
async fn a_unique_violation_is_already_exists() {
    let (pg, url) = fresh_or_skip!();
    let a = project(&pg, "o", "a").await;
    let b = project(&pg, "o", "b").await;
    let first = episode("first", &[]);
    pg.add_episodes(&a, vec![first.clone()], None)
        .await
        .unwrap();
    let head = pg.feed_head(&a).await.unwrap().change;
    // Caught before the insert: the whole batch fails and consumes nothing.
    let err = pg
        .add_episodes(&a, vec![episode("new", &[]), first.clone()], None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AlreadyExists(_)), "{err}");
    assert_eq!(pg.count_episodes(&a).await.unwrap(), 1);
    assert_eq!(pg.feed_head(&a).await.unwrap().change, head);
    // A uid is its project's: another project of the org takes it.
    pg.add_episodes(&b, vec![first.clone()], None)
        .await
        .unwrap();
    // Caught by the database's unique index (23505): another transaction inserted the
    // same uid and commits while this add waits on it.
    let racing = episode("racing", &[]);
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    let project_a: i64 = sqlx::query_scalar("SELECT id FROM projects WHERE project_id = 'a'")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO episodes (org_id, project, uid, seq, content, producer_id, episode_type,
             content_type, created_at)
         VALUES ('o', $1, $2, 100, 'racing', 'alice', 'message', 'string', 0)",
    )
    .bind(project_a)
    .bind(racing.uid)
    .execute(&mut *tx)
    .await
    .unwrap();
    let pg = Arc::new(pg);
    let adder = {
        let (pg, a) = (pg.clone(), a.clone());
        tokio::spawn(async move { pg.add_episodes(&a, vec![racing], None).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    tx.commit().await.unwrap();
    let err = adder.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::AlreadyExists(_)), "{err:?}");
    assert_eq!(pg.count_episodes(&a).await.unwrap(), 2, "first and racing");
}

#[tokio::test]
async fn text_the_database_cannot_store_is_invalid_argument() {
    let (pg, _) = fresh_or_skip!();
    let k = project(&pg, "o", "nul").await;
    let err = pg
        .add_episodes(&k, vec![episode("a\0b", &[])], None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    let err = pg
        .add_episodes(&k, vec![episode("fine", &[("k\0", "v")])], None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert_eq!(pg.count_episodes(&k).await.unwrap(), 0);
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable() {
    // Nothing listens there: said at once, as something to retry.
    let addr = common::free_port();
    let started = std::time::Instant::now();
    let err = match PostgresStore::connect(&format!("postgres://postgres@{addr}/postgres")).await {
        Ok(_) => panic!("connected to nothing"),
        Err(err) => err,
    };
    assert!(
        matches!(&err, Error::Unavailable(m) if m.contains("retry")),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // A database that is not there is the operator's to fix, not an internal fault.
    let Some(base) = common::postgres::base_url() else {
        return;
    };
    let missing = common::postgres::with_database(&base, "mm_no_such_database");
    let err = match PostgresStore::connect(&missing).await {
        Ok(_) => panic!("connected to a missing database"),
        Err(err) => err,
    };
    assert!(matches!(err, Error::FailedPrecondition(_)), "{err:?}");
}

/// A TCP relay to the test server that can be cut: the server, as this store's pool
/// sees it, stops (open connections drop, new ones are refused).
struct Relay {
    addr: std::net::SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Relay {
    async fn start(target: String) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            let mut on_stop = stopped.clone();
            loop {
                let (mut inbound, _) = tokio::select! {
                    accepted = listener.accept() => accepted.unwrap(),
                    _ = on_stop.changed() => return,
                };
                let (target, mut on_stop) = (target.clone(), stopped.clone());
                tokio::spawn(async move {
                    let mut outbound = tokio::net::TcpStream::connect(target).await.unwrap();
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = on_stop.changed() => {}
                    }
                });
            }
        });
        Relay { addr, stop }
    }

    fn cut(&self) {
        self.stop.send(true).unwrap();
    }
}

#[tokio::test]
async fn a_stopped_server_is_unavailable() {
    let (_, url) = fresh_or_skip!();
    // postgres://user@HOST:PORT/db
    let host_port = url.split('@').nth(1).unwrap().split('/').next().unwrap();
    let relay = Relay::start(host_port.to_string()).await;
    let via = url.replacen(host_port, &relay.addr.to_string(), 1);
    let settings = PoolSettings {
        acquire_timeout: Duration::from_secs(2),
        ..PoolSettings::default()
    };
    let pg = PostgresStore::connect_with(&via, settings).await.unwrap();
    let k = project(&pg, "o", "p").await;
    pg.add_episodes(&k, vec![episode("before", &[])], None)
        .await
        .unwrap();
    relay.cut();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let err = pg.count_episodes(&k).await.unwrap_err();
    assert!(
        matches!(&err, Error::Unavailable(m) if m.contains("retry")),
        "{err:?}"
    );
    let err = pg
        .add_episodes(&k, vec![episode("after", &[])], None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    let err = pg.health().await.unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
}

#[tokio::test]
async fn a_lost_or_closed_connection_is_unavailable() {
    let (pg, url) = fresh_or_skip!();
    pg.health().await.unwrap();
    assert!(
        pg.describe().starts_with("postgres 127.0.0.1:"),
        "{}",
        pg.describe()
    );
    assert!(!pg.describe().contains('@'));
    // The server ends every connection of this database (as a restart would).
    let database = url.rsplit('/').next().unwrap().to_string();
    let mut admin = sqlx::PgConnection::connect(&common::postgres::with_database(&url, "postgres"))
        .await
        .unwrap();
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = $1 AND pid != pg_backend_pid()",
    )
    .bind(&database)
    .execute(&mut admin)
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    match pg.health().await {
        // The pool may notice the dead connection itself and open a new one.
        Ok(()) => {}
        Err(err) => assert!(matches!(err, Error::Unavailable(_)), "{err:?}"),
    }
    pg.close().await.unwrap();
    let err = pg.health().await.unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    let err = pg
        .get_project(&Access::system(ProjectKey::universal()))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
}

// --- Semantic claims across handles ----------------------------------------------------

/// Ready at one message, batches of at most two.
fn by_count(now: i64) -> memmachine_domain::semantic::model::ClaimRule {
    memmachine_domain::semantic::model::ClaimRule {
        min_messages: 1,
        max_age_micros: i64::MAX,
        max_batch: 2,
        lease_micros: 600_000_000,
        now_micros: now,
    }
}

#[tokio::test]
async fn two_workers_never_claim_the_same_set_or_message() {
    use memmachine_domain::semantic::sets::user_set;
    use memmachine_domain::semantic::store::{Routing, SemanticQueue};

    let (one, url) = fresh_or_skip!();
    let one = Arc::new(one);
    let two = Arc::new(PostgresStore::connect(&url).await.unwrap());
    let k = project(&one, "o", "semantic").await;
    // Three messages per set, batches of two: while one worker holds a set's lease,
    // its third message waits (one worker per set), whoever asks.
    for user in 0..16 {
        let set = user_set(&k, &format!("user{user}"));
        let batch: Vec<NewEpisode> = (0..3)
            .map(|i| episode(&format!("u{user} m{i}"), &[]))
            .collect();
        SemanticQueue::add_episodes_routed(
            &*one,
            &k,
            batch,
            vec![Routing {
                set,
                episodes: vec![0, 1, 2],
            }],
            None,
        )
        .await
        .unwrap();
    }
    let now = chrono::Utc::now().timestamp_micros();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = if i % 2 == 0 { one.clone() } else { two.clone() };
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..40 {
                match store.claim_batch(by_count(now)).await.unwrap() {
                    Some(batch) => got.push((
                        batch.set.internal_id,
                        batch.messages.iter().map(|(h, _)| *h).collect::<Vec<_>>(),
                    )),
                    None => break,
                }
            }
            got
        }));
    }
    let mut batches = Vec::new();
    for task in tasks {
        batches.extend(task.await.unwrap());
    }
    let sets: HashSet<SetId> = batches.iter().map(|(set, _)| *set).collect();
    assert_eq!(sets.len(), 16);
    assert_eq!(
        batches.len(),
        16,
        "each set claimed once while its lease holds: {batches:?}"
    );
    assert!(batches.iter().all(|(_, m)| m.len() == 2), "{batches:?}");
    let messages: Vec<EpisodeHandle> = batches.iter().flat_map(|(_, m)| m.clone()).collect();
    assert_eq!(messages.iter().collect::<HashSet<_>>().len(), 32);
    // Once the leases expire, the sets are claimed again (nothing was applied).
    let later = now + 600_000_001;
    assert!(one.claim_batch(by_count(later)).await.unwrap().is_some());
}

#[tokio::test]
async fn feature_vectors_are_claimed_under_leases() {
    use memmachine_domain::semantic::features::new_feature;
    use memmachine_domain::semantic::sets::project_set;
    use memmachine_domain::semantic::store::{SemanticFeatures, SemanticSets};

    let (one, url) = fresh_or_skip!();
    let two = PostgresStore::connect(&url).await.unwrap();
    let k = project(&one, "o", "features").await;
    let set = one.ensure_sets(&k, vec![project_set(&k)]).await.unwrap()[0].internal_id;
    let mut ids = Vec::new();
    for i in 0..6 {
        let feature = new_feature(
            "Profile",
            "cat-1",
            "food",
            &format!("dish {i}"),
            "pasta",
            serde_json::json!({}),
        );
        ids.push(
            one.add_feature(set, feature, &[], Some("e1".into()))
                .await
                .unwrap()
                .internal_id,
        );
    }
    let a = one.claim_feature_embeddings(4, LONG).await.unwrap();
    let b = two.claim_feature_embeddings(4, LONG).await.unwrap();
    assert_eq!(a.len(), 4);
    assert_eq!(b.len(), 2, "the rest, none of the first claimer's");
    let claimed: HashSet<FeatureId> = a.iter().chain(&b).map(|p| p.feature).collect();
    assert_eq!(claimed, ids.iter().copied().collect());
    assert_eq!(a[0].text, "dish 0: pasta");
    assert!(
        one.claim_feature_embeddings(10, LONG)
            .await
            .unwrap()
            .is_empty()
    );
    // Released: claimable again, by anyone.
    two.release_feature_embeddings(&[b[0].feature])
        .await
        .unwrap();
    let again = one.claim_feature_embeddings(10, LONG).await.unwrap();
    assert_eq!(
        again.iter().map(|p| p.feature).collect::<Vec<_>>(),
        [b[0].feature]
    );
    // An expired lease is taken over.
    one.release_feature_embeddings(&ids).await.unwrap();
    let short = one
        .claim_feature_embeddings(1, Duration::from_millis(200))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let taken = two.claim_feature_embeddings(1, LONG).await.unwrap();
    assert_eq!(taken, short);
    // Stored vectors leave the queue, and get their dimension's HNSW index; given
    // twice, the last one counts.
    one.store_feature_embeddings(
        "e1",
        vec![(ids[0], vec![1.0, 0.0]), (ids[0], vec![0.0, 1.0])],
    )
    .await
    .unwrap();
    let indexed = one.indexed_features(&[set]).await.unwrap();
    assert_eq!(indexed[0].vector, Some(("e1".to_string(), vec![0.0, 1.0])));
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let exists: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE indexname = 'feature_embeddings_hnsw_2')",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert!(exists);
}

/// The summariser's cursor never passes an episode still being added: a project whose
/// episode commits after a later one is reported all the same.
#[tokio::test]
async fn the_summary_cursor_waits_for_episodes_in_flight() {
    use memmachine_domain::semantic::sets::project_set;
    use memmachine_domain::semantic::store::{Routing, SemanticQueue, Summaries};

    let (pg, url) = fresh_or_skip!();
    let pg = Arc::new(pg);
    let slow = project(&pg, "o", "slow").await;
    let fast = project(&pg, "o", "fast").await;
    let (_, start) = pg.projects_changed(0).await.unwrap();
    // Another transaction is creating the set the slow add routes to: that add stalls
    // after its episode has its id, until the other transaction ends.
    let set = project_set(&slow);
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO semantic_sets (org_id, set_id, kind, tags, created_at)
         VALUES ('o', $1, 'project', '{}', 0)",
    )
    .bind(&set.set_id)
    .execute(&mut *tx)
    .await
    .unwrap();
    let adding = {
        let (pg, slow) = (pg.clone(), slow.clone());
        tokio::spawn(async move {
            SemanticQueue::add_episodes_routed(
                &*pg,
                &slow,
                vec![episode("slow", &[])],
                vec![Routing {
                    set,
                    episodes: vec![0],
                }],
                None,
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    pg.add_episodes(&fast, vec![episode("fast", &[])], None)
        .await
        .unwrap();
    let looking = {
        let pg = pg.clone();
        tokio::spawn(async move { pg.projects_changed(start).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    tx.rollback().await.unwrap();
    adding.await.unwrap().unwrap();
    let (mut changed, cursor) = looking.await.unwrap().unwrap();
    let (later, _) = pg.projects_changed(cursor).await.unwrap();
    changed.extend(later);
    assert!(changed.contains(&fast), "{changed:?}");
    assert!(
        changed.contains(&slow),
        "the episode that committed last is not skipped: {changed:?}"
    );
}
