//! The sum and sum of squares of a query's BM25 scores over the live documents, which
//! hybrid ranking standardises by, without scoring every matching document.
//!
//! Only documents matching a term (in their text or context) score above zero, so the
//! sums run over them. Each such document is *owned* by one posting: that of the first
//! query term whose context covers it, and of that term's postings the first live one
//! whose window reaches it. A posting at slot p, after the term's previous live posting
//! at q, owns the live slots of `max(p - w, q + w + 1)..=p + w` that no earlier term
//! covers; the postings thus split the matching documents between them. The sums are
//! then, term by term, sums over postings, estimated from an even sample of each
//! term's postings (every one when a term has few, which makes the sums exact).

use super::maxscore::{Scorer, Term};

/// The sum and the sum of squares of the scores (f64: many small scores add up).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Sums {
    pub(super) sum: f64,
    pub(super) squares: f64,
}

/// `Sums` over the documents matching `terms`, from at most about `per_term` postings of
/// each term (all of them when it has no more: the sums are then exact, up to the order
/// they are added in).
pub(super) fn estimate(scorer: &Scorer, terms: &[Term], per_term: usize) -> Sums {
    let window = scorer.slots.window;
    let last = scorer.slots.alive.len() as u32 - 1;
    let live = |slot: u32| scorer.slots.alive[slot as usize];
    let mut total = Sums::default();
    for (t, term) in terms.iter().enumerate() {
        let postings = term.postings;
        let stride = (postings.len() / per_term.max(1)).max(1);
        let mut owned = Sums::default();
        let mut sampled = 0u32;
        for i in (0..postings.len()).step_by(stride) {
            let p = postings.slot(i);
            if !live(p) {
                continue;
            }
            sampled += 1;
            // The previous live posting, if its window meets this one's.
            let first = (0..i)
                .rev()
                .map(|j| postings.slot(j))
                .take_while(|q| q + 2 * window >= p)
                .find(|q| live(*q))
                .map_or(p.saturating_sub(window), |q| q + window + 1);
            for slot in first..=(p + window).min(last) {
                if !live(slot) {
                    continue;
                }
                let earlier = terms[..t]
                    .iter()
                    .any(|other| scorer.slots.at(other.postings, &mut 0, slot).1 > 0);
                if earlier {
                    continue;
                }
                let score = f64::from(scorer.score_at(terms, slot));
                owned.sum += score;
                owned.squares += score * score;
            }
        }
        if sampled > 0 {
            // Scaled from the live postings sampled to all the term's live ones.
            let scale = f64::from(term.live) / f64::from(sampled);
            total.sum += owned.sum * scale;
            total.squares += owned.squares * scale;
        }
    }
    total
}
