//! The filterable fields of an episode, kept compactly beside its index entry so that
//! search filters before the cut to `top_k` without touching the store.

use std::collections::BTreeMap;

use crate::model::filter::{Field, SystemField};
use crate::model::filter_eval::{Fields, Value};
use crate::model::{Episode, NewEpisode};

#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeFields {
    producer_id: Box<str>,
    producer_role: Box<str>,
    produced_for_id: Box<str>,
    episode_type: Box<str>,
    created_at_micros: i64,
    /// Sorted by key.
    metadata: Box<[(Box<str>, Box<str>)]>,
}

impl EpisodeFields {
    pub fn new(
        producer_id: &str,
        producer_role: &str,
        produced_for_id: &str,
        episode_type: &str,
        created_at_micros: i64,
        metadata: &BTreeMap<String, String>,
    ) -> EpisodeFields {
        EpisodeFields {
            producer_id: producer_id.into(),
            producer_role: producer_role.into(),
            produced_for_id: produced_for_id.into(),
            episode_type: episode_type.into(),
            created_at_micros,
            metadata: metadata
                .iter()
                .map(|(k, v)| (k.as_str().into(), v.as_str().into()))
                .collect(),
        }
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        use super::heap::{boxed, boxed_str};
        boxed_str(&self.producer_id)
            + boxed_str(&self.producer_role)
            + boxed_str(&self.produced_for_id)
            + boxed_str(&self.episode_type)
            + boxed(&self.metadata[..])
            + self
                .metadata
                .iter()
                .map(|(k, v)| boxed_str(k) + boxed_str(v))
                .sum::<usize>()
    }

    pub fn of_new(e: &NewEpisode) -> EpisodeFields {
        EpisodeFields::new(
            &e.producer_id,
            &e.producer_role,
            &e.produced_for_id,
            &e.episode_type,
            e.created_at_micros,
            &e.metadata,
        )
    }

    pub fn of(e: &Episode) -> EpisodeFields {
        EpisodeFields::new(
            &e.producer_id,
            &e.producer_role,
            &e.produced_for_id,
            &e.episode_type,
            e.created_at_micros,
            &e.metadata,
        )
    }
}

/// Empty optional text is absent, as the stores keep it.
fn text(value: &str) -> Option<Value<'_>> {
    (!value.is_empty()).then_some(Value::Text(value))
}

impl Fields for EpisodeFields {
    fn get(&self, field: &Field) -> Option<Value<'_>> {
        match field {
            Field::Metadata(key) => self
                .metadata
                .binary_search_by(|(k, _)| k.as_ref().cmp(key.as_str()))
                .ok()
                .map(|i| Value::Text(&self.metadata[i].1)),
            Field::System(SystemField::ProducerId) => text(&self.producer_id),
            Field::System(SystemField::ProducerRole) => text(&self.producer_role),
            Field::System(SystemField::ProducedForId) => text(&self.produced_for_id),
            Field::System(SystemField::EpisodeType) => text(&self.episode_type),
            Field::System(SystemField::CreatedAt) => Some(Value::Time(self.created_at_micros)),
            // Feature fields: episode filters never parse them.
            Field::System(_) => None,
        }
    }
}
