//! Queries whose caller stopped waiting (its deadline passed, it cancelled) end on the
//! server too. Dropping a sqlx future leaves its query running in PostgreSQL, and the
//! pool's check on release waits for it to finish (a query stuck behind a lock holds
//! its connection for as long as the lock is held). So a connection that does not
//! settle at once on release is closed, and every session asks PostgreSQL (14+) to
//! check for a closed client while it runs a query, which ends the query there.

use std::time::Duration;

use std::future::Future;
use std::pin::Pin;

use sqlx::pool::PoolConnectionMetadata;
use sqlx::{Connection, PgConnection};

/// How often PostgreSQL looks for a client gone while a query runs.
pub(crate) const CLIENT_CHECK_INTERVAL: &str = "200ms";
/// How long a released connection may take to answer a ping before it is closed: one
/// whose query was abandoned is still busy with it.
const SETTLE: Duration = Duration::from_millis(100);
/// `client_connection_check_interval` appeared in PostgreSQL 14.
const CLIENT_CHECK_SINCE: u32 = 140_000;

type BoxFuture<'c, T> = Pin<Box<dyn Future<Output = T> + Send + 'c>>;

/// `after_connect`: the session watches for its client leaving mid-query.
pub(crate) fn watch_client<'c>(
    conn: &'c mut PgConnection,
    _: PoolConnectionMetadata,
) -> BoxFuture<'c, Result<(), sqlx::Error>> {
    Box::pin(async move {
        if conn
            .server_version_num()
            .is_some_and(|v| v >= CLIENT_CHECK_SINCE)
        {
            let set = format!("SET client_connection_check_interval = '{CLIENT_CHECK_INTERVAL}'");
            // Some platforms cannot watch sockets so; the close still ends the query
            // the next time it sends a row.
            if let Err(err) = sqlx::raw_sql(sqlx::AssertSqlSafe(set))
                .execute(&mut *conn)
                .await
            {
                tracing::debug!(error = %err, "client_connection_check_interval not set");
            }
        }
        Ok(())
    })
}

/// `after_release`: keeps a connection that is idle, closes one still running the
/// query of a caller that left.
pub(crate) fn settle<'c>(
    conn: &'c mut PgConnection,
    _: PoolConnectionMetadata,
) -> BoxFuture<'c, Result<bool, sqlx::Error>> {
    Box::pin(async move {
        match tokio::time::timeout(SETTLE, conn.ping()).await {
            Ok(Ok(())) => Ok(true),
            Ok(Err(err)) => Err(err),
            Err(_) => {
                tracing::debug!(
                    "a query whose caller left is still running; its connection is closed"
                );
                Ok(false)
            }
        }
    })
}
