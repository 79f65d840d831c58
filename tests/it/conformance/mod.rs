//! The one conformance suite of the storage traits (`memmachine::store`), split into
//! modules by trait and instantiated per backend with `conformance!(name, Backend)`,
//! whose list of tests `scripts/conformance-suite.py` writes to `suite.rs` from the
//! modules' `pub async fn`s (CI checks it is current).
//!
//! A `Backend` makes stores: `fresh()` a store of its own, `pair()` two handles on one
//! database (two replicas). Tests name their projects, keys and embedders with random
//! ids, so they may share one database; the few that read database-wide figures (the
//! stats, the semantic queues, `prune_changes`) rely on `fresh()` giving them a database
//! no other test writes to (a temporary directory for SQLite; for PostgreSQL, a database
//! of its own).

mod episodes;
mod extraction;
mod feed;
mod forget;
mod history;
mod keys;
mod legacy;
mod memory_feed;
mod projects;
mod ranking;
mod retention;
mod semantic;
mod settings;
mod shared;
mod stats;
mod support;
mod usage;
mod vectors;

use std::future::Future;
use std::sync::Arc;

use memmachine::store::Store;
use memmachine::store::postgres::PostgresStore;
use memmachine::store::sqlite::SqliteStore;

/// A storage backend under test.
pub trait Backend {
    const NAME: &'static str;
    /// A new store over a database of its own; `None` when the backend is unavailable.
    fn fresh() -> impl Future<Output = Option<Arc<dyn Store>>> + Send;
    /// Two handles on one new database, as two replicas of the server hold them.
    fn pair() -> impl Future<Output = Option<(Arc<dyn Store>, Arc<dyn Store>)>> + Send;
}

pub struct SqliteBackend;

impl Backend for SqliteBackend {
    const NAME: &'static str = "sqlite";

    async fn fresh() -> Option<Arc<dyn Store>> {
        let dir = support::scratch_dir();
        Some(Arc::new(SqliteStore::open_async(&dir).await.unwrap()))
    }

    async fn pair() -> Option<(Arc<dyn Store>, Arc<dyn Store>)> {
        let dir = support::scratch_dir();
        let first = SqliteStore::open_async(&dir).await.unwrap();
        let second = SqliteStore::open_async(&dir).await.unwrap();
        Some((Arc::new(first), Arc::new(second)))
    }
}

/// The server named by `MEMMACHINE_TEST_POSTGRES` (which `scripts/test.sh` starts): a
/// new database per store; skipped when the variable is unset (failed under CI).
pub struct PostgresBackend;

impl Backend for PostgresBackend {
    const NAME: &'static str = "postgres";

    async fn fresh() -> Option<Arc<dyn Store>> {
        let url = crate::common::postgres::fresh_database().await?;
        Some(Arc::new(PostgresStore::connect(&url).await.unwrap()))
    }

    async fn pair() -> Option<(Arc<dyn Store>, Arc<dyn Store>)> {
        let url = crate::common::postgres::fresh_database().await?;
        let first = PostgresStore::connect(&url).await.unwrap();
        let second = PostgresStore::connect(&url).await.unwrap();
        Some((Arc::new(first), Arc::new(second)))
    }
}

/// Runs `test` on a fresh store, or says why it did not.
pub async fn with_fresh<B: Backend, F, Fut>(test: F)
where
    F: FnOnce(Arc<dyn Store>) -> Fut,
    Fut: Future<Output = ()>,
{
    match B::fresh().await {
        Some(store) => test(store).await,
        None => crate::common::cannot_run(B::NAME, "the backend is not available"),
    }
}

/// Runs `test` on two handles on one database, or says why it did not.
pub async fn with_pair<B: Backend, F, Fut>(test: F)
where
    F: FnOnce(Arc<dyn Store>, Arc<dyn Store>) -> Fut,
    Fut: Future<Output = ()>,
{
    match B::pair().await {
        Some((one, other)) => test(one, other).await,
        None => crate::common::cannot_run(B::NAME, "the backend is not available"),
    }
}

/// One `#[tokio::test]` per listed test, in a module per trait module: `fresh name`
/// runs `crate::conformance::module::name(store)`, `pair name` runs `crate::conformance::module::name(a, b)`.
macro_rules! suite {
    ($backend:ty; $($module:ident { $($kind:ident $test:ident),* $(,)? })*) => {
        $(mod $module { $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                suite!(@run $kind $backend, crate::conformance::$module::$test);
            }
        )* })*
    };
    (@run fresh $backend:ty, $test:path) => { crate::conformance::with_fresh::<$backend, _, _>($test).await };
    (@run pair $backend:ty, $test:path) => { crate::conformance::with_pair::<$backend, _, _>($test).await };
}

// `conformance!(name, Backend)`: every test of the modules above, generated (see the file).
include!("suite.rs");

conformance!(sqlite, crate::conformance::SqliteBackend);
conformance!(postgres, crate::conformance::PostgresBackend);
