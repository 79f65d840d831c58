//! Health `Watch` streams need no key (probes send none) and stay open as long as the
//! client likes, so each client address may hold only so many at once. Change streams
//! (`WatchChanges`, the SSE route) are counted the same way, per API key (per address
//! without auth).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use http_body::{Body as HttpBody, Frame, SizeHint};
use tonic::body::Body;

pub const WATCH_PATH: &str = "/grpc.health.v1.Health/Watch";

/// Open Watch streams per client address.
pub struct Watchers {
    max_per_peer: usize,
    open: Mutex<HashMap<String, usize>>,
}

impl Watchers {
    pub fn new(max_per_peer: usize) -> Arc<Watchers> {
        Arc::new(Watchers {
            max_per_peer,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A place for one more stream of `peer`, or `None` when it holds its share.
    pub fn admit(self: &Arc<Self>, peer: &str) -> Option<WatchGuard> {
        let mut open = self.open.lock().expect("watchers lock");
        let count = open.entry(peer.to_string()).or_insert(0);
        if *count >= self.max_per_peer {
            return None;
        }
        *count += 1;
        Some(WatchGuard {
            watchers: self.clone(),
            peer: peer.to_string(),
        })
    }

    pub fn open(&self, peer: &str) -> usize {
        let open = self.open.lock().expect("watchers lock");
        open.get(peer).copied().unwrap_or(0)
    }
}

/// A place for one more change stream of the caller with key `key_id` (or of `peer`
/// without auth), or RESOURCE_EXHAUSTED naming the flag.
pub fn admit_change_stream(
    streams: &Arc<Watchers>,
    key_id: Option<&str>,
    peer: &str,
) -> Result<WatchGuard, memmachine_core::error::Error> {
    let holder = match key_id {
        Some(key) => format!("key:{key}"),
        None => format!("peer:{peer}"),
    };
    streams
        .admit(&holder)
        .ok_or_else(|| memmachine_core::error::Error::ResourceExhausted {
            message: "this key (or address) holds as many change streams as it may \
                      (--max-change-streams-per-key)"
                .into(),
            retry_after: None,
        })
}

/// One open stream's place, given back when its response body is dropped.
pub struct WatchGuard {
    watchers: Arc<Watchers>,
    peer: String,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        let mut open = self.watchers.open.lock().expect("watchers lock");
        if let Some(count) = open.get_mut(&self.peer) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.peer);
            }
        }
    }
}

/// A response body that holds a stream's place for as long as it is sent.
pub fn hold(body: Body, guard: WatchGuard) -> Body {
    Body::new(Held {
        body,
        _guard: guard,
    })
}

struct Held {
    body: Body,
    _guard: WatchGuard,
}

impl HttpBody for Held {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_peer_holds_at_most_its_share() {
        let watchers = Watchers::new(2);
        let a = watchers.admit("10.0.0.1").unwrap();
        let _b = watchers.admit("10.0.0.1").unwrap();
        assert!(watchers.admit("10.0.0.1").is_none());
        assert!(
            watchers.admit("10.0.0.2").is_some(),
            "another peer has its own share"
        );
        drop(a);
        assert_eq!(watchers.open("10.0.0.1"), 1);
        assert!(watchers.admit("10.0.0.1").is_some());
    }
}
