//! Browsers that were not meant to reach the server. A page on any origin can make a
//! browser send "simple" requests (a POST of a form or of `text/plain`) without asking
//! first, and a page whose name was rebound to a loopback address (DNS rebinding) is
//! even same-origin. So, on both listeners:
//! - without keys, the `Host` must be an address (an IP literal), `localhost`, or a
//!   name given with `--allowed-host`: a rebound name is none of these;
//! - an `Origin`, when a browser sends one, must be the request's own (same host and
//!   port), one given with `--allowed-origin`, or, with `--auth` and no list, any
//!   (keys are bearer tokens a foreign page would have to hold, not cookies);
//! - on the REST gateway and MCP, a POST (and any request with a body) must say its body
//!   is JSON, which a browser cannot send cross-origin without a preflight.

use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HOST, ORIGIN, TRANSFER_ENCODING};
use http::{HeaderMap, Method, Uri};

use memmachine_core::error::Error;

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A `Host` or `Origin` the server does not answer to (HTTP 403).
    Forbidden(String),
    /// A body that does not say it is JSON (HTTP 415).
    NotJson(String),
}

impl From<Refusal> for Error {
    fn from(refusal: Refusal) -> Error {
        match refusal {
            Refusal::Forbidden(message) => Error::PermissionDenied(message),
            Refusal::NotJson(message) => Error::invalid("content-type", message),
        }
    }
}

/// The hosts and origins a server answers browsers from.
#[derive(Debug, Clone, Default)]
pub struct BrowserPolicy {
    /// Keys are required (`--auth`).
    keys: bool,
    /// `--allowed-origin` values, lower case, without a trailing slash.
    origins: Vec<String>,
    /// `--allowed-host` names, lower case; `*` allows any.
    hosts: Vec<String>,
}

impl BrowserPolicy {
    pub fn new(keys: bool, origins: &[String], hosts: &[String]) -> BrowserPolicy {
        let normal = |s: &String| s.trim().trim_end_matches('/').to_ascii_lowercase();
        BrowserPolicy {
            keys,
            origins: origins
                .iter()
                .map(normal)
                .filter(|s| !s.is_empty())
                .collect(),
            hosts: hosts.iter().map(normal).filter(|s| !s.is_empty()).collect(),
        }
    }

    /// Origins a browser may call from other than the request's own: `None` for any.
    pub fn cross_origins(&self) -> Option<&[String]> {
        (!(self.keys && self.origins.is_empty())).then_some(self.origins.as_slice())
    }

    /// Checks the `Host` and `Origin` of a request.
    pub fn check(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), Refusal> {
        // HTTP/2 carries the host as `:authority`, which `http` keeps in the URI.
        let host = match headers.get(HOST) {
            Some(value) => Some(value.to_str().unwrap_or("\u{fffd}").to_ascii_lowercase()),
            None => uri.authority().map(|a| a.as_str().to_ascii_lowercase()),
        };
        if !self.keys
            && let Some(host) = &host
            && !self.host_allowed(host)
        {
            return Err(Refusal::Forbidden(format!(
                "this server does not answer to the host {:?} without --auth (a browser \
                 page may have been pointed at it); use its address, or allow the name \
                 with --allowed-host",
                cut(host)
            )));
        }
        let Some(origin) = headers.get(ORIGIN) else {
            return Ok(());
        };
        let origin = origin
            .to_str()
            .unwrap_or("\u{fffd}")
            .trim_end_matches('/')
            .to_ascii_lowercase();
        let same = host.as_deref().is_some_and(|host| {
            origin.split_once("://").is_some_and(|(scheme, authority)| {
                matches!(scheme, "http" | "https") && authority == host
            })
        });
        if same
            || self
                .cross_origins()
                .is_none_or(|list| list.contains(&origin))
        {
            return Ok(());
        }
        Err(Refusal::Forbidden(format!(
            "requests from the origin {:?} are not allowed (--allowed-origin)",
            cut(&origin)
        )))
    }

    fn host_allowed(&self, host: &str) -> bool {
        let name = host_name(host);
        name.parse::<std::net::IpAddr>().is_ok()
            || name == "localhost"
            || name.ends_with(".localhost")
            || self
                .hosts
                .iter()
                .any(|allowed| allowed == "*" || allowed == name || allowed == host)
    }
}

/// Checks that a request which may change state says its body is JSON: every POST, and
/// any other request carrying a body (GET, HEAD, OPTIONS and body-less DELETEs pass).
pub fn require_json(method: &Method, headers: &HeaderMap) -> Result<(), Refusal> {
    let has_body = headers.contains_key(TRANSFER_ENCODING)
        || headers
            .get(CONTENT_LENGTH)
            .is_some_and(|length| length.as_bytes() != b"0");
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
        || (*method != Method::POST && !has_body)
    {
        return Ok(());
    }
    let content_type = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
    if content_type.is_some_and(is_json) {
        return Ok(());
    }
    Err(Refusal::NotJson(format!(
        "must be application/json (got {}): this API reads JSON bodies only",
        content_type.map_or_else(|| "none".to_string(), |t| format!("{:?}", cut(t)))
    )))
}

/// `application/json`, or any `+json` type, with or without parameters.
fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|subtype| subtype.ends_with("+json"))
}

/// The name of `host[:port]` (an IPv6 literal without its brackets).
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// A header value as echoed in a refusal: at most 100 characters.
fn cut(value: &str) -> String {
    value.chars().take(100).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    fn check(policy: &BrowserPolicy, pairs: &[(&'static str, &str)]) -> Result<(), Refusal> {
        policy.check(&Uri::from_static("/api/v2/health"), &headers(pairs))
    }

    #[test]
    fn without_keys_only_addresses_localhost_and_allowed_names_are_served() {
        let open = BrowserPolicy::new(false, &[], &["memory.internal".into()]);
        for host in [
            "127.0.0.1:8080",
            "[::1]:8080",
            "10.1.2.3",
            "localhost:8080",
            "app.localhost",
            "Memory.Internal:8080",
        ] {
            assert!(check(&open, &[("host", host)]).is_ok(), "{host}");
        }
        for host in ["evil.example", "evil.example:8080", "127.0.0.1.nip.io:8080"] {
            assert!(
                matches!(check(&open, &[("host", host)]), Err(Refusal::Forbidden(_))),
                "{host}"
            );
        }
        // With keys, any name: the key is what guards.
        let keyed = BrowserPolicy::new(true, &[], &[]);
        assert!(check(&keyed, &[("host", "evil.example")]).is_ok());
        let any = BrowserPolicy::new(false, &[], &["*".into()]);
        assert!(check(&any, &[("host", "evil.example")]).is_ok());
    }

    #[test]
    fn http2_authority_stands_for_the_host() {
        let open = BrowserPolicy::new(false, &[], &[]);
        let uri: Uri = "http://evil.example:50051/memmachine.v2.MemoryService/AddMemories"
            .parse()
            .unwrap();
        assert!(open.check(&uri, &HeaderMap::new()).is_err());
        let uri: Uri = "http://127.0.0.1:50051/x".parse().unwrap();
        assert!(open.check(&uri, &HeaderMap::new()).is_ok());
    }

    #[test]
    fn origins_must_be_the_requests_own_or_allowed() {
        let open = BrowserPolicy::new(false, &["https://app.example/".into()], &[]);
        let host = ("host", "127.0.0.1:8080");
        assert!(check(&open, &[host]).is_ok());
        assert!(check(&open, &[host, ("origin", "http://127.0.0.1:8080")]).is_ok());
        assert!(check(&open, &[host, ("origin", "https://app.example")]).is_ok());
        for origin in ["http://evil.example", "null", "http://127.0.0.1:9999"] {
            assert!(
                matches!(
                    check(&open, &[host, ("origin", origin)]),
                    Err(Refusal::Forbidden(_))
                ),
                "{origin}"
            );
        }
        // Keys and no list: any origin (bearer keys); a list narrows it.
        let keyed = BrowserPolicy::new(true, &[], &[]);
        assert!(check(&keyed, &[host, ("origin", "http://evil.example")]).is_ok());
        let listed = BrowserPolicy::new(true, &["https://app.example".into()], &[]);
        assert!(check(&listed, &[host, ("origin", "http://evil.example")]).is_err());
    }

    #[test]
    fn posts_and_bodies_must_be_json() {
        let json = |t: &str| headers(&[("content-type", t), ("content-length", "2")]);
        assert!(require_json(&Method::POST, &json("application/json")).is_ok());
        assert!(require_json(&Method::POST, &json("Application/JSON; charset=utf-8")).is_ok());
        assert!(require_json(&Method::PUT, &json("application/merge-patch+json")).is_ok());
        for t in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
        ] {
            assert!(require_json(&Method::POST, &json(t)).is_err(), "{t}");
        }
        // A POST without a body or a type is still refused: a form can send one.
        assert!(require_json(&Method::POST, &HeaderMap::new()).is_err());
        assert!(require_json(&Method::GET, &HeaderMap::new()).is_ok());
        assert!(require_json(&Method::DELETE, &HeaderMap::new()).is_ok());
        let chunked = headers(&[("transfer-encoding", "chunked")]);
        assert!(require_json(&Method::DELETE, &chunked).is_err());
    }
}
