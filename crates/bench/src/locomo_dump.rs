//! `memmachine-bench locomo-dump`: what offline ranking experiments need of LoCoMo, as
//! the server would see it: each turn's indexed terms and vector, each question's query
//! terms, named participants and vector (embedded as the server embeds it).
//!
//! Writes DIR/meta.json and DIR/{turns,turns_prev,questions,questions_full}.f32
//! (little-endian rows of the model's dimensions, in meta.json's order).

use std::io::Write;
use std::path::PathBuf;

use clap::Parser;
use memmachine_domain::embed::local::LocalEmbedder;
use memmachine_domain::episodic::embedding::embedding_text;
use memmachine_domain::retrieval::participants::Participants;
use memmachine_domain::retrieval::tokenize;
use serde_json::json;

use crate::support;
use support::Result;
use support::locomo::{self, ContentFormat};

#[derive(Parser, Debug)]
#[command(about = "Dumps LoCoMo's turns and questions as the server indexes them")]
pub struct Args {
    #[arg(long, default_value = ".tools/models/all-MiniLM-L6-v2")]
    model_dir: PathBuf,
    #[arg(long, default_value = "/work/shared/data/locomo10.json")]
    locomo: PathBuf,
    #[arg(long)]
    out: PathBuf,
    /// Only embed the JSON list of strings in this file (to FILE.f32)
    #[arg(long)]
    texts: Option<PathBuf>,
}

fn write_vectors(path: PathBuf, vectors: &[Vec<f32>]) -> Result<()> {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    for v in vectors {
        for x in v {
            file.write_all(&x.to_le_bytes())?;
        }
    }
    Ok(())
}

fn embed(model: &LocalEmbedder, texts: &[String]) -> Result<Vec<Vec<f32>>> {
    let mut out = Vec::with_capacity(texts.len());
    for chunk in texts.chunks(64) {
        out.extend(model.embed_blocking(chunk)?);
    }
    Ok(out)
}

pub fn main(args: Args) -> Result<()> {
    std::fs::create_dir_all(&args.out)?;
    if let Some(path) = &args.texts {
        let texts: Vec<String> = serde_json::from_slice(&std::fs::read(path)?)?;
        let model = LocalEmbedder::load(&args.model_dir)?;
        let mut out = path.clone().into_os_string();
        out.push(".f32");
        return write_vectors(out.into(), &embed(&model, &texts)?);
    }
    let (conversations, _) = locomo::load(&args.locomo, None, ContentFormat::default())?;
    let model = LocalEmbedder::load(&args.model_dir)?;
    let (mut turn_texts, mut prev_texts, mut q_texts, mut q_full) =
        (vec![], vec![], vec![], vec![]);
    let mut meta = Vec::new();
    for c in &conversations {
        let mut people = Participants::default();
        people.add(&c.speaker_a);
        people.add(&c.speaker_b);
        let mut turns = Vec::new();
        for (i, t) in c.turns.iter().enumerate() {
            let mut tokens = Vec::new();
            tokenize::for_each_word(&format!("{} {}", t.speaker, t.content), |w| {
                tokens.push(tokenize::stem(w))
            });
            let text = embedding_text(&t.speaker, &t.content);
            let prev = match i.checked_sub(1).map(|p| &c.turns[p]) {
                Some(p) if p.session == t.session => {
                    format!("{}\n{}", embedding_text(&p.speaker, &p.content), text)
                }
                _ => text.clone(),
            };
            turn_texts.push(text);
            prev_texts.push(prev);
            turns.push(json!({
                "dia_id": t.dia_id, "speaker": t.speaker, "session": t.session,
                "ts": t.timestamp.map(|ts| ts.seconds), "tokens": tokens, "text": t.content,
            }));
        }
        let mut questions = Vec::new();
        for q in &c.questions {
            let named = people.named_in(&q.text);
            let (without, ids) = match &named {
                Some(n) => (
                    n.without.clone().unwrap_or_else(|| q.text.clone()),
                    n.ids.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                ),
                None => (q.text.clone(), vec![]),
            };
            q_texts.push(without.clone());
            q_full.push(q.text.clone());
            questions.push(json!({
                "text": q.text, "category": q.category, "evidence": q.evidence,
                "named": ids, "without": without, "terms": tokenize::query_terms(&q.text),
            }));
        }
        meta.push(json!({
            "sample_id": c.sample_id, "speakers": [c.speaker_a, c.speaker_b],
            "turns": turns, "questions": questions,
        }));
    }
    std::fs::write(args.out.join("meta.json"), serde_json::to_vec(&meta)?)?;
    eprintln!(
        "embedding {} turns (twice) and {} questions",
        turn_texts.len(),
        q_texts.len()
    );
    write_vectors(args.out.join("questions.f32"), &embed(&model, &q_texts)?)?;
    write_vectors(
        args.out.join("questions_full.f32"),
        &embed(&model, &q_full)?,
    )?;
    write_vectors(args.out.join("turns.f32"), &embed(&model, &turn_texts)?)?;
    write_vectors(
        args.out.join("turns_prev.f32"),
        &embed(&model, &prev_texts)?,
    )?;
    // Sentences of each turn, "speaker: sentence", with the turn each belongs to.
    let (mut sentences, mut owners) = (Vec::new(), Vec::new());
    let mut t = 0usize;
    for c in &conversations {
        for turn in &c.turns {
            let mut start = 0;
            let text = &turn.content;
            let bytes = text.as_bytes();
            for i in 0..bytes.len() {
                let end = matches!(bytes[i], b'.' | b'!' | b'?')
                    && (i + 1 == bytes.len() || bytes[i + 1] == b' ');
                if end || i + 1 == bytes.len() {
                    let s = text[start..=i].trim();
                    if s.split_whitespace().count() >= 2 {
                        sentences.push(embedding_text(&turn.speaker, s));
                        owners.push(t);
                    }
                    start = i + 1;
                }
            }
            t += 1;
        }
    }
    std::fs::write(
        args.out.join("sentences.json"),
        serde_json::to_vec(&owners)?,
    )?;
    eprintln!("embedding {} sentences", sentences.len());
    write_vectors(args.out.join("sentences.f32"), &embed(&model, &sentences)?)?;
    Ok(())
}
