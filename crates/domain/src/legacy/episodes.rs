//! v1 episodes as v2 episodes of the group's project. `uuid` is the uid, `timestamp`
//! the created_at, `producer_id` / `produced_for_id` the v2 fields; the session, the
//! free-text episode and content types and the JSON `user_metadata` live under the
//! reserved metadata keys (`super::keys`), and an object's top-level scalar fields are
//! plain metadata too, so v2 filters and v1 filters can name them.

use std::collections::BTreeMap;

use super::sessions::as_group_error;
use super::{Context, Legacy, check_context, keys, session_scope};
use crate::episodic::{MessageInput, SearchInput};
use crate::error::{Error, FieldViolation, Result, Violations};
use crate::memory::{ListInput, Listed, MemoryKind};
use crate::model::Episode;
use crate::model::episode::{CONTENT_TYPE_STRING, EPISODE_TYPE_MESSAGE};
use memmachine_core::access::{OrgAccess, ProjectAccess};

/// Longest episode or content type, in bytes.
const MAX_TYPE_BYTES: usize = 128;

/// A v1 episode as a client sends it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EpisodeInput {
    /// Empty: a new uid.
    pub uuid: String,
    pub episode_type: String,
    pub content_type: String,
    pub content: String,
    /// Unix seconds and nanoseconds; `None` means now.
    pub timestamp: Option<(i64, i32)>,
    /// Empty or the context's.
    pub group_id: String,
    pub session_id: String,
    pub producer_id: String,
    pub produced_for_id: String,
    pub user_metadata: serde_json::Value,
    /// As v2's `idempotency_key`; empty: none.
    pub idempotency_key: Option<String>,
}

/// A stored episode as v1 shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct LegacyEpisode {
    pub uuid: uuid::Uuid,
    pub episode_type: String,
    pub content_type: String,
    pub content: String,
    pub created_at_micros: i64,
    pub group_id: String,
    /// Empty for an episode added through v2 without `v1.session_id`.
    pub session_id: String,
    pub producer_id: String,
    pub produced_for_id: String,
    pub user_metadata: serde_json::Value,
}

/// The v2 message of a validated v1 episode of session `session_id`.
fn to_message(session_id: &str, e: EpisodeInput, uid: Option<uuid::Uuid>) -> MessageInput {
    let mut metadata = BTreeMap::new();
    if let serde_json::Value::Object(fields) = &e.user_metadata {
        for (key, value) in fields {
            let text = match value {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => n.to_string(),
                serde_json::Value::Bool(b) => b.to_string(),
                _ => continue,
            };
            if !key.is_empty() && !key.starts_with(keys::PREFIX) {
                metadata.insert(key.clone(), text);
            }
        }
    }
    metadata.insert(keys::SESSION_ID.into(), session_id.into());
    if !e.episode_type.is_empty() {
        metadata.insert(keys::EPISODE_TYPE.into(), e.episode_type);
    }
    if !e.content_type.is_empty() {
        metadata.insert(keys::CONTENT_TYPE.into(), e.content_type);
    }
    if !e.user_metadata.is_null() {
        metadata.insert(keys::USER_METADATA.into(), e.user_metadata.to_string());
    }
    MessageInput {
        uid,
        content: e.content,
        producer: e.producer_id,
        produced_for: e.produced_for_id,
        timestamp: e.timestamp,
        role: String::new(),
        metadata,
        expires_at: None,
        idempotency_key: e.idempotency_key,
    }
}

/// A stored v2 episode of group `group_id` as v1 shows it.
pub fn from_episode(group_id: &str, mut e: Episode) -> LegacyEpisode {
    let mut take = |key: &str| e.metadata.remove(key);
    let session_id = take(keys::SESSION_ID).unwrap_or_default();
    let episode_type = take(keys::EPISODE_TYPE);
    let content_type = take(keys::CONTENT_TYPE);
    let stored = take(keys::USER_METADATA).and_then(|json| serde_json::from_str(&json).ok());
    let user_metadata = stored.unwrap_or_else(|| {
        // Added through v2: its own metadata, reserved keys left out.
        let fields: serde_json::Map<String, serde_json::Value> = e
            .metadata
            .iter()
            .filter(|(k, _)| !k.starts_with(keys::PREFIX))
            .map(|(k, v)| (k.clone(), v.clone().into()))
            .collect();
        if fields.is_empty() {
            serde_json::Value::Null
        } else {
            fields.into()
        }
    });
    LegacyEpisode {
        uuid: e.uid,
        episode_type: episode_type.unwrap_or(if e.episode_type.is_empty() {
            EPISODE_TYPE_MESSAGE.into()
        } else {
            e.episode_type
        }),
        content_type: content_type.unwrap_or(if e.content_type.is_empty() {
            CONTENT_TYPE_STRING.into()
        } else {
            e.content_type
        }),
        content: e.content,
        created_at_micros: e.created_at_micros,
        group_id: group_id.into(),
        session_id,
        producer_id: e.producer_id,
        produced_for_id: e.produced_for_id,
        user_metadata,
    }
}

/// The v2 validation's field names said in v1's (`messages[2].producer` →
/// `episodes[2].producer_id`).
fn v1_fields(err: Error) -> Error {
    let Error::InvalidArgument(violations) = err else {
        return err;
    };
    let rename = |field: &str| -> String {
        let Some(rest) = field.strip_prefix("messages") else {
            return field.to_string();
        };
        let renamed = rest
            .replace(".producer", ".producer_id")
            .replace(".produced_for", ".produced_for_id")
            .replace(".metadata", ".user_metadata");
        format!("episodes{renamed}")
    };
    Error::InvalidArgument(
        violations
            .into_iter()
            .map(|v| FieldViolation {
                field: rename(&v.field),
                description: v.description,
            })
            .collect(),
    )
}

impl Legacy {
    /// Opens the context's session if needed and stores the episodes, all or none.
    /// Uids in input order.
    pub async fn add_episodes(
        &self,
        org: &OrgAccess,
        ctx: &Context,
        episodes: Vec<EpisodeInput>,
    ) -> Result<Vec<uuid::Uuid>> {
        let mut violations = Violations::default();
        // Bounded before any episode is looked at.
        if episodes.len() > self.limits.max_messages_per_add {
            return Err(Error::invalid(
                "episodes",
                format!(
                    "at most {} per call (--max-messages-per-add)",
                    self.limits.max_messages_per_add
                ),
            ));
        }
        let key = check_context(org, &mut violations, ctx, true);
        let mut seen = std::collections::HashMap::new();
        let mut uids = Vec::with_capacity(episodes.len());
        for (i, e) in episodes.iter().enumerate() {
            let field = |name: &str| format!("episodes[{i}].{name}");
            if !e.group_id.is_empty() && e.group_id != ctx.group_id {
                violations.add(field("group_id"), "must be empty or the context's group_id");
            }
            if !e.session_id.is_empty() && e.session_id != ctx.session_id {
                violations.add(
                    field("session_id"),
                    "must be empty or the context's session_id",
                );
            }
            for (name, value) in [
                ("episode_type", &e.episode_type),
                ("content_type", &e.content_type),
            ] {
                if value.len() > MAX_TYPE_BYTES {
                    violations.add(
                        field(name),
                        format!("must be at most {MAX_TYPE_BYTES} bytes"),
                    );
                }
            }
            let uid = match e.uuid.as_str() {
                "" => None,
                text => match uuid::Uuid::parse_str(text) {
                    Ok(uid) => {
                        if let Some(first) = seen.insert(uid, i) {
                            violations
                                .add(field("uuid"), format!("repeats episodes[{first}].uuid"));
                        }
                        Some(uid)
                    }
                    Err(_) => {
                        violations.add(field("uuid"), format!("{text:?} is not a UUID"));
                        None
                    }
                },
            };
            uids.push(uid);
        }
        violations.into_result()?;
        let key = key.expect("validated");
        let session = self.open_session(org, ctx, None).await?;
        let messages = episodes
            .into_iter()
            .zip(uids)
            .map(|(e, uid)| to_message(&session.session_id, e, uid))
            .collect();
        // Every enabled type, as a v2 add without types: with a language model, v1
        // episodes feed semantic memory too (v1's profile memory).
        let added = self
            .memories
            .add(&key, &[], messages)
            .await
            .map_err(v1_fields)?;
        Ok(added.into_iter().map(|a| a.uid).collect())
    }

    /// The episodes of the session (of the group when the context names none) ranked
    /// for `query`, best first.
    pub async fn search_episodes(
        &self,
        org: &OrgAccess,
        ctx: &Context,
        query: &str,
        limit: Option<i32>,
        filter: &str,
    ) -> Result<Vec<(LegacyEpisode, f64)>> {
        let mut violations = Violations::default();
        let key = check_context(org, &mut violations, ctx, false);
        // Checked with the context, so that one answer names every mistake.
        violations.check(crate::episodic::parse_filter("filter", filter));
        violations.into_result()?;
        let key = key.expect("validated");
        let input = SearchInput {
            query: query.to_string(),
            top_k: limit,
            filter: filter.to_string(),
            expand_context: 0,
            score_threshold: None,
            scope: session_scope(&ctx.session_id),
            blank_query_ranks_nothing: false,
            as_of: None,
            rank_together: false,
            semantic_weight: None,
            explain: false,
        };
        let found = self
            .memories
            .search(&key, &[MemoryKind::Episodic], input, &BTreeMap::new())
            .await
            .map_err(|err| match err {
                Error::InvalidArgument(mut v) => {
                    for violation in &mut v {
                        if violation.field == "top_k" {
                            violation.field = "limit".into();
                        }
                    }
                    Error::InvalidArgument(v)
                }
                other => as_group_error(&ctx.group_id)(other),
            })?;
        Ok(found
            .episodic
            .long_term
            .into_iter()
            .map(|hit| (from_episode(&ctx.group_id, hit.episode), hit.score))
            .collect())
    }

    /// One page of the session's (or group's) episodes in the order they were added.
    pub async fn list_episodes(
        &self,
        org: &OrgAccess,
        ctx: &Context,
        page_size: Option<i32>,
        page_token: &str,
        filter: &str,
    ) -> Result<(Vec<LegacyEpisode>, String)> {
        let mut violations = Violations::default();
        let key = check_context(org, &mut violations, ctx, false);
        violations.check(crate::episodic::parse_filter("filter", filter));
        violations.into_result()?;
        let key = key.expect("validated");
        let input = ListInput {
            kind: Some(MemoryKind::Episodic),
            page_size,
            page_token: page_token.to_string(),
            page_num: 0,
            filter: filter.to_string(),
            scope: session_scope(&ctx.session_id),
            set_metadata: BTreeMap::new(),
            as_of: None,
        };
        let listed = self
            .memories
            .list(&key, input)
            .await
            .map_err(as_group_error(&ctx.group_id))?;
        let Listed::Episodes(episodes, next) = listed else {
            return Err(Error::Internal(
                "an episodic listing returned features".into(),
            ));
        };
        Ok((
            episodes
                .into_iter()
                .map(|e| from_episode(&ctx.group_id, e))
                .collect(),
            next,
        ))
    }

    /// Deletes these episodes of the session (of the group when the context names
    /// none), all or none: one not there is `NotFound`.
    pub async fn delete_episodes(
        &self,
        org: &OrgAccess,
        ctx: &Context,
        uuids: &[String],
    ) -> Result<u64> {
        let mut violations = Violations::default();
        let key = check_context(org, &mut violations, ctx, false);
        if uuids.is_empty() {
            violations.add(
                "uuids",
                "must name at least one episode (or set whole_session)",
            );
        } else {
            // Bounded before any is parsed or read.
            self.limits.ids("uuids", uuids.len())?;
        }
        let mut parsed = Vec::with_capacity(uuids.len());
        for (i, id) in uuids.iter().enumerate() {
            match uuid::Uuid::parse_str(id) {
                Ok(uid) => parsed.push(uid),
                Err(_) => violations.add(format!("uuids[{i}]"), format!("{id:?} is not a UUID")),
            }
        }
        violations.into_result()?;
        let key = key.expect("validated");
        let found = self
            .memories
            .get_episodes(&key, &parsed)
            .await
            .map_err(as_group_error(&ctx.group_id))?;
        let missing: Vec<String> = parsed
            .iter()
            .zip(&found)
            .filter(|(_, e)| match e {
                None => true,
                Some(e) => {
                    !ctx.session_id.is_empty()
                        && e.metadata.get(keys::SESSION_ID) != Some(&ctx.session_id)
                }
            })
            .map(|(uid, _)| uid.to_string())
            .collect();
        if !missing.is_empty() {
            return Err(Error::NotFound(format!(
                "no such episode in this {}: {}",
                if ctx.session_id.is_empty() {
                    "group"
                } else {
                    "session"
                },
                missing.join(", ")
            )));
        }
        let ids: Vec<String> = parsed.iter().map(|u| u.to_string()).collect();
        self.memories
            .delete_episodes(&key, &ids)
            .await
            .map_err(|err| match err {
                Error::InvalidArgument(mut v) => {
                    for violation in &mut v {
                        violation.field = violation.field.replace("episode_ids", "uuids");
                    }
                    Error::InvalidArgument(v)
                }
                other => other,
            })
    }

    /// Deletes every episode of the context's session.
    pub async fn delete_whole_session(&self, org: &OrgAccess, ctx: &Context) -> Result<u64> {
        let mut violations = Violations::default();
        let key = check_context(org, &mut violations, ctx, true);
        violations.into_result()?;
        let key = key.expect("validated");
        self.projects
            .get(&key)
            .await
            .map_err(as_group_error(&ctx.group_id))?;
        self.delete_session_episodes(&key, &ctx.session_id).await
    }

    /// Deletes the episodes of one session, a page at a time (not atomic: a session may
    /// be larger than one transaction should be).
    pub(crate) async fn delete_session_episodes(
        &self,
        key: &ProjectAccess,
        session_id: &str,
    ) -> Result<u64> {
        let mut deleted = 0;
        loop {
            let input = ListInput {
                kind: Some(MemoryKind::Episodic),
                page_size: Some(self.limits.max_page_size as i32),
                page_token: String::new(),
                page_num: 0,
                filter: String::new(),
                // Even an empty id names one session, never the whole group.
                scope: Some(super::session_episodes(session_id)),
                set_metadata: BTreeMap::new(),
                as_of: None,
            };
            let Listed::Episodes(page, _) = self.memories.list(key, input).await? else {
                return Err(Error::Internal(
                    "an episodic listing returned features".into(),
                ));
            };
            if page.is_empty() {
                return Ok(deleted);
            }
            let ids: Vec<String> = page.iter().map(|e| e.uid.to_string()).collect();
            deleted += self.memories.delete_episodes(key, &ids).await?;
        }
    }
}
