//! Conversions between protobuf messages and domain types.

use prost_types::Timestamp;

use crate::episodic::MessageInput;
use crate::error::{Error, Result, Violations};
use crate::memory::MemoryKind;
use crate::model::episode::{CONTENT_TYPE_STRING, EPISODE_TYPE_MESSAGE};
use crate::model::{self, ProjectKey};
use crate::pb;

pub fn timestamp(micros: i64) -> Timestamp {
    Timestamp {
        seconds: micros.div_euclid(1_000_000),
        nanos: (micros.rem_euclid(1_000_000) * 1000) as i32,
    }
}

pub fn memory_kind(field: &str, value: i32) -> Result<MemoryKind> {
    match pb::MemoryType::try_from(value) {
        Ok(pb::MemoryType::Episodic) => Ok(MemoryKind::Episodic),
        Ok(pb::MemoryType::Semantic) => Ok(MemoryKind::Semantic),
        _ => Err(Error::invalid(
            field,
            format!("{value} is not MEMORY_TYPE_EPISODIC or MEMORY_TYPE_SEMANTIC"),
        )),
    }
}

pub fn memory_kinds(types: &[i32]) -> Result<Vec<MemoryKind>> {
    let mut violations = Violations::default();
    let kinds = types
        .iter()
        .enumerate()
        .filter_map(|(i, t)| violations.check(memory_kind(&format!("types[{i}]"), *t)))
        .collect();
    violations.into_result()?;
    Ok(kinds)
}

pub fn messages(messages: Vec<pb::MemoryMessage>) -> Result<Vec<MessageInput>> {
    let mut violations = Violations::default();
    let inputs = messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            if !matches!(
                pb::EpisodeType::try_from(m.episode_type),
                Ok(pb::EpisodeType::Unspecified | pb::EpisodeType::Message)
            ) {
                violations.add(
                    format!("messages[{i}].episode_type"),
                    format!("{} is not an episode type", m.episode_type),
                );
            }
            MessageInput {
                content: m.content,
                producer: m.producer,
                produced_for: m.produced_for,
                timestamp: m.timestamp.map(|ts| (ts.seconds, ts.nanos)),
                role: m.role,
                metadata: m.metadata.into_iter().collect(),
            }
        })
        .collect();
    violations.into_result()?;
    Ok(inputs)
}

pub fn episode(key: &ProjectKey, e: model::Episode) -> pb::Episode {
    pb::Episode {
        uid: e.uid.to_string(),
        content: e.content,
        session_key: key.session_key(),
        created_at: Some(timestamp(e.created_at_micros)),
        producer_id: e.producer_id,
        producer_role: e.producer_role,
        produced_for_id: e.produced_for_id,
        sequence_num: e.sequence_num,
        episode_type: match e.episode_type.as_str() {
            EPISODE_TYPE_MESSAGE => pb::EpisodeType::Message,
            _ => pb::EpisodeType::Unspecified,
        } as i32,
        content_type: match e.content_type.as_str() {
            CONTENT_TYPE_STRING => pb::ContentType::String,
            _ => pb::ContentType::Unspecified,
        } as i32,
        metadata: e.metadata.into_iter().collect(),
    }
}

pub fn project(p: model::Project) -> pb::Project {
    pb::Project {
        org_id: p.key.org_id,
        project_id: p.key.project_id,
        description: p.description,
        config: Some(pb::ProjectConfig {
            embedder: p.config.embedder,
            reranker: p.config.reranker,
        }),
        created_at: Some(timestamp(p.created_at_micros)),
    }
}

pub fn episodic_config(c: model::EpisodicConfig) -> pb::EpisodicMemoryConfig {
    pb::EpisodicMemoryConfig {
        enabled: c.enabled,
        long_term_memory_enabled: c.long_term_memory_enabled,
        short_term_memory_enabled: c.short_term_memory_enabled,
    }
}
