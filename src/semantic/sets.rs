//! Which sets a message lands in, and how a set's id is derived.
//!
//! A message lands in its org's set, its project's set, its producer's user set (when
//! the producer speaks as a user: assistant and system messages are context, not the
//! subject) and the set of every visible set type whose metadata tags it all carries.
//! A set id is derived from the kind, the org, the project (unless org-level) and the
//! sorted tag keys with their values, hashed so any metadata value makes a valid id.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::model::{NewSet, SetKind, SetType};
use crate::model::ProjectKey;

/// The tag of a user set.
pub const PRODUCER_TAG: &str = "producer_id";

/// The deterministic id of a set.
pub fn set_id(
    kind: SetKind,
    org_level: bool,
    key: &ProjectKey,
    tags: &BTreeMap<String, String>,
) -> String {
    let mut hash = Sha256::new();
    for part in [kind.as_str(), &key.org_id] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    if !org_level {
        hash.update(key.project_id.as_bytes());
    }
    hash.update([0]);
    for (k, v) in tags {
        hash.update(k.as_bytes());
        hash.update([0x1f]);
        hash.update(v.as_bytes());
        hash.update([0]);
    }
    let digest = hash.finalize();
    let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    let prefix = match kind {
        SetKind::Org => "org",
        SetKind::Project => "project",
        SetKind::User => "user",
        SetKind::Custom => "other",
    };
    format!("mem_{prefix}_set_{hex}")
}

fn new_set(
    kind: SetKind,
    org_level: bool,
    key: &ProjectKey,
    tags: BTreeMap<String, String>,
    set_type: Option<i64>,
) -> NewSet {
    NewSet {
        set_id: set_id(kind, org_level, key, &tags),
        kind,
        org_level,
        set_type,
        tags,
    }
}

pub fn org_set(key: &ProjectKey) -> NewSet {
    new_set(SetKind::Org, true, key, BTreeMap::new(), None)
}

pub fn project_set(key: &ProjectKey) -> NewSet {
    new_set(SetKind::Project, false, key, BTreeMap::new(), None)
}

pub fn user_set(key: &ProjectKey, producer: &str) -> NewSet {
    let tags = BTreeMap::from([(PRODUCER_TAG.to_string(), producer.to_string())]);
    new_set(SetKind::User, false, key, tags, None)
}

/// The set of `set_type` selected by `metadata`, if it carries every tag of the type.
pub fn typed_set(
    key: &ProjectKey,
    set_type: &SetType,
    metadata: &BTreeMap<String, String>,
) -> Option<NewSet> {
    let mut tags = BTreeMap::new();
    for tag in &set_type.tags {
        tags.insert(tag.clone(), metadata.get(tag)?.clone());
    }
    Some(new_set(
        SetKind::Custom,
        set_type.is_org_level,
        key,
        tags,
        Some(set_type.internal_id),
    ))
}

/// The set `GetSetId` names: the org or project set without tags, the user set for
/// exactly `producer_id`, else a set of the given tags (of the set type with the same
/// level and tags, when there is one).
pub fn requested_set(
    key: &ProjectKey,
    is_org_level: bool,
    tags: &BTreeMap<String, String>,
    set_types: &[SetType],
) -> NewSet {
    if tags.is_empty() {
        return if is_org_level {
            org_set(key)
        } else {
            project_set(key)
        };
    }
    if !is_org_level && tags.len() == 1 && tags.contains_key(PRODUCER_TAG) {
        return user_set(key, &tags[PRODUCER_TAG]);
    }
    let keys: Vec<&String> = tags.keys().collect();
    let set_type = set_types
        .iter()
        .find(|t| t.is_org_level == is_org_level && t.tags.iter().collect::<Vec<_>>() == keys);
    new_set(
        SetKind::Custom,
        is_org_level,
        key,
        tags.clone(),
        set_type.map(|t| t.internal_id),
    )
}

/// Whether a message with this role is about its producer (a user speaking).
pub fn speaks_as_user(role: &str) -> bool {
    !matches!(
        role.to_ascii_lowercase().as_str(),
        "assistant" | "system" | "tool"
    )
}

/// The metadata a message selects sets with: its own, with `producer_id` from its
/// producer unless it sets one.
pub fn selecting_metadata(
    producer: &str,
    metadata: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut selecting = metadata.clone();
    selecting
        .entry(PRODUCER_TAG.to_string())
        .or_insert_with(|| producer.to_string());
    selecting
}

/// Every set a message lands in.
pub fn sets_of_message(
    key: &ProjectKey,
    producer: &str,
    role: &str,
    metadata: &BTreeMap<String, String>,
    set_types: &[SetType],
) -> Vec<NewSet> {
    let selecting = selecting_metadata(producer, metadata);
    let mut sets = vec![org_set(key), project_set(key)];
    if speaks_as_user(role) && !producer.is_empty() {
        sets.push(user_set(key, producer));
    }
    sets.extend(
        set_types
            .iter()
            .filter_map(|t| typed_set(key, t, &selecting)),
    );
    sets
}

/// The set ids `set_metadata` selects for search and listing: the org and project sets,
/// the user set of its `producer_id`, and the set of every set type whose tags it
/// carries.
pub fn selected_ids(
    key: &ProjectKey,
    set_metadata: &BTreeMap<String, String>,
    set_types: &[SetType],
) -> Vec<String> {
    let mut ids = vec![org_set(key).set_id, project_set(key).set_id];
    if let Some(producer) = set_metadata.get(PRODUCER_TAG) {
        ids.push(user_set(key, producer).set_id);
    }
    ids.extend(
        set_types
            .iter()
            .filter_map(|t| typed_set(key, t, set_metadata))
            .map(|s| s.set_id),
    );
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(org: &str, project: &str) -> ProjectKey {
        ProjectKey::parse(org, project).unwrap()
    }

    #[test]
    fn ids_are_deterministic_and_scoped() {
        let a = key("acme", "one");
        assert_eq!(user_set(&a, "alice").set_id, user_set(&a, "alice").set_id);
        assert_ne!(
            user_set(&a, "alice").set_id,
            user_set(&key("acme", "two"), "alice").set_id
        );
        assert_ne!(
            user_set(&a, "alice").set_id,
            user_set(&key("other", "one"), "alice").set_id
        );
        // Org sets are the same for every project of the org, and only for it.
        assert_eq!(org_set(&a).set_id, org_set(&key("acme", "two")).set_id);
        assert_ne!(org_set(&a).set_id, org_set(&key("other", "one")).set_id);
        assert!(user_set(&a, "alice").set_id.starts_with("mem_user_set_"));
        crate::model::ids::validate_id("set_id", &user_set(&a, "a b/c\n").set_id).unwrap();
    }

    #[test]
    fn assistant_messages_have_no_user_set() {
        let k = key("acme", "one");
        let none = BTreeMap::new();
        assert_eq!(sets_of_message(&k, "bot", "assistant", &none, &[]).len(), 2);
        assert_eq!(sets_of_message(&k, "alice", "user", &none, &[]).len(), 3);
    }
}
