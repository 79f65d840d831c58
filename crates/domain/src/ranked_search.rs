//! The answer of a search ranked together (`rank_together.rs` ranks): the episodes
//! features cite that the episodic search did not answer are read here, under the
//! search's rules.

use std::collections::HashMap;

use uuid::Uuid;

use crate::episodic::EpisodicMemory;
use crate::error::Result;
use crate::model::{Episode, ScoredEpisode};
use crate::rank_together::{self, EpisodeScore, Item, Ranked};
use crate::search_plan::SearchPlan;
use crate::semantic::ScoredFeature;
use memmachine_core::access::OpenProject;

/// Most reads of cited episodes the episodic search did not answer, while some of
/// those read turn out not to be answerable (expired, filtered out, of another
/// project) and leave the answer short.
const MAX_READS: usize = 4;

/// The answer ranked together: `plan.top_k` episodes of the fused ranking of
/// `episodes` (the episodic search's, best first) and of those `features` cite, with
/// the features placed among them. A cited episode the episodic search did not answer
/// is read from `project` and answered only if that search could have answered it
/// (`EpisodicMemory::visible`): the same project, alive, passing the plan's filter.
pub async fn answer(
    episodic: &EpisodicMemory,
    project: &OpenProject,
    plan: &SearchPlan,
    weight: f64,
    episodes: &[ScoredEpisode],
    features: &[ScoredFeature],
) -> Result<Vec<Ranked>> {
    let citations: Vec<Vec<Uuid>> = features
        .iter()
        .map(|f| f.feature.citations.clone())
        .collect();
    let ranked: Vec<Uuid> = episodes.iter().map(|e| e.episode.uid).collect();
    let mut rows: HashMap<Uuid, (Episode, f64)> = HashMap::new();
    for hit in episodes {
        rows.entry(hit.episode.uid)
            .or_insert_with(|| (hit.episode.clone(), hit.score));
    }
    let mut candidates = rank_together::fuse(&ranked, &citations, weight).into_iter();
    let mut kept: Vec<EpisodeScore> = Vec::new();
    let mut reads = 0;
    while kept.len() < plan.top_k {
        let next: Vec<EpisodeScore> = candidates.by_ref().take(plan.top_k - kept.len()).collect();
        if next.is_empty() {
            break;
        }
        let missing: Vec<Uuid> = next
            .iter()
            .filter(|s| !rows.contains_key(&s.uid))
            .map(|s| s.uid)
            .collect();
        if !missing.is_empty() {
            if reads == MAX_READS {
                break;
            }
            reads += 1;
            let found = episodic
                .visible(project, &missing, plan.filter.as_ref())
                .await?;
            rows.extend(found.into_iter().map(|(uid, e)| (uid, (e, 0.0))));
        }
        kept.extend(next.into_iter().filter(|s| rows.contains_key(&s.uid)));
    }
    let id = |j: usize| features[j].feature.id.clone();
    Ok(rank_together::place(kept, &citations, weight)
        .into_iter()
        .map(|placed| match placed {
            rank_together::Placed::Episode(s) => {
                let (episode, score) = rows.remove(&s.uid).expect("kept episodes were read");
                Ranked {
                    source: s.source(),
                    score: s.score(),
                    episodic: s.episodic,
                    semantic: s.semantic,
                    citing: s.citing.iter().map(|j| id(*j)).collect(),
                    // The fused score is not the episodic ranking's: no parts.
                    item: Item::Episode(ScoredEpisode {
                        episode,
                        score,
                        parts: None,
                    }),
                }
            }
            rank_together::Placed::Feature {
                index,
                score,
                semantic,
            } => rank_together::feature_item(&features[index], score, semantic),
        })
        .collect())
}
