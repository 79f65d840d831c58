//! A client that leaves mid-request (resets its stream, closes its connection) makes
//! tonic answer as if the request were bad ("Missing request message", "error reading
//! a body"): the request body is watched so that such a call counts as `CANCELLED`.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use http_body::{Body as HttpBody, Frame, SizeHint};
use tonic::body::Body;

/// How tonic-web's errors decoding a gRPC-Web body begin.
pub const GRPC_WEB_DECODING: &str = "tonic-web: ";

/// Whether the watched request body failed to arrive whole.
pub struct Departure(Arc<AtomicBool>);

impl Departure {
    /// True once reading the body failed: the client reset the stream or the
    /// connection ended before the body did.
    pub fn left(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// `body`, watched.
pub fn watch(body: Body) -> (Body, Departure) {
    let failed = Arc::new(AtomicBool::new(false));
    let watched = Watched {
        body,
        failed: failed.clone(),
    };
    (Body::new(watched), Departure(failed))
}

struct Watched {
    body: Body,
    failed: Arc<AtomicBool>,
}

impl HttpBody for Watched {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        // tonic-web's decoding fails here too (bad base64): that is a bad request; and
        // a body cut off for slowness is the server's doing.
        if let Poll::Ready(Some(Err(status))) = &polled
            && !status.message().starts_with(GRPC_WEB_DECODING)
            && !status
                .message()
                .starts_with(crate::connections::request_gate::TOO_SLOW)
        {
            self.failed.store(true, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
