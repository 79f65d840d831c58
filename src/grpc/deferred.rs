//! A gRPC service that exists before it is ready: the server listens (and reports
//! NOT_SERVING) while the store and the embedding model load, and the service answers
//! `UNAVAILABLE` until it is set.

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use futures::future::{BoxFuture, FutureExt};
use http::{Request, Response};
use tonic::body::Body;
use tonic::server::NamedService;

pub struct Deferred<S> {
    service: Arc<OnceLock<S>>,
}

impl<S> Clone for Deferred<S> {
    fn clone(&self) -> Self {
        Deferred {
            service: self.service.clone(),
        }
    }
}

impl<S> Default for Deferred<S> {
    fn default() -> Self {
        Deferred {
            service: Arc::default(),
        }
    }
}

impl<S> Deferred<S> {
    /// Makes the service ready; a second call is ignored.
    pub fn set(&self, service: S) {
        let _ = self.service.set(service);
    }
}

impl<S: NamedService> NamedService for Deferred<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tower::Service<Request<Body>> for Deferred<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // tonic's generated servers are always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        match self.service.get() {
            Some(service) => service.clone().call(request).boxed(),
            // The admission layer refuses memory calls before start-up ends, so this is
            // only a safety net.
            None => {
                let status = tonic::Status::from(memmachine_core::error::Error::Unavailable(
                    crate::admission::lifecycle::STARTING.into(),
                ));
                futures::future::ready(Ok(status.into_http())).boxed()
            }
        }
    }
}
