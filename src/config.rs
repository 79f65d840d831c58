//! `memmachine serve` configuration: flags, environment (`MEMMACHINE_` + the flag in
//! upper snake case), a TOML file (`--config`, same keys in snake case) and defaults, in
//! that order of precedence.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::admission::limits::CallerLimits;
use crate::embed::{DEFAULT_MODEL_DIR, EmbedderPrecision};
use crate::limits::Limits;
use crate::rerank::RerankApi;
use crate::secret::Secret;
use crate::telemetry::LogFormat;
use crate::urls::redact;

// Re-exported for the tests and tools that configure a server in code.
pub use crate::embed::EmbedderKind;

#[derive(Debug, Clone, Default, clap::Args, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct ServeArgs {
    /// gRPC listen address [default: 127.0.0.1:50051]
    #[arg(long, env = "MEMMACHINE_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Embedded store location [default: ./memmachine-data]
    #[arg(long, env = "MEMMACHINE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Store URL: "sqlite" (default, under --data-dir), sqlite:///path/to/dir, or
    /// postgres://USER@HOST:PORT/DB (PostgreSQL with pgvector, shared by replicas)
    #[arg(long, env = "MEMMACHINE_STORE")]
    pub store: Option<String>,
    /// TOML file with the same keys as these flags
    #[arg(long, env = "MEMMACHINE_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Log format: text or json [default: text]
    #[arg(long, env = "MEMMACHINE_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    /// How many recent episodes short_term_memory returns [default: 20]
    #[arg(long, env = "MEMMACHINE_SHORT_TERM_WINDOW")]
    pub short_term_window: Option<usize>,
    /// Most characters the short-term window holds; 0 is no bound [default: 0]
    #[arg(long, env = "MEMMACHINE_SHORT_TERM_MAX_CHARS")]
    pub short_term_max_chars: Option<usize>,
    /// Most messages in one AddMemories [default: 1000]
    #[arg(long, env = "MEMMACHINE_MAX_MESSAGES_PER_ADD")]
    pub max_messages_per_add: Option<usize>,
    /// Most bytes of one message's content [default: 262144]
    #[arg(long, env = "MEMMACHINE_MAX_CONTENT_BYTES")]
    pub max_content_bytes: Option<usize>,
    /// Largest top_k and page_size [default: 1000]
    #[arg(long, env = "MEMMACHINE_MAX_PAGE_SIZE")]
    pub max_page_size: Option<usize>,
    /// Most distinct words in a search query [default: 1024]
    #[arg(long, env = "MEMMACHINE_MAX_QUERY_WORDS")]
    pub max_query_words: Option<usize>,
    /// Most bytes of episodes in one ListMemories page [default: 2097152]
    #[arg(long, env = "MEMMACHINE_MAX_PAGE_BYTES")]
    pub max_page_bytes: Option<usize>,
    /// Largest encoded request, in bytes [default: 67108864]
    #[arg(long, env = "MEMMACHINE_MAX_REQUEST_BYTES")]
    pub max_request_bytes: Option<usize>,
    /// Seconds to let in-flight calls finish on shutdown [default: 30]
    #[arg(long, env = "MEMMACHINE_SHUTDOWN_GRACE")]
    pub shutdown_grace: Option<f64>,
    /// Embedder: none, hash, local or openai [default: local when a model is in
    /// --model-dir, else none]
    #[arg(long, env = "MEMMACHINE_EMBEDDER")]
    pub embedder: Option<EmbedderKind>,
    /// Hugging Face sentence-embedding model directory [default: ./memmachine-models/all-MiniLM-L6-v2]
    #[arg(long, env = "MEMMACHINE_MODEL_DIR")]
    pub model_dir: Option<PathBuf>,
    /// OpenAI-compatible embeddings endpoint, e.g. http://localhost:11434/v1
    #[arg(long, env = "MEMMACHINE_EMBEDDER_BASE_URL")]
    pub embedder_base_url: Option<String>,
    /// Model name sent to the OpenAI-compatible endpoint
    #[arg(long, env = "MEMMACHINE_EMBEDDER_MODEL")]
    pub embedder_model: Option<String>,
    /// Vector length: of the hash embedder [default: 256], or asked of the endpoint
    #[arg(long, env = "MEMMACHINE_EMBEDDER_DIMENSIONS")]
    pub embedder_dimensions: Option<usize>,
    /// Products of the local embedder: f32, bf16 (on AMX: about twice as fast, vectors
    /// within a cosine of 0.999), or auto (bf16 where the CPU has AMX) [default: auto]
    #[arg(long, env = "MEMMACHINE_EMBEDDER_PRECISION")]
    pub embedder_precision: Option<EmbedderPrecision>,
    /// API key of the embeddings endpoint: only from the environment or the config file
    #[arg(skip)]
    pub embedder_api_key: Option<Secret>,
    /// Require an API key (`authorization: Bearer <key>`) on every call; keys come from
    /// `memmachine keys create`
    #[arg(long, env = "MEMMACHINE_AUTH", num_args = 0..=1, default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    pub auth: Option<bool>,
    /// Allow a non-loopback --listen without --auth (anyone who can connect reads and
    /// writes every org's memories)
    #[arg(long, env = "MEMMACHINE_INSECURE_LISTEN", num_args = 0..=1, default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    pub insecure_listen: Option<bool>,
    /// A browser origin (scheme://host:port) that may call the server besides its own
    /// pages; repeatable. With --auth and none given, any origin may (keys are bearer
    /// tokens) [default: none]
    #[arg(
        long = "allowed-origin",
        env = "MEMMACHINE_ALLOWED_ORIGINS",
        value_delimiter = ','
    )]
    pub allowed_origins: Option<Vec<String>>,
    /// A host name the server answers to without --auth, besides IP addresses and
    /// localhost (a guard against DNS rebinding); repeatable, `*` for any [default: none]
    #[arg(
        long = "allowed-host",
        env = "MEMMACHINE_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub allowed_hosts: Option<Vec<String>>,
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
    /// Requests per second per API key (per IP address without --auth); 0 is unlimited
    /// [default: 0]
    #[arg(long, env = "MEMMACHINE_RATE_LIMIT")]
    pub rate_limit: Option<u32>,
    /// Requests a caller may send at once above --rate-limit [default: twice the rate]
    #[arg(long, env = "MEMMACHINE_RATE_BURST")]
    pub rate_burst: Option<u32>,
    /// Calls one API key (or IP address) may have in flight; 0 is unlimited [default: 64]
    #[arg(long, env = "MEMMACHINE_MAX_CONCURRENT_PER_KEY")]
    pub max_concurrent_per_key: Option<u32>,
    /// Longest a call may run, in seconds; a client's grpc-timeout may shorten it
    /// [default: 60]
    #[arg(long, env = "MEMMACHINE_REQUEST_TIMEOUT")]
    pub request_timeout: Option<f64>,
    /// Seconds between reporting NOT_SERVING on shutdown and refusing new calls, for
    /// load balancers to notice [default: 0]
    #[arg(long, env = "MEMMACHINE_DRAIN_DELAY")]
    pub drain_delay: Option<f64>,
    /// Seconds a connection may sit idle before the server pings it; 0 sends no pings
    /// [default: 30]
    #[arg(long, env = "MEMMACHINE_KEEPALIVE_INTERVAL")]
    pub keepalive_interval: Option<f64>,
    /// Seconds the server waits for a ping's answer before closing the connection
    /// [default: 10]
    #[arg(long, env = "MEMMACHINE_KEEPALIVE_TIMEOUT")]
    pub keepalive_timeout: Option<f64>,
    /// Most connections held at once on the gRPC and REST listeners together [default:
    /// the open-file limit, raised to its hard limit, less 64; at most 10000]
    #[arg(long, env = "MEMMACHINE_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Seconds a new connection may take to send its first bytes before it is closed
    /// [default: 5]
    #[arg(long, env = "MEMMACHINE_PREFACE_TIMEOUT")]
    pub preface_timeout: Option<f64>,
    /// Seconds a connection may take to send a request's headers (its first from when
    /// it opens, each next HTTP/1 one from the previous answer) before it is closed;
    /// also a request body's allowance before --min-body-rate applies [default: 10]
    #[arg(long, env = "MEMMACHINE_HEADER_TIMEOUT")]
    pub header_timeout: Option<f64>,
    /// Bytes a second a request body must keep up, after the header timeout's
    /// allowance, until the server answers; a slower one is cut off (408,
    /// DEADLINE_EXCEEDED) [default: 1024]
    #[arg(long, env = "MEMMACHINE_MIN_BODY_RATE")]
    pub min_body_rate: Option<u64>,
    /// Most concurrent HTTP/2 streams (calls) on one gRPC connection [default: 100]
    #[arg(long, env = "MEMMACHINE_MAX_STREAMS_PER_CONNECTION")]
    pub max_streams_per_connection: Option<u32>,
    /// Most open health Watch streams per client address [default: 16]
    #[arg(long, env = "MEMMACHINE_MAX_WATCH_STREAMS_PER_PEER")]
    pub max_watch_streams_per_peer: Option<usize>,
    /// Cap on language-model calls per minute; 0 is no cap [default: 60]
    #[arg(long, env = "MEMMACHINE_LLM_MAX_CALLS_PER_MINUTE")]
    pub llm_max_calls_per_minute: Option<u32>,
    /// Seconds one language-model call may take [default: 60]
    #[arg(long, env = "MEMMACHINE_LLM_TIMEOUT")]
    pub llm_timeout: Option<f64>,
    /// A set's queued messages are ingested once it has this many [default: 5]
    #[arg(long, env = "MEMMACHINE_SEMANTIC_TRIGGER_MESSAGES")]
    pub semantic_trigger_messages: Option<usize>,
    /// ...or once the oldest waited this many seconds [default: 300]
    #[arg(long, env = "MEMMACHINE_SEMANTIC_TRIGGER_AGE")]
    pub semantic_trigger_age: Option<f64>,
    /// Seconds a claimed batch is held before another worker may take it [default: 300]
    #[arg(long, env = "MEMMACHINE_SEMANTIC_LEASE")]
    pub semantic_lease: Option<f64>,
    /// Most memory the in-memory project indexes may hold; the least recently used
    /// projects are dropped (and loaded again on use) beyond it [default: 2GiB]
    #[arg(long, env = "MEMMACHINE_INDEX_MEMORY")]
    pub index_memory: Option<String>,
    /// Seconds an embedding worker holds the batch it claimed before another replica
    /// may take it over [default: 120]
    #[arg(long, env = "MEMMACHINE_EMBEDDING_LEASE")]
    pub embedding_lease: Option<f64>,
    /// A tag's features are merged by the model once a category has this many [default: 20]
    #[arg(long, env = "MEMMACHINE_CONSOLIDATION_THRESHOLD")]
    pub consolidation_threshold: Option<usize>,
    /// OpenAI-compatible chat-completions endpoint for semantic memory and summaries
    #[arg(long, env = "MEMMACHINE_LLM_BASE_URL")]
    pub llm_base_url: Option<String>,
    /// Chat model name sent to --llm-base-url
    #[arg(long, env = "MEMMACHINE_LLM_MODEL")]
    pub llm_model: Option<String>,
    /// API key of the chat endpoint: only from the environment or the config file
    #[arg(skip)]
    pub llm_api_key: Option<Secret>,
    /// Hugging Face cross-encoder (sequence-classification) model directory: offers
    /// projects the reranker `cross-encoder`
    #[arg(long, env = "MEMMACHINE_RERANKER_MODEL_DIR")]
    pub reranker_model_dir: Option<PathBuf>,
    /// Rerank endpoint (POST {URL}/rerank: TEI, Jina, Cohere, vLLM, Infinity): offers
    /// projects the reranker `remote`
    #[arg(long, env = "MEMMACHINE_RERANKER_BASE_URL")]
    pub reranker_base_url: Option<String>,
    /// Model name sent to --reranker-base-url
    #[arg(long, env = "MEMMACHINE_RERANKER_MODEL")]
    pub reranker_model: Option<String>,
    /// Request shape of --reranker-base-url: cohere (Cohere, Jina, vLLM, Infinity,
    /// LocalAI: "documents") or tei ("texts") [default: cohere]
    #[arg(long, env = "MEMMACHINE_RERANKER_API")]
    pub reranker_api: Option<RerankApi>,
    /// Longest a rerank may take, in seconds, retries included; past it the search
    /// answers in the fused order [default: 5]
    #[arg(
        long,
        env = "MEMMACHINE_RERANKER_TIMEOUT",
        visible_alias = "reranker-timeout-secs"
    )]
    pub reranker_timeout: Option<f64>,
    /// Retries of a failed call to --reranker-base-url [default: 2]
    #[arg(long, env = "MEMMACHINE_RERANKER_RETRIES")]
    pub reranker_retries: Option<u32>,
    /// Candidates a reranker scores (at least the search's top_k) [default: 50]
    #[arg(long, env = "MEMMACHINE_RERANK_CANDIDATES")]
    pub rerank_candidates: Option<usize>,
    /// API key of the rerank endpoint: only from the environment or the config file
    #[arg(skip)]
    pub reranker_api_key: Option<Secret>,
    /// MemMachine-compatible JSON gateway (REST v2 under /api/v2, MCP at /mcp) address
    /// (off when unset)
    #[arg(long, env = "MEMMACHINE_REST_LISTEN")]
    pub rest_listen: Option<SocketAddr>,
    /// OpenTelemetry collector (OTLP/HTTP, e.g. http://localhost:4318): export traces of
    /// every call (off when unset)
    #[arg(long, env = "MEMMACHINE_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
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
    pub listen: SocketAddr,
    pub store: crate::store::StoreLocation,
    /// Most memory the project indexes may hold (estimated bytes).
    pub index_memory: usize,
    /// How long an embedding worker holds the batch it claimed.
    pub embedding_lease: std::time::Duration,
    pub log_format: LogFormat,
    pub limits: Limits,
    pub max_request_bytes: usize,
    pub shutdown_grace: std::time::Duration,
    pub embedder: crate::embed::Settings,
    pub reranker: crate::rerank::Settings,
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
    pub otlp_endpoint: Option<String>,
    pub llm: crate::llm::Settings,
    pub ingest: crate::semantic::ingest::IngestSettings,
}

impl ServeConfig {
    /// The effective configuration in the config file's format (keys as `--config`
    /// reads them), secrets masked: what `memmachine config print` shows.
    pub fn to_toml(&self) -> String {
        let text = |s: &str| toml::Value::String(s.to_string()).to_string();
        let path = |p: &Path| text(&p.display().to_string());
        let list = |items: &[String]| {
            toml::Value::Array(items.iter().cloned().map(toml::Value::String).collect()).to_string()
        };
        let mut lines = vec![
            format!("listen = {}", text(&self.listen.to_string())),
            match &self.store {
                crate::store::StoreLocation::Sqlite(dir) => format!("data_dir = {}", path(dir)),
                crate::store::StoreLocation::Postgres(url) => {
                    format!("store = {}", text(&redact(url)))
                }
            },
            format!("index_memory = {}", text(&self.index_memory.to_string())),
            format!("embedding_lease = {:?}", self.embedding_lease.as_secs_f64()),
            format!(
                "log_format = {}",
                text(match self.log_format {
                    LogFormat::Text => "text",
                    LogFormat::Json => "json",
                })
            ),
            format!("short_term_window = {}", self.limits.short_term_window),
            format!(
                "short_term_max_chars = {}",
                self.limits.short_term_max_chars
            ),
            format!(
                "llm_max_calls_per_minute = {}",
                self.llm.max_calls_per_minute.unwrap_or(0)
            ),
            format!("llm_timeout = {:?}", self.llm.timeout.as_secs_f64()),
            format!(
                "semantic_trigger_messages = {}",
                self.ingest.trigger_messages
            ),
            format!(
                "semantic_trigger_age = {:?}",
                self.ingest.trigger_age.as_secs_f64()
            ),
            format!("semantic_lease = {:?}", self.ingest.lease.as_secs_f64()),
            format!(
                "consolidation_threshold = {}",
                self.ingest.consolidation_threshold
            ),
            format!(
                "max_messages_per_add = {}",
                self.limits.max_messages_per_add
            ),
            format!("max_content_bytes = {}", self.limits.max_content_bytes),
            format!("max_page_size = {}", self.limits.max_page_size),
            format!("max_query_words = {}", self.limits.max_query_words),
            format!("max_page_bytes = {}", self.limits.max_page_bytes),
            format!("max_request_bytes = {}", self.max_request_bytes),
            format!("shutdown_grace = {:?}", self.shutdown_grace.as_secs_f64()),
            format!("drain_delay = {:?}", self.drain_delay.as_secs_f64()),
            format!(
                "keepalive_interval = {:?}",
                self.keepalive.interval.map_or(0.0, |d| d.as_secs_f64())
            ),
            format!(
                "keepalive_timeout = {:?}",
                self.keepalive.timeout.as_secs_f64()
            ),
            format!("max_connections = {}", self.connections.max),
            format!(
                "preface_timeout = {:?}",
                self.connections.preface_timeout.as_secs_f64()
            ),
            format!(
                "header_timeout = {:?}",
                self.connections.header_timeout.as_secs_f64()
            ),
            format!("min_body_rate = {}", self.connections.min_body_rate),
            format!(
                "max_streams_per_connection = {}",
                self.max_streams_per_connection
            ),
            format!(
                "max_watch_streams_per_peer = {}",
                self.max_watch_streams_per_peer
            ),
            format!("request_timeout = {:?}", self.request_timeout.as_secs_f64()),
            format!("auth = {}", self.auth),
            format!("insecure_listen = {}", self.insecure_listen),
            format!("allowed_origins = {}", list(&self.allowed_origins)),
            format!("allowed_hosts = {}", list(&self.allowed_hosts)),
            format!("rate_limit = {}", self.caller_limits.rate),
            format!("rate_burst = {}", self.caller_limits.burst),
            format!("max_concurrent_per_key = {}", self.caller_limits.concurrent),
        ];
        if let Some(endpoint) = &self.otlp_endpoint {
            lines.push(format!("otlp_endpoint = {}", text(&redact(endpoint))));
        }
        if let Some(addr) = self.metrics_listen {
            lines.push(format!("metrics_listen = {}", text(&addr.to_string())));
        }
        if let Some(addr) = self.rest_listen {
            lines.push(format!("rest_listen = {}", text(&addr.to_string())));
        }
        if let Some(tls) = &self.tls {
            lines.push(format!("tls_cert = {}", path(&tls.cert)));
            lines.push(format!("tls_key = {}", path(&tls.key)));
            if let Some(ca) = &tls.client_ca {
                lines.push(format!("tls_client_ca = {}", path(ca)));
            }
        }
        let embedder = &self.embedder;
        match embedder.kind {
            Some(kind) => lines.push(format!(
                "embedder = {}",
                text(&format!("{kind:?}").to_lowercase())
            )),
            None => lines.push(
                "# embedder: not set, so local when a model is in model_dir, else none".into(),
            ),
        }
        lines.push(format!("model_dir = {}", path(&embedder.model_dir)));
        let optional = [
            (
                "embedder_base_url",
                embedder.base_url.as_deref().map(redact),
            ),
            ("embedder_model", embedder.model.clone()),
            (
                "embedder_api_key",
                embedder.api_key.as_ref().map(Secret::to_string),
            ),
        ];
        let llm = &self.llm;
        let optional = optional.into_iter().chain([
            ("llm_base_url", llm.base_url.as_deref().map(redact)),
            ("llm_model", llm.model.clone()),
            ("llm_api_key", llm.api_key.as_ref().map(Secret::to_string)),
        ]);
        for (key, value) in optional {
            if let Some(value) = value {
                lines.push(format!("{key} = {}", text(&value)));
            }
        }
        lines.push(format!(
            "embedder_precision = {}",
            text(&format!("{:?}", embedder.precision).to_lowercase())
        ));
        if let Some(dimensions) = embedder.dimensions {
            lines.push(format!("embedder_dimensions = {dimensions}"));
        }
        let reranker = &self.reranker;
        if let Some(dir) = &reranker.model_dir {
            lines.push(format!("reranker_model_dir = {}", path(dir)));
        }
        let optional = [
            (
                "reranker_base_url",
                reranker.base_url.as_deref().map(redact),
            ),
            ("reranker_model", reranker.model.clone()),
            (
                "reranker_api_key",
                reranker.api_key.as_ref().map(Secret::to_string),
            ),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                lines.push(format!("{key} = {}", text(&value)));
            }
        }
        if reranker.base_url.is_some() {
            lines.push(format!(
                "reranker_api = {}",
                text(match reranker.api {
                    RerankApi::Cohere => "cohere",
                    RerankApi::Tei => "tei",
                })
            ));
        }
        lines.push(format!(
            "reranker_timeout = {:?}",
            reranker.timeout.as_secs_f64()
        ));
        lines.push(format!("reranker_retries = {}", reranker.retries));
        lines.push(format!("rerank_candidates = {}", reranker.candidates));
        lines.join("\n") + "\n"
    }
}

impl ServeArgs {
    /// Fills what flags and environment left unset from the config file, then defaults.
    pub fn resolve(self) -> Result<ServeConfig, String> {
        let file = match &self.config {
            Some(path) => read_file(path)?,
            None => ServeArgs::default(),
        };
        let merged = self.or(file);
        let defaults = Limits::default();
        let store =
            crate::store::StoreLocation::parse(merged.data_dir.clone(), merged.store.as_deref())?;
        let limits = Limits {
            max_messages_per_add: merged
                .max_messages_per_add
                .unwrap_or(defaults.max_messages_per_add),
            max_content_bytes: merged
                .max_content_bytes
                .unwrap_or(defaults.max_content_bytes),
            max_page_size: merged.max_page_size.unwrap_or(defaults.max_page_size),
            short_term_window: merged
                .short_term_window
                .unwrap_or(defaults.short_term_window),
            short_term_max_chars: merged
                .short_term_max_chars
                .unwrap_or(defaults.short_term_max_chars),
            max_query_words: merged.max_query_words.unwrap_or(defaults.max_query_words),
            max_page_bytes: merged.max_page_bytes.unwrap_or(defaults.max_page_bytes),
        };
        if limits.max_messages_per_add == 0
            || limits.max_content_bytes == 0
            || limits.max_page_size == 0
            || limits.max_query_words == 0
            || limits.max_page_bytes == 0
        {
            return Err("limits must be at least 1".into());
        }
        let listen = merged
            .listen
            .unwrap_or_else(|| "127.0.0.1:50051".parse().expect("valid default"));
        let auth = merged.auth.unwrap_or(false);
        let insecure_listen = merged.insecure_listen.unwrap_or(false);
        for addr in std::iter::once(listen).chain(merged.rest_listen) {
            if !addr.ip().is_loopback() && !auth && !insecure_listen {
                return Err(format!(
                    "refusing to listen on {addr} without --auth: anyone who can connect would \
                     read and write every org's memories. Pass --auth (and create keys with \
                     `memmachine keys create`), or --insecure-listen if something in front of \
                     the server authenticates callers"
                ));
            }
        }
        let tls = match (merged.tls_cert, merged.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert,
                key,
                client_ca: merged.tls_client_ca,
            }),
            (None, None) if merged.tls_client_ca.is_none() => None,
            _ => return Err("TLS needs both --tls-cert and --tls-key".into()),
        };
        let rate = merged.rate_limit.unwrap_or(0);
        let caller_limits = CallerLimits {
            rate,
            burst: merged
                .rate_burst
                .unwrap_or(rate.saturating_mul(2))
                .max(rate),
            concurrent: merged.max_concurrent_per_key.unwrap_or(64),
        };
        let seconds = |value: Option<f64>, default: f64, flag: &str| {
            std::time::Duration::try_from_secs_f64(value.unwrap_or(default))
                .map_err(|_| format!("--{flag} must be a number of seconds, 0 or more"))
        };
        let positive = |value: Option<f64>, default: f64, flag: &str| {
            nonzero(seconds(value, default, flag)?)
                .ok_or_else(|| format!("--{flag} must be more than 0 seconds"))
        };
        let request_timeout = positive(merged.request_timeout, 60.0, "request-timeout")?;
        let keepalive_timeout = positive(merged.keepalive_timeout, 10.0, "keepalive-timeout")?;
        let keepalive_interval = seconds(merged.keepalive_interval, 30.0, "keepalive-interval")?;
        let ingest_defaults = crate::semantic::ingest::IngestSettings::default();
        if merged.semantic_trigger_messages == Some(0) {
            return Err("--semantic-trigger-messages must be at least 1".into());
        }
        let ingest = crate::semantic::ingest::IngestSettings {
            trigger_messages: merged
                .semantic_trigger_messages
                .unwrap_or(ingest_defaults.trigger_messages),
            trigger_age: seconds(merged.semantic_trigger_age, 300.0, "semantic-trigger-age")?,
            lease: positive(merged.semantic_lease, 300.0, "semantic-lease")?,
            consolidation_threshold: merged
                .consolidation_threshold
                .unwrap_or(ingest_defaults.consolidation_threshold)
                .max(2),
            ..ingest_defaults
        };
        let llm_timeout = positive(merged.llm_timeout, 60.0, "llm-timeout")?;
        let reranker = crate::rerank::Settings {
            timeout: positive(merged.reranker_timeout, 5.0, "reranker-timeout")?,
            model_dir: merged.reranker_model_dir,
            base_url: merged.reranker_base_url,
            model: merged.reranker_model,
            api: merged.reranker_api.unwrap_or_default(),
            api_key: std::env::var("MEMMACHINE_RERANKER_API_KEY")
                .ok()
                .map(Secret::new)
                .or(merged.reranker_api_key),
            retries: merged.reranker_retries.unwrap_or(2),
            candidates: merged
                .rerank_candidates
                .unwrap_or(crate::rerank::registry::DEFAULT_CANDIDATES),
        };
        if reranker.candidates == 0 {
            return Err("--rerank-candidates must be at least 1".into());
        }
        if reranker.base_url.is_none()
            && (reranker.model.is_some() || merged.reranker_api.is_some())
        {
            return Err("--reranker-model and --reranker-api need --reranker-base-url".into());
        }
        Ok(ServeConfig {
            listen,
            auth,
            insecure_listen,
            allowed_origins: merged.allowed_origins.unwrap_or_default(),
            allowed_hosts: merged.allowed_hosts.unwrap_or_default(),
            tls,
            metrics_listen: merged.metrics_listen,
            rest_listen: merged.rest_listen,
            caller_limits,
            request_timeout,
            drain_delay: seconds(merged.drain_delay, 0.0, "drain-delay")?,
            keepalive: Keepalive {
                interval: nonzero(keepalive_interval),
                timeout: keepalive_timeout,
            },
            connections: crate::connections::ConnectionLimits {
                max: match merged.max_connections {
                    Some(0) => return Err("--max-connections must be at least 1".into()),
                    Some(n) => n,
                    None => crate::connections::ConnectionLimits::default_max(),
                },
                preface_timeout: positive(merged.preface_timeout, 5.0, "preface-timeout")?,
                header_timeout: positive(merged.header_timeout, 10.0, "header-timeout")?,
                min_body_rate: match merged.min_body_rate {
                    Some(0) => return Err("--min-body-rate must be at least 1".into()),
                    rate => rate.unwrap_or(1024),
                },
            },
            max_streams_per_connection: match merged.max_streams_per_connection {
                Some(0) => return Err("--max-streams-per-connection must be at least 1".into()),
                n => n.unwrap_or(100),
            },
            max_watch_streams_per_peer: merged.max_watch_streams_per_peer.unwrap_or(16),
            otlp_endpoint: merged.otlp_endpoint,
            llm: crate::llm::Settings {
                base_url: merged.llm_base_url,
                model: merged.llm_model,
                api_key: std::env::var("MEMMACHINE_LLM_API_KEY")
                    .ok()
                    .map(Secret::new)
                    .or(merged.llm_api_key),
                max_calls_per_minute: Some(merged.llm_max_calls_per_minute.unwrap_or(60))
                    .filter(|n| *n > 0),
                timeout: llm_timeout,
            },
            ingest,
            store,
            index_memory: match &merged.index_memory {
                None => DEFAULT_INDEX_MEMORY,
                Some(size) => parse_size(size).map_err(|err| format!("--index-memory: {err}"))?,
            },
            embedding_lease: seconds(merged.embedding_lease, 120.0, "embedding-lease")?,
            log_format: merged.log_format.unwrap_or_default(),
            limits,
            max_request_bytes: merged.max_request_bytes.unwrap_or(64 * 1024 * 1024),
            shutdown_grace: seconds(merged.shutdown_grace, 30.0, "shutdown-grace")?,
            reranker,
            embedder: crate::embed::Settings {
                kind: merged.embedder,
                model_dir: merged
                    .model_dir
                    .unwrap_or_else(|| PathBuf::from(DEFAULT_MODEL_DIR)),
                base_url: merged.embedder_base_url,
                model: merged.embedder_model,
                dimensions: merged.embedder_dimensions,
                precision: merged.embedder_precision.unwrap_or_default(),
                api_key: std::env::var("MEMMACHINE_EMBEDDER_API_KEY")
                    .ok()
                    .map(Secret::new)
                    .or(merged.embedder_api_key),
            },
        })
    }

    fn or(self, other: ServeArgs) -> ServeArgs {
        ServeArgs {
            listen: self.listen.or(other.listen),
            data_dir: self.data_dir.or(other.data_dir),
            store: self.store.or(other.store),
            config: self.config,
            log_format: self.log_format.or(other.log_format),
            short_term_window: self.short_term_window.or(other.short_term_window),
            short_term_max_chars: self.short_term_max_chars.or(other.short_term_max_chars),
            llm_max_calls_per_minute: self
                .llm_max_calls_per_minute
                .or(other.llm_max_calls_per_minute),
            llm_timeout: self.llm_timeout.or(other.llm_timeout),
            semantic_trigger_messages: self
                .semantic_trigger_messages
                .or(other.semantic_trigger_messages),
            semantic_trigger_age: self.semantic_trigger_age.or(other.semantic_trigger_age),
            semantic_lease: self.semantic_lease.or(other.semantic_lease),
            index_memory: self.index_memory.or(other.index_memory),
            embedding_lease: self.embedding_lease.or(other.embedding_lease),
            consolidation_threshold: self
                .consolidation_threshold
                .or(other.consolidation_threshold),
            max_messages_per_add: self.max_messages_per_add.or(other.max_messages_per_add),
            max_content_bytes: self.max_content_bytes.or(other.max_content_bytes),
            max_page_size: self.max_page_size.or(other.max_page_size),
            max_query_words: self.max_query_words.or(other.max_query_words),
            max_page_bytes: self.max_page_bytes.or(other.max_page_bytes),
            max_request_bytes: self.max_request_bytes.or(other.max_request_bytes),
            shutdown_grace: self.shutdown_grace.or(other.shutdown_grace),
            embedder: self.embedder.or(other.embedder),
            model_dir: self.model_dir.or(other.model_dir),
            embedder_base_url: self.embedder_base_url.or(other.embedder_base_url),
            embedder_model: self.embedder_model.or(other.embedder_model),
            embedder_dimensions: self.embedder_dimensions.or(other.embedder_dimensions),
            embedder_precision: self.embedder_precision.or(other.embedder_precision),
            embedder_api_key: self.embedder_api_key.or(other.embedder_api_key),
            auth: self.auth.or(other.auth),
            insecure_listen: self.insecure_listen.or(other.insecure_listen),
            allowed_origins: self.allowed_origins.or(other.allowed_origins),
            allowed_hosts: self.allowed_hosts.or(other.allowed_hosts),
            tls_cert: self.tls_cert.or(other.tls_cert),
            tls_key: self.tls_key.or(other.tls_key),
            tls_client_ca: self.tls_client_ca.or(other.tls_client_ca),
            metrics_listen: self.metrics_listen.or(other.metrics_listen),
            rate_limit: self.rate_limit.or(other.rate_limit),
            rate_burst: self.rate_burst.or(other.rate_burst),
            max_concurrent_per_key: self.max_concurrent_per_key.or(other.max_concurrent_per_key),
            request_timeout: self.request_timeout.or(other.request_timeout),
            drain_delay: self.drain_delay.or(other.drain_delay),
            keepalive_interval: self.keepalive_interval.or(other.keepalive_interval),
            keepalive_timeout: self.keepalive_timeout.or(other.keepalive_timeout),
            max_connections: self.max_connections.or(other.max_connections),
            preface_timeout: self.preface_timeout.or(other.preface_timeout),
            header_timeout: self.header_timeout.or(other.header_timeout),
            min_body_rate: self.min_body_rate.or(other.min_body_rate),
            max_streams_per_connection: self
                .max_streams_per_connection
                .or(other.max_streams_per_connection),
            max_watch_streams_per_peer: self
                .max_watch_streams_per_peer
                .or(other.max_watch_streams_per_peer),
            otlp_endpoint: self.otlp_endpoint.or(other.otlp_endpoint),
            llm_base_url: self.llm_base_url.or(other.llm_base_url),
            llm_model: self.llm_model.or(other.llm_model),
            llm_api_key: self.llm_api_key.or(other.llm_api_key),
            rest_listen: self.rest_listen.or(other.rest_listen),
            reranker_model_dir: self.reranker_model_dir.or(other.reranker_model_dir),
            reranker_base_url: self.reranker_base_url.or(other.reranker_base_url),
            reranker_model: self.reranker_model.or(other.reranker_model),
            reranker_api: self.reranker_api.or(other.reranker_api),
            reranker_timeout: self.reranker_timeout.or(other.reranker_timeout),
            reranker_retries: self.reranker_retries.or(other.reranker_retries),
            rerank_candidates: self.rerank_candidates.or(other.rerank_candidates),
            reranker_api_key: self.reranker_api_key.or(other.reranker_api_key),
        }
    }
}

/// `None` for a zero duration (a setting turned off, or not allowed).
fn nonzero(duration: std::time::Duration) -> Option<std::time::Duration> {
    (!duration.is_zero()).then_some(duration)
}

/// What the project indexes may hold when `--index-memory` is not given.
const DEFAULT_INDEX_MEMORY: usize = 2 << 30;

/// A size in bytes: a number with an optional unit (`512MiB`, `2GiB`, `64MB`, `1000`).
fn parse_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size (e.g. 512MiB, 2GiB)"))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1024.0 * 1024.0,
        "g" | "gb" => 1e9,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} (use B, KiB, MiB, GiB, KB, MB, GB)"
            ));
        }
    };
    Ok((number * scale) as usize)
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
    pub store: Option<String>,
    /// TOML file with the same keys as the flags of `serve`
    #[arg(long, env = "MEMMACHINE_CONFIG")]
    pub config: Option<PathBuf>,
}

impl StoreArgs {
    pub fn resolve(self) -> Result<crate::store::StoreLocation, String> {
        let file = match &self.config {
            Some(path) => read_file(path)?,
            None => ServeArgs::default(),
        };
        crate::store::StoreLocation::parse(
            self.data_dir.or(file.data_dir),
            self.store.or(file.store).as_deref(),
        )
    }
}

fn read_file(path: &Path) -> Result<ServeArgs, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| format!("cannot read config file {}: {err}", path.display()))?;
    toml::from_str(&text).map_err(|err| format!("config file {}: {err}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let config = ServeArgs {
            config: Some(file.clone()),
            ..Default::default()
        }
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
        let again = ServeArgs {
            config: Some(file),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(again.to_toml(), printed);
        assert_eq!(again.limits.short_term_window, 7);
        assert_eq!(again.embedder.kind, Some(EmbedderKind::Openai));
        assert_eq!(again.reranker.api, RerankApi::Tei);
        assert_eq!(again.reranker.candidates, 30);
        assert_eq!(again.reranker.timeout, std::time::Duration::from_secs(5));
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("memmachine.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:7000\"\nshort_term_window = 5\ndata_dir = \"/from/file\"\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(file),
            data_dir: Some("/from/flag".into()),
            ..Default::default()
        };
        let config = args.resolve().unwrap();
        assert_eq!(config.listen.to_string(), "127.0.0.1:7000");
        assert_eq!(
            config.store,
            crate::store::StoreLocation::Sqlite(PathBuf::from("/from/flag"))
        );
        assert_eq!(config.limits.short_term_window, 5);
        assert_eq!(config.limits.max_messages_per_add, 1000);
    }

    #[test]
    fn unknown_keys_in_the_file_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, "lisen = \"x\"\n").unwrap();
        let err = ServeArgs {
            config: Some(file),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(err.contains("lisen"), "{err}");
    }
}
