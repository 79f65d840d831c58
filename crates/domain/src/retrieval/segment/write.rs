//! Writing a project's index as a segment: encoded under the index's read lock
//! straight into a temp file (no copy of it in memory but the graph's), then synced,
//! renamed into place and the directory synced, outside the lock.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::RwLock;

use super::format::{Encoder, Header, seal, write_header};
use super::{Expected, SERVER_VERSION, Segments, TEMP_SUFFIX, remove, sync_dir};
use crate::retrieval::project_index::{Entry, IN_GRAPH, ProjectIndex};

impl Segments {
    /// Writes `index` (of `expected`'s project) as its newest segment and removes its
    /// older ones; `erasures` is what `erasures()` said before the index's state was
    /// read (the write is discarded if an erasure came since). Returns the file, or
    /// `None` when there was nothing to write (a graph being built, or erased since).
    pub fn write(
        &self,
        expected: &Expected<'_>,
        index: &RwLock<ProjectIndex>,
        erasures: u64,
    ) -> Result<Option<PathBuf>, String> {
        let _one = self.writing.lock().expect("segment writer");
        let started = std::time::Instant::now();
        let prefix = Segments::prefix(expected.key, Some(expected.project));
        let temp = self
            .dir
            .join(format!("{prefix}{}{TEMP_SUFFIX}", uuid::Uuid::new_v4()));
        let failed = |err: io::Error| format!("cannot write {}: {err}", temp.display());
        let mut file = File::create(&temp).map_err(failed)?;
        let written = {
            let index = index.read().expect("index lock");
            if index.building.is_some() {
                drop(index);
                remove(&temp);
                return Ok(None);
            }
            let header = Header {
                server_version: SERVER_VERSION.to_string(),
                store_id: self.store_id.clone(),
                project: expected.project,
                key: expected.key.to_string(),
                embedder: expected.embedder.unwrap_or_default().to_string(),
                change: index.feed_change,
                episodes: index.len() as u64,
            };
            encode_file(&mut file, &header, &index).map(|()| header)
        };
        let header = match written {
            Ok(header) => header,
            Err(err) => {
                remove(&temp);
                return Err(failed(err));
            }
        };
        crash_hook::mid_segment_write();
        if let Err(err) = file.sync_all() {
            remove(&temp);
            return Err(failed(err));
        }
        drop(file);
        let path = self
            .dir
            .join(format!("{prefix}c{}{}", header.change, super::SUFFIX));
        {
            // Under the erasure lock: an erasure either came before (discard) or waits.
            let erased = self.erasures.lock().expect("segment erasures");
            let behind = (erased.floors.get(expected.key)).is_some_and(|(project, change)| {
                *project == expected.project && header.change < *change
            });
            if erased.count != erasures || behind {
                remove(&temp);
                return Ok(None);
            }
            std::fs::rename(&temp, &path).map_err(|err| {
                remove(&temp);
                failed(err)
            })?;
            sync_dir(&self.dir);
        }
        for (_, old) in self.of_project(expected.key, Some(expected.project)) {
            if old != path {
                remove(&old);
            }
        }
        sync_dir(&self.dir);
        let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
        tracing::info!(
            project = %expected.key,
            episodes = header.episodes,
            change = header.change,
            bytes,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "index segment written"
        );
        Ok(Some(path))
    }
}

/// The whole file: header, body, then the body's length and checksum in the header.
fn encode_file(file: &mut File, header: &Header, index: &ProjectIndex) -> io::Result<()> {
    let mut out = BufWriter::with_capacity(1 << 20, &*file);
    let seed = write_header(&mut out, header)?;
    let mut enc = Encoder::new(out, &seed);
    encode_index(&mut enc, index)?;
    let (out, checksum, len) = enc.finish();
    out.into_inner().map_err(|e| e.into_error())?;
    let (at, trailer) = seal(&seed, len, checksum);
    file.seek(SeekFrom::Start(at))?;
    file.write_all(&trailer)
}

/// Encodes `index` into `out` (tests and benches: no file).
pub fn encode_to_vec(index: &ProjectIndex, header: &Header) -> Vec<u8> {
    let mut out = Vec::new();
    let seed = write_header(&mut out, header).expect("a Vec takes any write");
    let mut body = Vec::new();
    let mut enc = Encoder::new(&mut body, &seed);
    encode_index(&mut enc, index).expect("a Vec takes any write");
    let (_, checksum, len) = enc.finish();
    let (at, trailer) = seal(&seed, len, checksum);
    out[at as usize..at as usize + 16].copy_from_slice(&trailer);
    out.extend_from_slice(&body);
    out
}

fn encode_index<W: Write>(enc: &mut Encoder<W>, index: &ProjectIndex) -> io::Result<()> {
    enc.u64(index.ann_min as u64)?;
    enc.u64(u64::from(index.ann_failed))?;
    enc.u64(index.vectors as u64)?;
    enc.u64(index.feed_change as u64)?;
    let (dimensions, codes, free) = index.codes.parts();
    enc.u64(dimensions as u64)?;
    enc.pod(codes)?;
    enc.pod(free)?;
    let (held, longest) = index.participants.parts();
    let keys: Vec<&str> = held.iter().map(|h| h.0).collect();
    let ids: Vec<&str> = held.iter().map(|h| h.1).collect();
    let counts: Vec<u32> = held.iter().map(|h| h.2).collect();
    enc.strs(&keys)?;
    enc.strs(&ids)?;
    enc.pod(&counts)?;
    enc.u64(longest as u64)?;
    index.text.encode(enc)?;
    encode_entries(enc, index.text.payloads())?;
    match &index.ann {
        None => enc.u64(0),
        Some(ann) => {
            enc.u64(ann.dimensions() as u64)?;
            enc.pod(&ann.to_bytes().map_err(io::Error::other)?)
        }
    }
}

/// Each entry's fields as ids into one table of its distinct strings, and its vector's
/// place and its time as flat arrays.
fn encode_entries<'a, W: Write>(
    enc: &mut Encoder<W>,
    entries: impl ExactSizeIterator<Item = Option<&'a Entry>>,
) -> io::Result<()> {
    let n = entries.len();
    let mut table: HashMap<&str, u32> = HashMap::new();
    let mut strings: Vec<&str> = Vec::new();
    let mut id = |s: &'a str| -> u32 {
        *table.entry(s).or_insert_with(|| {
            strings.push(s);
            (strings.len() - 1) as u32
        })
    };
    let mut fields: Vec<[u32; 4]> = Vec::with_capacity(n);
    let mut created: Vec<i64> = Vec::with_capacity(n);
    let mut meta_ends: Vec<u64> = Vec::with_capacity(n);
    let mut meta: Vec<[u32; 2]> = Vec::new();
    let mut slots: Vec<u32> = Vec::with_capacity(n);
    let mut scales: Vec<f32> = Vec::with_capacity(n);
    let mut flags: Vec<u8> = Vec::with_capacity(n);
    let mut offsets: Vec<i16> = Vec::with_capacity(n);
    for entry in entries {
        // A removed document's entry is written blank (never read, maybe erased).
        let Some(entry) = entry else {
            fields.push([id(""); 4]);
            created.push(0);
            meta_ends.push(meta.len() as u64);
            slots.push(IN_GRAPH);
            scales.push(0.0);
            flags.push(0);
            offsets.push(0);
            continue;
        };
        let (strs, at, metadata) = entry.fields.parts();
        fields.push(strs.map(|s| id(s)));
        created.push(at);
        meta.extend(metadata.iter().map(|(k, v)| [id(k), id(v)]));
        meta_ends.push(meta.len() as u64);
        let coded = entry.vector;
        slots.push(coded.map_or(IN_GRAPH, |c| c.slot));
        scales.push(coded.map_or(0.0, |c| c.scale));
        flags.push(u8::from(coded.is_some()) | u8::from(entry.time.mentions_time) << 1);
        offsets.push(entry.time.offset_days);
    }
    enc.strs(&strings)?;
    enc.pod(&fields)?;
    enc.pod(&created)?;
    enc.pod(&meta_ends)?;
    enc.pod(&meta)?;
    enc.pod(&slots)?;
    enc.pod(&scales)?;
    enc.pod(&flags)?;
    enc.pod(&offsets)
}

/// Test-only fault injection: with `MEMMACHINE_TEST_ABORT_MID_SEGMENT=1`, a debug
/// build aborts once a segment's temp file is written, before it is synced and renamed
/// (the crash test: the previous segment must stay in use).
mod crash_hook {
    #[inline]
    pub(super) fn mid_segment_write() {
        #[cfg(debug_assertions)]
        {
            static SET: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
                std::env::var("MEMMACHINE_TEST_ABORT_MID_SEGMENT").is_ok_and(|v| v == "1")
            });
            if *SET {
                eprintln!("MEMMACHINE_TEST_ABORT_MID_SEGMENT: aborting mid segment write");
                std::process::abort();
            }
        }
    }
}
