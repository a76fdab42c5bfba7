//! The conventional manager (the baseline): one state per slot, read and written every step.

use super::common::{fill, LayerCore};
use super::io::StepIo;
use super::launch::{buf, compile_layer_kernel, go, preload};
use super::plan::{ConventionalPlan, Next};
use super::{DecodeLayer, Result};
use replay_kernels::ssm::kernels::decode::mamba2_decode;
use replay_kernels::ssm::kernels::spec_baseline::mamba2_spec_baseline;
use replay_kernels::ssm::reference::Mamba2Params;
use replay_kernels::ssm::shapes::ModelShape;
use replay_runtime::{ArgValue, CompiledKernel, DeviceBuffer, KernelExt, RuntimeError, Stream};

/// The conventional decode state of one Mamba-2 layer (the baseline): a state per slot, read
/// and written by every step (`mamba2_decode`); speculative verification writes one snapshot per
/// draft into reserved slots (`mamba2_spec_baseline`), as serving engines do today.
pub struct Mamba2ConventionalState {
    pub(super) core: LayerCore,
    plan: ConventionalPlan,
    /// States `[slots + batch·T, heads, dv, dk]`: the sequence slots, then the snapshot slots.
    pub state: DeviceBuffer<f32>,
    /// Snapshot slot of each row's draft `[batch, T]` (rows `r` own slots `slots + r·T ..`).
    pub snap_idx: DeviceBuffer<i32>,
    decode_k: CompiledKernel<mamba2_decode::Kernel>,
    spec_k: Option<CompiledKernel<mamba2_spec_baseline::Kernel>>,
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
        let decode_k = compile_layer_kernel!(mamba2_decode, device, shape, plan.decode, HAS_Z: gated)?;
        let spec_k = (plan.max_drafts > 0)
            .then(|| compile_layer_kernel!(mamba2_spec_baseline, device, shape, plan.spec, HAS_Z: gated))
            .transpose()?;
        let t = plan.max_drafts;
        let total = slots + batch * t;
        let snaps: Vec<i32> = (0..batch * t).map(|i| (slots + i) as i32).collect();
        Ok(Mamba2ConventionalState {
            core: LayerCore::new(stream, shape, params, batch, slots, total, gated, false, false)?,
            plan,
            state: DeviceBuffer::zeros(stream, total * shape.heads * shape.dv * shape.dk)?,
            snap_idx: DeviceBuffer::from_host(stream, &if snaps.is_empty() { vec![0] } else { snaps })?,
            decode_k,
            spec_k,
            no_meta: DeviceBuffer::zeros(stream, 1)?,
        })
    }

    /// The plan (tiles, drafts).
    pub fn plan(&self) -> &ConventionalPlan {
        &self.plan
    }

    /// Whether the output gate `z` is applied.
    pub fn gated(&self) -> bool {
        self.core.gated
    }

    /// Puts a sequence (zero state) in every padding row.
    pub fn fill(&mut self, stream: &Stream) -> Result<()> {
        fill(self, stream, Next::Decode)
    }

    /// The arguments of the decode kernel, or with `snap` those of the snapshotting kernel for
    /// `n` drafts.
    fn args<'a>(&'a self, io: &'a StepIo, snap: Option<usize>) -> Vec<ArgValue<'a>> {
        let mut a = self.core.leading_args(io);
        if snap.is_some() {
            a.push(buf(&self.snap_idx));
        }
        a.extend([
            buf(&self.state),
            buf(&io.out),
            ArgValue::I32(self.core.batch as i32),
            ArgValue::I32(self.core.state_slots as i32),
        ]);
        a.extend(snap.map(|n| ArgValue::I32(n as i32)));
        a
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
        // Snapshot slots are laid out [batch, T]; with n < T the kernel reads row r's
        // snapshots at r·n .., which are still distinct non-padding slots.
        go(
            k,
            stream,
            self.core.flat_grid(self.plan.spec.bv),
            &self.args(io, Some(n)),
        )
    }

    /// Loads the snapshotting kernel's specialization for `n` drafts.
    pub fn prepare_verify(&self, io: &StepIo, n: usize) -> Result<()> {
        if let Some(k) = &self.spec_k {
            preload(k, &self.args(io, Some(n)))?;
        }
        Ok(())
    }
}

impl DecodeLayer for Mamba2ConventionalState {
    fn method(&self) -> &'static str {
        "conventional"
    }
    fn admit(&mut self, stream: &Stream, row: usize, initial: Option<&[f32]>, _next: Next) -> Result<usize> {
        self.core
            .admit(stream, row, initial, (&self.state, None), &self.no_meta, false)
    }
    fn step(&self, stream: &Stream, io: &StepIo) -> Result<()> {
        go(
            &self.decode_k,
            stream,
            self.core.flat_grid(self.plan.decode.bv),
            &self.args(io, None),
        )
    }
    fn prepare(&self, io: &StepIo) -> Result<()> {
        preload(&self.decode_k, &self.args(io, None))
    }
    fn logical_state(&self, stream: &Stream, _params: &Mamba2Params, slot: usize) -> Result<Vec<f64>> {
        self.core.slot_f64(stream, &self.state, slot)
    }
}
