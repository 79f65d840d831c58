//! An in-memory BM25 index of one project's episodes (Okapi BM25, k1 = 1.2, b = 0.75,
//! Lucene's IDF). A top-k search visits only the documents that can still make the
//! top k (MaxScore, `maxscore.rs`); hybrid ranking, which needs every score, walks
//! all the postings of the query's terms into a dense accumulator.
//!
//! Each document is scored on two fields (BM25F-style document expansion with
//! context): its own text, and its *context*, the text of itself and of the
//! `CONTEXT_WINDOW` documents on either side in insertion order. A chat turn such as
//! "Yes, twice last year!" says little on its own; its neighbours say what it answers.
//! The context field is derived at query time from the postings (a posting at slot p
//! counts for every slot within the window around p), so inserting or removing a
//! document never rewrites its neighbours; only each term's context document
//! frequency is kept current. On LoCoMo this lifts recall@10 from 0.61 to 0.72 (see
//! BENCHMARKS.md).

mod lifted;
mod maxscore;
mod moments;
mod persist;
mod postings;

use std::collections::HashMap;

use self::maxscore::{Scorer, Term};
use self::postings::{Postings, Slots, Sweep};
use super::rescore::{Dense, Hit};
use super::{fusion, heap, tokenize};
use crate::stage_time::{Stage, timed};

const K1: f32 = 1.2;
const B: f32 = 0.75;
/// Documents on either side that make up a document's context field.
pub const CONTEXT_WINDOW: usize = 2;
/// Weight of the context field against the document's own text.
pub const CONTEXT_WEIGHT: f32 = 2.0;
/// Documents ranked by BM25 that a large project's hybrid search considers beside the
/// nearest ones by vector.
const LEXICAL_CANDIDATES: usize = 1000;
/// Documents whose similarity estimates the spread of similarities in a large project.
const SIMILARITY_SAMPLE: usize = 1024;
/// Compaction drops deleted documents from the postings once they are this many and
/// more than a quarter of the live ones: under steady churn an index stays within a
/// quarter of its live size (a long soak's memory grew while they piled up to parity).
const COMPACT_AFTER: usize = 1024;
/// Above this many results a search scores exhaustively: pruning needs a k-th best
/// score to prune by, and a dense pass sorts many results faster.
const PRUNED_MAX_LIMIT: usize = 1024;

/// How hybrid ranking of a large project (one whose vector graph proposes the dense
/// candidates) finds its lexical candidates and the spread of BM25 it standardises by.
#[derive(Debug, Clone, Copy)]
pub struct HybridPlan {
    /// Documents ranked by BM25 that are considered beside the dense candidates.
    pub lexical_candidates: usize,
    /// Query terms with at most this many postings in all are scored exhaustively:
    /// cheaper than pruning, and the spread is then exact.
    pub exact_postings: usize,
    /// Beyond, the lexical candidates come from MaxScore and the spread is estimated
    /// from about this many postings of each term (`moments.rs`).
    pub sampled_postings: usize,
}

impl HybridPlan {
    /// Every match scored, as hybrid ranking did before pruning.
    pub const EXHAUSTIVE: HybridPlan = HybridPlan {
        lexical_candidates: LEXICAL_CANDIDATES,
        exact_postings: usize::MAX,
        sampled_postings: usize::MAX,
    };
}

impl Default for HybridPlan {
    fn default() -> Self {
        HybridPlan {
            lexical_candidates: LEXICAL_CANDIDATES,
            exact_postings: 16_384,
            sampled_postings: 256,
        }
    }
}

/// BM25 scores as hybrid ranking reads them: of every slot, or of the candidates.
enum Lexical<'a> {
    All(Scores<'a>),
    Found(HashMap<u32, f32>),
}

impl Lexical<'_> {
    fn at(&self, slot: usize) -> f32 {
        match self {
            Lexical::All(scores) => scores.values[slot],
            Lexical::Found(found) => found.get(&(slot as u32)).copied().unwrap_or(0.0),
        }
    }
}

#[derive(Debug)]
struct Doc<T> {
    id: i64,
    /// What the caller keeps with the document (for filtering).
    payload: T,
    /// Its distinct term ids, ascending (empty once removed): to update document
    /// frequencies on removal and to tell which terms a context window holds.
    terms: Box<[u32]>,
}

#[derive(Debug)]
pub struct Bm25Index<T = ()> {
    /// Stemmed term to term id.
    vocab: HashMap<Box<str>, u32>,
    /// Lower-cased word to the id of its stem.
    word_ids: HashMap<Box<str>, u32>,
    postings: Vec<Postings>,
    /// Live documents holding each term.
    df: Vec<u32>,
    /// Live documents whose context holds each term (those within the window of a
    /// live posting): the context field's document frequency.
    context_df: Vec<u32>,
    docs: Vec<Doc<T>>,
    /// Per slot: whether it is live, and the document's length; dense, so per-query
    /// passes over slots stay in cache.
    alive: Vec<bool>,
    lens: Vec<u32>,
    slot_of: HashMap<i64, u32>,
    live: usize,
    total_len: u64,
    /// Documents on either side in a document's context field (0: no context field).
    context_window: usize,
    pool: ScorePool,
}

impl<T> Default for Bm25Index<T> {
    fn default() -> Self {
        Bm25Index {
            vocab: HashMap::new(),
            word_ids: HashMap::new(),
            postings: Vec::new(),
            df: Vec::new(),
            context_df: Vec::new(),
            docs: Vec::new(),
            alive: Vec::new(),
            lens: Vec::new(),
            slot_of: HashMap::new(),
            live: 0,
            total_len: 0,
            context_window: CONTEXT_WINDOW,
            pool: ScorePool::default(),
        }
    }
}

impl<T> Bm25Index<T> {
    pub fn new() -> Bm25Index<T> {
        Bm25Index::default()
    }

    /// An index whose context field spans `window` documents on either side (0: none).
    pub fn with_context_window(window: usize) -> Bm25Index<T> {
        Bm25Index {
            context_window: window,
            ..Bm25Index::default()
        }
    }

    /// Live documents.
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Indexes document `id` with its payload; a document already indexed is left as it is.
    pub fn insert(&mut self, id: i64, text: &str, payload: T) {
        if self.slot_of.contains_key(&id) {
            return;
        }
        let slot = self.docs.len() as u32;
        let mut ids: Vec<u32> = Vec::new();
        tokenize::for_each_word(text, |word| ids.push(self.word_id(word)));
        let len = ids.len() as u32;
        ids.sort_unstable();
        let mut terms: Vec<(u32, u32)> = Vec::with_capacity(ids.len());
        for id in ids {
            match terms.last_mut() {
                Some((last, tf)) if *last == id => *tf += 1,
                _ => terms.push((id, 1)),
            }
        }
        let term_ids: Box<[u32]> = terms.iter().map(|(term, _)| *term).collect();
        if self.context_window > 0 {
            self.cover_from_new(slot, &term_ids);
        }
        for &(term, tf) in &terms {
            self.postings[term as usize].push(slot, tf);
            self.df[term as usize] += 1;
        }
        self.docs.push(Doc {
            id,
            payload,
            terms: term_ids,
        });
        self.alive.push(true);
        self.lens.push(len);
        self.slot_of.insert(id, slot);
        self.live += 1;
        self.total_len += u64::from(len);
        if self.context_window > 0 {
            for term in self.terms_around(slot) {
                self.context_df[term as usize] += 1;
            }
        }
    }

    /// The term id of a lower-cased word; stemming (the costly part of indexing) runs
    /// once per distinct word.
    fn word_id(&mut self, word: &str) -> u32 {
        if let Some(&id) = self.word_ids.get(word) {
            return id;
        }
        let id = self.term_id(tokenize::stem(word));
        self.word_ids.insert(word.into(), id);
        id
    }

    fn term_id(&mut self, term: String) -> u32 {
        if let Some(&id) = self.vocab.get(term.as_str()) {
            return id;
        }
        let id = self.vocab.len() as u32;
        self.vocab.insert(term.into_boxed_str(), id);
        self.postings.push(Postings::default());
        self.df.push(0);
        self.context_df.push(0);
        id
    }

    /// The live slots `first..=last` of the window around `slot` (clamped to the index).
    fn window_bounds(&self, slot: u32) -> (u32, u32) {
        let w = self.context_window as u32;
        let last = (slot as usize + w as usize).min(self.docs.len() - 1) as u32;
        (slot.saturating_sub(w), last)
    }

    /// Whether a live slot in `first..=last`, other than `except`, holds `term`.
    fn holds(&self, term: u32, (first, last): (u32, u32), except: u32) -> bool {
        (first..=last).any(|s| {
            s != except
                && self.alive[s as usize]
                && self.docs[s as usize].terms.binary_search(&term).is_ok()
        })
    }

    /// The distinct terms of the live documents in the window around live `slot`:
    /// those whose context holds it.
    fn terms_around(&self, slot: u32) -> Vec<u32> {
        let (first, last) = self.window_bounds(slot);
        let mut terms: Vec<u32> = (first..=last)
            .filter(|s| self.alive[*s as usize])
            .flat_map(|s| self.docs[s as usize].terms.iter().copied())
            .collect();
        terms.sort_unstable();
        terms.dedup();
        terms
    }

    /// Counts, for each term of the document about to take `slot` (the last), the
    /// live slots before it that its window newly brings into the term's context.
    fn cover_from_new(&mut self, slot: u32, terms: &[u32]) {
        let w = self.context_window as u32;
        for &term in terms {
            for s in slot.saturating_sub(w)..slot {
                let seen = (s.saturating_sub(w), slot - 1);
                if self.alive[s as usize] && !self.holds(term, seen, u32::MAX) {
                    self.context_df[term as usize] += 1;
                }
            }
        }
    }

    /// Uncounts live `slot` from the contexts it is in, and its neighbours from the
    /// contexts that only its own terms brought them into.
    fn uncover(&mut self, slot: u32) {
        for term in self.terms_around(slot) {
            self.context_df[term as usize] -= 1;
        }
        let (first, last) = self.window_bounds(slot);
        let terms = std::mem::take(&mut self.docs[slot as usize].terms);
        let neighbours: Vec<u32> = (first..=last)
            .filter(|s| *s != slot && self.alive[*s as usize])
            .collect();
        for &term in terms.iter() {
            for &s in &neighbours {
                if !self.holds(term, self.window_bounds(s), slot) {
                    self.context_df[term as usize] -= 1;
                }
            }
        }
        self.docs[slot as usize].terms = terms;
    }

    /// Removes document `id` if it is indexed.
    pub fn remove(&mut self, id: i64) {
        let Some(slot) = self.slot_of.remove(&id) else {
            return;
        };
        if self.context_window > 0 {
            self.uncover(slot);
        }
        // Only live documents' terms are read again.
        let terms = std::mem::take(&mut self.docs[slot as usize].terms);
        self.alive[slot as usize] = false;
        for &term in terms.iter() {
            self.df[term as usize] -= 1;
        }
        self.live -= 1;
        self.total_len -= u64::from(self.lens[slot as usize]);
        let dead = self.docs.len() - self.live;
        if dead >= COMPACT_AFTER && dead * 4 > self.live {
            self.compact();
        }
    }

    /// Rebuilds postings and slots without the removed documents.
    fn compact(&mut self) {
        let mut renumber = vec![u32::MAX; self.docs.len()];
        let docs = std::mem::replace(&mut self.docs, Vec::with_capacity(self.live));
        let (alive, lens) = (
            std::mem::take(&mut self.alive),
            std::mem::take(&mut self.lens),
        );
        self.slot_of.clear();
        for (old, doc) in docs.into_iter().enumerate().filter(|(old, _)| alive[*old]) {
            let slot = self.docs.len() as u32;
            renumber[old] = slot;
            self.slot_of.insert(doc.id, slot);
            self.alive.push(true);
            self.lens.push(lens[old]);
            self.docs.push(doc);
        }
        for postings in &mut self.postings {
            *postings =
                postings.renumbered(|old| Some(renumber[old as usize]).filter(|s| *s != u32::MAX));
        }
        self.recount_context();
    }

    /// Counts every term's context document frequency afresh.
    fn recount_context(&mut self) {
        if self.context_window == 0 || self.docs.is_empty() {
            return;
        }
        let slots = self.slots();
        let counts: Vec<u32> = (self.postings.iter())
            .map(|postings| Sweep::new(postings, slots).count() as u32)
            .collect();
        self.context_df = counts;
    }

    /// Releases the spare capacity growth left behind (after loading a project).
    pub fn shrink(&mut self) {
        self.vocab.shrink_to_fit();
        self.word_ids.shrink_to_fit();
        self.postings.iter_mut().for_each(Postings::shrink);
        self.postings.shrink_to_fit();
        self.df.shrink_to_fit();
        self.context_df.shrink_to_fit();
        self.docs.shrink_to_fit();
        self.alive.shrink_to_fit();
        self.lens.shrink_to_fit();
        self.slot_of.shrink_to_fit();
    }

    /// Heap bytes this index holds (by its containers' capacities), `payload` giving
    /// each held payload's own heap bytes (beyond its size, which is counted here).
    pub fn heap_bytes(&self, payload: impl Fn(&T) -> usize) -> usize {
        let strings = |map: &HashMap<Box<str>, u32>| {
            heap::map(map) + map.keys().map(|k| k.len()).sum::<usize>()
        };
        strings(&self.vocab)
            + strings(&self.word_ids)
            + heap::vec(&self.postings)
            + self
                .postings
                .iter()
                .map(Postings::heap_bytes)
                .sum::<usize>()
            + heap::vec(&self.df)
            + heap::vec(&self.context_df)
            + heap::vec(&self.docs)
            + self
                .docs
                .iter()
                .map(|doc| heap::boxed(&doc.terms[..]) + payload(&doc.payload))
                .sum::<usize>()
            + heap::vec(&self.alive)
            + heap::vec(&self.lens)
            + heap::map(&self.slot_of)
            + self.pool.heap_bytes()
    }

    /// About how many live documents `accept` takes, judged from an even sample of
    /// `samples` of them (exact when the index holds no more).
    pub fn estimate_accepted(&self, samples: usize, accept: impl Fn(&T) -> bool) -> usize {
        let stride = (self.live / samples.max(1)).max(1);
        let (mut seen, mut taken) = (0usize, 0usize);
        for (_, payload) in self.live().step_by(stride) {
            seen += 1;
            taken += usize::from(accept(payload));
        }
        if seen == 0 {
            return 0;
        }
        taken * self.live / seen
    }

    /// The payload of live document `id`.
    pub fn payload(&self, id: i64) -> Option<&T> {
        let slot = *self.slot_of.get(&id)?;
        Some(&self.docs[slot as usize].payload)
    }

    /// The payload of document `id`, if it is indexed.
    pub fn payload_mut(&mut self, id: i64) -> Option<&mut T> {
        let slot = *self.slot_of.get(&id)?;
        Some(&mut self.docs[slot as usize].payload)
    }

    /// Every live document as `(id, payload)`, oldest first.
    pub fn live(&self) -> impl Iterator<Item = (i64, &T)> {
        self.docs
            .iter()
            .zip(&self.alive)
            .filter(|(_, live)| **live)
            .map(|(doc, _)| (doc.id, &doc.payload))
    }

    /// Document `id` with up to `before` and `after` of its neighbours in insertion order
    /// whose payload `accept`s, oldest first; empty if `id` is not indexed.
    pub fn neighbours(
        &self,
        id: i64,
        before: usize,
        after: usize,
        accept: impl Fn(&T) -> bool,
    ) -> Vec<i64> {
        let Some(&slot) = self.slot_of.get(&id) else {
            return Vec::new();
        };
        let wanted = |s: &usize| self.alive[*s] && accept(&self.docs[*s].payload);
        let slot = slot as usize;
        let mut ids: Vec<i64> = (0..slot)
            .rev()
            .filter(wanted)
            .take(before)
            .map(|s| self.docs[s].id)
            .collect();
        ids.reverse();
        ids.push(id);
        ids.extend(
            (slot + 1..self.docs.len())
                .filter(wanted)
                .take(after)
                .map(|s| self.docs[s].id),
        );
        ids
    }

    /// The ids of the `limit` most recently inserted live documents whose payload
    /// `accept`s, newest first.
    pub fn newest(&self, limit: usize, accept: impl Fn(&T) -> bool) -> Vec<i64> {
        (0..self.docs.len())
            .rev()
            .filter(|s| self.alive[*s] && accept(&self.docs[*s].payload))
            .take(limit)
            .map(|s| self.docs[s].id)
            .collect()
    }

    /// The `limit` best documents for the (already analysed) query terms whose payload
    /// `accept`s, best first, as `(id, score)`; only documents matching a term (in
    /// their own text or their context) count. Exactly `search_exhaustive`'s ranking,
    /// ties included, without scoring most documents.
    pub fn search(
        &self,
        terms: &[String],
        limit: usize,
        accept: impl Fn(&T) -> bool,
    ) -> Vec<(i64, f32)> {
        if self.live == 0 || limit == 0 {
            return Vec::new();
        }
        if limit > PRUNED_MAX_LIMIT {
            return self.search_exhaustive(terms, limit, accept);
        }
        let scorer = self.scorer();
        let terms = self.terms(terms);
        scorer
            .top_k(&terms, limit, |slot| {
                accept(&self.docs[slot as usize].payload)
            })
            .into_iter()
            .map(|(slot, score)| (self.docs[slot as usize].id, score))
            .collect()
    }

    /// `search` by scoring every document matching a term.
    pub fn search_exhaustive(
        &self,
        terms: &[String],
        limit: usize,
        accept: impl Fn(&T) -> bool,
    ) -> Vec<(i64, f32)> {
        if self.live == 0 || limit == 0 {
            return Vec::new();
        }
        let scores = self.lexical_scores(terms);
        self.select(&scores.values, scores.touched.clone(), limit, accept)
    }

    /// Hybrid ranking: BM25 fused with the documents' `similarity` to the query (the
    /// cosine of their vectors; `None` for a document not embedded yet), best first.
    /// See `fusion::hybrid` for how the two are combined. Without `dense_candidates`
    /// every live document is a candidate, so one sharing no word with the query can
    /// still be found. A large project passes the nearest documents its vector graph
    /// found instead: then those, and the best `LEXICAL_CANDIDATES` by BM25, are ranked.
    /// When the query's terms have many postings, those come from MaxScore, the dense
    /// candidates' BM25 scores are looked up, and the spread of BM25 that fusion
    /// standardises by is estimated from a sample of postings (`HybridPlan`): the
    /// scores then differ from the exhaustive ones by `a * bm25 + b`, the same `a`
    /// and `b` for every candidate (`pruned_hybrid_tests.rs`).
    /// `similarity` is given each document's id and payload; `prior` says what a
    /// document's own fields add (`fusion::Prior`).
    pub fn search_hybrid(
        &self,
        terms: &[String],
        similarity: impl Fn(i64, &T) -> Option<f32>,
        limit: usize,
        accept: impl Fn(&T) -> bool,
        prior: impl Fn(&T) -> fusion::Prior,
        options: fusion::Options<'_>,
    ) -> Vec<Hit> {
        let plan = HybridPlan::default();
        self.search_hybrid_planned(terms, similarity, limit, accept, prior, options, plan)
    }

    /// `search_hybrid` by `plan` (`HybridPlan::EXHAUSTIVE`: scoring every match).
    #[allow(clippy::too_many_arguments)]
    pub fn search_hybrid_planned(
        &self,
        terms: &[String],
        similarity: impl Fn(i64, &T) -> Option<f32>,
        limit: usize,
        accept: impl Fn(&T) -> bool,
        prior: impl Fn(&T) -> fusion::Prior,
        options: fusion::Options<'_>,
        plan: HybridPlan,
    ) -> Vec<Hit> {
        let fusion::Options {
            weights,
            explain,
            dense_candidates,
        } = options;
        if self.live == 0 || limit == 0 {
            return Vec::new();
        }
        let live = &self.alive;
        let all_live = || (0..self.docs.len() as u32).filter(|slot| live[*slot as usize]);
        let scored = self.terms(terms);
        let postings: usize = scored.iter().map(|t| t.postings.len()).sum();
        let (lexical, moments, candidates, sample) =
            timed(Stage::Lexical, || match dense_candidates {
                None => {
                    // The filter applies first: only accepted documents are ranked, and
                    // similarities are standardised over them.
                    let scores = self.lexical_scores(terms);
                    let moments = fusion::mean_sd_live(&scores.values, live);
                    let accepted: Vec<u32> = all_live()
                        .filter(|slot| accept(&self.docs[*slot as usize].payload))
                        .collect();
                    (Lexical::All(scores), moments, accepted.clone(), accepted)
                }
                Some(ids) => {
                    // Every stride-th slot, if live: no pass over every slot.
                    let stride = (self.live / SIMILARITY_SAMPLE).max(1);
                    let sample = (0..self.docs.len() as u32)
                        .step_by(stride)
                        .filter(|slot| live[*slot as usize])
                        .collect();
                    let dense = ids.iter().filter_map(|id| self.slot_of.get(id).copied());
                    if postings <= plan.exact_postings {
                        let scores = self.lexical_scores(terms);
                        let mut touched = scores.touched.clone();
                        touched.sort_unstable();
                        let moments = self.exact_moments(&scores.values, &touched);
                        let mut candidates =
                            self.best_by(&scores.values, touched, plan.lexical_candidates);
                        candidates.extend(dense);
                        candidates.sort_unstable();
                        candidates.dedup();
                        (Lexical::All(scores), moments, candidates, sample)
                    } else {
                        let scorer = self.scorer();
                        let mut found: HashMap<u32, f32> = scorer
                            .top_k(&scored, plan.lexical_candidates, |_| true)
                            .into_iter()
                            .collect();
                        for slot in dense {
                            found
                                .entry(slot)
                                .or_insert_with(|| scorer.score_at(&scored, slot));
                        }
                        let sums = moments::estimate(&scorer, &scored, plan.sampled_postings);
                        let moments = fusion::mean_sd_of(self.live, sums.sum, sums.squares);
                        let mut candidates: Vec<u32> = found.keys().copied().collect();
                        candidates.sort_unstable();
                        (Lexical::Found(found), moments, candidates, sample)
                    }
                }
            });
        let similarity_at = |slot: usize| {
            let doc = &self.docs[slot];
            similarity(doc.id, &doc.payload)
        };
        let (mut fused, standardised) = fusion::hybrid(
            |slot| lexical.at(slot),
            moments,
            similarity_at,
            live,
            self.context_window,
            &candidates,
            &sample,
            weights,
        );
        let prior_at = |slot: u32| prior(&self.docs[slot as usize].payload);
        // Lifts, the cut and the hits: fusion's time (`stage_time`).
        timed(Stage::Fusion, || {
            for &slot in &candidates {
                let p = prior_at(slot);
                fused[slot as usize] += p.participant + p.time;
            }
            let sessions = (weights.session > 0.0).then(|| {
                fusion::session_lift(
                    &mut fused,
                    &candidates,
                    |slot| prior_at(slot as u32).said,
                    weights.session,
                )
            });
            let best = self.select(&fused, candidates, limit, accept);
            let own_weight = standardised.own_weight();
            best.into_iter()
                .map(|(id, score)| {
                    let slot = self.slot_of[&id] as usize;
                    let dense = similarity_at(slot).map(|similarity| Dense {
                        similarity,
                        weight: own_weight,
                    });
                    let parts = explain.then(|| {
                        let p = prior_at(slot as u32);
                        fusion::ScoreParts {
                            participant: p.participant,
                            time: p.time,
                            session: sessions
                                .as_ref()
                                .and_then(|s| s.get(&(slot as u32)).copied())
                                .unwrap_or(0.0),
                            ..standardised.parts(slot, lexical.at(slot), similarity_at, live)
                        }
                    });
                    Hit {
                        handle: id,
                        score,
                        dense,
                        parts,
                    }
                })
                .collect()
        })
    }

    /// The mean and standard deviation of the BM25 scores of `terms` over the live
    /// documents: exact, and as pruned hybrid ranking estimates them from about
    /// `sampled_postings` postings of each term (to measure the estimate).
    pub fn lexical_spread(&self, terms: &[String], sampled_postings: usize) -> [(f64, f64); 2] {
        if self.live == 0 {
            return [(0.0, 0.0); 2];
        }
        let scores = self.lexical_scores(terms);
        let exact = fusion::mean_sd_live(&scores.values, &self.alive);
        let sums = moments::estimate(&self.scorer(), &self.terms(terms), sampled_postings);
        [exact, fusion::mean_sd_of(self.live, sums.sum, sums.squares)]
    }

    /// What scoring needs of the index now.
    fn scorer(&self) -> Scorer<'_> {
        let n = self.live as f32;
        let avg_len = self.total_len as f32 / n;
        // A context spans up to 2w+1 documents (fewer at the ends of a small index).
        let avg_context_len = avg_len * ((2 * self.context_window + 1) as f32).min(n);
        Scorer {
            slots: self.slots(),
            lens: &self.lens,
            avg_len,
            avg_context_len,
            context_norm: std::cell::Cell::new((u32::MAX, 0.0)),
        }
    }

    fn slots(&self) -> Slots<'_> {
        Slots {
            alive: &self.alive,
            window: self.context_window as u32,
        }
    }

    /// The query terms the index holds live documents of, in query order.
    fn terms(&self, terms: &[String]) -> Vec<Term<'_>> {
        let n = self.live as f32;
        terms
            .iter()
            .filter_map(|term| {
                let id = *self.vocab.get(term.as_str())? as usize;
                let df = self.df[id];
                (df > 0).then(|| Term {
                    postings: &self.postings[id],
                    idf: bm25_idf(n, df as f32),
                    context_idf: bm25_idf(n, self.context_df[id] as f32),
                    live: df,
                })
            })
            .collect()
    }

    /// BM25 scores by slot (own text plus weighted context), and the slots scored. The
    /// context field's document frequency is counted here, not read from
    /// `context_df`, so the pruned search is checked against an independent count.
    fn lexical_scores(&self, terms: &[String]) -> Scores<'_> {
        let scorer = self.scorer();
        let n = self.live as f32;
        let mut scores = self.pool.take(self.docs.len());
        let mut context: Vec<(u32, u32)> = Vec::new();
        for term in self.terms(terms) {
            for (slot, tf) in term.postings.iter() {
                if self.alive[slot as usize] {
                    scores.add(slot, scorer.own(term.idf, slot, tf));
                }
            }
            if self.context_window == 0 {
                continue;
            }
            context.clear();
            let sweep = Sweep::new(term.postings, self.slots());
            context.extend(sweep.map(|(slot, _, tf)| (slot, tf)));
            let context_idf = bm25_idf(n, context.len() as f32);
            for &(slot, tf) in &context {
                scores.add(slot, scorer.context(context_idf, slot, tf));
            }
        }
        scores
    }

    /// The mean and standard deviation of `values` over every live slot, summed over
    /// the scored ones (`touched`, in slot order): `fusion::mean_sd_live`'s bits
    /// (adding a zero changes no sum), without a pass over every slot.
    fn exact_moments(&self, values: &[f32], touched: &[u32]) -> (f64, f64) {
        let (mut sum, mut squares) = (0f64, 0f64);
        for &slot in touched {
            let x = f64::from(values[slot as usize]);
            sum += x;
            squares += x * x;
        }
        fusion::mean_sd_of(self.live, sum, squares)
    }

    /// The (at most) `count` slots of `slots` with the highest scores (the later slot
    /// first among ties, as `Scorer::top_k` takes them), in no order.
    fn best_by(&self, scores: &[f32], mut slots: Vec<u32>, count: usize) -> Vec<u32> {
        if slots.len() > count {
            slots.select_nth_unstable_by(count, |a, b| {
                scores[*b as usize]
                    .total_cmp(&scores[*a as usize])
                    .then_with(|| b.cmp(a))
            });
            slots.truncate(count);
        }
        slots
    }

    /// The `limit` best of `candidates` by `scores` whose payload `accept`s.
    fn select(
        &self,
        scores: &[f32],
        mut candidates: Vec<u32>,
        limit: usize,
        accept: impl Fn(&T) -> bool,
    ) -> Vec<(i64, f32)> {
        let by_score = |a: &u32, b: &u32| {
            scores[*b as usize]
                .total_cmp(&scores[*a as usize])
                .then_with(|| b.cmp(a))
        };
        // Best first, in growing chunks, so the filter runs on as few documents as
        // it must: a selective filter costs a few more chunks, never a full sort.
        // Never more than there are candidates, whatever `limit` a caller got through.
        let limit = limit.min(candidates.len());
        let mut best = Vec::with_capacity(limit);
        let mut rest: &mut [u32] = &mut candidates;
        let mut chunk = limit.saturating_mul(4).max(64);
        while best.len() < limit && !rest.is_empty() {
            let take = chunk.min(rest.len());
            if take < rest.len() {
                rest.select_nth_unstable_by(take, by_score);
            }
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(take);
            head.sort_unstable_by(by_score);
            let accepted = head
                .iter()
                .filter(|slot| accept(&self.docs[**slot as usize].payload))
                .take(limit - best.len());
            best.extend(
                accepted.map(|slot| (self.docs[*slot as usize].id, scores[*slot as usize])),
            );
            rest = tail;
            chunk = chunk.saturating_mul(4);
        }
        best
    }
}

/// Lucene's BM25 IDF: never negative.
fn bm25_idf(n: f32, df: f32) -> f32 {
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

/// BM25's saturating term-frequency factor, `norm` being k1 times the length norm.
fn saturate(tf: u32, norm: f32) -> f32 {
    let tf = tf as f32;
    tf * (K1 + 1.0) / (tf + norm)
}

/// Score buffers of one entry per slot, all zero, kept between queries: a fresh one
/// for a large index costs page faults and zeroing on every query.
#[derive(Debug, Default)]
struct ScorePool(std::sync::Mutex<Vec<Vec<f32>>>);

/// Buffers kept: about one per core searching at once.
const POOLED_BUFFERS: usize = 4;

impl ScorePool {
    fn heap_bytes(&self) -> usize {
        let pool = self.0.lock().expect("pool lock");
        heap::vec(&pool) + pool.iter().map(heap::vec).sum::<usize>()
    }

    fn take(&self, slots: usize) -> Scores<'_> {
        let mut values = self.0.lock().expect("pool lock").pop().unwrap_or_default();
        values.resize(slots, 0.0);
        Scores {
            values,
            touched: Vec::new(),
            pool: self,
        }
    }
}

/// Scores by slot, and the slots scored; zeroed and pooled again when dropped.
struct Scores<'a> {
    values: Vec<f32>,
    touched: Vec<u32>,
    pool: &'a ScorePool,
}

impl Scores<'_> {
    fn add(&mut self, slot: u32, score: f32) {
        let current = &mut self.values[slot as usize];
        if *current == 0.0 {
            self.touched.push(slot);
        }
        *current += score;
    }
}

impl Drop for Scores<'_> {
    fn drop(&mut self) {
        for &slot in &self.touched {
            self.values[slot as usize] = 0.0;
        }
        let mut pool = self.pool.0.lock().expect("pool lock");
        if pool.len() < POOLED_BUFFERS {
            pool.push(std::mem::take(&mut self.values));
        }
    }
}

#[cfg(test)]
mod pruned_hybrid_tests;

#[cfg(test)]
mod tests {
    use super::*;

    /// Hybrid ranking with the default weights, no prior, by the payload's similarity.
    fn hybrid_of(
        index: &Bm25Index<Option<f32>>,
        terms: &[String],
        limit: usize,
        accept: impl Fn(&Option<f32>) -> bool,
        dense_candidates: Option<&[i64]>,
    ) -> Vec<Hit> {
        let weights = fusion::RankingWeights::default();
        let options = fusion::Options {
            weights: &weights,
            explain: false,
            dense_candidates,
        };
        let no_prior = |_: &Option<f32>| fusion::Prior::default();
        index.search_hybrid(terms, |_, sim| *sim, limit, accept, no_prior, options)
    }
    use crate::retrieval::tokenize::query_terms;

    #[test]
    fn the_context_sweep_counts_each_window_as_a_scan_would() {
        // Documents with and without the term, some removed, windows of 1 to 3.
        let words = ["dog", "cat", "dog dog", "bird", "dog cat", "fish", "cat"];
        for window in 1..=3 {
            let mut index: Bm25Index = Bm25Index::with_context_window(window);
            for i in 0..200i64 {
                index.insert(
                    i,
                    words[(i as usize * 7 + i as usize / 3) % words.len()],
                    (),
                );
            }
            for i in (0..200).filter(|i| i % 5 == 1 || i % 11 == 0) {
                index.remove(i);
            }
            let term = index.vocab["dog"];
            let postings = &index.postings[term as usize];
            let swept: Vec<(u32, u32, u32)> = Sweep::new(postings, index.slots()).collect();
            let mut scanned = Vec::new();
            let mut from = 0;
            for slot in 0..index.docs.len() as u32 {
                let live = postings
                    .iter()
                    .filter(|(s, _)| index.alive[*s as usize])
                    .collect::<Vec<_>>();
                let tf: u32 = live
                    .iter()
                    .filter(|(s, _)| s.abs_diff(slot) <= window as u32)
                    .map(|(_, tf)| tf)
                    .sum();
                let own = live.iter().find(|(s, _)| *s == slot).map_or(0, |p| p.1);
                if index.alive[slot as usize] && tf > 0 {
                    scanned.push((slot, own, tf));
                    let looked_up = index.slots().at(postings, &mut from, slot);
                    assert_eq!(looked_up, (own, tf), "window {window}, slot {slot}");
                }
            }
            assert_eq!(swept, scanned, "window {window}");
        }
    }

    /// SplitMix64: a deterministic stream for the randomised tests.
    pub(super) struct Mix(pub(super) u64);

    impl Mix {
        pub(super) fn below(&mut self, n: usize) -> usize {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) % n as u64) as usize
        }
    }

    /// A random index (window 0 to 3; a small vocabulary, so scores tie often; some
    /// documents removed, some long enough to hold a frequency above a byte), its
    /// payloads the ids.
    pub(super) fn random_index(mix: &mut Mix) -> Bm25Index<i64> {
        const WORDS: [&str; 12] = [
            "red", "green", "blue", "kite", "dog", "cat", "sun", "rain", "tea", "boat", "hill",
            "moon",
        ];
        let mut index = Bm25Index::with_context_window(mix.below(4));
        let docs = 1 + mix.below(400);
        for id in 0..docs as i64 {
            let len = if mix.below(50) == 0 {
                300
            } else {
                1 + mix.below(8)
            };
            let vocabulary = 1 + mix.below(WORDS.len());
            let text: Vec<&str> = (0..len).map(|_| WORDS[mix.below(vocabulary)]).collect();
            index.insert(id, &text.join(" "), id);
            if mix.below(4) == 0 {
                index.remove(mix.below(id as usize + 1) as i64);
            }
        }
        index
    }

    #[test]
    fn pruned_search_ranks_exactly_as_the_exhaustive_one() {
        let mut mix = Mix(31);
        for corpus in 0..120 {
            let index = random_index(&mut mix);
            for _ in 0..8 {
                let words = ["red", "kite", "dog", "moon", "tea", "nothing", "hill"];
                let query: Vec<&str> = (0..1 + mix.below(5))
                    .map(|_| words[mix.below(words.len())])
                    .collect();
                let terms = query_terms(&query.join(" "));
                let limit = 1 + mix.below(20);
                let modulus = 1 + mix.below(4) as i64;
                let accept = |id: &i64| id % modulus == 0;
                let pruned = index.search(&terms, limit, accept);
                let exhaustive = index.search_exhaustive(&terms, limit, accept);
                assert_eq!(
                    pruned, exhaustive,
                    "corpus {corpus}, {terms:?}, limit {limit}, filter % {modulus}"
                );
            }
        }
    }

    #[test]
    fn context_document_frequencies_stay_what_a_recount_gives() {
        let mut mix = Mix(7);
        for corpus in 0..60 {
            let mut index = random_index(&mut mix);
            let kept = index.context_df.clone();
            index.recount_context();
            assert_eq!(kept, index.context_df, "corpus {corpus}");
        }
    }

    #[test]
    fn heap_bytes_counts_every_structure_and_each_payload() {
        let mut index: Bm25Index<String> = Bm25Index::new();
        let empty = index.heap_bytes(|_| 0);
        for i in 0..1000 {
            index.insert(i, &format!("message {i} about the weather"), "x".repeat(10));
        }
        let held = index.heap_bytes(|_| 0);
        // At least each document's four postings (a u32 slot and a byte) and its four
        // term ids, its slot and length.
        assert!(held - empty >= 1000 * (4 * 5 + 4 * 4 + 5), "{held}");
        assert_eq!(index.heap_bytes(String::capacity), held + 1000 * 10);
        index.shrink();
        assert!(index.heap_bytes(|_| 0) <= held);
    }

    /// An index of `docs` without the context field (plain BM25).
    fn index_with(window: usize, docs: &[&str]) -> Bm25Index {
        let mut index = Bm25Index::with_context_window(window);
        for (i, text) in docs.iter().enumerate() {
            index.insert(i as i64, text, ());
        }
        index
    }

    fn index(docs: &[&str]) -> Bm25Index {
        let mut index = Bm25Index::with_context_window(0);
        for (i, text) in docs.iter().enumerate() {
            index.insert(i as i64 + 1, text, ());
        }
        index
    }

    #[test]
    fn ranks_rarer_and_more_frequent_matches_higher() {
        let index = index(&[
            "the cat sat on the mat",
            "the dog chased the cat",
            "dogs and more dogs, a dog show",
            "nothing relevant here",
        ]);
        let hits = index.search(&query_terms("dog"), 10, |_| true);
        let ids: Vec<i64> = hits.iter().map(|h| h.0).collect();
        assert_eq!(ids, [3, 2]);
        assert!(hits[0].1 > hits[1].1);
        let both = index.search(&query_terms("dog cat"), 10, |_| true);
        assert_eq!(both[0].0, 2, "matching both terms beats either alone");
        assert_eq!(both.len(), 3);
    }

    #[test]
    fn matches_a_hand_computed_score() {
        let index = index(&["apple banana", "banana cherry cherry", "date"]);
        let hits = index.search(&query_terms("cherry"), 10, |_| true);
        // N = 3, df = 1, avgdl = 6/3, dl = 3, tf = 2.
        let idf = (1.0f32 + (3.0 - 1.0 + 0.5) / 1.5).ln();
        let norm = K1 * (1.0 - B + B * 3.0 / 2.0);
        let expected = idf * 2.0 * (K1 + 1.0) / (2.0 + norm);
        assert_eq!(hits.len(), 1);
        assert!(
            (hits[0].1 - expected).abs() < 1e-5,
            "{} vs {expected}",
            hits[0].1
        );
    }

    #[test]
    fn the_context_field_finds_a_turn_by_its_neighbours_words() {
        let turns = [
            "did you finish the marathon in Boston?",
            "yes, in just under four hours!",
            "unrelated chatter about lunch",
            "more chatter",
            "still more chatter",
            "a pottery class on Sunday",
        ];
        let mut index = Bm25Index::new();
        for (i, text) in turns.iter().enumerate() {
            index.insert(i as i64, text, ());
        }
        let hits = index.search(&query_terms("Boston marathon"), 10, |_| true);
        let ids: Vec<i64> = hits.iter().map(|h| h.0).collect();
        // The question first, then its answer (which never says "marathon"), then the
        // turn two away; turns further off are not matched.
        assert_eq!(ids[..3], [0, 1, 2], "{hits:?}");
        assert!(!ids.contains(&3) && !ids.contains(&5), "{hits:?}");
        let plain = index_with(0, &turns).search(&query_terms("Boston marathon"), 10, |_| true);
        assert_eq!(plain.len(), 1, "without context only the question matches");
    }

    #[test]
    fn hybrid_ranks_every_document_and_uses_similarity() {
        let mut index: Bm25Index<Option<f32>> = Bm25Index::with_context_window(0);
        index.insert(1, "apple pie recipe", Some(0.1));
        index.insert(2, "a dessert with baked fruit", Some(0.9));
        index.insert(3, "stock market news", Some(0.0));
        index.insert(4, "not embedded yet", None);
        let terms = query_terms("apple dessert");
        let hits = hybrid_of(&index, &terms, 10, |_| true, None);
        let ids: Vec<i64> = hits.iter().map(|h| h.handle).collect();
        assert_eq!(ids.len(), 4, "every live document is a candidate");
        assert_eq!(ids[3], 3, "matching neither way comes last: {hits:?}");
        let filtered = hybrid_of(&index, &terms, 10, |sim| sim.is_some(), None);
        assert_eq!(filtered.len(), 3);
        index.remove(2);
        let after = hybrid_of(&index, &terms, 10, |_| true, None);
        assert!(after.iter().all(|h| h.handle != 2));
    }

    #[test]
    fn hybrid_over_candidates_ranks_only_them_and_agrees_with_the_full_ranking() {
        let mut index: Bm25Index<Option<f32>> = Bm25Index::with_context_window(1);
        for i in 0..40 {
            let text = if i % 10 == 3 {
                "the red kite"
            } else {
                "nothing here"
            };
            index.insert(i, text, Some(((i * 37) % 41) as f32 / 41.0));
        }
        let terms = query_terms("red kite");
        let full = hybrid_of(&index, &terms, 40, |_| true, None);
        // The nearest by vector (as a graph would propose them) plus the lexical matches.
        let mut nearest: Vec<i64> = (0..40).collect();
        nearest.sort_by_key(|id| std::cmp::Reverse((id * 37) % 41));
        nearest.truncate(5);
        let some = hybrid_of(&index, &terms, 40, |_| true, Some(&nearest));
        let ids: Vec<i64> = some.iter().map(|h| h.handle).collect();
        for id in [3, 13, 23, 33].iter().chain(&nearest) {
            assert!(ids.contains(id), "{id} missing from {ids:?}");
        }
        // Nothing else: a match in its own text or its context (one turn either side).
        let matched = |id: &i64| (2..=4).contains(&(id % 10));
        assert!(
            ids.iter().all(|id| matched(id) || nearest.contains(id)),
            "{ids:?}"
        );
        assert!(ids.len() < 40);
        // Every document is in the sample here, so the scores are the full ranking's.
        for Hit {
            handle: id, score, ..
        } in &some
        {
            let exact = full.iter().find(|h| h.handle == *id).unwrap().score;
            assert!((exact - score).abs() < 1e-4, "{id}: {exact} vs {score}");
        }
    }

    #[test]
    fn estimate_accepted_counts_exactly_or_from_an_even_sample() {
        let mut index: Bm25Index<u32> = Bm25Index::new();
        for i in 0..10_000 {
            index.insert(i64::from(i), "word", i);
        }
        assert_eq!(index.estimate_accepted(20_000, |i| i % 10 == 0), 1000);
        let estimate = index.estimate_accepted(512, |i| i % 10 == 0);
        assert!((800..=1200).contains(&estimate), "{estimate}");
        assert_eq!(index.estimate_accepted(512, |_| false), 0);
        assert_eq!(Bm25Index::<u32>::new().estimate_accepted(512, |_| true), 0);
    }

    #[test]
    fn limit_keeps_the_best() {
        let docs: Vec<String> = (0..50)
            .map(|i| "x ".repeat(i + 1) + "pad pad pad")
            .collect();
        let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
        let index = index(&refs);
        let all = index.search(&query_terms("x"), 100, |_| true);
        let top = index.search(&query_terms("x"), 5, |_| true);
        assert_eq!(top, all[..5]);
        assert!(all.windows(2).all(|w| w[0].1 >= w[1].1));
    }

    #[test]
    fn the_payload_filter_applies_before_the_cut() {
        let mut index: Bm25Index<bool> = Bm25Index::new();
        for i in 0..100 {
            // The best matches (most "x") are the rejected ones.
            let text = "x ".repeat(if i < 95 { 10 } else { 1 }) + "pad";
            index.insert(i, &text, i >= 95);
        }
        let hits = index.search(&query_terms("x"), 3, |accepted| *accepted);
        let ids: Vec<i64> = hits.iter().map(|h| h.0).collect();
        assert_eq!(ids.len(), 3);
        assert!(ids.iter().all(|id| *id >= 95), "{ids:?}");
    }

    #[test]
    fn neighbours_are_the_accepted_live_documents_around_one() {
        let mut index: Bm25Index<i64> = Bm25Index::new();
        for i in 0..10 {
            index.insert(i, "x", i);
        }
        index.remove(3);
        assert_eq!(index.neighbours(4, 2, 3, |_| true), [1, 2, 4, 5, 6, 7]);
        assert_eq!(index.neighbours(4, 1, 1, |n| n % 2 == 0), [2, 4, 6]);
        assert_eq!(index.neighbours(0, 5, 0, |_| true), [0]);
        assert_eq!(index.neighbours(9, 0, 5, |_| true), [9]);
        assert!(index.neighbours(3, 1, 1, |_| true).is_empty(), "removed");
    }

    #[test]
    fn newest_walks_back_in_insertion_order() {
        let mut index: Bm25Index<i64> = Bm25Index::new();
        for i in 0..10 {
            index.insert(i, "x", i);
        }
        index.remove(8);
        assert_eq!(index.newest(3, |_| true), [9, 7, 6]);
        assert_eq!(index.newest(2, |n| n % 2 == 0), [6, 4]);
        assert!(index.newest(5, |_| false).is_empty());
    }

    #[test]
    fn removal_and_compaction_keep_results_exact() {
        let text = |i: i64| {
            if i % 3 == 0 {
                "red apple"
            } else {
                "green pear"
            }
        };
        let mut index = Bm25Index::new();
        for i in 0..3000 {
            index.insert(i, text(i), ());
        }
        index.insert(5, "ignored: already indexed", ());
        for i in 0..2500 {
            index.remove(i);
        }
        index.remove(99_999);
        assert_eq!(index.len(), 500);
        let mut fresh = Bm25Index::new();
        for i in 2500..3000 {
            fresh.insert(i, text(i), ());
        }
        let terms = query_terms("apple");
        assert_eq!(
            index.search(&terms, 1000, |_| true),
            fresh.search(&terms, 1000, |_| true)
        );
        assert!(index.docs.len() < 3000, "compacted");
    }

    #[test]
    fn steady_churn_keeps_deleted_documents_under_a_quarter_of_the_live_ones() {
        let mut index = Bm25Index::new();
        let live = 8000;
        for i in 0..live {
            index.insert(i, &format!("message {i} about the weather"), ());
        }
        let mut most_dead = 0;
        for i in live..live + 30_000 {
            index.remove(i - live);
            index.insert(i, &format!("message {i} about the weather"), ());
            most_dead = most_dead.max(index.docs.len() - index.len());
        }
        assert_eq!(index.len(), live as usize);
        assert!(
            most_dead <= (live as usize / 4).max(COMPACT_AFTER),
            "{most_dead} deleted documents held beside {live} live ones"
        );
        let terms = query_terms("message 37999");
        assert_eq!(index.search(&terms, 1, |_| true)[0].0, 37_999);
    }
}
