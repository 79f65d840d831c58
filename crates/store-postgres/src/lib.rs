//! The PostgreSQL backend (with pgvector): every replica of the server shares one
//! database, so nothing is kept in memory that another replica could change, and every
//! claim on a queue holds a lease taken with `FOR UPDATE SKIP LOCKED`.
//!
//! Files by what they hold: `error` (the one mapping of database errors), `schema`
//! (migrations), `helpers` (what the SQL modules share), `filter_sql` (filters to SQL),
//! `projects`, `episodes`, `feed` (the change log), `vectors` (the embedding queue and
//! vectors), `keys`, `legacy` (v1 sessions and groups), `stats`, `runtime_settings`,
//! `semantic*` (`SemanticStore`), `lifecycle`, `transfer`: each holds its trait's impl
//! and its SQL, with the same file names in both backends; `cancellation` ends the
//! queries of callers that stopped waiting.

mod cancellation;
mod episodes;
mod error;
mod extraction;
mod feature_history;
mod feed;
mod filter_sql;
mod forget;
mod helpers;
mod idempotency;
mod keys;
mod legacy;
mod lifecycle;
mod memory_feed;
mod projects;
mod retention;
mod runtime_settings;
mod schema;
mod search_reads;
mod semantic;
mod semantic_features;
mod semantic_queue;
mod semantic_sets;
mod semantic_summaries;
mod stats;
mod transfer;
mod usage;
mod vectors;

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};

use self::error::db_error;
use memmachine_core::error::{Error, Result};

/// How a `PostgresStore` uses the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// Connections per pool (per replica).
    pub max_connections: u32,
    /// How long a call waits for a connection (a free one, or a new one while the
    /// server does not answer) before answering `Unavailable`.
    pub acquire_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            max_connections: 16,
            acquire_timeout: Duration::from_secs(10),
        }
    }
}

pub struct PostgresStore {
    pool: PgPool,
    /// "host:port/database", for logs.
    describe: String,
    /// The vector dimensions whose HNSW indexes this process has made sure of, by
    /// table.
    hnsw: Mutex<HashSet<(&'static str, usize)>>,
}

/// Connect parameters sqlx reads from a URL's query; it logs any other with its value
/// (at WARN), which may be a secret (`sslpassword`).
const KNOWN_PARAMETERS: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];

/// `url` without the query parameters sqlx does not know, each named (never its
/// value) in a warning.
fn known_parameters(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_string();
    };
    let (query, fragment) = match query.split_once('#') {
        Some((query, fragment)) => (query, Some(fragment)),
        None => (query, None),
    };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let name = pair.split_once('=').map_or(pair, |(name, _)| name);
        if KNOWN_PARAMETERS.contains(&name) || name.starts_with("options[") {
            kept.push(pair);
        } else {
            tracing::warn!(
                parameter = %name,
                "the PostgreSQL store URL's parameter is not supported and was ignored"
            );
        }
    }
    let mut out = base.to_string();
    if !kept.is_empty() {
        out.push('?');
        out.push_str(&kept.join("&"));
    }
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
    out
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user@host:port/db`) with a pool
    /// and brings its schema up to date.
    pub async fn connect(url: &str) -> Result<PostgresStore> {
        PostgresStore::connect_with(url, PoolSettings::default()).await
    }

    /// `connect` with these pool settings.
    pub async fn connect_with(url: &str, settings: PoolSettings) -> Result<PostgresStore> {
        let url = known_parameters(url);
        let options: PgConnectOptions = url.parse::<PgConnectOptions>().map_err(|err| {
            Error::invalid(
                "postgres_url",
                memmachine_core::urls::redact_in(&err.to_string()),
            )
        })?;
        let describe = format!(
            "postgres {}:{}/{}",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or("postgres")
        );
        // One connection first, so that a server that is down or refuses us says why
        // at once (the pool would retry until its acquire timeout, then only say that).
        let probe = options.connect().await.map_err(db_error)?;
        probe.close().await.ok();
        let pool = PgPoolOptions::new()
            .max_connections(settings.max_connections)
            .min_connections(0)
            .acquire_timeout(settings.acquire_timeout)
            .idle_timeout(Some(Duration::from_secs(300)))
            .after_connect(cancellation::watch_client)
            .after_release(cancellation::settle)
            .connect_lazy_with(options);
        schema::migrate(&pool).await?;
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

#[cfg(test)]
mod url_tests {
    #[test]
    fn unknown_parameters_are_dropped_and_known_ones_kept() {
        assert_eq!(
            super::known_parameters(
                "postgres://u:p@h/db?sslmode=disable&sslpassword=SECRET&application_name=m"
            ),
            "postgres://u:p@h/db?sslmode=disable&application_name=m"
        );
        assert_eq!(
            super::known_parameters("postgres://h/db?token=x"),
            "postgres://h/db"
        );
        assert_eq!(
            super::known_parameters("postgres://h/db"),
            "postgres://h/db"
        );
    }
}
