//! Starts the real `memmachine` binary on an ephemeral loopback port for tests.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A running `memmachine serve` process; killed when dropped.
pub struct ServerProcess {
    pub child: Child,
    pub addr: String,
    pub data_dir: PathBuf,
}

impl ServerProcess {
    /// Starts `memmachine serve --listen 127.0.0.1:0 --data-dir DIR` and waits until it
    /// logs the address it listens on.
    pub fn start(data_dir: &Path, extra_args: &[&str]) -> ServerProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_memmachine"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(extra_args)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn memmachine");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if !sent {
                    if let Some(addr) = listen_addr(&line) {
                        let _ = tx.send(addr);
                        sent = true;
                    }
                }
                if std::env::var_os("MEMMACHINE_TEST_SERVER_LOG").is_some() {
                    eprintln!("[server] {line}");
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("server did not report its listen address");
        ServerProcess {
            child,
            addr,
            data_dir: data_dir.to_path_buf(),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// SIGKILL: no chance to flush or clean up.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill -TERM");
        self.child.wait().expect("wait")
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Extracts `ADDR` from the server's log line `... gRPC server listening addr=ADDR ...`.
fn listen_addr(line: &str) -> Option<String> {
    if !line.contains("gRPC server listening") {
        return None;
    }
    let rest = &line[line.find("addr=")? + "addr=".len()..];
    Some(rest.split_whitespace().next()?.to_string())
}
