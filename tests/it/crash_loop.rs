//! Crash loop (issue 16 item 1): the real binary is SIGKILLed again and again
//! (`MEMMACHINE_CRASH_KILLS`, 5 by default; `scripts/crash-loop.sh` runs 20) under mixed
//! load: writers adding batches to several projects, deleters deleting acknowledged
//! episodes, lexical and hybrid searches, short-lived projects created, filled and
//! deleted, episodes being embedded by a slow scripted endpoint, and semantic ingestion
//! against the scripted chat model. After every restart:
//!
//! - every acknowledged add is stored (unless its deletion was acknowledged, or may have
//!   happened), and so stays in every later round, as does anything seen stored once;
//! - no acknowledged deletion comes back (episodes, and whole projects with theirs; a
//!   project deleted and created again holds only what was added since);
//! - no episode is stored twice, batches are stored whole or not at all, sequence numbers
//!   are never reused and follow each writer's order;
//! - the embedding, feature embedding and semantic queues drain to zero in a bound, with
//!   no semantic batch failed, and then every semantic message has exactly one feature
//!   citing it (the model's answer carries a value unique to its call, so a batch applied
//!   twice would show as a second feature);
//! - searches never return another project's episodes nor one whose deletion was
//!   acknowledged before the search was sent, and no call fails while the server runs.
//!
//! At the end the server shuts down cleanly and (SQLite) the file passes
//! `PRAGMA integrity_check` and `PRAGMA foreign_key_check`.
//!
//! sqlite-only: scripts/crash-loop.sh runs it on each backend.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common;
use crate::common::ServerProcess;
use crate::common::chat::{ChatCall, ChatServer, ScriptedReply};
use crate::common::embeddings::{Script, scripted_embeddings};
use crate::common::paging::collect_pages;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use memmachine_proto::v2::{self as pb, MemoryType};
use tonic::transport::Channel;

const ORG: &str = "crash";
/// Ranked by BM25 only; embedded by the slow scripted endpoint.
const LEXICAL: &str = "lex";
/// Hybrid ranking over the `hash` embedder's vectors.
const HYBRID: &str = "hyb";
/// Episodic and semantic; episodes are deleted from it while they are ingested.
const SEMANTIC: &str = "sem";
/// Projects created, filled and deleted over and over (names reused).
const SHORT_LIVED: [&str; 3] = ["tmp0", "tmp1", "tmp2"];
/// Messages per batch of the episodic writers.
const BATCH: usize = 5;
const SEMANTIC_BATCH: usize = 2;
const SHORT_LIVED_BATCH: usize = 3;
const TOPICS: [&str; 6] = ["coffee", "garden", "river", "piano", "mountain", "library"];
/// Longest the queues may take to drain after a restart.
const DRAIN_BOUND: Duration = Duration::from_secs(90);
/// Longest one call may take while the server runs.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

fn kills() -> usize {
    std::env::var("MEMMACHINE_CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
}

/// A small deterministic generator (xorshift64*), one per task.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n.max(1)
    }
}

/// What became of a short-lived project, as far as the clients know.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Life {
    /// Never created, or its deletion was acknowledged.
    Absent,
    /// Its creation was acknowledged.
    Live,
    /// Created, or not: the call failed.
    CreateUnknown,
    /// Deleted, or not: the call failed.
    DeleteUnknown,
}

#[derive(Debug)]
struct ShortLived {
    life: Life,
    /// Created this many times (its episodes' contents carry the generation).
    generation: u32,
    /// Uids of acknowledged adds since the last creation.
    acked: Vec<String>,
    /// Uids of acknowledged adds of earlier generations: never to be seen again.
    gone: Vec<String>,
}

/// What a round did, as acknowledged.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    added: usize,
    deleted: usize,
    delete_unknown: usize,
    lexical_searches: usize,
    hybrid_searches: usize,
    projects_created: usize,
    projects_deleted: usize,
    short_lived_added: usize,
    semantic_added: usize,
}

/// What the clients know of the store.
#[derive(Default)]
struct Model {
    /// Episodes of the long-lived projects known stored (acknowledged, or seen after a
    /// restart): uid → (project, content id).
    episodes: HashMap<String, (String, String)>,
    /// Batches known stored: "project/batch" → uids in message order.
    batches: HashMap<String, Vec<String>>,
    /// Known stored uids not yet handed to a deleter, by project.
    deletable: HashMap<String, Vec<String>>,
    /// Acknowledged deletions: uid → when the acknowledgement arrived.
    deleted: HashMap<String, Instant>,
    /// Deletions sent whose answer was an error (done or not).
    delete_unknown: HashSet<String>,
    /// Every sequence number seen stored: (project, seq) → uid.
    seqs: HashMap<(String, i64), String>,
    short_lived: HashMap<&'static str, ShortLived>,
    counts: Counts,
}

impl Model {
    fn new() -> Model {
        let mut model = Model::default();
        for name in SHORT_LIVED {
            model.short_lived.insert(
                name,
                ShortLived {
                    life: Life::Absent,
                    generation: 0,
                    acked: Vec::new(),
                    gone: Vec::new(),
                },
            );
        }
        model
    }

    /// A batch stored in a long-lived project (acknowledged, or seen after a restart).
    fn stored_batch(&mut self, project: &str, batch: &str, ids: &[String], uids: &[String]) {
        for (id, uid) in ids.iter().zip(uids) {
            self.episodes
                .insert(uid.clone(), (project.to_string(), id.clone()));
        }
        self.batches
            .insert(format!("{project}/{batch}"), uids.to_vec());
        self.deletable
            .entry(project.to_string())
            .or_default()
            .extend(uids.iter().cloned());
    }
}

/// The state every task of a round shares.
struct Shared {
    model: Mutex<Model>,
    /// Set just before the kill: a call failing after it is expected.
    killing: AtomicBool,
    /// Calls that failed while the server ran.
    unexpected: Mutex<Vec<String>>,
    /// Answers that broke an invariant (whenever they came).
    violations: Mutex<Vec<String>>,
}

impl Shared {
    fn failed(&self, what: &str, err: &str) {
        if !self.killing.load(Ordering::SeqCst) {
            self.unexpected
                .lock()
                .unwrap()
                .push(format!("{what}: {err}"));
        }
    }

    fn violation(&self, what: String) {
        self.violations.lock().unwrap().push(what);
    }
}

/// A message's content: its project, its id (unique in the project), then words searches
/// look for.
fn content(project: &str, id: &str, topic: usize) -> String {
    format!(
        "{project} {id} talks about {}",
        TOPICS[topic % TOPICS.len()]
    )
}

/// (project, id) of a content.
fn parse(content: &str) -> (&str, &str) {
    let mut words = content.split(' ');
    (
        words.next().unwrap_or_default(),
        words.next().unwrap_or_default(),
    )
}

/// The batch of a message id ("r3-w1-b7-m2" → "r3-w1-b7").
fn batch_of(id: &str) -> &str {
    id.rsplit_once('-').map_or(id, |(batch, _)| batch)
}

/// (round, writer, batch, message) of a message id "rR-W-bB-mM".
fn id_parts(id: &str) -> Option<(usize, &str, usize, usize)> {
    let mut parts = id.split('-');
    let round = parts.next()?.strip_prefix('r')?.parse().ok()?;
    let writer = parts.next()?;
    let batch = parts.next()?.strip_prefix('b')?.parse().ok()?;
    let message = parts.next()?.strip_prefix('m')?.parse().ok()?;
    Some((round, writer, batch, message))
}

async fn connect(url: &str) -> Result<Channel, String> {
    tonic::transport::Endpoint::from_shared(url.to_string())
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| e.to_string())
}

/// A call's answer, or why it failed (an error status, or no answer in time).
async fn call<T>(
    call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, String> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(response)) => Ok(response.into_inner()),
        Ok(Err(status)) => Err(format!("{:?}: {}", status.code(), status.message())),
        Err(_) => Err(format!("no answer in {CALL_TIMEOUT:?}")),
    }
}

fn message(content: String, producer: &str) -> pb::MemoryMessage {
    pb::MemoryMessage {
        content,
        producer: producer.into(),
        role: "user".into(),
        ..Default::default()
    }
}

/// Adds batches to a long-lived project until a call fails, recording what is
/// acknowledged.
async fn writer(
    shared: Arc<Shared>,
    url: String,
    project: &'static str,
    writer: &'static str,
    round: usize,
) {
    let channel = match connect(&url).await {
        Ok(channel) => channel,
        Err(err) => return shared.failed("connect", &err),
    };
    let mut client = MemoryServiceClient::new(channel);
    let (len, types, pause) = if project == SEMANTIC {
        let types = vec![MemoryType::Episodic as i32, MemoryType::Semantic as i32];
        (SEMANTIC_BATCH, types, Duration::from_millis(40))
    } else {
        let types = vec![MemoryType::Episodic as i32];
        (BATCH, types, Duration::from_millis(15))
    };
    for batch in 0.. {
        let id = format!("r{round}-{writer}-b{batch}");
        let ids: Vec<String> = (0..len).map(|m| format!("{id}-m{m}")).collect();
        let messages = ids
            .iter()
            .enumerate()
            .map(|(m, id)| message(content(project, id, batch + m), "alice"))
            .collect();
        let request = pb::AddMemoriesRequest {
            org_id: ORG.into(),
            project_id: project.into(),
            types: types.clone(),
            messages,
        };
        match call(client.add_memories(request)).await {
            Ok(response) => {
                let uids: Vec<String> = response.results.into_iter().map(|r| r.uid).collect();
                if uids.len() != len {
                    shared.violation(format!("{project}: {} uids for {len} messages", uids.len()));
                }
                let mut model = shared.model.lock().unwrap();
                model.stored_batch(project, &id, &ids, &uids);
                if project == SEMANTIC {
                    model.counts.semantic_added += len;
                } else {
                    model.counts.added += len;
                }
            }
            Err(err) => return shared.failed("add", &err),
        }
        tokio::time::sleep(pause).await;
    }
}

/// Deletes a few known-stored episodes of the long-lived projects at a time (of the
/// semantic one, racing its ingestion, one turn in five) until a call fails.
async fn deleter(shared: Arc<Shared>, url: String, seed: u64) {
    let channel = match connect(&url).await {
        Ok(channel) => channel,
        Err(err) => return shared.failed("connect", &err),
    };
    let mut client = MemoryServiceClient::new(channel);
    let mut rng = Rng::new(seed);
    for turn in 0.. {
        tokio::time::sleep(Duration::from_millis(25)).await;
        let project = [LEXICAL, HYBRID, LEXICAL, HYBRID, SEMANTIC][turn % 5];
        let uids: Vec<String> = {
            let mut model = shared.model.lock().unwrap();
            let pool = model.deletable.entry(project.to_string()).or_default();
            // Keep some: the searches need something to find.
            if pool.len() < 20 {
                continue;
            }
            (0..1 + rng.below(3))
                .map(|_| {
                    let at = rng.below(pool.len());
                    pool.swap_remove(at)
                })
                .collect()
        };
        let request = pb::DeleteEpisodicMemoriesRequest {
            org_id: ORG.into(),
            project_id: project.into(),
            episode_ids: uids.clone(),
        };
        match call(client.delete_episodic_memories(request)).await {
            Ok(response) => {
                if response.deleted_count != uids.len() as i64 {
                    shared.violation(format!(
                        "{project}: deleting {} stored episodes deleted {}",
                        uids.len(),
                        response.deleted_count
                    ));
                }
                let now = Instant::now();
                let mut model = shared.model.lock().unwrap();
                model.counts.deleted += uids.len();
                model.deleted.extend(uids.into_iter().map(|uid| (uid, now)));
            }
            Err(err) => {
                let mut model = shared.model.lock().unwrap();
                model.counts.delete_unknown += uids.len();
                model.delete_unknown.extend(uids);
                drop(model);
                return shared.failed("delete", &err);
            }
        }
    }
}

/// Searches the lexical and the hybrid project in turn until a call fails; an answer
/// holding another project's episode, or one whose deletion was acknowledged before the
/// search was sent, is a violation.
async fn searcher(shared: Arc<Shared>, url: String, seed: u64) {
    let channel = match connect(&url).await {
        Ok(channel) => channel,
        Err(err) => return shared.failed("connect", &err),
    };
    let mut client = MemoryServiceClient::new(channel);
    let mut rng = Rng::new(seed);
    for turn in 0.. {
        let project = [LEXICAL, HYBRID][turn % 2];
        let topic = TOPICS[rng.below(TOPICS.len())];
        let request = pb::SearchMemoriesRequest {
            org_id: ORG.into(),
            project_id: project.into(),
            query: format!("what about the {topic}"),
            top_k: Some(10),
            types: vec![MemoryType::Episodic as i32],
            ..Default::default()
        };
        let sent = Instant::now();
        let response = match call(client.search_memories(request)).await {
            Ok(response) => response,
            Err(err) => return shared.failed("search", &err),
        };
        let episodic = response.episodic_memory.unwrap_or_default();
        let found = episodic
            .long_term_memory
            .into_iter()
            .filter_map(|scored| scored.episode)
            .chain(episodic.short_term_memory);
        {
            let mut model = shared.model.lock().unwrap();
            for episode in found {
                let (owner, id) = parse(&episode.content);
                if owner != project {
                    shared.violation(format!(
                        "a search of {project} found {id} of {owner} ({})",
                        episode.uid
                    ));
                }
                if model
                    .deleted
                    .get(&episode.uid)
                    .is_some_and(|acked| *acked < sent)
                {
                    shared.violation(format!(
                        "a search of {project} found {id} ({}), deleted before it was sent",
                        episode.uid
                    ));
                }
            }
            if project == LEXICAL {
                model.counts.lexical_searches += 1;
            } else {
                model.counts.hybrid_searches += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
}

/// Creates, fills and deletes the short-lived projects in turn until a call fails.
async fn project_cycler(shared: Arc<Shared>, url: String, round: usize) {
    let channel = match connect(&url).await {
        Ok(channel) => channel,
        Err(err) => return shared.failed("connect", &err),
    };
    let mut projects = ProjectServiceClient::new(channel.clone());
    let mut memories = MemoryServiceClient::new(channel);
    let mut rng = Rng::new(round as u64 + 1000);
    for turn in round.. {
        let name = SHORT_LIVED[turn % SHORT_LIVED.len()];
        let generation = {
            let mut model = shared.model.lock().unwrap();
            let project = model.short_lived.get_mut(name).unwrap();
            if project.life == Life::Absent {
                project.generation += 1;
                project.life = Life::CreateUnknown;
            }
            project.generation
        };
        if shared.model.lock().unwrap().short_lived[name].life == Life::CreateUnknown {
            let request = pb::CreateProjectRequest {
                org_id: ORG.into(),
                project_id: name.into(),
                ..Default::default()
            };
            if let Err(err) = call(projects.create_project(request)).await {
                return shared.failed("create project", &err);
            }
            let mut model = shared.model.lock().unwrap();
            model.short_lived.get_mut(name).unwrap().life = Life::Live;
            model.counts.projects_created += 1;
        }
        for batch in 0..1 + rng.below(3) {
            let messages = (0..SHORT_LIVED_BATCH)
                .map(|m| {
                    let id = format!("g{generation}-r{round}-b{batch}-m{m}");
                    message(content(name, &id, m), "bob")
                })
                .collect();
            let request = pb::AddMemoriesRequest {
                org_id: ORG.into(),
                project_id: name.into(),
                // Empty: episodic and semantic.
                types: vec![],
                messages,
            };
            match call(memories.add_memories(request)).await {
                Ok(response) => {
                    let mut model = shared.model.lock().unwrap();
                    model.counts.short_lived_added += response.results.len();
                    let project = model.short_lived.get_mut(name).unwrap();
                    project
                        .acked
                        .extend(response.results.into_iter().map(|r| r.uid));
                }
                Err(err) => return shared.failed("add to a short-lived project", &err),
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        shared
            .model
            .lock()
            .unwrap()
            .short_lived
            .get_mut(name)
            .unwrap()
            .life = Life::DeleteUnknown;
        let request = pb::DeleteProjectRequest {
            org_id: ORG.into(),
            project_id: name.into(),
        };
        if let Err(err) = call(projects.delete_project(request)).await {
            return shared.failed("delete project", &err);
        }
        let mut model = shared.model.lock().unwrap();
        model.counts.projects_deleted += 1;
        let project = model.short_lived.get_mut(name).unwrap();
        project.life = Life::Absent;
        let acked = std::mem::take(&mut project.acked);
        project.gone.extend(acked);
    }
}

/// Every episode of a project, in sequence order.
async fn list_episodes(channel: &Channel, project: &str) -> Vec<pb::Episode> {
    let mut client = MemoryServiceClient::new(channel.clone());
    collect_pages(async |token| {
        let page = call(client.list_memories(pb::ListMemoriesRequest {
            org_id: ORG.into(),
            project_id: project.into(),
            page_size: Some(1000),
            page_token: token,
            ..Default::default()
        }))
        .await
        .unwrap_or_else(|err| panic!("listing {project} after a restart: {err}"));
        (page.episodes, page.next_page_token)
    })
    .await
}

/// Every semantic feature of a project.
async fn list_features(channel: &Channel, project: &str) -> Vec<pb::SemanticFeature> {
    let mut client = MemoryServiceClient::new(channel.clone());
    collect_pages(async |token| {
        let page = call(client.list_memories(pb::ListMemoriesRequest {
            org_id: ORG.into(),
            project_id: project.into(),
            r#type: MemoryType::Semantic as i32,
            page_size: Some(1000),
            page_token: token,
            ..Default::default()
        }))
        .await
        .unwrap_or_else(|err| panic!("listing the features of {project}: {err}"));
        (page.features, page.next_page_token)
    })
    .await
}

async fn project_exists(channel: &Channel, project: &str) -> bool {
    let mut client = ProjectServiceClient::new(channel.clone());
    let request = pb::GetProjectRequest {
        org_id: ORG.into(),
        project_id: project.into(),
    };
    match client.get_project(request).await {
        Ok(_) => true,
        Err(status) if status.code() == tonic::Code::NotFound => false,
        Err(status) => panic!("GetProject {project}: {status:?}"),
    }
}

/// Checks a long-lived project's episodes after a restart against the model (which learns
/// the committed but unacknowledged batches found). Returns how many are stored.
fn check_project(
    model: &mut Model,
    project: &str,
    stored: &[pb::Episode],
    violations: &mut Vec<String>,
) -> usize {
    let mut uids = HashSet::new();
    let mut ids = HashSet::new();
    let mut last_seq = i64::MIN;
    // Each writer's last (round, batch, message) seen, in sequence order.
    let mut last_of_writer: HashMap<(usize, String), (usize, usize)> = HashMap::new();
    let mut last_round = 0;
    let mut by_batch: HashMap<String, Vec<(usize, String, String)>> = HashMap::new();
    for episode in stored {
        let (owner, id) = parse(&episode.content);
        if owner != project {
            violations.push(format!("{project} holds {id} of {owner}"));
        }
        if !uids.insert(episode.uid.clone()) {
            violations.push(format!("{project}: uid {} stored twice", episode.uid));
        }
        if !ids.insert(id.to_string()) {
            violations.push(format!("{project}: message {id} stored twice"));
        }
        if episode.sequence_num <= last_seq {
            violations.push(format!(
                "{project}: sequence {} after {last_seq}",
                episode.sequence_num
            ));
        }
        last_seq = episode.sequence_num;
        let key = (project.to_string(), episode.sequence_num);
        match model.seqs.get(&key) {
            Some(uid) if *uid != episode.uid => violations.push(format!(
                "{project}: sequence {} reused ({uid}, then {})",
                episode.sequence_num, episode.uid
            )),
            Some(_) => {}
            None => {
                model.seqs.insert(key, episode.uid.clone());
            }
        }
        if model.deleted.contains_key(&episode.uid) {
            violations.push(format!(
                "{project}: {id} ({}) came back after its deletion was acknowledged",
                episode.uid
            ));
        }
        match model.episodes.get(&episode.uid) {
            Some((p, known)) if p != project || known != id => violations.push(format!(
                "{project}: uid {} holds {id}, acknowledged as {known} of {p}",
                episode.uid
            )),
            _ => {}
        }
        match id_parts(id) {
            Some((round, writer, batch, m)) => {
                if round < last_round {
                    violations.push(format!(
                        "{project}: {id} sequenced after round {last_round}"
                    ));
                }
                last_round = last_round.max(round);
                let last = last_of_writer.insert((round, writer.to_string()), (batch, m));
                if last.is_some_and(|last| last >= (batch, m)) {
                    violations.push(format!(
                        "{project}: {id} sequenced after {last:?} of the same writer"
                    ));
                }
                by_batch.entry(batch_of(id).to_string()).or_default().push((
                    m,
                    id.to_string(),
                    episode.uid.clone(),
                ));
            }
            None => violations.push(format!(
                "{project}: unexpected content {:?}",
                episode.content
            )),
        }
    }
    // Batches whole or not at all; committed ones the clients did not hear of are known
    // from now on.
    let len = if project == SEMANTIC {
        SEMANTIC_BATCH
    } else {
        BATCH
    };
    for (batch, mut messages) in by_batch {
        messages.sort();
        let key = format!("{project}/{batch}");
        match model.batches.get(&key) {
            Some(known) => {
                for uid in known {
                    let gone =
                        model.deleted.contains_key(uid) || model.delete_unknown.contains(uid);
                    if !gone && !uids.contains(uid) {
                        violations.push(format!("{project}: batch {batch} lost {uid}"));
                    }
                }
            }
            None => {
                if messages.len() != len {
                    violations.push(format!(
                        "{project}: unacknowledged batch {batch} stored in part ({} of {len})",
                        messages.len()
                    ));
                }
                let ids: Vec<String> = messages.iter().map(|(_, id, _)| id.clone()).collect();
                let batch_uids: Vec<String> = messages.into_iter().map(|(_, _, uid)| uid).collect();
                model.stored_batch(project, &batch, &ids, &batch_uids);
            }
        }
    }
    // Every acknowledged add is there, unless its deletion was (or may have been) done.
    let lost: Vec<&String> = model
        .episodes
        .iter()
        .filter(|(uid, (p, _))| {
            p == project
                && !uids.contains(*uid)
                && !model.deleted.contains_key(*uid)
                && !model.delete_unknown.contains(*uid)
        })
        .map(|(uid, _)| uid)
        .collect();
    if !lost.is_empty() {
        violations.push(format!(
            "{project}: {} acknowledged episodes lost, e.g. {:?}",
            lost.len(),
            &lost[..lost.len().min(3)]
        ));
    }
    stored.len()
}

/// Checks the short-lived projects after a restart, settling what a failed call left
/// unknown. Returns how many episodes they hold.
async fn check_short_lived(
    channel: &Channel,
    model: &mut Model,
    violations: &mut Vec<String>,
) -> usize {
    let mut total = 0;
    for name in SHORT_LIVED {
        let exists = project_exists(channel, name).await;
        let project = model.short_lived.get_mut(name).unwrap();
        match (project.life, exists) {
            (Life::Absent, true) => {
                violations.push(format!("{name}: deleted (or never created), yet it exists"))
            }
            (Life::Live, false) => violations.push(format!("{name}: created, yet it is gone")),
            (Life::CreateUnknown | Life::DeleteUnknown, true) => project.life = Life::Live,
            (Life::CreateUnknown | Life::DeleteUnknown, false) => {
                project.life = Life::Absent;
                let acked = std::mem::take(&mut project.acked);
                project.gone.extend(acked);
            }
            _ => {}
        }
        if !exists {
            continue;
        }
        let stored = list_episodes(channel, name).await;
        total += stored.len();
        let uids: HashSet<&str> = stored.iter().map(|e| e.uid.as_str()).collect();
        if uids.len() != stored.len() {
            violations.push(format!("{name}: an episode stored twice"));
        }
        let lost = project
            .acked
            .iter()
            .filter(|uid| !uids.contains(uid.as_str()));
        let lost: Vec<&String> = lost.collect();
        if !lost.is_empty() {
            violations.push(format!(
                "{name}: {} acknowledged episodes lost (a project deletion half done?), e.g. {:?}",
                lost.len(),
                lost[0]
            ));
        }
        let generation = format!("g{}-", project.generation);
        for episode in &stored {
            let (owner, id) = parse(&episode.content);
            if owner != name || !id.starts_with(&generation) || project.gone.contains(&episode.uid)
            {
                violations.push(format!(
                    "{name} (generation {}) holds {id} of {owner}: a deleted project's episode came back",
                    project.generation
                ));
            }
        }
    }
    total
}

/// Checks the semantic project's features (queues drained): each stored message has
/// exactly one feature, citing it alone; a deleted one at most one, citing nothing; and
/// no feature comes from anything else.
fn check_features(
    model: &Model,
    stored: &[pb::Episode],
    features: &[pb::SemanticFeature],
    violations: &mut Vec<String>,
) {
    let mut by_name: HashMap<&str, Vec<&pb::SemanticFeature>> = HashMap::new();
    for feature in features {
        by_name
            .entry(feature.feature_name.as_str())
            .or_default()
            .push(feature);
    }
    for (name, found) in &by_name {
        if found.len() > 1 {
            let values: Vec<&str> = found.iter().map(|f| f.value.as_str()).collect();
            violations.push(format!(
                "a semantic batch applied twice: {name:?} has {} features {values:?}",
                found.len()
            ));
        }
    }
    // A deleted message's feature may stay (if it was ingested first), citing nothing.
    let deleted: HashSet<&str> = model
        .episodes
        .iter()
        .filter(|(uid, (project, _))| {
            project == SEMANTIC
                && (model.deleted.contains_key(*uid) || model.delete_unknown.contains(*uid))
        })
        .map(|(_, (_, id))| id.as_str())
        .collect();
    let stored_contents: HashSet<&str> = stored.iter().map(|e| e.content.as_str()).collect();
    for (name, found) in &by_name {
        if stored_contents.contains(name) {
            continue;
        }
        if !deleted.contains(parse(name).1) {
            violations.push(format!("feature {name:?} of no stored message"));
        } else if !found[0].citations.is_empty() {
            violations.push(format!(
                "feature {name:?} of a deleted message cites {:?}",
                found[0].citations
            ));
        }
    }
    for episode in stored {
        match by_name.get(episode.content.as_str()) {
            None => violations.push(format!(
                "{:?} ({}) not ingested once the queue drained",
                episode.content, episode.uid
            )),
            Some(found) => {
                if found[0].citations != [episode.uid.clone()] {
                    violations.push(format!(
                        "feature {:?} cites {:?}, not {}",
                        episode.content, found[0].citations, episode.uid
                    ));
                }
            }
        }
    }
}

/// The value of an unlabelled series in a Prometheus exposition.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(series)?;
        rest.starts_with(' ')
            .then(|| rest.trim().parse().ok())
            .flatten()
    })
}

/// Where a test store's tables are read directly (the file, or its database).
enum Direct {
    Sqlite(std::path::PathBuf),
    Postgres(String),
}

impl Direct {
    fn new(dir: &Path) -> Direct {
        if common::postgres::servers_on_postgres() {
            Direct::Postgres(common::postgres::database_for_dir(dir))
        } else {
            Direct::Sqlite(dir.join("memmachine.db"))
        }
    }

    /// `SELECT COUNT(*) FROM table`.
    async fn count(&self, table: &str) -> i64 {
        let sql = format!("SELECT COUNT(*) FROM {table}");
        match self {
            Direct::Sqlite(path) => {
                let conn = rusqlite::Connection::open_with_flags(
                    path,
                    rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
                )
                .unwrap();
                conn.busy_timeout(Duration::from_secs(10)).unwrap();
                conn.query_row(&sql, [], |row| row.get(0)).unwrap()
            }
            Direct::Postgres(url) => {
                use sqlx::Connection;
                let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
                let count: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                    .fetch_one(&mut conn)
                    .await
                    .unwrap();
                conn.close().await.ok();
                count
            }
        }
    }
}

/// The queues as the server's metrics show them: (episodes waiting for a vector, semantic
/// messages waiting, semantic messages failed).
async fn queues(metrics: &str) -> Option<(f64, f64, f64)> {
    let text = reqwest::get(metrics).await.ok()?.text().await.ok()?;
    Some((
        sample(&text, "memmachine_embedding_queue_depth")?,
        sample(&text, "memmachine_semantic_queue_depth")?,
        sample(&text, "memmachine_semantic_queue_failed")?,
    ))
}

/// Waits until the embedding, feature embedding and semantic queues are empty; returns
/// how long that took, or panics past the bound.
async fn drain(
    server: &mut ServerProcess,
    metrics: &str,
    direct: &Direct,
    round: usize,
) -> Duration {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < DRAIN_BOUND {
        server.child.assert_running();
        if let Some((embedding, semantic, failed)) = queues(metrics).await {
            assert_eq!(failed, 0.0, "round {round}: semantic batches failed");
            let features = direct.count("feature_embedding_queue").await;
            if embedding == 0.0 && semantic == 0.0 && features == 0 {
                return start.elapsed();
            }
            last = format!("embedding {embedding}, semantic {semantic}, features {features}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("round {round}: the queues did not drain in {DRAIN_BOUND:?} ({last})");
}

/// An answer adding one feature per message, named by its text, valued by the call; a
/// summary for a summary.
fn answer(call: &ChatCall, n: usize) -> ScriptedReply {
    if !call.user.contains("## Current features") {
        return ScriptedReply::Content(format!("summary {n}"));
    }
    let messages = call.user.split("## New messages\n").nth(1).unwrap_or("");
    let mut commands = Vec::new();
    let mut number = 0;
    for line in messages.lines().filter(|l| !l.is_empty()) {
        match line.strip_prefix('[') {
            Some(rest) => number = rest[..rest.find(']').unwrap()].parse::<u64>().unwrap(),
            None => commands.push(serde_json::json!({
                "command": "add", "tag": "preferences", "feature": line,
                "value": format!("call {n}"), "messages": [number]
            })),
        }
    }
    ScriptedReply::Content(serde_json::json!({ "commands": commands }).to_string())
}

fn start(dir: &Path, flags: &[String], metrics: &str) -> ServerProcess {
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.extend(["--metrics-listen", metrics]);
    ServerProcess::start(dir, &args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_under_mixed_load_loses_nothing_acknowledged() {
    let kills = kills();
    let began = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (embeddings, embed_requests) =
        scripted_embeddings(Script::Slow(Duration::from_millis(30))).await;
    let chat_calls = Arc::new(AtomicUsize::new(0));
    let chat = {
        let calls = chat_calls.clone();
        ChatServer::start(move |call| answer(call, calls.fetch_add(1, Ordering::SeqCst) + 1))
    };
    let flags: Vec<String> = [
        "--embedder",
        "openai",
        "--embedder-base-url",
        &embeddings,
        "--embedder-model",
        "scripted",
        // A batch claimed by the killed server is embedded soon after the restart.
        "--embedding-lease",
        "2",
        "--llm-base-url",
        &chat.url,
        "--llm-model",
        "scripted",
        "--llm-max-calls-per-minute",
        "0",
        "--semantic-trigger-messages",
        "1",
        "--semantic-trigger-age",
        "0",
        "--semantic-lease",
        "2",
        // One feature per message: nothing is merged.
        "--consolidation-threshold",
        "1000000",
    ]
    .map(str::to_string)
    .to_vec();
    let direct = Direct::new(dir.path());
    let mut metrics = common::free_port().to_string();
    let mut server = start(dir.path(), &flags, &metrics);
    {
        let channel = connect(&server.url()).await.unwrap();
        let mut projects = ProjectServiceClient::new(channel);
        for (project, embedder, reranker) in [
            (LEXICAL, "", "lexical"),
            (HYBRID, "hash", "hybrid"),
            (SEMANTIC, "", ""),
        ] {
            projects
                .create_project(pb::CreateProjectRequest {
                    org_id: ORG.into(),
                    project_id: project.into(),
                    config: Some(pb::ProjectConfig {
                        embedder: embedder.into(),
                        reranker: reranker.into(),
                    }),
                    ..Default::default()
                })
                .await
                .unwrap();
        }
    }

    let shared = Arc::new(Shared {
        model: Mutex::new(Model::new()),
        killing: AtomicBool::new(false),
        unexpected: Mutex::default(),
        violations: Mutex::default(),
    });
    let mut totals = Counts::default();
    for round in 0..kills {
        shared.killing.store(false, Ordering::SeqCst);
        let metrics_url = format!("http://{metrics}/metrics");
        shared.model.lock().unwrap().counts = Counts::default();
        let url = server.url();
        let mut tasks = Vec::new();
        for (project, name) in [
            (LEXICAL, "w0"),
            (LEXICAL, "w1"),
            (HYBRID, "w2"),
            (HYBRID, "w3"),
            (SEMANTIC, "s0"),
        ] {
            tasks.push(tokio::spawn(writer(
                shared.clone(),
                url.clone(),
                project,
                name,
                round,
            )));
        }
        tasks.push(tokio::spawn(deleter(
            shared.clone(),
            url.clone(),
            round as u64,
        )));
        for s in 0..2 {
            let seed = (round * 2 + s) as u64 + 500;
            tasks.push(tokio::spawn(searcher(shared.clone(), url.clone(), seed)));
        }
        tasks.push(tokio::spawn(project_cycler(
            shared.clone(),
            url.clone(),
            round,
        )));

        // Somewhere from 0.4 to 1.9 s in, varying by round.
        let delay = Duration::from_millis(400 + (round as u64 * 7 + 3) % 16 * 100);
        tokio::time::sleep(delay).await;
        // What the kill interrupts: (episodes waiting for a vector, semantic messages).
        let (queued, ingesting, _) = queues(&metrics_url).await.unwrap_or_default();
        let (embeds_at_kill, chats_at_kill) = (
            embed_requests.load(Ordering::SeqCst),
            chat_calls.load(Ordering::SeqCst),
        );
        shared.killing.store(true, Ordering::SeqCst);
        server.kill();
        for task in tasks {
            task.await.unwrap();
        }
        let unexpected = std::mem::take(&mut *shared.unexpected.lock().unwrap());
        assert!(
            unexpected.is_empty(),
            "round {round}: calls failed while the server ran: {unexpected:#?}"
        );
        let counts = shared.model.lock().unwrap().counts;
        assert!(
            counts.added > 0 && counts.semantic_added > 0,
            "round {round}: nothing was acknowledged before the kill: {counts:?}"
        );

        metrics = common::free_port().to_string();
        let restart = Instant::now();
        server = start(dir.path(), &flags, &metrics);
        let restarted = restart.elapsed();
        let drained = drain(
            &mut server,
            &format!("http://{metrics}/metrics"),
            &direct,
            round,
        )
        .await;

        let channel = connect(&server.url()).await.unwrap();
        let mut violations = std::mem::take(&mut *shared.violations.lock().unwrap());
        let mut stored = Vec::new();
        let mut semantic_episodes = Vec::new();
        for project in [LEXICAL, HYBRID, SEMANTIC] {
            let episodes = list_episodes(&channel, project).await;
            let mut model = shared.model.lock().unwrap();
            stored.push(check_project(
                &mut model,
                project,
                &episodes,
                &mut violations,
            ));
            if project == SEMANTIC {
                semantic_episodes = episodes;
            }
        }
        let features = list_features(&channel, SEMANTIC).await;
        check_features(
            &shared.model.lock().unwrap(),
            &semantic_episodes,
            &features,
            &mut violations,
        );
        let short_lived = {
            let mut model = std::mem::take(&mut *shared.model.lock().unwrap());
            let stored = check_short_lived(&channel, &mut model, &mut violations).await;
            *shared.model.lock().unwrap() = model;
            stored
        };
        assert!(
            violations.is_empty(),
            "round {round}: {} violations: {:#?}",
            violations.len(),
            &violations[..violations.len().min(20)]
        );

        let model = shared.model.lock().unwrap();
        totals.added += counts.added;
        totals.deleted += counts.deleted;
        totals.delete_unknown += counts.delete_unknown;
        totals.lexical_searches += counts.lexical_searches;
        totals.hybrid_searches += counts.hybrid_searches;
        totals.projects_created += counts.projects_created;
        totals.projects_deleted += counts.projects_deleted;
        totals.short_lived_added += counts.short_lived_added;
        totals.semantic_added += counts.semantic_added;
        eprintln!(
            "round {round}: killed at {delay:?} with {queued} episodes waiting for a vector \
             and {ingesting} semantic messages queued ({embeds_at_kill} embedding requests, \
             {chats_at_kill} model calls so far); acked: {} adds, {} deletes ({} unanswered), \
             {} lexical + {} hybrid searches, {} projects created / {} deleted ({} adds), \
             {} semantic adds; restart {restarted:.1?}, drained in {drained:.1?}; \
             stored lex {} hyb {} sem {} short-lived {short_lived}, {} features; \
             known {} episodes, {} acked deletions",
            counts.added,
            counts.deleted,
            counts.delete_unknown,
            counts.lexical_searches,
            counts.hybrid_searches,
            counts.projects_created,
            counts.projects_deleted,
            counts.short_lived_added,
            counts.semantic_added,
            stored[0],
            stored[1],
            stored[2],
            features.len(),
            model.episodes.len(),
            model.deleted.len(),
        );
    }

    eprintln!(
        "crash loop: {kills} kills in {:.1?}; acked {} adds (+{} semantic, +{} to short-lived \
         projects), {} deletes ({} unanswered), {} projects deleted, {} searches",
        began.elapsed(),
        totals.added,
        totals.semantic_added,
        totals.short_lived_added,
        totals.deleted,
        totals.delete_unknown,
        totals.projects_deleted,
        totals.lexical_searches + totals.hybrid_searches,
    );
    let status = server.terminate_async().await;
    assert!(
        status.success(),
        "graceful shutdown exits 0, got {status:?}"
    );
    drop(chat);
    if let Direct::Sqlite(path) = &direct {
        let conn = rusqlite::Connection::open(path).unwrap();
        let integrity: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(integrity, "ok");
        let mut check = conn.prepare("PRAGMA foreign_key_check").unwrap();
        let broken: Vec<String> = check
            .query_map([], |r| {
                Ok(format!(
                    "{}: row {:?}",
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<i64>>(1)?
                ))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(broken.is_empty(), "foreign keys broken: {broken:?}");
    }
}
