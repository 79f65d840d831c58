//! How the last real call to each model the server depends on ended (embedders, the
//! language model, rerankers), as `/api/v2/config/resources` shows it: `pending` before
//! any call, `ready` after a success, `failed` with the error after a failure. The
//! wrappers that already measure each call record its outcome here.

use std::collections::HashMap;
use std::sync::Mutex;

/// What a server without an embedder means for its searches, and how to get one: said
/// in the start-up log and by `/config/resources`.
pub const NO_EMBEDDER: &str = "no embedder in use: search is lexical (BM25) only, so \"dog\" \
     does not find \"golden retriever\"; to search by meaning run `memmachine model fetch` \
     and restart (or pass --embedder openai --embedder-base-url URL --embedder-model NAME)";

/// What a server without a language model means for semantic memory (log and
/// `/config/resources`).
pub const NO_LANGUAGE_MODEL: &str = "no language model configured: semantic memory is not \
     extracted from messages (AddMemories with empty types stores episodic memory only, and \
     one naming semantic is refused); start with --llm-base-url URL --llm-model NAME";

/// How much of an error a status keeps.
const MAX_ERROR_CHARS: usize = 300;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Embedder,
    LanguageModel,
    Reranker,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// No call has been made yet.
    Pending,
    Ready,
    /// The last call failed: why, redacted and cut short.
    Failed(String),
}

impl Status {
    pub fn name(&self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Ready => "ready",
            Status::Failed(_) => "failed",
        }
    }

    pub fn error(&self) -> Option<&str> {
        match self {
            Status::Failed(error) => Some(error),
            _ => None,
        }
    }

    /// `Ready` or `Failed` from a call's result. Errors may quote an endpoint's URL and
    /// are shown to callers, so they are redacted and put on one short line.
    pub fn of<T, E: std::fmt::Display>(result: &Result<T, E>) -> Status {
        match result {
            Ok(_) => Status::Ready,
            Err(err) => {
                let text = crate::urls::redact_in(&err.to_string());
                let mut short: String = text.chars().take(MAX_ERROR_CHARS).collect();
                if text.chars().count() > MAX_ERROR_CHARS {
                    short.push('…');
                }
                Status::Failed(short.replace(['\n', '\r'], " "))
            }
        }
    }
}

/// The last outcome of each resource, by kind and id (the set of ids is fixed by the
/// configuration, so this never grows with traffic).
#[derive(Default)]
pub struct LastCalls {
    outcomes: Mutex<HashMap<(Kind, String), Status>>,
}

impl LastCalls {
    pub fn record<T, E: std::fmt::Display>(&self, kind: Kind, id: &str, result: &Result<T, E>) {
        let status = Status::of(result);
        let mut outcomes = self.outcomes.lock().unwrap_or_else(|p| p.into_inner());
        outcomes.insert((kind, id.to_string()), status);
    }

    pub fn status(&self, kind: Kind, id: &str) -> Status {
        let outcomes = self.outcomes.lock().unwrap_or_else(|p| p.into_inner());
        outcomes
            .get(&(kind, id.to_string()))
            .cloned()
            .unwrap_or(Status::Pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_then_the_last_outcome_redacted_and_short() {
        let calls = LastCalls::default();
        assert_eq!(calls.status(Kind::Embedder, "e"), Status::Pending);
        calls.record::<(), _>(Kind::Embedder, "e", &Err("http://u:pw@h/?key=k down"));
        let failed = calls.status(Kind::Embedder, "e");
        assert_eq!(failed.name(), "failed");
        assert_eq!(failed.error(), Some("http://u:***@h/?key=*** down"));
        // Another kind with the same id is another resource.
        assert_eq!(calls.status(Kind::Reranker, "e"), Status::Pending);
        calls.record::<_, String>(Kind::Embedder, "e", &Ok(()));
        assert_eq!(calls.status(Kind::Embedder, "e"), Status::Ready);
        let long = "x\n".repeat(400);
        let error = Status::of::<(), _>(&Err(long)).error().unwrap().to_string();
        assert_eq!(error.chars().count(), MAX_ERROR_CHARS + 1);
        assert!(!error.contains('\n'));
    }
}
