//! Hands a watcher's changes to its transport one at a time: a change is read only
//! after the previous one was taken, a client that leaves a ready change untaken for
//! the send timeout is cut off (RESOURCE_EXHAUSTED, naming where to resume), and the
//! server's drain ends every stream with UNAVAILABLE.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::{ChangeStream, Watched};
use crate::error::{Error, Result};

/// The transport's end: changes, then at most one error, then nothing.
pub struct Relay {
    changes: mpsc::Receiver<Watched>,
    end: Arc<Mutex<Option<Error>>>,
}

impl Relay {
    /// Relays `stream`; `held` (the stream's admission place) is given back when the
    /// relay ends. `closing` turns true when the server drains.
    pub fn start(
        mut stream: ChangeStream,
        send_timeout: Duration,
        mut closing: watch::Receiver<bool>,
        held: Box<dyn Send>,
    ) -> Relay {
        let (tx, rx) = mpsc::channel(1);
        let end = Arc::new(Mutex::new(None));
        let ended = end.clone();
        tokio::spawn(async move {
            let _held = held;
            let finish = |err: Error| *ended.lock().expect("relay lock") = Some(err);
            loop {
                // Where the client is once it has taken everything sent so far.
                let sent = stream.cursor();
                let next = tokio::select! {
                    next = stream.next() => next,
                    _ = closing.wait_for(|closing| *closing) => Err(Error::Unavailable(format!(
                        "the server is shutting down; resume on another replica after the \
                         last cursor processed ({sent} was the last sent)"
                    ))),
                    () = tx.closed() => return,
                };
                let change = match next {
                    Ok(Some(change)) => change,
                    Ok(None) => return,
                    Err(err) => return finish(err),
                };
                match tokio::time::timeout(send_timeout, tx.reserve()).await {
                    Ok(Ok(place)) => place.send(change),
                    Ok(Err(_)) => return,
                    Err(_) => {
                        tracing::info!(
                            send_timeout_secs = send_timeout.as_secs_f64(),
                            "a change stream's client read too slowly; cut off"
                        );
                        return finish(Error::ResourceExhausted {
                            message: format!(
                                "the client read changes too slowly (a ready change stayed \
                                 untaken for {:.1} s, --watch-send-timeout); resume after the \
                                 last cursor processed ({sent} was the last sent)",
                                send_timeout.as_secs_f64(),
                            ),
                            retry_after: None,
                        });
                    }
                }
            }
        });
        Relay { changes: rx, end }
    }

    /// The next change, or the error that ended the stream, or `None` at its end.
    pub async fn recv(&mut self) -> Option<Result<Watched>> {
        match self.changes.recv().await {
            Some(change) => Some(Ok(change)),
            None => self.end.lock().expect("relay lock").take().map(Err),
        }
    }
}
