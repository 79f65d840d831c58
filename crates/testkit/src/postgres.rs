//! PostgreSQL for tests: the server `scripts/postgres.sh start` runs (`scripts/test.sh`
//! starts it and exports its URL as `MEMMACHINE_TEST_POSTGRES`). Without that variable
//! the PostgreSQL tests skip, saying so, except under CI, where they fail.

use sqlx::Connection;

pub const URL_VAR: &str = "MEMMACHINE_TEST_POSTGRES";

/// The server's URL; `None` (after saying so) when it is not set, a panic under CI.
pub fn base_url() -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            super::cannot_run(
                "a PostgreSQL test",
                &format!(
                    "{URL_VAR} is not set (scripts/test.sh starts the server with \
                     scripts/postgres.sh)"
                ),
            );
            None
        }
    }
}

/// The end of the server's log (`MEMMACHINE_TEST_POSTGRES_LOG`, which scripts/test.sh
/// sets): why it is gone, when it is.
pub fn log_tail() -> String {
    let Some(path) = std::env::var_os("MEMMACHINE_TEST_POSTGRES_LOG") else {
        return "its log is unknown (MEMMACHINE_TEST_POSTGRES_LOG is not set)".into();
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(20)..];
            format!(
                "the end of its log ({}):\n{}",
                path.to_string_lossy(),
                tail.join("\n")
            )
        }
        Err(err) => format!("its log {} cannot be read: {err}", path.to_string_lossy()),
    }
}

/// A new, empty database on the server (its URL), for one test. Named `mm_test_*`:
/// `scripts/postgres.sh` drops them when it starts and stops the server.
pub async fn fresh_database() -> Option<String> {
    let base = base_url()?;
    let name = format!("mm_test_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::PgConnection::connect(&base)
        .await
        .unwrap_or_else(|err| panic!("cannot connect to {base}: {err}; {}", log_tail()));
    // FILE_COPY: no WAL for the copied template (tests make many databases).
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE DATABASE {name} STRATEGY FILE_COPY"
    )))
    .execute(&mut conn)
    .await
    .unwrap_or_else(|err| panic!("cannot create database {name}: {err}"));
    conn.close().await.ok();
    Some(with_database(&base, &name))
}

/// `url` with its database replaced by `database`.
pub fn with_database(url: &str, database: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((head, query)) => (head, Some(query)),
        None => (url, None),
    };
    let scheme_end = head.find("://").map_or(0, |i| i + 3);
    let base = match head[scheme_end..].find('/') {
        Some(slash) => &head[..scheme_end + slash],
        None => head,
    };
    match query {
        Some(query) => format!("{base}/{database}?{query}"),
        None => format!("{base}/{database}"),
    }
}

/// Which backend the gRPC tests' servers use: `MEMMACHINE_TEST_BACKEND=postgres` runs
/// them on the test PostgreSQL server (`scripts/test.sh` runs them so a second time).
pub fn servers_on_postgres() -> bool {
    std::env::var("MEMMACHINE_TEST_BACKEND").as_deref() == Ok("postgres")
}

/// The database standing for the data directory `dir` (made on first use, so a server
/// restarted on the same directory finds its data again).
pub fn database_for_dir(dir: &std::path::Path) -> String {
    use std::hash::{Hash, Hasher};
    let base = base_url().expect("MEMMACHINE_TEST_BACKEND=postgres needs MEMMACHINE_TEST_POSTGRES");
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    dir.hash(&mut hasher);
    let name = format!("mm_dir_{:016x}", hasher.finish());
    let url = with_database(&base, &name);
    // Its own runtime on its own thread: callers may be inside one already.
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut conn = sqlx::PgConnection::connect(&base)
                .await
                .unwrap_or_else(|err| panic!("cannot connect to {base}: {err}"));
            let exists: Option<i32> =
                sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
                    .bind(&name)
                    .fetch_optional(&mut conn)
                    .await
                    .unwrap();
            if exists.is_none() {
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&mut conn)
                    .await
                    .unwrap_or_else(|err| panic!("cannot create database {name}: {err}"));
            }
            conn.close().await.ok();
        });
    })
    .join()
    .expect("creating the test database");
    url
}
