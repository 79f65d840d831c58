//! MemMachine's JSON shapes of what the domain returns: projects, episodes, features.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use memmachine_core::model::{Episode, Project, ProjectKey, ScoreParts, ScoredEpisode};
use memmachine_domain::rank_together::{Item, Ranked, Source};
use memmachine_domain::semantic::model::Feature;

/// Names a project; empty or omitted ids are `universal`.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct ProjectRef {
    #[serde(default)]
    pub org_id: String,
    #[serde(default)]
    pub project_id: String,
}

/// MemMachine's project configuration. This server keeps `embedder` and `reranker`
/// (lexical, dense or hybrid ranking); the storage fields are MemMachine's and are
/// answered empty.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct ProjectConfigJson {
    #[serde(default)]
    pub backend: Option<String>,
    #[serde(default)]
    pub reranker: String,
    #[serde(default)]
    pub embedder: String,
    #[serde(default)]
    pub vector_graph_store: String,
    #[serde(default)]
    pub vector_store: String,
    #[serde(default)]
    pub segment_store: String,
    #[serde(default)]
    pub properties_schema: BTreeMap<String, String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ProjectJson {
    pub org_id: String,
    pub project_id: String,
    pub description: String,
    pub config: ProjectConfigJson,
    pub created_at: String,
}

impl From<Project> for ProjectJson {
    fn from(p: Project) -> ProjectJson {
        ProjectJson {
            org_id: p.key.org_id,
            project_id: p.key.project_id,
            description: p.description,
            config: ProjectConfigJson {
                reranker: p.config.reranker,
                embedder: p.config.embedder,
                ..ProjectConfigJson::default()
            },
            created_at: time(p.created_at_micros),
        }
    }
}

/// RFC 3339 in UTC, with as many fractional digits as the time has.
pub fn time(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// An episode in a search result (MemMachine's `EpisodeResponse`).
#[derive(Debug, Serialize, ToSchema)]
pub struct ScoredEpisodeJson {
    pub content: String,
    pub producer_id: String,
    pub producer_role: String,
    pub produced_for_id: String,
    pub episode_type: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    pub created_at: String,
    pub uid: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// This server's: when it expires (its own expiry or the project's retention).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// This server's: what the score is made of, when the search asked (`explain`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score_parts: Option<ScorePartsJson>,
}

/// The parts of one episode's score, each in the score's units (a part the ranking did
/// not use is 0; lexical ranking has only `lexical`, equal to the score).
#[derive(Debug, Serialize, ToSchema)]
pub struct ScorePartsJson {
    /// The BM25 score (standardised when fused), including the conversational context
    /// field.
    pub lexical: f32,
    /// The standardised, smoothed embedding similarity times its weight.
    pub dense: f32,
    /// What neighbouring turns added.
    pub context: f32,
    /// What the episode's session as a whole added.
    pub session: f32,
    /// What the query's time expression added.
    pub time: f32,
    /// The lift for a turn produced by a participant the query names.
    pub participant: f32,
}

impl From<ScoreParts> for ScorePartsJson {
    fn from(p: ScoreParts) -> ScorePartsJson {
        ScorePartsJson {
            lexical: p.lexical,
            dense: p.dense,
            context: p.context,
            session: p.session,
            time: p.time,
            participant: p.participant,
        }
    }
}

impl ScoredEpisodeJson {
    pub fn new(e: Episode, score: Option<f64>) -> ScoredEpisodeJson {
        ScoredEpisodeJson {
            content: e.content,
            producer_id: e.producer_id,
            producer_role: e.producer_role,
            produced_for_id: e.produced_for_id,
            episode_type: e.episode_type,
            metadata: e.metadata,
            created_at: time(e.created_at_micros),
            uid: e.uid.to_string(),
            score,
            expires_at: e.expires_at_micros.map(time),
            score_parts: None,
        }
    }

    /// A ranked episode, with the parts of its score when the search asked for them.
    pub fn scored(hit: ScoredEpisode) -> ScoredEpisodeJson {
        ScoredEpisodeJson {
            score_parts: hit.parts.map(ScorePartsJson::from),
            ..ScoredEpisodeJson::new(hit.episode, Some(hit.score))
        }
    }
}

/// An episode in a listing (MemMachine's `Episode`).
#[derive(Debug, Serialize, ToSchema)]
pub struct EpisodeJson {
    pub uid: String,
    pub content: String,
    pub session_key: String,
    pub created_at: String,
    pub producer_id: String,
    pub producer_role: String,
    pub produced_for_id: String,
    pub episode_type: String,
    pub content_type: String,
    pub metadata: BTreeMap<String, String>,
    /// This server's: when it expires (its own expiry or the project's retention).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

impl EpisodeJson {
    pub fn new(key: &ProjectKey, e: Episode) -> EpisodeJson {
        EpisodeJson {
            uid: e.uid.to_string(),
            content: e.content,
            session_key: key.session_key(),
            created_at: time(e.created_at_micros),
            producer_id: e.producer_id,
            producer_role: e.producer_role,
            produced_for_id: e.produced_for_id,
            episode_type: e.episode_type,
            content_type: e.content_type,
            metadata: e.metadata,
            expires_at: e.expires_at_micros.map(time),
        }
    }
}

/// A feature (MemMachine's `SemanticFeature`): its id and citations under `metadata`,
/// with the feature's own metadata as `metadata.other`.
#[derive(Debug, Serialize, ToSchema)]
pub struct FeatureJson {
    pub set_id: String,
    pub category: String,
    pub tag: String,
    pub feature_name: String,
    pub value: String,
    pub metadata: FeatureMetadataJson,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct FeatureMetadataJson {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub citations: Option<Vec<String>>,
    #[schema(value_type = Object)]
    pub other: serde_json::Value,
}

impl FeatureJson {
    pub fn new(f: Feature, score: Option<f64>, citations: bool) -> FeatureJson {
        FeatureJson {
            set_id: f.set_id,
            category: f.category,
            tag: f.tag,
            feature_name: f.feature,
            value: f.value,
            metadata: FeatureMetadataJson {
                id: f.id,
                citations: citations.then(|| f.citations.iter().map(ToString::to_string).collect()),
                other: f.metadata,
            },
            score,
            created_at: time(f.created_at_micros),
            updated_at: time(f.updated_at_micros),
        }
    }
}

/// An item of a ranking together (this server's `rank_together`): an episode or a
/// feature, with the fused score and its parts (as gRPC's `RankedMemory`).
#[derive(Debug, Serialize, ToSchema)]
pub struct RankedJson {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub episode: Option<ScoredEpisodeJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feature: Option<FeatureJson>,
    /// `episodic`, `semantic` or `both`.
    pub source: String,
    pub score: f64,
    pub episodic: f64,
    pub semantic: f64,
    /// An episode's: the ranked features citing it, best first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub citing_feature_ids: Vec<String>,
}

impl RankedJson {
    pub fn new(r: Ranked) -> RankedJson {
        let (episode, feature) = match r.item {
            Item::Episode(hit) => (Some(ScoredEpisodeJson::scored(hit)), None),
            Item::Feature(hit) => (
                None,
                Some(FeatureJson::new(hit.feature, Some(hit.score), true)),
            ),
        };
        let source = match r.source {
            Source::Episodic => "episodic",
            Source::Semantic => "semantic",
            Source::Both => "both",
        };
        RankedJson {
            episode,
            feature,
            source: source.into(),
            score: r.score,
            episodic: r.episodic,
            semantic: r.semantic,
            citing_feature_ids: r.citing,
        }
    }
}
