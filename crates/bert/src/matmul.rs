//! The encoder's dense layers, `y = x·Wᵀ + b`, with W packed once at load time into
//! panels of `PANEL` output columns (for each input index, the panel's 32 weights are
//! contiguous), so the inner loop streams one panel while rows of `x` are broadcast.
//! Rows of `x` are copied into tiles (input-major) per block. On AVX-512 a tile of up
//! to `ROWS` rows by one panel is held in 28 vector registers;
//! elsewhere a portable kernel is compiled for the widest instruction set found at run
//! time. Nothing is repacked per call, which is what makes small (single-question)
//! products fast.

use multiversion::multiversion;

/// Output columns per packed panel.
pub const PANEL: usize = 32;
/// Rows of `x` per kernel tile.
const ROWS: usize = 14;
/// Rows of `x` per block: a block's inputs stay in the core's L2 cache while every
/// panel passes over them.
const BLOCK_ROWS: usize = 128;

/// How a layer's products are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// f32 inputs, weights and sums.
    F32,
    /// Inputs and weights rounded to bfloat16, sums in f32, on AMX tiles (`amx.rs`):
    /// many times the products per cycle, at a relative error of about 2^-9 per
    /// product.
    Bf16,
}

impl Precision {
    /// Whether this CPU computes products at this precision.
    pub fn available(self) -> bool {
        match self {
            Precision::F32 => true,
            #[cfg(target_arch = "x86_64")]
            Precision::Bf16 => super::amx::available(),
            #[cfg(not(target_arch = "x86_64"))]
            Precision::Bf16 => false,
        }
    }

    /// bf16 where the CPU has AMX, else f32.
    pub fn best() -> Precision {
        if Precision::Bf16.available() {
            Precision::Bf16
        } else {
            Precision::F32
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }
}

/// 64-byte aligned storage, so panel loads never straddle cache lines.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u32; 16]);

/// A packed value: an f32's bits, or two bfloat16s (input indices 2i and 2i+1).
type Word = u32;

/// bfloat16 of `x`, rounded to nearest even (NaN stays NaN).
fn bf16(x: f32) -> u32 {
    let bits = x.to_bits();
    if x.is_nan() {
        return (bits >> 16) | 0x40;
    }
    (bits + 0x7fff + ((bits >> 16) & 1)) >> 16
}

/// The word for input index `i` (f32) or the pair starting at `2i` (bf16) of `row`.
#[inline(always)]
fn word(row: &[f32], i: usize, precision: Precision) -> Word {
    match precision {
        Precision::F32 => row[i].to_bits(),
        Precision::Bf16 => {
            let at = |j: usize| row.get(j).map_or(0, |&x| bf16(x));
            at(2 * i) | (at(2 * i + 1) << 16)
        }
    }
}

/// A dense layer with packed weights.
pub struct Linear {
    inputs: usize,
    outputs: usize,
    precision: Precision,
    /// `panels()` panels of `steps() * PANEL` words (zero past `outputs`).
    packed: Vec<Line>,
    /// `panels() * PANEL` biases (zero past `outputs`).
    bias: Vec<f32>,
}

impl std::fmt::Debug for Linear {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Linear({} -> {}, {})",
            self.inputs,
            self.outputs,
            self.precision.name()
        )
    }
}

impl Linear {
    /// `weight` is `outputs` rows of `inputs` (PyTorch's layout), `bias` `outputs` long.
    /// A precision the CPU lacks falls back to f32.
    pub fn new(
        weight: &[f32],
        bias: &[f32],
        outputs: usize,
        inputs: usize,
        precision: Precision,
    ) -> Linear {
        assert_eq!(weight.len(), outputs * inputs, "weight shape");
        assert_eq!(bias.len(), outputs, "bias shape");
        let precision = if precision.available() {
            precision
        } else {
            Precision::F32
        };
        let mut layer = Linear {
            inputs,
            outputs,
            precision,
            packed: Vec::new(),
            bias: Vec::new(),
        };
        let (panels, steps) = (layer.panels(), layer.steps());
        let mut flat = vec![0 as Word; panels * steps * PANEL];
        for o in 0..outputs {
            let (panel, col) = (o / PANEL, o % PANEL);
            let row = &weight[o * inputs..][..inputs];
            for i in 0..steps {
                flat[(panel * steps + i) * PANEL + col] = word(row, i, precision);
            }
        }
        layer.packed = flat
            .chunks_exact(16)
            .map(|c| Line(c.try_into().expect("16 lanes")))
            .collect();
        layer.bias = bias.to_vec();
        layer.bias.resize(panels * PANEL, 0.0);
        layer
    }

    pub fn inputs(&self) -> usize {
        self.inputs
    }

    pub fn outputs(&self) -> usize {
        self.outputs
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    fn panels(&self) -> usize {
        self.outputs.div_ceil(PANEL)
    }

    /// Packed rows of a panel: one per input (f32), one per pair of inputs padded to
    /// whole AMX steps (bf16).
    fn steps(&self) -> usize {
        match self.precision {
            Precision::F32 => self.inputs,
            Precision::Bf16 => bf16_width(self.inputs) / 2,
        }
    }

    fn weights(&self) -> &[Word] {
        // SAFETY: `Line` is 16 words with no padding (repr(C), size 64).
        unsafe { std::slice::from_raw_parts(self.packed.as_ptr().cast(), self.packed.len() * 16) }
    }

    /// `out` (rows of `outputs`) = `x` (rows of `inputs`)·Wᵀ + b, on this thread.
    pub fn forward(&self, x: &[f32], out: &mut [f32]) {
        let rows = x.len() / self.inputs;
        assert_eq!(x.len(), rows * self.inputs, "input shape");
        assert_eq!(out.len(), rows * self.outputs, "output shape");
        self.part(x, rows, Out::of(out), &self.whole());
    }

    /// As [`Self::forward`], the output columns split between two threads (`rayon`).
    pub fn forward_split(&self, x: &[f32], out: &mut [f32]) {
        let rows = x.len() / self.inputs;
        assert_eq!(x.len(), rows * self.inputs, "input shape");
        assert_eq!(out.len(), rows * self.outputs, "output shape");
        let half = self.panels() / 2;
        let (all, dst) = (self.whole(), Out::of(out));
        let (first, second) = (
            Part {
                panels: 0..half,
                ..all.clone()
            },
            Part {
                panels: half..self.panels(),
                out_col0: half * PANEL,
                ..all.clone()
            },
        );
        // SAFETY of the shared `dst`: the two halves write disjoint columns.
        rayon::join(
            || self.part(x, rows, dst, &first),
            || self.part(x, rows, dst, &second),
        );
    }

    /// Half `half` (0 or 1) of the output columns (with their biases) into `out` (rows
    /// of `outputs / 2`). `outputs` must be a multiple of `2 * PANEL`.
    pub fn forward_column_half(&self, x: &[f32], half: usize, out: &mut [f32]) {
        assert!(
            self.outputs.is_multiple_of(2 * PANEL) && half < 2,
            "column halves"
        );
        let rows = x.len() / self.inputs;
        let width = self.outputs / 2;
        assert_eq!(out.len(), rows * width, "output shape");
        let panels = self.panels() / 2;
        let part = Part {
            panels: half * panels..(half + 1) * panels,
            ld: width,
            ..self.whole()
        };
        self.part(x, rows, Out::of(out), &part);
    }

    /// `out` (rows of `outputs`) = the products over inputs `half` (0 or 1) of the
    /// layer only (`x` holds those `inputs / 2` values per row), plus the bias if
    /// `bias`: the two halves sum to the whole product. `inputs` must be a multiple of
    /// 64 (whole AMX steps per half).
    pub fn forward_input_half(&self, x: &[f32], half: usize, out: &mut [f32], bias: bool) {
        assert!(self.inputs.is_multiple_of(64) && half < 2, "input halves");
        let width = self.inputs / 2;
        let rows = x.len() / width;
        assert_eq!(out.len(), rows * self.outputs, "output shape");
        let part = Part {
            inputs: half * width..(half + 1) * width,
            bias,
            ..self.whole()
        };
        self.part(x, rows, Out::of(out), &part);
    }

    /// Whether the halves above apply to this layer.
    pub fn splits(&self) -> bool {
        self.outputs.is_multiple_of(2 * PANEL) && self.inputs.is_multiple_of(64)
    }

    fn whole(&self) -> Part {
        Part {
            inputs: 0..self.inputs,
            panels: 0..self.panels(),
            out_col0: 0,
            ld: self.outputs,
            bias: true,
        }
    }

    /// The packed rows of a panel (see `steps`) that `inputs` covers.
    fn step_range(&self, inputs: &std::ops::Range<usize>) -> std::ops::Range<usize> {
        match self.precision {
            Precision::F32 => inputs.clone(),
            Precision::Bf16 => inputs.start / 2..inputs.start / 2 + bf16_width(inputs.len()) / 2,
        }
    }

    /// Computes `part` for `rows` rows of `x` (each `part.inputs.len()` long) into `out`.
    fn part(&self, x: &[f32], rows: usize, out: Out, part: &Part) {
        if rows == 0 {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if self.precision == Precision::Bf16 {
            // SAFETY: a bf16 layer exists only where AMX is available (`new`).
            unsafe { super::amx::with_tiles(|| self.part_amx(x, rows, out, part)) };
            return;
        }
        let weights = self.weights();
        let (k, all_steps) = (part.inputs.len(), self.steps());
        let steps = self.step_range(&part.inputs);
        PACKED.with_borrow_mut(|packed| {
            for block in (0..rows).step_by(BLOCK_ROWS) {
                let block_rows = BLOCK_ROWS.min(rows - block);
                pack_rows(&x[block * k..(block + block_rows) * k], k, packed);
                for panel in part.panels.clone() {
                    let w = &weights[(panel * all_steps + steps.start) * PANEL..]
                        [..steps.len() * PANEL];
                    let bias = part.bias(&self.bias, panel);
                    let cols = PANEL.min(self.outputs - panel * PANEL);
                    let col = part.out_col0 + (panel - part.panels.start) * PANEL;
                    for tile in (0..block_rows).step_by(ROWS) {
                        let n = ROWS.min(block_rows - tile);
                        let a = &packed[tile * k..][..ROWS * k];
                        let tile = Tile {
                            a,
                            rows: n,
                            steps: k,
                            w,
                            bias,
                            dst: out.at((block + tile) * part.ld + col),
                            ld: part.ld,
                            cols,
                        };
                        // SAFETY: rows block+tile..+n and these columns are inside `out`
                        // (checked by the public callers) and no other caller writes them.
                        unsafe { tile_kernel(&tile) };
                    }
                }
            }
        });
    }

    /// `part` on AMX: each block of rows is rounded to bf16 (rows padded to 32,
    /// inputs to whole steps), then each 32-row by 32-column tile is one `amx::block`.
    #[cfg(target_arch = "x86_64")]
    fn part_amx(&self, x: &[f32], rows: usize, out: Out, part: &Part) {
        use super::amx::{TILE_K, TILE_ROWS};
        let weights = self.weights();
        let (k, all_steps) = (part.inputs.len(), self.steps());
        let steps = self.step_range(&part.inputs);
        let width = bf16_width(k);
        let mut c = [0f32; 2 * TILE_ROWS * PANEL];
        ROUNDED.with_borrow_mut(|rounded| {
            for block in (0..rows).step_by(BLOCK_ROWS) {
                let block_rows = BLOCK_ROWS.min(rows - block);
                let padded_rows = block_rows.div_ceil(2 * TILE_ROWS) * 2 * TILE_ROWS;
                rounded.clear();
                rounded.resize(padded_rows * width, 0);
                for (r, row) in x[block * k..(block + block_rows) * k]
                    .chunks_exact(k)
                    .enumerate()
                {
                    for (dst, v) in rounded[r * width..][..k].iter_mut().zip(row) {
                        *dst = bf16(*v) as u16;
                    }
                }
                for panel in part.panels.clone() {
                    let w = &weights[(panel * all_steps + steps.start) * PANEL..]
                        [..steps.len() * PANEL];
                    let bias = part.bias(&self.bias, panel);
                    let cols = PANEL.min(self.outputs - panel * PANEL);
                    let col = part.out_col0 + (panel - part.panels.start) * PANEL;
                    for tile in (0..block_rows).step_by(2 * TILE_ROWS) {
                        let a = &rounded[tile * width..][..2 * TILE_ROWS * width];
                        // SAFETY: `a` holds 32 rows of `width` bf16 (`width / TILE_K`
                        // steps of 64 bytes), `w` as many steps of 16 rows of 32 pairs,
                        // `c` 32 × 32; tiles are configured by `with_tiles` in `part`.
                        unsafe {
                            super::amx::block(
                                a.as_ptr(),
                                width * 2,
                                w.as_ptr(),
                                width / TILE_K,
                                c.as_mut_ptr(),
                            )
                        };
                        for r in 0..(2 * TILE_ROWS).min(block_rows - tile) {
                            let dst = out.at((block + tile + r) * part.ld + col);
                            for j in 0..cols {
                                // SAFETY: row block+tile+r and the panel's valid columns are
                                // inside `out`, written by this caller only.
                                unsafe { *dst.add(j) = c[r * PANEL + j] + bias[j] };
                            }
                        }
                    }
                }
            }
        });
    }
}

/// Which part of a product a call computes.
#[derive(Clone)]
struct Part {
    /// The layer's inputs that `x` holds (each row of `x` is this many values).
    inputs: std::ops::Range<usize>,
    panels: std::ops::Range<usize>,
    /// Where the first panel's column 0 lands in a row of `out`, and the row stride.
    out_col0: usize,
    ld: usize,
    bias: bool,
}

/// A panel's worth of zero biases, for parts computed without bias.
static NO_BIAS: [f32; PANEL] = [0.0; PANEL];

impl Part {
    fn bias<'a>(&self, biases: &'a [f32], panel: usize) -> &'a [f32] {
        if self.bias {
            &biases[panel * PANEL..][..PANEL]
        } else {
            &NO_BIAS
        }
    }
}

thread_local! {
    /// A block of input rows in tile order (see `pack_rows`), reused between calls.
    static PACKED: std::cell::RefCell<Vec<Word>> = const { std::cell::RefCell::new(Vec::new()) };
    /// A block of input rows rounded to bf16 (see `columns_amx`), reused between calls.
    static ROUNDED: std::cell::RefCell<Vec<u16>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Inputs of a bf16 row: `k` rounded up to whole AMX steps.
fn bf16_width(k: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    let step = super::amx::TILE_K;
    #[cfg(not(target_arch = "x86_64"))]
    let step = 2;
    k.div_ceil(step) * step
}

/// Copies `x` (rows of `k`) into `packed` tile by tile, each tile a run of steps of
/// `ROWS` words (the tile's rows at that input index or pair, zero past the last row),
/// so the kernel reads its broadcasts in order.
fn pack_rows(x: &[f32], k: usize, packed: &mut Vec<Word>) {
    let rows = x.len() / k;
    let steps = k;
    let tiles = rows.div_ceil(ROWS);
    packed.clear();
    packed.resize(tiles * ROWS * steps, 0);
    for (t, tile) in packed.chunks_exact_mut(ROWS * steps).enumerate() {
        for r in 0..ROWS.min(rows - t * ROWS) {
            let row = &x[(t * ROWS + r) * k..][..k];
            for i in 0..steps {
                tile[i * ROWS + r] = row[i].to_bits();
            }
        }
    }
}

/// One tile of a product: `rows` rows (packed in `a`, `steps` steps of `ROWS` words)
/// times one panel `w` (`steps` rows of `PANEL` words), plus `bias`, into `cols`
/// columns of `dst` (row stride `ld`).
struct Tile<'a> {
    a: &'a [Word],
    rows: usize,
    steps: usize,
    w: &'a [Word],
    bias: &'a [f32],
    dst: *mut f32,
    ld: usize,
    cols: usize,
}

/// SAFETY: `tile.dst` must have `tile.rows` rows of `tile.ld` with `tile.cols`
/// writable values each.
unsafe fn tile_kernel(tile: &Tile) {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        // SAFETY: the CPU has AVX-512F; the shapes are the caller's promise.
        unsafe { avx512::tile(tile) };
        return;
    }
    let mut acc = [[0f32; PANEL]; ROWS];
    portable_tile(tile.a, tile.rows, tile.steps, tile.w, &mut acc);
    for (r, row) in acc.iter().enumerate().take(tile.rows) {
        for (c, (v, b)) in row.iter().zip(tile.bias).take(tile.cols).enumerate() {
            // SAFETY: inside `dst` by the caller's promise.
            unsafe { *tile.dst.add(r * tile.ld + c) = v + b };
        }
    }
}

#[multiversion(targets = "simd")]
fn portable_tile(a: &[Word], n: usize, k: usize, w: &[Word], acc: &mut [[f32; PANEL]; ROWS]) {
    for (r, row) in acc.iter_mut().enumerate().take(n) {
        for (i, wi) in w.chunks_exact(PANEL).enumerate().take(k) {
            let xi = f32::from_bits(a[i * ROWS + r]);
            for (o, wv) in row.iter_mut().zip(wi) {
                *o += xi * f32::from_bits(*wv);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;
    use std::sync::OnceLock;

    use super::{PANEL, ROWS, Tile};

    pub fn available() -> bool {
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| std::arch::is_x86_feature_detected!("avx512f"))
    }

    /// See `tile_kernel`: f32 products.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn tile(t: &Tile) {
        // SAFETY (all arms): forwarded from the caller.
        unsafe {
            match t.rows {
                14 => rows_f32::<14>(t),
                13 => rows_f32::<13>(t),
                12 => rows_f32::<12>(t),
                11 => rows_f32::<11>(t),
                10 => rows_f32::<10>(t),
                9 => rows_f32::<9>(t),
                8 => rows_f32::<8>(t),
                7 => rows_f32::<7>(t),
                6 => rows_f32::<6>(t),
                5 => rows_f32::<5>(t),
                4 => rows_f32::<4>(t),
                3 => rows_f32::<3>(t),
                2 => rows_f32::<2>(t),
                1 => rows_f32::<1>(t),
                _ => {}
            }
        }
    }

    /// `lo`/`hi` hold columns 0-15 and 16-31 of each row; each step adds one input
    /// times the panel's row.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn rows_f32<const N: usize>(t: &Tile) {
        const { assert!(N <= ROWS) };
        debug_assert!(t.a.len() >= ROWS * t.steps && t.w.len() >= t.steps * PANEL);
        debug_assert!(t.bias.len() >= PANEL);
        let mut lo = [_mm512_setzero_ps(); N];
        let mut hi = [_mm512_setzero_ps(); N];
        let (a, w) = (t.a.as_ptr(), t.w.as_ptr());
        // SAFETY: reads stay inside `a` (steps of ROWS) and `w` (steps of PANEL); the
        // stores inside `dst` by the caller's promise.
        unsafe {
            for i in 0..t.steps {
                let w0 = _mm512_load_si512(w.add(i * PANEL).cast());
                let w1 = _mm512_load_si512(w.add(i * PANEL + 16).cast());
                for r in 0..N {
                    let x = _mm512_set1_epi32(*a.add(i * ROWS + r) as i32);
                    let x = _mm512_castsi512_ps(x);
                    lo[r] = _mm512_fmadd_ps(x, _mm512_castsi512_ps(w0), lo[r]);
                    hi[r] = _mm512_fmadd_ps(x, _mm512_castsi512_ps(w1), hi[r]);
                }
            }
            let b0 = _mm512_loadu_ps(t.bias.as_ptr());
            let b1 = _mm512_loadu_ps(t.bias.as_ptr().add(16));
            // Masks for a last panel narrower than 32 columns.
            let cols = t.cols;
            let m0: __mmask16 = if cols >= 16 {
                0xffff
            } else {
                (1u16 << cols) - 1
            };
            let m1: __mmask16 = if cols >= 32 {
                0xffff
            } else if cols > 16 {
                (1u16 << (cols - 16)) - 1
            } else {
                0
            };
            for r in 0..N {
                let row = t.dst.add(r * t.ld);
                _mm512_mask_storeu_ps(row, m0, _mm512_add_ps(lo[r], b0));
                _mm512_mask_storeu_ps(row.add(16), m1, _mm512_add_ps(hi[r], b1));
            }
        }
    }
}

/// The output buffer, written through raw pointers by the kernels.
#[derive(Clone, Copy)]
struct Out(*mut f32);
// SAFETY: threads given the same `Out` write disjoint columns (`forward_split`).
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

impl Out {
    fn of(out: &mut [f32]) -> Out {
        Out(out.as_mut_ptr())
    }
    /// The address `offset` values in (writing there is the caller's business).
    fn at(self, offset: usize) -> *mut f32 {
        self.0.wrapping_add(offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(x: &[f32], w: &[f32], b: &[f32], outputs: usize, inputs: usize) -> Vec<f32> {
        let rows = x.len() / inputs;
        let mut y = vec![0f32; rows * outputs];
        for r in 0..rows {
            for o in 0..outputs {
                let s: f64 = (0..inputs)
                    .map(|i| x[r * inputs + i] as f64 * w[o * inputs + i] as f64)
                    .sum();
                y[r * outputs + o] = s as f32 + b[o];
            }
        }
        y
    }

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2_654_435_761) ^ seed) % 1000) as f32 / 500.0 - 1.0)
            .collect()
    }

    #[test]
    fn matches_the_naive_product_at_awkward_shapes() {
        // Outputs not a multiple of the panel, rows not a multiple of the tile, rows
        // past one block, inputs not a multiple of an AMX step.
        for (rows, outputs, inputs) in [(1, 40, 17), (13, 64, 33), (300, 70, 24), (9, 31, 8)] {
            let (x, w, b) = (
                values(rows * inputs, 1),
                values(outputs * inputs, 2),
                values(outputs, 3),
            );
            let want = naive(&x, &w, &b, outputs, inputs);
            for (precision, tolerance) in [(Precision::F32, 1e-4), (Precision::Bf16, 0.05)] {
                let layer = Linear::new(&w, &b, outputs, inputs, precision);
                let mut got = vec![f32::NAN; rows * outputs];
                layer.forward(&x, &mut got);
                let close = |got: &[f32], how: &str| {
                    for (g, w) in got.iter().zip(&want) {
                        assert!(
                            (g - w).abs() < tolerance,
                            "{rows}x{outputs}x{inputs} {precision:?} {how}: {g} vs {w}"
                        );
                    }
                };
                close(&got, "whole");
                let mut split = vec![f32::NAN; rows * outputs];
                layer.forward_split(&x, &mut split);
                close(&split, "split by columns");
            }
        }
    }

    #[test]
    fn halves_of_columns_and_of_inputs_make_the_whole() {
        let (rows, outputs, inputs) = (20, 128, 128);
        let (x, w, b) = (
            values(rows * inputs, 4),
            values(outputs * inputs, 5),
            values(outputs, 6),
        );
        let want = naive(&x, &w, &b, outputs, inputs);
        for (precision, tolerance) in [(Precision::F32, 1e-4), (Precision::Bf16, 0.05)] {
            let layer = Linear::new(&w, &b, outputs, inputs, precision);
            assert!(layer.splits());
            // Column halves, side by side, are the whole.
            for half in 0..2 {
                let mut got = vec![f32::NAN; rows * outputs / 2];
                layer.forward_column_half(&x, half, &mut got);
                for r in 0..rows {
                    for c in 0..outputs / 2 {
                        let (g, w) = (
                            got[r * outputs / 2 + c],
                            want[r * outputs + half * outputs / 2 + c],
                        );
                        assert!(
                            (g - w).abs() < tolerance,
                            "{precision:?} column half {half}: {g} vs {w}"
                        );
                    }
                }
            }
            // Input halves (one with the bias) sum to the whole.
            let mut sum = vec![0f32; rows * outputs];
            for half in 0..2 {
                let part: Vec<f32> = x
                    .chunks_exact(inputs)
                    .flat_map(|row| row[half * inputs / 2..][..inputs / 2].to_vec())
                    .collect();
                let mut got = vec![f32::NAN; rows * outputs];
                layer.forward_input_half(&part, half, &mut got, half == 0);
                sum.iter_mut().zip(&got).for_each(|(s, g)| *s += g);
            }
            for (g, w) in sum.iter().zip(&want) {
                assert!(
                    (g - w).abs() < tolerance,
                    "{precision:?} input halves: {g} vs {w}"
                );
            }
        }
    }
}
