//! Which tensor type each matrix of a synthetic model gets: one type for all, or the
//! per-tensor choices llama.cpp's quantizer makes for its K-quant presets, so that a benchmark
//! file looks like the Q4_K_M (or Q5_K_M, Q3_K_M, Q2_K, Q6_K) files people download.
//!
//! The rules are those of `llama_tensor_get_type` in llama.cpp's `src/llama-quant.cpp`, for
//! the architectures zinc writes (llama, qwen3, qwen3moe), without an importance matrix:
//!
//! * the output matrix (or the embedding when it is tied to the output) is Q6_K, or Q8_0 when
//!   its rows are not whole 256-element super-blocks; an untied embedding keeps the preset's
//!   base type;
//! * `attn_v`: Q2_K takes Q4_K with 4 or more query heads per KV head and Q3_K otherwise;
//!   Q3_K_M takes Q5_K in the first two layers and Q4_K after; Q4_K_M and Q5_K_M take Q6_K in
//!   the layers `use_more_bits` picks (the first and last eighth, and every third between);
//! * `ffn_down` (dense or experts): Q2_K takes Q3_K; Q3_K_M takes Q5_K in the first sixteenth
//!   of the layers and Q4_K after; Q4_K_M and Q5_K_M take Q6_K where `use_more_bits` says;
//! * `attn_output`: Q2_K takes Q3_K and Q3_K_M Q4_K (with 8 experts: Q5_K for Q2_K, Q3_K_M
//!   and Q4_K_M);
//! * with exactly 8 experts, `attn_v` and `attn_k` are Q8_0;
//! * rows that are not whole super-blocks fall back: Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to
//!   Q8_0, Q2_K and Q3_K to IQ4_NL; a row that is not whole blocks of the fallback either
//!   becomes F16.
//!
//! The MoE router (`ffn_gate_inp`) and the norms stay f32, as llama.cpp leaves them.

use anyhow::{bail, Result};
use zinc_formats::GgmlType::{self, *};

/// llama.cpp's K-quant presets (`llama-quantize` file types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KPreset {
    /// `Q2_K`: Q2_K base.
    Q2K,
    /// `Q3_K_M`: Q3_K base.
    Q3KM,
    /// `Q4_K_M`: Q4_K base, the usual default of quantization guides.
    Q4KM,
    /// `Q5_K_M`: Q5_K base.
    Q5KM,
    /// `Q6_K`: Q6_K throughout.
    Q6K,
}

/// How the matrices of a synthetic model are typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantMix {
    /// Every matrix of one type.
    Uniform(GgmlType),
    /// A llama.cpp preset's per-tensor choices.
    Preset(KPreset),
}

/// What a matrix is for, which is what the presets choose by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `token_embd` (tied: also the output).
    Embedding { tied: bool },
    /// `output`.
    Output,
    /// `attn_q`.
    AttnQ,
    /// `attn_k`.
    AttnK,
    /// `attn_v`.
    AttnV,
    /// `attn_output`.
    AttnOutput,
    /// `ffn_gate` and `ffn_up` (dense or experts).
    FfnGateUp,
    /// `ffn_down` (dense or experts).
    FfnDown,
}

/// The model facts the presets look at.
#[derive(Debug, Clone, Copy)]
pub struct MixContext {
    /// Layers in the model.
    pub n_layer: u32,
    /// Query heads per KV head.
    pub n_gqa: u32,
    /// Experts (0 for dense models).
    pub n_expert: u32,
}

/// llama.cpp's choice of layers that get more bits: the first and last eighth, and every
/// third layer between.
fn use_more_bits(layer: u32, n_layer: u32) -> bool {
    let (l, n) = (layer as i64, n_layer as i64);
    l < n / 8 || l >= 7 * n / 8 || (l - n / 8) % 3 == 2
}

impl QuantMix {
    /// Parses `--type`: a tensor type (`q4_0`) or a preset (`q4_k_m`, `q5_k_m`, `q3_k_m`,
    /// `q2_k`, `q6_k`). `q2_k` and `q6_k` name presets, as in `llama-quantize`.
    pub fn parse(name: &str) -> Result<QuantMix> {
        let preset = match name.to_ascii_lowercase().as_str() {
            "q2_k" => Some(KPreset::Q2K),
            "q3_k_m" => Some(KPreset::Q3KM),
            "q4_k_m" => Some(KPreset::Q4KM),
            "q5_k_m" => Some(KPreset::Q5KM),
            "q6_k" => Some(KPreset::Q6K),
            _ => None,
        };
        if let Some(p) = preset {
            return Ok(QuantMix::Preset(p));
        }
        match GgmlType::from_name(name) {
            Some(ty) => Ok(QuantMix::Uniform(ty)),
            None => bail!(
                "unknown tensor type or preset `{name}` (types: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q3_k, q4_k, \
                 q5_k, iq4_nl, iq4_xs; presets: q2_k, q3_k_m, q4_k_m, q5_k_m, q6_k)"
            ),
        }
    }

    /// The type of a matrix of `role` in `layer` (0 for tensors outside layers) whose rows are
    /// `row_len` elements long.
    pub fn type_for(&self, role: Role, layer: u32, row_len: u64, cx: MixContext) -> GgmlType {
        let preset = match *self {
            QuantMix::Uniform(ty) => return ty,
            QuantMix::Preset(p) => p,
        };
        use KPreset::*;
        let base = match preset {
            Q2K => Q2_K,
            Q3KM => Q3_K,
            Q4KM => Q4_K,
            Q5KM => Q5_K,
            Q6K => Q6_K,
        };
        let (more_bits, n) = (use_more_bits(layer, cx.n_layer), cx.n_layer);
        let eight_experts = cx.n_expert == 8;
        let chosen = match role {
            Role::Output | Role::Embedding { tied: true } => {
                if !row_len.is_multiple_of(256) {
                    Q8_0
                } else {
                    Q6_K
                }
            }
            Role::Embedding { tied: false } | Role::AttnQ | Role::FfnGateUp => base,
            Role::AttnK if eight_experts => Q8_0,
            Role::AttnK => base,
            Role::AttnV if eight_experts => Q8_0,
            Role::AttnV => match preset {
                Q2K if cx.n_gqa >= 4 => Q4_K,
                Q2K => Q3_K,
                Q3KM if layer < 2 => Q5_K,
                Q3KM => Q4_K,
                Q4KM | Q5KM if more_bits => Q6_K,
                _ => base,
            },
            Role::FfnDown => match preset {
                Q2K => Q3_K,
                Q3KM if layer < n / 16 => Q5_K,
                Q3KM => Q4_K,
                Q4KM | Q5KM if more_bits => Q6_K,
                _ => base,
            },
            Role::AttnOutput => match preset {
                Q2K | Q3KM | Q4KM if eight_experts => Q5_K,
                Q2K if !eight_experts => Q3_K,
                Q3KM if !eight_experts => Q4_K,
                _ => base,
            },
        };
        fallback(chosen, row_len)
    }
}

/// The type rows of `row_len` get instead of `chosen` when they are not whole blocks of it.
fn fallback(chosen: GgmlType, row_len: u64) -> GgmlType {
    if row_len.is_multiple_of(chosen.block_elements() as u64) {
        return chosen;
    }
    let instead = match chosen {
        Q4_K => Q5_0,
        Q5_K => Q5_1,
        Q6_K => Q8_0,
        Q2_K | Q3_K => IQ4_NL,
        _ => chosen,
    };
    if row_len.is_multiple_of(instead.block_elements() as u64) {
        instead
    } else {
        F16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLAMA_7B: MixContext = MixContext { n_layer: 32, n_gqa: 4, n_expert: 0 };

    fn name(mix: &str, role: Role, layer: u32, row_len: u64, cx: MixContext) -> &'static str {
        QuantMix::parse(mix).unwrap().type_for(role, layer, row_len, cx).name()
    }

    #[test]
    fn use_more_bits_takes_the_ends_and_every_third_layer() {
        let picked: Vec<u32> = (0..32).filter(|&l| use_more_bits(l, 32)).collect();
        assert_eq!(picked, [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]);
    }

    #[test]
    fn q4_k_m_on_a_llama_7b_shape() {
        let cx = LLAMA_7B;
        assert_eq!(name("q4_k_m", Role::Output, 0, 4096, cx), "q6_k");
        assert_eq!(name("q4_k_m", Role::Embedding { tied: false }, 0, 4096, cx), "q4_k");
        assert_eq!(name("q4_k_m", Role::AttnQ, 5, 4096, cx), "q4_k");
        assert_eq!(name("q4_k_m", Role::AttnV, 0, 4096, cx), "q6_k");
        assert_eq!(name("q4_k_m", Role::AttnV, 4, 4096, cx), "q4_k");
        assert_eq!(name("q4_k_m", Role::AttnV, 6, 4096, cx), "q6_k");
        assert_eq!(name("q4_k_m", Role::FfnDown, 31, 14336, cx), "q6_k");
        assert_eq!(name("q4_k_m", Role::FfnDown, 5, 14336, cx), "q4_k");
        assert_eq!(name("q4_k_m", Role::FfnGateUp, 0, 4096, cx), "q4_k");
        assert_eq!(name("q4_k_m", Role::AttnOutput, 0, 4096, cx), "q4_k");
    }

    #[test]
    fn rows_that_are_not_whole_super_blocks_fall_back_as_llama_cpp_does() {
        // SmolLM2: 576-wide rows; its tied embedding is the output.
        let cx = MixContext { n_layer: 30, n_gqa: 3, n_expert: 0 };
        assert_eq!(name("q4_k_m", Role::Embedding { tied: true }, 0, 576, cx), "q8_0");
        assert_eq!(name("q4_k_m", Role::AttnQ, 3, 576, cx), "q5_0");
        assert_eq!(name("q4_k_m", Role::AttnV, 0, 576, cx), "q8_0");
        assert_eq!(name("q5_k_m", Role::AttnQ, 3, 576, cx), "q5_1");
        assert_eq!(name("q4_k_m", Role::FfnDown, 3, 1536, cx), "q4_k");
        assert_eq!(name("q6_k", Role::AttnQ, 3, 576, cx), "q8_0");
        // Odd widths that no fallback's blocks divide become f16.
        assert_eq!(name("q4_k_m", Role::AttnQ, 3, 100, cx), "f16");
        assert_eq!(name("q2_k", Role::AttnQ, 0, 576, cx), "iq4_nl");
        assert_eq!(name("q3_k_m", Role::FfnGateUp, 0, 576, cx), "iq4_nl");
    }

    #[test]
    fn the_lower_presets_raise_attention_and_down_products() {
        let cx = LLAMA_7B;
        assert_eq!(name("q2_k", Role::AttnV, 9, 4096, cx), "q4_k");
        assert_eq!(name("q2_k", Role::AttnV, 9, 4096, MixContext { n_gqa: 1, ..cx }), "q3_k");
        assert_eq!(name("q2_k", Role::FfnDown, 9, 14336, cx), "q3_k");
        assert_eq!(name("q2_k", Role::AttnOutput, 9, 4096, cx), "q3_k");
        assert_eq!(name("q2_k", Role::AttnQ, 9, 4096, cx), "q2_k");
        assert_eq!(name("q3_k_m", Role::AttnV, 1, 4096, cx), "q5_k");
        assert_eq!(name("q3_k_m", Role::AttnV, 2, 4096, cx), "q4_k");
        assert_eq!(name("q3_k_m", Role::FfnDown, 1, 14336, cx), "q5_k");
        assert_eq!(name("q3_k_m", Role::FfnDown, 2, 14336, cx), "q4_k");
        assert_eq!(name("q3_k_m", Role::AttnOutput, 2, 4096, cx), "q4_k");
        assert_eq!(name("q6_k", Role::FfnDown, 9, 14336, cx), "q6_k");
    }

    #[test]
    fn eight_expert_models_keep_attention_keys_and_values_in_q8_0() {
        let cx = MixContext { n_layer: 32, n_gqa: 4, n_expert: 8 };
        assert_eq!(name("q4_k_m", Role::AttnV, 9, 4096, cx), "q8_0");
        assert_eq!(name("q4_k_m", Role::AttnK, 9, 4096, cx), "q8_0");
        assert_eq!(name("q4_k_m", Role::AttnOutput, 9, 4096, cx), "q5_k");
        // 128 experts (qwen3moe) follow the dense rules.
        let cx = MixContext { n_expert: 128, ..cx };
        assert_eq!(name("q4_k_m", Role::AttnK, 9, 2048, cx), "q4_k");
    }

    #[test]
    fn plain_types_apply_to_every_matrix() {
        assert_eq!(name("q4_0", Role::Output, 0, 4096, LLAMA_7B), "q4_0");
        assert_eq!(name("q4_k", Role::AttnV, 0, 4096, LLAMA_7B), "q4_k");
        assert!(QuantMix::parse("q7_k").is_err());
    }
}
