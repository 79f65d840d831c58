//! `memmachine-bench WORKLOAD [FLAGS]`: every benchmark of the server in one binary, a
//! subcommand per workload (`memmachine-bench help` lists them; each keeps its own
//! flags and report). Those that measure a running server start the `memmachine`
//! executable beside this one unless given `--server`; see BENCHMARKS.md.

use std::fmt::Debug;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod embed;
mod feed;
mod forget;
mod import;
mod ingest_search;
mod lexical;
mod lexical_hybrid;
mod load;
mod locomo;
mod locomo_dump;
mod redact;
mod rest;
mod retention;
mod scale;
mod segment;
mod semantic;
mod semantic_quality;
mod support;

#[derive(Parser)]
#[command(
    name = "memmachine-bench",
    about = "Benchmarks of the memmachine server"
)]
struct Cli {
    #[command(subcommand)]
    workload: Workload,
}

#[derive(Subcommand)]
enum Workload {
    /// Ingest throughput and search latency per corpus size, over gRPC
    IngestSearch(ingest_search::Args),
    /// Retrieval recall on LoCoMo, per ranking mode
    Locomo(locomo::Args),
    /// A weighted mix of calls from many clients (load generator)
    Load(load::Args),
    /// The local embedder in-process, per kernel
    Embed(embed::Args),
    /// LoCoMo as the server indexes it, for offline ranking experiments
    LocomoDump(locomo_dump::Args),
    /// ImportMemories against AddMemories throughput
    Import(import::Args),
    /// Change-feed latency across replicas, and idle watchers' cost
    Feed(feed::Args),
    /// The REST gateway's added latency against gRPC
    Rest(rest::Args),
    /// The retention sweeper on a store directly
    Retention(retention::Args),
    /// One large project, or many small ones
    Scale(scale::Args),
    /// BM25 search over a large in-process index
    Lexical(lexical::Args),
    /// A project's index written and read as a segment, in-process
    Segment(segment::Args),
    /// Semantic memory with a scripted chat model
    Semantic(semantic::Args),
    /// Forgetting a subject among many others
    Forget(forget::Args),
    /// Semantic memory's recall on LoCoMo with a real (or scripted) model
    SemanticQuality(semantic_quality::Args),
    /// Redaction of identifiers per message, in process
    Redact(redact::Args),
}

fn main() -> ExitCode {
    match Cli::parse().workload {
        Workload::IngestSearch(args) => exit(ingest_search::main(args)),
        Workload::Locomo(args) => exit(locomo::main(args)),
        Workload::Load(args) => load::main(args),
        Workload::Embed(args) => exit(embed::main(args)),
        Workload::LocomoDump(args) => exit(locomo_dump::main(args)),
        Workload::Import(args) => exit(import::main(args)),
        Workload::Feed(args) => exit(feed::main(args)),
        Workload::Rest(args) => exit(rest::main(args)),
        Workload::Retention(args) => exit(retention::main(args)),
        Workload::Scale(args) => exit(scale::main(args)),
        Workload::Lexical(args) => exit(lexical::main(args)),
        Workload::Segment(args) => exit(segment::main(args)),
        Workload::Semantic(args) => exit(semantic::main(args)),
        Workload::Forget(args) => exit(forget::main(args)),
        Workload::SemanticQuality(args) => exit(semantic_quality::main(args)),
        Workload::Redact(args) => exit(redact::main(args)),
    }
}

/// As a `main` returning the result would: the error's Debug form, and failure.
fn exit<E: Debug>(result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("Error: {err:?}");
            ExitCode::FAILURE
        }
    }
}
