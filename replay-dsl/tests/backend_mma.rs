//! Tensor-core dots: shapes that fit `mma.sync` use it (tf32 with the 3xTF32 split for f32
//! operands, bf16 / f16 otherwise), odd shapes stay on CUDA cores, and every kernel assembles
//! with ptxas for sm_90a and sm_100a without spills.

#[path = "shared/dot.rs"]
mod dot;
#[path = "prop_util.rs"]
mod util;

use dot::{chained_kernel, kernel, pipelined_kernel, DotCase, Operands};
use replay_dsl::ir::DotPrecision;
use replay_dsl::{compile, Target};

const TF32: &str = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32";
const BF16: &str = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32";
const F16: &str = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32";
/// The mask of the 3xTF32 split's rounding to tf32 (one per high part).
const ROUND_TF32: &str = "0xffffe000";

/// Assembles `ptx` with `ptxas -v` for `target`; returns the registers used, after checking
/// that nothing spills.
fn assemble(name: &str, target: Target, ptx: &str) -> u32 {
    let log = util::assemble_verbose(name, target, ptx).unwrap_or_else(|e| panic!("{e}"));
    util::registers_without_spills(&format!("{name} on {}", target.arch()), &log)
}

/// The PTX of `c` for both targets (sm_90a first), each assembled without spills.
fn ptx(c: DotCase) -> Vec<String> {
    let k = kernel(c);
    Target::ALL
        .iter()
        .map(|&t| {
            let ptx = compile(&k, t).unwrap_or_else(|e| panic!("{c:?} on {t}: {e}")).ptx;
            let regs = assemble(&k.name, t, &ptx);
            println!("{c:?} {}: {regs} registers", t.arch());
            ptx
        })
        .collect()
}

fn case(m: usize, n: usize, k: usize, warps: u32, ops: Operands, acc: bool) -> DotCase {
    DotCase {
        m,
        n,
        k,
        warps,
        ops,
        acc,
        precision: DotPrecision::Tf32x3,
        b_k_major: false,
        a_m_major: false,
        b_shared: false,
    }
}

/// mma instructions per thread of one m16n8 tile: the product of the k-steps and the terms.
fn per_tile(ops: Operands, k: usize) -> usize {
    match ops {
        Operands::F32 => 3 * k / 8,
        Operands::F32Bf16Cast | Operands::F16CastF32 => 2 * k / 8,
        Operands::Bf16 | Operands::F16 | Operands::Bf16Casts => k / 16,
    }
}

#[test]
fn eligible_shapes_use_mma() {
    for ops in Operands::ALL {
        for (m, n, k, warps) in [(64, 8, 128, 4), (16, 8, 16, 1), (64, 64, 64, 8), (128, 16, 32, 4)] {
            for acc in [false, true] {
                let c = case(m, n, k, warps, ops, acc);
                for p in ptx(c) {
                    let inst = match ops {
                        Operands::Bf16 | Operands::Bf16Casts => BF16,
                        Operands::F16 => F16,
                        _ => TF32,
                    };
                    let count = p.matches(inst).count();
                    assert!(count > 0, "{c:?}: no {inst}\n{p}");
                    assert!(!p.contains("fma.rn.f32"), "{c:?}: CUDA-core FMAs left\n{p}");
                    // The K loop is unrolled into at least one and at most all k-steps.
                    let tiles = (m / 16 * n / 8).div_ceil(warps as usize);
                    let total = per_tile(ops, k) * tiles;
                    assert!(
                        count <= total && total.is_multiple_of(count),
                        "{c:?}: {count} of {total} mmas"
                    );
                    let split = p.contains(ROUND_TF32);
                    let tf32 = !matches!(ops, Operands::Bf16 | Operands::F16 | Operands::Bf16Casts);
                    assert_eq!(split, tf32, "{c:?}");
                }
            }
        }
    }
}

#[test]
fn warps_beyond_the_tiles_split_k() {
    // [32, 8] has 2 m16n8 tiles: with 4 warps the second warp bit would replicate them, so it
    // splits K instead: each warp runs half the k-steps, and the halves are summed through
    // shared memory.
    for ops in [Operands::F32, Operands::Bf16] {
        let (two, four) = (
            &ptx(case(32, 8, 128, 2, ops, true))[0],
            &ptx(case(32, 8, 128, 4, ops, true))[0],
        );
        assert!(
            !two.contains("ld.shared.v4.f32"),
            "{ops:?} 2 warps: nothing to sum\n{two}"
        );
        assert_eq!(
            four.matches("ld.shared.v4.f32").count(),
            2,
            "{ops:?} 4 warps: two halves\n{four}"
        );
        // mma instructions run per thread (those in the K loop times its trip count, if any):
        // half as many with 4 warps.
        let run = |p: &str| -> usize {
            let trips = p.lines().find(|l| l.trim().starts_with("setp.lt.u32")).map_or(1, |l| {
                l.trim()
                    .trim_end_matches(';')
                    .rsplit(", ")
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap()
            });
            trips * p.matches("mma.sync").count()
        };
        assert_eq!(2 * run(four), run(two), "{ops:?}\n{four}");
    }
}

#[test]
fn exact_operands_have_no_low_part() {
    // f32 @ bf16-cast: only A is split (its high part rounded, the low part left for the
    // tensor cores to truncate), so 2 mma per k-step, and B needs no rounding.
    let p = &ptx(case(64, 8, 128, 4, Operands::F32Bf16Cast, false))[0];
    let mmas = p.matches(TF32).count();
    let cvts = p.matches(ROUND_TF32).count();
    assert_eq!(
        cvts,
        4 * mmas / 2,
        "{mmas} mma, {cvts} roundings (4 A words split per k-step)\n{p}"
    );
    // f32 @ f32: both split, 3 mma per k-step.
    let p = &ptx(case(16, 8, 8, 1, Operands::F32, false))[0];
    assert_eq!(p.matches(TF32).count(), 3);
    assert_eq!(p.matches(ROUND_TF32).count(), 4 + 2);
}

#[test]
fn odd_shapes_stay_on_cuda_cores() {
    for (m, n, k, ops) in [
        (8, 8, 16, Operands::F32),
        (16, 4, 16, Operands::F32),
        (32, 8, 4, Operands::F32),
        (16, 8, 8, Operands::Bf16),
        (4, 64, 32, Operands::F16),
    ] {
        let c = case(m, n, k, 4, ops, true);
        for p in ptx(c) {
            assert!(!p.contains("mma.sync"), "{c:?}\n{p}");
            assert!(p.contains("fma.rn.f32"), "{c:?}\n{p}");
        }
    }
}

#[test]
fn ieee_precision_stays_on_cuda_cores() {
    for ops in [Operands::F32, Operands::Bf16] {
        let c = DotCase {
            precision: DotPrecision::Ieee,
            ..case(32, 32, 32, 4, ops, true)
        };
        for p in ptx(c) {
            assert!(!p.contains("mma.sync"), "{c:?}\n{p}");
            assert!(p.contains("fma.rn.f32"), "{c:?}\n{p}");
        }
        let fast = ptx(case(32, 32, 32, 4, ops, true));
        assert!(
            fast.iter().all(|p| p.contains("mma.sync")),
            "{ops:?}: the default uses tensor cores"
        );
    }
}

/// At `Tf32x3` each k-step's products are summed from zero and added to the accumulator with
/// `add.rn.f32` (one add per accumulator word and k-step); at `Tf32x3Chained` the mmas chain
/// on the accumulator and the k-loop has no such add; both split f32 operands into three
/// terms, staged or read from registers.
#[test]
fn chained_dots_accumulate_on_the_tensor_cores() {
    for (b_k_major, warps) in [(false, 4), (true, 4), (false, 1)] {
        let fresh = DotCase {
            b_k_major,
            ..case(32, 64, 64, warps, Operands::F32, true)
        };
        let chained = DotCase {
            precision: DotPrecision::Tf32x3Chained,
            ..fresh
        };
        for (f, c) in ptx(fresh).iter().zip(ptx(chained)) {
            let adds = |p: &str| p.matches("add.rn.f32").count();
            // Every m16n8 tile of the thread: 4 words, one add per k-step each.
            let tiles = (32 / 16 * 64 / 8) / warps as usize;
            assert!(adds(f) >= tiles * 4, "{fresh:?}: {} adds\n{f}", adds(f));
            assert_eq!(adds(&c), 0, "{chained:?}\n{c}");
            assert_eq!(f.matches(TF32).count(), c.matches(TF32).count(), "{chained:?}");
            assert!(c.contains(ROUND_TF32), "{chained:?}: the split");
        }
    }
}

/// The speculative-verification kernel's products (S × Q, X × W, K × Qᵀ and the checkpoint
/// fold) at 4 and 8 warps: all on tensor cores, within the shared-memory limit, no spills.
#[test]
fn verification_shapes_use_mma() {
    for warps in [4, 8] {
        for (m, n, k, ops, acc) in [
            (64, 8, 128, Operands::F32Bf16Cast, false),
            (64, 8, 64, Operands::F32, false),
            (64, 8, 128, Operands::Bf16Casts, false),
            (64, 128, 64, Operands::F32Bf16Cast, true),
        ] {
            let c = case(m, n, k, warps, ops, acc);
            for p in ptx(c) {
                assert!(p.contains("mma.sync.aligned"), "{c:?}");
            }
        }
    }
}

/// A tf32 dot whose operands are both loaded contiguous along K reads its fragments from
/// registers: A in 16-byte loads, no staging in shared memory and no barrier (one warp, or
/// warps that each hold whole m16n8 tiles); warps that split K still meet in shared memory.
#[test]
fn k_major_operands_stay_in_registers() {
    for ops in [Operands::F32, Operands::F32Bf16Cast] {
        for (m, n, k, warps, split) in [(16, 8, 128, 1, false), (64, 8, 128, 4, false), (32, 8, 128, 4, true)] {
            let c = DotCase {
                b_k_major: true,
                ..case(m, n, k, warps, ops, false)
            };
            for p in ptx(c) {
                assert!(p.contains(TF32), "{c:?}: no tf32 mma\n{p}");
                assert!(p.contains("ld.global.v4.f32"), "{c:?}: A not in 16-byte loads\n{p}");
                assert_eq!(p.contains("bar.sync"), split, "{c:?}: barriers\n{p}");
                assert_eq!(p.contains("ld.shared"), split, "{c:?}: shared-memory reads\n{p}");
                let mmas = p.matches(TF32).count();
                let tiles = (m / 16 * n / 8).div_ceil(warps as usize).max(1);
                let k_steps = if split { k / 8 / 2 } else { k / 8 };
                let terms = per_tile(ops, 8);
                assert_eq!(mmas, tiles * k_steps * terms, "{c:?}: every k-step unrolled\n{p}");
            }
        }
    }
}

/// A transposed f32 A (loaded `[K, M]`, its registers running down its columns) is staged at
/// the row pitch with the fewest bank conflicts over its stores and fragment loads: 67 words
/// (268 bytes) for `K = 64`, where the planned 68 would make the stores conflict 4 ways; at an
/// odd pitch its fragments load one word at a time (two at a time need even rows).
#[test]
fn transposed_operand_is_staged_at_the_least_conflicting_pitch() {
    let c = DotCase {
        a_m_major: true,
        ..case(32, 8, 64, 4, Operands::F32Bf16Cast, false)
    };
    for p in ptx(c) {
        assert!(p.contains(TF32), "{c:?}: no tf32 mma\n{p}");
        assert!(p.contains(", 268, "), "{c:?}: A not staged at a 268-byte pitch\n{p}");
        assert!(
            !p.contains("ld.shared.v2.b32"),
            "{c:?}: A loaded in pairs at an odd pitch\n{p}"
        );
    }
}

/// A small transposed 16-bit A (`[K, M]` f16, 2 KiB: rematerialised where used), cast to f32,
/// is loaded in vectors along its memory rows for its staging, not in the default layout of
/// the transposed shape, which reads one 2-byte element per access across rows.
#[test]
fn small_transposed_operand_loads_in_vectors() {
    let c = DotCase {
        a_m_major: true,
        ..case(32, 8, 32, 4, Operands::F16CastF32, false)
    };
    for p in ptx(c) {
        assert!(p.contains(TF32), "{c:?}: no tf32 mma\n{p}");
        assert!(!p.contains("ld.global.b16"), "{c:?}: A loaded in 2-byte accesses\n{p}");
    }
}

/// A loaded accumulator is read in the dot's accumulator layout, not converted through shared
/// memory: 8-byte accesses (runs of a whole 32-byte sector) where a thread holds one n-tile,
/// 16-byte ones where it holds more (its columns renumbered into runs of 4), and the result
/// stored the same way. With register operands, the dot touches no shared memory at all.
#[test]
fn loaded_accumulator_is_read_in_its_mma_layout() {
    for ops in [Operands::F32, Operands::F32Bf16Cast] {
        for (m, n, k, warps, width) in [
            (16, 8, 128, 1, 2),
            (64, 8, 128, 4, 2),
            (64, 32, 64, 4, 4),
            (32, 64, 32, 4, 4),
        ] {
            let c = DotCase {
                b_k_major: true,
                ..case(m, n, k, warps, ops, true)
            };
            for p in ptx(c) {
                assert!(p.contains(TF32), "{c:?}: no tf32 mma\n{p}");
                for access in [format!("ld.global.v{width}.f32"), format!("st.global.v{width}.f32")] {
                    assert!(
                        p.contains(&access),
                        "{c:?}: no {access}: accumulator not in its layout\n{p}"
                    );
                }
                assert!(!p.contains("shared"), "{c:?}: shared memory used\n{p}");
            }
        }
    }
}

/// A loop-carried operand (the next tile loaded before this one's dot, or the first tile
/// carried unchanged) stays in registers: nothing is staged in shared memory and A is loaded
/// in 16-byte runs.
#[test]
fn pipelined_operands_stay_in_registers() {
    for (m, kk, warps, same) in [(16, 64, 1, false), (64, 64, 4, false), (64, 64, 4, true)] {
        let k = pipelined_kernel(m, 8, kk, 3, warps, same);
        for t in Target::ALL {
            let p = compile(&k, t).unwrap_or_else(|e| panic!("{t}: {e}")).ptx;
            assemble(&k.name, t, &p);
            assert!(p.contains(TF32), "{warps} warps: no tf32 mma\n{p}");
            assert!(
                p.contains("ld.global.v4.f32"),
                "{warps} warps: A not in 16-byte loads\n{p}"
            );
            assert!(!p.contains("st.shared"), "{warps} warps: staged\n{p}");
        }
    }
}

/// A staged tf32 dot (A transposed: not a register operand) whose B is a shared-buffer read
/// (copied in with `cp.async`) loads its fragments from the buffer itself: B is never stored to
/// shared memory by the program (A still is), and a 16-bit B's fragments of two interleaved
/// n-tiles come in one 32-bit load (`ld.shared.b32`, widened with `shl` and `and`). A B of
/// 16-bit operands on their own instruction (`ldmatrix`) is read into registers and staged as
/// before.
#[test]
fn shared_buffer_operands_are_read_in_place() {
    for (ops, m, n, k, warps) in [
        (Operands::F32Bf16Cast, 32, 128, 64, 4),
        (Operands::F32Bf16Cast, 64, 8, 32, 4),
        (Operands::F32, 64, 64, 32, 4),
        (Operands::F16CastF32, 32, 32, 64, 1),
    ] {
        let c = DotCase {
            b_shared: true,
            a_m_major: true,
            ..case(m, n, k, warps, ops, true)
        };
        let stores = |p: &str| p.matches("st.shared").count();
        let loaded = DotCase { b_shared: false, ..c };
        for (p, plain) in ptx(c).into_iter().zip(ptx(loaded)) {
            assert!(p.contains(TF32), "{c:?}: no tf32 mma\n{p}");
            assert!(p.contains("cp.async"), "{c:?}: B not copied\n{p}");
            // A's staging stores only: fewer than with B loaded (and staged), none of bf16.
            assert!(stores(&p) < stores(&plain), "{c:?}: B staged\n{p}");
            if ops == Operands::F32Bf16Cast {
                assert!(!p.contains("st.shared.v4.b16"), "{c:?}: B staged\n{p}");
                assert!(!p.contains("ld.shared.b16"), "{c:?}: B read into registers\n{p}");
            }
        }
        if ops == Operands::F32Bf16Cast && n > 8 {
            let p = &ptx(c)[0];
            assert!(
                p.contains("and.b32") && p.contains("0xffff0000"),
                "{c:?}: B pairs not widened\n{p}"
            );
        }
    }
    let c = DotCase {
        b_shared: true,
        ..case(64, 64, 32, 4, Operands::Bf16, false)
    };
    for p in ptx(c) {
        assert!(
            p.contains(BF16) && p.contains("ldmatrix"),
            "{c:?}: not an ldmatrix bf16 dot\n{p}"
        );
        assert!(p.contains("st.shared"), "{c:?}: B not staged\n{p}");
    }
}

/// A tf32 product whose A is another product's accumulator reads it in registers (the
/// accumulator's layout holds each thread's A fragments, K permuted): with both first operands
/// in registers too, nothing is staged in shared memory at one warp, nor where the warps hold
/// whole m16 tiles of both results; warps that split the second product's K still meet there.
#[test]
fn accumulators_feed_the_next_product_in_registers() {
    for (m, n1, k, warps, split) in [(16, 64, 32, 1, false), (64, 64, 32, 4, false), (32, 128, 64, 4, true)] {
        let kern = chained_kernel(m, n1, k, 8, warps);
        for t in Target::ALL {
            let p = compile(&kern, t).unwrap_or_else(|e| panic!("{t}: {e}")).ptx;
            assemble(&kern.name, t, &p);
            assert!(p.contains(TF32), "{warps} warps: no tf32 mma\n{p}");
            assert_eq!(p.contains("st.shared"), split, "{m}x{n1}, {warps} warps: staged\n{p}");
        }
    }
}
