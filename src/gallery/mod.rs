//! The gallery kernels as the harness sees them: for each, its check cases (several sizes,
//! with tails that need masks), its benchmark shape and fixed configuration, a one-program
//! shape for launch overheads, how to build inputs, what the outputs must hold (from the
//! kernel's float64 reference in `replay_kernels::gallery`), and its tuning space.
//!
//! Two scales: [`Scale::Gpu`] (large sizes) and [`Scale::Small`] (the same cases shrunk for
//! the CPU interpreter, when there is no GPU or with `--interpret`).

mod atomics;
mod matmul;
mod rmsnorm;
mod row_scan;
mod rows;
mod softmax;
mod vector_add;

use crate::harness::{get, Instance, Launcher, Named, OutputCheck};
use crate::tune::{TuneResult, TuneSpec};
use rand::rngs::SmallRng;
use rand::Rng;
use replay_dsl::spec::KernelEntry;
use replay_runtime::tune::{Autotuner, Fill};
use replay_runtime::{Device, Grid, RuntimeError};

/// Problem sizes for a GPU or for the CPU interpreter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scale {
    /// Sizes that fill an H200.
    Gpu,
    /// The same cases at sizes the interpreter runs in a moment.
    Small,
}

impl Scale {
    /// `gpu` at [`Scale::Gpu`], `small` at [`Scale::Small`].
    pub fn pick(self, gpu: i64, small: i64) -> i64 {
        match self {
            Scale::Gpu => gpu,
            Scale::Small => small,
        }
    }
}

/// A configuration and a problem shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// Constexpr values and `num_warps` (missing constexprs take their defaults).
    pub config: Named,
    /// Named problem sizes (`n`, `rows`, `cols`, `stride`, …).
    pub shape: Named,
}

impl Case {
    /// A case from a configuration and a shape.
    pub fn new(config: &[(&'static str, i64)], shape: &[(&'static str, i64)]) -> Case {
        Case {
            config: config.to_vec(),
            shape: shape.to_vec(),
        }
    }
    /// The configuration value or size called `name` (0 when absent).
    pub fn get(&self, name: &str) -> i64 {
        self.config
            .iter()
            .chain(&self.shape)
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| *v)
    }
}

/// Builds an instance of a case: fresh random inputs from `rng`; with `slack`, output
/// buffers get trailing elements that must stay untouched.
pub type BuildFn = fn(&Case, &mut SmallRng, bool) -> Instance;
/// What the outputs of an instance must hold; with `sample`, only a sample of rows (for
/// benchmark sizes, where a full float64 reference would take too long).
pub type ExpectFn = fn(&Case, &Instance, bool) -> Vec<OutputCheck>;

/// Compiles a kernel with a configuration.
pub type CompileFn = fn(&Device, &[(&'static str, i64)]) -> Result<Box<dyn Launcher>, RuntimeError>;

/// One gallery kernel as the harness drives it.
pub struct GalleryKernel {
    /// Kernel name (as in the registry).
    pub name: &'static str,
    /// The kernel's registry entry.
    pub entry: fn() -> KernelEntry,
    /// The check cases.
    pub cases: fn(Scale) -> Vec<Case>,
    /// The benchmark case (the fixed configuration and the benchmark shape).
    pub bench: fn(Scale) -> Case,
    /// A one-program case with the benchmark configuration (launch overheads).
    pub tiny: fn() -> Case,
    /// Builds an instance.
    pub build: BuildFn,
    /// The expectation of an instance.
    pub expect: ExpectFn,
    /// Compiles the kernel with a configuration.
    pub compile: CompileFn,
    /// The tuning problem and search space.
    pub tune_spec: fn(Scale) -> TuneSpec,
    /// Runs the autotuner on a tuning problem.
    pub tune: fn(&mut Autotuner, &TuneSpec) -> Result<TuneResult, RuntimeError>,
}

impl std::fmt::Debug for GalleryKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GalleryKernel").field("name", &self.name).finish()
    }
}

/// Every gallery kernel, in the registry's order.
pub fn all() -> Vec<GalleryKernel> {
    vec![
        vector_add::kernel(),
        softmax::kernel(),
        rmsnorm::kernel(),
        row_scan::kernel(),
        matmul::kernel(),
        atomics::histogram(),
        atomics::global_max(),
    ]
}

/// The gallery kernel called `name`.
pub fn find(name: &str) -> Option<GalleryKernel> {
    all().into_iter().find(|k| k.name == name)
}

/// The gallery kernels whose name contains `filter` (all without one).
pub fn filtered(filter: Option<&str>) -> Vec<GalleryKernel> {
    all()
        .into_iter()
        .filter(|k| filter.is_none_or(|f| k.name.contains(f)))
        .collect()
}

/// The tuning problem of a kernel over `n` elements, one program per `BLOCK`: BLOCK ∈ {256, …,
/// 4096} × num_warps ∈ {2, 4, 8}, the scalar `n`, and `fills`.
pub(crate) fn block_tune_spec(n: i64, fills: Vec<(&'static str, Fill)>) -> TuneSpec {
    TuneSpec {
        shape: vec![("n", n)],
        axes: vec![
            ("BLOCK", vec![256, 512, 1024, 2048, 4096]),
            ("num_warps", vec![2, 4, 8]),
        ],
        scalars: vec![("n", (n as i32).into())],
        fills,
        grid: |s, c| Grid::cdiv(get(s, "n") as u64, c("BLOCK") as u64),
    }
}

/// `n` uniform `f32` in `[lo, hi)`.
pub(crate) fn uniform_f32(rng: &mut SmallRng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(lo..hi)).collect()
}

/// `n` uniform `i32` in `[lo, hi)`.
pub(crate) fn uniform_i32(rng: &mut SmallRng, n: usize, lo: i32, hi: i32) -> Vec<i32> {
    (0..n).map(|_| rng.gen_range(lo..hi)).collect()
}

/// A `rows × stride` matrix whose first `cols` columns are uniform in `[lo, hi)` and whose
/// padding columns hold `pad` (a value that would show if a kernel read it).
pub(crate) fn matrix(
    rng: &mut SmallRng,
    rows: usize,
    cols: usize,
    stride: usize,
    lo: f32,
    hi: f32,
    pad: f32,
) -> Vec<f32> {
    let mut v = vec![pad; rows * stride];
    for r in 0..rows {
        for x in &mut v[r * stride..r * stride + cols] {
            *x = rng.gen_range(lo..hi);
        }
    }
    v
}

/// The rows a check looks at: all, or (sampled) the first two, the last two, the middle one
/// and about 60 spread evenly between.
pub(crate) fn rows_to_check(rows: usize, sample: bool) -> Vec<usize> {
    if !sample || rows <= 64 {
        return (0..rows).collect();
    }
    let mut v: Vec<usize> = vec![0, 1, rows / 2, rows - 2, rows - 1];
    let step = rows / 59;
    v.extend((0..59).map(|i| i * step + step / 2));
    v.sort_unstable();
    v.dedup();
    v.retain(|&r| r < rows);
    v
}

/// Trailing elements added to output buffers in checks.
pub(crate) const SLACK: usize = 64;

/// `len` elements plus [`SLACK`] when `slack`.
pub(crate) fn with_slack(len: usize, slack: bool) -> usize {
    len + if slack { SLACK } else { 0 }
}

/// The unit roundoff of `f32`.
pub(crate) const U32: f64 = 1.0 / (1u64 << 24) as f64;

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn registry_matches_the_gallery() {
        let names: Vec<&str> = all().iter().map(|k| k.name).collect();
        for k in all() {
            assert_eq!((k.entry)().name, k.name);
        }
        assert_eq!(names.len(), 7);
        assert!(find("softmax").is_some());
        assert!(find("nope").is_none());
        assert_eq!(filtered(Some("max")).len(), 2); // softmax, global_max
    }

    #[test]
    fn cases_have_tails_and_three_sizes() {
        for k in all() {
            for scale in [Scale::Gpu, Scale::Small] {
                let cases = (k.cases)(scale);
                assert!(cases.len() >= 3, "{} {scale:?}", k.name);
            }
        }
    }

    #[test]
    fn sampled_rows() {
        assert_eq!(rows_to_check(5, true), vec![0, 1, 2, 3, 4]);
        let r = rows_to_check(65536, true);
        assert!(r.len() >= 60 && r.len() <= 64, "{}", r.len());
        assert!(r.contains(&65535) && r.contains(&0));
        assert_eq!(rows_to_check(100, false).len(), 100);
    }

    #[test]
    fn inputs_are_random_and_never_zero() {
        let mut rng = SmallRng::seed_from_u64(1);
        for k in all() {
            let case = &(k.cases)(Scale::Small)[0];
            let inst = (k.build)(case, &mut rng, true);
            for b in inst.bufs.iter().filter_map(|b| b.data.as_ref()) {
                let nonzero = match b {
                    crate::harness::HostData::F32(v) => v.iter().filter(|x| **x != 0.0).count(),
                    crate::harness::HostData::I32(v) => v.iter().filter(|x| **x != 0).count(),
                };
                assert!(nonzero * 2 > b.len(), "{}: mostly zeros", k.name);
            }
        }
    }
}
