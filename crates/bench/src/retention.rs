//! `memmachine-bench retention`: what the retention sweeper costs (issue 29). Fills one
//! store with `--episodes` episodes over `--projects` projects, every `--expiring-every`th
//! of them with an `expires_at` already past, then measures, on the store directly:
//!
//! - an idle sweep's query (nothing expired yet): what every `--retention-sweep-interval`
//!   costs a store where nothing is due;
//! - the sweep of the expired ones: the sweeper's own function (`episodic::retention::sweep`,
//!   leased, batches of 500 through the store's episode deletion), episodes/s;
//! - a retention sweep: a project given a retention that makes the same share of its
//!   episodes (the oldest) due, swept likewise.
//!
//! Run: `cargo run --release -p memmachine-bench -- retention --episodes 1000000`
//! (`--store postgres://...` for PostgreSQL). See BENCHMARKS.md ("Retention (issue 29)").

use std::time::{Duration, Instant};

use clap::Parser;
use memmachine_core::access::{Access, ProjectAccess};
use memmachine_core::model::{EpisodicConfigUpdate, NewEpisode, ProjectConfig, ProjectKey};
use memmachine_core::store::Store;
use memmachine_domain::episodic::retention;
use memmachine_store_postgres::PostgresStore;
use memmachine_store_sqlite::SqliteStore;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[derive(Parser)]
pub struct Args {
    /// Episodes stored in all
    #[arg(long, default_value_t = 100_000)]
    episodes: usize,
    /// Projects they are spread over
    #[arg(long, default_value_t = 10)]
    projects: usize,
    /// One episode in this many has an expiry already past (10: 10%)
    #[arg(long, default_value_t = 10)]
    expiring_every: usize,
    /// A PostgreSQL URL; default: SQLite in a temporary directory
    #[arg(long)]
    store: Option<String>,
}

const HOUR: i64 = 3_600_000_000;

fn episode(i: usize, created: i64, expires: Option<i64>) -> NewEpisode {
    NewEpisode {
        uid: uuid::Uuid::new_v4(),
        content: format!("episode {i}: a message of ordinary length about the day's plans"),
        producer_id: format!("user{}", i % 50),
        producer_role: "user".into(),
        produced_for_id: String::new(),
        episode_type: "message".into(),
        content_type: "string".into(),
        created_at_micros: created,
        metadata: Default::default(),
        expires_at_micros: expires,
        idempotency: None,
    }
}

pub fn main(args: Args) -> Result<()> {
    if args.episodes == 0 || args.projects == 0 || args.expiring_every == 0 {
        return Err("--episodes, --projects and --expiring-every must be positive".into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> Result<()> {
    let dir =
        std::env::temp_dir().join(format!("retention-bench-{}", uuid::Uuid::new_v4().simple()));
    let store: std::sync::Arc<dyn Store> = match args.store.as_deref() {
        Some(url) => std::sync::Arc::new(PostgresStore::connect(url).await?),
        None => std::sync::Arc::new(SqliteStore::open_async(&dir).await?),
    };
    let now = chrono::Utc::now().timestamp_micros();
    let per_project = args.episodes / args.projects;
    // The bench writes its own projects as background work would.
    let keys: Vec<ProjectAccess> = (0..args.projects)
        .map(|p| {
            ProjectKey::parse(
                "retention-bench",
                &format!("p{p}-{}", uuid::Uuid::new_v4().simple()),
            )
            .map(Access::system)
        })
        .collect::<std::result::Result<_, _>>()?;
    let started = Instant::now();
    let mut expiring = 0usize;
    for key in &keys {
        store
            .create_project(key, "", &ProjectConfig::default())
            .await?;
        let mut batch = Vec::with_capacity(1000);
        for i in 0..per_project {
            // Created over the last 100 hours, oldest first; every nth already expired.
            let created = now - 100 * HOUR + (i as i64 * 100 * HOUR) / per_project as i64;
            let expires = (i % args.expiring_every == 0).then_some(now - HOUR / 2);
            expiring += usize::from(expires.is_some());
            batch.push(episode(i, created.min(now - 1), expires));
            if batch.len() == 1000 {
                store
                    .add_episodes(key, std::mem::take(&mut batch), None)
                    .await?;
            }
        }
        if !batch.is_empty() {
            store.add_episodes(key, batch, None).await?;
        }
    }
    let stored = per_project * args.projects;
    println!(
        "store: {}; {stored} episodes in {} projects, {expiring} expired; filled in {:.1} s",
        store.describe(),
        args.projects,
        started.elapsed().as_secs_f64()
    );
    // Idle: nothing due before an hour ago minus a day.
    let mut idle = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let found = store
            .expired_episodes(now - 24 * HOUR, retention::BATCH)
            .await?;
        idle.push(t.elapsed());
        assert!(found.is_empty());
    }
    idle.sort();
    println!(
        "idle sweep query: median {:.2} ms, max {:.2} ms (over 20)",
        ms(idle[idle.len() / 2]),
        ms(*idle.last().unwrap())
    );
    let (deleted, took) = sweep_all(store.as_ref()).await?;
    println!(
        "expiry sweep: {deleted} episodes in {:.2} s, {:.0} episodes/s, {:.2} ms per batch of {}",
        took.as_secs_f64(),
        deleted as f64 / took.as_secs_f64(),
        ms(took) / (deleted as f64 / retention::BATCH as f64).ceil().max(1.0),
        retention::BATCH
    );
    // Retention on the first project: its oldest tenth is due.
    let key = &keys[0];
    store
        .update_episodic_config(
            key,
            EpisodicConfigUpdate {
                episode_retention_micros: Some(Some(90 * HOUR)),
                ..Default::default()
            },
        )
        .await?;
    let (deleted, took) = sweep_all(store.as_ref()).await?;
    println!(
        "retention sweep (one project, 90 h of 100 kept): {deleted} episodes in {:.2} s, {:.0} episodes/s",
        took.as_secs_f64(),
        deleted as f64 / took.as_secs_f64().max(1e-9)
    );
    println!(
        "remaining: {} episodes",
        count(store.as_ref(), &keys).await?
    );
    store.close().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

async fn sweep_all(store: &dyn Store) -> Result<(u64, Duration)> {
    let started = Instant::now();
    let mut deleted = 0;
    loop {
        let swept = retention::sweep(store, "bench", Duration::from_secs(15)).await?;
        let n: u64 = swept.values().sum();
        if n == 0 {
            return Ok((deleted, started.elapsed()));
        }
        deleted += n;
    }
}

async fn count(store: &dyn Store, keys: &[ProjectAccess]) -> Result<i64> {
    let mut total = 0;
    for key in keys {
        total += store.count_episodes(key).await?;
    }
    Ok(total)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
