//! Semantic memory's rows: set types, sets, categories, tags, features with their
//! citations, the ingestion queue's batches and short-term summaries.

use std::collections::BTreeMap;

/// What a feature set gathers: the whole org, one project, one producer (a "user set")
/// or the messages carrying a set type's metadata tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SetKind {
    Org,
    Project,
    User,
    Custom,
}

impl SetKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SetKind::Org => "org",
            SetKind::Project => "project",
            SetKind::User => "user",
            SetKind::Custom => "custom",
        }
    }

    pub fn parse(text: &str) -> Option<SetKind> {
        Some(match text {
            "org" => SetKind::Org,
            "project" => SetKind::Project,
            "user" => SetKind::User,
            "custom" => SetKind::Custom,
            _ => return None,
        })
    }
}

/// A kind of set defined by a project: messages carrying all its metadata tags land in
/// the set of their values. Org-level set types make sets shared by the org's projects.
#[derive(Debug, Clone, PartialEq)]
pub struct SetType {
    /// The store's handle.
    pub internal_id: i64,
    /// The public id.
    pub id: String,
    pub org_id: String,
    /// The project of a project-level set type (its internal id); `None` for org-level
    /// ones, shared by the org's projects.
    pub project: Option<i64>,
    pub is_org_level: bool,
    pub name: String,
    pub description: String,
    /// Metadata keys, sorted and distinct.
    pub tags: Vec<String>,
    pub created_at_micros: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewSetType {
    pub id: String,
    pub is_org_level: bool,
    pub name: String,
    pub description: String,
    pub tags: Vec<String>,
}

/// A set as the domain derives it from a message or a request.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSet {
    pub set_id: String,
    pub kind: SetKind,
    /// Shared by the org's projects (no project of its own).
    pub org_level: bool,
    /// The set type it comes from (internal id), for custom sets.
    pub set_type: Option<i64>,
    /// The metadata keys and the values that select it.
    pub tags: BTreeMap<String, String>,
}

/// Per-set settings (`ConfigureSet`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetConfig {
    /// Embedder name for its features; empty: the project's.
    pub embedder: String,
    /// Language model name; empty: the server's.
    pub llm: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SetRow {
    pub internal_id: i64,
    pub set_id: String,
    pub org_id: String,
    /// The project it belongs to (internal id); `None` for org-level sets.
    pub project: Option<i64>,
    pub kind: SetKind,
    pub set_type: Option<i64>,
    pub tags: BTreeMap<String, String>,
    pub config: SetConfig,
    pub created_at_micros: i64,
}

/// Whom a category belongs to: a set (its own) or a set type (a template its sets
/// inherit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CategoryOwner {
    Set(i64),
    SetType(i64),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Category {
    pub internal_id: i64,
    pub id: String,
    pub owner: CategoryOwner,
    pub name: String,
    pub prompt: String,
    pub description: String,
    pub tags: Vec<Tag>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewCategory {
    pub id: String,
    pub name: String,
    pub prompt: String,
    pub description: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    pub internal_id: i64,
    pub id: String,
    pub category: i64,
    pub name: String,
    pub description: String,
}

/// A feature to store. `match_key` and `value_key` are the domain's normalised forms
/// (a fact said again matches on them); the store only compares them.
#[derive(Debug, Clone, PartialEq)]
pub struct NewFeature {
    pub id: String,
    pub category: String,
    pub category_id: String,
    pub tag: String,
    pub feature: String,
    pub value: String,
    /// A JSON object.
    pub metadata: serde_json::Value,
    /// Normalised `category`, `tag` and `feature`.
    pub match_key: String,
    /// Normalised `value`.
    pub value_key: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Feature {
    pub internal_id: i64,
    pub id: String,
    pub set: i64,
    pub set_id: String,
    pub category: String,
    pub category_id: String,
    pub tag: String,
    pub feature: String,
    pub value: String,
    pub metadata: serde_json::Value,
    /// Uids of the episodes it cites, oldest first.
    pub citations: Vec<uuid::Uuid>,
    pub created_at_micros: i64,
    pub updated_at_micros: i64,
}

/// A manual change of a feature: `None` keeps the field.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FeatureUpdate {
    pub category: Option<(String, String)>,
    pub tag: Option<String>,
    pub feature: Option<String>,
    pub value: Option<String>,
    pub metadata: Option<serde_json::Value>,
    /// Recomputed by the domain when a keyed field changes.
    pub match_key: Option<String>,
    pub value_key: Option<String>,
}

/// One change the model asked for, applied in the batch's transaction. Citations are
/// episodes' internal ids.
#[derive(Debug, Clone, PartialEq)]
pub enum FeatureOp {
    /// Adds the feature, or cites these episodes in the one with the same keys and value.
    Add {
        feature: NewFeature,
        citations: Vec<i64>,
    },
    /// Sets the value of the features with these keys (adding one when there is none)
    /// and cites these episodes.
    Update {
        feature: NewFeature,
        citations: Vec<i64>,
    },
    /// Deletes the features with this `match_key`.
    Delete { match_key: String },
}

/// Queued messages of one set, claimed under a lease.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub set: SetRow,
    /// The claim's token: only its holder may apply, release or fail the batch.
    pub lease: String,
    /// Internal episode ids with the episodes, in sequence order.
    pub messages: Vec<(i64, crate::model::Episode)>,
    /// Attempts made on these messages so far.
    pub attempts: u32,
}

/// When a set's queued messages are ready for the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClaimRule {
    /// At least this many pending messages...
    pub min_messages: usize,
    /// ...or one queued at least this long ago (microseconds).
    pub max_age_micros: i64,
    /// Most messages in one batch.
    pub max_batch: usize,
    /// How long the claim holds (microseconds).
    pub lease_micros: i64,
    pub now_micros: i64,
}

/// A project's rolling summary of the episodes that left its short-term window.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub text: String,
    /// The sequence numbers it covers, inclusive.
    pub first_seq: i64,
    pub last_seq: i64,
    pub updated_at_micros: i64,
}

/// What the feature index of a project is built from: a feature's searchable fields.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexedFeature {
    pub internal_id: i64,
    pub set: i64,
    pub set_id: String,
    pub category: String,
    pub tag: String,
    pub feature: String,
    pub value: String,
    pub metadata: BTreeMap<String, String>,
    pub created_at_micros: i64,
    pub updated_at_micros: i64,
    /// Its vector, by the embedder that made it.
    pub vector: Option<(String, Vec<f32>)>,
}

/// A feature waiting for its vector.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingFeatureEmbedding {
    pub feature: i64,
    pub text: String,
    pub embedder: String,
}

/// Feature metadata as strings, as filters compare them: JSON strings as they are,
/// other values as JSON.
pub fn flatten_metadata(metadata: &serde_json::Value) -> BTreeMap<String, String> {
    let Some(object) = metadata.as_object() else {
        return BTreeMap::new();
    };
    object
        .iter()
        .map(|(k, v)| {
            let text = match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), text)
        })
        .collect()
}
