//! Long-term memory ranking: lexical (BM25 with conversational context), dense
//! (embedding similarity) or both fused (`retrieval::fusion`), as the project's
//! `reranker` setting asks.

use std::collections::HashMap;
use std::sync::Arc;

use crate::embed::Embedder;
use crate::error::{Error, Result};
use crate::model::filter::Expr;
use crate::model::{Episode, EpisodeHandle, ScoredEpisode};
use crate::retrieval::index_cache::IndexView;
use crate::retrieval::project_search::Asked;
use crate::retrieval::time_expressions;
use crate::retrieval::weights::{RankingWeights, ScoreParts};
use memmachine_core::access::ProjectAccess;
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
    pub key: &'a ProjectAccess,
    pub query: &'a str,
    pub participant_aware: bool,
    pub filter: Option<&'a Expr>,
    pub top_k: usize,
    /// How hybrid ranking weighs its parts (the project's).
    pub weights: RankingWeights,
    /// Whether each hit carries the parts of its score (`ScoredEpisode::parts`).
    pub explain: bool,
}

/// The index's candidates for a query, before the store is read: what to read for
/// them, then [`Proposal::finish`] with what was read.
pub struct Proposal {
    hits: Vec<crate::retrieval::rescore::Hit>,
    /// The query's vector and the embedder (an id) whose exact vectors rescore hits.
    rescore: Option<(Vec<f32>, String)>,
    top_k: usize,
    /// The weights the hits were ranked with.
    weights: RankingWeights,
    /// Whether hits keep the parts of their scores.
    explain: bool,
}

impl Proposal {
    /// The weights the hits were ranked with.
    pub fn weights(&self) -> RankingWeights {
        self.weights
    }

    /// Episodes whose rows the ranking may answer.
    pub fn rows_wanted(&self) -> Vec<EpisodeHandle> {
        self.hits
            .iter()
            .map(|hit| EpisodeHandle::from_raw(hit.handle))
            .collect()
    }

    /// The embedder and the episodes whose exact vectors rescoring reads.
    pub fn vectors_wanted(&self) -> Option<(&str, Vec<EpisodeHandle>)> {
        let (_, embedder) = self.rescore.as_ref()?;
        let wanted = crate::retrieval::rescore::wanted(&self.hits);
        Some((
            embedder.as_str(),
            wanted.into_iter().map(EpisodeHandle::from_raw).collect(),
        ))
    }

    /// The best `top_k`, rescored with `exact` vectors (by handle), with their rows
    /// from `rows`; a hit deleted since it was ranked (no row) is simply left out.
    pub fn finish(
        self,
        rows: &mut HashMap<EpisodeHandle, Episode>,
        exact: &HashMap<i64, Vec<f32>>,
    ) -> Vec<Hit> {
        // Hybrid: every fused candidate is rescored, as the quantisation error of its own
        // similarity could move any of them across the cut (neighbours' share stays int8).
        let hits = match &self.rescore {
            Some((query, _)) => {
                crate::retrieval::rescore::rescore(self.hits, exact, query, self.top_k)
            }
            None => self.hits,
        };
        let explain = self.explain;
        hits.into_iter()
            .filter_map(|hit| {
                let handle = EpisodeHandle::from_raw(hit.handle);
                Some(Hit {
                    handle,
                    scored: ScoredEpisode {
                        episode: rows.remove(&handle)?,
                        score: f64::from(hit.score),
                        parts: hit.parts.filter(|_| explain),
                    },
                })
            })
            .collect()
    }
}

/// Ranks the project's episodes for the query, best first, at most `top_k`: the
/// project's index (the request's `view`, with the vectors of `embedder`) ranks, the
/// store gives the rows and exact vectors (two reads).
pub async fn rank(
    store: &Arc<dyn Store>,
    view: &IndexView,
    embedder: Option<&Arc<dyn Embedder>>,
    asked: RankQuery<'_>,
) -> Result<Vec<Hit>> {
    let key = asked.key;
    let proposal = propose(view, embedder, asked).await?;
    let exact: HashMap<i64, Vec<f32>> = match proposal.vectors_wanted() {
        Some((embedder, wanted)) if !wanted.is_empty() => {
            crate::round_trips::call(store.vectors(key, embedder, &wanted))
                .await?
                .into_iter()
                .map(|(handle, vector)| (handle.raw(), vector))
                .collect()
        }
        _ => HashMap::new(),
    };
    let wanted = proposal.rows_wanted();
    let mut rows: HashMap<EpisodeHandle, Episode> =
        crate::round_trips::call(store.episodes_by_handle(key, &wanted))
            .await?
            .into_iter()
            .collect();
    Ok(proposal.finish(&mut rows, &exact))
}

/// The index's candidates for the query (the question embedded when the mode ranks by
/// vectors): no read of the store.
pub async fn propose(
    view: &IndexView,
    embedder: Option<&Arc<dyn Embedder>>,
    asked: RankQuery<'_>,
) -> Result<Proposal> {
    let RankQuery {
        mode,
        key,
        query,
        participant_aware,
        filter,
        top_k,
        weights,
        explain,
    } = asked;
    let terms = crate::retrieval::tokenize::query_terms(query);
    let question = query.to_string();
    let filter = filter.cloned();
    let vectors = embedder.map(|e| e.id().to_string());
    // Participant-aware: the question is embedded without the participants it names,
    // and ranking prefers their turns (`ranking_weights.participant`).
    let named = if participant_aware {
        let question = query.to_string();
        view.read(move |index| index.named_participants(&question))
            .await?
    } else {
        None
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
    // Ranking runs on the index's thread: its stages are counted there, added here.
    let (mut hits, spent) = view
        .read(move |index| {
            crate::stage_time::counted_here(|| {
                let filter = filter.as_ref();
                let asked = Asked {
                    named: &named,
                    period: time_expressions::question_period(&question),
                    when: time_expressions::asks_when(&question),
                    weights: &weights,
                    explain,
                };
                match (mode, vector) {
                    (Mode::Dense, Some(vector)) => index.dense(&vector, filter, wanted),
                    (_, Some(vector)) => index.hybrid(&terms, &vector, &asked, filter, wanted),
                    (_, None) => index.lexical_asked(&terms, &asked, filter, wanted),
                }
            })
        })
        .await?;
    crate::stage_time::add(spent);
    // A lexical score is all lexical, a dense one all dense; hybrid ranking fills in
    // its own parts.
    let alone = match (mode, &query_vector) {
        (_, None) => Some(true),
        (Mode::Dense, Some(_)) => Some(false),
        _ => None,
    };
    if let (true, Some(lexical)) = (explain, alone) {
        for hit in hits.iter_mut().filter(|hit| hit.parts.is_none()) {
            hit.parts = Some(if lexical {
                ScoreParts {
                    lexical: hit.score,
                    ..ScoreParts::default()
                }
            } else {
                ScoreParts {
                    dense: hit.score,
                    ..ScoreParts::default()
                }
            });
        }
    }
    Ok(Proposal {
        hits,
        rescore: query_vector.zip(vectors),
        top_k,
        weights,
        explain,
    })
}
