//! Validation of incoming messages and their conversion to episodes.

use std::collections::BTreeMap;

use crate::error::{Result, Violations};
use crate::limits::Limits;
use crate::model::episode::{CONTENT_TYPE_STRING, EPISODE_TYPE_MESSAGE};
use crate::model::{Idempotency, NewEpisode};

/// Longest producer, produced-for or role, in bytes.
const MAX_NAME_BYTES: usize = 512;
/// Longest idempotency key, in bytes.
const MAX_IDEMPOTENCY_KEY_BYTES: usize = 256;
/// Longest metadata key, in bytes.
const MAX_METADATA_KEY_BYTES: usize = 256;
/// Most bytes of one message's metadata (keys and values).
const MAX_METADATA_BYTES: usize = 64 * 1024;

/// A message as a transport decoded it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MessageInput {
    /// The episode's uid when the client chose it (the v1 API does); `None`: a new one.
    pub uid: Option<uuid::Uuid>,
    pub content: String,
    pub producer: String,
    pub produced_for: String,
    /// When it was said, as Unix seconds and nanoseconds; `None` means now.
    pub timestamp: Option<(i64, i32)>,
    pub role: String,
    pub metadata: BTreeMap<String, String>,
    /// When it expires, as Unix seconds and nanoseconds; `None`: the project's retention decides.
    pub expires_at: Option<(i64, i32)>,
    /// The client's key: a message whose key the project stored within the window is
    /// not stored again. `None` (or empty): no key.
    pub idempotency_key: Option<String>,
}

pub(super) fn to_episodes(messages: Vec<MessageInput>, limits: &Limits) -> Result<Vec<NewEpisode>> {
    let mut violations = Violations::default();
    if messages.is_empty() {
        violations.add("messages", "must hold at least one message");
    }
    if messages.len() > limits.max_messages_per_add {
        violations.add(
            "messages",
            format!(
                "at most {} messages per call, got {}",
                limits.max_messages_per_add,
                messages.len()
            ),
        );
    }
    for (i, message) in messages.iter().enumerate() {
        check_message(&mut violations, i, message, limits);
    }
    violations.into_result()?;
    let now = chrono::Utc::now().timestamp_micros();
    let window_micros = limits.idempotency_window_micros();
    Ok(messages
        .into_iter()
        .map(|m| NewEpisode {
            // Time-ordered: new uids land at the end of the store's uid index, not at
            // random places in it (which slows large imports).
            uid: m.uid.unwrap_or_else(uuid::Uuid::now_v7),
            content: m.content,
            producer_id: if m.producer.is_empty() {
                "user".into()
            } else {
                m.producer
            },
            producer_role: m.role,
            produced_for_id: m.produced_for,
            episode_type: EPISODE_TYPE_MESSAGE.into(),
            content_type: CONTENT_TYPE_STRING.into(),
            created_at_micros: m
                .timestamp
                .and_then(|(seconds, nanos)| timestamp_micros(seconds, nanos))
                .unwrap_or(now),
            metadata: m.metadata,
            expires_at_micros: m
                .expires_at
                .and_then(|(seconds, nanos)| timestamp_micros(seconds, nanos)),
            idempotency: m
                .idempotency_key
                .filter(|key| !key.is_empty())
                .map(|key| Idempotency {
                    key,
                    at_micros: now,
                    window_micros,
                }),
        })
        .collect())
}

fn check_message(violations: &mut Violations, i: usize, m: &MessageInput, limits: &Limits) {
    let field = |name: &str| format!("messages[{i}].{name}");
    if m.content.trim().is_empty() {
        violations.add(field("content"), "must not be empty");
    } else if m.content.len() > limits.max_content_bytes {
        violations.add(
            field("content"),
            format!(
                "must be at most {} bytes, got {}",
                limits.max_content_bytes,
                m.content.len()
            ),
        );
    }
    for (name, value) in [
        ("producer", &m.producer),
        ("produced_for", &m.produced_for),
        ("role", &m.role),
    ] {
        if value.len() > MAX_NAME_BYTES {
            violations.add(
                field(name),
                format!("must be at most {MAX_NAME_BYTES} bytes"),
            );
        }
    }
    if let Some((seconds, nanos)) = m.timestamp
        && timestamp_micros(seconds, nanos).is_none()
    {
        violations.add(
            field("timestamp"),
            "must be a valid timestamp between years 1 and 9999",
        );
    }
    // An expiry in the past is accepted (the episode is never returned); one at or
    // before the message's own timestamp is a mistake.
    if let Some((seconds, nanos)) = m.expires_at {
        match timestamp_micros(seconds, nanos) {
            None => violations.add(
                field("expires_at"),
                "must be a valid timestamp between years 1 and 9999",
            ),
            Some(expires) => {
                let said = m.timestamp.and_then(|(s, n)| timestamp_micros(s, n));
                if said.is_some_and(|said| expires <= said) {
                    violations.add(field("expires_at"), "must be after the message's timestamp");
                }
            }
        }
    }
    if let Some(key) = &m.idempotency_key
        && key.len() > MAX_IDEMPOTENCY_KEY_BYTES
    {
        violations.add(
            field("idempotency_key"),
            format!(
                "must be at most {MAX_IDEMPOTENCY_KEY_BYTES} bytes, got {}",
                key.len()
            ),
        );
    }
    let mut bytes = 0;
    for (key, value) in &m.metadata {
        bytes += key.len() + value.len();
        if key.is_empty() || key.len() > MAX_METADATA_KEY_BYTES {
            violations.add(
                field("metadata"),
                format!("keys must be 1 to {MAX_METADATA_KEY_BYTES} bytes, got {key:?}"),
            );
        }
    }
    if bytes > MAX_METADATA_BYTES {
        violations.add(
            field("metadata"),
            format!("must be at most {MAX_METADATA_BYTES} bytes in all"),
        );
    }
}

/// Microseconds since the Unix epoch, for a valid timestamp in years 1 to 9999.
fn timestamp_micros(seconds: i64, nanos: i32) -> Option<i64> {
    const MIN_SECONDS: i64 = -62_135_596_800; // 0001-01-01T00:00:00Z
    const MAX_SECONDS: i64 = 253_402_300_799; // 9999-12-31T23:59:59Z
    ((0..1_000_000_000).contains(&nanos) && (MIN_SECONDS..=MAX_SECONDS).contains(&seconds))
        .then(|| seconds * 1_000_000 + i64::from(nanos) / 1000)
}
