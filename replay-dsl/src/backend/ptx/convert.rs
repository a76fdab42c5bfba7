//! Moving tiles through shared memory: layout conversions and owner-to-replica broadcasts.
//! Tiles are written at their row-major offsets, vectorised where consecutive registers hold
//! consecutive elements.

use super::regs::{Class, Reg};
use super::Emitter;
use crate::backend::assign::dtype_bytes;
use crate::backend::layout::{in_warp_plan, Layout, LayoutId};
use crate::error::CompileError;
use crate::types::{DType, Elem};

/// Bytes an element takes in shared (and global) memory.
pub(super) fn mem_bytes(dtype: DType) -> usize {
    dtype_bytes(dtype)
}

/// The `ld`/`st` type of an element in memory.
pub(super) fn mem_type(dtype: DType) -> &'static str {
    match dtype {
        DType::Ptr(_) | DType::Val(Elem::I64) => "b64",
        DType::Val(Elem::Bool | Elem::F8E4M3) => "u8",
        DType::Val(Elem::F16 | Elem::BF16) => "b16",
        DType::Val(Elem::I32 | Elem::U32) => "b32",
        DType::Val(Elem::F32) => "f32",
    }
}

/// How many consecutive registers of `l` may move as one shared-memory vector.
fn smem_vec(l: &Layout, s: usize) -> usize {
    if s == 1 {
        return 1;
    }
    let k = l
        .regs
        .iter()
        .enumerate()
        .take_while(|(i, b)| l.flat_shift(**b) == *i as u32)
        .count();
    (1usize << k).min(16 / s).min(4)
}

impl Emitter<'_> {
    /// `reg` as a memory operand register (`.pred` becomes a 0/1 `.b16`).
    pub(super) fn mem_reg(&mut self, reg: Reg) -> Reg {
        if reg.class != Class::Pred {
            return reg;
        }
        let h = self.reg(Class::B16);
        emit!(self, "selp.u16 {h}, 1, 0, {reg}");
        h
    }

    /// A register loaded from memory (a `.b16` byte) as an element of `dtype`.
    pub(super) fn reg_from_mem(&mut self, reg: Reg, dtype: DType) -> Reg {
        if dtype != DType::Val(Elem::Bool) {
            return reg;
        }
        let p = self.reg(Class::Pred);
        emit!(self, "setp.ne.u16 {p}, {reg}, 0");
        p
    }

    /// The register class an element of `dtype` is loaded into.
    pub(super) fn mem_class(dtype: DType) -> Class {
        match Class::of(dtype) {
            Class::Pred => Class::B16,
            c => c,
        }
    }

    /// Writes a tile held in layout `l` to shared memory at byte `base` + row-major offsets,
    /// in the threads where `pred` holds (all when `None`).
    pub(super) fn smem_store(&mut self, regs: &[Reg], dtype: DType, l: LayoutId, base: usize, pred: Option<Reg>) {
        let s = mem_bytes(dtype);
        let layout = self.asg.layout(l).clone();
        let addr = self.smem_addr(l, s.trailing_zeros(), base);
        let vw = smem_vec(&layout, s);
        let t = mem_type(dtype);
        let guard = pred.map(|p| format!("@{p} ")).unwrap_or_default();
        for g in (0..regs.len()).step_by(vw) {
            let off = layout.reg_flat(g) * s;
            let vals: Vec<String> = regs[g..g + vw].iter().map(|r| self.mem_reg(*r).to_string()).collect();
            if vw == 1 {
                emit!(self, "{guard}st.shared.{t} [{addr}+{off}], {}", vals[0]);
            } else {
                emit!(
                    self,
                    "{guard}st.shared.v{vw}.{t} [{addr}+{off}], {{{}}}",
                    vals.join(", ")
                );
            }
        }
    }

    /// Reads a tile in layout `l` from shared memory at byte `base` + row-major offsets.
    pub(super) fn smem_load(&mut self, dtype: DType, l: LayoutId, base: usize) -> Vec<Reg> {
        let s = mem_bytes(dtype);
        let layout = self.asg.layout(l).clone();
        let addr = self.smem_addr(l, s.trailing_zeros(), base);
        let vw = smem_vec(&layout, s);
        self.smem_load_at(dtype, &layout, addr, vw, |g| layout.reg_flat(g) * s)
    }

    /// Reads the registers of `layout` from shared memory, `vw` at a time: register `g` at
    /// `[addr + offset(g)]`.
    pub(super) fn smem_load_at(
        &mut self,
        dtype: DType,
        layout: &Layout,
        addr: Reg,
        vw: usize,
        offset: impl Fn(usize) -> usize,
    ) -> Vec<Reg> {
        let t = mem_type(dtype);
        let mut out = Vec::with_capacity(layout.num_regs());
        for g in (0..layout.num_regs()).step_by(vw) {
            let off = offset(g);
            let dst = self.regs_n(Self::mem_class(dtype), vw);
            let names: Vec<String> = dst.iter().map(|r| r.to_string()).collect();
            if vw == 1 {
                emit!(self, "ld.shared.{t} {}, [{addr}+{off}]", names[0]);
            } else {
                emit!(self, "ld.shared.v{vw}.{t} {{{}}}, [{addr}+{off}]", names.join(", "));
            }
            for d in dst {
                let v = self.reg_from_mem(d, dtype);
                out.push(v);
            }
        }
        out
    }

    /// Starts a shared-memory use of `bytes` (a range of the staging scratch, whose address
    /// [`Self::smem_base`] then gives), with a barrier if an earlier use may be reading it.
    pub(super) fn smem_begin(&mut self, bytes: usize) {
        let u = self.smem.begin(bytes);
        if u.barrier {
            emit!(self, "bar.sync 0");
        }
        let root = self.scratch_root();
        self.smem_use = Some(if u.offset == 0 {
            root
        } else {
            let b = self.reg(Class::B32);
            emit!(self, "add.s32 {b}, {root}, {}", u.offset);
            b
        });
    }

    /// Converts a tile from layout `from` to layout `to` through shared memory.
    pub(super) fn convert(
        &mut self,
        regs: &[Reg],
        dtype: DType,
        from: LayoutId,
        to: LayoutId,
    ) -> Result<Vec<Reg>, CompileError> {
        if from == to {
            return Ok(regs.to_vec());
        }
        if let Some(out) = self.convert_in_warp(regs, from, to) {
            return Ok(out);
        }
        let numel = self.asg.layout(from).numel();
        self.smem_begin(numel * mem_bytes(dtype));
        self.smem_store(regs, dtype, from, 0, None);
        emit!(self, "bar.sync 0");
        Ok(self.smem_load(dtype, to, 0))
    }

    /// Converts without shared memory when every element a thread needs in `to` is held, in
    /// `from`, by a lane of its own warp in a register known at compile time: a register
    /// selection when that lane is itself, else one `shfl.sync.idx` per register of `to`.
    fn convert_in_warp(&mut self, regs: &[Reg], from: LayoutId, to: LayoutId) -> Option<Vec<Reg>> {
        let plan = in_warp_plan(self.asg.layout(from), self.asg.layout(to))?;
        let cls = regs.first()?.class;
        if !plan.local && !matches!(cls, Class::B32 | Class::F32 | Class::B64 | Class::Pred | Class::B16) {
            return None;
        }
        if plan.local {
            return Some(plan.regs.iter().map(|(rho, _)| regs[*rho]).collect());
        }
        let base = self.gather(&plan.dynamic);
        let mut out = Vec::with_capacity(plan.regs.len());
        for (rho, lane) in &plan.regs {
            let src = match base {
                Some(b) if *lane == 0 => b.to_string(),
                Some(b) => {
                    let t = self.reg(Class::B32);
                    emit!(self, "or.b32 {t}, {b}, {lane}");
                    t.to_string()
                }
                None => lane.to_string(),
            };
            let x = regs[*rho];
            let y = match x.class {
                Class::Pred => {
                    let w = self.reg(Class::B32);
                    emit!(self, "selp.b32 {w}, 1, 0, {x}");
                    let d = self.reg(Class::B32);
                    emit!(self, "shfl.sync.idx.b32 {d}, {w}, {src}, 31, 0xffffffff");
                    let p = self.reg(Class::Pred);
                    emit!(self, "setp.ne.b32 {p}, {d}, 0");
                    p
                }
                Class::B16 => {
                    let w = self.reg(Class::B32);
                    emit!(self, "cvt.u32.u16 {w}, {x}");
                    let d = self.reg(Class::B32);
                    emit!(self, "shfl.sync.idx.b32 {d}, {w}, {src}, 31, 0xffffffff");
                    let h = self.reg(Class::B16);
                    emit!(self, "cvt.u16.u32 {h}, {d}");
                    h
                }
                _ => {
                    let t = self.reg(Class::B32);
                    emit!(self, "mov.b32 {t}, {src}");
                    self.shuffle_idx(x, t)
                }
            };
            out.push(y);
        }
        Some(out)
    }

    /// `shfl.sync.idx` of a 32- or 64-bit register from the lane in register `lane`.
    fn shuffle_idx(&mut self, x: Reg, lane: Reg) -> Reg {
        self.shuffle("idx", x, lane, 31)
    }

    /// Makes replicas hold the values computed by the owning threads of layout `l`.
    pub(super) fn broadcast_from_owners(&mut self, regs: &[Reg], dtype: DType, l: LayoutId) -> Vec<Reg> {
        let Some(owner) = self.owner(l) else {
            return regs.to_vec();
        };
        let numel = self.asg.layout(l).numel();
        self.smem_begin(numel * mem_bytes(dtype));
        self.smem_store(regs, dtype, l, 0, Some(owner));
        emit!(self, "bar.sync 0");
        self.smem_load(dtype, l, 0)
    }
}
