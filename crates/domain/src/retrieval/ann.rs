//! Approximate nearest-neighbour search (HNSW, by USearch) for projects with many
//! vectors. A project's exact scan costs O(N·d) per query; the graph answers in about a
//! millisecond.
//!
//! The graph is built from the vectors already in memory the first time a project
//! holds `ANN_MIN_VECTORS`, then kept up to date as vectors arrive and episodes go.
//! Keys are episode row ids. It holds each vector as the int8 codes of
//! `quantized.rs` (a quarter of f32), and is then the project's only copy of them.
//! USearch's own f32-to-int8 cast scales by the norm, which leaves a unit vector of 384
//! dimensions with codes of about ±6; codes scaled by the largest component keep about
//! 7 bits each. Their scale differs per vector, so the metric is the cosine, which
//! ignores it (and, for unit vectors, ranks as the inner product does).

use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

/// Projects with fewer vectors than this are searched exactly.
pub const ANN_MIN_VECTORS: usize = 20_000;
/// Candidates an insertion keeps while walking (USearch's `ef_construction`; its
/// default, 128, builds a graph about twice as slowly for about two points of recall@10
/// more: BENCHMARKS.md, issue 47).
pub const EXPANSION_ADD: usize = 64;
/// Candidates the graph search keeps while walking (USearch's `ef` at query time).
const EXPANSION_SEARCH: usize = 256;
/// Search and insertion contexts reserved. USearch fails a call that finds every
/// context taken (and the caller would then scan), so there are more than the
/// blocking threads that may read one project at once, not one per core.
const CONTEXTS: usize = 64;

pub struct AnnIndex {
    index: Index,
    dimensions: usize,
}

impl std::fmt::Debug for AnnIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnnIndex")
            .field("dimensions", &self.dimensions)
            .field("size", &self.index.size())
            .finish()
    }
}

impl AnnIndex {
    /// An empty graph for vectors (codes) of `dimensions` values, with room for
    /// `expected` of them.
    pub fn new(dimensions: usize, expected: usize) -> Result<AnnIndex, String> {
        AnnIndex::with_expansion(dimensions, expected, EXPANSION_ADD)
    }

    /// `new`, with insertions walking `expansion_add` candidates.
    pub fn with_expansion(
        dimensions: usize,
        expected: usize,
        expansion_add: usize,
    ) -> Result<AnnIndex, String> {
        let options = IndexOptions {
            dimensions,
            metric: MetricKind::Cos,
            quantization: ScalarKind::I8,
            connectivity: 0,
            expansion_add,
            expansion_search: EXPANSION_SEARCH,
            multi: false,
        };
        let index = Index::new(&options).map_err(|e| format!("cannot create the graph: {e}"))?;
        let ann = AnnIndex { index, dimensions };
        ann.reserve(expected.max(16))?;
        Ok(ann)
    }

    /// A graph over `items` (`(id, codes)`, codes of `dimensions` values), added from
    /// `threads` threads.
    pub fn build(
        dimensions: usize,
        items: &[(i64, &[i8])],
        expected: usize,
        threads: usize,
        expansion_add: usize,
    ) -> Result<AnnIndex, String> {
        let ann = AnnIndex::with_expansion(dimensions, expected.max(items.len()), expansion_add)?;
        ann.add_all(items, threads)?;
        Ok(ann)
    }

    /// Room for `capacity` vectors, keeping `CONTEXTS` contexts (a plain `reserve`
    /// would drop them back to one per core).
    fn reserve(&self, capacity: usize) -> Result<(), String> {
        self.index
            .reserve_capacity_and_threads(capacity, CONTEXTS)
            .map_err(|e| format!("cannot reserve the graph: {e}"))
    }

    /// Adds `items` (ids not in the graph) from `threads` threads at once (USearch
    /// inserts concurrently, one context per thread); grows the graph first if needed.
    pub fn add_all(&self, items: &[(i64, &[i8])], threads: usize) -> Result<(), String> {
        let wanted = self.index.size() + items.len();
        if wanted > self.index.capacity() {
            self.reserve(wanted.max(self.index.capacity() + self.index.capacity() / 8))?;
        }
        let threads = threads.clamp(1, CONTEXTS);
        let chunk = items.len().div_ceil(threads).max(1);
        std::thread::scope(|scope| {
            let workers: Vec<_> = items
                .chunks(chunk)
                .map(|part| {
                    scope.spawn(move || {
                        part.iter()
                            .try_for_each(|(id, codes)| self.add_new(*id, codes))
                    })
                })
                .collect();
            workers.into_iter().try_for_each(|w| {
                w.join()
                    .unwrap_or_else(|_| Err("a graph builder panicked".into()))
            })
        })
    }

    /// The graph as USearch serialises it (for a segment).
    pub fn to_bytes(&self) -> Result<Vec<u8>, String> {
        let mut bytes = vec![0u8; self.index.serialized_length()];
        self.index
            .save_to_buffer(&mut bytes)
            .map_err(|e| format!("cannot save the graph: {e}"))?;
        Ok(bytes)
    }

    /// The graph `to_bytes` gave (copied: `bytes` may be unmapped after).
    pub fn from_bytes(dimensions: usize, bytes: &[u8]) -> Result<AnnIndex, String> {
        let ann = AnnIndex::new(dimensions, 16)?;
        ann.index
            .load_from_buffer(bytes)
            .map_err(|e| format!("cannot load the graph: {e}"))?;
        if ann.index.dimensions() != dimensions {
            return Err("graph of another length".into());
        }
        ann.reserve(ann.index.size().max(16))?;
        Ok(ann)
    }

    pub fn len(&self) -> usize {
        self.index.size()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn dimensions(&self) -> usize {
        self.dimensions
    }

    /// Bytes the graph holds (vectors and links).
    pub fn memory_usage(&self) -> usize {
        self.index.memory_usage()
    }

    fn add_new(&self, id: i64, codes: &[i8]) -> Result<(), String> {
        self.index
            .add(id as u64, codes)
            .map_err(|e| format!("cannot add to the graph: {e}"))
    }

    /// Adds (or replaces) the codes of `id`; other lengths are ignored.
    pub fn insert(&self, id: i64, codes: &[i8]) -> Result<(), String> {
        if codes.len() != self.dimensions {
            return Ok(());
        }
        let key = id as u64;
        if self.index.contains(key) {
            self.remove(id);
        }
        if self.index.size() + 1 > self.index.capacity() {
            // An eighth more: doubling a graph of a million would reserve 400 MB at once.
            let capacity = self.index.capacity();
            self.reserve((capacity + capacity / 8).max(1024))?;
        }
        self.add_new(id, codes)
    }

    pub fn remove(&self, id: i64) {
        // Removing an absent key is not an error worth reporting.
        let _ = self.index.remove(id as u64);
    }

    /// The codes held for `id`, written into `codes` (of the graph's length); false
    /// when it holds none.
    pub fn get(&self, id: i64, codes: &mut [i8]) -> bool {
        codes.len() == self.dimensions && matches!(self.index.get(id as u64, codes), Ok(n) if n > 0)
    }

    /// Up to `limit` ids most similar to `query` (codes) among those `accept`ed (all
    /// without a filter), best first, as `(id, cosine of the codes)`. The filter runs
    /// during the walk, so it applies before the cut (a very selective filter may leave
    /// fewer than `limit`: the caller then scans).
    pub fn search(
        &self,
        query: &[i8],
        limit: usize,
        accept: Option<&dyn Fn(i64) -> bool>,
    ) -> Result<Vec<(i64, f32)>, String> {
        if query.len() != self.dimensions || limit == 0 || self.is_empty() {
            return Ok(Vec::new());
        }
        // Without a filter, no callback per node visited.
        let found = match accept {
            Some(accept) => self
                .index
                .filtered_search(query, limit, |key| accept(key as i64)),
            None => self.index.search(query, limit),
        }
        .map_err(|e| format!("graph search failed: {e}"))?;
        Ok(found
            .keys
            .iter()
            .zip(&found.distances)
            .map(|(key, distance)| (*key as i64, 1.0 - distance))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::{dense, quantized};

    /// Deterministic unit vectors (a small linear congruential generator).
    fn vectors(n: usize, dims: usize, seed: u64) -> Vec<(i64, Vec<f32>)> {
        let mut state = seed;
        let mut next = || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 33) as f32 / (1u64 << 31) as f32) - 0.5
        };
        (0..n)
            .map(|i| {
                let mut v: Vec<f32> = (0..dims).map(|_| next()).collect();
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.iter_mut().for_each(|x| *x /= norm);
                (i as i64 + 1, v)
            })
            .collect()
    }

    fn codes(v: &[f32]) -> Vec<i8> {
        quantized::quantized(v).0
    }

    fn build(items: &[(i64, Vec<f32>)], dims: usize) -> AnnIndex {
        let coded: Vec<(i64, Vec<i8>)> = items.iter().map(|(id, v)| (*id, codes(v))).collect();
        let refs: Vec<(i64, &[i8])> = coded.iter().map(|(id, c)| (*id, c.as_slice())).collect();
        AnnIndex::build(dims, &refs, items.len(), 2, EXPANSION_ADD).unwrap()
    }

    #[test]
    fn finds_nearly_what_the_exact_scan_finds() {
        let dims = 32;
        let items = vectors(3000, dims, 7);
        let ann = build(&items, dims);
        assert_eq!(ann.len(), 3000);
        let queries = vectors(50, dims, 99);
        let mut found = 0;
        for (_, query) in &queries {
            let exact = dense::top_k(items.iter().map(|(i, v)| (*i, v.as_slice())), query, 10);
            let approx = ann.search(&codes(query), 10, None).unwrap();
            assert_eq!(approx.len(), 10);
            // Similarities are the cosine, best first.
            assert!(approx.windows(2).all(|w| w[0].1 >= w[1].1 - 1e-6));
            let (id, sim) = approx[0];
            let v = &items[(id - 1) as usize].1;
            assert!(
                (dense::dot(v, query) - sim).abs() < 1e-2,
                "the cosine of the codes"
            );
            found += approx
                .iter()
                .filter(|(id, _)| exact.iter().any(|(e, _)| e == id))
                .count();
        }
        let recall = found as f64 / (queries.len() * 10) as f64;
        assert!(recall >= 0.95, "recall@10 against the exact scan: {recall}");
    }

    #[test]
    fn filters_apply_during_the_walk_and_removed_ids_are_gone() {
        let dims = 16;
        let items = vectors(2000, dims, 3);
        let ann = build(&items, dims);
        let query = &items[10].1;
        let query = &codes(query);
        let even = ann.search(query, 20, Some(&|id| id % 2 == 0)).unwrap();
        assert_eq!(even.len(), 20);
        assert!(even.iter().all(|(id, _)| id % 2 == 0));
        // The query's own vector is found first, then not once it is removed.
        assert_eq!(ann.search(query, 1, None).unwrap()[0].0, 11);
        ann.remove(11);
        assert!(
            ann.search(query, 5, None)
                .unwrap()
                .iter()
                .all(|(id, _)| *id != 11)
        );
        assert_eq!(ann.len(), 1999);
    }

    #[test]
    fn grows_past_its_reservation_and_replaces_vectors() {
        let dims = 8;
        let items = vectors(100, dims, 5);
        let ann = AnnIndex::build(dims, &[], 0, 1, EXPANSION_ADD).unwrap();
        for (id, v) in &items {
            ann.insert(*id, &codes(v)).unwrap();
        }
        assert_eq!(ann.len(), 100);
        // A replaced vector is found by its new value, and counted once.
        ann.insert(1, &codes(&items[50].1)).unwrap();
        assert_eq!(ann.len(), 100);
        let mut held = vec![0i8; dims];
        assert!(ann.get(1, &mut held) && held == codes(&items[50].1));
        assert!(!ann.get(5000, &mut held), "not held");
        let best = ann.search(&codes(&items[50].1), 2, None).unwrap();
        let ids: Vec<i64> = best.iter().map(|b| b.0).collect();
        assert!(ids.contains(&1) && ids.contains(&51), "{ids:?}");
        // Another length is ignored, and a query of another length finds nothing.
        ann.insert(500, &[1; 3]).unwrap();
        assert_eq!(ann.len(), 100);
        assert!(ann.search(&[1; 3], 5, None).unwrap().is_empty());
    }

    #[test]
    fn many_concurrent_searches_each_walk_the_graph() {
        // More searching threads than cores: none may find every context taken (the
        // caller would then fall back to a full scan), nor may an insert meanwhile.
        let dims = 16;
        let items = vectors(2000, dims, 11);
        let ann = build(&items, dims);
        let queries: Vec<Vec<i8>> = vectors(16, dims, 12)
            .iter()
            .map(|(_, v)| codes(v))
            .collect();
        let barrier = std::sync::Barrier::new(queries.len());
        let failed = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for query in &queries {
                let (ann, barrier, failed) = (&ann, &barrier, &failed);
                scope.spawn(move || {
                    barrier.wait();
                    for _ in 0..300 {
                        match ann.search(query, 10, None) {
                            Ok(hits) if hits.len() == 10 => {}
                            _ => {
                                failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                        }
                    }
                });
            }
        });
        assert_eq!(failed.into_inner(), 0, "searches that found no context");
        // Growing the graph keeps the contexts.
        let more = vectors(3000, dims, 13);
        for (id, v) in &more[..1000] {
            ann.insert(id + 10_000, &codes(v)).unwrap();
        }
        assert_eq!(ann.len(), 3000);
        let failed = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for query in &queries {
                let (ann, failed) = (&ann, &failed);
                scope.spawn(move || {
                    for _ in 0..100 {
                        if !matches!(ann.search(query, 10, None), Ok(h) if h.len() == 10) {
                            failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(failed.into_inner(), 0, "after growing");
    }
}
