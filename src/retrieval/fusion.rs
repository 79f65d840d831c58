//! Hybrid score fusion: BM25 and embedding similarity, each standardised over the
//! project's documents (z-scores, CombSUM of normalised scores; Lee 1997, Montague and
//! Aslam 2001), then added. Unlike reciprocal-rank fusion this keeps how far ahead a
//! document is in each list: on LoCoMo, RRF of the same two lists scored recall@10
//! 0.70, below BM25 alone, while z-score fusion scores 0.75 (BENCHMARKS.md).
//!
//! The similarity side is smoothed over the conversation as the lexical side is: a
//! document's dense score is its own similarity, weighted `SELF_WEIGHT`, plus its
//! neighbours' within the context window. Neighbouring turns share a topic, so a turn
//! whose neighbours also resemble the query is more likely the one sought.

/// Weight of a document's own similarity against each neighbour's.
pub const SELF_WEIGHT: f32 = 4.0;
/// Weight of the (standardised) dense score against the lexical one.
pub const DENSE_WEIGHT: f32 = 1.0;

/// Fused scores by slot. `lexical` holds BM25 scores (0 for no match), `similarities`
/// the cosine of each document with the query (`None`: not embedded yet, taken as the
/// average), `live` which slots hold documents; dead slots score minus infinity.
pub fn hybrid(
    lexical: &[f32],
    similarities: &[Option<f32>],
    live: &[bool],
    window: usize,
) -> Vec<f32> {
    let present: Vec<f32> = similarities.iter().flatten().copied().collect();
    let mean = if present.is_empty() {
        0.0
    } else {
        present.iter().sum::<f32>() / present.len() as f32
    };
    let similarity = |slot: usize| {
        if live[slot] {
            similarities[slot].unwrap_or(mean)
        } else {
            0.0
        }
    };
    let smoothed: Vec<f32> = (0..live.len())
        .map(|slot| {
            let first = slot.saturating_sub(window);
            let last = (slot + window).min(live.len() - 1);
            let neighbours: f32 = (first..=last).filter(|n| *n != slot).map(similarity).sum();
            SELF_WEIGHT * similarity(slot) + neighbours
        })
        .collect();
    let lexical = standardise(lexical, live);
    let dense = standardise(&smoothed, live);
    (0..live.len())
        .map(|slot| {
            if live[slot] {
                lexical[slot] + DENSE_WEIGHT * dense[slot]
            } else {
                f32::NEG_INFINITY
            }
        })
        .collect()
}

/// `(x - mean) / sd` over the live slots; all zeros when the scores do not vary.
pub fn standardise(scores: &[f32], live: &[bool]) -> Vec<f32> {
    let values = || {
        scores
            .iter()
            .zip(live)
            .filter(|(_, l)| **l)
            .map(|(s, _)| *s)
    };
    let n = values().count();
    if n == 0 {
        return vec![0.0; scores.len()];
    }
    let mean = values().map(f64::from).sum::<f64>() / n as f64;
    let var = values().map(|s| (f64::from(s) - mean).powi(2)).sum::<f64>() / n as f64;
    let sd = var.sqrt();
    if sd < 1e-12 {
        return vec![0.0; scores.len()];
    }
    scores
        .iter()
        .map(|s| ((f64::from(*s) - mean) / sd) as f32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f32, b: f32) -> bool {
        (a - b).abs() < 1e-5
    }

    #[test]
    fn standardise_gives_zero_mean_and_unit_spread_over_live_slots() {
        let z = standardise(&[1.0, 2.0, 3.0, 100.0], &[true, true, true, false]);
        assert!(close(z[0], -1.224_745) && close(z[1], 0.0) && close(z[2], 1.224_745));
        assert_eq!(standardise(&[5.0, 5.0], &[true, true]), [0.0, 0.0]);
        assert_eq!(standardise(&[1.0], &[false]), [0.0]);
    }

    #[test]
    fn agreement_beats_a_lead_in_one_list() {
        // Slot 0 leads lexically, slot 2 leads in similarity, slot 1 is second in both.
        let lexical = [3.0, 2.5, 0.0, 0.0, 0.0, 0.0];
        let sims = [0.1, 0.6, 0.7, 0.1, 0.1, 0.1].map(Some);
        let fused = hybrid(&lexical, &sims, &[true; 6], 0);
        let best = (0..6)
            .max_by(|a, b| fused[*a].total_cmp(&fused[*b]))
            .unwrap();
        assert_eq!(best, 1, "{fused:?}");
    }

    #[test]
    fn neighbours_similarity_counts_and_dead_slots_are_out() {
        // Slots 1 and 3 have the same own similarity; 3's neighbours resemble the query.
        let sims = [0.0, 0.5, 0.0, 0.5, 0.9, 0.0].map(Some);
        let live = [true, true, true, true, true, false];
        let fused = hybrid(&[0.0; 6], &sims, &live, 1);
        assert!(fused[3] > fused[1], "{fused:?}");
        assert_eq!(fused[5], f32::NEG_INFINITY);
        // Window 0: own similarity only, so 1 and 3 tie.
        let alone = hybrid(&[0.0; 6], &sims, &live, 0);
        assert!(close(alone[1], alone[3]));
    }

    #[test]
    fn missing_vectors_count_as_average_and_lexical_still_ranks() {
        let lexical = [0.0, 4.0, 1.0];
        let fused = hybrid(&lexical, &[None, None, None], &[true; 3], 2);
        assert!(fused[1] > fused[2] && fused[2] > fused[0], "{fused:?}");
        let some = hybrid(&[0.0; 3], &[Some(0.9), None, Some(0.1)], &[true; 3], 0);
        assert!(some[0] > some[1] && some[1] > some[2], "{some:?}");
        assert!(close(some[1], 0.0), "the average scores 0: {some:?}");
    }
}
