//! Decode state managers for one Mamba-2 layer: [`Mamba2ReplayState`] (ReplaySSM: checkpoints,
//! record rings, device-side counters) and [`Mamba2ConventionalState`] (the baseline: one state
//! read and written per step). Both implement [`DecodeLayer`], so the benchmark and the demo
//! swap them.
//!
//! Everything a decode step needs lives in device memory: the per-row slot indices, the
//! counters (`h`, ring start, flush flag), the accepted counts. A step is a fixed sequence of
//! launches whose arguments never change, so it captures into a CUDA graph once
//! ([`DecodeLayer::capture_steps`]) and replays with no host synchronisation. Continuous
//! batching happens between steps: [`DecodeLayer::admit`] puts a sequence in a row (a device
//! copy of its initial state into a free slot and a reset of the slot's counters, by
//! [`super::admit::mamba2_admit`]), [`DecodeLayer::release`] turns the row into padding.

use super::admit::mamba2_admit;
use half::bf16;
use replay_dsl::{KernelDef, Specialization};
use replay_kernels::ssm::kernels::commit::mamba2_commit;
use replay_kernels::ssm::kernels::decode::mamba2_decode;
use replay_kernels::ssm::kernels::replay::mamba2_replay_step;
use replay_kernels::ssm::kernels::spec_baseline::mamba2_spec_baseline;
use replay_kernels::ssm::kernels::verify::mamba2_verify;
use replay_kernels::ssm::kernels::{initial_flush_flag, META_FLUSH, META_H, META_START, META_WORDS};
use replay_kernels::ssm::reference::{Mamba2Params, StepInput};
use replay_kernels::ssm::shapes::ModelShape;
use replay_runtime::launch::check::scalar_ints;
use replay_runtime::launch::kernel::Engine;
use replay_runtime::{ArgValue, CompiledKernel, Device, DeviceBuffer, Graph, Grid, KernelExt};
use replay_runtime::{RuntimeError, Stream};
use serde::Serialize;

type Result<T> = std::result::Result<T, RuntimeError>;

/// Tile shape of one kernel: value rows per program `BV`, value heads per program `HB` (replay
/// and verify only; 1 elsewhere) and warps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Tiles {
    /// Value rows of the state per program.
    pub bv: usize,
    /// Value heads per program (shares the group's keys and `kᵀq` products).
    pub hb: usize,
    /// Warps per program.
    pub num_warps: u32,
}

impl Tiles {
    /// `BV=.. HB=.. warps=..`.
    pub fn show(&self) -> String {
        format!("BV={} HB={} w={}", self.bv, self.hb, self.num_warps)
    }
}

/// What the next launch touching the counters is: the commit kernel computes the flush flags
/// for it (`h + 1 ≥ L` before a decode step, `h + n > L` before verifying `n` drafts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// A decode step.
    Decode,
    /// A verification of this many drafts.
    Verify(usize),
}

impl Next {
    fn drafts(self) -> usize {
        match self {
            Next::Decode => 0,
            Next::Verify(n) => n,
        }
    }
}

/// How a [`Mamba2ReplayState`] runs: window `L`, most drafts per verification `T` (0 for pure
/// decoding; ring capacity `L + T`) and the kernels' tile shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ReplayPlan {
    /// The replay window `L` (a flush every `L` decode steps).
    pub window: usize,
    /// Most drafts one verification carries, `T ≤ L` (0: no speculative decoding).
    pub max_drafts: usize,
    /// Tiles of `mamba2_replay_step`.
    pub step: Tiles,
    /// Tiles of `mamba2_verify` (unused when `max_drafts == 0`).
    pub verify: Tiles,
}

impl ReplayPlan {
    /// A plan with default tiles for `shape` (before tuning): `BV = min(32, dv)` rounded to a
    /// power of two, `HB` the largest of 4, 2, 1 dividing the heads per group, 4 warps.
    pub fn default_for(shape: &ModelShape, window: usize, max_drafts: usize) -> ReplayPlan {
        let hpg = shape.heads_per_group();
        let hb = [4, 2, 1].into_iter().find(|h| hpg % h == 0).unwrap_or(1);
        let bv = 32usize.min(shape.dv.next_power_of_two());
        let t = Tiles { bv, hb, num_warps: 4 };
        ReplayPlan {
            window,
            max_drafts,
            step: t,
            verify: t,
        }
    }
}

/// How a [`Mamba2ConventionalState`] runs: tiles of the decode kernel and of the
/// snapshot-per-draft verification baseline, and the most drafts per verification.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ConventionalPlan {
    /// Tiles of `mamba2_decode` (`hb` unused).
    pub decode: Tiles,
    /// Tiles of `mamba2_spec_baseline` (`hb` unused).
    pub spec: Tiles,
    /// Most drafts per verification (snapshot slots reserved per row).
    pub max_drafts: usize,
}

impl ConventionalPlan {
    /// Default tiles: `BV = min(32, dv)` (a power of two), 4 warps.
    pub fn default_for(shape: &ModelShape, max_drafts: usize) -> ConventionalPlan {
        let t = Tiles {
            bv: 32usize.min(shape.dv.next_power_of_two()),
            hb: 1,
            num_warps: 4,
        };
        ConventionalPlan {
            decode: t,
            spec: t,
            max_drafts,
        }
    }
}

/// One layer's parameters on the device: `A`, `D`, `dt_bias` (f32, `[heads]`).
pub struct Mamba2Weights {
    /// `A < 0`.
    pub a: DeviceBuffer<f32>,
    /// `D`.
    pub d: DeviceBuffer<f32>,
    /// `dt_bias`.
    pub dt_bias: DeviceBuffer<f32>,
}

impl Mamba2Weights {
    /// Uploads `params` (rounded to f32).
    pub fn upload(stream: &Stream, params: &Mamba2Params) -> Result<Mamba2Weights> {
        let f = |v: &[f64]| DeviceBuffer::from_host(stream, &v.iter().map(|&x| x as f32).collect::<Vec<_>>());
        Ok(Mamba2Weights {
            a: f(&params.a)?,
            d: f(&params.d)?,
            dt_bias: f(&params.dt_bias)?,
        })
    }
}

/// The per-step input and output buffers of a batch, token-major within a row
/// (`dt [batch, n, heads]`, `x, z, y [batch, n, heads, dv]`, `B, C [batch, n, groups, dk]`),
/// sized for up to `tokens` tokens per row (1 for decoding, `T` for verification). A model
/// writes them in place between graph replays.
pub struct StepIo {
    shape: ModelShape,
    batch: usize,
    tokens: usize,
    gated: bool,
    /// `dt` (bf16).
    pub dt: DeviceBuffer<bf16>,
    /// `x` (bf16).
    pub x: DeviceBuffer<bf16>,
    /// `B` (bf16).
    pub b: DeviceBuffer<bf16>,
    /// `C` (bf16).
    pub c: DeviceBuffer<bf16>,
    /// `z` (bf16; one element when ungated).
    pub z: DeviceBuffer<bf16>,
    /// `y` (bf16).
    pub out: DeviceBuffer<bf16>,
}

impl StepIo {
    /// Zeroed buffers for `batch` rows of up to `tokens` tokens each.
    pub fn new(stream: &Stream, shape: ModelShape, batch: usize, tokens: usize, gated: bool) -> Result<StepIo> {
        let n = batch * tokens;
        let hv = shape.heads * shape.dv;
        let gk = shape.groups * shape.dk;
        Ok(StepIo {
            shape,
            batch,
            tokens,
            gated,
            dt: DeviceBuffer::zeros(stream, n * shape.heads)?,
            x: DeviceBuffer::zeros(stream, n * hv)?,
            b: DeviceBuffer::zeros(stream, n * gk)?,
            c: DeviceBuffer::zeros(stream, n * gk)?,
            z: DeviceBuffer::zeros(stream, if gated { n * hv } else { 1 })?,
            out: DeviceBuffer::zeros(stream, n * hv)?,
        })
    }

    /// Rows of the batch.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Most tokens per row.
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// Whether `z` is read.
    pub fn gated(&self) -> bool {
        self.gated
    }

    /// Uploads `n` tokens per row (`rows[r]` holds row `r`'s tokens, `None` for padding rows,
    /// whose inputs are written as zeros and never read), rounding to bf16. The kernels then
    /// read the first `batch · n` tokens, token-major within a row.
    pub fn upload(&mut self, stream: &Stream, rows: &[Option<&[StepInput]>]) -> Result<usize> {
        let s = self.shape;
        assert_eq!(rows.len(), self.batch, "one entry per row");
        let n = rows.iter().flatten().map(|r| r.len()).max().unwrap_or(1).max(1);
        assert!(n <= self.tokens, "{n} tokens per row, buffers hold {}", self.tokens);
        let bf = |v: &[f64], out: &mut Vec<bf16>| out.extend(v.iter().map(|&x| bf16::from_f64(x)));
        let (mut dt, mut x, mut b, mut c, mut z) = (vec![], vec![], vec![], vec![], vec![]);
        for row in rows {
            for t in 0..n {
                match row {
                    Some(toks) => {
                        let tok = &toks[t];
                        bf(&tok.dt, &mut dt);
                        bf(&tok.x, &mut x);
                        bf(&tok.b, &mut b);
                        bf(&tok.c, &mut c);
                        match &tok.z {
                            Some(v) => bf(v, &mut z),
                            None => z.extend(std::iter::repeat_n(bf16::ZERO, s.heads * s.dv)),
                        }
                    }
                    None => {
                        dt.extend(std::iter::repeat_n(bf16::ZERO, s.heads));
                        x.extend(std::iter::repeat_n(bf16::ZERO, s.heads * s.dv));
                        b.extend(std::iter::repeat_n(bf16::ZERO, s.groups * s.dk));
                        c.extend(std::iter::repeat_n(bf16::ZERO, s.groups * s.dk));
                        z.extend(std::iter::repeat_n(bf16::ZERO, s.heads * s.dv));
                    }
                }
            }
        }
        let pad = |mut v: Vec<bf16>, len: usize| {
            v.resize(len, bf16::ZERO);
            v
        };
        self.dt.copy_from_host(stream, &pad(dt, self.dt.len()))?;
        self.x.copy_from_host(stream, &pad(x, self.x.len()))?;
        self.b.copy_from_host(stream, &pad(b, self.b.len()))?;
        self.c.copy_from_host(stream, &pad(c, self.c.len()))?;
        if self.gated {
            self.z.copy_from_host(stream, &pad(z, self.z.len()))?;
        }
        Ok(n)
    }

    /// Fills every input with pseudo-random values (benchmarks): `dt, x, B, C, z` uniform in
    /// `[-1, 1)` rounded to bf16.
    pub fn randomize(&mut self, stream: &Stream, seed: u64) -> Result<()> {
        use replay_runtime::tune::bench::uniform;
        let r = |i: u64, n: usize| -> Vec<bf16> {
            uniform(seed ^ (i * 0x9e37), n, -1.0, 1.0)
                .into_iter()
                .map(bf16::from_f64)
                .collect()
        };
        let (n1, n2, n3, n4) = (self.dt.len(), self.x.len(), self.b.len(), self.z.len());
        self.dt.copy_from_host(stream, &r(1, n1))?;
        self.x.copy_from_host(stream, &r(2, n2))?;
        self.b.copy_from_host(stream, &r(3, n3))?;
        self.c.copy_from_host(stream, &r(4, n3))?;
        self.z.copy_from_host(stream, &r(5, n4))?;
        Ok(())
    }

    /// The outputs of the first `n` tokens of every row, `[batch][n][heads][dv]`, as f64.
    pub fn outputs(&self, stream: &Stream, n: usize) -> Result<Vec<f64>> {
        let all = self.out.to_host(stream)?;
        let len = self.batch * n * self.shape.heads * self.shape.dv;
        Ok(all[..len].iter().map(|v| v.to_f64()).collect())
    }
}

/// Which rows hold which slots, and which slots are free (host bookkeeping; the device sees
/// only `slot_idx`). Slot 0 is the padding slot.
#[derive(Clone, Debug)]
struct SlotTable {
    row_slot: Vec<i32>,
    free: Vec<usize>,
}

impl SlotTable {
    fn new(batch: usize, slots: usize) -> SlotTable {
        SlotTable {
            row_slot: vec![0; batch],
            free: (1..slots).rev().collect(),
        }
    }
    fn take(&mut self, row: usize) -> Result<usize> {
        if self.row_slot[row] != 0 {
            return Err(RuntimeError::Size(format!("row {row} already holds a sequence")));
        }
        let slot = self
            .free
            .pop()
            .ok_or_else(|| RuntimeError::Size("no free slot".into()))?;
        self.row_slot[row] = slot as i32;
        Ok(slot)
    }
    fn give_back(&mut self, row: usize) -> Option<usize> {
        let slot = std::mem::replace(&mut self.row_slot[row], 0);
        (slot != 0).then(|| {
            self.free.push(slot as usize);
            slot as usize
        })
    }
}

/// Launches `k` with type-erased arguments.
fn go<K: KernelDef>(k: &CompiledKernel<K>, s: &Stream, grid: Grid, args: &[ArgValue<'_>]) -> Result<()> {
    k.launch_values(s, grid, args, Engine::Device)
}

/// Loads the specialization these arguments use (so that capturing launches loads nothing).
fn preload<K: KernelDef>(k: &CompiledKernel<K>, args: &[ArgValue<'_>]) -> Result<()> {
    let infos: Vec<_> = args.iter().map(ArgValue::info).collect();
    k.load(&Specialization::from_ints(&scalar_ints(&infos))).map(|_| ())
}

fn buf<T: replay_runtime::HostElem>(b: &DeviceBuffer<T>) -> ArgValue<'_> {
    ArgValue::Buffer(b.raw())
}

/// What the benchmark and the demo need from a decode state manager of one layer.
pub trait DecodeLayer {
    /// `"replay"` or `"conventional"`.
    fn method(&self) -> &'static str;
    /// Model shape.
    fn shape(&self) -> ModelShape;
    /// Rows of the batch.
    fn batch(&self) -> usize;
    /// Puts a new sequence in padding row `row`: takes a free slot, copies `initial`
    /// (`[heads, dv, dk]` f32; zeros when `None`) into it on the device and resets its
    /// counters for a `next` launch. Returns the slot.
    fn admit(&mut self, stream: &Stream, row: usize, initial: Option<&[f32]>, next: Next) -> Result<usize>;
    /// Ends the sequence in `row`: the row becomes padding, its slot free. Returns the slot.
    fn release(&mut self, stream: &Stream, row: usize) -> Result<Option<usize>>;
    /// The slot of each row (0 = padding).
    fn slots(&self) -> &[i32];
    /// One decode step for the whole batch (device work only, nothing waits).
    fn step(&self, stream: &Stream, io: &StepIo) -> Result<()>;
    /// Loads every kernel specialization `step` uses (before a capture).
    fn prepare(&self, io: &StepIo) -> Result<()>;
    /// `steps` decode steps captured as one CUDA graph (replay it with `Graph::launch`).
    fn capture_steps(&self, stream: &Stream, io: &StepIo, steps: usize) -> Result<Graph> {
        self.prepare(io)?;
        stream.capture(|s| {
            for _ in 0..steps {
                self.step(s, io)?;
            }
            Ok(())
        })
    }
    /// The logical state of `slot` (`[heads, dv, dk]`, f64), read back from the device.
    fn logical_state(&self, stream: &Stream, params: &Mamba2Params, slot: usize) -> Result<Vec<f64>>;
}

struct AdmitKernel {
    k: CompiledKernel<mamba2_admit::Kernel>,
    state_elems: usize,
}

impl AdmitKernel {
    fn new(device: &Device, shape: &ModelShape, with_meta: bool) -> Result<AdmitKernel> {
        let state_elems = shape.heads * shape.state_elems();
        let k = mamba2_admit::Kernel::compile(
            device,
            mamba2_admit::Config {
                STATE: state_elems,
                WITH_META: with_meta,
                BLOCK: 1024,
                num_warps: 4,
            },
        )?;
        Ok(AdmitKernel { k, state_elems })
    }

    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        stream: &Stream,
        slot: usize,
        initial: Option<&[f32]>,
        state: &DeviceBuffer<f32>,
        meta: &DeviceBuffer<i32>,
        slots: usize,
        flag: bool,
    ) -> Result<()> {
        let init = match initial {
            Some(v) => {
                if v.len() != self.state_elems {
                    return Err(RuntimeError::Size(format!(
                        "initial state has {} elements, a slot {}",
                        v.len(),
                        self.state_elems
                    )));
                }
                DeviceBuffer::from_host(stream, v)?
            }
            None => DeviceBuffer::zeros(stream, self.state_elems)?,
        };
        let which = DeviceBuffer::from_host(stream, &[slot as i32])?;
        go(
            &self.k,
            stream,
            Grid::new(1, self.state_elems.div_ceil(1024) as u32, 1),
            &[
                buf(&which),
                buf(&init),
                buf(state),
                buf(meta),
                ArgValue::I32(1),
                ArgValue::I32(slots as i32),
                ArgValue::I32(flag as i32),
            ],
        )?;
        // The temporaries must outlive the copy.
        stream.synchronize()
    }
}

/// ReplaySSM decode state of one Mamba-2 layer: per slot a checkpoint `[heads, dv, dk]` (f32),
/// a ring of `L + T` input records and counters `(start, h, flush)` in device memory.
///
/// - [`DecodeLayer::step`]: one `mamba2_replay_step` launch for the batch (non-flush rows
///   read the checkpoint and the records, flush rows fold the window) and one `mamba2_commit`
///   (`h ← h + 1` or `0`, next flags) — two launches, no host work.
/// - [`Mamba2ReplayState::verify`]: output-only verification of `n ≤ T` drafts per row (with the
///   pre-flush when `h + n > L`); [`Mamba2ReplayState::commit`] then advances `h` by the accepted
///   counts, read from device memory ([`Mamba2ReplayState::accepted`]).
pub struct Mamba2ReplayState {
    shape: ModelShape,
    plan: ReplayPlan,
    gated: bool,
    batch: usize,
    n_slots: usize,
    table: SlotTable,
    weights: Mamba2Weights,
    /// Checkpoints `[slots, heads, dv, dk]`.
    pub ckpt: DeviceBuffer<f32>,
    /// Ring `dt'` `[slots, L+T, heads]`.
    pub rec_dt: DeviceBuffer<f32>,
    /// Ring `x` `[slots, L+T, heads, dv]`.
    pub rec_x: DeviceBuffer<bf16>,
    /// Ring `B` `[slots, L+T, groups, dk]`.
    pub rec_b: DeviceBuffer<bf16>,
    /// Counters `[slots, 4]`: start, h, flush flag, reserved.
    pub meta: DeviceBuffer<i32>,
    /// Row → slot `[batch]`.
    pub slot_idx: DeviceBuffer<i32>,
    /// Accepted drafts per row `[batch]`, written by the sampler before [`Self::commit`].
    pub accepted: DeviceBuffer<i32>,
    step_k: CompiledKernel<mamba2_replay_step::Kernel>,
    verify_k: Option<CompiledKernel<mamba2_verify::Kernel>>,
    commit_k: CompiledKernel<mamba2_commit::Kernel>,
    admit_k: AdmitKernel,
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
        let cap = plan.window + plan.max_drafts;
        let (h, dv, dk, g) = (shape.heads, shape.dv, shape.dk, shape.groups);
        let step_k = mamba2_replay_step::Kernel::compile(
            device,
            mamba2_replay_step::Config {
                HEADS: h,
                GROUPS: g,
                DK: dk,
                DV: dv,
                L: plan.window,
                T: plan.max_drafts,
                HAS_Z: gated,
                BV: plan.step.bv,
                HB: plan.step.hb,
                num_warps: plan.step.num_warps,
            },
        )?;
        let verify_k = if plan.max_drafts > 0 {
            Some(mamba2_verify::Kernel::compile(
                device,
                mamba2_verify::Config {
                    HEADS: h,
                    GROUPS: g,
                    DK: dk,
                    DV: dv,
                    L: plan.window,
                    T: plan.max_drafts,
                    HAS_Z: gated,
                    BV: plan.verify.bv,
                    HB: plan.verify.hb,
                    num_warps: plan.verify.num_warps,
                },
            )?)
        } else {
            None
        };
        let commit_k = mamba2_commit::Kernel::compile(
            device,
            mamba2_commit::Config {
                L: plan.window,
                T: plan.max_drafts,
                BLOCK: COMMIT_BLOCK,
                num_warps: 4,
            },
        )?;
        Ok(Mamba2ReplayState {
            shape,
            plan,
            gated,
            batch,
            n_slots: slots,
            table: SlotTable::new(batch, slots),
            weights: Mamba2Weights::upload(stream, params)?,
            ckpt: DeviceBuffer::zeros(stream, slots * h * dv * dk)?,
            rec_dt: DeviceBuffer::zeros(stream, slots * cap * h)?,
            rec_x: DeviceBuffer::zeros(stream, slots * cap * h * dv)?,
            rec_b: DeviceBuffer::zeros(stream, slots * cap * g * dk)?,
            meta: DeviceBuffer::zeros(stream, slots * META_WORDS)?,
            slot_idx: DeviceBuffer::zeros(stream, batch)?,
            accepted: DeviceBuffer::zeros(stream, batch)?,
            step_k,
            verify_k,
            commit_k,
            admit_k: AdmitKernel::new(device, &shape, true)?,
        })
    }

    /// The plan (window, drafts, tiles).
    pub fn plan(&self) -> &ReplayPlan {
        &self.plan
    }

    /// Puts a sequence in every row (zero initial states), all ready for `next`: the
    /// benchmark's full batch. One launch per row; use before capturing.
    pub fn fill(&mut self, stream: &Stream, next: Next) -> Result<()> {
        for row in 0..self.batch {
            if self.table.row_slot[row] == 0 {
                self.admit(stream, row, None, next)?;
            }
        }
        Ok(())
    }

    fn step_grid(&self) -> Grid {
        let s = &self.shape;
        Grid::new(
            self.batch as u32,
            (s.heads / self.plan.step.hb) as u32,
            s.dv.div_ceil(self.plan.step.bv) as u32,
        )
    }

    fn step_args<'a>(&'a self, io: &'a StepIo) -> Vec<ArgValue<'a>> {
        let w = &self.weights;
        vec![
            buf(&io.dt),
            buf(&io.x),
            buf(&io.b),
            buf(&io.c),
            buf(&io.z),
            buf(&w.a),
            buf(&w.d),
            buf(&w.dt_bias),
            buf(&self.slot_idx),
            buf(&self.meta),
            buf(&self.ckpt),
            buf(&self.rec_dt),
            buf(&self.rec_x),
            buf(&self.rec_b),
            buf(&io.out),
            ArgValue::I32(self.batch as i32),
            ArgValue::I32(self.n_slots as i32),
        ]
    }

    fn verify_args<'a>(&'a self, io: &'a StepIo, n: usize) -> Vec<ArgValue<'a>> {
        let mut a = self.step_args(io);
        a.push(ArgValue::I32(n as i32));
        a
    }

    fn commit_args(&self, after_verify: bool, next: Next) -> Vec<ArgValue<'_>> {
        vec![
            buf(&self.slot_idx),
            buf(&self.accepted),
            buf(&self.meta),
            ArgValue::I32(self.batch as i32),
            ArgValue::I32(self.n_slots as i32),
            ArgValue::I32(after_verify as i32),
            ArgValue::I32(next.drafts() as i32),
        ]
    }

    fn commit_grid(&self) -> Grid {
        Grid::cdiv(self.batch as u64, COMMIT_BLOCK as u64)
    }

    /// One decode step followed by a commit that prepares the flags for `next`.
    pub fn step_then(&self, stream: &Stream, io: &StepIo, next: Next) -> Result<()> {
        self.check_io(io, 1)?;
        go(&self.step_k, stream, self.step_grid(), &self.step_args(io))?;
        go(
            &self.commit_k,
            stream,
            self.commit_grid(),
            &self.commit_args(false, next),
        )
    }

    /// Output-only verification of `n` drafts per row (`1 ≤ n ≤ T`), inputs token-major in
    /// `io`; outputs `[batch, n, heads, dv]`. The flags must have been set for `Verify(n)`.
    /// Follow it with [`Self::commit`].
    pub fn verify(&self, stream: &Stream, io: &StepIo, n: usize) -> Result<()> {
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
        let s = &self.shape;
        let grid = Grid::new(
            self.batch as u32,
            (s.heads / self.plan.verify.hb) as u32,
            s.dv.div_ceil(self.plan.verify.bv) as u32,
        );
        go(k, stream, grid, &self.verify_args(io, n))
    }

    /// Commits a verification: `h ← h + accepted[row]` (read from [`Self::accepted`] in device
    /// memory) after dropping folded records, and flags for `next`.
    pub fn commit(&self, stream: &Stream, next: Next) -> Result<()> {
        go(
            &self.commit_k,
            stream,
            self.commit_grid(),
            &self.commit_args(true, next),
        )
    }

    /// Loads the kernels a verification of `n` drafts and its commit use (before a capture).
    pub fn prepare_verify(&self, io: &StepIo, n: usize) -> Result<()> {
        if let Some(k) = &self.verify_k {
            preload(k, &self.verify_args(io, n))?;
        }
        preload(&self.commit_k, &self.commit_args(true, Next::Verify(n)))
    }

    fn check_io(&self, io: &StepIo, tokens: usize) -> Result<()> {
        if io.batch != self.batch || io.tokens < tokens || io.gated != self.gated || io.shape != self.shape {
            return Err(RuntimeError::Size(format!(
                "step buffers for {} rows × {} tokens ({}), the state has {} rows ({}) and needs {tokens} tokens",
                io.batch,
                io.tokens,
                if io.gated { "gated" } else { "ungated" },
                self.batch,
                if self.gated { "gated" } else { "ungated" },
            )));
        }
        Ok(())
    }

    /// `(start, h, flush)` of every slot, read back.
    pub fn counters(&self, stream: &Stream) -> Result<Vec<(usize, usize, bool)>> {
        let m = self.meta.to_host(stream)?;
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
        let n = self.shape.heads * self.shape.state_elems();
        Ok(self.ckpt.to_host(stream)?[slot * n..(slot + 1) * n]
            .iter()
            .map(|&v| v as f64)
            .collect())
    }
}

impl DecodeLayer for Mamba2ReplayState {
    fn method(&self) -> &'static str {
        "replay"
    }
    fn shape(&self) -> ModelShape {
        self.shape
    }
    fn batch(&self) -> usize {
        self.batch
    }
    fn admit(&mut self, stream: &Stream, row: usize, initial: Option<&[f32]>, next: Next) -> Result<usize> {
        let slot = self.table.take(row)?;
        let flag = initial_flush_flag(0, next.drafts(), self.plan.window);
        self.admit_k
            .run(stream, slot, initial, &self.ckpt, &self.meta, self.n_slots, flag)?;
        self.slot_idx.copy_from_host(stream, &self.table.row_slot)?;
        Ok(slot)
    }
    fn release(&mut self, stream: &Stream, row: usize) -> Result<Option<usize>> {
        let slot = self.table.give_back(row);
        self.slot_idx.copy_from_host(stream, &self.table.row_slot)?;
        Ok(slot)
    }
    fn slots(&self) -> &[i32] {
        &self.table.row_slot
    }
    fn step(&self, stream: &Stream, io: &StepIo) -> Result<()> {
        self.step_then(stream, io, Next::Decode)
    }
    fn prepare(&self, io: &StepIo) -> Result<()> {
        preload(&self.step_k, &self.step_args(io))?;
        preload(&self.commit_k, &self.commit_args(false, Next::Decode))?;
        preload(&self.commit_k, &self.commit_args(true, Next::Decode))
    }
    fn logical_state(&self, stream: &Stream, params: &Mamba2Params, slot: usize) -> Result<Vec<f64>> {
        let shape = self.shape;
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

/// The conventional decode state of one Mamba-2 layer (the baseline): a state per slot, read
/// and written by every step (`mamba2_decode`); speculative verification writes one snapshot per
/// draft into reserved slots (`mamba2_spec_baseline`), as serving engines do today.
pub struct Mamba2ConventionalState {
    shape: ModelShape,
    plan: ConventionalPlan,
    gated: bool,
    batch: usize,
    n_slots: usize,
    table: SlotTable,
    weights: Mamba2Weights,
    /// States `[slots + batch·T, heads, dv, dk]`: the sequence slots, then the snapshot slots.
    pub state: DeviceBuffer<f32>,
    /// Row → slot `[batch]`.
    pub slot_idx: DeviceBuffer<i32>,
    /// Snapshot slot of each row's draft `[batch, T]` (rows `r` own slots `slots + r·T ..`).
    pub snap_idx: DeviceBuffer<i32>,
    decode_k: CompiledKernel<mamba2_decode::Kernel>,
    spec_k: Option<CompiledKernel<mamba2_spec_baseline::Kernel>>,
    admit_k: AdmitKernel,
    no_meta: DeviceBuffer<i32>,
}

impl Mamba2ConventionalState {
    /// Allocates `slots` sequence slots (slot 0 included) plus `batch · T` snapshot slots.
    pub fn new(
        stream: &Stream,
        shape: ModelShape,
        params: &Mamba2Params,
        batch: usize,
        slots: usize,
        gated: bool,
        plan: ConventionalPlan,
    ) -> Result<Mamba2ConventionalState> {
        let device = stream.device();
        let (h, dv, dk, g) = (shape.heads, shape.dv, shape.dk, shape.groups);
        let decode_k = mamba2_decode::Kernel::compile(
            device,
            mamba2_decode::Config {
                HEADS: h,
                GROUPS: g,
                DK: dk,
                DV: dv,
                HAS_Z: gated,
                BV: plan.decode.bv,
                num_warps: plan.decode.num_warps,
            },
        )?;
        let spec_k = if plan.max_drafts > 0 {
            Some(mamba2_spec_baseline::Kernel::compile(
                device,
                mamba2_spec_baseline::Config {
                    HEADS: h,
                    GROUPS: g,
                    DK: dk,
                    DV: dv,
                    HAS_Z: gated,
                    BV: plan.spec.bv,
                    num_warps: plan.spec.num_warps,
                },
            )?)
        } else {
            None
        };
        let t = plan.max_drafts;
        let total = slots + batch * t;
        let snaps: Vec<i32> = (0..batch * t).map(|i| (slots + i) as i32).collect();
        Ok(Mamba2ConventionalState {
            shape,
            plan,
            gated,
            batch,
            n_slots: slots,
            table: SlotTable::new(batch, slots),
            weights: Mamba2Weights::upload(stream, params)?,
            state: DeviceBuffer::zeros(stream, total * h * dv * dk)?,
            slot_idx: DeviceBuffer::zeros(stream, batch)?,
            snap_idx: DeviceBuffer::from_host(stream, &if snaps.is_empty() { vec![0] } else { snaps })?,
            decode_k,
            spec_k,
            admit_k: AdmitKernel::new(device, &shape, false)?,
            no_meta: DeviceBuffer::zeros(stream, 1)?,
        })
    }

    /// The plan (tiles, drafts).
    pub fn plan(&self) -> &ConventionalPlan {
        &self.plan
    }

    /// Whether the output gate `z` is applied.
    pub fn gated(&self) -> bool {
        self.gated
    }

    /// Puts a sequence (zero state) in every padding row.
    pub fn fill(&mut self, stream: &Stream) -> Result<()> {
        for row in 0..self.batch {
            if self.table.row_slot[row] == 0 {
                self.admit(stream, row, None, Next::Decode)?;
            }
        }
        Ok(())
    }

    fn total_slots(&self) -> usize {
        self.n_slots + self.batch * self.plan.max_drafts
    }

    fn args<'a>(&'a self, io: &'a StepIo, snap: bool) -> Vec<ArgValue<'a>> {
        let w = &self.weights;
        let mut a = vec![
            buf(&io.dt),
            buf(&io.x),
            buf(&io.b),
            buf(&io.c),
            buf(&io.z),
            buf(&w.a),
            buf(&w.d),
            buf(&w.dt_bias),
            buf(&self.slot_idx),
        ];
        if snap {
            a.push(buf(&self.snap_idx));
        }
        a.extend([
            buf(&self.state),
            buf(&io.out),
            ArgValue::I32(self.batch as i32),
            ArgValue::I32(self.total_slots() as i32),
        ]);
        a
    }

    fn grid(&self, bv: usize) -> Grid {
        Grid::new(
            self.batch as u32,
            self.shape.heads as u32,
            self.shape.dv.div_ceil(bv) as u32,
        )
    }

    /// The snapshotting verification of `n ≤ T` drafts: the state read once, one snapshot
    /// written per draft (to the row's snapshot slots; accepting `a` drafts would make snapshot
    /// `a − 1` the row's state, a slot-index move).
    pub fn verify_snapshots(&self, stream: &Stream, io: &StepIo, n: usize) -> Result<()> {
        let Some(k) = &self.spec_k else {
            return Err(RuntimeError::Size("made with T = 0: no verification".into()));
        };
        if n == 0 || n > self.plan.max_drafts {
            return Err(RuntimeError::Size(format!(
                "{n} drafts, at most {}",
                self.plan.max_drafts
            )));
        }
        let mut a = self.args(io, true);
        a.push(ArgValue::I32(n as i32));
        // Snapshot slots are laid out [batch, T]; with n < T the kernel reads row r's
        // snapshots at r·n .., which are still distinct non-padding slots.
        go(k, stream, self.grid(self.plan.spec.bv), &a)
    }

    /// Loads the snapshotting kernel's specialization for `n` drafts.
    pub fn prepare_verify(&self, io: &StepIo, n: usize) -> Result<()> {
        if let Some(k) = &self.spec_k {
            let mut a = self.args(io, true);
            a.push(ArgValue::I32(n as i32));
            preload(k, &a)?;
        }
        Ok(())
    }
}

impl DecodeLayer for Mamba2ConventionalState {
    fn method(&self) -> &'static str {
        "conventional"
    }
    fn shape(&self) -> ModelShape {
        self.shape
    }
    fn batch(&self) -> usize {
        self.batch
    }
    fn admit(&mut self, stream: &Stream, row: usize, initial: Option<&[f32]>, _next: Next) -> Result<usize> {
        let slot = self.table.take(row)?;
        self.admit_k.run(
            stream,
            slot,
            initial,
            &self.state,
            &self.no_meta,
            self.total_slots(),
            false,
        )?;
        self.slot_idx.copy_from_host(stream, &self.table.row_slot)?;
        Ok(slot)
    }
    fn release(&mut self, stream: &Stream, row: usize) -> Result<Option<usize>> {
        let slot = self.table.give_back(row);
        self.slot_idx.copy_from_host(stream, &self.table.row_slot)?;
        Ok(slot)
    }
    fn slots(&self) -> &[i32] {
        &self.table.row_slot
    }
    fn step(&self, stream: &Stream, io: &StepIo) -> Result<()> {
        go(
            &self.decode_k,
            stream,
            self.grid(self.plan.decode.bv),
            &self.args(io, false),
        )
    }
    fn prepare(&self, io: &StepIo) -> Result<()> {
        preload(&self.decode_k, &self.args(io, false))
    }
    fn logical_state(&self, stream: &Stream, _params: &Mamba2Params, slot: usize) -> Result<Vec<f64>> {
        let n = self.shape.heads * self.shape.state_elems();
        Ok(self.state.to_host(stream)?[slot * n..(slot + 1) * n]
            .iter()
            .map(|&v| v as f64)
            .collect())
    }
}
