//! The connections the server holds on its gRPC and REST listeners. At most `max` are
//! open at once. A connection is *pending* until its first request has arrived whole
//! (headers, then body) or been answered; only then is it *live*. A pending one that
//! sends nothing within `preface_timeout`, or not its first request's headers within
//! `header_timeout`, is closed. When every place is taken, a new connection takes the
//! place of the oldest pending one, so that sockets left silent, or trickling their
//! headers or first body, cannot lock out a health probe or a client.
//!
//! Live connections are bounded too: one with no request in progress for
//! `idle_timeout` is closed, and one address holds at most `max_per_peer` (but the
//! trusted proxies). A connection that finds no place (every one live, or its address
//! at its cap) goes into the *health reserve*, `health_reserve` places beyond `max`
//! (one per address but a trusted proxy's), where only health checks are served:
//! anything else is answered RESOURCE_EXHAUSTED (429) saying which limit, so neither a
//! probe nor a refused client waits on a silent socket. With the reserve full too, the
//! connection is closed at once.
//!
//! The application layer tells the gate when a connection's request arrives, and when
//! each request's answer is over (`request_gate`): the bytes under the gate may be TLS, so
//! only it can tell.

mod flags;
pub mod request_gate;

pub use flags::Flags;

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
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
/// Places in the health reserve one address (not a trusted proxy) may hold.
const RESERVE_PER_PEER: usize = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Most client connections open at once, both listeners together.
    pub max: usize,
    /// How long a new connection may stay silent.
    pub preface_timeout: Duration,
    /// How long a new connection may take to send its first request's headers (and an
    /// HTTP/1 connection each next request's); also a request body's first allowance.
    pub header_timeout: Duration,
    /// Slowest a request body may arrive once its allowance is spent, in bytes a second.
    pub min_body_rate: u64,
    /// How long a live connection may have no request in progress; `None`: for ever.
    pub idle_timeout: Option<Duration>,
    /// Most connections from one address; 0: no cap.
    pub max_per_peer: usize,
    /// Addresses exempt from `max_per_peer` (proxies holding many clients' connections).
    pub trusted_proxies: Vec<IpAddr>,
    /// Places beyond `max` where only health checks are served.
    pub health_reserve: usize,
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

    /// `max` places and the given timeouts; no idle timeout, per-address cap or reserve.
    pub fn basic(
        max: usize,
        preface_timeout: Duration,
        header_timeout: Duration,
        min_body_rate: u64,
    ) -> ConnectionLimits {
        ConnectionLimits {
            max,
            preface_timeout,
            header_timeout,
            min_body_rate,
            idle_timeout: None,
            max_per_peer: 0,
            trusted_proxies: Vec::new(),
            health_reserve: 0,
        }
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

/// How a listener's connections end when idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleClose {
    /// The gate closes the socket (the server offers no per-connection shutdown).
    Socket,
    /// The gate signals `Mark::idle_expired` and the server shuts the connection down
    /// gracefully (GOAWAY on HTTP/2).
    Graceful,
}

/// Counts and bounds the open connections; shared by both listeners.
#[derive(Clone)]
pub struct Gate(Arc<GateState>);

struct GateState {
    limits: ConnectionLimits,
    places: Mutex<Places>,
    next_id: AtomicU64,
    /// What idle times are counted from.
    epoch: Instant,
}

#[derive(Default)]
struct Places {
    /// Client connections open (what `max` bounds).
    open: usize,
    /// Connections in the health reserve.
    reserved: usize,
    /// Client connections not yet live, oldest first.
    pending: VecDeque<Arc<Slot>>,
    /// Every connection by address, for a gRPC request to find its connection (tonic
    /// gives a request its connection's addresses, nothing else).
    by_endpoints: HashMap<Endpoints, Arc<Slot>>,
    /// Client connections per remote address.
    per_peer: HashMap<IpAddr, usize>,
    /// Reserve places per remote address.
    reserved_per_peer: HashMap<IpAddr, usize>,
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

/// Why a connection is in the health reserve: what a refused call is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reserved {
    /// Every client place is taken by a live connection.
    Full,
    /// Its address holds `max_per_peer` connections.
    PerPeer,
}

struct Slot {
    id: u64,
    endpoints: Option<Endpoints>,
    /// `None`: a client connection.
    reserved: Option<Reserved>,
    state: AtomicU8,
    waker: AtomicWaker,
    /// Requests in progress (their answers not over).
    requests: AtomicUsize,
    /// Since when (ms after the gate's epoch) no request has been in progress.
    idle_since_ms: AtomicU64,
    /// Idle for its timeout: the server is to shut it down (`IdleClose::Graceful`).
    idle_expired: AtomicBool,
    idle_notify: tokio::sync::Notify,
}

impl Slot {
    fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    fn peer(&self) -> Option<IpAddr> {
        self.endpoints.map(|(_, remote)| remote.ip().to_canonical())
    }
}

impl Gate {
    pub fn new(limits: ConnectionLimits) -> Gate {
        Gate(Arc::new(GateState {
            limits,
            places: Mutex::new(Places::default()),
            next_id: AtomicU64::new(0),
            epoch: Instant::now(),
        }))
    }

    pub fn limits(&self) -> &ConnectionLimits {
        &self.0.limits
    }

    /// Client connections open now.
    pub fn open(&self) -> usize {
        self.0.lock().open
    }

    /// A place for a new connection, or `None` (close it) when none is free; idle ones
    /// end as `idle` says.
    pub fn admit<IO: Addressed>(&self, io: IO, idle: IdleClose) -> Option<Gated<IO>> {
        let endpoints = io.endpoints();
        // An IPv4 client of a dual-stack listener is counted (and trusted) as IPv4.
        let peer = endpoints.map(|(_, remote)| remote.ip().to_canonical());
        let limits = &self.0.limits;
        let trusted = peer.is_none_or(|ip| {
            limits
                .trusted_proxies
                .iter()
                .any(|t| t.to_canonical() == ip)
        });
        let (slot, reserved) = {
            let mut places = self.0.lock();
            let peer_count = peer.map_or(0, |ip| places.per_peer.get(&ip).copied().unwrap_or(0));
            let reserved =
                if !trusted && limits.max_per_peer > 0 && peer_count >= limits.max_per_peer {
                    Some(Reserved::PerPeer)
                } else if places.open >= limits.max {
                    match places.pending.pop_front() {
                        Some(oldest) => {
                            places.forget(&oldest);
                            // Its place passes to the newcomer when it closes; gone now.
                            oldest.state.store(EVICTED, Ordering::Release);
                            oldest.waker.wake();
                            tracing::info!(
                                "a connection not yet live was closed to make room for a new one"
                            );
                            None
                        }
                        None => Some(Reserved::Full),
                    }
                } else {
                    None
                };
            if reserved.is_some() {
                let held = peer.map_or(0, |ip| {
                    places.reserved_per_peer.get(&ip).copied().unwrap_or(0)
                });
                if places.reserved >= limits.health_reserve
                    || (!trusted && held >= RESERVE_PER_PEER)
                {
                    tracing::warn!(
                        max = limits.max,
                        per_peer = limits.max_per_peer,
                        peer = ?peer,
                        "a connection was refused: every place is taken by a live one \
                         (--max-connections), or its address is at --max-connections-per-peer, \
                         and the health reserve is full (--health-reserve)"
                    );
                    return None;
                }
            }
            let slot = Arc::new(Slot {
                id: self.0.next_id.fetch_add(1, Ordering::Relaxed),
                endpoints,
                reserved,
                state: AtomicU8::new(PENDING),
                waker: AtomicWaker::new(),
                requests: AtomicUsize::new(0),
                idle_since_ms: AtomicU64::new(self.0.now_ms()),
                idle_expired: AtomicBool::new(false),
                idle_notify: tokio::sync::Notify::new(),
            });
            places.take(&slot);
            (slot, reserved)
        };
        let accepted = Instant::now();
        let limits = &self.0.limits;
        // The reserve is for one probe at a time: idle there, a connection soon goes.
        let idle_timeout = match reserved {
            None => limits.idle_timeout,
            Some(_) => Some(
                limits
                    .idle_timeout
                    .map_or(limits.header_timeout, |t| t.min(limits.header_timeout)),
            ),
        };
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
            idle_timeout,
            idle: idle_timeout.map(|t| Box::pin(tokio::time::sleep_until(accepted + t))),
            idle_close: idle,
        })
    }

    /// The connection at these addresses.
    pub fn at(&self, endpoints: Endpoints) -> Option<Mark> {
        let places = self.0.lock();
        let slot = places.by_endpoints.get(&endpoints)?.clone();
        Some(Mark {
            gate: self.0.clone(),
            slot,
        })
    }
}

impl Places {
    /// Counts a new connection in.
    fn take(&mut self, slot: &Arc<Slot>) {
        match slot.reserved {
            None => {
                self.open += 1;
                self.pending.push_back(slot.clone());
                if let Some(ip) = slot.peer() {
                    *self.per_peer.entry(ip).or_default() += 1;
                }
            }
            Some(_) => {
                self.reserved += 1;
                if let Some(ip) = slot.peer() {
                    *self.reserved_per_peer.entry(ip).or_default() += 1;
                }
            }
        }
        if let Some(endpoints) = slot.endpoints {
            self.by_endpoints.insert(endpoints, slot.clone());
        }
    }

    /// Counts a connection out (closed, or evicted: its place is given up at once).
    fn forget(&mut self, slot: &Slot) {
        if let Some(endpoints) = slot.endpoints
            && self
                .by_endpoints
                .get(&endpoints)
                .is_some_and(|s| s.id == slot.id)
        {
            self.by_endpoints.remove(&endpoints);
        }
        let (count, per_peer) = match slot.reserved {
            None => {
                self.pending.retain(|s| s.id != slot.id);
                (&mut self.open, &mut self.per_peer)
            }
            Some(_) => (&mut self.reserved, &mut self.reserved_per_peer),
        };
        *count -= 1;
        if let Some(ip) = slot.peer()
            && let Some(n) = per_peer.get_mut(&ip)
        {
            *n -= 1;
            if *n == 0 {
                per_peer.remove(&ip);
            }
        }
    }
}

impl GateState {
    fn lock(&self) -> std::sync::MutexGuard<'_, Places> {
        // A panic elsewhere while holding the lock leaves the counts as they were.
        self.places
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
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
        }
    }

    fn closed(&self, slot: &Slot) {
        // An evicted connection was counted out when it was evicted.
        if slot.state() != EVICTED {
            self.lock().forget(slot);
        }
    }
}

/// What the application layer tells the gate of a connection's requests.
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

    /// Why only health checks are served on this connection (the message a refused
    /// call gets), or `None` for a client connection.
    pub fn health_only(&self) -> Option<String> {
        let limits = &self.gate.limits;
        Some(match self.slot.reserved? {
            Reserved::Full => format!(
                "the server holds its most connections (--max-connections {}); this \
                 connection serves health checks only: retry shortly",
                limits.max
            ),
            Reserved::PerPeer => format!(
                "too many connections from {} (--max-connections-per-peer {}); this \
                 connection serves health checks only: reuse a connection",
                self.slot
                    .peer()
                    .map_or("this address".into(), |ip| ip.to_string()),
                limits.max_per_peer
            ),
        })
    }

    /// A request began: the connection is not idle until its answer is over (the guard
    /// dropped).
    pub fn request_began(&self) -> RequestGuard {
        self.slot.requests.fetch_add(1, Ordering::AcqRel);
        RequestGuard(self.clone())
    }

    /// Resolves once the connection has been idle for its timeout (`IdleClose::Graceful`).
    pub async fn idle_expired(&self) {
        loop {
            let notified = self.slot.idle_notify.notified();
            if self.slot.idle_expired.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }
}

/// A request in progress on a connection; dropped when its answer is over.
pub struct RequestGuard(Mark);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let slot = &self.0.slot;
        if slot.requests.fetch_sub(1, Ordering::AcqRel) == 1 {
            slot.idle_since_ms
                .store(self.0.gate.now_ms(), Ordering::Release);
            // Its reader re-arms the idle timer.
            slot.waker.wake();
        }
    }
}

/// A connection holding its place until dropped.
pub struct Gated<IO> {
    io: IO,
    mark: Mark,
    heard: usize,
    /// Known live: no more first-request deadlines to watch.
    live: bool,
    accepted: Instant,
    /// The preface deadline until the first bytes arrive, then the header deadline.
    deadline: Pin<Box<tokio::time::Sleep>>,
    idle_timeout: Option<Duration>,
    /// When the connection, live and with no request in progress, is closed.
    idle: Option<Pin<Box<tokio::time::Sleep>>>,
    idle_close: IdleClose,
}

impl<IO> Gated<IO> {
    pub fn get_ref(&self) -> &IO {
        &self.io
    }

    /// For the application layer to say how the connection's requests went.
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

    /// Whether a live connection has been idle for its timeout: then the socket is
    /// closed (`Err`), or the server told to shut it down.
    fn idle_check(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        let (Some(timeout), Some(idle)) = (self.idle_timeout, self.idle.as_mut()) else {
            return None;
        };
        let slot = &self.mark.slot;
        slot.waker.register(cx.waker());
        if slot.requests.load(Ordering::Acquire) > 0 || slot.idle_expired.load(Ordering::Acquire) {
            return None;
        }
        let since = self.mark.gate.epoch
            + Duration::from_millis(slot.idle_since_ms.load(Ordering::Acquire));
        let due = since.max(self.accepted) + timeout;
        if idle.deadline() != due {
            idle.as_mut().reset(due);
        }
        if idle.as_mut().poll(cx).is_pending() {
            return None;
        }
        tracing::debug!(
            idle_secs = timeout.as_secs_f64(),
            "a connection had no request in progress for --idle-timeout: closing it"
        );
        match self.idle_close {
            IdleClose::Socket => Some(io::Error::new(
                io::ErrorKind::TimedOut,
                "no request was in progress for the idle timeout",
            )),
            IdleClose::Graceful => {
                slot.idle_expired.store(true, Ordering::Release);
                slot.idle_notify.notify_one();
                None
            }
        }
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
        if !matches!(this.mark.slot.state(), PENDING | HEADERS_IN)
            && let Some(err) = this.idle_check(cx)
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
                let limits = &this.mark.gate.limits;
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
                    if let Some(gated) = self.gate.admit(tcp, IdleClose::Graceful) {
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
        ConnectionLimits::basic(
            max,
            Duration::from_millis(preface_ms),
            Duration::from_millis(header_ms),
            1024,
        )
    }

    fn gate(max: usize, timeout_ms: u64) -> Gate {
        Gate::new(limits(max, timeout_ms, 60_000))
    }

    /// A connection that has sent its preface and whose first request was answered.
    async fn live(gate: &Gate) -> (tokio::io::DuplexStream, Gated<tokio::io::DuplexStream>) {
        let (mut client, server) = tokio::io::duplex(64);
        let mut gated = gate.admit(server, IdleClose::Socket).unwrap();
        client.write_all(&[b'x'; PREFACE_BYTES]).await.unwrap();
        let mut buf = [0u8; PREFACE_BYTES];
        gated.read_exact(&mut buf).await.unwrap();
        gated.mark().live();
        (client, gated)
    }

    /// A connection's addresses alone: what admission looks at.
    struct At(Endpoints);

    impl Addressed for At {
        fn endpoints(&self) -> Option<Endpoints> {
            Some(self.0)
        }
    }

    fn at(ip: [u8; 4], port: u16) -> At {
        At((
            SocketAddr::from(([127, 0, 0, 1], 9000)),
            SocketAddr::from((ip, port)),
        ))
    }

    #[tokio::test]
    async fn an_address_at_its_cap_and_a_full_gate_fall_into_the_health_reserve() {
        let mut limits = limits(2, 60_000, 60_000);
        limits.max_per_peer = 1;
        limits.health_reserve = 2;
        limits.trusted_proxies = vec![IpAddr::from([10, 0, 0, 9])];
        let gate = Gate::new(limits);
        let admit = |ip, port| gate.admit(at(ip, port), IdleClose::Socket);
        let a = admit([10, 0, 0, 1], 1).unwrap();
        assert!(a.mark().health_only().is_none());
        let over = admit([10, 0, 0, 1], 2).unwrap();
        let why = over.mark().health_only().unwrap();
        assert!(why.contains("--max-connections-per-peer 1"), "{why}");
        assert!(
            admit([10, 0, 0, 1], 3).is_none(),
            "one reserve place per address"
        );
        // A trusted proxy is not capped.
        let proxy = admit([10, 0, 0, 9], 1).unwrap();
        assert!(proxy.mark().health_only().is_none());
        a.mark().live();
        proxy.mark().live();
        // Full of live ones: the reserve, then nothing.
        let late = admit([10, 0, 0, 2], 1).unwrap();
        let why = late.mark().health_only().unwrap();
        assert!(why.contains("--max-connections 2"), "{why}");
        assert!(admit([10, 0, 0, 3], 1).is_none(), "the reserve is full");
        drop(over);
        assert!(
            admit([10, 0, 0, 3], 1).is_some(),
            "its place was given back"
        );
        assert_eq!(gate.open(), 2);
    }

    #[tokio::test]
    async fn a_live_connection_with_nothing_in_progress_is_closed_after_the_idle_timeout() {
        let mut limits = limits(4, 60_000, 60_000);
        limits.idle_timeout = Some(Duration::from_millis(100));
        let gate = Gate::new(limits);
        let (mut client, server) = tokio::io::duplex(64);
        let mut gated = gate.admit(server, IdleClose::Socket).unwrap();
        client.write_all(&[b'x'; PREFACE_BYTES]).await.unwrap();
        let mut buf = [0u8; PREFACE_BYTES];
        gated.read_exact(&mut buf).await.unwrap();
        // A request in progress past the timeout keeps it open.
        let request = gated.mark().request_began();
        gated.mark().live();
        tokio::time::sleep(Duration::from_millis(250)).await;
        client.write_all(b"ping").await.unwrap();
        assert_eq!(gated.read(&mut buf).await.unwrap(), 4);
        drop(request);
        let err = gated.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        drop((gated, client));
        assert_eq!(gate.open(), 0);
    }

    #[tokio::test]
    async fn a_silent_connection_is_closed_after_the_timeout() {
        let gate = gate(4, 50);
        let (client, server) = tokio::io::duplex(64);
        let mut gated = gate.admit(server, IdleClose::Socket).unwrap();
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
        let mut gated = gate.admit(server, IdleClose::Socket).unwrap();
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
        let mut gated = gate.admit(server, IdleClose::Socket).unwrap();
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
        let mut gated = gate.admit(server, IdleClose::Socket).unwrap();
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
        let mut b = gate.admit(b, IdleClose::Socket).unwrap();
        b_client.write_all(&[b'x'; PREFACE_BYTES]).await.unwrap();
        let mut buf = [0u8; PREFACE_BYTES];
        b.read_exact(&mut buf).await.unwrap();
        let (_c_client, c) = tokio::io::duplex(64);
        let _c = gate.admit(c, IdleClose::Socket).unwrap();
        // Full: b is the oldest not yet live, so d takes its place; a is live and stays.
        let (_d_client, d) = tokio::io::duplex(64);
        let _d = gate.admit(d, IdleClose::Socket).unwrap();
        assert_eq!(
            b.read(&mut buf).await.unwrap_err().kind(),
            io::ErrorKind::ConnectionAborted
        );
        drop(b);
        assert_eq!(gate.open(), 3);
        let (_e_client, e) = tokio::io::duplex(64);
        let _e = gate
            .admit(e, IdleClose::Socket)
            .expect("c is pending and makes room");
        assert_eq!(gate.open(), 3);
    }

    #[tokio::test]
    async fn when_full_of_live_connections_a_newcomer_is_refused() {
        let gate = gate(1, 60_000);
        let (_a_client, a) = live(&gate).await;
        let (_b_client, b) = tokio::io::duplex(64);
        assert!(gate.admit(b, IdleClose::Socket).is_none());
        drop(a);
        let (_c_client, c) = tokio::io::duplex(64);
        assert!(gate.admit(c, IdleClose::Socket).is_some());
    }

    #[tokio::test]
    async fn a_connection_whose_first_body_was_too_slow_stays_evictable() {
        let gate = gate(1, 60_000);
        let (mut client, server) = tokio::io::duplex(64);
        let mut gated = gate.admit(server, IdleClose::Socket).unwrap();
        client.write_all(&[b'x'; PREFACE_BYTES]).await.unwrap();
        let mut buf = [0u8; PREFACE_BYTES];
        gated.read_exact(&mut buf).await.unwrap();
        gated.mark().headers_in();
        gated.mark().too_slow();
        // Its answer (or a later one) does not make it live.
        gated.mark().live();
        assert!(gated.mark().settled());
        let (_b_client, b) = tokio::io::duplex(64);
        let _b = gate
            .admit(b, IdleClose::Socket)
            .expect("the slow one makes room");
        assert_eq!(
            gated.read(&mut buf).await.unwrap_err().kind(),
            io::ErrorKind::ConnectionAborted
        );
        drop(gated);
        assert_eq!(gate.open(), 1);
    }
}
