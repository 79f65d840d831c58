//! The PostgreSQL backend (with pgvector): every replica of the server shares one
//! database, so nothing is kept in memory that another replica could change, and every
//! claim on a queue holds a lease taken with `FOR UPDATE SKIP LOCKED`.
//!
//! Files by what they hold: `error` (the one mapping of database errors), `migrate`
//! (schema), `filter_sql` (filters to SQL), `projects`, `episodes`, `feed` (the change
//! log), `vectors` (the embedding queue and vectors), `keys`, `stats`, `semantic*`
//! (`SemanticStore`, split as the SQLite backend's), `lifecycle`, `transfer`.

mod episodes;
pub(crate) mod error;
mod feed;
mod filter_sql;
mod keys;
mod lifecycle;
mod migrate;
mod projects;
mod semantic;
mod semantic_features;
mod semantic_queue;
mod semantic_sets;
mod semantic_summaries;
mod stats;
mod transfer;
mod vectors;

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use self::error::db_error;
use crate::error::{Error, Result};

/// Connections per pool (per replica).
const POOL_SIZE: u32 = 16;
/// How long a call waits for a free connection before answering `Unavailable`.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

pub struct PostgresStore {
    pool: PgPool,
    /// "host:port/database", for logs.
    describe: String,
    /// The vector dimensions whose HNSW indexes this process has made sure of, by
    /// table.
    hnsw: Mutex<HashSet<(&'static str, usize)>>,
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user@host:port/db`) with a pool
    /// and brings its schema up to date.
    pub async fn connect(url: &str) -> Result<PostgresStore> {
        let options: PgConnectOptions = url
            .parse()
            .map_err(|err| Error::invalid("postgres_url", format!("{err}")))?;
        let describe = format!(
            "postgres {}:{}/{}",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or("postgres")
        );
        let pool = PgPoolOptions::new()
            .max_connections(POOL_SIZE)
            .min_connections(0)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .idle_timeout(Some(Duration::from_secs(300)))
            .connect_with(options)
            .await
            .map_err(db_error)?;
        migrate::migrate(&pool).await?;
        Ok(PostgresStore {
            pool,
            describe,
            hnsw: Mutex::default(),
        })
    }

    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// Microseconds since the Unix epoch, by this process's clock.
pub(crate) fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}
