//! `expand_context`: each hit brings its neighbouring episodes, as MemMachine does (a
//! third of the requested context before the hit, the rest after it), while the answer
//! stays within `top_k` episodes. Better hits are expanded first; a context episode
//! carries its hit's score, and each hit's group is in conversation order.

use std::collections::HashSet;

use crate::model::{Episode, ScoredEpisode};

/// How many neighbours to take before and after a hit for `expand_context` episodes.
pub fn split(expand_context: usize) -> (usize, usize) {
    let before = expand_context / 3;
    (before, expand_context - before)
}

/// Hits (best first) with their contexts (`contexts[i]` is hit i's window, oldest
/// first, the hit included), at most `top_k` episodes, none twice. Within a window the
/// hit comes first, then its neighbours nearest first, until the budget is spent.
pub fn expand(
    hits: Vec<ScoredEpisode>,
    contexts: Vec<Vec<Episode>>,
    top_k: usize,
) -> Vec<ScoredEpisode> {
    let mut seen: HashSet<uuid::Uuid> = HashSet::new();
    let mut out: Vec<ScoredEpisode> = Vec::new();
    for (hit, window) in hits.into_iter().zip(contexts) {
        if out.len() >= top_k {
            break;
        }
        if !seen.insert(hit.episode.uid) {
            continue; // already in as context of a better hit
        }
        let centre = window
            .iter()
            .position(|e| e.uid == hit.episode.uid)
            .unwrap_or(window.len());
        // Nearest first: distance from the hit, earlier neighbours winning ties.
        let mut order: Vec<usize> = (0..window.len()).filter(|i| *i != centre).collect();
        order.sort_by_key(|i| (i.abs_diff(centre), *i > centre));
        // The hit keeps the parts of its score; its neighbours only share the score.
        let (hit_uid, parts) = (hit.episode.uid, hit.parts);
        let mut group: Vec<(usize, Episode)> = vec![(centre, hit.episode)];
        let mut window: Vec<Option<Episode>> = window.into_iter().map(Some).collect();
        for i in order {
            if out.len() + group.len() >= top_k {
                break;
            }
            let episode = window[i].take().expect("each taken once");
            if seen.insert(episode.uid) {
                group.push((i, episode));
            }
        }
        group.sort_by_key(|(i, _)| *i);
        out.extend(group.into_iter().map(|(_, episode)| ScoredEpisode {
            parts: parts.filter(|_| episode.uid == hit_uid),
            episode,
            score: hit.score,
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn episode(n: u128) -> Episode {
        Episode {
            uid: uuid::Uuid::from_u128(n),
            content: format!("turn {n}"),
            producer_id: "u".into(),
            producer_role: String::new(),
            produced_for_id: String::new(),
            sequence_num: n as i64,
            episode_type: "message".into(),
            content_type: "string".into(),
            created_at_micros: 0,
            metadata: Default::default(),
            expires_at_micros: None,
        }
    }

    fn hit(n: u128, score: f64) -> ScoredEpisode {
        ScoredEpisode {
            episode: episode(n),
            score,
            parts: None,
        }
    }

    fn window(range: std::ops::RangeInclusive<u128>) -> Vec<Episode> {
        range.map(episode).collect()
    }

    fn seqs(found: &[ScoredEpisode]) -> Vec<i64> {
        found.iter().map(|h| h.episode.sequence_num).collect()
    }

    #[test]
    fn a_third_before_the_rest_after() {
        assert_eq!(split(0), (0, 0));
        assert_eq!(split(2), (0, 2));
        assert_eq!(split(3), (1, 2));
        assert_eq!(split(6), (2, 4));
        assert_eq!(split(10), (3, 7));
    }

    #[test]
    fn groups_are_in_order_and_carry_their_hits_score() {
        let found = expand(
            vec![hit(10, 2.0), hit(20, 1.0)],
            vec![window(9..=12), window(19..=22)],
            10,
        );
        assert_eq!(seqs(&found), [9, 10, 11, 12, 19, 20, 21, 22]);
        assert!(found[..4].iter().all(|h| h.score == 2.0));
        assert!(found[4..].iter().all(|h| h.score == 1.0));
    }

    #[test]
    fn only_the_hit_keeps_the_parts_of_its_score() {
        let parts = crate::model::ScoreParts {
            lexical: 2.0,
            ..Default::default()
        };
        let explained = ScoredEpisode {
            parts: Some(parts),
            ..hit(10, 2.0)
        };
        let found = expand(vec![explained], vec![window(9..=11)], 10);
        let with: Vec<i64> = found
            .iter()
            .filter(|h| h.parts.is_some())
            .map(|h| h.episode.sequence_num)
            .collect();
        assert_eq!(with, [10]);
    }

    #[test]
    fn stays_within_top_k_keeping_hits_and_nearest_neighbours() {
        // As MemMachine: the best hit's whole window first (top_k 3, expand_context 2
        // gave D1:1 and the two turns after it), then the next hit, nearest neighbours
        // first and the earlier one on a tie, until top_k.
        let found = expand(
            vec![hit(10, 2.0), hit(20, 1.0), hit(30, 0.5)],
            vec![window(9..=13), window(19..=22), window(29..=31)],
            8,
        );
        assert_eq!(seqs(&found), [9, 10, 11, 12, 13, 19, 20, 21]);
        let found = expand(vec![hit(10, 2.0)], vec![window(8..=12)], 3);
        assert_eq!(seqs(&found), [9, 10, 11]);
    }

    #[test]
    fn overlapping_windows_give_each_episode_once() {
        let found = expand(
            vec![hit(10, 2.0), hit(11, 1.5), hit(12, 1.0)],
            vec![window(9..=11), window(10..=13), window(11..=14)],
            10,
        );
        assert_eq!(seqs(&found), [9, 10, 11, 12, 13, 14]);
        // 11 and 12 were already in as context: the better hit's score stays.
        assert!(found.iter().take(3).all(|h| h.score == 2.0));
    }

    #[test]
    fn a_hit_without_a_window_is_still_returned() {
        let found = expand(vec![hit(10, 2.0)], vec![Vec::new()], 3);
        assert_eq!(seqs(&found), [10]);
    }
}
