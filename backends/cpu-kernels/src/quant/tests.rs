//! Every dot-product variant against the plain reference, on fresh random blocks.

use super::{dot, q8::Q8Row, Activations};
use zinc_formats::GgmlType::{self, *};
use zinc_formats::{
    dequant::dequantize_row,
    random::{random_blocks, Rng},
};

fn fresh_seed() -> u64 {
    // Fresh inputs each run (as test-backend-ops does); the seed is printed on failure.
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
}

fn random_row(ty: GgmlType, n: usize, rng: &mut Rng) -> Vec<u8> {
    let block = ty.block_elements();
    random_blocks(ty, n / block, 1.0, rng)
}

/// Normalised mean squared error of `got` against `want`.
fn nmse(got: &[f32], want: &[f32]) -> f64 {
    let err: f64 = got.iter().zip(want).map(|(g, w)| ((g - w) as f64).powi(2)).sum();
    let norm: f64 = want.iter().map(|w| (*w as f64).powi(2)).sum();
    err / norm.max(1e-30)
}

#[test]
fn simd_q8_dots_match_the_plain_version() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for ty in [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, IQ4_XS] {
        for _ in 0..50 {
            let block = ty.block_elements();
            let n = block * (1 + (rng.next_u64() % (40 * 32 / block as u64)) as usize);
            let w = random_row(ty, n, &mut rng);
            let x: Vec<f32> = (0..n).map(|_| rng.sym(2.0)).collect();
            let a = Q8Row::new(&x);
            let (fast, plain) = (dot::dot_q8(ty, &w, &a), dot::dot_q8_scalar(ty, &w, &a));
            let tol = 1e-4 * (1.0 + plain.abs());
            assert!((fast - plain).abs() <= tol, "type {ty} n {n} seed {seed}: {fast} vs {plain}");
        }
    }
}

#[test]
fn multi_row_kernels_match_single_rows_at_every_level() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for ty in [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, IQ4_XS] {
        let n = 256 * 3;
        let w = random_row(ty, n, &mut rng);
        let rows: Vec<Q8Row> = (0..8).map(|_| Q8Row::new(&(0..n).map(|_| rng.sym(1.5)).collect::<Vec<_>>())).collect();
        let want: Vec<f32> = rows.iter().map(|a| dot::dot_q8_scalar(ty, &w, a)).collect();
        let mut got = [0f32; 4];
        if dot::dot_q8_rows(ty, &w, &[&rows[0], &rows[1], &rows[2], &rows[3]], &mut got) {
            for r in 0..4 {
                assert!((got[r] - want[r]).abs() <= 1e-4 * (1.0 + want[r].abs()), "type {ty} row {r} seed {seed}");
            }
        }
        let mut got8 = [0f32; 8];
        let all: [&Q8Row; 8] = std::array::from_fn(|i| &rows[i]);
        if dot::dot_q8_rows(ty, &w, &all, &mut got8) {
            for r in 0..8 {
                assert!(
                    (got8[r] - want[r]).abs() <= 1e-4 * (1.0 + want[r].abs()),
                    "8 rows: type {ty} row {r} seed {seed}"
                );
            }
        }
        #[cfg(target_arch = "x86_64")]
        if super::x86::level().is_some() {
            // The AVX2 family must agree too, also on CPUs where VNNI is the default.
            let mut two = [0f32; 2];
            unsafe {
                match ty {
                    Q4_0 => super::x86::avx2::q4_0(&w, &[&rows[0], &rows[1]], &mut two),
                    Q4_1 => super::x86::avx2::q4_1(&w, &[&rows[0], &rows[1]], &mut two),
                    Q5_0 => super::x86::avx2::q5_0(&w, &[&rows[0], &rows[1]], &mut two),
                    Q5_1 => super::x86::avx2::q5_1(&w, &[&rows[0], &rows[1]], &mut two),
                    IQ4_NL => super::x86::avx2::iq4_nl(&w, &[&rows[0], &rows[1]], &mut two),
                    IQ4_XS => super::x86::avx2::iq4_xs(&w, &[&rows[0], &rows[1]], &mut two),
                    _ => super::x86::avx2::q8_0(&w, &[&rows[0], &rows[1]], &mut two),
                }
            }
            for r in 0..2 {
                assert!((two[r] - want[r]).abs() <= 1e-4 * (1.0 + want[r].abs()), "avx2 type {ty} row {r} seed {seed}");
            }
        }
    }
}

/// True when the CPU tier dots rows of `ty` against 8-bit activations in blocks of 32.
fn uses_q8_activations(ty: GgmlType) -> bool {
    Activations::for_weights(ty, Default::default()) == Activations::Q8Blocks
}

#[test]
fn every_dot_agrees_with_dequantize_then_multiply() {
    // The q8 path quantizes activations, so it carries a small, bounded error; the f32 path
    // must agree to rounding. Bounds are normalised MSE over many rows, per path.
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for t in GgmlType::ALL {
        let n = 512;
        let (mut got, mut want) = (Vec::new(), Vec::new());
        let mut scratch = vec![0f32; 256];
        for _ in 0..64 {
            let w = random_row(t, n, &mut rng);
            let x: Vec<f32> = (0..n).map(|_| rng.sym(1.0)).collect();
            let mut deq = vec![0f32; n];
            assert!(dequantize_row(t, &w, &mut deq), "{}", t);
            want.push(dot::dot_plain(&deq, &x));
            got.push(if uses_q8_activations(t) {
                dot::dot_q8(t, &w, &Q8Row::new(&x))
            } else {
                dot::dot_f32(t, &w, &x, &mut scratch)
            });
        }
        let bound = if uses_q8_activations(t) { 1e-3 } else { 1e-9 };
        let e = nmse(&got, &want);
        assert!(e < bound, "{}: nmse {e:.2e} ≥ {bound:.0e} (seed {seed})", t);
    }
}

#[test]
fn q8_activation_quantization_round_trips_within_half_a_step() {
    let mut rng = Rng::new(fresh_seed());
    let x: Vec<f32> = (0..256).map(|_| rng.sym(3.0)).collect();
    let a = Q8Row::new(&x);
    for (i, v) in x.iter().enumerate() {
        let d = a.d[i / 32];
        assert!((a.qs[i] as f32 * d - v).abs() <= d * 0.5 + 1e-6);
    }
    for b in 0..8 {
        let s: i32 = a.qs[b * 32..b * 32 + 32].iter().map(|&q| q as i32).sum();
        assert!((a.s[b] - a.d[b] * s as f32).abs() < 1e-4);
    }
}

#[test]
fn simd_quantization_equals_the_plain_rounding() {
    #[cfg(target_arch = "x86_64")]
    if super::x86::float::available() {
        let mut rng = Rng::new(fresh_seed());
        for _ in 0..200 {
            let x: Vec<f32> = (0..32).map(|_| rng.sym(4.0)).collect();
            let mut q = [0i8; 32];
            let (d, sum) = unsafe { super::x86::float::quantize_block(&x, &mut q) };
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            assert_eq!(d, amax / 127.0);
            let id = 1.0 / d;
            let want: Vec<i8> = x.iter().map(|v| (v * id).round_ties_even() as i8).collect();
            assert_eq!(&q[..], &want[..]);
            assert_eq!(sum, want.iter().map(|&v| v as i32).sum::<i32>());
        }
    }
}

#[test]
fn f16_kv_kernels_match_the_plain_conversions() {
    let mut rng = Rng::new(fresh_seed());
    let x: Vec<f32> = (0..203).map(|_| rng.sym(50.0)).collect();
    let mut fast = vec![0u16; x.len()];
    dot::to_f16(&x, &mut fast);
    let plain: Vec<u16> = x.iter().map(|&v| zinc_formats::half::f32_to_f16(v)).collect();
    assert_eq!(fast, plain, "SIMD f16 rounding must equal the plain rounding");
    #[cfg(target_arch = "x86_64")]
    if super::x86::float::available() {
        let q: Vec<f32> = (0..203).map(|_| rng.sym(1.0)).collect();
        let want: f32 = q.iter().zip(&plain).map(|(a, &b)| a * zinc_formats::half::f16_to_f32(b)).sum();
        let got = unsafe { super::x86::float::dot_f16(&q, &plain) };
        assert!((got - want).abs() <= 1e-3 * (1.0 + want.abs()), "{got} vs {want}");
        let mut acc = vec![1.0f32; 203];
        unsafe { super::x86::float::axpy_f16(&mut acc, 0.5, &plain) };
        for (a, &h) in acc.iter().zip(&plain) {
            assert!((a - (1.0 + 0.5 * zinc_formats::half::f16_to_f32(h))).abs() < 1e-4);
        }
    }
}

/// Rows of `ty` packed four to a group, through every kernel width and level, against the
/// plain row-by-row product on the original bytes; row counts that leave a partial group too.
#[test]
fn packed_groups_match_the_row_by_row_product() {
    use super::packed::{Packed, GROUP};
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    let fifth_bit_types = if cfg!(target_arch = "x86_64") { &[Q5_0, Q5_1][..] } else { &[] };
    for &ty in [Q4_0, Q4_1, Q8_0].iter().chain(fifth_bit_types) {
        for _ in 0..12 {
            let n = 32 * (1 + (rng.next_u64() % 24) as usize);
            let rows = 1 + (rng.next_u64() % 13) as usize;
            let w: Vec<Vec<u8>> = (0..rows).map(|_| random_row(ty, n, &mut rng)).collect();
            let p = Packed::pack(ty, &w.concat(), rows, n).expect("packable type");
            assert_eq!(p.groups, rows.div_ceil(GROUP));
            let acts: Vec<Q8Row> =
                (0..8).map(|_| Q8Row::new(&(0..n).map(|_| rng.sym(1.5)).collect::<Vec<_>>())).collect();
            let a: [&Q8Row; 8] = std::array::from_fn(|i| &acts[i]);
            let close = |got: f32, want: f32| (got - want).abs() <= 1e-4 * (1.0 + want.abs());
            for g in 0..p.groups {
                let mut plain = [[0f32; GROUP]; 8];
                p.dot_group_scalar(g, &a, &mut plain);
                let mut best8 = [[0f32; GROUP]; 8];
                p.dot_group(g, &a, &mut best8);
                let mut best1 = [[0f32; GROUP]; 1];
                p.dot_group(g, &[a[3]], &mut best1);
                let mut best4 = [[0f32; GROUP]; 4];
                p.dot_group(g, &[a[4], a[5], a[6], a[7]], &mut best4);
                #[allow(unused_mut)]
                let mut avx2 = best4;
                #[cfg(target_arch = "x86_64")]
                if super::x86::level().is_some() {
                    // The AVX2 family must agree too, also on CPUs where VNNI is the default.
                    let (kind, blocks) = (p.kind, p.blocks);
                    let ms = match kind {
                        super::packed::PackedKind::Nibbles { min_scale }
                        | super::packed::PackedKind::Nibbles5 { min_scale } => min_scale,
                        _ => 0.0,
                    };
                    let rows4 = [a[4], a[5], a[6], a[7]];
                    unsafe {
                        match kind {
                            super::packed::PackedKind::Bytes => super::x86_packed::avx2::group::<true, false, 4>(
                                p.group(g),
                                blocks,
                                ms,
                                &rows4,
                                &mut avx2,
                            ),
                            super::packed::PackedKind::Nibbles5 { .. } => super::x86_packed::avx2::group::<
                                false,
                                true,
                                4,
                            >(
                                p.group(g), blocks, ms, &rows4, &mut avx2
                            ),
                            _ => super::x86_packed::avx2::group::<false, false, 4>(
                                p.group(g),
                                blocks,
                                ms,
                                &rows4,
                                &mut avx2,
                            ),
                        }
                    }
                }
                // Both aarch64 families, whichever the CPU defaults to (the dot-product one only
                // where the CPU has it: run the tests under `qemu-aarch64 -cpu max` to cover it).
                #[allow(unused_mut)]
                let mut neon = [best4, best4];
                #[cfg(target_arch = "aarch64")]
                {
                    use super::{arm_packed, packed::PackedKind};
                    let rows4 = [a[4], a[5], a[6], a[7]];
                    let (blocks, grp) = (p.blocks, p.group(g));
                    unsafe {
                        match p.kind {
                            PackedKind::Bytes => {
                                arm_packed::group_neon::<true, 4>(grp, blocks, 0.0, &rows4, &mut neon[0])
                            }
                            PackedKind::Nibbles { min_scale } => {
                                arm_packed::group_neon::<false, 4>(grp, blocks, min_scale, &rows4, &mut neon[0])
                            }
                            PackedKind::Nibbles5 { .. } => unreachable!("not packed on aarch64"),
                        }
                        if std::arch::is_aarch64_feature_detected!("dotprod") {
                            match p.kind {
                                PackedKind::Bytes => {
                                    arm_packed::group_dotprod::<true, 4>(grp, blocks, 0.0, &rows4, &mut neon[1])
                                }
                                PackedKind::Nibbles { min_scale } => {
                                    arm_packed::group_dotprod::<false, 4>(grp, blocks, min_scale, &rows4, &mut neon[1])
                                }
                                PackedKind::Nibbles5 { .. } => unreachable!("not packed on aarch64"),
                            }
                        }
                    }
                }
                for j in 0..GROUP {
                    let row = 4 * g + j;
                    for r in 0..8 {
                        let want = if row < rows { dot::dot_q8_scalar(ty, &w[row], a[r]) } else { 0.0 };
                        let ctx = format!("type {ty} n {n} rows {rows} row {row} act {r} seed {seed}");
                        assert!(close(plain[r][j], want), "plain packed {ctx}: {} vs {want}", plain[r][j]);
                        assert!(close(best8[r][j], want), "8-row kernel {ctx}: {} vs {want}", best8[r][j]);
                        // A row's result is the same bits whichever kernel width computed it:
                        // a sequence's logits must not depend on how many share its step.
                        if r == 3 {
                            assert_eq!(best1[0][j].to_bits(), best8[r][j].to_bits(), "1-row vs 8-row kernel {ctx}");
                        }
                        if r >= 4 {
                            assert_eq!(best4[r - 4][j].to_bits(), best8[r][j].to_bits(), "4-row vs 8-row kernel {ctx}");
                            assert!(close(avx2[r - 4][j], want), "avx2 kernel {ctx}: {} vs {want}", avx2[r - 4][j]);
                            assert!(close(neon[0][r - 4][j], want), "neon kernel {ctx}: {}", neon[0][r - 4][j]);
                            assert!(close(neon[1][r - 4][j], want), "dotprod kernel {ctx}: {}", neon[1][r - 4][j]);
                        }
                    }
                }
            }
        }
    }
}
