//! The bytes of a segment file. Flat arrays are written as their raw little-endian
//! bytes, each preceded by its length and padded to 8 bytes, so that reading one is a
//! bounds check and a copy (no per-element decoding; a million episodes read in well
//! under a second). One CRC-32 covers the header and the body.
//!
//! Layout: `MAGIC`, format version (u32), byte-order mark (u32), header length (u64),
//! the header, body length (u64), checksum (u32), 4 bytes of padding, the body.

use std::io::{self, Write};

use bytemuck::Pod;

pub const MAGIC: [u8; 8] = *b"MMINDEX\0";
/// Bumped whenever the body's layout changes: older segments are then ignored.
pub const FORMAT_VERSION: u32 = 1;
/// Written in the machine's byte order: arrays are raw, so another order is another format.
const BYTE_ORDER: u32 = 0x0102_0304;
/// Bytes before the header.
const PREFIX: usize = 8 + 4 + 4 + 8;

/// What a segment says of itself, checked before its body is trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The server's crate version that wrote it.
    pub server_version: String,
    pub store_id: String,
    /// The project's handle (internal id) and key.
    pub project: i64,
    pub key: String,
    /// The embedder its vectors are from (empty: none).
    pub embedder: String,
    /// The change-feed position it covers.
    pub change: i64,
    /// Live episodes (for the log).
    pub episodes: u64,
}

impl Header {
    fn encode(&self) -> Vec<u8> {
        let mut enc = Encoder::new(Vec::new(), &[]);
        let strings = [
            self.server_version.as_str(),
            &self.store_id,
            &self.key,
            &self.embedder,
        ];
        // Writing to a Vec cannot fail.
        let _ = enc.strs(&strings);
        let _ = enc.u64(self.project as u64);
        let _ = enc.u64(self.change as u64);
        let _ = enc.u64(self.episodes);
        enc.finish().0
    }

    fn decode(bytes: &[u8]) -> Result<Header, String> {
        let mut dec = Decoder::new(bytes);
        let strings = dec.strs()?;
        let [server_version, store_id, key, embedder] = strings[..] else {
            return Err("header: wrong number of strings".into());
        };
        Ok(Header {
            server_version: server_version.to_string(),
            store_id: store_id.to_string(),
            key: key.to_string(),
            embedder: embedder.to_string(),
            project: dec.u64()? as i64,
            change: dec.u64()? as i64,
            episodes: dec.u64()?,
        })
    }
}

/// Writes a segment's prefix and header with room for the body's length and checksum
/// (filled in by `seal` once the body is written); returns the header's bytes, with
/// which the body's encoder is seeded (the checksum covers both).
pub fn write_header(out: &mut impl Write, header: &Header) -> io::Result<Vec<u8>> {
    let bytes = header.encode();
    out.write_all(&MAGIC)?;
    out.write_all(&FORMAT_VERSION.to_le_bytes())?;
    out.write_all(&BYTE_ORDER.to_ne_bytes())?;
    out.write_all(&(bytes.len() as u64).to_le_bytes())?;
    out.write_all(&bytes)?;
    out.write_all(&[0u8; 16])?;
    Ok(bytes)
}

/// Where the body's length and checksum go, and the bytes to write there.
pub fn seal(header: &[u8], body_len: u64, checksum: u32) -> (u64, [u8; 16]) {
    let mut trailer = [0u8; 16];
    trailer[..8].copy_from_slice(&body_len.to_le_bytes());
    trailer[8..12].copy_from_slice(&checksum.to_le_bytes());
    ((PREFIX + header.len()) as u64, trailer)
}

/// A segment's header read from `file` without checking the body (a cheap look).
pub fn peek_header(file: &[u8]) -> Result<Header, String> {
    let (header, _) = split(file)?;
    Header::decode(header)
}

/// A segment file's header and body, once its magic, format, byte order, length and
/// checksum hold.
pub fn open(file: &[u8]) -> Result<(Header, &[u8]), String> {
    let (header_bytes, rest) = split(file)?;
    let header = Header::decode(header_bytes)?;
    let body_len = u64::from_le_bytes(rest[..8].try_into().expect("8 bytes"));
    let checksum = u32::from_le_bytes(rest[8..12].try_into().expect("4 bytes"));
    let body = &rest[16..];
    if rest[12..16] != [0; 4] {
        return Err("bad padding".into());
    }
    if body.len() as u64 != body_len {
        return Err(format!(
            "body is {} bytes, the header says {body_len}",
            body.len()
        ));
    }
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(header_bytes);
    hasher.update(body);
    if hasher.finalize() != checksum {
        return Err("checksum mismatch".into());
    }
    Ok((header, body))
}

/// The header's bytes and what follows them (trailer and body).
fn split(file: &[u8]) -> Result<(&[u8], &[u8]), String> {
    if file.len() < PREFIX || file[..8] != MAGIC {
        return Err("not a segment (magic)".into());
    }
    let version = u32::from_le_bytes(file[8..12].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(format!(
            "format version {version}, this server reads {FORMAT_VERSION}"
        ));
    }
    if u32::from_ne_bytes(file[12..16].try_into().expect("4 bytes")) != BYTE_ORDER {
        return Err("written on a machine of another byte order".into());
    }
    let header_len = u64::from_le_bytes(file[16..24].try_into().expect("8 bytes"));
    let rest = &file[PREFIX..];
    if header_len > rest.len() as u64 || rest.len() - (header_len as usize) < 16 {
        return Err("truncated".into());
    }
    Ok(rest.split_at(header_len as usize))
}

/// Appends values to a segment, keeping its checksum and length.
pub struct Encoder<W: Write> {
    out: W,
    hasher: crc32fast::Hasher,
    len: u64,
}

impl<W: Write> Encoder<W> {
    /// An encoder whose checksum starts over `seed` (not written).
    pub fn new(out: W, seed: &[u8]) -> Encoder<W> {
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(seed);
        Encoder {
            out,
            hasher,
            len: 0,
        }
    }

    fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.hasher.update(bytes);
        self.out.write_all(bytes)?;
        self.len += bytes.len() as u64;
        Ok(())
    }

    fn pad(&mut self) -> io::Result<()> {
        let n = ((8 - self.len % 8) % 8) as usize;
        self.raw(&[0u8; 8][..n])
    }

    pub fn u64(&mut self, value: u64) -> io::Result<()> {
        self.raw(&value.to_le_bytes())
    }

    pub fn pod<T: Pod>(&mut self, values: &[T]) -> io::Result<()> {
        self.pods(values.len(), std::iter::once(values))
    }

    /// One array of `total` values, given in `parts` (no copy of them made).
    pub fn pods<'a, T: Pod>(
        &mut self,
        total: usize,
        parts: impl IntoIterator<Item = &'a [T]>,
    ) -> io::Result<()> {
        self.u64(total as u64)?;
        let mut written = 0;
        for part in parts {
            written += part.len();
            self.raw(bytemuck::cast_slice(part))?;
        }
        debug_assert_eq!(written, total);
        self.pad()
    }

    /// Strings, as their ends (u64) and their bytes.
    pub fn strs<S: AsRef<str>>(&mut self, strings: &[S]) -> io::Result<()> {
        let mut end = 0u64;
        let ends: Vec<u64> = strings
            .iter()
            .map(|s| {
                end += s.as_ref().len() as u64;
                end
            })
            .collect();
        self.pod(&ends)?;
        self.pods(
            end as usize,
            strings.iter().map(|s| s.as_ref().as_bytes()),
        )
    }

    /// The output, the checksum and the bytes written.
    pub fn finish(self) -> (W, u32, u64) {
        (self.out, self.hasher.finalize(), self.len)
    }
}

/// Reads what an `Encoder` wrote, checking every bound (never panics on bad input).
pub struct Decoder<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Decoder<'a> {
    pub fn new(buf: &'a [u8]) -> Decoder<'a> {
        Decoder { buf, at: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|end| *end <= self.buf.len());
        let Some(end) = end else {
            return Err("truncated body".into());
        };
        let bytes = &self.buf[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    pub fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    /// An array as its bytes (padding skipped).
    fn array_bytes<T: Pod>(&mut self) -> Result<&'a [u8], String> {
        let count = self.u64()? as usize;
        let size = count
            .checked_mul(size_of::<T>())
            .ok_or("array length overflows")?;
        let bytes = self.take(size)?;
        self.take((8 - size % 8) % 8)?;
        Ok(bytes)
    }

    /// An array, copied out.
    pub fn pod<T: Pod>(&mut self) -> Result<Vec<T>, String> {
        Ok(bytemuck::pod_collect_to_vec(self.array_bytes::<T>()?))
    }

    /// An array in place when aligned (a mapped file's is), else copied.
    pub fn pod_cow<T: Pod>(&mut self) -> Result<std::borrow::Cow<'a, [T]>, String> {
        let bytes = self.array_bytes::<T>()?;
        Ok(match bytemuck::try_cast_slice(bytes) {
            Ok(values) => std::borrow::Cow::Borrowed(values),
            Err(_) => std::borrow::Cow::Owned(bytemuck::pod_collect_to_vec(bytes)),
        })
    }

    pub fn strs(&mut self) -> Result<Vec<&'a str>, String> {
        let ends = self.pod_cow::<u64>()?;
        let bytes = self.array_bytes::<u8>()?;
        let text = std::str::from_utf8(bytes).map_err(|_| "a string is not UTF-8")?;
        let mut start = 0usize;
        ends.iter()
            .map(|&end| {
                let s = usize::try_from(end)
                    .ok()
                    .filter(|end| *end >= start)
                    .and_then(|end| text.get(start..end))
                    .ok_or("string bounds")?;
                start = end as usize;
                Ok(s)
            })
            .collect()
    }

    /// Whether every byte was read.
    pub fn done(&self) -> bool {
        self.at == self.buf.len()
    }
}

/// `ends` (of `total` values) as ranges, once they are ascending and within `total`.
pub fn ranges(ends: &[u64], total: usize) -> Result<Vec<std::ops::Range<usize>>, String> {
    let mut start = 0usize;
    ends.iter()
        .map(|&end| {
            let end = usize::try_from(end).map_err(|_| "range bounds")?;
            if end < start || end > total {
                return Err("range bounds".to_string());
            }
            let range = start..end;
            start = end;
            Ok(range)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            server_version: "0.1.0".into(),
            store_id: "abc".into(),
            project: 7,
            key: "org/p".into(),
            embedder: "hash-64".into(),
            change: 42,
            episodes: 3,
        }
    }

    fn file(body: impl FnOnce(&mut Encoder<&mut Vec<u8>>)) -> Vec<u8> {
        let mut out = Vec::new();
        let seed = write_header(&mut out, &header()).unwrap();
        let mut body_bytes = Vec::new();
        let mut enc = Encoder::new(&mut body_bytes, &seed);
        body(&mut enc);
        let (_, checksum, len) = enc.finish();
        let (at, trailer) = seal(&seed, len, checksum);
        out[at as usize..at as usize + 16].copy_from_slice(&trailer);
        out.extend_from_slice(&body_bytes);
        out
    }

    #[test]
    fn arrays_and_strings_round_trip_and_any_flipped_byte_is_caught() {
        let bytes = file(|enc| {
            enc.pod(&[1u32, 2, 3]).unwrap();
            enc.strs(&["ä", "", "bc"]).unwrap();
            enc.pods(3, [&[5i16][..], &[6, 7][..]]).unwrap();
            enc.u64(9).unwrap();
        });
        let (h, body) = open(&bytes).unwrap();
        assert_eq!(h, header());
        let mut dec = Decoder::new(body);
        assert_eq!(dec.pod::<u32>().unwrap(), [1, 2, 3]);
        assert_eq!(dec.strs().unwrap(), ["ä", "", "bc"]);
        assert_eq!(dec.pod::<i16>().unwrap(), [5, 6, 7]);
        assert_eq!(dec.u64().unwrap(), 9);
        assert!(dec.done());
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            assert!(open(&bad).is_err(), "flipped byte {at} went unnoticed");
        }
        assert!(open(&bytes[..bytes.len() - 1]).is_err());
        // Reading past the end is an error, not a panic.
        let mut dec = Decoder::new(&body[..10]);
        assert!(dec.pod::<u32>().is_err());
    }
}
