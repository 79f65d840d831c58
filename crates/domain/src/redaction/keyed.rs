//! HMAC-SHA256 (the `hmac` crate), with the key taken in once when the redactor is built:
//! each placeholder then clones the keyed state and hashes only its own input.

use hmac::{Hmac, KeyInit, Mac};

type HmacSha256 = Hmac<sha2_11::Sha256>;

/// A keyed hash, ready for inputs.
#[derive(Clone)]
pub(super) struct Keyed(HmacSha256);

impl Keyed {
    /// `None` never happens for HMAC (any key length is valid); the type says it can.
    pub(super) fn new(key: &[u8]) -> Option<Keyed> {
        HmacSha256::new_from_slice(key).ok().map(Keyed)
    }

    /// HMAC-SHA256 of the concatenated parts.
    pub(super) fn mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        let mut mac = self.0.clone();
        for part in parts {
            mac.update(part);
        }
        mac.finalize().into_bytes().into()
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
        let mac = Keyed::new(b"Jefe")
            .unwrap()
            .mac(&[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            hex(&mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // Test case 6: a key longer than the block (hashed first).
        let key = [0xaau8; 131];
        let mac = Keyed::new(&key)
            .unwrap()
            .mac(&[b"Test Using Larger Than Block-Size Key - Hash Key First"]);
        assert_eq!(
            hex(&mac),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }
}
