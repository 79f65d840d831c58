//! Ranking over a project's in-memory index: BM25, vector similarity (the HNSW graph or
//! an exact scan, whichever suits the filter), both fused, and the filtered walks
//! (neighbours of a hit, the newest episodes). Each answers store handles, best first;
//! the rows are then read from the store.

use std::cell::RefCell;

use super::ann::ANN_MIN_VECTORS;
use super::fusion::{Options, Prior};
use super::project_index::{Entry, ProjectIndex};
use super::rescore::Hit;
use super::time_expressions::Period;
use super::weights::RankingWeights;
use crate::model::filter::{Expr, Field, SystemField};
use crate::model::filter_eval::{Fields, Value, matches};

/// Documents the vector graph proposes to hybrid ranking of a large project, at least.
const GRAPH_CANDIDATES: usize = 64;
/// Episodes sampled to judge how selective a filter is.
const FILTER_SAMPLE: usize = 512;

/// Whether an index entry passes the optional filter.
fn passes(filter: Option<&Expr>) -> impl Fn(&Entry) -> bool + '_ {
    move |entry| filter.is_none_or(|filter| matches(filter, entry))
}

/// What a question says beyond its words: the participants it names, the period it
/// names, and whether it asks when; and how the project weighs what it says.
#[derive(Debug)]
pub struct Asked<'a> {
    pub named: &'a [Box<str>],
    pub period: Option<Period>,
    pub when: bool,
    pub weights: &'a RankingWeights,
    /// Each hit carries the parts of its score.
    pub explain: bool,
}

/// Days a turn's event may lie outside the period a question names and still count in
/// it: people round ("last week", "recently").
const TIME_SLACK_DAYS: i64 = 10;

impl Asked<'_> {
    /// Whether any episode can be lifted.
    fn lifts(&self) -> bool {
        let w = self.weights;
        (!self.named.is_empty() && w.participant > 0.0)
            || (self.period.is_some() && w.time > 0.0)
            || (self.when && w.when > 0.0)
    }

    /// The largest lift `prior` can give an episode (what a pruned ranking bounds by).
    fn max_prior(&self) -> f32 {
        let w = self.weights;
        let when = |on: bool, weight: f32| if on { weight.max(0.0) } else { 0.0 };
        when(!self.named.is_empty(), w.participant)
            + when(self.period.is_some(), w.time)
            + when(self.when, w.when)
    }

    /// The lift of an episode: a question naming participants prefers what they said,
    /// one naming a period what happened in it, one asking when what says when.
    fn prior(&self, entry: &Entry) -> Prior {
        // Each field is read only when the question or the weights need it: this runs
        // for every candidate.
        let participant = match self.named {
            [] => 0.0,
            named => match entry.get(&Field::System(SystemField::ProducerId)) {
                Some(Value::Text(id)) if named.iter().any(|n| **n == *id) => {
                    self.weights.participant
                }
                _ => 0.0,
            },
        };
        let said = if self.period.is_some() || self.weights.session > 0.0 {
            match entry.get(&Field::System(SystemField::CreatedAt)) {
                Some(Value::Time(micros)) => Some(micros),
                _ => None,
            }
        } else {
            None
        };
        let in_period = match (self.period, said) {
            (Some(p), Some(said)) => p.holds(entry.time.event_micros(said), TIME_SLACK_DAYS),
            _ => false,
        };
        let says_when = self.when && entry.time.mentions_time;
        Prior {
            participant,
            time: if in_period { self.weights.time } else { 0.0 }
                + if says_when { self.weights.when } else { 0.0 },
            said,
        }
    }
}

impl ProjectIndex {
    /// BM25 ranking for `terms` (already analysed), filtered before the cut to `limit`.
    pub fn lexical(&self, terms: &[String], filter: Option<&Expr>, limit: usize) -> Vec<Hit> {
        if terms.is_empty() {
            return Vec::new();
        }
        self.text
            .search(terms, limit, passes(filter))
            .into_iter()
            .map(|(id, score)| Hit::lexical(id, score))
            .collect()
    }

    /// BM25 ranking for `terms`, lifted as hybrid ranking lifts (`Asked::prior`) when the
    /// question names a participant or a period, or asks when; else `lexical`.
    pub fn lexical_asked(
        &self,
        terms: &[String],
        asked: &Asked<'_>,
        filter: Option<&Expr>,
        limit: usize,
    ) -> Vec<Hit> {
        if !asked.lifts() || terms.is_empty() {
            return self.lexical(terms, filter, limit);
        }
        let prior = |entry: &Entry| asked.prior(entry);
        self.text.search_lifted(
            terms,
            limit,
            passes(filter),
            prior,
            asked.max_prior(),
            asked.explain,
        )
    }

    /// The `limit` episodes whose vectors are most similar to `query`, filtered first,
    /// by the int8 codes (the caller rescores the best exactly, `rescore.rs`).
    pub fn dense(&self, query: &[f32], filter: Option<&Expr>, limit: usize) -> Vec<Hit> {
        let accept = passes(filter);
        let graph = if self.few_pass(filter, &accept) {
            None
        } else {
            self.nearest(query, limit, limit, filter.is_some(), &accept)
        };
        let best = graph.unwrap_or_else(|| {
            let buffer = RefCell::new(Vec::new());
            let scored = self.text.live().filter_map(|(id, entry)| {
                if !accept(entry) {
                    return None;
                }
                Some((id, self.similarity(id, entry, query, &buffer)?))
            });
            super::dense::top_k_scored(scored, limit)
        });
        best.into_iter()
            .map(|(id, similarity)| Hit::dense(id, similarity))
            .collect()
    }

    /// BM25 fused with vector similarity, filtered before the cut; episodes produced by
    /// one of the `named` participants are preferred, and so are those whose event falls
    /// in the period the question names, or that say when, for a question asking when.
    /// Episodes without a vector yet still rank by their text.
    pub fn hybrid(
        &self,
        terms: &[String],
        query: &[f32],
        asked: &Asked<'_>,
        filter: Option<&Expr>,
        limit: usize,
    ) -> Vec<Hit> {
        let accept = passes(filter);
        let prior = |entry: &Entry| asked.prior(entry);
        let buffer = RefCell::new(Vec::new());
        let similarity = |id: i64, entry: &Entry| self.similarity(id, entry, query, &buffer);
        let proposed = if self.few_pass(filter, &accept) {
            None
        } else {
            self.nearest(
                query,
                GRAPH_CANDIDATES.max(limit * 4),
                limit,
                filter.is_some(),
                &accept,
            )
            .map(|hits| hits.into_iter().map(|(id, _)| id).collect::<Vec<i64>>())
        };
        let options = Options {
            weights: asked.weights,
            explain: asked.explain,
            dense_candidates: proposed.as_deref(),
        };
        self.text
            .search_hybrid(terms, similarity, limit, &accept, prior, options)
    }

    /// Episode `handle` with up to `before` and `after` neighbours passing `filter`,
    /// oldest first (none when it is not indexed).
    pub fn neighbours(
        &self,
        handle: i64,
        before: usize,
        after: usize,
        filter: Option<&Expr>,
    ) -> Vec<i64> {
        self.text.neighbours(handle, before, after, passes(filter))
    }

    /// The `limit` most recent episodes passing `filter`, oldest first.
    pub fn newest(&self, filter: &Expr, limit: usize) -> Vec<i64> {
        let mut ids = self.text.newest(limit, |fields| matches(filter, fields));
        ids.reverse();
        ids
    }

    /// Whether the filter is selective enough to rank every episode it passes exactly
    /// (cheaper than walking the graph past the many it rejects); a broad filter, in a
    /// large project, is served by the graph.
    fn few_pass(&self, filter: Option<&Expr>, accept: &impl Fn(&Entry) -> bool) -> bool {
        // Without a graph there is nothing to choose (and no sample to pay for).
        self.ann.is_some()
            && filter.is_some()
            && self.text.estimate_accepted(FILTER_SAMPLE, accept) <= ANN_MIN_VECTORS
    }

    /// Up to `want` nearest accepted episodes by the vector graph; `None` when there is
    /// no graph, or it found fewer than `needed` (a selective filter: the exact scan
    /// then answers).
    fn nearest(
        &self,
        query: &[f32],
        want: usize,
        needed: usize,
        filtered: bool,
        accept: &impl Fn(&Entry) -> bool,
    ) -> Option<Vec<(i64, f32)>> {
        let ann = self.ann.as_ref()?;
        let accepted = |id: i64| self.text.payload(id).is_some_and(accept);
        // The graph holds live episodes only: without a filter every one passes.
        let accepted: Option<&dyn Fn(i64) -> bool> = filtered.then_some(&accepted);
        match ann.search(&ProjectIndex::query_codes(query), want, accepted) {
            Ok(hits) if hits.len() >= needed => Some(hits),
            Ok(_) => None,
            Err(err) => {
                tracing::warn!(error = %err, "vector graph search failed; scanning");
                None
            }
        }
    }
}
