//! The connections the server holds on its gRPC and REST listeners. At most `max` are
//! open at once, and one that has not sent its first bytes (the HTTP/2 preface, a TLS
//! hello, an HTTP/1 request line) within `preface_timeout` is closed. When every place
//! is taken, a new connection takes the place of the oldest one still silent, so that
//! sockets opened and left idle cannot lock out a health probe or a client; with none
//! silent, the new connection is closed at once.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

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
    /// Connections that have not sent their first bytes, oldest first.
    silent: VecDeque<Arc<Slot>>,
}

struct Slot {
    id: u64,
    evicted: AtomicBool,
    waker: AtomicWaker,
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
        self.0.places.lock().expect("gate lock").open
    }

    /// A place for a new connection, or `None` (close it) when none is free.
    pub fn admit<IO>(&self, io: IO) -> Option<Gated<IO>> {
        let slot = Arc::new(Slot {
            id: self.0.next_id.fetch_add(1, Ordering::Relaxed),
            evicted: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        });
        {
            let mut places = self.0.places.lock().expect("gate lock");
            if places.open >= self.0.limits.max {
                let Some(oldest) = places.silent.pop_front() else {
                    tracing::warn!(
                        max = self.0.limits.max,
                        "a connection was refused: every place is taken (--max-connections)"
                    );
                    return None;
                };
                // Its place passes to the newcomer when it closes; counted as gone now.
                oldest.evicted.store(true, Ordering::Release);
                oldest.waker.wake();
                places.open -= 1;
                tracing::info!("a silent connection was closed to make room for a new one");
            }
            places.open += 1;
            places.silent.push_back(slot.clone());
        }
        Some(Gated {
            io,
            gate: self.0.clone(),
            slot,
            heard: 0,
            deadline: Some(Box::pin(tokio::time::sleep(self.0.limits.preface_timeout))),
        })
    }
}

impl GateState {
    fn heard(&self, slot: &Slot) {
        let mut places = self.places.lock().expect("gate lock");
        places.silent.retain(|s| s.id != slot.id);
    }

    fn closed(&self, slot: &Slot) {
        let mut places = self.places.lock().expect("gate lock");
        places.silent.retain(|s| s.id != slot.id);
        // An evicted connection's place was given up when it was evicted.
        if !slot.evicted.load(Ordering::Acquire) {
            places.open -= 1;
        }
    }
}

/// A connection holding its place until dropped.
pub struct Gated<IO> {
    io: IO,
    gate: Arc<GateState>,
    slot: Arc<Slot>,
    heard: usize,
    /// Until the first bytes arrive.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<IO> Gated<IO> {
    pub fn get_ref(&self) -> &IO {
        &self.io
    }
}

impl<IO> Drop for Gated<IO> {
    fn drop(&mut self) {
        self.gate.closed(&self.slot);
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Gated<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.deadline.is_some() {
            this.slot.waker.register(cx.waker());
            if this.slot.evicted.load(Ordering::Acquire) {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "closed while silent, to make room for a new connection",
                )));
            }
            if let Some(deadline) = this.deadline.as_mut()
                && deadline.as_mut().poll(cx).is_ready()
            {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "nothing was sent within the preface timeout",
                )));
            }
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if this.deadline.is_some()
            && let Poll::Ready(Ok(())) = polled
        {
            let read = buf.filled().len() - before;
            this.heard += read;
            if this.heard >= PREFACE_BYTES || read == 0 {
                this.deadline = None;
                this.gate.heard(&this.slot);
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

    fn gate(max: usize, timeout_ms: u64) -> Gate {
        Gate::new(ConnectionLimits {
            max,
            preface_timeout: Duration::from_millis(timeout_ms),
        })
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
    async fn when_full_the_oldest_silent_connection_makes_room() {
        let gate = gate(2, 60_000);
        let (mut a_client, a) = tokio::io::duplex(64);
        let (_b_client, b) = tokio::io::duplex(64);
        let (_c_client, c) = tokio::io::duplex(64);
        let mut a = gate.admit(a).unwrap();
        a_client.write_all(&[b'x'; PREFACE_BYTES]).await.unwrap();
        let mut buf = [0u8; PREFACE_BYTES];
        a.read_exact(&mut buf).await.unwrap();
        let mut b = gate.admit(b).unwrap();
        // Full: b is silent, so c takes its place; a spoke and stays.
        let _c = gate.admit(c).unwrap();
        assert_eq!(
            b.read(&mut buf).await.unwrap_err().kind(),
            io::ErrorKind::ConnectionAborted
        );
        drop(b);
        assert_eq!(gate.open(), 2);
        // Full again with no silent connection but c: c goes for d; then none is silent.
        let (_d_client, d) = tokio::io::duplex(64);
        let _d = gate.admit(d).unwrap();
        assert_eq!(gate.open(), 2);
        let (_e_client, e) = tokio::io::duplex(64);
        assert!(gate.admit(e).is_some(), "d is silent and makes room");
    }

    #[tokio::test]
    async fn when_full_of_talkers_a_newcomer_is_refused() {
        let gate = gate(1, 60_000);
        let (mut a_client, a) = tokio::io::duplex(64);
        let mut a = gate.admit(a).unwrap();
        a_client.write_all(&[b'x'; PREFACE_BYTES]).await.unwrap();
        let mut buf = [0u8; PREFACE_BYTES];
        a.read_exact(&mut buf).await.unwrap();
        let (_b_client, b) = tokio::io::duplex(64);
        assert!(gate.admit(b).is_none());
        drop(a);
        let (_c_client, c) = tokio::io::duplex(64);
        assert!(gate.admit(c).is_some());
    }
}
