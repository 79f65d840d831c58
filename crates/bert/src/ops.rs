//! The element-wise and row-wise steps of the encoder: embedding lookup, layer norm,
//! GELU, and attention with its softmax. Each is compiled for several instruction sets
//! (AVX-512, AVX2, a portable baseline) and the widest the CPU has is chosen at run
//! time, so one binary runs on any x86-64. `exp` and `erf` are branch-free polynomials
//! so that loops over them vectorise (libm's calls do not).

use multiversion::multiversion;

/// e^x to about 2 ulp for x in [-87, 88] (clamped outside): 2^n · p(r) with
/// r = x - n·ln2 in [-ln2/2, ln2/2] and p a degree-6 polynomial.
#[inline(always)]
fn exp(x: f32) -> f32 {
    // max/min, not clamp (which checks its bounds), and no float-to-int cast: both
    // keep the loop vectorised.
    #[allow(clippy::manual_clamp)]
    let x = x.max(-87.0).min(88.0);
    let n = (x * std::f32::consts::LOG2_E + 0.5).floor();
    // ln2 split in two so that n·ln2 is subtracted without rounding error.
    let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (0.166_666_67 + r * (0.041_666_52 + r * (0.008_333_45 + r * 0.001_395_3)))));
    // 2^n: adding 1.5·2^23 puts the integer n + 127 in the low mantissa bits.
    let biased = (n + (127.0 + 12_582_912.0)).to_bits();
    p * f32::from_bits(biased << 23)
}

/// erf(x) within 1.5e-7 (Abramowitz and Stegun 7.1.26), plus f32 rounding.
#[inline(always)]
fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152_1 + t * 1.061_405_4))));
    let y = 1.0 - poly * exp(-a * a);
    y.copysign(x)
}

/// GELU as BERT defines it (with erf, not the tanh approximation), in place.
#[multiversion(targets = "simd")]
pub fn gelu(xs: &mut [f32]) {
    for x in xs.iter_mut() {
        *x = 0.5 * *x * (1.0 + erf(*x * std::f32::consts::FRAC_1_SQRT_2));
    }
}

/// `rows` = layer_norm(`rows` + `residual`) over rows of `gamma.len()` values.
#[multiversion(targets = "simd")]
pub fn add_layer_norm(rows: &mut [f32], residual: &[f32], gamma: &[f32], beta: &[f32], eps: f32) {
    let width = gamma.len();
    for (row, res) in rows
        .chunks_exact_mut(width)
        .zip(residual.chunks_exact(width))
    {
        for (x, r) in row.iter_mut().zip(res) {
            *x += r;
        }
        normalise_row(row, gamma, beta, eps);
    }
}

/// `rows` = layer_norm(`rows`) over rows of `gamma.len()` values.
#[multiversion(targets = "simd")]
pub fn layer_norm(rows: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
    for row in rows.chunks_exact_mut(gamma.len()) {
        normalise_row(row, gamma, beta, eps);
    }
}

#[inline(always)]
fn normalise_row(row: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
    let n = row.len() as f32;
    let mean = sum(row) / n;
    let mut var = 0.0f32;
    let mut lanes = [0f32; 16];
    let mut chunks = row.chunks_exact(16);
    for c in &mut chunks {
        for (l, x) in lanes.iter_mut().zip(c) {
            let d = x - mean;
            *l += d * d;
        }
    }
    for x in chunks.remainder() {
        var += (x - mean) * (x - mean);
    }
    var += lanes.iter().sum::<f32>();
    let inv = 1.0 / (var / n + eps).sqrt();
    for ((x, g), b) in row.iter_mut().zip(gamma).zip(beta) {
        *x = (*x - mean) * inv * g + b;
    }
}

/// The sum of `xs`, in 16 lanes so that it vectorises.
#[inline(always)]
fn sum(xs: &[f32]) -> f32 {
    let mut lanes = [0f32; 16];
    let mut chunks = xs.chunks_exact(16);
    for c in &mut chunks {
        for (l, x) in lanes.iter_mut().zip(c) {
            *l += x;
        }
    }
    lanes.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
}

/// Where a head's queries, keys and values sit in a row of the fused QKV projection.
#[derive(Debug, Clone, Copy)]
pub struct Heads {
    pub count: usize,
    pub size: usize,
}

/// Scratch of [`attention`], reused between calls.
#[derive(Default)]
pub struct AttentionScratch {
    /// One head's keys, transposed (head size rows of sequence length).
    keys: Vec<f32>,
    /// One head's values, contiguous (sequence length rows of head size).
    values: Vec<f32>,
    scores: Vec<f32>,
}

/// Self-attention of one sequence: `qkv` holds its tokens' rows of
/// `[queries | keys | values]` (each `heads.count * heads.size` wide), `out` receives
/// each token's attended values, heads side by side. Every token sees every token of
/// its own sequence (sequences are packed without padding, so no mask is needed). A
/// head's keys are transposed first, so that a query's scores against all keys are
/// one vectorised sweep rather than a short dot product per key.
#[multiversion(targets = "simd")]
pub fn attention(qkv: &[f32], heads: Heads, out: &mut [f32], scratch: &mut AttentionScratch) {
    let (size, hidden) = (heads.size, heads.count * heads.size);
    let stride = 3 * hidden;
    let len = qkv.len() / stride;
    // Key rows padded to whole vectors (zeros), so every sweep is full-width.
    let padded = len.div_ceil(16) * 16;
    let scale = 1.0 / (size as f32).sqrt();
    scratch.keys.clear();
    scratch.keys.resize(size * padded, 0.0);
    scratch.values.resize(len * size, 0.0);
    scratch.scores.resize(padded, 0.0);
    let AttentionScratch {
        keys,
        values,
        scores,
    } = scratch;
    for head in 0..heads.count {
        let (q_at, k_at, v_at) = (head * size, hidden + head * size, 2 * hidden + head * size);
        for j in 0..len {
            let row = &qkv[j * stride..][..stride];
            for d in 0..size {
                keys[d * padded + j] = row[k_at + d] * scale;
            }
            values[j * size..][..size].copy_from_slice(&row[v_at..][..size]);
        }
        for i in 0..len {
            let q = &qkv[i * stride + q_at..][..size];
            // Scores of 16 keys at a time, in a register-sized array.
            for (c, out) in scores.chunks_exact_mut(16).enumerate() {
                let mut acc = [0f32; 16];
                for (d, &qd) in q.iter().enumerate() {
                    let k: &[f32; 16] = keys[d * padded + c * 16..][..16]
                        .try_into()
                        .expect("16 keys");
                    for (a, k) in acc.iter_mut().zip(k) {
                        *a += qd * k;
                    }
                }
                out.copy_from_slice(&acc);
            }
            scores[len..].fill(f32::NEG_INFINITY);
            let mut max = [f32::NEG_INFINITY; 16];
            for chunk in scores.chunks_exact(16) {
                for (m, x) in max.iter_mut().zip(chunk) {
                    *m = m.max(*x);
                }
            }
            let max = max.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let mut total = [0f32; 16];
            for x in scores.iter_mut() {
                *x = exp(*x - max);
            }
            scores[len..].fill(0.0);
            for chunk in scores.chunks_exact(16) {
                for (t, x) in total.iter_mut().zip(chunk) {
                    *t += x;
                }
            }
            let inv = 1.0 / total.iter().sum::<f32>();
            let o = &mut out[i * hidden + q_at..][..size];
            o.fill(0.0);
            for (&p, v) in scores[..len].iter().zip(values.chunks_exact(size)) {
                let p = p * inv;
                for (o, v) in o.iter_mut().zip(v) {
                    *o += p * v;
                }
            }
        }
    }
}

/// `rows[t]` = word[ids[t]] + position[t - start of its sequence] + token_type[0], for
/// sequences of `lens`.
pub fn embed(
    ids: &[u32],
    lens: &[usize],
    width: usize,
    tables: (&[f32], &[f32], &[f32]),
    rows: &mut [f32],
) {
    let (word, position, token_type) = tables;
    let mut t = 0;
    for &len in lens {
        for pos in 0..len {
            let id = ids[t] as usize;
            let row = &mut rows[t * width..][..width];
            let (w, p, k) = (
                &word[id * width..][..width],
                &position[pos * width..][..width],
                &token_type[..width],
            );
            for (((r, w), p), k) in row.iter_mut().zip(w).zip(p).zip(k) {
                *r = w + p + k;
            }
            t += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_and_erf_match_the_library() {
        for i in -2000..=2000 {
            let x = i as f32 / 40.0;
            let e = (x as f64).exp();
            assert!(((exp(x) as f64 - e) / e).abs() < 1e-6, "exp({x})");
            let want = libm_erf(x as f64);
            assert!(
                (erf(x) as f64 - want).abs() < 1e-6,
                "erf({x}) = {} not {want}",
                erf(x)
            );
        }
        assert_eq!(exp(-1000.0), exp(-87.0));
        assert!(exp(1000.0).is_finite());
    }

    /// erf by its Taylor series and continued fraction, in f64 (a reference).
    fn libm_erf(x: f64) -> f64 {
        let a = x.abs();
        let y = if a < 2.5 {
            let (mut term, mut sum, mut n) = (a, a, 0.0);
            while term.abs() > 1e-17 {
                n += 1.0;
                term *= -a * a / n;
                sum += term / (2.0 * n + 1.0);
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        } else {
            let mut f = 0.0;
            for k in (1..60).rev() {
                f = k as f64 / 2.0 / (a + f);
            }
            1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / (a + f)
        };
        y.copysign(x)
    }

    #[test]
    fn layer_norm_centres_and_scales_each_row() {
        let mut rows: Vec<f32> = (0..40).map(|i| i as f32 * 0.5).collect();
        let residual = vec![1.0; 40];
        let (gamma, beta) = (vec![2.0; 20], vec![0.5; 20]);
        add_layer_norm(&mut rows, &residual, &gamma, &beta, 1e-12);
        for row in rows.chunks(20) {
            let mean: f32 = row.iter().sum::<f32>() / 20.0;
            let var: f32 = row.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / 20.0;
            assert!(
                (mean - 0.5).abs() < 1e-5 && (var - 4.0).abs() < 1e-3,
                "{mean} {var}"
            );
        }
    }

    #[test]
    fn attention_of_one_token_is_its_value_and_weights_sum_to_one() {
        let heads = Heads { count: 2, size: 3 };
        // One token: its output is its own value, whatever the scores.
        let qkv: Vec<f32> = (0..18).map(|i| i as f32).collect();
        let mut out = vec![0.0; 6];
        attention(&qkv, heads, &mut out, &mut AttentionScratch::default());
        assert_eq!(out, qkv[12..18]);
        // Two tokens with equal keys: each output is the mean of the values.
        let mut qkv = vec![0.0; 36];
        for t in 0..2 {
            for v in 0..6 {
                qkv[t * 18 + 12 + v] = (t * 10 + v) as f32;
            }
        }
        let mut out = vec![0.0; 12];
        attention(&qkv, heads, &mut out, &mut AttentionScratch::default());
        for t in 0..2 {
            for v in 0..6 {
                assert!((out[t * 6 + v] - (5 + v) as f32).abs() < 1e-5);
            }
        }
    }
}
