//! A credential from the environment or a config file (an endpoint's API key): its
//! `Debug`, `Display` and serialized forms are the mask, so no log line, error or
//! `memmachine config print` shows it; [`Secret::expose`] is the one way to read it.

use serde::{Deserialize, Serialize, Serializer};

use crate::urls::MASK;

#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Secret {
        Secret(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Secret {
        Secret(value.to_string())
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(MASK)
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(MASK)
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(MASK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_and_serialized_only_as_the_mask() {
        let secret = Secret::new("sk-very-secret");
        assert_eq!(format!("{secret:?}"), "***");
        assert_eq!(format!("{secret}"), "***");
        let json = serde_json::to_string(&Some(secret.clone())).unwrap();
        assert_eq!(json, "\"***\"");
        assert_eq!(secret.expose(), "sk-very-secret");
        let read: Secret = serde_json::from_str("\"sk-read\"").unwrap();
        assert_eq!(read.expose(), "sk-read");
    }
}
