//! The results as JSON (`--json`).

use std::path::Path;

use serde_json::json;

use super::cost::{self, purpose_figures};
use super::facts::{self, share};
use super::options::embedder;
use super::outcome::Run;
use super::report::Context;
use super::scoring::{List, Scores};
use crate::support::Result;
use crate::support::locomo::RecallSums;

pub fn write_json(path: &Path, cx: &Context, run: &Run) -> Result<()> {
    let args = cx.args;
    let event = |name: &str| cost::event(&run.metrics, name);
    let recall = |scores: &Scores, list: List| {
        let ks: Vec<String> = if list == List::CombinedAll {
            vec!["all".into()]
        } else {
            cx.ks.iter().map(|k| k.to_string()).collect()
        };
        let map = |sums: &RecallSums| {
            ks.iter()
                .enumerate()
                .map(|(i, k)| (k.clone(), json!(sums.mean(i))))
                .collect::<serde_json::Map<_, _>>()
        };
        json!({
            "label": list.label(&args.reranker),
            "questions": scores.overall.questions,
            "recall": map(&scores.overall),
            "categories": scores.by_category.iter()
                .map(|(c, s)| (c.to_string(), json!({"questions": s.questions, "recall": map(s)})))
                .collect::<serde_json::Map<_, _>>(),
        })
    };
    let lists: serde_json::Map<_, _> = run
        .scores
        .iter()
        .map(|(list, scores)| (list.key().to_string(), recall(scores, *list)))
        .collect();
    let purposes: serde_json::Map<_, _> = purpose_figures(&run.metrics)
        .into_iter()
        .map(|p| {
            (
                p.purpose.to_string(),
                json!({
                    "calls": {"ok": p.calls[0], "unavailable": p.calls[1], "failed": p.calls[2]},
                    "prompt_tokens": p.prompt_tokens,
                    "completion_tokens": p.completion_tokens,
                    "call_seconds_sum": p.seconds_sum,
                    "call_seconds_count": p.seconds_count,
                }),
            )
        })
        .collect();
    let events: serde_json::Map<_, _> = [
        "messages_ingested",
        "messages_failed",
        "batch_applied",
        "batch_retried",
        "batch_failed",
        "invalid_answers",
        "commands_applied",
        "consolidated",
    ]
    .iter()
    .map(|e| (e.to_string(), json!(event(e))))
    .collect();
    let sets: Vec<serde_json::Value> = run
        .sets
        .iter()
        .map(|s| {
            json!({
                "conversation": s.conversation,
                "set_id": s.set_id,
                "set": s.label,
                "features": s.features,
                "with_citation": s.with_citation,
                "citations": s.citations,
                "unmapped_citations": s.unmapped,
                "dup_name": s.dup_name,
                "dup_value": s.dup_value,
                "dup_any": s.dup_any,
            })
        })
        .collect();
    let fact_scores = |s: &facts::Scores| {
        json!({
            "facts": s.facts,
            "fact_recall": share(s.strict, s.facts),
            "fact_recall_text_only": share(s.loose, s.facts),
            "features": s.features,
            "precision": share(s.supporting, s.features),
            "precision_matching": share(s.matching, s.features),
            "semantic_dup_rate": share(s.semantic_dups, s.features),
            "facts_matched": s.strict,
            "facts_matched_text_only": s.loose,
            "features_matching": s.matching,
            "features_matching_or_citing_evidence": s.supporting,
            "semantic_dups": s.semantic_dups,
        })
    };
    let facts = match &run.facts {
        None => json!(null),
        Some(Err(why)) => json!({"not_scored": why}),
        Some(Ok(scores)) => {
            let total = facts::total(scores);
            json!({
                "threshold": round3(args.fact_threshold),
                "duplicate_threshold": round3(facts::DUPLICATE_THRESHOLD),
                "facts_before_limit": cx.selection.all_facts,
                "dropped_evidence_ids": cx.selection.dropped_fact_ids,
                "total": fact_scores(&total),
                "conversations": scores.iter()
                    .map(|s| (s.conversation.clone(), fact_scores(s)))
                    .collect::<serde_json::Map<_, _>>(),
                "curve": total.curve.iter().map(|p| json!({
                    "turns": p.turns,
                    "facts": p.facts,
                    "matched": p.matched,
                    "fact_recall": share(p.matched, p.facts),
                })).collect::<Vec<_>>(),
            })
        }
    };
    let q = run.questions.max(1) as f64;
    let out = json!({
        "model": cx.model,
        "endpoint": cx.endpoint,
        "scripted": args.scripted,
        "conversations": cx.selection.conversations.iter().map(|c| &c.sample_id).collect::<Vec<_>>(),
        "turns_limit": cx.selection.turns_limit,
        "turns": run.turns,
        "turns_before_limit": cx.selection.all_turns,
        "questions": run.questions,
        "questions_before_limit": cx.selection.all_questions,
        "embedder": embedder(args),
        "reranker": args.reranker,
        "top_k": args.top_k,
        "trigger_messages": args.trigger_messages,
        "trigger_age": args.trigger_age,
        "project_category": args.project_category,
        "summaries": args.summaries,
        "server_args": args.server_args,
        "wall_seconds": run.wall.as_secs_f64(),
        "add_seconds": run.ingest_wall.as_secs_f64(),
        "distillation": {
            "seconds": run.drain.wall.as_secs_f64(),
            "complete": run.drain.complete,
            "queued": run.queued,
            "ingested": run.drain.ingested,
            "failed": run.drain.failed,
            "left_in_queue": run.drain.depth,
        },
        "events": events,
        "model_calls": purposes,
        "recall": lists,
        "features_per_question": run.features_returned as f64 / q,
        "questions_without_features": run.no_features,
        "semantic_turns_per_question": run.semantic_turns_at_top_k as f64 / q,
        "combined_turns_per_question": run.combined_all_turns as f64 / q,
        "unmapped_citations_in_searches": run.unmapped_citations,
        "sets": sets,
        "facts": facts,
        "reused_data_dir": args.reuse,
        "last_server_warning": run.last_warning,
    });
    std::fs::write(path, serde_json::to_string_pretty(&out)?)?;
    Ok(())
}

/// An `f32` setting as the decimal it was written as (not 0.8999999761581421).
fn round3(x: f32) -> f64 {
    (f64::from(x) * 1000.0).round() / 1000.0
}
