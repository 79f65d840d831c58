//! `memmachine-bench lexical --hybrid`: hybrid ranking's BM25 and fusion part over the
//! same in-process index, pruned (MaxScore candidates, looked-up scores, the spread of
//! BM25 estimated from postings) and exhaustive (every match scored). The vectors are
//! stand-ins: each episode's similarity is a hash of its id, and 64 ids a query stand
//! for the graph's nearest (the graph's own search is not timed here). Also how far the
//! estimated spread of BM25 (what fusion standardises by) is from the exact one.

use memmachine_domain::retrieval::bm25::{Bm25Index, HybridPlan};
use memmachine_domain::retrieval::episode_fields::EpisodeFields;
use memmachine_domain::retrieval::fusion::{Options, Prior, RankingWeights};
use memmachine_domain::retrieval::rescore::Hit;

use crate::support::cpu::cpu_seconds;
use crate::support::latencies::Latencies;

/// A search filter over the index's payloads.
type Accept<'a> = dyn Fn(&EpisodeFields) -> bool + 'a;

/// Ids the graph would propose per query (`project_search::GRAPH_CANDIDATES`).
const DENSE_CANDIDATES: u64 = 64;

/// SplitMix64 of `x`.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A cosine-like similarity in -0.2..0.6, fixed by the id.
fn similarity(id: i64) -> Option<f32> {
    Some((mix(id as u64) % 10_000) as f32 / 12_500.0 - 0.2)
}

/// Prints one row per filter: pruned and exhaustive p50 / p99 ms, CPU ms per search,
/// and the share of queries whose top `top_k` ids are the same.
pub fn passes(
    index: &Bm25Index<EpisodeFields>,
    questions: &[Vec<String>],
    filters: &[(&str, &Accept)],
    queries: usize,
    top_k: usize,
    pruned_only: bool,
) {
    let size = index.len() as u64;
    let weights = RankingWeights::default();
    let dense: Vec<Vec<i64>> = (0..questions.len() as u64)
        .map(|q| {
            (0..DENSE_CANDIDATES)
                .map(|j| (mix(q << 8 | j) % size) as i64)
                .collect()
        })
        .collect();
    println!(
        "| episodes | filter | hybrid pruned p50 / p99 ms | CPU ms | exhaustive p50 / p99 ms | CPU ms | same top {top_k} | sd error p50 / p99 / max % |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (name, accept) in filters {
        let search = |q: usize, plan: HybridPlan| -> Vec<Hit> {
            let options = Options {
                weights: &weights,
                explain: false,
                dense_candidates: Some(&dense[q]),
            };
            index.search_hybrid_planned(
                &questions[q],
                |id, _| similarity(id),
                top_k,
                accept,
                |_| Prior::default(),
                options,
                plan,
            )
        };
        let timed = |plan: HybridPlan| {
            let mut samples = Vec::with_capacity(queries);
            let cpu = cpu_seconds("self");
            for q in (0..questions.len()).cycle().take(queries) {
                let started = std::time::Instant::now();
                std::hint::black_box(search(q, plan));
                samples.push(started.elapsed());
            }
            let cpu_ms = cpu_seconds("self")
                .zip(cpu)
                .map_or(f64::NAN, |(after, before)| {
                    (after - before) * 1000.0 / queries as f64
                });
            (Latencies::new(samples), cpu_ms)
        };
        let (pruned, pruned_cpu) = timed(HybridPlan::default());
        if pruned_only {
            println!(
                "| {size} | {name} | {:.2} / {:.2} | {pruned_cpu:.2} | | | |",
                pruned.percentile(50.0),
                pruned.percentile(99.0)
            );
            continue;
        }
        let (exhaustive, exhaustive_cpu) = timed(HybridPlan::EXHAUSTIVE);
        let checked = queries.min(questions.len());
        let same = (0..checked)
            .filter(|q| {
                let ids = |hits: Vec<Hit>| hits.into_iter().map(|h| h.handle).collect::<Vec<_>>();
                ids(search(*q, HybridPlan::default())) == ids(search(*q, HybridPlan::EXHAUSTIVE))
            })
            .count();
        // How far the estimated spread of BM25 is from the exact one, per query.
        let sampled = HybridPlan::default().sampled_postings;
        let mut errors: Vec<f64> = (questions.iter().take(checked))
            .map(|terms| {
                let [(_, exact), (_, estimated)] = index.lexical_spread(terms, sampled);
                if exact > 0.0 {
                    (estimated / exact - 1.0).abs()
                } else {
                    0.0
                }
            })
            .collect();
        errors.sort_by(f64::total_cmp);
        let error = |p: f64| {
            errors
                .get(((errors.len() as f64 * p) as usize).min(errors.len().saturating_sub(1)))
                .copied()
                .unwrap_or(0.0)
                * 100.0
        };
        println!(
            "| {size} | {name} | {:.2} / {:.2} | {pruned_cpu:.2} | {:.2} / {:.2} | {exhaustive_cpu:.2} | {:.3} | {:.2} / {:.2} / {:.2} |",
            pruned.percentile(50.0),
            pruned.percentile(99.0),
            exhaustive.percentile(50.0),
            exhaustive.percentile(99.0),
            same as f64 / checked as f64,
            error(0.5),
            error(0.99),
            error(1.0),
        );
    }
}
