//! A search request checked and parsed once, before anything runs: every later step
//! (both memory types, the ranking, the recent window) reads the plan and never the
//! request's text again.

use crate::error::{Result, Violations};
use crate::limits::Limits;
use crate::limits::MAX_SEMANTIC_WEIGHT;
use crate::model::filter::{self, Expr};

/// Largest `expand_context` accepted.
pub const MAX_EXPAND_CONTEXT: i32 = 100;

/// A search as a transport received it.
#[derive(Debug, Clone, Default)]
pub struct SearchInput {
    pub query: String,
    pub top_k: Option<i32>,
    pub filter: String,
    pub expand_context: i32,
    pub score_threshold: Option<f64>,
    /// A narrowing the transport built (MCP's user, a v1 session), ANDed onto the
    /// parsed `filter`; it applies to episodes only.
    pub scope: Option<Expr>,
    /// A blank query ranks nothing (the recent window still answers) instead of being
    /// refused: MemMachine's REST answers it so; gRPC, MCP and v1 refuse it.
    pub blank_query_ranks_nothing: bool,
    /// Micros: the semantic half ranks the features as they were then.
    pub as_of: Option<i64>,
    /// Also rank episodes and features together (`rank_together.rs`).
    pub rank_together: bool,
    /// The features' weight in that ranking (`None`: the default).
    pub semantic_weight: Option<f64>,
    /// Each long-term episode carries the parts of its score (`ScoredEpisode::parts`).
    pub explain: bool,
}

impl SearchInput {
    /// Whether this query is blank and allowed to be.
    pub fn blank_allowed(&self) -> bool {
        self.blank_query_ranks_nothing && self.query.trim().is_empty()
    }

    /// The features' weight when episodes and features are ranked together (`None`:
    /// they are not), checked; `default` when the input names none.
    pub fn together(&self, default: f64) -> Result<Option<f64>> {
        match self.semantic_weight {
            Some(w) if !(0.0..=MAX_SEMANTIC_WEIGHT).contains(&w) => {
                Err(crate::error::Error::invalid(
                    "semantic_weight",
                    format!("must be between 0 and {MAX_SEMANTIC_WEIGHT}"),
                ))
            }
            weight => Ok(self.rank_together.then(|| weight.unwrap_or(default))),
        }
    }
}

/// A validated search.
#[derive(Debug, Clone)]
pub struct SearchPlan {
    pub query: String,
    /// A blank query that ranks nothing (the recent window still answers).
    pub blank_allowed: bool,
    pub top_k: usize,
    /// The episodes' filter, the transport's scope ANDed on.
    pub filter: Option<Expr>,
    /// The same text read as a filter over features' fields, when the semantic half
    /// runs and the text names only those (else the features are not filtered).
    pub feature_filter: Option<Expr>,
    pub expand_context: usize,
    pub score_threshold: Option<f64>,
    /// Micros: the semantic half ranks the features as they were then.
    pub as_of: Option<i64>,
    /// With a ranking together: the features' weight in it.
    pub together: Option<f64>,
    /// Each long-term episode carries the parts of its score.
    pub explain: bool,
}

impl SearchPlan {
    /// Checks `input` against `limits` (every violation named at once); `features`:
    /// whether the semantic half will filter by it.
    pub fn new(limits: &Limits, input: SearchInput, features: bool) -> Result<SearchPlan> {
        let blank_allowed = input.blank_allowed();
        let mut violations = Violations::default();
        if !blank_allowed {
            violations.check(limits.query("query", &input.query));
        }
        let top_k = violations.check(limits.page_size("top_k", input.top_k, 10));
        let filter =
            violations.check(filter::parse(&input.filter).map_err(|err| err.into_error("filter")));
        if !(0..=MAX_EXPAND_CONTEXT).contains(&input.expand_context) {
            violations.add(
                "expand_context",
                format!("must be between 0 and {MAX_EXPAND_CONTEXT}"),
            );
        }
        if input.score_threshold.is_some_and(f64::is_nan) {
            violations.add("score_threshold", "must be a number");
        }
        let together = violations.check(input.together(limits.rank_semantic_weight));
        violations.into_result()?;
        let feature_filter = if features {
            filter::parse_features(&input.filter).ok().flatten()
        } else {
            None
        };
        Ok(SearchPlan {
            query: input.query,
            blank_allowed,
            top_k: top_k.expect("validated"),
            // The transport's scope is ANDed onto the parsed filter, never pasted into it.
            filter: filter::confine(filter.expect("validated"), input.scope),
            feature_filter,
            expand_context: input.expand_context as usize,
            score_threshold: input.score_threshold,
            as_of: input.as_of,
            together: together.flatten(),
            explain: input.explain,
        })
    }
}
