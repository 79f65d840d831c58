//! `MemoryFeed`: the project's change log as clients follow it.

use async_trait::async_trait;

use super::SqliteStore;
use memmachine_core::error::{Error, Result};
use memmachine_core::model::{ChangeSeq, ProjectHandle};
use memmachine_core::store::{FeedHead, MemoryChanges, MemoryFeed};

#[async_trait]
impl MemoryFeed for SqliteStore {
    async fn memory_changes(
        &self,
        _project: ProjectHandle,
        _after: ChangeSeq,
        _limit: usize,
    ) -> Result<MemoryChanges> {
        Err(Error::Unimplemented("the client change feed".into()))
    }

    async fn feed_heads(&self, _projects: &[ProjectHandle]) -> Result<Vec<FeedHead>> {
        Err(Error::Unimplemented("the client change feed".into()))
    }
}
