//! The export file: JSON Lines, one object per line with a `"kind"`. The first line is
//! `{"kind":"format","version":1}`. Rows name each other by public references only
//! (project keys, episode uids, set ids, public ids), never by a store's handles.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::retrieval::weights::RankingWeights;

/// The version this build writes and reads.
pub const VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Line {
    Format(FormatLine),
    Project(ProjectLine),
    Episode(EpisodeLine),
    Vector(VectorLine),
    Summary(SummaryLine),
    SetType(SetTypeLine),
    Set(SetLine),
    Category(CategoryLine),
    Tag(TagLine),
    DisabledCategory(DisabledCategoryLine),
    Feature(FeatureLine),
    FeatureVector(FeatureVectorLine),
    FeatureVersion(FeatureVersionLine),
}

/// Every kind, as written in the file.
pub const KINDS: &[&str] = &[
    "format",
    "project",
    "episode",
    "vector",
    "summary",
    "set_type",
    "set",
    "category",
    "tag",
    "disabled_category",
    "feature",
    "feature_vector",
    "feature_version",
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FormatLine {
    pub version: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectConfigLine {
    pub embedder: String,
    pub reranker: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpisodicLine {
    pub enabled: bool,
    pub long_term_memory_enabled: bool,
    pub short_term_memory_enabled: bool,
    /// Absent in exports made before it existed: on, the default.
    #[serde(default = "on")]
    pub participant_aware: bool,
    /// Microseconds; absent: episodes are kept until deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub episode_retention_micros: Option<i64>,
    /// How hybrid ranking weighs its parts; absent (in older exports, or left at the
    /// defaults): the defaults. Fields it lacks take their defaults too.
    #[serde(default, skip_serializing_if = "is_default_weights")]
    pub ranking_weights: RankingWeights,
}

fn is_default_weights(weights: &RankingWeights) -> bool {
    *weights == RankingWeights::DEFAULT
}

fn on() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectLine {
    pub org_id: String,
    pub project_id: String,
    pub description: String,
    pub config: ProjectConfigLine,
    pub episodic: EpisodicLine,
    pub created_at_micros: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpisodeLine {
    pub org_id: String,
    pub project_id: String,
    #[serde(with = "uid")]
    pub uid: uuid::Uuid,
    pub sequence_num: i64,
    pub content: String,
    pub producer_id: String,
    pub producer_role: String,
    pub produced_for_id: String,
    pub episode_type: String,
    pub content_type: String,
    pub created_at_micros: i64,
    pub metadata: BTreeMap<String, String>,
    /// The message's own expiry; absent: the project's retention decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_micros: Option<i64>,
}

/// An episode's vector, by the embedder (its id) that made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VectorLine {
    pub org_id: String,
    pub project_id: String,
    #[serde(with = "uid")]
    pub uid: uuid::Uuid,
    pub embedder: String,
    pub vector: Vec<f32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SummaryLine {
    pub org_id: String,
    pub project_id: String,
    pub text: String,
    pub first_seq: i64,
    pub last_seq: i64,
    pub updated_at_micros: i64,
}

/// `project_id` is absent for org-level set types.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetTypeLine {
    pub id: String,
    pub org_id: String,
    pub project_id: Option<String>,
    pub is_org_level: bool,
    pub name: String,
    pub description: String,
    pub tags: Vec<String>,
    pub created_at_micros: i64,
}

/// `project_id` is absent for org-level sets; `set_type` is the set type's public id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetLine {
    pub set_id: String,
    pub org_id: String,
    pub project_id: Option<String>,
    pub set_kind: String,
    pub set_type: Option<String>,
    pub tags: BTreeMap<String, String>,
    pub embedder: String,
    pub llm: String,
    pub created_at_micros: i64,
}

/// Owned by a set (`set_id`) or by a set type (`set_type`, its public id): exactly one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CategoryLine {
    pub id: String,
    pub set_id: Option<String>,
    pub set_type: Option<String>,
    pub name: String,
    pub prompt: String,
    pub description: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TagLine {
    pub id: String,
    pub category_id: String,
    pub name: String,
    pub description: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DisabledCategoryLine {
    pub set_id: String,
    pub name: String,
}

/// Citations are episode uids, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureLine {
    pub id: String,
    pub set_id: String,
    pub category: String,
    pub category_id: String,
    pub tag: String,
    pub feature: String,
    pub value: String,
    pub metadata: serde_json::Value,
    #[serde(with = "uids")]
    pub citations: Vec<uuid::Uuid>,
    pub created_at_micros: i64,
    pub updated_at_micros: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureVectorLine {
    pub feature_id: String,
    pub embedder: String,
    pub vector: Vec<f32>,
}

/// An earlier version of a feature (its history): `feature_id` is the feature whose
/// history holds it (deleted or not), `origin_id` the one it was a version of;
/// `changed_by` is `extraction`, `consolidation`, `manual`, `deletion` or `unknown`.
/// Without `valid_to_micros`: a feature's current version (when and what made it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureVersionLine {
    pub feature_id: String,
    pub origin_id: String,
    pub set_id: String,
    pub category: String,
    pub category_id: String,
    pub tag: String,
    pub feature: String,
    pub value: String,
    pub metadata: serde_json::Value,
    #[serde(with = "uids")]
    pub citations: Vec<uuid::Uuid>,
    pub valid_from_micros: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_to_micros: Option<i64>,
    pub changed_by: String,
}

/// Uids as their hyphenated text.
mod uid {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(uid: &uuid::Uuid, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&uid.hyphenated())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<uuid::Uuid, D::Error> {
        let text = String::deserialize(d)?;
        uuid::Uuid::parse_str(&text).map_err(|err| D::Error::custom(format!("uid {text:?}: {err}")))
    }
}

mod uids {
    use serde::ser::SerializeSeq;
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(uids: &[uuid::Uuid], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(uids.len()))?;
        for uid in uids {
            seq.serialize_element(&uid.hyphenated().to_string())?;
        }
        seq.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<uuid::Uuid>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|text| {
                uuid::Uuid::parse_str(text)
                    .map_err(|err| D::Error::custom(format!("uid {text:?}: {err}")))
            })
            .collect()
    }
}

impl Line {
    /// The line as written, without its newline.
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string(self)
            .map_err(|err| Error::Internal(format!("encoding an export line: {err}")))
    }

    /// Reads line `number` (1-based) of a file; the error names the line and why.
    pub fn parse(number: usize, text: &str) -> Result<Line> {
        let bad = |why: String| Error::invalid(format!("line {number}"), why);
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|err| bad(format!("not JSON: {err}")))?;
        let Some(kind) = value.get("kind") else {
            return Err(bad("no \"kind\" field".into()));
        };
        let Some(kind) = kind.as_str() else {
            return Err(bad(format!("\"kind\" is {kind}, not a string")));
        };
        if !KINDS.contains(&kind) {
            return Err(bad(format!(
                "unknown kind {kind:?} (known: {})",
                KINDS.join(", ")
            )));
        }
        let kind = kind.to_string();
        serde_json::from_value(value).map_err(|err| bad(format!("a bad {kind} line: {err}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_read_back_and_bad_ones_name_their_line_and_why() {
        let line = Line::DisabledCategory(DisabledCategoryLine {
            set_id: "s".into(),
            name: "Profile".into(),
        });
        let text = line.to_json().unwrap();
        assert_eq!(
            text,
            r#"{"kind":"disabled_category","set_id":"s","name":"Profile"}"#
        );
        assert_eq!(Line::parse(1, &text).unwrap(), line);
        let err = |text: &str| Line::parse(7, text).unwrap_err().to_string();
        assert!(err("{").contains("line 7: not JSON"), "{}", err("{"));
        assert!(err(r#"{"a":1}"#).contains("no \"kind\""));
        assert!(err(r#"{"kind":"key"}"#).contains("unknown kind \"key\""));
        let missing = err(r#"{"kind":"disabled_category","set_id":"s"}"#);
        assert!(missing.contains("missing field `name`"), "{missing}");
        let extra = err(r#"{"kind":"disabled_category","set_id":"s","name":"n","x":1}"#);
        assert!(extra.contains("unknown field `x`"), "{extra}");
    }

    #[test]
    fn ranking_weights_travel_with_the_project_and_default_when_absent() {
        let episodic = |weights: &str| -> EpisodicLine {
            serde_json::from_str(&format!(
                r#"{{"enabled":true,"long_term_memory_enabled":true,
                    "short_term_memory_enabled":true{weights}}}"#
            ))
            .unwrap()
        };
        // An export made before weights existed: the defaults.
        let old = episodic("");
        assert_eq!(old.ranking_weights, RankingWeights::DEFAULT);
        // Defaults are left out, so older servers still read the export.
        assert!(
            !serde_json::to_string(&old)
                .unwrap()
                .contains("ranking_weights")
        );
        // A field the object lacks takes its default.
        let set = episodic(r#","ranking_weights":{"dense":2.5}"#);
        let want = RankingWeights {
            dense: 2.5,
            ..RankingWeights::DEFAULT
        };
        assert_eq!(set.ranking_weights, want);
        let back: EpisodicLine =
            serde_json::from_str(&serde_json::to_string(&set).unwrap()).unwrap();
        assert_eq!(back, set);
    }

    #[test]
    fn vectors_read_back_bit_for_bit() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let vector: Vec<f32> = (0..200_000)
            .filter_map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                Some(f32::from_bits(state as u32)).filter(|x| x.is_finite())
            })
            .chain([0.0, -0.0, f32::MIN_POSITIVE, f32::MAX, 1e-45])
            .collect();
        let line = Line::FeatureVector(FeatureVectorLine {
            feature_id: "f".into(),
            embedder: "hash:16".into(),
            vector: vector.clone(),
        });
        let Line::FeatureVector(back) = Line::parse(1, &line.to_json().unwrap()).unwrap() else {
            panic!("not a feature vector");
        };
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back.vector), bits(&vector));
    }
}
