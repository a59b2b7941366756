//! K-quant kernels: the plain super-block dot against dequantize-then-multiply, and every
//! SIMD width and level against the plain dot, on fresh random blocks.

use super::{dot, kquant, q8::Q8Row, q8k::Q8KRow};
use zinc_formats::GgmlType::{self, *};
use zinc_formats::{
    dequant::dequantize_row,
    random::{random_blocks, Rng},
};

/// The formats dotted against super-block activations.
const K_TYPES: [GgmlType; 6] = [Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS];

fn fresh_seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
}

fn random_row(ty: GgmlType, n: usize, rng: &mut Rng) -> Vec<u8> {
    random_blocks(ty, n / 256, 1.0, rng)
}

fn random_acts(n: usize, rng: &mut Rng) -> Vec<f32> {
    (0..n).map(|_| rng.sym(2.0)).collect()
}

#[test]
fn unpacked_super_blocks_equal_the_reference_dequantizer() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for ty in K_TYPES {
        let size = ty.block_bytes();
        for _ in 0..20 {
            let b = random_row(ty, 256, &mut rng);
            let mut want = [0f32; 256];
            assert!(dequantize_row(ty, &b, &mut want));
            let u = kquant::unpack(ty, &b[..size]);
            for i in 0..256 {
                let got = u.d * (u.scales[i / 16] * u.q[i]) as f32 - u.dmin * u.mins[i / 16] as f32;
                let tol = 1e-5 * (1.0 + want[i].abs());
                assert!((got - want[i]).abs() <= tol, "type {ty} element {i} seed {seed}: {got} vs {}", want[i]);
            }
        }
    }
}

#[test]
fn super_block_activations_round_trip_within_half_a_step() {
    let mut rng = Rng::new(fresh_seed());
    let x = random_acts(512, &mut rng);
    let a = Q8KRow::new(&x);
    for (i, v) in x.iter().enumerate() {
        let d = a.d[i / 256];
        assert!((a.qs[i] as f32 * d - v).abs() <= d * 0.5 + 1e-6);
    }
    for (j, s) in a.bsums.iter().enumerate() {
        assert_eq!(*s as i32, a.qs[16 * j..16 * j + 16].iter().map(|&q| q as i32).sum::<i32>());
    }
}

#[test]
fn k_quant_dots_agree_with_dequantize_then_multiply() {
    // The activations are quantized to 8 bits, so the error is small but not rounding-level.
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for ty in K_TYPES {
        // Super-block activations (the CPU tier's), and blocks of 32 (the Vulkan backend's).
        let (mut err, mut err_blocks, mut norm) = (0f64, 0f64, 0f64);
        for _ in 0..64 {
            let n = 256 * (1 + (rng.next_u64() % 6) as usize);
            let w = random_row(ty, n, &mut rng);
            let x = random_acts(n, &mut rng);
            let mut deq = vec![0f32; n];
            assert!(dequantize_row(ty, &w, &mut deq));
            let want = dot::dot_plain(&deq, &x) as f64;
            let got = dot::dot_q8k(ty, &w, &Q8KRow::new(&x)) as f64;
            let blocks = dot::dot_q8_scalar(ty, &w, &Q8Row::new(&x)) as f64;
            err += (got - want).powi(2);
            err_blocks += (blocks - want).powi(2);
            norm += want.powi(2);
        }
        for (form, e) in [("super-blocks", err / norm), ("blocks of 32", err_blocks / norm)] {
            assert!(e < 1e-3, "type {ty}, activations in {form}: nmse {e:.2e} (seed {seed})");
        }
    }
}

/// Every width of the best kernel, and the AVX2 family on CPUs whose default is wider,
/// against the plain dot.
#[test]
fn simd_k_quant_kernels_match_the_plain_dot() {
    let seed = fresh_seed();
    let mut rng = Rng::new(seed);
    for ty in K_TYPES {
        for _ in 0..10 {
            let n = 256 * (1 + (rng.next_u64() % 5) as usize);
            let w = random_row(ty, n, &mut rng);
            let acts: Vec<Q8KRow> = (0..8).map(|_| Q8KRow::new(&random_acts(n, &mut rng))).collect();
            let want: Vec<f32> = acts.iter().map(|a| kquant::dot_scalar(ty, &w, a)).collect();
            let close = |got: f32, want: f32| (got - want).abs() <= 1e-4 * (1.0 + want.abs());
            let a: [&Q8KRow; 8] = std::array::from_fn(|i| &acts[i]);
            let mut got8 = [0f32; 8];
            let mut got4 = [0f32; 4];
            let mut got1 = [0f32; 1];
            if dot::dot_q8k_rows(ty, &w, &a, &mut got8) {
                assert!(dot::dot_q8k_rows(ty, &w, &[a[4], a[5], a[6], a[7]], &mut got4));
                assert!(dot::dot_q8k_rows(ty, &w, &[a[2]], &mut got1));
                for r in 0..8 {
                    assert!(
                        close(got8[r], want[r]),
                        "8 rows: type {ty} n {n} row {r} seed {seed}: {} vs {}",
                        got8[r],
                        want[r]
                    );
                }
                for r in 0..4 {
                    assert!(close(got4[r], want[4 + r]), "4 rows: type {ty} row {r} seed {seed}");
                }
                assert!(close(got1[0], want[2]), "1 row: type {ty} seed {seed}: {} vs {}", got1[0], want[2]);
            }
            #[cfg(target_arch = "x86_64")]
            if super::x86::level().is_some() {
                let mut two = [0f32; 2];
                assert!(unsafe { super::x86_kquant::avx2::dot_rows(ty, &w, &[a[0], a[1]], &mut two) });
                for r in 0..2 {
                    assert!(close(two[r], want[r]), "avx2: type {ty} row {r} seed {seed}: {} vs {}", two[r], want[r]);
                }
            }
        }
    }
}
