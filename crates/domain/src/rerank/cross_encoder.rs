//! A cross-encoder run in-process on the CPU with candle: a Hugging Face
//! sequence-classification model that reads the query and a document together
//! (`[CLS] query [SEP] document [SEP]`) and gives one relevance logit. BERT-architecture
//! models (`BertForSequenceClassification`: cross-encoder/ms-marco-MiniLM-L-6-v2,
//! -L-12-v2, ms-marco-TinyBERT-L-2-v2) and RoBERTa / XLM-RoBERTa ones
//! (`XLMRobertaForSequenceClassification`: BAAI/bge-reranker-base, -large) load.
//!
//! The directory is laid out as on the Hub: `config.json`, `tokenizer.json`,
//! `model.safetensors`. BERT weights are read with or without their `bert.` prefix; the
//! head is `bert.pooler.dense` (tanh over the `[CLS]` vector) and `classifier`.
//!
//! The score of a document is the logit of the model's single label, or for a model of
//! two labels the log-odds of label 1 (`logit₁ − logit₀`), which orders documents as the
//! softmax probability of label 1 does (`logit₁` alone does not). Pairs are truncated to
//! the model's length (the document first), sorted by length and scored
//! [`BATCH_SIZE`] at a time, with attention mask and token type ids, on a worker thread
//! of the model's own (see [`crate::inference`]).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Linear, VarBuilder};
use candle_transformers::models::bert::{self, BertModel};
use candle_transformers::models::xlm_roberta::{self, XLMRobertaForSequenceClassification};
use tokenizers::Tokenizer;

use super::{RerankError, Reranker};
use crate::inference::{self, Worker, WorkerError};

/// Query–document pairs per forward pass.
pub const BATCH_SIZE: usize = 16;

/// The longest input of a BERT-family model.
const MAX_TOKENS: usize = 512;

const WHO: &str = "cross-encoder";
const MODEL: &str = "a BERT-family sequence-classification (cross-encoder) model";

fn failed(msg: impl Into<String>) -> RerankError {
    RerankError::Failed(msg.into())
}

/// The network, by architecture.
enum Network {
    Bert {
        bert: BertModel,
        pooler: Linear,
        classifier: Linear,
    },
    Roberta(XLMRobertaForSequenceClassification),
}

struct Model {
    network: Network,
    tokenizer: Tokenizer,
    /// 1 or 2 (see the module docs).
    labels: usize,
    /// The model has a single token type: every type id is 0.
    single_type: bool,
    device: Device,
}

type Job = (String, Vec<String>);

pub struct CrossEncoder {
    id: String,
    max_tokens: usize,
    model: Arc<Model>,
    /// The thread that serves [`Reranker::score`]; dropping the reranker ends it.
    worker: Worker<Job, Result<Vec<f32>, RerankError>>,
}

impl std::fmt::Debug for CrossEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrossEncoder")
            .field("id", &self.id)
            .field("max_tokens", &self.max_tokens)
            .field("labels", &self.model.labels)
            .finish()
    }
}

/// The number of labels a config.json gives (`id2label`, else `num_labels`; Hugging
/// Face's default is 2).
fn labels_of(config: &serde_json::Value) -> usize {
    config
        .get("id2label")
        .and_then(|m| m.as_object())
        .map(|m| m.len())
        .or_else(|| config.get("num_labels")?.as_u64().map(|n| n as usize))
        .unwrap_or(2)
}

impl CrossEncoder {
    /// Loads the model in `model_dir` (see the module docs). Errors name the file that
    /// is missing or invalid.
    pub fn load(model_dir: &Path) -> Result<CrossEncoder, RerankError> {
        let started = Instant::now();
        let files = inference::ModelFiles::in_dir(WHO, MODEL, model_dir).map_err(failed)?;
        let (config_path, tokenizer_path, weights_path) =
            (files.config, files.tokenizer, files.weights);
        let config = inference::read_json(WHO, &config_path).map_err(failed)?;
        let shown = config_path.display();

        if let Some(architectures) = config.get("architectures").and_then(|a| a.as_array()) {
            let classifies = architectures.iter().any(|a| {
                a.as_str()
                    .is_some_and(|a| a.ends_with("ForSequenceClassification"))
            });
            if !classifies {
                return Err(failed(format!(
                    "{WHO}: {shown} is not a sequence-classification model (architectures \
                     {architectures:?}); a sentence-embedding model cannot rerank"
                )));
            }
        }
        let labels = labels_of(&config);
        if !(1..=2).contains(&labels) {
            return Err(failed(format!(
                "{WHO}: {shown} has {labels} labels; a relevance model has 1 (a score) or 2 \
                 (not relevant, relevant)"
            )));
        }
        let model_type = config
            .get("model_type")
            .and_then(|t| t.as_str())
            .unwrap_or("bert")
            .to_string();
        let not_a = |kind: &str, e: serde_json::Error| {
            failed(format!("{WHO}: {shown} is not a {kind} config: {e}"))
        };
        let device = Device::Cpu;
        let vb =
            inference::load_weights(WHO, &weights_path, DType::F32, &device).map_err(failed)?;
        let wrong_weights = |e: candle_core::Error| {
            failed(format!(
                "{WHO}: {} does not hold the {model_type} sequence-classification weights \
                 {shown} describes: {e}",
                weights_path.display()
            ))
        };
        let (network, pad_id, max_positions, type_vocab_size) = match model_type.as_str() {
            "bert" => {
                let c: bert::Config =
                    serde_json::from_value(config.clone()).map_err(|e| not_a("BERT", e))?;
                let network = load_bert(vb, &c, labels).map_err(wrong_weights)?;
                (
                    network,
                    c.pad_token_id,
                    c.max_position_embeddings,
                    c.type_vocab_size,
                )
            }
            "xlm-roberta" | "roberta" => {
                let c: xlm_roberta::Config =
                    serde_json::from_value(config.clone()).map_err(|e| not_a("RoBERTa", e))?;
                let network = XLMRobertaForSequenceClassification::new(labels, &c, vb)
                    .map_err(wrong_weights)?;
                // RoBERTa's positions start after the padding id.
                let offset = c.pad_token_id as usize + 1;
                (
                    Network::Roberta(network),
                    c.pad_token_id as usize,
                    c.max_position_embeddings.saturating_sub(offset),
                    c.type_vocab_size,
                )
            }
            other => {
                return Err(failed(format!(
                    "{WHO}: {shown} has model_type {other:?}; supported: bert, roberta, \
                     xlm-roberta"
                )));
            }
        };
        if max_positions < 2 {
            return Err(failed(format!(
                "{WHO}: {shown} has max_position_embeddings {max_positions}"
            )));
        }
        let max_tokens = max_positions.min(MAX_TOKENS);
        let tokenizer = inference::load_tokenizer(WHO, &tokenizer_path, pad_id as u32, max_tokens)
            .map_err(failed)?;

        let id = format!("{WHO}:{}", inference::model_name(model_dir));
        let model = Arc::new(Model {
            network,
            tokenizer,
            labels,
            single_type: type_vocab_size < 2,
            device,
        });
        let shared = Arc::clone(&model);
        let worker = Worker::spawn("rerank-local", move |(query, documents): Job| {
            shared.score(&query, &documents)
        })
        .map_err(|e| failed(format!("{id}: cannot start the worker thread: {e}")))?;
        tracing::info!(
            reranker = %id,
            dir = %model_dir.display(),
            model_type,
            labels,
            max_tokens,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "cross-encoder loaded"
        );
        Ok(CrossEncoder {
            id,
            max_tokens,
            model,
            worker,
        })
    }

    /// The longest query–document pair in tokens (special tokens included); longer
    /// pairs lose the end of the document.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// Scores on the calling thread (CPU-bound: never call it on an async executor
    /// thread; [`Reranker::score`] runs it on the reranker's worker thread).
    pub fn score_blocking(
        &self,
        query: &str,
        documents: &[String],
    ) -> Result<Vec<f32>, RerankError> {
        self.model.score(query, documents)
    }
}

/// `BertForSequenceClassification`: the encoder (its weights under `bert.` or at the
/// top), the pooler and the classifier.
fn load_bert(vb: VarBuilder, config: &bert::Config, labels: usize) -> candle_core::Result<Network> {
    let encoder = if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
        vb.pp("bert")
    } else {
        vb.clone()
    };
    let h = config.hidden_size;
    Ok(Network::Bert {
        bert: BertModel::load(encoder.clone(), config)?,
        pooler: candle_nn::linear(h, h, encoder.pp("pooler").pp("dense"))?,
        classifier: candle_nn::linear(h, labels, vb.pp("classifier"))?,
    })
}

impl Model {
    fn score(&self, query: &str, documents: &[String]) -> Result<Vec<f32>, RerankError> {
        // Sort by length so each batch holds pairs of similar length (little padding),
        // then put the scores back in the caller's order.
        let mut order: Vec<usize> = (0..documents.len()).collect();
        order.sort_by_key(|&i| documents[i].len());
        let mut scores = vec![0.0; documents.len()];
        for chunk in order.chunks(BATCH_SIZE) {
            let pairs: Vec<(&str, &str)> = chunk
                .iter()
                .map(|&i| (query, documents[i].as_str()))
                .collect();
            let batch = self.score_batch(pairs)?;
            for (&i, score) in chunk.iter().zip(batch) {
                scores[i] = score;
            }
        }
        Ok(scores)
    }

    fn score_batch(&self, pairs: Vec<(&str, &str)>) -> Result<Vec<f32>, RerankError> {
        let n = pairs.len();
        let encodings = self
            .tokenizer
            .encode_batch(pairs, true)
            .map_err(|e| failed(format!("{WHO}: tokenisation failed: {e}")))?;
        let len = encodings.first().map_or(0, |e| e.len());
        let (mut ids, mut mask, mut types) = (
            Vec::with_capacity(n * len),
            Vec::with_capacity(n * len),
            Vec::with_capacity(n * len),
        );
        for e in &encodings {
            if e.len() != len {
                return Err(failed(format!("{WHO}: tokenizer did not pad the batch")));
            }
            ids.extend_from_slice(e.get_ids());
            mask.extend_from_slice(e.get_attention_mask());
            if self.single_type {
                types.extend(std::iter::repeat_n(0, len));
            } else {
                types.extend_from_slice(e.get_type_ids());
            }
        }
        let logits = self
            .forward(ids, mask, types, (n, len))
            .map_err(|e| failed(format!("{WHO}: inference failed: {e}")))?;
        logits
            .into_iter()
            .map(|row| match (self.labels, row.as_slice()) {
                (1, [score]) => Ok(*score),
                (2, [not_relevant, relevant]) => Ok(relevant - not_relevant),
                _ => Err(failed(format!(
                    "{WHO}: the model gave {} logits, config says {} labels",
                    row.len(),
                    self.labels
                ))),
            })
            .collect()
    }

    /// The logits of one padded batch of `shape` = (pairs, tokens).
    fn forward(
        &self,
        ids: Vec<u32>,
        mask: Vec<u32>,
        types: Vec<u32>,
        shape: (usize, usize),
    ) -> candle_core::Result<Vec<Vec<f32>>> {
        let ids = Tensor::from_vec(ids, shape, &self.device)?;
        let mask = Tensor::from_vec(mask, shape, &self.device)?;
        let types = Tensor::from_vec(types, shape, &self.device)?;
        let logits = match &self.network {
            Network::Bert {
                bert,
                pooler,
                classifier,
            } => {
                let hidden = bert.forward(&ids, &types, Some(&mask))?; // (n, len, h)
                let cls = hidden.narrow(1, 0, 1)?.squeeze(1)?; // (n, h)
                let pooled = pooler.forward(&cls)?.tanh()?;
                classifier.forward(&pooled)? // (n, labels)
            }
            Network::Roberta(model) => model.forward(&ids, &mask, &types)?,
        };
        logits.to_vec2()
    }
}

#[async_trait]
impl Reranker for CrossEncoder {
    fn id(&self) -> &str {
        &self.id
    }

    async fn score(&self, query: &str, documents: &[String]) -> Result<Vec<f32>, RerankError> {
        if documents.is_empty() {
            return Ok(Vec::new());
        }
        match self
            .worker
            .run((query.to_string(), documents.to_vec()))
            .await
        {
            Ok(result) => result,
            Err(WorkerError::Panicked) => Err(failed(format!("{}: inference panicked", self.id))),
            Err(WorkerError::Stopped) => Err(failed(format!(
                "{}: the worker thread has stopped",
                self.id
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rerank::random_model::{self, Shape};

    fn model(seed: u64) -> (tempfile::TempDir, CrossEncoder) {
        let dir = tempfile::tempdir().unwrap();
        random_model::write(dir.path(), Shape::tiny(), seed).unwrap();
        let model = CrossEncoder::load(dir.path()).unwrap();
        (dir, model)
    }

    fn documents() -> Vec<String> {
        let mut docs: Vec<String> = (0..37)
            .map(|i| {
                format!(
                    "Caroline {i}: {}",
                    "we walked the golden retriever on the beach and ".repeat(i % 9)
                )
            })
            .collect();
        docs.push(String::new());
        docs.push("dog".into());
        docs.push("the kids went hiking ".repeat(60)); // past the 128 positions: truncated
        docs
    }

    /// The scores of `docs` scored together, checked against each scored alone (the
    /// padding of a batch must change nothing).
    fn batched_as_alone(model: &CrossEncoder, query: &str, docs: &[String]) -> Vec<f32> {
        let batched = model.score_blocking(query, docs).unwrap();
        assert_eq!(batched.len(), docs.len());
        for (doc, score) in docs.iter().zip(&batched) {
            let alone = model
                .score_blocking(query, std::slice::from_ref(doc))
                .unwrap()[0];
            assert!(
                (alone - score).abs() < 1e-4,
                "batched {score} vs alone {alone} for {doc:?}"
            );
        }
        batched
    }

    #[test]
    fn batched_scores_equal_scores_alone_and_repeat() {
        let (_dir, model) = model(7);
        assert_eq!(model.max_tokens(), 128);
        let query = "Where did Caroline walk her dog?";
        let docs = documents();
        let batched = batched_as_alone(&model, query, &docs);
        assert_eq!(batched, model.score_blocking(query, &docs).unwrap());
        // The scores tell documents apart (random weights, but not constant ones).
        let (min, max) = batched
            .iter()
            .fold((f32::MAX, f32::MIN), |(lo, hi), s| (lo.min(*s), hi.max(*s)));
        assert!(max - min > 0.1, "scores from {min} to {max}");
        // The query is read too.
        let other = model.score_blocking("revenue grew", &docs).unwrap();
        assert_ne!(batched, other);
    }

    #[tokio::test]
    async fn scores_off_the_executor_in_input_order() {
        let (_dir, model) = model(7);
        let docs = documents();
        let blocking = model.score_blocking("dog", &docs).unwrap();
        assert_eq!(
            Reranker::score(&model, "dog", &docs).await.unwrap(),
            blocking
        );
        assert!(
            Reranker::score(&model, "dog", &[])
                .await
                .unwrap()
                .is_empty()
        );
        assert!(model.id().starts_with("cross-encoder:"), "{}", model.id());
    }

    #[test]
    fn weights_without_the_bert_prefix_and_two_labels_load() {
        let dir = tempfile::tempdir().unwrap();
        random_model::write(dir.path(), Shape::tiny(), 3).unwrap();
        let (_, prefixed) = model(3);
        let query = "golden retriever";
        let docs = documents();
        let expected = prefixed.score_blocking(query, &docs).unwrap();
        // The same encoder saved without "bert.", with a two-label head whose label 0
        // logit is 0: the log-odds are the one-label logit.
        let path = dir.path().join("model.safetensors");
        let tensors = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
        let mut renamed = std::collections::HashMap::new();
        for (name, tensor) in tensors {
            let name = name
                .strip_prefix("bert.")
                .map(str::to_string)
                .unwrap_or(name);
            let tensor = match name.as_str() {
                "classifier.weight" => {
                    Tensor::cat(&[&tensor.zeros_like().unwrap(), &tensor], 0).unwrap()
                }
                "classifier.bias" => {
                    Tensor::cat(&[&tensor.zeros_like().unwrap(), &tensor], 0).unwrap()
                }
                _ => tensor,
            };
            renamed.insert(name, tensor);
        }
        candle_core::safetensors::save(&renamed, &path).unwrap();
        let config_path = dir.path().join("config.json");
        let mut config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
        config["id2label"] = serde_json::json!({"0": "not relevant", "1": "relevant"});
        std::fs::write(&config_path, config.to_string()).unwrap();
        let two = CrossEncoder::load(dir.path()).unwrap();
        let scores = two.score_blocking(query, &docs).unwrap();
        for (a, b) in scores.iter().zip(&expected) {
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
    }

    /// The random BERT model saved as `XLMRobertaForSequenceClassification` (the same
    /// layers under `roberta.`, the pooler and classifier as its head), as
    /// bge-reranker-base is laid out.
    #[test]
    fn xlm_roberta_models_load_and_batch() {
        let dir = tempfile::tempdir().unwrap();
        random_model::write(dir.path(), Shape::tiny(), 5).unwrap();
        let path = dir.path().join("model.safetensors");
        let tensors = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
        let renamed: std::collections::HashMap<String, Tensor> = tensors
            .into_iter()
            .map(|(name, tensor)| {
                let name = if let Some(rest) = name.strip_prefix("bert.pooler.dense") {
                    format!("classifier.dense{rest}")
                } else if let Some(rest) = name.strip_prefix("classifier") {
                    format!("classifier.out_proj{rest}")
                } else {
                    name.replacen("bert.", "roberta.", 1)
                };
                (name, tensor)
            })
            .collect();
        candle_core::safetensors::save(&renamed, &path).unwrap();
        let config_path = dir.path().join("config.json");
        let mut config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
        config["model_type"] = serde_json::json!("xlm-roberta");
        config["architectures"] = serde_json::json!(["XLMRobertaForSequenceClassification"]);
        config["position_embedding_type"] = serde_json::json!("absolute");
        std::fs::write(&config_path, config.to_string()).unwrap();
        let model = CrossEncoder::load(dir.path()).unwrap();
        assert_eq!(
            model.max_tokens(),
            127,
            "positions start after the padding id"
        );
        let query = "golden retriever";
        let docs = documents();
        batched_as_alone(&model, query, &docs);
    }

    #[test]
    fn refuses_what_is_not_a_cross_encoder() {
        let dir = tempfile::tempdir().unwrap();
        let err = CrossEncoder::load(&dir.path().join("nope"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not exist"), "{err}");
        let err = CrossEncoder::load(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("config.json") && err.contains("is missing"),
            "{err}"
        );
        random_model::write(dir.path(), Shape::tiny(), 1).unwrap();
        let config_path = dir.path().join("config.json");
        let config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
        let mut embedder = config.clone();
        embedder["architectures"] = serde_json::json!(["BertModel"]);
        std::fs::write(&config_path, embedder.to_string()).unwrap();
        let err = CrossEncoder::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("not a sequence-classification model"), "{err}");
        let mut many = config.clone();
        many["id2label"] = serde_json::json!({"0": "a", "1": "b", "2": "c"});
        std::fs::write(&config_path, many.to_string()).unwrap();
        let err = CrossEncoder::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("3 labels"), "{err}");
        let mut electra = config;
        electra["model_type"] = serde_json::json!("electra");
        std::fs::write(&config_path, electra.to_string()).unwrap();
        let err = CrossEncoder::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("\"electra\""), "{err}");
    }
}
