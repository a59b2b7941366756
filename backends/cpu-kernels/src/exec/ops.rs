//! Row-wise ops: norms, RoPE, activation functions, residual adds.

use zinc_plugin_api::RopeStyle;

/// `out = x / rms(x) * w`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let scale = 1.0 / (ms + eps).sqrt();
    for ((o, v), g) in out.iter_mut().zip(x).zip(w) {
        *o = v * scale * g;
    }
}

/// In-place RMS norm of one head.
pub fn rms_norm_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let scale = 1.0 / (ms + eps).sqrt();
    for (v, g) in x.iter_mut().zip(w) {
        *v *= scale * g;
    }
}

/// Rotates every head of `row` (heads of `head_dim`) for position `pos`. The angles are the
/// same for every head of the row: each angle's sine and cosine is computed once and applied
/// to every head (a row is a few KiB, in cache; no buffer of angles is allocated per call).
pub fn rope(row: &mut [f32], head_dim: usize, pos: u32, inv_freq: &[f32], style: RopeStyle) {
    let half = inv_freq.len();
    for (i, f) in inv_freq.iter().enumerate() {
        let (sin, cos) = (pos as f32 * f).sin_cos();
        let (a, b) = match style {
            RopeStyle::Adjacent => (2 * i, 2 * i + 1),
            RopeStyle::Neox => (i, i + half),
        };
        for head in row.chunks_exact_mut(head_dim) {
            let (x0, x1) = (head[a], head[b]);
            head[a] = x0 * cos - x1 * sin;
            head[b] = x0 * sin + x1 * cos;
        }
    }
}

/// `out[i] = f(a[i], b[i])`, where an operand given as `None` is `out` itself (in place).
pub fn combine(out: &mut [f32], a: Option<&[f32]>, b: Option<&[f32]>, f: impl Fn(f32, f32) -> f32) {
    match (a, b) {
        (Some(a), Some(b)) => out.iter_mut().zip(a).zip(b).for_each(|((o, &x), &y)| *o = f(x, y)),
        (None, Some(b)) => out.iter_mut().zip(b).for_each(|(o, &y)| *o = f(*o, y)),
        (Some(a), None) => out.iter_mut().zip(a).for_each(|(o, &x)| *o = f(x, *o)),
        (None, None) => out.iter_mut().for_each(|o| *o = f(*o, *o)),
    }
}

/// `x = cap · tanh(x / cap)` (Gemma 2's soft cap on attention scores and logits).
pub fn soft_cap(x: &mut [f32], cap: f32) {
    x.iter_mut().for_each(|v| *v = cap * (*v / cap).tanh());
}

/// Softmax in place.
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v));
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    for v in x.iter_mut() {
        *v /= sum;
    }
}
