//! The ranked lists of `dia_id`s made from the answers, and their recall sums.

use std::collections::{BTreeMap, HashMap, HashSet};

use memmachine_proto::v2 as pb;

use crate::support::locomo::{RecallSums, recall_at};

/// The cut-offs recall is reported at (those not above `--top-k`).
pub const RECALL_KS: [usize; 3] = [5, 10, 20];

/// The `dia_id`s of `uids` that name a turn (mapped by `dia`), appended to `out` unless
/// already there; counts those naming none in `unmapped`.
pub fn push_cited(
    out: &mut Vec<String>,
    seen: &mut HashSet<String>,
    uids: &[String],
    dia: &HashMap<String, String>,
    unmapped: &mut usize,
) {
    for uid in uids {
        match dia.get(uid) {
            Some(id) => {
                if seen.insert(id.clone()) {
                    out.push(id.clone());
                }
            }
            None => *unmapped += 1,
        }
    }
}

/// The features' cited turns in feature rank order, each once.
pub fn cited_turns(
    features: &[pb::SemanticFeature],
    dia: &HashMap<String, String>,
    unmapped: &mut usize,
) -> Vec<String> {
    let (mut out, mut seen) = (Vec::new(), HashSet::new());
    for feature in features {
        push_cited(&mut out, &mut seen, &feature.citations, dia, unmapped);
    }
    out
}

/// The turns of a SearchMemories answer: its episodes' `dia_id`s in rank order.
pub fn episode_turns(response: &pb::SearchMemoriesResponse) -> Vec<String> {
    response
        .episodic_memory
        .as_ref()
        .map(|m| {
            m.long_term_memory
                .iter()
                .filter_map(|s| s.episode.as_ref()?.metadata.get("dia_id").cloned())
                .collect()
        })
        .unwrap_or_default()
}

/// Episode 1, feature 1's citations, episode 2, feature 2's citations..., each turn once.
pub fn interleave(
    episodes: &[String],
    features: &[pb::SemanticFeature],
    dia: &HashMap<String, String>,
    unmapped: &mut usize,
) -> Vec<String> {
    let (mut out, mut seen) = (Vec::new(), HashSet::new());
    for i in 0..episodes.len().max(features.len()) {
        if let Some(id) = episodes.get(i)
            && seen.insert(id.clone())
        {
            out.push(id.clone());
        }
        if let Some(feature) = features.get(i) {
            push_cited(&mut out, &mut seen, &feature.citations, dia, unmapped);
        }
    }
    out
}

/// Episodes, then the features' citations, each turn once.
pub fn response_order(
    episodes: &[String],
    features: &[pb::SemanticFeature],
    dia: &HashMap<String, String>,
    unmapped: &mut usize,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for id in episodes {
        if seen.insert(id.clone()) {
            out.push(id.clone());
        }
    }
    for feature in features {
        push_cited(&mut out, &mut seen, &feature.citations, dia, unmapped);
    }
    out
}

/// The turns of a ranking together (`rank_together`), in its order: an episode its
/// `dia_id`, a feature its citations (oldest first), each turn once.
pub fn ranked_turns(
    response: &pb::SearchMemoriesResponse,
    dia: &HashMap<String, String>,
    unmapped: &mut usize,
) -> Vec<String> {
    use pb::ranked_memory::Item;
    let (mut out, mut seen) = (Vec::new(), HashSet::new());
    for ranked in &response.ranked {
        match &ranked.item {
            Some(Item::Episode(hit)) => {
                let id = hit.episode.as_ref().and_then(|e| e.metadata.get("dia_id"));
                if let Some(id) = id
                    && seen.insert(id.clone())
                {
                    out.push(id.clone());
                }
            }
            Some(Item::Feature(f)) => push_cited(&mut out, &mut seen, &f.citations, dia, unmapped),
            None => {}
        }
    }
    out
}

/// Recall of `evidence` among every turn cited by the top k features, for each k.
pub fn recall_by_features(
    evidence: &[String],
    features: &[pb::SemanticFeature],
    dia: &HashMap<String, String>,
    ks: &[usize],
) -> Vec<f64> {
    let mut ignored = 0;
    ks.iter()
        .map(|&k| {
            let top = &features[..k.min(features.len())];
            let cited = cited_turns(top, dia, &mut ignored);
            recall_at(evidence, &cited, &[usize::MAX])[0]
        })
        .collect()
}

/// Recall sums of one ranked list, overall and by category.
#[derive(Clone, Default)]
pub struct Scores {
    pub overall: RecallSums,
    pub by_category: BTreeMap<u32, RecallSums>,
}

impl Scores {
    pub fn add(&mut self, category: u32, recalls: &[f64]) {
        self.overall.add(recalls);
        self.by_category.entry(category).or_default().add(recalls);
    }
}

/// The ranked lists scored, in the order they are reported.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum List {
    Episodic,
    SemanticTurns,
    SemanticFeatures,
    CombinedResponse,
    CombinedInterleaved,
    CombinedRanked,
    CombinedAll,
}

impl List {
    pub const ALL: [List; 7] = [
        List::Episodic,
        List::SemanticTurns,
        List::SemanticFeatures,
        List::CombinedResponse,
        List::CombinedInterleaved,
        List::CombinedRanked,
        List::CombinedAll,
    ];

    pub fn key(self) -> &'static str {
        match self {
            List::Episodic => "episodic",
            List::SemanticTurns => "semantic_k_turns",
            List::SemanticFeatures => "semantic_k_features",
            List::CombinedResponse => "combined_response_order",
            List::CombinedInterleaved => "combined_interleaved",
            List::CombinedRanked => "combined_server_ranked",
            List::CombinedAll => "combined_all_returned",
        }
    }

    pub fn label(self, reranker: &str) -> String {
        match self {
            List::Episodic => format!("episodic {reranker} (SearchMemories EPISODIC), k turns"),
            List::SemanticTurns => "semantic (SearchFeatures), first k distinct cited turns".into(),
            List::SemanticFeatures => {
                "semantic (SearchFeatures), every turn cited by the top k FEATURES".into()
            }
            List::CombinedResponse => {
                "combined (SearchMemories EPISODIC+SEMANTIC), episodes then features, k turns"
                    .into()
            }
            List::CombinedInterleaved => {
                "combined, episode/feature interleaved, first k distinct turns".into()
            }
            List::CombinedRanked => {
                "combined, server-ranked (SearchMemories rank_together), first k distinct turns"
                    .into()
            }
            List::CombinedAll => {
                "combined, every turn returned (top_k episodes + all citations of top_k features)"
                    .into()
            }
        }
    }
}
