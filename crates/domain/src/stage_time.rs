//! The clock of a search's stages (embedding the question, lexical and dense ranking,
//! fusion, the store's reads): each stage's time is added to the current search's
//! (a task-local, so concurrent searches never mix). Ranking runs synchronously, maybe
//! on a blocking thread, so it counts on a thread-local that the caller collects
//! (`counted_here`) and adds. Imports nothing of the crate: every layer may clock.

use std::cell::Cell;
use std::future::Future;
use std::time::Instant;

/// A stage of a search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Embedding = 0,
    Lexical = 1,
    Dense = 2,
    Fusion = 3,
    Store = 4,
}

impl Stage {
    pub const ALL: [Stage; STAGES] = [
        Stage::Embedding,
        Stage::Lexical,
        Stage::Dense,
        Stage::Fusion,
        Stage::Store,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Embedding => "embedding",
            Stage::Lexical => "lexical",
            Stage::Dense => "dense",
            Stage::Fusion => "fusion",
            Stage::Store => "store",
        }
    }
}

pub const STAGES: usize = 5;

/// Nanoseconds by stage.
pub type Spent = [u64; STAGES];

tokio::task_local! {
    static SEARCH: Cell<Spent>;
}

thread_local! {
    static HERE: Cell<Spent> = const { Cell::new([0; STAGES]) };
}

/// Runs `search`, returning what its stages spent.
pub async fn scope<T>(search: impl Future<Output = T>) -> (T, Spent) {
    let counted = async {
        let found = search.await;
        (found, SEARCH.with(Cell::get))
    };
    SEARCH.scope(Cell::new([0; STAGES]), counted).await
}

/// Adds `spent` to the current search's stages (none outside a timed search).
pub fn add(spent: Spent) {
    let _ = SEARCH.try_with(|search| {
        let mut sum = search.get();
        for (total, more) in sum.iter_mut().zip(spent) {
            *total += more;
        }
        search.set(sum);
    });
}

/// Awaits `work`, counting its time to `stage` of the current search.
pub async fn timed_async<T>(stage: Stage, work: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let done = work.await;
    let mut spent = [0; STAGES];
    spent[stage as usize] = started.elapsed().as_nanos() as u64;
    add(spent);
    done
}

/// Runs `work`, counting its time to `stage` on this thread (see `counted_here`).
pub fn timed<T>(stage: Stage, work: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let done = work();
    let nanos = started.elapsed().as_nanos() as u64;
    HERE.with(|here| {
        let mut spent = here.get();
        spent[stage as usize] += nanos;
        here.set(spent);
    });
    done
}

/// Runs `work` on this thread, returning what the stages it ran (`timed`) spent.
pub fn counted_here<T>(work: impl FnOnce() -> T) -> (T, Spent) {
    let before = HERE.with(|here| here.replace([0; STAGES]));
    let done = work();
    let spent = HERE.with(|here| here.replace(before));
    (done, spent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_search_counts_its_own_stages_only() {
        let ((), spent) = scope(async {
            timed_async(
                Stage::Store,
                tokio::time::sleep(std::time::Duration::from_millis(2)),
            )
            .await;
            let (four, here) = counted_here(|| timed(Stage::Lexical, || 2 + 2));
            assert_eq!(four, 4);
            add(here);
            // Another search inside counts apart.
            let ((), inner) = scope(timed_async(Stage::Dense, async {})).await;
            assert_eq!(inner[Stage::Store as usize], 0);
        })
        .await;
        assert!(spent[Stage::Store as usize] >= 2_000_000, "{spent:?}");
        assert!(spent[Stage::Lexical as usize] > 0, "{spent:?}");
        assert_eq!(spent[Stage::Dense as usize], 0, "{spent:?}");
        assert_eq!(spent[Stage::Embedding as usize], 0, "{spent:?}");
        // Outside a search: run, not counted.
        assert_eq!(timed_async(Stage::Store, async { 3 }).await, 3);
    }
}
