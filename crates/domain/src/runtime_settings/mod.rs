//! The server-wide settings an operator may change at run time (`PUT /api/v2/config/...`):
//! each one's effective value is the stored one if set, else the flag's (or the config
//! file's, or the default). Stored in one row of the database, so a restart keeps them
//! and every replica over the same database applies them.

mod change;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use self::change::{Change, Fixed, Resources};
use crate::error::{Error, Result};
use crate::model::EpisodicConfig;
use crate::retrieval::ranking::Ranking;
use crate::store::SettingsStore;

/// Replicas agree within about this long: each polls the settings' version (a one-row
/// read) this often and reloads them when it moved; a write is applied at once locally.
pub const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// The settings in effect.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    /// Server-wide switches, ANDed with each project's own (`/memory/episodic/config`).
    pub episodic_enabled: bool,
    pub long_term_enabled: bool,
    pub short_term_enabled: bool,
    /// How many characters of recent episodes short-term memory holds, as MemMachine's
    /// `message_capacity` (0: no bound but the window of `--short-term-window` episodes).
    pub short_term_chars: usize,
    /// The ranking mode or reranker of projects that name none (empty: hybrid with an
    /// embedder, else lexical).
    pub ranking: Ranking,
    /// Whether semantic memory is searched and messages are queued for it (queued only
    /// with a language model: see `has_model`).
    pub semantic_enabled: bool,
    /// Whether a language model is configured (fixed at start-up).
    pub has_model: bool,
    pub trigger_messages: usize,
    pub trigger_age: Duration,
}

impl Effective {
    /// The values of flags, environment, config file or defaults; the ingestion
    /// triggers are semantic memory's (passed in: semantic memory reads these settings).
    pub fn of_flags(
        limits: &crate::limits::Limits,
        (trigger_messages, trigger_age): (usize, Duration),
        has_model: bool,
    ) -> Effective {
        Effective {
            episodic_enabled: true,
            long_term_enabled: true,
            short_term_enabled: true,
            short_term_chars: limits.short_term_max_chars,
            ranking: Ranking::Default,
            semantic_enabled: true,
            has_model,
            trigger_messages,
            trigger_age,
        }
    }

    /// A project's episodic switches as the server-wide ones narrow them.
    pub fn episodic_for(&self, project: EpisodicConfig) -> EpisodicConfig {
        EpisodicConfig {
            enabled: project.enabled && self.episodic_enabled,
            long_term_memory_enabled: project.long_term_memory_enabled && self.long_term_enabled,
            short_term_memory_enabled: project.short_term_memory_enabled && self.short_term_enabled,
            ..project
        }
    }
}

/// What is stored: only the settings changed at run time (`None`: the flag's value).
/// Keys a later version adds are ignored by this one, as MemMachine's models do.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Overrides {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    episodic_enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    long_term_enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    short_term_enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    short_term_chars: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ranking: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    semantic_enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trigger_messages: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trigger_age_secs: Option<f64>,
}

impl Overrides {
    fn over(&self, base: &Effective) -> Effective {
        Effective {
            episodic_enabled: self.episodic_enabled.unwrap_or(base.episodic_enabled),
            long_term_enabled: self.long_term_enabled.unwrap_or(base.long_term_enabled),
            short_term_enabled: self.short_term_enabled.unwrap_or(base.short_term_enabled),
            short_term_chars: self.short_term_chars.unwrap_or(base.short_term_chars),
            ranking: match &self.ranking {
                Some(name) => Ranking::parse(name),
                None => base.ranking.clone(),
            },
            semantic_enabled: self.semantic_enabled.unwrap_or(base.semantic_enabled),
            has_model: base.has_model,
            trigger_messages: self.trigger_messages.unwrap_or(base.trigger_messages),
            trigger_age: self
                .trigger_age_secs
                .map_or(base.trigger_age, Duration::from_secs_f64),
        }
    }

    fn parse(stored: &str) -> Overrides {
        serde_json::from_str(stored).unwrap_or_else(|err| {
            tracing::warn!(error = %err, "stored runtime settings unreadable; using the flags' values");
            Overrides::default()
        })
    }
}

struct State {
    version: i64,
    effective: Effective,
}

struct Inner {
    store: Option<Arc<dyn SettingsStore>>,
    /// The values of flags, environment, config file or defaults.
    base: Effective,
    resources: Resources,
    state: RwLock<State>,
}

/// A handle on the settings in effect; cheap to clone.
#[derive(Clone)]
pub struct RuntimeSettings(Arc<Inner>);

impl RuntimeSettings {
    /// Settings that are never stored: `base` for good (tests, tools).
    pub fn unstored(base: Effective) -> RuntimeSettings {
        RuntimeSettings::with(None, base, Resources::default())
    }

    fn with(
        store: Option<Arc<dyn SettingsStore>>,
        base: Effective,
        resources: Resources,
    ) -> RuntimeSettings {
        let state = RwLock::new(State {
            version: 0,
            effective: base.clone(),
        });
        RuntimeSettings(Arc::new(Inner {
            store,
            base,
            resources,
            state,
        }))
    }

    /// Reads what is stored over `base`, and keeps reading it as other replicas change
    /// it (until the store closes).
    pub async fn load(
        store: Arc<dyn SettingsStore>,
        base: Effective,
        resources: Resources,
    ) -> Result<RuntimeSettings> {
        let settings = RuntimeSettings::with(Some(store), base, resources);
        settings.reload().await?;
        let watcher = settings.clone();
        tokio::spawn(async move { watcher.watch().await });
        Ok(settings)
    }

    /// The settings in effect now.
    pub fn current(&self) -> Effective {
        self.0
            .state
            .read()
            .expect("settings lock")
            .effective
            .clone()
    }

    /// What the server was started with (its resources), for the configuration API.
    pub fn resources(&self) -> &Resources {
        &self.0.resources
    }

    async fn reload(&self) -> Result<()> {
        let Some(store) = &self.0.store else {
            return Ok(());
        };
        let stored = store.runtime_settings().await?;
        self.install(stored.version, &Overrides::parse(&stored.settings));
        Ok(())
    }

    /// Keeps `state` at least as new as `version` (a slower reload never undoes a newer one).
    fn install(&self, version: i64, overrides: &Overrides) {
        let mut state = self.0.state.write().expect("settings lock");
        if version >= state.version {
            state.version = version;
            state.effective = overrides.over(&self.0.base);
        }
    }

    async fn watch(self) {
        let Some(store) = self.0.store.clone() else {
            return;
        };
        loop {
            tokio::time::sleep(RELOAD_EVERY).await;
            let known = self.0.state.read().expect("settings lock").version;
            let outcome = match store.runtime_settings_version().await {
                Ok(version) if version == known => Ok(()),
                Ok(_) => self.reload().await,
                Err(err) => Err(err),
            };
            match outcome {
                Ok(()) => {}
                Err(Error::Closed) => return,
                Err(err) => tracing::warn!(error = %err, "reading the runtime settings failed"),
            }
        }
    }

    /// Checks `change` (every refused field named, with why) and stores it; in effect
    /// here at once, on other replicas within `RELOAD_EVERY`. Nothing to change writes
    /// nothing.
    pub async fn update(&self, mut change: Change) -> Result<Effective> {
        let current = self.current();
        change.check(&self.0.base, &self.0.resources)?;
        // Without a model semantic memory is shown off; that sent back changes nothing
        // (features added by hand stay searchable).
        if !self.0.base.has_model && change.semantic_enabled == Some(false) {
            change.semantic_enabled = None;
        }
        if change.is_empty() {
            return Ok(current);
        }
        let Some(store) = &self.0.store else {
            return Err(Error::FailedPrecondition(
                "these settings are not stored here; change the flags and restart".into(),
            ));
        };
        // Compare and swap on the version: a concurrent write by another replica is
        // read back and this change applied over it.
        for _ in 0..16 {
            let stored = store.runtime_settings().await?;
            let mut overrides = Overrides::parse(&stored.settings);
            change.apply_to(&mut overrides);
            let text = serde_json::to_string(&overrides)
                .map_err(|err| Error::Internal(format!("encoding the settings: {err}")))?;
            if let Some(version) = store
                .replace_runtime_settings(stored.version, &text)
                .await?
            {
                self.install(version, &overrides);
                tracing::info!(version, settings = %text, "runtime settings changed");
                return Ok(self.current());
            }
        }
        Err(Error::Unavailable(
            "the settings kept changing under this update; retry".into(),
        ))
    }
}
