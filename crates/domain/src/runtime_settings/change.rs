//! A change of the runtime settings as asked, and which of its fields this server can
//! apply: live settings are checked for range, resources fixed at start-up are accepted
//! only when they name what is in use (so a client may send back what it read).

use super::{Effective, Overrides};
use crate::error::{Error, Result, Violations};
use crate::retrieval::ranking::Ranking;

/// Largest short-term capacity and semantic message trigger accepted.
const MAX_COUNT: usize = 1000;
/// The largest short-term length in characters (MemMachine's default is 64,000).
const MAX_CHARS: usize = 16 * 1024 * 1024;
/// Longest semantic age trigger accepted: a week.
const MAX_AGE_SECS: f64 = 7.0 * 24.0 * 3600.0;

/// What the server was started with that cannot change while it runs.
#[derive(Debug, Clone, Default)]
pub struct Resources {
    /// The store as an admin is shown it (URL redacted), and its kind alone.
    pub store: String,
    pub store_kind: String,
    /// The default embedder's id and dimensions.
    pub embedder: Option<(String, usize)>,
    pub llm_model: Option<String>,
    /// The ranking modes and rerankers a project (or the server's default) may name.
    pub rankings: Vec<String>,
}

/// A resource a request names, which this server fixes at start-up.
#[derive(Debug, Clone, PartialEq)]
pub enum Fixed {
    Store(String),
    Embedder(String),
    Dimensions(usize),
    LanguageModel(String),
    /// MemMachine's long-term backend: `declarative` or `event`.
    Backend(String),
    /// Declared filterable properties (how many).
    PropertiesSchema(usize),
}

/// A change asked for; `None` keeps the value.
#[derive(Debug, Clone, Default)]
pub struct Change {
    pub episodic_enabled: Option<bool>,
    pub long_term_enabled: Option<bool>,
    pub short_term_enabled: Option<bool>,
    pub short_term_chars: Option<usize>,
    /// `Ranking::Default`: back to the server's default.
    pub ranking: Option<Ranking>,
    pub semantic_enabled: Option<bool>,
    pub trigger_messages: Option<usize>,
    pub trigger_age_secs: Option<f64>,
    /// Each fixed resource named, with the request field naming it.
    pub fixed: Vec<(String, Fixed)>,
}

const STORE_HOW: &str = "episodes, vectors and features all live in the one store chosen \
                         with --store/--data-dir when the server starts";

impl Change {
    /// Whether nothing stored would change.
    pub fn is_empty(&self) -> bool {
        self.episodic_enabled.is_none()
            && self.long_term_enabled.is_none()
            && self.short_term_enabled.is_none()
            && self.short_term_chars.is_none()
            && self.ranking.is_none()
            && self.semantic_enabled.is_none()
            && self.trigger_messages.is_none()
            && self.trigger_age_secs.is_none()
    }

    /// Bad values are `InvalidArgument` (each field named); then what this server cannot
    /// do at run time is `FailedPrecondition`, each field named with why.
    pub(super) fn check(&self, base: &Effective, resources: &Resources) -> Result<()> {
        let mut violations = Violations::default();
        if let Some(n) = self.short_term_chars
            && !(1..=MAX_CHARS).contains(&n)
        {
            violations.add(
                "episodic_memory.short_term_memory.message_capacity",
                format!("must be between 1 and {MAX_CHARS} characters"),
            );
        }
        if let Some(n) = self.trigger_messages
            && !(1..=MAX_COUNT).contains(&n)
        {
            violations.add(
                "semantic_memory.ingestion_trigger_messages",
                format!("must be between 1 and {MAX_COUNT}"),
            );
        }
        if let Some(secs) = self.trigger_age_secs
            && !(0.0..=MAX_AGE_SECS).contains(&secs)
        {
            violations.add(
                "semantic_memory.ingestion_trigger_age_seconds",
                format!("must be between 0 and {MAX_AGE_SECS} (a week)"),
            );
        }
        if let Some(ranking) = &self.ranking
            && *ranking != Ranking::Default
            && !resources.rankings.iter().any(|name| name == ranking.name())
        {
            let name = ranking.name();
            violations.add(
                "episodic_memory.long_term_memory.reranker",
                format!(
                    "{name:?} is not one this server offers: {} (or empty for the default)",
                    resources.rankings.join(", ")
                ),
            );
        }
        violations.into_result()?;
        let mut refused = Vec::new();
        if self.semantic_enabled == Some(true) && !base.has_model {
            refused.push(
                "semantic_memory.enabled: no language model is configured; start the server \
                 with --llm-base-url and --llm-model"
                    .to_string(),
            );
        }
        for (field, fixed) in &self.fixed {
            if let Some(why) = refusal(fixed, resources) {
                refused.push(format!("{field}: {why}"));
            }
        }
        if refused.is_empty() {
            Ok(())
        } else {
            Err(Error::FailedPrecondition(refused.join("; ")))
        }
    }

    pub(super) fn apply_to(&self, overrides: &mut Overrides) {
        let set = |slot: &mut Option<bool>, value: Option<bool>| {
            if value.is_some() {
                *slot = value;
            }
        };
        set(&mut overrides.episodic_enabled, self.episodic_enabled);
        set(&mut overrides.long_term_enabled, self.long_term_enabled);
        set(&mut overrides.short_term_enabled, self.short_term_enabled);
        set(&mut overrides.semantic_enabled, self.semantic_enabled);
        if let Some(n) = self.short_term_chars {
            overrides.short_term_chars = Some(n);
        }
        if let Some(ranking) = &self.ranking {
            overrides.ranking = (*ranking != Ranking::Default).then(|| ranking.name().to_string());
        }
        if let Some(n) = self.trigger_messages {
            overrides.trigger_messages = Some(n);
        }
        if let Some(secs) = self.trigger_age_secs {
            overrides.trigger_age_secs = Some(secs);
        }
    }
}

/// Why a fixed resource cannot be what is asked; `None` when it already is.
fn refusal(fixed: &Fixed, resources: &Resources) -> Option<String> {
    let embedder = resources.embedder.as_ref();
    match fixed {
        Fixed::Store(name) if *name == resources.store || *name == resources.store_kind => None,
        Fixed::Store(name) => Some(format!(
            "{name:?} is not this server's store ({}); {STORE_HOW}",
            resources.store_kind
        )),
        Fixed::Embedder(name) if embedder.is_some_and(|(id, _)| id == name) => None,
        Fixed::Embedder(name) => Some(format!(
            "{name:?} is not the server's embedder ({}); another would have to embed every \
             episode again, so it is chosen with --embedder when the server starts (a project \
             may name another in its config.embedder)",
            embedder.map_or("none", |(id, _)| id.as_str())
        )),
        Fixed::Dimensions(n) if embedder.is_some_and(|(_, d)| d == n) => None,
        Fixed::Dimensions(n) => Some(format!(
            "vectors have the dimensions of the server's embedder ({}), not {n}; they change \
             with --embedder when the server starts",
            embedder.map_or("none".to_string(), |(_, d)| d.to_string())
        )),
        Fixed::LanguageModel(name) if resources.llm_model.as_ref() == Some(name) => None,
        Fixed::LanguageModel(name) => Some(format!(
            "{name:?} is not the server's language model ({}); it is chosen with --llm-model \
             and --llm-base-url when the server starts",
            resources.llm_model.as_deref().unwrap_or("none")
        )),
        Fixed::Backend(name) if name == "event" => None,
        Fixed::Backend(name) => Some(format!(
            "{name:?} is not available: this server's long-term memory is the event backend \
             (episodes and their vectors in its one store)"
        )),
        Fixed::PropertiesSchema(0) => None,
        Fixed::PropertiesSchema(_) => Some(
            "this server filters on any metadata key without a declared schema, so there is \
             nothing to declare"
                .to_string(),
        ),
    }
}
