//! Reranking a search's candidates with the reranker its project names: the fused
//! ranking's best candidates are scored by the reranker and reordered by that score.
//! A reranker that fails never fails the search: it is logged and counted (by
//! [`Rerankers::score`]) and the fused order answers.

use super::ranking::Hit;
use crate::rerank::Rerankers;

/// `candidates` (best first, as fused) reordered by the reranker `name`'s scores, which
/// become their scores, and cut to `top_k`. Ties keep the fused order. If the reranker
/// fails, the fused order cut to `top_k`.
pub(super) async fn rerank(
    rerankers: &Rerankers,
    name: &str,
    query: &str,
    mut candidates: Vec<Hit>,
    top_k: usize,
) -> Vec<Hit> {
    if candidates.is_empty() {
        return candidates;
    }
    // What the reranker reads is what the embedder reads: who spoke, then what was
    // said, since questions name people ("What did Caroline adopt?").
    let documents: Vec<String> = candidates
        .iter()
        .map(|c| {
            super::embedding::embedding_text(
                &c.scored.episode.producer_id,
                &c.scored.episode.content,
            )
        })
        .collect();
    match rerankers.score(name, query, &documents).await {
        Ok(scores) => {
            for (candidate, score) in candidates.iter_mut().zip(scores) {
                candidate.scored.score = f64::from(score);
            }
            // Stable: equal scores keep the fused order.
            candidates.sort_by(|a, b| b.scored.score.total_cmp(&a.scored.score));
        }
        Err(err) => {
            tracing::warn!(
                reranker = name,
                error = %err,
                candidates = candidates.len(),
                "reranking failed; answering in the fused order"
            );
        }
    }
    candidates.truncate(top_k);
    candidates
}
