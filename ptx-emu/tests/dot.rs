//! `dot` / `dot_acc` kernels (the cases of `replay-dsl/tests/gpu_dot.rs`) compiled for
//! sm_90a and run on the emulator against the interpreter, with the GPU test's bound:
//! `|emu − interpreter| ≤ 1e-6 · (|acc| + Σ_k |a_ik| |b_kj|)` for every element, on fresh
//! random inputs and a poisoned output (NaN never passes).

mod common;
#[path = "../../replay-dsl/tests/shared/dot.rs"]
mod dot;

use common::*;
use dot::{kernel, DotCase, Operands};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use replay_dsl::ir::DotPrecision;
use replay_dsl::Elem;

const TOL: f64 = 1e-6;
const PROGRAMS: usize = 2;

/// `len` random values of `e` (random sign, magnitude in [2^-4, 2^4)) as a buffer and as f64.
fn random(rng: &mut SmallRng, e: Elem, len: usize) -> (Arg, Vec<f64>) {
    let xs: Vec<f32> = (0..len)
        .map(|_| rng.gen_range(-1.0f32..1.0) * 2f32.powi(rng.gen_range(-3..4)))
        .collect();
    match e {
        Elem::F32 => (Arg::buf(&xs), xs.iter().map(|&x| x as f64).collect()),
        Elem::BF16 => {
            let v: Vec<half::bf16> = xs.iter().map(|&x| half::bf16::from_f32(x)).collect();
            (Arg::buf(&v), v.iter().map(|x| x.to_f64()).collect())
        }
        Elem::F16 => {
            let v: Vec<half::f16> = xs.iter().map(|&x| half::f16::from_f32(x)).collect();
            (Arg::buf(&v), v.iter().map(|x| x.to_f64()).collect())
        }
        _ => unreachable!(),
    }
}

fn run_case(rng: &mut SmallRng, c: DotCase) -> Result<u64, String> {
    let k = kernel(c);
    let (ea, eb) = c.ops.elems();
    let (m, n, kk) = (c.m, c.n, c.k);
    let (a, av) = random(rng, ea, PROGRAMS * m * kk);
    let (b, bv) = random(rng, eb, PROGRAMS * kk * n);
    let (acc, cv) = random(rng, Elem::F32, PROGRAMS * m * n);
    let cv: Vec<f64> = if c.acc { cv } else { vec![0.0; cv.len()] };
    let args = vec![a, b, acc, Arg::poisoned(Elem::F32, PROGRAMS * m * n)];
    let grid = [PROGRAMS as u32, 1, 1];
    let want = f32s(&run_interp(&k, grid, &args)?[3]);
    let (got, insts) = run_emu(&k, grid, &args)?;
    let got = f32s(&got[3]);
    let mut bad = vec![];
    for p in 0..PROGRAMS {
        for i in 0..m {
            for j in 0..n {
                let idx = p * m * n + i * n + j;
                let mut scale = cv[idx].abs();
                for l in 0..kk {
                    scale += (av[p * m * kk + i * kk + l] * bv[p * kk * n + l * n + j]).abs();
                }
                let err = (got[idx] as f64 - want[idx] as f64).abs();
                if got[idx].is_nan() || err.is_nan() || err > TOL * scale {
                    bad.push(format!(
                        "  program {p} [{i}, {j}]: emulator {:e}, interpreter {:e}, scale {scale:e}",
                        got[idx], want[idx]
                    ));
                }
            }
        }
    }
    if bad.is_empty() {
        Ok(insts)
    } else {
        Err(format!(
            "{c:?}: {} elements off:\n{}",
            bad.len(),
            bad[..bad.len().min(8)].join("\n")
        ))
    }
}

#[test]
fn dots_match_the_interpreter() {
    let mut rng = SmallRng::seed_from_u64(seed("dots_match_the_interpreter"));
    let shapes = [
        (16, 8, 8),
        (16, 8, 16),
        (32, 16, 32),
        (64, 8, 128),
        (64, 64, 64),
        (128, 8, 16),
        (128, 64, 32),
        (16, 64, 128),
        (64, 32, 64),
        (8, 8, 16),
    ];
    let (mut failures, mut cases, mut insts) = (vec![], 0, 0);
    let t0 = std::time::Instant::now();
    for (m, n, k) in shapes {
        for ops in Operands::ALL {
            for warps in [1, 4, 8] {
                for acc in [false, true] {
                    let c = DotCase {
                        m,
                        n,
                        k,
                        warps,
                        ops,
                        acc,
                        precision: DotPrecision::Tf32x3,
                    };
                    cases += 1;
                    match run_case(&mut rng, c) {
                        Ok(n) => insts += n,
                        Err(e) => failures.push(e),
                    }
                }
            }
        }
    }
    eprintln!("{cases} cases, {insts} thread-instructions in {:?}", t0.elapsed());
    assert!(
        failures.is_empty(),
        "{} of {cases} cases failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
