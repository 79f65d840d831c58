//! The Model Context Protocol adapter: `memmachine mcp` over stdio for agent hosts, and
//! Streamable HTTP at `/mcp` on the REST listener. Every tool is bound to one scope (an
//! org, a project and a user) that comes from the command line or the endpoint's URL,
//! never from a tool's arguments.

pub mod http;
pub mod stdio;
pub mod tools;

use memmachine_core::access::{Access, ProjectAccess};
use memmachine_core::error::{Error, Result};

/// The user a scope names when none is given.
pub const DEFAULT_USER: &str = "user";

/// Most characters of the scoped user's id (it is stored as a producer id).
const MAX_USER_CHARS: usize = 256;

/// What every tool call of a session reaches: one project and, within it, one user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    pub project: ProjectAccess,
    pub user: String,
}

impl Scope {
    /// A validated scope that `access` may reach; empty org or project mean
    /// `universal`, an empty user the default user.
    pub fn new(access: &Access, org: &str, project: &str, user: &str) -> Result<Scope> {
        let project = access.project(org, project)?;
        let user = if user.is_empty() { DEFAULT_USER } else { user };
        if user.chars().count() > MAX_USER_CHARS || user.chars().any(char::is_control) {
            return Err(Error::invalid(
                "user",
                format!("must be at most {MAX_USER_CHARS} characters, without control characters"),
            ));
        }
        Ok(Scope {
            project,
            user: user.to_string(),
        })
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "org {:?}, project {:?}, user {:?}",
            self.project.org_id, self.project.project_id, self.user
        )
    }
}
