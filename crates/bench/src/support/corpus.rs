//! The benchmark corpus: LoCoMo turns, recycled with seeded suffixes to any size, and
//! the LoCoMo questions as queries.

use std::collections::HashMap;
use std::path::Path;

use memmachine_proto::v2 as pb;

use super::Result;
use super::locomo;
use super::rng::Rng;

/// Seed of the generator that varies recycled turns.
pub const SEED: u64 = 0x6d65_6d6d_6163_6869;

pub struct Turn {
    pub speaker: String,
    pub text: String,
    pub dia_id: String,
    pub sample_id: String,
}

pub struct Corpus {
    pub turns: Vec<Turn>,
    pub questions: Vec<String>,
    /// Every word of every turn, in order, to draw suffixes from.
    pub words: Vec<String>,
    /// `speaker_a` of the first conversation.
    pub first_speaker: String,
}

pub fn load_corpus(path: &Path) -> Result<Corpus> {
    let samples = locomo::read_samples(path)?;
    let mut turns = Vec::new();
    let mut questions = Vec::new();
    let mut first_speaker = String::new();
    for (index, sample) in samples.iter().enumerate() {
        let sample_id = sample["sample_id"]
            .as_str()
            .map_or_else(|| format!("conv-{index}"), str::to_string);
        let conversation = sample["conversation"]
            .as_object()
            .ok_or("a sample has no conversation")?;
        if first_speaker.is_empty() {
            first_speaker = conversation
                .get("speaker_a")
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string();
        }
        for (_, session) in locomo::sessions(conversation) {
            for turn in session {
                let (Some(speaker), Some(text)) = (turn["speaker"].as_str(), turn["text"].as_str())
                else {
                    continue;
                };
                if text.trim().is_empty() {
                    continue;
                }
                turns.push(Turn {
                    speaker: speaker.to_string(),
                    text: text.to_string(),
                    dia_id: turn["dia_id"].as_str().unwrap_or_default().to_string(),
                    sample_id: sample_id.clone(),
                });
            }
        }
        if let Some(qa) = sample["qa"].as_array() {
            questions.extend(
                qa.iter()
                    .filter_map(|q| q["question"].as_str())
                    .filter(|q| !q.trim().is_empty())
                    .map(str::to_string),
            );
        }
    }
    if turns.is_empty() || questions.is_empty() {
        return Err(format!("no turns or no questions in {}", path.display()).into());
    }
    let words = locomo::vocabulary(turns.iter().map(|t| t.text.as_str()));
    Ok(Corpus {
        turns,
        questions,
        words,
        first_speaker,
    })
}

/// Episode `i`: turn `i mod turns`; copies after the first get a deterministic suffix of
/// 3 to 6 words drawn from the whole corpus so the index is not all duplicates.
pub fn message(corpus: &Corpus, i: usize, rng: &mut Rng) -> pb::MemoryMessage {
    let turn = &corpus.turns[i % corpus.turns.len()];
    let copy = i / corpus.turns.len();
    let mut content = turn.text.clone();
    if copy > 0 {
        content.push_str(" (");
        for k in 0..3 + rng.below(4) {
            if k > 0 {
                content.push(' ');
            }
            content.push_str(&corpus.words[rng.below(corpus.words.len())]);
        }
        content.push(')');
    }
    pb::MemoryMessage {
        content,
        producer: turn.speaker.clone(),
        role: "user".into(),
        metadata: HashMap::from([
            ("dia_id".to_string(), turn.dia_id.clone()),
            ("sample_id".to_string(), turn.sample_id.clone()),
        ]),
        episode_type: pb::EpisodeType::Message as i32,
        ..Default::default()
    }
}
