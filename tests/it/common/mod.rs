//! Starts the real `memmachine` binary on an ephemeral loopback port for tests.

pub mod calls;
pub mod chat;
pub mod child;
pub mod embeddings;
pub mod keys;
pub mod mcp_http;
pub mod paging;
pub mod pki;
pub mod postgres;
pub mod proxy;
pub mod rerank;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A test that cannot run its real component (`what`: PostgreSQL, a browser, a proxy, a
/// tool): under `CI=true` the test fails, so that nothing passes by skipping there;
/// elsewhere it says so on stderr, and the caller returns.
pub fn cannot_run(what: &str, why: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{what} cannot run under CI: {why}");
    }
    eprintln!("SKIPPED: {what}: {why}");
}

/// A loopback address nothing listens on (as far as anyone can tell).
pub fn free_port() -> std::net::SocketAddr {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap()
}

/// The store flags of a server (or `memmachine keys`) whose data directory is `dir`:
/// `--data-dir DIR`, and `--store URL` of a database standing for it when the tests run
/// on PostgreSQL (`MEMMACHINE_TEST_BACKEND=postgres`).
pub fn store_args(dir: &Path) -> Vec<std::ffi::OsString> {
    let mut args = vec!["--data-dir".into(), dir.as_os_str().to_owned()];
    if postgres::servers_on_postgres() {
        args.extend(["--store".into(), postgres::database_for_dir(dir).into()]);
    }
    args
}

/// A running `memmachine serve` process; killed when dropped (see `child`).
pub struct ServerProcess {
    pub child: child::Supervised,
    pub addr: String,
    /// Every line the server has written to stderr so far.
    pub log: child::Lines,
}

impl ServerProcess {
    /// Starts `memmachine serve --listen 127.0.0.1:0 --data-dir DIR` and waits until it
    /// logs the address it listens on.
    pub fn start(data_dir: &Path, extra_args: &[&str]) -> ServerProcess {
        Self::start_env(data_dir, extra_args, &[])
    }

    /// As `start`, with these environment variables set too.
    pub fn start_env(data_dir: &Path, extra_args: &[&str], env: &[(&str, &str)]) -> ServerProcess {
        Self::start_on("127.0.0.1:0", data_dir, extra_args, env)
    }

    /// As `start_env`, listening on `listen` (a server restarted where its clients
    /// reconnect).
    pub fn start_on(
        listen: &str,
        data_dir: &Path,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> ServerProcess {
        let mut child = child::Supervised::spawn(
            "memmachine serve",
            Command::new(env!("CARGO_BIN_EXE_memmachine"))
                .args(["serve", "--listen", listen])
                .args(store_args(data_dir))
                .args(extra_args)
                .envs(env.iter().copied())
                .env("RUST_LOG", "info")
                .env("NO_COLOR", "1")
                .stdin(Stdio::null())
                .stdout(Stdio::null()),
            Some("MEMMACHINE_TEST_SERVER_LOG"),
        );
        let addr = child
            .wait_for_stderr(
                "report its listen address",
                Duration::from_secs(60),
                |lines| lines.iter().find_map(|line| listen_addr(line)),
            )
            .unwrap_or_else(|report| panic!("{report}"));
        // Ready, or exited (a start-up failure the test may be looking for).
        let _ = child.wait_for_stderr("become ready", Duration::from_secs(120), |lines| {
            lines.iter().any(|line| line.contains(READY)).then_some(())
        });
        let log = child.stderr_lines();
        ServerProcess { child, addr, log }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The REST gateway's base URL (`http://ADDR`, started with `--rest-listen`).
    pub fn rest_url(&self) -> String {
        let log = self.log.lock().unwrap();
        let addr = log
            .iter()
            .find_map(|line| logged_addr(line, REST_LISTENING))
            .expect("the server did not log its REST address (was --rest-listen given?)");
        format!("http://{addr}")
    }

    /// SIGKILL: no chance to flush or clean up.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait, off the async runtime (so that the test's clients and fakes
    /// running on it can answer the server while it shuts down).
    pub async fn terminate_async(mut self) -> std::process::ExitStatus {
        tokio::task::spawn_blocking(move || self.terminate())
            .await
            .expect("terminate")
    }

    /// SIGTERM, then wait for the exit status (at most a minute: a drain that hangs
    /// fails the test, with the server's last words).
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = i32::try_from(self.child.id()).expect("a pid");
        // SAFETY: a plain kill(2) of our own child.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        self.child.wait_within(Duration::from_secs(60))
    }
}

/// What the server logs once it serves calls.
pub const READY: &str = "ready: serving calls";

/// What the server logs when its REST gateway listens.
pub const REST_LISTENING: &str = "REST gateway listening";

/// Extracts `ADDR` from the server's log line `... gRPC server listening addr=ADDR ...`.
fn listen_addr(line: &str) -> Option<String> {
    logged_addr(line, "gRPC server listening")
}

/// `ADDR` of a log line containing `message` and `addr=ADDR`.
fn logged_addr(line: &str, message: &str) -> Option<String> {
    if !line.contains(message) {
        return None;
    }
    if line.starts_with('{') {
        // --log-format json
        let value: serde_json::Value = serde_json::from_str(line).ok()?;
        return Some(value["fields"]["addr"].as_str()?.to_string());
    }
    let rest = &line[line.find("addr=")? + "addr=".len()..];
    Some(rest.split_whitespace().next()?.to_string())
}

/// A server running inside the test process on a loopback port, over real TCP.
pub struct InProcess {
    pub url: String,
    pub data_dir: tempfile::TempDir,
    /// Where its store is (what `memmachine keys` would be given).
    pub store: memmachine::store::StoreLocation,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub task: tokio::task::JoinHandle<memmachine::error::Result<()>>,
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
    pub async fn stop(mut self) -> memmachine::error::Result<()> {
        self.begin_stop();
        (&mut self.task).await.expect("server task")
    }
}
