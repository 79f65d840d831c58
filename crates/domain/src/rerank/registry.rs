//! The rerankers a server offers its projects, by the name a project gives in
//! `ProjectConfig.reranker` (besides the ranking modes `lexical`, `dense`, `hybrid`),
//! and the one way a search calls them: [`Rerankers::score`], bounded in time, checked
//! and measured.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{RerankError, Reranker};
use crate::metrics::Metrics;

/// The name of the in-process cross-encoder (`--reranker-model-dir`).
pub const CROSS_ENCODER: &str = "cross-encoder";
/// The name of the `POST /rerank` endpoint (`--reranker-base-url`).
pub const REMOTE: &str = "remote";
/// Candidates a reranker scores unless configured (`--rerank-candidates`).
pub const DEFAULT_CANDIDATES: usize = 50;

#[derive(Clone)]
pub struct Rerankers {
    named: BTreeMap<String, Arc<dyn Reranker>>,
    candidates: usize,
    timeout: Duration,
    metrics: Option<Arc<Metrics>>,
}

impl Default for Rerankers {
    fn default() -> Self {
        Rerankers::new(Vec::new(), DEFAULT_CANDIDATES, Duration::from_secs(5))
    }
}

impl Rerankers {
    /// Offers each reranker under its name; a search reranks `candidates` episodes (at
    /// least its `top_k`) and waits at most `timeout` for the scores.
    pub fn new(
        named: Vec<(&str, Arc<dyn Reranker>)>,
        candidates: usize,
        timeout: Duration,
    ) -> Rerankers {
        Rerankers {
            named: named
                .into_iter()
                .map(|(name, reranker)| (name.to_string(), reranker))
                .collect(),
            candidates: candidates.max(1),
            timeout,
            metrics: None,
        }
    }

    /// The same rerankers, recording their latency and failures in `metrics`.
    pub fn measured(mut self, metrics: &Arc<Metrics>) -> Rerankers {
        self.metrics = Some(metrics.clone());
        self
    }

    /// Whether `name` is a reranker of this server.
    pub fn offers(&self, name: &str) -> bool {
        self.named.contains_key(name)
    }

    /// The names of the rerankers offered, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.named.keys().map(String::as_str).collect()
    }

    /// Each reranker offered: its name and id.
    pub fn all(&self) -> Vec<(&str, &str)> {
        self.named
            .iter()
            .map(|(name, reranker)| (name.as_str(), reranker.id()))
            .collect()
    }

    /// How many candidates to rerank for a search of `top_k`.
    pub fn candidates(&self, top_k: usize) -> usize {
        self.candidates.max(top_k)
    }

    /// Scores `documents` against `query` with the reranker `name`: one finite score
    /// per document, in order, within the timeout. Failures are counted in the metrics
    /// (`memmachine_rerank_failures_total`), successes timed.
    pub async fn score(
        &self,
        name: &str,
        query: &str,
        documents: &[String],
    ) -> Result<Vec<f32>, RerankError> {
        let started = Instant::now();
        let result = self.score_unmeasured(name, query, documents).await;
        if let Some(metrics) = &self.metrics {
            match &result {
                Ok(_) => metrics.record_rerank(name, started.elapsed()),
                Err(_) => metrics.record_rerank_failure(name),
            }
            // Only rerankers offered: a name a caller made up is no resource.
            if self.offers(name) {
                let kind = crate::resource_status::Kind::Reranker;
                metrics.last_calls().record(kind, name, &result);
            }
        }
        result
    }

    async fn score_unmeasured(
        &self,
        name: &str,
        query: &str,
        documents: &[String],
    ) -> Result<Vec<f32>, RerankError> {
        let Some(reranker) = self.named.get(name) else {
            return Err(RerankError::Failed(format!(
                "{name:?} is not a reranker of this server (offered: {})",
                self.offered()
            )));
        };
        let scores = tokio::time::timeout(self.timeout, reranker.score(query, documents))
            .await
            .map_err(|_| {
                RerankError::Unavailable(format!(
                    "{} did not answer within {:?}",
                    reranker.id(),
                    self.timeout
                ))
            })??;
        if scores.len() != documents.len() {
            return Err(RerankError::Failed(format!(
                "{} gave {} scores for {} documents",
                reranker.id(),
                scores.len(),
                documents.len()
            )));
        }
        if let Some(bad) = scores.iter().find(|s| !s.is_finite()) {
            return Err(RerankError::Failed(format!(
                "{} gave the score {bad}",
                reranker.id()
            )));
        }
        Ok(scores)
    }

    fn offered(&self) -> String {
        if self.named.is_empty() {
            "none: start the server with --reranker-model-dir or --reranker-base-url".into()
        } else {
            self.names().join(", ")
        }
    }

    /// Checks a name a project gives in `config.reranker`: empty, a ranking mode, or a
    /// reranker offered here.
    pub fn validate(&self, name: &str) -> Result<(), String> {
        let modes = crate::retrieval::ranking::Mode::NAMES;
        if name.is_empty() || modes.contains(&name) || self.offers(name) {
            return Ok(());
        }
        let mut names: Vec<&str> = modes.to_vec();
        names.extend(self.names());
        let rerankers = if self.named.is_empty() {
            "; this server offers no reranker (--reranker-model-dir, --reranker-base-url)"
        } else {
            ""
        };
        Err(format!(
            "{name:?} is not one of {} (or empty for the default){rerankers}",
            names.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;

    use super::*;

    /// Scores each document by its length, after `delay`; `count` scores whatever asked.
    struct Fake {
        delay: Duration,
        count: Option<usize>,
    }

    #[async_trait]
    impl Reranker for Fake {
        fn id(&self) -> &str {
            "fake"
        }

        async fn score(&self, _query: &str, documents: &[String]) -> Result<Vec<f32>, RerankError> {
            tokio::time::sleep(self.delay).await;
            let n = self.count.unwrap_or(documents.len());
            Ok(documents.iter().take(n).map(|d| d.len() as f32).collect())
        }
    }

    fn rerankers(delay: Duration, count: Option<usize>) -> Rerankers {
        let fake: Arc<dyn Reranker> = Arc::new(Fake { delay, count });
        Rerankers::new(vec![("fake", fake)], 20, Duration::from_millis(200))
    }

    fn docs() -> Vec<String> {
        vec!["a".into(), "abc".into(), "ab".into()]
    }

    #[tokio::test]
    async fn rerank_scores_are_checked_and_bounded_in_time() {
        let metrics = Arc::new(Metrics::new());
        let ok = rerankers(Duration::ZERO, None).measured(&metrics);
        assert_eq!(
            ok.score("fake", "q", &docs()).await.unwrap(),
            [1.0, 3.0, 2.0]
        );
        let slow = rerankers(Duration::from_secs(5), None).measured(&metrics);
        let err = slow.score("fake", "q", &docs()).await.unwrap_err();
        assert!(matches!(err, RerankError::Unavailable(_)), "{err}");
        let short = rerankers(Duration::ZERO, Some(2)).measured(&metrics);
        let err = short.score("fake", "q", &docs()).await.unwrap_err();
        assert!(
            err.to_string().contains("2 scores for 3 documents"),
            "{err}"
        );
        let err = ok.score("gone", "q", &docs()).await.unwrap_err();
        assert!(err.to_string().contains("offered: fake"), "{err}");
        let text = metrics.encode();
        assert!(
            text.contains("memmachine_rerank_failures_total{reranker=\"fake\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("memmachine_rerank_duration_seconds_count{reranker=\"fake\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn projects_name_a_mode_or_an_offered_reranker() {
        let offered = rerankers(Duration::ZERO, None);
        for name in ["", "lexical", "dense", "hybrid", "fake"] {
            assert!(offered.validate(name).is_ok(), "{name}");
        }
        let err = offered.validate("cross-encoder").unwrap_err();
        assert!(err.contains("lexical, dense, hybrid, fake"), "{err}");
        let none = Rerankers::default();
        let err = none.validate("cross-encoder").unwrap_err();
        assert!(err.contains("offers no reranker"), "{err}");
        assert_eq!(offered.candidates(10), 20);
        assert_eq!(offered.candidates(30), 30);
    }
}
