//! Shared buffers ([`Op::CopyAsync`], [`Op::WaitAsync`], [`Op::SharedRead`]). Every buffer (with
//! the buffers that overlay it) has its own region at the start of the shared array (the staging scratch of conversions,
//! reductions and dots follows them); its stages lie one after the other, each a row-major
//! tile whose rows are padded to the pitch with the fewest shared-memory wavefronts over the
//! buffer's copies and reads (the bank model of [`crate::backend::mma::wavefronts`]).
//!
//! A copy is one `cp.async` per vector of a coalesced load's layout (16 bytes: `.cg`, 4 or 8:
//! `.ca`; narrower vectors load and store at once), masked-off vectors zero-filled by a source
//! size of 0, then `cp.async.commit_group`; a barrier first makes sure that no thread still
//! reads what it overwrites. A wait is `cp.async.wait_group n` and a barrier; a read is one
//! `ld.shared` per vector of the layout its users want, or none where an mma dot loads its
//! fragments from the buffer itself ([`crate::backend::assign::Assignment::is_fused`]; the
//! fragment loads then weigh on the buffer's pitch too).

use super::convert::{mem_bytes, mem_type};
use super::mma::stage_vector;
use super::regs::{Class, Reg};
use super::Emitter;
use crate::backend::assign::Assignment;
use crate::backend::layout::{Layout, LayoutId};
use crate::backend::mma::{a_fragment_cells, b_fragment_cells, n_position_bits, paired_n_tiles, wavefronts};
use crate::error::CompileError;
use crate::ir::{Block, Kernel, Op, Value};
use crate::types::DType;

/// Where one shared buffer lies in the shared array.
#[derive(Clone, Debug)]
pub(super) struct BufferPlan {
    /// Byte offset of stage 0.
    offset: usize,
    /// Bytes from one stage to the next (a multiple of 16).
    stage_bytes: usize,
    /// Bytes per unit step of each coordinate.
    strides: Vec<usize>,
}

/// Places every buffer of `kernel`; returns the plans and the bytes they take together. A
/// buffer that overlays another starts where that one does; their region is as large as the
/// larger of them.
pub(super) fn plan_buffers(kernel: &Kernel, asg: &mut Assignment<'_>) -> (Vec<BufferPlan>, usize) {
    let mut uses: Vec<Vec<Access>> = vec![Vec::new(); kernel.shared.len()];
    collect_uses(kernel, &kernel.body, asg, &mut uses);
    let mut plans: Vec<BufferPlan> = kernel
        .shared
        .iter()
        .zip(&uses)
        .map(|(buffer, uses)| {
            let s = mem_bytes(buffer.dtype);
            let shape = &buffer.shape;
            let cols = *shape.last().expect("a buffer has a shape");
            let rows: usize = shape[..shape.len() - 1].iter().product();
            let pitch = if rows > 1 { row_pitch(uses, s, cols) } else { cols };
            let mut strides = vec![0; shape.len()];
            strides[shape.len() - 1] = s;
            let mut step = pitch * s;
            for d in (0..shape.len() - 1).rev() {
                strides[d] = step;
                step *= shape[d];
            }
            BufferPlan {
                offset: 0,
                stage_bytes: (rows * pitch * s).div_ceil(16) * 16,
                strides,
            }
        })
        .collect();
    // Each region's bytes (the largest of its buffers), then the regions one after the other.
    let mut region_bytes = vec![0; plans.len()];
    for (b, buffer) in kernel.shared.iter().enumerate() {
        let r = buffer.region(b);
        region_bytes[r] = region_bytes[r].max(plans[b].stage_bytes * buffer.stages);
    }
    let mut region_offset = vec![0; plans.len()];
    let mut offset = 0;
    for (r, bytes) in region_bytes.iter().enumerate() {
        region_offset[r] = offset;
        offset += bytes;
    }
    for (b, buffer) in kernel.shared.iter().enumerate() {
        plans[b].offset = region_offset[buffer.region(b)];
    }
    (plans, offset)
}

/// One warp-wide access of a buffer's stage: each lane's `(row, column)` (the leading
/// dimensions flattened into the row) and the bytes each lane touches.
type Access = (Vec<(usize, usize)>, usize);

/// The lanes' `(row, column)` of a warp's access to a tile held in `l` (warp bits left out).
fn layout_access(l: &Layout, width: usize) -> Access {
    let last = l.shape.len() - 1;
    let lanes = (0..32)
        .map(|lane| {
            let row = (0..last).fold(0, |r, d| r * l.shape[d] + l.lane_coord(lane, d));
            (row, l.lane_coord(lane, last))
        })
        .collect();
    (lanes, width)
}

/// The accesses of each buffer: its copies and reads in their layouts, and the fragment loads
/// of the mma dots that read it directly ([`Assignment::is_fused`]).
fn collect_uses(kernel: &Kernel, block: &Block, asg: &mut Assignment<'_>, uses: &mut [Vec<Access>]) {
    for inst in &block.insts {
        match &inst.op {
            Op::CopyAsync { buffer, ptr, mask, .. } => {
                let l = asg.copy_layout(*ptr, *mask);
                let s = mem_bytes(kernel.shared[*buffer].dtype);
                let layout = asg.layout(l).clone();
                uses[*buffer].push(layout_access(&layout, s * layout.contiguous_regs().min(16 / s)));
            }
            Op::SharedRead { buffer, .. } if !asg.is_fused(inst.results[0]) => {
                if let Some(l) = asg.natural(inst.results[0]) {
                    let s = mem_bytes(kernel.shared[*buffer].dtype);
                    let layout = asg.layout(l).clone();
                    uses[*buffer].push(layout_access(&layout, s * stage_vector(&layout, s)));
                }
            }
            Op::Dot { a, b, precision, .. } => {
                if let Some(p) = asg.mma_plan(*a, *b, *precision) {
                    let positions = n_position_bits(&p.acc_layout(kernel.num_warps), p.interleaved());
                    // A buffer's rows are 16-byte aligned: A's two elements in one load where K
                    // is permuted.
                    let permuted = p.interleaved();
                    if let Some((buffer, _)) = p.a.buffer {
                        let per_load = 1 + usize::from(permuted);
                        uses[buffer].push((a_fragment_cells(permuted), per_load * p.a.elem.bytes()));
                    }
                    if let Some((buffer, _)) = p.b.buffer {
                        let per_load = 1 + usize::from(paired_n_tiles(positions));
                        uses[buffer].push((b_fragment_cells(positions, permuted), per_load * p.b.elem.bytes()));
                    }
                }
            }
            _ => {}
        }
        for b in inst.op.blocks() {
            collect_uses(kernel, b, asg, uses);
        }
    }
}

/// The row pitch (elements) of a `[rows, cols]` tile of `s`-byte elements accessed by
/// `accesses`: the fewest wavefronts, padding rows by up to 128 bytes in steps that keep
/// 16-byte rows aligned; the unpadded pitch on ties.
fn row_pitch(accesses: &[Access], s: usize, cols: usize) -> usize {
    let row_bytes = cols * s;
    if !row_bytes.is_multiple_of(16) {
        return cols;
    }
    let cost = |pitch: usize| -> usize {
        accesses
            .iter()
            .map(|(lanes, width)| {
                let addrs: Vec<usize> = lanes.iter().map(|&(row, col)| (row * pitch + col) * s).collect();
                wavefronts(&addrs, *width)
            })
            .sum()
    };
    let step = 16 / s;
    let mut best = (cost(cols), cols);
    for pitch in (cols + step..=cols + 128 / s).step_by(step) {
        let c = cost(pitch);
        if c < best.0 {
            best = (c, pitch);
        }
    }
    best.1
}

/// The byte offset of register `r` of `layout` within a stage whose coordinates step by
/// `strides` bytes.
fn reg_offset(strides: &[usize], layout: &Layout, r: usize) -> usize {
    strides
        .iter()
        .enumerate()
        .map(|(d, s)| layout.reg_coord(r, d) * s)
        .sum()
}

impl Emitter<'_> {
    /// The address of this thread's part (in layout `l`) of stage `stage` of `buffer`.
    fn buffer_addr(&mut self, buffer: usize, stage: Value, l: LayoutId) -> Result<Reg, CompileError> {
        let a = self.buffer_stage_addr(buffer, stage)?;
        for (d, stride) in self.buffers[buffer].strides.clone().iter().enumerate() {
            if let Some(t) = self.thread_coord(l, d) {
                emit!(self, "mad.lo.s32 {a}, {t}, {stride}, {a}");
            }
        }
        Ok(a)
    }

    /// The address of stage `stage` of `buffer` (its first element).
    pub(super) fn buffer_stage_addr(&mut self, buffer: usize, stage: Value) -> Result<Reg, CompileError> {
        let plan = self.buffers[buffer].clone();
        let base = self.shared_array();
        let st = self.get(stage, self.asg.scalar())?[0];
        let a = self.reg(Class::B32);
        emit!(self, "mad.lo.s32 {a}, {st}, {}, {base}", plan.stage_bytes);
        if plan.offset > 0 {
            emit!(self, "add.s32 {a}, {a}, {}", plan.offset);
        }
        Ok(a)
    }

    /// The row pitch of a 2-D `buffer` in elements.
    pub(super) fn buffer_pitch(&self, buffer: usize) -> usize {
        let strides = &self.buffers[buffer].strides;
        strides[0] / mem_bytes(self.k.shared[buffer].dtype)
    }

    /// Starts copying the memory behind `ptr` into stage `stage` of `buffer` (one copy group).
    pub(super) fn copy_async(
        &mut self,
        buffer: usize,
        stage: Value,
        ptr: Value,
        mask: Option<Value>,
    ) -> Result<(), CompileError> {
        let l = self.asg.copy_layout(ptr, mask);
        let ptrs = self.get(ptr, l)?;
        let masks = mask.map(|m| self.get(m, l)).transpose()?;
        let owner = self.owner(l);
        let dtype = self.k.shared[buffer].dtype;
        let s = mem_bytes(dtype);
        let v = self.access_width(l, ptr, mask, s);
        let layout = self.asg.layout(l).clone();
        // No thread may still be reading what this copy overwrites: a barrier, unless the code
        // since the last one is straight-line and touches no shared memory but with copies
        // (consecutive copies share one barrier).
        if !self.no_shared_access_since_barrier() {
            emit!(self, "bar.sync 0");
        }
        let addr = self.buffer_addr(buffer, stage, l)?;
        let guard = owner.map(|p| format!("@{p} ")).unwrap_or_default();
        let bytes = v * s;
        for g in (0..ptrs.len()).step_by(v) {
            let off = reg_offset(&self.buffers[buffer].strides, &layout, g);
            let src = self.address(ptrs[g]);
            if bytes >= 4 {
                let kind = if bytes == 16 { "cg" } else { "ca" };
                match &masks {
                    Some(m) => {
                        let n = self.reg(Class::B32);
                        emit!(self, "selp.u32 {n}, {bytes}, 0, {}", m[g]);
                        emit!(
                            self,
                            "{guard}cp.async.{kind}.shared.global [{addr}+{off}], [{src}], {bytes}, {n}"
                        );
                    }
                    None => emit!(
                        self,
                        "{guard}cp.async.{kind}.shared.global [{addr}+{off}], [{src}], {bytes}"
                    ),
                }
            } else {
                self.copy_now(dtype, (addr, off), &src, masks.as_ref().map(|m| m[g]), &guard);
            }
        }
        emit!(self, "cp.async.commit_group");
        Ok(())
    }

    /// Whether the body since its last `bar.sync` is straight-line (no label: no other path
    /// joins it) and touches shared memory only with `cp.async` copies, so that every thread
    /// has finished its earlier shared accesses when it reaches the end of the body.
    fn no_shared_access_since_barrier(&self) -> bool {
        let Some(at) = self.body.rfind("\tbar.sync 0;\n") else {
            return false;
        };
        self.body[at..].lines().skip(1).all(|line| {
            let ins = line.trim_start();
            // Past a guard (`@%p cp.async…`).
            let ins = match ins.strip_prefix('@') {
                Some(guarded) => guarded.split_once(' ').map_or(guarded, |(_, rest)| rest),
                None => ins,
            };
            !ins.ends_with(':') && (ins.starts_with("cp.async") || !ins.contains(".shared"))
        })
    }

    /// One element copied by a load and a store (too narrow for `cp.async`); 0 where masked.
    fn copy_now(&mut self, dtype: DType, (addr, off): (Reg, usize), src: &str, mask: Option<Reg>, guard: &str) {
        let t = mem_type(dtype);
        let d = self.reg(Self::mem_class(dtype));
        if let Some(m) = mask {
            emit!(self, "mov.{} {d}, 0", d.class.mov_type());
            emit!(self, "@{m} ld.global.{t} {d}, [{src}]");
        } else {
            emit!(self, "{guard}ld.global.{t} {d}, [{src}]");
        }
        emit!(self, "{guard}st.shared.{t} [{addr}+{off}], {d}");
    }

    /// Waits for all but the newest `pending` copy groups; their data is then visible to all.
    pub(super) fn wait_async(&mut self, pending: usize) {
        emit!(self, "cp.async.wait_group {pending}");
        emit!(self, "bar.sync 0");
    }

    /// Stage `stage` of `buffer` read in layout `l`.
    pub(super) fn shared_read(
        &mut self,
        r: Value,
        l: LayoutId,
        buffer: usize,
        stage: Value,
    ) -> Result<Vec<Reg>, CompileError> {
        let dtype = self.ty(r).dtype;
        let s = mem_bytes(dtype);
        let layout = self.asg.layout(l).clone();
        let mut vw = stage_vector(&layout, s);
        let row = self.buffers[buffer].strides.iter().rev().nth(1).copied().unwrap_or(0);
        while vw > 1 && !row.is_multiple_of(vw * s) {
            vw /= 2;
        }
        let addr = self.buffer_addr(buffer, stage, l)?;
        let strides = self.buffers[buffer].strides.clone();
        Ok(self.smem_load_at(dtype, &layout, addr, vw, |g| reg_offset(&strides, &layout, g)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::mma::register_operands;

    #[test]
    fn rows_read_whole_stay_unpadded() {
        let l = Layout::default_for(&[16, 128], 4, 4, 16);
        assert_eq!(row_pitch(&[layout_access(&l, 16)], 4, 128), 128);
    }

    #[test]
    fn mma_fragment_reads_get_a_conflict_free_pitch() {
        // The A fragments of a [32, 128] × [128, 8] dot read from registers: 16-byte reads of
        // rows g = lane / 4, which share banks at a 512-byte pitch.
        let (a, _) = register_operands(32, 8, 128, 4, 0).expect("a register plan");
        let width = 4 * stage_vector(&a, 4);
        let addrs = |pitch: usize| -> Vec<usize> {
            (0..32)
                .map(|lane| (a.lane_coord(lane, 0) * pitch + a.lane_coord(lane, 1)) * 4)
                .collect()
        };
        let pitch = row_pitch(&[layout_access(&a, width)], 4, 128);
        assert!(pitch > 128 && (pitch * 4).is_multiple_of(16), "pitch {pitch}");
        assert!(wavefronts(&addrs(pitch), width) < wavefronts(&addrs(128), width));
    }
}
