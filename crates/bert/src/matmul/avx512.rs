//! AVX-512 register tiles: up to `ROWS` rows by one 32-column panel in 28 vector
//! registers (two per row), one step per packed word of inputs: f32 FMA, bf16 pairs
//! (`VDPBF16PS`), int16 pairs (`VPDPWSSD`) or u8 × int8 quads (`VPDPBUSD`).

use std::arch::x86_64::*;

use super::{PANEL, ROWS, Tile};

/// int16 steps between flushes of the int32 sums into f32 (see `INT16_MAX`).
pub const INT16_FLUSH: usize = 64;

/// Masks of a panel's two halves for a last panel narrower than 32 columns.
#[inline(always)]
fn masks(cols: usize) -> (__mmask16, __mmask16) {
    let m0 = if cols >= 16 {
        0xffff
    } else {
        (1u16 << cols) - 1
    };
    let m1 = if cols >= 32 {
        0xffff
    } else if cols > 16 {
        (1u16 << (cols - 16)) - 1
    } else {
        0
    };
    (m0, m1)
}

/// One kernel: `$entry` dispatches on the tile's rows to `$rows::<N>`, whose inner
/// step is `$step` (`$acc` += `$x` (broadcast word of a row) × `$w` (panel half)).
/// `$int`: the sums are int32 (converted and scaled at the end, flushed every
/// `$flush` steps), else f32.
macro_rules! kernel {
    ($entry:ident, $rows:ident, $feat:literal, $flush:expr, $int:literal,
     |$acc:ident, $x:ident, $w:ident| $step:expr) => {
        /// See `tile_kernel`.
        #[target_feature(enable = $feat)]
        pub unsafe fn $entry(t: &Tile) {
            // SAFETY (all arms): forwarded from the caller.
            unsafe {
                match t.rows {
                    14 => $rows::<14>(t),
                    13 => $rows::<13>(t),
                    12 => $rows::<12>(t),
                    11 => $rows::<11>(t),
                    10 => $rows::<10>(t),
                    9 => $rows::<9>(t),
                    8 => $rows::<8>(t),
                    7 => $rows::<7>(t),
                    6 => $rows::<6>(t),
                    5 => $rows::<5>(t),
                    4 => $rows::<4>(t),
                    3 => $rows::<3>(t),
                    2 => $rows::<2>(t),
                    1 => $rows::<1>(t),
                    _ => {}
                }
            }
        }

        /// `lo`/`hi` hold columns 0-15 and 16-31 of each row.
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn $rows<const N: usize>(t: &Tile) {
            const { assert!(N <= ROWS) };
            assert!(t.a.len() >= ROWS * t.steps && t.w.len() >= t.steps * PANEL);
            assert!(t.bias.len() >= PANEL && t.col_scale.len() >= PANEL && t.row_scale.len() >= N);
            let mut lo = [_mm512_setzero_si512(); N];
            let mut hi = [_mm512_setzero_si512(); N];
            let mut sums = [0f32; ROWS * PANEL];
            let (a, w) = (t.a.as_ptr(), t.w.as_ptr());
            // SAFETY: reads stay inside `a` (steps of ROWS) and `w` (steps of PANEL,
            // 64-byte aligned lines); the stores inside `dst` by the caller's promise.
            unsafe {
                let mut start = 0;
                while start < t.steps {
                    let end = t.steps.min(start.saturating_add($flush));
                    for i in start..end {
                        let w0 = _mm512_load_si512(w.add(i * PANEL).cast());
                        let w1 = _mm512_load_si512(w.add(i * PANEL + 16).cast());
                        for r in 0..N {
                            let $x = _mm512_set1_epi32(*a.add(i * ROWS + r) as i32);
                            lo[r] = {
                                let ($acc, $w) = (lo[r], w0);
                                $step
                            };
                            hi[r] = {
                                let ($acc, $w) = (hi[r], w1);
                                $step
                            };
                        }
                    }
                    if $int && end < t.steps {
                        // Into f32 before the int32 sums could overflow. Inline: a call
                        // taking the sums' addresses would keep them in memory.
                        for r in 0..N {
                            let at = sums.as_mut_ptr().add(r * PANEL);
                            let v = _mm512_add_ps(_mm512_loadu_ps(at), _mm512_cvtepi32_ps(lo[r]));
                            _mm512_storeu_ps(at, v);
                            let at = at.add(16);
                            let v = _mm512_add_ps(_mm512_loadu_ps(at), _mm512_cvtepi32_ps(hi[r]));
                            _mm512_storeu_ps(at, v);
                            lo[r] = _mm512_setzero_si512();
                            hi[r] = _mm512_setzero_si512();
                        }
                    }
                    start = end;
                }
                let (m0, m1) = masks(t.cols);
                let b0 = _mm512_loadu_ps(t.bias.as_ptr());
                let b1 = _mm512_loadu_ps(t.bias.as_ptr().add(16));
                for r in 0..N {
                    let row = t.dst.add(r * t.ld);
                    let (v0, v1) = if $int {
                        let s = _mm512_set1_ps(t.row_scale[r]);
                        let v = [lo[r], hi[r]];
                        let mut out = [_mm512_setzero_ps(); 2];
                        for (half, (v, out)) in v.iter().zip(&mut out).enumerate() {
                            let c = 16 * half;
                            let offsets = _mm512_loadu_si512(t.offsets.as_ptr().add(c).cast());
                            let exact = _mm512_cvtepi32_ps(_mm512_sub_epi32(*v, offsets));
                            let sum = _mm512_add_ps(
                                exact,
                                _mm512_loadu_ps(sums.as_ptr().add(r * PANEL + c)),
                            );
                            let scale =
                                _mm512_mul_ps(s, _mm512_loadu_ps(t.col_scale.as_ptr().add(c)));
                            *out = _mm512_fmadd_ps(
                                sum,
                                scale,
                                _mm512_loadu_ps(t.bias.as_ptr().add(c)),
                            );
                        }
                        (out[0], out[1])
                    } else {
                        (
                            _mm512_add_ps(_mm512_castsi512_ps(lo[r]), b0),
                            _mm512_add_ps(_mm512_castsi512_ps(hi[r]), b1),
                        )
                    };
                    _mm512_mask_storeu_ps(row, m0, v0);
                    _mm512_mask_storeu_ps(row.add(16), m1, v1);
                }
            }
        }
    };
}

kernel!(f32, rows_f32, "avx512f", usize::MAX, false, |acc, x, w| {
    _mm512_castps_si512(_mm512_fmadd_ps(
        _mm512_castsi512_ps(x),
        _mm512_castsi512_ps(w),
        _mm512_castsi512_ps(acc),
    ))
});

kernel!(
    bf16,
    rows_bf16,
    "avx512f,avx512bw,avx512bf16",
    usize::MAX,
    false,
    |acc, x, w| {
        // Within the kernel's unsafe block: both are 512-bit vectors, __m512bh is 32 bf16
        // in the same bits.
        let (x, w) = (
            std::mem::transmute::<__m512i, __m512bh>(x),
            std::mem::transmute::<__m512i, __m512bh>(w),
        );
        _mm512_castps_si512(_mm512_dpbf16_ps(_mm512_castsi512_ps(acc), x, w))
    }
);

kernel!(
    int16,
    rows_int16,
    "avx512f,avx512bw,avx512vnni",
    INT16_FLUSH,
    true,
    |acc, x, w| _mm512_dpwssd_epi32(acc, x, w)
);

kernel!(
    int8,
    rows_int8,
    "avx512f,avx512bw,avx512vnni",
    usize::MAX,
    true,
    |acc, x, w| _mm512_dpbusd_epi32(acc, x, w)
);
