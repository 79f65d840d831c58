//! The REST (and metrics) listener's accept loop: axum's `serve`, done by hand for what
//! it does not expose. HTTP/1 requests must send their headers within
//! `--header-timeout` (hyper's header read timeout, which needs a timer), each request
//! carries its connection's gate `Mark`, bodies pass the request gate layer
//! (`connections::request_gate`), and a connection idle for `--idle-timeout` is shut down
//! gracefully (GOAWAY on HTTP/2). Kept from axum: TCP_NODELAY,
//! `ConnectInfo<SocketAddr>`, and a graceful shutdown that lets connections finish.

use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll};

use axum::extract::ConnectInfo;
use bytes::Bytes;
use http::Request;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tower::Layer;

use crate::connections::request_gate::{Answer, ArrivalLayer, Guarded};
use crate::connections::{GatedListener, Mark, RequestGuard};

impl Answer for axum::body::Body {
    fn refusal(message: String) -> http::Response<Self> {
        use axum::response::IntoResponse;
        super::error::ApiError::from(memmachine_core::error::Error::ResourceExhausted {
            message,
            retry_after: Some(std::time::Duration::from_secs(1)),
        })
        .into_response()
    }

    fn guarded(self, guard: RequestGuard) -> Self {
        axum::body::Body::new(Guarded {
            inner: self,
            _guard: guard,
        })
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then waits for the
/// connections to finish.
pub async fn serve(
    mut listener: GatedListener,
    app: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::Listener;
    let arrivals = ArrivalLayer::new(listener.gate.clone());
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(listener.gate.limits().header_timeout);

    // Dropped when shutdown begins: the accept loop stops and connections drain.
    let (signal_tx, signal_rx) = tokio::sync::watch::channel(());
    tokio::spawn(async move {
        shutdown.await;
        drop(signal_rx);
    });
    // Each connection holds a receiver; all dropped means all finished.
    let (close_tx, close_rx) = tokio::sync::watch::channel(());
    loop {
        let (io, remote) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = signal_tx.closed() => break,
        };
        // Without TCP_NODELAY small responses wait for the peer's delayed ACK.
        let _ = io.get_ref().set_nodelay(true);
        let mark = io.mark();
        let service = PerConnection {
            inner: arrivals.layer(app.clone()),
            remote,
            mark: mark.clone(),
        };
        let builder = builder.clone();
        let signal_tx = signal_tx.clone();
        let close_rx = close_rx.clone();
        tokio::spawn(async move {
            let hyper_service = TowerToHyperService::new(service);
            let mut conn =
                pin!(builder.serve_connection_with_upgrades(TokioIo::new(io), hyper_service));
            let mut signalled = pin!(signal_tx.closed());
            let mut idle = pin!(mark.idle_expired());
            let mut draining = false;
            loop {
                tokio::select! {
                    result = conn.as_mut() => {
                        if let Err(err) = result {
                            tracing::debug!(error = %err, "a REST connection ended in error");
                        }
                        break;
                    }
                    () = &mut signalled, if !draining => {
                        draining = true;
                        conn.as_mut().graceful_shutdown();
                    }
                    () = &mut idle, if !draining => {
                        draining = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
            drop(close_rx);
        });
    }
    drop(close_rx);
    drop(listener);
    close_tx.closed().await;
    Ok(())
}

/// One connection's service: each request gets the peer's address (what
/// `into_make_service_with_connect_info` gave) and its connection's gate mark.
#[derive(Clone)]
struct PerConnection<S> {
    inner: S,
    remote: SocketAddr,
    mark: Mark,
}

impl<S, B> tower::Service<Request<B>> for PerConnection<S>
where
    S: tower::Service<Request<axum::body::Body>>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> S::Future {
        let mut request = request.map(axum::body::Body::new);
        request.extensions_mut().insert(ConnectInfo(self.remote));
        request.extensions_mut().insert(self.mark.clone());
        self.inner.call(request)
    }
}
