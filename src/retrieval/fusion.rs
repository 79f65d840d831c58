//! Reciprocal-rank fusion (Cormack et al., 2009): each ranked list gives a document
//! `weight / (k + rank)`; documents are ordered by the sum. Robust to the lists' score
//! scales being incomparable (BM25 and cosine are).

use std::collections::HashMap;
use std::hash::Hash;

/// The usual constant: damps the difference between the very first ranks.
pub const RRF_K: f64 = 60.0;

/// Fuses ranked lists (best first) with their weights; returns the best `limit`.
pub fn reciprocal_rank<T: Clone + Eq + Hash + Ord>(
    lists: &[(&[T], f64)],
    k: f64,
    limit: usize,
) -> Vec<(T, f64)> {
    let mut scores: HashMap<T, f64> = HashMap::new();
    for (list, weight) in lists {
        for (rank, item) in list.iter().enumerate() {
            *scores.entry(item.clone()).or_default() += weight / (k + rank as f64 + 1.0);
        }
    }
    let mut fused: Vec<(T, f64)> = scores.into_iter().collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    fused.truncate(limit);
    fused
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_beats_a_single_first_place() {
        let lexical = ["a", "b", "c"];
        let dense = ["d", "b", "a"];
        let fused = reciprocal_rank(&[(&lexical[..], 1.0), (&dense[..], 1.0)], RRF_K, 10);
        let order: Vec<&str> = fused.iter().map(|f| f.0).collect();
        // a: 1/61 + 1/63, b: 1/62 + 1/62, then d (1/61) before c (1/63).
        assert_eq!(order, ["a", "b", "d", "c"]);
        assert!((fused[0].1 - (1.0 / 61.0 + 1.0 / 63.0)).abs() < 1e-12);
    }

    #[test]
    fn weights_and_limit_apply() {
        let lexical = ["a"];
        let dense = ["b"];
        let fused = reciprocal_rank(&[(&lexical[..], 1.0), (&dense[..], 2.0)], RRF_K, 1);
        assert_eq!(fused.len(), 1);
        assert_eq!(fused[0].0, "b");
        let empty: [&str; 0] = [];
        assert!(reciprocal_rank(&[(&empty[..], 1.0)], RRF_K, 5).is_empty());
    }
}
