//! Dot operands copied straight from global to shared memory (`cp.async`, sm_80+).
//!
//! A tensor-core dot stages its operands in shared memory. When an operand is a `load` used by
//! nothing else, in the same block as the dot and before it, the load is emitted as
//! asynchronous copies into a shared region of its own, laid out as the dot's staging would
//! lay it out (row-major, the plan's padded pitch): the tile never occupies registers, the
//! staging stores disappear, and whatever the program does between the load and the dot
//! overlaps with the copies. The dot waits for them (`cp.async.wait_all`) before the barrier
//! that precedes its fragment loads. Masked-off vectors are zeroed with a shared store, as a
//! masked load reads 0.
//!
//! Each such operand has its own region in a second static array, so no other use of shared
//! memory can overwrite it between the copy and the dot; a barrier precedes the copies, so
//! that a dot of an earlier loop iteration has finished reading the region.

use super::regs::{Class, Reg};
use super::Emitter;
use crate::backend::assign::Kind;
use crate::backend::layout::LayoutId;
use crate::error::CompileError;
use crate::ir::{Block, Op, Value};
use crate::types::Elem;
use std::collections::HashMap;
use std::fmt::Write as _;

/// Name of the static shared-memory array of the asynchronously copied operands.
pub(super) const SMEM_ASYNC: &str = "replay_smem_async";

/// Where an asynchronously copied dot operand lives in shared memory.
#[derive(Clone, Copy, Debug)]
pub(super) struct AsyncOperand {
    /// Byte offset of its region in [`SMEM_ASYNC`].
    pub offset: usize,
    /// Row pitch in elements (the dot plan's).
    pub pitch: usize,
}

/// How many times each value is read, in `block` and the blocks nested in it.
fn count_uses(block: &Block, uses: &mut HashMap<Value, usize>) {
    for inst in &block.insts {
        for v in inst.op.operands() {
            *uses.entry(v).or_default() += 1;
        }
        for b in inst.op.blocks() {
            count_uses(b, uses);
        }
    }
}

impl Emitter<'_> {
    /// Chooses the dot operands copied asynchronously (see the module doc) and their regions;
    /// returns the bytes of [`SMEM_ASYNC`].
    pub(super) fn plan_async_operands(&mut self) -> usize {
        let mut uses = HashMap::new();
        count_uses(&self.k.body, &mut uses);
        let mut bytes = 0;
        self.plan_async_block(&self.k.body, &uses, &mut bytes);
        bytes
    }

    fn plan_async_block(&mut self, block: &Block, uses: &HashMap<Value, usize>, bytes: &mut usize) {
        let loads: HashMap<Value, usize> = (block.insts.iter().enumerate())
            .filter(|(_, i)| matches!(i.op, Op::Load { other: None, .. }))
            .map(|(n, i)| (i.results[0], n))
            .collect();
        for inst in &block.insts {
            for b in inst.op.blocks() {
                self.plan_async_block(b, uses, bytes);
            }
            let Op::Dot { a, b, precision, .. } = inst.op else {
                continue;
            };
            let Some(plan) = self.asg.mma_plan(a, b, precision) else {
                continue;
            };
            for (v, staged) in [(a, plan.a), (b, plan.b)] {
                if staged.value != v || uses.get(&v) != Some(&1) || !loads.contains_key(&v) {
                    continue;
                }
                if !self.copies_async(v, staged.elem) {
                    continue;
                }
                let rows = self.ty(v).shape[0];
                let region = rows * staged.pitch * staged.elem.bytes();
                self.async_ops.insert(
                    v,
                    AsyncOperand {
                        offset: *bytes,
                        pitch: staged.pitch,
                    },
                );
                *bytes += region.div_ceil(16) * 16;
            }
        }
    }

    /// True if `cp.async` can copy load `v`: a 2-D tile of the staged element type `elem`
    /// whose vectors (its access width) are 4, 8 or 16 bytes.
    fn copies_async(&self, v: Value, elem: Elem) -> bool {
        let ty = self.ty(v);
        if ty.rank() != 2 || ty.dtype.val() != Some(elem) {
            return false;
        }
        let (Some(def), Some(l)) = (self.asg.def(v), self.load_layout(v)) else {
            return false;
        };
        let Op::Load { ptr, mask, .. } = def.op else {
            return false;
        };
        let s = elem.bytes();
        matches!(self.access_width(l, ptr, mask, s) * s, 4 | 8 | 16)
    }

    /// The one layout load `v` is emitted in: its natural layout, or the only layout it is
    /// recomputed in.
    pub(super) fn load_layout(&self, v: Value) -> Option<LayoutId> {
        match self.asg.kind(v) {
            Kind::Real => self.asg.natural(v),
            Kind::Remat => match self.asg.emitted(v) {
                [l] => Some(*l),
                _ => None,
            },
            Kind::View => None,
        }
    }

    /// The base address of [`SMEM_ASYNC`] (emitted once, in the prologue).
    pub(super) fn async_base(&mut self) -> Reg {
        if let Some(b) = self.async_base {
            return b;
        }
        let b = self.reg(Class::B32);
        let _ = writeln!(self.prologue, "\tmov.u32 {b}, {SMEM_ASYNC};");
        self.async_base = Some(b);
        b
    }

    /// Emits load `r` (through `ptr` under `mask`, in layout `l`) as asynchronous copies into
    /// its region `op`, row-major with the dot's pitch.
    pub(super) fn load_async(
        &mut self,
        r: Value,
        l: LayoutId,
        ptr: Value,
        mask: Option<Value>,
        op: AsyncOperand,
    ) -> Result<(), CompileError> {
        let s = self.ty(r).dtype.val().map_or(8, Elem::bytes);
        let ptrs = self.get(ptr, l)?;
        let masks = mask.map(|m| self.get(m, l)).transpose()?;
        let v = self.access_width(l, ptr, mask, s);
        let layout = self.asg.layout(l).clone();
        let base = self.async_base();
        let addr = self.reg(Class::B32);
        match self.thread_coord(l, 0) {
            Some(t) => emit!(self, "mad.lo.s32 {addr}, {t}, {}, {base}", op.pitch * s),
            None => emit!(self, "mov.u32 {addr}, {base}"),
        }
        if let Some(t) = self.thread_coord(l, 1) {
            emit!(self, "mad.lo.s32 {addr}, {t}, {s}, {addr}");
        }
        // A dot of an earlier iteration may still be reading the region.
        emit!(self, "bar.sync 0");
        let bytes = v * s;
        let cache = if bytes == 16 { "cg" } else { "ca" };
        let zero = (masks.is_some()).then(|| {
            let z = self.reg(Class::B32);
            emit!(self, "mov.b32 {z}, 0");
            z
        });
        for g in (0..ptrs.len()).step_by(v) {
            let off = op.offset + (layout.reg_coord(g, 0) * op.pitch + layout.reg_coord(g, 1)) * s;
            let src = self.address(ptrs[g]);
            match (&masks, zero) {
                (Some(m), Some(z)) => {
                    let p = m[g];
                    emit!(
                        self,
                        "@{p} cp.async.{cache}.shared.global [{addr}+{off}], [{src}], {bytes}"
                    );
                    let words = vec![z.to_string(); bytes / 4].join(", ");
                    match bytes / 4 {
                        1 => emit!(self, "@!{p} st.shared.b32 [{addr}+{off}], {words}"),
                        n => emit!(self, "@!{p} st.shared.v{n}.b32 [{addr}+{off}], {{{words}}}"),
                    }
                }
                _ => emit!(self, "cp.async.{cache}.shared.global [{addr}+{off}], [{src}], {bytes}"),
            }
        }
        emit!(self, "cp.async.commit_group");
        Ok(())
    }
}
