//! Top-k BM25 by MaxScore: documents are visited in slot order, but only those matching
//! an *essential* term: terms are sorted by their score bound, and the lowest-bound
//! ones whose bounds together cannot reach the k-th best score so far are only looked
//! up for the documents that could still make it. A common word's postings are thus
//! mostly skipped. The ranking is the exhaustive one exactly (ties included): each
//! candidate's score is summed term by term in query order, as the exhaustive pass sums.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::postings::{Postings, Slots, Sweep, Swept};
use super::{B, CONTEXT_WEIGHT, K1, saturate};

/// Bounds are stretched by this before pruning, so f32 rounding (scores summed in
/// another order than the bounds) never prunes a document that belongs.
const MARGIN: f32 = 1.001;

/// One query term as scoring sees it.
pub(super) struct Term<'a> {
    pub(super) postings: &'a Postings,
    pub(super) idf: f32,
    /// The IDF of the context field (unused without one).
    pub(super) context_idf: f32,
    /// Live documents holding the term.
    pub(super) live: u32,
}

/// What scoring a slot needs of the index.
pub(super) struct Scorer<'a> {
    pub(super) slots: Slots<'a>,
    pub(super) lens: &'a [u32],
    pub(super) avg_len: f32,
    pub(super) avg_context_len: f32,
    /// The context-field length norm of the slot scored last: `(slot, norm)`.
    pub(super) context_norm: std::cell::Cell<(u32, f32)>,
}

impl Scorer<'_> {
    /// The own-text score of a term with frequency `tf` at `slot`.
    pub(super) fn own(&self, idf: f32, slot: u32, tf: u32) -> f32 {
        let len = self.lens[slot as usize];
        let norm = K1 * (1.0 - B + B * len as f32 / self.avg_len);
        idf * saturate(tf, norm)
    }

    /// The context-field score of a term whose frequency in the window of `slot` is `tf`.
    pub(super) fn context(&self, context_idf: f32, slot: u32, tf: u32) -> f32 {
        // The terms of one slot are scored one after another: its window's length is
        // summed once for them all.
        let norm = match self.context_norm.get() {
            (at, norm) if at == slot => norm,
            _ => {
                let len: u32 = self.window(slot).map(|s| self.lens[s as usize]).sum();
                let norm = K1 * (1.0 - B + B * len as f32 / self.avg_context_len);
                self.context_norm.set((slot, norm));
                norm
            }
        };
        CONTEXT_WEIGHT * context_idf * saturate(tf, norm)
    }

    /// The live slots within the context window of `slot`, itself included.
    fn window(&self, slot: u32) -> impl Iterator<Item = u32> + '_ {
        let w = self.slots.window;
        let first = slot.saturating_sub(w);
        let last = (slot as usize + w as usize).min(self.slots.alive.len() - 1) as u32;
        (first..=last).filter(|s| self.slots.alive[*s as usize])
    }

    /// The BM25 score of live `slot` for `terms`, each term's frequencies looked up
    /// (a binary search in its postings) and summed in query order, as the exhaustive
    /// pass sums: the same bits.
    pub(super) fn score_at(&self, terms: &[Term], slot: u32) -> f32 {
        let mut score = 0.0f32;
        for term in terms {
            let (own, context) = self.score(term, slot, self.slots.at(term.postings, &mut 0, slot));
            score += own;
            score += context;
        }
        score
    }

    /// A term's score at a slot from its frequencies there (own text, context).
    pub(super) fn score(&self, term: &Term, slot: u32, (own, context): (u32, u32)) -> (f32, f32) {
        let own = if own > 0 {
            self.own(term.idf, slot, own)
        } else {
            0.0
        };
        let context = if context > 0 && self.slots.window > 0 {
            self.context(term.context_idf, slot, context)
        } else {
            0.0
        };
        (own, context)
    }

    /// No document scores more than this for `term` (before `MARGIN`): the saturating
    /// factor stays below k1 + 1, and below its value at the term's highest frequency
    /// and the shortest possible length in the own text.
    fn bound(&self, term: &Term) -> f32 {
        let own = term.idf * saturate(term.postings.max_tf, K1 * (1.0 - B));
        if self.slots.window == 0 {
            return own;
        }
        own + CONTEXT_WEIGHT * term.context_idf * (K1 + 1.0)
    }

    /// The `limit` best live slots matching a term whose `accept` holds, best first
    /// (by score, then the later slot), with their scores.
    pub(super) fn top_k(
        &self,
        terms: &[Term],
        limit: usize,
        mut accept: impl FnMut(u32) -> bool,
    ) -> Vec<(u32, f32)> {
        let n = terms.len();
        if n == 0 || limit == 0 {
            return Vec::new();
        }
        // Terms by ascending bound; `reach[j]` bounds a document matching only the
        // first `j + 1` of them.
        let mut order: Vec<usize> = (0..n).collect();
        let bounds: Vec<f32> = terms.iter().map(|t| self.bound(t)).collect();
        order.sort_by(|a, b| bounds[*a].total_cmp(&bounds[*b]));
        // Each term's place in `order`, by query order.
        let mut position = vec![0usize; n];
        for (j, &t) in order.iter().enumerate() {
            position[t] = j;
        }
        let reach: Vec<f32> = order
            .iter()
            .scan(0.0f32, |sum, t| {
                *sum += bounds[*t];
                Some(*sum * MARGIN)
            })
            .collect();
        let mut sweeps: Vec<Sweep> = order
            .iter()
            .map(|t| Sweep::new(terms[*t].postings, self.slots))
            .collect();
        let mut heads: Vec<Option<Swept>> = sweeps.iter_mut().map(Iterator::next).collect();
        let mut cursors = vec![0usize; n];
        // Per position in `order`: the current slot's (own, context) scores.
        let mut scores = vec![(0.0f32, 0.0f32); n];
        let mut best: BinaryHeap<Reverse<Ranked>> = BinaryHeap::with_capacity(limit + 1);
        // Terms `order[..essential]` are not essential; `threshold` is the k-th best
        // score once there are k.
        let (mut essential, mut threshold) = (0usize, f32::NEG_INFINITY);
        while let Some(slot) = heads[essential..].iter().flatten().map(|h| h.0).min() {
            let mut partial = 0.0f32;
            for j in essential..n {
                scores[j] = match heads[j] {
                    Some((s, own, context)) if s == slot => {
                        heads[j] = sweeps[j].next();
                        self.score(&terms[order[j]], slot, (own, context))
                    }
                    _ => (0.0, 0.0),
                };
                partial += scores[j].0 + scores[j].1;
            }
            if essential > 0 {
                if (partial + reach[essential - 1]) * MARGIN < threshold {
                    continue;
                }
                // The others, highest bound first, while the document can still make it.
                let mut pruned = false;
                for j in (0..essential).rev() {
                    let term = &terms[order[j]];
                    let tfs = self.slots.at(term.postings, &mut cursors[j], slot);
                    scores[j] = self.score(term, slot, tfs);
                    partial += scores[j].0 + scores[j].1;
                    let rest = if j > 0 { reach[j - 1] } else { 0.0 };
                    if (partial + rest) * MARGIN < threshold {
                        pruned = true;
                        break;
                    }
                }
                if pruned {
                    continue;
                }
            }
            // Summed in query order, as the exhaustive pass sums.
            let mut score = 0.0f32;
            for &j in &position {
                score += scores[j].0;
                score += scores[j].1;
            }
            let ranked = Ranked { score, slot };
            let better = best.len() < limit || best.peek().is_some_and(|w| ranked > w.0);
            if !better || !accept(slot) {
                continue;
            }
            best.push(Reverse(ranked));
            if best.len() > limit {
                best.pop();
            }
            if best.len() == limit {
                threshold = best.peek().expect("k best").0.score;
                while essential < n && reach[essential] < threshold {
                    essential += 1;
                }
            }
        }
        best.into_sorted_vec()
            .into_iter()
            .map(|Reverse(r)| (r.slot, r.score))
            .collect()
    }
}

/// A scored slot, ordered by score and then by slot (the later one first among ties).
#[derive(Debug, Clone, Copy)]
struct Ranked {
    score: f32,
    slot: u32,
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then(self.slot.cmp(&other.slot))
    }
}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked {}
