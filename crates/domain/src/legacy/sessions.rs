//! v1 sessions and groups. A group exists iff its project does: CreateGroup creates
//! it, and so does the first OpenSession of a group (v1 opens implicitly; inside the
//! reserved org only, so v2's rule that projects are never created implicitly holds
//! everywhere else).

use super::store::{GroupQuery, GroupRow, SessionQuery, SessionRow};
use super::{Context, Legacy, RESERVED_ORG, check_context, check_members, check_name, group_key};
use crate::error::{Error, Result, Violations};
use crate::model::ProjectKey;
use memmachine_core::access::{OrgAccess, ProjectAccess};

/// A group configuration as a client sends it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupInput {
    pub group_id: String,
    pub agent_list: Vec<String>,
    pub user_list: Vec<String>,
    /// A JSON object (anything else is refused).
    pub configuration: serde_json::Value,
}

/// What to list sessions by (each when non-empty).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionFilter {
    pub group_id: String,
    pub user_id: String,
    pub agent_id: String,
}

fn check_object(violations: &mut Violations, field: &str, value: &serde_json::Value) {
    if !(value.is_object() || value.is_null()) {
        violations.add(field, "must be a JSON object");
    }
}

fn object_or_empty(value: serde_json::Value) -> serde_json::Value {
    if value.is_null() {
        serde_json::json!({})
    } else {
        value
    }
}

fn session_not_found(group_id: &str, session_id: &str) -> Error {
    Error::NotFound(format!(
        "session {session_id:?} of group {group_id:?} does not exist"
    ))
}

fn group_not_found(group_id: &str) -> Error {
    Error::NotFound(format!("group {group_id:?} does not exist"))
}

/// A missing project said as a missing group; other errors unchanged.
pub(crate) fn as_group_error(group_id: &str) -> impl Fn(Error) -> Error + '_ {
    move |err| match err {
        Error::NotFound(_) => group_not_found(group_id),
        other => other,
    }
}

/// `field` as an optional member filter.
fn member(violations: &mut Violations, field: &str, value: &str) -> Option<String> {
    if value.is_empty() {
        return None;
    }
    check_name(violations, field, value);
    Some(value.to_string())
}

impl Legacy {
    /// The group's project, created when it does not exist yet.
    pub(crate) async fn ensure_group(&self, key: &ProjectAccess) -> Result<()> {
        match self.projects.get(key).await {
            Ok(_) => return Ok(()),
            Err(Error::NotFound(_)) => {}
            Err(err) => return Err(err),
        }
        let description = format!("MemMachine v1 group {}", key.project_id);
        match self
            .projects
            .create(key, &description, Default::default())
            .await
        {
            Ok(_) | Err(Error::AlreadyExists(_)) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Opens the context's session: the same one for every context naming its group
    /// and session id, with their agents and users merged.
    pub async fn open_session(
        &self,
        org: &OrgAccess,
        ctx: &Context,
        configuration: Option<serde_json::Value>,
    ) -> Result<SessionRow> {
        let mut violations = Violations::default();
        let key = check_context(org, &mut violations, ctx, true);
        if let Some(config) = &configuration {
            check_object(&mut violations, "configuration", config);
        }
        violations.into_result()?;
        let key = key.expect("validated");
        self.ensure_group(&key).await?;
        let configuration = configuration.map(object_or_empty);
        // A group deleted between the two calls: its project is gone, NotFound.
        self.store
            .open_legacy_session(
                &key,
                &ctx.session_id,
                &ctx.agent_ids,
                &ctx.user_ids,
                configuration.as_ref(),
            )
            .await
            .map_err(as_group_error(&ctx.group_id))
    }

    pub async fn get_session(
        &self,
        org: &OrgAccess,
        group_id: &str,
        session_id: &str,
    ) -> Result<SessionRow> {
        let mut violations = Violations::default();
        let key = violations.check(group_key(org, "group_id", group_id));
        check_name(&mut violations, "session_id", session_id);
        violations.into_result()?;
        self.store
            .get_legacy_session(&key.expect("validated"), session_id)
            .await?
            .ok_or_else(|| session_not_found(group_id, session_id))
    }

    /// One page of sessions, by group, user and agent, and the next page's token
    /// (`group_id/session_id` of the page's last session: group ids hold no '/').
    pub async fn list_sessions(
        &self,
        org: &OrgAccess,
        filter: &SessionFilter,
        page_size: Option<i32>,
        page_token: &str,
    ) -> Result<(Vec<SessionRow>, String)> {
        let mut violations = Violations::default();
        let project_id = (!filter.group_id.is_empty()).then(|| filter.group_id.clone());
        if let Some(group) = &project_id {
            violations.check(group_key(org, "group_id", group));
        }
        let user_id = member(&mut violations, "user_id", &filter.user_id);
        let agent_id = member(&mut violations, "agent_id", &filter.agent_id);
        let limit = violations.check(self.limits.page_size("page_size", page_size, 100));
        let after = match page_token {
            "" => None,
            token => {
                let parsed = token
                    .split_once('/')
                    .filter(|(g, s)| !g.is_empty() && !s.is_empty());
                if parsed.is_none() {
                    violations.add("page_token", "is not a token this server issued");
                }
                parsed.map(|(g, s)| (g.to_string(), s.to_string()))
            }
        };
        violations.into_result()?;
        let limit = limit.expect("validated");
        let query = SessionQuery {
            project_id,
            user_id,
            agent_id,
            after,
        };
        let mut sessions = self
            .store
            .list_legacy_sessions(RESERVED_ORG, &query, limit + 1)
            .await?;
        let next = crate::model::page::cut(&mut sessions, limit, |last| {
            format!("{}/{}", last.key.project_id, last.session_id)
        });
        Ok((sessions, next))
    }

    /// Deletes the session and its episodes; returns how many episodes went.
    pub async fn delete_session(
        &self,
        org: &OrgAccess,
        group_id: &str,
        session_id: &str,
    ) -> Result<u64> {
        let mut violations = Violations::default();
        let key = violations.check(group_key(org, "group_id", group_id));
        check_name(&mut violations, "session_id", session_id);
        violations.into_result()?;
        let key = key.expect("validated");
        self.projects
            .get(&key)
            .await
            .map_err(as_group_error(group_id))?;
        let deleted = self.delete_session_episodes(&key, session_id).await?;
        let existed = self.store.delete_legacy_session(&key, session_id).await?;
        if !existed && deleted == 0 {
            return Err(session_not_found(group_id, session_id));
        }
        Ok(deleted)
    }

    fn check_group(&self, org: &OrgAccess, group: &GroupInput) -> Result<ProjectAccess> {
        let mut violations = Violations::default();
        let key = violations.check(group_key(org, "group.group_id", &group.group_id));
        check_members(&mut violations, "group.agent_list", &group.agent_list);
        check_members(&mut violations, "group.user_list", &group.user_list);
        check_object(&mut violations, "group.configuration", &group.configuration);
        violations.into_result()?;
        Ok(key.expect("validated"))
    }

    fn group_row(key: ProjectKey, group: GroupInput) -> GroupRow {
        GroupRow {
            key,
            agent_list: super::store::merged(&group.agent_list, &[]),
            user_list: super::store::merged(&group.user_list, &[]),
            configuration: object_or_empty(group.configuration),
        }
    }

    /// Creates the group (its project) with this configuration.
    pub async fn create_group(&self, org: &OrgAccess, group: GroupInput) -> Result<GroupRow> {
        let key = self.check_group(org, &group)?;
        let description = format!("MemMachine v1 group {}", key.project_id);
        self.projects
            .create(&key, &description, Default::default())
            .await
            .map_err(|err| match err {
                Error::AlreadyExists(_) => {
                    Error::AlreadyExists(format!("group {:?} already exists", group.group_id))
                }
                other => other,
            })?;
        let row = Self::group_row(key.key().clone(), group);
        self.store.put_legacy_group(&row).await?;
        Ok(row)
    }

    /// Replaces the configuration of an existing group.
    pub async fn update_group(&self, org: &OrgAccess, group: GroupInput) -> Result<GroupRow> {
        let key = self.check_group(org, &group)?;
        let group_id = group.group_id.clone();
        let row = Self::group_row(key.key().clone(), group);
        self.store
            .put_legacy_group(&row)
            .await
            .map_err(as_group_error(&group_id))?;
        Ok(row)
    }

    pub async fn get_group(&self, org: &OrgAccess, group_id: &str) -> Result<GroupRow> {
        let key = group_key(org, "group_id", group_id)?;
        self.store
            .get_legacy_group(&key)
            .await?
            .ok_or_else(|| group_not_found(group_id))
    }

    /// One page of groups, by user and agent, and the next page's token (the last
    /// group id).
    pub async fn list_groups(
        &self,
        org: &OrgAccess,
        user_id: &str,
        agent_id: &str,
        page_size: Option<i32>,
        page_token: &str,
    ) -> Result<(Vec<GroupRow>, String)> {
        let mut violations = Violations::default();
        let user_id = member(&mut violations, "user_id", user_id);
        let agent_id = member(&mut violations, "agent_id", agent_id);
        let limit = violations.check(self.limits.page_size("page_size", page_size, 100));
        let after = (!page_token.is_empty()).then(|| page_token.to_string());
        if after.is_some() && group_key(org, "page_token", page_token).is_err() {
            violations.add("page_token", "is not a token this server issued");
        }
        violations.into_result()?;
        let limit = limit.expect("validated");
        let query = GroupQuery {
            user_id,
            agent_id,
            after,
        };
        let mut groups = self
            .store
            .list_legacy_groups(RESERVED_ORG, &query, limit + 1)
            .await?;
        let next = crate::model::page::cut(&mut groups, limit, |last| last.key.project_id.clone());
        Ok((groups, next))
    }

    /// Deletes the group's project, and with it every session, configuration and
    /// memory of the group.
    pub async fn delete_group(&self, org: &OrgAccess, group_id: &str) -> Result<()> {
        let key = group_key(org, "group_id", group_id)?;
        self.projects
            .delete(&key)
            .await
            .map_err(as_group_error(group_id))
    }
}
