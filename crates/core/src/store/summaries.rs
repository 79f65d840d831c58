//! Short-term summaries.

/// A project's rolling summary of the episodes that left its short-term window.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub text: String,
    /// The sequence numbers it covers, inclusive.
    pub first_seq: i64,
    pub last_seq: i64,
    pub updated_at_micros: i64,
}
