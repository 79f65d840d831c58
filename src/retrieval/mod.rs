//! Ranking: text analysis and the BM25 index, independent of any store.

pub mod ann;
pub mod bm25;
pub mod dense;
pub mod episode_fields;
pub mod fusion;
pub mod tokenize;
