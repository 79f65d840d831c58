//! The processes the tests start (servers, clients, fakes, models): the only way a test
//! starts one (`clippy.toml` disallows `Command::spawn`, `output` and `status` elsewhere).
//!
//! Each child dies with the test process however that ends: it is forked by one thread
//! that lives as long as the process, with `PR_SET_PDEATHSIG` (a signal when the forking
//! *thread* ends, so never a test's own thread), and leads its own process group, which is
//! killed when its handle drops. A child's stderr is kept; when it dies while a test
//! depends on it, the test fails at once with its exit status and the tail of its stderr,
//! and a test that panics for any reason reports how each child it held fared.

use std::io::{self, BufRead, BufReader, Read};
use std::ops::{Deref, DerefMut};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// Lines of stderr shown when a child fails.
const TAIL_LINES: usize = 30;

type Spawned = io::Result<Child>;

/// A command to start, and where to send the child.
type Request = (Command, mpsc::Sender<Spawned>);

/// Forks every child from one thread that never ends, so that `PR_SET_PDEATHSIG` fires
/// only when the test process itself is gone.
fn fork_thread() -> &'static Mutex<mpsc::Sender<Request>> {
    static SENDER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    SENDER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("child-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    #[allow(clippy::disallowed_methods, reason = "the one place children start")]
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("start the child-spawner thread");
        Mutex::new(tx)
    })
}

/// Starts `command` so that it dies with this process: its own process group, and
/// SIGKILL when the spawning thread (which lives as long as the process) ends.
/// The command's configuration is taken (it is left empty).
fn start(command: &mut Command) -> Spawned {
    let parent = std::process::id();
    command.process_group(0);
    // SAFETY: prctl, getppid and signal are async-signal-safe; nothing is allocated.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect.
            if libc::getppid() as u32 != parent {
                return Err(io::Error::other("the test process is gone"));
            }
            // Signals the test process ignores (under nohup, SIGHUP) would be ignored by
            // the child and all it starts: a server under `script` would then outlive
            // the hangup of its terminal.
            for signal in [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT, libc::SIGTERM] {
                libc::signal(signal, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    let owned = std::mem::replace(command, Command::new("/nonexistent"));
    let (reply, answer) = mpsc::channel();
    fork_thread()
        .lock()
        .unwrap()
        .send((owned, reply))
        .expect("the child-spawner thread is alive");
    answer.recv().expect("the child-spawner thread answers")
}

/// What stderr said: every line, in order.
pub type Lines = Arc<Mutex<Vec<String>>>;

/// A running child, killed (with its process group) when dropped.
pub struct Supervised {
    name: String,
    child: Child,
    stderr: Lines,
    /// Set when stderr has been read to its end.
    stderr_done: Arc<AtomicBool>,
    exited: Option<ExitStatus>,
    /// Its end has been told in a failure already.
    reported: bool,
}

impl Supervised {
    /// Starts `command` as `name` (said in every failure), its stderr captured;
    /// `echo_var` set in the environment copies each stderr line to the test's stderr.
    pub fn spawn(name: &str, command: &mut Command, echo_var: Option<&str>) -> Supervised {
        let shown = format!("{command:?}");
        let echo = echo_var.is_some_and(|var| std::env::var_os(var).is_some());
        let prefix = format!("[{name}] ");
        let watch: Option<Watch> =
            echo.then(|| Box::new(move |line: &str| eprintln!("{prefix}{line}")) as Watch);
        Self::try_spawn(name, command, watch)
            .unwrap_or_else(|err| panic!("cannot start {name} ({shown}): {err}"))
    }

    /// As `spawn`, `Err` if it cannot start (a benchmark reports it), and `watch` given
    /// each stderr line as it is read (a benchmark counts what the log reports).
    pub fn try_spawn(
        name: &str,
        command: &mut Command,
        watch: Option<Watch>,
    ) -> io::Result<Supervised> {
        command.stderr(Stdio::piped());
        let mut child = start(command)?;
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let stderr_done = Arc::new(AtomicBool::new(false));
        collect(
            child.stderr.take().expect("stderr is piped"),
            stderr.clone(),
            stderr_done.clone(),
            watch,
        );
        Ok(Supervised {
            name: name.to_string(),
            child,
            stderr,
            stderr_done,
            exited: None,
            reported: false,
        })
    }

    /// Every line written to stderr so far (shared; it grows while the child runs).
    pub fn stderr_lines(&self) -> Lines {
        self.stderr.clone()
    }

    /// `Err` saying how the child ended and what it last wrote, once it has exited.
    pub fn check(&mut self) -> Result<(), String> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
            if self.exited.is_some() {
                self.drain_stderr();
            }
        }
        match self.exited {
            None => Ok(()),
            Some(status) => Err(self.obituary(status)),
        }
    }

    /// Panics (see `check`) if the child has exited: call it in every wait that depends
    /// on the child, so that a dead one fails the test at once.
    pub fn assert_running(&mut self) {
        if let Err(report) = self.check() {
            self.reported = true;
            panic!("{report}");
        }
    }

    /// Polls `ready` (every 20 ms, given the stderr lines so far) until it holds, the
    /// child exits or `within` passes; `Err` says which, with the stderr tail.
    pub fn wait_for_stderr<T>(
        &mut self,
        what: &str,
        within: Duration,
        mut ready: impl FnMut(&[String]) -> Option<T>,
    ) -> Result<T, String> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(found) = ready(&self.stderr.lock().unwrap()) {
                return Ok(found);
            }
            if let Err(report) = self.check() {
                // Its last lines, read since.
                if let Some(found) = ready(&self.stderr.lock().unwrap()) {
                    return Ok(found);
                }
                return Err(format!("{report}\n(while waiting for {what})"));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{} did not {what} within {within:?}; {}",
                    self.name,
                    self.tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the child to exit, at most `within`; past that it is killed and the
    /// test fails with its stderr tail.
    pub fn wait_within(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for a child") {
                self.exited = Some(status);
                self.drain_stderr();
                return status;
            }
            if Instant::now() >= deadline {
                kill_group(&mut self.child);
                panic!(
                    "{} did not exit within {within:?}: killed; {}",
                    self.name,
                    self.tail()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits (a moment at most: what it started may hold the pipe) until the reader has
    /// taken the last lines of an exited child.
    fn drain_stderr(&self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while !self.stderr_done.load(Ordering::SeqCst) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn obituary(&self, status: ExitStatus) -> String {
        format!("{} {}; {}", self.name, describe(status), self.tail())
    }

    fn tail(&self) -> String {
        tail_of(&self.stderr.lock().unwrap())
    }
}

impl Deref for Supervised {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.child
    }
}

impl DerefMut for Supervised {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.reported {
            // The test failed: say how this child fared, it may be why.
            match self.check() {
                Err(report) => eprintln!("after the failure: {report}"),
                Ok(()) => eprintln!("after the failure: {} was running", self.name),
            }
        }
        kill_group(&mut self.child);
    }
}

/// SIGKILL to the child's process group (what it started too), then reaps it.
fn kill_group(child: &mut Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: a plain kill(2) on the group this child leads.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// How long `Run::run` lets a command take before it is killed.
pub const RUN_BOUND: Duration = Duration::from_secs(300);

/// Running a command to its end, through this module.
pub trait Run {
    /// `Command::output`, bounded by `RUN_BOUND`; panics if it cannot start.
    fn run(&mut self) -> Output;
    /// As `run`, bounded by `within`.
    fn run_within(&mut self, within: Duration) -> Output;
    /// As `run`, `Err` if it cannot start (a tool that may be missing).
    fn try_run(&mut self) -> io::Result<Output>;
}

impl Run for Command {
    fn run(&mut self) -> Output {
        self.run_within(RUN_BOUND)
    }

    fn run_within(&mut self, within: Duration) -> Output {
        let shown = format!("{self:?}");
        output(self, within, Stdio::null())
            .unwrap_or_else(|err| panic!("cannot run {shown}: {err}"))
    }

    fn try_run(&mut self) -> io::Result<Output> {
        output(self, RUN_BOUND, Stdio::null())
    }
}

/// Runs `command` to its end with `stdin`, stdout and stderr captured, at most
/// `within`: past that it is killed and the test fails with what it printed so far.
fn output(command: &mut Command, within: Duration, stdin: Stdio) -> io::Result<Output> {
    let name = program_of(command);
    command
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = start(command)?;
    let (stdout, stderr) = (
        Arc::new(Mutex::new(Vec::new())),
        Arc::new(Mutex::new(Vec::new())),
    );
    let readers = [
        read_all(child.stdout.take().expect("piped"), stdout.clone()),
        read_all(child.stderr.take().expect("piped"), stderr.clone()),
    ];
    let deadline = Instant::now() + within;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            kill_group(&mut child);
            let _ = readers.map(|r| r.join());
            panic!(
                "{name} did not finish within {within:?}: killed\n--- stdout ---\n{}\n--- stderr ---\n{}",
                String::from_utf8_lossy(&stdout.lock().unwrap()),
                String::from_utf8_lossy(&stderr.lock().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // What it started may hold the pipes open: they close with its group.
    kill_group(&mut child);
    let _ = readers.map(|r| r.join());
    let take = |bytes: &Arc<Mutex<Vec<u8>>>| std::mem::take(&mut *bytes.lock().unwrap());
    Ok(Output {
        status,
        stdout: take(&stdout),
        stderr: take(&stderr),
    })
}

/// As `Run::run`, with `input` written to its stdin (then closed).
pub fn run_with_input(command: &mut Command, input: Vec<u8>) -> Output {
    use std::io::Write;
    let (reader, mut writer) = io::pipe().expect("a pipe for stdin");
    let feeder = std::thread::spawn(move || {
        let _ = writer.write_all(&input);
    });
    let shown = format!("{command:?}");
    // The read end goes with the command, dropped once the child has started.
    let output = output(command, RUN_BOUND, reader.into())
        .unwrap_or_else(|err| panic!("cannot run {shown}: {err}"));
    let _ = feeder.join();
    output
}

/// "memmachine serve": the program's file name and its first argument.
fn program_of(command: &Command) -> String {
    let program = std::path::Path::new(command.get_program())
        .file_name()
        .unwrap_or(command.get_program())
        .to_string_lossy()
        .into_owned();
    match command.get_args().next() {
        Some(arg) => format!("{program} {}", arg.to_string_lossy()),
        None => program,
    }
}

fn read_all(
    mut stream: impl Read + Send + 'static,
    into: Arc<Mutex<Vec<u8>>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = stream.read(&mut buf) {
            if n == 0 {
                break;
            }
            into.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    })
}

/// What is told each stderr line of a child as it is read.
pub type Watch = Box<dyn FnMut(&str) + Send>;

/// Collects `stream`'s lines into `lines`, telling each to `watch` first; sets `done`
/// at its end.
fn collect(
    stream: impl Read + Send + 'static,
    lines: Lines,
    done: Arc<AtomicBool>,
    mut watch: Option<Watch>,
) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if let Some(watch) = &mut watch {
                watch(&line);
            }
            lines.lock().unwrap().push(line);
        }
        done.store(true, Ordering::SeqCst);
    });
}

/// "exited with status 1", "was killed by signal 4 (SIGILL)".
pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal} ({})", signal_name(signal)),
        _ => format!("ended: {status}"),
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGILL => "SIGILL, an instruction this CPU lacks",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGHUP => "SIGHUP",
        libc::SIGPIPE => "SIGPIPE",
        _ => "another signal",
    }
}

/// The last lines of `lines`, as a block.
fn tail_of(lines: &[String]) -> String {
    if lines.is_empty() {
        return "it wrote nothing to stderr".into();
    }
    let shown = &lines[lines.len().saturating_sub(TAIL_LINES)..];
    format!(
        "the last {} of its {} stderr lines:\n{}",
        shown.len(),
        lines.len(),
        shown.join("\n")
    )
}
