//! Exact rescoring of the best candidates: the index ranks with int8 vectors
//! (`quantized.rs`); the candidates that can reach the top are scored again with their
//! exact f32 vectors, read from the store, and re-sorted.

use std::collections::HashMap;

/// A ranked candidate: the store handle of an episode and its score, with how the score
/// depends on the episode's own (approximate) similarity to the query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    pub handle: i64,
    pub score: f32,
    pub dense: Option<Dense>,
    /// What the score is made of, when the search asked to explain it (filled by the
    /// ranking that knows them; rescoring moves `dense` and `score` alike).
    pub parts: Option<super::weights::ScoreParts>,
}

/// The approximate similarity that went into a score, and the score's change per unit
/// of it (1 for dense ranking; for hybrid, the weight of the episode's own similarity in
/// its standardised, smoothed dense score).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dense {
    pub similarity: f32,
    pub weight: f32,
}

impl Hit {
    pub fn lexical(handle: i64, score: f32) -> Hit {
        Hit {
            handle,
            score,
            dense: None,
            parts: None,
        }
    }

    pub fn dense(handle: i64, similarity: f32) -> Hit {
        Hit {
            handle,
            score: similarity,
            dense: Some(Dense {
                similarity,
                weight: 1.0,
            }),
            parts: None,
        }
    }
}

/// Candidates to rank approximately for `limit` results, so that rescoring can bring
/// in one the quantisation error had put just below the cut.
pub fn candidates(limit: usize) -> usize {
    (limit.saturating_mul(4)).max(40)
}

/// The handles whose exact vectors rescoring needs.
pub fn wanted(hits: &[Hit]) -> Vec<i64> {
    hits.iter()
        .filter(|h| h.dense.is_some())
        .map(|h| h.handle)
        .collect()
}

/// Replaces each hit's approximate similarity by the exact one (`exact` by handle;
/// hits without an exact vector of the query's length keep their score), re-sorts
/// (ties keep the index's order) and cuts to `limit`.
pub fn rescore(
    mut hits: Vec<Hit>,
    exact: &HashMap<i64, Vec<f32>>,
    query: &[f32],
    limit: usize,
) -> Vec<Hit> {
    for hit in &mut hits {
        let (Some(dense), Some(vector)) = (hit.dense.as_mut(), exact.get(&hit.handle)) else {
            continue;
        };
        if vector.len() != query.len() {
            continue;
        }
        let similarity = super::dense::dot(vector, query);
        let moved = dense.weight * (similarity - dense.similarity);
        hit.score += moved;
        if let Some(parts) = hit.parts.as_mut() {
            parts.dense += moved;
        }
        dense.similarity = similarity;
    }
    hits.sort_by(|a, b| b.score.total_cmp(&a.score));
    hits.truncate(limit);
    hits
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::quantized;

    #[test]
    fn rescoring_restores_the_exact_order() {
        // Vectors a hair apart: int8 codes cannot tell their order, f32 can.
        let query = [1.0f32, 0.0];
        let vectors: Vec<(i64, Vec<f32>)> = (0..50)
            .map(|i| {
                let angle = 0.3 + i as f32 * 1e-4;
                (i, vec![angle.cos(), angle.sin()])
            })
            .collect();
        let approx: Vec<Hit> = vectors
            .iter()
            .rev()
            .map(|(id, v)| {
                let (codes, scale) = quantized::quantized(v);
                Hit::dense(*id, quantized::dot(&codes, scale, &query))
            })
            .collect();
        let exact: HashMap<i64, Vec<f32>> = vectors.iter().cloned().collect();
        let best = rescore(approx.clone(), &exact, &query, 10);
        let ids: Vec<i64> = best.iter().map(|h| h.handle).collect();
        assert_eq!(ids, (0..10).collect::<Vec<_>>());
        assert!(best.iter().all(|h| h.score == h.dense.unwrap().similarity));
        // Without exact vectors nothing moves; lexical hits keep their score.
        let kept = rescore(approx.clone(), &HashMap::new(), &query, 50);
        assert_eq!(kept.iter().map(|h| h.score).collect::<Vec<_>>(), {
            let mut scores: Vec<f32> = approx.iter().map(|h| h.score).collect();
            scores.sort_by(|a, b| b.total_cmp(a));
            scores
        });
        let lexical = rescore(vec![Hit::lexical(1, 2.0)], &exact, &query, 5);
        assert_eq!(lexical, [Hit::lexical(1, 2.0)]);
    }

    #[test]
    fn a_hybrid_score_moves_by_its_weight() {
        let hit = Hit {
            handle: 7,
            score: 3.0,
            dense: Some(Dense {
                similarity: 0.5,
                weight: 2.0,
            }),
            parts: None,
        };
        let other = Hit::lexical(8, 3.1);
        let exact = HashMap::from([(7, vec![0.6f32, 0.0])]);
        let best = rescore(vec![other, hit], &exact, &[1.0, 0.0], 1);
        assert_eq!(best[0].handle, 7);
        assert!((best[0].score - 3.2).abs() < 1e-5, "{best:?}");
        assert_eq!(candidates(10), 40);
        assert_eq!(candidates(50), 200);
        assert_eq!(wanted(&[other, hit]), [7]);
    }
}
