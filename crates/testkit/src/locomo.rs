//! The LoCoMo data set (`/work/shared/data/README.md`): conversations with their turns
//! and the questions of categories 1-4 with their evidence, and recall@k as that README
//! defines it. Used by `memmachine-bench locomo` and by the recall regression test
//! (`tests/it/locomo_recall.rs`).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use chrono::NaiveDateTime;
use memmachine_proto::v2 as pb;

pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Question categories scored (5, adversarial, has no evidence to retrieve).
pub const CATEGORIES: [u32; 4] = [1, 2, 3, 4];
/// Format of `session_N_date_time`, e.g. "1:56 pm on 8 May, 2023".
const DATE_FORMAT: &str = "%I:%M %p on %d %B, %Y";

/// How a turn becomes an episode's content.
#[derive(Debug, Clone, Copy)]
pub struct ContentFormat {
    /// Prefix the text with "speaker: " (the speaker is the producer either way).
    pub speaker_prefix: bool,
    /// Append ` [image: <caption>]` to turns sharing an image.
    pub captions: bool,
}

impl Default for ContentFormat {
    fn default() -> Self {
        ContentFormat {
            speaker_prefix: false,
            captions: true,
        }
    }
}

pub struct Turn {
    pub dia_id: String,
    pub speaker: String,
    /// The turn's text, with ` [image: <caption>]` when it shares an image.
    pub content: String,
    pub session: u32,
    pub timestamp: Option<prost_types::Timestamp>,
}

pub struct Question {
    pub text: String,
    pub category: u32,
    /// Distinct evidence ids that name a turn of the conversation, in order.
    pub evidence: Vec<String>,
}

pub struct Conversation {
    pub sample_id: String,
    pub speaker_a: String,
    pub speaker_b: String,
    pub turns: Vec<Turn>,
    /// Questions of categories 1-4 with at least one evidence id naming a turn.
    pub questions: Vec<Question>,
}

/// What loading left out, reported with the results.
#[derive(Default)]
pub struct LoadStats {
    /// Evidence ids (after splitting on ';' and trimming) naming no turn.
    pub dropped_ids: Vec<String>,
    /// Questions of categories 1-4 left with no evidence.
    pub skipped_questions: usize,
    /// Sessions whose date_time did not parse (their turns carry no timestamp).
    pub undated_sessions: usize,
}

fn str_field<'a>(value: &'a serde_json::Value, key: &str) -> &'a str {
    value[key].as_str().unwrap_or_default()
}

fn parse_timestamp(text: &str) -> Option<prost_types::Timestamp> {
    let time = NaiveDateTime::parse_from_str(text.trim(), DATE_FORMAT).ok()?;
    Some(prost_types::Timestamp {
        seconds: time.and_utc().timestamp(),
        nanos: 0,
    })
}

/// The samples of the LoCoMo file at `path`.
pub fn read_samples(path: &Path) -> Result<Vec<serde_json::Value>> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    match serde_json::from_str(&text)? {
        serde_json::Value::Array(samples) => Ok(samples),
        _ => Err("the LoCoMo file is not a JSON list".into()),
    }
}

/// A conversation's `session_N` turn lists in numeric order (serde_json sorts object
/// keys as strings).
pub fn sessions(
    conversation: &serde_json::Map<String, serde_json::Value>,
) -> Vec<(u32, &Vec<serde_json::Value>)> {
    let mut sessions: Vec<(u32, &Vec<serde_json::Value>)> = conversation
        .iter()
        .filter_map(|(key, value)| {
            let n = key.strip_prefix("session_")?.parse().ok()?;
            Some((n, value.as_array()?))
        })
        .collect();
    sessions.sort_by_key(|(n, _)| *n);
    sessions
}

/// Loads the first `limit` conversations (all when `None`) of the LoCoMo file at `path`.
pub fn load(
    path: &Path,
    limit: Option<usize>,
    format: ContentFormat,
) -> Result<(Vec<Conversation>, LoadStats)> {
    let samples = read_samples(path)?;
    let mut stats = LoadStats::default();
    let mut conversations = Vec::new();
    for (index, sample) in samples.iter().enumerate().take(limit.unwrap_or(usize::MAX)) {
        let sample_id = sample["sample_id"]
            .as_str()
            .map_or_else(|| format!("conv-{index}"), str::to_string);
        let conversation = &sample["conversation"];
        let sessions_map = conversation
            .as_object()
            .ok_or_else(|| format!("{sample_id} has no conversation"))?;
        let mut turns = Vec::new();
        for (n, session) in sessions(sessions_map) {
            let date = str_field(conversation, &format!("session_{n}_date_time"));
            let timestamp = parse_timestamp(date);
            if timestamp.is_none() {
                stats.undated_sessions += 1;
                eprintln!("warning: {sample_id} session {n}: cannot parse date {date:?}");
            }
            for turn in session {
                let speaker = str_field(turn, "speaker");
                let mut content = str_field(turn, "text").to_string();
                if format.speaker_prefix {
                    content = format!("{speaker}: {content}");
                }
                if let Some(caption) = turn["blip_caption"].as_str()
                    && format.captions
                {
                    content.push_str(&format!(" [image: {caption}]"));
                }
                turns.push(Turn {
                    dia_id: str_field(turn, "dia_id").to_string(),
                    speaker: speaker.to_string(),
                    content,
                    session: n,
                    timestamp,
                });
            }
        }
        let known: HashSet<&str> = turns.iter().map(|t| t.dia_id.as_str()).collect();
        let mut questions = Vec::new();
        for qa in sample["qa"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            let category = qa["category"].as_u64().unwrap_or(0) as u32;
            if !CATEGORIES.contains(&category) {
                continue;
            }
            let mut evidence: Vec<String> = Vec::new();
            let entries = qa["evidence"].as_array().map(Vec::as_slice);
            for entry in entries
                .unwrap_or_default()
                .iter()
                .filter_map(|e| e.as_str())
            {
                for id in entry.split(';').map(str::trim) {
                    if !known.contains(id) {
                        stats.dropped_ids.push(format!("{sample_id}:{id:?}"));
                    } else if !evidence.iter().any(|e| e == id) {
                        evidence.push(id.to_string());
                    }
                }
            }
            if evidence.is_empty() {
                stats.skipped_questions += 1;
                continue;
            }
            questions.push(Question {
                text: str_field(qa, "question").to_string(),
                category,
                evidence,
            });
        }
        conversations.push(Conversation {
            sample_id,
            speaker_a: str_field(conversation, "speaker_a").to_string(),
            speaker_b: str_field(conversation, "speaker_b").to_string(),
            turns,
            questions,
        });
    }
    if conversations.is_empty() {
        return Err(format!("no conversations in {}", path.display()).into());
    }
    Ok((conversations, stats))
}

impl Conversation {
    /// The other speaker of the conversation (empty if `speaker` is neither).
    pub fn listener(&self, speaker: &str) -> &str {
        if speaker == self.speaker_a {
            &self.speaker_b
        } else if speaker == self.speaker_b {
            &self.speaker_a
        } else {
            ""
        }
    }

    /// The turns as `AddMemories` calls of `batch` messages into `org`/`project`:
    /// speaker as producer, session date as timestamp, `dia_id` in metadata.
    pub fn add_requests(
        &self,
        org: &str,
        project: &str,
        batch: usize,
    ) -> Vec<pb::AddMemoriesRequest> {
        self.turns
            .chunks(batch.max(1))
            .map(|chunk| pb::AddMemoriesRequest {
                org_id: org.into(),
                project_id: project.into(),
                types: vec![pb::MemoryType::Episodic as i32],
                messages: chunk
                    .iter()
                    .map(|turn| pb::MemoryMessage {
                        expires_at: None,
                        content: turn.content.clone(),
                        producer: turn.speaker.clone(),
                        produced_for: self.listener(&turn.speaker).to_string(),
                        timestamp: turn.timestamp,
                        role: "user".into(),
                        metadata: HashMap::from([
                            ("dia_id".to_string(), turn.dia_id.clone()),
                            ("session".to_string(), turn.session.to_string()),
                        ]),
                        episode_type: pb::EpisodeType::Message as i32,
                        ..Default::default()
                    })
                    .collect(),
            })
            .collect()
    }
}

/// Sums of per-question recall at each cut-off, and the number of questions.
#[derive(Clone, Default)]
pub struct RecallSums {
    pub questions: usize,
    pub sums: Vec<f64>,
}

impl RecallSums {
    pub fn add(&mut self, recalls: &[f64]) {
        if self.sums.is_empty() {
            self.sums = vec![0.0; recalls.len()];
        }
        for (sum, r) in self.sums.iter_mut().zip(recalls) {
            *sum += r;
        }
        self.questions += 1;
    }

    /// Mean recall at the `i`-th cut-off.
    pub fn mean(&self, i: usize) -> f64 {
        if self.questions == 0 {
            return f64::NAN;
        }
        self.sums.get(i).copied().unwrap_or(f64::NAN) / self.questions as f64
    }
}

/// Recall of `evidence` in the first `k` of `ranked`, for each `k` of `ks`.
pub fn recall_at(evidence: &[String], ranked: &[String], ks: &[usize]) -> Vec<f64> {
    ks.iter()
        .map(|&k| {
            let top = &ranked[..k.min(ranked.len())];
            let found = evidence.iter().filter(|id| top.contains(id)).count();
            found as f64 / evidence.len() as f64
        })
        .collect()
}

/// The distinct-enough words of `texts` (lower-cased, trimmed of punctuation, longer
/// than two letters), which the benches use to vary recycled turns.
pub fn vocabulary<'a>(texts: impl Iterator<Item = &'a str>) -> Vec<String> {
    texts
        .flat_map(str::split_whitespace)
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .filter(|w| w.len() > 2)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_session_dates() {
        let ts = parse_timestamp("1:56 pm on 8 May, 2023").expect("parses");
        let expected = chrono::NaiveDate::from_ymd_opt(2023, 5, 8)
            .and_then(|d| d.and_hms_opt(13, 56, 0))
            .expect("valid")
            .and_utc()
            .timestamp();
        assert_eq!(ts.seconds, expected);
        assert!(parse_timestamp("12:09 am on 13 September, 2023").is_some());
        assert!(parse_timestamp("not a date").is_none());
    }

    #[test]
    fn recall_counts_evidence_in_the_top_k() {
        let ids = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let evidence = ids(&["D1:2", "D3:4"]);
        let ranked = ids(&["D1:1", "D3:4", "D9:9", "D1:2"]);
        assert_eq!(
            recall_at(&evidence, &ranked, &[1, 2, 4, 50]),
            [0.0, 0.5, 1.0, 1.0]
        );
    }
}
