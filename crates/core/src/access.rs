//! Who calls, and the values that prove what they may reach. A store or domain method
//! for one project takes a `ProjectAccess` (for one org, an `OrgAccess`); only `Access`
//! makes them, after its checks, so a handler that forgets the check does not compile.
//! A proxy routes on the header (`x-memmachine-project: ORG/PROJECT`) without reading
//! the body, so a header that disagreed with the request's own project would send the
//! call to a replica chosen for another project: such calls are refused.
//!
//! A project is reached only through `Access`:
//!
//! ```
//! use memmachine_core::access::{Access, Caller};
//!
//! let caller = Caller::Org { key_id: "k".into(), org_id: "acme".into() };
//! let access = Access::unrouted(caller);
//! let web = access.project("acme", "web").unwrap();
//! assert_eq!(web.key().project_id, "web");
//! assert!(access.project("globex", "web").is_err());
//! ```
//!
//! Its fields are private and it has no other constructor:
//!
//! ```compile_fail,E0451
//! use memmachine_core::access::ProjectAccess;
//! use memmachine_core::model::ProjectKey;
//!
//! let key = ProjectKey::parse("globex", "web").unwrap();
//! let stolen = ProjectAccess { key };
//! ```
//!
//! and a store method for a project does not take a bare key:
//!
//! ```compile_fail,E0308
//! use memmachine_core::model::ProjectKey;
//! use memmachine_core::store::EpisodeStore;
//!
//! async fn leak(store: &dyn EpisodeStore) {
//!     let key = ProjectKey::parse("globex", "web").unwrap();
//!     let _ = store.count_episodes(&key).await;
//! }
//! ```
//!
//! while the same call with an access value compiles (here through the door for work
//! no caller asked for, which `grep Access::system` lists):
//!
//! ```
//! use memmachine_core::access::Access;
//! use memmachine_core::model::ProjectKey;
//! use memmachine_core::store::EpisodeStore;
//!
//! async fn sweep(store: &dyn EpisodeStore) {
//!     let key = Access::system(ProjectKey::parse("globex", "web").unwrap());
//!     let _ = store.count_episodes(&key).await;
//! }
//! ```

use std::ops::Deref;

use crate::error::{Error, Result};
use crate::model::ids::or_universal;
use crate::model::{Project, ProjectKey};

/// The routing header: `ORG/PROJECT`, each part percent-encoded UTF-8 (an empty part
/// is "universal", as in requests).
pub const ROUTE_HEADER: &str = "x-memmachine-project";

/// The caller of one request, as its API key names it.
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
    fn check_org(&self, org_id: &str) -> Result<()> {
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

/// The caller of one request and its routing key, put into the request's extensions
/// by the admission layer. It reads as the caller; the access values it makes also
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

/// Proof that the caller may reach one project and that the routing key (if any)
/// names it. Only `Access::project`, `Access::project_key` and, for work no caller
/// asked for, `Access::system` make one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProjectAccess {
    key: ProjectKey,
}

impl ProjectAccess {
    pub fn key(&self) -> &ProjectKey {
        &self.key
    }

    /// The project's org: the caller's rights are per org, so reaching a project
    /// reaches its org.
    pub fn org(&self) -> OrgAccess {
        OrgAccess {
            org_id: self.key.org_id.clone(),
        }
    }
}

impl ProjectAccess {
    /// The project's row, read with this access, for methods that need both.
    pub fn open(&self, project: Project) -> Result<OpenProject> {
        if project.key != self.key {
            return Err(Error::Internal(format!(
                "the row of project {} was read for {}",
                project.key, self.key
            )));
        }
        Ok(OpenProject {
            access: self.clone(),
            project,
        })
    }
}

impl Deref for ProjectAccess {
    type Target = ProjectKey;

    fn deref(&self) -> &ProjectKey {
        &self.key
    }
}

impl PartialEq<ProjectKey> for ProjectAccess {
    fn eq(&self, other: &ProjectKey) -> bool {
        self.key == *other
    }
}

impl PartialEq<ProjectAccess> for ProjectKey {
    fn eq(&self, other: &ProjectAccess) -> bool {
        *self == other.key
    }
}

impl std::fmt::Display for ProjectAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.key.fmt(f)
    }
}

/// A project's row with the access it was read with: it reads as the row, and hands
/// its access to the store methods the row's work calls.
#[derive(Debug, Clone)]
pub struct OpenProject {
    access: ProjectAccess,
    project: Project,
}

impl OpenProject {
    pub fn access(&self) -> &ProjectAccess {
        &self.access
    }

    pub fn project(&self) -> &Project {
        &self.project
    }

    pub fn into_project(self) -> Project {
        self.project
    }
}

impl Deref for OpenProject {
    type Target = Project;

    fn deref(&self) -> &Project {
        &self.project
    }
}

/// Proof that the caller may reach one org (and the routing key, if any, is in it),
/// for operations over the org's projects. Made only by `Access::org` and
/// `Access::system_org`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OrgAccess {
    org_id: String,
}

impl OrgAccess {
    /// The org's id ("universal" for an empty one asked for).
    pub fn org_id(&self) -> &str {
        &self.org_id
    }

    /// One project of this org: the org's rights cover its projects (a routing key
    /// was checked against the org only).
    pub fn project(&self, project_id: &str) -> Result<ProjectAccess> {
        Ok(ProjectAccess {
            key: ProjectKey::parse(&self.org_id, project_id)?,
        })
    }

    /// As `project`, for a key read from this org's rows; `Internal` for another org's.
    pub fn project_key(&self, key: ProjectKey) -> Result<ProjectAccess> {
        if key.org_id != self.org_id {
            return Err(Error::Internal(format!(
                "project {key} was read as one of org {}",
                self.org_id
            )));
        }
        Ok(ProjectAccess { key })
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

    /// The one door for work no caller asked for (retention sweeps, workers, warm-up,
    /// restores from a file, the feed relay): grep `Access::system` to audit them.
    pub fn system(key: ProjectKey) -> ProjectAccess {
        ProjectAccess { key }
    }

    /// As `system`, for one org.
    pub fn system_org(org_id: &str) -> OrgAccess {
        OrgAccess {
            org_id: or_universal(org_id).to_string(),
        }
    }

    /// `PermissionDenied` unless the caller may reach `org_id`; `InvalidArgument` when
    /// the routing key names another org.
    fn check_org(&self, org_id: &str) -> Result<()> {
        self.caller.check_org(org_id)?;
        match &self.route {
            Some(route) if route.org_id != or_universal(org_id) => Err(mismatch(route)),
            _ => Ok(()),
        }
    }

    /// `InvalidArgument` when the routing key names another project than `key`.
    fn check_route(&self, key: &ProjectKey) -> Result<()> {
        match &self.route {
            Some(route) if route != key => Err(mismatch(route)),
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

    /// The org `org_id`, once the caller may reach it and the routing key (if any) is
    /// in it.
    pub fn org(&self, org_id: &str) -> Result<OrgAccess> {
        self.check_org(org_id)?;
        Ok(Access::system_org(org_id))
    }

    /// The request's project, once the caller may reach it and the routing key (if
    /// any) names it.
    pub fn project(&self, org_id: &str, project_id: &str) -> Result<ProjectAccess> {
        self.check_org(org_id)?;
        self.project_key(ProjectKey::parse(org_id, project_id)?)
    }

    /// As `project`, for ids already parsed.
    pub fn project_key(&self, key: ProjectKey) -> Result<ProjectAccess> {
        self.check_org(&key.org_id)?;
        self.check_route(&key)?;
        Ok(ProjectAccess { key })
    }

    /// The org of the request's project, as `project` checks it, leaving malformed
    /// ids to whoever reads them (an import or a v1 call reports them as its own
    /// error, not as the call's); the reader makes the project's access from it.
    pub fn org_of_project(&self, org_id: &str, project_id: &str) -> Result<OrgAccess> {
        let org = self.org(org_id)?;
        if let Ok(key) = ProjectKey::parse(org_id, project_id) {
            self.check_route(&key)?;
        }
        Ok(org)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn key(org: &str, project: &str) -> ProjectKey {
        ProjectKey::parse(org, project).unwrap()
    }

    #[test]
    fn an_org_key_reaches_its_own_org_only() {
        let caller = Caller::Org {
            key_id: "k".into(),
            org_id: "acme".into(),
        };
        let access = Access::unrouted(caller.clone());
        assert_eq!(
            access.project("acme", "web").unwrap().key(),
            &key("acme", "web")
        );
        assert_eq!(access.org("acme").unwrap().org_id(), "acme");
        assert!(matches!(
            access.project("globex", "web"),
            Err(Error::PermissionDenied(_))
        ));
        assert!(matches!(
            access.org("globex"),
            Err(Error::PermissionDenied(_))
        ));
        assert_eq!(caller.list_scope(None).unwrap(), Some("acme"));
        assert!(caller.list_scope(Some("globex")).is_err());
        let admin = Access::unrouted(Caller::Admin { key_id: "a".into() });
        assert!(admin.project("globex", "web").is_ok());
        assert_eq!(admin.list_scope(None).unwrap(), None);
    }

    #[test]
    fn a_key_naming_another_project_is_refused() {
        let access = Access::new(Caller::Anyone, Some(key("acme", "web")));
        assert_eq!(*access.project("acme", "web").unwrap(), key("acme", "web"));
        for (org, project) in [("acme", "mobile"), ("globex", "web"), ("", "")] {
            assert!(matches!(
                access.project(org, project),
                Err(Error::InvalidArgument(_))
            ));
        }
        assert!(access.org("acme").is_ok());
        assert!(access.org("globex").is_err());
        assert!(access.project_key(key("acme", "mobile")).is_err());
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
        assert!(matches!(
            access.project_key(key("globex", "web")),
            Err(Error::PermissionDenied(_))
        ));
    }

    #[test]
    fn malformed_ids_are_the_requests_error() {
        let open = Access::unrouted(Caller::Anyone);
        assert!(matches!(
            open.project("acme", "no spaces"),
            Err(Error::InvalidArgument(_))
        ));
        assert!(open.org_of_project("acme", "no spaces").is_ok());
        let routed = Access::new(Caller::Anyone, Some(key("acme", "web")));
        assert!(routed.org_of_project("acme", "mobile").is_err());
        assert!(routed.org_of_project("acme", "web").is_ok());
    }
}
