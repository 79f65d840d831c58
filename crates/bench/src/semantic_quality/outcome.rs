//! What one run measured: the counts and scores that the report prints, filled in by
//! the run and the questions.

use std::collections::BTreeMap;
use std::time::Duration;

use super::facts;
use super::features::{Listed, SetStats};
use super::scoring::{List, Scores};
use super::wait::Drain;
use crate::support::metrics::Exposition;
use crate::support::server::EmbedWait;

#[derive(Default)]
pub struct Run {
    pub turns: usize,
    /// Messages queued for semantic ingestion (one per set a turn lands in).
    pub queued: usize,
    pub ingest_wall: Duration,
    pub drain: Drain,
    pub embed_wait: Option<EmbedWait>,
    pub features_settled: Option<Duration>,
    pub scores: BTreeMap<List, Scores>,
    pub questions: usize,
    /// Sums over questions, for means.
    pub features_returned: usize,
    pub no_features: usize,
    pub semantic_turns_at_top_k: usize,
    pub combined_all_turns: usize,
    pub unmapped_citations: usize,
    pub sets: Vec<SetStats>,
    /// Each conversation's features as listed.
    pub listed: Vec<Vec<Listed>>,
    /// The features against the annotated facts, per conversation (`Err`: why they
    /// could not be scored, e.g. no local model).
    pub facts: Option<std::result::Result<Vec<facts::Scores>, String>>,
    pub metrics: Exposition,
    /// The server's last warning, when distillation made nothing.
    pub last_warning: Option<String>,
    pub wall: Duration,
}
