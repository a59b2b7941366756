//! The kernel catalogue: every SPIR-V module the backend can ask for, as a typed [`KernelId`].
//!
//! `tools/shader-gen` compiles exactly [`KernelId::all`] (it includes this file by path), so a
//! kernel the Rust side names is either in that list or fails the catalogue test, never a
//! user's run. Each id knows its module name, its source file under `shaders/` and the
//! defines it is compiled with.
//!
//! Names follow one grammar: the family, then the tensor type for per-type kernels, then each
//! option that is not the default, in the order the id's fields declare them, joined by `.`:
//! `rms_norm`, `embed.q4_k`, `matmul_q8.q6_k.idot.sgx.rope`, `attention.sg.prelude`.

use zinc_formats::GgmlType;

/// How a product over 8-bit activations multiplies four bytes at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dot {
    /// Widened to 32-bit multiply-adds.
    Widened,
    /// The packed integer dot product instruction (`VK_KHR_shader_integer_dot_product`).
    Integer,
}

impl Dot {
    /// The instruction a device with (or without) integer dot products uses.
    pub fn of(int_dot: bool) -> Dot {
        if int_dot {
            Dot::Integer
        } else {
            Dot::Widened
        }
    }
}

/// How the 8-bit row kernel (`shaders/matmul/matmul_q8.comp`) sums each output's partial results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RowReduce {
    /// Through workgroup memory: every device.
    Workgroup,
    /// With one subgroup reduction (32-wide subgroups, integer dot products).
    Subgroup,
    /// Subgroup sums with the activation row staged in workgroup memory by 512-wide
    /// workgroups, the norm and residual add foldable into it (decode).
    SharedX,
}

/// What the 8-bit row kernel does with its results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RowEpilogue {
    /// Stores them.
    Plain,
    /// Q, K and V of a llama layer: RoPE, then K and V into the KV pages.
    RopeKv,
    /// Gate and up side by side: the SwiGLU and its 8-bit copy (with [`RowReduce::SharedX`]).
    Glu,
}

/// The tile of the matrix-unit product (`shaders/matmul/matmul_coopmat.comp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoopmatTile {
    /// 64 × 128.
    Plain,
    /// 128 × 128, eight subgroups.
    Wide,
    /// 64 × 64, for chunks of up to 64 rows (batched decode), which the other tiles would
    /// pad to 128.
    Short,
    /// The short tile with the k loop split over the grid's z, each slice of partial sums
    /// added by [`KernelId::SplitSum`]: products of few rows, whose plain grids leave most of
    /// the device idle.
    ShortSplit,
    /// 64 slots of one expert.
    Grouped,
}

impl CoopmatTile {
    /// Every tile, in the order shader-gen builds them.
    pub const ALL: [CoopmatTile; 5] =
        [CoopmatTile::Plain, CoopmatTile::Wide, CoopmatTile::Short, CoopmatTile::ShortSplit, CoopmatTile::Grouped];
}

/// What the expert decode kernel (`shaders/matmul/matvec_q8.comp`) does with its results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExpertEpilogue {
    /// Stores them.
    Plain,
    /// Gate and up: the SwiGLU.
    Swiglu,
    /// Down: the weighted sum over the token's expert slots.
    Combine,
}

/// One compute kernel variant: one SPIR-V module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelId {
    /// RMS norm; `low_mem` keeps elements in registers for devices with little workgroup memory.
    RmsNorm { low_mem: bool },
    /// RoPE on its own.
    Rope,
    /// Residual adds, SwiGLU and scaling.
    Elementwise,
    /// Rows gathered by index.
    GatherRows,
    /// A logit row's likeliest tokens and log-normaliser (`LogitRows::LastTop`).
    LogitSummary,
    /// K and V rows into the KV pages.
    KvStore,
    /// RoPE, then the KV store.
    RopeKvStore,
    /// One-row attention; softmax reductions as subgroup operations, and the decode rows'
    /// head norms, RoPE and KV store done in each head's workgroup (`prelude`).
    Attention { subgroup: bool, prelude: bool },
    /// Tiled attention for prompt chunks, on matrix units where they exist.
    AttentionTiled { matrix_units: bool },
    /// Merges the partial results of attention split over keys.
    AttentionMerge,
    /// An f32 row to 8-bit blocks of 32.
    QuantizeQ8,
    /// 8-bit blocks to halves for the matrix units.
    Q8ToHalf,
    /// SwiGLU with its 8-bit copy.
    SwigluQ8,
    /// Expert slots grouped by expert.
    MoeGroup,
    /// The router's top-k.
    MoeRoute,
    /// The weighted sum of expert outputs.
    MoeCombine,
    /// Token embedding rows of one type.
    Embed(GgmlType),
    /// The row kernel over f32 activations (dequantizes any type); `subgroup` sums for the
    /// f32 MoE router.
    Matmul { ty: GgmlType, subgroup: bool },
    /// 32 × 32 float tiles for prompt chunks over f32 activations.
    MatmulFloatTiled { ty: GgmlType, low_mem: bool },
    /// Prompt-chunk products on matrix units.
    MatmulCoopmat { ty: GgmlType, tile: CoopmatTile },
    /// Adds the partial sums of a matrix-unit product split over k into its outputs.
    SplitSum,
    /// 64 × 64 integer tiles for prompt chunks.
    MatmulQ8Tiled { ty: GgmlType, dot: Dot },
    /// The 8-bit row kernel: decode and small batches.
    MatmulQ8 { ty: GgmlType, dot: Dot, reduce: RowReduce, epilogue: RowEpilogue },
    /// Expert products at decode, features grouped per subgroup.
    MatvecQ8 { ty: GgmlType, dot: Dot, epilogue: ExpertEpilogue },
}

/// Whether products over `ty` take 8-bit activations: the 32-element formats and the
/// K-quants and IQ4_XS that `shaders/blocks/kblock.glsl` reads as 32-element blocks.
pub fn q8_activations(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(ty, Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | IQ4_NL | IQ4_XS)
}

/// Whether products over `ty` have the dequantizing float kernels: every type but the
/// 32-element block formats (IQ4_NL included, whose blocks also fit them).
fn float_products(ty: GgmlType) -> bool {
    use GgmlType::*;
    !matches!(ty, Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0)
}

impl KernelId {
    /// Every variant shader-gen builds, in a fixed order.
    pub fn all() -> Vec<KernelId> {
        use KernelId::*;
        let mut out = vec![
            RmsNorm { low_mem: false },
            Rope,
            Elementwise,
            GatherRows,
            LogitSummary,
            KvStore,
            RopeKvStore,
            Attention { subgroup: false, prelude: false },
            AttentionTiled { matrix_units: false },
            AttentionTiled { matrix_units: true },
            AttentionMerge,
            QuantizeQ8,
            Q8ToHalf,
            SwigluQ8,
            MoeGroup,
            MoeRoute,
            MoeCombine,
            Attention { subgroup: true, prelude: false },
            Attention { subgroup: false, prelude: true },
            Attention { subgroup: true, prelude: true },
            RmsNorm { low_mem: true },
            SplitSum,
        ];
        for ty in GgmlType::ALL {
            out.push(Embed(ty));
            if q8_activations(ty) {
                for tile in CoopmatTile::ALL {
                    out.push(MatmulCoopmat { ty, tile });
                }
                for dot in [Dot::Widened, Dot::Integer] {
                    out.push(MatmulQ8 { ty, dot, reduce: RowReduce::Workgroup, epilogue: RowEpilogue::Plain });
                    out.push(MatmulQ8Tiled { ty, dot });
                    for epilogue in [ExpertEpilogue::Plain, ExpertEpilogue::Swiglu, ExpertEpilogue::Combine] {
                        out.push(MatvecQ8 { ty, dot, epilogue });
                    }
                    out.push(MatmulQ8 { ty, dot, reduce: RowReduce::Workgroup, epilogue: RowEpilogue::RopeKv });
                    if dot == Dot::Integer {
                        for epilogue in [RowEpilogue::Plain, RowEpilogue::RopeKv] {
                            out.push(MatmulQ8 { ty, dot, reduce: RowReduce::Subgroup, epilogue });
                        }
                        for epilogue in [RowEpilogue::Plain, RowEpilogue::RopeKv, RowEpilogue::Glu] {
                            out.push(MatmulQ8 { ty, dot, reduce: RowReduce::SharedX, epilogue });
                        }
                    }
                }
            }
            if float_products(ty) {
                out.push(Matmul { ty, subgroup: false });
                out.push(MatmulFloatTiled { ty, low_mem: false });
                if ty == GgmlType::F32 {
                    out.push(Matmul { ty, subgroup: true });
                }
                out.push(MatmulFloatTiled { ty, low_mem: true });
            }
        }
        out
    }

    /// The family: the first part of the name.
    fn family(self) -> &'static str {
        use KernelId::*;
        match self {
            RmsNorm { .. } => "rms_norm",
            Rope => "rope",
            Elementwise => "elementwise",
            GatherRows => "gather_rows",
            LogitSummary => "logit_summary",
            KvStore => "kv_store",
            RopeKvStore => "rope_kv_store",
            Attention { .. } => "attention",
            AttentionTiled { .. } => "attention_tiled",
            AttentionMerge => "attention_merge",
            QuantizeQ8 => "quantize_q8",
            Q8ToHalf => "q8_to_half",
            SwigluQ8 => "swiglu_q8",
            MoeGroup => "moe_group",
            MoeRoute => "moe_route",
            MoeCombine => "moe_combine",
            Embed(_) => "embed",
            Matmul { .. } => "matmul",
            MatmulFloatTiled { .. } => "matmul_float_tiled",
            MatmulCoopmat { .. } => "matmul_coopmat",
            SplitSum => "split_sum",
            MatmulQ8Tiled { .. } => "matmul_q8_tiled",
            MatmulQ8 { .. } => "matmul_q8",
            MatvecQ8 { .. } => "matvec_q8",
        }
    }

    /// The tensor type of a per-type kernel.
    pub fn ty(self) -> Option<GgmlType> {
        use KernelId::*;
        match self {
            Embed(ty)
            | Matmul { ty, .. }
            | MatmulFloatTiled { ty, .. }
            | MatmulCoopmat { ty, .. }
            | MatmulQ8Tiled { ty, .. }
            | MatmulQ8 { ty, .. }
            | MatvecQ8 { ty, .. } => Some(ty),
            _ => None,
        }
    }

    /// The options that are not the default, in field order.
    fn options(self) -> Vec<&'static str> {
        use KernelId::*;
        let flag = |on: bool, name: &'static str| on.then_some(name);
        let dot = |d: Dot| flag(d == Dot::Integer, "idot");
        let opts = match self {
            RmsNorm { low_mem } | MatmulFloatTiled { low_mem, .. } => vec![flag(low_mem, "lowmem")],
            Attention { subgroup, prelude } => vec![flag(subgroup, "sg"), flag(prelude, "prelude")],
            AttentionTiled { matrix_units } => vec![flag(matrix_units, "cm")],
            Matmul { subgroup, .. } => vec![flag(subgroup, "sg")],
            MatmulCoopmat { tile, .. } => vec![match tile {
                CoopmatTile::Plain => None,
                CoopmatTile::Wide => Some("wide"),
                CoopmatTile::Short => Some("short"),
                CoopmatTile::ShortSplit => Some("short.splitk"),
                CoopmatTile::Grouped => Some("grouped"),
            }],
            MatmulQ8Tiled { dot: d, .. } => vec![dot(d)],
            MatmulQ8 { dot: d, reduce, epilogue, .. } => vec![
                dot(d),
                match reduce {
                    RowReduce::Workgroup => None,
                    RowReduce::Subgroup => Some("sg"),
                    RowReduce::SharedX => Some("sgx"),
                },
                match epilogue {
                    RowEpilogue::Plain => None,
                    RowEpilogue::RopeKv => Some("rope"),
                    RowEpilogue::Glu => Some("glu"),
                },
            ],
            MatvecQ8 { dot: d, epilogue, .. } => vec![
                dot(d),
                match epilogue {
                    ExpertEpilogue::Plain => None,
                    ExpertEpilogue::Swiglu => Some("swiglu"),
                    ExpertEpilogue::Combine => Some("combine"),
                },
            ],
            _ => vec![],
        };
        opts.into_iter().flatten().collect()
    }

    /// The module's name (see the module comment for the grammar).
    pub fn name(self) -> String {
        let mut parts = vec![self.family()];
        parts.extend(self.ty().map(GgmlType::name));
        parts.extend(self.options());
        parts.join(".")
    }

    /// Its source file in `shaders/`.
    #[allow(dead_code)] // tools/shader-gen and the tests
    pub fn source(self) -> &'static str {
        use KernelId::*;
        match self {
            AttentionTiled { matrix_units: true } => "attention/attention_tiled_cm.comp",
            MatmulQ8 { .. } => "matmul/matmul_q8.comp",
            MatmulQ8Tiled { .. } => "matmul/matmul_q8_tiled.comp",
            MatmulCoopmat { .. } => "matmul/matmul_coopmat.comp",
            SplitSum => "matmul/split_sum.comp",
            MatvecQ8 { .. } => "matmul/matvec_q8.comp",
            MatmulFloatTiled { .. } => "matmul/matmul_float_tiled.comp",
            Matmul { .. } => "matmul/matmul.comp",
            Embed(_) => "rows/embed.comp",
            RmsNorm { .. } => "rows/rms_norm.comp",
            Rope => "rows/rope.comp",
            Elementwise => "rows/elementwise.comp",
            GatherRows => "rows/gather_rows.comp",
            LogitSummary => "rows/logit_summary.comp",
            KvStore => "attention/kv_store.comp",
            RopeKvStore => "attention/rope_kv_store.comp",
            Attention { .. } => "attention/attention.comp",
            AttentionTiled { matrix_units: false } => "attention/attention_tiled.comp",
            AttentionMerge => "attention/attention_merge.comp",
            QuantizeQ8 => "rows/quantize_q8.comp",
            Q8ToHalf => "rows/q8_to_half.comp",
            SwigluQ8 => "rows/swiglu_q8.comp",
            MoeGroup => "moe/moe_group.comp",
            MoeRoute => "moe/moe_route.comp",
            MoeCombine => "moe/moe_combine.comp",
        }
    }

    /// The defines it is compiled with, in the order they are passed.
    #[allow(dead_code)] // tools/shader-gen and the tests
    pub fn defines(self) -> Vec<(&'static str, String)> {
        use KernelId::*;
        let b = |on: bool| u32::from(on).to_string();
        let ty = |t: GgmlType| ("TYPE", t.id().to_string());
        let int_dot = |d: Dot| ("INT_DOT", b(d == Dot::Integer));
        match self {
            RmsNorm { low_mem: true } => vec![("LOW_MEM", "1".into())],
            Attention { subgroup, prelude } if subgroup || prelude => {
                vec![("SG_REDUCE", b(subgroup)), ("PRELUDE", b(prelude))]
            }
            Embed(t) => vec![ty(t)],
            Matmul { ty: t, subgroup: false } => vec![ty(t)],
            Matmul { ty: t, subgroup: true } => vec![ty(t), ("SG_REDUCE", "1".into())],
            MatmulFloatTiled { ty: t, low_mem: false } => vec![ty(t)],
            MatmulFloatTiled { ty: t, low_mem: true } => vec![ty(t), ("LOW_MEM", "1".into())],
            MatmulCoopmat { ty: t, tile } => {
                vec![
                    ty(t),
                    ("WIDE", b(tile == CoopmatTile::Wide)),
                    ("SHORT", b(matches!(tile, CoopmatTile::Short | CoopmatTile::ShortSplit))),
                    ("GROUPED", b(tile == CoopmatTile::Grouped)),
                    ("SPLIT_K", b(tile == CoopmatTile::ShortSplit)),
                ]
            }
            MatmulQ8Tiled { ty: t, dot } => vec![ty(t), int_dot(dot)],
            MatvecQ8 { ty: t, dot, epilogue } => vec![
                ty(t),
                int_dot(dot),
                ("SWIGLU", b(epilogue == ExpertEpilogue::Swiglu)),
                ("COMBINE", b(epilogue == ExpertEpilogue::Combine)),
            ],
            MatmulQ8 { ty: t, dot, reduce: RowReduce::Workgroup, epilogue: RowEpilogue::Plain } => {
                vec![ty(t), int_dot(dot)]
            }
            MatmulQ8 { ty: t, dot, reduce: RowReduce::SharedX, epilogue } => vec![
                ty(t),
                int_dot(dot),
                ("SG_REDUCE", "1".into()),
                ("ROPE_KV", b(epilogue == RowEpilogue::RopeKv)),
                ("GLU_OUT", b(epilogue == RowEpilogue::Glu)),
                ("SHARED_X", "1".into()),
                ("WG_SIZE", "512".into()),
            ],
            MatmulQ8 { ty: t, dot, reduce, epilogue } => vec![
                ty(t),
                int_dot(dot),
                ("SG_REDUCE", b(reduce == RowReduce::Subgroup)),
                ("ROPE_KV", b(epilogue == RowEpilogue::RopeKv)),
            ],
            _ => vec![],
        }
    }

    /// True when shader-gen builds this id (the catalogue's rules: 8-bit products for the
    /// formats [`q8_activations`] lists, subgroup row sums with integer dot products only, the
    /// SwiGLU epilogue with the staged row only, float products for the non-block formats).
    pub fn is_built(self) -> bool {
        Self::all().contains(&self)
    }
}
