//! Round trips of random indexes through the segment format: the index read back
//! ranks exactly as the one written, before and after the same further changes.

use std::collections::BTreeMap;

use super::format::Header;
use super::read::decode_checked;
use super::{Expected, SERVER_VERSION, encode_to_vec};
use crate::model::{Episode, EpisodeHandle, ProjectKey};
use crate::retrieval::project_index::ProjectIndex;
use crate::retrieval::project_search::Asked;
use crate::retrieval::tokenize::query_terms;
use crate::retrieval::weights::RankingWeights;
use crate::store::IndexedEpisode;

/// A small deterministic generator (no dependency for tests).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn vector(&mut self, dims: usize) -> Vec<f32> {
        (0..dims)
            .map(|_| self.below(2001) as f32 / 1000.0 - 1.0)
            .collect()
    }
}

const WORDS: &[&str] = &[
    "lake",
    "paint",
    "race",
    "soup",
    "adopt",
    "dog",
    "july",
    "march",
    "yesterday",
    "music",
    "guitar",
    "school",
    "friend",
    "trip",
    "mountain",
    "camp",
    "book",
    "read",
    "piano",
    "cook",
    "twice",
    "last",
    "year",
    "week",
    "ago",
    "running",
    "runner",
    "ran",
    "happy",
    "sad",
];
const PEOPLE: &[&str] = &["Caroline", "Melanie", "Ada Lovelace", "bob", "Zed"];
const DIMS: usize = 8;

fn add(index: &mut ProjectIndex, rng: &mut Rng, id: i64) {
    let len = 1 + rng.below(25);
    let mut content: Vec<String> = (0..len)
        .map(|_| WORDS[rng.below(WORDS.len())].into())
        .collect();
    if rng.below(10) == 0 {
        content.push("Caroline".into());
        content.push("two weeks ago".into());
    }
    let mut metadata = BTreeMap::new();
    if rng.below(3) == 0 {
        metadata.insert("sample".to_string(), format!("conv-{}", rng.below(4)));
    }
    if rng.below(50) == 0 {
        metadata.insert("unique".to_string(), format!("u-{id}"));
    }
    let episode = Episode {
        uid: uuid::Uuid::new_v4(),
        content: content.join(" "),
        producer_id: PEOPLE[rng.below(PEOPLE.len())].into(),
        producer_role: "user".into(),
        produced_for_id: if rng.below(2) == 0 {
            PEOPLE[rng.below(PEOPLE.len())].into()
        } else {
            String::new()
        },
        sequence_num: id,
        episode_type: "message".into(),
        content_type: "string".into(),
        created_at_micros: 1_689_811_200_000_000 + id * 3_600_000_000,
        metadata,
        expires_at_micros: None,
    };
    let vector = (rng.below(4) != 0).then(|| rng.vector(DIMS));
    index.insert_stored(IndexedEpisode {
        handle: EpisodeHandle::from_raw(id),
        episode,
        vector,
    });
}

/// Applies the same random changes (adds, removes, vectors) to every index given.
fn churn(indexes: &mut [&mut ProjectIndex], seed: u64, first_id: i64, n: usize) {
    for index in indexes.iter_mut() {
        let mut rng = Rng(seed);
        for i in 0..n as i64 {
            let id = first_id + i;
            match rng.below(6) {
                0 => index.remove(rng.below(id as usize) as i64),
                1 => {
                    let target = rng.below(id as usize) as i64;
                    index.set_vector(target, rng.vector(DIMS).into_boxed_slice());
                }
                _ => add(index, &mut rng, id),
            }
        }
    }
}

fn key() -> ProjectKey {
    ProjectKey {
        org_id: "org".into(),
        project_id: "p".into(),
    }
}

fn header(index: &ProjectIndex) -> Header {
    Header {
        server_version: SERVER_VERSION.into(),
        store_id: "store-a".into(),
        project: 7,
        key: key().to_string(),
        embedder: "hash".into(),
        change: index.feed_change,
        episodes: index.len() as u64,
    }
}

fn expected(key: &ProjectKey) -> Expected<'_> {
    Expected {
        project: 7,
        key,
        embedder: Some("hash"),
    }
}

/// Every ranking the two indexes give for a handful of questions, and their parts.
fn assert_same(a: &ProjectIndex, b: &ProjectIndex, rng: &mut Rng) {
    assert_eq!(a.len(), b.len());
    for question in [
        "What did Caroline paint at the lake?",
        "When did Ada Lovelace run a race two weeks ago?",
        "guitar piano music",
        "adopt dog",
        "mountain",
    ] {
        let terms = query_terms(question);
        assert_eq!(
            a.lexical(&terms, None, 10),
            b.lexical(&terms, None, 10),
            "{question}"
        );
        assert_eq!(
            a.lexical(&terms, None, 5000),
            b.lexical(&terms, None, 5000),
            "{question}"
        );
        let named = a
            .named_participants(question)
            .map(|n| n.ids)
            .unwrap_or_default();
        let mut named_b = b
            .named_participants(question)
            .map(|n| n.ids)
            .unwrap_or_default();
        let mut sorted = named.clone();
        sorted.sort();
        named_b.sort();
        assert_eq!(sorted, named_b, "{question}");
        let query = rng.vector(DIMS);
        let asked = Asked {
            named: &named,
            period: crate::retrieval::time_expressions::question_period(question),
            when: crate::retrieval::time_expressions::asks_when(question),
            weights: &RankingWeights::DEFAULT,
            explain: true,
        };
        assert_eq!(
            a.lexical_asked(&terms, &asked, None, 10),
            b.lexical_asked(&terms, &asked, None, 10),
            "{question}"
        );
        assert_eq!(
            a.hybrid(&terms, &query, &asked, None, 10),
            b.hybrid(&terms, &query, &asked, None, 10),
            "{question}"
        );
        assert_eq!(
            a.dense(&query, None, 10),
            b.dense(&query, None, 10),
            "{question}"
        );
    }
}

fn round_trip(index: &ProjectIndex) -> ProjectIndex {
    let bytes = encode_to_vec(index, &header(index));
    let key = key();
    decode_checked(&bytes, "store-a", &expected(&key))
        .unwrap()
        .index
}

#[test]
fn random_indexes_rank_the_same_after_a_round_trip_and_after_the_same_changes() {
    for (seed, ann_min, n) in [
        (1u64, 1_000_000, 3000usize),
        (2, 200, 1500),
        (3, 1_000_000, 0),
    ] {
        let mut rng = Rng(seed);
        let mut index = ProjectIndex::with_ann_min(ann_min);
        for id in 0..n as i64 {
            add(&mut index, &mut rng, id);
        }
        // Enough removals to compact, and vectors replaced.
        churn(&mut [&mut index], seed + 10, n as i64, n / 2);
        index.build_graph_now();
        assert_eq!(index.ann.is_some(), ann_min < n, "seed {seed}");
        index.feed_change = 42;
        let mut read = round_trip(&index);
        assert_eq!(read.feed_change, 42);
        assert_same(&index, &read, &mut Rng(seed));
        churn(
            &mut [&mut index, &mut read],
            seed + 20,
            2 * n as i64,
            n / 3 + 10,
        );
        assert_same(&index, &read, &mut Rng(seed + 1));
        // And again through the format, after those changes.
        let again = round_trip(&read);
        assert_same(&index, &again, &mut Rng(seed + 2));
    }
}

#[test]
fn a_segment_of_another_store_project_embedder_or_version_or_with_a_flipped_byte_is_refused() {
    let mut rng = Rng(5);
    let mut index = ProjectIndex::new();
    for id in 0..200 {
        add(&mut index, &mut rng, id);
    }
    let bytes = encode_to_vec(&index, &header(&index));
    let key = key();
    assert!(decode_checked(&bytes, "store-a", &expected(&key)).is_ok());
    let refused = |bytes: &[u8], store: &str, expected: Expected<'_>| {
        decode_checked(bytes, store, &expected)
            .err()
            .expect("refused")
    };
    assert!(refused(&bytes, "store-b", expected(&key)).contains("another store"));
    let other = ProjectKey {
        org_id: "org".into(),
        project_id: "q".into(),
    };
    assert!(refused(&bytes, "store-a", expected(&other)).contains("another project"));
    let mut moved = expected(&key);
    moved.project = 8;
    assert!(refused(&bytes, "store-a", moved).contains("another project"));
    let mut embedder = expected(&key);
    embedder.embedder = None;
    assert!(refused(&bytes, "store-a", embedder).contains("embedder"));
    let mut old = header(&index);
    old.server_version = "0.0.1".into();
    let old = encode_to_vec(&index, &old);
    assert!(refused(&old, "store-a", expected(&key)).contains("server version"));
    for at in (0..bytes.len()).step_by(97) {
        let mut bad = bytes.clone();
        bad[at] ^= 0x01;
        assert!(
            decode_checked(&bad, "store-a", &expected(&key)).is_err(),
            "byte {at}"
        );
    }
}

#[test]
fn segment_files_are_found_replaced_refused_and_erased_by_project() {
    use std::sync::RwLock;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("leftover.seg.tmp"), b"half").unwrap();
    let segments = super::Segments::open(dir.path(), "store-a".into()).unwrap();
    assert!(
        !dir.path().join("leftover.seg.tmp").exists(),
        "temp files removed on open"
    );
    let key = key();
    let mut rng = Rng(9);
    let mut index = ProjectIndex::new();
    for id in 0..300 {
        add(&mut index, &mut rng, id);
    }
    index.feed_change = 5;
    let index = RwLock::new(index);
    let first = segments
        .write(&expected(&key), &index, segments.erasures())
        .unwrap()
        .unwrap();
    index.write().unwrap().feed_change = 9;
    let second = segments
        .write(&expected(&key), &index, segments.erasures())
        .unwrap()
        .unwrap();
    assert!(!first.exists(), "the older segment is removed");
    assert_eq!(segments.newest(&key, 7), Some(second.clone()));
    let read = segments.read(&expected(&key)).expect("read");
    assert_eq!(read.change, 9);
    assert_same(&index.read().unwrap(), &read.index, &mut Rng(1));
    // Another store's server refuses it, and deletes it.
    let other = super::Segments::open(dir.path(), "store-b".into()).unwrap();
    assert!(other.read(&expected(&key)).is_none());
    assert!(!second.exists());
    // A write begun before an erasure is discarded; one of an index behind the
    // erasure's position too.
    let before = segments.erasures();
    segments.erase(&key, Some((7, 10)));
    assert!(
        segments
            .write(&expected(&key), &index, before)
            .unwrap()
            .is_none()
    );
    assert!(
        segments
            .write(&expected(&key), &index, segments.erasures())
            .unwrap()
            .is_none()
    );
    index.write().unwrap().feed_change = 10;
    let third = segments
        .write(&expected(&key), &index, segments.erasures())
        .unwrap()
        .unwrap();
    segments.erase(&key, None);
    assert!(!third.exists());
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

#[test]
fn a_word_no_live_episode_holds_is_not_written() {
    let mut rng = Rng(9);
    let mut index = ProjectIndex::with_ann_min(1_000_000);
    for id in 0..20 {
        add(&mut index, &mut rng, id);
    }
    let episode = Episode {
        uid: uuid::Uuid::new_v4(),
        content: "Quetzalcoatlus flew over Xylophonia".into(),
        producer_id: "Zed".into(),
        producer_role: "user".into(),
        produced_for_id: String::new(),
        sequence_num: 100,
        episode_type: "message".into(),
        content_type: "string".into(),
        created_at_micros: 1_689_811_200_000_000,
        metadata: BTreeMap::new(),
        expires_at_micros: None,
    };
    index.insert_stored(IndexedEpisode {
        handle: EpisodeHandle::from_raw(100),
        episode,
        vector: None,
    });
    let holds = |index: &ProjectIndex, word: &[u8]| {
        let bytes = encode_to_vec(index, &header(index));
        bytes.windows(word.len()).any(|w| w == word)
    };
    assert!(holds(&index, b"xylophonia"));
    index.remove(100);
    assert!(!holds(&index, b"xylophonia"));
    assert!(!holds(&index, b"quetzalcoatlus"));
    // The round trip still ranks as the index written does, and learns the word anew.
    let read = round_trip(&index);
    assert_same(&index, &read, &mut Rng(10));
}
