//! An in-memory BM25 index of one project's episodes (Okapi BM25, k1 = 1.2, b = 0.75,
//! Lucene's IDF). Scoring walks only the postings of the query's terms into a dense
//! accumulator, so a query over 100k documents costs well under a millisecond.

use std::collections::HashMap;

use super::tokenize;

const K1: f32 = 1.2;
const B: f32 = 0.75;
/// Compaction drops deleted documents from the postings once they are this many and
/// outnumber the live ones.
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
    slot_of: HashMap<i64, u32>,
    live: usize,
    total_len: u64,
}

impl<T> Default for Bm25Index<T> {
    fn default() -> Self {
        Bm25Index {
            vocab: HashMap::new(),
            word_ids: HashMap::new(),
            postings: Vec::new(),
            df: Vec::new(),
            docs: Vec::new(),
            slot_of: HashMap::new(),
            live: 0,
            total_len: 0,
        }
    }
}

impl<T> Bm25Index<T> {
    pub fn new() -> Bm25Index<T> {
        Bm25Index::default()
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
        for &(term, _) in doc.terms.iter() {
            self.df[term as usize] -= 1;
        }
        self.live -= 1;
        self.total_len -= u64::from(doc.len);
        let dead = self.docs.len() - self.live;
        if dead >= COMPACT_AFTER && dead > self.live {
            self.compact();
        }
    }

    /// Rebuilds postings and slots without the removed documents.
    fn compact(&mut self) {
        let docs = std::mem::take(&mut self.docs);
        self.slot_of.clear();
        self.postings.iter_mut().for_each(Vec::clear);
        for doc in docs.into_iter().filter(|d| d.live) {
            let slot = self.docs.len() as u32;
            for &(term, tf) in doc.terms.iter() {
                self.postings[term as usize].push(Posting { slot, tf });
            }
            self.slot_of.insert(doc.id, slot);
            self.docs.push(doc);
        }
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
    /// `accept`s, best first, as `(id, score)`; only documents matching a term count.
    pub fn search(
        &self,
        terms: &[String],
        limit: usize,
        accept: impl Fn(&T) -> bool,
    ) -> Vec<(i64, f32)> {
        if self.live == 0 || limit == 0 {
            return Vec::new();
        }
        let n = self.live as f32;
        let avg_len = self.total_len as f32 / n;
        let mut scores = vec![0f32; self.docs.len()];
        let mut touched: Vec<u32> = Vec::new();
        for term in terms {
            let Some(&term_id) = self.vocab.get(term) else {
                continue;
            };
            let df = self.df[term_id as usize] as f32;
            if df == 0.0 {
                continue;
            }
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for posting in &self.postings[term_id as usize] {
                let doc = &self.docs[posting.slot as usize];
                if !doc.live {
                    continue;
                }
                let tf = posting.tf as f32;
                let norm = K1 * (1.0 - B + B * doc.len as f32 / avg_len);
                let score = &mut scores[posting.slot as usize];
                if *score == 0.0 {
                    touched.push(posting.slot);
                }
                *score += idf * tf * (K1 + 1.0) / (tf + norm);
            }
        }
        let by_score = |a: &u32, b: &u32| {
            scores[*b as usize]
                .total_cmp(&scores[*a as usize])
                .then_with(|| b.cmp(a))
        };
        // Best first, in growing chunks, so the filter runs on as few documents as
        // it must: a selective filter costs a few more chunks, never a full sort.
        let mut best = Vec::with_capacity(limit);
        let mut rest: &mut [u32] = &mut touched;
        let mut chunk = (limit * 4).max(64);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::tokenize::query_terms;

    fn index(docs: &[&str]) -> Bm25Index {
        let mut index = Bm25Index::new();
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
}
