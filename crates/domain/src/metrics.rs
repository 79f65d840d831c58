//! Prometheus metrics (`--metrics-listen`): calls by method and status code with their
//! latency, calls turned away by limits, episodes stored, the embedding queue's depth
//! and lag, embedding latency, volume, tokens and failures (and whether each embedder
//! answers), language-model calls (by purpose and outcome, with their tokens and
//! latency), the semantic worker's events, and rerank calls (latency, failures).
//!
//! `--metrics-listen` is the operator's listener: it serves the whole server's figures
//! without a key, so it belongs on loopback or a private network. Over the REST gateway
//! an org key sees only its own org's store figures ([`Metrics::render_for`]).

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};

use crate::store::StatsStore;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    method: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    limit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EmbedderLabels {
    embedder: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EmbedFailureLabels {
    embedder: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RerankerLabels {
    reranker: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LlmCallLabels {
    purpose: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PurposeLabels {
    purpose: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabels {
    event: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 100 µs to ~13 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

fn round_trips_histogram() -> Histogram {
    // 0, 1, 2, 4, ... 64 calls.
    Histogram::new([0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0])
}

fn llm_histogram() -> Histogram {
    // 50 ms to ~7 min: a language-model call takes far longer than a gRPC call.
    Histogram::new(exponential_buckets(0.05, 2.0, 14))
}

/// `metric`, registered in `registry` under `name` (with the registry's prefix).
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// The index cache's bytes held and projects loaded.
pub type IndexUsage = Box<dyn Fn() -> (usize, usize) + Send + Sync>;

pub struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    call_seconds: Histograms<MethodLabels>,
    refused: Family<LimitLabels, Counter>,
    episodes: Gauge,
    queue_depth: Gauge,
    queue_lag: Gauge<f64, AtomicU64>,
    semantic_queue: Gauge,
    semantic_failed: Gauge,
    change_streams: Gauge,
    index_projects: Gauge,
    index_bytes: Gauge,
    /// Reads the index cache's bytes and projects when the metrics are encoded.
    index_usage: std::sync::OnceLock<IndexUsage>,
    embed_seconds: Histograms<EmbedderLabels>,
    embedded_texts: Family<EmbedderLabels, Counter>,
    embedding_tokens: Family<EmbedderLabels, Counter>,
    refused_texts: Family<EmbedderLabels, Counter>,
    embedding_failures: Family<EmbedFailureLabels, Counter>,
    embedder_up: Family<EmbedderLabels, Gauge>,
    llm_calls: Family<LlmCallLabels, Counter>,
    llm_prompt_tokens: Family<PurposeLabels, Counter>,
    llm_completion_tokens: Family<PurposeLabels, Counter>,
    llm_seconds: Histograms<PurposeLabels>,
    llm_endpoint_failing: Gauge,
    semantic_events: Family<EventLabels, Counter>,
    rerank_seconds: Histograms<RerankerLabels>,
    rerank_failures: Family<RerankerLabels, Counter>,
    store_round_trips: Histograms<OperationLabels>,
    /// How the last call to each model ended, for `/config/resources`.
    last_calls: crate::resource_status::LastCalls,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("memmachine");
        Metrics {
            calls: registered(
                &mut registry,
                "grpc_requests",
                "gRPC calls answered, by method and status code",
                Family::default(),
            ),
            call_seconds: registered(
                &mut registry,
                "grpc_request_duration_seconds",
                "Time to answer a gRPC call, by method",
                Family::new_with_constructor(latency_histogram),
            ),
            refused: registered(
                &mut registry,
                "rate_limited",
                "Calls turned away by a per-caller limit (rate or concurrency)",
                Family::default(),
            ),
            episodes: registered(
                &mut registry,
                "episodes_stored",
                "Episodes in the store",
                Gauge::default(),
            ),
            queue_depth: registered(
                &mut registry,
                "embedding_queue_depth",
                "Episodes waiting for a vector",
                Gauge::default(),
            ),
            queue_lag: registered(
                &mut registry,
                "embedding_queue_lag_seconds",
                "How long the oldest episode waiting for a vector has waited",
                Gauge::default(),
            ),
            semantic_queue: registered(
                &mut registry,
                "semantic_queue_depth",
                "Messages waiting for semantic ingestion (one per set they land in)",
                Gauge::default(),
            ),
            semantic_failed: registered(
                &mut registry,
                "semantic_queue_failed",
                "Queued messages whose ingestion failed (the model's answers stayed invalid)",
                Gauge::default(),
            ),
            change_streams: registered(
                &mut registry,
                "change_streams_open",
                "Open change streams (WatchChanges and the SSE route) on this server",
                Gauge::default(),
            ),
            index_projects: registered(
                &mut registry,
                "index_projects_loaded",
                "Projects whose search index this server holds in memory",
                Gauge::default(),
            ),
            index_bytes: registered(
                &mut registry,
                "index_bytes",
                "Bytes of the search indexes this server holds (--index-memory bounds them)",
                Gauge::default(),
            ),
            index_usage: std::sync::OnceLock::new(),
            embed_seconds: registered(
                &mut registry,
                "embedding_duration_seconds",
                "Time to embed one batch of texts, by embedder",
                Family::new_with_constructor(latency_histogram),
            ),
            embedded_texts: registered(
                &mut registry,
                "embedded_texts",
                "Texts embedded (episodes and queries), by embedder",
                Family::default(),
            ),
            embedding_tokens: registered(
                &mut registry,
                "embedding_tokens",
                "Tokens embedded, as the model counts them (local and OpenAI-compatible embedders)",
                Family::default(),
            ),
            refused_texts: registered(
                &mut registry,
                "embedding_refused",
                "Episodes left without a vector because the embedder refused their text, by embedder",
                Family::default(),
            ),
            embedding_failures: registered(
                &mut registry,
                "embedding_failures",
                "Calls to an embedder that failed, by embedder and kind (unavailable: down, overloaded or timed out, tried again later; failed: refused, or an answer that is not embeddings)",
                Family::default(),
            ),
            embedder_up: registered(
                &mut registry,
                "embedder_up",
                "1 while the embedder answers, 0 while it is known to be unavailable (searches then rank without it)",
                Family::default(),
            ),
            llm_calls: registered(
                &mut registry,
                "llm_calls",
                "Language-model calls, by purpose and outcome (ok, unavailable, failed)",
                Family::default(),
            ),
            llm_prompt_tokens: registered(
                &mut registry,
                "llm_prompt_tokens",
                "Prompt tokens of language-model calls, as the endpoint counts them, by purpose",
                Family::default(),
            ),
            llm_completion_tokens: registered(
                &mut registry,
                "llm_completion_tokens",
                "Completion tokens of language-model calls, as the endpoint counts them, by purpose",
                Family::default(),
            ),
            llm_seconds: registered(
                &mut registry,
                "llm_call_seconds",
                "Time of a language-model call, retries and rate-limit waits included, by purpose",
                Family::new_with_constructor(llm_histogram),
            ),
            llm_endpoint_failing: registered(
                &mut registry,
                "llm_endpoint_failing",
                "1 while the language model fails every call the same way (semantic ingestion only probes it), else 0",
                Gauge::default(),
            ),
            semantic_events: registered(
                &mut registry,
                "semantic_events",
                "Semantic-memory work done, by event (batch_applied, messages_ingested, commands_applied, batch_retried, batch_failed, messages_failed, invalid_answers, consolidated)",
                Family::default(),
            ),
            rerank_seconds: registered(
                &mut registry,
                "rerank_duration_seconds",
                "Time to rerank one search's candidates, by reranker (successful calls)",
                Family::new_with_constructor(latency_histogram),
            ),
            rerank_failures: registered(
                &mut registry,
                "rerank_failures",
                "Searches answered in the fused order because the reranker failed or timed out, by reranker",
                Family::default(),
            ),
            store_round_trips: registered(
                &mut registry,
                "store_round_trips",
                "Calls to the store one request made, by operation (search)",
                Family::new_with_constructor(round_trips_histogram),
            ),
            last_calls: Default::default(),
            // Last: the fields above borrow it to register themselves.
            registry,
        }
    }

    /// One answered call. `method` is `Service/Method`.
    pub fn record_call(&self, method: &str, code: tonic::Code, elapsed: Duration) {
        self.calls
            .get_or_create(&CallLabels {
                method: method.to_string(),
                code: code_name(code).to_string(),
            })
            .inc();
        self.call_seconds
            .get_or_create(&MethodLabels {
                method: method.to_string(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// The open change streams' gauge (a handle: the relays move it).
    pub fn change_streams(&self) -> Gauge {
        self.change_streams.clone()
    }

    pub fn record_refusal(&self, limit: &str) {
        self.refused
            .get_or_create(&LimitLabels {
                limit: limit.to_string(),
            })
            .inc();
    }

    pub fn record_embedding(&self, embedder: &str, texts: usize, tokens: u64, elapsed: Duration) {
        let labels = EmbedderLabels {
            embedder: embedder.to_string(),
        };
        self.embed_seconds
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        self.embedded_texts
            .get_or_create(&labels)
            .inc_by(texts as u64);
        if tokens > 0 {
            self.embedding_tokens.get_or_create(&labels).inc_by(tokens);
        }
    }

    /// Episodes set aside without a vector: `embedder` refused their texts.
    pub fn record_refused(&self, embedder: &str, episodes: usize) {
        self.refused_texts
            .get_or_create(&EmbedderLabels {
                embedder: embedder.to_string(),
            })
            .inc_by(episodes as u64);
    }

    /// A call to `embedder` that failed: `kind` is `unavailable` or `failed`.
    pub fn record_embedding_failure(&self, embedder: &str, kind: &str) {
        self.embedding_failures
            .get_or_create(&EmbedFailureLabels {
                embedder: embedder.to_string(),
                kind: kind.to_string(),
            })
            .inc();
    }

    /// Whether `embedder` answers (false while it is known to be unavailable).
    pub fn set_embedder_up(&self, embedder: &str, up: bool) {
        self.embedder_up
            .get_or_create(&EmbedderLabels {
                embedder: embedder.to_string(),
            })
            .set(i64::from(up));
    }

    /// One language-model call. `purpose` is a [`crate::llm::Purpose`] label, `outcome`
    /// `ok`, `unavailable` or `failed`; the tokens are 0 when unknown.
    pub fn record_llm_call(
        &self,
        purpose: &str,
        outcome: &str,
        seconds: f64,
        prompt_tokens: u64,
        completion_tokens: u64,
    ) {
        self.llm_calls
            .get_or_create(&LlmCallLabels {
                purpose: purpose.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
        let labels = PurposeLabels {
            purpose: purpose.to_string(),
        };
        self.llm_seconds.get_or_create(&labels).observe(seconds);
        // Created even at 0, so that a purpose's token series exist from its first call.
        self.llm_prompt_tokens
            .get_or_create(&labels)
            .inc_by(prompt_tokens);
        self.llm_completion_tokens
            .get_or_create(&labels)
            .inc_by(completion_tokens);
    }

    /// Whether the language model's endpoint fails every call the same way.
    pub fn set_llm_endpoint_failing(&self, failing: bool) {
        self.llm_endpoint_failing.set(i64::from(failing));
    }

    /// `n` events of the semantic worker: `batch_applied`, `messages_ingested`,
    /// `commands_applied`, `batch_retried`, `batch_failed`, `messages_failed`,
    /// `invalid_answers`, `consolidated`.
    pub fn record_semantic(&self, what: &str, n: u64) {
        self.semantic_events
            .get_or_create(&EventLabels {
                event: what.to_string(),
            })
            .inc_by(n);
    }

    /// One search's candidates reranked by `reranker` (a name projects give).
    pub fn record_rerank(&self, reranker: &str, elapsed: Duration) {
        self.rerank_seconds
            .get_or_create(&RerankerLabels {
                reranker: reranker.to_string(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// The store calls one request of `operation` made.
    pub fn record_round_trips(&self, operation: &str, trips: u32) {
        self.store_round_trips
            .get_or_create(&OperationLabels {
                operation: operation.to_string(),
            })
            .observe(f64::from(trips));
    }

    /// A rerank that failed or timed out (the search was answered in the fused order).
    pub fn record_rerank_failure(&self, reranker: &str) {
        self.rerank_failures
            .get_or_create(&RerankerLabels {
                reranker: reranker.to_string(),
            })
            .inc();
    }

    /// The exposition text of what has been recorded, without reading the store (whose
    /// figures are as [`render`](Self::render) last read them).
    pub fn encode(&self) -> String {
        if let Some(usage) = self.index_usage.get() {
            let (bytes, projects) = usage();
            self.index_bytes
                .set(i64::try_from(bytes).unwrap_or(i64::MAX));
            self.index_projects
                .set(i64::try_from(projects).unwrap_or(i64::MAX));
        }
        let mut text = String::new();
        if let Err(err) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::warn!(error = %err, "encoding metrics");
        }
        text
    }

    /// Where the index cache's figures come from (set once, at start).
    pub fn observe_index(&self, usage: IndexUsage) {
        let _ = self.index_usage.set(usage);
    }

    /// How the last call to each model ended.
    pub fn last_calls(&self) -> &crate::resource_status::LastCalls {
        &self.last_calls
    }

    /// What `caller` may see of the exposition text: everything for an admin key (or
    /// without `--auth`); for an org key only the store's figures of its own org, since
    /// the call, limit and model series mix every org's traffic.
    pub async fn render_for(&self, caller: &crate::auth::Caller, store: &dyn StatsStore) -> String {
        match caller {
            crate::auth::Caller::Org { org_id, .. } => render_org(store, org_id).await,
            crate::auth::Caller::Admin { .. } | crate::auth::Caller::Anyone => {
                self.render(store).await
            }
        }
    }

    /// The exposition text, with the store's figures read now.
    pub async fn render(&self, store: &dyn StatsStore) -> String {
        match store.stats().await {
            Ok(stats) => {
                self.episodes.set(stats.episodes);
                self.queue_depth.set(stats.embedding_queue);
                self.queue_lag.set(stats.embedding_lag_secs);
                self.semantic_queue.set(stats.semantic_queue);
                self.semantic_failed.set(stats.semantic_failed);
            }
            Err(err) => tracing::warn!(error = %err, "reading store figures for metrics"),
        }
        self.encode()
    }
}

/// The store's figures of one org, under the same names as the server-wide ones. Its
/// own registry: the shared gauges hold the server-wide figures.
async fn render_org(store: &dyn StatsStore, org_id: &str) -> String {
    let mut registry = Registry::with_prefix("memmachine");
    let episodes: Gauge = registered(
        &mut registry,
        "episodes_stored",
        "Episodes of this org in the store",
        Gauge::default(),
    );
    let queue_depth: Gauge = registered(
        &mut registry,
        "embedding_queue_depth",
        "Episodes of this org waiting for a vector",
        Gauge::default(),
    );
    let queue_lag: Gauge<f64, AtomicU64> = registered(
        &mut registry,
        "embedding_queue_lag_seconds",
        "How long the oldest episode of this org waiting for a vector has waited",
        Gauge::default(),
    );
    let semantic_queue: Gauge = registered(
        &mut registry,
        "semantic_queue_depth",
        "Messages of this org waiting for semantic ingestion",
        Gauge::default(),
    );
    let semantic_failed: Gauge = registered(
        &mut registry,
        "semantic_queue_failed",
        "Queued messages of this org whose ingestion failed",
        Gauge::default(),
    );
    match store.org_stats(org_id).await {
        Ok(stats) => {
            episodes.set(stats.episodes);
            queue_depth.set(stats.embedding_queue);
            queue_lag.set(stats.embedding_lag_secs);
            semantic_queue.set(stats.semantic_queue);
            semantic_failed.set(stats.semantic_failed);
        }
        Err(err) => tracing::warn!(error = %err, "reading an org's store figures for metrics"),
    }
    let mut text = String::new();
    if let Err(err) = prometheus_client::encoding::text::encode(&mut text, &registry) {
        tracing::warn!(error = %err, "encoding metrics");
    }
    text
}

/// The canonical upper-snake name of a status code (`NOT_FOUND`).
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}
