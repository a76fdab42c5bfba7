//! `replay check`: every gallery kernel against its float64 reference, at several sizes and
//! configurations each (including tails that need masks), on the GPU or — with no GPU or with
//! `--interpret` — on the CPU interpreter at small sizes.
//!
//! For every case: fresh random inputs (never zeros; the seed is printed and `--seed`
//! replays it), outputs poisoned with `0xFF` bytes (NaN / −1) before the launch, trailing slack
//! and padding columns that must stay untouched, a synchronisation after the launch (so that
//! a fault is reported on its case), then [`crate::harness::judge`]: fp32 outputs within 1e-5
//! on ‖out − ref‖₂/‖ref‖₂ and elementwise (relative where meaningful, else a rigorous
//! rounding-error bound), integer outputs exact, every element written, NaN never passing.

use crate::devices::Choice;
use crate::error::CliError;
use crate::gallery::{self, Case, Scale};
use crate::harness::{run_and_judge, show, Loaded, Verdict};
use crate::table::{err, Align, Table};
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::io::Write;

/// One checked case.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CheckRow {
    /// Kernel name.
    pub kernel: String,
    /// Configuration.
    pub config: String,
    /// Problem shape.
    pub size: String,
    /// The judgement (absent when the case could not run).
    pub verdict: Option<Verdict>,
    /// Why the case could not run.
    pub error: Option<String>,
    /// The seed of this case's inputs.
    pub seed: String,
}

impl CheckRow {
    /// True when the case ran and passed.
    pub fn pass(&self) -> bool {
        self.error.is_none() && self.verdict.is_some_and(|v| v.pass)
    }
}

/// All checked cases.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CheckReport {
    /// Device name.
    pub device: String,
    /// `cuda` or `interpreter`.
    pub backend: String,
    /// GPU or small sizes.
    pub scale: Scale,
    /// The base seed (`--seed` replays it).
    pub seed: String,
    /// The cases.
    pub rows: Vec<CheckRow>,
}

impl CheckReport {
    /// Number of failed cases.
    pub fn failures(&self) -> usize {
        self.rows.iter().filter(|r| !r.pass()).count()
    }

    /// The table `replay check` prints.
    pub fn table(&self) -> Table {
        let mut t = Table::new([
            "kernel",
            "config",
            "size",
            "rel l2 err",
            "max elem err",
            "checked",
            "result",
        ])
        .align(3, Align::Right)
        .align(5, Align::Right);
        for r in &self.rows {
            let (l2, max, checked, result) = match (&r.verdict, &r.error) {
                (_, Some(e)) => (String::new(), String::new(), String::new(), format!("ERROR: {e}")),
                (Some(v), None) => {
                    let mut result = if v.pass { "pass".to_string() } else { "FAIL".to_string() };
                    if !v.pass {
                        let mut why = Vec::new();
                        if v.unwritten > 0 {
                            why.push(format!("{} unwritten", v.unwritten));
                        }
                        if v.clobbered > 0 {
                            why.push(format!("{} written out of bounds", v.clobbered));
                        }
                        if v.bad > 0 {
                            why.push(format!("{} out of bounds", v.bad));
                        }
                        if let Some((b, i)) = v.first_bad {
                            why.push(format!("first at output {b}[{i}]"));
                        }
                        if why.is_empty() {
                            why.push("norm error too large".into());
                        }
                        result = format!("FAIL ({})", why.join(", "));
                    }
                    let l2 = if v.values + v.withins > 0 {
                        err(v.rel_l2)
                    } else {
                        "-".into()
                    };
                    (l2, v.max_err_text(), v.checked.to_string(), result)
                }
                (None, None) => Default::default(),
            };
            t.row([
                r.kernel.clone(),
                r.config.clone(),
                r.size.clone(),
                l2,
                max,
                checked,
                result,
            ]);
        }
        t
    }
}

fn check_case(
    k: &gallery::GalleryKernel,
    case: &Case,
    choice: &Choice,
    seed: u64,
) -> Result<(String, Verdict), CliError> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let inst = (k.build)(case, &mut rng, true);
    let checks = (k.expect)(case, &inst, false);
    let stream = choice.device.new_stream()?;
    let kernel = (k.compile)(&choice.device, &case.config)?;
    let loaded = Loaded::new(&stream, &inst)?;
    let v = run_and_judge(kernel.as_ref(), &stream, &inst, &loaded, &checks)?;
    Ok((inst.shape, v))
}

/// Runs every case of the kernels whose name contains `filter`.
pub fn run_checks(choice: &Choice, filter: Option<&str>, seed: u64) -> CheckReport {
    let kernels = gallery::filtered(filter);
    let cases: Vec<(usize, Case)> = kernels
        .iter()
        .enumerate()
        .flat_map(|(i, k)| (k.cases)(choice.scale).into_iter().map(move |c| (i, c)))
        .collect();
    let bar = ProgressBar::new(cases.len() as u64);
    if let Ok(style) = ProgressStyle::with_template("checking [{bar:30}] {pos}/{len} {msg}") {
        bar.set_style(style.progress_chars("=> "));
    }
    let mut rows = Vec::new();
    for (n, (i, case)) in cases.iter().enumerate() {
        let k = &kernels[*i];
        bar.set_message(k.name);
        let case_seed = seed.wrapping_add((n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let (size, verdict, error) = match check_case(k, case, choice, case_seed) {
            Ok((size, v)) => (size, Some(v), None),
            Err(e) => (show(&case.shape), None, Some(e.to_string())),
        };
        rows.push(CheckRow {
            kernel: k.name.to_string(),
            config: show(&case.config),
            size,
            verdict,
            error,
            seed: format!("{case_seed:#x}"),
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    CheckReport {
        device: choice.device.info().name.clone(),
        backend: choice.device.backend().name().to_string(),
        scale: choice.scale,
        seed: format!("{seed:#x}"),
        rows,
    }
}

/// Runs `replay check`; `Ok(false)` when a case failed.
pub fn run(
    out: &mut dyn Write,
    choice: &Choice,
    filter: Option<&str>,
    seed: u64,
    json: Option<&std::path::Path>,
) -> Result<bool, CliError> {
    let io = |e| CliError::Io {
        path: "<stdout>".into(),
        source: e,
    };
    if let Some(note) = &choice.note {
        writeln!(out, "{note}").map_err(io)?;
    }
    writeln!(
        out,
        "checking on {} ({}), seed {seed:#x} (replay with --seed {seed:#x})",
        choice.device.info().name,
        choice.device.backend().name()
    )
    .map_err(io)?;
    let report = run_checks(choice, filter, seed);
    if report.rows.is_empty() {
        return Err(CliError::Usage(format!(
            "no gallery kernel matches `{}`",
            filter.unwrap_or("")
        )));
    }
    write!(out, "{}", report.table()).map_err(io)?;
    let failures = report.failures();
    if failures == 0 {
        writeln!(out, "all {} cases passed", report.rows.len()).map_err(io)?;
    } else {
        writeln!(out, "{failures} of {} cases FAILED", report.rows.len()).map_err(io)?;
    }
    let covered: Vec<&str> = gallery::all().iter().map(|k| k.name).collect();
    let uncovered: Vec<&str> = replay_kernels::registry()
        .iter()
        .map(|k| k.name)
        .filter(|n| !covered.contains(n) && filter.is_none_or(|f| n.contains(f)))
        .collect();
    if !uncovered.is_empty() {
        writeln!(
            out,
            "not covered by `replay check` (tested by their own crate's tests): {}",
            uncovered.join(", ")
        )
        .map_err(io)?;
    }
    if let Some(path) = json {
        crate::bench::write_json(path, &report)?;
        writeln!(out, "wrote {}", path.display()).map_err(io)?;
    }
    Ok(failures == 0)
}
