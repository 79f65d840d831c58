//! `memmachine serve` configuration: flags, environment (`MEMMACHINE_` + the flag in
//! upper snake case), a TOML file (`--config`, same keys in snake case) and defaults, in
//! that order of precedence. Each module declares its own section (`memmachine_domain::flags`);
//! this one adds the server's, assembles them and checks what spans sections.

use memmachine_core::urls::SecretUrl;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use serde::{Deserialize, Serialize};

use crate::admission::limits::CallerLimits;
use crate::telemetry::LogFormat;
use memmachine_domain::limits::Limits;
use memmachine_domain::secret::Secret;

// Re-exported for the tests and tools that configure a server in code.
pub use memmachine_domain::embed::EmbedderKind;

/// The server's own flags, environment variables and config file keys: listeners,
/// store, TLS and shutdown.
#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct ServerFlags {
    /// gRPC listen address
    #[arg(long, env = "MEMMACHINE_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    /// Embedded store location [default: ./memmachine-data]
    #[arg(long, env = "MEMMACHINE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Store URL: "sqlite" (default, under --data-dir), sqlite:///path/to/dir, or
    /// postgres://USER@HOST:PORT/DB (PostgreSQL with pgvector, shared by replicas)
    #[arg(long, env = "MEMMACHINE_STORE")]
    pub store: Option<SecretUrl>,
    /// TOML file with the same keys as these flags
    #[arg(long, env = "MEMMACHINE_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Require an API key (`authorization: Bearer <key>`) on every call; keys come from
    /// `memmachine keys create`
    #[arg(long, env = "MEMMACHINE_AUTH", num_args = 0..=1, default_value_t = false, default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    pub auth: bool,
    /// Allow a non-loopback --listen without --auth (anyone who can connect reads and
    /// writes every org's memories)
    #[arg(long, env = "MEMMACHINE_INSECURE_LISTEN", num_args = 0..=1, default_value_t = false, default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    pub insecure_listen: bool,
    /// TLS certificate chain (PEM); with --tls-key, gRPC is served over TLS
    #[arg(long, env = "MEMMACHINE_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM)
    #[arg(long, env = "MEMMACHINE_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// CA certificate(s) (PEM): clients must present a certificate signed by one
    #[arg(long, env = "MEMMACHINE_TLS_CLIENT_CA")]
    pub tls_client_ca: Option<PathBuf>,
    /// Prometheus /metrics address (off when unset)
    #[arg(long, env = "MEMMACHINE_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// MemMachine-compatible JSON gateway (REST v2 under /api/v2, MCP at /mcp) address
    /// (off when unset)
    #[arg(long, env = "MEMMACHINE_REST_LISTEN")]
    pub rest_listen: Option<SocketAddr>,
    /// Largest encoded request, in bytes
    #[arg(long, env = "MEMMACHINE_MAX_REQUEST_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_request_bytes: usize,
    /// Seconds to let in-flight calls finish on shutdown
    #[arg(long, env = "MEMMACHINE_SHUTDOWN_GRACE", default_value_t = 30.0)]
    pub shutdown_grace: f64,
    /// Most memory the in-memory project indexes may hold; the least recently used
    /// projects are dropped (and loaded again on use) beyond it
    #[arg(long, env = "MEMMACHINE_INDEX_MEMORY", default_value = "2GiB")]
    pub index_memory: String,
    /// Load every project's index at start (while --index-memory lasts), so first
    /// searches need not wait. Turn it off for replicas behind a proxy with project
    /// affinity: each then loads only the projects it is sent
    #[arg(long, env = "MEMMACHINE_WARM_INDEXES", num_args = 0..=1, default_value_t = true, default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    pub warm_indexes: bool,
    /// Directory of the persisted project indexes (segments) read at start instead of
    /// rebuilding from rows, or `off`. Default: beside a SQLite database
    /// (`<data-dir>/<db file>.index`); off for PostgreSQL
    #[arg(long, env = "MEMMACHINE_INDEX_SEGMENTS", value_name = "DIR|off")]
    pub index_segments: Option<String>,
    /// Seconds an embedding worker holds the batch it claimed before another replica
    /// may take it over
    #[arg(long, env = "MEMMACHINE_EMBEDDING_LEASE", default_value_t = 120.0)]
    pub embedding_lease: f64,
}

/// Every setting of `serve`, by section. Flags and config file keys are flat: a
/// section's fields are named as its flags are.
#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct Settings {
    #[command(flatten)]
    #[serde(flatten)]
    pub server: ServerFlags,
    #[command(flatten)]
    #[serde(flatten)]
    pub telemetry: crate::telemetry::Flags,
    #[command(flatten)]
    #[serde(flatten)]
    pub limits: Limits,
    #[command(flatten)]
    #[serde(flatten)]
    pub admission: crate::admission::Flags,
    #[command(flatten)]
    #[serde(flatten)]
    pub connections: crate::connections::Flags,
    #[command(flatten)]
    #[serde(flatten)]
    pub ingest: memmachine_domain::semantic::ingest::Flags,
    #[command(flatten)]
    #[serde(flatten)]
    pub retention: memmachine_domain::episodic::retention::Flags,
    #[command(flatten)]
    #[serde(flatten)]
    pub changes: memmachine_domain::changes::Flags,
    #[command(flatten)]
    #[serde(flatten)]
    pub embedder: memmachine_domain::embed::Flags,
    #[command(flatten)]
    #[serde(flatten)]
    pub llm: memmachine_domain::llm::Flags,
    #[command(flatten)]
    #[serde(flatten)]
    pub reranker: memmachine_domain::rerank::Flags,
    #[command(flatten)]
    #[serde(flatten)]
    pub history: memmachine_domain::semantic::history::Flags,
    /// Keys of a config file no section has (serde's `deny_unknown_fields` does not
    /// work across flattened sections): an error.
    #[arg(skip)]
    #[serde(flatten, skip_serializing)]
    unknown: toml::Table,
}

/// The flags of `serve`, and which of them the command line or environment gave: a
/// config file sets only the others.
#[derive(Debug, Clone)]
pub struct ServeArgs {
    pub settings: Settings,
    given: BTreeSet<String>,
}

impl clap::Args for ServeArgs {
    fn augment_args(command: clap::Command) -> clap::Command {
        Settings::augment_args(command)
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        Settings::augment_args_for_update(command)
    }
}

impl clap::FromArgMatches for ServeArgs {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let given = matches
            .ids()
            .map(|id| id.as_str())
            .filter(|id| {
                matches!(
                    matches.value_source(id),
                    Some(ValueSource::CommandLine | ValueSource::EnvVariable)
                )
            })
            .map(str::to_string)
            .collect();
        Ok(ServeArgs {
            settings: Settings::from_arg_matches(matches)?,
            given,
        })
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

/// TLS files of `memmachine serve`.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Clients must present a certificate signed by a CA in this file.
    pub client_ca: Option<PathBuf>,
}

/// HTTP/2 keepalive: how the server finds connections whose peer has gone.
#[derive(Debug, Clone, Copy)]
pub struct Keepalive {
    /// Idle time before a ping; `None` sends none.
    pub interval: Option<std::time::Duration>,
    /// How long a ping may go unanswered before the connection is closed.
    pub timeout: std::time::Duration,
}

/// The effective configuration of `memmachine serve`.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The settings as given (flags, environment, file, defaults): what
    /// `memmachine config print` shows.
    pub settings: Settings,
    pub listen: SocketAddr,
    pub store: crate::store::StoreLocation,
    /// Most memory the project indexes may hold (estimated bytes).
    pub index_memory: usize,
    /// Whether every project's index is loaded at start.
    pub warm_indexes: bool,
    /// Where project indexes are persisted (`None`: off).
    pub index_segments: Option<PathBuf>,
    /// How long an embedding worker holds the batch it claimed.
    pub embedding_lease: std::time::Duration,
    pub log_format: LogFormat,
    pub limits: Limits,
    pub max_request_bytes: usize,
    pub shutdown_grace: std::time::Duration,
    pub embedder: memmachine_domain::embed::Settings,
    pub reranker: memmachine_domain::rerank::Settings,
    pub auth: bool,
    pub insecure_listen: bool,
    pub allowed_origins: Vec<String>,
    pub allowed_hosts: Vec<String>,
    pub tls: Option<TlsFiles>,
    pub metrics_listen: Option<SocketAddr>,
    pub rest_listen: Option<SocketAddr>,
    pub caller_limits: CallerLimits,
    pub request_timeout: std::time::Duration,
    pub drain_delay: std::time::Duration,
    pub keepalive: Keepalive,
    pub connections: crate::connections::ConnectionLimits,
    pub max_streams_per_connection: u32,
    pub max_watch_streams_per_peer: usize,
    pub otlp_endpoint: Option<SecretUrl>,
    pub llm: memmachine_domain::llm::Settings,
    pub ingest: memmachine_domain::semantic::ingest::IngestSettings,
    /// How often expired episodes are swept.
    pub retention: memmachine_domain::episodic::retention::RetentionSettings,
    /// The change feed's retention, poll, send timeout and stream limit.
    pub changes: memmachine_domain::changes::ChangeFeedSettings,
    /// Earlier versions kept per feature.
    pub feature_history_limit: usize,
}

impl ServeConfig {
    /// Every secret the settings carry (URL passwords and secret query values, API
    /// keys), for the logs to mask whatever library prints them.
    pub fn secrets(&self) -> Vec<String> {
        let s = &self.settings;
        let urls = [
            s.server.store.as_ref(),
            s.telemetry.otlp_endpoint.as_ref(),
            s.embedder.embedder_base_url.as_ref(),
            s.llm.llm_base_url.as_ref(),
            s.reranker.reranker_base_url.as_ref(),
        ];
        let keys = [
            s.embedder.embedder_api_key.as_ref(),
            s.llm.llm_api_key.as_ref(),
            s.reranker.reranker_api_key.as_ref(),
        ];
        urls.into_iter()
            .flatten()
            .flat_map(|url| memmachine_core::urls::secrets_in(url.expose()))
            .chain(keys.into_iter().flatten().map(|k| k.expose().to_string()))
            .collect()
    }

    /// The settings in the config file's format (keys as `--config` reads them),
    /// secrets masked and URLs redacted by their types (`Secret`, `SecretUrl`): what
    /// `memmachine config print` shows.
    pub fn to_toml(&self) -> String {
        // Through a table: keys print in order, whatever the sections' order.
        let table = toml::Table::try_from(&self.settings).expect("settings serialize");
        toml::to_string(&table).expect("a table serializes")
    }
}

impl ServeArgs {
    /// The flags of `serve` from `args` (and the environment), for tools and tests that
    /// configure a server in code.
    pub fn from_flags<I, T>(args: I) -> Result<ServeArgs, String>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::{Args, FromArgMatches};
        let command = ServeArgs::augment_args(clap::Command::new("serve"));
        let matches = command
            .try_get_matches_from(
                std::iter::once("serve".into()).chain(args.into_iter().map(Into::into)),
            )
            .map_err(|err| err.to_string())?;
        ServeArgs::from_arg_matches(&matches).map_err(|err| err.to_string())
    }

    /// Lays the config file under what flags and environment gave, checks the settings
    /// and resolves each section.
    pub fn resolve(self) -> Result<ServeConfig, String> {
        let mut settings = match &self.settings.server.config {
            Some(path) => read_file(path, &self.settings, &self.given)?,
            None => self.settings,
        };
        // API keys are not flags: the environment's wins over the file's.
        let from_env = |name: &str| std::env::var(name).ok().map(Secret::new);
        let keys = (
            from_env("MEMMACHINE_EMBEDDER_API_KEY"),
            from_env("MEMMACHINE_LLM_API_KEY"),
            from_env("MEMMACHINE_RERANKER_API_KEY"),
        );
        settings.embedder.embedder_api_key = keys.0.or(settings.embedder.embedder_api_key);
        settings.llm.llm_api_key = keys.1.or(settings.llm.llm_api_key);
        settings.reranker.reranker_api_key = keys.2.or(settings.reranker.reranker_api_key);
        let server = &settings.server;
        let store = crate::store::StoreLocation::parse(
            server.data_dir.clone(),
            server.store.as_ref().map(SecretUrl::expose),
        )?;
        settings.limits.validate()?;
        for addr in std::iter::once(server.listen).chain(server.rest_listen) {
            if !addr.ip().is_loopback() && !server.auth && !server.insecure_listen {
                return Err(format!(
                    "refusing to listen on {addr} without --auth: anyone who can connect would \
                     read and write every org's memories. Pass --auth (and create keys with \
                     `memmachine keys create`), or --insecure-listen if something in front of \
                     the server authenticates callers"
                ));
            }
        }
        let tls = match (&server.tls_cert, &server.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: server.tls_client_ca.clone(),
            }),
            (None, None) if server.tls_client_ca.is_none() => None,
            _ => return Err("TLS needs both --tls-cert and --tls-key".into()),
        };
        use memmachine_domain::flags::{positive, seconds};
        let admission = &settings.admission;
        let connections = &settings.connections;
        let keepalive = Keepalive {
            interval: Some(seconds(
                connections.keepalive_interval,
                "keepalive-interval",
            )?)
            .filter(|interval| !interval.is_zero()),
            timeout: positive(connections.keepalive_timeout, "keepalive-timeout")?,
        };
        if connections.max_streams_per_connection == 0 {
            return Err("--max-streams-per-connection must be at least 1".into());
        }
        let caller_limits = admission.caller_limits();
        let connection_limits = connections.limits()?;
        Ok(ServeConfig {
            listen: server.listen,
            auth: server.auth,
            insecure_listen: server.insecure_listen,
            allowed_origins: admission.allowed_origins.clone(),
            allowed_hosts: admission.allowed_hosts.clone(),
            tls,
            metrics_listen: server.metrics_listen,
            rest_listen: server.rest_listen,
            caller_limits,
            request_timeout: positive(admission.request_timeout, "request-timeout")?,
            drain_delay: seconds(admission.drain_delay, "drain-delay")?,
            keepalive,
            connections: connection_limits.clone(),
            max_streams_per_connection: connections.max_streams_per_connection,
            max_watch_streams_per_peer: admission.max_watch_streams_per_peer,
            otlp_endpoint: settings.telemetry.otlp_endpoint.clone(),
            llm: settings.llm.settings()?,
            ingest: settings.ingest.settings()?,
            retention: settings.retention.settings()?,
            changes: settings.changes.settings()?,
            feature_history_limit: settings.history.feature_history_limit,
            store: store.clone(),
            index_memory: parse_size(&server.index_memory)
                .map_err(|err| format!("--index-memory: {err}"))?,
            warm_indexes: server.warm_indexes,
            index_segments: match server.index_segments.as_deref() {
                Some("off") => None,
                Some(dir) => Some(PathBuf::from(dir)),
                None => store.default_index_segments(),
            },
            embedding_lease: seconds(server.embedding_lease, "embedding-lease")?,
            log_format: settings.telemetry.log_format,
            limits: settings.limits,
            max_request_bytes: server.max_request_bytes,
            shutdown_grace: seconds(server.shutdown_grace, "shutdown-grace")?,
            reranker: settings.reranker.settings()?,
            embedder: settings.embedder.settings(),
            // What print shows: the defaults computed at start-up, as they came out.
            settings: Settings {
                server: ServerFlags {
                    data_dir: match (&store, &settings.server.store) {
                        (crate::store::StoreLocation::Sqlite(dir), None) => Some(dir.clone()),
                        _ => settings.server.data_dir.clone(),
                    },
                    ..settings.server
                },
                admission: crate::admission::Flags {
                    rate_burst: Some(caller_limits.burst),
                    ..settings.admission
                },
                connections: crate::connections::Flags {
                    max_connections: Some(connection_limits.max),
                    ..settings.connections
                },
                ..settings
            },
        })
    }
}

/// A size in bytes: a number with an optional unit (`512MiB`, `2GiB`, `64MB`, `1.5G`,
/// `1000`; units in either case), as `bytesize` reads it.
fn parse_size(text: &str) -> Result<usize, String> {
    let size: bytesize::ByteSize = text
        .trim()
        .parse()
        .map_err(|err| format!("{text:?} is not a size (e.g. 512MiB, 2GiB): {err}"))?;
    usize::try_from(size.as_u64()).map_err(|_| format!("{text:?} is more than this machine holds"))
}

/// The store options of operator commands that open the store themselves (`memmachine
/// keys ...`): the same flags, environment and config file as `serve`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct StoreArgs {
    /// Embedded store location [default: ./memmachine-data]
    #[arg(long, env = "MEMMACHINE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Store URL: "sqlite" (default, under --data-dir), sqlite:///path/to/dir, or
    /// postgres://USER@HOST:PORT/DB (PostgreSQL with pgvector, shared by replicas)
    #[arg(long, env = "MEMMACHINE_STORE")]
    pub store: Option<SecretUrl>,
    /// TOML file with the same keys as the flags of `serve`
    #[arg(long, env = "MEMMACHINE_CONFIG")]
    pub config: Option<PathBuf>,
}

impl StoreArgs {
    pub fn resolve(self) -> Result<crate::store::StoreLocation, String> {
        let file = match &self.config {
            Some(path) => {
                read_file(
                    path,
                    &memmachine_domain::flags::defaults(),
                    &BTreeSet::new(),
                )?
                .server
            }
            None => memmachine_domain::flags::defaults::<ServerFlags>(),
        };
        crate::store::StoreLocation::parse(
            self.data_dir.or(file.data_dir),
            self.store.or(file.store).as_ref().map(SecretUrl::expose),
        )
    }
}

/// `settings` with the value of each key of the config file at `path` that is not
/// `given` (by flag or environment).
fn read_file(
    path: &Path,
    settings: &Settings,
    given: &BTreeSet<String>,
) -> Result<Settings, String> {
    let fail = |err: &dyn std::fmt::Display| format!("config file {}: {err}", path.display());
    let text = std::fs::read_to_string(path)
        .map_err(|err| format!("cannot read config file {}: {err}", path.display()))?;
    let file: toml::Table = toml::from_str(&text).map_err(|err| fail(&err))?;
    // Secrets are never flags, so none is masked in what is laid under the file.
    let mut table = toml::Table::try_from(settings).map_err(|err| fail(&err))?;
    for (key, value) in file {
        if !given.contains(&key) {
            table.insert(key, value);
        }
    }
    let settings: Settings = table.try_into().map_err(|err| fail(&err))?;
    match settings.unknown.keys().next() {
        Some(key) => Err(fail(&format!("unknown field `{key}`"))),
        None => Ok(settings),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_decimal_and_binary_units_in_either_case() {
        for (text, bytes) in [
            ("1000", 1000),
            ("512MiB", 512 << 20),
            ("2GiB", 2 << 30),
            ("2 gib", 2 << 30),
            ("64MB", 64_000_000),
            ("64m", 64_000_000),
            ("1.5G", 1_500_000_000),
            ("3KiB", 3072),
            ("7b", 7),
            (" 8 KB ", 8000),
        ] {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
        for bad in ["", "MiB", "12 parsecs", "-3MiB", "1e3"] {
            let err = parse_size(bad).unwrap_err();
            assert!(
                err.contains("is not a size (e.g. 512MiB, 2GiB)"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn the_printed_configuration_reads_back_and_masks_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("memmachine.toml");
        std::fs::write(
            &file,
            "embedder = \"openai\"\nembedder_api_key = \"sk-secret\"\nshort_term_window = 7\n\
             llm_model = \"gpt\"\nllm_api_key = \"sk-llm-secret\"\n\
             reranker_base_url = \"http://127.0.0.1:8080\"\nreranker_api = \"tei\"\n\
             reranker_api_key = \"sk-rerank-secret\"\nrerank_candidates = 30\n",
        )
        .unwrap();
        let config = ServeArgs::from_flags([Path::new("--config"), &file])
            .unwrap()
            .resolve()
            .unwrap();
        let printed = config.to_toml();
        assert!(!printed.contains("sk-secret"), "{printed}");
        assert!(!printed.contains("sk-llm-secret"), "{printed}");
        assert!(printed.contains("llm_api_key = \"***\""), "{printed}");
        assert!(printed.contains("embedder_api_key = \"***\""), "{printed}");
        assert!(!format!("{config:?}").contains("sk-secret"));
        assert!(!format!("{config:?}").contains("sk-llm-secret"));
        assert!(!printed.contains("sk-rerank-secret"), "{printed}");
        assert!(printed.contains("reranker_api_key = \"***\""), "{printed}");
        assert!(!format!("{config:?}").contains("sk-rerank-secret"));
        // What it prints is a valid config file giving the same settings.
        std::fs::write(&file, &printed).unwrap();
        let again = ServeArgs::from_flags([Path::new("--config"), &file])
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(again.to_toml(), printed);
        assert_eq!(again.limits.short_term_window, 7);
        assert_eq!(again.embedder.kind, Some(EmbedderKind::Openai));
        assert_eq!(
            again.reranker.api,
            memmachine_domain::rerank::RerankApi::Tei
        );
        assert_eq!(again.reranker.candidates, 30);
        assert_eq!(again.reranker.timeout, std::time::Duration::from_secs(5));
    }

    #[test]
    fn urls_with_credentials_are_redacted_in_debug_and_print() {
        let config = ServeArgs::from_flags([
            "--store",
            "postgres://app:pg-secret@db:5432/memory",
            "--llm-base-url",
            "https://user:llm-secret@llm.example/v1",
            "--llm-model",
            "m",
            "--embedder",
            "openai",
            "--embedder-base-url",
            "https://user:embed-secret@embed.example/v1",
            "--reranker-base-url",
            "https://user:rerank-secret@rerank.example",
            "--otlp-endpoint",
            "https://user:otlp-secret@otlp.example",
        ])
        .unwrap();
        let args = format!("{config:?}");
        let resolved = config.resolve().unwrap();
        for shown in [args, format!("{resolved:?}"), resolved.to_toml()] {
            for secret in [
                "pg-secret",
                "llm-secret",
                "embed-secret",
                "rerank-secret",
                "otlp-secret",
            ] {
                assert!(!shown.contains(secret), "{secret} in {shown}");
            }
        }
        let llm = resolved.llm.base_url.as_ref().unwrap();
        assert_eq!(llm.expose(), "https://user:llm-secret@llm.example/v1");
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("memmachine.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:7000\"\nshort_term_window = 5\ndata_dir = \"/from/file\"\n\
             max_page_size = 7\n",
        )
        .unwrap();
        let args = ServeArgs::from_flags([
            "--config".into(),
            file,
            "--data-dir".into(),
            "/from/flag".into(),
            "--max-page-size".into(),
            "1000".into(),
        ])
        .unwrap();
        let config = args.resolve().unwrap();
        assert_eq!(config.listen.to_string(), "127.0.0.1:7000");
        assert_eq!(
            config.store,
            crate::store::StoreLocation::Sqlite(PathBuf::from("/from/flag"))
        );
        assert_eq!(config.limits.short_term_window, 5);
        assert_eq!(config.limits.max_messages_per_add, 1000);
        // A flag given at its default value still wins over the file.
        assert_eq!(config.limits.max_page_size, 1000);
    }

    #[test]
    fn every_flag_has_its_environment_variable() {
        use clap::Args;
        let command = ServeArgs::augment_args(clap::Command::new("serve"));
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            let env = arg.get_env().map(|env| env.to_string_lossy().into_owned());
            let expected = format!("MEMMACHINE_{}", id.to_uppercase());
            assert_eq!(env.as_deref(), Some(expected.as_str()), "--{id}");
        }
    }

    #[test]
    fn unknown_keys_in_the_file_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, "lisen = \"x\"\n").unwrap();
        let err = ServeArgs::from_flags([Path::new("--config"), &file])
            .unwrap()
            .resolve()
            .unwrap_err();
        assert!(err.contains("lisen"), "{err}");
    }
}
