//! The encoder's dense layers, `y = x·Wᵀ + b`, with W packed once at load time into
//! panels of `PANEL` output columns (for each packed word of inputs, the panel's 32
//! words are contiguous), so the inner loop streams one panel while words of `x` are
//! broadcast. The word format is the kernel's (`kernel.rs`): one f32, two bf16, two
//! int16 or four int8 inputs. Rows of `x` are copied into tiles (input-major) per
//! block, quantised per row for the integer kernels. Register tiles are in `avx512.rs`
//! (up to `ROWS` rows by one panel) and `avx2.rs`, AMX tiles in `../amx.rs`; a
//! portable kernel covers the rest. Nothing is repacked per call, which is what makes
//! small (single-question) products fast.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

use multiversion::multiversion;

use crate::kernel::{Format, Kernel};

/// Output columns per packed panel.
pub const PANEL: usize = 32;
/// Rows of `x` per kernel tile.
const ROWS: usize = 14;
/// Rows of `x` per block: a block's inputs stay in the core's L2 cache while every
/// panel passes over them.
const BLOCK_ROWS: usize = 128;
/// Largest int16 magnitude: with at most `avx512::INT16_FLUSH` steps of two products
/// between flushes, int32 sums cannot overflow (2 · 64 · 4095² < 2³¹).
const INT16_MAX: f32 = 4095.0;
/// Largest int8 magnitude (activations are offset by 128 into u8 for `VPDPBUSD`; four
/// products of at most 255 · 127 per step never approach 2³¹ at these widths).
const INT8_MAX: f32 = 127.0;
/// Packed int8 steps per stored column sum (the u8 offset's correction).
const INT8_CHUNK: usize = 8;

/// 64-byte aligned storage, so panel loads never straddle cache lines.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u32; 16]);

/// A packed word: an f32's bits, two bf16 or int16, or four int8 (input order from
/// the low bits).
type Word = u32;

/// bfloat16 of `x`, rounded to nearest even (NaN stays NaN).
fn bf16(x: f32) -> u32 {
    let bits = x.to_bits();
    if x.is_nan() {
        return (bits >> 16) | 0x40;
    }
    (bits + 0x7fff + ((bits >> 16) & 1)) >> 16
}

/// The largest magnitude of a format's integers.
fn int_max(format: Format) -> f32 {
    match format {
        Format::Int8 => INT8_MAX,
        _ => INT16_MAX,
    }
}

/// The scale that maps `values` onto integers up to `max` (1 when all are zero).
fn scale_of(values: &[f32], max: f32) -> f32 {
    let m = values.iter().fold(0f32, |m, v| m.max(v.abs()));
    if m > 0.0 && m.is_finite() {
        m / max
    } else {
        1.0
    }
}

/// Word `i` of `row` in `format`, integers divided by `scale` first (inputs past the
/// row are zero; `offset` is added to int8 values: 128 for activations).
#[inline(always)]
fn word(row: &[f32], i: usize, format: Format, inv_scale: f32, offset: i32) -> Word {
    let g = format.group();
    let at = |j: usize| row.get(i * g + j).copied().unwrap_or(0.0);
    match format {
        Format::F32 => row[i].to_bits(),
        Format::Bf16 => bf16(at(0)) | (bf16(at(1)) << 16),
        Format::Int16 => {
            let q =
                |j| ((at(j) * inv_scale).round().clamp(-INT16_MAX, INT16_MAX) as i32) as u16 as u32;
            q(0) | (q(1) << 16)
        }
        Format::Int8 => (0..4).fold(0u32, |w, j| {
            let q = (at(j) * inv_scale).round().clamp(-INT8_MAX, INT8_MAX) as i32 + offset;
            w | ((q as u8 as u32) << (8 * j))
        }),
    }
}

/// A dense layer with packed weights.
pub struct Linear {
    inputs: usize,
    outputs: usize,
    kernel: Kernel,
    /// `panels()` panels of `steps() * PANEL` words (zero past `outputs`).
    packed: Vec<Line>,
    /// `panels() * PANEL` biases (zero past `outputs`).
    bias: Vec<f32>,
    /// Integer kernels: each column's weight scale (`panels() * PANEL`), else empty.
    scales: Vec<f32>,
    /// int8: each column's sum of weights per `INT8_CHUNK` steps, by panel, chunk and
    /// column, to take the activations' offset of 128 back out.
    sums: Vec<i32>,
}

impl std::fmt::Debug for Linear {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Linear({} -> {}, {})",
            self.inputs,
            self.outputs,
            self.kernel.name()
        )
    }
}

impl Linear {
    /// `weight` is `outputs` rows of `inputs` (PyTorch's layout), `bias` `outputs` long.
    /// `kernel` must be available (`Kernel::check`).
    pub fn new(
        weight: &[f32],
        bias: &[f32],
        outputs: usize,
        inputs: usize,
        kernel: Kernel,
    ) -> Linear {
        assert_eq!(weight.len(), outputs * inputs, "weight shape");
        assert_eq!(bias.len(), outputs, "bias shape");
        if let Err(e) = kernel.check() {
            panic!("{e}");
        }
        let format = kernel.format();
        let mut layer = Linear {
            inputs,
            outputs,
            kernel,
            packed: Vec::new(),
            bias: Vec::new(),
            scales: Vec::new(),
            sums: Vec::new(),
        };
        let (panels, steps) = (layer.panels(), layer.steps());
        if format.scaled() {
            layer.scales = vec![1.0; panels * PANEL];
        }
        let chunks = steps.div_ceil(INT8_CHUNK);
        if format == Format::Int8 {
            layer.sums = vec![0; panels * chunks * PANEL];
        }
        let mut flat = vec![0 as Word; panels * steps * PANEL];
        for o in 0..outputs {
            let (panel, col) = (o / PANEL, o % PANEL);
            let row = &weight[o * inputs..][..inputs];
            let scale = if format.scaled() {
                let s = scale_of(row, int_max(format));
                layer.scales[o] = s;
                s
            } else {
                1.0
            };
            for i in 0..steps {
                let w = word(row, i, format, 1.0 / scale, 0);
                flat[(panel * steps + i) * PANEL + col] = w;
                if format == Format::Int8 {
                    let sum: i32 = w.to_le_bytes().iter().map(|&b| b as i8 as i32).sum();
                    layer.sums[(panel * chunks + i / INT8_CHUNK) * PANEL + col] += sum;
                }
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

    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    fn panels(&self) -> usize {
        self.outputs.div_ceil(PANEL)
    }

    /// Packed rows of a panel: one per word of inputs, padded to whole AMX steps.
    fn steps(&self) -> usize {
        match self.kernel {
            Kernel::Amx => bf16_width(self.inputs) / 2,
            k => self.inputs.div_ceil(k.format().group()),
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

    /// The packed rows of a panel (see `steps`) that `inputs` covers (`inputs.start`
    /// a multiple of the word's inputs).
    fn step_range(&self, inputs: &std::ops::Range<usize>) -> std::ops::Range<usize> {
        match self.kernel {
            Kernel::Amx => inputs.start / 2..inputs.start / 2 + bf16_width(inputs.len()) / 2,
            k => {
                let g = k.format().group();
                debug_assert!(inputs.start.is_multiple_of(g));
                inputs.start / g..inputs.start / g + inputs.len().div_ceil(g)
            }
        }
    }

    /// int8: 128 times each column of `panel`'s weight sums over `steps` (the
    /// activations' offset to take back out of the products).
    fn int8_offsets(&self, panel: usize, steps: &std::ops::Range<usize>) -> [i32; PANEL] {
        let chunks = self.steps().div_ceil(INT8_CHUNK);
        assert!(
            steps.start.is_multiple_of(INT8_CHUNK),
            "int8 parts start at whole chunks"
        );
        let mut sums = [0i32; PANEL];
        for chunk in steps.start / INT8_CHUNK..steps.end.div_ceil(INT8_CHUNK) {
            let at = &self.sums[(panel * chunks + chunk) * PANEL..][..PANEL];
            sums.iter_mut().zip(at).for_each(|(s, a)| *s += a);
        }
        sums.map(|s| 128 * s)
    }

    /// Computes `part` for `rows` rows of `x` (each `part.inputs.len()` long) into `out`.
    fn part(&self, x: &[f32], rows: usize, out: Out, part: &Part) {
        if rows == 0 {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if self.kernel == Kernel::Amx {
            // SAFETY: an AMX layer exists only where AMX is available (`new`).
            unsafe { super::amx::with_tiles(|| self.part_amx(x, rows, out, part)) };
            return;
        }
        let weights = self.weights();
        let (k, all_steps) = (part.inputs.len(), self.steps());
        let steps = self.step_range(&part.inputs);
        let n_steps = steps.len();
        let format = self.kernel.format();
        PACKED.with_borrow_mut(|(packed, row_scales)| {
            for block in (0..rows).step_by(BLOCK_ROWS) {
                let block_rows = BLOCK_ROWS.min(rows - block);
                pack_rows(
                    &x[block * k..(block + block_rows) * k],
                    k,
                    format,
                    packed,
                    row_scales,
                );
                for panel in part.panels.clone() {
                    let w =
                        &weights[(panel * all_steps + steps.start) * PANEL..][..n_steps * PANEL];
                    let bias = part.bias(&self.bias, panel);
                    let offsets = if format == Format::Int8 {
                        self.int8_offsets(panel, &steps)
                    } else {
                        [0; PANEL]
                    };
                    let col_scale = if format.scaled() {
                        &self.scales[panel * PANEL..][..PANEL]
                    } else {
                        &ONES[..]
                    };
                    let cols = PANEL.min(self.outputs - panel * PANEL);
                    let col = part.out_col0 + (panel - part.panels.start) * PANEL;
                    for tile in (0..block_rows).step_by(ROWS) {
                        let n = ROWS.min(block_rows - tile);
                        let tile = Tile {
                            a: &packed[tile * n_steps..][..ROWS * n_steps],
                            rows: n,
                            steps: n_steps,
                            w,
                            bias,
                            row_scale: &row_scales[tile..][..ROWS],
                            col_scale,
                            offsets: &offsets,
                            dst: out.at((block + tile) * part.ld + col),
                            ld: part.ld,
                            cols,
                        };
                        // SAFETY: rows block+tile..+n and these columns are inside `out`
                        // (checked by the public callers) and no other caller writes them;
                        // the kernel is available (`new`).
                        unsafe { tile_kernel(self.kernel, &tile) };
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
    /// A block of input rows in tile order (see `pack_rows`) and their scales, reused
    /// between calls.
    static PACKED: std::cell::RefCell<(Vec<Word>, Vec<f32>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
    /// A block of input rows rounded to bf16 (see `part_amx`), reused between calls.
    static ROUNDED: std::cell::RefCell<Vec<u16>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Unit scales, for kernels that do not scale.
static ONES: [f32; PANEL] = [1.0; PANEL];

/// Inputs of a bf16 row: `k` rounded up to whole AMX steps.
fn bf16_width(k: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    let step = super::amx::TILE_K;
    #[cfg(not(target_arch = "x86_64"))]
    let step = 2;
    k.div_ceil(step) * step
}

/// Copies `x` (rows of `k`) into `packed` tile by tile in `format`, each tile a run
/// of steps of `ROWS` words (the tile's rows at that word of inputs, zero past the last
/// row), so the kernel reads its broadcasts in order; integer formats are scaled per
/// row (the scales in `scales`, one per row, tiles padded).
fn pack_rows(x: &[f32], k: usize, format: Format, packed: &mut Vec<Word>, scales: &mut Vec<f32>) {
    let rows = x.len() / k;
    let steps = k.div_ceil(format.group());
    let tiles = rows.div_ceil(ROWS);
    packed.clear();
    packed.resize(tiles * ROWS * steps, 0);
    scales.clear();
    scales.resize(tiles * ROWS, 1.0);
    // Rows past the last are zero: as integers that is 0, or 128 offset u8s (int8),
    // whose products are never stored.
    for (t, tile) in packed.chunks_exact_mut(ROWS * steps).enumerate() {
        for r in 0..ROWS.min(rows - t * ROWS) {
            let row = &x[(t * ROWS + r) * k..][..k];
            match format {
                Format::F32 => {
                    for (i, v) in row.iter().enumerate() {
                        tile[i * ROWS + r] = v.to_bits();
                    }
                }
                Format::Bf16 => {
                    for i in 0..steps {
                        tile[i * ROWS + r] = word(row, i, format, 1.0, 0);
                    }
                }
                Format::Int16 => {
                    let scale = scale_of(row, INT16_MAX);
                    scales[t * ROWS + r] = scale;
                    // |v / scale| ≤ INT16_MAX by the scale's choice: no clamp needed.
                    let inv = 1.0 / scale;
                    let q = |v: f32| (v * inv).round_ties_even() as i32 as u16 as u32;
                    for (i, pair) in row.chunks(2).enumerate() {
                        let high = pair.get(1).map_or(0, |&v| q(v));
                        tile[i * ROWS + r] = q(pair[0]) | (high << 16);
                    }
                }
                Format::Int8 => {
                    let scale = scale_of(row, int_max(format));
                    scales[t * ROWS + r] = scale;
                    let (inv, offset) = (1.0 / scale, if format == Format::Int8 { 128 } else { 0 });
                    for i in 0..steps {
                        tile[i * ROWS + r] = word(row, i, format, inv, offset);
                    }
                }
            }
        }
    }
}

/// One tile of a product: `rows` rows (packed in `a`, `steps` steps of `ROWS` words)
/// times one panel `w` (`steps` rows of `PANEL` words), into `cols` columns of `dst`
/// (row stride `ld`): `(sum - offsets[c]) · row_scale[r] · col_scale[c] + bias[c]`.
struct Tile<'a> {
    a: &'a [Word],
    rows: usize,
    steps: usize,
    w: &'a [Word],
    bias: &'a [f32],
    /// Integer kernels' scales (`ROWS` and `PANEL` long; ones otherwise).
    row_scale: &'a [f32],
    col_scale: &'a [f32],
    /// int8's correction for the activations' offset (zeros otherwise).
    offsets: &'a [i32; PANEL],
    dst: *mut f32,
    ld: usize,
    cols: usize,
}

/// SAFETY: `tile.dst` must have `tile.rows` rows of `tile.ld` with `tile.cols`
/// writable values each, and `kernel` must be available.
unsafe fn tile_kernel(kernel: Kernel, tile: &Tile) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY (all arms): the CPU has the kernel's features; the shapes are the caller's
    // promise.
    unsafe {
        match kernel {
            Kernel::Avx512F32 => return avx512::f32(tile),
            Kernel::Avx512Bf16 => return avx512::bf16(tile),
            Kernel::Avx512Int16 => return avx512::int16(tile),
            Kernel::Avx512Int8 => return avx512::int8(tile),
            Kernel::Avx2 => return avx2::f32(tile),
            Kernel::Amx | Kernel::Portable => {}
        }
    }
    debug_assert_eq!(kernel.format(), Format::F32);
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

    /// Worst-case error of a kernel's product over `inputs` values in [-1, 1]: each
    /// rounded or quantised factor is off by at most half a step of its scale.
    fn tolerance(kernel: Kernel, inputs: usize) -> f32 {
        let half_step = match kernel.format() {
            Format::F32 => return 1e-4,
            Format::Bf16 => 2f32.powi(-9),
            Format::Int16 => 0.5 / INT16_MAX,
            Format::Int8 => 0.5 / INT8_MAX,
        };
        inputs as f32 * 2.0 * half_step + 1e-3
    }

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2_654_435_761) ^ seed) % 1000) as f32 / 500.0 - 1.0)
            .collect()
    }

    #[test]
    fn matches_the_naive_product_at_awkward_shapes() {
        // Outputs not a multiple of the panel, rows not a multiple of the tile, rows
        // past one block, inputs not a multiple of an AMX step or of a word, inputs past
        // one int16 flush (128).
        let shapes = [
            (1, 40, 17),
            (13, 64, 33),
            (300, 70, 24),
            (9, 31, 8),
            (7, 33, 390),
            (15, 96, 3),
        ];
        for (rows, outputs, inputs) in shapes {
            let (x, w, b) = (
                values(rows * inputs, 1),
                values(outputs * inputs, 2),
                values(outputs, 3),
            );
            let want = naive(&x, &w, &b, outputs, inputs);
            for kernel in Kernel::available_all() {
                let tolerance = tolerance(kernel, inputs);
                let layer = Linear::new(&w, &b, outputs, inputs, kernel);
                let mut got = vec![f32::NAN; rows * outputs];
                layer.forward(&x, &mut got);
                let close = |got: &[f32], how: &str| {
                    for (g, w) in got.iter().zip(&want) {
                        assert!(
                            (g - w).abs() < tolerance,
                            "{rows}x{outputs}x{inputs} {kernel} {how}: {g} vs {w}"
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
        for kernel in Kernel::available_all() {
            let tolerance = tolerance(kernel, inputs);
            let layer = Linear::new(&w, &b, outputs, inputs, kernel);
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
                            "{kernel} column half {half}: {g} vs {w}"
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
                    "{kernel} input halves: {g} vs {w}"
                );
            }
        }
    }
}
