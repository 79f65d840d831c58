//! What only the tests need beside the shared harness (`memmachine-testkit`): a server
//! inside the test process, fake model endpoints, certificates, proxies.

pub mod chat;
pub mod embeddings;
pub mod mcp_http;
pub mod pki;
pub mod proxy;
pub mod rerank;

// The harness shared with the benchmarks, under the names the tests use.
pub use memmachine_testkit::server::{READY, ServerProcess, free_port, store_args};
pub use memmachine_testkit::{calls, cannot_run, child, keys, paging, postgres};

use std::time::Duration;

/// A server running inside the test process on a loopback port, over real TCP.
pub struct InProcess {
    pub url: String,
    pub data_dir: tempfile::TempDir,
    /// Where its store is (what `memmachine keys` would be given).
    pub store: memmachine::store::StoreLocation,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub task: tokio::task::JoinHandle<memmachine_core::error::Result<()>>,
}

impl InProcess {
    pub async fn start() -> InProcess {
        Self::start_with(|_| {}).await
    }

    /// Starts with the default configuration as changed by `configure`, and waits
    /// until it serves.
    pub async fn start_with(
        configure: impl FnOnce(&mut memmachine::config::ServeConfig),
    ) -> InProcess {
        let server = Self::launch_with(configure).await;
        server.wait_serving().await;
        server
    }

    /// Starts without waiting for the server to be ready.
    pub async fn launch_with(
        configure: impl FnOnce(&mut memmachine::config::ServeConfig),
    ) -> InProcess {
        let data_dir = tempfile::tempdir().expect("temp dir");
        let dir = data_dir.path().as_os_str();
        let mut config = memmachine::config::ServeArgs::from_flags([
            "--data-dir".as_ref(),
            dir,
            "--listen".as_ref(),
            "127.0.0.1:0".as_ref(),
        ])
        .and_then(|args| args.resolve())
        .expect("config");
        if postgres::servers_on_postgres() {
            let url = postgres::database_for_dir(data_dir.path());
            config.store = memmachine::store::StoreLocation::Postgres(url);
        }
        configure(&mut config);
        let store = config.store.clone();
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(memmachine::server::run(config, listener, async {
            let _ = stopped.await;
        }));
        InProcess {
            url,
            data_dir,
            store,
            stop: Some(stop),
            task,
        }
    }

    /// Waits until health says SERVING (the server listens before it is ready).
    pub async fn wait_serving(&self) {
        use tonic_health::pb::health_check_response::ServingStatus;
        for _ in 0..1200 {
            if self.task.is_finished() {
                return;
            }
            if let Ok(status) =
                memmachine::probe::check(&self.url, "", Duration::from_secs(5), None).await
                && status == ServingStatus::Serving
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the server did not become ready");
    }

    pub async fn channel(&self) -> tonic::transport::Channel {
        tonic::transport::Endpoint::from_shared(self.url.clone())
            .unwrap()
            .connect()
            .await
            .expect("connect")
    }

    /// Signals shutdown without waiting.
    pub fn begin_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Signals shutdown and waits for the server to finish.
    pub async fn stop(mut self) -> memmachine_core::error::Result<()> {
        self.begin_stop();
        (&mut self.task).await.expect("server task")
    }
}
