//! Inclusive scans along one axis, in a layout whose axis bits are registers (low), then
//! consecutive lanes, then consecutive warps (high): sequential in the thread, Hillis–Steele
//! with `shfl.sync.up` across lanes, and through shared memory across warps.

use super::elementwise::{elem, int_type};
use super::reduce::acc_elem;
use super::regs::{Class, Reg};
use super::Emitter;
use crate::backend::layout::LANE_BITS;
use crate::error::CompileError;
use crate::ir::{ScanKind, Value};
use crate::types::{DType, Elem};

impl Emitter<'_> {
    /// The scan of `value` along `axis`, in the result's natural layout.
    pub(super) fn scan(
        &mut self,
        r: Value,
        value: Value,
        axis: usize,
        kind: ScanKind,
    ) -> Result<Vec<Reg>, CompileError> {
        let l = self.asg.natural(r).expect("scan has a layout");
        let e = elem(self.ty(value).dtype);
        let acc = acc_elem(e);
        let product = kind == ScanKind::Prod;
        let inst = match (product, acc) {
            (false, Elem::F32) => "add.rn.f32".to_string(),
            (true, Elem::F32) => "mul.rn.f32".to_string(),
            (false, a) => format!("add.{}", int_type(a)),
            (true, a) => format!("mul.lo.{}", int_type(a)),
        };
        let ident = Self::identity_imm(acc, product);
        let input = self.get(value, l)?;
        let input: Vec<Reg> = input
            .into_iter()
            .map(|x| if e.is_float() { self.widen_f32(e, x) } else { x })
            .collect();
        let layout = self.asg.layout(l).clone();
        let class = Class::of_elem(acc);
        let sel = class.mov_type();
        // 1. In the thread, along the axis' register bits.
        let map = layout.reg_map_dropping(&[axis]);
        let ngroups = 1 << (layout.regs.len() - layout.regs.iter().filter(|b| b.dim as usize == axis).count());
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); ngroups];
        for (i, g) in map.iter().enumerate() {
            members[*g].push(i);
        }
        let mut incl = input.clone();
        let mut totals = Vec::with_capacity(ngroups);
        for m in members.iter_mut() {
            m.sort_by_key(|&i| layout.reg_coord(i, axis));
            let mut run = input[m[0]];
            for &i in &m[1..] {
                run = self.combine(&inst, run, input[i]);
                incl[i] = run;
            }
            totals.push(run);
        }
        // 2. Across lanes.
        let lpos: Vec<u32> = (0..LANE_BITS)
            .filter(|&i| layout.lanes[i].is_some_and(|b| b.dim as usize == axis))
            .map(|i| i as u32)
            .collect();
        let mut prefix: Vec<Option<Reg>> = vec![None; ngroups];
        let mut seg_totals = totals.clone();
        let lidx = lpos.first().map(|&i0| {
            let pairs: Vec<(u32, u32)> = (0..lpos.len() as u32).map(|j| (i0 + j, j)).collect();
            (i0, self.gather(&pairs).expect("lane bits"))
        });
        if let Some((i0, lidx)) = lidx {
            for g in 0..ngroups {
                let t = self.reg(class);
                emit!(self, "mov.{sel} {t}, {}", totals[g]);
                for j in 0..lpos.len() as u32 {
                    let up = self.shuffle("up", t, 1 << (i0 + j), 0);
                    let p = self.reg(Class::Pred);
                    emit!(self, "setp.ge.u32 {p}, {lidx}, {}", 1 << j);
                    emit!(self, "@{p} {inst} {t}, {up}, {t}");
                }
                let ex = self.shuffle("up", t, 1 << i0, 0);
                let (p, exs) = (self.reg(Class::Pred), self.reg(class));
                emit!(self, "setp.eq.u32 {p}, {lidx}, 0");
                emit!(self, "selp.{sel} {exs}, {ident}, {ex}, {p}");
                prefix[g] = Some(exs);
                seg_totals[g] = t;
            }
        }
        // 3. Across warps, through shared memory.
        let wpos: Vec<u32> = (0..layout.warps.len())
            .filter(|&j| layout.warps[j].is_some_and(|b| b.dim as usize == axis))
            .map(|j| j as u32)
            .collect();
        if !wpos.is_empty() {
            let nwd = 1usize << wpos.len();
            let s = acc.bytes();
            let sh = s.trailing_zeros();
            let lout = self.asg.table.intern(layout.slice(axis));
            let numel = self.asg.layout(lout).numel();
            self.smem_begin(numel * nwd * s);
            let t = super::convert::mem_type(DType::Val(acc));
            let base = self.smem_addr(lout, wpos.len() as u32 + sh, 0);
            let wbits = |shift: u32| -> Vec<(u32, u32)> {
                wpos.iter()
                    .enumerate()
                    .map(|(k, j)| (LANE_BITS as u32 + j, k as u32 + shift))
                    .collect()
            };
            let woff = self.gather(&wbits(sh)).expect("warp bits");
            let widx = self.gather(&wbits(0)).expect("warp bits");
            let waddr = self.reg(Class::B32);
            emit!(self, "add.s32 {waddr}, {base}, {woff}");
            let guard = match lidx {
                Some((_, lidx)) => {
                    let p = self.reg(Class::Pred);
                    emit!(self, "setp.eq.u32 {p}, {lidx}, {}", (1 << lpos.len()) - 1);
                    format!("@{p} ")
                }
                None => String::new(),
            };
            let lo = self.asg.layout(lout).clone();
            for (g, x) in seg_totals.iter().enumerate() {
                emit!(self, "{guard}st.shared.{t} [{waddr}+{}], {x}", lo.reg_flat(g) * nwd * s);
            }
            emit!(self, "bar.sync 0");
            for (g, pre) in prefix.iter_mut().enumerate() {
                let wp = self.reg(class);
                emit!(self, "mov.{sel} {wp}, {ident}");
                for j in 0..nwd - 1 {
                    let (x, p) = (self.reg(class), self.reg(Class::Pred));
                    emit!(self, "ld.shared.{t} {x}, [{base}+{}]", (lo.reg_flat(g) * nwd + j) * s);
                    emit!(self, "setp.gt.u32 {p}, {widx}, {j}");
                    emit!(self, "@{p} {inst} {wp}, {wp}, {x}");
                }
                *pre = Some(match *pre {
                    Some(lp) => self.combine(&inst, wp, lp),
                    None => wp,
                });
            }
        }
        // 4. Apply the prefixes.
        let out: Vec<Reg> = (0..incl.len())
            .map(|i| match prefix[map[i]] {
                Some(p) => self.combine(&inst, p, incl[i]),
                None => incl[i],
            })
            .collect();
        Ok(out
            .into_iter()
            .map(|x| if e.is_float() { self.round_from_f32(e, x) } else { x })
            .collect())
    }
}
