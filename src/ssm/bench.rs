//! `replay bench-ssm`: ReplaySSM against the memory roofline, one Mamba-2 layer, fp32 state,
//! bf16 activations. In one run, per model and batch: the copy bandwidth; our conventional
//! kernel (ms per step, fraction of the copy bandwidth on its byte floor); replay amortised per
//! step over a whole window (ms, speedup over conventional, fraction of copy on its own byte
//! floor from the traffic model); output-only verification of `T` drafts with its commit
//! (ms per verification, ratio to one conventional step) against the snapshot-per-draft
//! baseline; and, when given its JSON, the Triton conventional kernel of the same run. Every
//! per-step sequence is one CUDA graph (a window of replay steps — one launch each, two windows
//! when `L` is odd — or of verification + commit pairs), so launch overhead counts the same
//! for both methods. Writes JSON and a PNG plot.

use super::state::{DecodeLayer, Mamba2ConventionalState, Mamba2ReplayState, Next, StepIo};
use super::tuning::{
    capture_on_gpu, launch_or_run, plans, stagger_rows, traffic, verify_run_cycles, ConventionalRunner, SsmPlans,
    WindowRunner, CONVENTIONAL_RUN_STEPS,
};
use crate::bench::{copy_bandwidth, write_json, CopyResult, Plan};
use crate::devices::Choice;
use crate::error::CliError;
use crate::gallery::Scale;
use crate::table::{sig, Table};
use replay_kernels::ssm::reference::Mamba2Params;
use replay_kernels::ssm::shapes::{ModelShape, CPU_TEST, NEMOTRON3_NANO_4B, NEMOTRON3_SUPER_120B};
use replay_runtime::tune::bench::{median, time_runs};
use replay_runtime::tune::{Autotuner, BenchSettings};
use replay_runtime::{Backend, Graph, RuntimeError, Stream};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The benchmark's models.
pub const MODELS: [ModelShape; 2] = [NEMOTRON3_NANO_4B, NEMOTRON3_SUPER_120B];
/// The benchmark's batch sizes.
pub const BATCHES: [usize; 5] = [1, 16, 64, 256, 512];
/// Draft counts verified.
pub const DRAFTS: [usize; 3] = [2, 4, 8];
/// Snapshot verifications per captured graph.
const GRAPH_STEPS: usize = 16;
/// Rounds of the conventional-versus-replay timing on a GPU: each round times the
/// conventional graph, then the replay window, so that clock changes during the run (they
/// move a ~3.5 µs step at batch 1 by ±20 % between runs) fall on both alike; each side keeps
/// the median of its rounds' medians.
const GPU_ROUNDS: usize = 5;

/// What to run.
#[derive(Clone, Debug)]
pub struct SsmBenchArgs {
    /// Models.
    pub models: Vec<ModelShape>,
    /// Batch sizes.
    pub batches: Vec<usize>,
    /// Draft counts to verify (empty: no verification).
    pub drafts: Vec<usize>,
    /// Apply the `z` gate.
    pub gated: bool,
    /// Tune (cache first) instead of the default plans.
    pub tune: bool,
    /// Write JSON here (and the plot next to it, `.png`).
    pub json: Option<PathBuf>,
    /// The Triton baseline's JSON (`bench/triton_ssm_baseline.py`), merged when present.
    pub triton: Option<PathBuf>,
    /// An earlier run's JSON whose plans are used, untuned, for the models and batches it has
    /// (kernel or compiler changes timed at equal tiles, in seconds instead of a tuning run).
    pub plans_from: Option<PathBuf>,
}

impl SsmBenchArgs {
    /// Everything, for a device of `scale` (the interpreter runs the reduced shape at batches
    /// 1 and 4, without verification of more than 2 drafts).
    pub fn full(scale: Scale) -> SsmBenchArgs {
        match scale {
            Scale::Gpu => SsmBenchArgs {
                models: MODELS.to_vec(),
                batches: BATCHES.to_vec(),
                drafts: DRAFTS.to_vec(),
                gated: true,
                tune: true,
                json: None,
                triton: None,
                plans_from: None,
            },
            Scale::Small => SsmBenchArgs {
                models: vec![CPU_TEST],
                batches: vec![1, 4],
                drafts: vec![2],
                gated: true,
                tune: false,
                json: None,
                triton: None,
                plans_from: None,
            },
        }
    }
}

/// One verification measurement.
#[derive(Clone, Debug, Serialize)]
pub struct VerifyResult {
    /// Drafts per verification.
    pub drafts: usize,
    /// Accepted per row (device memory, constant): the commit moves `h` by it.
    pub accepted: usize,
    /// Replay: verification + commit, ms (amortised over a graph of whole flush periods, at
    /// least 16 verifications: [`verify_run_cycles`]).
    pub replay_ms: f64,
    /// `replay_ms` over one conventional step.
    pub replay_vs_step: f64,
    /// The same with two state precisions ([`SsmPlans::verify_lp`],
    /// [`ReplayPlan::lp`](super::state::ReplayPlan::lp): the verification reads f16 copies of
    /// the checkpoints, every flush writes both), ms.
    #[serde(default)]
    pub replay_lp_ms: f64,
    /// `replay_lp_ms` over one conventional step.
    #[serde(default)]
    pub replay_lp_vs_step: f64,
    /// Where a cycle of `replay_ms` goes: its launches timed one by one.
    pub parts: CycleParts,
    /// The same with two state precisions.
    pub parts_lp: CycleParts,
    /// The same cycles with the rows spread evenly over a flush period
    /// ([`stagger_rows`]: every cycle folds about `1/P` of the rows, the steady state of
    /// continuous batching, where sequences start at different times); the figures above have
    /// every row at the same point of its window (all rows fold in the same cycle).
    #[serde(default)]
    pub staggered: Staggered,
    /// The snapshot-per-draft baseline, ms.
    pub snapshot_ms: f64,
    /// `snapshot_ms` over one conventional step.
    pub snapshot_vs_step: f64,
}

/// Verification cycles with the rows spread over a flush period ([`VerifyResult::staggered`]).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Staggered {
    /// Verification + commit, ms per cycle (f32 checkpoints).
    pub replay_ms: f64,
    /// `replay_ms` over one conventional step.
    pub replay_vs_step: f64,
    /// The same with two state precisions, ms.
    pub replay_lp_ms: f64,
    /// `replay_lp_ms` over one conventional step.
    pub replay_lp_vs_step: f64,
    /// Where a cycle of `replay_ms` goes.
    pub parts: CycleParts,
    /// Where a cycle of `replay_lp_ms` goes.
    pub parts_lp: CycleParts,
}

/// Where a verification cycle goes, ms per cycle: each launch timed apart (events between them,
/// outside a graph) over whole flush periods. `verify_ms` alone is the kernel-level figure
/// (what REPLAYSSM.md's reported 0.89–1.21 steps measure); the cycle adds the fold's share
/// (one flushing launch per period, idle ones otherwise) and the commit.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct CycleParts {
    /// The verification's launch ([`Mamba2ReplayState::verify_outputs`]).
    pub verify_ms: f64,
    /// The pre-flush's launch ([`Mamba2ReplayState::pre_flush`]).
    pub fold_ms: f64,
    /// The commit's launch.
    pub commit_ms: f64,
}

/// [`CycleParts`] of `cycles` verification cycles of `n` drafts of `rs` (which continue its
/// rows' windows).
fn cycle_parts(
    stream: &Stream,
    rs: &Mamba2ReplayState,
    io: &StepIo,
    n: usize,
    cycles: usize,
) -> Result<CycleParts, RuntimeError> {
    let device = stream.device();
    let marks = (0..=3 * cycles)
        .map(|_| device.new_event())
        .collect::<Result<Vec<_>, _>>()?;
    marks[0].record(stream)?;
    for c in 0..cycles {
        rs.verify_outputs(stream, io, n)?;
        marks[3 * c + 1].record(stream)?;
        rs.pre_flush(stream, io, n)?;
        marks[3 * c + 2].record(stream)?;
        rs.commit(stream, Next::Verify(n))?;
        marks[3 * c + 3].record(stream)?;
    }
    let mut sums = [0.0; 3];
    for (i, pair) in marks.windows(2).enumerate() {
        sums[i % 3] += f64::from(pair[0].elapsed_ms(&pair[1])?);
    }
    let per = |t: f64| t / cycles as f64;
    Ok(CycleParts {
        verify_ms: per(sums[0]),
        fold_ms: per(sums[1]),
        commit_ms: per(sums[2]),
    })
}

/// The Triton conventional kernel's time, from its script's JSON.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TritonResult {
    /// Model name.
    pub model: String,
    /// Batch.
    pub batch: usize,
    /// Median ms per step (`triton.testing.do_bench`).
    pub ms: f64,
    /// Its tile configuration.
    #[serde(default)]
    pub config: String,
}

#[derive(Clone, Debug, Deserialize)]
struct TritonFile {
    results: Vec<TritonResult>,
}

/// The plans of one row of an earlier run's JSON.
#[derive(Clone, Debug, Deserialize)]
struct PlansRow {
    model: String,
    batch: usize,
    plans: SsmPlans,
}

#[derive(Clone, Debug, Deserialize)]
struct PlansFile {
    rows: Vec<PlansRow>,
}

/// One model and batch.
#[derive(Clone, Debug, Serialize)]
pub struct SsmRow {
    /// Model name.
    pub model: String,
    /// Batch.
    pub batch: usize,
    /// Plans and how they were chosen.
    pub plans: SsmPlans,
    /// Conventional ms per step.
    pub conventional_ms: f64,
    /// Conventional byte floor per step (state read + written).
    pub conventional_bytes: f64,
    /// Conventional GB/s on its floor over the copy bandwidth.
    pub conventional_of_copy: f64,
    /// Replay ms per step, amortised over a window.
    pub replay_ms: f64,
    /// Conventional over replay.
    pub speedup: f64,
    /// Replay with two state precisions ([`SsmPlans::replay_lp`],
    /// [`ReplayPlan::lp`](super::state::ReplayPlan::lp): non-flush steps read f16 copies of
    /// the checkpoints, flushes write both), ms per step.
    #[serde(default)]
    pub replay_lp_ms: f64,
    /// Conventional over `replay_lp_ms`.
    #[serde(default)]
    pub speedup_lp: f64,
    /// The byte-ceiling speedup at this window.
    pub ceiling: f64,
    /// Replay byte floor per step (window bytes / L).
    pub replay_bytes: f64,
    /// Replay GB/s on its floor over the copy bandwidth.
    pub replay_of_copy: f64,
    /// Verifications.
    pub verify: Vec<VerifyResult>,
    /// Triton conventional kernel, when its JSON was given.
    pub triton: Option<TritonResult>,
    /// What failed, if anything.
    pub error: Option<String>,
}

/// Everything `bench-ssm` measured.
#[derive(Clone, Debug, Serialize)]
pub struct SsmReport {
    /// Tool and version.
    pub tool: String,
    /// Seconds since the epoch.
    pub timestamp: u64,
    /// Device name.
    pub device: String,
    /// Copy bandwidth.
    pub copy: CopyResult,
    /// Timing: warm-up runs, timed runs (their median kept), and rounds of the conventional
    /// and replay timings taken in turn (the median of the rounds kept).
    pub settings: (usize, usize, usize),
    /// Whether `z` was applied.
    pub gated: bool,
    /// Per model and batch.
    pub rows: Vec<SsmRow>,
}

/// Parameters of a benchmark layer (deterministic): `A ∈ [−8, −0.5)`, `D ∈ [−1, 1)`,
/// `dt_bias ∈ [−4, −1)`.
pub fn bench_params(shape: &ModelShape) -> Mamba2Params {
    use replay_runtime::tune::bench::uniform;
    let h = shape.heads;
    Mamba2Params {
        a: uniform(1, h, -8.0, -0.5),
        d: uniform(2, h, -1.0, 1.0),
        dt_bias: uniform(3, h, -4.0, -1.0),
    }
}

/// How the benchmark times: the runs of each timing, and the rounds of the conventional and
/// replay timings taken in turn.
struct Timing {
    runs: BenchSettings,
    rounds: usize,
}

fn timed(
    stream: &Stream,
    settings: &BenchSettings,
    graph: &Option<Graph>,
    fallback: impl Fn(&Stream) -> Result<(), RuntimeError>,
    per: usize,
) -> Result<f64, RuntimeError> {
    let t = time_runs(stream, settings, |_| launch_or_run(graph, stream, &fallback))?;
    Ok(t.median_ms / per as f64)
}

#[allow(clippy::too_many_arguments)]
fn bench_row(
    stream: &Stream,
    tuner: Option<&mut Autotuner>,
    fixed: Option<SsmPlans>,
    args: &SsmBenchArgs,
    shape: ModelShape,
    batch: usize,
    copy_gbps: f64,
    timing: &Timing,
) -> Result<SsmRow, RuntimeError> {
    let settings = &timing.runs;
    let params = bench_params(&shape);
    let max_t = args.drafts.iter().copied().max().unwrap_or(0);
    let plans = match fixed {
        Some(p) => p,
        None => plans(tuner, shape, &params, batch, args.gated, max_t)?,
    };
    let tm = traffic(shape, batch);

    // Conventional: a graph of 16 steps; replay: one whole window (L launches; two windows
    // when L is odd). Timed in turns, `rounds` times.
    let l = plans.replay.window;
    let (conventional_ms, replay_ms, replay_lp_ms) = {
        let conv = ConventionalRunner::new(stream, shape, &params, batch, args.gated, plans.conventional.decode)?;
        let w = WindowRunner::new(stream, shape, &params, batch, args.gated, plans.replay)?;
        // Two state precisions: non-flush steps read f16 checkpoints.
        let w_lp = WindowRunner::new(stream, shape, &params, batch, args.gated, plans.replay_lp())?;
        let (mut conv_ms, mut replay_ms, mut replay_lp_ms) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..timing.rounds.max(1) {
            conv_ms.push(timed(stream, settings, &None, |s| conv.run(s), CONVENTIONAL_RUN_STEPS)?);
            replay_ms.push(timed(stream, settings, &None, |s| w.run(s), w.steps())?);
            replay_lp_ms.push(timed(stream, settings, &None, |s| w_lp.run(s), w_lp.steps())?);
        }
        let mid = |v: &[f64]| median(v).unwrap_or(f64::NAN);
        (mid(&conv_ms), mid(&replay_ms), mid(&replay_lp_ms))
    };
    let conventional_bytes = tm.conventional_step();
    let conventional_of_copy = conventional_bytes / (conventional_ms * 1e-3) / 1e9 / copy_gbps;
    let replay_bytes = tm.replay_window(l) / l as f64;
    let replay_of_copy = replay_bytes / (replay_ms * 1e-3) / 1e9 / copy_gbps;

    // Verification + commit vs snapshots.
    let mut verify = Vec::new();
    if max_t > 0 {
        // One checkpoint precision, and two.
        let windows = [plans.verify.window, plans.verify_lp().window];
        let mut states = [
            Mamba2ReplayState::new(stream, shape, &params, batch, batch + 1, args.gated, plans.verify)?,
            Mamba2ReplayState::new(stream, shape, &params, batch, batch + 1, args.gated, plans.verify_lp())?,
        ];
        let mut conv =
            Mamba2ConventionalState::new(stream, shape, &params, batch, batch + 1, args.gated, plans.conventional)?;
        conv.fill(stream)?;
        let mut io = StepIo::new(stream, shape, batch, max_t, args.gated)?;
        io.randomize(stream, 9)?;
        for &n in &args.drafts {
            let accepted = super::tuning::accepted_drafts(n);
            // [lockstep, staggered] × [f32, two precisions]
            let mut cycle_ms = [[0.0; 2]; 2];
            let mut parts = [[CycleParts::default(); 2]; 2];
            for (spread, (ms2, part2)) in [false, true].into_iter().zip(cycle_ms.iter_mut().zip(&mut parts)) {
                for (((rs, ms), part), window) in states.iter_mut().zip(ms2).zip(part2).zip(windows) {
                    // Fresh sequences ready to verify n drafts (with `spread`, spread over a
                    // flush period).
                    for row in 0..batch {
                        rs.release(stream, row)?;
                    }
                    rs.fill(stream, Next::Verify(n))?;
                    rs.accepted.copy_from_host(stream, &vec![accepted as i32; batch])?;
                    rs.prepare_verify(&io, n)?;
                    if spread {
                        stagger_rows(rs, stream, &io, n, accepted)?;
                    }
                    let rs = &*rs;
                    // Whole flush periods per run (the share of folds of a long decode).
                    let cycles = verify_run_cycles(window, n, accepted);
                    let cycle = |s: &Stream| {
                        for _ in 0..cycles {
                            rs.verify(s, &io, n)?;
                            rs.commit(s, Next::Verify(n))?;
                        }
                        Ok(())
                    };
                    let g = capture_on_gpu(stream, cycle)?;
                    *ms = timed(stream, settings, &g, cycle, cycles)?;
                    *part = cycle_parts(stream, rs, &io, n, cycles)?;
                }
            }
            let [[replay_ms, replay_lp_ms], [staggered_ms, staggered_lp_ms]] = cycle_ms;
            let [[parts, parts_lp], [parts_st, parts_st_lp]] = parts;
            conv.prepare_verify(&io, n)?;
            let snaps = |s: &Stream| {
                for _ in 0..GRAPH_STEPS {
                    conv.verify_snapshots(s, &io, n)?;
                }
                Ok(())
            };
            let g = capture_on_gpu(stream, snaps)?;
            let snapshot_ms = timed(stream, settings, &g, snaps, GRAPH_STEPS)?;
            verify.push(VerifyResult {
                drafts: n,
                accepted,
                replay_ms,
                replay_vs_step: replay_ms / conventional_ms,
                replay_lp_ms,
                replay_lp_vs_step: replay_lp_ms / conventional_ms,
                parts,
                parts_lp,
                staggered: Staggered {
                    replay_ms: staggered_ms,
                    replay_vs_step: staggered_ms / conventional_ms,
                    replay_lp_ms: staggered_lp_ms,
                    replay_lp_vs_step: staggered_lp_ms / conventional_ms,
                    parts: parts_st,
                    parts_lp: parts_st_lp,
                },
                snapshot_ms,
                snapshot_vs_step: snapshot_ms / conventional_ms,
            });
        }
    }
    stream.synchronize()?;
    Ok(SsmRow {
        model: shape.name.into(),
        batch,
        plans,
        conventional_ms,
        conventional_bytes,
        conventional_of_copy,
        replay_ms,
        speedup: conventional_ms / replay_ms,
        replay_lp_ms,
        speedup_lp: conventional_ms / replay_lp_ms,
        ceiling: tm.ceiling_speedup(l),
        replay_bytes,
        replay_of_copy,
        verify,
        triton: None,
        error: None,
    })
}

/// The JSON file at `path` as a `T`.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, CliError> {
    let text = std::fs::read_to_string(path).map_err(|e| CliError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    serde_json::from_str(&text).map_err(|e| CliError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    })
}

fn read_triton(path: &Path) -> Result<Vec<TritonResult>, CliError> {
    Ok(read_json::<TritonFile>(path)?.results)
}

/// The models and the batches that an earlier run's JSON (`--plans`) has plans for, each once,
/// in file order: what `bench-ssm --plans` runs when no `--model` or `--batch` is given.
pub fn planned(path: &Path) -> Result<(Vec<String>, Vec<usize>), CliError> {
    let (mut models, mut batches) = (Vec::new(), Vec::new());
    for row in read_json::<PlansFile>(path)?.rows {
        if !models.contains(&row.model) {
            models.push(row.model);
        }
        if !batches.contains(&row.batch) {
            batches.push(row.batch);
        }
    }
    Ok((models, batches))
}

/// The plans of `path` (an earlier `--json`) for `model` at `batch`, their choices marked
/// `file`; `None` when it has no such row. An error when its speculative plan holds fewer
/// drafts than `max_drafts`.
fn plans_from_file(
    rows: &[PlansRow],
    model: &str,
    batch: usize,
    max_drafts: usize,
) -> Result<Option<SsmPlans>, CliError> {
    let Some(row) = rows.iter().find(|r| r.model == model && r.batch == batch) else {
        return Ok(None);
    };
    let mut plans = row.plans.clone();
    if plans.verify.max_drafts < max_drafts {
        return Err(CliError::Usage(format!(
            "--plans: the plans of {model} at batch {batch} verify at most {} drafts, {max_drafts} asked",
            plans.verify.max_drafts
        )));
    }
    plans.conventional.max_drafts = plans.conventional.max_drafts.max(max_drafts);
    for c in &mut plans.choices {
        c.source = "file".into();
    }
    Ok(Some(plans))
}

/// Runs the benchmark (no printing).
pub fn run_report(choice: &Choice, args: &SsmBenchArgs) -> Result<SsmReport, CliError> {
    let gpu = choice.device.backend() == Backend::Cuda;
    let plan = Plan::for_scale(choice.scale);
    let runs = if gpu {
        BenchSettings {
            warmup: 3,
            reps: 15,
            ..BenchSettings::default()
        }
    } else {
        BenchSettings {
            warmup: 0,
            reps: 1,
            ..BenchSettings::default()
        }
    };
    let timing = Timing {
        runs,
        rounds: if gpu { GPU_ROUNDS } else { 1 },
    };
    let stream = choice.device.new_stream()?;
    let copy = copy_bandwidth(&stream, &plan)?;
    let triton = match &args.triton {
        Some(p) if p.exists() => read_triton(p)?,
        _ => Vec::new(),
    };
    let mut tuner = if args.tune {
        Some(Autotuner::new(&choice.device)?)
    } else {
        None
    };
    let given = match &args.plans_from {
        Some(p) => read_json::<PlansFile>(p)?.rows,
        None => Vec::new(),
    };
    let max_t = args.drafts.iter().copied().max().unwrap_or(0);
    let mut rows = Vec::new();
    for shape in &args.models {
        for &batch in &args.batches {
            eprintln!("bench-ssm: {} batch {batch}", shape.name);
            let fixed = plans_from_file(&given, shape.name, batch, max_t)?;
            let mut row = match bench_row(&stream, tuner.as_mut(), fixed, args, *shape, batch, copy.gbps, &timing) {
                Ok(r) => r,
                Err(e) => {
                    let _ = stream.synchronize();
                    SsmRow {
                        model: shape.name.into(),
                        batch,
                        plans: plans(None, *shape, &bench_params(shape), batch, args.gated, 0)?,
                        conventional_ms: f64::NAN,
                        conventional_bytes: f64::NAN,
                        conventional_of_copy: f64::NAN,
                        replay_ms: f64::NAN,
                        speedup: f64::NAN,
                        replay_lp_ms: f64::NAN,
                        speedup_lp: f64::NAN,
                        ceiling: f64::NAN,
                        replay_bytes: f64::NAN,
                        replay_of_copy: f64::NAN,
                        verify: vec![],
                        triton: None,
                        error: Some(e.to_string()),
                    }
                }
            };
            row.triton = triton
                .iter()
                .find(|t| t.model == shape.name && t.batch == batch)
                .cloned();
            rows.push(row);
        }
    }
    Ok(SsmReport {
        tool: format!("replay bench-ssm {}", env!("CARGO_PKG_VERSION")),
        timestamp: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        device: choice.device.summary(),
        copy,
        settings: (timing.runs.warmup, timing.runs.reps, timing.rounds),
        gated: args.gated,
        rows,
    })
}

/// The main table: conventional, replay (f32 checkpoints; and with f16 copies read by the
/// non-flush steps, two state precisions), Triton.
pub fn table(report: &SsmReport) -> Table {
    let mut t = Table::new([
        "model",
        "B",
        "L",
        "conv ms",
        "conv/copy",
        "replay ms",
        "speedup",
        "ceiling",
        "replay/copy",
        "L₂",
        "f16 ckpt ms",
        "speedup",
        "triton ms",
        "ours/triton",
    ])
    .right(1..14);
    for r in &report.rows {
        if let Some(e) = &r.error {
            t.row([r.model.clone(), r.batch.to_string(), format!("ERROR: {e}")]);
            continue;
        }
        let pct = |x: f64| format!("{}%", sig(100.0 * x, 3));
        t.row([
            r.model.clone(),
            r.batch.to_string(),
            r.plans.replay.window.to_string(),
            sig(r.conventional_ms, 4),
            pct(r.conventional_of_copy),
            sig(r.replay_ms, 4),
            format!("{}×", sig(r.speedup, 3)),
            format!("{}×", sig(r.ceiling, 3)),
            pct(r.replay_of_copy),
            r.plans.replay_lp().window.to_string(),
            sig(r.replay_lp_ms, 4),
            format!("{}×", sig(r.speedup_lp, 3)),
            r.triton.as_ref().map_or("-".into(), |t| sig(t.ms, 4)),
            r.triton
                .as_ref()
                .map_or("-".into(), |t| format!("{}×", sig(t.ms / r.conventional_ms, 3))),
        ]);
    }
    t
}

/// The verification table: per draft count, replay (f32 checkpoints; and with their f16 copies
/// read by the verification, two state precisions) and snapshots in units of one step.
pub fn verify_table(report: &SsmReport) -> Table {
    let mut t = Table::new([
        "model",
        "B",
        "T",
        "accepted",
        "L",
        "verify ms",
        "÷ step",
        "L₂",
        "f16 ckpt ms",
        "÷ step",
        "snapshots ms",
        "÷ step",
    ])
    .right(1..12);
    for r in report.rows.iter().filter(|r| r.error.is_none()) {
        for v in &r.verify {
            t.row([
                r.model.clone(),
                r.batch.to_string(),
                v.drafts.to_string(),
                v.accepted.to_string(),
                r.plans.verify.window.to_string(),
                sig(v.replay_ms, 4),
                format!("{}×", sig(v.replay_vs_step, 3)),
                r.plans.verify_lp().window.to_string(),
                sig(v.replay_lp_ms, 4),
                format!("{}×", sig(v.replay_lp_vs_step, 3)),
                sig(v.snapshot_ms, 4),
                format!("{}×", sig(v.snapshot_vs_step, 3)),
            ]);
        }
    }
    t
}

/// The verification with its rows spread over a flush period ([`Staggered`]): per draft count,
/// each precision's cycle in ms and in steps, and its launches timed apart (ms per cycle).
pub fn staggered_table(report: &SsmReport) -> Table {
    let mut t = Table::new([
        "model",
        "B",
        "T",
        "verify ms",
        "÷ step",
        "verify / fold / commit",
        "f16 ckpt ms",
        "÷ step",
        "verify / fold / commit",
    ])
    .right(1..9);
    for r in report.rows.iter().filter(|r| r.error.is_none()) {
        for v in &r.verify {
            let st = &v.staggered;
            let parts = |p: CycleParts| {
                format!(
                    "{} / {} / {}",
                    sig(p.verify_ms, 4),
                    sig(p.fold_ms, 3),
                    sig(p.commit_ms, 3)
                )
            };
            t.row([
                r.model.clone(),
                r.batch.to_string(),
                v.drafts.to_string(),
                sig(st.replay_ms, 4),
                format!("{}×", sig(st.replay_vs_step, 3)),
                parts(st.parts),
                sig(st.replay_lp_ms, 4),
                format!("{}×", sig(st.replay_lp_vs_step, 3)),
                parts(st.parts_lp),
            ]);
        }
    }
    t
}

/// Where the verification cycles go: per draft count, each precision's launches timed apart (ms
/// per cycle), the verification's alone also in units of one step (the kernel-level figure).
pub fn cycle_parts_table(report: &SsmReport) -> Table {
    let mut t = Table::new([
        "model",
        "B",
        "T",
        "verify",
        "÷ step",
        "fold",
        "commit",
        "f16 ckpt: verify",
        "÷ step",
        "fold",
        "commit",
    ])
    .right(1..11);
    for r in report.rows.iter().filter(|r| r.error.is_none()) {
        let step = r.conventional_ms;
        for v in &r.verify {
            let mut row = vec![r.model.clone(), r.batch.to_string(), v.drafts.to_string()];
            for p in [v.parts, v.parts_lp] {
                row.extend([
                    sig(p.verify_ms, 4),
                    format!("{}×", sig(p.verify_ms / step, 3)),
                    sig(p.fold_ms, 3),
                    sig(p.commit_ms, 3),
                ]);
            }
            t.row(row);
        }
    }
    t
}

/// One target judged on `(model, batch, figure)` rows: met where every row of batch `at`
/// passes (every row where `at` is `None`; `None` where no such row was measured). The
/// detail lists every row's figure, a ✗ after those that miss, judged or not.
fn verdict(rows: &[(&str, usize, f64)], pass: &dyn Fn(f64) -> bool, at: Option<usize>) -> (Option<bool>, String) {
    let judged: Vec<f64> = (rows.iter())
        .filter(|(_, b, _)| at.is_none_or(|a| a == *b))
        .map(|r| r.2)
        .collect();
    let met = (!judged.is_empty()).then(|| judged.iter().all(|&x| pass(x)));
    let detail = rows
        .iter()
        .map(|(m, b, x)| {
            let miss = if pass(*x) { "" } else { " ✗" };
            format!("{m} B={b}: {}{miss}", sig(*x, 3))
        })
        .collect::<Vec<_>>()
        .join(", ");
    (met, if rows.is_empty() { "not measured".into() } else { detail })
}

/// The targets of issue 4, judged on the rows measured: `(target, met?, detail)`; the detail
/// lists every row's figure, a ✗ after those that miss. As in the issue, the conventional
/// kernel's and the replay's speed are judged at B=256 and the replay's floor at every batch;
/// the T=8 verification is judged at B=256, the serving batch of the figures it is set
/// against (REPLAYSSM.md's reported 0.89–1.21 steps), and every batch is listed.
pub fn targets(report: &SsmReport) -> Vec<(String, Option<bool>, String)> {
    let ok: Vec<&SsmRow> = report.rows.iter().filter(|r| r.error.is_none()).collect();
    let rows = |f: &dyn Fn(&SsmRow) -> f64, at: Option<usize>| -> Vec<(&str, usize, f64)> {
        (ok.iter())
            .filter(|r| at.is_none_or(|a| a == r.batch))
            .map(|r| (r.model.as_str(), r.batch, f(r)))
            .collect()
    };
    let verify: Vec<(&str, usize, f64)> = (ok.iter())
        .flat_map(|r| {
            (r.verify.iter())
                .filter(|v| v.drafts == 8)
                .map(move |v| (r.model.as_str(), r.batch, v.replay_vs_step))
        })
        .collect();
    let entry = |what: &str, (met, detail): (Option<bool>, String)| (what.to_string(), met, detail);
    vec![
        entry(
            "conventional ≥ 0.90 of copy at B=256",
            verdict(&rows(&|r| r.conventional_of_copy, Some(256)), &|x| x >= 0.90, None),
        ),
        entry(
            "replay ≥ 1.6× conventional at B=256",
            verdict(&rows(&|r| r.speedup, Some(256)), &|x| x >= 1.6, None),
        ),
        entry(
            "replay ≥ 0.97× conventional at every batch",
            verdict(&rows(&|r| r.speedup, None), &|x| x >= 0.97, None),
        ),
        entry(
            "verify T=8 ≤ 1.0× one conventional step at B=256 (every batch listed)",
            verdict(&verify, &|x| x <= 1.0, Some(256)),
        ),
    ]
}

static FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

/// Writes the plot: replay speedup over conventional against batch, one line per model (and a
/// thinner one with two state precisions), with the f32 byte ceiling dashed.
pub fn plot(report: &SsmReport, path: &Path) -> Result<(), String> {
    use plotters::prelude::*;
    let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    let root = BitMapBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let rows: Vec<&SsmRow> = report.rows.iter().filter(|r| r.error.is_none()).collect();
    let ymax = rows
        .iter()
        .flat_map(|r| [r.speedup, r.ceiling, r.speedup_lp])
        .filter(|x| x.is_finite())
        .fold(2.0f64, f64::max)
        * 1.1;
    let bmax = rows.iter().map(|r| r.batch).max().unwrap_or(512).max(2) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "ReplaySSM decode speedup over conventional ({})",
                report.device.split(" (").next().unwrap_or("")
            ),
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d((0.8f64..bmax * 1.3).log_scale(), 0.0f64..ymax)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("batch")
        .x_label_formatter(&|x| format!("{}", x.round() as i64))
        .y_desc("speedup (conventional ms / replay ms)")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| e.to_string())?;
    let colors = [BLUE, RED, GREEN, MAGENTA];
    let mut models: Vec<&str> = rows.iter().map(|r| r.model.as_str()).collect();
    models.dedup();
    for (i, m) in models.iter().enumerate() {
        let c = colors[i % colors.len()];
        let pts: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.model == *m)
            .map(|r| (r.batch as f64, r.speedup))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(format!("{m}: replay"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
            .map_err(|e| e.to_string())?;
        let lp: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.model == *m && r.speedup_lp.is_finite() && r.speedup_lp > 0.0)
            .map(|r| (r.batch as f64, r.speedup_lp))
            .collect();
        chart
            .draw_series(LineSeries::new(lp.clone(), c.mix(0.7).stroke_width(1)))
            .map_err(|e| e.to_string())?
            .label(format!("{m}: replay, f16 checkpoint copies"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.mix(0.7)));
        chart
            .draw_series(lp.iter().map(|&p| TriangleMarker::new(p, 5, c.mix(0.7).filled())))
            .map_err(|e| e.to_string())?;
        let ceil: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.model == *m)
            .map(|r| (r.batch as f64, r.ceiling))
            .collect();
        chart
            .draw_series(DashedLineSeries::new(ceil, 6, 4, c.mix(0.5).stroke_width(1)))
            .map_err(|e| e.to_string())?
            .label(format!("{m}: byte ceiling (f32)"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.mix(0.5)));
    }
    chart
        .draw_series(LineSeries::new(vec![(0.8, 1.0), (bmax * 1.3, 1.0)], BLACK.mix(0.4)))
        .map_err(|e| e.to_string())?;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// Prints the report (tables, targets) to `out`.
pub fn print(out: &mut dyn Write, report: &SsmReport) -> std::io::Result<()> {
    writeln!(out, "device: {}", report.device)?;
    writeln!(
        out,
        "copy bandwidth (device to device, read + written): {} GB/s",
        sig(report.copy.gbps, 4)
    )?;
    writeln!(
        out,
        "one Mamba-2 layer, fp32 state, bf16 activations, z {}; ms per decode step (median of {} after {} warm-up; \
         conventional and replay in {} alternating rounds, median of rounds; every sequence a CUDA graph on a GPU); \
         replay amortised over a whole window of L steps; f16 ckpt = two state precisions (non-flush steps read \
         f16 copies of the f32 checkpoints, flushes write both), with plans tuned for them (window L₂)",
        if report.gated { "on" } else { "off" },
        report.settings.1,
        report.settings.0,
        report.settings.2
    )?;
    write!(out, "{}", table(report))?;
    let vt = verify_table(report);
    if !vt.is_empty() {
        writeln!(
            out,
            "\nspeculative verification (+ commit; amortised over whole flush periods, folds included) vs snapshot per draft; ÷ step = over one conventional step; f16 ckpt = two state precisions (the verification reads f16 copies of the f32 checkpoints), with their own plan (window L₂)"
        )?;
        write!(out, "{vt}")?;
        writeln!(
            out,
            "\nwhere a verification cycle goes, ms per cycle: its launches timed apart over whole flush periods \
             (events between them, no graph); verify ÷ step = the verification's launch alone (kernel level), fold = \
             the pre-flush's share (one flushing launch per period, idle launches otherwise)"
        )?;
        write!(out, "{}", cycle_parts_table(report))?;
        writeln!(
            out,
            "\nthe same with the rows spread evenly over a flush period (each cycle folds ~1/P of the rows, the \
             steady state of continuous batching; above, every row folds in the same cycle): cycle ms and ÷ step, \
             and its launches timed apart (ms per cycle)"
        )?;
        write!(out, "{}", staggered_table(report))?;
    }
    writeln!(out, "\ntargets:")?;
    for (what, met, detail) in targets(report) {
        let m = match met {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "-",
        };
        writeln!(out, "  {what}: {m} ({detail})")?;
    }
    Ok(())
}

/// Runs `replay bench-ssm`: prints, writes JSON and the plot.
pub fn run(out: &mut dyn Write, choice: &Choice, args: &SsmBenchArgs) -> Result<bool, CliError> {
    let io = |e| CliError::Io {
        path: "<stdout>".into(),
        source: e,
    };
    if let Some(note) = &choice.note {
        writeln!(
            out,
            "{note}; the reduced shape `{}` (times are CPU times)",
            CPU_TEST.name
        )
        .map_err(io)?;
    }
    let report = run_report(choice, args)?;
    print(out, &report).map_err(io)?;
    if let Some(path) = &args.json {
        write_json(path, &report)?;
        writeln!(out, "wrote {}", path.display()).map_err(io)?;
        let png = path.with_extension("png");
        match plot(&report, &png) {
            Ok(()) => writeln!(out, "wrote {}", png.display()).map_err(io)?,
            Err(e) => writeln!(out, "plot not written: {e}").map_err(io)?,
        }
    }
    Ok(report.rows.iter().all(|r| r.error.is_none()))
}

#[cfg(test)]
mod tests {
    use super::verdict;

    /// A target judged at one batch passes on that batch's rows alone, lists every row and
    /// marks its misses; with no row of that batch it is not judged.
    #[test]
    fn verdicts_judge_their_batch_and_list_every_row() {
        let rows = [("nano", 1, 2.85), ("nano", 256, 0.991), ("super", 256, 0.844)];
        let at_most_one = |x: f64| x <= 1.0;
        let (met, detail) = verdict(&rows, &at_most_one, Some(256));
        assert_eq!(met, Some(true));
        assert_eq!(detail, "nano B=1: 2.85 ✗, nano B=256: 0.991, super B=256: 0.844");
        assert_eq!(verdict(&rows, &at_most_one, None).0, Some(false));
        assert_eq!(verdict(&[("nano", 256, 1.01)], &at_most_one, Some(256)).0, Some(false));
        assert_eq!(verdict(&rows[..1], &at_most_one, Some(256)).0, None);
        assert_eq!(verdict(&[], &at_most_one, None), (None, "not measured".to_string()));
    }
}
