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
use super::segment::{self, Expected, Segments};
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
    /// Where projects' indexes are persisted (`None`: rebuilt from rows on every start).
    segments: Option<Arc<Segments>>,
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
    /// Changes applied since the index's last segment (`usize::MAX`: it has none).
    unsaved: usize,
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
            segments: None,
            dropped: AtomicU64::new(0),
        }
    }

    /// Persists projects' indexes as segments in `segments` and reads them on load.
    pub fn with_segments(mut self, segments: Arc<Segments>) -> IndexCache {
        self.segments = Some(segments);
        self
    }

    /// Deletes the project's segments (episodes of it were erased, or it was): returns
    /// once no file holds what was erased. Called after the store's deletion.
    pub async fn erase(&self, key: &ProjectAccess) {
        let Some(segments) = self.segments.clone() else {
            return;
        };
        // The position after the deletion: an index behind it may still hold what was
        // erased, so no segment of one is written from now on.
        let after = match self.store.feed_head(key).await {
            Ok(head) => Some((head.project.raw(), head.change.raw())),
            Err(_) => {
                self.forget(key);
                None
            }
        };
        let owned = ProjectKey::clone(key);
        let erased = tokio::task::spawn_blocking(move || segments.erase(&owned, after)).await;
        if let Err(err) = erased {
            tracing::warn!(error = %err, "erasing index segments failed");
        }
        // Written again once past the erasure: now if the index is loaded (caught up to
        // it here: searches of an index already current would not write it), else by
        // its next read.
        let Some(segments) = self.segments.clone() else {
            return;
        };
        let erasures = segments.erasures();
        let slot = self
            .slots
            .lock()
            .expect("index slots")
            .by_key
            .get(&**key)
            .cloned();
        let Some(slot) = slot else { return };
        let mut state = slot.state.lock().await;
        let Some(loaded) = state.as_mut() else { return };
        loaded.unsaved = usize::MAX;
        let Some((project, change)) = after else {
            return;
        };
        if loaded.head.project.raw() != project
            || !matches!(
                self.catch_up(loaded, ChangeSeq::from_raw(change)).await,
                Ok(true)
            )
        {
            return;
        }
        if loaded.index.read().expect("index lock").len() >= segment::WRITE_MIN_EPISODES {
            loaded.unsaved = 0;
            write_later(segments, key, loaded, erasures);
        }
    }

    /// Writes every loaded project's index with changes since its segment, one at a
    /// time, until `deadline` (graceful shutdown: a restart then replays less).
    pub async fn save_all(&self, deadline: std::time::Instant) {
        let Some(segments) = self.segments.clone() else {
            return;
        };
        let slots: Vec<(ProjectKey, Arc<Slot>)> = (self.slots.lock().expect("index slots").by_key)
            .iter()
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        for (key, slot) in slots {
            if std::time::Instant::now() >= deadline {
                tracing::info!("index segments not all written: out of time");
                return;
            }
            let erasures = segments.erasures();
            let state = slot.state.lock().await;
            let Some(loaded) = state.as_ref() else {
                continue;
            };
            let len = loaded.index.read().expect("index lock").len();
            if loaded.unsaved == 0 || len < segment::WRITE_MIN_EPISODES {
                continue;
            }
            let (index, project, embedder) = (
                loaded.index.clone(),
                loaded.head.project.raw(),
                loaded.embedder.clone(),
            );
            drop(state);
            let segments = segments.clone();
            let written = tokio::task::spawn_blocking(move || {
                let expected = Expected {
                    project,
                    key: &key,
                    embedder: embedder.as_deref(),
                };
                segments.write(&expected, &index, erasures)
            })
            .await;
            if let Ok(Err(err)) = written {
                tracing::warn!(error = %err, "cannot write an index segment");
            }
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
        // Before anything of the index is read: an erasure after this discards a write.
        let erasures = self.segments.as_ref().map_or(0, |s| s.erasures());
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
        let loaded = state.as_mut().expect("loaded above");
        let (bytes, graph_wanted, len) = {
            let index = loaded.index.read().expect("index lock");
            (index.estimated_bytes(), index.graph_wanted(), index.len())
        };
        let index = loaded.index.clone();
        if let Some(segments) = &self.segments
            && len >= segment::WRITE_MIN_EPISODES
            && loaded.unsaved >= segment::rewrite_after(len)
        {
            loaded.unsaved = 0;
            write_later(segments.clone(), key, loaded, erasures);
        }
        // A new graph is saved at once: it is the costliest part to rebuild.
        let then = (self.segments.clone())
            .filter(|_| graph_wanted)
            .map(|segments| segment_writer(segments, key, loaded, erasures));
        drop(state);
        if graph_wanted {
            build_graph_later(index.clone(), then);
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
            loaded.unsaved = loaded.unsaved.saturating_add(read.changes.len());
            let index = loaded.index.clone();
            let through = read.through.raw();
            tokio::task::spawn_blocking(move || apply(&index, read.changes, through))
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
        if let Some(loaded) = self.load_segment(key, head, embedder).await? {
            return Ok(loaded);
        }
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
        index.write().expect("index lock").feed_change = head.change.raw();
        let mut loaded = Loaded {
            head,
            embedder: embedder.map(str::to_string),
            index,
            project: None,
            unsaved: usize::MAX,
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

    /// The project's index from its newest segment, brought to `head` by the change
    /// feed; `None` (rebuild from rows) without a usable segment, or when the log no
    /// longer reaches back to it.
    async fn load_segment(
        &self,
        key: &ProjectAccess,
        head: FeedHead,
        embedder: Option<&str>,
    ) -> Result<Option<Loaded>> {
        let Some(segments) = self.segments.clone() else {
            return Ok(None);
        };
        let started = std::time::Instant::now();
        let (owned_key, owned_embedder) = (ProjectKey::clone(key), embedder.map(str::to_string));
        let project = head.project.raw();
        let read = tokio::task::spawn_blocking(move || {
            segments.read(&Expected {
                project,
                key: &owned_key,
                embedder: owned_embedder.as_deref(),
            })
        })
        .await
        .map_err(|err| Error::Internal(format!("index segment read failed: {err}")))?;
        let Some(read) = read else { return Ok(None) };
        let mut loaded = Loaded {
            head: FeedHead {
                project: head.project,
                change: ChangeSeq::from_raw(read.change),
            },
            embedder: embedder.map(str::to_string),
            index: Arc::new(RwLock::new(read.index)),
            project: None,
            unsaved: 0,
        };
        let latest = crate::round_trips::call(self.store.feed_head(key)).await?;
        let target = if latest.project == head.project {
            latest.change
        } else {
            head.change
        };
        if read.change > target.raw() {
            // Ahead of the store (a database restored from a backup): never trusted.
            tracing::warn!(
                project = %key,
                segment = read.change,
                store = target.raw(),
                "index segment ahead of the store's change feed ignored; rebuilding"
            );
            return Ok(None);
        }
        if !self.catch_up(&mut loaded, target).await? {
            tracing::info!(project = %key, "the change log no longer reaches the segment; rebuilding");
            return Ok(None);
        }
        tracing::info!(
            project = %key,
            episodes = loaded.index.read().expect("index lock").len(),
            replayed = loaded.unsaved,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "project index loaded from its segment"
        );
        Ok(Some(loaded))
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

/// Writes the project's index as a segment on a blocking thread (never on a request's
/// path: the index is only read meanwhile).
fn write_later(segments: Arc<Segments>, key: &ProjectKey, loaded: &Loaded, erasures: u64) {
    let write = segment_writer(segments, key, loaded, erasures);
    tokio::task::spawn_blocking(write);
}

/// What writes the project's segment (run on a blocking thread).
fn segment_writer(
    segments: Arc<Segments>,
    key: &ProjectKey,
    loaded: &Loaded,
    erasures: u64,
) -> impl FnOnce() + Send + 'static {
    let (index, project, embedder) = (
        loaded.index.clone(),
        loaded.head.project.raw(),
        loaded.embedder.clone(),
    );
    let key = key.clone();
    move || {
        let expected = Expected {
            project,
            key: &key,
            embedder: embedder.as_deref(),
        };
        if let Err(err) = segments.write(&expected, &index, erasures) {
            tracing::warn!(project = %key, error = %err, "cannot write an index segment");
        }
    }
}

/// Changes applied under one hold of the index's write lock: a page of the feed
/// (thousands of removals after a forget) at once kept searches of the project waiting.
const APPLY_SLICE: usize = 128;

/// Applies `changes` in order, releasing the write lock between slices so reads of the
/// project get in between (each sees a prefix of the page, as a read racing the
/// writer's commit would). The index's feed position moves to `through` with the last
/// slice: a segment written between slices names the position before the page
/// (replaying a change twice is harmless).
fn apply(index: &RwLock<ProjectIndex>, changes: Vec<Change>, through: i64) {
    let mut changes = changes.into_iter().peekable();
    loop {
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
        if changes.peek().is_none() {
            index.feed_change = through;
            return;
        }
    }
}

/// Builds the project's vector graph on a blocking thread, off the index: reads go on
/// meanwhile (scanning vectors), and it is installed with what changed in between.
fn build_graph_later(
    index: Arc<RwLock<ProjectIndex>>,
    then: Option<impl FnOnce() + Send + 'static>,
) {
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
        if let Some(then) = then {
            then();
        }
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
