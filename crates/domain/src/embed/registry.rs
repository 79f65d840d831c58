//! The embedders a server offers its projects. A project names one in
//! `ProjectConfig.embedder`, or leaves it empty for the server's default (the one
//! `--embedder` chose); `none` turns vectors off for that project. Besides the default,
//! `hash` (deterministic, no model) is always offered.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Embedder;
use super::hash::HashEmbedder;

/// The name of "no embedder" in `ProjectConfig.embedder`.
pub const NONE: &str = "none";
/// Vector length of the always-offered `hash` embedder unless configured.
const HASH_DIMENSIONS: usize = 256;

#[derive(Clone, Default)]
pub struct Embedders {
    /// By the name a project gives.
    named: BTreeMap<String, Arc<dyn Embedder>>,
    /// The name of the default, if the server has one.
    default: Option<String>,
}

impl Embedders {
    /// `default` is the `--embedder` kind's name with its embedder (`None`: projects
    /// that name no embedder are lexical only).
    pub fn new(default: Option<(&str, Arc<dyn Embedder>)>, hash_dimensions: Option<usize>) -> Self {
        let mut named: BTreeMap<String, Arc<dyn Embedder>> = BTreeMap::new();
        named.insert(
            "hash".into(),
            Arc::new(HashEmbedder::new(
                hash_dimensions.unwrap_or(HASH_DIMENSIONS),
            )),
        );
        let default = default.map(|(name, embedder)| {
            named.insert(name.to_string(), embedder);
            name.to_string()
        });
        Embedders { named, default }
    }

    /// The embedder of a project whose config names `name`.
    pub fn for_project(&self, name: &str) -> Option<&Arc<dyn Embedder>> {
        match name {
            "" => self.named.get(self.default.as_deref()?),
            NONE => None,
            name => self.named.get(name),
        }
    }

    /// Every embedder offered, once each.
    pub fn all(&self) -> Vec<Arc<dyn Embedder>> {
        let mut all: Vec<Arc<dyn Embedder>> = Vec::new();
        for embedder in self.named.values() {
            if !all.iter().any(|e| e.id() == embedder.id()) {
                all.push(embedder.clone());
            }
        }
        all
    }

    pub fn default_embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.for_project("")
    }

    /// Checks a name a project gives: empty, `none`, or an embedder offered here.
    pub fn validate(&self, name: &str) -> Result<(), String> {
        if name.is_empty() || name == NONE || self.named.contains_key(name) {
            return Ok(());
        }
        Err(format!(
            "{name:?} is not an embedder of this server (offered: {}, or empty for the \
             default)",
            self.names().join(", ")
        ))
    }

    /// Every name a project may give, `none` included.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.named.keys().map(String::as_str).collect();
        names.push(NONE);
        names
    }

    /// The same embedders, each recording its latency and volume in `metrics`.
    pub fn measured(self, metrics: &Arc<crate::metrics::Metrics>) -> Embedders {
        let named = self
            .named
            .into_iter()
            .map(|(name, embedder)| {
                let measured: Arc<dyn Embedder> =
                    Arc::new(super::measured::Measured::new(embedder, metrics.clone()));
                (name, measured)
            })
            .collect();
        Embedders {
            named,
            default: self.default,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projects_get_the_default_a_named_embedder_or_none() {
        let local: Arc<dyn Embedder> = Arc::new(HashEmbedder::new(8));
        let embedders = Embedders::new(Some(("local", local)), Some(4));
        assert_eq!(embedders.for_project("").unwrap().id(), "hash:8");
        assert_eq!(embedders.for_project("local").unwrap().id(), "hash:8");
        assert_eq!(embedders.for_project("hash").unwrap().id(), "hash:4");
        assert!(embedders.for_project("none").is_none());
        assert!(embedders.for_project("openai").is_none());
        let ids: Vec<String> = embedders.all().iter().map(|e| e.id().to_string()).collect();
        assert_eq!(ids, ["hash:4", "hash:8"], "each embedder once");
        assert!(embedders.validate("").is_ok() && embedders.validate("none").is_ok());
        let err = embedders.validate("openai").unwrap_err();
        assert!(err.contains("hash, local, none"), "{err}");
    }

    #[test]
    fn without_a_default_projects_naming_none_are_lexical() {
        let embedders = Embedders::new(None, None);
        assert!(embedders.default_embedder().is_none());
        assert!(embedders.for_project("").is_none());
        assert_eq!(embedders.for_project("hash").unwrap().dimensions(), 256);
    }
}
