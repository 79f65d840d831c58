//! Long-term memory ranking: lexical (BM25 with conversational context), dense
//! (embedding similarity) or both fused (`retrieval::fusion`), as the project's
//! `reranker` setting asks.

use std::sync::Arc;

use crate::embed::Embedder;
use crate::error::{Error, Result};
use crate::model::filter::Expr;
use crate::model::{EpisodeHandle, ProjectKey, ScoredEpisode};
use crate::retrieval::index_cache::IndexView;
// The mode is part of `rank`'s signature.
pub use crate::retrieval::ranking::Mode;
use crate::store::Store;

/// A ranked episode with its handle in the index (kept for later steps, never looked
/// up again).
#[derive(Debug, Clone)]
pub struct Hit {
    pub handle: EpisodeHandle,
    pub scored: ScoredEpisode,
}

/// What one search asks of the ranking: the project, its question and how to rank.
pub struct RankQuery<'a> {
    pub mode: Mode,
    pub key: &'a ProjectKey,
    pub query: &'a str,
    pub participant_aware: bool,
    pub filter: Option<&'a Expr>,
    pub top_k: usize,
}

/// Ranks the project's episodes for the query, best first, at most `top_k`: the
/// project's index (the request's `view`, with the vectors of `embedder`) ranks, the
/// store gives the rows.
pub async fn rank(
    store: &Arc<dyn Store>,
    view: &IndexView,
    embedder: Option<&Arc<dyn Embedder>>,
    asked: RankQuery<'_>,
) -> Result<Vec<Hit>> {
    let RankQuery {
        mode,
        key,
        query,
        participant_aware,
        filter,
        top_k,
    } = asked;
    let terms = crate::retrieval::tokenize::query_terms(query);
    let filter = filter.cloned();
    let vectors = embedder.map(|e| e.id().to_string());
    // Participant-aware: the question is embedded without the participants it names,
    // and hybrid ranking prefers their turns (`fusion::PARTICIPANT_WEIGHT`).
    let named = match (mode, embedder) {
        (Mode::Dense | Mode::Hybrid, Some(_)) if participant_aware => {
            let question = query.to_string();
            view.read(move |index| index.named_participants(&question))
                .await?
        }
        _ => None,
    };
    let (embedded, named) = match named {
        Some(named) => (
            named.without.unwrap_or_else(|| query.to_string()),
            named.ids,
        ),
        None => (query.to_string(), Vec::new()),
    };
    let vector = match (mode, embedder) {
        (Mode::Lexical, _) | (Mode::Hybrid, None) => None,
        (Mode::Dense, None) => {
            return Err(Error::FailedPrecondition(format!(
                "project {key} ranks by embeddings, but the server runs without an \
                 embedder (--embedder)"
            )));
        }
        // Within `embed::QUERY_TIMEOUT`, and at once while the embedder is known to be
        // down: a search never waits out an endpoint's timeouts and retries.
        (_, Some(embedder)) => {
            match crate::search_time::embed_query(embedder.as_ref(), &embedded).await {
                Ok(vector) => Some(vector),
                Err(err) if mode == Mode::Hybrid => {
                    // Lexical results beat none: answer with them and say why in the log.
                    tracing::warn!(error = %err, "query embedding failed; answering lexically");
                    None
                }
                // The embedder's fault (down, or answering garbage), neither the server's nor
                // the client's: worth retrying once it is fixed.
                Err(err) => {
                    return Err(Error::Unavailable(format!(
                        "dense search needs the query's vector: {err}"
                    )));
                }
            }
        }
    };
    // With a query vector the index ranks by int8 codes: it proposes more candidates
    // than asked, and those are rescored with their exact vectors below.
    let query_vector = vector.clone();
    let wanted = match vector {
        Some(_) => crate::retrieval::rescore::candidates(top_k),
        None => top_k,
    };
    let hits = view
        .read(move |index| {
            let filter = filter.as_ref();
            match (mode, vector) {
                (Mode::Dense, Some(vector)) => index.dense(&vector, filter, wanted),
                (_, Some(vector)) => index.hybrid(&terms, &vector, &named, filter, wanted),
                (_, None) => index.lexical(&terms, filter, wanted),
            }
        })
        .await?;
    // Hybrid: every fused candidate is rescored, as the quantisation error of its own
    // similarity could move any of them across the cut (neighbours' share stays int8).
    let hits = match (query_vector, vectors.as_deref()) {
        (Some(query), Some(embedder)) => {
            let wanted: Vec<EpisodeHandle> = crate::retrieval::rescore::wanted(&hits)
                .into_iter()
                .map(EpisodeHandle::from_raw)
                .collect();
            let exact: std::collections::HashMap<i64, Vec<f32>> = if wanted.is_empty() {
                Default::default()
            } else {
                crate::round_trips::call(store.vectors(key, embedder, &wanted))
                    .await?
                    .into_iter()
                    .map(|(handle, vector)| (handle.raw(), vector))
                    .collect()
            };
            crate::retrieval::rescore::rescore(hits, &exact, &query, top_k)
        }
        _ => hits,
    };
    let handles: Vec<EpisodeHandle> = hits
        .iter()
        .map(|hit| EpisodeHandle::from_raw(hit.handle))
        .collect();
    let mut rows: std::collections::HashMap<EpisodeHandle, _> =
        crate::round_trips::call(store.episodes_by_handle(key, &handles))
            .await?
            .into_iter()
            .collect();
    // A hit deleted since it was ranked is simply left out.
    Ok(hits
        .into_iter()
        .filter_map(|hit| {
            let handle = EpisodeHandle::from_raw(hit.handle);
            Some(Hit {
                handle,
                scored: ScoredEpisode {
                    episode: rows.remove(&handle)?,
                    score: f64::from(hit.score),
                },
            })
        })
        .collect())
}
