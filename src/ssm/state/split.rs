//! A split verification's second stream, buffers and launches (see
//! [`super::ReplayPlan::verify_ckpt`]).

use super::launch::{buf, compile_layer_kernel, go, preload};
use super::plan::{head_block_grid, Tiles};
use super::Result;
use half::{bf16, f16};
use replay_kernels::ssm::kernels::verify_ckpt::{mamba2_verify_ckpt, mamba2_verify_combine};
use replay_kernels::ssm::shapes::ModelShape;
use replay_runtime::{ArgValue, CompiledKernel, DeviceBuffer, Event, Grid, KernelExt, Stream};

/// Outputs per program of the combine.
const COMBINE_BLOCK: usize = 1024;

/// The records' launch's outputs: their part of the outputs `[batch, T, heads, dv]` and the
/// checkpoint's decays `[batch, T, heads]` (one element each, unused, without a split).
pub(super) struct RecordsPart {
    pub part: DeviceBuffer<f32>,
    pub gamma: DeviceBuffer<f32>,
}

impl RecordsPart {
    /// Buffers for `batch` rows of up to `t` drafts, or single elements without a split.
    pub(super) fn new(stream: &Stream, shape: &ModelShape, batch: usize, t: usize, split: bool) -> Result<Self> {
        let (part, gamma) = match split {
            true => (batch * t * shape.heads * shape.dv, batch * t * shape.heads),
            false => (1, 1),
        };
        Ok(RecordsPart {
            part: DeviceBuffer::zeros(stream, part)?,
            gamma: DeviceBuffer::zeros(stream, gamma)?,
        })
    }
}

/// What a split verification runs besides the records' launch: `mamba2_verify_ckpt` on a
/// stream of its own (forked from the caller's stream before the records' launch and joined
/// after it, so that the two run concurrently, in a CUDA graph too), then
/// `mamba2_verify_combine` on the caller's stream.
pub(super) struct SplitVerify {
    tiles: Tiles,
    shape: ModelShape,
    batch: usize,
    ckpt_k: CompiledKernel<mamba2_verify_ckpt::Kernel>,
    combine_k: CompiledKernel<mamba2_verify_combine::Kernel>,
    side: Stream,
    fork: Event,
    join: Event,
    /// `S_ckpt Q` `[batch, T, heads, dv]`.
    y_ckpt: DeviceBuffer<f32>,
}

/// The buffers a split verification's launches read besides the records' part.
pub(super) struct SplitArgs<'a> {
    pub queries: &'a DeviceBuffer<bf16>,
    pub z: &'a DeviceBuffer<bf16>,
    pub out: &'a DeviceBuffer<bf16>,
    pub slot_idx: &'a DeviceBuffer<i32>,
    pub ckpt: &'a DeviceBuffer<f32>,
    pub ckpt_lp: &'a DeviceBuffer<f16>,
    pub records: &'a RecordsPart,
    pub slots: usize,
    pub drafts: usize,
}

impl SplitVerify {
    /// Compiles the two kernels for `shape` (`t` drafts at most, `lp`: the f16 checkpoint) and
    /// allocates the stream, events and buffer of `batch` rows.
    pub(super) fn new(
        stream: &Stream,
        shape: ModelShape,
        tiles: Tiles,
        (batch, t): (usize, usize),
        (gated, lp): (bool, bool),
    ) -> Result<SplitVerify> {
        let device = stream.device();
        let ckpt_k = compile_layer_kernel!(mamba2_verify_ckpt, device, shape, tiles, T: t, HB: tiles.hb, PREFETCH: tiles.prefetch, ASYNC: tiles.async_copy, LP: lp)?;
        let combine_k = mamba2_verify_combine::Kernel::compile(
            device,
            mamba2_verify_combine::Config {
                HEADS: shape.heads,
                DV: shape.dv,
                HAS_Z: gated,
                BLOCK: COMBINE_BLOCK,
                num_warps: 4,
                min_blocks: 1,
            },
        )?;
        Ok(SplitVerify {
            tiles,
            shape,
            batch,
            ckpt_k,
            combine_k,
            side: device.new_stream()?,
            fork: device.new_event()?,
            join: device.new_event()?,
            y_ckpt: DeviceBuffer::zeros(stream, batch * t * shape.heads * shape.dv)?,
        })
    }

    fn ckpt_args<'a>(&'a self, a: &SplitArgs<'a>) -> Vec<ArgValue<'a>> {
        vec![
            buf(a.queries),
            buf(a.slot_idx),
            buf(a.ckpt),
            buf(a.ckpt_lp),
            buf(&self.y_ckpt),
            ArgValue::I32(self.batch as i32),
            ArgValue::I32(a.slots as i32),
            ArgValue::I32(a.drafts as i32),
        ]
    }

    fn combine_args<'a>(&'a self, a: &SplitArgs<'a>) -> Vec<ArgValue<'a>> {
        vec![
            buf(a.z),
            buf(a.slot_idx),
            buf(&self.y_ckpt),
            buf(&a.records.part),
            buf(&a.records.gamma),
            buf(a.out),
            ArgValue::I32(self.batch as i32),
            ArgValue::I32(a.drafts as i32),
        ]
    }

    /// Runs `records` (the records' launch) on `stream` while the checkpoint's launch runs on
    /// the side stream, then the combine on `stream` once both are done.
    pub(super) fn run(&self, stream: &Stream, a: &SplitArgs<'_>, records: impl FnOnce() -> Result<()>) -> Result<()> {
        self.fork.record(stream)?;
        self.side.wait(&self.fork)?;
        records()?;
        let grid = head_block_grid(&self.shape, self.batch, self.tiles.hb, self.tiles.bv);
        go(&self.ckpt_k, &self.side, grid, &self.ckpt_args(a))?;
        self.join.record(&self.side)?;
        stream.wait(&self.join)?;
        let per_row = a.drafts * self.shape.heads * self.shape.dv;
        let grid = Grid::new(per_row.div_ceil(COMBINE_BLOCK) as u32, self.batch as u32, 1);
        go(&self.combine_k, stream, grid, &self.combine_args(a))
    }

    /// Loads the specializations `run` uses (before a capture).
    pub(super) fn preload(&self, a: &SplitArgs<'_>) -> Result<()> {
        preload(&self.ckpt_k, &self.ckpt_args(a))?;
        preload(&self.combine_k, &self.combine_args(a))
    }
}
