//! `memmachine-embed-bench`: the local embedder in-process on LoCoMo's turns and
//! questions. It measures, in one run: the machine's f32 matrix-product rate with the
//! embedder's own kernel (every core busy, as in bulk embedding), bulk embedding
//! throughput (turns/s, tokens/s, achieved FLOP/s and its ratio to that rate), where
//! the time goes (tokenising and each encoder step), and single-question latency.
//! See BENCHMARKS.md.
//!
//! Run: `cargo run --release --bin memmachine-embed-bench -- --model-dir .tools/models/all-MiniLM-L6-v2`

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use memmachine::embed::local::{LocalEmbedder, PASS_TOKENS, Precision, Profiled};
use memmachine::episodic::embedding::embedding_text;
use memmachine_bert::Linear;
use rayon::prelude::*;

mod support;

use support::Result;
use support::latencies::Latencies;
use support::locomo::{self, ContentFormat};

#[derive(Parser, Debug)]
#[command(
    name = "memmachine-embed-bench",
    about = "Measures the local embedder on LoCoMo's turns and questions"
)]
struct Args {
    /// The model directory (config.json, tokenizer.json, model.safetensors)
    #[arg(long, default_value = ".tools/models/all-MiniLM-L6-v2")]
    model_dir: PathBuf,
    /// LoCoMo data set
    #[arg(long, default_value = "/work/shared/data/locomo10.json")]
    locomo: PathBuf,
    /// Texts per embedding request (the server's embedding worker sends 64)
    #[arg(long, default_value_t = 64)]
    request: usize,
    /// Times all turns are embedded (the best pass is reported, and the median; 0: none)
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Questions embedded one at a time for latency (cycled)
    #[arg(long, default_value_t = 1000)]
    questions: usize,
    /// Precision of the products: f32, bf16 (where the CPU has AVX-512 BF16) or best
    #[arg(long, default_value = "best")]
    precision: String,
    /// Seconds spent measuring the matrix-product rate
    #[arg(long, default_value_t = 3.0)]
    matmul_secs: f64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let precision = match args.precision.as_str() {
        "f32" => Precision::F32,
        "bf16" => Precision::Bf16,
        "best" => Precision::best(),
        other => return Err(format!("--precision {other}: expected f32, bf16 or best").into()),
    };
    let embedder = LocalEmbedder::load_with(&args.model_dir, precision)?;
    let (conversations, _) = locomo::load(&args.locomo, None, ContentFormat::default())?;
    let turns: Vec<String> = conversations
        .iter()
        .flat_map(|c| c.turns.iter())
        .map(|t| embedding_text(&t.speaker, &t.content))
        .collect();
    let questions: Vec<String> = conversations
        .iter()
        .flat_map(|c| c.questions.iter())
        .map(|q| q.text.clone())
        .collect();
    let lens = embedder.token_counts(&turns)?;
    let tokens: usize = lens.iter().sum();
    let flops = embedder.flops(&lens);
    println!(
        "{} turns, {tokens} tokens ({:.1} per turn), {:.2} GFLOP per pass over them; \
         {} threads, {} products",
        turns.len(),
        tokens as f64 / turns.len() as f64,
        flops / 1e9,
        embedder.threads(),
        embedder.precision().name()
    );

    let rate = matmul_rate(embedder.threads(), args.matmul_secs, Precision::F32);
    println!(
        "f32 matrix-product rate, the embedder's kernel, {} threads: {:.1} GFLOP/s",
        embedder.threads(),
        rate / 1e9
    );
    if embedder.precision() != Precision::F32 {
        let own = matmul_rate(embedder.threads(), args.matmul_secs, embedder.precision());
        println!(
            "{} matrix-product rate, {} threads: {:.1} GFLOP/s",
            embedder.precision().name(),
            embedder.threads(),
            own / 1e9
        );
    }

    if args.rounds > 0 {
        bulk(&embedder, &turns, &args, flops, tokens, rate)?;
    }
    questions_latency(&embedder, &questions, args.questions)
}

/// Embeds all `turns` `args.rounds` times and prints the figures of the best round.
fn bulk(
    embedder: &LocalEmbedder,
    turns: &[String],
    args: &Args,
    flops: f64,
    tokens: usize,
    rate: f64,
) -> Result<()> {
    let mut times = Vec::new();
    let mut profile = Profiled::default();
    for round in 0..args.rounds {
        let mut p = Profiled::default();
        let started = Instant::now();
        for request in turns.chunks(args.request.max(1)) {
            embedder.embed_profiled(request, &mut p)?;
        }
        let elapsed = started.elapsed();
        println!(
            "round {}: {:.2} s, {:.0} turns/s",
            round + 1,
            elapsed.as_secs_f64(),
            turns.len() as f64 / elapsed.as_secs_f64()
        );
        if times.iter().all(|t| elapsed < *t) {
            profile = p;
        }
        times.push(elapsed);
    }
    times.sort();
    let (best, median) = (times[0], times[times.len() / 2]);
    let achieved = flops / best.as_secs_f64();
    println!();
    println!("| figure | value |");
    println!("|---|---|");
    println!(
        "| turns/s (best of {}; median) | {:.0} ({:.0}) |",
        times.len(),
        turns.len() as f64 / best.as_secs_f64(),
        turns.len() as f64 / median.as_secs_f64()
    );
    println!("| tokens/s | {:.0} |", tokens as f64 / best.as_secs_f64());
    println!("| achieved GFLOP/s | {:.1} |", achieved / 1e9);
    println!("| f32 matrix-product rate GFLOP/s | {:.1} |", rate / 1e9);
    println!(
        "| efficiency (achieved / f32 rate) | {:.2} |",
        achieved / rate
    );

    println!();
    println!("Where the time goes (best round; thread time, summed over threads):");
    println!("| step | ms | share |");
    println!("|---|---|---|");
    let mut steps = vec![("tokenising", profile.tokenizing)];
    steps.extend(profile.encoder.steps());
    let total: u64 = steps.iter().map(|s| s.1).sum();
    for (name, nanos) in &steps {
        println!(
            "| {name} | {:.0} | {:.1} % |",
            *nanos as f64 / 1e6,
            100.0 * *nanos as f64 / total.max(1) as f64
        );
    }

    Ok(())
}

/// Embeds `count` questions one at a time and prints the latency percentiles.
fn questions_latency(embedder: &LocalEmbedder, questions: &[String], count: usize) -> Result<()> {
    let mut samples = Vec::with_capacity(count);
    for q in questions.iter().cycle().take(count.min(50)) {
        embedder.embed_blocking(std::slice::from_ref(q))?; // warm-up
    }
    for q in questions.iter().cycle().take(count) {
        let started = Instant::now();
        embedder.embed_blocking(std::slice::from_ref(q))?;
        samples.push(started.elapsed());
    }
    let q_lens = embedder.token_counts(questions)?;
    let latencies = Latencies::new(samples);
    println!();
    println!(
        "question embedding, one at a time ({} questions, {:.1} tokens on average): \
         p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        latencies.len(),
        q_lens.iter().sum::<usize>() as f64 / q_lens.len().max(1) as f64,
        latencies.percentile(50.0),
        latencies.percentile(99.0),
        latencies.max()
    );
    Ok(())
}

/// FLOP/s of the embedder's dense-layer kernel on its largest layer shape (a pass of
/// `PASS_TOKENS` rows through 384 -> 1536), each thread running its own products as
/// bulk embedding does.
fn matmul_rate(threads: usize, secs: f64, precision: Precision) -> f64 {
    let (rows, inputs, outputs) = (PASS_TOKENS, 384, 1536);
    let weight: Vec<f32> = (0..inputs * outputs)
        .map(|i| ((i % 97) as f32 - 48.0) / 97.0)
        .collect();
    let layer = Linear::new(&weight, &vec![0.0; outputs], outputs, inputs, precision);
    let x: Vec<f32> = (0..rows * inputs)
        .map(|i| ((i % 89) as f32 - 44.0) / 89.0)
        .collect();
    let deadline = Duration::from_secs_f64(secs);
    let started = Instant::now();
    let calls: u64 = (0..threads)
        .into_par_iter()
        .map(|_| {
            let mut out = vec![0f32; rows * outputs];
            let mut calls = 0u64;
            while started.elapsed() < deadline {
                layer.forward(&x, &mut out);
                calls += 1;
            }
            calls
        })
        .sum();
    2.0 * (rows * inputs * outputs) as f64 * calls as f64 / started.elapsed().as_secs_f64()
}
