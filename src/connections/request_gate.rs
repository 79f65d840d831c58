//! Where a request meets the connection gate, on both listeners: its headers have
//! arrived (the header deadline is over), its body must then keep up a minimum rate
//! until the server answers, and a connection's first request arriving whole (or being
//! answered) makes the connection live. A body too slow is cut off with an error the
//! transports answer as 408 (REST) or DEADLINE_EXCEEDED (gRPC); when it was the
//! connection's first, the connection never becomes live (HTTP/1 closes it after
//! the answer; an HTTP/2 one stays evictable).
//!
//! Every request also counts as in progress on its connection until its answer's body
//! is over (a stream's last message), so that the gate closes only connections idle
//! for `--idle-timeout`; and on a connection of the health reserve, anything but a
//! health check is answered at once with the limit that put it there.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Request, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::{Gate, Mark, RequestGuard};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How the message of a body cut off for slowness begins.
pub const TOO_SLOW: &str = "the request body arrived slower than";

/// The error a request body cut off for slowness fails with. Its source is the gRPC
/// status it stands for, which tonic finds in the chain.
#[derive(Debug)]
pub struct BodyTooSlow(tonic::Status);

impl std::fmt::Display for BodyTooSlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.message())
    }
}

impl std::error::Error for BodyTooSlow {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// The body cut off for slowness that `err` is, or that caused it.
pub fn too_slow_in<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a BodyTooSlow> {
    let mut next = Some(err);
    while let Some(err) = next {
        if let Some(slow) = err.downcast_ref::<BodyTooSlow>() {
            return Some(slow);
        }
        next = err.source();
    }
    None
}

/// A request body type the layer can wrap and give back as the same type.
pub trait Rewrap: HttpBody<Data = Bytes> + Send + Unpin + Sized + 'static {
    fn rewrap(body: MinRate<Self>) -> Self;
}

impl Rewrap for tonic::body::Body {
    fn rewrap(body: MinRate<Self>) -> Self {
        tonic::body::Body::new(body)
    }
}

impl Rewrap for axum::body::Body {
    fn rewrap(body: MinRate<Self>) -> Self {
        axum::body::Body::new(body)
    }
}

/// The paths of health checks: all a connection of the health reserve is served.
const HEALTH_PATHS: &[&str] = &["/grpc.health.v1.Health/Check", "/api/v2/health"];

/// An answer body type the layer can make refusals of, and hold a request's guard in.
pub trait Answer: Sized + Send + 'static {
    /// The answer to a call on a health-only connection (RESOURCE_EXHAUSTED / 429).
    fn refusal(message: String) -> Response<Self>;
    /// `self`, holding `guard` until the body is over or dropped.
    fn guarded(self, guard: RequestGuard) -> Self;
}

impl Answer for tonic::body::Body {
    fn refusal(message: String) -> Response<Self> {
        tonic::Status::from(memmachine_core::error::Error::ResourceExhausted {
            message,
            retry_after: Some(Duration::from_secs(1)),
        })
        .into_http()
    }

    fn guarded(self, guard: RequestGuard) -> Self {
        tonic::body::Body::new(Guarded {
            inner: self,
            _guard: guard,
        })
    }
}

/// A body holding its request's guard: the request is in progress until it is over.
pub struct Guarded<B> {
    pub inner: B,
    pub _guard: RequestGuard,
}

impl<B: HttpBody + Unpin> HttpBody for Guarded<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Outermost on both listeners. A REST request carries its connection's `Mark`
/// (put there by the REST listener); a gRPC one is found by its addresses.
#[derive(Clone)]
pub struct ArrivalLayer {
    gate: Gate,
}

impl ArrivalLayer {
    pub fn new(gate: Gate) -> ArrivalLayer {
        ArrivalLayer { gate }
    }
}

impl<S> tower::Layer<S> for ArrivalLayer {
    type Service = Arrivals<S>;

    fn layer(&self, inner: S) -> Arrivals<S> {
        Arrivals {
            inner,
            gate: self.gate.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Arrivals<S> {
    inner: S,
    gate: Gate,
}

impl<S, B, R> tower::Service<Request<B>> for Arrivals<S>
where
    B: Rewrap,
    S: tower::Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    R: Answer,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response<R>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let connection = request
            .extensions_mut()
            .remove::<Mark>()
            .or_else(|| endpoints(&request).and_then(|e| self.gate.at(e)));
        if let Some(mark) = &connection
            && let Some(why) = mark.health_only()
            && !HEALTH_PATHS.contains(&request.uri().path())
        {
            mark.headers_in();
            mark.live();
            return Box::pin(std::future::ready(Ok(R::refusal(why))));
        }
        let guard = connection.as_ref().map(Mark::request_began);
        let first = connection.filter(|mark| !mark.settled());
        if let Some(mark) = &first {
            mark.headers_in();
        }
        let answered = Arc::new(AtomicBool::new(false));
        let limits = self.gate.limits();
        let request = request.map(|body| {
            B::rewrap(MinRate {
                due_from: Instant::now() + limits.header_timeout,
                rate: limits.min_body_rate.max(1),
                received: 0,
                timer: None,
                answered: answered.clone(),
                first: first.clone(),
                failed: false,
                inner: body,
            })
        });
        if request.body().is_end_stream()
            && let Some(mark) = &first
        {
            mark.live();
        }
        // The clone that was polled ready serves this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let call = inner.call(request);
        Box::pin(async move {
            let response = call.await;
            answered.store(true, Ordering::Release);
            // Answered: a client's connection (unless its body was cut off, which
            // `live` leaves alone).
            if let Some(mark) = first {
                mark.live();
            }
            // In progress until the answer's body is over.
            match guard {
                Some(guard) => response.map(|r| r.map(|body| body.guarded(guard))),
                None => response,
            }
        })
    }
}

/// A gRPC request's connection addresses, as tonic records them (with TLS or without).
fn endpoints<B>(request: &Request<B>) -> Option<super::Endpoints> {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    let extensions = request.extensions();
    let info = extensions.get::<TcpConnectInfo>().or_else(|| {
        extensions
            .get::<TlsConnectInfo<TcpConnectInfo>>()
            .map(TlsConnectInfo::get_ref)
    })?;
    Some((info.local_addr()?, info.remote_addr()?))
}

/// A request body that must arrive at `rate` bytes a second after an allowance: by
/// `due_from + received / rate` it must have more, or be whole, or have been answered.
pub struct MinRate<B> {
    inner: B,
    due_from: Instant,
    rate: u64,
    received: u64,
    timer: Option<Pin<Box<Sleep>>>,
    /// Set once the server answered: what it still reads is at the client's pace
    /// (a stream's messages).
    answered: Arc<AtomicBool>,
    /// The connection, when this is its first request.
    first: Option<Mark>,
    failed: bool,
}

impl<B> MinRate<B> {
    fn due(&self) -> Instant {
        self.due_from + Duration::from_secs_f64(self.received as f64 / self.rate as f64)
    }

    fn arrived_whole(&self) {
        if let Some(mark) = &self.first {
            mark.live();
        }
    }

    fn too_slow(&mut self) -> BodyTooSlow {
        self.failed = true;
        if let Some(mark) = &self.first {
            mark.too_slow();
        }
        let message = format!(
            "{TOO_SLOW} the server's minimum ({} bytes a second, --min-body-rate); \
             {} bytes came",
            self.rate, self.received
        );
        tracing::info!("{message}: cut off");
        BodyTooSlow(tonic::Status::deadline_exceeded(message))
    }
}

impl<B> HttpBody for MinRate<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.failed {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.received += data.len() as u64;
                }
                if this.inner.is_end_stream() {
                    this.arrived_whole();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(err))) => Poll::Ready(Some(Err(err.into()))),
            Poll::Ready(None) => {
                this.arrived_whole();
                Poll::Ready(None)
            }
            Poll::Pending => {
                if this.answered.load(Ordering::Acquire) {
                    return Poll::Pending;
                }
                let due = this.due();
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
                if timer.deadline() != due {
                    timer.as_mut().reset(due);
                }
                if timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Some(Err(this.too_slow().into())));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body fed chunk by chunk; whole when the sender is dropped.
    struct Fed(tokio::sync::mpsc::Receiver<Bytes>);

    impl HttpBody for Fed {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            self.0
                .poll_recv(cx)
                .map(|chunk| chunk.map(|c| Ok(Frame::data(c))))
        }
    }

    fn fed(rate: u64, allowance: Duration) -> (MinRate<Fed>, tokio::sync::mpsc::Sender<Bytes>) {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let body = MinRate {
            inner: Fed(rx),
            due_from: Instant::now() + allowance,
            rate,
            received: 0,
            timer: None,
            answered: Arc::default(),
            first: None,
            failed: false,
        };
        (body, tx)
    }

    /// Reads the body to its end; the bytes, or the error.
    async fn read(mut body: MinRate<Fed>) -> Result<usize, BoxError> {
        let mut total = 0;
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            total += frame?.into_data().map_or(0, |d| d.len());
        }
        Ok(total)
    }

    #[tokio::test]
    async fn a_body_trickled_below_the_rate_is_cut_off() {
        let (body, tx) = fed(1000, Duration::from_millis(100));
        let trickle = tokio::spawn(async move {
            for _ in 0..1000 {
                if tx.send(Bytes::from_static(b"x")).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        let err = read(body).await.unwrap_err();
        assert!(too_slow_in(&*err).is_some(), "{err}");
        let status = tonic::Status::from_error(err);
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
        assert!(status.message().contains("--min-body-rate"), "{status:?}");
        trickle.abort();
    }

    #[tokio::test]
    async fn a_body_at_the_rate_arrives_whole() {
        let (body, tx) = fed(1000, Duration::from_millis(100));
        tokio::spawn(async move {
            for _ in 0..5 {
                tx.send(Bytes::from(vec![b'x'; 200])).await.unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        assert_eq!(read(body).await.unwrap(), 1000);
    }

    #[tokio::test]
    async fn once_answered_a_body_goes_at_the_clients_pace() {
        let (body, tx) = fed(1000, Duration::from_millis(10));
        body.answered.store(true, Ordering::Release);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            tx.send(Bytes::from_static(b"late")).await.unwrap();
        });
        assert_eq!(read(body).await.unwrap(), 4);
    }
}
