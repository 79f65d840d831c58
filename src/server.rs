//! Assembles the gRPC server: store, domain, adapters, health and reflection behind the
//! admission layer (auth, limits, deadlines, metrics), gRPC-Web and optional TLS. It
//! listens at once and reports NOT_SERVING until the store and the embedder are ready;
//! on shutdown it reports NOT_SERVING, waits `drain_delay`, refuses new calls, lets
//! in-flight ones finish and closes the store.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Notify;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

use crate::admission::lifecycle::Lifecycle;
use crate::admission::limits::Limiter;
use crate::admission::{Admission, AdmissionLayer};
use crate::auth::Authenticator;
use crate::config::{ServeConfig, TlsFiles};
use crate::episodic::EpisodicMemory;
use crate::episodic::embedding::{EmbeddingQueue, spawn_workers};
use crate::error::{Error, Result};
use crate::grpc::{Deferred, MemoryGrpc, ProjectGrpc, SemanticGrpc};
use crate::memory::Memories;
use crate::metrics::Metrics;
use crate::pb::memory_service_server::MemoryServiceServer;
use crate::pb::project_service_server::ProjectServiceServer;
use crate::pb::semantic_service_server::SemanticServiceServer;
use crate::projects::Projects;
use crate::retrieval::index_cache::IndexCache;
use crate::semantic::SemanticMemory;

/// How long streams other than memory calls may outlive the drain.
const STREAM_GRACE: Duration = Duration::from_secs(5);

type ProjectService = Deferred<ProjectServiceServer<ProjectGrpc>>;
type MemoryService = Deferred<MemoryServiceServer<MemoryGrpc>>;
type SemanticService = Deferred<SemanticServiceServer<SemanticGrpc>>;

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
    let (health, health_service) = tonic_health::server::health_reporter();
    let lifecycle = Arc::new(Lifecycle::new(health).await);
    let admission = Admission {
        auth: Authenticator::new(store.clone(), config.auth),
        limiter: Limiter::new(config.caller_limits),
        lifecycle: lifecycle.clone(),
        metrics: metrics.clone(),
        request_timeout: config.request_timeout,
        max_request_bytes: config.max_request_bytes,
        methods: crate::grpc::methods(),
    };
    let project_service = ProjectService::default();
    let memory_service = MemoryService::default();
    let semantic_service = SemanticService::default();
    let router = server_builder(&config)?
        .layer(
            tower::ServiceBuilder::new()
                .layer(cors(config.auth))
                .layer(tonic_web::GrpcWebLayer::new())
                .layer(AdmissionLayer::new(admission))
                .into_inner(),
        )
        .add_service(health_service)
        .add_service(reflection_v1()?)
        .add_service(reflection_v1alpha()?)
        .add_service(project_service.clone())
        .add_service(memory_service.clone())
        .add_service(semantic_service.clone());

    let metrics_task = match config.metrics_listen {
        None => None,
        Some(metrics_addr) => {
            let listener = TcpListener::bind(metrics_addr).await.map_err(|err| {
                Error::FailedPrecondition(format!("cannot listen on {metrics_addr}: {err}"))
            })?;
            tracing::info!(addr = %metrics_addr, "metrics at /metrics");
            let task = crate::metrics::serve(
                listener,
                metrics.clone(),
                store.clone(),
                std::future::pending(),
            );
            Some(tokio::spawn(task))
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
            if tokio::time::timeout(grace, lifecycle.idle()).await.is_err() {
                tracing::warn!(
                    grace_secs = grace.as_secs_f64(),
                    "memory calls still in flight after the grace period; closing them"
                );
            }
            draining.notify_one();
        }
    };
    // Without TCP_NODELAY small responses wait for the peer's delayed ACK (~40 ms).
    let incoming = TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .with_keepalive(Some(Duration::from_secs(60)));
    let mut serve = tokio::spawn(router.serve_with_incoming_shutdown(incoming, drain));
    tracing::info!(
        addr = %addr,
        tls = config.tls.is_some(),
        auth = config.auth,
        store = %store.describe(),
        "gRPC server listening (gRPC-Web too); starting"
    );

    // A start-up that fails shuts down the way a signal does, then reports its error.
    let startup_error = match start(&config, store.clone(), metrics).await {
        Ok((projects, memories, semantic)) => {
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
    // Commit what is queued before leaving.
    store.close().await?;
    if let Some(err) = startup_error {
        return Err(err);
    }
    served.map_err(|err| Error::Internal(format!("gRPC server: {err}")))?;
    tracing::info!("server stopped");
    Ok(())
}

/// What takes time before the server can serve: the embedder (a model to load, an
/// endpoint to reach) and queueing what it must embed. Returns the adapters.
async fn start(
    config: &ServeConfig,
    store: Arc<dyn crate::store::Store>,
    metrics: Arc<Metrics>,
) -> Result<(ProjectGrpc, MemoryGrpc, SemanticGrpc)> {
    let embedders = crate::embed::build(&config.embedder)
        .await
        .map_err(Error::FailedPrecondition)?
        .measured(&metrics);
    let waiting = crate::episodic::embedding::queue_missing(store.as_ref(), &embedders).await?;
    match embedders.default_embedder() {
        None => tracing::info!(
            model_dir = %config.embedder.model_dir.display(),
            "no embedder: search is lexical only (run `memmachine model fetch` or pass --embedder)"
        ),
        Some(embedder) => tracing::info!(
            embedder = embedder.id(),
            dimensions = embedder.dimensions(),
            waiting,
            "embedder ready; episodes without a vector are being embedded"
        ),
    }
    let llm = crate::llm::build(&config.llm, &metrics)?;
    let projects = Projects::new(store.clone(), config.limits, embedders.clone());
    let queue = EmbeddingQueue::default();
    spawn_workers(
        store.clone(),
        &embedders,
        &queue,
        metrics.clone(),
        config.embedding_lease,
    );
    let semantic = SemanticMemory::new(store.clone(), config.limits, embedders.clone(), llm);
    crate::semantic::ingest::spawn_workers(semantic.clone(), config.ingest, metrics.clone());
    crate::semantic::embedding::spawn(semantic.clone());
    crate::semantic::summary::spawn(
        semantic.clone(),
        crate::semantic::summary::Window {
            messages: config.limits.short_term_window,
            chars: config.limits.short_term_max_chars,
        },
    );
    let index = Arc::new(IndexCache::new(store.clone(), config.index_memory));
    crate::retrieval::index_cache::spawn_feed_pruner(&store);
    let episodic = EpisodicMemory::new(store.clone(), index.clone(), config.limits)
        .with_embedders(embedders.clone(), queue);
    // Searches work meanwhile: a project not yet loaded loads on its first search.
    tokio::spawn(async move {
        let embedder_of = |p: &crate::model::Project| {
            embedders
                .for_project(&p.config.embedder)
                .map(|e| e.id().to_string())
        };
        match index.warm_up(embedder_of).await {
            Ok(projects) => tracing::info!(projects, "project indexes loaded"),
            Err(err) => tracing::warn!(error = %err, "loading project indexes failed"),
        }
    });
    let memories = Memories::new(projects.clone(), episodic, semantic.clone());
    Ok((
        ProjectGrpc::new(projects.clone()),
        MemoryGrpc::new(memories),
        SemanticGrpc::new(projects, semantic),
    ))
}

fn server_builder(config: &ServeConfig) -> Result<Server> {
    let builder = Server::builder()
        .accept_http1(true)
        .http2_keepalive_interval(config.keepalive.interval)
        .http2_keepalive_timeout(Some(config.keepalive.timeout));
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

/// Browsers calling over gRPC-Web from other origins. With `--auth` any origin may call
/// (keys are bearer tokens the page must hold, not cookies); without it none may, or any
/// page open in a browser could read and write every org's memories.
fn cors(auth: bool) -> tower_http::cors::CorsLayer {
    use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderName};
    use tower_http::cors::{AllowOrigin, CorsLayer};
    if !auth {
        return CorsLayer::new();
    }
    let headers = |names: &[&'static str]| -> Vec<HeaderName> {
        names.iter().map(|n| HeaderName::from_static(n)).collect()
    };
    let mut allowed = headers(&["x-grpc-web", "x-user-agent", "grpc-timeout", "x-request-id"]);
    allowed.extend([AUTHORIZATION, CONTENT_TYPE]);
    CorsLayer::new()
        .allow_origin(AllowOrigin::mirror_request())
        .allow_methods([http::Method::POST, http::Method::OPTIONS])
        .allow_headers(allowed)
        .expose_headers(headers(&[
            "grpc-status",
            "grpc-message",
            "grpc-status-details-bin",
            "x-request-id",
        ]))
        .max_age(Duration::from_secs(86400))
}

fn reflection_v1() -> Result<
    tonic_reflection::server::v1::ServerReflectionServer<
        impl tonic_reflection::server::v1::ServerReflection,
    >,
> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::pb::FILE_DESCRIPTOR_SET)
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
        .register_encoded_file_descriptor_set(crate::pb::FILE_DESCRIPTOR_SET)
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
