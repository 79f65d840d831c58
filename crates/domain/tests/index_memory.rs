//! A project index counts its heap as the allocator does (the cache's budget is in
//! these bytes). Its own binary, without libtest (`harness = false`): the counting
//! allocator sees every allocation of the process, and libtest's main thread allocates
//! (its table of running tests) while the test runs, a few hundred bytes at random.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicIsize, Ordering};

use memmachine_domain::model::{Episode, EpisodeHandle};
use memmachine_domain::retrieval::project_index::ProjectIndex;
use memmachine_domain::retrieval::tokenize::query_terms;
use memmachine_domain::store::IndexedEpisode;

/// Bytes the Rust allocator has handed out and not had back.
static LIVE: AtomicIsize = AtomicIsize::new(0);

struct Counting;

// SAFETY: forwards every call to the system allocator, only counting sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const WORDS: [&str; 24] = [
    "we",
    "went",
    "hiking",
    "yesterday",
    "and",
    "the",
    "dog",
    "chased",
    "a",
    "squirrel",
    "up",
    "tree",
    "Caroline",
    "adopted",
    "kitten",
    "painting",
    "sunrise",
    "over",
    "lake",
    "camping",
    "trip",
    "pottery",
    "class",
    "melanie",
];

/// Episode `i`: a few words of a small vocabulary and a few rare ones, a speaker, some
/// metadata, and (most) a vector.
fn episode(i: i64, dimensions: usize) -> IndexedEpisode {
    let mut content: Vec<String> = (0..8 + i % 11)
        .map(|k| WORDS[((i * 7 + k * 13) % 24) as usize].to_string())
        .collect();
    content.push(format!("word{}", i % 97));
    let mut metadata = BTreeMap::new();
    if i % 3 == 0 {
        metadata.insert("topic".to_string(), format!("t{}", i % 5));
    }
    let vector = (i % 10 != 0).then(|| {
        (0..dimensions)
            .map(|d| ((i as usize * 31 + d * 17) % 101) as f32 / 101.0 - 0.5)
            .collect()
    });
    IndexedEpisode {
        handle: EpisodeHandle::from_raw(i),
        episode: Episode {
            uid: uuid::Uuid::from_u128(i as u128),
            content: content.join(" "),
            producer_id: ["Caroline", "Melanie Smith", "bot"][(i % 3) as usize].into(),
            producer_role: "user".into(),
            produced_for_id: String::new(),
            sequence_num: i,
            episode_type: "message".into(),
            content_type: "string".into(),
            created_at_micros: i,
            metadata,
            expires_at_micros: None,
        },
        vector,
    }
}

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

fn assert_close(counted: usize, allocated: isize, episodes: i64, what: &str) {
    let error = (counted as f64 - allocated as f64).abs() / allocated as f64;
    // The index also counts its share of the interned strings (speakers, roles,
    // metadata), which the warm-up allocated before `allocated` began: a dozen strings.
    let shared = 512.0 / allocated as f64;
    assert!(
        error <= 0.001 + shared,
        "{episodes} episodes {what}: counted {counted} bytes, the allocator holds \
         {allocated} ({:.2} %)",
        error * 100.0
    );
}

fn main() {
    an_index_counts_its_heap_as_the_allocator_does();
    println!("index_memory: an index counts its heap as the allocator does: ok");
}

fn an_index_counts_its_heap_as_the_allocator_does() {
    // Statics the first index initialises (stemmer, stop words) are not the index's.
    {
        let mut warm = ProjectIndex::new();
        for i in 0..50 {
            warm.insert_stored(episode(i, 32));
        }
        warm.finish_load();
        warm.lexical(&query_terms("hiking dog"), None, 10);
    }
    for (episodes, dimensions) in [(100, 384), (3000, 32)] {
        let before = live();
        let mut index = ProjectIndex::new();
        for i in 0..episodes {
            index.insert_stored(episode(i, dimensions));
        }
        index.finish_load();
        assert_eq!(
            index.estimated_bytes(),
            index.heap_bytes(),
            "counted at load"
        );
        // A search keeps its score buffers for the next one.
        let terms = query_terms("what did Caroline adopt at the lake");
        assert!(!index.lexical(&terms, None, 10).is_empty());
        drop(terms);
        assert_close(index.heap_bytes(), live() - before, episodes, "loaded");
        // Changes: more episodes, some removed, vectors replaced.
        for i in episodes..episodes + 300 {
            index.insert_stored(episode(i, dimensions));
        }
        for i in (0..episodes).step_by(7) {
            index.remove(i);
        }
        for i in (1..episodes).step_by(5) {
            index.set_vector(i, vec![0.25; dimensions].into_boxed_slice());
        }
        assert_close(index.heap_bytes(), live() - before, episodes, "changed");
        drop(index);
        assert_eq!(live(), before, "everything counted is given back");
    }
}
