//! What the domain keeps in memory of a project, derived from its stored rows: the BM25
//! index over its episodes (with each episode's filterable fields and vector), and, once
//! it holds `ANN_MIN_VECTORS` vectors, the HNSW graph over those vectors. Ranking over it
//! is in `project_search.rs`; keeping it current is `index_cache.rs`.

use crate::model::Episode;
use crate::model::filter::{Field, SystemField};
use crate::model::filter_eval::{Fields, Value as FieldValue};
use crate::retrieval::ann::{ANN_MIN_VECTORS, AnnIndex};
use crate::retrieval::bm25::Bm25Index;
use crate::retrieval::episode_fields::EpisodeFields;
use crate::retrieval::participants::Participants;
use crate::store::IndexedEpisode;

/// What the index keeps of each episode: its filterable fields and its vector.
#[derive(Debug)]
pub struct Entry {
    pub(super) fields: EpisodeFields,
    pub(super) vector: Option<Box<[f32]>>,
}

impl Fields for Entry {
    fn get(&self, field: &Field) -> Option<FieldValue<'_>> {
        self.fields.get(field)
    }
}

#[derive(Debug, Default)]
pub struct ProjectIndex {
    pub(super) text: Bm25Index<Entry>,
    /// The vector graph of a large project (`None` below `ANN_MIN_VECTORS` vectors,
    /// while it is being built, or if building it failed: then searches scan, as for
    /// a small project).
    pub(super) ann: Option<AnnIndex>,
    /// Live episodes holding a vector.
    vectors: usize,
    /// Minimum vectors for a graph (`ANN_MIN_VECTORS`; smaller in tests).
    ann_min: usize,
    /// Building or updating the graph failed once: scan from then on, not retry.
    ann_failed: bool,
    /// A graph is being built from a copy of the vectors: the episodes whose vector
    /// changed since, to replay on it.
    building: Option<Vec<i64>>,
    /// Who the episodes were produced by and for.
    pub(super) participants: Participants,
    /// Estimated memory held (grows with inserts; removals are not subtracted, so it
    /// errs high until the project is loaded again).
    bytes: usize,
}

/// Per-episode memory of the index: postings of its text and of its context field,
/// its fields, its vector (and its share of the graph), and fixed overheads.
fn estimated_bytes(episode: &Episode, vector: Option<&[f32]>) -> usize {
    let text = episode.content.len() + episode.producer_id.len();
    let metadata: usize = episode
        .metadata
        .iter()
        .map(|(k, v)| k.len() + v.len() + 32)
        .sum();
    let vector = vector.map_or(0, |v| v.len() * 4 + 160);
    256 + text * 3 + metadata + vector
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

    /// Indexes an episode.
    fn insert(&mut self, id: i64, producer: &str, content: &str, entry: Entry) {
        if self.text.payload(id).is_some() {
            return;
        }
        let has_vector = entry.vector.is_some();
        self.count_participants(entry_participants(&entry), true);
        self.text
            .insert(id, &indexed_text(producer, content), entry);
        if has_vector {
            self.vectors += 1;
            self.add_to_graph(id);
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
        self.bytes += estimated_bytes(&episode, vector.as_deref());
        let entry = Entry {
            fields: EpisodeFields::of(&episode),
            vector: vector.map(Vec::into_boxed_slice),
        };
        self.insert(handle, &episode.producer_id, &episode.content, entry);
    }

    /// Episodes indexed.
    pub fn len(&self) -> usize {
        self.text.len()
    }

    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// An estimate of the memory the index holds, for the cache's budget.
    pub fn estimated_bytes(&self) -> usize {
        self.bytes
    }

    pub fn remove(&mut self, id: i64) {
        let Some(entry) = self.text.payload(id) else {
            return;
        };
        let had_vector = entry.vector.is_some();
        let names = entry_participants(entry);
        self.count_participants(names, false);
        self.text.remove(id);
        if had_vector {
            self.vectors -= 1;
            if let Some(ann) = &self.ann {
                ann.remove(id);
            }
            if let Some(dirty) = &mut self.building {
                dirty.push(id);
            }
        }
    }

    /// Sets (or replaces) the vector of episode `id`, if it is indexed.
    pub fn set_vector(&mut self, id: i64, vector: Box<[f32]>) {
        let Some(entry) = self.text.payload_mut(id) else {
            return;
        };
        if entry.vector.is_none() {
            self.vectors += 1;
            self.bytes += vector.len() * 4 + 160;
        }
        entry.vector = Some(vector);
        self.add_to_graph(id);
    }

    fn vector_of(&self, id: i64) -> Option<&[f32]> {
        self.text.payload(id)?.vector.as_deref()
    }

    /// Keeps the graph in step with the vector just set on episode `id`: adds it when
    /// there is a graph, or notes it for the graph being built.
    fn add_to_graph(&mut self, id: i64) {
        if let Some(dirty) = &mut self.building {
            dirty.push(id);
            return;
        }
        let Some(ann) = &self.ann else { return };
        let vector = self.vector_of(id).expect("a vector was just set");
        if let Err(err) = ann.insert(id, vector) {
            tracing::warn!(error = %err, "vector graph update failed; scanning instead");
            self.ann = None;
            self.ann_failed = true;
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

    /// Starts building the graph: a copy of every vector held (of the first one's
    /// length). Changes from now on are replayed when it is installed.
    pub fn begin_graph(&mut self) -> GraphInput {
        self.building = Some(Vec::new());
        let vectors: Vec<(i64, Box<[f32]>)> = self
            .text
            .live()
            .filter_map(|(id, entry)| Some((id, entry.vector.clone()?)))
            .collect();
        let dimensions = vectors.first().map_or(0, |(_, v)| v.len());
        GraphInput {
            dimensions,
            vectors,
        }
    }

    /// Builds a graph from `input`, without the index (the long part).
    pub fn build_graph(input: GraphInput) -> Result<AnnIndex, String> {
        let started = std::time::Instant::now();
        let items = input.vectors.iter().map(|(id, v)| (*id, &v[..]));
        let ann = AnnIndex::build(input.dimensions, items, input.vectors.len() * 2)?;
        tracing::info!(
            vectors = ann.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "vector graph built"
        );
        Ok(ann)
    }

    /// Installs the graph `begin_graph` started, with the changes made meanwhile.
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
            let replayed = match self.vector_of(id) {
                Some(vector) => ann.insert(id, vector),
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
        self.ann = Some(ann);
    }

    /// `begin_graph`, `build_graph` and `finish_graph` at once, if a graph is wanted.
    pub fn build_graph_now(&mut self) {
        if self.graph_wanted() {
            let input = self.begin_graph();
            self.finish_graph(ProjectIndex::build_graph(input));
        }
    }
}

/// The vectors a graph is built from, copied out of the index.
pub struct GraphInput {
    dimensions: usize,
    vectors: Vec<(i64, Box<[f32]>)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(vector: Option<Vec<f32>>) -> Entry {
        entry_by("ada", vector)
    }

    fn entry_by(producer: &str, vector: Option<Vec<f32>>) -> Entry {
        let episode = Episode {
            uid: uuid::Uuid::new_v4(),
            content: "hello".into(),
            producer_id: producer.into(),
            producer_role: String::new(),
            produced_for_id: String::new(),
            sequence_num: 1,
            episode_type: "message".into(),
            content_type: "string".into(),
            created_at_micros: 0,
            metadata: Default::default(),
        };
        Entry {
            fields: EpisodeFields::of(&episode),
            vector: vector.map(Vec::into_boxed_slice),
        }
    }

    fn unit(i: usize) -> Vec<f32> {
        let angle = i as f32 * 0.01;
        vec![angle.cos(), angle.sin(), 0.0]
    }

    #[test]
    fn a_question_naming_a_participant_prefers_their_turns_and_embeds_without_them() {
        let mut index = ProjectIndex::new();
        let same = vec![1.0, 0.0, 0.0];
        index.insert(
            1,
            "Ada Lovelace",
            "the race was fun",
            entry_by("Ada Lovelace", Some(same.clone())),
        );
        index.insert(
            2,
            "Bob",
            "the race was fun",
            entry_by("Bob", Some(same.clone())),
        );
        index.insert(
            3,
            "Bob",
            "we ate soup",
            entry_by("Bob", Some(vec![0.0, 1.0, 0.0])),
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
        let first = |named: &[Box<str>]| index.hybrid(&terms, &same, named, None, 3)[0].0;
        assert_eq!(first(&named.ids), 1);
        assert_eq!(first(&[Box::from("Bob")]), 2, "the named one wins a tie");
        // A participant whose every turn is gone is no longer one.
        index.remove(1);
        assert!(index.named_participants("Ada Lovelace raced").is_none());
        assert!(index.named_participants("did bob race").is_some());
    }

    #[test]
    fn the_graph_is_built_at_the_threshold_and_kept_in_step() {
        let mut index = ProjectIndex::with_ann_min(10);
        for i in 0..5 {
            index.insert(
                i,
                "ada",
                "stored with a vector",
                entry(Some(unit(i as usize))),
            );
        }
        for i in 5..20 {
            index.insert(i, "ada", "new, embedded later", entry(None));
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
        index.finish_graph(ProjectIndex::build_graph(input));
        let ann = index.ann.as_ref().expect("a graph");
        assert_eq!(ann.len(), 12, "built from every vector held, then added to");
        // Replacing a vector does not count it twice; removing takes it out.
        index.set_vector(3, unit(3).into_boxed_slice());
        index.remove(4);
        index.remove(15); // no vector: the graph is untouched
        let ann = index.ann.as_ref().unwrap();
        assert_eq!(ann.len(), 11);
        let near = ann.search(&unit(4), 3, |_| true).unwrap();
        assert!(near.iter().all(|(id, _)| *id != 4), "{near:?}");
        assert_eq!(index.vectors, 11);
    }
}
