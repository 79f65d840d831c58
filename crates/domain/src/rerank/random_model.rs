//! A BERT cross-encoder (`BertForSequenceClassification`, one label) with random
//! weights, written in the Hugging Face layout (`config.json`, `tokenizer.json`,
//! `vocab.txt`, `model.safetensors`): what tests and benchmarks load where no real model
//! can be downloaded. Its scores mean nothing, but they are a deterministic function of
//! the seed, the query and the document, which is all that loading, batching and
//! ordering by score need.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};
use tokenizers::Tokenizer;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::bert::BertProcessing;

/// The size of the model.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub intermediate: usize,
    pub max_positions: usize,
}

impl Shape {
    /// Two layers of 32: loads and runs in milliseconds.
    pub fn tiny() -> Shape {
        Shape {
            layers: 2,
            hidden: 32,
            heads: 4,
            intermediate: 64,
            max_positions: 128,
        }
    }

    /// The size of cross-encoder/ms-marco-MiniLM-L-6-v2 (6 layers of 384, 12 heads):
    /// for latency figures.
    pub fn minilm_l6() -> Shape {
        Shape {
            layers: 6,
            hidden: 384,
            heads: 12,
            intermediate: 1536,
            max_positions: 512,
        }
    }
}

/// Words of the vocabulary besides single letters (a word not in it is spelt out in
/// letters, `##`-continued, as WordPiece does).
const WORDS: &str = "the a an and or of to in on at for with by from is was are were be \
    been it this that i you he she we they my your his her our their me him us them what \
    who where when why how which do did does have has had not no yes can will would should \
    about after before again all also am any because but each few more most other some such \
    than then there these those too very just now dog dogs cat cats retriever golden puppy \
    beach park walk walked hiking lake mountain trip kids children family friend friends \
    adopted named name max caroline melanie support group job work office meeting project \
    revenue quarter grew strongly market stock fell sharply book read reading music song \
    painting paint art class school college research study pottery camping tent fire \
    dinner lunch breakfast food pizza pasta sushi coffee tea morning evening night week \
    weekend month year today yesterday tomorrow last next first new old big small good \
    great happy sad love loves like likes went go going come came see saw talk talked \
    said say tell told think thought know knew want wanted make made take took get got";

const SPECIAL: [&str; 5] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];

/// Every token of the vocabulary, in id order.
fn vocabulary() -> Vec<String> {
    let mut vocab: Vec<String> = SPECIAL.iter().map(|s| s.to_string()).collect();
    for c in 'a'..='z' {
        vocab.push(c.to_string());
    }
    for c in 'a'..='z' {
        vocab.push(format!("##{c}"));
    }
    for c in '0'..='9' {
        vocab.push(c.to_string());
        vocab.push(format!("##{c}"));
    }
    for p in ['.', ',', '?', '!', '\'', ':', '-'] {
        vocab.push(p.to_string());
    }
    for word in WORDS.split_whitespace() {
        if !vocab.iter().any(|v| v == word) {
            vocab.push(word.to_string());
        }
    }
    vocab
}

/// Normal numbers from a seed (SplitMix64 and Box–Muller): the same seed gives the same
/// model on every machine.
struct Normal(u64);

impl Normal {
    fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    fn sample(&mut self, std: f32) -> f32 {
        let (u, v) = (self.unit(), self.unit());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32 * std
    }

    fn tensor(&mut self, shape: &[usize], std: f32) -> candle_core::Result<Tensor> {
        let n = shape.iter().product();
        let values: Vec<f32> = (0..n).map(|_| self.sample(std)).collect();
        Tensor::from_vec(values, shape, &Device::Cpu)
    }
}

/// Writes the model into `dir` (which must exist).
pub fn write(dir: &Path, shape: Shape, seed: u64) -> Result<(), String> {
    let vocab = vocabulary();
    write_tokenizer(dir, &vocab)?;
    let config = serde_json::json!({
        "architectures": ["BertForSequenceClassification"],
        "model_type": "bert",
        "vocab_size": vocab.len(),
        "hidden_size": shape.hidden,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "intermediate_size": shape.intermediate,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": shape.max_positions,
        "type_vocab_size": 2,
        "initializer_range": 0.02,
        "layer_norm_eps": 1e-12,
        "pad_token_id": 0,
        "id2label": {"0": "LABEL_0"},
        "label2id": {"LABEL_0": 0},
    });
    std::fs::write(dir.join("config.json"), config.to_string())
        .map_err(|e| format!("writing config.json: {e}"))?;
    let tensors = weights(vocab.len(), shape, seed).map_err(|e| e.to_string())?;
    candle_core::safetensors::save(&tensors, dir.join("model.safetensors"))
        .map_err(|e| format!("writing model.safetensors: {e}"))
}

fn write_tokenizer(dir: &Path, vocab: &[String]) -> Result<(), String> {
    let vocab_path = dir.join("vocab.txt");
    std::fs::write(&vocab_path, vocab.join("\n") + "\n")
        .map_err(|e| format!("writing vocab.txt: {e}"))?;
    let wordpiece = WordPiece::from_file(&vocab_path.to_string_lossy())
        .unk_token("[UNK]".into())
        .build()
        .map_err(|e| format!("building the tokenizer: {e}"))?;
    let id = |token: &str| vocab.iter().position(|v| v == token).unwrap_or(0) as u32;
    let mut tokenizer = Tokenizer::new(wordpiece);
    tokenizer.with_normalizer(Some(BertNormalizer::default()));
    tokenizer.with_pre_tokenizer(Some(BertPreTokenizer));
    tokenizer.with_post_processor(Some(BertProcessing::new(
        ("[SEP]".into(), id("[SEP]")),
        ("[CLS]".into(), id("[CLS]")),
    )));
    tokenizer
        .save(dir.join("tokenizer.json"), false)
        .map_err(|e| format!("writing tokenizer.json: {e}"))
}

/// Every tensor of `BertForSequenceClassification`, named as Hugging Face saves them.
fn weights(vocab: usize, shape: Shape, seed: u64) -> candle_core::Result<HashMap<String, Tensor>> {
    let (h, i) = (shape.hidden, shape.intermediate);
    let mut normal = Normal(seed);
    let mut tensors = HashMap::new();
    // Wider than BERT's 0.02 initialisation, so that scores spread out.
    let std = 0.1;
    let mut add = |name: String, dims: &[usize], std: f32| -> candle_core::Result<()> {
        tensors.insert(name, normal.tensor(dims, std)?);
        Ok(())
    };
    let ones = |n: usize| Tensor::ones(n, candle_core::DType::F32, &Device::Cpu);
    let mut norms = Vec::new();
    add(
        "bert.embeddings.word_embeddings.weight".into(),
        &[vocab, h],
        1.0,
    )?;
    add(
        "bert.embeddings.position_embeddings.weight".into(),
        &[shape.max_positions, h],
        0.5,
    )?;
    add(
        "bert.embeddings.token_type_embeddings.weight".into(),
        &[2, h],
        0.5,
    )?;
    norms.push("bert.embeddings.LayerNorm".to_string());
    for layer in 0..shape.layers {
        let p = format!("bert.encoder.layer.{layer}");
        for part in ["query", "key", "value"] {
            add(format!("{p}.attention.self.{part}.weight"), &[h, h], std)?;
            add(format!("{p}.attention.self.{part}.bias"), &[h], std)?;
        }
        add(format!("{p}.attention.output.dense.weight"), &[h, h], std)?;
        add(format!("{p}.attention.output.dense.bias"), &[h], std)?;
        norms.push(format!("{p}.attention.output.LayerNorm"));
        add(format!("{p}.intermediate.dense.weight"), &[i, h], std)?;
        add(format!("{p}.intermediate.dense.bias"), &[i], std)?;
        add(format!("{p}.output.dense.weight"), &[h, i], std)?;
        add(format!("{p}.output.dense.bias"), &[h], std)?;
        norms.push(format!("{p}.output.LayerNorm"));
    }
    add("bert.pooler.dense.weight".into(), &[h, h], std)?;
    add("bert.pooler.dense.bias".into(), &[h], std)?;
    add("classifier.weight".into(), &[1, h], 1.0)?;
    add("classifier.bias".into(), &[1], 0.1)?;
    for norm in norms {
        tensors.insert(format!("{norm}.weight"), ones(h)?);
        tensors.insert(
            format!("{norm}.bias"),
            Tensor::zeros(h, candle_core::DType::F32, &Device::Cpu)?,
        );
    }
    Ok(tensors)
}
