//! Flat arrays as raw bytes, for index segments (`segment/`): each written as its
//! length and its values' little-endian bytes, padded to 8 bytes, so that reading one
//! is a bounds check and a copy (no per-element decoding). A CRC-32 of everything
//! written is kept on the way.

use std::io::{self, Write};

use bytemuck::Pod;

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
        self.pods(end as usize, strings.iter().map(|s| s.as_ref().as_bytes()))
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
