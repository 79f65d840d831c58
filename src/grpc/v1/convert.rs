//! Conversions between v1 protobuf messages and the legacy domain's types.

use crate::grpc::convert::{json_object, json_value, proto_struct, proto_value, timestamp};
use memmachine_domain::legacy::sessions::GroupInput;
use memmachine_domain::legacy::store::{GroupRow, SessionRow};
use memmachine_domain::legacy::{Context, EpisodeInput, LegacyEpisode};
use memmachine_proto::v1 as pb;

pub fn context(c: Option<pb::MemoryContext>) -> Context {
    let c = c.unwrap_or_default();
    Context {
        group_id: c.group_id,
        agent_ids: c.agent_id,
        user_ids: c.user_id,
        session_id: c.session_id,
    }
}

fn json(v: Option<prost_types::Value>) -> serde_json::Value {
    v.map_or(serde_json::Value::Null, json_value)
}

pub fn episode_input(e: pb::Episode) -> EpisodeInput {
    EpisodeInput {
        uuid: e.uuid,
        episode_type: e.episode_type,
        content_type: e.content_type,
        content: e.content,
        timestamp: e.timestamp.map(|ts| (ts.seconds, ts.nanos)),
        group_id: e.group_id,
        session_id: e.session_id,
        producer_id: e.producer_id,
        produced_for_id: e.produced_for_id,
        user_metadata: json(e.user_metadata),
        idempotency_key: Some(e.idempotency_key).filter(|k| !k.is_empty()),
    }
}

pub fn episode(e: LegacyEpisode) -> pb::Episode {
    pb::Episode {
        uuid: e.uuid.to_string(),
        episode_type: e.episode_type,
        content_type: e.content_type,
        content: e.content,
        timestamp: Some(timestamp(e.created_at_micros)),
        group_id: e.group_id,
        session_id: e.session_id,
        producer_id: e.producer_id,
        produced_for_id: e.produced_for_id,
        user_metadata: (!e.user_metadata.is_null()).then(|| proto_value(&e.user_metadata)),
        idempotency_key: String::new(),
    }
}

pub fn session(s: SessionRow) -> pb::SessionInfo {
    pb::SessionInfo {
        configuration: Some(proto_struct(&s.configuration)),
        group_id: s.key.project_id,
        session_id: s.session_id,
        agent_ids: s.agent_ids,
        user_ids: s.user_ids,
        created_at: Some(timestamp(s.created_at_micros)),
    }
}

pub fn group_input(g: Option<pb::GroupConfiguration>) -> GroupInput {
    let g = g.unwrap_or_default();
    GroupInput {
        group_id: g.group_id,
        agent_list: g.agent_list,
        user_list: g.user_list,
        configuration: json_object(g.configuration),
    }
}

pub fn group(g: GroupRow) -> pb::GroupConfiguration {
    pb::GroupConfiguration {
        configuration: Some(proto_struct(&g.configuration)),
        group_id: g.key.project_id,
        agent_list: g.agent_list,
        user_list: g.user_list,
    }
}

/// An optional `Struct` as an optional JSON object.
pub fn configuration(s: Option<prost_types::Struct>) -> Option<serde_json::Value> {
    s.map(|s| json_object(Some(s)))
}
