//! The admission layer every gRPC (and gRPC-Web) call passes before its service: it
//! gives the call a request id and a tracing span, refuses memory calls while the server
//! starts or drains, authenticates the caller (recording who it is for the services'
//! org checks), applies per-caller limits and the call's deadline, and records metrics.
//! Health checks pass straight through, so probes need no key; reflection (the public
//! schema) needs no key either.

pub mod cors;
pub mod declared_length;
pub mod departure;
mod flags;
pub mod host_and_origin;
pub mod lifecycle;
pub mod limits;
pub mod watch;

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use http::{HeaderValue, Request, Response};
use tokio::sync::OwnedSemaphorePermit;
use tonic::body::Body;
use tracing::Instrument;

pub use self::flags::Flags;
use self::lifecycle::Lifecycle;
use self::limits::Limiter;
use memmachine_core::error::Error;
use memmachine_domain::auth::{Authenticator, Caller};
use memmachine_domain::metrics::Metrics;

/// Header carrying the request id, taken from the client when it sends a sane one.
pub const REQUEST_ID: &str = "x-request-id";
const HEALTH_PREFIX: &str = "/grpc.health.v1.Health/";
const MEMORY_PREFIX: &str = "/memmachine.";
const REFLECTION_PREFIX: &str = "/grpc.reflection.";

pub struct Admission {
    pub auth: Authenticator,
    pub limiter: Limiter,
    pub lifecycle: Arc<Lifecycle>,
    pub metrics: Arc<Metrics>,
    /// Upper bound of every call's deadline (a client's `grpc-timeout` may shorten it).
    pub request_timeout: Duration,
    /// The services' decoding limit, named when a request exceeds it.
    pub max_request_bytes: usize,
    /// `Service/Method` of every method served, the metrics' labels.
    pub methods: std::collections::HashSet<String>,
    /// Open health Watch streams per client address.
    pub watchers: Arc<watch::Watchers>,
    /// Open change streams (WatchChanges, the SSE route) per key (per address without
    /// auth). They hold no concurrency permit and no deadline: this bounds them.
    pub change_streams: Arc<watch::Watchers>,
    /// Turns true when the drain begins: change streams end with UNAVAILABLE.
    pub closing: tokio::sync::watch::Receiver<bool>,
    /// The hosts and origins browsers may call from.
    pub browsers: host_and_origin::BrowserPolicy,
}

#[derive(Clone)]
pub struct AdmissionLayer(Arc<Admission>);

impl AdmissionLayer {
    pub fn new(admission: Arc<Admission>) -> AdmissionLayer {
        AdmissionLayer(admission)
    }
}

impl<S> tower::Layer<S> for AdmissionLayer {
    type Service = AdmissionService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AdmissionService {
            inner,
            admission: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct AdmissionService<S> {
    inner: S,
    admission: Arc<Admission>,
}

impl<S> tower::Service<Request<Body>> for AdmissionService<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        // The clone that was polled ready serves this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        if let Err(refusal) = self
            .admission
            .browsers
            .check(request.uri(), request.headers())
        {
            self.admission.metrics.record_refusal("browser");
            let refused = tonic::Status::from(Error::from(refusal));
            return Box::pin(std::future::ready(Ok(refused.into_http())));
        }
        if request.uri().path() == watch::WATCH_PATH {
            let Some(guard) = self.admission.watchers.admit(&peer_ip(&request)) else {
                let refused = tonic::Status::from(Error::ResourceExhausted {
                    message: "this address holds as many health Watch streams as it may \
                              (--max-watch-streams-per-peer)"
                        .into(),
                    retry_after: None,
                });
                return Box::pin(std::future::ready(Ok(refused.into_http())));
            };
            let call = inner.call(request);
            return Box::pin(async move {
                let response = call.await?;
                Ok(response.map(|body| watch::hold(body, guard)))
            });
        }
        if request.uri().path().starts_with(HEALTH_PREFIX) {
            return Box::pin(inner.call(request));
        }
        // The deadline counts from arrival, and ends a moment before tonic's own timer
        // for the same `grpc-timeout`, so that the answer is ours (DEADLINE_EXCEEDED).
        let now = Instant::now();
        let cap = if LONG_STREAMS.contains(&request.uri().path()) {
            Duration::MAX
        } else {
            self.admission.request_timeout
        };
        let allowed = deadline(&request, cap);
        let deadline = match now.checked_add(allowed) {
            Some(end) => end.checked_sub(DEADLINE_MARGIN).unwrap_or(now).max(now),
            // Beyond what the clock can say: a year is as good as forever.
            None => now + Duration::from_secs(365 * 86_400),
        };
        Box::pin(self.admission.clone().admit(request, inner, deadline))
    }
}

/// Calls that last as long as their client streams: only a client's `grpc-timeout`
/// ends them, not `--request-timeout`, which bounds instead the wait for each next
/// message (the services enforce it); `--min-body-rate` still applies.
pub const LONG_STREAMS: [&str; 1] = ["/memmachine.v2.MemoryService/ImportMemories"];

/// How much earlier than a `grpc-timeout` the admission layer answers.
const DEADLINE_MARGIN: Duration = Duration::from_millis(2);

/// Records a call in the metrics once, when answered or when dropped unanswered (the
/// client cancelled or reset it).
pub struct CallRecord {
    metrics: Arc<Metrics>,
    /// The method's metrics label.
    label: String,
    started: Instant,
    answered: bool,
}

impl CallRecord {
    pub fn new(metrics: Arc<Metrics>, label: String) -> CallRecord {
        CallRecord {
            metrics,
            label,
            started: Instant::now(),
            answered: false,
        }
    }

    pub fn answer(mut self, code: tonic::Code) -> Duration {
        self.answered = true;
        let elapsed = self.started.elapsed();
        self.metrics.record_call(&self.label, code, elapsed);
        elapsed
    }
}

impl Drop for CallRecord {
    fn drop(&mut self) {
        if !self.answered {
            let elapsed = self.started.elapsed();
            self.metrics
                .record_call(&self.label, tonic::Code::Cancelled, elapsed);
        }
    }
}

impl Admission {
    async fn admit<S>(
        self: Arc<Self>,
        request: Request<Body>,
        mut inner: S,
        deadline: Instant,
    ) -> Result<Response<Body>, S::Error>
    where
        S: tower::Service<Request<Body>, Response = Response<Body>>,
    {
        let (parts, body) = request.into_parts();
        let (body, departure) = departure::watch(body);
        let mut request = Request::from_parts(parts, body);
        let path = request.uri().path().to_string();
        let method = path.trim_start_matches('/').to_string();
        // Only methods the server has get their own label, so that callers cannot grow
        // the metrics with made-up paths.
        let record = CallRecord::new(
            self.metrics.clone(),
            if self.methods.contains(&method) {
                method.clone()
            } else {
                "unknown".to_string()
            },
        );
        let request_id = request_id(request.headers().get(REQUEST_ID));
        let span = call_span(&method, &request_id);
        let authorization = authorization(request.headers());
        let peer = peer_ip(&request);
        let result = async {
            let entry = self
                .enter(
                    path.starts_with(MEMORY_PREFIX),
                    path.starts_with(REFLECTION_PREFIX),
                    authorization.as_deref(),
                    &peer,
                )
                .await?;
            if let Some(caller) = entry.caller.clone() {
                let route = memmachine_domain::auth::route(request.headers())?;
                request
                    .extensions_mut()
                    .insert(memmachine_domain::auth::Access::new(caller, route));
            }
            let allowed = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout_at(deadline.into(), inner.call(request)).await {
                Ok(response) => Ok(response),
                Err(_) => Err(Error::DeadlineExceeded(format!(
                    "the call's deadline ({:.3} s left on arrival at this step) passed \
                     before it finished",
                    allowed.as_secs_f64()
                ))),
            }
        }
        .instrument(span.clone())
        .await;
        let mut response = match result {
            Ok(Ok(response)) => response,
            Ok(Err(err)) => return Err(err),
            Err(err) => span.in_scope(|| tonic::Status::from(err).into_http()),
        };
        let mut code = tonic::Status::from_header_map(response.headers())
            .map_or(tonic::Code::Ok, |status| status.code());
        if code != tonic::Code::Ok && departure.left() {
            code = tonic::Code::Cancelled;
            response = tonic::Status::cancelled("the client left before its request arrived whole")
                .into_http();
        } else if let Some(status) = self.client_fault(&response) {
            code = status.code();
            response = status.into_http();
        }
        let elapsed = record.answer(code);
        span.in_scope(|| log_answer(code, elapsed, &peer));
        if let Ok(value) = HeaderValue::from_str(&request_id) {
            response.headers_mut().insert(REQUEST_ID, value);
        }
        Ok(response)
    }

    /// Lets one call in, on any transport: refused while the server starts or drains
    /// (`memory` calls), authenticated unless `public`, and admitted under the caller's
    /// limits. What it returns must live as long as the call.
    pub async fn enter(
        &self,
        memory: bool,
        public: bool,
        authorization: Option<&[u8]>,
        peer: &str,
    ) -> Result<Entry, Error> {
        let call = if memory {
            Some(self.lifecycle.admit()?)
        } else {
            None
        };
        let caller = if public {
            None
        } else {
            match self.auth.authenticate(authorization).await {
                Ok(caller) => Some(caller),
                Err(err) => {
                    // Failed attempts count against the peer's rate, so that guessing
                    // keys is as limited as calling.
                    self.limit(&format!("peer:{peer}"))?;
                    return Err(err);
                }
            }
        };
        let key_id = caller.as_ref().and_then(Caller::key_id);
        if let Some(key) = key_id {
            tracing::Span::current().record("key_id", key);
        }
        let limiter_key = match key_id {
            Some(key) => format!("key:{key}"),
            None => format!("peer:{peer}"),
        };
        let permit = self.limit(&limiter_key)?;
        Ok(Entry {
            caller,
            _call: call,
            _permit: permit,
        })
    }

    /// Admits one call of `caller` under the per-caller limits, counting refusals in the
    /// metrics. The permit must live as long as the call.
    fn limit(&self, caller: &str) -> Result<Option<OwnedSemaphorePermit>, Error> {
        self.limiter.admit(caller).map_err(|(refusal, err)| {
            self.metrics.record_refusal(refusal.as_str());
            err
        })
    }

    /// tonic's own answers to a client's mistakes, as the contract's codes: a message
    /// over the size limit (OUT_OF_RANGE from tonic) is RESOURCE_EXHAUSTED, and bytes
    /// that are not the request message (INTERNAL from tonic) are INVALID_ARGUMENT.
    fn client_fault(&self, response: &Response<Body>) -> Option<tonic::Status> {
        let status = tonic::Status::from_header_map(response.headers())?;
        match status.code() {
            // Only tonic's own: a domain OUT_OF_RANGE (a pruned change-feed cursor)
            // carries its ErrorInfo and passes as it is.
            tonic::Code::OutOfRange if status.details().is_empty() => {
                Some(tonic::Status::from(Error::ResourceExhausted {
                    message: format!(
                        "the request is larger than this server accepts ({} bytes; \
                     --max-request-bytes)",
                        self.max_request_bytes
                    ),
                    retry_after: None,
                }))
            }
            // tonic-web reports a failed body (one cut off for slowness) as its own.
            tonic::Code::Internal
                if status
                    .message()
                    .contains(crate::connections::request_gate::TOO_SLOW) =>
            {
                let message = status.message();
                let start = message
                    .find(crate::connections::request_gate::TOO_SLOW)
                    .unwrap_or(0);
                Some(tonic::Status::deadline_exceeded(&message[start..]))
            }
            tonic::Code::Internal
                if DECODE_FAILURES
                    .iter()
                    .any(|prefix| status.message().starts_with(prefix)) =>
            {
                Some(tonic::Status::from(Error::invalid(
                    "",
                    format!("the request is not a valid message: {}", status.message()),
                )))
            }
            _ => None,
        }
    }
}

/// The span a call runs in, on any transport (`key_id` is recorded once known).
pub fn call_span(method: &str, request_id: &str) -> tracing::Span {
    tracing::info_span!(
        "call",
        method = %method,
        request_id = %request_id,
        key_id = tracing::field::Empty
    )
}

/// The `authorization` header's bytes, for `Admission::enter`.
pub fn authorization(headers: &http::HeaderMap) -> Option<Vec<u8>> {
    headers
        .get(http::header::AUTHORIZATION)
        .map(|v| v.as_bytes().to_vec())
}

/// Logs how a call was answered: failures as warnings, refusals as information.
pub fn log_answer(code: tonic::Code, elapsed: Duration, peer: &str) {
    let ms = elapsed.as_secs_f64() * 1e3;
    let code_name = memmachine_domain::metrics::code_name(code);
    match code {
        tonic::Code::Ok => tracing::debug!(code = code_name, ms, "call answered"),
        tonic::Code::Internal | tonic::Code::Unknown | tonic::Code::DataLoss => {
            tracing::warn!(code = code_name, ms, "call failed")
        }
        tonic::Code::Unauthenticated => {
            tracing::info!(code = code_name, ms, peer = %peer, "call refused")
        }
        _ => tracing::info!(code = code_name, ms, "call refused"),
    }
}

/// A call let in: who the caller is (none for public calls), holding its place in the
/// lifecycle and its concurrency permit until dropped.
pub struct Entry {
    pub caller: Option<Caller>,
    _call: Option<lifecycle::CallGuard>,
    _permit: Option<OwnedSemaphorePermit>,
}

/// How tonic's (and tonic-web's) answers to undecodable requests begin: an empty body,
/// a truncated frame, bad base64 are the client's mistakes, not the server's.
const DECODE_FAILURES: [&str; 6] = [
    "failed to decode Protobuf message",
    "protocol error:",
    "Error decompressing",
    "Missing request message",
    "Unexpected EOF decoding stream",
    departure::GRPC_WEB_DECODING,
];

/// The client's request id when it is short printable ASCII, else a new one.
pub fn request_id(sent: Option<&HeaderValue>) -> String {
    sent.and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map_or_else(|| uuid::Uuid::new_v4().simple().to_string(), str::to_string)
}

fn peer_ip<B>(request: &Request<B>) -> String {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    let extensions = request.extensions();
    extensions
        .get::<TcpConnectInfo>()
        .or_else(|| {
            extensions
                .get::<TlsConnectInfo<TcpConnectInfo>>()
                .map(TlsConnectInfo::get_ref)
        })
        .and_then(TcpConnectInfo::remote_addr)
        .map_or_else(|| "unknown".to_string(), |addr| addr.ip().to_string())
}

/// The call's deadline: its `grpc-timeout`, at most `cap`.
fn deadline<B>(request: &Request<B>, cap: Duration) -> Duration {
    request
        .headers()
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_grpc_timeout)
        .map_or(cap, |asked| asked.min(cap))
}

/// `grpc-timeout`: up to 8 digits and a unit (H, M, S, m, u, n).
fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_by_unit() {
        assert_eq!(parse_grpc_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse_grpc_timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse_grpc_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_grpc_timeout("100n"), Some(Duration::from_nanos(100)));
        for bad in ["", "S", "5", "5s", "123456789S", "-1S", "1.5S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad}");
        }
    }

    #[test]
    fn request_ids_are_kept_when_sane() {
        let sent = HeaderValue::from_static("abc-123");
        assert_eq!(request_id(Some(&sent)), "abc-123");
        let spaced = HeaderValue::from_static("a b");
        assert_ne!(request_id(Some(&spaced)), "a b");
        assert_eq!(request_id(None).len(), 32);
    }
}
