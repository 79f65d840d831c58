//! CPU time of processes and of their threads, from /proc (Linux only; `None` or empty
//! elsewhere). Self-contained (no `super`), so a benchmark can include it by path.

use std::collections::BTreeMap;
use std::process::Command;

/// utime + stime of a `/proc/.../stat` line, in seconds.
fn stat_seconds(stat: &str) -> Option<f64> {
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / clock_ticks())
}

/// CPU seconds (user + system) a process (`"self"` or a pid) has used so far.
pub fn cpu_seconds(pid: &str) -> Option<f64> {
    stat_seconds(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        #[allow(
            clippy::disallowed_methods,
            reason = "a short command that ends by itself"
        )]
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// CPU seconds used so far by the threads of a process, summed by thread name
/// (`sqlite-writer`, `tokio-runtime-w`…; threads that ended are not counted).
pub fn thread_seconds(pid: &str) -> BTreeMap<String, f64> {
    let mut by_name = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return by_name;
    };
    for task in tasks.flatten() {
        let path = task.path();
        let (Ok(stat), Ok(comm)) = (
            std::fs::read_to_string(path.join("stat")),
            std::fs::read_to_string(path.join("comm")),
        ) else {
            continue;
        };
        if let Some(seconds) = stat_seconds(&stat) {
            *by_name.entry(comm.trim().to_string()).or_insert(0.0) += seconds;
        }
    }
    by_name
}

/// CPU used by a server and by this process over a phase, and by the server's threads.
pub struct CpuMeter {
    server_pid: String,
    server: Option<f64>,
    client: Option<f64>,
    threads: BTreeMap<String, f64>,
}

/// What a [`CpuMeter`] measured.
pub struct CpuUse {
    pub server: Option<f64>,
    pub client: Option<f64>,
    /// The server's threads by name, most CPU first.
    pub threads: Vec<(String, f64)>,
}

impl CpuMeter {
    pub fn start(server_pid: u32) -> CpuMeter {
        let server_pid = server_pid.to_string();
        CpuMeter {
            server: cpu_seconds(&server_pid),
            client: cpu_seconds("self"),
            threads: thread_seconds(&server_pid),
            server_pid,
        }
    }

    /// CPU seconds since `start`.
    pub fn stop(&self) -> CpuUse {
        let diff = |before: Option<f64>, pid: &str| Some(cpu_seconds(pid)? - before?);
        let mut threads: Vec<(String, f64)> = thread_seconds(&self.server_pid)
            .into_iter()
            .map(|(name, now)| {
                let before = self.threads.get(&name).copied().unwrap_or(0.0);
                (name, (now - before).max(0.0))
            })
            .filter(|(_, used)| *used > 0.0)
            .collect();
        threads.sort_by(|a, b| b.1.total_cmp(&a.1));
        CpuUse {
            server: diff(self.server, &self.server_pid),
            client: diff(self.client, "self"),
            threads,
        }
    }
}

/// Seconds to two decimals, or `n/a`.
pub fn opt_secs(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), |s| format!("{s:.2}"))
}
