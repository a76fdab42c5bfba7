//! Global memory: parameters, (vectorised, masked) loads and stores, and atomics. Stores and
//! atomics are issued only by the thread owning the canonical copy of each element.

use super::convert::mem_type;
use super::elementwise::elem;
use super::regs::{Class, Reg};
use super::Emitter;
use crate::backend::layout::LayoutId;
use crate::error::{CompileError, ErrorKind};
use crate::ir::{AtomicKind, Op, Value};
use crate::types::{DType, Elem};

impl Emitter<'_> {
    /// Loads kernel parameter `i`.
    pub(super) fn param(&mut self, i: usize) -> Result<Vec<Reg>, CompileError> {
        let name = format!("{}_param_{i}", self.k.entry_name());
        let dtype = self.k.params[i].dtype;
        let d = match dtype {
            DType::Ptr(_) => {
                let (a, g) = (self.reg(Class::B64), self.reg(Class::B64));
                emit!(self, "ld.param.u64 {a}, [{name}]");
                emit!(self, "cvta.to.global.u64 {g}, {a}");
                g
            }
            DType::Val(Elem::Bool) => {
                let h = self.reg(Class::B16);
                emit!(self, "ld.param.u8 {h}, [{name}]");
                self.reg_from_mem(h, dtype)
            }
            DType::Val(e) => {
                let d = self.reg(Class::of_elem(e));
                let t = match e {
                    Elem::F8E4M3 => "u8",
                    Elem::F16 | Elem::BF16 => "b16",
                    Elem::I32 => "s32",
                    Elem::U32 => "u32",
                    Elem::I64 => "s64",
                    _ => "f32",
                };
                emit!(self, "ld.param.{t} {d}, [{name}]");
                d
            }
        };
        Ok(vec![d])
    }

    /// The vector width (elements) of an access in layout `l` through `ptr` under `mask`.
    pub(super) fn access_width(&self, l: LayoutId, ptr: Value, mask: Option<Value>, s: usize) -> usize {
        if s == 1 {
            return 1;
        }
        self.asg
            .layout(l)
            .contiguous_regs()
            .min(self.axis.access_vec(self.k, ptr, mask))
            .min(16 / s)
    }

    /// The guard of a group: its mask lane and/or ownership.
    fn guard(&mut self, mask: Option<Reg>, owner: Option<Reg>) -> String {
        match (mask, owner) {
            (None, None) => String::new(),
            (Some(p), None) | (None, Some(p)) => format!("@{p} "),
            (Some(m), Some(o)) => {
                let p = self.reg(Class::Pred);
                emit!(self, "and.pred {p}, {m}, {o}");
                format!("@{p} ")
            }
        }
    }

    /// A masked, vectorised load in layout `l`.
    pub(super) fn load(
        &mut self,
        r: Value,
        l: LayoutId,
        ptr: Value,
        mask: Option<Value>,
        other: Option<Value>,
    ) -> Result<Vec<Reg>, CompileError> {
        let dtype = self.ty(r).dtype;
        let ptrs = self.get(ptr, l)?;
        let masks = mask.map(|m| self.get(m, l)).transpose()?;
        let others = other.map(|o| self.operand(o, l)).transpose()?;
        // A computed `other` (say, another load still in flight) is selected after the load
        // rather than written into its destination first: the load would wait for it.
        let select_after = other.is_some_and(|o| !self.is_constant(o));
        let s = dtype.val().map_or(8, Elem::bytes);
        let v = self.access_width(l, ptr, mask, s);
        let t = mem_type(dtype);
        let mc = Self::mem_class(dtype);
        let mut out = Vec::with_capacity(ptrs.len());
        for g in (0..ptrs.len()).step_by(v) {
            let dst = self.regs_n(mc, v);
            let guard = match &masks {
                Some(m) => {
                    for (j, d) in dst.iter().enumerate() {
                        match &others {
                            Some(o) if !select_after => {
                                let o = self.mem_reg(o[g + j]);
                                emit!(self, "mov.{} {d}, {o}", mc.mov_type());
                            }
                            _ => emit!(
                                self,
                                "mov.{} {d}, 0",
                                if mc == Class::F32 { "b32" } else { mc.mov_type() }
                            ),
                        }
                    }
                    format!("@{} ", m[g])
                }
                None => String::new(),
            };
            let names: Vec<String> = dst.iter().map(Reg::to_string).collect();
            if v == 1 {
                emit!(self, "{guard}ld.global.{t} {}, [{}]", names[0], self.address(ptrs[g]));
            } else if s >= 4 {
                emit!(
                    self,
                    "{guard}ld.global.v{v}.{t} {{{}}}, [{}]",
                    names.join(", "),
                    self.address(ptrs[g])
                );
            } else {
                let words = self.regs_n(Class::B32, v / 2);
                for (w, pair) in words.iter().zip(dst.chunks(2)) {
                    if masks.is_some() {
                        emit!(self, "mov.b32 {w}, {{{}, {}}}", pair[0], pair[1]);
                    }
                }
                let wn: Vec<String> = words.iter().map(Reg::to_string).collect();
                if words.len() == 1 {
                    emit!(self, "{guard}ld.global.b32 {}, [{}]", wn[0], self.address(ptrs[g]));
                } else {
                    emit!(
                        self,
                        "{guard}ld.global.v{}.b32 {{{}}}, [{}]",
                        words.len(),
                        wn.join(", "),
                        self.address(ptrs[g])
                    );
                }
                for (w, pair) in words.iter().zip(dst.chunks(2)) {
                    emit!(self, "mov.b32 {{{}, {}}}, {w}", pair[0], pair[1]);
                }
            }
            for (j, d) in dst.into_iter().enumerate() {
                let d = match (&others, &masks) {
                    (Some(o), Some(m)) if select_after => {
                        let o = self.mem_reg(o[g + j]);
                        let x = self.reg(mc);
                        emit!(self, "selp.{} {x}, {d}, {o}, {}", mc.mov_type(), m[g]);
                        x
                    }
                    _ => d,
                };
                let x = self.reg_from_mem(d, dtype);
                out.push(x);
            }
        }
        Ok(out)
    }

    /// Whether `v` is a constant (possibly splat, broadcast or reshaped): no latency to wait for.
    fn is_constant(&self, v: Value) -> bool {
        match self.asg.def(v).map(|d| &d.op) {
            Some(Op::Const(_)) => true,
            Some(Op::Splat(x) | Op::Broadcast(x) | Op::ExpandDims(x, _) | Op::Reshape(x)) => self.is_constant(*x),
            _ => false,
        }
    }

    /// A masked, vectorised store, issued by the owners of each element only.
    pub(super) fn store(&mut self, ptr: Value, value: Value, mask: Option<Value>) -> Result<(), CompileError> {
        let l = self.asg.store_layout(ptr, value, mask);
        let dtype = self.ty(value).dtype;
        let ptrs = self.get(ptr, l)?;
        let vals = self.operand(value, l)?;
        let masks = mask.map(|m| self.get(m, l)).transpose()?;
        let owner = self.owner(l);
        let s = dtype.val().map_or(8, Elem::bytes);
        let v = self.access_width(l, ptr, mask, s);
        let t = mem_type(dtype);
        for g in (0..ptrs.len()).step_by(v) {
            let guard = self.guard(masks.as_ref().map(|m| m[g]), owner);
            let names: Vec<String> = vals[g..g + v].iter().map(|r| self.mem_reg(*r).to_string()).collect();
            if v == 1 {
                emit!(self, "{guard}st.global.{t} [{}], {}", self.address(ptrs[g]), names[0]);
            } else if s >= 4 {
                emit!(
                    self,
                    "{guard}st.global.v{v}.{t} [{}], {{{}}}",
                    self.address(ptrs[g]),
                    names.join(", ")
                );
            } else {
                let words = self.regs_n(Class::B32, v / 2);
                for (w, pair) in words.iter().zip(names.chunks(2)) {
                    emit!(self, "mov.b32 {w}, {{{}, {}}}", pair[0], pair[1]);
                }
                let wn: Vec<String> = words.iter().map(Reg::to_string).collect();
                if words.len() == 1 {
                    emit!(self, "{guard}st.global.b32 [{}], {}", self.address(ptrs[g]), wn[0]);
                } else {
                    emit!(
                        self,
                        "{guard}st.global.v{}.b32 [{}], {{{}}}",
                        words.len(),
                        self.address(ptrs[g]),
                        wn.join(", ")
                    );
                }
            }
        }
        Ok(())
    }

    /// An L2 prefetch of a pointer tile: one `prefetch.global.L2` per run of consecutive
    /// addresses in a thread's registers (up to a cache line, [`crate::backend::assign::PREFETCH_LINE`]),
    /// by the owners only, guarded by the run's first mask bit (the mask is uniform over a run).
    pub(super) fn prefetch(&mut self, ptr: Value, mask: Option<Value>) -> Result<(), CompileError> {
        let l = self.asg.prefetch_layout(ptr, mask);
        let ptrs = self.get(ptr, l)?;
        let masks = mask.map(|m| self.get(m, l)).transpose()?;
        let owner = self.owner(l);
        let run = self.asg.layout(l).contiguous_regs();
        for g in (0..ptrs.len()).step_by(run) {
            let guard = self.guard(masks.as_ref().map(|m| m[g]), owner);
            emit!(self, "{guard}prefetch.global.L2 [{}]", self.address(ptrs[g]));
        }
        Ok(())
    }

    /// An atomic read-modify-write per element; returns the old values (0 where masked off).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn atomic(
        &mut self,
        r: Value,
        l: LayoutId,
        kind: AtomicKind,
        ptr: Value,
        value: Value,
        cmp: Option<Value>,
        mask: Option<Value>,
    ) -> Result<Vec<Reg>, CompileError> {
        let dtype = self.ty(r).dtype;
        let e = elem(dtype);
        let op = match (kind, e) {
            (AtomicKind::Add, Elem::F32) => "add.f32",
            (AtomicKind::Add, Elem::I32) => "add.s32",
            (AtomicKind::Add, Elem::U32) => "add.u32",
            (AtomicKind::Add, Elem::I64) => "add.u64",
            (AtomicKind::Max, Elem::I32) => "max.s32",
            (AtomicKind::Max, Elem::U32) => "max.u32",
            (AtomicKind::Max, Elem::I64) => "max.s64",
            (AtomicKind::Cas, Elem::I32 | Elem::U32) => "cas.b32",
            (AtomicKind::Cas, Elem::I64) => "cas.b64",
            _ => return Err(self.err("atomic", ErrorKind::Unsupported(format!("atomic {kind:?} on {e}")))),
        };
        let ptrs = self.get(ptr, l)?;
        let vals = self.operand(value, l)?;
        let cmps = cmp.map(|c| self.operand(c, l)).transpose()?;
        let masks = mask.map(|m| self.get(m, l)).transpose()?;
        let owner = self.owner(l);
        let class = Class::of_elem(e);
        let mut out = Vec::with_capacity(ptrs.len());
        for i in 0..ptrs.len() {
            let d = self.reg(class);
            emit!(
                self,
                "mov.{} {d}, 0",
                if class == Class::F32 { "b32" } else { class.mov_type() }
            );
            let guard = self.guard(masks.as_ref().map(|m| m[i]), owner);
            match &cmps {
                Some(c) => emit!(
                    self,
                    "{guard}atom.global.{op} {d}, [{}], {}, {}",
                    self.address(ptrs[i]),
                    c[i],
                    vals[i]
                ),
                None => emit!(
                    self,
                    "{guard}atom.global.{op} {d}, [{}], {}",
                    self.address(ptrs[i]),
                    vals[i]
                ),
            }
            out.push(d);
        }
        if self.asg.is_used(r) {
            out = self.broadcast_from_owners(&out, dtype, l);
        }
        Ok(out)
    }
}
