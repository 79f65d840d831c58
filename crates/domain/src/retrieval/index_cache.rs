//! The in-memory indexes of the projects, a cache the domain owns over the store's rows.
//! A project's index is loaded on demand (paged from the store) and, before every read,
//! brought up to the store's latest change of that project through its change feed (one
//! cheap query when nothing changed). So every replica over one database answers the
//! same, and a write acknowledged anywhere is seen by any read that starts after it.
//! The cache holds at most `budget` bytes (each index's counted heap), evicting the
//! least recently used projects first, down to `EVICT_TO` of the budget (the project
//! being read always stays).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use super::project_index::ProjectIndex;
use crate::error::{Error, Result};
use crate::model::{ChangeSeq, Project, ProjectKey};
use crate::store::{Change, FeedHead, Store};
use memmachine_core::access::{Access, OpenProject, ProjectAccess};

/// Episodes read per page when loading a project, and log entries per catch-up read.
const PAGE: usize = 2048;

/// Most episodes of a project whose reads run on the caller's thread (larger ones on a
/// blocking thread, not to hold up the other tasks of an async worker).
const RANK_HERE: usize = 20_000;

/// Eviction frees down to this fraction of the budget (15/16), so a full cache does
/// not sort its projects again on every load.
const EVICT_TO: (usize, usize) = (15, 16);

/// One request's view of a project's index: at least as new as the feed head read when
/// it was taken (a concurrent catch-up only moves it forward).
#[derive(Clone)]
pub struct IndexView {
    index: Arc<RwLock<ProjectIndex>>,
}

impl IndexView {
    /// Runs `f` on the index.
    pub async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&ProjectIndex) -> T + Send + 'static,
    {
        // A small project ranks in less time than a hop to a blocking thread takes.
        {
            let held = self.index.read().expect("index lock");
            if held.len() <= RANK_HERE {
                return Ok(f(&held));
            }
        }
        let index = self.index.clone();
        tokio::task::spawn_blocking(move || f(&index.read().expect("index lock")))
            .await
            .map_err(|err| Error::Internal(format!("index read failed: {err}")))
    }
}

pub struct IndexCache {
    store: Arc<dyn Store>,
    budget: usize,
    slots: Mutex<Slots>,
    clock: AtomicU64,
    /// Indexes dropped so far (evicted, or their project gone): the process may then
    /// hand freed memory back to the system.
    dropped: AtomicU64,
}

/// The loaded projects, and the sum of their bytes (kept as they change: summing ten
/// thousand on every read cost a fifth of the CPU).
#[derive(Default)]
struct Slots {
    by_key: HashMap<ProjectKey, Arc<Slot>>,
    total: usize,
}

impl Slots {
    fn remove(&mut self, key: &ProjectKey) -> Option<usize> {
        let slot = self.by_key.remove(key)?;
        let bytes = slot.bytes.load(Ordering::Relaxed);
        self.total -= bytes;
        Some(bytes)
    }
}

#[derive(Default)]
struct Slot {
    /// Serialises loading and catching up; held only briefly when the index is current.
    state: tokio::sync::Mutex<Option<Loaded>>,
    last_used: AtomicU64,
    bytes: AtomicUsize,
}

struct Loaded {
    head: FeedHead,
    embedder: Option<String>,
    index: Arc<RwLock<ProjectIndex>>,
    /// The project's row as the last search read it beside `head`.
    project: Option<Project>,
}

/// A project's index and row as this server last saw them, with no read of the store:
/// a search ranks on it and its one read tells whether it was still current.
pub struct Warm {
    pub project: OpenProject,
    pub head: FeedHead,
    pub embedder: Option<String>,
    pub view: IndexView,
}

impl IndexCache {
    pub fn new(store: Arc<dyn Store>, budget: usize) -> IndexCache {
        IndexCache {
            store,
            budget,
            slots: Mutex::default(),
            clock: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    /// Runs `f` on the project's index, current as of the store's latest change, with
    /// the vectors of `embedder` (an id). `NotFound` when the project does not exist.
    pub async fn read<T, F>(&self, key: &ProjectAccess, embedder: Option<&str>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&ProjectIndex) -> T + Send + 'static,
    {
        self.view(key, embedder).await?.read(f).await
    }

    /// The project's index as of the store's latest change (one read of its feed head),
    /// for every step of one request. `NotFound` when the project does not exist.
    pub async fn view(&self, key: &ProjectAccess, embedder: Option<&str>) -> Result<IndexView> {
        let head = match crate::round_trips::call(self.store.feed_head(key)).await {
            Ok(head) => head,
            Err(err) => {
                if matches!(err, Error::NotFound(_)) {
                    // Deleted (here or by another replica): its index goes too.
                    self.forget(key);
                }
                return Err(err);
            }
        };
        let index = self.current(key, head, embedder).await?;
        Ok(IndexView { index })
    }

    /// The project's index and row as last seen (`None` when not loaded, or no search
    /// has read its row yet). No read of the store.
    pub async fn warm(&self, key: &ProjectAccess) -> Option<Warm> {
        let slot = self
            .slots
            .lock()
            .expect("index slots")
            .by_key
            .get(key)?
            .clone();
        // Used: eviction keeps it as it keeps the ones read through `view`.
        let tick = self.clock.fetch_add(1, Ordering::Relaxed);
        slot.last_used.store(tick, Ordering::Relaxed);
        let state = slot.state.lock().await;
        let loaded = state.as_ref()?;
        Some(Warm {
            project: key.open(loaded.project.clone()?).ok()?,
            head: loaded.head,
            embedder: loaded.embedder.clone(),
            view: IndexView {
                index: loaded.index.clone(),
            },
        })
    }

    /// The project's index brought to `head` (read by the caller), and `project` kept
    /// as the row read with it.
    pub async fn view_at(
        &self,
        project: &OpenProject,
        head: FeedHead,
        embedder: Option<&str>,
    ) -> Result<IndexView> {
        let index = self.current(project.access(), head, embedder).await?;
        self.remember(project, head).await;
        Ok(IndexView { index })
    }

    /// Keeps `project`, read at `head`, beside its index when the index is at `head`.
    pub async fn remember(&self, project: &OpenProject, head: FeedHead) {
        let slot = self
            .slots
            .lock()
            .expect("index slots")
            .by_key
            .get(&project.key)
            .cloned();
        let Some(slot) = slot else { return };
        let mut state = slot.state.lock().await;
        if let Some(loaded) = state.as_mut().filter(|l| l.head == head) {
            loaded.project = Some(project.project().clone());
        }
    }

    /// Drops the project's index (the project is gone).
    pub fn forget(&self, key: &ProjectKey) {
        if self
            .slots
            .lock()
            .expect("index slots")
            .remove(key)
            .is_some()
        {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How many indexes were dropped since the cache began (a count that only grows).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Bytes held, and projects loaded.
    pub fn usage(&self) -> (usize, usize) {
        let slots = self.slots.lock().expect("index slots");
        (slots.total, slots.by_key.len())
    }

    /// Loads projects (in key order) while the budget lasts, so first reads need not
    /// wait. Returns how many were loaded.
    pub async fn warm_up(
        &self,
        embedder_of: impl Fn(&crate::model::Project) -> Option<String>,
    ) -> Result<usize> {
        let (mut after, mut loaded) = (None, 0);
        loop {
            let page = self.store.list_projects(None, after.as_ref(), 500).await?;
            for project in &page {
                if self.usage().0 >= self.budget {
                    return Ok(loaded);
                }
                let embedder = embedder_of(project);
                // Startup warm-up: no caller asked.
                let access = Access::system(project.key.clone());
                match self.read(&access, embedder.as_deref(), |_| ()).await {
                    Ok(()) => loaded += 1,
                    // Deleted meanwhile.
                    Err(Error::NotFound(_)) => {}
                    Err(err) => return Err(err),
                }
            }
            match page.last() {
                Some(last) if page.len() == 500 => after = Some(last.key.clone()),
                _ => return Ok(loaded),
            }
        }
    }

    async fn current(
        &self,
        key: &ProjectAccess,
        head: FeedHead,
        embedder: Option<&str>,
    ) -> Result<Arc<RwLock<ProjectIndex>>> {
        let slot = self.slot(key);
        let mut state = slot.state.lock().await;
        if let Some(loaded) = state.as_mut() {
            let same =
                loaded.head.project == head.project && loaded.embedder.as_deref() == embedder;
            if !same || !self.catch_up(loaded, head.change).await? {
                *state = None;
            }
        }
        if state.is_none() {
            *state = Some(self.load(key, head, embedder).await?);
        }
        let loaded = state.as_ref().expect("loaded above");
        let (bytes, graph_wanted) = {
            let index = loaded.index.read().expect("index lock");
            (index.estimated_bytes(), index.graph_wanted())
        };
        let index = loaded.index.clone();
        drop(state);
        if graph_wanted {
            build_graph_later(index.clone());
        }
        self.account(key, &slot, bytes);
        Ok(index)
    }

    fn slot(&self, key: &ProjectKey) -> Arc<Slot> {
        let tick = self.clock.fetch_add(1, Ordering::Relaxed);
        let slot = self
            .slots
            .lock()
            .expect("index slots")
            .by_key
            .entry(key.clone())
            .or_default()
            .clone();
        slot.last_used.store(tick, Ordering::Relaxed);
        slot
    }

    /// Applies the project's changes up to `target`; false when the log no longer
    /// reaches back to what the index holds (it must be loaded afresh).
    async fn catch_up(&self, loaded: &mut Loaded, target: ChangeSeq) -> Result<bool> {
        while loaded.head.change < target {
            let Some(read) = crate::round_trips::call(self.store.changes_since(
                loaded.head.project,
                loaded.head.change,
                loaded.embedder.as_deref(),
                PAGE,
            ))
            .await?
            else {
                return Ok(false);
            };
            if read.through <= loaded.head.change {
                break;
            }
            loaded.head.change = read.through;
            let index = loaded.index.clone();
            tokio::task::spawn_blocking(move || apply(&index, read.changes))
                .await
                .map_err(|err| Error::Internal(format!("index update failed: {err}")))?;
        }
        Ok(true)
    }

    /// Brings the project's index, if loaded, to the store's latest change (a writer's
    /// own catch-up, so the searches after a large write do not pay for it). Loads
    /// nothing; an index the feed no longer reaches is dropped, to load on next use.
    pub async fn refresh(&self, key: &ProjectAccess) -> Result<()> {
        let slot = self
            .slots
            .lock()
            .expect("index slots")
            .by_key
            .get(key)
            .cloned();
        let Some(slot) = slot else { return Ok(()) };
        let head = crate::round_trips::call(self.store.feed_head(key)).await?;
        let mut state = slot.state.lock().await;
        let Some(loaded) = state.as_mut() else {
            return Ok(());
        };
        if loaded.head.project != head.project || !self.catch_up(loaded, head.change).await? {
            *state = None;
            drop(state);
            self.account(key, &slot, 0);
            return Ok(());
        }
        let bytes = loaded.index.read().expect("index lock").estimated_bytes();
        drop(state);
        self.account(key, &slot, bytes);
        Ok(())
    }

    /// Builds the project's index from its stored episodes, then catches up with what
    /// was written while it read (applying a change twice is harmless).
    async fn load(
        &self,
        key: &ProjectAccess,
        head: FeedHead,
        embedder: Option<&str>,
    ) -> Result<Loaded> {
        let started = std::time::Instant::now();
        let index = Arc::new(RwLock::new(ProjectIndex::new()));
        let mut after_seq = i64::MIN;
        // The next page is read while the last one is indexed.
        let mut indexing: Option<tokio::task::JoinHandle<()>> = None;
        let failed = |err| Error::Internal(format!("index load failed: {err}"));
        loop {
            let page = crate::round_trips::call(self.store.index_page(
                head.project,
                embedder,
                after_seq,
                PAGE,
            ))
            .await;
            if let Some(task) = indexing.take() {
                task.await.map_err(failed)?;
            }
            let page = page?;
            let Some(last) = page.last() else { break };
            after_seq = last.episode.sequence_num;
            let full = page.len() == PAGE;
            let index = index.clone();
            indexing = Some(tokio::task::spawn_blocking(move || {
                let mut index = index.write().expect("index lock");
                for stored in page {
                    index.insert_stored(stored);
                }
            }));
            if !full {
                break;
            }
        }
        if let Some(task) = indexing.take() {
            task.await.map_err(failed)?;
        }
        let mut loaded = Loaded {
            head,
            embedder: embedder.map(str::to_string),
            index,
            project: None,
        };
        let latest = crate::round_trips::call(self.store.feed_head(key)).await?;
        if latest.project == head.project {
            self.catch_up(&mut loaded, latest.change).await?;
        }
        let index = loaded.index.clone();
        tokio::task::spawn_blocking(move || index.write().expect("index lock").finish_load())
            .await
            .map_err(failed)?;
        let (episodes, bytes) = {
            let index = loaded.index.read().expect("index lock");
            (index.len(), index.estimated_bytes())
        };
        tracing::info!(
            project = %key,
            episodes,
            bytes,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "project index loaded"
        );
        Ok(loaded)
    }

    /// Records `slot`'s (of `key`) bytes in the total, then forgets the least recently
    /// used projects (never `key`) while over budget.
    fn account(&self, key: &ProjectKey, slot: &Arc<Slot>, bytes: usize) {
        let mut slots = self.slots.lock().expect("index slots");
        // A slot evicted meanwhile is no longer counted.
        if !slots.by_key.get(key).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            return;
        }
        let before = slot.bytes.swap(bytes, Ordering::Relaxed);
        slots.total = slots.total - before + bytes;
        if slots.total <= self.budget {
            return;
        }
        let target = self.budget / EVICT_TO.1 * EVICT_TO.0;
        let mut by_age: Vec<(u64, ProjectKey)> = slots
            .by_key
            .iter()
            .filter(|(k, _)| *k != key)
            .map(|(k, s)| (s.last_used.load(Ordering::Relaxed), k.clone()))
            .collect();
        by_age.sort_unstable_by_key(|(tick, _)| *tick);
        for (_, old) in by_age {
            if slots.total <= target {
                break;
            }
            if let Some(bytes) = slots.remove(&old) {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(project = %old, bytes, "project index evicted");
            }
        }
    }
}

/// Changes applied under one hold of the index's write lock: a page of the feed
/// (thousands of removals after a forget) at once kept searches of the project waiting.
const APPLY_SLICE: usize = 128;

/// Applies `changes` in order, releasing the write lock between slices so reads of the
/// project get in between (each sees a prefix of the page, as a read racing the
/// writer's commit would).
fn apply(index: &RwLock<ProjectIndex>, changes: Vec<Change>) {
    let mut changes = changes.into_iter().peekable();
    while changes.peek().is_some() {
        let mut index = index.write().expect("index lock");
        for change in changes.by_ref().take(APPLY_SLICE) {
            match change {
                Change::Added(stored) => index.insert_stored(stored),
                Change::Removed(handle) => index.remove(handle.raw()),
                Change::Vector { handle, vector } => {
                    index.set_vector(handle.raw(), vector.into_boxed_slice())
                }
            }
        }
    }
}

/// Builds the project's vector graph on a blocking thread, off the index: reads go on
/// meanwhile (scanning vectors), and it is installed with what changed in between.
fn build_graph_later(index: Arc<RwLock<ProjectIndex>>) {
    let input = {
        let mut index = index.write().expect("index lock");
        if !index.graph_wanted() {
            return;
        }
        index.begin_graph()
    };
    tokio::task::spawn_blocking(move || {
        let built = ProjectIndex::build_graph(input, &index);
        index.write().expect("index lock").finish_graph(built);
    });
}

/// Prunes the change log now and then, keeping `retention` of it (`--change-feed-retention`:
/// watchers resume within it; a cached index further behind reloads); runs until the
/// store is dropped by everyone else. A short retention (tests) is pruned as often.
pub fn spawn_feed_pruner(store: &Arc<dyn Store>, retention: Duration) {
    let weak = Arc::downgrade(store);
    let every = retention.clamp(Duration::from_millis(100), Duration::from_secs(60));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(store) = weak.upgrade() else { return };
            let before = chrono::Utc::now().timestamp_micros() - retention.as_micros() as i64;
            match store.prune_changes(before).await {
                Ok(0) => {}
                Ok(dropped) => tracing::debug!(dropped, "change log pruned"),
                Err(err) => tracing::warn!(error = %err, "pruning the change log failed"),
            }
        }
    });
}
