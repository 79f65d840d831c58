//! Reading a project's segment: mapped, checked (header and checksum) and built into
//! a `ProjectIndex`, then unmapped, so that what stays in memory is the index alone.

use std::path::Path;
use std::sync::Arc;

use super::format::{self, Decoder, Header, ranges};
use super::{Expected, SERVER_VERSION, Segments, remove};
use crate::retrieval::ann::AnnIndex;
use crate::retrieval::bm25::Bm25Index;
use crate::retrieval::episode_fields::{EpisodeFields, intern};
use crate::retrieval::participants::Participants;
use crate::retrieval::project_index::{Coded, Entry, IN_GRAPH, ProjectIndex};
use crate::retrieval::quantized::Slab;
use crate::retrieval::time_expressions::TurnTime;

/// A project's index read from its segment.
pub struct Loaded {
    pub index: ProjectIndex,
    /// The change-feed position it covers (replay from there).
    pub change: i64,
    /// The file's size.
    pub bytes: u64,
}

impl Segments {
    /// The project's newest segment as an index, if it passes every check; one that
    /// does not is deleted, with one warning saying why (the caller rebuilds).
    pub fn read(&self, expected: &Expected<'_>) -> Option<Loaded> {
        let path = self.newest(expected.key, expected.project)?;
        let started = std::time::Instant::now();
        match self.read_file(&path, expected) {
            Ok(loaded) => {
                tracing::info!(
                    project = %expected.key,
                    episodes = loaded.index.len(),
                    change = loaded.change,
                    bytes = loaded.bytes,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "index segment read"
                );
                Some(loaded)
            }
            Err(why) => {
                tracing::warn!(
                    project = %expected.key,
                    path = %path.display(),
                    why = %why,
                    "index segment ignored and deleted; rebuilding from the store"
                );
                remove(&path);
                None
            }
        }
    }

    fn read_file(&self, path: &Path, expected: &Expected<'_>) -> Result<Loaded, String> {
        let file = std::fs::File::open(path).map_err(|e| format!("cannot open: {e}"))?;
        // SAFETY: segments are written once to a temp file and renamed into place,
        // never modified after; one removed meanwhile stays mapped until unmapped here.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| format!("cannot map: {e}"))?;
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Sequential);
        let loaded = decode_checked(&map, &self.store_id, expected)?;
        drop(map);
        Ok(loaded)
    }
}

/// The index in segment `file`, once it is whole and is `expected`'s of `store_id`.
pub fn decode_checked(
    file: &[u8],
    store_id: &str,
    expected: &Expected<'_>,
) -> Result<Loaded, String> {
    let (header, body) = format::open(file)?;
    check(&header, store_id, expected)?;
    let index = decode_index(body)?;
    if index.feed_change != header.change {
        return Err("position of the body is not the header's".into());
    }
    Ok(Loaded {
        index,
        change: header.change,
        bytes: file.len() as u64,
    })
}

fn check(header: &Header, store_id: &str, expected: &Expected<'_>) -> Result<(), String> {
    if header.server_version != SERVER_VERSION {
        return Err(format!(
            "written by server version {}, this is {SERVER_VERSION}",
            header.server_version
        ));
    }
    if header.store_id != store_id {
        return Err(format!("of another store ({})", header.store_id));
    }
    if header.project != expected.project || header.key != expected.key.to_string() {
        return Err(format!(
            "of another project ({} #{})",
            header.key, header.project
        ));
    }
    if header.embedder != expected.embedder.unwrap_or_default() {
        return Err(format!(
            "vectors of another embedder ({:?})",
            header.embedder
        ));
    }
    Ok(())
}

fn decode_index(body: &[u8]) -> Result<ProjectIndex, String> {
    let mut dec = Decoder::new(body);
    let ann_min = dec.u64()? as usize;
    let ann_failed = dec.u64()? != 0;
    let vectors = dec.u64()? as usize;
    let feed_change = dec.u64()? as i64;
    let dimensions = dec.u64()? as usize;
    let codes = dec.pod::<i8>()?;
    let free = dec.pod::<u32>()?;
    if dimensions == 0 && !codes.is_empty() || dimensions > 0 && codes.len() % dimensions != 0 {
        return Err("codes of another length".into());
    }
    let slab_slots = codes.len().checked_div(dimensions).unwrap_or(0);
    if free.iter().any(|s| *s as usize >= slab_slots) {
        return Err("free slot out of bounds".into());
    }
    let codes = Slab::from_parts(dimensions, codes, free);
    let keys = dec.strs()?;
    let ids = dec.strs()?;
    let counts = dec.pod_cow::<u32>()?;
    if keys.len() != ids.len() || ids.len() != counts.len() {
        return Err("participant arrays of unequal lengths".into());
    }
    let longest = dec.u64()? as usize;
    let held = keys.into_iter().zip(ids).zip(counts.iter().copied());
    let participants = Participants::from_parts(held.map(|((k, i), n)| (k, i, n)), longest);
    let text = Bm25Index::decode(&mut dec, decode_entries)?;
    // Removed entries keep the slot they had (never read again); live ones must fit.
    let outside = |c: &Coded| c.slot != IN_GRAPH && c.slot as usize >= slab_slots;
    if text
        .live()
        .any(|(_, e)| e.vector.as_ref().is_some_and(outside))
    {
        return Err("vector slot out of bounds".into());
    }
    let graph_dimensions = dec.u64()? as usize;
    let ann = if graph_dimensions == 0 {
        None
    } else {
        let bytes = dec.pod_cow::<u8>()?;
        Some(AnnIndex::from_bytes(graph_dimensions, &bytes)?)
    };
    if !dec.done() {
        return Err("bytes after the body".into());
    }
    let mut index = ProjectIndex::with_ann_min(ann_min);
    index.text = text;
    index.codes = codes;
    index.ann = ann;
    index.vectors = vectors;
    index.ann_failed = ann_failed;
    index.participants = participants;
    index.feed_change = feed_change;
    index.recount();
    Ok(index)
}

fn decode_entries(dec: &mut Decoder<'_>, n: usize) -> Result<Vec<Entry>, String> {
    let strings: Vec<Arc<str>> = dec.strs()?.into_iter().map(intern).collect();
    let fields = dec.pod_cow::<[u32; 4]>()?;
    let created = dec.pod_cow::<i64>()?;
    let meta_ends = dec.pod_cow::<u64>()?;
    let meta = dec.pod_cow::<[u32; 2]>()?;
    let slots = dec.pod_cow::<u32>()?;
    let scales = dec.pod_cow::<f32>()?;
    let flags = dec.pod_cow::<u8>()?;
    let offsets = dec.pod_cow::<i16>()?;
    let lengths = [
        fields.len(),
        created.len(),
        meta_ends.len(),
        slots.len(),
        scales.len(),
        flags.len(),
        offsets.len(),
    ];
    if lengths != [n; 7] {
        return Err("entry arrays of unequal lengths".into());
    }
    let bound = strings.len() as u32;
    if fields
        .iter()
        .flatten()
        .chain(meta.iter().flatten())
        .any(|s| *s >= bound)
    {
        return Err("string id out of bounds".into());
    }
    let string = |id: u32| strings[id as usize].clone();
    let meta_ranges = ranges(&meta_ends, meta.len())?;
    let mut entries = Vec::with_capacity(n);
    for (i, range) in meta_ranges.into_iter().enumerate() {
        let metadata = meta[range]
            .iter()
            .map(|[k, v]| (string(*k), string(*v)))
            .collect();
        let vector = (flags[i] & 1 != 0).then_some(Coded {
            slot: slots[i],
            scale: scales[i],
        });
        entries.push(Entry {
            fields: EpisodeFields::from_parts(fields[i].map(string), created[i], metadata),
            vector,
            time: TurnTime {
                mentions_time: flags[i] & 2 != 0,
                offset_days: offsets[i],
            },
        });
    }
    Ok(entries)
}
