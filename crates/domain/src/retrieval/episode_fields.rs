//! The filterable fields of an episode, kept compactly beside its index entry so that
//! search filters before the cut to `top_k` without touching the store. Its strings
//! repeat across episodes (a few producers and roles, metadata keys, often values), so
//! they are interned: one copy each, shared.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex};

use super::heap;
use crate::model::filter::{Field, SystemField};
use crate::model::filter_eval::{Fields, Value};
use crate::model::{Episode, NewEpisode};

/// A metadata key and value.
pub(crate) type Pair = (Arc<str>, Arc<str>);

#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeFields {
    producer_id: Arc<str>,
    producer_role: Arc<str>,
    produced_for_id: Arc<str>,
    episode_type: Arc<str>,
    created_at_micros: i64,
    /// Sorted by key.
    metadata: Box<[(Arc<str>, Arc<str>)]>,
}

/// Distinct strings interned at most: values unique to each episode (an id in the
/// metadata) would otherwise grow it without end; past this they are not shared.
const INTERNED_MAX: usize = 1 << 16;

#[derive(Default)]
struct Interner {
    strings: HashSet<Arc<str>>,
    /// Strings not interned since the last purge of those no episode holds any more.
    misses: usize,
}

static INTERNER: LazyLock<Mutex<Interner>> = LazyLock::new(Mutex::default);

/// The shared copy of `s`.
pub(crate) fn intern(s: &str) -> Arc<str> {
    let mut interner = INTERNER.lock().expect("interner");
    if let Some(found) = interner.strings.get(s) {
        return found.clone();
    }
    let shared: Arc<str> = s.into();
    if interner.strings.len() >= INTERNED_MAX {
        interner.misses += 1;
        // A purge walks the whole set: at most once per that many misses.
        if interner.misses < INTERNED_MAX {
            return shared;
        }
        interner.misses = 0;
        interner.strings.retain(|s| Arc::strong_count(s) > 1);
        if interner.strings.len() >= INTERNED_MAX {
            return shared;
        }
    }
    interner.strings.insert(shared.clone());
    shared
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
            producer_id: intern(producer_id),
            producer_role: intern(producer_role),
            produced_for_id: intern(produced_for_id),
            episode_type: intern(episode_type),
            created_at_micros,
            metadata: metadata
                .iter()
                .map(|(k, v)| (intern(k), intern(v)))
                .collect(),
        }
    }

    /// Its strings (producer, role, produced for, type), time and metadata, as a
    /// segment holds them.
    pub(crate) fn parts(&self) -> ([&Arc<str>; 4], i64, &[Pair]) {
        (
            [
                &self.producer_id,
                &self.producer_role,
                &self.produced_for_id,
                &self.episode_type,
            ],
            self.created_at_micros,
            &self.metadata,
        )
    }

    /// Fields from `parts` (strings already interned; metadata sorted by key).
    pub(crate) fn from_parts(
        [producer_id, producer_role, produced_for_id, episode_type]: [Arc<str>; 4],
        created_at_micros: i64,
        metadata: Box<[Pair]>,
    ) -> EpisodeFields {
        EpisodeFields {
            producer_id,
            producer_role,
            produced_for_id,
            episode_type,
            created_at_micros,
            metadata,
        }
    }

    /// Heap bytes these fields hold, each shared string's split among its holders.
    pub fn heap_bytes(&self) -> usize {
        let strings = [
            &self.producer_id,
            &self.producer_role,
            &self.produced_for_id,
            &self.episode_type,
        ];
        strings.into_iter().map(heap::interned_str).sum::<usize>()
            + size_of_val(&*self.metadata)
            + self
                .metadata
                .iter()
                .map(|(k, v)| heap::interned_str(k) + heap::interned_str(v))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_strings_are_held_once() {
        let metadata = BTreeMap::from([("sample_id".to_string(), "conv-26".to_string())]);
        let a = EpisodeFields::new("Caroline", "user", "", "message", 1, &metadata);
        let b = EpisodeFields::new("Caroline", "user", "", "message", 2, &metadata);
        assert!(Arc::ptr_eq(&a.producer_id, &b.producer_id));
        assert!(Arc::ptr_eq(&a.metadata[0].1, &b.metadata[0].1));
        // Shared among holders: two episodes together hold less than twice one alone.
        assert!(a.heap_bytes() > size_of::<(Arc<str>, Arc<str>)>());
        let alone = EpisodeFields::new("Zed-unique-9f2", "r-unique-9f2", "", "", 0, &metadata);
        assert!(a.heap_bytes() < alone.heap_bytes());
    }
}
