//! Decode state managers for one Mamba-2 layer: [`Mamba2ReplayState`] (ReplaySSM: checkpoints,
//! record rings, device-side counters) and [`Mamba2ConventionalState`] (the baseline: one state
//! read and written per step). Both implement [`DecodeLayer`], so the benchmark and the demo
//! swap them.
//!
//! Everything a decode step needs lives in device memory: the per-row slot indices, the
//! counters (`h`, ring start, flush flag), the accepted counts. A replay decode step is one
//! launch; it reads the current counter buffer and writes the other one, so its arguments
//! alternate between two fixed sets, and an even number of steps captures into a CUDA graph
//! once ([`DecodeLayer::capture_steps`]) and replays with no host synchronisation (see
//! [`Mamba2ReplayState`] on the counter parity). Continuous
//! batching happens between steps: [`DecodeLayer::admit`] puts a sequence in a row (a device
//! copy of its initial state into a free slot and a reset of the slot's counters, by
//! [`crate::ssm::admit::mamba2_admit`]), [`DecodeLayer::release`] turns the row into padding.
//!
//! Modules: `plan` (tiles and plans), `io` (weights and step buffers), `launch` (kernel
//! compilation and launch helpers, the admit kernel), `common` (what both managers share: slot
//! table, weights, row → slot buffer), `replay` and `conventional` (the two managers).

mod common;
mod conventional;
mod io;
mod launch;
mod plan;
mod replay;

pub use conventional::Mamba2ConventionalState;
pub use io::{Mamba2Weights, StepIo};
pub use plan::{
    flat_row_grid, head_block_grid, step_grid, ConventionalPlan, Next, ReplayPlan, Tiles, DEFAULT_FLUSH_COLUMNS,
    DEFAULT_FLUSH_ROWS, HEAD_BLOCK_PROGRAMS,
};
pub use replay::Mamba2ReplayState;

use common::HasCore;
use replay_kernels::ssm::reference::Mamba2Params;
use replay_kernels::ssm::shapes::ModelShape;
use replay_runtime::{Graph, RuntimeError, Stream};

type Result<T> = std::result::Result<T, RuntimeError>;

/// What the benchmark and the demo need from a decode state manager of one layer.
pub trait DecodeLayer: HasCore {
    /// `"replay"` or `"conventional"`.
    fn method(&self) -> &'static str;
    /// Model shape.
    fn shape(&self) -> ModelShape {
        self.core().shape
    }
    /// Rows of the batch.
    fn batch(&self) -> usize {
        self.core().batch
    }
    /// Puts a new sequence in padding row `row`: takes a free slot, copies `initial`
    /// (`[heads, dv, dk]` f32; zeros when `None`) into it on the device and resets its
    /// counters for a `next` launch. Returns the slot.
    fn admit(&mut self, stream: &Stream, row: usize, initial: Option<&[f32]>, next: Next) -> Result<usize>;
    /// Ends the sequence in `row`: the row becomes padding, its slot free. Returns the slot.
    fn release(&mut self, stream: &Stream, row: usize) -> Result<Option<usize>> {
        self.core_mut().release(stream, row)
    }
    /// The slot of each row (0 = padding).
    fn slots(&self) -> &[i32] {
        self.core().slots()
    }
    /// One decode step for the whole batch (device work only, nothing waits).
    fn step(&self, stream: &Stream, io: &StepIo) -> Result<()>;
    /// Loads every kernel specialization `step` uses (before a capture).
    fn prepare(&self, io: &StepIo) -> Result<()>;
    /// `steps` decode steps captured as one CUDA graph (replay it with `Graph::launch`). The
    /// replay state needs an even `steps` (its counters ping-pong between two buffers).
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
