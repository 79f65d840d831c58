//! How hybrid ranking weighs its parts, per project, and the parts of one episode's
//! score. The types are part of the project model (`memmachine_core::model::weights`,
//! stored with the project's episodic config); re-exported here, beside the ranking
//! that reads them.

pub use memmachine_core::model::weights::{
    MAX_WEIGHT, RankingWeights, RankingWeightsUpdate, ScoreParts,
};

use super::fusion;

// The defaults are today's ranking: a change to either side that is not made to the
// other fails to compile.
const _: () = {
    let d = RankingWeights::DEFAULT;
    assert!(d.dense == fusion::DENSE_WEIGHT);
    assert!(d.own_similarity == fusion::SELF_WEIGHT);
    assert!(d.participant == fusion::PARTICIPANT_WEIGHT);
};
