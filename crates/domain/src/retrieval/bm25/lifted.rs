//! Lexical ranking lifted by each document's prior (a named participant, the question's
//! period, a when-question), in standard deviations of the project's BM25 scores. Every
//! match is scored (the spread needs them all), but priors, filters and the cut run
//! only on the documents that can still reach the top k: walked best BM25 score first,
//! the walk stops once a score plus the largest lift falls below the k-th lifted score.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::{Bm25Index, PRUNED_MAX_LIMIT};
use crate::retrieval::fusion;
use crate::retrieval::rescore::Hit;

/// A document's lifted score, ordered as the exhaustive ranking orders them (score,
/// then the later slot first on a tie).
#[derive(Debug, Clone, Copy)]
struct Lifted {
    score: f32,
    slot: u32,
    prior: fusion::Prior,
}

impl Ord for Lifted {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| self.slot.cmp(&other.slot))
    }
}

impl PartialOrd for Lifted {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Lifted {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Lifted {}

impl<T> Bm25Index<T> {
    /// BM25 ranking of the documents matching a term (in their text or context), each
    /// lifted by its `prior` in standard deviations of the project's BM25 scores: the
    /// scores stay BM25's, the order is that of standardised scores plus the prior, as
    /// hybrid ranking adds it. `max_prior` bounds every prior's sum (`participant +
    /// time`) from above; the ranking is exactly the exhaustive one's, ties included.
    pub fn search_lifted(
        &self,
        terms: &[String],
        limit: usize,
        accept: impl Fn(&T) -> bool,
        prior: impl Fn(&T) -> fusion::Prior,
        max_prior: f32,
        explain: bool,
    ) -> Vec<Hit> {
        if self.live == 0 || limit == 0 {
            return Vec::new();
        }
        if limit > PRUNED_MAX_LIMIT {
            return self.search_lifted_exhaustive(terms, limit, accept, prior, explain);
        }
        let scores = self.lexical_scores(terms);
        let values = &scores.values;
        let mut touched = scores.touched.clone();
        touched.sort_unstable();
        touched.dedup();
        let sd = self.exact_moments(values, &touched).1 as f32;
        let reach = sd * max_prior.max(0.0);
        let by_score = |a: &u32, b: &u32| {
            values[*b as usize]
                .total_cmp(&values[*a as usize])
                .then_with(|| b.cmp(a))
        };
        let mut best: BinaryHeap<Reverse<Lifted>> = BinaryHeap::with_capacity(limit + 1);
        let mut rest: &mut [u32] = &mut touched;
        let mut chunk = limit.saturating_mul(4).max(64);
        'walk: while !rest.is_empty() {
            let take = chunk.min(rest.len());
            if take < rest.len() {
                rest.select_nth_unstable_by(take, by_score);
            }
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(take);
            head.sort_unstable_by(by_score);
            for &slot in head.iter() {
                let score = values[slot as usize];
                // Below the k-th even with the largest lift: so is every one after it.
                if best.len() == limit && score + reach < best.peek().expect("full").0.score {
                    break 'walk;
                }
                let payload = &self.docs[slot as usize].payload;
                if !accept(payload) {
                    continue;
                }
                let p = prior(payload);
                best.push(Reverse(Lifted {
                    score: score + sd * (p.participant + p.time),
                    slot,
                    prior: p,
                }));
                if best.len() > limit {
                    best.pop();
                }
            }
            rest = tail;
            chunk = chunk.saturating_mul(4);
        }
        best.into_sorted_vec()
            .into_iter()
            .map(|Reverse(l)| {
                let lexical = values[l.slot as usize];
                Hit {
                    handle: self.docs[l.slot as usize].id,
                    score: l.score,
                    dense: None,
                    parts: explain.then(|| fusion::ScoreParts {
                        lexical,
                        participant: sd * l.prior.participant,
                        time: sd * l.prior.time,
                        ..Default::default()
                    }),
                }
            })
            .collect()
    }

    /// `search_lifted` by lifting every match and sorting them (for a `limit` too
    /// large to keep in a heap).
    pub(super) fn search_lifted_exhaustive(
        &self,
        terms: &[String],
        limit: usize,
        accept: impl Fn(&T) -> bool,
        prior: impl Fn(&T) -> fusion::Prior,
        explain: bool,
    ) -> Vec<Hit> {
        let scores = self.lexical_scores(terms);
        let (_, sd) = fusion::mean_sd_live(&scores.values, &self.alive);
        let sd = sd as f32;
        let mut lifted = vec![0f32; self.docs.len()];
        for &slot in &scores.touched {
            let p = prior(&self.docs[slot as usize].payload);
            lifted[slot as usize] = scores.values[slot as usize] + sd * (p.participant + p.time);
        }
        let best = self.select(&lifted, scores.touched.clone(), limit, accept);
        best.into_iter()
            .map(|(id, score)| {
                let slot = self.slot_of[&id] as usize;
                let parts = explain.then(|| {
                    let p = prior(&self.docs[slot].payload);
                    fusion::ScoreParts {
                        lexical: scores.values[slot],
                        participant: sd * p.participant,
                        time: sd * p.time,
                        ..Default::default()
                    }
                });
                Hit {
                    handle: id,
                    score,
                    dense: None,
                    parts,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{Mix, random_index};
    use crate::retrieval::fusion::Prior;
    use crate::retrieval::tokenize::query_terms;

    /// A prior from the payload (an id): some documents lifted by a "participant",
    /// some by a "time", some by both, as a question's lifts fall.
    fn prior_of(id: &i64) -> Prior {
        Prior {
            participant: if id % 3 == 0 { 3.0 } else { 0.0 },
            time: if id % 5 == 0 { 1.5 } else { 0.0 },
            said: None,
        }
    }

    #[test]
    fn pruned_lifted_search_ranks_exactly_as_the_exhaustive_one() {
        let mut mix = Mix(0x11f7_ed00);
        for round in 0..120 {
            let index = random_index(&mut mix);
            for q in 0..8 {
                let vocabulary = ["red", "kite", "dog", "moon", "tea", "nothing", "hill"];
                let words: Vec<&str> = (0..1 + mix.below(5))
                    .map(|_| vocabulary[mix.below(vocabulary.len())])
                    .collect();
                let terms = query_terms(&words.join(" "));
                let limit = 1 + mix.below(12);
                let keep = mix.below(4) as i64;
                let accept = |id: &i64| keep == 0 || id % 4 != keep;
                let pruned = index.search_lifted(&terms, limit, accept, prior_of, 4.5, true);
                let exhaustive =
                    index.search_lifted_exhaustive(&terms, limit, accept, prior_of, true);
                assert_eq!(pruned, exhaustive, "round {round}, query {q}: {terms:?}");
            }
        }
    }
}
