//! `memmachine-bench embed`: the local embedder in-process on LoCoMo's turns and
//! questions, per product kernel (`--kernel auto|NAME|all`). It prints the CPU's
//! features and the kernel `auto` chooses, a reference f32 rate (numpy's OpenBLAS sgemm
//! when numpy is importable), and for each kernel: its raw product rate (every core
//! busy, as in bulk embedding), bulk embedding throughput (turns/s, tokens/s, achieved
//! FLOP/s and its ratio to those rates), where the time goes (tokenising and each
//! encoder step), single-question latency, and with `--cosine` the cosine of its
//! vectors against f32's.
//! See BENCHMARKS.md.
//!
//! Run: `cargo run --release -p memmachine-bench -- embed --model-dir .tools/models/all-MiniLM-L6-v2`

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use memmachine_bert::Linear;
use memmachine_domain::embed::local::{Kernel, LocalEmbedder, PASS_TOKENS, Profiled};
use memmachine_domain::episodic::embedding::embedding_text;
use rayon::prelude::*;

use crate::support;

use support::Result;
use support::latencies::Latencies;
use support::locomo::{self, ContentFormat};

#[derive(Parser, Debug)]
#[command(about = "Measures the local embedder on LoCoMo's turns and questions")]
pub struct Args {
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
    /// Product kernel: auto, a kernel's name (amx, avx512-int16, avx512-int8,
    /// avx512-bf16, avx512, avx2, portable) or all (every kernel this CPU has)
    #[arg(long)]
    kernel: Option<String>,
    /// Older spelling: f32, bf16 or best (ignored when --kernel is given)
    #[arg(long)]
    precision: Option<String>,
    /// Also print each lossy kernel's cosine (min, mean) against f32 over all turns
    #[arg(long)]
    cosine: bool,
    /// Seconds spent measuring the matrix-product rate
    #[arg(long, default_value_t = 3.0)]
    matmul_secs: f64,
}

/// Kernels named by `--kernel` (`auto`, a name, or `all` the CPU has), or by the older
/// `--precision` when `--kernel` is not given.
fn kernels(args: &Args) -> Result<Vec<Kernel>> {
    let named = match (args.kernel.as_deref(), args.precision.as_deref()) {
        (Some("all"), _) => return Ok(Kernel::available_all()),
        (Some("auto"), _) | (None, None | Some("best")) => Kernel::choose(),
        (Some(name), _) => name.parse::<Kernel>()?,
        (None, Some("f32")) => Kernel::best_f32(),
        (None, Some("bf16")) => {
            Kernel::best_bf16().ok_or("--precision bf16: this CPU has no bf16 products")?
        }
        (None, Some(other)) => {
            return Err(format!("--precision {other}: expected f32, bf16 or best").into());
        }
    };
    Ok(vec![named.check()?])
}

/// CPU features that decide the kernels, as the CPU reports them.
fn cpu_features() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let flags = [
            ("avx2", has!("avx2")),
            ("fma", has!("fma")),
            ("avx512f", has!("avx512f")),
            ("avx512bw", has!("avx512bw")),
            ("avx512vnni", has!("avx512vnni")),
            ("avx512bf16", has!("avx512bf16")),
            ("avx512fp16", has!("avx512fp16")),
            ("amx", Kernel::Amx.available()),
        ];
        let on: Vec<&str> = flags.iter().filter(|f| f.1).map(|f| f.0).collect();
        let off: Vec<&str> = flags.iter().filter(|f| !f.1).map(|f| f.0).collect();
        format!("{} (not: {})", on.join(" "), off.join(" "))
    }
    #[cfg(not(target_arch = "x86_64"))]
    String::from("not x86-64")
}

/// numpy's sgemm rate (OpenBLAS, all cores) on the bench's product shape, or why not.
fn numpy_rate(secs: f64) -> std::result::Result<f64, String> {
    let (rows, inputs, outputs) = (PASS_TOKENS, 384, 1536);
    let script = format!(
        "import numpy as np, time\n\
         a = np.random.rand({rows}, {inputs}).astype(np.float32)\n\
         b = np.random.rand({inputs}, {outputs}).astype(np.float32)\n\
         c = a @ b\n\
         n, t0 = 0, time.perf_counter()\n\
         while time.perf_counter() - t0 < {secs}:\n    c = a @ b; n += 1\n\
         print(2.0 * {rows} * {inputs} * {outputs} * n / (time.perf_counter() - t0))\n"
    );
    #[allow(
        clippy::disallowed_methods,
        reason = "a short command that ends by itself"
    )]
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    if !out.status.success() {
        return Err("numpy not available".into());
    }
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|_| "numpy not available".into())
}

/// One kernel's figures, for the summary.
struct Figures {
    kernel: Kernel,
    turns_per_s: f64,
    achieved: f64,
    question_p50_ms: f64,
    rate: f64,
}

pub fn main(args: Args) -> Result<()> {
    let kernels = kernels(&args)?;
    println!("CPU: {}", cpu_features());
    println!(
        "kernels available: {}; auto chooses {}",
        Kernel::available_all()
            .iter()
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(", "),
        Kernel::choose()
    );
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
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let reference = match numpy_rate(args.matmul_secs) {
        Ok(rate) => {
            println!(
                "reference: numpy (OpenBLAS) sgemm, {PASS_TOKENS}x384x1536: {:.1} GFLOP/s",
                rate / 1e9
            );
            Some(rate)
        }
        Err(why) => {
            println!("reference: {why}");
            None
        }
    };
    let mut reference_vectors: Option<Vec<Vec<f32>>> = None;
    let mut summary = Vec::new();
    for kernel in kernels {
        println!();
        println!("## kernel {kernel}");
        let embedder = LocalEmbedder::load_with(&args.model_dir, kernel)?;
        let lens = embedder.token_counts(&turns)?;
        let tokens: usize = lens.iter().sum();
        let flops = embedder.flops(&lens);
        println!(
            "{} turns, {tokens} tokens ({:.1} per turn), {:.2} GFLOP per pass over them; \
             {} threads, kernel {kernel}",
            turns.len(),
            tokens as f64 / turns.len() as f64,
            flops / 1e9,
            embedder.threads(),
        );
        let rate = matmul_rate(threads, args.matmul_secs, kernel);
        println!(
            "{kernel} product rate, the embedder's kernel, {threads} threads: {:.1} G{}/s",
            rate / 1e9,
            if kernel.lossy() && kernel != Kernel::Avx512Bf16 && kernel != Kernel::Amx {
                "OP"
            } else {
                "FLOP"
            }
        );
        let mut figures = Figures {
            kernel,
            turns_per_s: 0.0,
            achieved: 0.0,
            question_p50_ms: 0.0,
            rate,
        };
        if args.rounds > 0 {
            (figures.turns_per_s, figures.achieved) =
                bulk(&embedder, &turns, &args, flops, tokens, rate)?;
        }
        figures.question_p50_ms = questions_latency(&embedder, &questions, args.questions)?;
        if args.cosine && kernel.lossy() {
            if reference_vectors.is_none() {
                let exact = LocalEmbedder::load_with(&args.model_dir, Kernel::best_f32())?;
                reference_vectors = Some(embed_all(&exact, &turns, args.request)?);
            }
            let want = reference_vectors.as_ref().expect("computed above");
            let got = embed_all(&embedder, &turns, args.request)?;
            let cosines: Vec<f64> = got
                .iter()
                .zip(want)
                .map(|(g, w)| g.iter().zip(w).map(|(a, b)| (a * b) as f64).sum())
                .collect();
            let min = cosines.iter().copied().fold(f64::INFINITY, f64::min);
            let mean = cosines.iter().sum::<f64>() / cosines.len().max(1) as f64;
            println!(
                "cosine against {} over {} turns: min {min:.5}, mean {mean:.6}",
                Kernel::best_f32(),
                cosines.len()
            );
        }
        summary.push(figures);
    }
    println!();
    println!(
        "| kernel | turns/s | question p50 ms | product rate G(FL)OP/s | achieved GFLOP/s | efficiency vs own kernel | vs f32 reference |"
    );
    println!("|---|---|---|---|---|---|---|");
    let f32_reference = summary
        .iter()
        .filter(|f| !f.kernel.lossy())
        .map(|f| f.rate)
        .chain(reference)
        .fold(0f64, f64::max);
    for f in &summary {
        println!(
            "| {} | {:.0} | {:.3} | {:.1} | {:.1} | {:.2} | {} |",
            f.kernel,
            f.turns_per_s,
            f.question_p50_ms,
            f.rate / 1e9,
            f.achieved / 1e9,
            f.achieved / f.rate,
            if f32_reference > 0.0 {
                format!("{:.2}", f.achieved / f32_reference)
            } else {
                "-".into()
            }
        );
    }
    if f32_reference > 0.0 {
        println!(
            "f32 reference: {:.1} GFLOP/s (best of numpy's sgemm and the f32 kernels above)",
            f32_reference / 1e9
        );
    }
    Ok(())
}

/// Vectors of all `turns`, in requests of `request`.
fn embed_all(embedder: &LocalEmbedder, turns: &[String], request: usize) -> Result<Vec<Vec<f32>>> {
    let mut out = Vec::with_capacity(turns.len());
    for chunk in turns.chunks(request.max(1)) {
        out.extend(embedder.embed_blocking(chunk)?);
    }
    Ok(out)
}

/// Embeds all `turns` `args.rounds` times and prints the figures of the best round.
fn bulk(
    embedder: &LocalEmbedder,
    turns: &[String],
    args: &Args,
    flops: f64,
    tokens: usize,
    rate: f64,
) -> Result<(f64, f64)> {
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
    println!("| kernel's product rate G(FL)OP/s | {:.1} |", rate / 1e9);
    println!(
        "| efficiency (achieved / kernel's rate) | {:.2} |",
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

    Ok((turns.len() as f64 / best.as_secs_f64(), achieved))
}

/// Embeds `count` questions one at a time and prints the latency percentiles.
fn questions_latency(embedder: &LocalEmbedder, questions: &[String], count: usize) -> Result<f64> {
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
    Ok(latencies.percentile(50.0))
}

/// FLOP/s of the embedder's dense-layer kernel on its largest layer shape (a pass of
/// `PASS_TOKENS` rows through 384 -> 1536), each thread running its own products as
/// bulk embedding does.
fn matmul_rate(threads: usize, secs: f64, kernel: Kernel) -> f64 {
    let (rows, inputs, outputs) = (PASS_TOKENS, 384, 1536);
    let weight: Vec<f32> = (0..inputs * outputs)
        .map(|i| ((i % 97) as f32 - 48.0) / 97.0)
        .collect();
    let layer = Linear::new(&weight, &vec![0.0; outputs], outputs, inputs, kernel);
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
