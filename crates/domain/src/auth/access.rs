//! The routing key of a request's headers. A proxy routes on the header
//! (`x-memmachine-project: ORG/PROJECT`) without reading the body; `Access` (in core)
//! holds each call to it.

use memmachine_core::access::ROUTE_HEADER;

use crate::error::{Error, Result};
use crate::model::ProjectKey;

/// The routing key of a request's headers: `None` without the header,
/// `InvalidArgument` when it is not `ORG/PROJECT` of two valid ids.
pub fn route(headers: &http::HeaderMap) -> Result<Option<ProjectKey>> {
    let mut values = headers.get_all(ROUTE_HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let bad = |why: &str| Error::invalid(ROUTE_HEADER, why.to_string());
    // Proxies differ in which of several they hash on (HAProxy: the last).
    if values.next().is_some() {
        return Err(bad("must be given once"));
    }
    let value = value
        .to_str()
        .map_err(|_| bad("must be ASCII: percent-encode other characters"))?;
    let (org, project) = value
        .split_once('/')
        .ok_or_else(|| bad("must be ORG/PROJECT"))?;
    let decode = |part: &str| {
        percent_encoding::percent_decode_str(part)
            .decode_utf8()
            .map(|s| s.into_owned())
            .map_err(|_| bad("percent-encodes bytes that are not UTF-8"))
    };
    let (org, project) = (decode(org)?, decode(project)?);
    ProjectKey::parse(&org, &project)
        .map(Some)
        .map_err(|_| bad("must be ORG/PROJECT, each a valid id (or empty for universal)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> http::HeaderMap {
        let mut map = http::HeaderMap::new();
        map.insert(ROUTE_HEADER, value.parse().unwrap());
        map
    }

    fn key(org: &str, project: &str) -> ProjectKey {
        ProjectKey::parse(org, project).unwrap()
    }

    #[test]
    fn the_header_names_one_project() {
        assert_eq!(route(&http::HeaderMap::new()).unwrap(), None);
        assert_eq!(
            route(&headers("acme/web")).unwrap(),
            Some(key("acme", "web"))
        );
        assert_eq!(route(&headers("/")).unwrap(), Some(key("", "")));
        assert_eq!(
            route(&headers("%C3%A9cole/a")).unwrap(),
            Some(key("\u{e9}cole", "a"))
        );
        let mut twice = headers("acme/web");
        twice.append(ROUTE_HEADER, "acme/web".parse().unwrap());
        assert!(matches!(route(&twice), Err(Error::InvalidArgument(_))));
        for bad in ["acme", "acme/web/x", "a b/c", "acme/%FF", "acme/we%2Fb"] {
            assert!(
                matches!(route(&headers(bad)), Err(Error::InvalidArgument(_))),
                "{bad}"
            );
        }
    }
}
