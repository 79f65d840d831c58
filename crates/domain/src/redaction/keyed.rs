//! HMAC-SHA256 (RFC 2104) over `sha2`, with the key's padded blocks hashed once when the
//! redactor is built: each placeholder then costs two compressions of its own input.

use sha2::{Digest, Sha256};

const BLOCK: usize = 64;

/// A keyed hash: the inner and outer states after the key's padded block.
#[derive(Clone)]
pub(super) struct Keyed {
    inner: Sha256,
    outer: Sha256,
}

impl Keyed {
    pub(super) fn new(key: &[u8]) -> Keyed {
        let mut block = [0u8; BLOCK];
        if key.len() > BLOCK {
            block[..32].copy_from_slice(&Sha256::digest(key));
        } else {
            block[..key.len()].copy_from_slice(key);
        }
        let pad = |byte: u8| -> [u8; BLOCK] { block.map(|b| b ^ byte) };
        let mut inner = Sha256::new();
        inner.update(pad(0x36));
        let mut outer = Sha256::new();
        outer.update(pad(0x5c));
        Keyed { inner, outer }
    }

    /// HMAC-SHA256 of the concatenated parts.
    pub(super) fn mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        let mut inner = self.inner.clone();
        for part in parts {
            inner.update(part);
        }
        let mut outer = self.outer.clone();
        outer.update(inner.finalize());
        outer.finalize().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn rfc_4231_vectors() {
        // Test case 2: a short key.
        let mac = Keyed::new(b"Jefe").mac(&[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            hex(&mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // Test case 6: a key longer than the block (hashed first).
        let key = [0xaau8; 131];
        let mac =
            Keyed::new(&key).mac(&[b"Test Using Larger Than Block-Size Key - Hash Key First"]);
        assert_eq!(
            hex(&mac),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }
}
