//! The isolation model: a property test drives the real server (one `memmachine serve`
//! process per configuration, over gRPC on TCP) with random sequences of operations
//! across three orgs of three projects each — projects created, deleted and read,
//! episodes added, searched, listed, counted and deleted, semantic sets, categories and
//! features added, read, listed, searched and deleted — each made with some caller
//! identity (a key of the target's org, of another org, the admin key, no key, a forged
//! key, a revoked key) and aimed at ids of any tenant. Every answer is compared with a
//! plain in-memory model that predicts the exact outcome (the success and what it holds,
//! or the gRPC code), and every successful answer is checked to hold nothing of another
//! (org, project). Two configurations: without `--auth` (every identity is anyone) and
//! with `--auth` and keys made for each case's orgs.
//!
//! Each case uses orgs of its own (`c{case}o{n}`), so cases share the server but no
//! data; a failure names the case's operations as proptest shrank them.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common;
use crate::common::ServerProcess;
use crate::common::calls::with_key;
use crate::common::paging::try_collect_pages;
use memmachine::store::StoreLocation;
use memmachine_core::model::KeyScope;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use memmachine_proto::v2::semantic_service_client::SemanticServiceClient;
use memmachine_proto::v2::{self as pb, MemoryType};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tonic::transport::Channel;
use tonic::{Code, Status};

const ORGS: usize = 3;
const PER_ORG: usize = 3;
/// Tenants are (org, project) pairs, numbered `org * PER_ORG + project`.
const TENANTS: usize = ORGS * PER_ORG;

fn org_of(tenant: usize) -> usize {
    tenant / PER_ORG
}

/// Who makes a call, relative to the org of the tenant it is aimed at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    /// A key of the target's org.
    Own,
    Admin,
    /// A key of the org `n` after the target's (1 ≤ n < ORGS): never the target's.
    Other(usize),
    NoKey,
    /// A real key's id with a wrong secret.
    Forged,
    /// A key that was revoked.
    Revoked,
}

#[derive(Debug, Clone)]
enum Op {
    CreateProject {
        who: Who,
        t: Index,
    },
    DeleteProject {
        who: Who,
        t: Index,
    },
    GetProject {
        who: Who,
        t: Index,
    },
    /// `ListProjects`, of `org` when `scoped`, else of no org in particular.
    ListProjects {
        who: Who,
        org: usize,
        scoped: bool,
    },
    CountEpisodes {
        who: Who,
        t: Index,
    },
    AddMemories {
        who: Who,
        t: Index,
        messages: usize,
    },
    /// `SearchMemories` for one marker word (mostly one of the tenant's own).
    SearchMemories {
        who: Who,
        t: Index,
        marker: Index,
    },
    ListEpisodes {
        who: Who,
        t: Index,
        page_size: i32,
    },
    DeleteEpisodes {
        who: Who,
        t: Index,
        uids: Vec<Index>,
    },
    /// The tenant's user set (of producer `alice`), or its org's set.
    GetSetId {
        who: Who,
        t: Index,
        org_level: bool,
    },
    /// Category `notes` on a set (of any tenant).
    AddCategory {
        who: Who,
        t: Index,
        set: Index,
    },
    /// A feature (mostly of a category the set has) in a set of any tenant, maybe citing
    /// an episode of any tenant.
    AddFeature {
        who: Who,
        t: Index,
        set: Index,
        category: Index,
        cite: Option<Index>,
    },
    GetFeature {
        who: Who,
        t: Index,
        feature: Index,
    },
    DeleteFeatures {
        who: Who,
        t: Index,
        features: Vec<Index>,
    },
    ListFeatures {
        who: Who,
        t: Index,
        page_size: i32,
    },
    SearchFeatures {
        who: Who,
        t: Index,
        marker: Index,
    },
}

impl Op {
    fn who(&self) -> Who {
        match *self {
            Op::CreateProject { who, .. }
            | Op::DeleteProject { who, .. }
            | Op::GetProject { who, .. }
            | Op::ListProjects { who, .. }
            | Op::CountEpisodes { who, .. }
            | Op::AddMemories { who, .. }
            | Op::SearchMemories { who, .. }
            | Op::ListEpisodes { who, .. }
            | Op::DeleteEpisodes { who, .. }
            | Op::GetSetId { who, .. }
            | Op::AddCategory { who, .. }
            | Op::AddFeature { who, .. }
            | Op::GetFeature { who, .. }
            | Op::DeleteFeatures { who, .. }
            | Op::ListFeatures { who, .. }
            | Op::SearchFeatures { who, .. } => who,
        }
    }

    /// The operation's name.
    fn name(&self) -> String {
        let debug = format!("{self:?}");
        debug
            .split([' ', '{'])
            .next()
            .unwrap_or_default()
            .to_string()
    }
}

fn who() -> impl Strategy<Value = Who> {
    prop_oneof![
        10 => Just(Who::Own),
        3 => Just(Who::Admin),
        3 => (1..ORGS).prop_map(Who::Other),
        1 => Just(Who::NoKey),
        1 => Just(Who::Forged),
        1 => Just(Who::Revoked),
    ]
}

fn ids() -> impl Strategy<Value = Vec<Index>> {
    prop_oneof![
        1 => Just(Vec::new()),
        9 => prop::collection::vec(any::<Index>(), 1..=3),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let t = any::<Index>;
    prop_oneof![
        3 => (who(), t()).prop_map(|(who, t)| Op::CreateProject { who, t }),
        1 => (who(), t()).prop_map(|(who, t)| Op::DeleteProject { who, t }),
        1 => (who(), t()).prop_map(|(who, t)| Op::GetProject { who, t }),
        1 => (who(), 0..ORGS, any::<bool>())
            .prop_map(|(who, org, scoped)| Op::ListProjects { who, org, scoped }),
        1 => (who(), t()).prop_map(|(who, t)| Op::CountEpisodes { who, t }),
        6 => (who(), t(), 1..=3usize)
            .prop_map(|(who, t, messages)| Op::AddMemories { who, t, messages }),
        4 => (who(), t(), any::<Index>())
            .prop_map(|(who, t, marker)| Op::SearchMemories { who, t, marker }),
        2 => (who(), t(), 1..=4i32)
            .prop_map(|(who, t, page_size)| Op::ListEpisodes { who, t, page_size }),
        3 => (who(), t(), ids()).prop_map(|(who, t, uids)| Op::DeleteEpisodes { who, t, uids }),
        2 => (who(), t(), any::<bool>())
            .prop_map(|(who, t, org_level)| Op::GetSetId { who, t, org_level }),
        2 => (who(), t(), any::<Index>()).prop_map(|(who, t, set)| Op::AddCategory { who, t, set }),
        6 => add_feature(who()),
        3 => (who(), t(), any::<Index>())
            .prop_map(|(who, t, feature)| Op::GetFeature { who, t, feature }),
        2 => (who(), t(), ids())
            .prop_map(|(who, t, features)| Op::DeleteFeatures { who, t, features }),
        2 => (who(), t(), 1..=4i32)
            .prop_map(|(who, t, page_size)| Op::ListFeatures { who, t, page_size }),
        2 => (who(), t(), any::<Index>())
            .prop_map(|(who, t, marker)| Op::SearchFeatures { who, t, marker }),
    ]
}

fn add_feature(who: impl Strategy<Value = Who>) -> impl Strategy<Value = Op> {
    (
        who,
        any::<Index>(),
        any::<Index>(),
        any::<Index>(),
        proptest::option::weighted(0.3, any::<Index>()),
    )
        .prop_map(|(who, t, set, category, cite)| Op::AddFeature {
            who,
            t,
            set,
            category,
            cite,
        })
}

/// A few projects created by their own org, a few of their sets and features, then
/// anything.
fn ops() -> impl Strategy<Value = Vec<Op>> {
    (
        prop::collection::vec(
            any::<Index>().prop_map(|t| Op::CreateProject { who: Who::Own, t }),
            3..6,
        ),
        prop::collection::vec(
            (any::<Index>(), proptest::bool::weighted(0.3)).prop_map(|(t, org_level)| {
                Op::GetSetId {
                    who: Who::Own,
                    t,
                    org_level,
                }
            }),
            1..4,
        ),
        prop::collection::vec(add_feature(Just(Who::Own)), 1..4),
        prop::collection::vec(op(), 16..36),
    )
        .prop_map(|(mut ops, sets, features, rest)| {
            ops.extend(sets);
            ops.extend(features);
            ops.extend(rest);
            ops
        })
}

// The model.

#[derive(Debug, Clone)]
struct ModelEpisode {
    uid: String,
    tenant: usize,
    content: String,
    marker: String,
    live: bool,
}

#[derive(Debug, Clone)]
struct ModelSet {
    id: String,
    org: usize,
    /// `None` for the org's set.
    tenant: Option<usize>,
    exists: bool,
    categories: BTreeSet<String>,
}

impl ModelSet {
    fn visible_to(&self, t: usize) -> bool {
        self.exists && self.org == org_of(t) && self.tenant.is_none_or(|p| p == t)
    }

    /// User sets have the default category `profile`; others only those added.
    fn has_category(&self, name: &str) -> bool {
        (self.tenant.is_some() && name == "profile") || self.categories.contains(name)
    }
}

#[derive(Debug, Clone)]
struct ModelFeature {
    id: String,
    set_id: String,
    category: String,
    value: String,
    marker: String,
    citations: BTreeSet<String>,
    live: bool,
}

struct Model {
    auth: bool,
    exists: [bool; TENANTS],
    /// Every episode added in the case, in the order added.
    episodes: Vec<ModelEpisode>,
    /// Every marker word issued in the case (episodes' and features').
    markers: Vec<String>,
    sets: Vec<ModelSet>,
    /// The id `GetSetId` gave for (org, tenant or `None` for the org's set).
    set_ids: HashMap<(usize, Option<usize>), String>,
    /// Every feature added in the case, in the order added.
    features: Vec<ModelFeature>,
}

impl Model {
    fn new(auth: bool) -> Model {
        Model {
            auth,
            exists: [false; TENANTS],
            episodes: Vec::new(),
            markers: Vec::new(),
            sets: Vec::new(),
            set_ids: HashMap::new(),
            features: Vec::new(),
        }
    }

    /// The code the call is refused with for its caller, if any.
    fn refused(&self, who: Who) -> Option<Code> {
        if !self.auth {
            return None;
        }
        match who {
            Who::Own | Who::Admin => None,
            Who::Other(_) => Some(Code::PermissionDenied),
            Who::NoKey | Who::Forged | Who::Revoked => Some(Code::Unauthenticated),
        }
    }

    /// The caller's refusal, else `NOT_FOUND` for a missing project.
    fn gate(&self, who: Who, t: usize) -> Result<(), Code> {
        if let Some(code) = self.refused(who) {
            return Err(code);
        }
        if !self.exists[t] {
            return Err(Code::NotFound);
        }
        Ok(())
    }

    fn live_episodes(&self, t: usize) -> Vec<&ModelEpisode> {
        self.episodes
            .iter()
            .filter(|e| e.live && e.tenant == t)
            .collect()
    }

    fn episode(&self, uid: &str) -> Option<&ModelEpisode> {
        self.episodes.iter().find(|e| e.uid == uid)
    }

    fn set(&self, id: &str) -> Option<&ModelSet> {
        self.sets.iter().find(|s| s.id == id)
    }

    fn feature_visible(&self, f: &ModelFeature, t: usize) -> bool {
        f.live && self.set(&f.set_id).is_some_and(|s| s.visible_to(t))
    }

    fn visible_features(&self, t: usize) -> Vec<&ModelFeature> {
        self.features
            .iter()
            .filter(|f| self.feature_visible(f, t))
            .collect()
    }

    /// Drops citations of episodes that no longer exist.
    fn drop_dead_citations(&mut self) {
        let live: BTreeSet<String> = self
            .episodes
            .iter()
            .filter(|e| e.live)
            .map(|e| e.uid.clone())
            .collect();
        for f in &mut self.features {
            f.citations.retain(|uid| live.contains(uid));
        }
    }

    /// Deleting episodes drops their citations and the features they left citing
    /// nothing (a feature that never cited anything stays).
    fn drop_orphaned_features(&mut self) {
        let cited: Vec<bool> = self
            .features
            .iter()
            .map(|f| !f.citations.is_empty())
            .collect();
        self.drop_dead_citations();
        for (f, had) in self.features.iter_mut().zip(cited) {
            if had && f.citations.is_empty() {
                f.live = false;
            }
        }
    }

    /// The project goes with its episodes, its user set and that set's features; the
    /// org's set stays, without citations of its episodes.
    fn delete_project(&mut self, t: usize) {
        self.exists[t] = false;
        for e in &mut self.episodes {
            if e.tenant == t {
                e.live = false;
            }
        }
        let mut gone = BTreeSet::new();
        for s in &mut self.sets {
            if s.tenant == Some(t) {
                s.exists = false;
                s.categories.clear();
                gone.insert(s.id.clone());
            }
        }
        for f in &mut self.features {
            if gone.contains(&f.set_id) {
                f.live = false;
            }
        }
        self.drop_dead_citations();
    }
}

/// One of `preferred` (three times in four when there are some), else one of `all` or
/// `phantom`, all alike.
fn pick<T: Clone>(index: &Index, preferred: &[T], all: &[T], phantom: T) -> T {
    let rest = all.len() + 1;
    let i = if preferred.is_empty() {
        index.index(rest)
    } else {
        let i = index.index(4 * rest);
        if i < 3 * rest {
            return preferred[i * preferred.len() / (3 * rest)].clone();
        }
        i - 3 * rest
    };
    all.get(i).cloned().unwrap_or(phantom)
}

/// The expected outcome against the answer: `Ok(Some(answer))` for an expected
/// success, `Ok(None)` for the expected refusal, else what differs.
fn outcome<T>(got: Result<T, Status>, want: Result<(), Code>) -> Result<Option<T>, String> {
    LAST_WANT.with(|last| last.set(Some(want)));
    match (got, want) {
        (Ok(answer), Ok(())) => Ok(Some(answer)),
        (Err(status), Err(code)) if status.code() == code => Ok(None),
        (Ok(_), Err(code)) => Err(format!("expected {code:?}, got a success")),
        (Err(status), want) => Err(format!(
            "expected {}, got {:?}: {}",
            match want {
                Ok(()) => "a success".to_string(),
                Err(code) => format!("{code:?}"),
            },
            status.code(),
            status.message()
        )),
    }
}

thread_local! {
    /// The outcome the model expected for the last call (for the run's tally).
    static LAST_WANT: std::cell::Cell<Option<Result<(), Code>>> = const { std::cell::Cell::new(None) };
}

macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

// The server side.

#[derive(Clone)]
struct Client {
    projects: ProjectServiceClient<Channel>,
    memory: MemoryServiceClient<Channel>,
    semantic: SemanticServiceClient<Channel>,
}

/// The tokens of one case.
struct Keys {
    /// A key of each org of the case.
    orgs: Vec<String>,
    admin: String,
    revoked: String,
}

impl Keys {
    fn token(&self, who: Who, org: usize) -> Option<String> {
        match who {
            Who::Own => Some(self.orgs[org].clone()),
            Who::Other(n) => Some(self.orgs[(org + n) % ORGS].clone()),
            Who::Admin => Some(self.admin.clone()),
            Who::NoKey => None,
            Who::Forged => {
                let own = &self.orgs[org];
                let tail = if own.ends_with("ffff") {
                    "0000"
                } else {
                    "ffff"
                };
                Some(format!("{}{tail}", &own[..own.len() - 4]))
            }
            Who::Revoked => Some(self.revoked.clone()),
        }
    }
}

/// A token of the right shape that no server issued (the keys of the no-auth run).
fn fake_token() -> String {
    let hex = || uuid::Uuid::new_v4().simple().to_string();
    format!("mm_{}_{}{}", &hex()[..12], hex(), hex())
}

/// One case's view of the server: its org names and keys.
struct Case {
    number: usize,
    orgs: Vec<String>,
    keys: Keys,
    client: Client,
    model: Model,
    /// Ids that exist nowhere.
    phantom_uid: String,
    phantom_feature: String,
    phantom_set: String,
    phantom_marker: String,
    next_marker: usize,
}

impl Case {
    fn org(&self, t: usize) -> String {
        self.orgs[org_of(t)].clone()
    }

    fn project(&self, t: usize) -> String {
        format!("p{}", t % PER_ORG)
    }

    fn name(&self, t: usize) -> String {
        format!("{}/{}", self.org(t), self.project(t))
    }

    fn request<T>(&self, message: T, who: Who, t: usize) -> tonic::Request<T> {
        with_key(message, self.keys.token(who, org_of(t)).as_deref())
    }

    fn new_marker(&mut self) -> String {
        // Letters and digits only: one word, whose stem is itself.
        let marker = format!("mk{}x{}q", self.number, self.next_marker);
        self.next_marker += 1;
        self.model.markers.push(marker.clone());
        marker
    }

    /// An episode of an answer to tenant `t`: one of its own live episodes, as stored.
    fn check_episode(&self, t: usize, e: &pb::Episode) -> Result<(), String> {
        let Some(known) = self.model.episode(&e.uid) else {
            return Err(format!(
                "episode {} ({:?}) is none of this case's",
                e.uid, e.content
            ));
        };
        ensure!(
            known.tenant == t,
            "LEAK: episode {} of {} in an answer to {}",
            e.uid,
            self.name(known.tenant),
            self.name(t)
        );
        ensure!(known.live, "deleted episode {} in an answer", e.uid);
        ensure!(
            e.content == known.content,
            "episode {}: content {:?}, stored {:?}",
            e.uid,
            e.content,
            known.content
        );
        ensure!(
            e.session_key == self.name(t),
            "episode {}: session key {:?}",
            e.uid,
            e.session_key
        );
        Ok(())
    }

    /// A feature of an answer to tenant `t`: one of the live features it sees, as stored.
    fn check_feature(&self, t: usize, f: &pb::SemanticFeature) -> Result<(), String> {
        let Some(known) = self.model.features.iter().find(|k| k.id == f.id) else {
            return Err(format!(
                "feature {} ({:?}) is none of this case's",
                f.id, f.value
            ));
        };
        let set = self.model.set(&known.set_id);
        ensure!(
            set.is_some_and(|s| s.visible_to(t)),
            "LEAK: feature {} of set {:?} in an answer to {}",
            f.id,
            set.map(|s| (s.org, s.tenant, s.exists)),
            self.name(t)
        );
        ensure!(known.live, "deleted feature {} in an answer", f.id);
        let citations: BTreeSet<String> = f.citations.iter().cloned().collect();
        ensure!(
            (
                f.set_id.as_str(),
                f.category.as_str(),
                f.tag.as_str(),
                f.feature_name.as_str(),
                f.value.as_str(),
                &citations
            ) == (
                known.set_id.as_str(),
                known.category.as_str(),
                "likes",
                "thing",
                known.value.as_str(),
                &known.citations
            ),
            "feature {}: got {f:?}, stored {known:?}",
            f.id
        );
        Ok(())
    }

    async fn list_episodes(
        &mut self,
        who: Who,
        t: usize,
        page_size: i32,
    ) -> Result<Vec<pb::Episode>, Status> {
        try_collect_pages(async |token| {
            let request = self.request(
                pb::ListMemoriesRequest {
                    org_id: self.org(t),
                    project_id: self.project(t),
                    page_size: Some(page_size),
                    page_token: token,
                    ..Default::default()
                },
                who,
                t,
            );
            let page = self
                .client
                .memory
                .list_memories(request)
                .await?
                .into_inner();
            if page.episodes.len() > page_size as usize || !page.features.is_empty() {
                return Err(Status::internal(format!(
                    "(test) a page of {} episodes and {} features, asked for {page_size}",
                    page.episodes.len(),
                    page.features.len()
                )));
            }
            Ok((page.episodes, page.next_page_token))
        })
        .await
    }

    async fn list_features(
        &mut self,
        who: Who,
        t: usize,
        page_size: i32,
    ) -> Result<Vec<pb::SemanticFeature>, Status> {
        try_collect_pages(async |token| {
            let request = self.request(
                pb::ListMemoriesRequest {
                    org_id: self.org(t),
                    project_id: self.project(t),
                    r#type: MemoryType::Semantic as i32,
                    page_size: Some(page_size),
                    page_token: token,
                    ..Default::default()
                },
                who,
                t,
            );
            let page = self
                .client
                .memory
                .list_memories(request)
                .await?
                .into_inner();
            if page.features.len() > page_size as usize || !page.episodes.is_empty() {
                return Err(Status::internal(format!(
                    "(test) a page of {} features and {} episodes, asked for {page_size}",
                    page.features.len(),
                    page.episodes.len()
                )));
            }
            Ok((page.features, page.next_page_token))
        })
        .await
    }

    /// Every project `ListProjects` gives, page after page.
    async fn list_projects(
        &mut self,
        who: Who,
        org: usize,
        scoped: bool,
    ) -> Result<Vec<(String, String)>, Status> {
        try_collect_pages(async |token| {
            let request = with_key(
                pb::ListProjectsRequest {
                    org_id: scoped.then(|| self.orgs[org].clone()),
                    page_size: Some(100),
                    page_token: token,
                },
                self.keys.token(who, org).as_deref(),
            );
            let page = self
                .client
                .projects
                .list_projects(request)
                .await?
                .into_inner();
            let projects = page.projects.into_iter();
            let projects = projects.map(|p| (p.org_id, p.project_id));
            Ok((projects, page.next_page_token))
        })
        .await
    }

    /// Compares what tenant `t` lists (episodes and features) with the model.
    fn compare_listings(
        &self,
        t: usize,
        episodes: &[pb::Episode],
        features: Option<&[pb::SemanticFeature]>,
    ) -> Result<(), String> {
        for e in episodes {
            self.check_episode(t, e)?;
        }
        let got: Vec<&str> = episodes.iter().map(|e| e.uid.as_str()).collect();
        let want: Vec<&str> = self
            .model
            .live_episodes(t)
            .iter()
            .map(|e| e.uid.as_str())
            .collect();
        ensure!(
            got == want,
            "{} lists episodes {got:?}, expected {want:?}",
            self.name(t)
        );
        if let Some(features) = features {
            for f in features {
                self.check_feature(t, f)?;
            }
            let got: Vec<&str> = features.iter().map(|f| f.id.as_str()).collect();
            let want: Vec<&str> = self
                .model
                .visible_features(t)
                .iter()
                .map(|f| f.id.as_str())
                .collect();
            ensure!(
                got == want,
                "{} lists features {got:?}, expected {want:?}",
                self.name(t)
            );
        }
        Ok(())
    }

    /// A marker to search for: mostly one of the tenant's episodes or features.
    fn pick_marker(&self, t: usize, index: &Index) -> String {
        let own: Vec<String> = self
            .model
            .live_episodes(t)
            .iter()
            .map(|e| e.marker.clone())
            .chain(
                self.model
                    .visible_features(t)
                    .iter()
                    .map(|f| f.marker.clone()),
            )
            .collect();
        pick(
            index,
            &own,
            &self.model.markers,
            self.phantom_marker.clone(),
        )
    }

    fn pick_uid(&self, t: usize, index: &Index) -> String {
        let own: Vec<String> = self
            .model
            .live_episodes(t)
            .iter()
            .map(|e| e.uid.clone())
            .collect();
        let all: Vec<String> = self.model.episodes.iter().map(|e| e.uid.clone()).collect();
        pick(index, &own, &all, self.phantom_uid.clone())
    }

    fn pick_feature(&self, t: usize, index: &Index) -> String {
        let own: Vec<String> = self
            .model
            .visible_features(t)
            .iter()
            .map(|f| f.id.clone())
            .collect();
        let all: Vec<String> = self.model.features.iter().map(|f| f.id.clone()).collect();
        pick(index, &own, &all, self.phantom_feature.clone())
    }

    /// A set: mostly one the tenant sees (with a category, when `categorised`).
    fn pick_set(&self, t: usize, index: &Index, categorised: bool) -> String {
        let own: Vec<String> = self
            .model
            .sets
            .iter()
            .filter(|s| s.visible_to(t))
            .filter(|s| !categorised || s.has_category("profile") || s.has_category("notes"))
            .map(|s| s.id.clone())
            .collect();
        let all: Vec<String> = self.model.sets.iter().map(|s| s.id.clone()).collect();
        pick(index, &own, &all, self.phantom_set.clone())
    }

    /// The tenant an operation is aimed at: mostly one it can do something with (one
    /// without a project for `CreateProject`; one that sees a set, a feature or has
    /// episodes for the calls about those; else one with a project), else any.
    fn resolve(&self, op: &Op) -> usize {
        let m = &self.model;
        let sees_set = |t: usize| m.sets.iter().any(|s| s.visible_to(t));
        let sees_categorised = |t: usize| {
            m.sets
                .iter()
                .any(|s| s.visible_to(t) && (s.has_category("profile") || s.has_category("notes")))
        };
        let sees_feature = |t: usize| !m.visible_features(t).is_empty();
        let has_episodes = |t: usize| !m.live_episodes(t).is_empty();
        let (index, wanted): (&Index, &dyn Fn(usize) -> bool) = match op {
            Op::ListProjects { .. } => return 0,
            Op::CreateProject { t, .. } => (t, &|_| false),
            Op::AddCategory { t, .. } => (t, &sees_set),
            Op::AddFeature { t, .. } => (t, &sees_categorised),
            Op::GetFeature { t, .. }
            | Op::DeleteFeatures { t, .. }
            | Op::ListFeatures { t, .. }
            | Op::SearchFeatures { t, .. } => (t, &sees_feature),
            Op::SearchMemories { t, .. } | Op::DeleteEpisodes { t, .. } => (t, &has_episodes),
            Op::DeleteProject { t, .. }
            | Op::GetProject { t, .. }
            | Op::CountEpisodes { t, .. }
            | Op::AddMemories { t, .. }
            | Op::ListEpisodes { t, .. }
            | Op::GetSetId { t, .. } => (t, &|_| true),
        };
        let create = matches!(op, Op::CreateProject { .. });
        let existing: Vec<usize> = (0..TENANTS).filter(|&t| m.exists[t] != create).collect();
        let special: Vec<usize> = existing.iter().copied().filter(|&t| wanted(t)).collect();
        let preferred = if special.is_empty() {
            existing
        } else {
            special
        };
        let all: Vec<usize> = (0..TENANTS).collect();
        // The last tenant stands for the phantom: it is one of them anyway.
        pick(index, &preferred, &all[..TENANTS - 1], TENANTS - 1)
    }

    /// Applies one operation to the server and the model, and compares.
    async fn step(&mut self, op: &Op) -> Result<(), String> {
        let t = self.resolve(op);
        let name = self.name(t);
        self.apply(op, t).await.map_err(|e| match op {
            Op::ListProjects { .. } => e,
            _ => format!("(aimed at {name}) {e}"),
        })
    }

    async fn apply(&mut self, op: &Op, t: usize) -> Result<(), String> {
        match *op {
            Op::CreateProject { who, .. } => {
                let want = match self.model.refused(who) {
                    Some(code) => Err(code),
                    None if self.model.exists[t] => Err(Code::AlreadyExists),
                    None => Ok(()),
                };
                let request = self.request(
                    pb::CreateProjectRequest {
                        org_id: self.org(t),
                        project_id: self.project(t),
                        description: "isolation model".into(),
                        ..Default::default()
                    },
                    who,
                    t,
                );
                let got = self.client.projects.create_project(request).await;
                if let Some(answer) = outcome(got, want)? {
                    let p = answer.into_inner().project.unwrap_or_default();
                    ensure!(
                        (p.org_id.as_str(), p.project_id.as_str())
                            == (self.org(t).as_str(), self.project(t).as_str()),
                        "created {p:?}"
                    );
                    self.model.exists[t] = true;
                }
            }
            Op::DeleteProject { who, .. } => {
                let want = self.model.gate(who, t);
                let request = self.request(
                    pb::DeleteProjectRequest {
                        org_id: self.org(t),
                        project_id: self.project(t),
                    },
                    who,
                    t,
                );
                let got = self.client.projects.delete_project(request).await;
                if outcome(got, want)?.is_some() {
                    self.model.delete_project(t);
                }
            }
            Op::GetProject { who, .. } => {
                let want = self.model.gate(who, t);
                let request = self.request(
                    pb::GetProjectRequest {
                        org_id: self.org(t),
                        project_id: self.project(t),
                    },
                    who,
                    t,
                );
                let got = self.client.projects.get_project(request).await;
                if let Some(answer) = outcome(got, want)? {
                    let p = answer.into_inner().project.unwrap_or_default();
                    ensure!(
                        (p.org_id.as_str(), p.project_id.as_str())
                            == (self.org(t).as_str(), self.project(t).as_str()),
                        "got {p:?}"
                    );
                }
            }
            Op::ListProjects { who, org, scoped } => {
                // Another org's key may list (its own org) unless it names this one.
                let refused = self
                    .model
                    .refused(who)
                    .filter(|_| !matches!(who, Who::Other(_)));
                let (want, listed_org) = match (refused, self.model.auth, who) {
                    (Some(code), ..) => (Err(code), None),
                    // An org key lists its own org.
                    (None, true, Who::Own) => (Ok(()), Some(org)),
                    (None, true, Who::Other(n)) => (Ok(()), Some((org + n) % ORGS)),
                    (None, ..) => (Ok(()), scoped.then_some(org)),
                };
                // An org key asking for another org is refused.
                let want = match (want, who) {
                    (Ok(()), Who::Other(_)) if self.model.auth && scoped => {
                        Err(Code::PermissionDenied)
                    }
                    (want, _) => want,
                };
                let got = self.list_projects(who, org, scoped).await;
                if let Some(listed) = outcome(got, want)? {
                    let distinct: BTreeSet<&(String, String)> = listed.iter().collect();
                    ensure!(
                        distinct.len() == listed.len(),
                        "a project listed twice: {listed:?}"
                    );
                    if let Some(o) = listed_org {
                        let name = &self.orgs[o];
                        ensure!(
                            listed.iter().all(|(lo, _)| lo == name),
                            "LEAK: listing {name} gave {listed:?}"
                        );
                    }
                    // This case's projects (the listing of every org has others' too).
                    let prefix = format!("c{}o", self.number);
                    let got: BTreeSet<String> = listed
                        .iter()
                        .filter(|(o, _)| o.starts_with(&prefix))
                        .map(|(o, p)| format!("{o}/{p}"))
                        .collect();
                    let want: BTreeSet<String> = (0..TENANTS)
                        .filter(|&t| self.model.exists[t])
                        .filter(|&t| listed_org.is_none_or(|o| org_of(t) == o))
                        .map(|t| self.name(t))
                        .collect();
                    ensure!(got == want, "listed {got:?}, expected {want:?}");
                }
            }
            Op::CountEpisodes { who, .. } => {
                let want = self.model.gate(who, t);
                let request = self.request(
                    pb::GetEpisodeCountRequest {
                        org_id: self.org(t),
                        project_id: self.project(t),
                    },
                    who,
                    t,
                );
                let got = self.client.projects.get_episode_count(request).await;
                if let Some(answer) = outcome(got, want)? {
                    let count = answer.into_inner().count;
                    let expected = self.model.live_episodes(t).len() as i64;
                    ensure!(count == expected, "count {count}, expected {expected}");
                }
            }
            Op::AddMemories {
                who,
                t: _,
                messages,
            } => {
                let want = self.model.gate(who, t);
                let markers: Vec<String> = (0..messages).map(|_| self.new_marker()).collect();
                let contents: Vec<String> = markers
                    .iter()
                    .map(|m| format!("a note about {m} kept here"))
                    .collect();
                let request = self.request(
                    pb::AddMemoriesRequest {
                        org_id: self.org(t),
                        project_id: self.project(t),
                        types: vec![],
                        messages: contents
                            .iter()
                            .map(|content| pb::MemoryMessage {
                                content: content.clone(),
                                producer: "alice".into(),
                                role: "user".into(),
                                ..Default::default()
                            })
                            .collect(),
                    },
                    who,
                    t,
                );
                let got = self.client.memory.add_memories(request).await;
                if let Some(answer) = outcome(got, want)? {
                    let results = answer.into_inner().results;
                    ensure!(results.len() == messages, "{} uids", results.len());
                    for ((r, content), marker) in results.iter().zip(contents).zip(markers) {
                        ensure!(
                            uuid::Uuid::parse_str(&r.uid).is_ok(),
                            "uid {:?} is not a UUID",
                            r.uid
                        );
                        ensure!(
                            self.model.episode(&r.uid).is_none(),
                            "uid {} given twice",
                            r.uid
                        );
                        self.model.episodes.push(ModelEpisode {
                            uid: r.uid.clone(),
                            tenant: t,
                            content,
                            marker,
                            live: true,
                        });
                    }
                }
            }
            Op::SearchMemories {
                who,
                t: _,
                ref marker,
            } => {
                let want = self.model.gate(who, t);
                let marker = self.pick_marker(t, marker);
                let request = self.request(
                    pb::SearchMemoriesRequest {
                        org_id: self.org(t),
                        project_id: self.project(t),
                        query: marker.clone(),
                        top_k: Some(100),
                        ..Default::default()
                    },
                    who,
                    t,
                );
                let got = self.client.memory.search_memories(request).await;
                if let Some(answer) = outcome(got, want)? {
                    let answer = answer.into_inner();
                    let episodic = answer.episodic_memory.unwrap_or_default();
                    let long: Vec<&pb::Episode> = episodic
                        .long_term_memory
                        .iter()
                        .filter_map(|s| s.episode.as_ref())
                        .collect();
                    ensure!(
                        long.len() == episodic.long_term_memory.len(),
                        "a scored episode without its episode"
                    );
                    for e in &long {
                        self.check_episode(t, e)?;
                    }
                    let found: BTreeSet<&str> = long.iter().map(|e| e.uid.as_str()).collect();
                    let matching: BTreeSet<&str> = self
                        .model
                        .live_episodes(t)
                        .iter()
                        .filter(|e| e.marker == marker)
                        .map(|e| e.uid.as_str())
                        .collect();
                    // Neighbours of a hit may come too (the context field); without a
                    // hit in the project, nothing.
                    ensure!(
                        matching.is_subset(&found),
                        "search {marker:?} found {found:?}, not all of {matching:?}"
                    );
                    ensure!(
                        !matching.is_empty() || found.is_empty(),
                        "search {marker:?}, which no live episode of {} holds, found {:?}",
                        self.name(t),
                        long.iter()
                            .map(|e| (&e.uid, &e.content))
                            .collect::<Vec<_>>()
                    );
                    // Short-term memory: the project's most recent episodes, in order.
                    for e in &episodic.short_term_memory {
                        self.check_episode(t, e)?;
                    }
                    let recent: Vec<&str> = episodic
                        .short_term_memory
                        .iter()
                        .map(|e| e.uid.as_str())
                        .collect();
                    let live: Vec<&str> = self
                        .model
                        .live_episodes(t)
                        .iter()
                        .map(|e| e.uid.as_str())
                        .collect();
                    ensure!(
                        live.ends_with(&recent) && recent.is_empty() == live.is_empty(),
                        "short-term memory {recent:?} of {live:?}"
                    );
                    for f in &answer.semantic_memory {
                        self.check_feature(t, f)?;
                    }
                    let got: BTreeSet<&str> = answer
                        .semantic_memory
                        .iter()
                        .map(|f| f.id.as_str())
                        .collect();
                    let want: BTreeSet<&str> = self
                        .model
                        .visible_features(t)
                        .iter()
                        .filter(|f| f.marker == marker)
                        .map(|f| f.id.as_str())
                        .collect();
                    ensure!(
                        got == want,
                        "search {marker:?}: semantic memory {got:?}, expected {want:?}"
                    );
                }
            }
            Op::ListEpisodes {
                who,
                t: _,
                page_size,
            } => {
                let want = self.model.gate(who, t);
                let got = self.list_episodes(who, t, page_size).await;
                if let Some(episodes) = outcome(got, want)? {
                    self.compare_listings(t, &episodes, None)?;
                }
            }
            Op::DeleteEpisodes {
                who,
                t: _,
                ref uids,
            } => {
                let uids: Vec<String> = uids.iter().map(|i| self.pick_uid(t, i)).collect();
                let distinct: BTreeSet<&String> = uids.iter().collect();
                // Validated before the project is looked up.
                let want = match self.model.refused(who) {
                    Some(code) => Err(code),
                    None if uids.is_empty() => Err(Code::InvalidArgument),
                    None if !self.model.exists[t] => Err(Code::NotFound),
                    // All or none: an episode of another project is not found.
                    None if !uids.iter().all(|u| {
                        self.model
                            .episode(u)
                            .is_some_and(|e| e.live && e.tenant == t)
                    }) =>
                    {
                        Err(Code::NotFound)
                    }
                    None => Ok(()),
                };
                let request = self.request(
                    pb::DeleteEpisodicMemoriesRequest {
                        org_id: self.org(t),
                        project_id: self.project(t),
                        episode_ids: uids.clone(),
                    },
                    who,
                    t,
                );
                let got = self.client.memory.delete_episodic_memories(request).await;
                if let Some(answer) = outcome(got, want)? {
                    let count = answer.into_inner().deleted_count;
                    ensure!(
                        count == distinct.len() as i64,
                        "deleted {count}, expected {}",
                        distinct.len()
                    );
                    for e in &mut self.model.episodes {
                        if distinct.contains(&e.uid) {
                            e.live = false;
                        }
                    }
                    self.model.drop_orphaned_features();
                }
            }
            Op::GetSetId {
                who,
                t: _,
                org_level,
            } => {
                let want = self.model.gate(who, t);
                let (tags, metadata) = if org_level {
                    (vec![], Default::default())
                } else {
                    (
                        vec!["producer_id".to_string()],
                        [("producer_id".to_string(), "alice".to_string())].into(),
                    )
                };
                let request = self.request(
                    pb::GetSetIdRequest {
                        org_id: self.org(t),
                        project_id: self.project(t),
                        is_org_level: org_level,
                        metadata_tags: tags,
                        set_metadata: metadata,
                    },
                    who,
                    t,
                );
                let got = self.client.semantic.get_set_id(request).await;
                if let Some(answer) = outcome(got, want)? {
                    let id = answer.into_inner().set_id;
                    let slot = (org_of(t), (!org_level).then_some(t));
                    match self.model.set_ids.get(&slot) {
                        Some(known) => {
                            ensure!(&id == known, "set id {id}, before {known}")
                        }
                        None => {
                            ensure!(
                                !self.model.set_ids.values().any(|other| other == &id),
                                "{id} is already another set's id"
                            );
                            self.model.set_ids.insert(slot, id.clone());
                        }
                    }
                    match self.model.sets.iter_mut().find(|s| s.id == id) {
                        Some(set) => set.exists = true,
                        None => self.model.sets.push(ModelSet {
                            id,
                            org: org_of(t),
                            tenant: slot.1,
                            exists: true,
                            categories: BTreeSet::new(),
                        }),
                    }
                }
            }
            Op::AddCategory { who, t: _, ref set } => {
                let set_id = self.pick_set(t, set, false);
                let set = self.model.set(&set_id);
                let want = self.model.gate(who, t).and_then(|()| match set {
                    Some(s) if s.visible_to(t) && s.categories.contains("notes") => {
                        Err(Code::AlreadyExists)
                    }
                    Some(s) if s.visible_to(t) => Ok(()),
                    _ => Err(Code::NotFound),
                });
                let request = self.request(
                    pb::AddCategoryRequest {
                        org_id: self.org(t),
                        project_id: self.project(t),
                        set_id: set_id.clone(),
                        category_name: "notes".into(),
                        prompt: "extract notes".into(),
                        description: "notes".into(),
                    },
                    who,
                    t,
                );
                let got = self.client.semantic.add_category(request).await;
                if outcome(got, want)?.is_some() {
                    let s = self.model.sets.iter_mut().find(|s| s.id == set_id);
                    s.expect("a known set").categories.insert("notes".into());
                }
            }
            Op::AddFeature {
                who,
                t: _,
                ref set,
                ref category,
                ref cite,
            } => {
                let set_id = self.pick_set(t, set, true);
                let names = ["profile", "notes"];
                let has: Vec<&str> = names
                    .into_iter()
                    .filter(|n| self.model.set(&set_id).is_some_and(|s| s.has_category(n)))
                    .collect();
                // "facts" is a category of no set.
                let category = pick(category, &has, &names, "facts");
                let cited: Vec<String> = cite.iter().map(|i| self.pick_uid(t, i)).collect();
                let set = self.model.set(&set_id);
                let want = self.model.gate(who, t).and_then(|()| {
                    // `profile` is built in: a hand-added feature may use it in any set.
                    let in_set = set.is_some_and(|s| {
                        s.visible_to(t) && (s.has_category(category) || category == "profile")
                    });
                    // A feature cites episodes of the caller's project only.
                    let citable = cited.iter().all(|u| {
                        self.model
                            .episode(u)
                            .is_some_and(|e| e.live && e.tenant == t)
                    });
                    if in_set && citable {
                        Ok(())
                    } else {
                        Err(Code::NotFound)
                    }
                });
                let marker = self.new_marker();
                let value = format!("likes {marker}");
                let request = self.request(
                    pb::AddFeatureRequest {
                        org_id: self.org(t),
                        project_id: self.project(t),
                        set_id: set_id.clone(),
                        category_name: category.into(),
                        tag: "likes".into(),
                        feature: "thing".into(),
                        value: value.clone(),
                        feature_metadata: None,
                        citations: cited.clone(),
                    },
                    who,
                    t,
                );
                let got = self.client.semantic.add_feature(request).await;
                if let Some(answer) = outcome(got, want)? {
                    let id = answer.into_inner().feature_id;
                    ensure!(
                        !self.model.features.iter().any(|f| f.id == id),
                        "feature id {id} given twice"
                    );
                    self.model.features.push(ModelFeature {
                        id,
                        set_id,
                        category: category.into(),
                        value,
                        marker,
                        citations: cited.into_iter().collect(),
                        live: true,
                    });
                }
            }
            Op::GetFeature {
                who,
                t: _,
                ref feature,
            } => {
                let id = self.pick_feature(t, feature);
                let visible = self
                    .model
                    .features
                    .iter()
                    .any(|f| f.id == id && self.model.feature_visible(f, t));
                let want =
                    self.model
                        .gate(who, t)
                        .and(if visible { Ok(()) } else { Err(Code::NotFound) });
                let request = self.request(
                    pb::GetFeatureRequest {
                        org_id: self.org(t),
                        project_id: self.project(t),
                        feature_id: id.clone(),
                        load_citations: true,
                    },
                    who,
                    t,
                );
                let got = self.client.semantic.get_feature(request).await;
                if let Some(answer) = outcome(got, want)? {
                    let f = answer.into_inner().feature.unwrap_or_default();
                    ensure!(f.id == id, "asked for {id}, got {}", f.id);
                    self.check_feature(t, &f)?;
                }
            }
            Op::DeleteFeatures {
                who,
                t: _,
                ref features,
            } => {
                let ids: Vec<String> = features.iter().map(|i| self.pick_feature(t, i)).collect();
                let distinct: BTreeSet<&String> = ids.iter().collect();
                // The project is looked up before the request is validated.
                let want = self.model.gate(who, t).and_then(|()| {
                    if ids.is_empty() {
                        return Err(Code::InvalidArgument);
                    }
                    let all_visible = ids.iter().all(|id| {
                        self.model
                            .features
                            .iter()
                            .any(|f| &f.id == id && self.model.feature_visible(f, t))
                    });
                    if all_visible {
                        Ok(())
                    } else {
                        Err(Code::NotFound)
                    }
                });
                let request = self.request(
                    pb::DeleteSemanticMemoriesRequest {
                        org_id: self.org(t),
                        project_id: self.project(t),
                        feature_ids: ids.clone(),
                    },
                    who,
                    t,
                );
                let got = self.client.memory.delete_semantic_memories(request).await;
                if let Some(answer) = outcome(got, want)? {
                    let count = answer.into_inner().deleted_count;
                    ensure!(
                        count == distinct.len() as i64,
                        "deleted {count}, expected {}",
                        distinct.len()
                    );
                    for f in &mut self.model.features {
                        if distinct.contains(&f.id) {
                            f.live = false;
                        }
                    }
                }
            }
            Op::ListFeatures {
                who,
                t: _,
                page_size,
            } => {
                let want = self.model.gate(who, t);
                let got = self.list_features(who, t, page_size).await;
                if let Some(features) = outcome(got, want)? {
                    for f in &features {
                        self.check_feature(t, f)?;
                    }
                    let got: Vec<&str> = features.iter().map(|f| f.id.as_str()).collect();
                    let want: Vec<&str> = self
                        .model
                        .visible_features(t)
                        .iter()
                        .map(|f| f.id.as_str())
                        .collect();
                    ensure!(got == want, "listed features {got:?}, expected {want:?}");
                }
            }
            Op::SearchFeatures {
                who,
                t: _,
                ref marker,
            } => {
                let want = self.model.gate(who, t);
                let marker = self.pick_marker(t, marker);
                let request = self.request(
                    pb::SearchFeaturesRequest {
                        org_id: self.org(t),
                        project_id: self.project(t),
                        query: marker.clone(),
                        top_k: Some(100),
                        ..Default::default()
                    },
                    who,
                    t,
                );
                let got = self.client.semantic.search_features(request).await;
                if let Some(answer) = outcome(got, want)? {
                    let features = answer.into_inner().features;
                    for f in &features {
                        self.check_feature(t, f)?;
                    }
                    let got: BTreeSet<&str> = features.iter().map(|f| f.id.as_str()).collect();
                    let want: BTreeSet<&str> = self
                        .model
                        .visible_features(t)
                        .iter()
                        .filter(|f| f.marker == marker)
                        .map(|f| f.id.as_str())
                        .collect();
                    ensure!(
                        got == want,
                        "search {marker:?} found {got:?}, expected {want:?}"
                    );
                }
            }
        }
        Ok(())
    }

    /// After the case: what every tenant holds, read as the admin, against the model
    /// (so that a refused call that changed something anyway is caught).
    async fn sweep(&mut self) -> Result<(), String> {
        for t in 0..TENANTS {
            if !self.model.exists[t] {
                let request = self.request(
                    pb::GetProjectRequest {
                        org_id: self.org(t),
                        project_id: self.project(t),
                    },
                    Who::Admin,
                    t,
                );
                let got = self.client.projects.get_project(request).await;
                outcome(got, Err(Code::NotFound)).map_err(|e| format!("{}: {e}", self.name(t)))?;
                continue;
            }
            let episodes = self
                .list_episodes(Who::Admin, t, 50)
                .await
                .map_err(|s| format!("listing {}: {s:?}", self.name(t)))?;
            let features = self
                .list_features(Who::Admin, t, 50)
                .await
                .map_err(|s| format!("listing {}: {s:?}", self.name(t)))?;
            self.compare_listings(t, &episodes, Some(&features))?;
        }
        Ok(())
    }
}

/// One server and what its cases share.
struct Harness {
    auth: bool,
    /// Where the server's store is, for making keys.
    store: StoreLocation,
    admin: String,
    client: Client,
    cases: AtomicUsize,
    /// Calls made, by operation and expected outcome.
    tally: std::sync::Mutex<std::collections::BTreeMap<(String, String), usize>>,
}

impl Harness {
    async fn keys(&self, orgs: &[String]) -> Keys {
        if !self.auth {
            return Keys {
                orgs: orgs.iter().map(|_| fake_token()).collect(),
                admin: fake_token(),
                revoked: fake_token(),
            };
        }
        let make = |scope| async move {
            memmachine::auth::manage::create(&self.store, scope, "isolation model")
                .await
                .expect("create a key")
                .token
        };
        let mut keys = Vec::new();
        for org in orgs {
            keys.push(make(KeyScope::Org(org.clone())).await);
        }
        let revoked = make(KeyScope::Org(orgs[0].clone())).await;
        let id = revoked.split('_').nth(1).expect("a key id");
        assert!(
            memmachine::auth::manage::revoke(&self.store, id)
                .await
                .expect("revoke")
        );
        Keys {
            orgs: keys,
            admin: self.admin.clone(),
            revoked,
        }
    }

    async fn run_case(&self, ops: &[Op]) -> Result<(), String> {
        let number = self.cases.fetch_add(1, Ordering::SeqCst);
        let orgs: Vec<String> = (0..ORGS).map(|o| format!("c{number}o{o}")).collect();
        let keys = self.keys(&orgs).await;
        let mut case = Case {
            number,
            orgs,
            keys,
            client: self.client.clone(),
            model: Model::new(self.auth),
            phantom_uid: uuid::Uuid::new_v4().to_string(),
            phantom_feature: uuid::Uuid::new_v4().to_string(),
            phantom_set: format!(
                "mem_user_set_{}",
                &uuid::Uuid::new_v4().simple().to_string()[..24]
            ),
            phantom_marker: format!("mk{number}xnoneq"),
            next_marker: 0,
        };
        // What each step was, as resolved against the model, for a failure's report.
        let mut trace: Vec<String> = Vec::new();
        for (step, op) in ops.iter().enumerate() {
            LAST_WANT.with(|last| last.set(None));
            let target = match op {
                Op::ListProjects { org, scoped, .. } => {
                    format!(
                        "org {}{}",
                        case.orgs[*org],
                        if *scoped { "" } else { " (unscoped)" }
                    )
                }
                _ => case.name(case.resolve(op)),
            };
            let result = case.step(op).await;
            let want = match LAST_WANT.with(|last| last.get()) {
                Some(Ok(())) => "ok".to_string(),
                Some(Err(code)) => format!("{code:?}"),
                None => "-".to_string(),
            };
            trace.push(format!(
                "{step}: {} by {:?} at {target}: expected {want}{}",
                op.name(),
                op.who(),
                if result.is_err() { " <- differs" } else { "" }
            ));
            if let Err(e) = result {
                return Err(format!(
                    "case {number} (orgs c{number}o*), step {step} {op:?}: {e}\nsteps:\n  {}",
                    trace.join("\n  ")
                ));
            }
            *self
                .tally
                .lock()
                .unwrap()
                .entry((op.name(), want))
                .or_default() += 1;
        }
        case.sweep().await.map_err(|e| {
            format!(
                "case {number}, after the last step: {e}\nsteps:\n  {}",
                trace.join("\n  ")
            )
        })
    }
}

/// Cases per configuration (`MEMMACHINE_ISOLATION_CASES` overrides).
fn cases() -> u32 {
    std::env::var("MEMMACHINE_ISOLATION_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(64)
}

fn run(auth: bool) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["--embedder", "none"];
    if auth {
        args.push("--auth");
    }
    let server = ServerProcess::start(dir.path(), &args);
    let admin = if auth {
        common::keys::create_key(dir.path(), &["--admin", "--label", "isolation model"])
    } else {
        fake_token()
    };
    let store = if common::postgres::servers_on_postgres() {
        StoreLocation::Postgres(common::postgres::database_for_dir(dir.path()))
    } else {
        StoreLocation::Sqlite(dir.path().to_path_buf())
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let channel = runtime.block_on(async {
        tonic::transport::Endpoint::from_shared(server.url())
            .unwrap()
            .connect()
            .await
            .expect("connect")
    });
    let harness = Harness {
        auth,
        store,
        admin,
        client: Client {
            projects: ProjectServiceClient::new(channel.clone()),
            memory: MemoryServiceClient::new(channel.clone()),
            semantic: SemanticServiceClient::new(channel),
        },
        cases: AtomicUsize::new(0),
        tally: Default::default(),
    };
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: 500,
        ..Config::default()
    });
    let started = std::time::Instant::now();
    let result = runner.run(&ops(), |ops| {
        runtime
            .block_on(harness.run_case(&ops))
            .map_err(TestCaseError::fail)
    });
    let tally = harness.tally.lock().unwrap();
    eprintln!(
        "{} cases (auth: {auth}), {} operations compared, in {:.1?}; by operation and outcome: {:?}",
        harness.cases.load(Ordering::SeqCst),
        tally.values().sum::<usize>(),
        started.elapsed(),
        *tally
    );
    drop(tally);
    if let Err(err) = result {
        panic!("{err}");
    }
    drop(server);
}

#[test]
fn without_auth_every_answer_matches_the_model() {
    run(false);
}

#[test]
fn with_api_keys_every_answer_matches_the_model() {
    run(true);
}
