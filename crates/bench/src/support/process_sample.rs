//! What a server process holds at one moment, read from `/proc/<pid>` (Linux only:
//! fields are `None` elsewhere or once the process is gone): resident memory, open
//! file descriptors, threads and CPU used so far. A long run samples it periodically
//! to show growth (leaks of memory, descriptors or threads).

use serde_json::{Value, json};

use super::cpu::cpu_seconds;

#[derive(Debug, Clone)]
pub struct ProcessSample {
    /// Seconds since the run started (warm-up included).
    pub at_secs: f64,
    pub rss_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    pub threads: Option<u64>,
    /// User + system CPU seconds since the process started.
    pub cpu_seconds: Option<f64>,
}

impl ProcessSample {
    pub fn take(pid: u32, at_secs: f64) -> ProcessSample {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok();
        let field = |name: &str| -> Option<u64> {
            let line = status.as_deref()?.lines().find(|l| l.starts_with(name))?;
            line[name.len()..].split_whitespace().next()?.parse().ok()
        };
        let open_fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .ok()
            .map(|entries| entries.count() as u64);
        ProcessSample {
            at_secs,
            rss_bytes: field("VmRSS:").map(|kib| kib * 1024),
            open_fds,
            threads: field("Threads:"),
            cpu_seconds: cpu_seconds(&pid.to_string()),
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "at_secs": self.at_secs,
            "rss_bytes": self.rss_bytes,
            "open_fds": self.open_fds,
            "threads": self.threads,
            "cpu_seconds": self.cpu_seconds,
        })
    }
}

/// `n` as text, or `n/a`.
pub fn or_na<T: std::fmt::Display>(n: Option<T>) -> String {
    n.map_or_else(|| "n/a".into(), |n| n.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let sample = ProcessSample::take(std::process::id(), 0.0);
        if cfg!(target_os = "linux") {
            assert!(sample.rss_bytes.is_some_and(|b| b > 0));
            assert!(sample.open_fds.is_some_and(|n| n >= 3));
            assert!(sample.threads.is_some_and(|n| n >= 1));
        }
    }
}
