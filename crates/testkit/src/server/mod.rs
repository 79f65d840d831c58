//! The real `memmachine` binary as a child process on an ephemeral loopback port: for a
//! test here (a failure panics), for a benchmark in `measured`.

pub mod measured;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::{child, postgres};

/// The `memmachine` executable: `MEMMACHINE_SERVER_BIN` if set, else the one Cargo built
/// beside the running program (the bench; a test binary sits one level down, in `deps/`).
pub fn server_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("MEMMACHINE_SERVER_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the running program's path");
    let mut dir = exe.parent().expect("a directory").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir.join("memmachine")
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
            Command::new(server_bin())
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
pub fn listen_addr(line: &str) -> Option<String> {
    logged_addr(line, "gRPC server listening")
}

/// `ADDR` of a log line containing `message` and `addr=ADDR`.
pub fn logged_addr(line: &str, message: &str) -> Option<String> {
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
