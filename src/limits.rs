//! Request limits of the contract (configurable).

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most messages in one `AddMemories`.
    pub max_messages_per_add: usize,
    /// Most bytes of one message's content.
    pub max_content_bytes: usize,
    /// Largest `top_k` and `page_size`.
    pub max_page_size: usize,
    /// How many recent episodes `short_term_memory` returns.
    pub short_term_window: usize,
    /// Most characters those episodes hold together (0: no bound); the newest is
    /// always returned.
    pub short_term_max_chars: usize,
    /// Most distinct words in a search query.
    pub max_query_words: usize,
    /// Most bytes of episodes in one `ListMemories` page (the first is always sent), so
    /// that a page fits the 4 MiB a stock gRPC client reads.
    pub max_page_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_messages_per_add: 1000,
            max_content_bytes: 256 * 1024,
            max_page_size: 1000,
            short_term_window: 20,
            short_term_max_chars: 0,
            max_query_words: 1024,
            max_page_bytes: 2 * 1024 * 1024,
        }
    }
}

impl Limits {
    /// Validates a search query: not blank, and at most `max_query_words` distinct words
    /// (a query of very many costs time for nothing: only 64 terms rank).
    pub fn query(&self, field: &str, query: &str) -> crate::error::Result<()> {
        if query.trim().is_empty() {
            return Err(crate::error::Error::invalid(field, "must not be empty"));
        }
        if crate::retrieval::tokenize::more_distinct_words_than(query, self.max_query_words) {
            return Err(crate::error::Error::invalid(
                field,
                format!(
                    "holds more than {} distinct words (--max-query-words)",
                    self.max_query_words
                ),
            ));
        }
        Ok(())
    }

    /// Validates how many ids (or items) one call names: 1 to `max_page_size`, checked
    /// before any of them is read.
    pub fn ids(&self, field: &str, count: usize) -> crate::error::Result<()> {
        if count == 0 {
            return Err(crate::error::Error::invalid(
                field,
                "must name at least one",
            ));
        }
        if count > self.max_page_size {
            return Err(crate::error::Error::invalid(
                field,
                format!(
                    "names {count}, more than the {} one call may (--max-page-size)",
                    self.max_page_size
                ),
            ));
        }
        Ok(())
    }

    /// Validates an optional page size or `top_k` (1 to `max_page_size`).
    pub fn page_size(
        &self,
        field: &str,
        value: Option<i32>,
        default: usize,
    ) -> crate::error::Result<usize> {
        match value {
            None => Ok(default.min(self.max_page_size)),
            Some(n) if n >= 1 && (n as usize) <= self.max_page_size => Ok(n as usize),
            Some(n) => Err(crate::error::Error::invalid(
                field,
                format!("must be between 1 and {}, got {n}", self.max_page_size),
            )),
        }
    }
}
