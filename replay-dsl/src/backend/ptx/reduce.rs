//! Reductions along one axis: registers combine in the thread, lanes with `shfl.sync.bfly`,
//! warps through shared memory. The result's layout is the input's with the axis' bits removed.

use super::elementwise::{elem, int_type};
use super::regs::{f32_imm, Class, Reg};
use super::Emitter;
use crate::backend::layout::LANE_BITS;
use crate::error::CompileError;
use crate::ir::{BinaryOp, Op, ReduceKind, Value};
use crate::types::{DType, Elem};

/// The combining instruction of `kind` on accumulators of `e` (floats accumulate in f32).
pub(super) fn combine_inst(kind: ReduceKind, e: Elem) -> String {
    if e.is_float() {
        return match kind {
            ReduceKind::Sum => "add.rn.f32",
            ReduceKind::Max => "max.NaN.f32",
            ReduceKind::Min => "min.NaN.f32",
        }
        .to_string();
    }
    let op = match kind {
        ReduceKind::Sum => "add",
        ReduceKind::Max => "max",
        ReduceKind::Min => "min",
    };
    format!("{op}.{}", int_type(e))
}

/// The accumulator element type of `e` (f32 for every float type).
pub(super) fn acc_elem(e: Elem) -> Elem {
    if e.is_float() {
        Elem::F32
    } else {
        e
    }
}

impl Emitter<'_> {
    /// `d = inst(a, b)` on a fresh register of `a`'s class.
    pub(super) fn combine(&mut self, inst: &str, a: Reg, b: Reg) -> Reg {
        let d = self.reg(a.class);
        emit!(self, "{inst} {d}, {a}, {b}");
        d
    }

    /// `shfl.sync.{mode}` of a 32- or 64-bit register (`b`: the lane operand, an immediate or
    /// a register).
    pub(super) fn shuffle(&mut self, mode: &str, x: Reg, b: impl std::fmt::Display, c: u32) -> Reg {
        let d = self.reg(x.class);
        if x.class == Class::B64 {
            let (lo, hi, lo2, hi2) = (
                self.reg(Class::B32),
                self.reg(Class::B32),
                self.reg(Class::B32),
                self.reg(Class::B32),
            );
            emit!(self, "mov.b64 {{{lo}, {hi}}}, {x}");
            emit!(self, "shfl.sync.{mode}.b32 {lo2}, {lo}, {b}, {c}, 0xffffffff");
            emit!(self, "shfl.sync.{mode}.b32 {hi2}, {hi}, {b}, {c}, 0xffffffff");
            emit!(self, "mov.b64 {d}, {{{lo2}, {hi2}}}");
        } else {
            emit!(self, "shfl.sync.{mode}.b32 {d}, {x}, {b}, {c}, 0xffffffff");
        }
        d
    }

    /// Combines `regs` pairwise (a balanced tree).
    fn tree(&mut self, inst: &str, mut regs: Vec<Reg>) -> Reg {
        while regs.len() > 1 {
            let mut next = Vec::with_capacity(regs.len().div_ceil(2));
            for pair in regs.chunks(2) {
                next.push(if pair.len() == 2 {
                    self.combine(inst, pair[0], pair[1])
                } else {
                    pair[0]
                });
            }
            regs = next;
        }
        regs[0]
    }

    /// The reduction of `value` along `axis`, in the result's natural layout.
    pub(super) fn reduce(
        &mut self,
        r: Value,
        value: Value,
        axis: usize,
        kind: ReduceKind,
    ) -> Result<Vec<Reg>, CompileError> {
        let lin = self.asg.reduce_input(r);
        let lout = self.asg.natural(r).expect("reduce has a layout");
        let e = elem(self.ty(value).dtype);
        let acc = acc_elem(e);
        let inst = combine_inst(kind, e);
        let input = self.get(value, lin)?;
        let input: Vec<Reg> = input
            .into_iter()
            .map(|x| if e.is_float() { self.widen_f32(e, x) } else { x })
            .collect();
        let layout = self.asg.layout(lin).clone();
        // 1. Registers. A sum of f32 products whose factors are at hand in this layout
        // accumulates them with `fma` (the products' own `mul`s are left to ptxas to drop).
        let factors = match (kind, e, self.asg.def(value).map(|d| &d.op)) {
            (ReduceKind::Sum, Elem::F32, Some(Op::Binary(BinaryOp::Mul, a, b))) => {
                match (self.operand(*a, lin), self.operand(*b, lin)) {
                    (Ok(x), Ok(y)) if x.len() == input.len() && y.len() == input.len() => Some((x, y)),
                    _ => None,
                }
            }
            _ => None,
        };
        let map = layout.reg_map_dropping(&[axis]);
        let mut groups: Vec<Vec<usize>> = vec![Vec::new(); layout.slice(axis).num_regs()];
        for (i, &o) in map.iter().enumerate() {
            groups[o].push(i);
        }
        let mut out: Vec<Reg> = Vec::with_capacity(groups.len());
        for g in groups {
            out.push(match &factors {
                Some((x, y)) => g[1..].iter().fold(input[g[0]], |acc, &i| {
                    let d = self.reg(Class::F32);
                    emit!(self, "fma.rn.f32 {d}, {}, {}, {acc}", x[i], y[i]);
                    d
                }),
                None => self.tree(&inst, g.iter().map(|&i| input[i]).collect()),
            });
        }
        // 2. Lanes. Where the result layout moved a register bit into lane bit `i` (the top
        // register bit left), lane bit `i` = 0 keeps the lower half of the registers and
        // receives its partner's lower half, lane bit `i` = 1 the upper half: each lane
        // combines its own value with its partner's, as the butterfly does, on half the
        // registers. Elsewhere every register is reduced across the lane bit (butterfly).
        let lo = self.asg.layout(lout).clone();
        for (i, b) in layout.lanes.iter().enumerate() {
            if !b.is_some_and(|b| b.dim as usize == axis) {
                continue;
            }
            if lo.lanes[i].is_some() && out.len() > 1 {
                let half = out.len() / 2;
                let bit = self.gather(&[(i as u32, 0)]).expect("a lane bit");
                let upper = self.reg(Class::Pred);
                emit!(self, "setp.ne.u32 {upper}, {bit}, 0");
                let mut next = Vec::with_capacity(half);
                for j in 0..half {
                    let (x0, x1) = (out[j], out[j + half]);
                    let send = self.select(x0.class, upper, x0, x1);
                    let keep = self.select(x0.class, upper, x1, x0);
                    let t = self.shuffle("bfly", send, 1 << i, 0x1f);
                    next.push(self.combine(&inst, keep, t));
                }
                out = next;
            } else {
                for o in out.iter_mut() {
                    let t = self.shuffle("bfly", *o, 1 << i, 0x1f);
                    *o = self.combine(&inst, *o, t);
                }
            }
        }
        debug_assert_eq!(out.len(), lo.num_regs());
        // 3. Warps, through shared memory: slot (output element, warp index along the axis).
        let wpos: Vec<u32> = (0..layout.warps.len())
            .filter(|&j| layout.warps[j].is_some_and(|b| b.dim as usize == axis))
            .map(|j| j as u32)
            .collect();
        if !wpos.is_empty() {
            let nw = 1usize << wpos.len();
            let dtype = DType::Val(acc);
            let s = acc.bytes();
            let numel = self.asg.layout(lout).numel();
            self.smem_begin(numel * nw * s);
            let wb = wpos.len() as u32;
            let sh = s.trailing_zeros();
            let widx: Vec<(u32, u32)> = wpos
                .iter()
                .enumerate()
                .map(|(k, j)| (LANE_BITS as u32 + j, k as u32 + sh))
                .collect();
            let base = self.smem_addr(lout, wb + sh, 0);
            let wi = self.gather(&widx).expect("warp bits");
            let waddr = self.reg(Class::B32);
            emit!(self, "add.s32 {waddr}, {base}, {wi}");
            let t = super::convert::mem_type(dtype);
            for (o, x) in out.iter().enumerate() {
                emit!(self, "st.shared.{t} [{waddr}+{}], {x}", lo.reg_flat(o) * nw * s);
            }
            emit!(self, "bar.sync 0");
            for (o, x) in out.iter_mut().enumerate() {
                let parts: Vec<Reg> = (0..nw)
                    .map(|j| {
                        let d = self.reg(x.class);
                        emit!(self, "ld.shared.{t} {d}, [{base}+{}]", (lo.reg_flat(o) * nw + j) * s);
                        d
                    })
                    .collect();
                *x = self.tree(&inst, parts);
            }
        }
        Ok(out
            .into_iter()
            .map(|x| if e.is_float() { self.round_from_f32(e, x) } else { x })
            .collect())
    }

    /// The identity of a scan or reduction combining function, as an immediate of `e`.
    pub(super) fn identity_imm(e: Elem, product: bool) -> String {
        match (e, product) {
            (Elem::F32, false) => f32_imm(0.0),
            (Elem::F32, true) => f32_imm(1.0),
            (_, false) => "0".into(),
            (_, true) => "1".into(),
        }
    }
}
