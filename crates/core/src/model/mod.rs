//! Domain types shared by the transports, the domain modules and the stores.

pub mod api_key;
pub mod episode;
pub mod filter;
pub mod filter_eval;
pub mod ids;
pub mod instant;
pub mod page;
pub mod project;
pub mod weights;

pub use api_key::{ApiKeyRecord, KeyScope};
pub use episode::{AddedEpisode, Episode, Idempotency, NewEpisode, ScoredEpisode};
pub use ids::{
    CategoryId, ChangeSeq, EpisodeHandle, FeatureId, ProjectHandle, ProjectKey, SetId, SetTypeId,
    TagId,
};
pub use project::{EpisodicConfig, EpisodicConfigUpdate, Project, ProjectConfig};
pub use weights::{RankingWeights, RankingWeightsUpdate, ScoreParts};
