//! `memmachine-bench segment`: a project's index persisted as a segment, in this process
//! (no server): builds a `ProjectIndex` of N LoCoMo-derived episodes (lexical: no
//! vectors; hybrid: 384-dimension vectors, and the graph when `--graph`), writes its
//! segment, reads it back (map, checksum, build), and prints the write and read times,
//! the file's size and the index's heap, checking that the index read ranks as the one
//! written. See BENCHMARKS.md ("Persisted index segments (issue 47)").
//!
//! Run: `cargo run --release -p memmachine-bench -- segment --sizes 100000,1000000`

use std::path::PathBuf;
use std::sync::RwLock;
use std::time::Instant;

use clap::Parser;
use memmachine_core::model::{Episode, EpisodeHandle, ProjectKey};
use memmachine_core::store::IndexedEpisode;
use memmachine_domain::retrieval::project_index::ProjectIndex;
use memmachine_domain::retrieval::segment::{Expected, Segments};
use memmachine_domain::retrieval::tokenize::query_terms;

use crate::support;

use support::Result;
use support::corpus::{SEED, load_corpus, message};
use support::rng::Rng;

#[derive(Parser, Debug)]
#[command(about = "Measures writing and reading a project's index segment")]
pub struct Args {
    /// LoCoMo data set
    #[arg(long, default_value = "/work/shared/data/locomo10.json")]
    locomo: PathBuf,
    /// Episodes of the index, comma separated (a fresh index for each)
    #[arg(long, value_delimiter = ',', default_value = "100000")]
    sizes: Vec<usize>,
    /// Also with a 384-dimension vector per episode
    #[arg(long)]
    hybrid: bool,
    /// Build the vector graph before writing (hybrid only; slow at a million)
    #[arg(long)]
    graph: bool,
    /// Directory for the segment files (a temporary one by default)
    #[arg(long)]
    dir: Option<PathBuf>,
}

pub fn main(args: Args) -> Result<()> {
    let corpus = load_corpus(&args.locomo)?;
    let dir = args.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("memmachine-segment-{}", std::process::id()))
    });
    let segments = Segments::open(&dir, "bench-store".into())?;
    let key = ProjectKey {
        org_id: "bench".into(),
        project_id: "segment".into(),
    };
    let questions: Vec<Vec<String>> = corpus
        .questions
        .iter()
        .take(200)
        .map(|q| query_terms(q))
        .collect();
    println!("| episodes | vectors | build s | write s | read s | file MB | heap MB | same |");
    println!("|---|---|---|---|---|---|---|---|");
    for &size in &args.sizes {
        let started = Instant::now();
        let mut index = ProjectIndex::new();
        let mut rng = Rng::new(SEED);
        for i in 0..size {
            let m = message(&corpus, i, &mut rng);
            let vector = args.hybrid.then(|| {
                (0..384)
                    .map(|_| rng.below(2001) as f32 / 1000.0 - 1.0)
                    .collect::<Vec<f32>>()
            });
            index.insert_stored(IndexedEpisode {
                handle: EpisodeHandle::from_raw(i as i64 + 1),
                episode: Episode {
                    uid: uuid::Uuid::new_v4(),
                    content: m.content,
                    producer_id: m.producer,
                    producer_role: m.role,
                    produced_for_id: String::new(),
                    sequence_num: i as i64 + 1,
                    episode_type: "message".into(),
                    content_type: "string".into(),
                    created_at_micros: 1_700_000_000_000_000 + i as i64 * 1_000_000,
                    metadata: m.metadata.into_iter().collect(),
                    expires_at_micros: None,
                },
                vector,
            });
        }
        if args.graph {
            index.build_graph_now();
        }
        index.finish_load();
        let build = started.elapsed().as_secs_f64();
        let expected = Expected {
            project: 1,
            key: &key,
            embedder: args.hybrid.then_some("bench"),
        };
        let index = RwLock::new(index);
        let started = Instant::now();
        let path = segments
            .write(&expected, &index, segments.erasures())?
            .ok_or("nothing written")?;
        let write = started.elapsed().as_secs_f64();
        let bytes = std::fs::metadata(&path)?.len();
        let index = index.into_inner().expect("index lock");
        let started = Instant::now();
        let read = segments.read(&expected).ok_or("the segment was not read")?;
        let read_s = started.elapsed().as_secs_f64();
        let same = questions
            .iter()
            .all(|terms| index.lexical(terms, None, 10) == read.index.lexical(terms, None, 10));
        println!(
            "| {size} | {} | {build:.1} | {write:.2} | {read_s:.2} | {:.0} | {:.0} | {same} |",
            if args.graph {
                "graph"
            } else if args.hybrid {
                "slab"
            } else {
                "none"
            },
            bytes as f64 / 1e6,
            read.index.heap_bytes() as f64 / 1e6,
        );
        drop(read);
        drop(index);
    }
    if args.dir.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}
