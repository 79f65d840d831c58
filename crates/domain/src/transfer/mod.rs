//! Moving data between stores (`memmachine export` / `memmachine import`): a store's
//! projects, episodes, vectors and semantic rows as JSON Lines (`format`), written
//! (`export`) and read back into any backend (`import`) through the store traits only.
//! API keys are never exported.

pub mod export;
pub mod file_import;
pub mod format;

pub use export::{ExportOptions, export};
pub use file_import::{ImportOptions, import};
pub use format::Line;

/// Progress is reported every this many rows.
pub const PROGRESS_EVERY: u64 = 10_000;

/// Rows written or read, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub projects: u64,
    pub episodes: u64,
    pub vectors: u64,
    pub summaries: u64,
    pub set_types: u64,
    pub sets: u64,
    pub categories: u64,
    pub tags: u64,
    pub disabled_categories: u64,
    pub features: u64,
    pub feature_vectors: u64,
    pub feature_versions: u64,
}

impl Counts {
    pub fn count(&mut self, line: &Line) {
        let n = match line {
            Line::Format(_) => return,
            Line::Project(_) => &mut self.projects,
            Line::Episode(_) => &mut self.episodes,
            Line::Vector(_) => &mut self.vectors,
            Line::Summary(_) => &mut self.summaries,
            Line::SetType(_) => &mut self.set_types,
            Line::Set(_) => &mut self.sets,
            Line::Category(_) => &mut self.categories,
            Line::Tag(_) => &mut self.tags,
            Line::DisabledCategory(_) => &mut self.disabled_categories,
            Line::Feature(_) => &mut self.features,
            Line::FeatureVector(_) => &mut self.feature_vectors,
            Line::FeatureVersion(_) => &mut self.feature_versions,
        };
        *n += 1;
    }

    /// Every row counted.
    pub fn rows(&self) -> u64 {
        self.projects
            + self.episodes
            + self.vectors
            + self.summaries
            + self.set_types
            + self.sets
            + self.categories
            + self.tags
            + self.disabled_categories
            + self.features
            + self.feature_vectors
            + self.feature_versions
    }
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} rows: {} projects, {} episodes, {} vectors, {} summaries, {} set types, \
             {} sets, {} categories, {} tags, {} disabled categories, {} features, \
             {} feature vectors, {} feature versions",
            self.rows(),
            self.projects,
            self.episodes,
            self.vectors,
            self.summaries,
            self.set_types,
            self.sets,
            self.categories,
            self.tags,
            self.disabled_categories,
            self.features,
            self.feature_vectors,
            self.feature_versions
        )
    }
}
