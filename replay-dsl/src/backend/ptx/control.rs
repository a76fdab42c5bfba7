//! Structured control flow: `for` loops with loop-carried registers and branches on uniform
//! scalar conditions. Block arguments get fresh registers that the loop (or branch) assigns.

use super::regs::{Class, Reg};
use super::Emitter;
use crate::backend::layout::LayoutId;
use crate::backend::smem::Pending;
use crate::error::CompileError;
use crate::ir::{Inst, Op, Value};
use std::collections::HashSet;

impl<'k> Emitter<'k> {
    /// Fresh registers for each result of `inst` in its natural layout.
    fn result_regs(&mut self, inst: &Inst) -> Vec<(LayoutId, Vec<Reg>)> {
        inst.results
            .iter()
            .map(|r| {
                let l = self.asg.natural(*r).expect("result layout");
                let n = self.asg.layout(l).num_regs();
                let c = Class::of(self.ty(*r).dtype);
                (l, self.regs_n(c, n))
            })
            .collect()
    }

    /// `dst[i] = src[i]` for every register, as a parallel copy.
    fn parallel_copy(&mut self, dst: &[Reg], src: &[Reg]) {
        let targets: HashSet<Reg> = dst.iter().copied().collect();
        let src: Vec<Reg> = if src.iter().any(|s| targets.contains(s)) {
            src.iter()
                .map(|s| {
                    let t = self.reg(s.class);
                    emit!(self, "mov.{} {t}, {s}", s.class.mov_type());
                    t
                })
                .collect()
        } else {
            src.to_vec()
        };
        for (d, s) in dst.iter().zip(&src) {
            if d != s {
                emit!(self, "mov.{} {d}, {s}", d.class.mov_type());
            }
        }
    }

    /// Binds a value defined by a block argument or control-flow result to registers (in its
    /// natural layout) and emits its conversions.
    fn bind(&mut self, v: Value, regs: Vec<Reg>) -> Result<(), CompileError> {
        self.define_real(v, regs)
    }

    /// `for iv in (lo..hi).step_by(step)` with loop-carried registers.
    pub(super) fn emit_for(&mut self, inst: &'k Inst) -> Result<(), CompileError> {
        let Op::For { body, .. } = &inst.op else { unreachable!() };
        let ops = self.asg.operand_layouts(inst);
        let mut regs = Vec::with_capacity(ops.len());
        for (v, l) in &ops {
            regs.push(self.get(*v, *l)?);
        }
        let (lo, hi, step) = (regs[0][0], regs[1][0], regs[2][0]);
        let carried = self.result_regs(inst);
        let iv = self.reg(Class::B32);
        emit!(self, "mov.b32 {iv}, {lo}");
        for ((_, c), init) in carried.iter().zip(&regs[3..]) {
            self.parallel_copy(c, init);
        }
        let (head, end) = (self.label(), self.label());
        self.place(&head);
        let p = self.reg(Class::Pred);
        emit!(self, "setp.ge.s32 {p}, {iv}, {hi}");
        emit!(self, "@{p} bra {end}");
        self.smem.set_pending(Pending::Unknown);
        self.bind(body.args[0], vec![iv])?;
        for (a, (_, c)) in body.args[1..].iter().zip(&carried) {
            self.bind(*a, c.clone())?;
        }
        self.yield_to.push(carried.clone());
        self.block(body)?;
        self.yield_to.pop();
        emit!(self, "add.s32 {iv}, {iv}, {step}");
        emit!(self, "bra {head}");
        self.place(&end);
        self.smem.set_pending(Pending::Unknown);
        for (r, (_, c)) in inst.results.iter().zip(carried) {
            self.bind(*r, c)?;
        }
        Ok(())
    }

    /// A branch on a uniform scalar condition; each arm assigns the result registers.
    pub(super) fn emit_if(&mut self, inst: &'k Inst) -> Result<(), CompileError> {
        let Op::If {
            cond,
            then_block,
            else_block,
        } = &inst.op
        else {
            unreachable!()
        };
        let c = self.get(*cond, self.asg.scalar())?[0];
        let results = self.result_regs(inst);
        let (els, end) = (self.label(), self.label());
        emit!(self, "@!{c} bra {els}");
        let before = self.smem.pending();
        self.yield_to.push(results.clone());
        self.block(then_block)?;
        emit!(self, "bra {end}");
        let after_then = self.smem.pending();
        self.smem.set_pending(before);
        self.place(&els);
        self.block(else_block)?;
        self.yield_to.pop();
        self.place(&end);
        let after_else = self.smem.pending();
        self.smem.set_pending(after_then.join(after_else));
        for (r, (_, regs)) in inst.results.iter().zip(results) {
            self.bind(*r, regs)?;
        }
        Ok(())
    }

    /// Copies yielded values into the enclosing loop's or branch's registers.
    pub(super) fn emit_yield(&mut self, vs: &[Value]) -> Result<(), CompileError> {
        let targets = self.yield_to.last().cloned().unwrap_or_default();
        let mut dst = Vec::new();
        let mut src = Vec::new();
        for (v, (l, t)) in vs.iter().zip(&targets) {
            dst.extend(t.iter().copied());
            src.extend(self.operand(*v, *l)?);
        }
        self.parallel_copy(&dst, &src);
        Ok(())
    }
}
