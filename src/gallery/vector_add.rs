//! `out = x + y`.

use super::{block_tune_spec, uniform_f32, with_slack, Case, GalleryKernel, Scale};
use crate::harness::{compile_as, Arg, BufSpec, Expect, HostData, Instance, OutputCheck, Tol};
use crate::tune::{run_tune, TuneSpec};
use rand::rngs::SmallRng;
use replay_dsl::spec::KernelEntry;
use replay_dsl::Elem;
use replay_kernels::gallery::vector_add as g;
use replay_runtime::Grid;

type K = g::vector_add::Kernel;

pub(super) fn kernel() -> GalleryKernel {
    GalleryKernel {
        name: "vector_add",
        entry: KernelEntry::of::<K>,
        cases,
        bench,
        tiny: || Case::new(&[("BLOCK", 1024), ("num_warps", 4)], &[("n", 1024)]),
        build,
        expect,
        compile: compile_as::<K>,
        tune_spec,
        tune: run_tune::<K>,
    }
}

fn cases(scale: Scale) -> Vec<Case> {
    let big = |gpu, small| scale.pick(gpu, small);
    vec![
        // n not a multiple of BLOCK: the last program is partly masked.
        Case::new(&[("BLOCK", 1024), ("num_warps", 4)], &[("n", big(1_000_003, 3_000))]),
        // An exact multiple: no tail.
        Case::new(&[("BLOCK", 1024), ("num_warps", 4)], &[("n", big(1 << 20, 2_048))]),
        // One element.
        Case::new(&[("BLOCK", 256), ("num_warps", 2)], &[("n", 1)]),
        // A small odd size with a small block.
        Case::new(&[("BLOCK", 128), ("num_warps", 4)], &[("n", big(12_345, 333))]),
    ]
}

/// Fixed benchmark configuration: BLOCK 1024, 4 warps (8 elements per thread).
fn bench(scale: Scale) -> Case {
    let n = scale.pick(1 << 28, 1 << 14);
    Case::new(&[("BLOCK", 1024), ("num_warps", 4)], &[("n", n)])
}

fn build(case: &Case, rng: &mut SmallRng, slack: bool) -> Instance {
    let n = case.get("n") as usize;
    Instance {
        shape: format!("n={n}"),
        bufs: vec![
            BufSpec::data("x", HostData::F32(uniform_f32(rng, n, -1.0, 1.0))),
            BufSpec::data("y", HostData::F32(uniform_f32(rng, n, -1.0, 1.0))),
            BufSpec::poisoned("out", Elem::F32, with_slack(n, slack)),
        ],
        args: vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::I32(n as i32)],
        grid: Grid::cdiv(n as u64, case.get("BLOCK") as u64),
        min_bytes: 12 * n as u64,
        flops: 0,
    }
}

/// One correctly rounded addition per element: elementwise relative error ≤ 2⁻²⁴.
fn expect(_case: &Case, inst: &Instance, sample: bool) -> Vec<OutputCheck> {
    let x = inst.host(0).f32s();
    let y = inst.host(1).f32s();
    let n = x.len();
    let step = if sample { (n / (1 << 20)).max(1) } else { 1 };
    let idx: Vec<usize> = (0..n).step_by(step).chain(n.saturating_sub(1)..n).collect();
    let xs: Vec<f32> = idx.iter().map(|&i| x[i]).collect();
    let ys: Vec<f32> = idx.iter().map(|&i| y[i]).collect();
    let reference = g::reference(&xs, &ys);
    let mut entries: Vec<(usize, Expect)> = idx.iter().zip(reference).map(|(&i, r)| (i, Expect::Value(r))).collect();
    entries.extend((n..inst.bufs[2].len).map(|i| (i, Expect::Untouched)));
    vec![OutputCheck {
        buf: 2,
        entries,
        tol: Tol::elementwise(Elem::F32),
    }]
}

fn tune_spec(scale: Scale) -> TuneSpec {
    block_tune_spec(bench(scale).get("n"), vec![])
}
