//! Assembles the gRPC server: store, domain, adapters, health and reflection behind the
//! admission layer (auth, limits, deadlines, metrics), gRPC-Web and optional TLS. It
//! listens at once and reports NOT_SERVING until the store and the embedder are ready;
//! on shutdown it reports NOT_SERVING, waits `drain_delay`, refuses new calls, lets
//! in-flight ones finish and closes the store.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

use crate::admission::cors::Transport;
use crate::admission::declared_length::DeclaredLengthLayer;
use crate::admission::lifecycle::Lifecycle;
use crate::admission::limits::Limiter;
use crate::admission::{Admission, AdmissionLayer};
use crate::config::{ServeConfig, TlsFiles};
use crate::connections::request_gate::ArrivalLayer;
use crate::connections::{ConnectionLimits, Gate, GatedListener, IdleClose};
use crate::grpc::{
    ChangeGrpc, Deferred, LifecycleGrpc, MemoryGrpc, ProjectGrpc, SemanticGrpc, UsageGrpc, v1,
};
use memmachine_core::error::{Error, Result};
use memmachine_domain::auth::Authenticator;
use memmachine_domain::metrics::Metrics;
use memmachine_proto::v2::change_service_server::ChangeServiceServer;
use memmachine_proto::v2::lifecycle_service_server::LifecycleServiceServer;
use memmachine_proto::v2::memory_service_server::MemoryServiceServer;
use memmachine_proto::v2::project_service_server::ProjectServiceServer;
use memmachine_proto::v2::semantic_service_server::SemanticServiceServer;
use memmachine_proto::v2::usage_service_server::UsageServiceServer;

/// Most connections the metrics listener holds.
const METRICS_CONNECTIONS: usize = 32;

/// How long streams other than memory calls may outlive the drain.
const STREAM_GRACE: Duration = Duration::from_secs(5);

/// How long shutdown may spend saving changed project indexes as segments (a million
/// episodes' segment takes about a second to write; what is left is replayed at start).
const SEGMENTS_AT_SHUTDOWN: Duration = Duration::from_secs(10);

type ProjectService = Deferred<ProjectServiceServer<ProjectGrpc>>;
type MemoryService = Deferred<MemoryServiceServer<MemoryGrpc>>;
type SemanticService = Deferred<SemanticServiceServer<SemanticGrpc>>;
type LifecycleService = Deferred<LifecycleServiceServer<LifecycleGrpc>>;
type UsageService = Deferred<UsageServiceServer<UsageGrpc>>;
type ChangeService = Deferred<ChangeServiceServer<ChangeGrpc>>;
/// The deprecated v1 API's services, ready with the rest.
#[derive(Clone, Default)]
struct LegacyServices {
    memory:
        Deferred<memmachine_proto::v1::memory_service_server::MemoryServiceServer<v1::MemoryGrpc>>,
    sessions: Deferred<
        memmachine_proto::v1::session_service_server::SessionServiceServer<v1::SessionGrpc>,
    >,
    groups: Deferred<memmachine_proto::v1::group_service_server::GroupServiceServer<v1::GroupGrpc>>,
}

impl LegacyServices {
    fn set(&self, legacy: &memmachine_domain::legacy::Legacy, max_request_bytes: usize) {
        use memmachine_proto::v1::{
            group_service_server::GroupServiceServer, memory_service_server::MemoryServiceServer,
            session_service_server::SessionServiceServer,
        };
        self.memory.set(
            MemoryServiceServer::new(v1::MemoryGrpc::new(legacy.clone()))
                .max_decoding_message_size(max_request_bytes),
        );
        self.sessions.set(
            SessionServiceServer::new(v1::SessionGrpc::new(legacy.clone()))
                .max_decoding_message_size(max_request_bytes),
        );
        self.groups.set(
            GroupServiceServer::new(v1::GroupGrpc::new(legacy.clone()))
                .max_decoding_message_size(max_request_bytes),
        );
    }
}

/// Serves on `listener` until `shutdown` resolves, then drains and closes the store.
pub async fn run(
    config: ServeConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let store = crate::store::open(&config.store, true).await?;
    // A store that opens but does not answer (a database refusing queries) fails the
    // start, not the first call.
    store.health().await?;
    let addr = listener
        .local_addr()
        .map_err(|err| Error::Internal(format!("listener address: {err}")))?;
    if config.auth {
        let keys = store.list_keys().await?;
        let live = keys
            .iter()
            .filter(|k| k.revoked_at_micros.is_none())
            .count();
        if live == 0 {
            tracing::warn!(
                "--auth is on and no API key exists: create one with `memmachine keys create --org ORG` (or --admin)"
            );
        }
        tracing::info!(keys = live, "API keys required");
    }

    let metrics = Arc::new(Metrics::new());
    // One bound on the connections of both listeners, which share the open-file limit.
    let files = crate::connections::raise_open_file_limit();
    if (files as usize) < config.connections.max {
        tracing::warn!(
            open_files = files,
            max_connections = config.connections.max,
            "--max-connections is above the open-file limit: connections past it fail to open"
        );
    }
    let gate = Gate::new(config.connections.clone());
    let (health, health_service) = tonic_health::server::health_reporter();
    let lifecycle = Arc::new(Lifecycle::new(health).await);
    // Change streams (gRPC and SSE alike) end when the drain starts.
    let (closing, closing_streams) = tokio::sync::watch::channel(false);
    let admission = Arc::new(Admission {
        auth: Authenticator::new(store.clone(), config.auth),
        limiter: Limiter::new(config.caller_limits),
        lifecycle: lifecycle.clone(),
        metrics: metrics.clone(),
        request_timeout: config.request_timeout,
        max_request_bytes: config.max_request_bytes,
        methods: crate::grpc::methods(),
        watchers: crate::admission::watch::Watchers::new(config.max_watch_streams_per_peer),
        change_streams: crate::admission::watch::Watchers::new(config.changes.max_streams_per_key),
        closing: closing_streams,
        browsers: crate::admission::host_and_origin::BrowserPolicy::new(
            config.auth,
            &config.allowed_origins,
            &config.allowed_hosts,
        ),
    });
    let project_service = ProjectService::default();
    let memory_service = MemoryService::default();
    let semantic_service = SemanticService::default();
    let lifecycle_service = LifecycleService::default();
    let usage_service = UsageService::default();
    let change_service = ChangeService::default();
    let legacy_services = LegacyServices::default();
    let router = server_builder(&config)?
        .layer(
            tower::ServiceBuilder::new()
                .layer(ArrivalLayer::new(gate.clone()))
                .layer(crate::admission::cors::layer(
                    &admission.browsers,
                    Transport::Grpc,
                ))
                .layer(DeclaredLengthLayer::new(config.max_request_bytes))
                .layer(tonic_web::GrpcWebLayer::new())
                .layer(AdmissionLayer::new(admission.clone()))
                .into_inner(),
        )
        .add_service(health_service)
        .add_service(reflection_v1()?)
        .add_service(reflection_v1alpha()?)
        .add_service(project_service.clone())
        .add_service(memory_service.clone())
        .add_service(semantic_service.clone())
        .add_service(lifecycle_service.clone())
        .add_service(usage_service.clone())
        .add_service(change_service.clone())
        .add_service(legacy_services.memory.clone())
        .add_service(legacy_services.sessions.clone())
        .add_service(legacy_services.groups.clone());

    let metrics_task = match config.metrics_listen {
        None => None,
        Some(metrics_addr) => {
            let listener = TcpListener::bind(metrics_addr).await.map_err(|err| {
                Error::FailedPrecondition(format!("cannot listen on {metrics_addr}: {err}"))
            })?;
            tracing::info!(
                addr = %metrics_addr,
                url = %format!("http://{metrics_addr}/metrics"),
                "Prometheus metrics at /metrics"
            );
            if config.auth && !metrics_addr.ip().is_loopback() {
                tracing::warn!(
                    addr = %metrics_addr,
                    "--metrics-listen needs no key and shows every org's figures: keep it off networks tenants reach"
                );
            }
            // Its own, small bound, with the same timeouts: scrapers are few, and a
            // flood there must not take the descriptors the other listeners need.
            let gate = Gate::new(ConnectionLimits {
                max: METRICS_CONNECTIONS,
                health_reserve: 0,
                ..config.connections.clone()
            });
            let listener = GatedListener { listener, gate };
            let task = crate::metrics_listener::serve(
                listener,
                metrics.clone(),
                store.clone(),
                std::future::pending(),
            );
            Some(tokio::spawn(task))
        }
    };

    // Stops the REST gateway once the drain is over.
    let (stopped, stop) = tokio::sync::watch::channel(false);
    let rest = match config.rest_listen {
        None => None,
        Some(rest_addr) => {
            let listener = TcpListener::bind(rest_addr).await.map_err(|err| {
                Error::FailedPrecondition(format!("cannot listen on {rest_addr}: {err}"))
            })?;
            let gateway = crate::rest::Gateway::new(admission.clone(), store.clone(), &config);
            let bound = listener.local_addr().map_or(rest_addr, |a| a);
            // The gateway speaks plain HTTP (--tls-* apply to gRPC).
            let base = format!("http://{bound}");
            tracing::info!(
                addr = %bound,
                api = %format!("{base}/api/v2"),
                console = %format!("{base}/ui"),
                mcp = %format!("{base}/mcp"),
                "REST gateway listening: MemMachine's REST API at /api/v2, the memory console at /ui, MCP (Streamable HTTP) at /mcp"
            );
            let mut stop = stop.clone();
            let listener = GatedListener {
                listener,
                gate: gate.clone(),
            };
            let task = crate::rest::serve(listener, gateway.router(), async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
            });
            tokio::spawn(async move {
                if let Err(err) = task.await {
                    tracing::error!(error = %err, "REST gateway failed");
                }
            });
            Some(gateway)
        }
    };

    // Shutdown: NOT_SERVING at once; new memory calls refused after the drain delay;
    // then up to the grace period for the calls in flight, and the transport stops.
    let abort = Arc::new(Notify::new());
    let draining = Arc::new(Notify::new());
    let drain = {
        let (lifecycle, abort, draining) = (lifecycle.clone(), abort.clone(), draining.clone());
        let (delay, grace) = (config.drain_delay, config.shutdown_grace);
        async move {
            tokio::select! {
                () = shutdown => {}
                () = abort.notified() => {}
            }
            tracing::info!(
                drain_delay_secs = delay.as_secs_f64(),
                "shutting down: NOT_SERVING, then finishing in-flight calls"
            );
            lifecycle.not_ready().await;
            tokio::time::sleep(delay).await;
            lifecycle.refuse_new();
            let _ = closing.send(true);
            if tokio::time::timeout(grace, lifecycle.idle()).await.is_err() {
                tracing::warn!(
                    grace_secs = grace.as_secs_f64(),
                    "memory calls still in flight after the grace period; closing them"
                );
            }
            draining.notify_one();
            let _ = stopped.send(true);
        }
    };
    // Without TCP_NODELAY small responses wait for the peer's delayed ACK (~40 ms).
    let incoming = {
        let gate = gate.clone();
        TcpIncoming::from(listener)
            .with_nodelay(Some(true))
            .with_keepalive(Some(Duration::from_secs(60)))
            .filter_map(move |accepted| {
                std::future::ready(match accepted {
                    Ok(tcp) => gate.admit(tcp, IdleClose::Socket).map(Ok),
                    Err(err) => Some(Err(err)),
                })
            })
    };
    let mut serve = tokio::spawn(router.serve_with_incoming_shutdown(incoming, drain));
    tracing::info!(
        addr = %addr,
        tls = config.tls.is_some(),
        auth = config.auth,
        store = %store.describe(),
        "gRPC server listening (gRPC-Web too); starting"
    );

    // A start-up that fails shuts down the way a signal does, then reports its error.
    let mut indexes = None;
    let startup_error = match crate::domain::start(&config, store.clone(), metrics.clone()).await {
        Ok(domain) => {
            indexes = Some(domain.index.clone());
            let (projects, memories, semantic) = (
                ProjectGrpc::new(domain.projects.clone()),
                MemoryGrpc::new(
                    domain.memories.clone(),
                    crate::grpc::ImportSettings {
                        lifecycle: lifecycle.clone(),
                        idle: config.request_timeout,
                        max_request_bytes: config.max_request_bytes,
                    },
                ),
                SemanticGrpc::new(domain.projects.clone(), domain.semantic.clone()),
            );
            legacy_services.set(&domain.legacy, config.max_request_bytes);
            lifecycle_service.set(
                LifecycleServiceServer::new(LifecycleGrpc::new(domain.clone()))
                    .max_decoding_message_size(config.max_request_bytes),
            );
            usage_service.set(
                UsageServiceServer::new(UsageGrpc::new(domain.clone()))
                    .max_decoding_message_size(config.max_request_bytes),
            );
            change_service.set(
                ChangeServiceServer::new(ChangeGrpc::new(
                    domain.changes.clone(),
                    admission.change_streams.clone(),
                    admission.closing.clone(),
                ))
                .max_decoding_message_size(config.max_request_bytes),
            );
            if let Some(rest) = &rest {
                rest.set(domain);
            }
            project_service.set(
                ProjectServiceServer::new(projects)
                    .max_decoding_message_size(config.max_request_bytes),
            );
            memory_service.set(
                MemoryServiceServer::new(memories)
                    .max_decoding_message_size(config.max_request_bytes),
            );
            semantic_service.set(
                SemanticServiceServer::new(semantic)
                    .max_decoding_message_size(config.max_request_bytes),
            );
            lifecycle.serving().await;
            tracing::info!("ready: serving calls");
            None
        }
        Err(err) => {
            abort.notify_one();
            Some(err)
        }
    };

    // Long-lived streams (a health Watch, a reflection session) would hold the transport
    // open: once memory calls are done, they get a few seconds before being cut.
    let served = tokio::select! {
        served = &mut serve => served.map_err(|err| Error::Internal(format!("gRPC server task: {err}")))?,
        () = async {
            draining.notified().await;
            tokio::time::sleep(STREAM_GRACE).await;
        } => {
            tracing::warn!("streams still open after the drain; closing them");
            serve.abort();
            Ok(())
        }
    };
    if let Some(task) = metrics_task {
        task.abort();
    }
    // Projects changed since their index segment are saved, so the next start replays
    // less (bounded: what is left is replayed from the change feed then).
    if let Some(indexes) = indexes {
        indexes
            .save_all(std::time::Instant::now() + SEGMENTS_AT_SHUTDOWN)
            .await;
    }
    // Commit what is queued before leaving.
    store.close().await?;
    if let Some(err) = startup_error {
        return Err(err);
    }
    served.map_err(|err| Error::Internal(format!("gRPC server: {err}")))?;
    tracing::info!("server stopped");
    Ok(())
}

fn server_builder(config: &ServeConfig) -> Result<Server> {
    let builder = Server::builder()
        .accept_http1(true)
        .http2_keepalive_interval(config.keepalive.interval)
        .http2_keepalive_timeout(Some(config.keepalive.timeout))
        .max_concurrent_streams(Some(config.max_streams_per_connection));
    match &config.tls {
        None => Ok(builder),
        Some(files) => builder
            .tls_config(tls_config(files)?)
            .map_err(|err| Error::FailedPrecondition(format!("TLS: {err}"))),
    }
}

fn tls_config(files: &TlsFiles) -> Result<ServerTlsConfig> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|err| {
            Error::FailedPrecondition(format!("cannot read {}: {err}", path.display()))
        })
    };
    let mut tls =
        ServerTlsConfig::new().identity(Identity::from_pem(read(&files.cert)?, read(&files.key)?));
    if let Some(ca) = &files.client_ca {
        tls = tls.client_ca_root(Certificate::from_pem(read(ca)?));
    }
    Ok(tls)
}

fn reflection_v1() -> Result<
    tonic_reflection::server::v1::ServerReflectionServer<
        impl tonic_reflection::server::v1::ServerReflection,
    >,
> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(memmachine_proto::v2::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|err| Error::Internal(format!("reflection: {err}")))
}

fn reflection_v1alpha() -> Result<
    tonic_reflection::server::v1alpha::ServerReflectionServer<
        impl tonic_reflection::server::v1alpha::ServerReflection,
    >,
> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(memmachine_proto::v2::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(|err| Error::Internal(format!("reflection: {err}")))
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("install the SIGTERM handler");
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
