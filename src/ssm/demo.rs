//! `replay decode`: the main command. On a GPU it tunes (cached) and benchmarks the replay
//! decode of one model preset against the conventional kernel (the `bench-ssm` table for that
//! model). Without a GPU it says so, runs the same decode loop — [`Mamba2ReplayState`], one
//! launch per decode step, with rows joining at different steps, one leaving and a new one
//! taking its slot — on the CPU interpreter at the reduced shape, checks every output and state
//! against the float64 recurrence and the counters after every step against the rule, and
//! prints the traffic model of the preset.

use super::bench::{self, SsmBenchArgs};
use super::state::{DecodeLayer, Mamba2ReplayState, Next, ReplayPlan, StepIo};
use super::tuning::{traffic, window_candidates};
use crate::devices::Choice;
use crate::error::CliError;
use crate::table::{sig, Table};
use replay_kernels::ssm::kernels::initial_flush_flag;
use replay_kernels::ssm::reference::{recurrent_step, SlotStates, StepInput};
use replay_kernels::ssm::shapes::{ModelShape, CPU_TEST};
use replay_runtime::tune::bench::uniform;
use replay_runtime::RuntimeError;
use std::io::Write;

/// What the interpreter run found.
#[derive(Clone, Debug)]
pub struct InterpreterCheck {
    /// Decode steps run.
    pub steps: usize,
    /// Window `L`.
    pub window: usize,
    /// Flush steps seen (summed over rows).
    pub flushes: usize,
    /// Largest output error relative to `max(|y|, rms(y))`.
    pub max_out_err: f64,
    /// Largest state error relative to `max(|S|, rms(S))`.
    pub max_state_err: f64,
    /// Live slots whose counters after a step were not what the rule says (`h + 1`, or 0
    /// after a flush; the flag of the next decode step), summed over steps.
    pub counter_errors: usize,
}

fn max_rel(got: &[f64], want: &[f64]) -> f64 {
    let rms = (want.iter().map(|x| x * x).sum::<f64>() / want.len().max(1) as f64)
        .sqrt()
        .max(1e-30);
    got.iter()
        .zip(want)
        .map(|(g, w)| {
            if g.is_nan() {
                f64::INFINITY
            } else {
                (g - w).abs() / w.abs().max(rms)
            }
        })
        .fold(0.0, f64::max)
}

/// The decode loop on `choice`'s device at the reduced shape, checked against the float64
/// recurrence and the counter rule: 3 rows joining at steps 0, 1, 3, row 1 leaving after `2L`
/// steps and a new sequence taking the freed slot, over `3L + 3` steps (≥ 3 windows), each
/// step one launch.
pub fn interpreter_check(
    stream: &replay_runtime::Stream,
    window: usize,
    seed: u64,
) -> Result<InterpreterCheck, RuntimeError> {
    let shape = CPU_TEST;
    let (batch, slots) = (3, 5);
    let params = bench::bench_params(&shape);
    let plan = ReplayPlan::default_for(&shape, batch, window, 0);
    let mut state = Mamba2ReplayState::new(stream, shape, &params, batch, slots, true, plan)?;
    let mut io = StepIo::new(stream, shape, batch, 1, true)?;
    let mut truth = SlotStates::zeros(shape, slots);
    let per_row = shape.heads * shape.dv;
    let mut counter = seed;
    let mut rand = |n: usize, lo: f64, hi: f64| {
        counter += 1;
        uniform(counter, n, lo, hi)
    };
    let bf = |v: Vec<f64>| -> Vec<f64> { v.into_iter().map(|x| half::bf16::from_f64(x).to_f64()).collect() };
    let steps = 3 * window + 3;
    let (mut max_out, mut max_state, mut flushes, mut counter_errors) = (0.0f64, 0.0f64, 0, 0);
    for t in 0..steps {
        let joins: Vec<usize> = [(0, 0), (1, 1), (2, 3), (1, 2 * window + 1)]
            .iter()
            .filter(|&&(_, at)| at == t)
            .map(|&(r, _)| r)
            .collect();
        if t == 2 * window {
            state.release(stream, 1)?;
        }
        for row in joins {
            let init: Vec<f32> = rand(shape.heads * shape.state_elems(), -1.0, 1.0)
                .into_iter()
                .map(|x| x as f32)
                .collect();
            let slot = state.admit(stream, row, Some(&init), Next::Decode)?;
            for (d, &v) in truth.slot_mut(slot).iter_mut().zip(&init) {
                *d = v as f64;
            }
        }
        let row_slots: Vec<usize> = state.slots().iter().map(|&s| s as usize).collect();
        let counters = state.counters(stream)?;
        let inputs: Vec<Option<Vec<StepInput>>> = row_slots
            .iter()
            .map(|&s| {
                (s != 0).then(|| {
                    vec![StepInput {
                        dt: bf(rand(shape.heads, -1.0, 1.0)),
                        x: bf(rand(per_row, -1.0, 1.0)),
                        b: bf(rand(shape.groups * shape.dk, -1.0, 1.0)),
                        c: bf(rand(shape.groups * shape.dk, -1.0, 1.0)),
                        z: Some(bf(rand(per_row, -1.0, 1.0))),
                    }]
                })
            })
            .collect();
        let rows: Vec<Option<&[StepInput]>> = inputs.iter().map(|r| r.as_deref()).collect();
        io.upload(stream, &rows)?;
        state.step(stream, &io)?;
        let got = io.outputs(stream, 1)?;
        let after = state.counters(stream)?;
        for (r, &s) in row_slots.iter().enumerate() {
            if s == 0 {
                continue;
            }
            let (start, h, flush) = counters[s];
            flushes += flush as usize;
            let h_next = if flush { 0 } else { h + 1 };
            counter_errors += usize::from(after[s] != (start, h_next, initial_flush_flag(h_next, 0, window)));
            let mut want = vec![0.0; per_row];
            let tok = &inputs[r].as_ref().expect("live row")[0];
            recurrent_step(&params, &mut truth, &[s], std::slice::from_ref(tok), &mut want);
            max_out = max_out.max(max_rel(&got[r * per_row..(r + 1) * per_row], &want));
            max_state = max_state.max(max_rel(&state.logical_state(stream, &params, s)?, truth.slot(s)));
        }
    }
    Ok(InterpreterCheck {
        steps,
        window,
        flushes,
        max_out_err: max_out,
        max_state_err: max_state,
        counter_errors,
    })
}

/// The traffic model of one layer of `shape` at `batch`: bytes per step, ceiling, `L*`.
pub fn traffic_table(shape: ModelShape, batch: usize, windows: &[usize]) -> Table {
    let tm = traffic(shape, batch);
    let mut t = Table::new([
        "L",
        "conventional MB/step",
        "replay MB/step",
        "replay/conv bytes",
        "ceiling speedup",
    ])
    .right(0..5);
    for &l in windows {
        let conv = tm.conventional_step();
        let rep = tm.replay_window(l) / l as f64;
        t.row([
            l.to_string(),
            sig(conv / 1e6, 4),
            sig(rep / 1e6, 4),
            sig(rep / conv, 3),
            format!("{}×", sig(tm.ceiling_speedup(l), 3)),
        ]);
    }
    t
}

/// Runs `replay decode`.
pub fn run(
    out: &mut dyn Write,
    choice: &Choice,
    model: ModelShape,
    batches: Vec<usize>,
    json: Option<std::path::PathBuf>,
) -> Result<bool, CliError> {
    let io = |e| CliError::Io {
        path: "<stdout>".into(),
        source: e,
    };
    if choice.is_gpu() {
        writeln!(
            out,
            "ReplaySSM decode, {} (one Mamba-2 layer: {} value heads, {} groups, dv {}, dk {}), on {}",
            model.name,
            model.heads,
            model.groups,
            model.dv,
            model.dk,
            choice.device.info().name
        )
        .map_err(io)?;
        let args = SsmBenchArgs {
            models: vec![model],
            batches,
            json,
            ..SsmBenchArgs::full(choice.scale)
        };
        return bench::run(out, choice, &args);
    }
    let note = choice.note.clone().unwrap_or_default();
    writeln!(out, "{note}").map_err(io)?;
    writeln!(
        out,
        "No GPU was found: running the replay decode loop on the CPU interpreter at the reduced shape \
         `{}` ({} value heads, {} groups, dv {}, dk {}) and checking it against the float64 recurrence.",
        CPU_TEST.name, CPU_TEST.heads, CPU_TEST.groups, CPU_TEST.dv, CPU_TEST.dk
    )
    .map_err(io)?;
    let stream = choice.device.new_stream()?;
    let mut ok = true;
    for window in [4, 16] {
        let c = interpreter_check(&stream, window, 0xdec0de + window as u64)?;
        let pass = c.max_out_err < 1e-2 && c.max_state_err < 1e-4 && c.flushes >= 3 && c.counter_errors == 0;
        ok &= pass;
        writeln!(
            out,
            "  L = {:>2}: {} steps (one launch each), 3 rows (staggered joins, one leaves, a new one \
             reuses its slot), {} flushes; max error vs f64: outputs {:.1e} (bf16), states {:.1e} \
             (fp32); counters wrong after a step: {} — {}",
            c.window,
            c.steps,
            c.flushes,
            c.max_out_err,
            c.max_state_err,
            c.counter_errors,
            if pass { "pass" } else { "FAIL" }
        )
        .map_err(io)?;
    }
    let batch = if batches.contains(&256) {
        256
    } else {
        batches.iter().copied().max().unwrap_or(256)
    };
    let (star, cands) = window_candidates(model, 0, 1.0);
    let tm = traffic(model, batch);
    writeln!(
        out,
        "\ntraffic model of one {} layer at batch {batch} (fp32 state; records: f32 dt', bf16 x per head, bf16 B per group, {} B per head and step):",
        model.name,
        sig(tm.record_bytes_per_head(), 4)
    )
    .map_err(io)?;
    let mut ls = vec![1usize, 8, 16, 32];
    ls.push(cands[0]);
    ls.sort_unstable();
    ls.dedup();
    write!(out, "{}", traffic_table(model, batch, &ls)).map_err(io)?;
    writeln!(
        out,
        "best window L* = sqrt(2 ā (M_S/r − T)) = {star:.1} for standard decoding (ā = T = 1); the GPU run tunes L over {cands:?}"
    )
    .map_err(io)?;
    writeln!(
        out,
        "on a GPU this command tunes (cached) and benchmarks the decode: `replay decode --model {}`",
        model.name
    )
    .map_err(io)?;
    Ok(ok)
}
