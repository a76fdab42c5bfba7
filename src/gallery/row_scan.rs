//! Row-wise cumulative sums and products.

use super::{rows_to_check, Case, GalleryKernel, Scale, SLACK, U32};
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
        tiny: || {
            Case::new(
                &[("ROWS", 1), ("BLOCK", 1024), ("num_warps", 4)],
                &[("rows", 1), ("cols", 1024), ("stride", 1024)],
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
        Case::new(
            &[("ROWS", 4), ("BLOCK", 128), ("num_warps", 4)],
            &[("rows", rows(1003, 7)), ("cols", 100), ("stride", 128)],
        ),
        Case::new(
            &[("ROWS", 1), ("BLOCK", 512), ("num_warps", 4)],
            &[("rows", rows(500, 3)), ("cols", 300), ("stride", 320)],
        ),
        Case::new(
            &[("ROWS", 2), ("BLOCK", 128), ("num_warps", 4)],
            &[("rows", rows(64, 4)), ("cols", 128), ("stride", 128)],
        ),
        Case::new(
            &[("ROWS", 8), ("BLOCK", 32), ("num_warps", 1)],
            &[("rows", rows(21, 11)), ("cols", 17), ("stride", 32)],
        ),
    ]
}

/// Fixed benchmark configuration: one row of 1024 per program, 4 warps.
fn bench(scale: Scale) -> Case {
    match scale {
        Scale::Gpu => Case::new(
            &[("ROWS", 1), ("BLOCK", 1024), ("num_warps", 4)],
            &[("rows", 65536), ("cols", 1024), ("stride", 1024)],
        ),
        Scale::Small => Case::new(
            &[("ROWS", 1), ("BLOCK", 256), ("num_warps", 4)],
            &[("rows", 16), ("cols", 256), ("stride", 256)],
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
    // ±[0.5, 1.5): sums cancel, products neither vanish nor explode over a row.
    let mut x = vec![50.0f32; rows * stride];
    for r in 0..rows {
        for v in &mut x[r * stride..r * stride + cols] {
            let m: f32 = rng.gen_range(0.5..1.5);
            *v = if rng.gen_bool(0.5) { m } else { -m };
        }
    }
    Instance {
        shape: format!("{rows}x{cols} (stride {stride})"),
        bufs: vec![
            BufSpec::data("x", HostData::F32(x)),
            BufSpec::poisoned("sums", Elem::F32, rows * stride + extra),
            BufSpec::poisoned("prods", Elem::F32, rows * stride + extra),
        ],
        args: vec![
            Arg::Buf(0),
            Arg::Buf(1),
            Arg::Buf(2),
            Arg::I32(rows as i32),
            Arg::I32(cols as i32),
            Arg::I32(stride as i32),
        ],
        grid: Grid::cdiv(rows as u64, case.get("ROWS") as u64),
        min_bytes: 12 * (rows * cols) as u64,
        flops: 0,
    }
}

/// Sums: |err| ≤ (c+1)·u·Σ|x| at column c (sums cancel, so no relative bound per element);
/// products: relative error ≤ 2·(c+1)·u (c+1 roundings, no cancellation).
fn expect(case: &Case, inst: &Instance, sample: bool) -> Vec<OutputCheck> {
    let (rows, cols, stride) = (
        case.get("rows") as usize,
        case.get("cols") as usize,
        case.get("stride") as usize,
    );
    let x = inst.bufs[0].data.as_ref().expect("x").f32s();
    let (mut sums, mut prods) = (Vec::new(), Vec::new());
    for r in rows_to_check(rows, sample) {
        let row = &x[r * stride..(r + 1) * stride];
        let (s, p) = g::reference(row, 1, cols, stride);
        let abs_row: Vec<f32> = row.iter().map(|v| v.abs()).collect();
        let (abs_sums, _) = g::reference(&abs_row, 1, cols, stride);
        for c in 0..stride {
            let i = r * stride + c;
            if c < cols {
                let n = (c + 1) as f64;
                sums.push((i, Expect::Within(s[c], 2.0 * n * U32 * abs_sums[c])));
                prods.push((i, Expect::Within(p[c], 2.0 * n * U32 * p[c].abs())));
            } else {
                sums.push((i, Expect::Untouched));
                prods.push((i, Expect::Untouched));
            }
        }
    }
    for i in rows * stride..inst.bufs[1].len {
        sums.push((i, Expect::Untouched));
        prods.push((i, Expect::Untouched));
    }
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
    let (rows, cols, stride) = (b.get("rows"), b.get("cols"), b.get("stride"));
    TuneSpec {
        shape: vec![("rows", rows), ("cols", cols), ("stride", stride)],
        axes: vec![
            ("BLOCK", vec![(cols as u64).next_power_of_two() as i64]),
            ("ROWS", vec![1, 2, 4, 8]),
            ("num_warps", vec![1, 2, 4, 8]),
        ],
        scalars: vec![
            ("n_rows", (rows as i32).into()),
            ("n_cols", (cols as i32).into()),
            ("stride", (stride as i32).into()),
        ],
        fills: vec![("x", Fill::Uniform(0.5, 1.5))],
        grid: |s, c| Grid::cdiv(get(s, "rows") as u64, c("ROWS") as u64),
    }
}
