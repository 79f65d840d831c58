//! Control over semantic extraction per project: a pause the queue's claim honours (so
//! every replica agrees), and the rows an estimate of the project's backlog is made from.

use async_trait::async_trait;

use crate::access::ProjectAccess;
use crate::error::Result;

/// The queued (not failed) messages of one project waiting for one set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedForSet {
    /// The set's public id.
    pub set_id: String,
    pub messages: i64,
    /// Characters of the messages' contents, added up.
    pub chars: i64,
}

/// A project's queued messages: how many, and per set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueuedMessages {
    /// Distinct messages (one queued for three sets counts once).
    pub messages: i64,
    /// By set id.
    pub sets: Vec<QueuedForSet>,
}

#[async_trait]
pub trait ExtractionStore: Send + Sync {
    /// Whether the project's extraction is paused; `NotFound` for an unknown project.
    async fn extraction_paused(&self, project: &ProjectAccess) -> Result<bool>;

    /// Pauses (or resumes) the project's extraction: while paused, queued messages of
    /// its episodes stay queued and are not claimed, in its own sets and in the org's
    /// shared ones. `NotFound` for an unknown project; kept until changed or the project
    /// is deleted.
    async fn set_extraction_paused(&self, project: &ProjectAccess, paused: bool) -> Result<()>;

    /// The project's queued (not failed) messages, and per set (org-level sets
    /// included, counting only this project's messages) by set id; `NotFound` for an
    /// unknown project.
    async fn queued_for_extraction(&self, project: &ProjectAccess) -> Result<QueuedMessages>;
}
