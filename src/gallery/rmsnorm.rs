//! RMSNorm, `ROWS` rows per program.

use super::rows::{row_case, tune_problem, RowShape};
use super::{matrix, uniform_f32, Case, GalleryKernel, Scale};
use crate::harness::{compile_as, get, Arg, BufSpec, Expect, HostData, Instance, OutputCheck, Tol};
use crate::tune::{run_tune, TuneSpec};
use rand::rngs::SmallRng;
use replay_dsl::spec::KernelEntry;
use replay_dsl::Elem;
use replay_kernels::gallery::rmsnorm as g;
use replay_runtime::tune::Fill;
use replay_runtime::Grid;

type K = g::rmsnorm::Kernel;

const EPS: f32 = 1e-5;

pub(super) fn kernel() -> GalleryKernel {
    GalleryKernel {
        name: "rmsnorm",
        entry: KernelEntry::of::<K>,
        cases,
        bench,
        tiny: || row_case(&[("ROWS", 1), ("BLOCK", 4096), ("num_warps", 8)], 1, 4096, 4096),
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
        // n_cols < BLOCK, padded stride.
        row_case(
            &[("ROWS", 1), ("BLOCK", 1024), ("num_warps", 4)],
            rows(1000, 3),
            1000,
            1024,
        ),
        // rows not a multiple of ROWS: the last program has masked rows.
        row_case(
            &[("ROWS", 4), ("BLOCK", 256), ("num_warps", 4)],
            rows(1001, 9),
            250,
            256,
        ),
        // The benchmark configuration.
        row_case(
            &[("ROWS", 1), ("BLOCK", 4096), ("num_warps", 8)],
            rows(256, 2),
            4096,
            4096,
        ),
        row_case(&[("ROWS", 2), ("BLOCK", 16), ("num_warps", 1)], rows(33, 7), 10, 16),
    ]
}

/// Fixed benchmark configuration: one row of 4096 per program, 8 warps.
fn bench(scale: Scale) -> Case {
    match scale {
        Scale::Gpu => row_case(&[("ROWS", 1), ("BLOCK", 4096), ("num_warps", 8)], 65536, 4096, 4096),
        Scale::Small => row_case(&[("ROWS", 1), ("BLOCK", 1024), ("num_warps", 4)], 16, 1024, 1024),
    }
}

fn build(case: &Case, rng: &mut SmallRng, slack: bool) -> Instance {
    let sh = RowShape::of(case);
    let x = matrix(rng, sh.rows, sh.cols, sh.stride, -2.0, 2.0, 50.0);
    let w = uniform_f32(rng, sh.cols, -1.5, 1.5);
    let mut args = vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2)];
    args.extend(sh.args());
    args.push(Arg::F32(EPS));
    Instance {
        shape: sh.label(),
        bufs: vec![
            BufSpec::data("x", HostData::F32(x)),
            BufSpec::data("w", HostData::F32(w)),
            BufSpec::poisoned("out", Elem::F32, sh.out_len(slack)),
        ],
        args,
        grid: Grid::cdiv(sh.rows as u64, case.get("ROWS") as u64),
        min_bytes: 8 * (sh.rows * sh.cols) as u64 + 4 * sh.cols as u64,
        flops: 0,
    }
}

fn expect(case: &Case, inst: &Instance, sample: bool) -> Vec<OutputCheck> {
    let sh = RowShape::of(case);
    let x = inst.host(0).f32s();
    let w = inst.host(1).f32s();
    let entries = sh.entries(inst.bufs[2].len, sample, |r| {
        let reference = g::reference(sh.row(x, r), w, 1, sh.cols, sh.stride, EPS);
        reference.into_iter().map(Expect::Value).collect()
    });
    vec![OutputCheck {
        buf: 2,
        entries,
        tol: Tol::elementwise(Elem::F32),
    }]
}

/// BLOCK fixed by the row length; ROWS ∈ {1, 2, 4, 8} × num_warps ∈ {1, …, 16}: 20
/// candidates (register-bound ones are pruned after loading).
fn tune_spec(scale: Scale) -> TuneSpec {
    let b = bench(scale);
    let (shape, mut scalars) = tune_problem(&b);
    scalars.push(("eps", EPS.into()));
    TuneSpec {
        shape,
        axes: vec![
            ("BLOCK", vec![(b.get("cols") as u64).next_power_of_two() as i64]),
            ("ROWS", vec![1, 2, 4, 8]),
            ("num_warps", vec![1, 2, 4, 8, 16]),
        ],
        scalars,
        fills: vec![("w", Fill::Uniform(0.5, 1.5))],
        grid: |s, c| Grid::cdiv(get(s, "rows") as u64, c("ROWS") as u64),
    }
}
