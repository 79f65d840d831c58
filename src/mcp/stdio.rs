//! `memmachine mcp`: the MCP server of one scope on standard input and output, for an
//! agent host that starts it. It opens the store itself (the same flags as `serve`);
//! a server running on the same store at the same time is fine. Logs go to stderr:
//! stdout is the protocol.

use std::sync::Arc;

use rmcp::ServiceExt;

use super::Scope;
use super::tools::MemoryTools;
use crate::config::{ServeArgs, ServeConfig};
use memmachine_core::error::{Error, Result};
use memmachine_domain::metrics::Metrics;

#[derive(Debug, Clone, clap::Args)]
pub struct McpArgs {
    /// The org every tool reaches [default: universal]
    #[arg(long, default_value = "", hide_default_value = true)]
    pub org: String,
    /// The project every tool reaches (it must exist: `mcp` creates nothing)
    /// [default: universal]
    #[arg(long, default_value = "", hide_default_value = true)]
    pub project: String,
    /// The user the memories are of: the producer of what is added, whose episodes and
    /// profile the tools read
    #[arg(long, default_value = super::DEFAULT_USER)]
    pub user: String,
    /// Store and model flags as for `serve` (its listeners are not used)
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// The `serve` flags of listeners, TLS, admission and drain: stdio MCP has none of these,
/// so `memmachine mcp --help` hides them (still accepted, so one environment or config
/// file serves both commands).
const LISTENER_FLAGS: &[&str] = &[
    "listen",
    "rest_listen",
    "metrics_listen",
    "otlp_endpoint",
    "auth",
    "insecure_listen",
    "allowed_origins",
    "allowed_hosts",
    "tls_cert",
    "tls_key",
    "tls_client_ca",
    "rate_limit",
    "rate_burst",
    "max_concurrent_per_key",
    "request_timeout",
    "max_request_bytes",
    "shutdown_grace",
    "drain_delay",
    "keepalive_interval",
    "keepalive_timeout",
    "max_connections",
    "preface_timeout",
    "header_timeout",
    "min_body_rate",
    "idle_timeout",
    "max_connections_per_peer",
    "trusted_proxies",
    "health_reserve",
    "max_streams_per_connection",
    "max_watch_streams_per_peer",
];

/// The `mcp` subcommand with the flags it does not use hidden from its help.
pub fn hide_listener_flags(mut command: clap::Command) -> clap::Command {
    for id in LISTENER_FLAGS {
        command = command.mut_arg(*id, |arg| arg.hide(true));
    }
    command
}

/// Serves MCP on stdin and stdout until the host closes stdin.
pub async fn run(config: ServeConfig, scope: Scope) -> Result<()> {
    let store = crate::store::open(&config.store, true).await?;
    store.health().await?;
    let domain = crate::domain::start(&config, store.clone(), Arc::new(Metrics::new())).await?;
    // Tools answer NOT_FOUND for a missing project; saying it once here helps set-up.
    if let Err(err) = domain.projects.get(&scope.project).await {
        tracing::warn!(error = %err, project = %scope.project, "the scoped project is not usable yet");
    }
    tracing::info!(%scope, "MCP server on stdio");
    let running = MemoryTools::fixed(domain, scope)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|err| Error::Unavailable(format!("MCP handshake failed: {err}")))?;
    let ended = running.waiting().await;
    tracing::info!(reason = ?ended, "MCP client closed the session");
    store.close().await
}
