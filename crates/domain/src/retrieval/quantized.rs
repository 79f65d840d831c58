//! Vectors held compactly: symmetric scalar quantisation per vector, int8 codes and one
//! f32 scale (`x ≈ code * scale`, `scale = max|x| / 127`), a quarter of the f32 size.
//! On unit vectors the error of a dot product is about 1e-3, enough to choose
//! candidates; the best are then rescored with the exact f32 vectors from the store
//! (`rescore.rs`). Codes live in one contiguous slab per project, so a large project's
//! vectors are one allocation (returned to the system whole when the slab goes).

use std::sync::OnceLock;

/// Largest code magnitude (symmetric: -127..=127, never -128).
const LEVELS: f32 = 127.0;

/// Writes the codes of `vector` into `codes` (same length) and returns its scale
/// (0 for an all-zero or non-finite vector, whose codes are then all 0).
pub fn quantize(vector: &[f32], codes: &mut [i8]) -> f32 {
    // `f32::max` skips NaN, so a vector with one is caught here, not by `max`.
    let max = vector.iter().fold(0f32, |m, x| m.max(x.abs()));
    if !(max.is_finite() && max > 0.0) || vector.iter().any(|x| !x.is_finite()) {
        codes.iter_mut().for_each(|c| *c = 0);
        return 0.0;
    }
    let inverse = LEVELS / max;
    for (code, x) in codes.iter_mut().zip(vector) {
        *code = (x * inverse).round().clamp(-LEVELS, LEVELS) as i8;
    }
    max / LEVELS
}

/// The codes of `vector`, and its scale.
pub fn quantized(vector: &[f32]) -> (Vec<i8>, f32) {
    let mut codes = vec![0i8; vector.len()];
    let scale = quantize(vector, &mut codes);
    (codes, scale)
}

/// The dot product of a quantised vector (`codes`, `scale`) with an f32 `query`, over
/// their common length.
pub fn dot(codes: &[i8], scale: f32, query: &[f32]) -> f32 {
    kernel()(codes, query) * scale
}

type Kernel = fn(&[i8], &[f32]) -> f32;

/// The widest kernel this CPU runs, chosen once: one binary serves any x86-64.
fn kernel() -> Kernel {
    static KERNEL: OnceLock<Kernel> = OnceLock::new();
    *KERNEL.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f") {
                return x86::dot_avx512;
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                return x86::dot_avx2;
            }
        }
        dot_portable
    })
}

/// Σ codes·query. Thirty-two independent partial sums keep the loop free of one long
/// dependency chain, so the compiler vectorises it (widen, convert, multiply, add).
#[inline(always)]
fn dot_body(codes: &[i8], query: &[f32]) -> f32 {
    const LANES: usize = 32;
    let n = codes.len().min(query.len());
    let (codes, query) = (&codes[..n], &query[..n]);
    let (chunks_c, chunks_q) = (codes.chunks_exact(LANES), query.chunks_exact(LANES));
    let tail: f32 = chunks_c
        .remainder()
        .iter()
        .zip(chunks_q.remainder())
        .map(|(c, q)| f32::from(*c) * q)
        .sum();
    let mut lanes = [0f32; LANES];
    for (c, q) in chunks_c.zip(chunks_q) {
        for ((lane, c), q) in lanes.iter_mut().zip(c).zip(q) {
            *lane += f32::from(*c) * q;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

fn dot_portable(codes: &[i8], query: &[f32]) -> f32 {
    dot_body(codes, query)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    #[target_feature(enable = "avx2,fma")]
    fn avx2(codes: &[i8], query: &[f32]) -> f32 {
        super::dot_body(codes, query)
    }

    #[target_feature(enable = "avx512f")]
    fn avx512(codes: &[i8], query: &[f32]) -> f32 {
        super::dot_body(codes, query)
    }

    pub(super) fn dot_avx2(codes: &[i8], query: &[f32]) -> f32 {
        // SAFETY: chosen only when the CPU reports AVX2 and FMA (`kernel`).
        unsafe { avx2(codes, query) }
    }

    pub(super) fn dot_avx512(codes: &[i8], query: &[f32]) -> f32 {
        // SAFETY: chosen only when the CPU reports AVX-512F (`kernel`).
        unsafe { avx512(codes, query) }
    }
}

/// The codes of many vectors of one length, in one allocation; slots of removed
/// vectors are reused.
#[derive(Debug, Default)]
pub struct Slab {
    dimensions: usize,
    codes: Vec<i8>,
    free: Vec<u32>,
}

impl Slab {
    pub fn new(dimensions: usize) -> Slab {
        Slab {
            dimensions,
            ..Slab::default()
        }
    }

    pub fn dimensions(&self) -> usize {
        self.dimensions
    }

    /// Stores `codes` (of the slab's length) and returns their slot.
    pub fn insert(&mut self, codes: &[i8]) -> u32 {
        debug_assert_eq!(codes.len(), self.dimensions);
        if let Some(slot) = self.free.pop() {
            self.get_mut(slot).copy_from_slice(codes);
            return slot;
        }
        let slot = (self.codes.len() / self.dimensions.max(1)) as u32;
        self.codes.extend_from_slice(codes);
        slot
    }

    pub fn get(&self, slot: u32) -> &[i8] {
        let start = slot as usize * self.dimensions;
        &self.codes[start..start + self.dimensions]
    }

    pub fn get_mut(&mut self, slot: u32) -> &mut [i8] {
        let start = slot as usize * self.dimensions;
        &mut self.codes[start..start + self.dimensions]
    }

    pub fn remove(&mut self, slot: u32) {
        self.free.push(slot);
    }

    /// Its dimensions, codes and free slots (for a segment).
    pub(crate) fn parts(&self) -> (usize, &[i8], &[u32]) {
        (self.dimensions, &self.codes, &self.free)
    }

    pub(crate) fn from_parts(dimensions: usize, codes: Vec<i8>, free: Vec<u32>) -> Slab {
        Slab {
            dimensions,
            codes,
            free,
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.codes.capacity() + self.free.capacity() * 4
    }

    pub fn shrink_to_fit(&mut self) {
        self.codes.shrink_to_fit();
        self.free.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic unit vectors (SplitMix64).
    fn unit_vectors(n: usize, dims: usize, seed: u64) -> Vec<Vec<f32>> {
        let mut state = seed;
        let mut next = || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) >> 11) as f32 / (1u64 << 53) as f32 - 0.5
        };
        (0..n)
            .map(|_| {
                let mut v: Vec<f32> = (0..dims).map(|_| next()).collect();
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.iter_mut().for_each(|x| *x /= norm);
                v
            })
            .collect()
    }

    #[test]
    fn the_quantised_dot_is_within_tolerance_of_the_exact_one() {
        for dims in [1, 7, 31, 32, 33, 256, 384] {
            let vectors = unit_vectors(200, dims, dims as u64);
            let query = &unit_vectors(1, dims, 999)[0];
            let mut worst = 0f32;
            for v in &vectors {
                let exact = crate::retrieval::dense::dot(v, query);
                let (codes, scale) = quantized(v);
                worst = worst.max((dot(&codes, scale, query) - exact).abs());
                // Every kernel agrees with the portable one.
                let portable = dot_portable(&codes, query) * scale;
                assert!((portable - dot(&codes, scale, query)).abs() < 1e-5);
            }
            assert!(worst < 5e-3, "{dims} dimensions: worst error {worst}");
        }
    }

    #[test]
    fn zero_and_non_finite_vectors_quantise_to_zero() {
        let (codes, scale) = quantized(&[0.0, 0.0]);
        assert_eq!((codes, scale), (vec![0, 0], 0.0));
        let (codes, scale) = quantized(&[f32::NAN, 1.0]);
        assert_eq!((codes, scale), (vec![0, 0], 0.0));
        let (codes, scale) = quantized(&[-1.0, 0.5]);
        assert_eq!(codes, [-127, 64]);
        assert!((scale - 1.0 / 127.0).abs() < 1e-9);
        assert_eq!(dot(&[], 1.0, &[]), 0.0);
    }

    #[test]
    fn slab_slots_are_reused_after_removal() {
        let mut slab = Slab::new(2);
        let a = slab.insert(&[1, 2]);
        let b = slab.insert(&[3, 4]);
        assert_eq!((slab.get(a), slab.get(b)), (&[1i8, 2][..], &[3i8, 4][..]));
        slab.remove(a);
        let c = slab.insert(&[5, 6]);
        assert_eq!(c, a);
        assert_eq!(slab.get(c), &[5, 6]);
    }
}
