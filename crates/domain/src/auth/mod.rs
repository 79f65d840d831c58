//! Who is calling, and what they may reach. With `--auth` every call carries
//! `authorization: Bearer <key>`; a key is scoped to one org or to admin.

mod access;
pub mod keys;

pub use access::{Access, ROUTE_HEADER, route};

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::model::KeyScope;
use crate::model::ids::or_universal;
use crate::store::KeyStore;

/// The caller of one request, put into the request's extensions by the admission layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// Authentication is off: every org is reachable.
    Anyone,
    Admin {
        key_id: String,
    },
    Org {
        key_id: String,
        org_id: String,
    },
}

impl Caller {
    /// `PermissionDenied` unless the caller may reach `org_id`. The answer is the same
    /// whether or not anything of that org exists.
    pub fn check_org(&self, org_id: &str) -> Result<()> {
        match self {
            Caller::Org { org_id: own, .. } if own != or_universal(org_id) => {
                Err(Error::PermissionDenied(
                    "this API key does not grant access to the requested org".into(),
                ))
            }
            _ => Ok(()),
        }
    }

    /// The org a listing is confined to: the caller's own for an org key (and
    /// `PermissionDenied` when another is asked for), else what was asked.
    pub fn list_scope<'a>(&'a self, asked: Option<&'a str>) -> Result<Option<&'a str>> {
        match self {
            Caller::Org { org_id, .. } => {
                if let Some(asked) = asked {
                    self.check_org(asked)?;
                }
                Ok(Some(org_id.as_str()))
            }
            _ => Ok(asked),
        }
    }

    /// `PermissionDenied` for an org key: `what` concerns every org, so only an admin
    /// key (or anyone, without --auth) may do it.
    pub fn require_admin(&self, what: &str) -> Result<()> {
        match self {
            Caller::Org { .. } => Err(Error::PermissionDenied(format!(
                "{what} needs an admin key: it applies to every org, and this key is \
                 scoped to one"
            ))),
            _ => Ok(()),
        }
    }

    /// The key's id, for logs and per-key limits.
    pub fn key_id(&self) -> Option<&str> {
        match self {
            Caller::Anyone => None,
            Caller::Admin { key_id } | Caller::Org { key_id, .. } => Some(key_id),
        }
    }
}

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
    fn an_org_key_reaches_its_own_org_only() {
        let caller = Caller::Org {
            key_id: "k".into(),
            org_id: "acme".into(),
        };
        assert!(caller.check_org("acme").is_ok());
        assert!(matches!(
            caller.check_org("globex"),
            Err(Error::PermissionDenied(_))
        ));
        assert_eq!(caller.list_scope(None).unwrap(), Some("acme"));
        assert!(caller.list_scope(Some("globex")).is_err());
        let admin = Caller::Admin { key_id: "a".into() };
        assert!(admin.check_org("globex").is_ok());
        assert_eq!(admin.list_scope(None).unwrap(), None);
    }

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
