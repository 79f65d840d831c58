//! Hybrid score fusion: BM25 and embedding similarity, each standardised over the
//! project's documents (z-scores, CombSUM of normalised scores; Lee 1997, Montague and
//! Aslam 2001), then added. Unlike reciprocal-rank fusion this keeps how far ahead a
//! document is in each list: on LoCoMo, RRF of the same two lists scored recall@10
//! 0.70, below BM25 alone, while z-score fusion scores 0.75 (BENCHMARKS.md).
//!
//! The similarity side is smoothed over the conversation as the lexical side is: a
//! document's dense score is its own similarity, weighted `own_similarity`, plus its
//! neighbours' within the context window, weighted `context`. Neighbouring turns share
//! a topic, so a turn whose neighbours also resemble the query is more likely the one
//! sought. The weights are the project's (`RankingWeights`, defaults measured).
//!
//! Priors are then added in standard deviations of fused score: a turn produced by a
//! participant the question names ("What did Caroline say about the race?" is most
//! likely answered by something Caroline said: a soft filter on the speaker, as
//! self-querying retrievers turn named entities into metadata filters), a turn whose
//! event falls in the period the question names, or that says when for a question
//! asking when (`project_search::Asked`), and optionally the turns of a session that
//! matches as a whole (`session_lift`).

use std::collections::HashMap;

pub use super::weights::{RankingWeights, ScoreParts};
use crate::stage_time::{Stage, timed};

/// A gap between two turns longer than this starts a new session (a conversation
/// resumed later).
pub const SESSION_GAP_MICROS: i64 = 3_600_000_000;

/// What a document's own fields add to its fused score (`project_search::Asked`), and
/// when it was said (what sessions are told apart by).
#[derive(Debug, Clone, Copy, Default)]
pub struct Prior {
    pub participant: f32,
    pub time: f32,
    pub said: Option<i64>,
}

/// How hybrid ranking weighs its parts and what it reports.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    pub weights: &'a RankingWeights,
    /// Each hit carries the parts of its score.
    pub explain: bool,
    /// The documents a large project's vector graph proposes (`None`: rank them all).
    pub dense_candidates: Option<&'a [i64]>,
}

/// How the fused scores were standardised: what splits a fused score into its parts.
#[derive(Debug, Clone, Copy, Default)]
pub struct Standardised {
    lexical: (f64, f64),
    dense: (f64, f64),
    dense_weight: f32,
    own_weight: f32,
    context_weight: f32,
    /// The similarity a document without a vector counts with (the average).
    missing: f32,
    window: usize,
}

impl Standardised {
    /// How much a fused score moves per unit of the document's own similarity (what
    /// exact rescoring of that similarity adjusts by).
    pub fn own_weight(&self) -> f32 {
        if self.dense.1 < 1e-12 {
            0.0
        } else {
            (f64::from(self.dense_weight * self.own_weight) / self.dense.1) as f32
        }
    }

    /// The lexical, dense and context parts of the fused score at `slot`, whose BM25
    /// score is `lexical` (the other arguments as `hybrid` was given).
    pub fn parts(
        &self,
        slot: usize,
        lexical: f32,
        similarity: impl Fn(usize) -> Option<f32>,
        live: &[bool],
    ) -> ScoreParts {
        let z = |x: f64, (m, sd): (f64, f64)| {
            if sd < 1e-12 {
                0.0
            } else {
                ((x - m) / sd) as f32
            }
        };
        let dense_sd = self.dense.1;
        let scaled = |x: f64| {
            if dense_sd < 1e-12 {
                0.0
            } else {
                (x / dense_sd) as f32
            }
        };
        let first = slot.saturating_sub(self.window);
        let last = (slot + self.window).min(live.len() - 1);
        let neighbours: f32 = (first..=last)
            .filter(|o| *o != slot && live[*o])
            .map(|o| similarity(o).unwrap_or(self.missing))
            .sum();
        let own = f64::from(self.own_weight * similarity(slot).unwrap_or(self.missing));
        ScoreParts {
            lexical: z(f64::from(lexical), self.lexical),
            dense: self.dense_weight * scaled(own - self.dense.0),
            context: self.dense_weight * scaled(f64::from(self.context_weight * neighbours)),
            ..ScoreParts::default()
        }
    }
}

/// Fused scores by slot, for the documents at `slots` (every other slot scores minus
/// infinity). `lexical` gives a slot's BM25 score (0 for no match; asked of `slots`
/// only), `similarity` a slot's cosine with the query (`None`: not embedded yet, taken
/// as the average), `live` which slots hold documents. The lexical side is
/// standardised by `lexical_moments`, the mean and standard deviation of BM25 over
/// every live slot (`bm25::moments`); the dense side over the slots of `sample`, which is every live slot for an
/// exact ranking and an even sample of them when a large project ranks only the
/// candidates its vector graph and its postings propose. Also returns how the scores
/// were standardised (`Standardised`: the parts of a score, and how much it moves per
/// unit of the document's own similarity).
#[allow(clippy::too_many_arguments)]
pub fn hybrid(
    lexical: impl Fn(usize) -> f32,
    lexical_moments: (f64, f64),
    similarity: impl Fn(usize) -> Option<f32>,
    live: &[bool],
    window: usize,
    slots: &[u32],
    sample: &[u32],
    weights: &RankingWeights,
) -> (Vec<f32>, Standardised) {
    let n = live.len();
    // Each similarity is computed once, however many windows it falls in; a large
    // project ranking few candidates keeps them in a map, not a vector of every slot.
    let sparse = (slots.len() + sample.len()) * 64 < n;
    let mut dense_cache: Vec<Option<Option<f32>>> = if sparse { Vec::new() } else { vec![None; n] };
    let mut sparse_cache: SlotMap<Option<f32>> = if sparse {
        SlotMap::with_capacity_and_hasher(
            (slots.len() + sample.len()) * (2 * window + 1),
            Default::default(),
        )
    } else {
        SlotMap::default()
    };
    let mut similarity_at = |slot: usize| {
        if sparse {
            *sparse_cache.entry(slot).or_insert_with(|| similarity(slot))
        } else {
            *dense_cache[slot].get_or_insert_with(|| similarity(slot))
        }
    };
    // The similarities of the sample and their smoothing: dense ranking's time; the
    // candidates' scores, fusion's (`stage_time`).
    let sampled: Vec<f32> = timed(Stage::Dense, || {
        (sample.iter())
            .filter_map(|slot| similarity_at(*slot as usize))
            .collect()
    });
    let mean = if sampled.is_empty() {
        0.0
    } else {
        sampled.iter().sum::<f32>() / sampled.len() as f32
    };
    let mut smoothed = |slot: usize| {
        let first = slot.saturating_sub(window);
        let last = (slot + window).min(n - 1);
        let mut sum = 0.0;
        for (other, _) in live
            .iter()
            .enumerate()
            .take(last + 1)
            .skip(first)
            .filter(|(_, l)| **l)
        {
            let value = similarity_at(other).unwrap_or(mean);
            sum += if other == slot {
                weights.own_similarity * value
            } else {
                weights.context * value
            };
        }
        sum
    };
    let sample_smoothed: Vec<f32> = timed(Stage::Dense, || {
        sample.iter().map(|s| smoothed(*s as usize)).collect()
    });
    let (dense_mean, dense_sd) = mean_sd(&sample_smoothed);
    let (lexical_mean, lexical_sd) = lexical_moments;
    let mut fused = vec![f32::NEG_INFINITY; n];
    timed(Stage::Fusion, || {
        for &slot in slots {
            let slot = slot as usize;
            if !live[slot] {
                continue;
            }
            let dense = if dense_sd < 1e-12 {
                0.0
            } else {
                ((f64::from(smoothed(slot)) - dense_mean) / dense_sd) as f32
            };
            let lexical = if lexical_sd < 1e-12 {
                0.0
            } else {
                ((f64::from(lexical(slot)) - lexical_mean) / lexical_sd) as f32
            };
            fused[slot] = lexical + weights.dense * dense;
        }
    });
    let standardised = Standardised {
        lexical: (lexical_mean, lexical_sd),
        dense: (dense_mean, dense_sd),
        dense_weight: weights.dense,
        own_weight: weights.own_similarity,
        context_weight: weights.context,
        missing: mean,
        window,
    };
    (fused, standardised)
}

/// Slots hash by one multiply: distinct small integers, chosen by the index, not by a
/// client (SipHash's guard against crafted keys buys nothing here and cost a tenth of a
/// large project's hybrid search).
#[derive(Debug, Default, Clone, Copy)]
struct SlotHasher(u64);

impl std::hash::Hasher for SlotHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*byte)).wrapping_mul(GOLDEN);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64).wrapping_mul(GOLDEN);
    }
}

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

type SlotMap<V> = HashMap<usize, V, std::hash::BuildHasherDefault<SlotHasher>>;

/// Lifts the turns of a session that matches as a whole: each candidate gains `weight`
/// times the standardised best fused score among the candidates of its session
/// (sessions split where `said` jumps by more than `SESSION_GAP_MICROS`). `candidates`
/// ascend by slot. Returns each candidate's lift.
pub fn session_lift(
    fused: &mut [f32],
    candidates: &[u32],
    said: impl Fn(usize) -> Option<i64>,
    weight: f32,
) -> HashMap<u32, f32> {
    let mut best_of_session = vec![0f32; candidates.len()];
    let mut start = 0;
    for i in 0..=candidates.len() {
        let boundary = i == candidates.len()
            || (i > 0
                && match (
                    said(candidates[i - 1] as usize),
                    said(candidates[i] as usize),
                ) {
                    (Some(a), Some(b)) => b - a > SESSION_GAP_MICROS || b < a,
                    _ => true,
                });
        if boundary && i > start {
            let best = candidates[start..i]
                .iter()
                .map(|s| fused[*s as usize])
                .fold(f32::NEG_INFINITY, f32::max);
            best_of_session[start..i].fill(best);
            start = i;
        }
    }
    let (mean, sd) = mean_sd(&best_of_session);
    let mut lifts = HashMap::with_capacity(candidates.len());
    for (slot, best) in candidates.iter().zip(best_of_session) {
        let lift = if sd < 1e-12 {
            0.0
        } else {
            weight * ((f64::from(best) - mean) / sd) as f32
        };
        fused[*slot as usize] += lift;
        lifts.insert(*slot, lift);
    }
    lifts
}

/// Mean and standard deviation.
fn mean_sd(values: &[f32]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let n = values.len() as f64;
    let mean = values.iter().map(|v| f64::from(*v)).sum::<f64>() / n;
    let var = values
        .iter()
        .map(|v| (f64::from(*v) - mean).powi(2))
        .sum::<f64>()
        / n;
    (mean, var.sqrt())
}

/// Mean and standard deviation of the live slots' scores, in one pass.
pub(super) fn mean_sd_live(scores: &[f32], live: &[bool]) -> (f64, f64) {
    let (mut n, mut sum, mut squares) = (0usize, 0f64, 0f64);
    for (score, _) in scores.iter().zip(live).filter(|(_, l)| **l) {
        let x = f64::from(*score);
        n += 1;
        sum += x;
        squares += x * x;
    }
    mean_sd_of(n, sum, squares)
}

/// Mean and standard deviation of `n` values from their sum and sum of squares.
pub(super) fn mean_sd_of(n: usize, sum: f64, squares: f64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 0.0);
    }
    let mean = sum / n as f64;
    (mean, (squares / n as f64 - mean * mean).max(0.0).sqrt())
}

/// `(x - mean) / sd` over the live slots; all zeros when the scores do not vary.
pub fn standardise(scores: &[f32], live: &[bool]) -> Vec<f32> {
    let values: Vec<f32> = scores
        .iter()
        .zip(live)
        .filter(|(_, l)| **l)
        .map(|(s, _)| *s)
        .collect();
    let (mean, sd) = mean_sd(&values);
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

    /// Exact fusion: every live slot scored and sampled.
    fn fuse(lexical: &[f32], sims: &[Option<f32>], live: &[bool], window: usize) -> Vec<f32> {
        let all: Vec<u32> = (0..live.len() as u32)
            .filter(|s| live[*s as usize])
            .collect();
        let weights = RankingWeights::default();
        hybrid(
            |slot| lexical[slot],
            mean_sd_live(lexical, live),
            |slot| sims[slot],
            live,
            window,
            &all,
            &all,
            &weights,
        )
        .0
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
        let fused = fuse(&lexical, &sims, &[true; 6], 0);
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
        let fused = fuse(&[0.0; 6], &sims, &live, 1);
        assert!(fused[3] > fused[1], "{fused:?}");
        assert_eq!(fused[5], f32::NEG_INFINITY);
        // Window 0: own similarity only, so 1 and 3 tie.
        let alone = fuse(&[0.0; 6], &sims, &live, 0);
        assert!(close(alone[1], alone[3]));
    }

    #[test]
    fn a_session_matching_as_a_whole_lifts_its_turns() {
        // Slots 0-2 said within minutes, 3-5 a day later; 1 and 4 score alike, but 1's
        // session holds the best match.
        let minute = 60_000_000;
        let said = |slot: usize| {
            Some(if slot < 3 {
                slot as i64 * minute
            } else {
                86_400_000_000 + slot as i64 * minute
            })
        };
        let mut fused = vec![0.0, 1.0, 5.0, 0.0, 1.0, 0.5];
        let lifts = session_lift(&mut fused, &[0, 1, 2, 3, 4, 5], said, 1.0);
        assert!(fused[1] > fused[4], "{fused:?}");
        assert!(lifts[&1] > 0.0 && lifts[&4] < 0.0);
        assert_eq!(lifts[&0], lifts[&2], "one session, one lift");
    }

    #[test]
    fn missing_vectors_count_as_average_and_lexical_still_ranks() {
        let lexical = [0.0, 4.0, 1.0];
        let fused = fuse(&lexical, &[None, None, None], &[true; 3], 2);
        assert!(fused[1] > fused[2] && fused[2] > fused[0], "{fused:?}");
        let some = fuse(&[0.0; 3], &[Some(0.9), None, Some(0.1)], &[true; 3], 0);
        assert!(some[0] > some[1] && some[1] > some[2], "{some:?}");
        assert!(close(some[1], 0.0), "the average scores 0: {some:?}");
    }
}
