//! API key tokens: `mm_<id>_<secret>`. The id is public (it names the key in lists and
//! logs); the secret is shown once, at creation, and stored only as SHA-256 of a random
//! salt and the secret.

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::model::{ApiKeyRecord, KeyScope};

const PREFIX: &str = "mm_";
const ID_BYTES: usize = 6;
const SECRET_BYTES: usize = 32;
const SALT_BYTES: usize = 16;

/// A new key: the record to store and the token to hand to its holder once.
pub struct IssuedKey {
    pub record: ApiKeyRecord,
    pub token: String,
}

fn random_bytes(len: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    getrandom::fill(&mut buf)
        .map_err(|err| Error::Internal(format!("no randomness for a key: {err}")))?;
    Ok(buf)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn digest(salt: &[u8], secret: &str) -> Vec<u8> {
    let mut hasher = Sha256::new();
    hasher.update(salt);
    hasher.update(secret.as_bytes());
    hasher.finalize().to_vec()
}

/// Makes a key with a fresh id, secret and salt.
pub fn issue(scope: KeyScope, label: &str) -> Result<IssuedKey> {
    let id = hex(&random_bytes(ID_BYTES)?);
    let secret = hex(&random_bytes(SECRET_BYTES)?);
    let salt = random_bytes(SALT_BYTES)?;
    let hash = digest(&salt, &secret);
    Ok(IssuedKey {
        token: format!("{PREFIX}{id}_{secret}"),
        record: ApiKeyRecord {
            id,
            scope,
            label: label.to_string(),
            salt,
            hash,
            created_at_micros: chrono::Utc::now().timestamp_micros(),
            revoked_at_micros: None,
        },
    })
}

/// Splits a token into its id and secret; `None` when it is not shaped like one.
pub fn parse(token: &str) -> Option<(&str, &str)> {
    let rest = token.strip_prefix(PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    let hex_of = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex_of(id, ID_BYTES * 2) && hex_of(secret, SECRET_BYTES * 2)).then_some((id, secret))
}

/// Whether `secret` is the one `record` was issued with (compared in constant time).
pub fn matches(record: &ApiKeyRecord, secret: &str) -> bool {
    let computed = digest(&record.salt, secret);
    computed.len() == record.hash.len()
        && computed
            .iter()
            .zip(&record.hash)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_issued_token_parses_and_matches_only_its_own_record() {
        let a = issue(KeyScope::Org("acme".into()), "ci").unwrap();
        let b = issue(KeyScope::Admin, "").unwrap();
        let (id, secret) = parse(&a.token).unwrap();
        assert_eq!(id, a.record.id);
        assert!(matches(&a.record, secret));
        assert!(!matches(&b.record, secret));
        assert!(!a.token.contains(&hex(&a.record.hash)));
        assert_ne!(a.record.salt, b.record.salt);
    }

    #[test]
    fn malformed_tokens_do_not_parse() {
        let a = issue(KeyScope::Admin, "").unwrap();
        for bad in ["", "mm_", "mm_abc_def", "xx_0123456789ab_", &a.token[1..]] {
            assert!(parse(bad).is_none(), "{bad}");
        }
        let mut flipped = a.token.clone();
        flipped.pop();
        flipped.push('g');
        assert!(parse(&flipped).is_none());
    }
}
