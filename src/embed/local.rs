//! A Hugging Face BERT-family sentence-embedding model (e.g. all-MiniLM-L6-v2, BGE,
//! E5) run in-process on the CPU with candle: tokenise, run the encoder, pool the last
//! hidden states over the attention mask (mean pooling, or the `[CLS]` token when the
//! model's `1_Pooling/config.json` asks for it), then L2-normalise.
//!
//! The model directory is laid out as on the Hub: `config.json`, `tokenizer.json` and
//! `model.safetensors`, optionally `sentence_bert_config.json` (its `max_seq_length`
//! caps the input length as sentence-transformers does) and `1_Pooling/config.json`.
//!
//! Inference is CPU-bound: [`LocalEmbedder::embed`] hands the work to a dedicated worker
//! thread, so it never runs on the async executor; the worker runs one request at a
//! time and each forward pass uses every core (candle's matrix products are parallel).
//! [`LocalEmbedder::embed_blocking`] runs on the calling thread.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use candle_core::{DType, Device, Tensor};
use candle_transformers::models::bert::{BertModel, Config, DTYPE};
use tokenizers::Tokenizer;

use super::{EmbedError, Embedder, normalize};
use crate::inference::{self, Worker, WorkerError};

/// Texts per forward pass. Texts are sorted by length first, so a batch pads little.
pub const BATCH_SIZE: usize = 32;

/// How the token vectors become one sentence vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// Mean of the token vectors under the attention mask (sentence-transformers' default).
    Mean,
    /// The first (`[CLS]`) token's vector.
    Cls,
}

/// The loaded model and tokenizer, shared by the worker thread and blocking callers.
struct Model {
    bert: BertModel,
    tokenizer: Tokenizer,
    pooling: Pooling,
    dimensions: usize,
    device: Device,
    /// Tokens embedded so far (padding excluded).
    tokens: std::sync::atomic::AtomicU64,
}

pub struct LocalEmbedder {
    id: String,
    dimensions: usize,
    max_tokens: usize,
    pooling: Pooling,
    model: Arc<Model>,
    /// The thread that serves [`Embedder::embed`]; dropping the embedder ends it.
    jobs: Worker<Vec<String>, Result<Vec<Vec<f32>>, EmbedError>>,
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
        if config.hidden_size == 0 || config.max_position_embeddings == 0 {
            return Err(failed(format!(
                "local embedder: {} has hidden_size or max_position_embeddings 0",
                config_path.display()
            )));
        }

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

        let tokenizer =
            inference::load_tokenizer(WHO, &tokenizer_path, config.pad_token_id as u32, max_tokens)
                .map_err(failed)?;

        let device = Device::Cpu;
        let vb = inference::load_weights(WHO, &weights_path, DTYPE, &device).map_err(failed)?;
        let bert = BertModel::load(vb, &config).map_err(|e| {
            failed(format!(
                "local embedder: {} does not hold the BERT weights {} describes: {e}",
                weights_path.display(),
                config_path.display()
            ))
        })?;

        let name = inference::model_name(model_dir);
        let id = format!("local:{name}");
        let dimensions = config.hidden_size;
        let model = Arc::new(Model {
            bert,
            tokenizer,
            pooling,
            dimensions,
            device,
            tokens: Default::default(),
        });
        let worker = Arc::clone(&model);
        let jobs = Worker::spawn("embed-local", move |texts: Vec<String>| {
            worker.embed(&texts)
        })
        .map_err(|e| failed(format!("{id}: cannot start the worker thread: {e}")))?;
        tracing::info!(
            embedder = %id,
            dir = %model_dir.display(),
            dimensions,
            max_tokens,
            ?pooling,
            layers = config.num_hidden_layers,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "local embedder loaded"
        );
        Ok(LocalEmbedder {
            id,
            dimensions,
            max_tokens,
            pooling,
            model,
            jobs,
        })
    }

    /// The longest input in tokens (special tokens included); longer texts are truncated.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// Embeds on the calling thread (CPU-bound: never call it on an async executor
    /// thread; [`Embedder::embed`] runs it on the embedder's worker thread).
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.model.embed(texts)
    }
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

impl Model {
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        // Sort by length so each batch holds texts of similar length (little padding),
        // then put the vectors back in the caller's order.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        for chunk in order.chunks(BATCH_SIZE) {
            let batch: Vec<&str> = chunk.iter().map(|&i| texts[i].as_str()).collect();
            let vectors = self.embed_batch(batch)?;
            for (&i, v) in chunk.iter().zip(vectors) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    fn embed_batch(&self, batch: Vec<&str>) -> Result<Vec<Vec<f32>>, EmbedError> {
        let n = batch.len();
        let encodings = self
            .tokenizer
            .encode_batch(batch, true)
            .map_err(|e| failed(format!("local embedder: tokenisation failed: {e}")))?;
        let len = encodings.first().map_or(0, |e| e.len());
        let mut ids = Vec::with_capacity(n * len);
        let mut mask = Vec::with_capacity(n * len);
        for e in &encodings {
            if e.len() != len {
                return Err(failed("local embedder: tokenizer did not pad the batch"));
            }
            ids.extend_from_slice(e.get_ids());
            mask.extend_from_slice(e.get_attention_mask());
        }
        let real: u64 = mask.iter().map(|&m| u64::from(m)).sum();
        self.tokens
            .fetch_add(real, std::sync::atomic::Ordering::Relaxed);
        let mut vectors = self
            .forward(ids, mask, (n, len))
            .map_err(|e| failed(format!("local embedder: inference failed: {e}")))?;
        for v in &mut vectors {
            if v.len() != self.dimensions {
                return Err(failed(format!(
                    "local embedder: model produced {} dimensions, config says {}",
                    v.len(),
                    self.dimensions
                )));
            }
            normalize(v);
        }
        Ok(vectors)
    }

    /// The encoder and pooling for one padded batch of `shape` = (texts, tokens).
    fn forward(
        &self,
        ids: Vec<u32>,
        mask: Vec<u32>,
        shape: (usize, usize),
    ) -> candle_core::Result<Vec<Vec<f32>>> {
        let ids = Tensor::from_vec(ids, shape, &self.device)?;
        let mask = Tensor::from_vec(mask, shape, &self.device)?;
        let type_ids = ids.zeros_like()?;
        let hidden = self.bert.forward(&ids, &type_ids, Some(&mask))?; // (n, len, dims)
        let pooled = match self.pooling {
            Pooling::Mean => {
                let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?; // (n, len, 1)
                let sum = hidden.broadcast_mul(&mask)?.sum(1)?; // (n, dims)
                let count = mask.sum(1)?.clamp(1e-9f32, f32::MAX)?; // (n, 1)
                sum.broadcast_div(&count)?
            }
            Pooling::Cls => hidden.narrow(1, 0, 1)?.squeeze(1)?,
        };
        pooled.to_vec2()
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

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        match self.jobs.run(texts.to_vec()).await {
            Ok(result) => result,
            Err(WorkerError::Panicked) => Err(failed("local embedder: inference panicked")),
            Err(WorkerError::Stopped) => Err(failed(format!(
                "{}: the worker thread has stopped",
                self.id
            ))),
        }
    }
}
