//! Row-wise cumulative sums and products.

use super::rows::{row_case, tune_problem, RowShape};
use super::{Case, GalleryKernel, Scale, U32};
use crate::harness::{compile_as, get, Arg, BufSpec, Expect, HostData, Instance, OutputCheck, Tol};
use crate::tune::{run_tune, TuneSpec};
use rand::rngs::SmallRng;
use rand::Rng;
use replay_dsl::spec::KernelEntry;
use replay_dsl::Elem;
use replay_kernels::gallery::scan as g;
use replay_runtime::tune::Fill;
use replay_runtime::Grid;

type K = g::row_scan::Kernel;

pub(super) fn kernel() -> GalleryKernel {
    GalleryKernel {
        name: "row_scan",
        entry: KernelEntry::of::<K>,
        cases,
        bench,
        tiny: || row_case(&[("ROWS", 1), ("BLOCK", 1024), ("num_warps", 4)], 1, 1024, 1024),
        build,
        expect,
        compile: compile_as::<K>,
        tune_spec,
        tune: run_tune::<K>,
    }
}

fn cases(scale: Scale) -> Vec<Case> {
    let rows = |gpu, small| scale.pick(gpu, small);
    vec![
        row_case(
            &[("ROWS", 4), ("BLOCK", 128), ("num_warps", 4)],
            rows(1003, 7),
            100,
            128,
        ),
        row_case(&[("ROWS", 1), ("BLOCK", 512), ("num_warps", 4)], rows(500, 3), 300, 320),
        row_case(&[("ROWS", 2), ("BLOCK", 128), ("num_warps", 4)], rows(64, 4), 128, 128),
        row_case(&[("ROWS", 8), ("BLOCK", 32), ("num_warps", 1)], rows(21, 11), 17, 32),
    ]
}

/// Fixed benchmark configuration: one row of 1024 per program, 4 warps.
fn bench(scale: Scale) -> Case {
    match scale {
        Scale::Gpu => row_case(&[("ROWS", 1), ("BLOCK", 1024), ("num_warps", 4)], 65536, 1024, 1024),
        Scale::Small => row_case(&[("ROWS", 1), ("BLOCK", 256), ("num_warps", 4)], 16, 256, 256),
    }
}

fn build(case: &Case, rng: &mut SmallRng, slack: bool) -> Instance {
    let sh = RowShape::of(case);
    // ±[0.5, 1.5): sums cancel, products neither vanish nor explode over a row.
    let mut x = vec![50.0f32; sh.rows * sh.stride];
    for r in 0..sh.rows {
        for v in &mut x[r * sh.stride..r * sh.stride + sh.cols] {
            let m: f32 = rng.gen_range(0.5..1.5);
            *v = if rng.gen_bool(0.5) { m } else { -m };
        }
    }
    let mut args = vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2)];
    args.extend(sh.args());
    Instance {
        shape: sh.label(),
        bufs: vec![
            BufSpec::data("x", HostData::F32(x)),
            BufSpec::poisoned("sums", Elem::F32, sh.out_len(slack)),
            BufSpec::poisoned("prods", Elem::F32, sh.out_len(slack)),
        ],
        args,
        grid: Grid::cdiv(sh.rows as u64, case.get("ROWS") as u64),
        min_bytes: 12 * (sh.rows * sh.cols) as u64,
        flops: 0,
    }
}

/// Sums: |err| ≤ (c+1)·u·Σ|x| at column c (sums cancel, so no relative bound per element);
/// products: relative error ≤ 2·(c+1)·u (c+1 roundings, no cancellation).
fn expect(case: &Case, inst: &Instance, sample: bool) -> Vec<OutputCheck> {
    let sh = RowShape::of(case);
    let x = inst.host(0).f32s();
    let bound = |c: usize, scale: f64| 2.0 * (c + 1) as f64 * U32 * scale;
    let sums = sh.entries(inst.bufs[1].len, sample, |r| {
        let row = sh.row(x, r);
        let (s, _) = g::reference(row, 1, sh.cols, sh.stride);
        let abs_row: Vec<f32> = row.iter().map(|v| v.abs()).collect();
        let (abs_sums, _) = g::reference(&abs_row, 1, sh.cols, sh.stride);
        (0..sh.cols)
            .map(|c| Expect::Within(s[c], bound(c, abs_sums[c])))
            .collect()
    });
    let prods = sh.entries(inst.bufs[2].len, sample, |r| {
        let (_, p) = g::reference(sh.row(x, r), 1, sh.cols, sh.stride);
        (0..sh.cols)
            .map(|c| Expect::Within(p[c], bound(c, p[c].abs())))
            .collect()
    });
    vec![
        OutputCheck {
            buf: 1,
            entries: sums,
            tol: Tol::norm(Elem::F32),
        },
        OutputCheck {
            buf: 2,
            entries: prods,
            tol: Tol::norm(Elem::F32),
        },
    ]
}

/// BLOCK fixed by the row length; ROWS ∈ {1, 2, 4, 8} × num_warps ∈ {1, 2, 4, 8}.
fn tune_spec(scale: Scale) -> TuneSpec {
    let b = bench(scale);
    let (shape, scalars) = tune_problem(&b);
    TuneSpec {
        shape,
        axes: vec![
            ("BLOCK", vec![(b.get("cols") as u64).next_power_of_two() as i64]),
            ("ROWS", vec![1, 2, 4, 8]),
            ("num_warps", vec![1, 2, 4, 8]),
        ],
        scalars,
        fills: vec![("x", Fill::Uniform(0.5, 1.5))],
        grid: |s, c| Grid::cdiv(get(s, "rows") as u64, c("ROWS") as u64),
    }
}
