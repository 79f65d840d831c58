//! `memmachine.v2.ChangeService`: a project's changes as a server stream.

use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::watch;
use tonic::{Request, Response, Status};

use super::convert;
use crate::admission::watch::{Watchers, admit_change_stream};
use crate::store::MemoryChangeKind;
use memmachine_core::model::ProjectKey;
use memmachine_domain::changes::{Changes, WatchKind, Watched};
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::change_service_server::ChangeService;

pub struct ChangeGrpc {
    changes: Changes,
    /// Open change streams per key (per address without auth), shared with REST.
    streams: Arc<Watchers>,
    closing: watch::Receiver<bool>,
}

impl ChangeGrpc {
    pub fn new(changes: Changes, streams: Arc<Watchers>, closing: watch::Receiver<bool>) -> Self {
        ChangeGrpc {
            changes,
            streams,
            closing,
        }
    }
}

type Changed = Pin<Box<dyn futures::Stream<Item = Result<pb::Change, Status>> + Send>>;

#[tonic::async_trait]
impl ChangeService for ChangeGrpc {
    type WatchChangesStream = Changed;

    async fn watch_changes(
        &self,
        request: Request<pb::WatchChangesRequest>,
    ) -> Result<Response<Changed>, Status> {
        let peer = request
            .remote_addr()
            .map_or_else(|| "unknown".to_string(), |a| a.ip().to_string());
        let (caller, r) = super::split(request)?;
        let key = caller.project(&r.org_id, &r.project_id)?;
        let place = admit_change_stream(&self.streams, caller.key_id(), &peer)?;
        let stream = self.changes.watch(&key, &r.after).await?;
        let relay = self
            .changes
            .relay(stream, self.closing.clone(), Box::new(place));
        let changes = futures::stream::unfold(relay, move |mut relay| {
            let key = key.clone();
            async move {
                let next = relay.recv().await?;
                Some((next.map(|w| change(&key, w)).map_err(Status::from), relay))
            }
        });
        Ok(Response::new(Box::pin(changes)))
    }
}

fn kind(kind: WatchKind) -> pb::ChangeKind {
    match kind {
        WatchKind::Memory(MemoryChangeKind::EpisodeAdded) => pb::ChangeKind::EpisodeAdded,
        WatchKind::Memory(MemoryChangeKind::EpisodeDeleted) => pb::ChangeKind::EpisodeDeleted,
        WatchKind::Memory(MemoryChangeKind::FeatureAdded) => pb::ChangeKind::FeatureAdded,
        WatchKind::Memory(MemoryChangeKind::FeatureUpdated) => pb::ChangeKind::FeatureUpdated,
        WatchKind::Memory(MemoryChangeKind::FeatureDeleted) => pb::ChangeKind::FeatureDeleted,
        WatchKind::Memory(MemoryChangeKind::SummaryReplaced) => pb::ChangeKind::SummaryReplaced,
        WatchKind::ProjectDeleted => pb::ChangeKind::ProjectDeleted,
    }
}

fn change(key: &ProjectKey, w: Watched) -> pb::Change {
    let mut out = pb::Change {
        cursor: w.cursor,
        kind: kind(w.kind) as i32,
        at: Some(convert::timestamp(w.at_micros)),
        ..Default::default()
    };
    if let Some(c) = w.change {
        out.episode_uid = c.episode_uid.map(|u| u.to_string()).unwrap_or_default();
        out.episode = c.episode.map(|e| convert::episode(key, e));
        out.feature_id = c.feature_id.unwrap_or_default();
        out.feature = c.feature.map(|f| convert::feature(f, 0.0, true));
        out.summary = c.summary.unwrap_or_default();
    }
    out
}
