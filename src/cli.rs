//! The command line: `replay decode | devices | kernels | ptx | check | bench | bench-ssm | tune`.

use crate::error::CliError;
use crate::ptx::{parse_set, parse_target, Show};
use clap::{Parser, Subcommand};
use replay_dsl::Target;
use replay_kernels::ssm::shapes::{Mixer, ModelShape};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// A Triton-style tile-kernel compiler embedded in Rust: inspect, check and benchmark kernels.
#[derive(Debug, Parser)]
#[command(name = "replay", version, about)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// The ReplaySSM decode demo: on a GPU, tune (cached) and benchmark replay decoding of a
    /// model against the conventional kernel; without one, run the decode loop on the CPU
    /// interpreter at a reduced shape, check it against the float64 recurrence and print the
    /// traffic model.
    Decode {
        /// Model preset: nemotron3-super-120b or nemotron3-nano-4b.
        #[arg(long, default_value = "nemotron3-super-120b", value_parser = parse_mamba2_model)]
        model: ModelShape,
        /// Batch sizes, comma-separated.
        #[arg(long, value_delimiter = ',', default_values_t = [1usize, 16, 64, 256, 512])]
        batch: Vec<usize>,
        /// Also write the results as JSON (and a PNG plot next to it).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Run on the CPU interpreter even with a GPU.
        #[arg(long)]
        interpret: bool,
    },
    /// GPUs found: name, compute capability, target, memory.
    Devices,
    /// Every kernel with its parameters and constexpr parameters (defaults).
    Kernels,
    /// Print a kernel's PTX, or its IR after a pass.
    Ptx {
        /// Kernel name (see `replay kernels`).
        kernel: String,
        /// Code generation target: sm_90 (Hopper) or sm_100 (Blackwell B200).
        #[arg(long, default_value = "sm_90", value_parser = parse_target)]
        target: Target,
        /// Override a constexpr (or num_warps): NAME=VALUE; repeatable.
        #[arg(long = "set", value_name = "NAME=VALUE")]
        set: Vec<String>,
        /// Print the IR after the last pass instead of PTX.
        #[arg(long, conflicts_with_all = ["stage", "stages"])]
        ir: bool,
        /// Print the text of one stage (see --stages).
        #[arg(long, value_name = "NAME", conflicts_with = "stages")]
        stage: Option<String>,
        /// List the stage names.
        #[arg(long)]
        stages: bool,
        /// Print what a launch needs (threads, occupancy hint, shared memory) instead of PTX.
        #[arg(long, conflicts_with_all = ["ir", "stage", "stages"])]
        resources: bool,
    },
    /// Check every gallery kernel against its float64 reference (GPU, else the interpreter).
    Check {
        /// Only kernels whose name contains this.
        #[arg(long)]
        filter: Option<String>,
        /// Run on the CPU interpreter at small sizes even with a GPU.
        #[arg(long)]
        interpret: bool,
        /// Seed of the random inputs (default: fresh each run; printed for replay).
        #[arg(long, value_parser = parse_seed)]
        seed: Option<u64>,
        /// Also write the results as JSON.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// Benchmark the gallery kernels on the GPU (copy bandwidth, times, GB/s, compile times,
    /// launch overheads); the interpreter at small shapes without one.
    Bench {
        /// Only kernels whose name contains this.
        #[arg(long)]
        filter: Option<String>,
        /// Write everything as JSON to FILE.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Use autotuned configurations (cache first, tuning on a miss) instead of the fixed ones.
        #[arg(long)]
        tuned: bool,
        /// Run on the CPU interpreter at small shapes even with a GPU.
        #[arg(long)]
        interpret: bool,
        /// Seed of the random inputs.
        #[arg(long, value_parser = parse_seed)]
        seed: Option<u64>,
    },
    /// Benchmark ReplaySSM decoding (one Mamba-2 layer, fp32 state, bf16 activations) against
    /// the memory roofline: copy bandwidth, conventional, replay per step over a window,
    /// speculative verification vs snapshots, the Triton baseline; table, JSON and PNG plot.
    BenchSsm {
        /// Models (comma-separated presets); default: both Nemotron-3 Mamba-2 models.
        #[arg(long, value_delimiter = ',', value_parser = parse_mamba2_model)]
        model: Vec<ModelShape>,
        /// Batch sizes (comma-separated); default 1,16,64,256,512.
        #[arg(long, value_delimiter = ',')]
        batch: Vec<usize>,
        /// Draft counts to verify (comma-separated); default 2,4,8; 0 for none.
        #[arg(long, value_delimiter = ',')]
        drafts: Vec<usize>,
        /// No output gate z.
        #[arg(long)]
        no_z: bool,
        /// Default plans (L = round(L*), default tiles) instead of tuning (cache first).
        #[arg(long)]
        no_tune: bool,
        /// Write the results as JSON to FILE (and the plot to FILE with `.png`).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// JSON of `bench/triton_ssm_baseline.py` to put beside ours (ignored when missing).
        #[arg(long, value_name = "FILE")]
        triton: Option<PathBuf>,
        /// Use the plans of an earlier `--json` result, untuned, for the models and batches it
        /// has (time a kernel or compiler change at equal tiles); without `--model` and
        /// `--batch`, run just those models and batches.
        #[arg(long, value_name = "FILE")]
        plans: Option<PathBuf>,
        /// Run on the CPU interpreter at the reduced shape even with a GPU.
        #[arg(long)]
        interpret: bool,
    },
    /// Autotune a gallery kernel and print every candidate; a second run hits the cache.
    Tune {
        /// Kernel name.
        kernel: String,
        /// Tune again even when the cache has a result.
        #[arg(long)]
        force: bool,
        /// Tune on the CPU interpreter at a small shape even with a GPU.
        #[arg(long)]
        interpret: bool,
    },
}

/// Parses a seed in decimal or `0x` hexadecimal.
pub fn parse_seed(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("`{s}` is not a seed (an integer, decimal or 0x…)"))
}

/// A Mamba-2 model preset by name.
pub fn parse_mamba2_model(s: &str) -> Result<ModelShape, String> {
    match ModelShape::by_name(s) {
        Some(m) if m.mixer == Mixer::Mamba2 => Ok(m),
        _ => Err(format!(
            "`{s}` is not a Mamba-2 preset (nemotron3-nano-4b, nemotron3-super-120b, cpu-test)"
        )),
    }
}

fn fresh_seed() -> u64 {
    rand::random()
}

/// Runs a parsed command line, printing to `out`; `Ok(false)` means "completed, but checks
/// failed" (exit code 1).
pub fn execute(cli: Cli, out: &mut dyn Write) -> Result<bool, CliError> {
    match cli.command {
        Command::Decode {
            model,
            batch,
            json,
            interpret,
        } => {
            let choice = crate::devices::choose(interpret)?;
            crate::ssm::demo::run(out, &choice, model, batch, json)
        }
        Command::BenchSsm {
            model,
            batch,
            drafts,
            no_z,
            no_tune,
            json,
            triton,
            plans,
            interpret,
        } => {
            let choice = crate::devices::choose(interpret)?;
            let mut args = crate::ssm::bench::SsmBenchArgs::full(choice.scale);
            if let Some(file) = &plans {
                // By default, the models and batches the file has plans for (no tuning run
                // for the others).
                let (models, batches) = crate::ssm::bench::planned(file)?;
                if choice.is_gpu() {
                    args.models = (models.iter().map(|m| parse_mamba2_model(m)))
                        .collect::<Result<_, _>>()
                        .map_err(|e| CliError::Usage(format!("--plans {}: {e}", file.display())))?;
                }
                args.batches = batches;
            }
            if !model.is_empty() && choice.is_gpu() {
                args.models = model;
            }
            if !batch.is_empty() {
                args.batches = batch;
            }
            if !drafts.is_empty() {
                args.drafts = drafts.into_iter().filter(|&d| d > 0).collect();
            }
            args.gated = !no_z;
            args.tune &= !no_tune;
            args.json = json;
            args.triton = triton;
            args.plans_from = plans;
            crate::ssm::bench::run(out, &choice, &args)
        }
        Command::Devices => crate::devices::run(out).map(|()| true),
        Command::Kernels => crate::kernels::run(out).map(|()| true),
        Command::Ptx {
            kernel,
            target,
            set,
            ir,
            stage,
            stages,
            resources,
        } => {
            let entry = crate::kernels::find(&kernel)?;
            let sets = set.iter().map(|s| parse_set(s)).collect::<Result<Vec<_>, _>>()?;
            let show = match (ir, stage, stages, resources) {
                (_, _, _, true) => Show::Resources,
                (_, _, true, _) => Show::Stages,
                (true, _, _, _) => Show::Ir,
                (_, Some(s), _, _) => Show::Stage(s),
                _ => Show::Ptx,
            };
            let compiled = crate::ptx::compile(&entry, target, &sets)?;
            let text = crate::ptx::render(&entry, &compiled, &show)?;
            out.write_all(text.as_bytes()).map_err(|e| CliError::Io {
                path: "<stdout>".into(),
                source: e,
            })?;
            Ok(true)
        }
        Command::Check {
            filter,
            interpret,
            seed,
            json,
        } => {
            let choice = crate::devices::choose(interpret)?;
            crate::check::run(
                out,
                &choice,
                filter.as_deref(),
                seed.unwrap_or_else(fresh_seed),
                json.as_deref(),
            )
        }
        Command::Bench {
            filter,
            json,
            tuned,
            interpret,
            seed,
        } => {
            let choice = crate::devices::choose(interpret)?;
            crate::bench::run(
                out,
                &choice,
                filter.as_deref(),
                tuned,
                seed.unwrap_or_else(fresh_seed),
                json.as_deref(),
            )
        }
        Command::Tune {
            kernel,
            force,
            interpret,
        } => {
            if crate::gallery::find(&kernel).is_none() {
                crate::kernels::find(&kernel)?;
                return Err(CliError::Usage(format!(
                    "kernel `{kernel}` has no tuning problem (tunable: {})",
                    crate::gallery::all()
                        .iter()
                        .map(|k| k.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            let choice = crate::devices::choose(interpret)?;
            if let Some(note) = &choice.note {
                writeln!(out, "{note} (times are CPU times)").map_err(|e| CliError::Io {
                    path: "<stdout>".into(),
                    source: e,
                })?;
            }
            crate::tune::run(out, &kernel, force, &choice.device, choice.scale).map(|()| true)
        }
    }
}

/// The command's entry point: parses `std::env::args`, runs, maps the result to an exit code
/// (0 success, 1 failed checks, 2 errors and usage errors).
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match execute(cli, &mut out) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            let _ = out.flush();
            eprintln!("replay: error: {e}");
            ExitCode::from(2)
        }
    }
}
