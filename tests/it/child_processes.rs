//! The harness's promise about the processes tests start (`common/child.rs`): a child
//! that dies fails the wait at once, saying how and what it last wrote; and children die
//! with the test process, however it ends and whichever thread started them.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::child::Supervised;

/// Set for the holder: without it, the ignored test returns at once.
const HOLDER_VAR: &str = "MEMMACHINE_TEST_CHILD_HOLDER";

#[test]
fn a_child_that_dies_fails_the_wait_at_once_with_its_status_and_last_words() {
    let mut child = Supervised::spawn(
        "a crashing tool",
        Command::new("sh").args(["-c", "echo about to fail >&2; kill -ILL $$"]),
        None,
    );
    let started = Instant::now();
    let err = child
        .wait_for_stderr("say it is ready", Duration::from_secs(600), |lines| {
            lines.iter().any(|l| l == "ready").then_some(())
        })
        .unwrap_err();
    // Not the 600 s bound: the death is noticed.
    assert!(started.elapsed() < Duration::from_secs(60), "{err}");
    assert!(
        err.contains("a crashing tool was killed by signal 4 (SIGILL"),
        "{err}"
    );
    assert!(err.contains("about to fail"), "{err}");
    assert!(err.contains("say it is ready"), "{err}");
    let err = child.check().unwrap_err();
    assert!(err.contains("SIGILL"), "{err}");
}

/// Whether `pid` is gone (or a zombie awaiting its reaper).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn children_die_with_the_test_process_killed_outright() {
    let exe = std::env::current_exe().expect("the test binary");
    let mut holder = Supervised::spawn(
        "a test process holding a child",
        Command::new(exe)
            .args(["--ignored", "--exact", "--nocapture"])
            .arg("child_processes::holds_a_child_started_by_a_thread_that_ended")
            .env(HOLDER_VAR, "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped()),
        None,
    );
    let stdout = holder.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(pid) = line.strip_prefix("CHILD ") {
                let _ = tx.send(pid.trim().parse::<u32>().unwrap());
            }
        }
    });
    let pid = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("the holder named no child: {:?}", holder.check()));
    // Its child outlived the thread that started it...
    std::thread::sleep(Duration::from_millis(300));
    assert!(!gone(pid), "the child died with the thread that started it");
    // ...and dies with the process, which gets no chance to drop anything.
    holder.kill().unwrap();
    holder.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !gone(pid) {
        assert!(
            Instant::now() < deadline,
            "pid {pid} outlived its test process"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
#[ignore = "run by children_die_with_the_test_process_killed_outright"]
fn holds_a_child_started_by_a_thread_that_ended() {
    if std::env::var_os(HOLDER_VAR).is_none() {
        return;
    }
    let child =
        std::thread::spawn(|| Supervised::spawn("sleep", Command::new("sleep").arg("600"), None))
            .join()
            .unwrap();
    println!("CHILD {}", child.id());
    // Killed from outside long before this ends.
    std::thread::sleep(Duration::from_secs(120));
    drop(child);
}
