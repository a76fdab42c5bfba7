//! Scans along one axis, in a layout whose axis bits are registers (low), then consecutive
//! lanes, then consecutive warps (high): sequential in the thread, Hillis–Steele with
//! `shfl.sync.up` across lanes, and through shared memory across warps. A reverse scan runs the
//! same steps mirrored (registers in descending order, `shfl.sync.down`, later warps); an
//! exclusive scan leaves each element's own value out of the in-thread part.

use super::elementwise::{elem, int_type};
use super::reduce::acc_elem;
use super::regs::{Class, Reg};
use super::Emitter;
use crate::backend::layout::LANE_BITS;
use crate::error::CompileError;
use crate::ir::{ScanKind, Value};
use crate::types::{DType, Elem};

impl Emitter<'_> {
    /// The scan of `value` along `axis`, in the result's natural layout (see `Op::Scan` for
    /// `reverse` and `exclusive`).
    pub(super) fn scan(
        &mut self,
        r: Value,
        value: Value,
        axis: usize,
        kind: ScanKind,
        reverse: bool,
        exclusive: bool,
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
        // `part[i]`: the in-thread part of element i's result (`None`: the identity).
        let mut part: Vec<Option<Reg>> = vec![None; input.len()];
        let mut totals = Vec::with_capacity(ngroups);
        for m in members.iter_mut() {
            m.sort_by_key(|&i| layout.reg_coord(i, axis));
            if reverse {
                m.reverse();
            }
            let mut run: Option<Reg> = None;
            for &i in m.iter() {
                let next = match run {
                    None => input[i],
                    Some(acc) => self.combine(&inst, acc, input[i]),
                };
                part[i] = if exclusive { run } else { Some(next) };
                run = Some(next);
            }
            totals.push(run.expect("a register group is not empty"));
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
        // The last lane index along the axis.
        let nl = (1u32 << lpos.len()) - 1;
        // Forward: lanes take from lower lanes (`shfl.up`, lane bound 0); reverse: from higher
        // lanes (`shfl.down`, clamped at lane 31).
        let (mode, clamp) = if reverse { ("down", 0x1f) } else { ("up", 0) };
        if let Some((i0, lidx)) = lidx {
            for g in 0..ngroups {
                let t = self.reg(class);
                emit!(self, "mov.{sel} {t}, {}", totals[g]);
                for j in 0..lpos.len() as u32 {
                    let from = self.shuffle(mode, t, 1 << (i0 + j), clamp);
                    let p = self.reg(Class::Pred);
                    if reverse {
                        emit!(self, "setp.le.u32 {p}, {lidx}, {}", nl - (1 << j));
                    } else {
                        emit!(self, "setp.ge.u32 {p}, {lidx}, {}", 1 << j);
                    }
                    emit!(self, "@{p} {inst} {t}, {from}, {t}");
                }
                let ex = self.shuffle(mode, t, 1 << i0, clamp);
                let (p, exs) = (self.reg(Class::Pred), self.reg(class));
                emit!(self, "setp.eq.u32 {p}, {lidx}, {}", if reverse { nl } else { 0 });
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
                    // The lane holding the warp's segment total.
                    emit!(self, "setp.eq.u32 {p}, {lidx}, {}", if reverse { 0 } else { nl });
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
                // Forward: the totals of warps j < widx; reverse: of warps j > widx.
                let warps: Vec<usize> = if reverse {
                    (1..nwd).collect()
                } else {
                    (0..nwd - 1).collect()
                };
                for j in warps {
                    let (x, p) = (self.reg(class), self.reg(Class::Pred));
                    emit!(self, "ld.shared.{t} {x}, [{base}+{}]", (lo.reg_flat(g) * nwd + j) * s);
                    emit!(self, "setp.{}.u32 {p}, {widx}, {j}", if reverse { "lt" } else { "gt" });
                    emit!(self, "@{p} {inst} {wp}, {wp}, {x}");
                }
                *pre = Some(match *pre {
                    Some(lp) => self.combine(&inst, wp, lp),
                    None => wp,
                });
            }
        }
        // 4. Apply the prefixes.
        let out: Vec<Reg> = (0..part.len())
            .map(|i| match (prefix[map[i]], part[i]) {
                (Some(p), Some(x)) => self.combine(&inst, p, x),
                (Some(p), None) => p,
                (None, Some(x)) => x,
                (None, None) => {
                    let x = self.reg(class);
                    emit!(self, "mov.{sel} {x}, {ident}");
                    x
                }
            })
            .collect();
        Ok(out
            .into_iter()
            .map(|x| if e.is_float() { self.round_from_f32(e, x) } else { x })
            .collect())
    }
}
