//! What both managers share: shape, weights, slot table, the row → slot buffer and the admit
//! kernel ([`LayerCore`]), and the sealed trait through which [`super::DecodeLayer`]'s default
//! methods reach it.

use super::io::{Mamba2Weights, StepIo};
use super::launch::{buf, AdmitKernel};
use super::plan::{flat_row_grid, head_block_grid, step_grid};
use super::{DecodeLayer, Mamba2ConventionalState, Mamba2ReplayState, Next, Result};
use replay_kernels::ssm::reference::Mamba2Params;
use replay_kernels::ssm::shapes::ModelShape;
use replay_runtime::{ArgValue, DeviceBuffer, Grid, RuntimeError, Stream};

/// Which rows hold which slots, and which slots are free (host bookkeeping; the device sees
/// only `slot_idx`). Slot 0 is the padding slot.
#[derive(Clone, Debug)]
struct SlotTable {
    row_slot: Vec<i32>,
    free: Vec<usize>,
}

impl SlotTable {
    /// All `batch` rows padding, slots `1..slots` free.
    fn new(batch: usize, slots: usize) -> SlotTable {
        SlotTable {
            row_slot: vec![0; batch],
            free: (1..slots).rev().collect(),
        }
    }

    /// Gives padding row `row` a free slot.
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

    /// Makes `row` padding; returns the slot it held, now free.
    fn give_back(&mut self, row: usize) -> Option<usize> {
        let slot = std::mem::replace(&mut self.row_slot[row], 0);
        (slot != 0).then(|| {
            self.free.push(slot as usize);
            slot as usize
        })
    }
}

/// The part of a decode state manager that does not depend on how it keeps state: shape,
/// gate, batch, weights, slot table, the device's row → slot buffer and the admit kernel.
pub struct LayerCore {
    /// Model shape.
    pub(super) shape: ModelShape,
    /// Whether the output gate `z` is applied.
    pub(super) gated: bool,
    /// Rows of the batch.
    pub(super) batch: usize,
    /// Slots of the manager's state buffer (sequence slots, then any snapshot slots).
    pub(super) state_slots: usize,
    table: SlotTable,
    /// `A`, `D`, `dt_bias` on the device.
    pub(super) weights: Mamba2Weights,
    /// Row → slot `[batch]`.
    pub(super) slot_idx: DeviceBuffer<i32>,
    admit_k: AdmitKernel,
}

impl LayerCore {
    /// `batch` padding rows over `slots` sequence slots (slot 0 included) of a state buffer of
    /// `state_slots` slots; uploads the weights and compiles the admit kernel (`with_meta`:
    /// it resets counters too).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        stream: &Stream,
        shape: ModelShape,
        params: &Mamba2Params,
        batch: usize,
        slots: usize,
        state_slots: usize,
        gated: bool,
        with_meta: bool,
        lp: bool,
    ) -> Result<LayerCore> {
        Ok(LayerCore {
            shape,
            gated,
            batch,
            state_slots,
            table: SlotTable::new(batch, slots),
            weights: Mamba2Weights::upload(stream, params)?,
            slot_idx: DeviceBuffer::zeros(stream, batch)?,
            admit_k: AdmitKernel::new(stream, &shape, with_meta, lp)?,
        })
    }

    /// The slot of each row (0 = padding).
    pub(super) fn slots(&self) -> &[i32] {
        &self.table.row_slot
    }

    /// Takes a free slot for padding row `row`, copies `initial` into it in `state` (and its f16
    /// into `state_lp`, when given) and resets its counters in `meta` to flush flag `flag`.
    /// Returns the slot.
    pub(super) fn admit(
        &mut self,
        stream: &Stream,
        row: usize,
        initial: Option<&[f32]>,
        (state, state_lp): (&DeviceBuffer<f32>, Option<&DeviceBuffer<half::f16>>),
        meta: &DeviceBuffer<i32>,
        flag: bool,
    ) -> Result<usize> {
        let slot = self.table.take(row)?;
        self.admit_k
            .run(stream, slot, initial, state, state_lp, meta, self.state_slots, flag)?;
        self.slot_idx.copy_from_host(stream, &self.table.row_slot)?;
        Ok(slot)
    }

    /// Makes `row` padding and frees its slot. Returns the slot.
    pub(super) fn release(&mut self, stream: &Stream, row: usize) -> Result<Option<usize>> {
        let slot = self.table.give_back(row);
        self.slot_idx.copy_from_host(stream, &self.table.row_slot)?;
        Ok(slot)
    }

    /// The launch arguments every layer kernel starts with: `dt, x, B, C, z` of `io`, the
    /// weights `A, D, dt_bias` and the row → slot buffer.
    pub(super) fn leading_args<'a>(&'a self, io: &'a StepIo) -> Vec<ArgValue<'a>> {
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
        ]
    }

    /// [`head_block_grid`] of this layer's shape and batch.
    pub(super) fn grid(&self, hb: usize, bv: usize) -> Grid {
        head_block_grid(&self.shape, self.batch, hb, bv)
    }

    /// [`flat_row_grid`] of this layer's shape and batch.
    pub(super) fn flat_grid(&self, bv: usize) -> Grid {
        flat_row_grid(&self.shape, self.batch, bv)
    }

    /// [`step_grid`] of this layer's shape and batch.
    pub(super) fn step_grid(&self, bv: usize) -> Grid {
        step_grid(&self.shape, self.batch, bv)
    }

    /// Slot `slot` of a per-slot state buffer (`[.., heads, dv, dk]`), read back as f64.
    pub(super) fn slot_f64(&self, stream: &Stream, states: &DeviceBuffer<f32>, slot: usize) -> Result<Vec<f64>> {
        let n = self.shape.heads * self.shape.state_elems();
        Ok(states.to_host(stream)?[slot * n..(slot + 1) * n]
            .iter()
            .map(|&v| v as f64)
            .collect())
    }
}

/// Access to a manager's [`LayerCore`] (sealed: the module is private), for the default
/// methods of [`DecodeLayer`].
pub trait HasCore {
    /// The shared part.
    fn core(&self) -> &LayerCore;
    /// The shared part, mutably.
    fn core_mut(&mut self) -> &mut LayerCore;
}

/// `HasCore` for managers with a `core` field.
macro_rules! has_core {
    ($($manager:ty),*) => {$(
        impl HasCore for $manager {
            fn core(&self) -> &LayerCore {
                &self.core
            }
            fn core_mut(&mut self) -> &mut LayerCore {
                &mut self.core
            }
        }
    )*};
}
has_core!(Mamba2ReplayState, Mamba2ConventionalState);

/// Puts a sequence (zero initial state) in every padding row of `layer`, ready for `next`.
pub(super) fn fill<L: DecodeLayer>(layer: &mut L, stream: &Stream, next: Next) -> Result<()> {
    for row in 0..layer.batch() {
        if layer.slots()[row] == 0 {
            layer.admit(stream, row, None, next)?;
        }
    }
    Ok(())
}
