//! A Hugging Face BERT-family sentence-embedding model (e.g. all-MiniLM-L6-v2, BGE,
//! E5) run in-process on the CPU with candle: tokenise, run the encoder, pool the last
//! hidden states over the attention mask (mean pooling, or the `[CLS]` token when the
//! model's `1_Pooling/config.json` asks for it), then L2-normalise.
//!
//! The model directory is laid out as on the Hub: `config.json`, `tokenizer.json` and
//! `model.safetensors`, optionally `sentence_bert_config.json` (its `max_seq_length`
//! caps the input length as sentence-transformers does) and `1_Pooling/config.json`.
//!
//! Inference runs on [`memmachine_bert::Encoder`], this project's own CPU encoder (texts
//! packed without padding, weights packed once, kernels for the CPU found at run time).
//! It is CPU-bound: [`LocalEmbedder::embed`] hands the work to the encoder's own thread
//! pool (one thread per core), so it never runs on the async executor.
//! [`LocalEmbedder::embed_blocking`] waits for the pool on the calling thread.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use rayon::prelude::*;
use tokenizers::Tokenizer;

use super::{EmbedError, Embedder, normalize};
use crate::inference;
use memmachine_bert::{self as bert, Config, Encoder, Profile};
pub use memmachine_bert::{Kernel, Pooling};

/// Passes up to this many tokens, alone in a request, are split between two cores.
const SPLIT_TOKENS: usize = 64;

/// Tokens per forward pass: enough rows for the products to run near the machine's
/// rate, few enough that a pass's activations stay in the core's cache. Passes are
/// spread over the cores.
pub const PASS_TOKENS: usize = 256;

/// The loaded model and tokenizer, shared by the pool's jobs and blocking callers.
struct Model {
    encoder: Encoder,
    tokenizer: Tokenizer,
    pooling: Pooling,
    dimensions: usize,
    threads: usize,
    /// The encoder's own threads: a request runs inside the pool, so that splitting a
    /// product between cores is a cheap hand-over between its threads, not a wake-up
    /// of a waiting caller each time.
    pool: rayon::ThreadPool,
    /// Whether a question's pass is split between cores (`MEMMACHINE_EMBED_SPLIT=0`
    /// turns it off, to compare).
    split: bool,
    /// Tokens embedded so far.
    tokens: std::sync::atomic::AtomicU64,
}

pub struct LocalEmbedder {
    id: String,
    dimensions: usize,
    max_tokens: usize,
    pooling: Pooling,
    model: Arc<Model>,
}

impl std::fmt::Debug for LocalEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEmbedder")
            .field("id", &self.id)
            .field("dimensions", &self.dimensions)
            .field("max_tokens", &self.max_tokens)
            .field("pooling", &self.pooling)
            .finish()
    }
}

fn failed(msg: impl Into<String>) -> EmbedError {
    EmbedError::Failed(msg.into())
}

/// Who reports, in error messages.
const WHO: &str = "local embedder";
/// What a model directory holds, in error messages.
const MODEL: &str = "a BERT-family sentence-embedding model";

fn read_json(path: &Path) -> Result<serde_json::Value, EmbedError> {
    inference::read_json(WHO, path).map_err(failed)
}

impl LocalEmbedder {
    /// Loads the model in `model_dir` (see the module docs for its layout). Errors name
    /// the file that is missing or invalid.
    pub fn load(model_dir: &Path) -> Result<LocalEmbedder, EmbedError> {
        LocalEmbedder::load_with(model_dir, Kernel::choose())
    }

    /// As [`Self::load`], with the products on `kernel` (refused if the CPU lacks it).
    pub fn load_with(model_dir: &Path, kernel: Kernel) -> Result<LocalEmbedder, EmbedError> {
        kernel
            .check()
            .map_err(|e| failed(format!("local embedder: {e}")))?;
        let started = Instant::now();
        let files = inference::ModelFiles::in_dir(WHO, MODEL, model_dir).map_err(failed)?;
        let (config_path, tokenizer_path, weights_path) =
            (files.config, files.tokenizer, files.weights);

        let config: Config = serde_json::from_value(read_json(&config_path)?).map_err(|e| {
            failed(format!(
                "local embedder: {} is not a BERT config: {e}",
                config_path.display()
            ))
        })?;
        config
            .check()
            .map_err(|e| failed(format!("local embedder: {}: {e}", config_path.display())))?;

        // Input length: sentence-transformers' max_seq_length if given, never more than
        // the position embeddings cover.
        let mut max_tokens = config.max_position_embeddings;
        let st_config = model_dir.join("sentence_bert_config.json");
        if st_config.is_file()
            && let Some(n) = read_json(&st_config)?
                .get("max_seq_length")
                .and_then(|v| v.as_u64())
        {
            max_tokens = max_tokens.min(n as usize).max(2);
        }

        let pooling = read_pooling(model_dir)?;

        let mut tokenizer =
            inference::load_tokenizer(WHO, &tokenizer_path, config.pad_token_id, max_tokens)
                .map_err(failed)?;
        // Texts are packed end to end, never padded.
        tokenizer.with_padding(None);

        let layers = config.num_hidden_layers;
        let encoder = bert::load(config, &weights_path, kernel).map_err(|e| {
            failed(format!(
                "local embedder: {} does not hold the BERT weights {} describes: {e}",
                weights_path.display(),
                config_path.display()
            ))
        })?;
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("embed-local-{i}"))
            .build()
            .map_err(|e| failed(format!("local embedder: cannot start its threads: {e}")))?;

        let name = inference::model_name(model_dir);
        let id = format!("local:{name}");
        let dimensions = encoder.config().hidden_size;
        let model = Arc::new(Model {
            encoder,
            tokenizer,
            pooling,
            dimensions,
            threads,
            pool,
            split: std::env::var("MEMMACHINE_EMBED_SPLIT").map_or(true, |v| v != "0"),
            tokens: Default::default(),
        });
        tracing::info!(
            embedder = %id,
            dir = %model_dir.display(),
            dimensions,
            max_tokens,
            ?pooling,
            layers,
            threads,
            kernel = model.encoder.kernel().name(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "local embedder loaded"
        );
        Ok(LocalEmbedder {
            id,
            dimensions,
            max_tokens,
            pooling,
            model,
        })
    }

    /// The longest input in tokens (special tokens included); longer texts are truncated.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// Embeds on the encoder's pool, blocking the calling thread until done (never call
    /// it on an async executor thread; [`Embedder::embed`] awaits the pool instead).
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.model.embed(texts, None)
    }

    /// As [`Self::embed_blocking`], adding the time of each step to `profile`
    /// (tokenising included), for benchmarks.
    pub fn embed_profiled(
        &self,
        texts: &[String],
        profile: &mut Profiled,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.model.embed(texts, Some(profile))
    }

    /// Tokens of each text as the encoder sees them (special tokens included).
    pub fn token_counts(&self, texts: &[String]) -> Result<Vec<usize>, EmbedError> {
        Ok(self.model.tokenize(texts)?.iter().map(Vec::len).collect())
    }

    /// Multiply-add FLOPs of encoding texts of `lens` tokens.
    pub fn flops(&self, lens: &[usize]) -> f64 {
        self.model.encoder.flops(lens)
    }

    /// The kernel of the encoder's products.
    pub fn kernel(&self) -> Kernel {
        self.model.encoder.kernel()
    }

    /// Threads a request is spread over.
    pub fn threads(&self) -> usize {
        self.model.threads
    }
}

/// Where an embedding request spent its time (see [`LocalEmbedder::embed_profiled`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct Profiled {
    /// Tokenising, in nanoseconds.
    pub tokenizing: u64,
    /// The encoder's steps, summed over the threads that ran them.
    pub encoder: Profile,
}

/// Reads `1_Pooling/config.json` when there is one: mean pooling unless it asks for CLS.
fn read_pooling(model_dir: &Path) -> Result<Pooling, EmbedError> {
    let path = model_dir.join("1_Pooling").join("config.json");
    if !path.is_file() {
        return Ok(Pooling::Mean);
    }
    let v = read_json(&path)?;
    let flag = |key: &str| v.get(key).and_then(|x| x.as_bool()).unwrap_or(false);
    if flag("pooling_mode_mean_tokens") {
        Ok(Pooling::Mean)
    } else if flag("pooling_mode_cls_token") {
        Ok(Pooling::Cls)
    } else {
        Err(failed(format!(
            "local embedder: {} asks for a pooling other than mean or CLS, which is not supported",
            path.display()
        )))
    }
}

/// A pass's vectors, in its texts' order, and where its time went.
type PassResult = (Vec<Vec<f32>>, Profile);

impl Model {
    /// Token ids of each text, truncated to the model's length.
    fn tokenize(&self, texts: &[String]) -> Result<Vec<Vec<u32>>, EmbedError> {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let encodings = self
            .tokenizer
            .encode_batch(refs, true)
            .map_err(|e| failed(format!("local embedder: tokenisation failed: {e}")))?;
        Ok(encodings
            .into_iter()
            .map(|e| e.get_ids().to_vec())
            .collect())
    }

    fn embed(
        &self,
        texts: &[String],
        profile: Option<&mut Profiled>,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.pool.install(|| self.embed_in_pool(texts, profile))
    }

    fn embed_in_pool(
        &self,
        texts: &[String],
        profile: Option<&mut Profiled>,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let started = std::time::Instant::now();
        let ids = self.tokenize(texts)?;
        let tokenizing = started.elapsed().as_nanos() as u64;
        let total: usize = ids.iter().map(Vec::len).sum();
        self.tokens
            .fetch_add(total as u64, std::sync::atomic::Ordering::Relaxed);
        // Passes of texts of similar length, then the vectors back in the caller's order.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| ids[i].len());
        let mut passes: Vec<Vec<usize>> = Vec::new();
        let mut tokens = 0;
        for &i in &order {
            if passes.is_empty() || tokens + ids[i].len() > PASS_TOKENS {
                passes.push(Vec::new());
                tokens = 0;
            }
            passes.last_mut().expect("a pass").push(i);
            tokens += ids[i].len();
        }
        // One short pass (a question): its products are split between two cores.
        let split = passes.len() == 1 && total <= SPLIT_TOKENS && self.threads > 1 && self.split;
        let run = |pass: &Vec<usize>| -> Result<PassResult, EmbedError> {
            let seqs: Vec<&[u32]> = pass.iter().map(|&i| ids[i].as_slice()).collect();
            let mut p = Profile::default();
            let vectors = self
                .encoder
                .forward(&seqs, self.pooling, split, Some(&mut p))
                .map_err(|e| failed(format!("local embedder: {e}")))?;
            Ok((vectors, p))
        };
        let results: Vec<Result<PassResult, EmbedError>> = passes.par_iter().map(run).collect();
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        let mut steps = Profile::default();
        for (pass, result) in passes.iter().zip(results) {
            let (vectors, p) = result?;
            steps.add(&p);
            for (&i, mut v) in pass.iter().zip(vectors) {
                if v.len() != self.dimensions {
                    return Err(failed(format!(
                        "local embedder: model produced {} dimensions, config says {}",
                        v.len(),
                        self.dimensions
                    )));
                }
                normalize(&mut v);
                out[i] = v;
            }
        }
        if let Some(profile) = profile {
            profile.tokenizing += tokenizing;
            profile.encoder.add(&steps);
        }
        Ok(out)
    }
}

#[async_trait]
impl Embedder for LocalEmbedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn dimensions(&self) -> usize {
        self.dimensions
    }

    fn tokens(&self) -> u64 {
        self.model.tokens.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn kernel(&self) -> Option<&'static str> {
        Some(self.model.encoder.kernel().name())
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        // Straight onto the encoder's pool (one hand-over, not two); a panic in
        // inference becomes an error, and a caller that has gone is not served.
        let (reply, answer) = tokio::sync::oneshot::channel();
        let (model, texts) = (Arc::clone(&self.model), texts.to_vec());
        self.model.pool.spawn(move || {
            if reply.is_closed() {
                return;
            }
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                model.embed_in_pool(&texts, None)
            }));
            let _ = reply.send(result);
        });
        match answer.await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(failed("local embedder: inference panicked")),
            Err(_) => Err(failed(format!(
                "{}: the encoder's threads have stopped",
                self.id
            ))),
        }
    }
}
