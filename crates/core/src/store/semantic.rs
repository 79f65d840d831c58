//! The storage traits of semantic memory, one per concern, each in its concern's file
//! with its rows (`semantic_sets`, `semantic_features`, `semantic_queue`, `summaries`):
//! rows only. Which sets a message lands in, how facts are matched, ranked and merged
//! are the domain's (`semantic/`); a backend stores, finds and changes rows, each call
//! in one transaction. Methods that take a
//! project key resolve it inside their transaction (`NotFound` when it is gone).

use super::semantic_features::SemanticFeatures;
use super::semantic_queue::SemanticQueue;
use super::semantic_sets::SemanticSets;
use super::summaries::Summaries;

/// Everything semantic memory needs from a backend, one trait per concern.
pub trait SemanticStore: SemanticSets + SemanticFeatures + SemanticQueue + Summaries {}

impl<T> SemanticStore for T where T: SemanticSets + SemanticFeatures + SemanticQueue + Summaries {}
