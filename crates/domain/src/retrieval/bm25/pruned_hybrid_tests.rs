//! Hybrid ranking over pruned candidates (MaxScore's lexical top, looked-up scores of
//! the dense candidates, the spread of BM25 summed or estimated from postings) against
//! the exhaustive fusion, on random corpora: context windows 0 to 3, removals, payload
//! filters, dense candidates (some of them removed), vectors missing, and the
//! participant, time and session lifts.

use std::collections::HashMap;

use super::tests::{Mix, random_index};
use super::*;
use crate::retrieval::fusion::{Options, Prior, RankingWeights, SESSION_GAP_MICROS};
use crate::retrieval::tokenize::query_terms;

/// Some documents have no vector yet; the others a similarity fixed by their id.
fn similarity(id: i64) -> Option<f32> {
    (id % 7 != 3).then(|| ((id * 37) % 101) as f32 / 101.0)
}

/// Lifts as `project_search::Asked` gives them: a named participant, the period
/// asked about; sessions of 25 turns.
fn prior(id: i64, weights: &RankingWeights) -> Prior {
    Prior {
        participant: if id % 3 == 0 {
            weights.participant
        } else {
            0.0
        },
        time: if id % 5 == 1 { weights.time } else { 0.0 },
        said: Some(id * 60_000_000 + (id / 25) * 2 * SESSION_GAP_MICROS),
    }
}

/// A random query over the words `random_index` uses (and one it never does).
fn random_query(mix: &mut Mix) -> Vec<String> {
    let words = [
        "red", "kite", "dog", "moon", "tea", "nothing", "hill", "sun",
    ];
    let query: Vec<&str> = (0..1 + mix.below(5))
        .map(|_| words[mix.below(words.len())])
        .collect();
    query_terms(&query.join(" "))
}

struct Case {
    terms: Vec<String>,
    limit: usize,
    modulus: i64,
    dense: Vec<i64>,
    weights: RankingWeights,
    explain: bool,
}

fn random_case(mix: &mut Mix, docs: usize, session: bool) -> Case {
    let weights = RankingWeights {
        session: if session && mix.below(2) == 0 {
            0.5
        } else {
            0.0
        },
        ..RankingWeights::default()
    };
    Case {
        terms: random_query(mix),
        limit: 1 + mix.below(20),
        modulus: 1 + mix.below(3) as i64,
        // Ids a graph might propose, removed ones among them.
        dense: (0..mix.below(30)).map(|_| mix.below(docs) as i64).collect(),
        weights,
        explain: mix.below(2) == 0,
    }
}

fn run(index: &Bm25Index<i64>, case: &Case, plan: HybridPlan) -> Vec<Hit> {
    let options = Options {
        weights: &case.weights,
        explain: case.explain,
        dense_candidates: Some(&case.dense),
    };
    let modulus = case.modulus;
    index.search_hybrid_planned(
        &case.terms,
        |id, _| similarity(id),
        case.limit,
        |id| id % modulus == 0,
        |id| prior(*id, &case.weights),
        options,
        plan,
    )
}

fn exhaustive(lexical_candidates: usize) -> HybridPlan {
    HybridPlan {
        lexical_candidates,
        ..HybridPlan::EXHAUSTIVE
    }
}

#[test]
fn pruned_hybrid_ranks_as_the_exhaustive_fusion_when_every_posting_is_summed() {
    let mut mix = Mix(47);
    for corpus in 0..120 {
        let index = random_index(&mut mix);
        let docs = index.docs.len();
        for _ in 0..8 {
            let case = random_case(&mut mix, docs, true);
            // Few lexical candidates, so MaxScore's cut is what picks them.
            let lexical_candidates = 1 + mix.below(40);
            let pruned = HybridPlan {
                lexical_candidates,
                exact_postings: 0,
                sampled_postings: usize::MAX,
            };
            let got = run(&index, &case, pruned);
            let want = run(&index, &case, exhaustive(lexical_candidates));
            let ids = |hits: &[Hit]| hits.iter().map(|h| h.handle).collect::<Vec<_>>();
            let context = format!(
                "corpus {corpus}, {:?}, limit {}, filter % {}, dense {:?}",
                case.terms, case.limit, case.modulus, case.dense
            );
            assert_eq!(ids(&got), ids(&want), "{context}");
            // The spread is summed in another order: the last bits may differ.
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g.score - w.score).abs() <= 1e-4,
                    "{context}: {g:?} vs {w:?}"
                );
                assert_eq!(g.dense, w.dense, "{context}");
                if let (Some(g), Some(w)) = (g.parts, w.parts) {
                    assert!((g.lexical - w.lexical).abs() <= 1e-4, "{context}");
                    assert_eq!((g.dense, g.context), (w.dense, w.context), "{context}");
                    assert_eq!((g.participant, g.time), (w.participant, w.time));
                    assert!((g.session - w.session).abs() <= 1e-4, "{context}");
                }
            }
        }
    }
}

#[test]
fn the_default_plan_scores_few_postings_exactly_as_the_exhaustive_fusion() {
    let mut mix = Mix(5);
    for corpus in 0..60 {
        let index = random_index(&mut mix);
        let case = random_case(&mut mix, index.docs.len(), true);
        let got = run(&index, &case, HybridPlan::default());
        let want = run(&index, &case, HybridPlan::EXHAUSTIVE);
        let pairs = |hits: &[Hit]| hits.iter().map(|h| (h.handle, h.score)).collect::<Vec<_>>();
        assert_eq!(pairs(&got), pairs(&want), "corpus {corpus}");
    }
}

/// With the spread estimated from a sample of postings, each candidate's fused score is
/// the exhaustive one plus `a * bm25 + b`, one `a` (the change in 1 / sd) and one `b`
/// for all: two hits change places only when their exhaustive scores are closer than
/// `|a|` times the difference of their BM25 scores.
#[test]
fn pruned_hybrid_with_a_sampled_spread_differs_only_by_the_scale_of_bm25() {
    let mut mix = Mix(11);
    let mut scaled = 0;
    for corpus in 0..120 {
        let index = random_index(&mut mix);
        let docs = index.docs.len();
        for _ in 0..6 {
            let mut case = random_case(&mut mix, docs, false);
            let lexical_candidates = 1 + mix.below(40);
            let sampled = HybridPlan {
                lexical_candidates,
                exact_postings: 0,
                sampled_postings: 1 + mix.below(6),
            };
            // Every candidate, so the fit sees them all.
            case.limit = docs;
            case.modulus = 1;
            let got = run(&index, &case, sampled);
            let want = run(&index, &case, exhaustive(lexical_candidates));
            let bm25: HashMap<i64, f32> = (index.search_exhaustive(&case.terms, docs, |_| true))
                .into_iter()
                .collect();
            let lexical = |id: i64| f64::from(bm25.get(&id).copied().unwrap_or(0.0));
            let exact: HashMap<i64, f32> = want.iter().map(|h| (h.handle, h.score)).collect();
            let sorted = |hits: &[Hit]| {
                let mut ids: Vec<i64> = hits.iter().map(|h| h.handle).collect();
                ids.sort_unstable();
                ids
            };
            assert_eq!(
                sorted(&got),
                sorted(&want),
                "corpus {corpus}: one candidate set"
            );
            let Some(first) = got.first() else { continue };
            let diff = |h: &Hit| f64::from(h.score) - f64::from(exact[&h.handle]);
            let far = (got.iter())
                .max_by(|x, y| {
                    let gap = |h: &Hit| (lexical(h.handle) - lexical(first.handle)).abs();
                    gap(x).total_cmp(&gap(y))
                })
                .expect("a hit");
            let spread = lexical(far.handle) - lexical(first.handle);
            let a = if spread.abs() > 1e-6 {
                (diff(far) - diff(first)) / spread
            } else {
                0.0
            };
            let b = diff(first) - a * lexical(first.handle);
            scaled += usize::from(a.abs() > 1e-6);
            for hit in &got {
                let off = diff(hit) - (a * lexical(hit.handle) + b);
                let tolerance = 1e-4 * (1.0 + f64::from(hit.score.abs()) + lexical(hit.handle));
                assert!(
                    off.abs() <= tolerance,
                    "corpus {corpus}: {hit:?} off by {off}"
                );
            }
            // Any pair ranked otherwise than exhaustively is within that bound.
            for (i, above) in got.iter().enumerate() {
                for below in &got[i + 1..] {
                    let gap = f64::from(exact[&below.handle]) - f64::from(exact[&above.handle]);
                    let moved = a.abs() * (lexical(above.handle) - lexical(below.handle)).abs();
                    assert!(
                        gap <= moved + 1e-4,
                        "corpus {corpus}: {above:?} over {below:?}"
                    );
                }
            }
        }
    }
    assert!(
        scaled > 50,
        "the samples changed the spread in {scaled} cases only"
    );
}

#[test]
fn summed_spread_is_the_exhaustive_one_and_the_sampled_one_near_it() {
    let mut mix = Mix(3);
    let mut worst: f64 = 0.0;
    for corpus in 0..120 {
        let index = random_index(&mut mix);
        let terms = random_query(&mut mix);
        let scores = index.lexical_scores(&terms);
        let (mean, sd) = fusion::mean_sd_live(&scores.values, &index.alive);
        let scorer = index.scorer();
        let scored = index.terms(&terms);
        let sums = moments::estimate(&scorer, &scored, usize::MAX);
        let (m, s) = fusion::mean_sd_of(index.live, sums.sum, sums.squares);
        let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * (1.0 + y.abs());
        assert!(
            close(m, mean) && close(s, sd),
            "corpus {corpus}: {m} {s} vs {mean} {sd}"
        );
        if sd > 0.0 {
            let sums = moments::estimate(&scorer, &scored, 64);
            let (_, s) = fusion::mean_sd_of(index.live, sums.sum, sums.squares);
            worst = worst.max((s / sd - 1.0).abs());
        }
    }
    // 64 postings a term, on these corpora of up to 400 documents.
    assert!(worst < 0.5, "a sampled spread off by {worst:.2}");
}
