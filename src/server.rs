//! Assembles the gRPC server: store, domain, adapters, health and reflection, and runs
//! it until a shutdown signal, draining in-flight calls.

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;

use crate::config::ServeConfig;
use crate::episodic::EpisodicMemory;
use crate::episodic::embedding::{EmbeddingQueue, run_worker};
use crate::error::{Error, Result};
use crate::grpc::{MemoryGrpc, ProjectGrpc};
use crate::memory::Memories;
use crate::pb::memory_service_server::MemoryServiceServer;
use crate::pb::project_service_server::ProjectServiceServer;
use crate::projects::Projects;
use crate::store::VectorStore;
use crate::store::sqlite::SqliteStore;

/// Fully qualified names of the services whose health is reported one by one.
const SERVICES: [&str; 2] = [
    "memmachine.v2.ProjectService",
    "memmachine.v2.MemoryService",
];

/// Serves on `listener` until `shutdown` resolves, then reports NOT_SERVING, lets
/// in-flight calls finish and closes the store.
pub async fn run(
    config: ServeConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let data_dir = config.data_dir.clone();
    let store = tokio::task::spawn_blocking(move || SqliteStore::open(&data_dir))
        .await
        .map_err(|err| Error::Internal(format!("opening the store: {err}")))??;
    let store = Arc::new(store);
    let addr = listener
        .local_addr()
        .map_err(|err| Error::Internal(format!("listener address: {err}")))?;
    tracing::info!(
        addr = %addr,
        data_dir = %config.data_dir.display(),
        database = %store.path().display(),
        "gRPC server listening"
    );

    let embedders = crate::embed::build(&config.embedder)
        .await
        .map_err(Error::FailedPrecondition)?;
    let waiting = store.use_embedders(embedders.choice()).await?;
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
    let projects = Projects::new(store.clone(), config.limits, embedders.clone());
    let queue = EmbeddingQueue::default();
    let dyn_store: Arc<dyn crate::store::Store> = store.clone();
    tokio::spawn(run_worker(dyn_store, embedders.clone(), queue.clone()));
    let episodic =
        EpisodicMemory::new(store.clone(), config.limits).with_embedders(embedders, queue);
    {
        // Searches work meanwhile: a project not yet loaded loads on its first search.
        let store = store.clone();
        tokio::spawn(async move {
            if let Err(err) = store.preload_indexes().await {
                tracing::warn!(error = %err, "preloading lexical indexes failed");
            }
        });
    }
    let memories = Memories::new(projects.clone(), episodic);

    let (health, health_service) = tonic_health::server::health_reporter();
    for name in SERVICES.into_iter().chain([""]) {
        health
            .set_service_status(name, ServingStatus::Serving)
            .await;
    }
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|err| Error::Internal(format!("reflection: {err}")))?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(|err| Error::Internal(format!("reflection: {err}")))?;

    let max = config.max_request_bytes;
    let draining = Arc::new(tokio::sync::Notify::new());
    let drain = {
        let (health, draining) = (health.clone(), draining.clone());
        async move {
            shutdown.await;
            tracing::info!("shutting down: NOT_SERVING, finishing in-flight calls");
            for name in SERVICES.into_iter().chain([""]) {
                health
                    .set_service_status(name, ServingStatus::NotServing)
                    .await;
            }
            draining.notify_one();
        }
    };
    // Without TCP_NODELAY small responses wait for the peer's delayed ACK (~40 ms).
    let incoming = TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .with_keepalive(Some(std::time::Duration::from_secs(60)));
    let serve = Server::builder()
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(
            ProjectServiceServer::new(ProjectGrpc::new(projects)).max_decoding_message_size(max),
        )
        .add_service(
            MemoryServiceServer::new(MemoryGrpc::new(memories)).max_decoding_message_size(max),
        )
        .serve_with_incoming_shutdown(incoming, drain);
    // Long-lived calls (a health Watch, say) would hold the drain open forever: past the
    // grace period the remaining connections are dropped.
    let grace = config.shutdown_grace;
    let served = tokio::select! {
        served = serve => served,
        () = async {
            draining.notified().await;
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!(grace_secs = grace.as_secs_f64(), "calls still open after the grace period; closing them");
            Ok(())
        }
    };
    // Commit what is queued before leaving.
    let closing = store.clone();
    tokio::task::spawn_blocking(move || closing.close())
        .await
        .map_err(|err| Error::Internal(format!("closing the store: {err}")))?;
    served.map_err(|err| Error::Internal(format!("gRPC server: {err}")))?;
    tracing::info!("server stopped");
    Ok(())
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
