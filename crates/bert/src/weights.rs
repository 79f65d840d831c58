//! Reading a BERT checkpoint: `config.json` and `model.safetensors` (F32, F16 or BF16
//! tensors, names with or without the `bert.` prefix, layer norms as `weight`/`bias` or
//! the older `gamma`/`beta`), packed for [`super::Encoder`].

use std::path::Path;

use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;

use super::{Encoder, Kernel, Layer, Linear};

/// The fields of a Hugging Face BERT `config.json` the encoder uses.
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f32,
    #[serde(default = "default_act")]
    pub hidden_act: String,
    #[serde(default)]
    pub position_embedding_type: Option<String>,
    #[serde(default)]
    pub pad_token_id: u32,
}

fn default_eps() -> f32 {
    1e-12
}

fn default_act() -> String {
    "gelu".to_string()
}

impl Config {
    /// Refuses what the encoder does not implement, with the reason.
    pub fn check(&self) -> Result<(), String> {
        if self.hidden_size == 0
            || self.num_attention_heads == 0
            || self.num_hidden_layers == 0
            || self.max_position_embeddings == 0
        {
            return Err("hidden_size, num_attention_heads, num_hidden_layers and \
                        max_position_embeddings must be positive"
                .into());
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if self.hidden_act != "gelu" {
            return Err(format!(
                "hidden_act {:?} is not supported (only \"gelu\")",
                self.hidden_act
            ));
        }
        if let Some(kind) = &self.position_embedding_type
            && kind != "absolute"
        {
            return Err(format!(
                "position_embedding_type {kind:?} is not supported (only \"absolute\")"
            ));
        }
        Ok(())
    }
}

struct Tensors<'a> {
    file: SafeTensors<'a>,
    prefix: &'static str,
    kernel: Kernel,
}

impl Tensors<'_> {
    /// The tensor `name` as f32 values with its shape.
    fn get(&self, name: &str) -> Result<(Vec<f32>, Vec<usize>), String> {
        let full = format!("{}{name}", self.prefix);
        let view = self
            .file
            .tensor(&full)
            .map_err(|_| format!("tensor {full} is missing"))?;
        let bytes = view.data();
        let values = match view.dtype() {
            Dtype::F32 => bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::F16 => bytes
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            Dtype::BF16 => bytes
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            other => return Err(format!("tensor {full} is {other:?}, not a float type")),
        };
        Ok((values, view.shape().to_vec()))
    }

    /// The tensor `name`, which must have `shape`.
    fn shaped(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, String> {
        let (values, got) = self.get(name)?;
        if got != shape {
            return Err(format!(
                "tensor {}{name} has shape {got:?}, the config needs {shape:?}",
                self.prefix
            ));
        }
        Ok(values)
    }

    /// A layer norm's scale and shift, under either naming.
    fn norm(&self, at: &str, width: usize) -> Result<(Vec<f32>, Vec<f32>), String> {
        match self.shaped(&format!("{at}.weight"), &[width]) {
            Ok(w) => Ok((w, self.shaped(&format!("{at}.bias"), &[width])?)),
            Err(_) => Ok((
                self.shaped(&format!("{at}.gamma"), &[width])?,
                self.shaped(&format!("{at}.beta"), &[width])?,
            )),
        }
    }

    fn linear(&self, at: &str, outputs: usize, inputs: usize) -> Result<Linear, String> {
        let w = self.shaped(&format!("{at}.weight"), &[outputs, inputs])?;
        let b = self.shaped(&format!("{at}.bias"), &[outputs])?;
        Ok(Linear::new(&w, &b, outputs, inputs, self.kernel))
    }
}

/// Loads the encoder of `config` from the safetensors file `weights`, its products at
/// `kernel` (refused if the CPU lacks it). Errors say what is wrong (no path: the
/// caller names the files).
pub fn load(config: Config, weights: &Path, kernel: Kernel) -> Result<Encoder, String> {
    config.check()?;
    kernel.check()?;
    let bytes = std::fs::read(weights).map_err(|e| format!("cannot read it: {e}"))?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| format!("not safetensors: {e}"))?;
    let prefix = if file
        .names()
        .iter()
        .any(|n| n.starts_with("bert.embeddings."))
    {
        "bert."
    } else {
        ""
    };
    let t = Tensors {
        file,
        prefix,
        kernel,
    };
    let (h, i) = (config.hidden_size, config.intermediate_size);
    let (word, shape) = t.get("embeddings.word_embeddings.weight")?;
    if shape.len() != 2 || shape[1] != h {
        return Err(format!(
            "word embeddings have shape {shape:?}, not [vocabulary, {h}]"
        ));
    }
    let position = t.shaped(
        "embeddings.position_embeddings.weight",
        &[config.max_position_embeddings, h],
    )?;
    let (token_type, shape) = t.get("embeddings.token_type_embeddings.weight")?;
    if shape.len() != 2 || shape[1] != h || shape[0] == 0 {
        return Err(format!(
            "token type embeddings have shape {shape:?}, not [types, {h}]"
        ));
    }
    let embedding_norm = t.norm("embeddings.LayerNorm", h)?;
    let mut layers = Vec::with_capacity(config.num_hidden_layers);
    for n in 0..config.num_hidden_layers {
        let at = format!("encoder.layer.{n}");
        let mut qkv_w = Vec::with_capacity(3 * h * h);
        let mut qkv_b = Vec::with_capacity(3 * h);
        for part in ["query", "key", "value"] {
            qkv_w.extend(t.shaped(&format!("{at}.attention.self.{part}.weight"), &[h, h])?);
            qkv_b.extend(t.shaped(&format!("{at}.attention.self.{part}.bias"), &[h])?);
        }
        layers.push(Layer {
            qkv: Linear::new(&qkv_w, &qkv_b, 3 * h, h, kernel),
            attention_out: t.linear(&format!("{at}.attention.output.dense"), h, h)?,
            attention_norm: t.norm(&format!("{at}.attention.output.LayerNorm"), h)?,
            intermediate: t.linear(&format!("{at}.intermediate.dense"), i, h)?,
            output: t.linear(&format!("{at}.output.dense"), h, i)?,
            output_norm: t.norm(&format!("{at}.output.LayerNorm"), h)?,
        });
    }
    Ok(Encoder {
        config,
        vocabulary: word.len() / h,
        word,
        position,
        token_type: token_type[..h].to_vec(),
        embedding_norm,
        layers,
    })
}
