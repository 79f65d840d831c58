//! Who is calling, and what they may reach. With `--auth` every call carries
//! `authorization: Bearer <key>`; a key is scoped to one org or to admin.

mod access;
pub mod keys;

pub use access::route;
pub use memmachine_core::access::{Access, Caller, ROUTE_HEADER};

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::model::KeyScope;
use crate::store::KeyStore;

/// Checks bearer tokens against the stored keys.
#[derive(Clone)]
pub struct Authenticator {
    store: Arc<dyn KeyStore>,
    required: bool,
}

impl Authenticator {
    pub fn new(store: Arc<dyn KeyStore>, required: bool) -> Authenticator {
        Authenticator { store, required }
    }

    /// The caller an `authorization` header value names. Without `--auth` every call
    /// is `Anyone`; with it, a missing, malformed, unknown, wrong or revoked key is
    /// `Unauthenticated`, all with the same answer.
    pub async fn authenticate(&self, authorization: Option<&[u8]>) -> Result<Caller> {
        if !self.required {
            return Ok(Caller::Anyone);
        }
        let Some(value) = authorization else {
            return Err(Error::Unauthenticated(
                "this server requires an API key: send `authorization: Bearer <key>`".into(),
            ));
        };
        let rejected = || Error::Unauthenticated("the API key is not valid".into());
        let token = std::str::from_utf8(value)
            .ok()
            .and_then(bearer_token)
            .ok_or_else(rejected)?;
        let (id, secret) = keys::parse(token).ok_or_else(rejected)?;
        let record = self.store.find_key(id).await?.ok_or_else(rejected)?;
        if record.revoked_at_micros.is_some() || !keys::matches(&record, secret) {
            return Err(rejected());
        }
        Ok(match record.scope {
            KeyScope::Admin => Caller::Admin { key_id: record.id },
            KeyScope::Org(org_id) => Caller::Org {
                key_id: record.id,
                org_id,
            },
        })
    }
}

/// The credentials of `Bearer <token>`; the scheme is case-insensitive (RFC 9110).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// The caller the admission layer recorded on a request. A request without one was not
/// admitted through the layer, so it reaches nothing.
pub fn caller_of(extensions: &http::Extensions) -> Result<&Access> {
    extensions
        .get::<Access>()
        .ok_or_else(|| Error::PermissionDenied("the call carries no identity".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for value in [
            "Bearer k",
            "bearer k",
            "BEARER k",
            "bEaReR   k ",
            " Bearer k",
        ] {
            assert_eq!(bearer_token(value), Some("k"), "{value:?}");
        }
        for value in ["Basic k", "Bearer", "Bearer ", "Bearerk", "k"] {
            assert_eq!(bearer_token(value), None, "{value:?}");
        }
    }
}
