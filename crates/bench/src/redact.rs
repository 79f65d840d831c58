//! `memmachine-bench redact`: what redaction costs per message (issue 49, item 3), in
//! process, one thread. The messages are LoCoMo's turns (or synthetic ones when the file
//! is absent), recycled to `--messages`; `--identifiers` percent of them get one of a few
//! identifiers appended (an email address, a phone number, a card number, an IBAN, an
//! IP address). Every built-in detector is on, plus one custom pattern. Prints µs per
//! message at p50/p99 and the throughput in MB/s.
//!
//! Run: `cargo run --release --locked -p memmachine-bench -- redact`

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use memmachine_domain::redaction::{Detector, Policy, Redactor};

use crate::support::corpus::load_corpus;
use crate::support::rng::Rng;

#[derive(Parser, Debug)]
#[command(about = "Redaction's cost per message, in process")]
pub struct Args {
    /// Messages redacted (LoCoMo's turns recycled)
    #[arg(long, default_value_t = 50_000)]
    messages: usize,
    /// Percent of the messages given an identifier
    #[arg(long, default_value_t = 20)]
    identifiers: usize,
    /// LoCoMo's locomo10.json (synthetic messages when absent)
    #[arg(long, default_value = "/work/shared/data/locomo10.json")]
    data: PathBuf,
}

const SYNTHETIC: &[&str] = &[
    "I went hiking with my sister last weekend and we saw a family of deer near the lake.",
    "That sounds wonderful! How long have you been painting landscapes like that one?",
    "My daughter started piano lessons in May and she already plays two short pieces.",
    "We are thinking of adopting a golden retriever, the shelter has a lovely one.",
    "The conference in Lisbon was great, I gave a talk about community gardens.",
];

fn identifier(rng: &mut Rng, k: usize) -> String {
    match rng.below(6) {
        0 => format!(" You can email me at friend{k}@example.com."),
        1 => format!(" Call me on +1 (415) 555-{:04} tonight.", k % 10_000),
        2 => " My card is 4111 1111 1111 1111, please don't share it.".to_string(),
        3 => " The IBAN is DE89 3704 0044 0532 0130 00 for the rent.".to_string(),
        4 => format!(
            " The server sits at 10.0.{}.{} at home.",
            k % 256,
            (k / 256) % 256
        ),
        _ => format!(" My member number is MBR-{:06}.", k % 1_000_000),
    }
}

pub fn main(args: Args) -> crate::support::Result<()> {
    let base: Vec<String> = match load_corpus(&args.data) {
        Ok(corpus) => corpus.turns.into_iter().map(|t| t.text).collect(),
        Err(err) => {
            eprintln!("{}: {err}; synthetic messages instead", args.data.display());
            SYNTHETIC.iter().map(|s| s.to_string()).collect()
        }
    };
    let mut rng = Rng::new(0x7265_6461_6374);
    let messages: Vec<String> = (0..args.messages)
        .map(|k| {
            let mut text = base[k % base.len()].clone();
            if rng.below(100) < args.identifiers {
                text.push_str(&identifier(&mut rng, k));
            }
            text
        })
        .collect();
    let policy = Policy {
        detectors: Detector::ALL.to_vec(),
        custom: vec![("member".into(), r"\bMBR-\d{6}\b".into())],
    };
    let redactor = Redactor::new(&policy, b"bench-project-key-0123456789")?;
    // Warm-up: one pass over a tenth.
    for text in messages.iter().take(args.messages / 10) {
        std::hint::black_box(redactor.redact(text));
    }
    let mut times: Vec<Duration> = Vec::with_capacity(messages.len());
    let mut findings = 0usize;
    let mut with_findings = 0usize;
    let started = Instant::now();
    for text in &messages {
        let t = Instant::now();
        let out = std::hint::black_box(redactor.redact(text));
        times.push(t.elapsed());
        findings += out.findings.len();
        with_findings += usize::from(!out.findings.is_empty());
    }
    let wall = started.elapsed();
    times.sort_unstable();
    let us = |p: f64| {
        let rank = ((p / 100.0) * times.len() as f64).ceil() as usize;
        times[rank.clamp(1, times.len()) - 1].as_secs_f64() * 1e6
    };
    let bytes: usize = messages.iter().map(String::len).sum();
    println!(
        "redact: {} messages ({} base, mean {:.0} bytes), {} with findings ({} findings)",
        messages.len(),
        base.len(),
        bytes as f64 / messages.len() as f64,
        with_findings,
        findings
    );
    println!(
        "  per message: p50 {:.2} µs, p99 {:.2} µs, max {:.2} µs; {:.1} MB/s ({:.0} messages/s, one thread)",
        us(50.0),
        us(99.0),
        us(100.0),
        bytes as f64 / wall.as_secs_f64() / 1e6,
        messages.len() as f64 / wall.as_secs_f64()
    );
    Ok(())
}
