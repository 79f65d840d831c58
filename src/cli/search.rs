//! `memmachine search`: episodic hits and semantic features for a query.

use clap::Args;
use serde_json::json;

use super::connect::Client;
use super::output::{Table, episode_json, feature_json, feature_table, out, print_json, time};
use super::{CliError, ClientArgs, MemoryTypeArg, key_value};
use memmachine_proto::v2 as pb;

/// Selects semantic sets by their metadata: `--user U` is `--set-meta producer_id=U`.
#[derive(Args, Debug, Clone, Default)]
pub struct SetSelection {
    /// The user whose profile (user set) to reach
    #[arg(long)]
    pub user: Option<String>,
    /// Set metadata KEY=VALUE selecting sets (repeatable)
    #[arg(long, value_name = "KEY=VALUE", value_parser = key_value)]
    pub set_meta: Vec<(String, String)>,
}

impl SetSelection {
    pub fn metadata(&self) -> std::collections::HashMap<String, String> {
        let mut metadata: std::collections::HashMap<_, _> = self.set_meta.iter().cloned().collect();
        if let Some(user) = &self.user {
            metadata.insert(
                memmachine_domain::semantic::sets::PRODUCER_TAG.to_string(),
                user.clone(),
            );
        }
        metadata
    }
}

#[derive(Args, Debug)]
pub struct SearchArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// What to look for (the words are joined)
    #[arg(required = true, num_args = 1..)]
    pub query: Vec<String>,
    /// How many results (1 to 1,000) [default: 10]
    #[arg(long)]
    pub top_k: Option<i32>,
    /// A filter expression, e.g. "producer_id = 'alice' AND m.topic = 'pets'"
    #[arg(long, default_value = "")]
    pub filter: String,
    /// Memory types to search [default: every enabled type]
    #[arg(long, value_delimiter = ',')]
    pub types: Vec<MemoryTypeArg>,
    /// Neighbouring episodes to add around each hit (0 to 100)
    #[arg(long, default_value_t = 0)]
    pub expand_context: i32,
    /// Only results scoring at least this much
    #[arg(long)]
    pub score_threshold: Option<f64>,
    /// Also rank episodes and features together (the episodes a matching feature cites
    /// count as evidence), shown instead of the separate lists
    #[arg(long)]
    pub rank_together: bool,
    /// With --rank-together: the features' weight against the episodes' (0 to 10)
    /// [default: the server's]
    #[arg(long, requires = "rank_together")]
    pub semantic_weight: Option<f64>,
    /// Show what each episodic hit's score is made of (lexical, dense, context, session,
    /// time, participant)
    #[arg(long)]
    pub explain: bool,
    #[command(flatten)]
    pub sets: SetSelection,
}

/// A score's parts as JSON (absent: null).
fn parts_json(p: Option<&pb::ScoreParts>) -> serde_json::Value {
    p.map_or(serde_json::Value::Null, |p| {
        json!({
            "lexical": p.lexical,
            "dense": p.dense,
            "context": p.context,
            "session": p.session,
            "time": p.time,
            "participant": p.participant,
        })
    })
}

/// A score's parts in one cell: the parts that are not zero.
fn parts_cell(p: Option<&pb::ScoreParts>) -> String {
    let Some(p) = p else {
        return String::new();
    };
    [
        ("lexical", p.lexical),
        ("dense", p.dense),
        ("context", p.context),
        ("session", p.session),
        ("time", p.time),
        ("participant", p.participant),
    ]
    .into_iter()
    .filter(|(_, v)| *v != 0.0)
    .map(|(name, v)| format!("{name} {v:.3}"))
    .collect::<Vec<_>>()
    .join(", ")
}

pub async fn run(args: SearchArgs) -> Result<(), CliError> {
    let client = Client::connect(&args.client).await?;
    let answer = client
        .memory()
        .search_memories(client.request(pb::SearchMemoriesRequest {
            as_of: None,
            org_id: client.org.clone(),
            project_id: client.project.clone(),
            query: args.query.join(" "),
            top_k: args.top_k,
            filter: args.filter.clone(),
            types: MemoryTypeArg::wire(&args.types),
            expand_context: args.expand_context,
            score_threshold: args.score_threshold,
            set_metadata: args.sets.metadata(),
            rank_together: args.rank_together,
            semantic_weight: args.semantic_weight,
            explain: args.explain,
        }))
        .await?
        .into_inner();
    let episodic = answer.episodic_memory.unwrap_or_default();
    if args.client.json {
        return print_json(&json!({
            "episodic_memory": {
                "long_term_memory": episodic.long_term_memory.iter().map(|s| {
                    let mut hit = json!({
                        "score": s.score,
                        "episode": s.episode.as_ref().map(episode_json),
                    });
                    if s.score_parts.is_some() {
                        hit["score_parts"] = parts_json(s.score_parts.as_ref());
                    }
                    hit
                }).collect::<Vec<_>>(),
                "short_term_memory": episodic.short_term_memory.iter().map(episode_json).collect::<Vec<_>>(),
                "episode_summary": episodic.episode_summary,
            },
            "semantic_memory": answer.semantic_memory.iter().map(feature_json).collect::<Vec<_>>(),
            "ranked": answer.ranked.iter().map(ranked_json).collect::<Vec<_>>(),
        }));
    }
    if args.rank_together {
        return ranked_table(&answer.ranked).print();
    }
    let mut columns = vec!["SCORE", "UID", "PRODUCER", "CREATED", "CONTENT"];
    if args.explain {
        columns.insert(1, "PARTS");
    }
    let mut table = Table::new(&columns);
    for hit in &episodic.long_term_memory {
        let e = hit.episode.clone().unwrap_or_default();
        let mut row = vec![
            format!("{:.4}", hit.score),
            e.uid,
            e.producer_id,
            time(&e.created_at),
            e.content,
        ];
        if args.explain {
            row.insert(1, parts_cell(hit.score_parts.as_ref()));
        }
        table.row(row);
    }
    table.print()?;
    if !answer.semantic_memory.is_empty() {
        out("\nsemantic memory:")?;
        feature_table(&answer.semantic_memory, true).print()?;
    }
    for summary in episodic.episode_summary.iter().filter(|s| !s.is_empty()) {
        out(format!("\nsummary: {summary}"))?;
    }
    Ok(())
}

fn source(r: &pb::RankedMemory) -> &'static str {
    match pb::RankedSource::try_from(r.source) {
        Ok(pb::RankedSource::Episodic) => "episodic",
        Ok(pb::RankedSource::Semantic) => "semantic",
        Ok(pb::RankedSource::Both) => "both",
        _ => "",
    }
}

fn ranked_json(r: &pb::RankedMemory) -> serde_json::Value {
    use pb::ranked_memory::Item;
    let mut out = json!({
        "source": source(r),
        "score": r.score,
        "episodic": r.episodic,
        "semantic": r.semantic,
        "citing_feature_ids": r.citing_feature_ids,
    });
    match &r.item {
        Some(Item::Episode(hit)) => {
            out["episode"] = json!({
                "score": hit.score,
                "episode": hit.episode.as_ref().map(episode_json),
            });
        }
        Some(Item::Feature(f)) => out["feature"] = feature_json(f),
        None => {}
    }
    out
}

/// Episodes and features in one table, best first.
fn ranked_table(ranked: &[pb::RankedMemory]) -> Table {
    use pb::ranked_memory::Item;
    let mut table = Table::new(&["SCORE", "SOURCE", "KIND", "ID", "CONTENT"]);
    for r in ranked {
        let (kind, id, content) = match &r.item {
            Some(Item::Episode(hit)) => {
                let e = hit.episode.clone().unwrap_or_default();
                ("episode", e.uid, e.content)
            }
            Some(Item::Feature(f)) => (
                "feature",
                f.id.clone(),
                format!("{}: {}", f.feature_name, f.value),
            ),
            None => ("", String::new(), String::new()),
        };
        table.row(vec![
            format!("{:.4}", r.score),
            source(r).into(),
            kind.into(),
            id,
            content,
        ]);
    }
    table
}
