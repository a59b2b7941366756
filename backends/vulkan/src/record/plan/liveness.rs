//! Which activations a later op still reads: a fusion may skip writing an activation (a
//! product's output that the residual add it folds in would only have read, a norm's output
//! that the products it folds into normalise themselves) only when nothing after it reads it.

use zinc_plugin_api::Op;

/// The activations `op` reads, and the one it writes (in-place ops both read and write).
fn operands(op: &Op) -> ([Option<u32>; 3], Option<u32>) {
    match *op {
        Op::Embed { out, .. } => ([None; 3], Some(out)),
        Op::RmsNorm { input, out, .. } | Op::MatMul { input, out, .. } | Op::SelectLogitRows { input, out } => {
            ([Some(input), None, None], Some(out))
        }
        Op::Moe { input, out, .. } => ([Some(input), None, None], Some(out)),
        Op::HeadRmsNorm { buf, .. }
        | Op::Rope { buf, .. }
        | Op::Scale { buf, .. }
        | Op::ScaleRotated { buf, .. }
        | Op::SoftCap { buf, .. }
        | Op::AddBias { buf, .. } => ([Some(buf), None, None], Some(buf)),
        Op::Attention { q, k, v, out, .. } => ([Some(q), Some(k), Some(v)], Some(out)),
        Op::SwiGlu { gate: a, up: b, out } | Op::GeluGlu { gate: a, up: b, out } | Op::Add { a, b, out } => {
            ([Some(a), Some(b), None], Some(out))
        }
        Op::Output { input } => ([Some(input), None, None], None),
    }
}

/// Whether an op of `ops` reads activation `a` before one overwrites it (a step's activations
/// do not outlive it, so the end of the program ends the search).
pub(super) fn read_before_written(ops: &[Op], a: u32) -> bool {
    for op in ops {
        let (reads, write) = operands(op);
        if reads.contains(&Some(a)) {
            return true;
        }
        if write == Some(a) {
            return false;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::read_before_written;
    use zinc_plugin_api::Op;

    #[test]
    fn an_activation_is_live_until_an_op_overwrites_it_without_reading_it() {
        let ops = [
            Op::MatMul { input: 1, weight: 0, out: 2 },
            Op::Add { a: 3, b: 2, out: 3 },
            Op::Rope { buf: 4, head_dim: 64, freqs: zinc_plugin_api::RopeFreqs::Global },
            Op::MatMul { input: 3, weight: 1, out: 2 },
            Op::Output { input: 2 },
        ];
        // Read by the add, by RoPE in place, by the output.
        assert!(read_before_written(&ops[1..], 2));
        assert!(read_before_written(&ops[2..], 4));
        assert!(read_before_written(&ops[4..], 2));
        // Overwritten by the second product before the output reads it.
        assert!(!read_before_written(&ops[2..], 2));
        // Never touched again, or past the end.
        assert!(!read_before_written(&ops[2..], 1));
        assert!(!read_before_written(&[], 2));
    }
}
