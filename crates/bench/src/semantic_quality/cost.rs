//! What distillation cost, from the server's Prometheus metrics: model calls, tokens and
//! seconds by purpose, and the semantic events.

use crate::support::metrics::Exposition;

/// The purposes the server labels model calls with.
pub const PURPOSES: [&str; 3] = ["extraction", "consolidation", "summary"];

/// Outcomes of a model call.
pub const OUTCOMES: [&str; 3] = ["ok", "unavailable", "failed"];

/// The semantic events counter, labelled `event`.
pub const EVENTS: &str = "memmachine_semantic_events_total";

/// Per-purpose model figures.
pub struct PurposeFigures {
    pub purpose: &'static str,
    pub calls: [f64; 3],
    pub prompt_tokens: f64,
    pub completion_tokens: f64,
    pub seconds_sum: f64,
    pub seconds_count: f64,
}

pub fn purpose_figures(m: &Exposition) -> Vec<PurposeFigures> {
    PURPOSES
        .iter()
        .map(|&purpose| PurposeFigures {
            purpose,
            calls: OUTCOMES.map(|outcome| {
                m.sum(
                    "memmachine_llm_calls_total",
                    &[("purpose", purpose), ("outcome", outcome)],
                )
            }),
            prompt_tokens: m.sum(
                "memmachine_llm_prompt_tokens_total",
                &[("purpose", purpose)],
            ),
            completion_tokens: m.sum(
                "memmachine_llm_completion_tokens_total",
                &[("purpose", purpose)],
            ),
            seconds_sum: m.sum("memmachine_llm_call_seconds_sum", &[("purpose", purpose)]),
            seconds_count: m.sum("memmachine_llm_call_seconds_count", &[("purpose", purpose)]),
        })
        .collect()
}

/// The count of semantic event `name`.
pub fn event(metrics: &Exposition, name: &str) -> f64 {
    metrics.sum(EVENTS, &[("event", name)])
}
