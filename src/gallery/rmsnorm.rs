//! RMSNorm, `ROWS` rows per program.

use super::{matrix, rows_to_check, uniform_f32, Case, GalleryKernel, Scale, SLACK};
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
        tiny: || {
            Case::new(
                &[("ROWS", 1), ("BLOCK", 4096), ("num_warps", 8)],
                &[("rows", 1), ("cols", 4096), ("stride", 4096)],
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
    let rows = |gpu: i64, small: i64| match scale {
        Scale::Gpu => gpu,
        Scale::Small => small,
    };
    vec![
        // n_cols < BLOCK, padded stride.
        Case::new(
            &[("ROWS", 1), ("BLOCK", 1024), ("num_warps", 4)],
            &[("rows", rows(1000, 3)), ("cols", 1000), ("stride", 1024)],
        ),
        // rows not a multiple of ROWS: the last program has masked rows.
        Case::new(
            &[("ROWS", 4), ("BLOCK", 256), ("num_warps", 4)],
            &[("rows", rows(1001, 9)), ("cols", 250), ("stride", 256)],
        ),
        // The benchmark configuration.
        Case::new(
            &[("ROWS", 1), ("BLOCK", 4096), ("num_warps", 8)],
            &[("rows", rows(256, 2)), ("cols", 4096), ("stride", 4096)],
        ),
        Case::new(
            &[("ROWS", 2), ("BLOCK", 16), ("num_warps", 1)],
            &[("rows", rows(33, 7)), ("cols", 10), ("stride", 16)],
        ),
    ]
}

/// Fixed benchmark configuration: one row of 4096 per program, 8 warps.
fn bench(scale: Scale) -> Case {
    match scale {
        Scale::Gpu => Case::new(
            &[("ROWS", 1), ("BLOCK", 4096), ("num_warps", 8)],
            &[("rows", 65536), ("cols", 4096), ("stride", 4096)],
        ),
        Scale::Small => Case::new(
            &[("ROWS", 1), ("BLOCK", 1024), ("num_warps", 4)],
            &[("rows", 16), ("cols", 1024), ("stride", 1024)],
        ),
    }
}

fn build(case: &Case, rng: &mut SmallRng, slack: bool) -> Instance {
    let (rows, cols, stride) = (
        case.get("rows") as usize,
        case.get("cols") as usize,
        case.get("stride") as usize,
    );
    let extra = if slack { SLACK } else { 0 };
    let x = matrix(rng, rows, cols, stride, -2.0, 2.0, 50.0);
    let w = uniform_f32(rng, cols, -1.5, 1.5);
    Instance {
        shape: format!("{rows}x{cols} (stride {stride})"),
        bufs: vec![
            BufSpec::data("x", HostData::F32(x)),
            BufSpec::data("w", HostData::F32(w)),
            BufSpec::poisoned("out", Elem::F32, rows * stride + extra),
        ],
        args: vec![
            Arg::Buf(0),
            Arg::Buf(1),
            Arg::Buf(2),
            Arg::I32(rows as i32),
            Arg::I32(cols as i32),
            Arg::I32(stride as i32),
            Arg::F32(EPS),
        ],
        grid: Grid::cdiv(rows as u64, case.get("ROWS") as u64),
        min_bytes: 8 * (rows * cols) as u64 + 4 * cols as u64,
        flops: 0,
    }
}

fn expect(case: &Case, inst: &Instance, sample: bool) -> Vec<OutputCheck> {
    let (rows, cols, stride) = (
        case.get("rows") as usize,
        case.get("cols") as usize,
        case.get("stride") as usize,
    );
    let x = inst.bufs[0].data.as_ref().expect("x").f32s();
    let w = inst.bufs[1].data.as_ref().expect("w").f32s();
    let mut entries = Vec::new();
    for r in rows_to_check(rows, sample) {
        let reference = g::reference(&x[r * stride..(r + 1) * stride], w, 1, cols, stride, EPS);
        for (c, v) in reference.into_iter().enumerate() {
            let e = if c < cols { Expect::Value(v) } else { Expect::Untouched };
            entries.push((r * stride + c, e));
        }
    }
    entries.extend((rows * stride..inst.bufs[2].len).map(|i| (i, Expect::Untouched)));
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
    let (rows, cols, stride) = (b.get("rows"), b.get("cols"), b.get("stride"));
    TuneSpec {
        shape: vec![("rows", rows), ("cols", cols), ("stride", stride)],
        axes: vec![
            ("BLOCK", vec![(cols as u64).next_power_of_two() as i64]),
            ("ROWS", vec![1, 2, 4, 8]),
            ("num_warps", vec![1, 2, 4, 8, 16]),
        ],
        scalars: vec![
            ("n_rows", (rows as i32).into()),
            ("n_cols", (cols as i32).into()),
            ("stride", (stride as i32).into()),
            ("eps", EPS.into()),
        ],
        fills: vec![("w", Fill::Uniform(0.5, 1.5))],
        grid: |s, c| Grid::cdiv(get(s, "rows") as u64, c("ROWS") as u64),
    }
}
