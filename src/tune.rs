//! `replay tune <kernel> [--force]`: the autotuner over a kernel's search space, at the
//! benchmark shape on a GPU (so `replay bench` and tuning talk about the same problem) or at
//! the small shape on the interpreter. Prints every candidate (configuration, median ms,
//! status); a second run is a cache hit, and says how long the lookup took.

use crate::error::CliError;
use crate::gallery::{self, Scale};
use crate::harness::{show, Named};
use crate::table::{sig, Align, Table};
use replay_runtime::tune::space::values_of;
use replay_runtime::tune::{
    Autotuner, Fill, Outcome, Problem, ScalarArg, SearchSpace, TuneMode, TuneRecord, TuneSource,
};
use replay_runtime::{Device, Grid, RuntimeError};
use std::io::Write;
use std::time::{Duration, Instant};

/// The grid of a tuning problem from its shape and a configuration value getter.
pub type GridFn = fn(&Named, &dyn Fn(&str) -> i64) -> Grid;

/// A tuning problem: shape, search axes, scalar arguments, buffer fills and the grid.
#[derive(Clone, Debug)]
pub struct TuneSpec {
    /// Named sizes (they key the cache).
    pub shape: Named,
    /// The product searched: `(constexpr or num_warps, values)`.
    pub axes: Vec<(&'static str, Vec<i64>)>,
    /// Scalar arguments by parameter name.
    pub scalars: Vec<(&'static str, ScalarArg)>,
    /// Buffer fills by parameter name (default: uniform floats, zero integers).
    pub fills: Vec<(&'static str, Fill)>,
    /// The grid from the shape and a configuration value getter.
    pub grid: GridFn,
}

impl TuneSpec {
    /// Number of points in the product of the axes.
    pub fn points(&self) -> usize {
        self.axes.iter().map(|(_, v)| v.len()).product()
    }
}

/// What a tuning run gave.
#[derive(Clone, Debug)]
pub struct TuneResult {
    /// The winner's values.
    pub best: Named,
    /// Tuned now, from the cache, or the default.
    pub source: TuneSource,
    /// All candidates' timings.
    pub record: Option<TuneRecord>,
    /// How long the call took (the lookup, on a cache hit).
    pub elapsed: Duration,
}

/// Tunes kernel `K` for `spec` (search space with the register/spill limit).
pub fn run_tune<K: replay_dsl::KernelDef + 'static>(
    tuner: &mut Autotuner,
    spec: &TuneSpec,
) -> Result<TuneResult, RuntimeError> {
    let mut space = SearchSpace::<K::Config>::new();
    for (n, vs) in &spec.axes {
        space = space.axis(n, vs.iter().copied());
    }
    let space = space.register_limit();
    let shape = spec.shape.clone();
    let grid = spec.grid;
    let mut problem =
        Problem::<K::Config>::new(move |c| grid(&shape, &|n| replay_runtime::tune::space::value_of(c, n).unwrap_or(0)));
    for (n, v) in &spec.scalars {
        problem = problem.scalar(n, *v);
    }
    for (n, f) in &spec.fills {
        problem = problem.fill(n, f.clone());
    }
    for (n, v) in &spec.shape {
        problem = problem.size(n, *v);
    }
    let t0 = Instant::now();
    let tuned = tuner.tune::<K>(&space, &problem)?;
    let elapsed = t0.elapsed();
    let values = values_of(&tuned.config);
    let best = <K::Config as replay_dsl::ConfigValues>::values(&tuned.config)
        .into_iter()
        .filter(|(n, _)| values.contains_key(*n))
        .collect();
    Ok(TuneResult {
        best,
        source: tuned.source,
        record: tuned.record,
        elapsed,
    })
}

/// The candidates' table.
pub fn candidates_table(record: &TuneRecord) -> Table {
    let mut t = Table::new(["config", "median ms", "min ms", "status"])
        .align(1, Align::Right)
        .align(2, Align::Right);
    let best = record.best.as_ref();
    for c in &record.candidates {
        let config = c
            .values
            .iter()
            .map(|(k, v)| {
                let k = if k == "num_warps" { "warps" } else { k };
                format!("{k}={v}")
            })
            .collect::<Vec<_>>()
            .join(" ");
        let (med, min, status) = match &c.outcome {
            Outcome::Timed { median_ms, min_ms, .. } => (
                sig(*median_ms, 4),
                sig(*min_ms, 4),
                if Some(&c.values) == best {
                    "ok (best)".to_string()
                } else {
                    "ok".to_string()
                },
            ),
            Outcome::Pruned { reason } => (String::new(), String::new(), format!("pruned: fails `{reason}`")),
            Outcome::Failed { reason } => (String::new(), String::new(), format!("failed: {reason}")),
            Outcome::Mismatch { max_rel_err, first_bad } => (
                String::new(),
                String::new(),
                format!("mismatch: rel err {max_rel_err:.1e} at {first_bad}"),
            ),
        };
        t.row([config, med, min, status]);
    }
    t
}

/// Runs `replay tune`.
pub fn run(out: &mut dyn Write, kernel: &str, force: bool, device: &Device, scale: Scale) -> Result<(), CliError> {
    let Some(k) = gallery::find(kernel) else {
        return Err(CliError::UnknownKernel {
            name: kernel.to_string(),
            known: gallery::all().iter().map(|k| k.name).collect::<Vec<_>>().join(", "),
        });
    };
    let spec = (k.tune_spec)(scale);
    let mode = if force { TuneMode::Force } else { TuneMode::Cached };
    let mut tuner = Autotuner::new(device)?.with_mode(mode);
    let cache = tuner
        .cache()
        .path()
        .map_or("(in memory)".to_string(), |p| p.display().to_string());
    let w = |out: &mut dyn Write, s: String| -> Result<(), CliError> {
        writeln!(out, "{s}").map_err(|e| CliError::Io {
            path: "<stdout>".into(),
            source: e,
        })
    };
    w(
        out,
        format!(
            "tuning {} on {} at {} over {} points ({})",
            k.name,
            device.info().name,
            show(&spec.shape),
            spec.points(),
            spec.axes
                .iter()
                .map(|(n, v)| format!("{n} ∈ {v:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    )?;
    let r = (k.tune)(&mut tuner, &spec)?;
    match r.source {
        TuneSource::Cache => w(
            out,
            format!(
                "cache hit in {:.3} ms ({cache}); `--force` re-tunes",
                r.elapsed.as_secs_f64() * 1e3
            ),
        )?,
        TuneSource::Tuned => w(
            out,
            format!("tuned in {:.1} s; saved to {cache}", r.elapsed.as_secs_f64()),
        )?,
        TuneSource::Default => w(out, "REPLAY_TUNE=off: default candidate, nothing timed".into())?,
    }
    if let Some(record) = &r.record {
        w(out, candidates_table(record).to_string())?;
    }
    w(out, format!("best: {}", show(&r.best)))?;
    Ok(())
}
