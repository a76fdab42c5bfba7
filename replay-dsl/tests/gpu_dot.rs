//! `dot` / `dot_acc` on the GPU against the interpreter: for each shape (M 16..128, N 8..64,
//! K 8..128), operand types (f32 × f32, f32 × bf16-cast, f16-cast × f32, bf16 × bf16,
//! f16 × f16, bf16-cast × bf16-cast; B stored N- or, for f32 operands, K-contiguous, which
//! reads tf32 operands from registers), with and without a loaded accumulator, at 1, 4 and 8 warps, on fresh random
//! inputs (seed printed; `REPLAY_SEED` replays) and a poisoned output, every element must
//! satisfy `|gpu − interpreter| ≤ 1e-6 · (|acc| + Σ_k |a_ik| |b_kj|)` (docs/SEMANTICS.md,
//! `Dot`; `Tf32` adds `K/8 · 2⁻²³` to the bound, `Tf32x3Chained` `3 · K/8 · 2⁻²³`). Shapes that fit the tensor
//! cores run `mma.sync` (3xTF32 for f32 operands); the others the CUDA-core loop. A failure
//! lists the worst elements with the exact (f64) value.
//!
//! Without a CUDA GPU the test prints "skipped: no CUDA GPU" and passes.

#[path = "shared/dot.rs"]
mod dot;
#[path = "prop_util.rs"]
mod util;

use dot::{chained_kernel, kernel, pipelined_kernel, DotCase, Operands};
use replay_dsl::ir::DotPrecision;
use replay_dsl::{compile, Elem};
use replay_runtime::driver::buffer::decode_f64;
use util::*;

/// The bound on `|gpu − interpreter|` relative to `|acc| + Σ_k |a_ik| |b_kj|`.
const TOL: f64 = 1e-6;
/// The precisions tested: the interpreter rounds `Tf32` operands as the backend does; each
/// meets [`tolerance`]'s bound.
const PRECISIONS: [DotPrecision; 3] = [DotPrecision::Tf32x3, DotPrecision::Tf32, DotPrecision::Tf32x3Chained];

/// The bound of a dot over `k` at `precision` (docs/SEMANTICS.md): [`TOL`], and for the
/// dots whose mmas chain on the accumulator the roundings toward zero of those mmas on top
/// (each within 2⁻²³ of the scale): one per k-step of 8 at `Tf32`, three at `Tf32x3Chained`.
fn tolerance(precision: DotPrecision, k: usize) -> f64 {
    let chained_roundings = match precision {
        DotPrecision::Tf32 => k / 8,
        DotPrecision::Tf32x3Chained => 3 * (k / 8),
        DotPrecision::Tf32x3 | DotPrecision::Ieee => 0,
    };
    TOL + chained_roundings as f64 * 2f64.powi(-23)
}

/// Programs per launch (each its own matrices).
const PROGRAMS: usize = 2;

/// `len` random elements of `e`: f32 of random sign and magnitude in `[2^-4, 2^4)`, rounded
/// to `e`; returned as buffer bytes and as the values the kernel sees.
fn random(rng: &mut Rand, e: Elem, len: usize) -> (HArg, Vec<f64>) {
    let xs: Vec<f32> = (0..len)
        .map(|_| rng.f32(-1.0, 1.0) * (2.0f32).powi(rng.int(-3, 4) as i32))
        .collect();
    let arg = match e {
        Elem::F32 => HArg::buf(&xs),
        Elem::BF16 => HArg::buf(&xs.iter().map(|&x| half::bf16::from_f32(x)).collect::<Vec<_>>()),
        Elem::F16 => HArg::buf(&xs.iter().map(|&x| half::f16::from_f32(x)).collect::<Vec<_>>()),
        _ => unreachable!("dot operands are floats"),
    };
    let HArg::Buf(_, bytes) = &arg else { unreachable!() };
    let vals = decode_f64(e, bytes);
    (arg, vals)
}

/// The result of one case: the largest error ratio seen, or a failure report.
fn run_case(gpu: &Gpu, rng: &mut Rand, c: DotCase) -> Result<f64, String> {
    let k = kernel(c);
    let (ea, eb) = c.ops.elems();
    let (m, n, kk) = (c.m, c.n, c.k);
    let (a, av) = random(rng, ea, PROGRAMS * m * kk);
    let (b, bv) = random(rng, eb, PROGRAMS * kk * n);
    let (acc, cv) = random(rng, Elem::F32, PROGRAMS * m * n);
    let cv: Vec<f64> = if c.acc { cv } else { vec![0.0; cv.len()] };
    let args = vec![a, b, acc, HArg::poisoned(Elem::F32, PROGRAMS * m * n)];
    let grid = [PROGRAMS as u32, 1, 1];
    let want = run_interp(&k, grid, &args)?;
    let got = gpu.run(&k, grid, &args)?;
    let (want, got) = (f32s(&want[3]), f32s(&got[3]));
    let mut worst = 0.0f64;
    let mut bad = vec![];
    for p in 0..PROGRAMS {
        for i in 0..m {
            for j in 0..n {
                let idx = p * m * n + i * n + j;
                let (mut exact, mut scale) = (cv[idx], cv[idx].abs());
                for l in 0..kk {
                    let bi = if c.b_k_major { j * kk + l } else { l * n + j };
                    let ai = if c.a_m_major { l * m + i } else { i * kk + l };
                    let prod = av[p * m * kk + ai] * bv[p * kk * n + bi];
                    exact += prod;
                    scale += prod.abs();
                }
                let err = (got[idx] as f64 - want[idx] as f64).abs();
                let ratio = if got[idx].is_nan() { f64::INFINITY } else { err / scale };
                worst = worst.max(ratio);
                if ratio > tolerance(c.precision, kk) || ratio.is_nan() {
                    bad.push((
                        ratio,
                        format!(
                            "  program {p} [{i}, {j}]: GPU {:e}, interpreter {:e}, exact {exact:e}, \
                             Σ|a||b|+|acc| {scale:e}, |gpu − interp| / that = {ratio:.3e}",
                            got[idx], want[idx]
                        ),
                    ));
                }
            }
        }
    }
    if bad.is_empty() {
        return Ok(worst);
    }
    let count = bad.len();
    bad.sort_by(|x, y| y.0.total_cmp(&x.0));
    let lines: Vec<String> = bad.into_iter().take(12).map(|b| b.1).collect();
    Err(format!(
        "{c:?} ({}): {count} of {} elements beyond {:e}; worst first:\n{}",
        engine(&k, gpu),
        PROGRAMS * m * n,
        tolerance(c.precision, kk),
        lines.join("\n")
    ))
}

/// Which instructions the GPU ran: "mma.sync" or "CUDA cores".
fn engine(k: &replay_dsl::ir::Kernel, gpu: &Gpu) -> &'static str {
    match gpu.target().map(|t| compile(k, t)) {
        Some(Ok(c)) if c.ptx.contains("mma.sync") => "mma.sync",
        Some(Ok(_)) => "CUDA cores",
        _ => "?",
    }
}

#[test]
fn dots_match_the_interpreter() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rand::for_test("dots_match_the_interpreter");
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
    let mut failures = vec![];
    let mut summary = vec![];
    for (m, n, k) in shapes {
        for ops in Operands::ALL {
            for (warps, precision) in [1, 4, 8].into_iter().flat_map(|w| PRECISIONS.map(|p| (w, p))) {
                // B K-major (or A M-major: transposed, staged) only where the operands are f32
                // (or casts to it); B read from a shared buffer (in place by a staged tf32 dot).
                let layouts: &[(bool, bool, bool)] = match ops {
                    Operands::F32 | Operands::F32Bf16Cast | Operands::F16CastF32 => &[
                        (false, false, false),
                        (true, false, false),
                        (false, true, false),
                        (false, false, true),
                        (false, true, true),
                    ],
                    _ => &[(false, false, false), (false, false, true)],
                };
                for (acc, &(b_k_major, a_m_major, b_shared)) in [false, true]
                    .into_iter()
                    .flat_map(|a| layouts.iter().map(move |b| (a, b)))
                {
                    let c = DotCase {
                        m,
                        n,
                        k,
                        warps,
                        ops,
                        acc,
                        precision,
                        b_k_major,
                        a_m_major,
                        b_shared,
                    };
                    match run_case(&gpu, &mut rng, c) {
                        Ok(worst) => summary.push(format!("{c:?}: worst {worst:.2e}")),
                        Err(e) => failures.push(e),
                    }
                }
            }
        }
    }
    println!("{}", summary.join("\n"));
    assert!(
        failures.is_empty(),
        "{} of {} cases failed on {}:\n{}",
        failures.len(),
        failures.len() + summary.len(),
        gpu.name(),
        failures.join("\n\n")
    );
}

/// A software-pipelined dot (the next tile's load carried by a runtime loop, its operands read
/// from registers), and one whose loop carries its first tile unchanged, at 1, 4 and 8 warps:
/// within [`TOL`] of the interpreter on fresh random inputs, every element of the poisoned
/// output written.
#[test]
fn pipelined_dots_match_the_interpreter() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rand::for_test("pipelined_dots_match_the_interpreter");
    let (m, n, k, iters) = (32, 8, 128, 3);
    for (warps, same) in [1, 4, 8].into_iter().flat_map(|w| [(w, false), (w, true)]) {
        let kern = pipelined_kernel(m, n, k, iters, warps, same);
        let (a, av) = random(&mut rng, Elem::F32, iters * m * k);
        let (b, bv) = random(&mut rng, Elem::F32, n * k);
        let args = vec![a, b, HArg::poisoned(Elem::F32, m * n)];
        let want = f32s(&run_interp(&kern, [1, 1, 1], &args).unwrap()[2]);
        let got = f32s(&gpu.run(&kern, [1, 1, 1], &args).unwrap()[2]);
        for i in 0..m {
            for j in 0..n {
                let tile = |it: usize| if same { 0 } else { it };
                let scale: f64 = (0..iters)
                    .flat_map(|it| (0..k).map(move |l| (it, l)))
                    .map(|(it, l)| (av[tile(it) * m * k + i * k + l] * bv[j * k + l]).abs())
                    .sum();
                let (g, w) = (got[i * n + j] as f64, want[i * n + j] as f64);
                let ratio = (g - w).abs() / scale;
                assert!(
                    ratio <= TOL,
                    "{warps} warps, same tile {same} [{i}, {j}]: GPU {g:e}, interpreter {w:e}, ratio {ratio:.3e} ({})",
                    engine(&kern, &gpu)
                );
            }
        }
    }
}

/// A product whose A is another product's accumulator, read in registers (`(a @ b) @ q`), at 1
/// and 4 warps (whole m16 tiles per warp, and the second product's K split over warps): within
/// twice [`TOL`] of the interpreter relative to `Σ_l (Σ_k |a_ik| |b_kl|) |q_lj|` (each product's
/// bound, the first one's carried through the second) on fresh random inputs, every element of
/// the poisoned output written.
#[test]
fn chained_products_match_the_interpreter() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rand::for_test("chained_products_match_the_interpreter");
    let n2 = 8;
    for (m, n1, k, warps) in [(16, 64, 32, 1), (64, 64, 32, 4), (32, 128, 64, 4)] {
        let kern = chained_kernel(m, n1, k, n2, warps);
        let (a, av) = random(&mut rng, Elem::F32, PROGRAMS * m * k);
        let (b, bv) = random(&mut rng, Elem::F32, PROGRAMS * k * n1);
        let (q, qv) = random(&mut rng, Elem::F32, PROGRAMS * n1 * n2);
        let args = vec![a, b, q, HArg::poisoned(Elem::F32, PROGRAMS * m * n2)];
        let grid = [PROGRAMS as u32, 1, 1];
        let want = f32s(&run_interp(&kern, grid, &args).unwrap()[3]);
        let got = f32s(&gpu.run(&kern, grid, &args).unwrap()[3]);
        for p in 0..PROGRAMS {
            for i in 0..m {
                for j in 0..n2 {
                    // b and q are stored K-contiguous: b[l][c] at c * k + l, q[l][j] at j * n1 + l.
                    let scale: f64 = (0..n1)
                        .map(|c| {
                            let s: f64 = (0..k)
                                .map(|l| (av[p * m * k + i * k + l] * bv[p * k * n1 + c * k + l]).abs())
                                .sum();
                            s * qv[p * n1 * n2 + j * n1 + c].abs()
                        })
                        .sum();
                    let idx = p * m * n2 + i * n2 + j;
                    let (g, w) = (got[idx] as f64, want[idx] as f64);
                    let ratio = (g - w).abs() / scale;
                    assert!(
                        ratio <= 2.0 * TOL,
                        "{m}x{n1}x{k}, {warps} warps, program {p} [{i}, {j}]: GPU {g:e}, interpreter {w:e}, ratio {ratio:.3e} ({})",
                        engine(&kern, &gpu)
                    );
                }
            }
        }
    }
}
