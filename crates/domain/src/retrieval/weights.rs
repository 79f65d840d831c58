//! How hybrid ranking weighs its parts, per project, and the parts of one episode's
//! score. The types are part of the project model (`memmachine_core::model::weights`,
//! stored with the project's episodic config); re-exported here, beside the ranking
//! that reads them.

pub use memmachine_core::model::weights::{
    MAX_WEIGHT, RankingWeights, RankingWeightsUpdate, ScoreParts,
};
