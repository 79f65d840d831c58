//! The results as markdown: recall tables, distillation, model calls, features.

use super::conversations::Selection;
use super::cost::{self, purpose_figures};
use super::facts::{self, share};
use super::features::SetStats;
use super::options::{Args, embedder};
use super::outcome::Run;
use super::scoring::List;
use crate::support::locomo::CATEGORIES;

/// The cut-off of the per-category table.
pub const CATEGORY_K: usize = 10;

pub struct Context<'a> {
    pub args: &'a Args,
    pub selection: &'a Selection,
    pub ks: &'a [usize],
    pub model: String,
    pub endpoint: String,
}

pub fn fmt3(x: f64) -> String {
    if x.is_nan() {
        "n/a".into()
    } else {
        format!("{x:.3}")
    }
}

pub fn total_sets(run: &Run) -> SetStats {
    let mut total = SetStats::default();
    for s in &run.sets {
        total.merge(s);
    }
    total
}

pub fn print_report(cx: &Context, run: &Run) {
    let args = cx.args;
    let event = |name: &str| cost::event(&run.metrics, name);
    let per100 = |x: f64| x * 100.0 / run.turns.max(1) as f64;
    let q = run.questions.max(1) as f64;
    let total = total_sets(run);
    let batches = event("batch_applied");
    let per_batch = |n: f64| {
        if n > 0.0 {
            format!("{:.1}", run.drain.wall.as_secs_f64() / n)
        } else {
            "n/a".into()
        }
    };
    println!();
    println!(
        "## memmachine-bench semantic-quality: model `{}` at {} ({})",
        cx.model,
        cx.endpoint,
        if args.scripted {
            "scripted: synthetic answers, recall meaningless"
        } else if args.llm_api_key.as_deref().is_some_and(|k| !k.is_empty()) {
            "API key set, not shown"
        } else {
            "no API key"
        }
    );
    println!();
    println!(
        "LoCoMo {} ({}); embedder {}, ranking {}, top_k {}; batches of {} messages (or after \
         {} s); project category: {}; summaries: {}; wall time {:.0} s (adds {:.1} s, \
         distillation {:.0} s{}).",
        cx.selection.ids(),
        cx.selection.scope(),
        embedder(args),
        args.reranker,
        args.top_k,
        args.trigger_messages,
        args.trigger_age,
        if args.project_category {
            "events"
        } else {
            "none"
        },
        if args.summaries { "on" } else { "off" },
        run.wall.as_secs_f64(),
        run.ingest_wall.as_secs_f64(),
        run.drain.wall.as_secs_f64(),
        if run.drain.complete {
            String::new()
        } else {
            format!(
                ", INCOMPLETE: stopped by --max-wait with {:.0} messages still queued",
                run.drain.depth
            )
        }
    );
    if let Some(dir) = &args.reuse {
        println!();
        println!(
            "Reused the data directory {} (--reuse): nothing was added or distilled in this run; \
             the model calls and events below are this run's (none).",
            dir.display()
        );
    }
    println!();
    let mut header = String::from("| ranked list |");
    let mut rule = String::from("|---|");
    for k in cx.ks {
        header.push_str(&format!(" R@{k} |"));
        rule.push_str("---:|");
    }
    println!("{header}");
    println!("{rule}");
    for list in List::ALL {
        let Some(scores) = run.scores.get(&list) else {
            continue;
        };
        let mut row = format!("| {} |", list.label(&args.reranker));
        if list == List::CombinedAll {
            let all = fmt3(scores.overall.mean(0));
            for _ in cx.ks {
                row.push_str(&format!(" {all} |"));
            }
        } else {
            for i in 0..cx.ks.len() {
                row.push_str(&format!(" {} |", fmt3(scores.overall.mean(i))));
            }
        }
        println!("{row}");
    }
    println!();
    println!(
        "SearchFeatures returned {:.1} features per question ({} questions with none), citing \
         {:.1} distinct turns; the combined answer held {:.1} distinct turns; {} citations named \
         no turn of the conversation.",
        run.features_returned as f64 / q,
        run.no_features,
        run.semantic_turns_at_top_k as f64 / q,
        run.combined_all_turns as f64 / q,
        run.unmapped_citations
    );
    if let Some(i) = cx.ks.iter().position(|&k| k == CATEGORY_K) {
        println!();
        let mut header = format!("| R@{CATEGORY_K} by category |");
        let mut rule = String::from("|---|");
        let counts = run
            .scores
            .get(&List::Episodic)
            .map(|s| s.by_category.clone())
            .unwrap_or_default();
        for c in CATEGORIES {
            let n = counts.get(&c).map_or(0, |s| s.questions);
            header.push_str(&format!(" {c} {} ({n}) |", category_name(c)));
            rule.push_str("---:|");
        }
        println!("{header}");
        println!("{rule}");
        for list in [
            List::Episodic,
            List::SemanticTurns,
            List::SemanticFeatures,
            List::CombinedInterleaved,
        ] {
            let Some(scores) = run.scores.get(&list) else {
                continue;
            };
            let mut row = format!("| {} |", list.key());
            for c in CATEGORIES {
                let sums = scores.by_category.get(&c).cloned().unwrap_or_default();
                row.push_str(&format!(" {} |", fmt3(sums.mean(i))));
            }
            println!("{row}");
        }
    }

    println!();
    println!(
        "Distillation: {:.0} messages queued, {:.0} ingested, {:.0} failed; {:.0} batches \
         applied ({} s of wall time per batch applied, {} per batch applied or failed), {:.0} \
         retried, {:.0} failed; {:.0} invalid answers; {:.0} commands applied; {:.0} \
         consolidations.",
        run.queued,
        event("messages_ingested"),
        event("messages_failed"),
        batches,
        per_batch(batches),
        per_batch(batches + event("batch_failed")),
        event("batch_retried"),
        event("batch_failed"),
        event("invalid_answers"),
        event("commands_applied"),
        event("consolidated"),
    );
    println!();
    println!(
        "| model calls | ok / unavailable / failed | calls per 100 turns | prompt tokens per \
         100 turns | completion tokens per 100 turns | mean s per call |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for p in purpose_figures(&run.metrics) {
        let calls: f64 = p.calls.iter().sum();
        if calls == 0.0 && p.purpose != "extraction" {
            continue;
        }
        println!(
            "| {} | {:.0} / {:.0} / {:.0} | {:.2} | {:.0} | {:.0} | {} |",
            p.purpose,
            p.calls[0],
            p.calls[1],
            p.calls[2],
            per100(calls),
            per100(p.prompt_tokens),
            per100(p.completion_tokens),
            if p.seconds_count > 0.0 {
                format!("{:.2}", p.seconds_sum / p.seconds_count)
            } else {
                "n/a".into()
            }
        );
    }
    println!();
    println!(
        "| features | set | count | citing ≥1 turn | turns cited per feature | dup name | dup \
         value | dup any |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for s in run.sets.iter().chain(std::iter::once(&total)) {
        let (conversation, label) = if std::ptr::eq(s, &total) {
            ("all", "all sets")
        } else {
            (s.conversation.as_str(), s.label.as_str())
        };
        println!(
            "| {conversation} | {label} | {} | {} | {} | {} | {} | {} |",
            s.features,
            fmt3(s.rate(s.with_citation)),
            if s.features == 0 {
                "n/a".into()
            } else {
                format!("{:.1}", s.citations as f64 / s.features as f64)
            },
            fmt3(s.rate(s.dup_name)),
            fmt3(s.rate(s.dup_value)),
            fmt3(s.rate(s.dup_any)),
        );
    }
    if total.features == 0 {
        println!();
        println!(
            "NO FEATURES were distilled: {:.0} model calls ok, {:.0} unavailable, {:.0} failed; \
             {:.0} batches retried, {:.0} failed, {:.0} invalid answers (see the server's \
             warnings above).",
            run.metrics
                .sum("memmachine_llm_calls_total", &[("outcome", "ok")]),
            run.metrics
                .sum("memmachine_llm_calls_total", &[("outcome", "unavailable")]),
            run.metrics
                .sum("memmachine_llm_calls_total", &[("outcome", "failed")]),
            event("batch_retried"),
            event("batch_failed"),
            event("invalid_answers"),
        );
        if let Some(line) = &run.last_warning {
            println!();
            println!("The server's last warning: {line}");
        }
    }
    print_facts(cx, run);
    if let Some(wait) = run.embed_wait {
        println!();
        println!(
            "Vectors: {} of {} turns reported embedded{}; features' vectors {}.",
            wait.embedded,
            run.turns,
            if wait.complete { "" } else { " (gave up)" },
            match run.features_settled {
                Some(d) => format!("settled {:.1} s after that", d.as_secs_f64()),
                None => "still changing after 120 s".into(),
            }
        );
    }
}

/// The features against the annotated facts, and fact recall over prefixes of the turns.
fn print_facts(cx: &Context, run: &Run) {
    println!();
    let scores = match &run.facts {
        None => return,
        Some(Err(why)) => {
            println!("Annotated facts: not scored: {why}.");
            return;
        }
        Some(Ok(scores)) => scores,
    };
    let total = facts::total(scores);
    println!(
        "Annotated facts (LoCoMo `observation`; {} of {} facts counted, those all of whose \
         evidence lies within the turns used): a feature matches a fact when it cites one of the \
         fact's turns and the cosine (all-MiniLM-L6-v2) of the fact and its \"name: value\" is at \
         least {:.2} (--fact-threshold); semantic duplicates: a cosine of at least {:.2} with an \
         earlier feature of the set.",
        cx.selection.facts(),
        cx.selection.all_facts,
        cx.args.fact_threshold,
        facts::DUPLICATE_THRESHOLD
    );
    println!();
    println!(
        "| facts | facts counted | fact recall (cited turn and text) | fact recall (text only, any \
         turn) | features | precision (matches a fact or cites an evidence turn) | precision \
         (matches a fact) | semantic dup |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for s in scores.iter().chain(std::iter::once(&total)) {
        let name = if std::ptr::eq(s, &total) {
            "all"
        } else {
            s.conversation.as_str()
        };
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} |",
            s.facts,
            fmt3(share(s.strict, s.facts)),
            fmt3(share(s.loose, s.facts)),
            s.features,
            fmt3(share(s.supporting, s.features)),
            fmt3(share(s.matching, s.features)),
            fmt3(share(s.semantic_dups, s.features)),
        );
    }
    println!();
    println!(
        "| first N turns of each conversation | facts within them | matched by features citing \
         only those turns | fact recall |"
    );
    println!("|---:|---:|---:|---:|");
    for p in &total.curve {
        println!(
            "| {} | {} | {} | {} |",
            p.turns,
            p.facts,
            p.matched,
            fmt3(share(p.matched, p.facts))
        );
    }
}

pub fn category_name(category: u32) -> &'static str {
    match category {
        1 => "multi-hop",
        2 => "temporal",
        3 => "open-domain",
        4 => "single-hop",
        _ => "other",
    }
}
