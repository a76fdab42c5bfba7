//! Tiled matrix product `c = a @ b` (fp32 FMA accumulation).

use super::{rows_to_check, uniform_f32, with_slack, Case, GalleryKernel, Scale, U32};
use crate::harness::{compile_as, get, Arg, BufSpec, Expect, HostData, Instance, OutputCheck, Tol};
use crate::tune::{run_tune, TuneSpec};
use rand::rngs::SmallRng;
use replay_dsl::spec::KernelEntry;
use replay_dsl::Elem;
use replay_kernels::gallery::matmul as g;
use replay_runtime::Grid;

type K = g::matmul::Kernel;

pub(super) fn kernel() -> GalleryKernel {
    GalleryKernel {
        name: "matmul",
        entry: KernelEntry::of::<K>,
        cases,
        bench,
        tiny: || {
            Case::new(
                &[("BM", 64), ("BN", 64), ("BK", 16), ("num_warps", 4)],
                &[("m", 64), ("n", 64), ("k", 64)],
            )
        },
        build,
        expect,
        compile: compile_as::<K>,
        tune_spec,
        tune: run_tune::<K>,
    }
}

fn cases(scale: Scale) -> Vec<Case> {
    let s = |gpu, small| scale.pick(gpu, small);
    vec![
        // m, n, k all off the tiles.
        Case::new(
            &[("BM", 32), ("BN", 32), ("BK", 16), ("num_warps", 4)],
            &[("m", s(100, 37)), ("n", s(70, 45)), ("k", s(50, 23))],
        ),
        // Exact tiles.
        Case::new(
            &[("BM", 64), ("BN", 64), ("BK", 32), ("num_warps", 4)],
            &[("m", s(256, 64)), ("n", s(256, 64)), ("k", s(256, 64))],
        ),
        // Non-square tiles, one past a tile in every dimension.
        Case::new(
            &[("BM", 64), ("BN", 32), ("BK", 16), ("num_warps", 4)],
            &[("m", s(513, 65)), ("n", s(257, 33)), ("k", s(129, 17))],
        ),
        // A single element.
        Case::new(
            &[("BM", 16), ("BN", 16), ("BK", 16), ("num_warps", 1)],
            &[("m", 1), ("n", 1), ("k", 1)],
        ),
    ]
}

/// Fixed benchmark configuration: 64×64 tiles, BK 16, 4 warps.
fn bench(scale: Scale) -> Case {
    let s = scale.pick(2048, 64);
    Case::new(
        &[("BM", 64), ("BN", 64), ("BK", 16), ("num_warps", 4)],
        &[("m", s), ("n", s), ("k", s)],
    )
}

fn build(case: &Case, rng: &mut SmallRng, slack: bool) -> Instance {
    let (m, n, k) = (case.get("m") as usize, case.get("n") as usize, case.get("k") as usize);
    Instance {
        shape: format!("{m}x{n}x{k}"),
        bufs: vec![
            BufSpec::data("a", HostData::F32(uniform_f32(rng, m * k, -1.0, 1.0))),
            BufSpec::data("b", HostData::F32(uniform_f32(rng, k * n, -1.0, 1.0))),
            BufSpec::poisoned("c", Elem::F32, with_slack(m * n, slack)),
        ],
        args: vec![
            Arg::Buf(0),
            Arg::Buf(1),
            Arg::Buf(2),
            Arg::I32(m as i32),
            Arg::I32(n as i32),
            Arg::I32(k as i32),
        ],
        grid: Grid::new(
            (m as u64).div_ceil(case.get("BM") as u64) as u32,
            (n as u64).div_ceil(case.get("BN") as u64) as u32,
            1,
        ),
        min_bytes: 4 * (m * k + k * n + m * n) as u64,
        flops: 2 * (m * n * k) as u64,
    }
}

/// Norm-wise 1e-5, and elementwise the classic dot-product bound |ĉ − c| ≤ γ_k·(|a||b|)ᵢⱼ
/// (taken as 2k·u·(|a||b|)ᵢⱼ): a correct fp32 accumulation can never exceed it.
fn expect(case: &Case, inst: &Instance, sample: bool) -> Vec<OutputCheck> {
    let (m, n, k) = (case.get("m") as usize, case.get("n") as usize, case.get("k") as usize);
    let a = inst.host(0).f32s();
    let b = inst.host(1).f32s();
    let rows = if sample {
        rows_to_check(m, true).into_iter().take(16).collect()
    } else {
        (0..m).collect::<Vec<_>>()
    };
    let abs_b: Vec<f32> = b.iter().map(|v| v.abs()).collect();
    let mut entries = Vec::new();
    for i in rows {
        let row = &a[i * k..(i + 1) * k];
        let abs_row: Vec<f32> = row.iter().map(|v| v.abs()).collect();
        let c = g::reference(row, b, 1, n, k);
        let bound = g::reference(&abs_row, &abs_b, 1, n, k);
        for j in 0..n {
            entries.push((i * n + j, Expect::Within(c[j], 2.0 * k as f64 * U32 * bound[j])));
        }
    }
    entries.extend((m * n..inst.bufs[2].len).map(|i| (i, Expect::Untouched)));
    vec![OutputCheck {
        buf: 2,
        entries,
        tol: Tol::norm(Elem::F32),
    }]
}

/// BM, BN ∈ {32, 64, 128}, BK ∈ {16, 32}, num_warps ∈ {4, 8}: 36 candidates.
fn tune_spec(scale: Scale) -> TuneSpec {
    let b = bench(scale);
    let (m, n, k) = (b.get("m"), b.get("n"), b.get("k"));
    TuneSpec {
        shape: vec![("m", m), ("n", n), ("k", k)],
        axes: vec![
            ("BM", vec![32, 64, 128]),
            ("BN", vec![32, 64, 128]),
            ("BK", vec![16, 32]),
            ("num_warps", vec![4, 8]),
        ],
        scalars: vec![
            ("m", (m as i32).into()),
            ("n", (n as i32).into()),
            ("k", (k as i32).into()),
        ],
        fills: vec![],
        grid: |s, c| {
            Grid::new(
                (get(s, "m") as u64).div_ceil(c("BM") as u64) as u32,
                (get(s, "n") as u64).div_ceil(c("BN") as u64) as u32,
                1,
            )
        },
    }
}
