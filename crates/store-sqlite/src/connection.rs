//! Connections to the SQLite file: one writer thread that commits concurrent writes
//! together (group commit, each write in its own savepoint so one failure does not
//! affect the others), and a pool of read connections used from blocking threads.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};

use rusqlite::Connection;
use rusqlite::functions::FunctionFlags;
use rusqlite::types::{Value, ValueRef};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError, oneshot};

use memmachine_core::error::{Error, Result};

/// Most writes committed in one transaction.
const MAX_GROUP: usize = 512;

use super::error::storage_error;

/// SQLite's page cache for all of a store's connections together, split evenly (at
/// least `MIN_CACHE_KIB` each). Rows are read by key and the file stays in the kernel's
/// cache, so a large cache per connection bought little and sat beside the index budget.
pub(super) const CACHE_TOTAL_KIB: usize = 32 * 1024;
const MIN_CACHE_KIB: usize = 2 * 1024;

/// Each connection's page cache, for `connections` of them.
pub(super) fn cache_kib(connections: usize) -> usize {
    (CACHE_TOTAL_KIB / connections.max(1)).max(MIN_CACHE_KIB)
}

/// Opens a connection with the durability settings every connection shares, and a page
/// cache of `cache_kib`.
pub(super) fn open_connection(path: &Path, cache_kib: usize) -> Result<Connection> {
    let conn = Connection::open(path).map_err(storage_error)?;
    // The busy timeout first: switching a new file to WAL takes a lock another process
    // opening it at the same moment may hold.
    conn.execute_batch(
        "PRAGMA busy_timeout = 10000;
         PRAGMA journal_mode = WAL;
         PRAGMA synchronous = FULL;
         PRAGMA foreign_keys = ON;
         PRAGMA temp_store = MEMORY;",
    )
    .map_err(storage_error)?;
    // Negative: in KiB rather than pages.
    conn.execute_batch(&format!("PRAGMA cache_size = -{cache_kib};"))
        .map_err(storage_error)?;
    conn.set_prepared_statement_cache_capacity(256);
    register_functions(&conn).map_err(storage_error)?;
    rusqlite::vtab::array::load_module(&conn).map_err(storage_error)?;
    Ok(conn)
}

/// `mm_num(x)`: x as a number when it is one (or a string holding one), else NULL.
/// Filters use it so that numbers compare numerically. `mm_now_micros()`: now.
fn register_functions(conn: &Connection) -> rusqlite::Result<()> {
    conn.create_scalar_function(
        "mm_num",
        1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            Ok(match ctx.get_raw(0) {
                ValueRef::Integer(i) => Value::Real(i as f64),
                ValueRef::Real(r) => Value::Real(r),
                ValueRef::Text(t) => std::str::from_utf8(t)
                    .ok()
                    .and_then(memmachine_core::model::filter_eval::as_number)
                    .map_or(Value::Null, Value::Real),
                _ => Value::Null,
            })
        },
    )?;
    // The clock every other timestamp comes from, to the microsecond (SQLite's own is
    // to the millisecond): the feature history's triggers end versions with it.
    conn.create_scalar_function("mm_now_micros", 0, FunctionFlags::SQLITE_UTF8, |_| {
        Ok(chrono::Utc::now().timestamp_micros())
    })
}

type Finish = Box<dyn FnOnce(Result<()>) + Send>;
/// A write: runs inside its savepoint (or learns why it cannot run), says whether it
/// succeeded, and returns what to do once the group's commit is known.
type Job = Box<dyn FnOnce(Result<&Connection>) -> (bool, Finish) + Send>;

pub(super) struct Writer {
    sender: Mutex<Option<mpsc::Sender<Job>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Writer {
    pub(super) fn start(conn: Connection) -> Writer {
        let (sender, receiver) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || writer_loop(conn, receiver))
            .expect("spawn the sqlite writer thread");
        Writer {
            sender: Mutex::new(Some(sender)),
            thread: Mutex::new(Some(thread)),
        }
    }

    /// Runs `f` in the writer's transaction; answers once it is durably committed.
    pub(super) async fn write<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |conn| {
            if tx.is_closed() {
                // The caller stopped waiting (its deadline passed, it cancelled) before
                // the write began: nothing it no longer waits for is written.
                let nothing: Finish = Box::new(|_| ());
                return (false, nothing);
            }
            let result = conn.and_then(f);
            let ok = result.is_ok();
            let finish: Finish = Box::new(move |commit| {
                let _ = tx.send(commit.and(result));
            });
            (ok, finish)
        });
        {
            let sender = self.sender.lock().expect("writer sender lock");
            let closed = || Error::Closed;
            sender
                .as_ref()
                .ok_or_else(closed)?
                .send(job)
                .map_err(|_| closed())?;
        }
        rx.await
            .map_err(|_| Error::Internal("the storage writer stopped".into()))?
    }

    /// `close` without blocking the async caller's thread.
    pub(super) async fn close_async(&self) {
        self.sender.lock().expect("writer sender lock").take();
        let thread = self.thread.lock().expect("writer thread lock").take();
        if let Some(thread) = thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }

    /// Finishes queued writes and stops the writer thread.
    pub(super) fn close(&self) {
        self.sender.lock().expect("writer sender lock").take();
        if let Some(thread) = self.thread.lock().expect("writer thread lock").take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.close();
    }
}

fn writer_loop(conn: Connection, receiver: mpsc::Receiver<Job>) {
    while let Ok(first) = receiver.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match receiver.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        run_group(&conn, group);
    }
}

/// Runs a group of writes in one transaction: one fsync for all of them.
fn run_group(conn: &Connection, group: Vec<Job>) {
    if let Err(err) = conn.execute_batch("BEGIN IMMEDIATE") {
        tracing::error!(error = %err, "cannot begin a write transaction");
        for job in group {
            let (_, finish) = job(Err(super::error::classify_on(conn, &err)));
            finish(Ok(()));
        }
        return;
    }
    let mut finishes = Vec::with_capacity(group.len());
    for job in group {
        if let Err(err) = conn.execute_batch("SAVEPOINT job") {
            tracing::error!(error = %err, "cannot open a savepoint");
            finishes.push(job(Err(storage_error(err))).1);
            continue;
        }
        // A panicking write must not take the writer thread down with it: its caller
        // learns of the failure through the dropped reply channel.
        let Ok((ok, finish)) =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(Ok(conn))))
        else {
            tracing::error!("a write panicked; rolled back");
            let _ = conn.execute_batch("ROLLBACK TO job; RELEASE job");
            continue;
        };
        let end = if ok {
            "RELEASE job"
        } else {
            "ROLLBACK TO job; RELEASE job"
        };
        if let Err(err) = conn.execute_batch(end) {
            tracing::error!(error = %err, "cannot close a savepoint");
        }
        finishes.push(finish);
    }
    let commit = conn.execute_batch("COMMIT").map_err(|err| {
        let err = super::error::classify_on(conn, &err);
        tracing::error!(error = %err, "write transaction failed to commit");
        let _ = conn.execute_batch("ROLLBACK");
        err
    });
    for finish in finishes {
        finish(commit.clone());
    }
}

/// Read connections, each used by one blocking task at a time.
pub(super) struct ReadPool {
    path: PathBuf,
    cache_kib: usize,
    idle: Arc<Mutex<Vec<Connection>>>,
    permits: Arc<Semaphore>,
}

impl ReadPool {
    /// A pool of at most `size` connections, each with a page cache of `cache_kib`.
    pub(super) fn new(path: PathBuf, size: usize, cache_kib: usize) -> ReadPool {
        ReadPool {
            path,
            cache_kib,
            idle: Arc::new(Mutex::new(Vec::new())),
            permits: Arc::new(Semaphore::new(size.max(1))),
        }
    }

    /// Runs `f` on a read connection inside one read transaction (one snapshot).
    pub(super) async fn read<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&rusqlite::Transaction<'_>) -> Result<R> + Send + 'static,
    {
        // The permit goes with the blocking task: a caller that stops waiting (deadline,
        // cancellation) does not free its connection for another while the read runs.
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::Closed)?;
        let idle = self.idle.clone();
        let (path, cache_kib) = (self.path.clone(), self.cache_kib);
        // A caller that stops waiting interrupts its read: the blocking thread would
        // otherwise run it to the end for no one.
        let abandoned = Abandoned::default();
        let flag = abandoned.0.clone();
        let task = tokio::task::spawn_blocking(move || {
            run_read(&idle, &path, cache_kib, permit, |tx| {
                let flag = flag.clone();
                tx.progress_handler(
                    PROGRESS_STEPS,
                    Some(move || flag.load(std::sync::atomic::Ordering::Relaxed)),
                );
                let result = f(tx);
                tx.progress_handler(PROGRESS_STEPS, None::<fn() -> bool>);
                result
            })
        });
        let result = task
            .await
            .map_err(|err| Error::Internal(format!("read task failed: {err}")))?;
        drop(abandoned);
        result
    }

    /// `read` for small reads (a few rows by key): on the calling thread when a
    /// connection is free, as the hop to a blocking thread would cost more than the read.
    pub(super) async fn read_here<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&rusqlite::Transaction<'_>) -> Result<R> + Send + 'static,
    {
        match self.permits.clone().try_acquire_owned() {
            Ok(permit) => run_read(&self.idle, &self.path, self.cache_kib, permit, f),
            Err(TryAcquireError::Closed) => Err(Error::Closed),
            Err(TryAcquireError::NoPermits) => self.read(f).await,
        }
    }
}

/// SQLite virtual-machine steps between two looks at whether a read's caller left.
const PROGRESS_STEPS: std::ffi::c_int = 1000;

/// Set when the future waiting for a read is dropped before the read is done.
#[derive(Default)]
struct Abandoned(Arc<std::sync::atomic::AtomicBool>);

impl Drop for Abandoned {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Runs `f` in a read transaction on a pooled connection (opened when none is idle).
fn run_read<R>(
    idle: &Mutex<Vec<Connection>>,
    path: &Path,
    cache_kib: usize,
    _permit: OwnedSemaphorePermit,
    f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<R>,
) -> Result<R> {
    let pooled = idle.lock().expect("read pool lock").pop();
    let mut conn = match pooled {
        Some(conn) => conn,
        None => open_connection(path, cache_kib)?,
    };
    let result = (|| {
        let tx = conn.transaction().map_err(storage_error)?;
        let value = f(&tx)?;
        tx.finish().map_err(storage_error)?;
        Ok(value)
    })();
    idle.lock().expect("read pool lock").push(conn);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A read of a hundred million rows: tens of seconds of work.
    const LONG_READ: &str = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c \
                             WHERE x < 100000000) SELECT count(*) FROM c";

    #[tokio::test]
    async fn a_read_whose_caller_left_stops() {
        let path = std::env::temp_dir().join(format!("mm-read-{}.db", uuid::Uuid::new_v4()));
        open_connection(&path, MIN_CACHE_KIB).unwrap();
        // One connection: the next read waits until the abandoned one gives it back.
        let pool = ReadPool::new(path.clone(), 1, MIN_CACHE_KIB);
        let count = |tx: &rusqlite::Transaction<'_>| {
            tx.query_row(LONG_READ, [], |row| row.get::<_, i64>(0))
                .map_err(storage_error)
        };
        let left = tokio::time::timeout(Duration::from_millis(200), pool.read(count)).await;
        assert!(left.is_err(), "the long read finished within its deadline");
        let gone = Instant::now();
        let next = tokio::time::timeout(
            Duration::from_secs(10),
            pool.read(|tx| {
                tx.query_row("SELECT 1", [], |row| row.get::<_, i64>(0))
                    .map_err(storage_error)
            }),
        )
        .await
        .expect("the abandoned read still holds the only connection");
        assert_eq!(next.unwrap(), 1);
        eprintln!(
            "the connection was free again {:?} after the caller left",
            gone.elapsed()
        );
        // The interrupted connection went back to the pool and serves reads.
        assert_eq!(pool.idle.lock().unwrap().len(), 1);
        let _ = std::fs::remove_file(&path);
    }
}
