//! A BM25 index as a segment holds it (`segment/`): every array flat, in slot and term
//! order, so that reading it back gives the same slots, term ids and statistics, and
//! so the same scores, as the index written.

use std::collections::HashMap;
use std::io::{self, Write};

use super::postings::Postings;
use super::{Bm25Index, Doc, ScorePool};
use crate::retrieval::flat::{Decoder, Encoder, ranges};

impl<T> Bm25Index<T> {
    /// Writes everything but the payloads (`payloads` gives those, in slot order).
    pub(crate) fn encode<W: Write>(&self, enc: &mut Encoder<W>) -> io::Result<()> {
        enc.u64(self.context_window as u64)?;
        enc.u64(self.live as u64)?;
        enc.u64(self.total_len)?;
        // A word no live document holds is left out (its term id stays, unnamed): it
        // may be an erased subject's, and a segment must not keep it.
        let held = |id: u32| self.df[id as usize] > 0;
        let mut terms = vec![""; self.vocab.len()];
        for (term, &id) in &self.vocab {
            if held(id) {
                terms[id as usize] = term;
            }
        }
        enc.strs(&terms)?;
        let (words, word_ids): (Vec<&str>, Vec<u32>) = (self.word_ids.iter())
            .filter(|(_, id)| held(**id))
            .map(|(w, id)| (&**w, *id))
            .unzip();
        enc.strs(&words)?;
        enc.pod(&word_ids)?;
        let parts: Vec<_> = self.postings.iter().map(Postings::parts).collect();
        let mut end = 0u64;
        let ends: Vec<u64> = parts
            .iter()
            .map(|(slots, _, _)| {
                end += slots.len() as u64;
                end
            })
            .collect();
        enc.pod(&ends)?;
        enc.pods(end as usize, parts.iter().map(|p| p.0))?;
        enc.pods(end as usize, parts.iter().map(|p| p.1))?;
        let max_tf: Vec<u32> = self.postings.iter().map(|p| p.max_tf).collect();
        enc.pod(&max_tf)?;
        let big: Vec<[u32; 3]> = (parts.iter().enumerate())
            .flat_map(|(term, p)| p.2.iter().map(move |(s, tf)| [term as u32, *s, *tf]))
            .collect();
        enc.pod(&big)?;
        enc.pod(&self.df)?;
        enc.pod(&self.context_df)?;
        let ids: Vec<i64> = self.docs.iter().map(|d| d.id).collect();
        enc.pod(&ids)?;
        let mut end = 0u64;
        let ends: Vec<u64> = (self.docs.iter())
            .map(|d| {
                end += d.terms.len() as u64;
                end
            })
            .collect();
        enc.pod(&ends)?;
        enc.pods(end as usize, self.docs.iter().map(|d| &d.terms[..]))?;
        let alive: Vec<u8> = self.alive.iter().map(|a| u8::from(*a)).collect();
        enc.pod(&alive)?;
        enc.pod(&self.lens)
    }

    /// Every slot's payload, in slot order: `None` for a removed document (whose
    /// payload is never read again, and may hold what was erased).
    pub(crate) fn payloads(&self) -> impl ExactSizeIterator<Item = Option<&T>> {
        (self.docs.iter().zip(&self.alive)).map(|(d, alive)| alive.then_some(&d.payload))
    }

    /// The index `encode` wrote, with the payloads `payloads` reads (given how many).
    pub(crate) fn decode(
        dec: &mut Decoder<'_>,
        payloads: impl FnOnce(&mut Decoder<'_>, usize) -> Result<Vec<T>, String>,
    ) -> Result<Bm25Index<T>, String> {
        let context_window = dec.u64()? as usize;
        let live = dec.u64()? as usize;
        let total_len = dec.u64()?;
        let terms = dec.strs()?;
        let n = terms.len();
        let vocab: HashMap<Box<str>, u32> = (terms.iter().enumerate())
            .filter(|(_, t)| !t.is_empty())
            .map(|(id, t)| (Box::from(*t), id as u32))
            .collect();
        let words = dec.strs()?;
        let word_ids = dec.pod_cow::<u32>()?;
        if words.len() != word_ids.len() || word_ids.iter().any(|id| *id as usize >= n) {
            return Err("word ids out of bounds".into());
        }
        let word_ids: HashMap<Box<str>, u32> = words
            .iter()
            .map(|w| Box::from(*w))
            .zip(word_ids.iter().copied())
            .collect();
        let ends = dec.pod_cow::<u64>()?;
        let slots = dec.pod_cow::<u32>()?;
        let tfs = dec.pod_cow::<u8>()?;
        let max_tf = dec.pod_cow::<u32>()?;
        let big = dec.pod_cow::<[u32; 3]>()?;
        let df = dec.pod::<u32>()?;
        let context_df = dec.pod::<u32>()?;
        if [ends.len(), max_tf.len(), df.len(), context_df.len()] != [n; 4]
            || slots.len() != tfs.len()
        {
            return Err("term arrays of unequal lengths".into());
        }
        let ids = dec.pod_cow::<i64>()?;
        let term_ends = dec.pod_cow::<u64>()?;
        let doc_terms = dec.pod_cow::<u32>()?;
        let alive = dec.pod_cow::<u8>()?;
        let lens = dec.pod::<u32>()?;
        let docs_n = ids.len();
        if [term_ends.len(), alive.len(), lens.len()] != [docs_n; 3] {
            return Err("document arrays of unequal lengths".into());
        }
        if slots.iter().any(|s| *s as usize >= docs_n)
            || doc_terms.iter().any(|t| *t as usize >= n)
            || big
                .iter()
                .any(|[t, s, _]| *t as usize >= n || *s as usize >= docs_n)
        {
            return Err("slot or term out of bounds".into());
        }
        let mut big_of: Vec<Vec<(u32, u32)>> = Vec::new();
        for &[term, slot, tf] in big.iter() {
            if big_of.len() <= term as usize {
                big_of.resize_with(term as usize + 1, Vec::new);
            }
            big_of[term as usize].push((slot, tf));
        }
        let postings: Vec<Postings> = (ranges(&ends, slots.len())?.into_iter().enumerate())
            .map(|(term, r)| {
                let big = big_of.get_mut(term).map(std::mem::take).unwrap_or_default();
                Postings::from_parts(
                    slots[r.clone()].to_vec(),
                    tfs[r].to_vec(),
                    big,
                    max_tf[term],
                )
            })
            .collect();
        let payloads = payloads(dec, docs_n)?;
        if payloads.len() != docs_n {
            return Err("payloads of another count".into());
        }
        let docs: Vec<Doc<T>> = (ranges(&term_ends, doc_terms.len())?.into_iter())
            .zip(ids.iter())
            .zip(payloads)
            .map(|((r, &id), payload)| Doc {
                id,
                payload,
                terms: doc_terms[r].into(),
            })
            .collect();
        let alive: Vec<bool> = alive.iter().map(|a| *a != 0).collect();
        let mut slot_of = HashMap::with_capacity(live);
        for (slot, doc) in docs.iter().enumerate().filter(|(s, _)| alive[*s]) {
            slot_of.insert(doc.id, slot as u32);
        }
        if slot_of.len() != live {
            return Err("live count mismatch".into());
        }
        Ok(Bm25Index {
            vocab,
            word_ids,
            postings,
            df,
            context_df,
            docs,
            alive,
            lens,
            slot_of,
            live,
            total_len,
            context_window,
            pool: ScorePool::default(),
        })
    }
}
