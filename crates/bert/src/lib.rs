//! A BERT encoder for CPU inference, written for sentence embedding (`memmachine`'s
//! local embedder): the texts of a batch are packed end to end without padding (each
//! token attends only within its own text), the dense layers use weights packed once
//! at load time in the format of the kernel chosen for the CPU (`kernel.rs`, `matmul/`;
//! AMX bf16 tiles where the CPU has them, `amx.rs`), and the
//! element-wise steps are vectorised for the CPU found at run time (`ops.rs`). One pass
//! runs on one thread; callers spread passes over the cores.
//! `Profile` records where a forward pass spends its time.

#[cfg(target_arch = "x86_64")]
mod amx;
mod kernel;
mod matmul;
mod ops;
mod weights;

use std::time::Instant;

pub use kernel::Kernel;
pub use matmul::Linear;
pub use weights::{Config, load};

/// One encoder layer.
#[derive(Debug)]
struct Layer {
    /// Queries, keys and values in one product.
    qkv: Linear,
    attention_out: Linear,
    attention_norm: (Vec<f32>, Vec<f32>),
    intermediate: Linear,
    output: Linear,
    output_norm: (Vec<f32>, Vec<f32>),
}

#[derive(Debug)]
pub struct Encoder {
    config: Config,
    /// Rows of the word-embedding table: token ids at or past it are refused.
    vocabulary: usize,
    word: Vec<f32>,
    position: Vec<f32>,
    token_type: Vec<f32>,
    embedding_norm: (Vec<f32>, Vec<f32>),
    layers: Vec<Layer>,
}

/// Time spent per step of the forward pass, in nanoseconds, summed over calls.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    pub embedding: u64,
    pub qkv: u64,
    pub attention: u64,
    pub attention_out: u64,
    /// The intermediate product (when a pass is split between threads: the whole
    /// feed-forward block, GELU and output product included).
    pub intermediate: u64,
    pub gelu: u64,
    pub output: u64,
    pub layer_norm: u64,
    pub pooling: u64,
}

impl Profile {
    pub fn add(&mut self, other: &Profile) {
        self.embedding += other.embedding;
        self.qkv += other.qkv;
        self.attention += other.attention;
        self.attention_out += other.attention_out;
        self.intermediate += other.intermediate;
        self.gelu += other.gelu;
        self.output += other.output;
        self.layer_norm += other.layer_norm;
        self.pooling += other.pooling;
    }

    /// The steps by name, in order.
    pub fn steps(&self) -> [(&'static str, u64); 9] {
        [
            ("embedding lookup", self.embedding),
            ("QKV product", self.qkv),
            ("attention (scores, softmax, values)", self.attention),
            ("attention output product", self.attention_out),
            ("intermediate product", self.intermediate),
            ("GELU", self.gelu),
            ("output product", self.output),
            ("residual + layer norm", self.layer_norm),
            ("pooling", self.pooling),
        ]
    }
}

/// How a sentence vector is made of the token vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// Mean of the token vectors (sentence-transformers' default).
    Mean,
    /// The first (`[CLS]`) token's vector.
    Cls,
}

/// Adds the time since `*clock` to `slot` and restarts the clock.
fn lap(clock: &mut Instant, slot: &mut u64) {
    let now = Instant::now();
    *slot += now.duration_since(*clock).as_nanos() as u64;
    *clock = now;
}

/// Activations of one forward pass.
struct Buffers {
    hidden: Vec<f32>,
    qkv: Vec<f32>,
    context: Vec<f32>,
    attended: Vec<f32>,
    intermediate: Vec<f32>,
    attention: ops::AttentionScratch,
    /// Each thread's half of the feed-forward block when split: intermediate columns
    /// and partial output.
    halves: [(Vec<f32>, Vec<f32>); 2],
}

/// `out` = the feed-forward block of `layer` on `x` (before the residual and norm),
/// halved between two threads (see [`Encoder::forward`]).
fn feed_forward_split(
    layer: &Layer,
    tokens: usize,
    x: &[f32],
    halves: &mut [(Vec<f32>, Vec<f32>); 2],
    out: &mut [f32],
) {
    let (inter, width) = (layer.intermediate.outputs() / 2, layer.output.outputs());
    let half = |h: usize, (mid, partial): &mut (Vec<f32>, Vec<f32>)| {
        mid.resize(tokens * inter, 0.0);
        partial.resize(tokens * width, 0.0);
        layer.intermediate.forward_column_half(x, h, mid);
        ops::gelu(mid);
        layer.output.forward_input_half(mid, h, partial, h == 0);
    };
    let [first, second] = halves;
    rayon::join(|| half(0, first), || half(1, second));
    for ((o, a), b) in out.iter_mut().zip(&first.1).zip(&second.1) {
        *o = a + b;
    }
}

impl Encoder {
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The kernel of the products.
    pub fn kernel(&self) -> Kernel {
        self.layers
            .first()
            .map_or(Kernel::Portable, |l| l.qkv.kernel())
    }

    /// Token ids below this are in the vocabulary.
    pub fn vocabulary(&self) -> usize {
        self.vocabulary
    }

    /// Floating-point operations of one forward pass over texts of `lens` tokens
    /// (products only, as FLOP rates are quoted: 2 per multiply-add).
    pub fn flops(&self, lens: &[usize]) -> f64 {
        let c = &self.config;
        let (h, i) = (c.hidden_size as f64, c.intermediate_size as f64);
        let per_token = 2.0 * (4.0 * h * h + 2.0 * h * i);
        let tokens: f64 = lens.iter().map(|&l| l as f64).sum();
        let attention: f64 = lens.iter().map(|&l| 4.0 * (l * l) as f64 * h).sum();
        c.num_hidden_layers as f64 * (tokens * per_token + attention)
    }

    /// Pooled (not normalised) vectors of `texts`, each a sequence of token ids within
    /// the model's length and vocabulary (else an error), on this thread, or with
    /// `split` on two (`rayon`): the products' columns halved, and the feed-forward
    /// block halved whole (each thread its half of the intermediate columns, GELU, and
    /// the output product over those inputs; the two partial sums added). For a short
    /// text, whose products are bound by reading the weights, that halves what each
    /// core reads.
    pub fn forward(
        &self,
        texts: &[&[u32]],
        pooling: Pooling,
        split: bool,
        profile: Option<&mut Profile>,
    ) -> Result<Vec<Vec<f32>>, String> {
        let c = &self.config;
        let width = c.hidden_size;
        let lens: Vec<usize> = texts.iter().map(|t| t.len()).collect();
        if let Some(&len) = lens
            .iter()
            .find(|&&l| l == 0 || l > c.max_position_embeddings)
        {
            return Err(format!(
                "a text of {len} tokens (the model takes 1 to {})",
                c.max_position_embeddings
            ));
        }
        if let Some(id) = texts
            .iter()
            .flat_map(|t| t.iter())
            .find(|&&id| id as usize >= self.vocabulary)
        {
            return Err(format!(
                "token id {id} is outside the vocabulary of {}",
                self.vocabulary
            ));
        }
        let tokens: usize = lens.iter().sum();
        let ids: Vec<u32> = texts.iter().flat_map(|t| t.iter().copied()).collect();
        let mut local = Profile::default();
        let mut clock = Instant::now();
        let mut b = Buffers {
            hidden: vec![0.0; tokens * width],
            qkv: vec![0.0; tokens * 3 * width],
            context: vec![0.0; tokens * width],
            attended: vec![0.0; tokens * width],
            intermediate: vec![0.0; tokens * c.intermediate_size],
            attention: ops::AttentionScratch::default(),
            halves: Default::default(),
        };
        ops::embed(
            &ids,
            &lens,
            width,
            (&self.word, &self.position, &self.token_type),
            &mut b.hidden,
        );
        let (g, beta) = &self.embedding_norm;
        ops::layer_norm(&mut b.hidden, g, beta, c.layer_norm_eps);
        lap(&mut clock, &mut local.embedding);
        let heads = ops::Heads {
            count: c.num_attention_heads,
            size: width / c.num_attention_heads,
        };
        let split = split
            && self
                .layers
                .iter()
                .all(|l| l.qkv.splits() && l.attention_out.splits() && l.intermediate.splits());
        for layer in &self.layers {
            let product = |l: &Linear, x: &[f32], out: &mut [f32]| {
                if split {
                    l.forward_split(x, out)
                } else {
                    l.forward(x, out)
                }
            };
            product(&layer.qkv, &b.hidden, &mut b.qkv);
            lap(&mut clock, &mut local.qkv);
            let mut start = 0;
            for &len in &lens {
                ops::attention(
                    &b.qkv[start * 3 * width..(start + len) * 3 * width],
                    heads,
                    &mut b.context[start * width..(start + len) * width],
                    &mut b.attention,
                );
                start += len;
            }
            lap(&mut clock, &mut local.attention);
            product(&layer.attention_out, &b.context, &mut b.attended);
            lap(&mut clock, &mut local.attention_out);
            let (g, beta) = &layer.attention_norm;
            ops::add_layer_norm(&mut b.attended, &b.hidden, g, beta, c.layer_norm_eps);
            lap(&mut clock, &mut local.layer_norm);
            if split {
                feed_forward_split(layer, tokens, &b.attended, &mut b.halves, &mut b.hidden);
                lap(&mut clock, &mut local.intermediate);
            } else {
                layer.intermediate.forward(&b.attended, &mut b.intermediate);
                lap(&mut clock, &mut local.intermediate);
                ops::gelu(&mut b.intermediate);
                lap(&mut clock, &mut local.gelu);
                layer.output.forward(&b.intermediate, &mut b.hidden);
                lap(&mut clock, &mut local.output);
            }
            let (g, beta) = &layer.output_norm;
            ops::add_layer_norm(&mut b.hidden, &b.attended, g, beta, c.layer_norm_eps);
            lap(&mut clock, &mut local.layer_norm);
        }
        let mut pooled = Vec::with_capacity(texts.len());
        let mut start = 0;
        for &len in &lens {
            let rows = &b.hidden[start * width..(start + len) * width];
            let v = match pooling {
                Pooling::Cls => rows[..width].to_vec(),
                Pooling::Mean => {
                    let mut v = vec![0f32; width];
                    for row in rows.chunks_exact(width) {
                        for (s, x) in v.iter_mut().zip(row) {
                            *s += x;
                        }
                    }
                    let n = len.max(1) as f32;
                    v.iter_mut().for_each(|s| *s /= n);
                    v
                }
            };
            pooled.push(v);
            start += len;
        }
        lap(&mut clock, &mut local.pooling);
        if let Some(p) = profile {
            p.add(&local);
        }
        Ok(pooled)
    }
}
