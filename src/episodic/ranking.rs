//! Long-term memory ranking: lexical (BM25), dense (embedding similarity) or both fused
//! by reciprocal rank, as the project's `reranker` setting asks.

use std::sync::Arc;

use crate::embed::{EmbedError, Embedder};
use crate::error::{Error, Result};
use crate::model::filter::Expr;
use crate::model::{ProjectKey, ScoredEpisode};
use crate::retrieval::fusion::{RRF_K, reciprocal_rank};
use crate::store::Store;

/// The ranking modes a project can name in `config.reranker`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Lexical,
    Dense,
    /// Both, fused; the default when an embedder is configured.
    Hybrid,
}

impl Mode {
    pub const NAMES: [&'static str; 3] = ["lexical", "dense", "hybrid"];

    /// The mode named by a project's `reranker` (empty: the server's default).
    pub fn parse(name: &str, has_embedder: bool) -> Result<Mode> {
        match name {
            "lexical" => Ok(Mode::Lexical),
            "dense" => Ok(Mode::Dense),
            "hybrid" => Ok(Mode::Hybrid),
            "" if has_embedder => Ok(Mode::Hybrid),
            "" => Ok(Mode::Lexical),
            other => Err(Error::invalid(
                "config.reranker",
                format!("{other:?} is not one of lexical, dense, hybrid (or empty)"),
            )),
        }
    }
}

/// Ranks the project's episodes for `query`, best first, at most `top_k`.
pub async fn rank(
    store: &Arc<dyn Store>,
    embedder: Option<&Arc<dyn Embedder>>,
    mode: Mode,
    key: &ProjectKey,
    query: &str,
    filter: Option<&Expr>,
    top_k: usize,
) -> Result<Vec<ScoredEpisode>> {
    let embedder = match (mode, embedder) {
        (Mode::Lexical, _) | (Mode::Hybrid, None) => {
            return store.search_lexical(key, query, filter, top_k).await;
        }
        (Mode::Dense, None) => {
            return Err(Error::FailedPrecondition(format!(
                "project {key} ranks by embeddings, but the server runs without an \
                 embedder (--embedder)"
            )));
        }
        (_, Some(embedder)) => embedder,
    };
    let query_vector = match embedder.embed(&[query.to_string()]).await {
        Ok(mut vectors) if vectors.len() == 1 => vectors.remove(0),
        Ok(_) => return Err(Error::Internal("the embedder returned no vector".into())),
        Err(err) if mode == Mode::Hybrid => {
            // Lexical results beat none: answer with them and say why in the log.
            tracing::warn!(error = %err, "query embedding failed; answering lexically");
            return store.search_lexical(key, query, filter, top_k).await;
        }
        Err(EmbedError::Unavailable(m)) => return Err(Error::Unavailable(m)),
        Err(EmbedError::Failed(m)) => return Err(Error::Internal(m)),
    };
    if mode == Mode::Dense {
        return store.search_dense(key, &query_vector, filter, top_k).await;
    }
    // Each list goes deeper than top_k, so fusion can promote what both agree on.
    let depth = (top_k * 3).max(50);
    let (lexical, dense) = tokio::try_join!(
        store.search_lexical(key, query, filter, depth),
        store.search_dense(key, &query_vector, filter, depth),
    )?;
    Ok(fuse(lexical, dense, top_k))
}

/// Reciprocal-rank fusion of two ranked lists of episodes; the score is the fused one.
pub fn fuse(
    lexical: Vec<ScoredEpisode>,
    dense: Vec<ScoredEpisode>,
    top_k: usize,
) -> Vec<ScoredEpisode> {
    let lexical_ids: Vec<uuid::Uuid> = lexical.iter().map(|h| h.episode.uid).collect();
    let dense_ids: Vec<uuid::Uuid> = dense.iter().map(|h| h.episode.uid).collect();
    let fused = reciprocal_rank(
        &[(&lexical_ids[..], 1.0), (&dense_ids[..], 1.0)],
        RRF_K,
        top_k,
    );
    let mut episodes: std::collections::HashMap<uuid::Uuid, _> = lexical
        .into_iter()
        .chain(dense)
        .map(|hit| (hit.episode.uid, hit.episode))
        .collect();
    fused
        .into_iter()
        .filter_map(|(uid, score)| {
            episodes
                .remove(&uid)
                .map(|episode| ScoredEpisode { episode, score })
        })
        .collect()
}
