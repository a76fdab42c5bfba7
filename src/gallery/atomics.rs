//! Reductions across programs with atomics: `histogram` and `global_max` (exact, integer).

use super::{block_tune_spec, uniform_i32, Case, GalleryKernel, Scale};
use crate::harness::{compile_as, Arg, BufSpec, Expect, HostData, Instance, OutputCheck, Tol};
use crate::tune::run_tune;
use rand::rngs::SmallRng;
use replay_dsl::spec::KernelEntry;
use replay_dsl::Elem;
use replay_kernels::gallery::atomics as g;
use replay_runtime::tune::Fill;
use replay_runtime::Grid;

type Hist = g::histogram::Kernel;
type Max = g::global_max::Kernel;

/// Trailing sentinels after the histogram / the result, which must stay as they were.
const SENTINELS: usize = 16;

/// Elements of the benchmark case (and of the tuning problem).
fn bench_n(scale: Scale) -> i64 {
    scale.pick(1 << 26, 1 << 14)
}

pub(super) fn histogram() -> GalleryKernel {
    GalleryKernel {
        name: "histogram",
        entry: KernelEntry::of::<Hist>,
        cases: |scale| {
            let s = |gpu, small| scale.pick(gpu, small);
            vec![
                Case::new(
                    &[("BLOCK", 1024), ("BINS", 64), ("num_warps", 4)],
                    &[("n", s(1_000_003, 3_000))],
                ),
                Case::new(&[("BLOCK", 256), ("BINS", 16), ("num_warps", 4)], &[("n", 100)]),
                Case::new(
                    &[("BLOCK", 1024), ("BINS", 256), ("num_warps", 8)],
                    &[("n", s(1 << 20, 2_048))],
                ),
            ]
        },
        // Fixed benchmark configuration: BLOCK 1024, 64 bins, 4 warps.
        bench: |scale| {
            Case::new(
                &[("BLOCK", 1024), ("BINS", 64), ("num_warps", 4)],
                &[("n", bench_n(scale))],
            )
        },
        tiny: || Case::new(&[("BLOCK", 1024), ("BINS", 64), ("num_warps", 4)], &[("n", 1024)]),
        build: build_histogram,
        expect: expect_histogram,
        compile: compile_as::<Hist>,
        tune_spec: |scale| {
            let fills = vec![("x", Fill::Uniform(-8.0, 72.0)), ("hist", Fill::Constant(0.0))];
            block_tune_spec(bench_n(scale), fills)
        },
        tune: run_tune::<Hist>,
    }
}

fn build_histogram(case: &Case, rng: &mut SmallRng, _slack: bool) -> Instance {
    let n = case.get("n") as usize;
    let bins = case.get("BINS") as usize;
    // Values beyond both ends of the bins exercise the clamping.
    let x = uniform_i32(rng, n, -8, bins as i32 + 8);
    // The histogram accumulates: it starts from random counts (never zeros), followed by
    // sentinels that must stay as they are.
    let hist = uniform_i32(rng, bins + SENTINELS, 1, 1000);
    Instance {
        shape: format!("n={n} bins={bins}"),
        bufs: vec![
            BufSpec::data("x", HostData::I32(x)),
            BufSpec::data("hist", HostData::I32(hist)),
        ],
        args: vec![Arg::Buf(0), Arg::Buf(1), Arg::I32(n as i32)],
        grid: Grid::cdiv(n as u64, case.get("BLOCK") as u64),
        min_bytes: 4 * n as u64 + 8 * bins as u64,
        flops: 0,
    }
}

fn expect_histogram(case: &Case, inst: &Instance, _sample: bool) -> Vec<OutputCheck> {
    let bins = case.get("BINS") as usize;
    let x = inst.host(0).i32s();
    let base = inst.host(1).i32s();
    let counts = g::histogram_reference(x, bins);
    let mut entries: Vec<(usize, Expect)> = counts
        .iter()
        .enumerate()
        .map(|(b, c)| (b, Expect::Exact(base[b] as i64 + c)))
        .collect();
    entries.extend((bins..base.len()).map(|i| (i, Expect::Untouched)));
    vec![OutputCheck {
        buf: 1,
        entries,
        tol: Tol::norm(Elem::I32),
    }]
}

pub(super) fn global_max() -> GalleryKernel {
    GalleryKernel {
        name: "global_max",
        entry: KernelEntry::of::<Max>,
        cases: |scale| {
            let s = |gpu, small| scale.pick(gpu, small);
            vec![
                Case::new(&[("BLOCK", 1024), ("num_warps", 4)], &[("n", s(1_000_003, 3_000))]),
                Case::new(&[("BLOCK", 128), ("num_warps", 4)], &[("n", 5)]),
                Case::new(&[("BLOCK", 256), ("num_warps", 2)], &[("n", s(4096, 512))]),
            ]
        },
        // Fixed benchmark configuration: BLOCK 1024, 4 warps.
        bench: |scale| Case::new(&[("BLOCK", 1024), ("num_warps", 4)], &[("n", bench_n(scale))]),
        tiny: || Case::new(&[("BLOCK", 1024), ("num_warps", 4)], &[("n", 1024)]),
        build: build_max,
        expect: expect_max,
        compile: compile_as::<Max>,
        tune_spec: |scale| {
            let fills = vec![
                ("x", Fill::Uniform(-1e9, 1e9)),
                ("result", Fill::Constant(i32::MIN as f64)),
            ];
            block_tune_spec(bench_n(scale), fills)
        },
        tune: run_tune::<Max>,
    }
}

fn build_max(case: &Case, rng: &mut SmallRng, _slack: bool) -> Instance {
    let n = case.get("n") as usize;
    let x = uniform_i32(rng, n, -(1 << 30), 1 << 30);
    // The result starts from a random value: sometimes above every x (must survive), mostly
    // below; sentinels follow.
    let mut result = uniform_i32(rng, 1 + SENTINELS, i32::MIN, i32::MAX);
    result[0] = uniform_i32(rng, 1, -(1 << 30), (1 << 30) + (1 << 28))[0];
    Instance {
        shape: format!("n={n}"),
        bufs: vec![
            BufSpec::data("x", HostData::I32(x)),
            BufSpec::data("result", HostData::I32(result)),
        ],
        args: vec![Arg::Buf(0), Arg::Buf(1), Arg::I32(n as i32)],
        grid: Grid::cdiv(n as u64, case.get("BLOCK") as u64),
        min_bytes: 4 * n as u64 + 8,
        flops: 0,
    }
}

fn expect_max(_case: &Case, inst: &Instance, _sample: bool) -> Vec<OutputCheck> {
    let x = inst.host(0).i32s();
    let init = inst.host(1).i32s();
    let m = x.iter().copied().fold(init[0], i32::max);
    let mut entries = vec![(0, Expect::Exact(m as i64))];
    entries.extend((1..init.len()).map(|i| (i, Expect::Untouched)));
    vec![OutputCheck {
        buf: 1,
        entries,
        tol: Tol::norm(Elem::I32),
    }]
}
