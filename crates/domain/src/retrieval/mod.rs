//! Ranking: text analysis, the BM25 and vector indexes of a project, and the cache that
//! keeps them current from the store's change feed.

pub mod ann;
pub mod bm25;
pub mod dense;
pub mod episode_fields;
pub mod flat;
pub mod fusion;
pub mod heap;
pub mod index_cache;
pub mod participants;
pub mod project_index;
pub mod project_search;
pub mod quantized;
pub mod ranking;
pub mod rescore;
pub mod segment;
pub mod time_expressions;
pub mod tokenize;
pub mod weights;
