//! The one place a backend is chosen: from the store URL (`--store`).

use std::path::PathBuf;
use std::sync::Arc;

use super::Store;
use super::sqlite::{DB_FILE, SqliteStore};
use memmachine_core::error::{Error, Result};

/// Where the store is.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// The embedded default: a SQLite file in this directory.
    Sqlite(PathBuf),
    /// A PostgreSQL server (with pgvector), shared by every replica.
    Postgres(String),
}

impl StoreLocation {
    /// From `--store` (`sqlite`, `sqlite:///dir`, `postgres://...`) and `--data-dir`.
    pub fn parse(data_dir: Option<PathBuf>, store: Option<&str>) -> Result<StoreLocation, String> {
        let data_dir = data_dir.unwrap_or_else(|| PathBuf::from("./memmachine-data"));
        match store {
            None | Some("sqlite") => Ok(StoreLocation::Sqlite(data_dir)),
            Some(url) if url.starts_with("sqlite://") => Ok(StoreLocation::Sqlite(PathBuf::from(
                &url["sqlite://".len()..],
            ))),
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Ok(StoreLocation::Postgres(url.to_string()))
            }
            Some(other) => Err(format!(
                "unknown --store {:?}: use sqlite, sqlite:///DIR or postgres://USER@HOST:PORT/DB",
                memmachine_core::urls::redact(other)
            )),
        }
    }

    /// Where project index segments go unless `--index-segments` says: beside a SQLite
    /// file; none for PostgreSQL (replicas' disks are often ephemeral).
    pub fn default_index_segments(&self) -> Option<PathBuf> {
        match self {
            StoreLocation::Sqlite(dir) => Some(dir.join(format!("{DB_FILE}.index"))),
            StoreLocation::Postgres(_) => None,
        }
    }

    /// For logs and messages: never a password nor a query value.
    pub fn describe(&self) -> String {
        match self {
            StoreLocation::Sqlite(dir) => format!("sqlite {}", dir.join(DB_FILE).display()),
            StoreLocation::Postgres(url) => {
                format!("postgres {}", memmachine_core::urls::redact(url))
            }
        }
    }

    /// The kind of backend alone (`sqlite`, `postgres`): what an org's key is shown.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreLocation::Sqlite(_) => "sqlite",
            StoreLocation::Postgres(_) => "postgres",
        }
    }
}

/// As derived, but the URL redacted: a config printed with `{:?}` shows no password.
impl std::fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreLocation::Sqlite(dir) => f.debug_tuple("Sqlite").field(dir).finish(),
            StoreLocation::Postgres(url) => f
                .debug_tuple("Postgres")
                .field(&memmachine_core::urls::redact(url))
                .finish(),
        }
    }
}

/// Opens (and migrates) the store. Unless `create`, an embedded store must exist
/// already: a mistyped `--data-dir` must not list or change an empty new one.
pub async fn open(location: &StoreLocation, create: bool) -> Result<Arc<dyn Store>> {
    match location {
        StoreLocation::Sqlite(dir) => {
            let file = dir.join(DB_FILE);
            if !create && !file.is_file() {
                return Err(Error::NotFound(format!(
                    "no store at {} (check --data-dir)",
                    file.display()
                )));
            }
            Ok(Arc::new(SqliteStore::open_async(dir).await?))
        }
        StoreLocation::Postgres(url) => open_postgres(url).await,
    }
}

async fn open_postgres(url: &str) -> Result<Arc<dyn Store>> {
    Ok(Arc::new(
        super::postgres::PostgresStore::connect(url).await?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_are_read_from_the_url_and_passwords_never_shown() {
        let sqlite = StoreLocation::parse(Some("/d".into()), None).unwrap();
        assert_eq!(sqlite, StoreLocation::Sqlite("/d".into()));
        let file = StoreLocation::parse(None, Some("sqlite:///x/y")).unwrap();
        assert_eq!(file, StoreLocation::Sqlite("/x/y".into()));
        let pg = StoreLocation::parse(None, Some("postgres://u:pw@h:5432/db?password=pw")).unwrap();
        assert_eq!(
            pg.describe(),
            "postgres postgres://u:***@h:5432/db?password=***"
        );
        assert!(!format!("{pg:?}").contains("pw"), "{pg:?}");
        assert!(StoreLocation::parse(None, Some("mysql://h")).is_err());
    }
}
