//! The bodies of MemMachine 0.4's `PUT /api/v2/config/memory...` (its `Update*Spec`
//! models), read into the domain's `runtime_settings::Change`. Every field is optional
//! and unknown ones are ignored, as MemMachine's pydantic models do.

use std::collections::BTreeMap;

use serde::Deserialize;
use utoipa::ToSchema;

use memmachine_core::error::{Error, Result};
use memmachine_domain::retrieval::ranking::Ranking;
use memmachine_domain::runtime_settings::{Change, Fixed};

#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct LongTermUpdate {
    /// `event` (this server's); `declarative` is refused.
    backend: Option<String>,
    /// The server's embedder (fixed at start-up).
    embedder: Option<String>,
    /// A ranking mode (`lexical`, `dense`, `hybrid`) or an offered reranker: the default
    /// of projects that name none; empty for the server's own default.
    reranker: Option<String>,
    vector_graph_store: Option<String>,
    vector_store: Option<String>,
    segment_store: Option<String>,
    properties_schema: Option<BTreeMap<String, String>>,
    enabled: Option<bool>,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct ShortTermUpdate {
    llm_model: Option<String>,
    /// Recent episodes kept in short-term memory (1 to 1000).
    message_capacity: Option<i64>,
    enabled: Option<bool>,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct EpisodicUpdate {
    long_term_memory: Option<LongTermUpdate>,
    short_term_memory: Option<ShortTermUpdate>,
    long_term_memory_enabled: Option<bool>,
    short_term_memory_enabled: Option<bool>,
    enabled: Option<bool>,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct SemanticUpdate {
    enabled: Option<bool>,
    database: Option<String>,
    storage_backend: Option<String>,
    feature_store: Option<String>,
    vector_collection: Option<String>,
    vector_dimensions: Option<i64>,
    llm_model: Option<String>,
    embedding_model: Option<String>,
    ingestion_trigger_messages: Option<i64>,
    ingestion_trigger_age_seconds: Option<f64>,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct MemoryUpdate {
    episodic_memory: Option<EpisodicUpdate>,
    semantic_memory: Option<SemanticUpdate>,
}

impl MemoryUpdate {
    /// Whether neither part is given.
    pub fn is_empty(&self) -> bool {
        self.episodic_memory.is_none() && self.semantic_memory.is_none()
    }
}

/// A count as the domain checks it: a negative one is out of range as 0 is.
fn count(n: i64) -> usize {
    usize::try_from(n).unwrap_or(0)
}

/// One switch sent in two places (`long_term_memory_enabled` and
/// `long_term_memory.enabled`) must agree.
fn switch(field: &str, one: Option<bool>, other: Option<bool>) -> Result<Option<bool>> {
    match (one, other) {
        (Some(a), Some(b)) if a != b => Err(Error::invalid(
            field,
            "disagrees with the same switch given elsewhere in the request",
        )),
        (a, b) => Ok(a.or(b)),
    }
}

/// Records each value given for a setting fixed at start-up, named `{prefix}.{name}`.
fn fixed<'a>(
    change: &mut Change,
    prefix: &str,
    values: impl IntoIterator<Item = (&'a str, Option<String>, fn(String) -> Fixed)>,
) {
    for (name, value, kind) in values {
        if let Some(value) = value {
            change.fixed.push((format!("{prefix}.{name}"), kind(value)));
        }
    }
}

impl LongTermUpdate {
    pub fn into_change(self, change: &mut Change) {
        const PREFIX: &str = "episodic_memory.long_term_memory";
        fixed(
            change,
            PREFIX,
            [
                (
                    "backend",
                    self.backend,
                    Fixed::Backend as fn(String) -> Fixed,
                ),
                ("embedder", self.embedder, Fixed::Embedder),
                ("vector_graph_store", self.vector_graph_store, Fixed::Store),
                ("vector_store", self.vector_store, Fixed::Store),
                ("segment_store", self.segment_store, Fixed::Store),
            ],
        );
        if let Some(schema) = self.properties_schema {
            change.fixed.push((
                format!("{PREFIX}.properties_schema"),
                Fixed::PropertiesSchema(schema.len()),
            ));
        }
        change.ranking = self.reranker.as_deref().map(Ranking::parse);
        change.long_term_enabled = self.enabled;
    }
}

impl ShortTermUpdate {
    pub fn into_change(self, change: &mut Change) {
        if let Some(model) = self.llm_model {
            change.fixed.push((
                "episodic_memory.short_term_memory.llm_model".into(),
                Fixed::LanguageModel(model),
            ));
        }
        change.short_term_chars = self.message_capacity.map(count);
        change.short_term_enabled = self.enabled;
    }
}

impl EpisodicUpdate {
    pub fn into_change(self, change: &mut Change) -> Result<()> {
        let long_enabled = self.long_term_memory.as_ref().and_then(|l| l.enabled);
        let short_enabled = self.short_term_memory.as_ref().and_then(|s| s.enabled);
        let long_enabled = switch(
            "episodic_memory.long_term_memory.enabled",
            self.long_term_memory_enabled,
            long_enabled,
        )?;
        let short_enabled = switch(
            "episodic_memory.short_term_memory.enabled",
            self.short_term_memory_enabled,
            short_enabled,
        )?;
        if let Some(long) = self.long_term_memory {
            long.into_change(change);
        }
        if let Some(short) = self.short_term_memory {
            short.into_change(change);
        }
        // The switches as both places give them together (the nested parts set theirs).
        change.episodic_enabled = self.enabled;
        change.long_term_enabled = long_enabled;
        change.short_term_enabled = short_enabled;
        Ok(())
    }
}

impl SemanticUpdate {
    pub fn into_change(self, change: &mut Change) {
        fixed(
            change,
            "semantic_memory",
            [
                (
                    "database",
                    self.database,
                    Fixed::Store as fn(String) -> Fixed,
                ),
                ("storage_backend", self.storage_backend, Fixed::Store),
                ("feature_store", self.feature_store, Fixed::Store),
                ("vector_collection", self.vector_collection, Fixed::Store),
                ("llm_model", self.llm_model, Fixed::LanguageModel),
                ("embedding_model", self.embedding_model, Fixed::Embedder),
            ],
        );
        if let Some(n) = self.vector_dimensions {
            change.fixed.push((
                "semantic_memory.vector_dimensions".into(),
                Fixed::Dimensions(count(n)),
            ));
        }
        change.semantic_enabled = self.enabled;
        change.trigger_messages = self.ingestion_trigger_messages.map(count);
        change.trigger_age_secs = self.ingestion_trigger_age_seconds;
    }
}

impl MemoryUpdate {
    pub fn into_change(self) -> Result<Change> {
        let mut change = Change::default();
        if let Some(episodic) = self.episodic_memory {
            episodic.into_change(&mut change)?;
        }
        if let Some(semantic) = self.semantic_memory {
            semantic.into_change(&mut change);
        }
        Ok(change)
    }
}
