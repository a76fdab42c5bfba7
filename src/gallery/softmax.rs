//! Row softmax, one program per row.

use super::{matrix, rows_to_check, Case, GalleryKernel, Scale, SLACK};
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
        tiny: || {
            Case::new(
                &[("BLOCK", 4096), ("num_warps", 8)],
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
        // n_cols < BLOCK and stride > n_cols: masked tail columns, untouched padding.
        Case::new(
            &[("BLOCK", 1024), ("num_warps", 4)],
            &[("rows", rows(1823, 5)), ("cols", 781), ("stride", 800)],
        ),
        // Full rows at the benchmark configuration.
        Case::new(
            &[("BLOCK", 4096), ("num_warps", 8)],
            &[("rows", rows(256, 2)), ("cols", 4096), ("stride", 4096)],
        ),
        Case::new(
            &[("BLOCK", 128), ("num_warps", 4)],
            &[("rows", rows(1000, 9)), ("cols", 100), ("stride", 128)],
        ),
        // One column: every output is exactly 1.
        Case::new(
            &[("BLOCK", 32), ("num_warps", 1)],
            &[("rows", rows(77, 3)), ("cols", 1), ("stride", 32)],
        ),
    ]
}

/// Fixed benchmark configuration: BLOCK 4096 (one row), 8 warps.
fn bench(scale: Scale) -> Case {
    match scale {
        Scale::Gpu => Case::new(
            &[("BLOCK", 4096), ("num_warps", 8)],
            &[("rows", 65536), ("cols", 4096), ("stride", 4096)],
        ),
        Scale::Small => Case::new(
            &[("BLOCK", 1024), ("num_warps", 4)],
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
    // Padding columns hold 50: a kernel that read them would see exp(50) dominate the row.
    let x = matrix(rng, rows, cols, stride, -4.0, 4.0, 50.0);
    Instance {
        shape: format!("{rows}x{cols} (stride {stride})"),
        bufs: vec![
            BufSpec::data("x", HostData::F32(x)),
            BufSpec::poisoned("out", Elem::F32, rows * stride + extra),
        ],
        args: vec![
            Arg::Buf(0),
            Arg::Buf(1),
            Arg::I32(rows as i32),
            Arg::I32(cols as i32),
            Arg::I32(stride as i32),
        ],
        grid: Grid::from(rows as u32),
        min_bytes: 8 * (rows * cols) as u64,
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
    let mut entries = Vec::new();
    for r in rows_to_check(rows, sample) {
        let row = &x[r * stride..(r + 1) * stride];
        let reference = g::reference(row, 1, cols, stride);
        for (c, v) in reference.into_iter().enumerate() {
            let e = if c < cols { Expect::Value(v) } else { Expect::Untouched };
            entries.push((r * stride + c, e));
        }
    }
    entries.extend((rows * stride..inst.bufs[1].len).map(|i| (i, Expect::Untouched)));
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
    let (rows, cols, stride) = (b.get("rows"), b.get("cols"), b.get("stride"));
    let block = (cols as u64).next_power_of_two() as i64;
    TuneSpec {
        shape: vec![("rows", rows), ("cols", cols), ("stride", stride)],
        axes: vec![
            ("BLOCK", vec![block, 2 * block]),
            ("num_warps", vec![1, 2, 4, 8, 16, 32]),
        ],
        scalars: vec![
            ("n_rows", (rows as i32).into()),
            ("n_cols", (cols as i32).into()),
            ("stride", (stride as i32).into()),
        ],
        fills: vec![],
        grid: |s, _| Grid::from(get(s, "rows") as u32),
    }
}
