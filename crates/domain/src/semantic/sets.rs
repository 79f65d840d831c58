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
use crate::model::{ProjectKey, SetTypeId};

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
    set_type: Option<SetTypeId>,
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

/// The tag holding the id a caller gave a set it named itself.
const NAME_TAG: &str = "set_name";

/// The prefixes of MemMachine's set ids (`mem_{kind}_...`), by which a client names a set
/// itself.
const MEMMACHINE_PREFIXES: [&str; 4] = [
    "mem_set_type_",
    "mem_project_set_",
    "mem_user_set_",
    "mem_other_set_",
];

/// The set of the caller's project that `given` names when no stored set has that id:
/// this server's id of the project's own org, project set; MemMachine's id of the org,
/// project or user set of the caller's org and project (`mem_project_set_org_{org}_project_
/// {project}_0_{hash}__`, `mem_set_type_org_{org}_0_{hash}__`, `mem_user_set_org_{org}_1_
/// {hash}__producer_id_{user}`); any other id of MemMachine's form, a set of its own in the
/// caller's project (another org's id never reaches that org). `None`: not a set id.
pub fn named_set(key: &ProjectKey, given: &str) -> Option<NewSet> {
    let (org, project) = (org_set(key), project_set(key));
    if given == org.set_id {
        return Some(org);
    }
    if given == project.set_id {
        return Some(project);
    }
    // This server's own ids are not names: one of another project is `NotFound`.
    if !MEMMACHINE_PREFIXES.iter().any(|p| given.starts_with(p)) || is_own_form(given) {
        return None;
    }
    let hashed = |rest: &str, count: &str| -> Option<String> {
        let rest = rest.strip_prefix(count)?;
        let (hash, tags) = rest.split_at_checked(12)?;
        hash.bytes()
            .all(|b| b.is_ascii_hexdigit())
            .then(|| tags.strip_prefix("__").map(str::to_string))?
    };
    let org_part = format!("org_{}_", key.org_id);
    if let Some(rest) = given.strip_prefix(&format!(
        "mem_project_set_{org_part}project_{}_",
        key.project_id
    )) && hashed(rest, "0_").is_some_and(|tags| tags.is_empty())
    {
        return Some(project);
    }
    if let Some(rest) = given.strip_prefix(&format!("mem_set_type_{org_part}"))
        && hashed(rest, "0_").is_some_and(|tags| tags.is_empty())
    {
        return Some(org);
    }
    if let Some(rest) = given.strip_prefix(&format!("mem_user_set_{org_part}"))
        && let Some(user) =
            hashed(rest, "1_").and_then(|t| t.strip_prefix("producer_id_").map(str::to_string))
        && !user.is_empty()
    {
        return Some(user_set(key, &user));
    }
    let tags = BTreeMap::from([(NAME_TAG.to_string(), given.to_string())]);
    Some(new_set(SetKind::Custom, false, key, tags, None))
}

/// Whether `id` has the form of [`set_id`]'s ids.
fn is_own_form(id: &str) -> bool {
    ["org", "project", "user", "other"].iter().any(|kind| {
        id.strip_prefix(&format!("mem_{kind}_set_"))
            .is_some_and(|hex| hex.len() == 24 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
    })
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

    #[test]
    fn a_set_named_by_memmachines_convention_is_one_of_the_callers_project() {
        let a = key("acme", "crm");
        let named = |id: &str| named_set(&a, id).map(|s| s.set_id);
        let project = "mem_project_set_org_acme_project_crm_0_46b9dd2b0ba8__";
        assert_eq!(named(project), Some(project_set(&a).set_id));
        assert_eq!(
            named("mem_set_type_org_acme_0_46b9dd2b0ba8__"),
            Some(org_set(&a).set_id)
        );
        assert_eq!(
            named("mem_user_set_org_acme_1_3491f35dd96f__producer_id_alice"),
            Some(user_set(&a, "alice").set_id)
        );
        assert_eq!(named(&project_set(&a).set_id), Some(project_set(&a).set_id));
        // Another org's or project's id, or a name of the caller's own: a set of the
        // caller's project, never the other one's.
        let foreign = "mem_project_set_org_globex_project_crm_0_46b9dd2b0ba8__";
        let made = named(foreign).unwrap();
        assert_ne!(made, project_set(&key("globex", "crm")).set_id);
        assert_ne!(
            made,
            named_set(&key("globex", "crm"), foreign).unwrap().set_id
        );
        assert_ne!(named("mem_other_set_mine").unwrap(), made);
        assert_eq!(named("whatever"), None);
        assert_eq!(named(&project_set(&key("acme", "other")).set_id), None);
    }

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
