//! Exact nearest-neighbour search by dot product (cosine on unit vectors).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A candidate in the min-heap of the best `limit` so far.
struct Entry(f32, i64);

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    /// Reversed, so the heap's top is the worst kept candidate.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .0
            .total_cmp(&self.0)
            .then_with(|| self.1.cmp(&other.1))
    }
}

/// The dot product of the common length of `a` and `b`. Eight independent partial sums
/// let the compiler vectorise the loop (a single running sum is one long dependency
/// chain: about 5x slower on 384 dimensions).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut lanes = [0f32; 8];
    let (chunks_a, chunks_b) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = chunks_a
        .remainder()
        .iter()
        .zip(chunks_b.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in chunks_a.zip(chunks_b) {
        for ((lane, x), y) in lanes.iter_mut().zip(x).zip(y) {
            *lane += x * y;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// The `limit` items most similar to `query`, best first, as `(id, similarity)`.
/// Vectors of another length than the query's are skipped.
pub fn top_k<'a>(
    items: impl Iterator<Item = (i64, &'a [f32])>,
    query: &[f32],
    limit: usize,
) -> Vec<(i64, f32)> {
    let scored = items
        .filter(|(_, vector)| vector.len() == query.len())
        .map(|(id, vector)| (id, dot(vector, query)));
    top_k_scored(scored, limit)
}

/// The `limit` best of `(id, score)` items, best first (ties: lower id first).
pub fn top_k_scored(items: impl Iterator<Item = (i64, f32)>, limit: usize) -> Vec<(i64, f32)> {
    if limit == 0 {
        return Vec::new();
    }
    // Capacity from what there is to rank, not from a caller's `limit`.
    let mut heap: BinaryHeap<Entry> =
        BinaryHeap::with_capacity(limit.min(items.size_hint().0).saturating_add(1));
    for (id, score) in items {
        if heap.len() < limit {
            heap.push(Entry(score, id));
        } else if heap.peek().is_some_and(|worst| score > worst.0) {
            heap.pop();
            heap.push(Entry(score, id));
        }
    }
    let mut best: Vec<(i64, f32)> = heap.into_iter().map(|Entry(s, id)| (id, s)).collect();
    best.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_the_plain_sum_at_every_length() {
        for n in [0, 1, 7, 8, 9, 16, 383, 384] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - plain).abs() < 1e-4, "length {n}");
        }
        assert_eq!(dot(&[1.0, 2.0, 3.0], &[1.0, 1.0]), 3.0, "the common length");
    }

    #[test]
    fn finds_the_most_similar_in_order() {
        let vectors: Vec<(i64, Vec<f32>)> = (0..100)
            .map(|i| {
                let angle = i as f32 / 100.0;
                (i, vec![angle.cos(), angle.sin()])
            })
            .collect();
        let query = [1.0, 0.0];
        let best = top_k(vectors.iter().map(|(i, v)| (*i, v.as_slice())), &query, 3);
        let ids: Vec<i64> = best.iter().map(|b| b.0).collect();
        assert_eq!(ids, [0, 1, 2]);
        assert!(best[0].1 >= best[1].1 && best[1].1 >= best[2].1);
        let wrong_length = [(7i64, vec![1.0f32, 0.0, 0.0])];
        assert!(
            top_k(
                wrong_length.iter().map(|(i, v)| (*i, v.as_slice())),
                &query,
                3
            )
            .is_empty()
        );
    }
}
