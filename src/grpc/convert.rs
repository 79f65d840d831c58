//! Conversions between protobuf messages and domain types.

use prost_types::Timestamp;

use memmachine_core::error::{Error, Result, Violations};
use memmachine_core::model::episode::{CONTENT_TYPE_STRING, EPISODE_TYPE_MESSAGE};
use memmachine_core::model::{self, ProjectKey};
use memmachine_domain::episodic::MessageInput;
use memmachine_domain::memory::MemoryKind;
use memmachine_proto::v2 as pb;

pub fn timestamp(micros: i64) -> Timestamp {
    Timestamp {
        seconds: micros.div_euclid(1_000_000),
        nanos: (micros.rem_euclid(1_000_000) * 1000) as i32,
    }
}

pub fn duration(micros: i64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: micros / 1_000_000,
        nanos: ((micros % 1_000_000) * 1000) as i32,
    }
}

/// A retention update: zero clears it (`Some(None)`); a part of a microsecond counts as
/// one; negative or overflowing values stay out of range for the domain to refuse.
pub fn retention_update(d: Option<prost_types::Duration>) -> Option<Option<i64>> {
    let d = d?;
    if d.seconds == 0 && d.nanos == 0 {
        return Some(None);
    }
    let micros = d
        .seconds
        .checked_mul(1_000_000)
        .and_then(|m| m.checked_add(i64::from(d.nanos).div_euclid(1000)))
        .map(|m| if m == 0 && d.nanos > 0 { 1 } else { m })
        .unwrap_or(if d.seconds < 0 { i64::MIN } else { i64::MAX });
    Some(Some(micros))
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
                uid: None,
                content: m.content,
                producer: m.producer,
                produced_for: m.produced_for,
                timestamp: m.timestamp.map(|ts| (ts.seconds, ts.nanos)),
                role: m.role,
                metadata: m.metadata.into_iter().collect(),
                expires_at: m.expires_at.map(|ts| (ts.seconds, ts.nanos)),
                idempotency_key: Some(m.idempotency_key).filter(|k| !k.is_empty()),
            }
        })
        .collect();
    violations.into_result()?;
    Ok(inputs)
}

pub fn episode(key: &ProjectKey, e: model::Episode) -> pb::Episode {
    pb::Episode {
        expires_at: e.expires_at_micros.map(timestamp),
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
        episode_retention: c.episode_retention_micros.map(duration),
        enabled: c.enabled,
        long_term_memory_enabled: c.long_term_memory_enabled,
        short_term_memory_enabled: c.short_term_memory_enabled,
        participant_aware: c.participant_aware,
        ranking_weights: Some(ranking_weights(c.ranking_weights)),
    }
}

/// The project's weights, every field set.
pub fn ranking_weights(w: model::RankingWeights) -> pb::RankingWeights {
    pb::RankingWeights {
        dense: Some(w.dense),
        own_similarity: Some(w.own_similarity),
        participant: Some(w.participant),
        context: Some(w.context),
        session: Some(w.session),
        time: Some(w.time),
        when: Some(w.when),
    }
}

/// The weights an update sets (absent: none).
pub fn ranking_weights_update(w: Option<pb::RankingWeights>) -> model::RankingWeightsUpdate {
    let w = w.unwrap_or_default();
    model::RankingWeightsUpdate {
        dense: w.dense,
        own_similarity: w.own_similarity,
        participant: w.participant,
        context: w.context,
        session: w.session,
        time: w.time,
        when: w.when,
    }
}

/// An episode the search ranked, with the parts of its score when asked for.
pub fn scored_episode(key: &ProjectKey, hit: model::ScoredEpisode) -> pb::ScoredEpisode {
    pb::ScoredEpisode {
        episode: Some(episode(key, hit.episode)),
        score: hit.score,
        score_parts: hit.parts.map(|p| pb::ScoreParts {
            lexical: p.lexical,
            dense: p.dense,
            context: p.context,
            session: p.session,
            time: p.time,
            participant: p.participant,
        }),
    }
}

/// A protobuf `Struct` as a JSON object (absent: an empty one).
pub fn json_object(s: Option<prost_types::Struct>) -> serde_json::Value {
    serde_json::Value::Object(
        s.map(|s| {
            s.fields
                .into_iter()
                .map(|(k, v)| (k, json_value(v)))
                .collect()
        })
        .unwrap_or_default(),
    )
}

pub fn json_value(v: prost_types::Value) -> serde_json::Value {
    use prost_types::value::Kind;
    match v.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::BoolValue(b)) => b.into(),
        Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(n)
            .map_or(serde_json::Value::Null, serde_json::Value::Number),
        Some(Kind::StringValue(s)) => s.into(),
        Some(Kind::ListValue(l)) => l.values.into_iter().map(json_value).collect(),
        Some(Kind::StructValue(s)) => json_object(Some(s)),
    }
}

/// A JSON object as a protobuf `Struct` (anything else: an empty one).
pub fn proto_struct(v: &serde_json::Value) -> prost_types::Struct {
    let fields = match v {
        serde_json::Value::Object(map) => map
            .iter()
            .map(|(k, v)| (k.clone(), proto_value(v)))
            .collect(),
        _ => Default::default(),
    };
    prost_types::Struct { fields }
}

pub fn proto_value(v: &serde_json::Value) -> prost_types::Value {
    use prost_types::value::Kind;
    let kind = match v {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(*b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        serde_json::Value::String(s) => Kind::StringValue(s.clone()),
        serde_json::Value::Array(a) => Kind::ListValue(prost_types::ListValue {
            values: a.iter().map(proto_value).collect(),
        }),
        serde_json::Value::Object(_) => Kind::StructValue(proto_struct(v)),
    };
    prost_types::Value { kind: Some(kind) }
}

/// One item of a ranking together.
pub fn ranked(key: &ProjectKey, r: memmachine_domain::rank_together::Ranked) -> pb::RankedMemory {
    use memmachine_domain::rank_together::{Item, Source};
    use pb::ranked_memory::Item as PbItem;
    let item = match r.item {
        Item::Episode(hit) => PbItem::Episode(scored_episode(key, hit)),
        Item::Feature(hit) => PbItem::Feature(feature(hit.feature, hit.score, true)),
    };
    let source = match r.source {
        Source::Episodic => pb::RankedSource::Episodic,
        Source::Semantic => pb::RankedSource::Semantic,
        Source::Both => pb::RankedSource::Both,
    };
    pb::RankedMemory {
        item: Some(item),
        source: source as i32,
        score: r.score,
        episodic: r.episodic,
        semantic: r.semantic,
        citing_feature_ids: r.citing,
    }
}

pub fn feature(
    f: memmachine_domain::semantic::model::Feature,
    score: f64,
    citations: bool,
) -> pb::SemanticFeature {
    pb::SemanticFeature {
        metadata: Some(proto_struct(&f.metadata)),
        id: f.id,
        set_id: f.set_id,
        category: f.category,
        category_id: f.category_id,
        tag: f.tag,
        feature_name: f.feature,
        value: f.value,
        citations: if citations {
            f.citations.iter().map(|u| u.to_string()).collect()
        } else {
            Vec::new()
        },
        score,
        created_at: Some(timestamp(f.created_at_micros)),
        updated_at: Some(timestamp(f.updated_at_micros)),
    }
}

pub fn category(c: memmachine_domain::semantic::model::Category) -> pb::Category {
    pb::Category {
        id: c.id,
        name: c.name,
        prompt: c.prompt,
        description: c.description,
        tags: c
            .tags
            .into_iter()
            .map(|t| pb::CategoryTag {
                id: t.id,
                name: t.name,
                description: t.description,
            })
            .collect(),
    }
}

pub fn set_type(t: memmachine_domain::semantic::model::SetType) -> pb::SetType {
    pb::SetType {
        id: t.id,
        is_org_level: t.is_org_level,
        tags: t.tags,
        name: t.name,
        description: t.description,
    }
}

/// An optional `as_of` time in micros: nanoseconds must be 0..1e9 and the time must fit.
pub fn as_of(field: &str, ts: Option<Timestamp>) -> Result<Option<i64>> {
    let Some(ts) = ts else {
        return Ok(None);
    };
    if !(0..1_000_000_000).contains(&ts.nanos) {
        return Err(Error::invalid(field, "nanos must be from 0 to 999,999,999"));
    }
    ts.seconds
        .checked_mul(1_000_000)
        .and_then(|micros| micros.checked_add(i64::from(ts.nanos / 1000)))
        .map(Some)
        .ok_or_else(|| Error::invalid(field, "is out of range"))
}
