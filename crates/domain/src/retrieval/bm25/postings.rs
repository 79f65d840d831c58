//! One term's postings, compactly: the slots holding it (ascending) and each one's term
//! frequency in a byte, the rare larger frequencies kept exactly beside them (so scores
//! never change). Also the walks over them that scoring needs: the sweep of the
//! context field in slot order, and the lookup of one slot's frequencies.

use super::super::heap;

/// A frequency byte meaning "look it up in `big`".
const BIG: u8 = u8::MAX;

#[derive(Debug, Default)]
pub(super) struct Postings {
    slots: Vec<u32>,
    tfs: Vec<u8>,
    /// `(slot, tf)` of the postings whose frequency is `BIG` or more, by slot. Boxed:
    /// one pointer per term, as nearly every term has none.
    #[allow(clippy::box_collection)]
    big: Option<Box<Vec<(u32, u32)>>>,
    /// No posting's frequency is above this (removals leave it as it was): a bound.
    pub(super) max_tf: u32,
}

impl Postings {
    /// Appends a posting after every one held (slots only grow).
    pub(super) fn push(&mut self, slot: u32, tf: u32) {
        debug_assert!(self.slots.last().is_none_or(|last| *last < slot));
        self.slots.push(slot);
        if tf >= u32::from(BIG) {
            self.tfs.push(BIG);
            self.big.get_or_insert_default().push((slot, tf));
        } else {
            self.tfs.push(tf as u8);
        }
        self.max_tf = self.max_tf.max(tf);
    }

    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(super) fn slot(&self, i: usize) -> u32 {
        self.slots[i]
    }

    pub(super) fn tf(&self, i: usize) -> u32 {
        match self.tfs[i] {
            BIG => {
                let big = self.big.as_deref().expect("big frequencies");
                let at = big
                    .binary_search_by_key(&self.slots[i], |(slot, _)| *slot)
                    .expect("a big frequency");
                big[at].1
            }
            tf => u32::from(tf),
        }
    }

    /// `(slot, tf)` of every posting, by slot.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        (0..self.slots.len()).map(|i| (self.slots[i], self.tf(i)))
    }

    /// The first posting at or after `from` whose slot is at least `slot`.
    pub(super) fn seek(&self, from: usize, slot: u32) -> usize {
        from + self.slots[from..].partition_point(|s| *s < slot)
    }

    /// The postings kept, renumbered by `renumber` (`None`: dropped).
    pub(super) fn renumbered(&self, renumber: impl Fn(u32) -> Option<u32>) -> Postings {
        let mut kept = Postings::default();
        for (slot, tf) in self.iter() {
            if let Some(slot) = renumber(slot) {
                kept.push(slot, tf);
            }
        }
        kept
    }

    pub(super) fn shrink(&mut self) {
        self.slots.shrink_to_fit();
        self.tfs.shrink_to_fit();
        if let Some(big) = &mut self.big {
            big.shrink_to_fit();
        }
    }

    /// Its slots, frequency bytes and big frequencies, as a segment holds them.
    pub(super) fn parts(&self) -> (&[u32], &[u8], &[(u32, u32)]) {
        (
            &self.slots,
            &self.tfs,
            self.big.as_deref().map_or(&[], |b| &b[..]),
        )
    }

    /// Postings from `parts` (as `parts` gave them).
    pub(super) fn from_parts(
        slots: Vec<u32>,
        tfs: Vec<u8>,
        big: Vec<(u32, u32)>,
        max_tf: u32,
    ) -> Postings {
        Postings {
            slots,
            tfs,
            big: (!big.is_empty()).then(|| Box::new(big)),
            max_tf,
        }
    }

    pub(super) fn heap_bytes(&self) -> usize {
        heap::vec(&self.slots)
            + heap::vec(&self.tfs)
            + self
                .big
                .as_ref()
                .map_or(0, |big| size_of::<Vec<(u32, u32)>>() + heap::vec(big))
    }
}

/// What a sweep needs of the index: which slots are live, and the window.
#[derive(Clone, Copy)]
pub(super) struct Slots<'a> {
    pub(super) alive: &'a [bool],
    pub(super) window: u32,
}

impl Slots<'_> {
    fn last(&self) -> u32 {
        self.alive.len() as u32 - 1
    }

    fn live(&self, slot: u32) -> bool {
        self.alive[slot as usize]
    }

    /// The frequencies of one term at live slot `slot`: in its own text, and summed
    /// over the live postings in its window (its context). `from` is a posting index
    /// not after the window's first, and becomes the window's first (slots visited in
    /// ascending order thus never walk a list twice).
    pub(super) fn at(&self, postings: &Postings, from: &mut usize, slot: u32) -> (u32, u32) {
        let start = slot.saturating_sub(self.window);
        let mut i = postings.seek(*from, start);
        *from = i;
        let (mut own, mut context) = (0, 0);
        while i < postings.len() && postings.slot(i) <= slot + self.window {
            let s = postings.slot(i);
            if self.live(s) {
                let tf = postings.tf(i);
                context += tf;
                if s == slot {
                    own = tf;
                }
            }
            i += 1;
        }
        (own, context)
    }
}

/// Every live slot within the window of one of a term's live postings, ascending, with
/// the term's frequency in its own text and summed over the live postings in its
/// window: one sweep, so each slot is visited once however many postings share it.
pub(super) struct Sweep<'a> {
    postings: &'a Postings,
    slots: Slots<'a>,
    /// The next posting whose window starts a run.
    next_posting: usize,
    /// The run being visited: `slot..=end`.
    slot: u32,
    end: u32,
    /// The first slot after every run so far.
    free: u32,
    /// Postings in `lo..hi` are those with a slot in the window of the last visited
    /// slot; `tf` sums the live ones. `own` finds the posting at the slot itself.
    lo: usize,
    hi: usize,
    own: usize,
    tf: u32,
}

impl<'a> Sweep<'a> {
    pub(super) fn new(postings: &'a Postings, slots: Slots<'a>) -> Sweep<'a> {
        Sweep {
            postings,
            slots,
            next_posting: 0,
            slot: 1,
            end: 0,
            free: 0,
            lo: 0,
            hi: 0,
            own: 0,
            tf: 0,
        }
    }
}

/// A slot of a sweep: `(slot, own tf, context tf)`.
pub(super) type Swept = (u32, u32, u32);

impl Iterator for Sweep<'_> {
    type Item = Swept;

    fn next(&mut self) -> Option<Swept> {
        let (p, w) = (self.postings, self.slots.window);
        loop {
            if self.slot > self.end {
                // The next run: around the next live posting, from where the last ended.
                let i = (self.next_posting..p.len()).find(|i| self.slots.live(p.slot(*i)))?;
                self.next_posting = i + 1;
                let slot = p.slot(i);
                self.slot = slot.saturating_sub(w).max(self.free);
                self.end = (slot + w).min(self.slots.last());
                self.free = self.end + 1;
                continue;
            }
            let slot = self.slot;
            self.slot += 1;
            while self.hi < p.len() && p.slot(self.hi) <= slot + w {
                if self.slots.live(p.slot(self.hi)) {
                    self.tf += p.tf(self.hi);
                }
                self.hi += 1;
            }
            while self.lo < self.hi && p.slot(self.lo) + w < slot {
                if self.slots.live(p.slot(self.lo)) {
                    self.tf -= p.tf(self.lo);
                }
                self.lo += 1;
            }
            if !self.slots.live(slot) {
                continue;
            }
            while self.own < self.hi && p.slot(self.own) < slot {
                self.own += 1;
            }
            let own = if self.own < self.hi && p.slot(self.own) == slot {
                p.tf(self.own)
            } else {
                0
            };
            return Some((slot, own, self.tf));
        }
    }
}
