//! The storage contract: the traits every backend implements and the rows they exchange,
//! one file per concern (ranking is the domain's, `retrieval::index_cache`). Every
//! backend passes the one conformance suite in `tests/conformance/`. Methods take the
//! project's public key and resolve it inside their own transaction, so a project
//! deleted concurrently is `NotFound`, never a half-finished operation.

// Lists: a method takes a list it only reads as a slice (`&[T]`), one whose items it
// stores or moves as `Vec<T>`; a backend copies what its blocking task needs.

mod episodes;
mod extraction;
pub mod feature_history;
mod feed;
mod forget;
mod keys;
mod leases;
pub mod legacy;
mod lifecycle;
mod memory_feed;
mod projects;
mod retention;
mod runtime_settings;
mod search_reads;
pub mod semantic;
pub mod semantic_features;
pub mod semantic_queue;
pub mod semantic_sets;
mod stats;
pub mod summaries;
pub mod transfer;
mod usage;
mod vectors;

pub use episodes::{EpisodeStore, episode_column};
pub use extraction::{ExtractionStore, QueuedForSet, QueuedMessages};
pub use feature_history::{
    FeatureHistory, FeatureRowsAt, FeatureVersion, KeptVersion, RestoredVersion,
};
pub use feed::{Change, ChangeFeed, Changes, FeedHead, IndexedEpisode};
pub use forget::{
    ForgetCounts, ForgetReceipt, ForgetStore, Forgotten, ProjectForget, decode_forget_projects,
    encode_forget_projects,
};
pub use keys::KeyStore;
pub use leases::LeaseStore;
pub use legacy::{GroupQuery, GroupRow, LegacyStore, SessionQuery, SessionRow};
pub use lifecycle::StoreLifecycle;
pub use memory_feed::{MemoryChange, MemoryChangeKind, MemoryChanges, MemoryFeed};
pub use projects::ProjectStore;
pub use retention::RetentionStore;
pub use runtime_settings::{SettingsStore, StoredSettings};
pub use search_reads::{SearchRead, SearchReads, SearchRows};
pub use semantic::SemanticStore;
pub use semantic_features::{
    ChangedBy, Feature, FeatureUpdate, IndexedFeature, NewFeature, PendingFeatureEmbedding,
    SemanticFeatures,
};
pub use semantic_queue::{Batch, ClaimRule, FeatureOp, Routing, SemanticQueue, routing_of_stored};
pub use semantic_sets::{
    Category, CategoryOwner, NewCategory, NewSet, NewSetType, SemanticSets, SetConfig, SetKind,
    SetRow, SetType, Tag,
};
pub use stats::{StatsStore, StoreStats};
pub use summaries::{Summaries, Summary};
pub use transfer::{EpisodeVector, RestoredFeature, TransferStore};
pub use usage::{UsageEntry, UsageStore, UsageTotals};
pub use vectors::{PendingEmbedding, VectorStore};

/// Everything the server needs from a backend.
pub trait Store:
    ProjectStore
    + EpisodeStore
    + ChangeFeed
    + SearchReads
    + MemoryFeed
    + VectorStore
    + KeyStore
    + StatsStore
    + SemanticStore
    + LegacyStore
    + TransferStore
    + SettingsStore
    + StoreLifecycle
    + UsageStore
    + ExtractionStore
    + LeaseStore
    + RetentionStore
    + FeatureHistory
    + ForgetStore
{
}

impl<T> Store for T where
    T: ProjectStore
        + EpisodeStore
        + ChangeFeed
        + SearchReads
        + MemoryFeed
        + VectorStore
        + KeyStore
        + StatsStore
        + SemanticStore
        + LegacyStore
        + TransferStore
        + SettingsStore
        + StoreLifecycle
        + UsageStore
        + ExtractionStore
        + LeaseStore
        + RetentionStore
        + FeatureHistory
        + ForgetStore
{
}
