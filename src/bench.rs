//! `replay bench`: device copy bandwidth, then per gallery kernel at large sizes: median time
//! (CUDA events, warm-up, repeats, inputs rotated when one set fits in L2, timed twice to show
//! the spread), achieved GB/s on the fewest bytes the kernel must move, that as a fraction of
//! the copy bandwidth, GFLOP/s for matmul, our compile time (trace + passes + PTX, median of
//! several; the driver's JIT is timed apart), and launch overhead with and without a CUDA
//! graph (1000 one-program launches timed plain, then as one captured graph).
//!
//! Configurations are fixed per kernel (the `config` column; see each kernel's `bench` in
//! [`crate::gallery`]) unless `--tuned` asks the autotuner (cache first) for them. Each
//! kernel's output is checked against its float64 reference on a sample of rows before it is
//! timed. With no GPU the same runs happen on the CPU interpreter at small shapes (times are
//! CPU times; no graphs).

use crate::devices::Choice;
use crate::error::CliError;
use crate::gallery::{self, Case, GalleryKernel, Scale};
use crate::harness::{run_and_judge, show, Instance, Loaded, Verdict};
use crate::table::{sig, Table};
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use replay_dsl::Elem;
use replay_dsl::{Specialization, Target};
use replay_runtime::tune::bench::{median, rotation_sets, time_runs};
use replay_runtime::tune::{Autotuner, BenchSettings};
use replay_runtime::{Backend, Device, RawBuffer, RuntimeError, Stream};
use serde::Serialize;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

/// Writes `value` as pretty JSON to `path` (creating its folder).
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<(), CliError> {
    let io = |e| CliError::Io {
        path: path.to_path_buf(),
        source: e,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let text = serde_json::to_string_pretty(value).map_err(|e| io(std::io::Error::other(e)))?;
    std::fs::write(path, text + "\n").map_err(io)
}

/// How much work each measurement does.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// Untimed runs before timing.
    pub warmup: usize,
    /// Timed runs per measurement (the median is kept).
    pub reps: usize,
    /// Launches timed for the launch overhead.
    pub launches: usize,
    /// Repetitions of the compile-time measurement.
    pub compile_reps: usize,
    /// Bytes of each buffer of the copy measurement.
    pub copy_bytes: u64,
}

impl Plan {
    /// The plan for a scale: thorough on a GPU, a quick pass on the interpreter.
    pub fn for_scale(scale: Scale) -> Plan {
        match scale {
            Scale::Gpu => Plan {
                warmup: 10,
                reps: 50,
                launches: 1000,
                compile_reps: 7,
                copy_bytes: 1 << 30,
            },
            Scale::Small => Plan {
                warmup: 1,
                reps: 3,
                launches: 10,
                compile_reps: 3,
                copy_bytes: 16 << 20,
            },
        }
    }

    fn settings(&self) -> BenchSettings {
        BenchSettings {
            warmup: self.warmup,
            reps: self.reps,
            ..BenchSettings::default()
        }
    }
}

/// The device-to-device copy bandwidth.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct CopyResult {
    /// Bytes of each buffer.
    pub buffer_bytes: u64,
    /// Bytes moved per copy (read + written).
    pub bytes_moved: u64,
    /// Median of the timed copies.
    pub median_ms: f64,
    /// Bandwidth on bytes read + written.
    pub gbps: f64,
}

/// Times a large `cuMemcpyDtoD` (bytes read + written over the median time).
pub fn copy_bandwidth(stream: &Stream, plan: &Plan) -> Result<CopyResult, RuntimeError> {
    let len = (plan.copy_bytes / 4) as usize;
    let src = RawBuffer::zeros(stream, Elem::U32, len)?;
    src.fill_byte(stream, 0xA5)?;
    let dst = RawBuffer::zeros(stream, Elem::U32, len)?;
    let t = time_runs(stream, &plan.settings(), |_| dst.copy_from(stream, &src))?;
    let bytes_moved = 2 * plan.copy_bytes;
    Ok(CopyResult {
        buffer_bytes: plan.copy_bytes,
        bytes_moved,
        median_ms: t.median_ms,
        gbps: bytes_moved as f64 / (t.median_ms * 1e-3) / 1e9,
    })
}

/// Compile time of one configuration: trace, and passes + PTX, medians over repetitions.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct CompileTime {
    /// Median of trace + passes + PTX, in ms.
    pub total_ms: f64,
    /// Median of tracing alone.
    pub trace_ms: f64,
    /// The driver's JIT of the PTX (`cuModuleLoadData`), median, GPU only.
    pub jit_ms: Option<f64>,
    /// Bytes of PTX.
    pub ptx_bytes: usize,
}

fn compile_time(
    k: &GalleryKernel,
    case: &Case,
    inst: &Instance,
    device: &Device,
    plan: &Plan,
) -> Result<CompileTime, CliError> {
    let entry = (k.entry)();
    let values: Vec<(&str, i64)> = case.config.iter().map(|(n, v)| (*n, *v)).collect();
    let spec = Specialization::from_ints(&inst.ints());
    let target = device.info().target.unwrap_or(Target::Sm90);
    let (mut totals, mut traces) = (Vec::new(), Vec::new());
    let mut last = None;
    for _ in 0..plan.compile_reps.max(1) {
        let t0 = Instant::now();
        let ir = (entry.trace)(&values, &spec)?;
        let t1 = Instant::now();
        let compiled = replay_dsl::compile(&ir, target)?;
        let t2 = Instant::now();
        totals.push((t2 - t0).as_secs_f64() * 1e3);
        traces.push((t1 - t0).as_secs_f64() * 1e3);
        last = Some(compiled);
    }
    let compiled = last.expect("at least one repetition");
    let jit_ms = if device.backend() == Backend::Cuda {
        let mut jits = Vec::new();
        for _ in 0..3 {
            let t0 = Instant::now();
            let loaded = device.load_ptx(&compiled.ptx, &compiled.entry, compiled.num_threads)?;
            jits.push(t0.elapsed().as_secs_f64() * 1e3);
            drop(loaded);
        }
        median(&jits)
    } else {
        None
    };
    Ok(CompileTime {
        total_ms: median(&totals).unwrap_or(f64::NAN),
        trace_ms: median(&traces).unwrap_or(f64::NAN),
        jit_ms,
        ptx_bytes: compiled.ptx.len(),
    })
}

/// Launch overhead: many one-program launches, plain and captured in one CUDA graph.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct LaunchOverhead {
    /// Launches per measurement.
    pub launches: usize,
    /// Device time per launch, plain launches back to back (µs, median of repeats).
    pub plain_us: f64,
    /// Host time to enqueue one plain launch (µs, median of repeats).
    pub host_enqueue_us: f64,
    /// Device time per launch when the launches replay as one graph (µs), GPU only.
    pub graph_us: Option<f64>,
}

fn launch_overhead(
    k: &GalleryKernel,
    device: &Device,
    stream: &Stream,
    plan: &Plan,
    config: &[(&'static str, i64)],
    seed: u64,
) -> Result<LaunchOverhead, CliError> {
    let mut case = (k.tiny)();
    case.config = config.to_vec();
    let mut rng = SmallRng::seed_from_u64(seed);
    let inst = (k.build)(&case, &mut rng, false);
    let kernel = (k.compile)(device, &case.config)?;
    let loaded = Loaded::new(stream, &inst)?;
    let args = loaded.args(&inst);
    // Loads the specialization these arguments use, outside the timed region and the capture.
    kernel.launch(stream, inst.grid, &args)?;
    stream.synchronize()?;
    let n = plan.launches.max(1);
    let reps = 5;
    let (mut plain, mut host) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let (start, end) = (device.new_event()?, device.new_event()?);
        start.record(stream)?;
        let t0 = Instant::now();
        for _ in 0..n {
            kernel.launch(stream, inst.grid, &args)?;
        }
        host.push(t0.elapsed().as_secs_f64() * 1e6 / n as f64);
        end.record(stream)?;
        plain.push(start.elapsed_ms(&end)? as f64 * 1e3 / n as f64);
    }
    let graph_us = if device.backend() == Backend::Cuda {
        let graph = stream.capture(|s| {
            for _ in 0..n {
                kernel.launch(s, inst.grid, &args)?;
            }
            Ok(())
        })?;
        graph.upload()?;
        graph.launch()?;
        stream.synchronize()?;
        let mut times = Vec::new();
        for _ in 0..reps {
            let (start, end) = (device.new_event()?, device.new_event()?);
            start.record(stream)?;
            graph.launch()?;
            end.record(stream)?;
            times.push(start.elapsed_ms(&end)? as f64 * 1e3 / n as f64);
        }
        median(&times)
    } else {
        None
    };
    stream.synchronize()?;
    Ok(LaunchOverhead {
        launches: n,
        plain_us: median(&plain).unwrap_or(f64::NAN),
        host_enqueue_us: median(&host).unwrap_or(f64::NAN),
        graph_us,
    })
}

/// One kernel's benchmark.
#[derive(Clone, Debug, Default, Serialize)]
pub struct KernelBench {
    /// Kernel name.
    pub kernel: String,
    /// Configuration, as shown.
    pub config: String,
    /// Configuration values.
    pub config_values: std::collections::BTreeMap<String, i64>,
    /// `fixed` or where the tuned configuration came from.
    pub config_source: String,
    /// Problem shape.
    pub shape: String,
    /// The fewest bytes one launch must move.
    pub min_bytes: u64,
    /// Floating-point operations of one launch (0 where not meaningful).
    pub flops: u64,
    /// Input sets rotated through.
    pub rotation_sets: usize,
    /// Median time, first measurement (ms).
    pub median_ms: f64,
    /// Median time, second measurement of the same thing (ms): the spread is noise.
    pub median_ms_repeat: f64,
    /// |first − second| / first.
    pub spread: f64,
    /// Fastest single run (ms).
    pub min_ms: f64,
    /// Achieved bandwidth on `min_bytes` (GB/s).
    pub gbps: f64,
    /// `gbps` over the copy bandwidth.
    pub frac_of_copy: f64,
    /// GFLOP/s (only where `flops` > 0).
    pub gflops: Option<f64>,
    /// The sampled check of the output against the float64 reference.
    pub verdict: Option<Verdict>,
    /// Compile times.
    pub compile: Option<CompileTime>,
    /// Launch overheads.
    pub launch: Option<LaunchOverhead>,
    /// What failed, if anything.
    pub error: Option<String>,
}

#[allow(clippy::too_many_arguments)]
fn bench_kernel(
    k: &GalleryKernel,
    choice: &Choice,
    stream: &Stream,
    plan: &Plan,
    copy_gbps: f64,
    tuner: Option<&mut Autotuner>,
    seed: u64,
    bar: &ProgressBar,
) -> KernelBench {
    let mut case = (k.bench)(choice.scale);
    let mut r = KernelBench {
        kernel: k.name.to_string(),
        config_source: "fixed".into(),
        ..KernelBench::default()
    };
    if let Some(tuner) = tuner {
        bar.set_message(format!("{}: tuning", k.name));
        match (k.tune)(tuner, &(k.tune_spec)(choice.scale)) {
            Ok(t) => {
                case.config = t.best;
                r.config_source = format!("tuned ({:?})", t.source).to_lowercase();
            }
            Err(e) => r.config_source = format!("fixed (tuning failed: {e})"),
        }
    }
    r.config = show(&case.config);
    r.config_values = case.config.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    if let Err(e) = bench_into(k, &case, choice, stream, plan, copy_gbps, seed, bar, &mut r) {
        r.error = Some(e.to_string());
    }
    r
}

#[allow(clippy::too_many_arguments)]
fn bench_into(
    k: &GalleryKernel,
    case: &Case,
    choice: &Choice,
    stream: &Stream,
    plan: &Plan,
    copy_gbps: f64,
    seed: u64,
    bar: &ProgressBar,
    r: &mut KernelBench,
) -> Result<(), CliError> {
    let device = &choice.device;
    bar.set_message(format!("{}: inputs", k.name));
    let mut rng = SmallRng::seed_from_u64(seed);
    let inst = (k.build)(case, &mut rng, false);
    r.shape = inst.shape.clone();
    r.min_bytes = inst.min_bytes;
    r.flops = inst.flops;

    bar.set_message(format!("{}: compile time", k.name));
    r.compile = Some(compile_time(k, case, &inst, device, plan)?);

    bar.set_message(format!("{}: check", k.name));
    let kernel = (k.compile)(device, &case.config)?;
    let info = device.info();
    let nsets = rotation_sets(info.l2_bytes, inst.buffer_bytes(), info.total_memory, &plan.settings());
    r.rotation_sets = nsets;
    let mut sets = Vec::with_capacity(nsets);
    for _ in 0..nsets {
        sets.push(Loaded::new(stream, &inst)?);
    }
    let checks = (k.expect)(case, &inst, true);
    let verdict = run_and_judge(kernel.as_ref(), stream, &inst, &sets[0], &checks)?;
    r.verdict = Some(verdict);
    if !verdict.pass {
        return Err(CliError::Failed("output differs from the reference: not timed".into()));
    }

    bar.set_message(format!("{}: timing", k.name));
    let args: Vec<_> = sets.iter().map(|s| s.args(&inst)).collect();
    let settings = plan.settings();
    let run = |i: usize| kernel.launch(stream, inst.grid, &args[i % nsets]);
    let first = time_runs(stream, &settings, run)?;
    let second = time_runs(stream, &settings, run)?;
    r.median_ms = first.median_ms;
    r.median_ms_repeat = second.median_ms;
    r.spread = (first.median_ms - second.median_ms).abs() / first.median_ms;
    r.min_ms = first.min_ms.min(second.min_ms);
    let secs = first.median_ms * 1e-3;
    r.gbps = inst.min_bytes as f64 / secs / 1e9;
    r.frac_of_copy = r.gbps / copy_gbps;
    r.gflops = (inst.flops > 0).then(|| inst.flops as f64 / secs / 1e9);
    drop(args);
    drop(sets);

    bar.set_message(format!("{}: launch overhead", k.name));
    r.launch = Some(launch_overhead(k, device, stream, plan, &case.config, seed ^ 1)?);
    Ok(())
}

/// Everything `replay bench` measured.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// `replay bench`, the crate version and the git commit if known.
    pub tool: String,
    /// Seconds since the Unix epoch.
    pub timestamp: u64,
    /// The device.
    pub device: DeviceJson,
    /// GPU or small shapes.
    pub scale: Scale,
    /// Repetitions and sizes.
    pub plan: Plan,
    /// The base seed of the inputs (`--seed` replays it).
    pub seed: String,
    /// Device-to-device copy bandwidth.
    pub copy: Option<CopyResult>,
    /// Per kernel.
    pub kernels: Vec<KernelBench>,
}

/// The device, for the JSON file.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceJson {
    /// `cuda` or `interpreter`.
    pub backend: String,
    /// Device name.
    pub name: String,
    /// Compute capability.
    pub compute_capability: String,
    /// Code generation target.
    pub target: Option<String>,
    /// Global memory (bytes).
    pub total_memory: u64,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// L2 bytes.
    pub l2_bytes: u64,
    /// Driver version.
    pub driver: String,
}

fn device_json(d: &Device) -> DeviceJson {
    let i = d.info();
    DeviceJson {
        backend: d.backend().name().into(),
        name: i.name.clone(),
        compute_capability: format!("{}.{}", i.compute_capability.0, i.compute_capability.1),
        target: i.target.map(|t| t.arch().to_string()),
        total_memory: i.total_memory,
        sm_count: i.sm_count,
        l2_bytes: i.l2_bytes,
        driver: format!("{}.{}", i.driver_version.0, i.driver_version.1),
    }
}

fn git_commit() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Runs the benchmarks of the kernels whose name contains `filter`.
pub fn run_benches(choice: &Choice, filter: Option<&str>, tuned: bool, seed: u64) -> Result<BenchReport, CliError> {
    let plan = Plan::for_scale(choice.scale);
    let kernels = gallery::filtered(filter);
    if kernels.is_empty() {
        return Err(CliError::Usage(format!(
            "no gallery kernel matches `{}`",
            filter.unwrap_or("")
        )));
    }
    let stream = choice.device.new_stream()?;
    let bar = ProgressBar::new(kernels.len() as u64 + 1);
    if let Ok(style) = ProgressStyle::with_template("bench [{bar:30}] {pos}/{len} {elapsed} {msg}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message("copy bandwidth");
    let copy = copy_bandwidth(&stream, &plan)?;
    bar.inc(1);
    let mut tuner = if tuned {
        Some(Autotuner::new(&choice.device)?)
    } else {
        None
    };
    let mut rows = Vec::new();
    for (i, k) in kernels.iter().enumerate() {
        let s = seed.wrapping_add(i as u64);
        rows.push(bench_kernel(
            k,
            choice,
            &stream,
            &plan,
            copy.gbps,
            tuner.as_mut(),
            s,
            &bar,
        ));
        bar.inc(1);
    }
    bar.finish_and_clear();
    let version = env!("CARGO_PKG_VERSION");
    Ok(BenchReport {
        tool: match git_commit() {
            Some(c) => format!("replay bench {version} ({c})"),
            None => format!("replay bench {version}"),
        },
        timestamp: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        device: device_json(&choice.device),
        scale: choice.scale,
        plan,
        seed: format!("{seed:#x}"),
        copy: Some(copy),
        kernels: rows,
    })
}

/// The table `replay bench` prints.
pub fn table(report: &BenchReport) -> Table {
    let mut t = Table::new([
        "kernel",
        "config",
        "shape",
        "median ms",
        "spread",
        "GB/s",
        "of copy",
        "GFLOP/s",
        "compile ms",
        "JIT ms",
        "launch µs",
        "graph µs",
        "check",
    ])
    .right([3, 4, 5, 6, 7, 8, 9, 10, 11]);
    for r in &report.kernels {
        let opt = |x: Option<f64>, d: usize| x.map_or("-".to_string(), |x| sig(x, d));
        let check = match (&r.error, &r.verdict) {
            (Some(e), _) => format!("ERROR: {e}"),
            (None, Some(v)) if v.pass => "pass".into(),
            (None, Some(_)) => "FAIL".into(),
            (None, None) => "-".into(),
        };
        let timed = r.median_ms > 0.0;
        t.row([
            r.kernel.clone(),
            r.config.clone(),
            r.shape.clone(),
            if timed { sig(r.median_ms, 4) } else { "-".into() },
            if timed {
                format!("{:.1}%", r.spread * 100.0)
            } else {
                "-".into()
            },
            if timed { sig(r.gbps, 4) } else { "-".into() },
            if timed {
                format!("{}%", sig(r.frac_of_copy * 100.0, 3))
            } else {
                "-".into()
            },
            opt(r.gflops, 4),
            opt(r.compile.map(|c| c.total_ms), 3),
            opt(r.compile.and_then(|c| c.jit_ms), 3),
            opt(r.launch.map(|l| l.plain_us), 3),
            opt(r.launch.and_then(|l| l.graph_us), 3),
            check,
        ]);
    }
    t
}

/// Runs `replay bench`; `Ok(false)` when a kernel failed its check or could not run.
pub fn run(
    out: &mut dyn Write,
    choice: &Choice,
    filter: Option<&str>,
    tuned: bool,
    seed: u64,
    json: Option<&Path>,
) -> Result<bool, CliError> {
    let io = |e| CliError::Io {
        path: "<stdout>".into(),
        source: e,
    };
    if let Some(note) = &choice.note {
        writeln!(out, "{note} (times are CPU times, not GPU times)").map_err(io)?;
    }
    writeln!(out, "device: {}", choice.device.summary()).map_err(io)?;
    let report = run_benches(choice, filter, tuned, seed)?;
    if let Some(c) = &report.copy {
        writeln!(
            out,
            "copy bandwidth (device to device, {} MiB, read + written): {} GB/s ({} ms)",
            c.buffer_bytes >> 20,
            sig(c.gbps, 4),
            sig(c.median_ms, 4)
        )
        .map_err(io)?;
    }
    write!(out, "{}", table(&report)).map_err(io)?;
    writeln!(
        out,
        "median of {} timed runs after {} warm-up, measured twice (spread); GB/s on the fewest bytes; \
         launch/graph: device µs per launch over {} one-program launches; configs: {}",
        report.plan.reps,
        report.plan.warmup,
        report.plan.launches,
        if tuned { "autotuned (cache first)" } else { "fixed" }
    )
    .map_err(io)?;
    if let Some(path) = json {
        write_json(path, &report)?;
        writeln!(out, "wrote {}", path.display()).map_err(io)?;
    }
    Ok(report
        .kernels
        .iter()
        .all(|k| k.error.is_none() && k.verdict.is_some_and(|v| v.pass)))
}
