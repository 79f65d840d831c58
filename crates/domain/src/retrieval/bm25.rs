//! An in-memory BM25 index of one project's episodes (Okapi BM25, k1 = 1.2, b = 0.75,
//! Lucene's IDF). Scoring walks only the postings of the query's terms into a dense
//! accumulator, so a query over 100k documents costs well under a millisecond.
//!
//! Each document is scored on two fields (BM25F-style document expansion with
//! context): its own text, and its *context*, the text of itself and of the
//! `CONTEXT_WINDOW` documents on either side in insertion order. A chat turn such as
//! "Yes, twice last year!" says little on its own; its neighbours say what it answers.
//! The context field is derived at query time from the postings (a posting at slot p
//! counts for every slot within the window around p), so inserting or removing a
//! document never rewrites its neighbours. On LoCoMo this lifts recall@10 from 0.61 to
//! 0.72 (see BENCHMARKS.md).

use std::collections::HashMap;

use super::rescore::{Dense, Hit};
use super::{fusion, tokenize};

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

#[derive(Debug, Clone, Copy)]
struct Posting {
    slot: u32,
    tf: u32,
}

#[derive(Debug)]
struct Doc<T> {
    id: i64,
    /// What the caller keeps with the document (for filtering).
    payload: T,
    len: u32,
    /// Distinct term ids with their frequencies, to update document frequencies on
    /// removal and to rebuild postings on compaction.
    terms: Box<[(u32, u32)]>,
    live: bool,
}

#[derive(Debug)]
pub struct Bm25Index<T = ()> {
    /// Stemmed term to term id.
    vocab: HashMap<String, u32>,
    /// Lower-cased word to the id of its stem.
    word_ids: HashMap<String, u32>,
    postings: Vec<Vec<Posting>>,
    /// Live documents holding each term.
    df: Vec<u32>,
    docs: Vec<Doc<T>>,
    /// Per slot: whether it is live, and the document's length; the docs' own copies
    /// mirrored densely, so per-query passes over every slot stay in cache.
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
        let mut ids: Vec<u32> = tokenize::words(text)
            .map(|word| self.word_id(word))
            .collect();
        let len = ids.len() as u32;
        ids.sort_unstable();
        let mut terms: Vec<(u32, u32)> = Vec::with_capacity(ids.len());
        for id in ids {
            match terms.last_mut() {
                Some((last, tf)) if *last == id => *tf += 1,
                _ => terms.push((id, 1)),
            }
        }
        for &(term, tf) in &terms {
            self.postings[term as usize].push(Posting { slot, tf });
            self.df[term as usize] += 1;
        }
        self.docs.push(Doc {
            id,
            payload,
            len,
            terms: terms.into_boxed_slice(),
            live: true,
        });
        self.alive.push(true);
        self.lens.push(len);
        self.slot_of.insert(id, slot);
        self.live += 1;
        self.total_len += u64::from(len);
    }

    /// The term id of a lower-cased word; stemming (the costly part of indexing) runs
    /// once per distinct word.
    fn word_id(&mut self, word: String) -> u32 {
        if let Some(&id) = self.word_ids.get(&word) {
            return id;
        }
        let id = self.term_id(tokenize::stem(&word));
        self.word_ids.insert(word, id);
        id
    }

    fn term_id(&mut self, term: String) -> u32 {
        if let Some(&id) = self.vocab.get(&term) {
            return id;
        }
        let id = self.vocab.len() as u32;
        self.vocab.insert(term, id);
        self.postings.push(Vec::new());
        self.df.push(0);
        id
    }

    /// Removes document `id` if it is indexed.
    pub fn remove(&mut self, id: i64) {
        let Some(slot) = self.slot_of.remove(&id) else {
            return;
        };
        let doc = &mut self.docs[slot as usize];
        doc.live = false;
        self.alive[slot as usize] = false;
        for &(term, _) in doc.terms.iter() {
            self.df[term as usize] -= 1;
        }
        // Only live documents' terms are read again (by compaction).
        doc.terms = Box::default();
        self.live -= 1;
        self.total_len -= u64::from(doc.len);
        let dead = self.docs.len() - self.live;
        if dead >= COMPACT_AFTER && dead * 4 > self.live {
            self.compact();
        }
    }

    /// Rebuilds postings and slots without the removed documents.
    fn compact(&mut self) {
        let docs = std::mem::replace(&mut self.docs, Vec::with_capacity(self.live));
        self.slot_of.clear();
        self.alive.clear();
        self.lens.clear();
        self.postings.iter_mut().for_each(Vec::clear);
        for doc in docs.into_iter().filter(|d| d.live) {
            let slot = self.docs.len() as u32;
            for &(term, tf) in doc.terms.iter() {
                self.postings[term as usize].push(Posting { slot, tf });
            }
            self.slot_of.insert(doc.id, slot);
            self.alive.push(true);
            self.lens.push(doc.len);
            self.docs.push(doc);
        }
    }

    /// Heap bytes the index holds, with `payload`'s count of each payload's own heap.
    pub fn heap_bytes(&self, payload: impl Fn(&T) -> usize) -> usize {
        use super::heap;
        let words =
            |m: &HashMap<String, u32>| heap::map(m) + m.keys().map(heap::string).sum::<usize>();
        let docs: usize = self
            .docs
            .iter()
            .map(|doc| heap::boxed(&doc.terms[..]) + payload(&doc.payload))
            .sum();
        let pooled = {
            let pool = self.pool.0.lock().expect("pool lock");
            heap::vec(&*pool) + pool.iter().map(heap::vec).sum::<usize>()
        };
        words(&self.vocab)
            + words(&self.word_ids)
            + heap::vec(&self.postings)
            + self.postings.iter().map(heap::vec).sum::<usize>()
            + heap::vec(&self.df)
            + heap::vec(&self.docs)
            + docs
            + heap::vec(&self.alive)
            + heap::vec(&self.lens)
            + heap::map(&self.slot_of)
            + pooled
    }

    /// Gives back what the vectors and maps reserved beyond their length (after a
    /// load, where doubling left up to half of each unused).
    pub fn shrink_to_fit(&mut self) {
        self.vocab.shrink_to_fit();
        self.word_ids.shrink_to_fit();
        self.postings.shrink_to_fit();
        self.postings.iter_mut().for_each(Vec::shrink_to_fit);
        self.df.shrink_to_fit();
        self.docs.shrink_to_fit();
        self.alive.shrink_to_fit();
        self.lens.shrink_to_fit();
        self.slot_of.shrink_to_fit();
    }

    /// About how many live documents `accept` takes, judged from an even sample of
    /// `samples` of them (exact when the index holds no more).
    pub fn estimate_accepted(&self, samples: usize, accept: impl Fn(&T) -> bool) -> usize {
        let stride = (self.live / samples.max(1)).max(1);
        let (mut seen, mut taken) = (0usize, 0usize);
        for doc in self.docs.iter().filter(|doc| doc.live).step_by(stride) {
            seen += 1;
            taken += usize::from(accept(&doc.payload));
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
            .filter(|doc| doc.live)
            .map(|doc| (doc.id, &doc.payload))
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
        let wanted = |doc: &&Doc<T>| doc.live && accept(&doc.payload);
        let slot = slot as usize;
        let mut ids: Vec<i64> = self.docs[..slot]
            .iter()
            .rev()
            .filter(wanted)
            .take(before)
            .map(|doc| doc.id)
            .collect();
        ids.reverse();
        ids.push(id);
        ids.extend(
            self.docs[slot + 1..]
                .iter()
                .filter(wanted)
                .take(after)
                .map(|doc| doc.id),
        );
        ids
    }

    /// The ids of the `limit` most recently inserted live documents whose payload
    /// `accept`s, newest first.
    pub fn newest(&self, limit: usize, accept: impl Fn(&T) -> bool) -> Vec<i64> {
        self.docs
            .iter()
            .rev()
            .filter(|doc| doc.live && accept(&doc.payload))
            .take(limit)
            .map(|doc| doc.id)
            .collect()
    }

    /// The `limit` best documents for the (already analysed) query terms whose payload
    /// `accept`s, best first, as `(id, score)`; only documents matching a term (in
    /// their own text or their context) count.
    pub fn search(
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
    /// `similarity` is given each document's id and payload.
    pub fn search_hybrid(
        &self,
        terms: &[String],
        similarity: impl Fn(i64, &T) -> Option<f32>,
        limit: usize,
        accept: impl Fn(&T) -> bool,
        dense_candidates: Option<&[i64]>,
        prior: impl Fn(&T) -> f32,
    ) -> Vec<Hit> {
        if self.live == 0 || limit == 0 {
            return Vec::new();
        }
        let scores = self.lexical_scores(terms);
        let (lexical, touched) = (&scores.values[..], scores.touched.clone());
        let live = &self.alive;
        let all_live = || (0..self.docs.len() as u32).filter(|slot| live[*slot as usize]);
        let (candidates, sample): (Vec<u32>, Vec<u32>) = match dense_candidates {
            None => {
                // The filter applies first: only accepted documents are ranked, and
                // similarities are standardised over them.
                let accepted: Vec<u32> = all_live()
                    .filter(|slot| accept(&self.docs[*slot as usize].payload))
                    .collect();
                (accepted.clone(), accepted)
            }
            Some(ids) => {
                let mut candidates = self.best_by(lexical, touched, LEXICAL_CANDIDATES);
                candidates.extend(ids.iter().filter_map(|id| self.slot_of.get(id).copied()));
                candidates.sort_unstable();
                candidates.dedup();
                let stride = (self.live / SIMILARITY_SAMPLE).max(1);
                (candidates, all_live().step_by(stride).collect())
            }
        };
        let similarity_at = |slot: usize| {
            let doc = &self.docs[slot];
            similarity(doc.id, &doc.payload)
        };
        let (mut fused, own_weight) = fusion::hybrid(
            lexical,
            similarity_at,
            live,
            self.context_window,
            &candidates,
            &sample,
        );
        for &slot in &candidates {
            fused[slot as usize] += prior(&self.docs[slot as usize].payload);
        }
        let best = self.select(&fused, candidates, limit, accept);
        best.into_iter()
            .map(|(id, score)| {
                let slot = self.slot_of[&id] as usize;
                let dense = similarity_at(slot).map(|similarity| Dense {
                    similarity,
                    weight: own_weight,
                });
                Hit {
                    handle: id,
                    score,
                    dense,
                }
            })
            .collect()
    }

    /// BM25 scores by slot (own text plus weighted context), and the slots scored.
    fn lexical_scores(&self, terms: &[String]) -> Scores<'_> {
        let n = self.live as f32;
        let avg_len = self.total_len as f32 / n;
        // A context spans up to 2w+1 documents (fewer at the ends of a small index).
        let avg_context_len = avg_len * ((2 * self.context_window + 1) as f32).min(n);
        let mut scores = self.pool.take(self.docs.len());
        let mut context: Vec<(u32, u32)> = Vec::new();
        for term in terms {
            let Some(&term_id) = self.vocab.get(term) else {
                continue;
            };
            let df = self.df[term_id as usize] as f32;
            if df == 0.0 {
                continue;
            }
            let idf = bm25_idf(n, df);
            let postings = &self.postings[term_id as usize];
            for posting in postings {
                if !self.alive[posting.slot as usize] {
                    continue;
                }
                let len = self.lens[posting.slot as usize];
                let norm = K1 * (1.0 - B + B * len as f32 / avg_len);
                scores.add(posting.slot, idf * saturate(posting.tf, norm));
            }
            if self.context_window == 0 {
                continue;
            }
            // The context field: its own document frequency and lengths.
            context.clear();
            self.context_sweep(postings, |slot, tf| context.push((slot, tf)));
            let context_idf = bm25_idf(n, context.len() as f32);
            for &(slot, tf) in &context {
                let len: u32 = self.window(slot).map(|s| self.lens[s as usize]).sum();
                let norm = K1 * (1.0 - B + B * len as f32 / avg_context_len);
                scores.add(slot, CONTEXT_WEIGHT * context_idf * saturate(tf, norm));
            }
        }
        scores
    }

    /// Every live slot within the context window of one of `postings` (one term's,
    /// in slot order), ascending, with the summed frequency of the live postings in its
    /// window: one sweep, so each slot is visited once however many postings share it.
    fn context_sweep(&self, postings: &[Posting], mut visit: impl FnMut(u32, u32)) {
        let w = self.context_window as u32;
        let last = self.docs.len() as u32 - 1;
        let live = |p: &Posting| self.alive[p.slot as usize];
        // Postings in `lo..hi` are those with a slot in [s - w, s + w]; `tf` sums them.
        let (mut lo, mut hi, mut tf) = (0usize, 0usize, 0u32);
        let mut next = 0u32;
        for posting in postings.iter().filter(|p| live(p)) {
            let start = posting.slot.saturating_sub(w).max(next);
            let end = (posting.slot + w).min(last);
            for slot in start..=end {
                while hi < postings.len() && postings[hi].slot <= slot + w {
                    if live(&postings[hi]) {
                        tf += postings[hi].tf;
                    }
                    hi += 1;
                }
                while lo < hi && postings[lo].slot + w < slot {
                    if live(&postings[lo]) {
                        tf -= postings[lo].tf;
                    }
                    lo += 1;
                }
                if self.alive[slot as usize] {
                    visit(slot, tf);
                }
            }
            next = end + 1;
        }
    }

    /// The (at most) `count` slots of `slots` with the highest scores, in no order.
    fn best_by(&self, scores: &[f32], mut slots: Vec<u32>, count: usize) -> Vec<u32> {
        if slots.len() > count {
            slots.select_nth_unstable_by(count, |a, b| {
                scores[*b as usize].total_cmp(&scores[*a as usize])
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

impl<T> Bm25Index<T> {
    /// The live slots within the context window of `slot`, itself included.
    fn window(&self, slot: u32) -> impl Iterator<Item = u32> + '_ {
        let first = slot.saturating_sub(self.context_window as u32);
        let last = (slot as usize + self.context_window).min(self.docs.len() - 1) as u32;
        (first..=last).filter(|s| self.alive[*s as usize])
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
mod tests {
    use super::*;
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
            let mut swept = Vec::new();
            index.context_sweep(postings, |slot, tf| swept.push((slot, tf)));
            let mut scanned = Vec::new();
            for slot in 0..index.docs.len() as u32 {
                let tf: u32 = postings
                    .iter()
                    .filter(|p| index.alive[p.slot as usize])
                    .filter(|p| p.slot.abs_diff(slot) <= window as u32)
                    .map(|p| p.tf)
                    .sum();
                if index.alive[slot as usize] && tf > 0 {
                    scanned.push((slot, tf));
                }
            }
            assert_eq!(swept, scanned, "window {window}");
        }
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
        let hits = index.search_hybrid(&terms, |_, sim| *sim, 10, |_| true, None, |_| 0.0);
        let ids: Vec<i64> = hits.iter().map(|h| h.handle).collect();
        assert_eq!(ids.len(), 4, "every live document is a candidate");
        assert_eq!(ids[3], 3, "matching neither way comes last: {hits:?}");
        let filtered = index.search_hybrid(
            &terms,
            |_, sim| *sim,
            10,
            |sim| sim.is_some(),
            None,
            |_| 0.0,
        );
        assert_eq!(filtered.len(), 3);
        index.remove(2);
        let after = index.search_hybrid(&terms, |_, sim| *sim, 10, |_| true, None, |_| 0.0);
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
        let full = index.search_hybrid(&terms, |_, sim| *sim, 40, |_| true, None, |_| 0.0);
        // The nearest by vector (as a graph would propose them) plus the lexical matches.
        let mut nearest: Vec<i64> = (0..40).collect();
        nearest.sort_by_key(|id| std::cmp::Reverse((id * 37) % 41));
        nearest.truncate(5);
        let some =
            index.search_hybrid(&terms, |_, sim| *sim, 40, |_| true, Some(&nearest), |_| 0.0);
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
