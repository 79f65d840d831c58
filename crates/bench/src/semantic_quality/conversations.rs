//! The conversations: which are used (and how many of their turns), one project each,
//! and their turns added.

use std::collections::{HashMap, HashSet};

use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use memmachine_proto::v2::semantic_service_client::SemanticServiceClient;
use tonic::transport::Channel;

use super::observations::{self, Fact};
use super::options::Args;
use crate::support::Result;
use crate::support::locomo::{self, Conversation};
use crate::support::server::Server;

pub const ORG: &str = "locomo";

/// The project set's category with `--project-category`.
pub const PROJECT_CATEGORY: &str = "events";

/// Its prompt.
pub const PROJECT_CATEGORY_PROMPT: &str = "Extract what happened in the conversation \
    and when: events, activities, plans and decisions of either speaker, with the people, \
    places and dates involved (use the message timestamps to date them). One event per \
    feature, with a short feature name (\"charity race\", \"trip to Paris\") and a concise \
    value saying who, what and when.";

pub struct Project {
    pub id: String,
    /// Episode uid → `dia_id`.
    pub dia: HashMap<String, String>,
}

/// The conversations used, cut to `--turns`.
pub struct Selection {
    /// The first `--turns` turns of each, and the questions whose evidence lies there.
    pub conversations: Vec<Conversation>,
    /// Evidence ids of these conversations naming no turn (dropped).
    pub dropped: Vec<String>,
    /// The conversations' turns before the cut.
    pub all_turns: usize,
    /// Their questions (categories 1-4, with evidence) before the cut.
    pub all_questions: usize,
    /// `--turns`.
    pub turns_limit: Option<usize>,
    /// Each conversation's annotated facts, those all of whose evidence lies within the
    /// turns used.
    pub facts: Vec<Vec<Fact>>,
    /// Their facts before the cut.
    pub all_facts: usize,
    /// Evidence ids of their facts naming no turn (dropped).
    pub dropped_fact_ids: Vec<String>,
}

impl Selection {
    pub fn turns(&self) -> usize {
        self.conversations.iter().map(|c| c.turns.len()).sum()
    }

    pub fn questions(&self) -> usize {
        self.conversations.iter().map(|c| c.questions.len()).sum()
    }

    pub fn facts(&self) -> usize {
        self.facts.iter().map(Vec::len).sum()
    }

    /// The sample ids, comma-separated.
    pub fn ids(&self) -> String {
        self.conversations
            .iter()
            .map(|c| c.sample_id.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// How many conversations, turns and questions are used (and of how many).
    pub fn scope(&self) -> String {
        let n = self.conversations.len();
        match self.turns_limit {
            None => format!(
                "{n} conversation(s), {} turns, {} questions of categories 1-4",
                self.turns(),
                self.questions()
            ),
            Some(limit) => format!(
                "{n} conversation(s), the first {limit} turns of each: {} of {} turns; {} of {} \
                 questions of categories 1-4 (those all of whose evidence lies within them)",
                self.turns(),
                self.all_turns,
                self.questions(),
                self.all_questions
            ),
        }
    }
}

/// The conversations asked for, cut to `--turns`, and the dropped evidence ids among them.
pub fn select(args: &Args) -> Result<Selection> {
    if args.turns == Some(0) {
        return Err("--turns must be at least 1".into());
    }
    let format = locomo::ContentFormat::default();
    let limit = if args.conversation_ids.is_empty() {
        Some(args.skip + args.conversations)
    } else {
        None
    };
    let (all, stats) = locomo::load(&args.locomo, limit, format)?;
    let mut chosen: Vec<Conversation> = if args.conversation_ids.is_empty() {
        all.into_iter().skip(args.skip).collect()
    } else {
        let mut chosen = Vec::new();
        let mut all: Vec<Option<Conversation>> = all.into_iter().map(Some).collect();
        for id in &args.conversation_ids {
            let found = all
                .iter_mut()
                .find(|c| c.as_ref().is_some_and(|c| &c.sample_id == id))
                .and_then(Option::take)
                .ok_or_else(|| format!("no conversation {id:?} in {}", args.locomo.display()))?;
            chosen.push(found);
        }
        chosen
    };
    if chosen.is_empty() {
        return Err("no conversations selected".into());
    }
    let dropped = stats
        .dropped_ids
        .into_iter()
        .filter(|id| {
            chosen
                .iter()
                .any(|c| id.starts_with(&format!("{}:", c.sample_id)))
        })
        .collect();
    let all_turns = chosen.iter().map(|c| c.turns.len()).sum();
    let all_questions = chosen.iter().map(|c| c.questions.len()).sum();
    let samples = locomo::read_samples(&args.locomo)?;
    let (mut facts, mut dropped_fact_ids) = (Vec::new(), Vec::new());
    for conversation in &chosen {
        let known: HashSet<&str> = conversation
            .turns
            .iter()
            .map(|t| t.dia_id.as_str())
            .collect();
        let sample = samples
            .iter()
            .find(|s| s["sample_id"].as_str() == Some(conversation.sample_id.as_str()));
        let (list, dropped) =
            sample.map_or_else(Default::default, |s| observations::facts(s, &known));
        facts.push(list);
        dropped_fact_ids.extend(
            dropped
                .into_iter()
                .map(|id| format!("{}:{id:?}", conversation.sample_id)),
        );
    }
    let all_facts = facts.iter().map(Vec::len).sum();
    if let Some(n) = args.turns {
        for (conversation, facts) in chosen.iter_mut().zip(&mut facts) {
            cut(conversation, n);
            let kept: HashSet<&str> = conversation
                .turns
                .iter()
                .map(|t| t.dia_id.as_str())
                .collect();
            observations::within(facts, &kept);
        }
    }
    Ok(Selection {
        conversations: chosen,
        dropped,
        all_turns,
        all_questions,
        turns_limit: args.turns,
        facts,
        all_facts,
        dropped_fact_ids,
    })
}

/// Keeps the first `n` turns of `conversation`, and the questions all of whose evidence
/// (already cleaned up: every id names a turn) lies among them.
fn cut(conversation: &mut Conversation, n: usize) {
    conversation.turns.truncate(n);
    let kept: HashSet<&str> = conversation
        .turns
        .iter()
        .map(|t| t.dia_id.as_str())
        .collect();
    conversation
        .questions
        .retain(|q| q.evidence.iter().all(|id| kept.contains(id.as_str())));
}

pub async fn create_project(
    args: &Args,
    channel: &Channel,
    conversation: &Conversation,
    server: &Server,
) -> Result<String> {
    let project_id = conversation.sample_id.clone();
    ProjectServiceClient::new(channel.clone())
        .create_project(pb::CreateProjectRequest {
            org_id: ORG.into(),
            project_id: project_id.clone(),
            description: format!("LoCoMo {} (semantic quality)", conversation.sample_id),
            config: Some(pb::ProjectConfig {
                embedder: String::new(),
                reranker: args.reranker.clone(),
            }),
        })
        .await
        .map_err(|err| server.error("CreateProject failed", err))?;
    if args.project_category {
        let mut semantic = SemanticServiceClient::new(channel.clone());
        let set_id = semantic
            .get_set_id(pb::GetSetIdRequest {
                org_id: ORG.into(),
                project_id: project_id.clone(),
                ..Default::default()
            })
            .await
            .map_err(|err| server.error("GetSetId failed", err))?
            .into_inner()
            .set_id;
        semantic
            .add_category(pb::AddCategoryRequest {
                org_id: ORG.into(),
                project_id: project_id.clone(),
                set_id,
                category_name: PROJECT_CATEGORY.into(),
                prompt: PROJECT_CATEGORY_PROMPT.into(),
                description: "memmachine-bench semantic-quality: the conversation's events".into(),
            })
            .await
            .map_err(|err| server.error("AddCategory failed", err))?;
    }
    Ok(project_id)
}

/// Adds the conversation's turns, episodic and semantic; the uid → `dia_id` map.
pub async fn add_turns(
    args: &Args,
    channel: &Channel,
    conversation: &Conversation,
    project_id: &str,
    server: &Server,
) -> Result<HashMap<String, String>> {
    let mut memories = MemoryServiceClient::new(channel.clone());
    let mut dia = HashMap::new();
    for mut request in conversation.add_requests(ORG, project_id, args.batch) {
        request.types = vec![
            pb::MemoryType::Episodic as i32,
            pb::MemoryType::Semantic as i32,
        ];
        let ids: Vec<String> = request
            .messages
            .iter()
            .map(|m| m.metadata.get("dia_id").cloned().unwrap_or_default())
            .collect();
        let results = memories
            .add_memories(request)
            .await
            .map_err(|err| server.error("AddMemories failed", err))?
            .into_inner()
            .results;
        if results.len() != ids.len() {
            return Err(format!(
                "AddMemories returned {} uids for {} messages",
                results.len(),
                ids.len()
            )
            .into());
        }
        for (result, id) in results.into_iter().zip(ids) {
            dia.insert(result.uid, id);
        }
    }
    Ok(dia)
}

/// The uid → `dia_id` map of a project's episodes as stored (`--reuse`): every page of
/// `ListMemories` EPISODIC, `dia_id` from each episode's metadata.
pub async fn stored_turns(
    channel: &Channel,
    project_id: &str,
    server: &Server,
) -> Result<HashMap<String, String>> {
    let mut client = MemoryServiceClient::new(channel.clone());
    let (mut dia, mut token) = (HashMap::new(), String::new());
    loop {
        let page = client
            .list_memories(pb::ListMemoriesRequest {
                org_id: ORG.into(),
                project_id: project_id.into(),
                r#type: pb::MemoryType::Episodic as i32,
                page_size: Some(1000),
                page_token: token,
                ..Default::default()
            })
            .await
            .map_err(|err| server.error("ListMemories (episodes) failed", err))?
            .into_inner();
        for episode in page.episodes {
            if let Some(id) = episode.metadata.get("dia_id") {
                dia.insert(episode.uid, id.clone());
            }
        }
        if page.next_page_token.is_empty() {
            return Ok(dia);
        }
        token = page.next_page_token;
    }
}
