//! What one call may reach: its caller, and the project its routing header names.
//! A proxy routes on the header (`x-memmachine-project: ORG/PROJECT`) without reading
//! the body, so a header that disagreed with the request's own project would send the
//! call to a replica chosen for another project: such calls are refused.

use std::ops::Deref;

use super::Caller;
use crate::error::{Error, Result};
use crate::model::ProjectKey;
use crate::model::ids::or_universal;

/// The routing header: `ORG/PROJECT`, each part percent-encoded UTF-8 (an empty part
/// is "universal", as in requests).
pub const ROUTE_HEADER: &str = "x-memmachine-project";

/// The caller of one request and its routing key, put into the request's extensions
/// by the admission layer. It reads as the caller; its `check_org` and `project` also
/// hold the request to its routing key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    caller: Caller,
    route: Option<ProjectKey>,
}

impl Deref for Access {
    type Target = Caller;

    fn deref(&self) -> &Caller {
        &self.caller
    }
}

impl Access {
    pub fn new(caller: Caller, route: Option<ProjectKey>) -> Access {
        Access { caller, route }
    }

    /// A call without a routing key.
    pub fn unrouted(caller: Caller) -> Access {
        Access::new(caller, None)
    }

    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// `PermissionDenied` unless the caller may reach `org_id`; `InvalidArgument` when
    /// the routing key names another org.
    pub fn check_org(&self, org_id: &str) -> Result<()> {
        self.caller.check_org(org_id)?;
        match &self.route {
            Some(route) if route.org_id != or_universal(org_id) => Err(mismatch(route)),
            _ => Ok(()),
        }
    }

    /// The org a listing is confined to (see `Caller::list_scope`); an org asked for
    /// must be the routing key's.
    pub fn list_scope<'a>(&'a self, asked: Option<&'a str>) -> Result<Option<&'a str>> {
        let scope = self.caller.list_scope(asked)?;
        if let Some(asked) = asked {
            self.check_org(asked)?;
        }
        Ok(scope)
    }

    /// The request's project, once the caller may reach it and the routing key (if
    /// any) names it.
    pub fn project(&self, org_id: &str, project_id: &str) -> Result<ProjectKey> {
        self.check_org(org_id)?;
        let key = ProjectKey::parse(org_id, project_id)?;
        self.check_route(&key)?;
        Ok(key)
    }

    /// As `project`, leaving malformed ids to whoever reads them (an import reports
    /// them as its first error, not as the call's).
    pub fn check_project(&self, org_id: &str, project_id: &str) -> Result<()> {
        self.check_org(org_id)?;
        match ProjectKey::parse(org_id, project_id) {
            Ok(key) => self.check_route(&key),
            Err(_) => Ok(()),
        }
    }

    /// `InvalidArgument` when the routing key names another project than `key`.
    pub fn check_route(&self, key: &ProjectKey) -> Result<()> {
        match &self.route {
            Some(route) if route != key => Err(mismatch(route)),
            _ => Ok(()),
        }
    }
}

fn mismatch(route: &ProjectKey) -> Error {
    Error::invalid(
        ROUTE_HEADER,
        format!(
            "names the project {}/{}, but the request is for another: the routing key \
             must name the request's own project",
            route.org_id, route.project_id
        ),
    )
}

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

    #[test]
    fn a_key_naming_another_project_is_refused() {
        let access = Access::new(Caller::Anyone, Some(key("acme", "web")));
        assert_eq!(access.project("acme", "web").unwrap(), key("acme", "web"));
        for (org, project) in [("acme", "mobile"), ("globex", "web"), ("", "")] {
            assert!(matches!(
                access.project(org, project),
                Err(Error::InvalidArgument(_))
            ));
        }
        assert!(access.check_org("acme").is_ok());
        assert!(access.check_org("globex").is_err());
        // Without a key only the caller's own rights apply.
        let open = Access::unrouted(Caller::Anyone);
        assert!(open.project("globex", "x").is_ok());
    }

    #[test]
    fn the_callers_rights_come_first() {
        let org_key = Caller::Org {
            key_id: "k".into(),
            org_id: "acme".into(),
        };
        let access = Access::new(org_key, Some(key("globex", "web")));
        assert!(matches!(
            access.project("globex", "web"),
            Err(Error::PermissionDenied(_))
        ));
    }
}
