//! bfloat16 matrix products on Intel AMX (Sapphire Rapids and later): eight 1 KiB tile
//! registers and one instruction that multiplies a 16×32 tile by a 32×16 tile into a
//! 16×16 f32 tile, about sixteen times the products per cycle of AVX-512 FMA. Rust has
//! no stable AMX intrinsics, so the few instructions are written as inline assembly.
//! Linux hands out the tile state only on request (`arch_prctl`), once per process.

use std::sync::OnceLock;

/// Whether this CPU has AMX-BF16 and the kernel lets this process use it.
pub fn available() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        {
            let (max, leaf7) = (
                std::arch::x86_64::__cpuid(0).eax,
                std::arch::x86_64::__cpuid_count(7, 0),
            );
            let (amx_bf16, amx_tile) = (1 << 22, 1 << 24);
            if max < 7 || leaf7.edx & amx_bf16 == 0 || leaf7.edx & amx_tile == 0 {
                return false;
            }
            const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
            const XFEATURE_XTILEDATA: libc::c_long = 18;
            // SAFETY: a plain system call with integer arguments.
            let granted = unsafe {
                libc::syscall(
                    libc::SYS_arch_prctl,
                    ARCH_REQ_XCOMP_PERM,
                    XFEATURE_XTILEDATA,
                )
            };
            granted == 0
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        false
    })
}

/// Rows of the A and C tiles, and of the block one call computes per 16.
pub const TILE_ROWS: usize = 16;
/// bf16 values of K per step (one 64-byte tile row).
pub const TILE_K: usize = 32;

/// The tile configuration: palette 1, all eight tiles 16 rows of 64 bytes.
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    bytes_per_row: [u16; 16],
    rows: [u8; 16],
}

const CONFIG: TileConfig = TileConfig {
    palette: 1,
    start_row: 0,
    reserved: [0; 14],
    bytes_per_row: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
    rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
};

/// Runs `f` with the tiles configured on this thread, released afterwards.
///
/// SAFETY: `available()` must be true.
#[cfg(target_arch = "x86_64")]
pub unsafe fn with_tiles<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: the configuration is valid for palette 1; AMX is enabled (caller).
    unsafe {
        std::arch::asm!("ldtilecfg [{}]", in(reg) &CONFIG, options(nostack, readonly));
    }
    let out = f();
    // SAFETY: as above.
    unsafe { std::arch::asm!("tilerelease", options(nostack, nomem)) };
    out
}

/// C (32 rows × 32 f32, row stride 128 bytes) = A (32 rows of bf16, `lda` bytes apart,
/// `steps` × 32 values long) × B, where B is `steps` × 16 rows of 32 bf16 pairs (a
/// packed panel: row i holds inputs 2i and 2i+1 of each of 32 columns, 128 bytes).
///
/// SAFETY: tiles configured (`with_tiles`); `a` readable for 32 rows of `steps * 64`
/// bytes, `b` for `steps * 16` rows of 128 bytes, `c` writable for 32 × 32 f32.
#[cfg(target_arch = "x86_64")]
pub unsafe fn block(a: *const u16, lda: usize, b: *const u32, steps: usize, c: *mut f32) {
    // tmm0..3: C quarters (rows 0-15 / 16-31 × cols 0-15 / 16-31); tmm4, tmm5: A rows
    // 0-15 and 16-31 of one step; tmm6, tmm7: B cols 0-15 and 16-31 of one step.
    // SAFETY: the caller's promise on every address read and written.
    unsafe {
        std::arch::asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "2:",
            "tileloadd tmm4, [{a} + {lda}*1]",
            "tileloadd tmm5, [{a2} + {lda}*1]",
            "tileloadd tmm6, [{b} + {ldb}*1]",
            "tileloadd tmm7, [{b} + {ldb}*1 + 64]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            "add {a}, 64",
            "add {a2}, 64",
            "add {b}, 2048",
            "dec {steps}",
            "jnz 2b",
            "tilestored [{c} + {ldc}*1], tmm0",
            "tilestored [{c} + {ldc}*1 + 64], tmm1",
            "tilestored [{c2} + {ldc}*1], tmm2",
            "tilestored [{c2} + {ldc}*1 + 64], tmm3",
            a = inout(reg) a => _,
            a2 = inout(reg) a.byte_add(TILE_ROWS * lda) => _,
            lda = in(reg) lda,
            b = inout(reg) b => _,
            ldb = in(reg) 128usize,
            steps = inout(reg) steps => _,
            c = in(reg) c,
            c2 = in(reg) c.byte_add(TILE_ROWS * 128),
            ldc = in(reg) 128usize,
            options(nostack),
        );
    }
}
