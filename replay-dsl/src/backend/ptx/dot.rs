//! `acc + a @ b` on CUDA cores, for the shapes that do not fit the tensor cores (see `mma`):
//! A `[M, K]` and B `[K, N]` are staged in shared memory as f32 (row-major), then every thread
//! runs a PTX loop over K with one FMA per owned C element (precision `Tf32` rounds the
//! operands to tf32 first, as the tensor cores see them).

use super::elementwise::elem;
use super::regs::{Class, Reg};
use super::Emitter;
use crate::backend::layout::LayoutId;
use crate::error::CompileError;
use crate::ir::DotPrecision;
use crate::types::{DType, Elem};

impl Emitter<'_> {
    /// A tile (of float type) converted to f32 registers.
    fn f32_regs(&mut self, v: crate::ir::Value, l: LayoutId) -> Result<Vec<Reg>, CompileError> {
        let e = elem(self.ty(v).dtype);
        let regs = self.get(v, l)?;
        Ok(regs.into_iter().map(|x| self.widen_f32(e, x)).collect())
    }

    /// The dot product result in layout `lc` (the accumulator's layout).
    pub(super) fn dot(
        &mut self,
        r: crate::ir::Value,
        lc: LayoutId,
        a: crate::ir::Value,
        b: crate::ir::Value,
        acc: crate::ir::Value,
        precision: DotPrecision,
    ) -> Result<Vec<Reg>, CompileError> {
        let (m, k) = (self.ty(a).shape[0], self.ty(a).shape[1]);
        let n = self.ty(b).shape[1];
        let ops = {
            let inst = self.asg.def(r).expect("dot has a definition");
            self.asg.operand_layouts(inst)
        };
        let (la, lb) = (ops[0].1, ops[1].1);
        let (mut ra, mut rb) = (self.f32_regs(a, la)?, self.f32_regs(b, lb)?);
        if precision == DotPrecision::Tf32 {
            // The same products as on the tensor cores: operands rounded once to tf32.
            for x in ra.iter_mut().chain(rb.iter_mut()) {
                let t = self.reg(Class::B32);
                emit!(self, "cvt.rna.tf32.f32 {t}, {x}");
                *x = t;
            }
        }
        let racc = self.get(acc, lc)?;
        let b_base = (m * k * 4).div_ceil(16) * 16;
        self.smem_begin(b_base + k * n * 4);
        let f32t = DType::Val(Elem::F32);
        self.smem_store(&ra, f32t, la, 0, None);
        self.smem_store(&rb, f32t, lb, b_base, None);
        emit!(self, "bar.sync 0");
        // Distinct row and column offsets of this thread's C registers.
        let layout = self.asg.layout(lc).clone();
        let nregs = layout.num_regs();
        let mut rows: Vec<usize> = (0..nregs).map(|r| layout.reg_coord(r, 0)).collect();
        let mut cols: Vec<usize> = (0..nregs).map(|r| layout.reg_coord(r, 1)).collect();
        rows.sort_unstable();
        rows.dedup();
        cols.sort_unstable();
        cols.dedup();
        // Columns load as vectors when the low column bits are registers.
        let vw = (0..2)
            .take_while(|&i| layout.regs.iter().any(|b| b.dim == 1 && b.bit as usize == i))
            .count();
        let vw = (1usize << vw).min(4);
        let smem = self.smem_base();
        let (pa, pb) = (self.reg(Class::B32), self.reg(Class::B32));
        match self.thread_coord(lc, 0) {
            Some(t) => emit!(self, "mad.lo.s32 {pa}, {t}, {}, {smem}", k * 4),
            None => emit!(self, "mov.u32 {pa}, {smem}"),
        }
        match self.thread_coord(lc, 1) {
            Some(t) => emit!(self, "mad.lo.s32 {pb}, {t}, 4, {smem}"),
            None => emit!(self, "mov.u32 {pb}, {smem}"),
        }
        emit!(self, "add.s32 {pb}, {pb}, {b_base}");
        let c: Vec<Reg> = self.regs_n(Class::F32, nregs);
        for (d, s) in c.iter().zip(&racc) {
            emit!(self, "mov.f32 {d}, {s}");
        }
        let kk = self.reg(Class::B32);
        emit!(self, "mov.u32 {kk}, 0");
        let top = self.label();
        self.place(&top);
        let av: Vec<Reg> = self.regs_n(Class::F32, rows.len());
        for (x, row) in av.iter().zip(&rows) {
            emit!(self, "ld.shared.f32 {x}, [{pa}+{}]", row * k * 4);
        }
        let bv: Vec<Reg> = self.regs_n(Class::F32, cols.len());
        for (g, chunk) in bv.chunks(vw).enumerate() {
            let names: Vec<String> = chunk.iter().map(Reg::to_string).collect();
            let off = cols[g * vw] * 4;
            if vw == 1 {
                emit!(self, "ld.shared.f32 {}, [{pb}+{off}]", names[0]);
            } else {
                emit!(self, "ld.shared.v{vw}.f32 {{{}}}, [{pb}+{off}]", names.join(", "));
            }
        }
        for (r, d) in c.iter().enumerate() {
            let i = rows.binary_search(&layout.reg_coord(r, 0)).expect("row");
            let j = cols.binary_search(&layout.reg_coord(r, 1)).expect("col");
            emit!(self, "fma.rn.f32 {d}, {}, {}, {d}", av[i], bv[j]);
        }
        let p = self.reg(Class::Pred);
        emit!(self, "add.s32 {pa}, {pa}, 4");
        emit!(self, "add.s32 {pb}, {pb}, {}", n * 4);
        emit!(self, "add.s32 {kk}, {kk}, 1");
        emit!(self, "setp.lt.u32 {p}, {kk}, {k}");
        emit!(self, "@{p} bra {top}");
        Ok(c)
    }
}
