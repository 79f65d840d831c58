//! What the domain keeps in memory of a project, derived from its stored rows: the BM25
//! index over its episodes (with each episode's filterable fields and vector), and, once
//! it holds `ANN_MIN_VECTORS` vectors, the HNSW graph over those vectors. Vectors are
//! held as int8 codes (`quantized.rs`): in the project's slab, or, once there is a
//! graph, in the graph alone (one copy, not two). Ranking over it is in
//! `project_search.rs`; keeping it current is `index_cache.rs`.

use std::cell::RefCell;
use std::sync::RwLock;

use crate::model::Episode;
use crate::model::filter::{Field, SystemField};
use crate::model::filter_eval::{Fields, Value as FieldValue};
use crate::retrieval::ann::{ANN_MIN_VECTORS, AnnIndex};
use crate::retrieval::bm25::Bm25Index;
use crate::retrieval::episode_fields::EpisodeFields;
use crate::retrieval::heap;
use crate::retrieval::participants::Participants;
use crate::retrieval::quantized::{self, Slab};
use crate::retrieval::time_expressions::{TurnTime, turn_time};
use crate::store::IndexedEpisode;

/// Threads that build a large project's graph (the machines this serves have few cores,
/// and searches go on meanwhile).
const GRAPH_THREADS: usize = 2;
/// Vectors copied out of the index per step of a graph build (under its read lock,
/// briefly): the build never holds a second copy of every vector.
const GRAPH_CHUNK: usize = 32_768;

/// What the index keeps of each episode: its filterable fields and its vector.
#[derive(Debug)]
pub struct Entry {
    pub(super) fields: EpisodeFields,
    pub(super) vector: Option<Coded>,
    /// What its text says of when its event was.
    pub(super) time: TurnTime,
}

/// Where an episode's int8 codes are, and their scale.
#[derive(Debug, Clone, Copy)]
pub(super) struct Coded {
    /// Its slot in the project's slab, or `IN_GRAPH`.
    pub(super) slot: u32,
    pub(super) scale: f32,
}

/// The codes are held by the graph (keyed by the episode's handle).
pub(super) const IN_GRAPH: u32 = u32::MAX;

impl Fields for Entry {
    fn get(&self, field: &Field) -> Option<FieldValue<'_>> {
        self.fields.get(field)
    }
}

#[derive(Debug, Default)]
pub struct ProjectIndex {
    pub(super) text: Bm25Index<Entry>,
    /// The codes of vectors not in the graph (all of them while there is none).
    pub(super) codes: Slab,
    /// The vector graph of a large project (`None` below `ANN_MIN_VECTORS` vectors,
    /// while it is being built, or if building it failed: then searches scan, as for
    /// a small project).
    pub(super) ann: Option<AnnIndex>,
    /// Live episodes holding a vector.
    pub(super) vectors: usize,
    /// Minimum vectors for a graph (`ANN_MIN_VECTORS`; smaller in tests).
    pub(super) ann_min: usize,
    /// Building or updating the graph failed once: scan from then on, not retry.
    pub(super) ann_failed: bool,
    /// A graph is being built from a copy of the vectors: the episodes whose vector
    /// changed since, to replay on it.
    pub(super) building: Option<Vec<i64>>,
    /// Who the episodes were produced by and for.
    pub(super) participants: Participants,
    /// The change-feed position the index holds every change up to (set by the cache
    /// under the write lock, so a segment written under the read lock names it).
    pub(super) feed_change: i64,
    /// Heap bytes at the last count (`heap_bytes`), and an estimate of what the
    /// changes since added; recounted every `RECOUNT_CHANGES` changes or an eighth of
    /// the index, whichever is more (a count walks every episode).
    counted: usize,
    pending: usize,
    changes: usize,
}

/// Changes after which the index's memory is counted again, at least.
const RECOUNT_CHANGES: usize = 256;

/// About the memory one more episode takes (its postings, fields, codes and graph
/// links), until the next count.
fn estimated_bytes(episode: &Episode, vector: Option<&[f32]>) -> usize {
    let text = episode.content.len() + episode.producer_id.len();
    let metadata: usize = episode
        .metadata
        .iter()
        .map(|(k, v)| k.len() + v.len() + 32)
        .sum();
    256 + text * 3 + metadata + vector.map_or(0, |v| vector_bytes(v.len()))
}

/// Codes, scale and graph links of one vector.
fn vector_bytes(dimensions: usize) -> usize {
    dimensions + 160
}

/// What BM25 indexes of an episode: who said it as well as what was said, so that
/// questions naming a speaker ("What did Caroline adopt?") match their turns (a
/// multi-field index; on LoCoMo it lifts recall@10 by about 3 points).
fn indexed_text(producer: &str, content: &str) -> String {
    format!("{producer} {content}")
}

/// The producer and produced-for ids of an entry (empty when unset).
fn entry_participants(entry: &Entry) -> (String, String) {
    let text = |field| match entry.get(&Field::System(field)) {
        Some(FieldValue::Text(name)) => name.to_string(),
        _ => String::new(),
    };
    (
        text(SystemField::ProducerId),
        text(SystemField::ProducedForId),
    )
}

impl ProjectIndex {
    fn count_participants(&mut self, (producer, produced_for): (String, String), add: bool) {
        for name in [producer, produced_for] {
            if add {
                self.participants.add(&name);
            } else {
                self.participants.remove(&name);
            }
        }
    }

    /// The project's participants `query` names, and the query without them.
    pub fn named_participants(&self, query: &str) -> Option<crate::retrieval::participants::Named> {
        self.participants.named_in(query)
    }

    pub fn new() -> ProjectIndex {
        ProjectIndex::with_ann_min(ANN_MIN_VECTORS)
    }

    pub fn with_ann_min(ann_min: usize) -> ProjectIndex {
        ProjectIndex {
            ann_min,
            ..ProjectIndex::default()
        }
    }

    /// The codes and scale of `vector`, or `None` when its length is not the project's
    /// (the first vector's: one embedder's vectors all have one length).
    fn encode(&mut self, vector: &[f32]) -> Option<(Vec<i8>, f32)> {
        if self.codes.dimensions() == 0 && !vector.is_empty() {
            let dimensions = self.ann.as_ref().map_or(vector.len(), AnnIndex::dimensions);
            self.codes = Slab::new(dimensions);
        }
        if vector.len() != self.codes.dimensions() || vector.is_empty() {
            tracing::debug!(length = vector.len(), "vector of another length ignored");
            return None;
        }
        Some(quantized::quantized(vector))
    }

    /// Stores codes for episode `id` (in the graph when there is one and none is being
    /// built, else in the slab, reusing `previous` slab slot).
    fn place(&mut self, id: i64, codes: &[i8], previous: Option<Coded>) -> u32 {
        if self.building.is_none()
            && let Some(ann) = &self.ann
        {
            if let Some(Coded { slot, .. }) = previous.filter(|c| c.slot != IN_GRAPH) {
                self.codes.remove(slot);
            }
            match ann.insert(id, codes) {
                Ok(()) => return IN_GRAPH,
                Err(err) => {
                    tracing::warn!(error = %err, "vector graph update failed; scanning instead");
                    self.abandon_graph();
                }
            }
        }
        match previous {
            Some(Coded { slot, .. }) if slot != IN_GRAPH => {
                self.codes.get_mut(slot).copy_from_slice(codes);
                slot
            }
            _ => self.codes.insert(codes),
        }
    }

    /// Indexes a stored episode with its vector (once: an episode already indexed is
    /// left as it is).
    pub fn insert_stored(&mut self, stored: IndexedEpisode) {
        let IndexedEpisode {
            handle,
            episode,
            vector,
        } = stored;
        // The index keys episodes by the raw number, as it keys features.
        let handle = handle.raw();
        if self.text.payload(handle).is_some() {
            return;
        }
        let coded = vector.as_deref().and_then(|v| self.encode(v));
        self.changed(estimated_bytes(
            &episode,
            vector.as_deref().filter(|_| coded.is_some()),
        ));
        let vector = coded.map(|(codes, scale)| Coded {
            slot: self.place(handle, &codes, None),
            scale,
        });
        let entry = Entry {
            fields: EpisodeFields::of(&episode),
            vector,
            time: turn_time(&episode.content),
        };
        self.count_participants(entry_participants(&entry), true);
        self.text.insert(
            handle,
            &indexed_text(&episode.producer_id, &episode.content),
            entry,
        );
        if vector.is_some() {
            self.vectors += 1;
            self.note_changed(handle);
        }
    }

    /// Episodes indexed.
    pub fn len(&self) -> usize {
        self.text.len()
    }

    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// The memory the index holds, for the cache's budget: counted at the last
    /// recount, plus an estimate of the changes since.
    pub fn estimated_bytes(&self) -> usize {
        self.counted + self.pending
    }

    /// Heap bytes the index holds, counted from its collections' capacities (and the
    /// graph's own count).
    pub fn heap_bytes(&self) -> usize {
        self.text.heap_bytes(|entry| entry.fields.heap_bytes())
            + self.codes.bytes()
            + self.ann.as_ref().map_or(0, AnnIndex::memory_usage)
            + self.building.as_ref().map_or(0, heap::vec)
            + self.participants.heap_bytes()
    }

    /// Counts the memory held afresh.
    pub fn recount(&mut self) {
        self.counted = self.heap_bytes();
        self.pending = 0;
        self.changes = 0;
    }

    /// Notes a change that added about `bytes`; counts afresh now and then.
    fn changed(&mut self, bytes: usize) {
        self.pending += bytes;
        self.changes += 1;
        if self.changes >= RECOUNT_CHANGES.max(self.text.len() / 8) {
            self.recount();
        }
    }

    /// Gives back what loading reserved beyond need, and counts the memory held.
    pub fn finish_load(&mut self) {
        self.text.shrink();
        self.codes.shrink_to_fit();
        self.recount();
    }

    pub fn remove(&mut self, id: i64) {
        let Some(entry) = self.text.payload(id) else {
            return;
        };
        let vector = entry.vector;
        let names = entry_participants(entry);
        self.count_participants(names, false);
        self.text.remove(id);
        self.changed(0);
        if let Some(Coded { slot, .. }) = vector {
            self.vectors -= 1;
            if slot == IN_GRAPH {
                if let Some(ann) = &self.ann {
                    ann.remove(id);
                }
            } else {
                self.codes.remove(slot);
            }
            self.note_changed(id);
        }
    }

    /// Sets (or replaces) the vector of episode `id`, if it is indexed.
    pub fn set_vector(&mut self, id: i64, vector: Box<[f32]>) {
        let Some(previous) = self.text.payload(id).map(|e| e.vector) else {
            return;
        };
        let Some((codes, scale)) = self.encode(&vector) else {
            return;
        };
        let added = if previous.is_none() {
            self.vectors += 1;
            vector_bytes(codes.len())
        } else {
            0
        };
        self.changed(added);
        let slot = self.place(id, &codes, previous);
        if let Some(entry) = self.text.payload_mut(id) {
            entry.vector = Some(Coded { slot, scale });
        }
        self.note_changed(id);
    }

    /// The codes of episode `id` (`coded` its entry's), from the slab or the graph
    /// (written into `buffer`).
    fn codes_of<'a>(&'a self, id: i64, coded: Coded, buffer: &'a mut Vec<i8>) -> Option<&'a [i8]> {
        if coded.slot != IN_GRAPH {
            return Some(self.codes.get(coded.slot));
        }
        let ann = self.ann.as_ref()?;
        buffer.resize(ann.dimensions(), 0);
        ann.get(id, buffer).then_some(&buffer[..])
    }

    /// The approximate similarity of episode `id` (its entry `entry`) to `query`:
    /// `None` without a vector of the query's length.
    pub(super) fn similarity(
        &self,
        id: i64,
        entry: &Entry,
        query: &[f32],
        buffer: &RefCell<Vec<i8>>,
    ) -> Option<f32> {
        let coded = entry.vector?;
        let mut buffer = buffer.borrow_mut();
        let codes = self.codes_of(id, coded, &mut buffer)?;
        (codes.len() == query.len()).then(|| quantized::dot(codes, coded.scale, query))
    }

    /// The codes of `query` for a graph search.
    pub(super) fn query_codes(query: &[f32]) -> Vec<i8> {
        quantized::quantized(query).0
    }

    /// Notes, for the graph being built, that episode `id`'s vector changed.
    fn note_changed(&mut self, id: i64) {
        if let Some(dirty) = &mut self.building {
            dirty.push(id);
        }
    }

    /// Moves every vector out of the graph back into the slab and drops the graph:
    /// searches scan from then on.
    fn abandon_graph(&mut self) {
        let Some(ann) = self.ann.take() else { return };
        self.ann_failed = true;
        if self.codes.dimensions() == 0 {
            self.codes = Slab::new(ann.dimensions());
        }
        let mut buffer = vec![0i8; ann.dimensions()];
        let in_graph: Vec<i64> = self
            .text
            .live()
            .filter(|(_, e)| e.vector.is_some_and(|c| c.slot == IN_GRAPH))
            .map(|(id, _)| id)
            .collect();
        for id in in_graph {
            let slot = ann.get(id, &mut buffer).then(|| self.codes.insert(&buffer));
            if let Some(entry) = self.text.payload_mut(id) {
                match slot {
                    Some(slot) => {
                        if let Some(coded) = &mut entry.vector {
                            coded.slot = slot;
                        }
                    }
                    None => {
                        entry.vector = None;
                        self.vectors -= 1;
                    }
                }
            }
        }
    }

    /// Whether the project holds enough vectors for a graph and has none (nor one on
    /// the way): the cache then builds it off the index (`begin_graph`, `build_graph`,
    /// `finish_graph`), so no read waits for it; searches scan meanwhile.
    pub fn graph_wanted(&self) -> bool {
        self.ann.is_none()
            && self.building.is_none()
            && !self.ann_failed
            && self.vectors >= self.ann_min
    }

    /// Starts building the graph: the ids of the vectors to build it from. Changes
    /// from now on are replayed when it is installed.
    pub fn begin_graph(&mut self) -> GraphInput {
        self.building = Some(Vec::new());
        let ids = self
            .text
            .live()
            .filter(|(_, e)| e.vector.is_some_and(|c| c.slot != IN_GRAPH))
            .map(|(id, _)| id)
            .collect();
        GraphInput {
            dimensions: self.codes.dimensions(),
            ids,
        }
    }

    /// Builds a graph from `input`, reading the codes from `index` a chunk at a time
    /// (the long part: reads and writes go on in between).
    pub fn build_graph(
        input: GraphInput,
        index: &RwLock<ProjectIndex>,
    ) -> Result<AnnIndex, String> {
        ProjectIndex::build_graph_from(input, |ids, held, codes| {
            index
                .read()
                .expect("index lock")
                .copy_codes(ids, held, codes)
        })
    }

    /// Builds a graph from `input`, with `copy` writing the ids still held of a chunk of
    /// `input.ids` and their codes.
    fn build_graph_from(
        input: GraphInput,
        mut copy: impl FnMut(&[i64], &mut Vec<i64>, &mut Vec<i8>),
    ) -> Result<AnnIndex, String> {
        let started = std::time::Instant::now();
        let expected = input.ids.len() + input.ids.len() / 8;
        let ann = AnnIndex::new(input.dimensions, expected)?;
        let (mut held, mut codes) = (Vec::new(), Vec::new());
        for chunk in input.ids.chunks(GRAPH_CHUNK) {
            held.clear();
            codes.clear();
            copy(chunk, &mut held, &mut codes);
            let items: Vec<(i64, &[i8])> = held
                .iter()
                .zip(codes.chunks_exact(input.dimensions.max(1)))
                .map(|(id, codes)| (*id, codes))
                .collect();
            ann.add_all(&items, GRAPH_THREADS)?;
        }
        tracing::info!(
            vectors = ann.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            graph_bytes = ann.memory_usage(),
            "vector graph built"
        );
        Ok(ann)
    }

    /// Appends to `held` the ids of `ids` whose codes are in the slab, and the codes
    /// to `codes`.
    fn copy_codes(&self, ids: &[i64], held: &mut Vec<i64>, codes: &mut Vec<i8>) {
        for &id in ids {
            let coded = self.text.payload(id).and_then(|e| e.vector);
            if let Some(coded) = coded.filter(|c| c.slot != IN_GRAPH) {
                held.push(id);
                codes.extend_from_slice(self.codes.get(coded.slot));
            }
        }
    }

    /// Installs the graph `begin_graph` started, with the changes made meanwhile; the
    /// graph then holds every vector, and the slab goes.
    pub fn finish_graph(&mut self, built: Result<AnnIndex, String>) {
        let dirty = self.building.take().unwrap_or_default();
        let ann = match built {
            Ok(ann) => ann,
            Err(err) => {
                tracing::warn!(error = %err, "cannot build the vector graph; scanning");
                self.ann_failed = true;
                return;
            }
        };
        for id in dirty {
            let codes = self
                .text
                .payload(id)
                .and_then(|e| e.vector)
                .map(|c| self.codes.get(c.slot));
            let replayed = match codes {
                Some(codes) => ann.insert(id, codes),
                None => {
                    ann.remove(id);
                    Ok(())
                }
            };
            if let Err(err) = replayed {
                tracing::warn!(error = %err, "vector graph update failed; scanning instead");
                self.ann_failed = true;
                return;
            }
        }
        let held: Vec<i64> = self
            .text
            .live()
            .filter(|(_, e)| e.vector.is_some())
            .map(|(id, _)| id)
            .collect();
        for id in held {
            if let Some(coded) = self.text.payload_mut(id).and_then(|e| e.vector.as_mut()) {
                coded.slot = IN_GRAPH;
            }
        }
        self.codes = Slab::new(ann.dimensions());
        self.ann = Some(ann);
        self.recount();
    }

    /// `begin_graph`, `build_graph` and `finish_graph` at once, if a graph is wanted.
    pub fn build_graph_now(&mut self) {
        if self.graph_wanted() {
            let input = self.begin_graph();
            let built = ProjectIndex::build_graph_from(input, |ids, held, codes| {
                self.copy_codes(ids, held, codes)
            });
            self.finish_graph(built);
        }
    }
}

/// The vectors a graph is built from (their codes are read from the index as it goes).
pub struct GraphInput {
    dimensions: usize,
    ids: Vec<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::EpisodeHandle;

    /// Indexes episode `id` as the store would hand it over.
    fn add(
        index: &mut ProjectIndex,
        id: i64,
        producer: &str,
        content: &str,
        vector: Option<Vec<f32>>,
    ) {
        add_at(index, id, producer, content, vector, 0);
    }

    fn add_at(
        index: &mut ProjectIndex,
        id: i64,
        producer: &str,
        content: &str,
        vector: Option<Vec<f32>>,
        created_at_micros: i64,
    ) {
        let episode = Episode {
            uid: uuid::Uuid::new_v4(),
            content: content.into(),
            producer_id: producer.into(),
            producer_role: String::new(),
            produced_for_id: String::new(),
            sequence_num: id,
            episode_type: "message".into(),
            content_type: "string".into(),
            created_at_micros,
            metadata: Default::default(),
            expires_at_micros: None,
        };
        index.insert_stored(IndexedEpisode {
            handle: EpisodeHandle::from_raw(id),
            episode,
            vector,
        });
    }

    fn unit(i: usize) -> Vec<f32> {
        let angle = i as f32 * 0.01;
        vec![angle.cos(), angle.sin(), 0.0]
    }

    #[test]
    fn a_question_naming_a_participant_prefers_their_turns_and_embeds_without_them() {
        let mut index = ProjectIndex::new();
        let same = vec![1.0, 0.0, 0.0];
        add(
            &mut index,
            1,
            "Ada Lovelace",
            "the race was fun",
            Some(same.clone()),
        );
        add(&mut index, 2, "Bob", "the race was fun", Some(same.clone()));
        add(
            &mut index,
            3,
            "Bob",
            "we ate soup",
            Some(vec![0.0, 1.0, 0.0]),
        );
        let named = index
            .named_participants("What did Ada Lovelace's friend say about the race?")
            .unwrap();
        assert_eq!(
            named.without.as_deref(),
            Some("What did friend say about the race?")
        );
        assert_eq!(named.ids, [Box::<str>::from("Ada Lovelace")]);
        let terms = crate::retrieval::tokenize::query_terms("Ada Lovelace race");
        let first = |named: &[Box<str>]| {
            let asked = crate::retrieval::project_search::Asked {
                named,
                period: None,
                when: false,
                weights: &crate::retrieval::weights::RankingWeights::DEFAULT,
                explain: false,
            };
            index.hybrid(&terms, &same, &asked, None, 3)[0].handle
        };
        assert_eq!(first(&named.ids), 1);
        assert_eq!(first(&[Box::from("Bob")]), 2, "the named one wins a tie");
        // A participant whose every turn is gone is no longer one.
        index.remove(1);
        assert!(index.named_participants("Ada Lovelace raced").is_none());
        assert!(index.named_participants("did bob race").is_some());
    }

    #[test]
    fn questions_of_a_period_or_of_when_prefer_the_turns_that_answer_them() {
        use crate::retrieval::project_search::Asked;
        use crate::retrieval::time_expressions::{asks_when, question_period};
        use crate::retrieval::weights::RankingWeights;
        let day = 86_400_000_000_i64;
        // 2023-07-20 and 2023-03-01, as microseconds since the epoch.
        let (july, march) = (1_689_811_200_000_000_i64, 1_677_628_800_000_000_i64);
        let mut index = ProjectIndex::new();
        let same = vec![1.0, 0.0, 0.0];
        add_at(
            &mut index,
            1,
            "ann",
            "we painted a lake",
            Some(same.clone()),
            march,
        );
        add_at(
            &mut index,
            2,
            "ann",
            "we painted a lake",
            Some(same.clone()),
            july,
        );
        // Said in early August of an event "two weeks ago": July.
        let told = "we painted a lake two weeks ago";
        add_at(
            &mut index,
            3,
            "ann",
            told,
            Some(same.clone()),
            july + 20 * day,
        );
        add_at(
            &mut index,
            4,
            "ann",
            "nothing",
            Some(vec![0.0, 1.0, 0.0]),
            march,
        );
        let terms = crate::retrieval::tokenize::query_terms("painted lake");
        let ranked = |question: &str| {
            let asked = Asked {
                named: &[],
                period: question_period(question),
                when: asks_when(question),
                weights: &crate::retrieval::weights::RankingWeights::DEFAULT,
                explain: false,
            };
            let hits = index.hybrid(&terms, &same, &asked, None, 4);
            hits.iter().map(|h| h.handle).collect::<Vec<_>>()
        };
        let in_july = ranked("What did Ann paint in July 2023?");
        assert!(
            in_july[..2].contains(&2) && in_july[..2].contains(&3),
            "{in_july:?}"
        );
        let in_march = ranked("What did Ann paint in March 2023?");
        assert_eq!(in_march[0], 1, "{in_march:?}");
        // Asking when: the turn that says when comes first.
        assert_eq!(ranked("When did Ann paint a lake?")[0], 3);
        // Explained, the parts add up to each score, and say why.
        let session = RankingWeights {
            session: 0.5,
            ..RankingWeights::DEFAULT
        };
        let asked = Asked {
            named: &[Box::from("ann")],
            period: question_period("What did Ann paint in July 2023?"),
            when: false,
            weights: &session,
            explain: true,
        };
        for hit in index.hybrid(&terms, &same, &asked, None, 4) {
            let p = hit.parts.expect("explained");
            let sum = p.lexical + p.dense + p.context + p.session + p.time + p.participant;
            assert!((sum - hit.score).abs() < 1e-4, "{p:?} vs {}", hit.score);
            assert_eq!(p.participant, 3.0);
            let july_event = [2, 3].contains(&hit.handle);
            assert_eq!(p.time, if july_event { 3.0 } else { 0.0 }, "{}", hit.handle);
        }
    }

    #[test]
    fn lexical_ranking_lifts_as_hybrid_does_and_keeps_bm25_scores() {
        use crate::retrieval::project_search::Asked;
        use crate::retrieval::time_expressions::question_period;
        use crate::retrieval::weights::RankingWeights;
        let (july, march) = (1_689_811_200_000_000_i64, 1_677_628_800_000_000_i64);
        let mut index = ProjectIndex::new();
        add_at(&mut index, 1, "bob", "we painted a lake", None, march);
        add_at(&mut index, 2, "ann", "we painted a lake", None, march);
        add_at(&mut index, 3, "ann", "we painted a lake", None, july);
        add_at(&mut index, 4, "ann", "the weather was fine", None, july);
        let terms = crate::retrieval::tokenize::query_terms("painted lake");
        let plain = index.lexical(&terms, None, 4);
        let ranked = |named: &[Box<str>], question: &str, explain: bool| {
            let asked = Asked {
                named,
                period: question_period(question),
                when: false,
                weights: &RankingWeights::DEFAULT,
                explain,
            };
            index.lexical_asked(&terms, &asked, None, 4)
        };
        let ann = [Box::<str>::from("ann")];
        let hits = ranked(&ann, "What did Ann paint in July 2023?", true);
        let ids: Vec<i64> = hits.iter().map(|h| h.handle).collect();
        // Ann's July turn first; her March one above Bob's; each matches, in its own
        // text or its context (4 only there: it is next to the others).
        assert_eq!(ids[0], 3, "{hits:?}");
        let at = |id| ids.iter().position(|i| *i == id).unwrap();
        assert!(at(2) < at(1), "{hits:?}");
        assert!(hits.iter().all(|h| h.parts.unwrap().lexical > 0.0));
        let p = hits[0].parts.unwrap();
        assert!(p.participant > 0.0 && p.time > 0.0);
        assert!((p.lexical + p.participant + p.time - hits[0].score).abs() < 1e-4);
        let plain_3 = plain.iter().find(|h| h.handle == 3).unwrap().score;
        assert_eq!(p.lexical, plain_3, "BM25's own scale");
        // Nothing named, no period: the plain BM25 ranking, unchanged.
        let none = ranked(&[], "What did they paint?", false);
        assert_eq!(none, plain);
    }

    #[test]
    fn the_graph_is_built_at_the_threshold_and_kept_in_step() {
        let mut index = ProjectIndex::with_ann_min(10);
        for i in 0..5 {
            add(
                &mut index,
                i,
                "ada",
                "stored with a vector",
                Some(unit(i as usize)),
            );
        }
        for i in 5..20 {
            add(&mut index, i, "ada", "new, embedded later", None);
        }
        assert!(!index.graph_wanted(), "5 vectors: below the threshold");
        for i in 5..10 {
            index.set_vector(i, unit(i as usize).into_boxed_slice());
        }
        assert!(
            index.graph_wanted() && index.ann.is_none(),
            "10: wanted, not built inline"
        );
        // Built from a copy while the index goes on: what changes meanwhile is replayed.
        let input = index.begin_graph();
        assert!(!index.graph_wanted(), "one build at a time");
        index.set_vector(10, unit(10).into_boxed_slice());
        index.set_vector(11, unit(11).into_boxed_slice());
        index.remove(2);
        let lock = RwLock::new(index);
        let built = ProjectIndex::build_graph(input, &lock);
        let mut index = lock.into_inner().unwrap();
        index.finish_graph(built);
        let ann = index.ann.as_ref().expect("a graph");
        assert_eq!(ann.len(), 11, "built from every vector held, then added to");
        assert_eq!(index.codes.bytes(), 0, "the graph holds the only copy");
        // Replacing a vector does not count it twice; removing takes it out.
        index.set_vector(3, unit(3).into_boxed_slice());
        index.remove(4);
        index.remove(15); // no vector: the graph is untouched
        let ann = index.ann.as_ref().unwrap();
        assert_eq!(ann.len(), 10);
        let near = index.dense(&unit(4), None, 3);
        assert!(
            near.iter().all(|h| h.handle != 4 && h.handle != 2),
            "{near:?}"
        );
        // 3 and 5 are equally near 4: either may come first.
        assert!(near[..2].iter().any(|h| h.handle == 3), "{near:?}");
        assert_eq!(index.vectors, 10);
        // Similarities come from the graph's codes, for ranking and for rescoring.
        let buffer = RefCell::new(Vec::new());
        let entry = index.text.payload(3).unwrap();
        let sim = index.similarity(3, entry, &unit(3), &buffer).unwrap();
        assert!((sim - 1.0).abs() < 1e-2, "{sim}");
    }

    #[test]
    fn a_dropped_graph_gives_its_vectors_back_to_the_scan() {
        let mut index = ProjectIndex::with_ann_min(4);
        for i in 0..8 {
            add(&mut index, i, "ada", "words", Some(unit(i as usize * 10)));
        }
        index.build_graph_now();
        assert!(index.ann.is_some());
        index.abandon_graph();
        assert!(index.ann.is_none() && !index.graph_wanted());
        let near = index.dense(&unit(30), None, 2);
        assert_eq!(near[0].handle, 3, "{near:?}");
        assert_eq!(near.len(), 2);
        // A vector of another length is left out.
        index.set_vector(1, vec![1.0; 5].into_boxed_slice());
        assert_eq!(index.vectors, 8);
    }
}
