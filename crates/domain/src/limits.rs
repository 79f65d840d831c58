//! Request limits of the contract (configurable).

/// The features' weight against the episodes' in a search ranking both together
/// (`rank_together.rs`) when neither the request nor `--rank-semantic-weight` names one.
/// The largest that kept R@10 at the episodic list's with every model measured
/// (BENCHMARKS.md, issue 45): features then reorder near ties and add nothing else.
pub const DEFAULT_SEMANTIC_WEIGHT: f64 = 0.03;
/// Largest such weight.
pub const MAX_SEMANTIC_WEIGHT: f64 = 10.0;

/// Also the flags, environment variables and config file keys that set them.
#[derive(Debug, Clone, Copy, clap::Args, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    /// Most messages in one AddMemories
    #[arg(long, env = "MEMMACHINE_MAX_MESSAGES_PER_ADD", default_value_t = 1000)]
    pub max_messages_per_add: usize,
    /// Most bytes of one message's content
    #[arg(long, env = "MEMMACHINE_MAX_CONTENT_BYTES", default_value_t = 256 * 1024)]
    pub max_content_bytes: usize,
    /// Largest top_k and page_size
    #[arg(long, env = "MEMMACHINE_MAX_PAGE_SIZE", default_value_t = 1000)]
    pub max_page_size: usize,
    /// How many recent episodes short_term_memory returns
    #[arg(long, env = "MEMMACHINE_SHORT_TERM_WINDOW", default_value_t = 20)]
    pub short_term_window: usize,
    /// Most characters the short-term window holds (the newest episode is always
    /// returned); 0 is no bound
    #[arg(long, env = "MEMMACHINE_SHORT_TERM_MAX_CHARS", default_value_t = 0)]
    pub short_term_max_chars: usize,
    /// Most distinct words in a search query
    #[arg(long, env = "MEMMACHINE_MAX_QUERY_WORDS", default_value_t = 1024)]
    pub max_query_words: usize,
    /// Most bytes of episodes in one ListMemories page (the first is always sent), so
    /// that a page fits the 4 MiB a stock gRPC client reads
    #[arg(long, env = "MEMMACHINE_MAX_PAGE_BYTES", default_value_t = 2 * 1024 * 1024)]
    pub max_page_bytes: usize,
    /// Seconds a message's idempotency key is remembered: a message with a key the
    /// project stored this recently is not stored again (its original uid answers)
    #[arg(
        long,
        env = "MEMMACHINE_IDEMPOTENCY_WINDOW",
        default_value_t = 86_400.0
    )]
    pub idempotency_window: f64,
    /// The features' weight against the episodes' when a search ranks them together
    /// and names none (0 to 10; see `rank_together.rs`)
    #[arg(
        long,
        env = "MEMMACHINE_RANK_SEMANTIC_WEIGHT",
        default_value_t = DEFAULT_SEMANTIC_WEIGHT
    )]
    pub rank_semantic_weight: f64,
}

impl Limits {
    /// How long an idempotency key is remembered, in microseconds.
    pub fn idempotency_window_micros(&self) -> i64 {
        (self.idempotency_window.max(0.0) * 1e6).min(i64::MAX as f64) as i64
    }

    /// Checks the limits that must be at least 1.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            self.max_messages_per_add,
            self.max_content_bytes,
            self.max_page_size,
            self.max_query_words,
            self.max_page_bytes,
        ];
        if positive.contains(&0) {
            return Err("limits must be at least 1".into());
        }
        crate::flags::seconds(self.idempotency_window, "idempotency-window")?;
        let weight = MAX_SEMANTIC_WEIGHT;
        if !(0.0..=weight).contains(&self.rank_semantic_weight) {
            return Err(format!(
                "--rank-semantic-weight must be between 0 and {weight}"
            ));
        }
        Ok(())
    }

    /// Validates a search query: not blank, and at most `max_query_words` distinct words
    /// (a query of very many costs time for nothing: only 64 terms rank).
    pub fn query(&self, field: &str, query: &str) -> crate::error::Result<()> {
        if query.trim().is_empty() {
            return Err(crate::error::Error::invalid(field, "must not be empty"));
        }
        if crate::retrieval::tokenize::more_distinct_words_than(query, self.max_query_words) {
            return Err(crate::error::Error::invalid(
                field,
                format!(
                    "holds more than {} distinct words (--max-query-words)",
                    self.max_query_words
                ),
            ));
        }
        Ok(())
    }

    /// Validates how many ids (or items) one call names: 1 to `max_page_size`, checked
    /// before any of them is read.
    pub fn ids(&self, field: &str, count: usize) -> crate::error::Result<()> {
        if count == 0 {
            return Err(crate::error::Error::invalid(
                field,
                "must name at least one",
            ));
        }
        if count > self.max_page_size {
            return Err(crate::error::Error::invalid(
                field,
                format!(
                    "names {count}, more than the {} one call may (--max-page-size)",
                    self.max_page_size
                ),
            ));
        }
        Ok(())
    }

    /// Validates an optional page size or `top_k` (1 to `max_page_size`).
    pub fn page_size(
        &self,
        field: &str,
        value: Option<i32>,
        default: usize,
    ) -> crate::error::Result<usize> {
        match value {
            None => Ok(default.min(self.max_page_size)),
            Some(n) if n >= 1 && (n as usize) <= self.max_page_size => Ok(n as usize),
            Some(n) => Err(crate::error::Error::invalid(
                field,
                format!("must be between 1 and {}, got {n}", self.max_page_size),
            )),
        }
    }
}
