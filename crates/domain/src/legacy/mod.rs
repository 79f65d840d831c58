//! The legacy v1 API of the MemMachine SDK, mapped onto the v2 hierarchy. A v1 group G
//! is the v2 project `(RESERVED_ORG, G)`; a v1 episode is a v2 episode of it, with what
//! v2 has no field for under reserved metadata keys (`keys`); sessions and group
//! configurations are rows of `store::LegacyStore`, deleted with the project. Every
//! episode call goes through the same `Memories` calls as v2, so the two cannot drift.

pub mod episodes;
pub mod sessions;
/// The v1 rows and their storage trait, defined with the storage contract.
pub mod store {
    pub use memmachine_core::store::legacy::*;
}

use std::sync::Arc;

use crate::error::{Result, Violations};
use crate::limits::Limits;
use crate::memory::Memories;
use crate::model::ProjectKey;
use crate::model::ids::validate_id;
use crate::projects::Projects;
use crate::store::Store;
use memmachine_core::access::{OrgAccess, ProjectAccess};

pub use episodes::{EpisodeInput, LegacyEpisode};

/// The org holding every v1 group. ':' keeps it apart from ordinary org names while
/// staying a valid id, so v2 calls (and org keys) can name it.
pub const RESERVED_ORG: &str = "memmachine:v1";

/// Reserved v2 metadata keys of v1 episodes (filters name them `m.v1.session_id`).
pub mod keys {
    pub const PREFIX: &str = "v1.";
    pub const SESSION_ID: &str = "v1.session_id";
    pub const EPISODE_TYPE: &str = "v1.episode_type";
    pub const CONTENT_TYPE: &str = "v1.content_type";
    /// The JSON text of the episode's `user_metadata`.
    pub const USER_METADATA: &str = "v1.user_metadata";
}

/// Longest session, agent or user id, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Most agent or user ids in one context or group list.
pub const MAX_MEMBERS: usize = 1000;

/// A `MemoryContext`: the memory instance is `(group_id, session_id)`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Context {
    pub group_id: String,
    pub agent_ids: Vec<String>,
    pub user_ids: Vec<String>,
    pub session_id: String,
}

/// The v1 domain: sessions, groups and episodes over the v2 domain.
#[derive(Clone)]
pub struct Legacy {
    projects: Projects,
    memories: Memories,
    store: Arc<dyn Store>,
    limits: Limits,
}

impl Legacy {
    pub fn new(
        projects: Projects,
        memories: Memories,
        store: Arc<dyn Store>,
        limits: Limits,
    ) -> Legacy {
        Legacy {
            projects,
            memories,
            store,
            limits,
        }
    }
}

/// The project of group `group_id`; `field` names it in the error.
pub fn group_key(org: &OrgAccess, field: &str, group_id: &str) -> Result<ProjectAccess> {
    validate_id(field, group_id)?;
    org.project_key(ProjectKey {
        org_id: RESERVED_ORG.into(),
        project_id: group_id.into(),
    })
}

/// A session, agent or user id: 1 to `MAX_NAME_BYTES` bytes without control characters.
pub fn check_name(violations: &mut Violations, field: &str, name: &str) {
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        violations.add(field, format!("must be 1 to {MAX_NAME_BYTES} bytes"));
    } else if name.chars().any(char::is_control) {
        violations.add(field, "must not hold control characters");
    }
}

/// Validates a context (fields under `context.`): the group always, the session when
/// `session_required`, or else when given.
pub(crate) fn check_context(
    org: &OrgAccess,
    violations: &mut Violations,
    ctx: &Context,
    session_required: bool,
) -> Option<ProjectAccess> {
    let key = violations.check(group_key(org, "context.group_id", &ctx.group_id));
    if session_required || !ctx.session_id.is_empty() {
        check_name(violations, "context.session_id", &ctx.session_id);
    }
    check_members(violations, "context.agent_id", &ctx.agent_ids);
    check_members(violations, "context.user_id", &ctx.user_ids);
    key
}

/// A list of agent or user ids: at most `MAX_MEMBERS`, each a valid name.
pub(crate) fn check_members(violations: &mut Violations, field: &str, members: &[String]) {
    if members.len() > MAX_MEMBERS {
        violations.add(field, format!("at most {MAX_MEMBERS} ids"));
        return;
    }
    for (i, member) in members.iter().enumerate() {
        check_name(violations, &format!("{field}[{i}]"), member);
    }
}

/// The episodes of session `session_id`: a value the domain ANDs onto the caller's
/// parsed filter, never filter text.
pub(crate) fn session_episodes(session_id: &str) -> crate::model::filter::Expr {
    crate::model::filter::equals(
        crate::model::filter::Field::Metadata(keys::SESSION_ID.to_string()),
        session_id,
    )
}

/// A context's narrowing: its session's episodes, or none (the whole group) when it
/// names no session.
pub(crate) fn session_scope(session_id: &str) -> Option<crate::model::filter::Expr> {
    (!session_id.is_empty()).then(|| session_episodes(session_id))
}
