//! A real `memmachine serve` process for a benchmark run: failures are errors, not
//! panics, and its log is read for what the benches report (episodes embedded, index
//! bytes, vector graphs built).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{READY, listen_addr};
use crate::child::{self, Supervised};
use crate::{BoxError, Result};

/// Log lines shown in an error.
const TAIL_LINES: usize = 20;

/// A running `memmachine serve` with its own data directory; both go away on drop.
pub struct Server {
    child: Supervised,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    /// Every line the server has written to stderr so far.
    log: child::Lines,
    /// The data directory is the caller's, left in place on drop.
    kept: bool,
    counters: Arc<Counters>,
}

impl Server {
    /// Starts `executable serve` on a loopback ephemeral port with a fresh data
    /// directory named after `label` (removed when the server is dropped), or with
    /// `keep` as its data directory (kept), and waits up to `startup` for its address.
    pub fn start(
        executable: &Path,
        label: &str,
        keep: Option<&Path>,
        extra_args: &[String],
        startup: Duration,
    ) -> Result<Server> {
        Server::start_with_env(executable, label, keep, extra_args, &[], startup)
    }

    /// As [`start`](Self::start), with `env` set in the server's environment (for
    /// secrets the server reads only from there, such as `MEMMACHINE_LLM_API_KEY`).
    pub fn start_with_env(
        executable: &Path,
        label: &str,
        keep: Option<&Path>,
        extra_args: &[String],
        env: &[(&str, &str)],
        startup: Duration,
    ) -> Result<Server> {
        let data_dir = keep.map_or_else(
            || {
                std::env::temp_dir().join(format!(
                    "{label}-{}-{}",
                    std::process::id(),
                    uuid::Uuid::new_v4().simple()
                ))
            },
            Path::to_path_buf,
        );
        std::fs::create_dir_all(&data_dir)?;
        let mut command = Command::new(executable);
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(&data_dir)
            .args(extra_args)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let counters = Arc::new(Counters::default());
        let watch = {
            let counters = counters.clone();
            let mut echo = Echo::default();
            Box::new(move |line: &str| counters.read(line, &mut echo)) as child::Watch
        };
        // Started and supervised as a test's server is: it dies with the bench.
        let mut child = match Supervised::try_spawn("memmachine serve", &mut command, Some(watch)) {
            Ok(child) => child,
            Err(err) => {
                if keep.is_none() {
                    let _ = std::fs::remove_dir_all(&data_dir);
                }
                return Err(format!("cannot start {}: {err}", executable.display()).into());
            }
        };
        let log = child.stderr_lines();
        // The server listens before it is ready (model loading); calls wait for ready.
        let found =
            child.wait_for_stderr("report its address and become ready", startup, |lines| {
                lines
                    .iter()
                    .any(|line| line.contains(READY))
                    .then(|| lines.iter().find_map(|line| listen_addr(line)))
                    .flatten()
            });
        let mut server = Server {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir,
            kept: keep.is_some(),
            log,
            counters,
        };
        server.addr = match found.map(|addr| addr.parse::<SocketAddr>()) {
            Ok(Ok(addr)) => addr,
            Ok(Err(err)) => return Err(server.error("the server's address", err)),
            Err(report) => return Err(format!("the server did not start: {report}").into()),
        };
        Ok(server)
    }

    /// A gRPC channel to it (Nagle off: a bench times single calls).
    pub async fn channel(&self) -> Result<tonic::transport::Channel> {
        Ok(
            tonic::transport::Endpoint::from_shared(format!("http://{}", self.addr))?
                .tcp_nodelay(true)
                .connect()
                .await?,
        )
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The process's resident memory now (Linux).
    pub fn rss_bytes(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }

    /// Waits until the server has reported `count` vector graphs built, at most
    /// `limit`; how long that took, or `None` when it did not happen.
    pub async fn wait_for_graphs(&self, count: u64, limit: Duration) -> Option<Duration> {
        let started = Instant::now();
        while self.counters.graphs.load(Ordering::Relaxed) < count {
            if started.elapsed() >= limit {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Some(started.elapsed())
    }

    /// The estimated size of the last project index the server reported loading.
    pub fn index_bytes(&self) -> u64 {
        self.counters.index_bytes.load(Ordering::Relaxed)
    }

    /// Waits until the server has reported `expected` episodes embedded, at most
    /// `limit_secs`, and says how long that took.
    pub async fn wait_for_embeddings(&self, expected: u64, limit_secs: u64) -> EmbedWait {
        let started = Instant::now();
        let limit = Duration::from_secs(limit_secs);
        loop {
            let embedded = self.embedded();
            let complete = embedded >= expected;
            if complete || started.elapsed() >= limit {
                let waited = started.elapsed();
                if complete {
                    eprintln!(
                        "   embeddings: {embedded} of {expected} episodes embedded; waited \
                         {:.1} s after ingest",
                        waited.as_secs_f64()
                    );
                } else {
                    eprintln!(
                        "   warning: only {embedded} of {expected} episodes reported embedded \
                         after {limit_secs} s (is an embedder configured? see --embed-wait-secs)"
                    );
                }
                return EmbedWait {
                    waited,
                    embedded,
                    complete,
                };
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The last warning or error line the server logged, if any.
    pub fn last_warning(&self) -> Option<String> {
        self.counters
            .last_warning
            .lock()
            .expect("warning lock")
            .clone()
    }

    /// Episodes the server has reported embedded so far.
    pub fn embedded(&self) -> u64 {
        self.counters.embedded.load(Ordering::Relaxed)
    }

    /// An error saying `what` failed, with the server's last log lines.
    pub fn error(&self, what: &str, err: impl std::fmt::Display) -> BoxError {
        let log = self.log.lock().expect("log lock");
        let tail = &log[log.len().saturating_sub(TAIL_LINES)..];
        format!(
            "{what}: {err}; the server's last log lines:\n{}",
            tail.join("\n")
        )
        .into()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Gone before its data directory is (`Supervised` kills its group when dropped).
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !self.kept {
            let _ = std::fs::remove_dir_all(&self.data_dir);
        }
    }
}

/// What the server's log tells the bench.
#[derive(Default)]
struct Counters {
    /// Episodes the server has reported embedded ("embedding queue drained").
    embedded: AtomicU64,
    /// Estimated bytes of the last project index it loaded ("project index loaded").
    index_bytes: AtomicU64,
    /// Vector graphs it has reported built ("vector graph built").
    graphs: AtomicU64,
    /// The last warning or error line it logged.
    last_warning: Mutex<Option<String>>,
}

/// How often each kind of warning has been seen (see [`Counters::read`]).
type Echo = std::collections::HashMap<String, u64>;

impl Counters {
    /// Counts what one log line reports, and echoes warnings, errors and graphs built.
    fn read(&self, line: &str, repeats: &mut Echo) {
        if line.contains("embedding queue drained")
            && let Some(n) = parse_field(line, "embedded").and_then(|n| n.parse::<u64>().ok())
        {
            self.embedded.fetch_add(n, Ordering::Relaxed);
        }
        if line.contains("project index loaded")
            && let Some(n) = parse_field(line, "bytes").and_then(|n| n.parse::<u64>().ok())
        {
            self.index_bytes.store(n, Ordering::Relaxed);
        }
        if line.contains("vector graph built") {
            self.graphs.fetch_add(1, Ordering::Relaxed);
            eprintln!("[server] {line}");
        } else if line.contains(" WARN ") || line.contains(" ERROR ") {
            // A model or endpoint that keeps failing repeats one warning for every
            // call: the first few are shown whole, then a count now and then.
            *self.last_warning.lock().expect("warning lock") = Some(line.to_string());
            let kind = line_kind(line);
            let seen = repeats.entry(kind.to_string()).or_insert(0u64);
            *seen += 1;
            if *seen <= ECHOED_REPEATS {
                eprintln!("[server] {line}");
                if *seen == ECHOED_REPEATS {
                    eprintln!("[server] (more warnings like the last are counted, not shown)");
                }
            } else if seen.is_power_of_two() {
                eprintln!("[server] ({seen} so far) {kind}");
            }
        }
    }
}

/// Warnings and errors of one kind echoed whole before they are only counted.
const ECHOED_REPEATS: u64 = 3;

/// What makes log lines alike: the level, target and message, without the time and the
/// `name=value` fields.
fn line_kind(line: &str) -> &str {
    let start = line
        .find(" WARN ")
        .or_else(|| line.find(" ERROR "))
        .map_or(0, |at| at + 1);
    let rest = &line[start..];
    let end = rest
        .find('=')
        .and_then(|eq| rest[..eq].rfind(' '))
        .unwrap_or(rest.len());
    rest[..end].trim_end()
}

/// The value of the `name=value` field of a text log line, unquoted.
fn parse_field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let pattern = format!(" {name}=");
    let start = line.find(&pattern)? + pattern.len();
    let rest = &line[start..];
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    Some(rest[..end].trim_matches('"'))
}

/// How long after ingest the server took to report every episode embedded.
#[derive(Clone, Copy)]
pub struct EmbedWait {
    pub waited: Duration,
    /// Episodes reported embedded when the wait ended.
    pub embedded: u64,
    pub complete: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_are_alike_by_level_target_and_message() {
        let a = "2026-12-04T19:59:43.716358Z  WARN memmachine_domain::llm::openai: chat \
                 completion request failed; retrying endpoint=http://x/v1 attempt=1 of=4";
        let b = "2026-12-04T20:00:43.716358Z  WARN memmachine_domain::llm::openai: chat \
                 completion request failed; retrying endpoint=http://x/v1 attempt=3 of=4";
        assert_eq!(line_kind(a), line_kind(b));
        assert_eq!(
            line_kind(a),
            "WARN memmachine_domain::llm::openai: chat completion request failed; retrying"
        );
        assert_eq!(line_kind("x ERROR y: gone"), "ERROR y: gone");
    }
}
