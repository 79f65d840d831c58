//! What the in-process transformer models share ([`crate::embed::local`], the sentence
//! embedder, and [`crate::rerank::cross_encoder`]): reading a Hugging Face model
//! directory (`config.json`, `tokenizer.json`, `model.safetensors`), a tokenizer that
//! pads each batch to its longest input and truncates to the model's length (the
//! sentence embedder turns the padding off: it packs texts), and the worker thread that
//! runs the cross-encoder off the async executor, where a panic in candle becomes an
//! error instead of taking the server down.
//!
//! Errors are messages starting with `who` (e.g. `local embedder`); each model wraps
//! them in its own error type.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};
use tokio::sync::oneshot;

/// The files of a model directory.
pub(crate) struct ModelFiles {
    pub config: PathBuf,
    pub tokenizer: PathBuf,
    pub weights: PathBuf,
}

impl ModelFiles {
    /// `config.json`, `tokenizer.json` and `model.safetensors` in `dir`, or an error
    /// naming the first that is missing. `model` says what the directory should hold
    /// (e.g. `a BERT-family sentence-embedding model`).
    pub(crate) fn in_dir(who: &str, model: &str, dir: &Path) -> Result<ModelFiles, String> {
        if !dir.is_dir() {
            return Err(format!(
                "{who}: model directory {} does not exist",
                dir.display()
            ));
        }
        let file = |name: &str| {
            let path = dir.join(name);
            if path.is_file() {
                Ok(path)
            } else {
                Err(format!(
                    "{who}: {} is missing (a model directory holds config.json, \
                     tokenizer.json and model.safetensors of {model})",
                    path.display()
                ))
            }
        };
        Ok(ModelFiles {
            config: file("config.json")?,
            tokenizer: file("tokenizer.json")?,
            weights: file("model.safetensors")?,
        })
    }
}

pub(crate) fn read_json(who: &str, path: &Path) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{who}: cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{who}: invalid {}: {e}", path.display()))
}

/// The tokenizer in `path`, padding each batch to its longest input (with the
/// tokenizer's own padding token, else `pad_id`) and truncating to `max_tokens`.
/// tokenizer.json often carries fixed-length padding and a shorter truncation from
/// export time: both are replaced.
pub(crate) fn load_tokenizer(
    who: &str,
    path: &Path,
    pad_id: u32,
    max_tokens: usize,
) -> Result<Tokenizer, String> {
    let mut tokenizer = Tokenizer::from_file(path)
        .map_err(|e| format!("{who}: invalid {}: {e}", path.display()))?;
    let padding = match tokenizer.get_padding() {
        Some(p) => PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            pad_to_multiple_of: None,
            ..p.clone()
        },
        None => PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            pad_id,
            pad_token: tokenizer
                .id_to_token(pad_id)
                .unwrap_or_else(|| "[PAD]".to_string()),
            ..PaddingParams::default()
        },
    };
    tokenizer.with_padding(Some(padding));
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: max_tokens,
            ..TruncationParams::default()
        }))
        .map_err(|e| {
            format!(
                "{who}: cannot truncate {} to {max_tokens} tokens: {e}",
                path.display()
            )
        })?;
    Ok(tokenizer)
}

/// The tensors of `path` (safetensors), as `dtype` on `device`.
pub(crate) fn load_weights(
    who: &str,
    path: &Path,
    dtype: DType,
    device: &Device,
) -> Result<VarBuilder<'static>, String> {
    let weights =
        std::fs::read(path).map_err(|e| format!("{who}: cannot read {}: {e}", path.display()))?;
    VarBuilder::from_buffered_safetensors(weights, dtype, device)
        .map_err(|e| format!("{who}: invalid {}: {e}", path.display()))
}

/// The model's name: the directory's own name (after resolving links), e.g.
/// `all-MiniLM-L6-v2`.
pub(crate) fn model_name(dir: &Path) -> String {
    std::fs::canonicalize(dir)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "model".to_string())
}

/// Why a [`Worker`] gave no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WorkerError {
    /// The thread has ended (it cannot start again).
    Stopped,
    /// The job panicked; the thread goes on with the next one.
    Panicked,
}

type Job<J, R> = (J, oneshot::Sender<Result<R, WorkerError>>);

/// A thread of its own that runs one job at a time (each forward pass uses every core:
/// candle's matrix products are parallel). It ends when the worker is dropped.
pub(crate) struct Worker<J, R> {
    jobs: mpsc::Sender<Job<J, R>>,
}

impl<J: Send + 'static, R: Send + 'static> Worker<J, R> {
    /// Starts the thread `name`, which answers each job with `run(job)`.
    pub(crate) fn spawn(
        name: &str,
        run: impl Fn(J) -> R + Send + 'static,
    ) -> std::io::Result<Worker<J, R>> {
        let (tx, rx) = mpsc::channel::<Job<J, R>>();
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                while let Ok((job, reply)) = rx.recv() {
                    if reply.is_closed() {
                        continue; // the caller gave up (its future was dropped)
                    }
                    let result = catch_unwind(AssertUnwindSafe(|| run(job)))
                        .map_err(|_| WorkerError::Panicked);
                    let _ = reply.send(result);
                }
            })?;
        Ok(Worker { jobs: tx })
    }

    /// Runs `job` on the thread and waits for its answer without blocking the executor.
    pub(crate) async fn run(&self, job: J) -> Result<R, WorkerError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send((job, reply))
            .map_err(|_| WorkerError::Stopped)?;
        answer.await.map_err(|_| WorkerError::Stopped)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_job_is_an_error_and_the_worker_goes_on() {
        let worker = Worker::spawn("test-worker", |n: u32| {
            assert!(n != 13, "unlucky");
            n * 2
        })
        .unwrap();
        assert_eq!(worker.run(2).await, Ok(4));
        assert_eq!(worker.run(13).await, Err(WorkerError::Panicked));
        assert_eq!(worker.run(21).await, Ok(42));
    }
}
