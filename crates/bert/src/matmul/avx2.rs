//! AVX2 register tiles: up to 6 rows by 16 columns in 12 of the 16 vector registers,
//! so a `ROWS`-row by 32-column tile is covered in up to six passes; f32 FMA only.

use std::arch::x86_64::*;

use super::{PANEL, ROWS, Tile};

/// Rows per register tile.
const R: usize = 6;

/// See `tile_kernel`: f32 products.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn f32(t: &Tile) {
    for c0 in [0, 16] {
        if c0 >= t.cols {
            break;
        }
        for r0 in (0..t.rows).step_by(R) {
            // SAFETY (all arms): forwarded from the caller.
            unsafe {
                match (t.rows - r0).min(R) {
                    6 => rows::<6>(t, r0, c0),
                    5 => rows::<5>(t, r0, c0),
                    4 => rows::<4>(t, r0, c0),
                    3 => rows::<3>(t, r0, c0),
                    2 => rows::<2>(t, r0, c0),
                    _ => rows::<1>(t, r0, c0),
                }
            }
        }
    }
}

/// Rows `r0..r0 + N` by columns `c0..c0 + 16` of the tile.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn rows<const N: usize>(t: &Tile, r0: usize, c0: usize) {
    assert!(r0 + N <= ROWS && t.a.len() >= ROWS * t.steps && t.w.len() >= t.steps * PANEL);
    let mut acc = [[_mm256_setzero_ps(); 2]; N];
    let (a, w) = (t.a.as_ptr().cast::<f32>(), t.w.as_ptr().cast::<f32>());
    // SAFETY: reads inside `a` and `w` (asserted); stores inside `dst` by the caller's
    // promise (columns past `cols` go through a copy).
    unsafe {
        for i in 0..t.steps {
            let w0 = _mm256_load_ps(w.add(i * PANEL + c0));
            let w1 = _mm256_load_ps(w.add(i * PANEL + c0 + 8));
            for (r, acc) in acc.iter_mut().enumerate() {
                let x = _mm256_broadcast_ss(&*a.add(i * ROWS + r0 + r));
                acc[0] = _mm256_fmadd_ps(x, w0, acc[0]);
                acc[1] = _mm256_fmadd_ps(x, w1, acc[1]);
            }
        }
        let cols = (t.cols - c0).min(16);
        let b0 = _mm256_loadu_ps(t.bias.as_ptr().add(c0));
        let b1 = _mm256_loadu_ps(t.bias.as_ptr().add(c0 + 8));
        for (r, acc) in acc.iter().enumerate() {
            let row = t.dst.add((r0 + r) * t.ld + c0);
            let (v0, v1) = (_mm256_add_ps(acc[0], b0), _mm256_add_ps(acc[1], b1));
            if cols == 16 {
                _mm256_storeu_ps(row, v0);
                _mm256_storeu_ps(row.add(8), v1);
            } else {
                let mut tmp = [0f32; 16];
                _mm256_storeu_ps(tmp.as_mut_ptr(), v0);
                _mm256_storeu_ps(tmp.as_mut_ptr().add(8), v1);
                std::ptr::copy_nonoverlapping(tmp.as_ptr(), row, cols);
            }
        }
    }
}
