//! The product kernels, one per CPU class, chosen at run time: each packs the weights
//! once at load in its own format (f32, bf16 pairs, int16 pairs or int8 quads) and
//! computes register tiles of `matmul::ROWS` rows by one panel of columns.

/// A kernel for the dense layers' products.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// bf16 tiles on Intel AMX (`amx.rs`).
    Amx,
    /// int16 pairs with int32 sums (`VPDPWSSD`, AVX-512 VNNI): activations scaled per
    /// row, weights per column, 13 bits each.
    Avx512Int16,
    /// u8 activations by int8 weights (`VPDPBUSD`, AVX-512 VNNI). Lossy beyond the
    /// bound `auto` keeps, so only on request.
    Avx512Int8,
    /// bf16 pairs with f32 sums (`VDPBF16PS`, AVX-512 BF16).
    Avx512Bf16,
    /// f32 FMA on AVX-512.
    Avx512F32,
    /// f32 FMA on AVX2.
    Avx2,
    /// Plain Rust, compiled for the widest instruction set found at run time.
    Portable,
}

/// How a kernel's packed words hold inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    F32,
    /// Two bf16 (inputs 2i, 2i+1) per word.
    Bf16,
    /// Two int16 per word.
    Int16,
    /// Four int8 (weights) or u8 (activations) per word.
    Int8,
}

impl Format {
    /// Inputs per packed word.
    pub(crate) fn group(self) -> usize {
        match self {
            Format::F32 => 1,
            Format::Bf16 | Format::Int16 => 2,
            Format::Int8 => 4,
        }
    }

    /// Whether values are integers scaled per activation row and weight column.
    pub(crate) fn scaled(self) -> bool {
        matches!(self, Format::Int16 | Format::Int8)
    }
}

impl Kernel {
    /// Every kernel, in `auto`'s order of preference (fastest first on the machines
    /// measured; see BENCHMARKS.md): int16 is lossy yet no faster than f32 there, so
    /// it comes after it, and int8 last as it is never chosen by `auto`.
    pub const ALL: [Kernel; 7] = [
        Kernel::Amx,
        Kernel::Avx512Bf16,
        Kernel::Avx512F32,
        Kernel::Avx512Int16,
        Kernel::Avx2,
        Kernel::Portable,
        Kernel::Avx512Int8,
    ];

    /// The name used by flags and logs.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Amx => "amx",
            Kernel::Avx512Int16 => "avx512-int16",
            Kernel::Avx512Int8 => "avx512-int8",
            Kernel::Avx512Bf16 => "avx512-bf16",
            Kernel::Avx512F32 => "avx512",
            Kernel::Avx2 => "avx2",
            Kernel::Portable => "portable",
        }
    }

    /// The kernel named `name` (see [`Self::name`]).
    pub fn parse(name: &str) -> Option<Kernel> {
        Kernel::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether this CPU (and, for AMX, the operating system) runs this kernel.
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            match self {
                Kernel::Amx => super::amx::available(),
                Kernel::Avx512Int16 | Kernel::Avx512Int8 => {
                    has!("avx512f") && has!("avx512bw") && has!("avx512vnni")
                }
                Kernel::Avx512Bf16 => has!("avx512f") && has!("avx512bw") && has!("avx512bf16"),
                Kernel::Avx512F32 => has!("avx512f"),
                Kernel::Avx2 => has!("avx2") && has!("fma"),
                Kernel::Portable => true,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        matches!(self, Kernel::Portable)
    }

    /// The kernels this CPU runs, in `auto`'s order.
    pub fn available_all() -> Vec<Kernel> {
        Kernel::ALL.into_iter().filter(|k| k.available()).collect()
    }

    /// `auto`: the first available kernel whose vectors stay within a cosine of 0.999
    /// of f32's.
    pub fn choose() -> Kernel {
        Kernel::ALL
            .into_iter()
            .find(|k| k.available() && *k != Kernel::Avx512Int8)
            .unwrap_or(Kernel::Portable)
    }

    /// The fastest exact (f32) kernel this CPU runs.
    pub fn best_f32() -> Kernel {
        [Kernel::Avx512F32, Kernel::Avx2]
            .into_iter()
            .find(|k| k.available())
            .unwrap_or(Kernel::Portable)
    }

    /// The fastest bf16 kernel this CPU runs, if any.
    pub fn best_bf16() -> Option<Kernel> {
        [Kernel::Amx, Kernel::Avx512Bf16]
            .into_iter()
            .find(|k| k.available())
    }

    /// Whether the products are rounded (bf16) or quantised (int16, int8).
    pub fn lossy(self) -> bool {
        !matches!(self, Kernel::Avx512F32 | Kernel::Avx2 | Kernel::Portable)
    }

    pub(crate) fn format(self) -> Format {
        match self {
            Kernel::Amx | Kernel::Avx512Bf16 => Format::Bf16,
            Kernel::Avx512Int16 => Format::Int16,
            Kernel::Avx512Int8 => Format::Int8,
            Kernel::Avx512F32 | Kernel::Avx2 | Kernel::Portable => Format::F32,
        }
    }

    /// Refuses a kernel this CPU lacks, naming what it needs.
    pub fn check(self) -> Result<Kernel, String> {
        if self.available() {
            return Ok(self);
        }
        let needs = match self {
            Kernel::Amx => "AMX-BF16 tiles granted by the operating system",
            Kernel::Avx512Int16 | Kernel::Avx512Int8 => "AVX-512 VNNI",
            Kernel::Avx512Bf16 => "AVX-512 BF16",
            Kernel::Avx512F32 => "AVX-512F",
            Kernel::Avx2 => "AVX2 and FMA",
            Kernel::Portable => "nothing",
        };
        let have: Vec<&str> = Kernel::available_all().iter().map(|k| k.name()).collect();
        Err(format!(
            "kernel {} needs {needs}, which this CPU lacks (it runs: {})",
            self.name(),
            have.join(", ")
        ))
    }
}

impl std::fmt::Display for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Kernel {
    type Err = String;
    fn from_str(s: &str) -> Result<Kernel, String> {
        Kernel::parse(s).ok_or_else(|| {
            let names: Vec<&str> = Kernel::ALL.iter().map(|k| k.name()).collect();
            format!("unknown kernel {s:?} (expected {})", names.join(", "))
        })
    }
}
