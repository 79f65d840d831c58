//! `MemoryService.ImportMemories`'s stream as the domain's batch source: each request
//! decoded as AddMemories decodes it, with a bound on the wait for the next one, and
//! the server's drain as the import's stop.

use std::sync::Arc;
use std::time::Duration;

use super::convert;
use crate::admission::lifecycle::{Lifecycle, Phase};
use memmachine_core::error::{Error, Result};
use memmachine_domain::batch_import::{BatchSource, ImportBatch, ImportStop, Imported};
use memmachine_proto::v2 as pb;

/// What an import needs from the server besides the domain.
#[derive(Clone)]
pub struct ImportSettings {
    pub lifecycle: Arc<Lifecycle>,
    /// Longest wait for the next batch (`--request-timeout`): an import has no overall
    /// deadline unless the client sets one, but a stalled one does not hold its permit.
    pub idle: Duration,
    /// The decoding limit, named when a batch exceeds it.
    pub max_request_bytes: usize,
}

pub struct Requests<'a> {
    pub stream: tonic::Streaming<pb::ImportMemoriesRequest>,
    pub settings: &'a ImportSettings,
}

impl BatchSource for Requests<'_> {
    async fn next_batch(&mut self) -> Option<Result<ImportBatch>> {
        let received = tokio::time::timeout(self.settings.idle, self.stream.message()).await;
        match received {
            Err(_) => Some(Err(Error::DeadlineExceeded(format!(
                "no batch arrived for {:.0} s (--request-timeout)",
                self.settings.idle.as_secs_f64()
            )))),
            Ok(Ok(None)) => None,
            Ok(Ok(Some(request))) => Some(batch(request)),
            Ok(Err(status)) => Some(Err(stream_error(&status, self.settings.max_request_bytes))),
        }
    }
}

fn batch(r: pb::ImportMemoriesRequest) -> Result<ImportBatch> {
    Ok(ImportBatch {
        types: convert::memory_kinds(&r.types)?,
        messages: convert::messages(r.messages)?,
        org_id: r.org_id,
        project_id: r.project_id,
    })
}

/// tonic's failure to receive a request, as the error the batch is reported with.
fn stream_error(status: &tonic::Status, max_request_bytes: usize) -> Error {
    match status.code() {
        tonic::Code::OutOfRange => Error::ResourceExhausted {
            message: format!(
                "the batch is larger than this server accepts ({max_request_bytes} bytes; \
                 --max-request-bytes)"
            ),
            retry_after: None,
        },
        tonic::Code::DeadlineExceeded => Error::DeadlineExceeded(status.message().to_string()),
        tonic::Code::Internal if status.message().starts_with("failed to decode") => {
            Error::invalid(
                "",
                format!("the batch is not a valid message: {}", status.message()),
            )
        }
        _ => Error::Unavailable(format!(
            "the request stream broke off: {}",
            status.message()
        )),
    }
}

/// A draining server stores the batch under way and no further one.
pub struct Drain<'a>(pub &'a Lifecycle);

impl ImportStop for Drain<'_> {
    fn stop(&self) -> Option<Error> {
        (self.0.phase() == Phase::Draining).then(|| {
            Error::Unavailable(
                "the server is shutting down: this batch and the ones after it were not \
                 stored; send them again to another replica"
                    .into(),
            )
        })
    }
}

pub fn response(imported: Imported) -> pb::ImportMemoriesResponse {
    pb::ImportMemoriesResponse {
        batches: imported.batches as i64,
        messages: imported.messages as i64,
        duplicates: imported.duplicates as i64,
        first_error: imported.first_error.map(|(batch, err)| {
            let status = tonic::Status::from(err);
            pb::ImportError {
                batch: batch as i64,
                code: status.code() as i32,
                message: status.message().to_string(),
            }
        }),
    }
}
