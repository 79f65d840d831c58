//! The census of features: per set, how many, how many cite a turn, how many citations,
//! and the duplicate rates; the features as listed, for the facts; `--dump-features`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::semantic_service_client::SemanticServiceClient;
use serde_json::json;
use tonic::transport::Channel;

use super::conversations::{ORG, Project};
use super::facts::{FeatureText, Scores};
use super::observations::Fact;
use crate::support::Result;
use crate::support::locomo::Conversation;
use crate::support::server::Server;

/// Lower case, runs of characters other than letters and digits as one space, trimmed.
pub fn normalise(text: &str) -> String {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// What one set holds.
#[derive(Debug, Default, Clone)]
pub struct SetStats {
    pub conversation: String,
    pub set_id: String,
    pub label: String,
    pub features: usize,
    pub with_citation: usize,
    pub citations: usize,
    /// Citations of episodes that are not this conversation's turns.
    pub unmapped: usize,
    pub dup_name: usize,
    pub dup_value: usize,
    pub dup_any: usize,
}

impl SetStats {
    pub fn of(
        conversation: &str,
        set_id: &str,
        label: &str,
        features: &[&pb::SemanticFeature],
        dia: &HashMap<String, String>,
    ) -> SetStats {
        let mut stats = SetStats {
            conversation: conversation.into(),
            set_id: set_id.into(),
            label: label.into(),
            features: features.len(),
            ..Default::default()
        };
        let (mut names, mut values) = (HashSet::new(), HashSet::new());
        for f in features {
            stats.with_citation += usize::from(!f.citations.is_empty());
            stats.citations += f.citations.len();
            stats.unmapped += f.citations.iter().filter(|c| !dia.contains_key(*c)).count();
            let name = names.insert((normalise(&f.tag), normalise(&f.feature_name)));
            let value = values.insert(normalise(&f.value));
            stats.dup_name += usize::from(!name);
            stats.dup_value += usize::from(!value);
            stats.dup_any += usize::from(!name || !value);
        }
        stats
    }

    pub fn rate(&self, n: usize) -> f64 {
        if self.features == 0 {
            f64::NAN
        } else {
            n as f64 / self.features as f64
        }
    }

    pub fn merge(&mut self, other: &SetStats) {
        self.features += other.features;
        self.with_citation += other.with_citation;
        self.citations += other.citations;
        self.unmapped += other.unmapped;
        self.dup_name += other.dup_name;
        self.dup_value += other.dup_value;
        self.dup_any += other.dup_any;
    }
}

/// A set's label: `user:<producer>`, `project`, `org` or its id.
pub fn set_label(entry: Option<&pb::SetEntry>, set_id: &str) -> String {
    if let Some(producer) = entry.and_then(|e| e.metadata.get("producer_id")) {
        return format!("user:{producer}");
    }
    if set_id.starts_with("mem_project_set_") {
        "project".into()
    } else if set_id.starts_with("mem_org_set_") {
        "org".into()
    } else {
        set_id.into()
    }
}

/// Every feature of the project's sets, page after page.
pub async fn list_features(
    channel: &Channel,
    project_id: &str,
    server: &Server,
) -> Result<Vec<pb::SemanticFeature>> {
    let mut client = MemoryServiceClient::new(channel.clone());
    let (mut all, mut token) = (Vec::new(), String::new());
    loop {
        let page = client
            .list_memories(pb::ListMemoriesRequest {
                org_id: ORG.into(),
                project_id: project_id.into(),
                r#type: pb::MemoryType::Semantic as i32,
                page_size: Some(1000),
                page_token: token,
                ..Default::default()
            })
            .await
            .map_err(|err| server.error("ListMemories failed", err))?
            .into_inner();
        all.extend(page.features);
        if page.next_page_token.is_empty() {
            return Ok(all);
        }
        token = page.next_page_token;
    }
}

/// A feature as listed, its citations as `dia_id`s ("?" for an episode that is not a
/// turn of the conversation).
#[derive(Debug, Clone)]
pub struct Listed {
    pub set_id: String,
    pub set: String,
    pub category: String,
    pub tag: String,
    pub feature: String,
    pub value: String,
    pub cited: Vec<String>,
}

impl Listed {
    /// What the facts are compared with (see [`super::facts`]).
    pub fn text(&self) -> FeatureText {
        FeatureText {
            set_id: self.set_id.clone(),
            text: format!("{}: {}", self.feature, self.value),
            cited: self.cited.iter().filter(|c| *c != "?").cloned().collect(),
        }
    }
}

/// Counts the project's features by set; the features as listed.
pub async fn feature_stats(
    channel: &Channel,
    conversation: &Conversation,
    project: &Project,
    server: &Server,
) -> Result<(Vec<SetStats>, Vec<Listed>)> {
    let features = list_features(channel, &project.id, server).await?;
    let sets = SemanticServiceClient::new(channel.clone())
        .list_set_ids(pb::ListSetIdsRequest {
            org_id: ORG.into(),
            project_id: project.id.clone(),
            ..Default::default()
        })
        .await
        .map_err(|err| server.error("ListSetIds failed", err))?
        .into_inner()
        .sets;
    let label = |set_id: &str| set_label(sets.iter().find(|s| s.id == set_id), set_id);
    let mut by_set: BTreeMap<String, Vec<&pb::SemanticFeature>> = BTreeMap::new();
    // Every set the project sees, even an empty one.
    for set in &sets {
        by_set.entry(set.id.clone()).or_default();
    }
    for feature in &features {
        by_set
            .entry(feature.set_id.clone())
            .or_default()
            .push(feature);
    }
    let listed = features
        .iter()
        .map(|f| Listed {
            set_id: f.set_id.clone(),
            set: label(&f.set_id),
            category: f.category.clone(),
            tag: f.tag.clone(),
            feature: f.feature_name.clone(),
            value: f.value.clone(),
            cited: f
                .citations
                .iter()
                .map(|c| project.dia.get(c).map_or("?", String::as_str).to_string())
                .collect(),
        })
        .collect();
    let stats = by_set
        .iter()
        .map(|(set_id, features)| {
            SetStats::of(
                &conversation.sample_id,
                set_id,
                &label(set_id),
                features,
                &project.dia,
            )
        })
        .collect();
    Ok((stats, listed))
}

/// `--dump-features`: a JSON line per feature, with the annotated fact most similar to
/// it, that similarity, and whether it matches a fact (the strict rule).
pub fn dump(
    path: &Path,
    conversations: &[Conversation],
    listed: &[Vec<Listed>],
    facts: &[Vec<Fact>],
    scores: Option<&[Scores]>,
) -> Result<()> {
    let mut out = BufWriter::new(File::create(path)?);
    for (c, conversation) in conversations.iter().enumerate() {
        for (j, f) in listed[c].iter().enumerate() {
            let best = scores.and_then(|s| s[c].best.get(j));
            let fact = best.and_then(|b| b.fact).map(|i| &facts[c][i]);
            let line = json!({
                "conversation": conversation.sample_id,
                "set_id": f.set_id,
                "set": f.set,
                "category": f.category,
                "tag": f.tag,
                "feature": f.feature,
                "value": f.value,
                "cited": f.cited,
                "best_fact": fact.map(|f| &f.text),
                "best_fact_speaker": fact.map(|f| &f.speaker),
                "best_fact_evidence": fact.map(|f| &f.evidence),
                "similarity": best
                    .filter(|b| b.fact.is_some())
                    .map(|b| (f64::from(b.similarity) * 1e4).round() / 1e4),
                "matches_a_fact": best.map(|b| b.matches),
            });
            writeln!(out, "{line}")?;
        }
    }
    out.flush()?;
    Ok(())
}
