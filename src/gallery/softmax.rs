//! Row softmax, one program per row.

use super::rows::{row_case, tune_problem, RowShape};
use super::{matrix, Case, GalleryKernel, Scale};
use crate::harness::{compile_as, get, Arg, BufSpec, Expect, HostData, Instance, OutputCheck, Tol};
use crate::tune::{run_tune, TuneSpec};
use rand::rngs::SmallRng;
use replay_dsl::spec::KernelEntry;
use replay_dsl::Elem;
use replay_kernels::gallery::softmax as g;
use replay_runtime::Grid;

type K = g::softmax::Kernel;

pub(super) fn kernel() -> GalleryKernel {
    GalleryKernel {
        name: "softmax",
        entry: KernelEntry::of::<K>,
        cases,
        bench,
        tiny: || row_case(&[("BLOCK", 4096), ("num_warps", 8)], 1, 4096, 4096),
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
        // n_cols < BLOCK and stride > n_cols: masked tail columns, untouched padding.
        row_case(&[("BLOCK", 1024), ("num_warps", 4)], rows(1823, 5), 781, 800),
        // Full rows at the benchmark configuration.
        row_case(&[("BLOCK", 4096), ("num_warps", 8)], rows(256, 2), 4096, 4096),
        row_case(&[("BLOCK", 128), ("num_warps", 4)], rows(1000, 9), 100, 128),
        // One column: every output is exactly 1.
        row_case(&[("BLOCK", 32), ("num_warps", 1)], rows(77, 3), 1, 32),
    ]
}

/// Fixed benchmark configuration: BLOCK 4096 (one row), 8 warps.
fn bench(scale: Scale) -> Case {
    match scale {
        Scale::Gpu => row_case(&[("BLOCK", 4096), ("num_warps", 8)], 65536, 4096, 4096),
        Scale::Small => row_case(&[("BLOCK", 1024), ("num_warps", 4)], 16, 1024, 1024),
    }
}

fn build(case: &Case, rng: &mut SmallRng, slack: bool) -> Instance {
    let sh = RowShape::of(case);
    // Padding columns hold 50: a kernel that read them would see exp(50) dominate the row.
    let x = matrix(rng, sh.rows, sh.cols, sh.stride, -4.0, 4.0, 50.0);
    let mut args = vec![Arg::Buf(0), Arg::Buf(1)];
    args.extend(sh.args());
    Instance {
        shape: sh.label(),
        bufs: vec![
            BufSpec::data("x", HostData::F32(x)),
            BufSpec::poisoned("out", Elem::F32, sh.out_len(slack)),
        ],
        args,
        grid: Grid::from(sh.rows as u32),
        min_bytes: 8 * (sh.rows * sh.cols) as u64,
        flops: 0,
    }
}

fn expect(case: &Case, inst: &Instance, sample: bool) -> Vec<OutputCheck> {
    let sh = RowShape::of(case);
    let x = inst.host(0).f32s();
    let entries = sh.entries(inst.bufs[1].len, sample, |r| {
        let reference = g::reference(sh.row(x, r), 1, sh.cols, sh.stride);
        reference.into_iter().map(Expect::Value).collect()
    });
    vec![OutputCheck {
        buf: 1,
        entries,
        tol: Tol::elementwise(Elem::F32),
    }]
}

/// BLOCK is fixed by the row length (the next power of two, and twice that); num_warps
/// 1…32: 12 candidates.
fn tune_spec(scale: Scale) -> TuneSpec {
    let b = bench(scale);
    let (shape, scalars) = tune_problem(&b);
    let block = (b.get("cols") as u64).next_power_of_two() as i64;
    TuneSpec {
        shape,
        axes: vec![
            ("BLOCK", vec![block, 2 * block]),
            ("num_warps", vec![1, 2, 4, 8, 16, 32]),
        ],
        scalars,
        fills: vec![],
        grid: |s, _| Grid::from(get(s, "rows") as u32),
    }
}
