//! API keys as the store keeps them: never the secret, only a salted hash of it.

/// What a key may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyScope {
    /// Every org.
    Admin,
    /// One org's projects and memories, nothing else.
    Org(String),
}

impl std::fmt::Display for KeyScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyScope::Admin => f.write_str("admin"),
            KeyScope::Org(org) => write!(f, "org:{org}"),
        }
    }
}

/// One stored key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRecord {
    /// Public part of the key, shown by `keys list` and in the logs of its calls.
    pub id: String,
    pub scope: KeyScope,
    /// A note for operators (who or what the key is for).
    pub label: String,
    pub salt: Vec<u8>,
    /// SHA-256 of salt and secret.
    pub hash: Vec<u8>,
    pub created_at_micros: i64,
    /// Set once revoked; a revoked key authenticates nothing.
    pub revoked_at_micros: Option<i64>,
}
