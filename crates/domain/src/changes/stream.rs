//! One watcher's changes, read lazily: the next page of the log is read only once the
//! previous one has been taken, so a watcher holds at most one page.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::watch;

use super::cursor;
use super::hub::Head;
use super::pages::Pages;
use crate::error::{Error, Result};
use crate::model::{ChangeSeq, ProjectHandle};
use crate::store::{MemoryChange, MemoryChangeKind, MemoryChanges};

/// Wait before reading again when the head is past what the log shows.
const RETRY: std::time::Duration = std::time::Duration::from_millis(20);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchKind {
    Memory(MemoryChangeKind),
    /// The project is gone; nothing follows.
    ProjectDeleted,
}

/// One change as a watcher is sent it.
#[derive(Debug, Clone)]
pub struct Watched {
    /// Resume after this change with it.
    pub cursor: String,
    pub kind: WatchKind,
    /// When it committed (microseconds since the epoch).
    pub at_micros: i64,
    /// The log entry (none for `ProjectDeleted`).
    pub change: Option<MemoryChange>,
}

pub struct ChangeStream {
    pages: Arc<Pages>,
    project: ProjectHandle,
    /// The last change taken.
    taken: ChangeSeq,
    /// Where the page read ends (its last entry of any kind).
    page_through: ChangeSeq,
    page: VecDeque<MemoryChange>,
    head: watch::Receiver<Head>,
    ended: bool,
}

impl ChangeStream {
    pub(super) fn new(
        pages: Arc<Pages>,
        project: ProjectHandle,
        after: ChangeSeq,
        head: watch::Receiver<Head>,
    ) -> ChangeStream {
        ChangeStream {
            pages,
            project,
            taken: after,
            page_through: after,
            page: VecDeque::new(),
            head,
            ended: false,
        }
    }

    /// The cursor of the last change taken (where a client cut off resumes).
    pub fn cursor(&self) -> String {
        cursor::encode(self.project, self.taken)
    }

    /// The next change, waiting for one to commit; `None` after `ProjectDeleted`.
    /// `OutOfRange` when the log no longer reaches back to the last change taken.
    pub async fn next(&mut self) -> Result<Option<Watched>> {
        loop {
            if self.ended {
                return Ok(None);
            }
            if let Some(change) = self.page.pop_front() {
                self.taken = change.id;
                return Ok(Some(watched(self.project, without_expired(change))));
            }
            self.taken = self.page_through;
            // Caught up: nothing to read until the hub sees the log move.
            if matches!(*self.head.borrow(), Head::At(at) if at <= self.taken) {
                self.wait_past(self.taken).await?;
            }
            match &*self.pages.read(self.project, self.taken).await? {
                MemoryChanges::Read { changes, through } => {
                    if changes.is_empty() && *through <= self.taken {
                        // A head the log does not show yet (it should not happen):
                        // read again a little later rather than at once, forever.
                        if matches!(*self.head.borrow(), Head::At(at) if at > self.taken) {
                            tokio::time::sleep(RETRY).await;
                        }
                        self.wait_past(self.taken).await?;
                    }
                    self.page = changes.iter().cloned().collect();
                    self.page_through = (*through).max(self.taken);
                }
                MemoryChanges::Pruned { oldest } => return Err(pruned(self.project, *oldest)),
                MemoryChanges::Gone => {
                    self.ended = true;
                    // A cursor of its own, one past the last change (every change has
                    // one); resuming after it finds the project gone.
                    let last = ChangeSeq::from_raw(self.taken.raw() + 1);
                    return Ok(Some(Watched {
                        cursor: cursor::encode(self.project, last),
                        kind: WatchKind::ProjectDeleted,
                        at_micros: chrono::Utc::now().timestamp_micros(),
                        change: None,
                    }));
                }
            }
        }
    }

    /// Reads the first page now, without waiting for changes: a cursor older than the
    /// kept feed is refused before the stream starts.
    pub(super) async fn check_reachable(&mut self) -> Result<()> {
        match &*self.pages.read(self.project, self.taken).await? {
            MemoryChanges::Read { changes, through } => {
                self.page = changes.iter().cloned().collect();
                self.page_through = (*through).max(self.taken);
            }
            MemoryChanges::Pruned { oldest } => return Err(pruned(self.project, *oldest)),
            // Found by the first `next`, which sends PROJECT_DELETED.
            MemoryChanges::Gone => {}
        }
        Ok(())
    }

    /// Until the hub sees the head past `seen` or the project gone.
    async fn wait_past(&mut self, seen: ChangeSeq) -> Result<()> {
        self.head
            .wait_for(|head| match head {
                Head::At(at) => *at > seen,
                Head::Gone => true,
            })
            .await
            .map(|_| ())
            .map_err(|_| Error::Closed)
    }
}

/// OUT_OF_RANGE naming the oldest cursor kept, in the message and machine-readably.
fn pruned(project: ProjectHandle, oldest: ChangeSeq) -> Error {
    let resume = cursor::encode(project, oldest);
    Error::OutOfRange {
        message: format!(
            "the change feed no longer reaches back to this cursor; re-read with \
             ListMemories, then watch with after={resume} (the oldest cursor kept)"
        ),
        resume_after: resume,
    }
}

fn watched(project: ProjectHandle, change: MemoryChange) -> Watched {
    Watched {
        cursor: cursor::encode(project, change.id),
        kind: WatchKind::Memory(change.kind),
        at_micros: change.at_micros,
        change: Some(change),
    }
}

/// Expired episodes not yet swept are never returned, here neither.
fn without_expired(mut change: MemoryChange) -> MemoryChange {
    let now = chrono::Utc::now().timestamp_micros();
    if change
        .episode
        .as_ref()
        .and_then(|e| e.expires_at_micros)
        .is_some_and(|at| at <= now)
    {
        change.episode = None;
    }
    change
}
