//! `memmachine-bench lexical`: lexical search over one large project, in this process
//! (no server): builds a BM25 index of N LoCoMo-derived episodes (the turns and
//! suffixes `memmachine-bench scale` adds), then runs the LoCoMo questions top-10,
//! pruned (MaxScore) and exhaustive, unfiltered and filtered by producer, and prints
//! p50/p99 of each, whether both rankings agree, and the index's heap bytes per episode.
//! See BENCHMARKS.md ("Every CPU, and a million episodes").
//!
//! With `--hybrid`, hybrid ranking's BM25 and fusion part instead (`lexical_hybrid.rs`).
//!
//! Run: `cargo run --release -p memmachine-bench -- lexical --sizes 1000000`

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use memmachine_core::model::filter::{Field, SystemField};
use memmachine_core::model::filter_eval::{Fields, Value};
use memmachine_domain::retrieval::bm25::Bm25Index;
use memmachine_domain::retrieval::episode_fields::EpisodeFields;
use memmachine_domain::retrieval::tokenize::query_terms;

use crate::support;

use support::Result;
use support::corpus::{SEED, load_corpus, message};
use support::latencies::Latencies;
use support::rng::Rng;

/// A search filter over the index's payloads.
type Accept<'a> = dyn Fn(&EpisodeFields) -> bool + 'a;

#[derive(Parser, Debug)]
#[command(about = "Measures pruned and exhaustive BM25 search over a large in-process index")]
pub struct Args {
    /// LoCoMo data set
    #[arg(long, default_value = "/work/shared/data/locomo10.json")]
    locomo: PathBuf,
    /// Episodes of the index, comma separated (a fresh index for each)
    #[arg(long, value_delimiter = ',', default_value = "100000")]
    sizes: Vec<usize>,
    /// Timed searches per pass
    #[arg(long, default_value_t = 1000)]
    queries: usize,
    #[arg(long, default_value_t = 10)]
    top_k: usize,
    /// Time hybrid ranking's BM25 and fusion part instead, pruned and exhaustive
    /// (`lexical_hybrid.rs`)
    #[arg(long)]
    hybrid: bool,
    /// With `--hybrid`: time the pruned ranking only (for a profile of it)
    #[arg(long)]
    pruned_only: bool,
}

pub fn main(args: Args) -> Result<()> {
    let corpus = load_corpus(&args.locomo)?;
    let questions: Vec<Vec<String>> = corpus
        .questions
        .iter()
        .map(|q| query_terms(q))
        .filter(|terms| !terms.is_empty())
        .collect();
    let speaker = corpus.first_speaker.clone();
    let by_speaker = |fields: &EpisodeFields| {
        matches!(fields.get(&Field::System(SystemField::ProducerId)),
            Some(Value::Text(p)) if p == speaker)
    };
    if !args.hybrid {
        println!(
            "| episodes | filter | pruned p50 / p99 ms | exhaustive p50 / p99 ms | same | heap B/episode |"
        );
        println!("|---|---|---|---|---|---|");
    }
    for &size in &args.sizes {
        let started = Instant::now();
        let mut index: Bm25Index<EpisodeFields> = Bm25Index::new();
        let mut rng = Rng::new(SEED);
        for i in 0..size {
            let m = message(&corpus, i, &mut rng);
            let metadata: BTreeMap<String, String> = m.metadata.into_iter().collect();
            let fields = EpisodeFields::new(&m.producer, &m.role, "", "message", 0, &metadata);
            index.insert(i as i64, &m.content, fields);
        }
        index.shrink();
        let heap = index.heap_bytes(EpisodeFields::heap_bytes);
        eprintln!(
            "{size} episodes indexed in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        let unfiltered = |_: &EpisodeFields| true;
        let passes: [(&str, &Accept); 2] = [("none", &unfiltered), ("producer", &by_speaker)];
        if args.hybrid {
            crate::lexical_hybrid::passes(
                &index,
                &questions,
                &passes,
                args.queries,
                args.top_k,
                args.pruned_only,
            );
            continue;
        }
        for (name, accept) in passes {
            let timed = |pruned: bool| {
                let mut samples = Vec::with_capacity(args.queries);
                for terms in questions.iter().cycle().take(args.queries) {
                    let started = Instant::now();
                    let hits = if pruned {
                        index.search(terms, args.top_k, accept)
                    } else {
                        index.search_exhaustive(terms, args.top_k, accept)
                    };
                    samples.push(started.elapsed());
                    std::hint::black_box(hits);
                }
                Latencies::new(samples)
            };
            let (pruned, exhaustive) = (timed(true), timed(false));
            let same = questions.iter().take(args.queries).all(|terms| {
                index.search(terms, args.top_k, accept)
                    == index.search_exhaustive(terms, args.top_k, accept)
            });
            println!(
                "| {size} | {name} | {:.2} / {:.2} | {:.2} / {:.2} | {same} | {:.0} |",
                pruned.percentile(50.0),
                pruned.percentile(99.0),
                exhaustive.percentile(50.0),
                exhaustive.percentile(99.0),
                heap as f64 / size as f64,
            );
        }
    }
    Ok(())
}
