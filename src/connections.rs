//! The connections the server holds on its gRPC and REST listeners. At most `max` are
//! open at once. A connection is *pending* until its first request has arrived whole
//! (headers, then body) or been answered; only then is it *live*. A pending one that
//! sends nothing within `preface_timeout`, or not its first request's headers within
//! `header_timeout`, is closed. When every place is taken, a new connection takes the
//! place of the oldest pending one, so that sockets left silent, or trickling their
//! headers or first body, cannot lock out a health probe or a client; with none
//! pending, the new connection is closed at once.
//!
//! The application layer tells the gate when a connection's request arrives
//! (`arrival`): the bytes under the gate may be TLS, so only it can tell.

pub mod arrival;
mod flags;

pub use flags::Flags;

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// Bytes a connection must send before it stops counting as silent: the length of the
/// HTTP/2 preface, shorter than any TLS hello or HTTP/1 request line.
const PREFACE_BYTES: usize = 24;
/// File descriptors kept back from `--max-connections`' default for the store, the
/// model and the logs.
const RESERVED_FDS: u64 = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Most connections open at once, both listeners together.
    pub max: usize,
    /// How long a new connection may stay silent.
    pub preface_timeout: Duration,
    /// How long a new connection may take to send its first request's headers (and an
    /// HTTP/1 connection each next request's); also a request body's first allowance.
    pub header_timeout: Duration,
    /// Slowest a request body may arrive once its allowance is spent, in bytes a second.
    pub min_body_rate: u64,
}

impl ConnectionLimits {
    /// The default bound: the hard open-file limit (which `raise_open_file_limit`
    /// makes the soft one at start) less a reserve, capped at 10,000.
    pub fn default_max() -> usize {
        let files = rlimit::Resource::NOFILE
            .get()
            .map_or(1024, |(_, hard)| hard);
        files.saturating_sub(RESERVED_FDS).clamp(16, 10_000) as usize
    }
}

/// Raises the soft open-file limit to the hard one, as a server holding many
/// connections should; the limit it has, or 1024 when it cannot be read.
pub fn raise_open_file_limit() -> u64 {
    rlimit::increase_nofile_limit(u64::MAX).unwrap_or(1024)
}

/// A connection's (local, remote) addresses: how a gRPC request finds its connection.
pub type Endpoints = (SocketAddr, SocketAddr);

/// What the gate needs of a connection: its addresses, when it has them.
pub trait Addressed {
    fn endpoints(&self) -> Option<Endpoints>;
}

impl Addressed for tokio::net::TcpStream {
    fn endpoints(&self) -> Option<Endpoints> {
        Some((self.local_addr().ok()?, self.peer_addr().ok()?))
    }
}

impl Addressed for tokio::io::DuplexStream {
    fn endpoints(&self) -> Option<Endpoints> {
        None
    }
}

/// Counts and bounds the open connections; shared by both listeners.
#[derive(Clone)]
pub struct Gate(Arc<GateState>);

struct GateState {
    limits: ConnectionLimits,
    places: Mutex<Places>,
    next_id: AtomicU64,
}

#[derive(Default)]
struct Places {
    open: usize,
    /// Connections not yet live, oldest first.
    pending: VecDeque<Arc<Slot>>,
    /// The pending ones by address, for a gRPC request to find its connection (tonic
    /// gives a request its connection's addresses, nothing else).
    by_endpoints: HashMap<Endpoints, Arc<Slot>>,
}

/// Where a connection stands; it moves only forward, under the gate's lock.
const PENDING: u8 = 0;
/// Its first request's headers arrived: the header deadline is over.
const HEADERS_IN: u8 = 1;
const LIVE: u8 = 2;
/// Closed to make room for a newcomer.
const EVICTED: u8 = 3;
/// Its first request's body came too slowly: never live, so always evictable (closing
/// it at once could cut off the answer saying why, on HTTP/2).
const TOO_SLOW: u8 = 4;

struct Slot {
    id: u64,
    endpoints: Option<Endpoints>,
    state: AtomicU8,
    waker: AtomicWaker,
}

impl Slot {
    fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }
}

impl Gate {
    pub fn new(limits: ConnectionLimits) -> Gate {
        Gate(Arc::new(GateState {
            limits,
            places: Mutex::new(Places::default()),
            next_id: AtomicU64::new(0),
        }))
    }

    pub fn limits(&self) -> ConnectionLimits {
        self.0.limits
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.0.lock().open
    }

    /// A place for a new connection, or `None` (close it) when none is free.
    pub fn admit<IO: Addressed>(&self, io: IO) -> Option<Gated<IO>> {
        let slot = Arc::new(Slot {
            id: self.0.next_id.fetch_add(1, Ordering::Relaxed),
            endpoints: io.endpoints(),
            state: AtomicU8::new(PENDING),
            waker: AtomicWaker::new(),
        });
        {
            let mut places = self.0.lock();
            if places.open >= self.0.limits.max {
                let Some(oldest) = places.pending.pop_front() else {
                    tracing::warn!(
                        max = self.0.limits.max,
                        "a connection was refused: every place is taken by a live one \
                         (--max-connections)"
                    );
                    return None;
                };
                if let Some(endpoints) = oldest.endpoints {
                    places.by_endpoints.remove(&endpoints);
                }
                // Its place passes to the newcomer when it closes; counted as gone now.
                oldest.state.store(EVICTED, Ordering::Release);
                oldest.waker.wake();
                places.open -= 1;
                tracing::info!("a connection not yet live was closed to make room for a new one");
            }
            places.open += 1;
            places.pending.push_back(slot.clone());
            if let Some(endpoints) = slot.endpoints {
                places.by_endpoints.insert(endpoints, slot.clone());
            }
        }
        let limits = self.0.limits;
        let accepted = Instant::now();
        Some(Gated {
            io,
            mark: Mark {
                gate: self.0.clone(),
                slot,
            },
            heard: 0,
            live: false,
            accepted,
            deadline: Box::pin(tokio::time::sleep_until(
                accepted + limits.preface_timeout.min(limits.header_timeout),
            )),
        })
    }

    /// The connection at these addresses while it is pending.
    pub fn pending_at(&self, endpoints: Endpoints) -> Option<Mark> {
        let places = self.0.lock();
        let slot = places.by_endpoints.get(&endpoints)?.clone();
        Some(Mark {
            gate: self.0.clone(),
            slot,
        })
    }
}

impl GateState {
    fn lock(&self) -> std::sync::MutexGuard<'_, Places> {
        // A panic elsewhere while holding the lock leaves the counts as they were.
        self.places
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Moves a pending slot to `to` (live or too slow), out of the newcomers' way
    /// when live.
    fn settle(&self, slot: &Slot, to: u8) {
        let mut places = self.lock();
        if !matches!(slot.state(), PENDING | HEADERS_IN) {
            return;
        }
        slot.state.store(to, Ordering::Release);
        if to == LIVE {
            places.pending.retain(|s| s.id != slot.id);
            if let Some(endpoints) = slot.endpoints {
                places.by_endpoints.remove(&endpoints);
            }
        }
    }

    fn closed(&self, slot: &Slot) {
        let mut places = self.lock();
        let state = slot.state();
        if state != LIVE && state != EVICTED {
            places.pending.retain(|s| s.id != slot.id);
            if let Some(endpoints) = slot.endpoints {
                places.by_endpoints.remove(&endpoints);
            }
        }
        // An evicted connection's place was given up when it was evicted.
        if state != EVICTED {
            places.open -= 1;
        }
    }
}

/// What the application layer tells the gate of a connection's first request.
#[derive(Clone)]
pub struct Mark {
    gate: Arc<GateState>,
    slot: Arc<Slot>,
}

impl Mark {
    /// Whether the connection no longer needs telling (live, or closing).
    pub fn settled(&self) -> bool {
        !matches!(self.slot.state(), PENDING | HEADERS_IN)
    }

    /// A request's headers arrived: the header deadline is over (its body has its own).
    pub fn headers_in(&self) {
        let _ = self.slot.state.compare_exchange(
            PENDING,
            HEADERS_IN,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// A request arrived whole or was answered: the connection is a client's.
    pub fn live(&self) {
        self.gate.settle(&self.slot, LIVE);
    }

    /// Its first request's body came too slowly: the connection stays evictable for
    /// good (HTTP/1 closes it after the answer anyway).
    pub fn too_slow(&self) {
        self.gate.settle(&self.slot, TOO_SLOW);
    }
}

/// A connection holding its place until dropped.
pub struct Gated<IO> {
    io: IO,
    mark: Mark,
    heard: usize,
    /// Known live: nothing more to watch.
    live: bool,
    accepted: Instant,
    /// The preface deadline until the first bytes arrive, then the header deadline.
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl<IO> Gated<IO> {
    pub fn get_ref(&self) -> &IO {
        &self.io
    }

    /// For the application layer to say how the connection's first request went.
    pub fn mark(&self) -> Mark {
        self.mark.clone()
    }

    /// Why a connection not yet live must close now, if it must.
    fn refusal(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        let slot = &self.mark.slot;
        slot.waker.register(cx.waker());
        match slot.state() {
            LIVE => self.live = true,
            EVICTED => {
                return Some(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "closed before its first request arrived whole, to make room for a new \
                     connection",
                ));
            }
            PENDING if self.deadline.as_mut().poll(cx).is_ready() => {
                let what = if self.heard < PREFACE_BYTES {
                    "nothing was sent within the preface timeout"
                } else {
                    "the request headers did not arrive within the header timeout"
                };
                tracing::debug!("{what}: closing the connection");
                return Some(io::Error::new(io::ErrorKind::TimedOut, what));
            }
            _ => {}
        }
        None
    }
}

impl<IO> Drop for Gated<IO> {
    fn drop(&mut self) {
        self.mark.gate.closed(&self.mark.slot);
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Gated<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.live
            && let Some(err) = this.refusal(cx)
        {
            return Poll::Ready(Err(err));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if !this.live
            && this.heard < PREFACE_BYTES
            && let Poll::Ready(Ok(())) = polled
        {
            let read = buf.filled().len() - before;
            this.heard += read;
            if this.heard >= PREFACE_BYTES {
                // Past the preface: the header deadline alone applies from now.
                let limits = this.mark.gate.limits;
                this.deadline
                    .as_mut()
                    .reset(this.accepted + limits.header_timeout);
            }
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Gated<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl<IO: tonic::transport::server::Connected> tonic::transport::server::Connected for Gated<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

/// The REST listener, through the gate.
pub struct GatedListener {
    pub listener: tokio::net::TcpListener,
    pub gate: Gate,
}

impl axum::serve::Listener for GatedListener {
    type Io = Gated<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.listener.accept().await {
                Ok((tcp, addr)) => {
                    if let Some(gated) = self.gate.admit(tcp) {
                        return (gated, addr);
                    }
                }
                Err(err) => {
                    // Out of descriptors or a reset before accept: wait, then go on.
                    tracing::warn!(error = %err, "accepting a REST connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn limits(max: usize, preface_ms: u64, header_ms: u64) -> ConnectionLimits {
        ConnectionLimits {
            max,
            preface_timeout: Duration::from_millis(preface_ms),
            header_timeout: Duration::from_millis(header_ms),
            min_body_rate: 1024,
        }
    }

    fn gate(max: usize, timeout_ms: u64) -> Gate {
        Gate::new(limits(max, timeout_ms, 60_000))
    }

    /// A connection that has sent its preface and whose first request was answered.
    async fn live(gate: &Gate) -> (tokio::io::DuplexStream, Gated<tokio::io::DuplexStream>) {
        let (mut client, server) = tokio::io::duplex(64);
        let mut gated = gate.admit(server).unwrap();
        client.write_all(&[b'x'; PREFACE_BYTES]).await.unwrap();
        let mut buf = [0u8; PREFACE_BYTES];
        gated.read_exact(&mut buf).await.unwrap();
        gated.mark().live();
        (client, gated)
    }

    #[tokio::test]
    async fn a_silent_connection_is_closed_after_the_timeout() {
        let gate = gate(4, 50);
        let (client, server) = tokio::io::duplex(64);
        let mut gated = gate.admit(server).unwrap();
        let mut buf = [0u8; 8];
        let err = gated.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        drop((gated, client));
        assert_eq!(gate.open(), 0);
    }

    #[tokio::test]
    async fn a_connection_that_speaks_is_not_timed_out() {
        let gate = gate(4, 50);
        let (mut client, server) = tokio::io::duplex(64);
        let mut gated = gate.admit(server).unwrap();
        client.write_all(&[b'x'; PREFACE_BYTES]).await.unwrap();
        let mut buf = [0u8; PREFACE_BYTES];
        gated.read_exact(&mut buf).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        client.write_all(b"more").await.unwrap();
        assert_eq!(gated.read(&mut buf).await.unwrap(), 4);
    }

    #[tokio::test]
    async fn a_connection_trickling_its_headers_is_closed_after_the_header_timeout() {
        let gate = Gate::new(limits(4, 50, 300));
        let (mut client, server) = tokio::io::duplex(64);
        let mut gated = gate.admit(server).unwrap();
        let trickle = tokio::spawn(async move {
            for _ in 0..100 {
                if client.write_all(b"X-Slow: 1\r\n").await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        let mut buf = [0u8; 64];
        let err = loop {
            match gated.read(&mut buf).await {
                Ok(n) => assert!(n > 0),
                Err(err) => break err,
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(err.to_string().contains("header timeout"), "{err}");
        trickle.abort();
    }

    #[tokio::test]
    async fn once_its_headers_are_in_a_connection_is_not_timed_out() {
        let gate = Gate::new(limits(4, 50, 100));
        let (mut client, server) = tokio::io::duplex(64);
        let mut gated = gate.admit(server).unwrap();
        client.write_all(&[b'x'; PREFACE_BYTES]).await.unwrap();
        let mut buf = [0u8; PREFACE_BYTES];
        gated.read_exact(&mut buf).await.unwrap();
        gated.mark().headers_in();
        tokio::time::sleep(Duration::from_millis(200)).await;
        client.write_all(b"body").await.unwrap();
        assert_eq!(gated.read(&mut buf).await.unwrap(), 4);
    }

    #[tokio::test]
    async fn when_full_the_oldest_pending_connection_makes_room() {
        let gate = gate(3, 60_000);
        let (_a_client, _a) = live(&gate).await;
        // b has spoken (trickling headers, say) but is not live; c is silent.
        let (mut b_client, b) = tokio::io::duplex(64);
        let mut b = gate.admit(b).unwrap();
        b_client.write_all(&[b'x'; PREFACE_BYTES]).await.unwrap();
        let mut buf = [0u8; PREFACE_BYTES];
        b.read_exact(&mut buf).await.unwrap();
        let (_c_client, c) = tokio::io::duplex(64);
        let _c = gate.admit(c).unwrap();
        // Full: b is the oldest not yet live, so d takes its place; a is live and stays.
        let (_d_client, d) = tokio::io::duplex(64);
        let _d = gate.admit(d).unwrap();
        assert_eq!(
            b.read(&mut buf).await.unwrap_err().kind(),
            io::ErrorKind::ConnectionAborted
        );
        drop(b);
        assert_eq!(gate.open(), 3);
        let (_e_client, e) = tokio::io::duplex(64);
        let _e = gate.admit(e).expect("c is pending and makes room");
        assert_eq!(gate.open(), 3);
    }

    #[tokio::test]
    async fn when_full_of_live_connections_a_newcomer_is_refused() {
        let gate = gate(1, 60_000);
        let (_a_client, a) = live(&gate).await;
        let (_b_client, b) = tokio::io::duplex(64);
        assert!(gate.admit(b).is_none());
        drop(a);
        let (_c_client, c) = tokio::io::duplex(64);
        assert!(gate.admit(c).is_some());
    }

    #[tokio::test]
    async fn a_connection_whose_first_body_was_too_slow_stays_evictable() {
        let gate = gate(1, 60_000);
        let (mut client, server) = tokio::io::duplex(64);
        let mut gated = gate.admit(server).unwrap();
        client.write_all(&[b'x'; PREFACE_BYTES]).await.unwrap();
        let mut buf = [0u8; PREFACE_BYTES];
        gated.read_exact(&mut buf).await.unwrap();
        gated.mark().headers_in();
        gated.mark().too_slow();
        // Its answer (or a later one) does not make it live.
        gated.mark().live();
        assert!(gated.mark().settled());
        let (_b_client, b) = tokio::io::duplex(64);
        let _b = gate.admit(b).expect("the slow one makes room");
        assert_eq!(
            gated.read(&mut buf).await.unwrap_err().kind(),
            io::ErrorKind::ConnectionAborted
        );
        drop(gated);
        assert_eq!(gate.open(), 1);
    }
}
