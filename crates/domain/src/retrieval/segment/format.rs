//! The bytes of a segment file. Flat arrays are written as their raw little-endian
//! bytes, each preceded by its length and padded to 8 bytes, so that reading one is a
//! bounds check and a copy (no per-element decoding; a million episodes read in well
//! under a second). One CRC-32 covers the header and the body.
//!
//! Layout: `MAGIC`, format version (u32), byte-order mark (u32), header length (u64),
//! the header, body length (u64), checksum (u32), 4 bytes of padding, the body.

use std::io::{self, Write};

pub use crate::retrieval::flat::{Decoder, Encoder, ranges};

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
