//! Identifier rules of the contract: `^[\p{L}\p{N}_:-]+$`, 1 to 128 characters, with
//! empty org and project ids meaning "universal". An id must also be its own Unicode
//! NFKC form, so two ids that look the same (`acme`, fullwidth `ａｃｍｅ`, a decomposed
//! `é`) cannot name two tenants: the other forms are refused, naming the one to use.

use unicode_normalization::{IsNormalized, UnicodeNormalization};

use crate::error::{Error, Result};

pub const UNIVERSAL: &str = "universal";
pub const MAX_ID_CHARS: usize = 128;

/// Checks one id; `field` names it in the error.
pub fn validate_id(field: &str, id: &str) -> Result<()> {
    let chars = id.chars().count();
    if chars == 0 || chars > MAX_ID_CHARS {
        return Err(Error::invalid(
            field,
            format!("must be 1 to {MAX_ID_CHARS} characters, got {chars}"),
        ));
    }
    if unicode_normalization::is_nfkc_quick(id.chars()) != IsNormalized::Yes {
        let normal: String = id.nfkc().collect();
        if normal != id {
            return Err(Error::invalid(
                field,
                format!(
                    "must be in Unicode normal form NFKC: write {normal:?} (fullwidth, \
                     compatibility and decomposed characters are refused, as they look \
                     like other ids)"
                ),
            ));
        }
    }
    if let Some(bad) = id
        .chars()
        .find(|c| !(c.is_alphanumeric() || matches!(c, '_' | ':' | '-')))
    {
        return Err(Error::invalid(
            field,
            format!("may hold only letters, digits, '_', ':' and '-', found {bad:?}"),
        ));
    }
    Ok(())
}

/// `(org_id, project_id)`: the name of one project, validated.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProjectKey {
    pub org_id: String,
    pub project_id: String,
}

impl ProjectKey {
    /// Validates both ids (reporting both when both are bad), mapping empty to
    /// "universal".
    pub fn parse(org_id: &str, project_id: &str) -> Result<ProjectKey> {
        let org_id = or_universal(org_id);
        let project_id = or_universal(project_id);
        let mut violations = crate::error::Violations::default();
        violations.check(validate_id("org_id", org_id));
        violations.check(validate_id("project_id", project_id));
        violations.into_result()?;
        Ok(ProjectKey {
            org_id: org_id.to_string(),
            project_id: project_id.to_string(),
        })
    }

    pub fn universal() -> ProjectKey {
        ProjectKey {
            org_id: UNIVERSAL.into(),
            project_id: UNIVERSAL.into(),
        }
    }

    pub fn is_universal(&self) -> bool {
        self.org_id == UNIVERSAL && self.project_id == UNIVERSAL
    }

    /// An episode's `session_key`.
    pub fn session_key(&self) -> String {
        format!("{}/{}", self.org_id, self.project_id)
    }
}

impl std::fmt::Display for ProjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.org_id, self.project_id)
    }
}

pub fn or_universal(id: &str) -> &str {
    if id.is_empty() { UNIVERSAL } else { id }
}

/// Defines a store handle: a row's internal id as its own type, so one kind of handle is
/// never passed for another. Backends alone turn it into a number and back, at the
/// SQL boundary; it shows as that number in messages and logs.
macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(transparent)]
        pub struct $name(i64);

        impl $name {
            pub const fn from_raw(raw: i64) -> $name {
                $name(raw)
            }

            pub const fn raw(self) -> i64 {
                self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

handle!(
    /// A project's handle: never reused, so a project deleted and created again has
    /// another, and never shown to clients.
    ProjectHandle
);
handle!(
    /// A semantic set type's handle.
    SetTypeId
);
handle!(
    /// A semantic category's handle.
    CategoryId
);
handle!(
    /// A semantic tag's handle.
    TagId
);
handle!(
    /// The store's handle of an episode (not its sequence number, which is per
    /// project): what vectors, the change feed and citations refer to it by.
    EpisodeHandle
);
handle!(
    /// The id of an entry of a project's change log: per project, increasing in
    /// commit order, 0 before the first.
    ChangeSeq
);
handle!(
    /// A semantic set's handle (its public id is `set_id`).
    SetId
);
handle!(
    /// A semantic feature's handle (its public id is `id`).
    FeatureId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_look_like_others_are_refused_naming_the_normal_form() {
        for (id, normal) in [
            ("ａｃｍｅ", "acme"),
            ("proje\u{301}t", "projét"),
            ("ﬁle", "file"),
        ] {
            let Err(Error::InvalidArgument(v)) = validate_id("org_id", id) else {
                panic!("{id:?} was accepted");
            };
            assert!(
                v[0].description.contains(&format!("{normal:?}")),
                "{}",
                v[0].description
            );
        }
        validate_id("org_id", "projét").unwrap();
        validate_id("org_id", "東京_支店").unwrap();
    }

    #[test]
    fn empty_ids_mean_universal() {
        assert!(ProjectKey::parse("", "").unwrap().is_universal());
    }

    #[test]
    fn accepts_unicode_letters_digits_and_separators() {
        ProjectKey::parse("Org_1", "projét:ä-9").unwrap();
    }

    #[test]
    fn rejects_bad_characters_and_lengths_naming_each_field() {
        let Err(Error::InvalidArgument(v)) = ProjectKey::parse("a b", &"x".repeat(129)) else {
            panic!("expected invalid argument");
        };
        let fields: Vec<_> = v.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(fields, ["org_id", "project_id"]);
        assert!(validate_id("f", "a/b").is_err());
        assert!(validate_id("f", &"x".repeat(128)).is_ok());
    }
}
