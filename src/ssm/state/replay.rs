//! The ReplaySSM manager: checkpoints, record rings and device-side counters.

use super::common::{fill, LayerCore};
use super::io::StepIo;
use super::launch::{buf, compile_layer_kernel, go, preload_all, preload_job};
use super::plan::{Next, ReplayPlan};
use super::{DecodeLayer, Result};
use half::bf16;
use replay_kernels::ssm::kernels::commit::mamba2_commit;
use replay_kernels::ssm::kernels::fold::mamba2_fold;
use replay_kernels::ssm::kernels::replay::mamba2_replay_step;
use replay_kernels::ssm::kernels::verify::mamba2_verify;
use replay_kernels::ssm::kernels::{initial_flush_flag, META_FLUSH, META_H, META_START, META_WORDS};
use replay_kernels::ssm::reference::Mamba2Params;
use replay_kernels::ssm::shapes::ModelShape;
use replay_runtime::{ArgValue, CompiledKernel, DeviceBuffer, Event, Graph, Grid, KernelExt, RuntimeError, Stream};
use std::cell::Cell;

/// ReplaySSM decode state of one Mamba-2 layer: per slot a checkpoint `[heads, dv, dk]` (f32),
/// a ring of `L + T` input records and counters `(start, h, flush)` in device memory.
///
/// - [`DecodeLayer::step`]: **one** `mamba2_replay_step` launch for the batch, no host work:
///   non-flush rows read the checkpoint and the records, flush rows fold the window, and the
///   launch advances the counters (`h ← h + 1` or `0`, the next flags) — not in place, since
///   every program of the launch reads them, but into the second of two counter buffers.
/// - [`Mamba2ReplayState::verify`]: output-only verification of `n ≤ T` drafts per row (with the
///   pre-flush when `h + n > L`); [`Mamba2ReplayState::commit`] then advances `h` by the accepted
///   counts, read from device memory ([`Mamba2ReplayState::accepted`]), in place in the current
///   counter buffer (`mamba2_commit`, a launch after the sampler).
/// - With [`ReplayPlan::lp`] (two state precisions) every checkpoint also has an f16 copy,
///   written with it by admission and every flush and read instead of it by non-flush steps and
///   verifications; the recurrence (every flush) reads the f32 checkpoint only.
///
/// **Counter parity.** The counters live in two buffers; [`Self::parity`] says which one is
/// current. Every kernel reads the current one; a decode step writes the other and the manager
/// makes that one current after the launch (a host-side flip, nothing waits). Admission
/// ([`DecodeLayer::admit`], [`Self::fill`]), [`Self::verify`], [`Self::commit`],
/// [`Self::counters`] and [`DecodeLayer::logical_state`] use the current buffer. A CUDA graph
/// bakes the buffers into its launches, so a graph of decode steps is valid only at the parity
/// it was captured at: [`DecodeLayer::capture_steps`] captures an even number of steps (a
/// replay of the graph then leaves the current buffer where it found it, so the graph can be
/// replayed any number of times, and admissions and verifications between replays see the
/// right buffer); between replays, run host-launched decode steps only in even numbers (or
/// capture again). Capturing runs nothing, so it leaves the parity as it was.
pub struct Mamba2ReplayState {
    pub(super) core: LayerCore,
    plan: ReplayPlan,
    /// Checkpoints `[slots, heads, dv, dk]`.
    pub ckpt: DeviceBuffer<f32>,
    /// Their f16 copies with [`ReplayPlan::lp`] (else one unused element).
    pub ckpt_lp: DeviceBuffer<half::f16>,
    /// Ring `dt'` `[slots, L+T, heads]`.
    pub rec_dt: DeviceBuffer<f32>,
    /// Ring `x` `[slots, L+T, heads, dv]`.
    pub rec_x: DeviceBuffer<bf16>,
    /// Ring `B` `[slots, L+T, groups, dk]`.
    pub rec_b: DeviceBuffer<bf16>,
    /// Counters `[slots, 4]` (start, h, flush flag, reserved), twice: `meta[parity]` is
    /// current, a decode step writes the other.
    meta: [DeviceBuffer<i32>; 2],
    /// Which of `meta` is current (0 or 1).
    parity: Cell<usize>,
    /// Accepted drafts per row `[batch]`, written by the sampler before [`Self::commit`].
    pub accepted: DeviceBuffer<i32>,
    step_k: CompiledKernel<mamba2_replay_step::Kernel>,
    verify_k: Option<CompiledKernel<mamba2_verify::Kernel>>,
    /// The verification's pre-flush (with `verify_k`).
    fold_k: Option<CompiledKernel<mamba2_fold::Kernel>>,
    /// Where a pre-flush that verifies runs beside the verification.
    fold_branch: Option<FoldBranch>,
    commit_k: CompiledKernel<mamba2_commit::Kernel>,
}

/// A stream of its own for a pre-flush that verifies the rows it folds
/// ([`super::Tiles::verifies`]) and runs beside the verification ([`super::Tiles::beside`]):
/// the verification then skips those rows and the fold every other, so the two launches touch
/// disjoint rows and run side by side, forked from the caller's stream and joined back into it
/// (in a captured graph, two branches).
struct FoldBranch {
    side: Stream,
    fork: Event,
    join: Event,
}

impl FoldBranch {
    fn new(stream: &Stream) -> Result<FoldBranch> {
        let device = stream.device();
        Ok(FoldBranch {
            side: device.new_stream()?,
            fork: device.new_event()?,
            join: device.new_event()?,
        })
    }
}

const COMMIT_BLOCK: usize = 128;

impl Mamba2ReplayState {
    /// Allocates the state of `batch` rows with `slots` sequence slots (slot 0, the padding
    /// slot, included; at least `batch + 1`), all rows padding, and compiles the kernels.
    pub fn new(
        stream: &Stream,
        shape: ModelShape,
        params: &Mamba2Params,
        batch: usize,
        slots: usize,
        gated: bool,
        plan: ReplayPlan,
    ) -> Result<Mamba2ReplayState> {
        if plan.window == 0 || plan.max_drafts > plan.window {
            return Err(RuntimeError::Size(format!(
                "window L = {} and drafts T = {}: need 1 ≤ L and T ≤ L",
                plan.window, plan.max_drafts
            )));
        }
        let device = stream.device();
        let (l, t) = (plan.window, plan.max_drafts);
        let cap = l + t;
        let (h, dv, dk, g) = (shape.heads, shape.dv, shape.dk, shape.groups);
        let step_k = compile_layer_kernel!(mamba2_replay_step, device, shape, plan.step, HAS_Z: gated, L: l, T: t, EARLY: plan.step.early, PREFETCH: plan.step.prefetch, FR: plan.step.flush_rows, LP: plan.lp)?;
        let verify_k = (t > 0)
            .then(|| {
                let tiles = plan.verify;
                compile_layer_kernel!(mamba2_verify, device, shape, tiles, HAS_Z: gated, L: l, T: t, HB: tiles.hb, PREFETCH: tiles.prefetch, SHARED_WEIGHTS: tiles.shared_weights, ASYNC: tiles.async_copy, LP: plan.lp, TIERS: tiles.record_tiers, TAIL: tiles.tail_tiles, CHAINED: tiles.chained_dots, FOLD_VERIFIES: plan.fold.verifies)
            })
            .transpose()?;
        let fold_k = (t > 0)
            .then(|| {
                let tiles = plan.fold;
                compile_layer_kernel!(mamba2_fold, device, shape, tiles, HAS_Z: gated, L: l, T: t, HB: tiles.hb, FC: tiles.flush_columns, PREFETCH: tiles.prefetch, LP: plan.lp, TAIL: tiles.tail_tiles, RELOAD_KEYS: tiles.reload_keys, VERIFY: tiles.verifies)
            })
            .transpose()?;
        let fold_branch = (t > 0 && plan.fold.verifies && plan.fold.beside)
            .then(|| FoldBranch::new(stream))
            .transpose()?;
        let commit_k = mamba2_commit::Kernel::compile(
            device,
            mamba2_commit::Config {
                L: l,
                T: t,
                BLOCK: COMMIT_BLOCK,
                num_warps: 4,
                min_blocks: 1,
            },
        )?;
        Ok(Mamba2ReplayState {
            core: LayerCore::new(stream, shape, params, batch, slots, slots, gated, true, plan.lp)?,
            plan,
            ckpt: DeviceBuffer::zeros(stream, slots * h * dv * dk)?,
            ckpt_lp: DeviceBuffer::zeros(stream, if plan.lp { slots * h * dv * dk } else { 1 })?,
            rec_dt: DeviceBuffer::zeros(stream, slots * cap * h)?,
            rec_x: DeviceBuffer::zeros(stream, slots * cap * h * dv)?,
            rec_b: DeviceBuffer::zeros(stream, slots * cap * g * dk)?,
            meta: [
                DeviceBuffer::zeros(stream, slots * META_WORDS)?,
                DeviceBuffer::zeros(stream, slots * META_WORDS)?,
            ],
            parity: Cell::new(0),
            accepted: DeviceBuffer::zeros(stream, batch)?,
            step_k,
            verify_k,
            fold_k,
            fold_branch,
            commit_k,
        })
    }

    /// The plan (window, drafts, tiles).
    pub fn plan(&self) -> &ReplayPlan {
        &self.plan
    }

    /// Puts a sequence in every row (zero initial states), all ready for `next`: the
    /// benchmark's full batch. One launch per row; use before capturing.
    pub fn fill(&mut self, stream: &Stream, next: Next) -> Result<()> {
        fill(self, stream, next)
    }

    /// Which counter buffer is current (0 or 1): flips with every decode step.
    pub fn parity(&self) -> usize {
        self.parity.get()
    }

    /// The current counter buffer `[slots, 4]`: `(start, h, flush flag, reserved)` per slot.
    pub fn meta(&self) -> &DeviceBuffer<i32> {
        &self.meta[self.parity.get()]
    }

    /// Both counter buffers, in storage order (`[parity()]` is the current one).
    pub fn meta_buffers(&self) -> [&DeviceBuffer<i32>; 2] {
        [&self.meta[0], &self.meta[1]]
    }

    /// The counter buffer a decode step writes (the next current one).
    fn meta_next(&self) -> &DeviceBuffer<i32> {
        &self.meta[1 - self.parity.get()]
    }

    /// The arguments of `mamba2_replay_step`: counters read (current) and written (the other
    /// buffer), flags computed for `next`.
    fn step_args<'a>(&'a self, io: &'a StepIo, next: Next) -> Vec<ArgValue<'a>> {
        let mut a = self.core.leading_args(io);
        a.extend([
            buf(self.meta()),
            buf(self.meta_next()),
            buf(&self.ckpt),
            buf(&self.ckpt_lp),
            buf(&self.rec_dt),
            buf(&self.rec_x),
            buf(&self.rec_b),
            buf(&io.out),
            ArgValue::I32(self.core.batch as i32),
            ArgValue::I32(self.core.state_slots as i32),
            ArgValue::I32(next.drafts() as i32),
        ]);
        a
    }

    fn verify_args<'a>(&'a self, io: &'a StepIo, n: usize) -> Vec<ArgValue<'a>> {
        let mut a = self.core.leading_args(io);
        a.extend([
            buf(self.meta()),
            buf(&self.ckpt),
            buf(&self.ckpt_lp),
            buf(&self.rec_dt),
            buf(&self.rec_x),
            buf(&self.rec_b),
            buf(&io.out),
            ArgValue::I32(self.core.batch as i32),
            ArgValue::I32(self.core.state_slots as i32),
            ArgValue::I32(n as i32),
        ]);
        a
    }

    fn commit_args(&self, after_verify: bool, next: Next) -> Vec<ArgValue<'_>> {
        vec![
            buf(&self.core.slot_idx),
            buf(&self.accepted),
            buf(self.meta()),
            ArgValue::I32(self.core.batch as i32),
            ArgValue::I32(self.core.state_slots as i32),
            ArgValue::I32(after_verify as i32),
            ArgValue::I32(next.drafts() as i32),
        ]
    }

    fn commit_grid(&self) -> Grid {
        Grid::cdiv(self.core.batch as u64, COMMIT_BLOCK as u64)
    }

    /// One decode step — one launch — that also advances the counters (into the other
    /// buffer, which becomes current) with the flags for a `next` launch: a decode step, or a
    /// verification of `n` drafts.
    pub fn step_then(&self, stream: &Stream, io: &StepIo, next: Next) -> Result<()> {
        self.check_io(io, 1)?;
        go(
            &self.step_k,
            stream,
            self.core.step_grid(self.plan.step.bv),
            &self.step_args(io, next),
        )?;
        self.parity.set(1 - self.parity.get());
        Ok(())
    }

    /// Output-only verification of `n` drafts per row (`1 ≤ n ≤ T`), inputs token-major in
    /// `io`; outputs `[batch, n, heads, dv]`. The flags must have been set for `Verify(n)`.
    /// Follow it with [`Self::commit`]. Two launches: [`Self::verify_outputs`], then
    /// [`Self::pre_flush`]; side by side where the plan's fold runs beside the verification
    /// ([`super::Tiles::beside`]).
    pub fn verify(&self, stream: &Stream, io: &StepIo, n: usize) -> Result<()> {
        match &self.fold_branch {
            Some(b) => {
                b.fork.record(stream)?;
                b.side.wait(&b.fork)?;
                self.verify_outputs(stream, io, n)?;
                self.pre_flush(&b.side, io, n)?;
                b.join.record(&b.side)?;
                stream.wait(&b.join)
            }
            None => {
                self.verify_outputs(stream, io, n)?;
                self.pre_flush(stream, io, n)
            }
        }
    }

    /// The first launch of [`Self::verify`]: the drafts' outputs (and their records appended),
    /// from the checkpoints as they are. [`Self::pre_flush`] must follow before the commit;
    /// apart, the two can be timed or profiled one by one.
    pub fn verify_outputs(&self, stream: &Stream, io: &StepIo, n: usize) -> Result<()> {
        let Some(k) = &self.verify_k else {
            return Err(RuntimeError::Size(
                "this state was made with T = 0: no verification".into(),
            ));
        };
        if n == 0 || n > self.plan.max_drafts {
            return Err(RuntimeError::Size(format!(
                "{n} drafts, this state verifies 1..={}",
                self.plan.max_drafts
            )));
        }
        self.check_io(io, n)?;
        let grid = self.core.grid(self.plan.verify.hb, self.plan.verify.bv);
        go(k, stream, grid, &self.verify_args(io, n))
    }

    /// The second launch of [`Self::verify`] of `n` drafts: the rows whose flags say so (`h + n
    /// > L`) fold their committed records into their checkpoints (and with
    /// the fold's [`Tiles::verifies`](super::Tiles::verifies) verify their drafts from them); the others return at
    /// once. Nothing with `T = 0`.
    pub fn pre_flush(&self, stream: &Stream, io: &StepIo, n: usize) -> Result<()> {
        match &self.fold_k {
            Some(f) => {
                self.check_io(io, n)?;
                let grid = self.core.grid(self.plan.fold.hb, self.plan.fold.bv);
                go(f, stream, grid, &self.verify_args(io, n))
            }
            None => Ok(()),
        }
    }

    /// Commits a verification: `h ← h + accepted[row]` (read from [`Self::accepted`] in device
    /// memory) after dropping folded records, and flags for `next`, in place in the current
    /// counter buffer (the parity does not change).
    pub fn commit(&self, stream: &Stream, next: Next) -> Result<()> {
        go(
            &self.commit_k,
            stream,
            self.commit_grid(),
            &self.commit_args(true, next),
        )
    }

    /// Loads the kernels a verification of `n` drafts, its commit and a decode step before it
    /// use (before a capture).
    pub fn prepare_verify(&self, io: &StepIo, n: usize) -> Result<()> {
        let mut jobs = vec![
            preload_job(&self.step_k, &self.step_args(io, Next::Verify(n))),
            preload_job(&self.commit_k, &self.commit_args(true, Next::Verify(n))),
        ];
        jobs.extend(self.verify_k.as_ref().map(|k| preload_job(k, &self.verify_args(io, n))));
        jobs.extend(self.fold_k.as_ref().map(|f| preload_job(f, &self.verify_args(io, n))));
        preload_all(jobs)
    }

    fn check_io(&self, io: &StepIo, tokens: usize) -> Result<()> {
        if io.batch != self.core.batch
            || io.tokens < tokens
            || io.gated != self.core.gated
            || io.shape != self.core.shape
        {
            return Err(RuntimeError::Size(format!(
                "step buffers for {} rows × {} tokens ({}), the state has {} rows ({}) and needs {tokens} tokens",
                io.batch,
                io.tokens,
                if io.gated { "gated" } else { "ungated" },
                self.core.batch,
                if self.core.gated { "gated" } else { "ungated" },
            )));
        }
        Ok(())
    }

    /// `(start, h, flush)` of every slot in the current counter buffer, read back.
    pub fn counters(&self, stream: &Stream) -> Result<Vec<(usize, usize, bool)>> {
        let m = self.meta().to_host(stream)?;
        Ok(m.chunks(META_WORDS)
            .map(|w| {
                (
                    w[META_START].max(0) as usize,
                    w[META_H].max(0) as usize,
                    w[META_FLUSH] != 0,
                )
            })
            .collect())
    }

    /// The checkpoint of `slot` as f64.
    pub fn checkpoint(&self, stream: &Stream, slot: usize) -> Result<Vec<f64>> {
        self.core.slot_f64(stream, &self.ckpt, slot)
    }
}

impl DecodeLayer for Mamba2ReplayState {
    fn method(&self) -> &'static str {
        "replay"
    }
    fn admit(&mut self, stream: &Stream, row: usize, initial: Option<&[f32]>, next: Next) -> Result<usize> {
        let flag = initial_flush_flag(0, next.drafts(), self.plan.window);
        let meta = &self.meta[self.parity.get()];
        let lp = self.plan.lp.then_some(&self.ckpt_lp);
        self.core.admit(stream, row, initial, (&self.ckpt, lp), meta, flag)
    }
    fn step(&self, stream: &Stream, io: &StepIo) -> Result<()> {
        self.step_then(stream, io, Next::Decode)
    }
    fn prepare(&self, io: &StepIo) -> Result<()> {
        preload_all(vec![
            preload_job(&self.step_k, &self.step_args(io, Next::Decode)),
            preload_job(&self.commit_k, &self.commit_args(true, Next::Decode)),
        ])
    }
    /// `steps` decode steps (`steps` launches) as one graph; `steps` must be even, so that a
    /// replay of the graph leaves the current counter buffer where it found it (see the
    /// type's documentation). Capturing leaves the parity as it was.
    fn capture_steps(&self, stream: &Stream, io: &StepIo, steps: usize) -> Result<Graph> {
        if !steps.is_multiple_of(2) {
            return Err(RuntimeError::Size(format!(
                "a replay graph captures an even number of decode steps, not {steps}: each step \
                 flips the current counter buffer, and every replay of the graph must leave it \
                 where the capture found it"
            )));
        }
        self.prepare(io)?;
        let parity = self.parity.get();
        let graph = stream.capture(|s| {
            for _ in 0..steps {
                self.step(s, io)?;
            }
            Ok(())
        });
        // The capture ran nothing: the device's counters are where they were.
        self.parity.set(parity);
        graph
    }
    fn logical_state(&self, stream: &Stream, params: &Mamba2Params, slot: usize) -> Result<Vec<f64>> {
        let shape = self.core.shape;
        let (dv, dk, heads, groups) = (shape.dv, shape.dk, shape.heads, shape.groups);
        let cap = self.plan.window + self.plan.max_drafts;
        let (start, h, _) = self.counters(stream)?[slot];
        let rdt = self.rec_dt.to_host(stream)?;
        let rx = self.rec_x.to_host(stream)?;
        let rb = self.rec_b.to_host(stream)?;
        let mut st = self.checkpoint(stream, slot)?;
        for j in 0..h {
            let p = slot * cap + (start + j) % cap;
            for hd in 0..heads {
                let g = shape.group_of(hd);
                let dtp = rdt[p * heads + hd] as f64;
                let alpha = (dtp * params.a[hd]).exp();
                for i in 0..dv {
                    let v = dtp * rx[(p * heads + hd) * dv + i].to_f64();
                    for c in 0..dk {
                        let k = rb[(p * groups + g) * dk + c].to_f64();
                        let e = &mut st[(hd * dv + i) * dk + c];
                        *e = alpha * *e + v * k;
                    }
                }
            }
        }
        Ok(st)
    }
}
