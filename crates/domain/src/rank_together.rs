//! Episodes and features ranked together (`SearchMemories` with `rank_together`):
//! reciprocal-rank fusion of the episodic ranking and a ranking of episodes derived
//! from the features', where a feature's citations are its evidence.
//!
//! An episode scores `1/(K + its episodic rank)` (0 when the episodic search did not
//! rank it) plus its lift: `weight/((K + j) * n)` for the best ranked feature citing
//! it, of rank `j` citing `n` episodes. Why so:
//! - The lift is divided among a feature's citations: a small model cites whole batches
//!   of messages, and a feature citing twenty turns says little about any one of them.
//! - The best citing feature counts, not their sum: the features distilled from one
//!   batch all cite that batch, so a sum would reward a batch for its many features,
//!   not for its evidence.
//! - `weight` below 1 keeps the episodic ranking ahead: with it and `n` citations, an
//!   episode's lift is at most `weight/((K + 1) * n)`, which is what bounds how far
//!   noise features can push the episodic hits down (see the tests).

use std::collections::HashMap;

use uuid::Uuid;

use crate::model::ScoredEpisode;
use crate::semantic::ScoredFeature;
// The weight is also a server flag's (`Limits`), so its bounds live there.
pub use crate::limits::{DEFAULT_SEMANTIC_WEIGHT, MAX_SEMANTIC_WEIGHT};

/// The reciprocal-rank constant: how flat each ranking's contribution is.
pub const K: f64 = 60.0;
/// A feature is listed as an item only when it cites at most this many episodes, all in
/// the answer: then it says something specific about the episodes it follows. One citing a whole batch
/// would add many turns to the answer for one point of evidence; its episodes are
/// lifted all the same.
pub const MAX_LISTED_CITATIONS: usize = 3;

/// Which ranking put an item in the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Ranked by the episodic search, cited by no ranked feature.
    Episodic,
    /// A feature, or an episode only ranked features cite.
    Semantic,
    /// Ranked by the episodic search and cited by a ranked feature.
    Both,
}

/// One episode's fused score and its parts.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeScore {
    pub uid: Uuid,
    /// `1/(K + rank)`, 0 when the episodic search did not rank it.
    pub episodic: f64,
    /// The lift of its best citing feature.
    pub semantic: f64,
    /// The ranked features citing it, by their index in the feature ranking, best first.
    pub citing: Vec<usize>,
}

impl EpisodeScore {
    pub fn score(&self) -> f64 {
        self.episodic + self.semantic
    }

    pub fn source(&self) -> Source {
        match (self.episodic > 0.0, self.citing.is_empty()) {
            (true, true) => Source::Episodic,
            (true, false) => Source::Both,
            (false, _) => Source::Semantic,
        }
    }
}

/// Every episode either ranking holds, best first (ties: the episodic order, then
/// the feature order). `episodic`: the episodic ranking's uids; `citations`: each
/// ranked feature's cited uids, in feature rank order.
pub fn fuse(episodic: &[Uuid], citations: &[Vec<Uuid>], weight: f64) -> Vec<EpisodeScore> {
    let mut scores: Vec<EpisodeScore> = Vec::new();
    let mut at: HashMap<Uuid, usize> = HashMap::new();
    let mut slot = |uid: Uuid, scores: &mut Vec<EpisodeScore>| {
        *at.entry(uid).or_insert_with(|| {
            scores.push(EpisodeScore {
                uid,
                episodic: 0.0,
                semantic: 0.0,
                citing: Vec::new(),
            });
            scores.len() - 1
        })
    };
    for (rank, uid) in episodic.iter().enumerate() {
        let i = slot(*uid, &mut scores);
        if scores[i].episodic == 0.0 {
            scores[i].episodic = 1.0 / (K + rank as f64 + 1.0);
        }
    }
    for (j, cited) in citations.iter().enumerate() {
        let mut distinct = cited.clone();
        distinct.sort_unstable();
        distinct.dedup();
        let lift = weight / ((K + j as f64 + 1.0) * distinct.len() as f64);
        for uid in distinct {
            let i = slot(uid, &mut scores);
            let score = &mut scores[i];
            score.semantic = score.semantic.max(lift);
            score.citing.push(j);
        }
    }
    // Stable: equal scores keep the order they were met in.
    scores.sort_by(|a, b| b.score().total_cmp(&a.score()));
    scores
}

/// An item of the answer: an episode (by its fused score) or a feature (by its index
/// in the feature ranking).
#[derive(Debug, Clone, PartialEq)]
pub enum Placed {
    Episode(EpisodeScore),
    Feature {
        index: usize,
        /// The score of the episode it follows, or its own lift when it cites none.
        score: f64,
        /// `weight/(K + its rank)`.
        semantic: f64,
    },
}

impl Placed {
    pub fn score(&self) -> f64 {
        match self {
            Placed::Episode(e) => e.score(),
            Placed::Feature { score, .. } => *score,
        }
    }
}

/// The answer: `episodes` (the fused ranking, already cut to what is answered), with
/// each feature citing 1 to [`MAX_LISTED_CITATIONS`] episodes right after the best of
/// them in it (not listed when none is), and each feature citing none at its own
/// score. Features follow each other in rank order.
pub fn place(episodes: Vec<EpisodeScore>, citations: &[Vec<Uuid>], weight: f64) -> Vec<Placed> {
    let position: HashMap<Uuid, usize> = episodes
        .iter()
        .enumerate()
        .map(|(i, e)| (e.uid, i))
        .collect();
    let mut after: Vec<Vec<usize>> = vec![Vec::new(); episodes.len()];
    let mut uncited: Vec<(usize, f64)> = Vec::new();
    for (j, cited) in citations.iter().enumerate() {
        let own = weight / (K + j as f64 + 1.0);
        if cited.is_empty() {
            uncited.push((j, own));
        } else if cited.len() <= MAX_LISTED_CITATIONS {
            // After the last of its episodes, and only when the answer holds them all:
            // a feature then adds no turn of its own, so the answer's turns are the
            // fused ranking's and cannot push an episodic hit out of the top k.
            let at: Option<Vec<usize>> =
                cited.iter().map(|uid| position.get(uid).copied()).collect();
            if let Some(last) = at.and_then(|at| at.into_iter().max()) {
                after[last].push(j);
            }
        }
    }
    let mut out = Vec::with_capacity(episodes.len() + uncited.len());
    let mut uncited = uncited.into_iter().peekable();
    for (episode, features) in episodes.into_iter().zip(after) {
        while let Some((j, own)) = uncited.next_if(|(_, own)| *own > episode.score()) {
            out.push(Placed::Feature {
                index: j,
                score: own,
                semantic: own,
            });
        }
        let score = episode.score();
        out.push(Placed::Episode(episode));
        out.extend(features.into_iter().map(|j| Placed::Feature {
            index: j,
            score,
            semantic: weight / (K + j as f64 + 1.0),
        }));
    }
    out.extend(uncited.map(|(j, own)| Placed::Feature {
        index: j,
        score: own,
        semantic: own,
    }));
    out
}

/// An item of the answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Episode(ScoredEpisode),
    Feature(ScoredFeature),
}

/// An item with its fused score and the score's parts.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked {
    pub item: Item,
    pub source: Source,
    pub score: f64,
    pub episodic: f64,
    pub semantic: f64,
    /// An episode's citing features (ids), best first.
    pub citing: Vec<String>,
}

/// The answer ranked together when no episodes are searched: the features alone, each
/// at its own score.
pub fn features_alone(features: &[ScoredFeature], weight: f64) -> Vec<Ranked> {
    features
        .iter()
        .enumerate()
        .map(|(j, f)| {
            let own = weight / (K + j as f64 + 1.0);
            feature_item(f, own, own)
        })
        .collect()
}

pub(crate) fn feature_item(feature: &ScoredFeature, score: f64, semantic: f64) -> Ranked {
    Ranked {
        item: Item::Feature(feature.clone()),
        source: Source::Semantic,
        score,
        episodic: 0.0,
        semantic,
        citing: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uids(n: usize) -> Vec<Uuid> {
        (0..n).map(|_| Uuid::new_v4()).collect()
    }

    fn order(scores: &[EpisodeScore]) -> Vec<Uuid> {
        scores.iter().map(|s| s.uid).collect()
    }

    #[test]
    fn without_features_the_episodic_order_stands() {
        let episodes = uids(5);
        let fused = fuse(&episodes, &[], DEFAULT_SEMANTIC_WEIGHT);
        assert_eq!(order(&fused), episodes);
        assert!(fused.iter().all(|s| s.source() == Source::Episodic));
    }

    #[test]
    fn a_specific_feature_lifts_the_episode_it_cites() {
        let episodes = uids(20);
        let missed = Uuid::new_v4();
        let fused = fuse(&episodes, &[vec![episodes[9]], vec![missed]], 1.0);
        // Cited by the best feature: from tenth to first, and marked as both.
        assert_eq!(fused[0].uid, episodes[9]);
        assert_eq!(fused[0].source(), Source::Both);
        assert_eq!(fused[0].citing, vec![0]);
        // Missed by the episodic search, cited by the second feature: in, as semantic.
        let lifted = fused.iter().find(|s| s.uid == missed).unwrap();
        assert_eq!(lifted.source(), Source::Semantic);
        assert_eq!(lifted.episodic, 0.0);
        assert!(lifted.semantic > 0.0);
        let position = fused.iter().position(|s| s.uid == missed).unwrap();
        assert!(position < 20, "lifted to {position}");
    }

    /// The noise case: the top features each cite a whole batch of 20 turns (a small
    /// model's features), all the same batch. With the default weight every one of the
    /// episodic top 9 keeps its place in the top 10, and no episode is pushed down more
    /// than one place.
    #[test]
    fn features_citing_whole_batches_move_the_episodic_hits_by_one_place_at_most() {
        let episodes = uids(40);
        let outside = uids(10);
        // A batch of turns ranked 11th to 20th and of turns the episodic search missed.
        let batch: Vec<Uuid> = episodes[10..20].iter().chain(&outside).copied().collect();
        let noise = vec![batch; 20];
        let fused = fuse(&episodes, &noise, DEFAULT_SEMANTIC_WEIGHT);
        let fused = order(&fused);
        for (rank, uid) in episodes.iter().enumerate() {
            let now = fused.iter().position(|u| u == uid).unwrap();
            assert!(now <= rank + 1, "episode {rank} went down to {now}");
        }
        assert_eq!(fused[..9], episodes[..9]);
        // The turns it missed stay below every episode it ranked.
        for uid in &outside {
            assert!(fused.iter().position(|u| u == uid).unwrap() >= episodes.len());
        }
    }

    #[test]
    fn the_best_citing_feature_counts_not_their_sum() {
        let episodes = uids(3);
        let one = fuse(&episodes, &[vec![episodes[2]]], 0.3);
        let many = fuse(&episodes, &vec![vec![episodes[2]]; 10], 0.3);
        let lift = |s: &[EpisodeScore]| s.iter().find(|e| e.uid == episodes[2]).unwrap().semantic;
        assert_eq!(lift(&one), lift(&many));
        assert_eq!(
            many.iter()
                .find(|e| e.uid == episodes[2])
                .unwrap()
                .citing
                .len(),
            10
        );
    }

    #[test]
    fn features_are_listed_after_their_last_episode_only_when_specific() {
        let episodes = uids(3);
        let other = Uuid::new_v4();
        let citations = vec![
            vec![episodes[2], episodes[1]],
            episodes.clone().into_iter().chain(uids(5)).collect(),
            vec![],
            vec![other],
        ];
        let fused = fuse(&episodes, &[], 0.3);
        let placed = place(fused, &citations, 0.3);
        let shape: Vec<String> = placed
            .iter()
            .map(|p| match p {
                Placed::Episode(e) => {
                    format!("e{}", episodes.iter().position(|u| *u == e.uid).unwrap())
                }
                Placed::Feature { index, .. } => format!("f{index}"),
            })
            .collect();
        // Feature 0 after episode 2 (the last it cites), feature 1 cites too many,
        // feature 2 none (at its own score, below every episode), feature 3 an episode
        // not answered.
        assert_eq!(shape, ["e0", "e1", "e2", "f0", "f2"]);
        assert!(placed.windows(2).all(|w| w[0].score() >= w[1].score()));
    }
}
