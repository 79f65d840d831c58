//! Where a search's time goes: its total and its stages (`stage_time`: embedding the
//! question, lexical and dense ranking, fusion, the store's reads), logged at debug
//! level, and given to a caller that asks (`reported`; over gRPC a request carrying
//! the `memmachine-timing` header is answered with a `server-timing` entry), so what is
//! left to cut is visible per stage.

use std::cell::Cell;
use std::future::Future;
use std::time::Instant;

use crate::embed::{EmbedError, Embedder};
use crate::stage_time::{self, STAGES, Stage};

/// The request header (any value) that asks for a search's timing.
pub const ASK_HEADER: &str = "memmachine-timing";
/// The response header that gives it, as a `Server-Timing` header does (W3C).
pub const REPORT_HEADER: &str = "server-timing";

/// A search's time in microseconds: in all, and by stage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timing {
    pub total_us: u64,
    pub stages_us: [u64; STAGES],
}

impl Timing {
    pub fn stage_us(&self, stage: Stage) -> u64 {
        self.stages_us[stage as usize]
    }

    /// The `server-timing` entry: `total;dur=1.234, embedding;dur=0.412, ...` (ms).
    pub fn header(&self) -> String {
        let mut entries = vec![format!("total;dur={:.3}", self.total_us as f64 / 1e3)];
        for stage in Stage::ALL {
            let ms = self.stage_us(stage) as f64 / 1e3;
            entries.push(format!("{};dur={ms:.3}", stage.name()));
        }
        entries.join(", ")
    }

    /// A timing from its `server-timing` entry (`None` if the total is missing).
    pub fn parse(header: &str) -> Option<Timing> {
        let mut timing = Timing::default();
        let mut total = None;
        for entry in header.split(',') {
            let (name, dur) = entry.trim().split_once(";dur=")?;
            let us = (dur.trim().parse::<f64>().ok()? * 1e3).round() as u64;
            match Stage::ALL.iter().find(|s| s.name() == name) {
                Some(stage) => timing.stages_us[*stage as usize] = us,
                None if name == "total" => total = Some(us),
                None => {}
            }
        }
        timing.total_us = total?;
        Some(timing)
    }
}

tokio::task_local! {
    /// Where a caller that asked receives the timing of the search it runs.
    static REPORT: Cell<Option<Timing>>;
}

/// Runs `search` (whose timing `logged` takes), returning its timing too.
pub async fn reported<T>(search: impl Future<Output = T>) -> (T, Option<Timing>) {
    let timed = async {
        let found = search.await;
        (found, REPORT.with(Cell::get))
    };
    REPORT.scope(Cell::new(None), timed).await
}

/// Runs `search` and, when debug logging is on or the caller asked (`reported`), times
/// it by stage: logged at debug, given to the caller.
pub async fn logged<T>(search: impl Future<Output = T>) -> T {
    let asked = REPORT.try_with(|_| ()).is_ok();
    if !asked && !tracing::enabled!(tracing::Level::DEBUG) {
        return search.await;
    }
    let started = Instant::now();
    let (found, spent) = stage_time::scope(search).await;
    let timing = Timing {
        total_us: started.elapsed().as_micros() as u64,
        stages_us: spent.map(|nanos| nanos / 1000),
    };
    let us = |stage| timing.stage_us(stage);
    tracing::debug!(
        total_us = timing.total_us,
        embedding_us = us(Stage::Embedding),
        lexical_us = us(Stage::Lexical),
        dense_us = us(Stage::Dense),
        fusion_us = us(Stage::Fusion),
        store_us = us(Stage::Store),
        rest_us = timing
            .total_us
            .saturating_sub(timing.stages_us.iter().sum::<u64>()),
        "search timed"
    );
    let _ = REPORT.try_with(|report| report.set(Some(timing)));
    found
}

/// The question's vector (`Embedder::embed_query`), its time counted as the current
/// search's embedding.
pub async fn embed_query(embedder: &dyn Embedder, question: &str) -> Result<Vec<f32>, EmbedError> {
    stage_time::timed_async(Stage::Embedding, embedder.embed_query(question)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_reads_back_as_it_was_written() {
        let timing = Timing {
            total_us: 3_456,
            stages_us: [1_200, 300, 450, 80, 900],
        };
        let header = timing.header();
        assert_eq!(
            header,
            "total;dur=3.456, embedding;dur=1.200, lexical;dur=0.300, dense;dur=0.450, \
             fusion;dur=0.080, store;dur=0.900"
        );
        assert_eq!(Timing::parse(&header), Some(timing));
        assert_eq!(Timing::parse("embedding;dur=1.0"), None, "no total");
        assert_eq!(Timing::parse("garbage"), None);
    }

    #[tokio::test]
    async fn a_caller_that_asks_gets_the_stages_of_its_search() {
        let (answer, timing) = reported(logged(async {
            stage_time::timed_async(
                Stage::Store,
                tokio::time::sleep(std::time::Duration::from_millis(3)),
            )
            .await;
            7
        }))
        .await;
        let timing = timing.expect("asked");
        assert_eq!(answer, 7);
        assert!(timing.stage_us(Stage::Store) >= 3_000, "{timing:?}");
        assert!(
            timing.total_us >= timing.stage_us(Stage::Store),
            "{timing:?}"
        );
        // Not asked (and no debug logging in tests): nothing is reported.
        let (_, none) = reported(async { 1 }).await;
        assert_eq!(none, None);
    }
}
