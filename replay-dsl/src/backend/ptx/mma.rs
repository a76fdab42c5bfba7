//! `acc + a @ b` on tensor cores, as planned by [`crate::backend::mma`]: A and B are staged in
//! shared memory with padded rows, then each warp runs a loop over K that loads its fragments
//! (`ld.shared` for tf32, two elements at once where K is permuted, `ldmatrix` for 16-bit
//! types) and issues one `mma.sync` per `m16n8` tile of its registers and per term. f32
//! operands are split into tf32 parts, `x = hi + lo` (3xTF32; `lo` is left for the tensor
//! cores to truncate): the terms `a_lo·b_hi`, `a_hi·b_lo`,
//! `a_hi·b_hi` accumulate in that order, and the terms of an operand exact in tf32 (a cast from
//! a 16-bit float) have no low part; such a cast is staged as its 16-bit source and widened as
//! its fragments load. A tf32 operand's row pitch is the one with the fewest shared-memory
//! wavefronts over its staging stores and fragment loads together (`staging_pitches`): a tile
//! whose registers run down its columns (a transposed load) stores with bank conflicts at the
//! pitch that keeps the fragment loads conflict-free.
//! The tensor cores round their f32 sums toward zero, so the products of one k-step are summed
//! from zero into a fresh fragment, which is then added to the accumulator with `add.rn.f32`:
//! the truncation errors stay relative to one k-step's sum, and the mmas of consecutive k-steps
//! do not wait on one another. At `Tf32x3Chained` (and `Tf32`) they chain on the accumulator
//! instead: one `add` per accumulator word and k-step fewer.
//! Register operands ([`MmaPlan::in_regs`]) skip the staging: every k-step is unrolled and
//! takes its fragments straight from the operands' registers. An operand that is a shared
//! buffer's read ([`crate::backend::mma::Staged::buffer`]) is not staged either: its fragments
//! load from the buffer's stage, at the buffer's pitch.
//! When the result has fewer `m16n8` tiles than warps, the warps that would hold copies of it
//! split K instead, and their partial sums meet in shared memory (`sum_k_groups`).

use super::convert::{mem_bytes, mem_type};
use super::regs::{f32_imm, Class, Reg};
use super::Emitter;
use crate::backend::layout::{Layout, LayoutId, LANE_BITS};
use crate::backend::mma::{
    a_fragment_cells, b_fragment_cells, exact_in_tf32, k_group_warps, k_pair_gap, n_position_bits, paired_n_tiles,
    staging_pitch, MmaKind, MmaPlan, Staged, StagedAccess,
};
use crate::error::CompileError;
use crate::ir::{DotPrecision, Value};
use crate::types::{DType, Elem};
use std::collections::BTreeSet;

/// The most fragment words loaded per iteration of the K loop (k-steps are unrolled up to it).
const FRAG_WORDS: usize = 32;
/// The most k-steps unrolled per iteration of the K loop.
const MAX_UNROLL: usize = 8;

/// How an operand's f32 words become tf32 words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tf32Words {
    /// Exact in tf32 (or 16-bit operands): used as they are.
    Exact,
    /// Rounded once (`DotPrecision::Tf32`).
    Rounded,
    /// Split into high and low parts (`DotPrecision::Tf32x3`, `Tf32x3Chained`).
    Split,
}

/// An operand fragment: the words passed to `mma`, and the low tf32 parts when it has them.
struct Frag {
    hi: Vec<Reg>,
    lo: Option<Vec<Reg>>,
}

/// `(thread-id bit, coordinate bit)` pairs of lane bits `lanes` landing on bits from `to`.
fn lane_bits(lanes: std::ops::Range<u32>, to: u32) -> Vec<(u32, u32)> {
    lanes.clone().map(|l| (l, l - lanes.start + to)).collect()
}

impl Emitter<'_> {
    /// The dot product result in the mma accumulator layout `lc`.
    pub(super) fn dot_mma(
        &mut self,
        r: Value,
        lc: LayoutId,
        (a, b, acc): (Value, Value, Value),
        p: MmaPlan,
    ) -> Result<Vec<Reg>, CompileError> {
        let ops = {
            let inst = self.asg.def(r).expect("dot has a definition");
            self.asg.operand_layouts(inst)
        };
        let ((va, la), (vb, lb)) = (ops[0], ops[1]);
        // How each operand's f32 words become tf32: as they are when exact, else rounded once
        // (`Tf32`) or split (`Tf32x3`).
        let rounding = |e: &Self, v: Value, st: Staged| match () {
            _ if p.kind != MmaKind::Tf32 || st.elem != Elem::F32 || exact_in_tf32(e.k, &|x| e.asg.def(x), v) => {
                Tf32Words::Exact
            }
            _ if p.precision == DotPrecision::Tf32 => Tf32Words::Rounded,
            _ => Tf32Words::Split,
        };
        let (round_a, round_b) = (rounding(self, a, p.a), rounding(self, b, p.b));
        let (split_a, split_b) = (round_a == Tf32Words::Split, round_b == Tf32Words::Split);
        // An operand read from a shared buffer has no registers (its operand is the stage).
        let regs_of = |e: &mut Self, st: Staged, v: Value, l: LayoutId| match st.buffer {
            Some(_) => Ok(Vec::new()),
            None => e.get(v, l),
        };
        let (ra, rb, racc) = (
            regs_of(self, p.a, va, la)?,
            regs_of(self, p.b, vb, lb)?,
            self.get(acc, lc)?,
        );
        let p = if p.in_regs {
            p
        } else {
            self.staging_pitches(p, (la, lb), lc)
        };
        // Where each staged operand's fragments are read: the scratch (after staging) or its
        // buffer's stage.
        let mut origin = [None, None];
        if !p.in_regs {
            if p.bytes > 0 {
                self.smem_begin(p.bytes);
            }
            for (i, (st, regs, l, base)) in [(p.a, &ra, la, 0), (p.b, &rb, lb, p.b_base)].into_iter().enumerate() {
                origin[i] = Some(match st.buffer {
                    Some((buffer, stage)) => (self.buffer_stage_addr(buffer, stage)?, 0),
                    None => {
                        self.stage(regs, DType::Val(st.elem), l, base, st.pitch);
                        (self.smem_base(), base)
                    }
                });
            }
            if p.bytes > 0 {
                emit!(self, "bar.sync 0");
            }
        }

        // The m16n8 tiles of this thread (their registers, and their first element's row and
        // column by their register coordinates).
        let layout = self.asg.layout(lc).clone();
        let nregs = layout.num_regs();
        let tile_regs = crate::backend::mma::tile_regs(&layout, p.interleaved());
        let tiles: Vec<(usize, usize)> = (tile_regs.iter())
            .map(|q| (layout.reg_coord(q[0], 0), layout.reg_coord(q[0], 1)))
            .collect();
        let mut rows: Vec<usize> = tiles.iter().map(|t| t.0).collect();
        let mut cols: Vec<usize> = tiles.iter().map(|t| t.1).collect();
        rows.sort_unstable();
        rows.dedup();
        cols.sort_unstable();
        cols.dedup();
        let warp = |d: usize| -> Vec<(u32, u32)> {
            let on = |b: &Option<crate::backend::layout::Bit>| b.filter(|b| b.dim as usize == d);
            (layout.warps.iter().enumerate())
                .filter_map(|(i, b)| on(b).map(|b| ((LANE_BITS + i) as u32, b.bit as u32)))
                .collect()
        };
        // `ldmatrix.x4.trans` loads two n-tiles whose columns differ by a constant power of two;
        // a tf32 B fragment load, two interleaved ones (columns 1 apart).
        let pair = match p.kind {
            MmaKind::Tf32 => paired_n_tiles(n_position_bits(&layout, p.interleaved())).then_some(1),
            _ => (cols.len() >= 2)
                .then(|| cols[1] - cols[0])
                .filter(|d| cols.chunks(2).all(|c| c.len() == 2 && c[1] - c[0] == *d)),
        };

        // Split K over the warps that would replicate the result (warp bits of `lc` without a
        // coordinate): group `g` of them runs k-steps `g·steps ..`, and the groups' partial sums
        // meet in shared memory after the loop.
        let ks = p.kind.k_step();
        let rep: Vec<u32> = (k_group_warps(&layout, p.k, p.kind).into_iter())
            .map(|i| (LANE_BITS + i) as u32)
            .collect();
        let threads = 32usize << layout.warps.len();
        let kgroup = self.gather(&rep.iter().enumerate().map(|(j, &t)| (t, j as u32)).collect::<Vec<_>>());
        let steps = (p.k / ks) >> rep.len();
        let c: Vec<Reg> = self.regs_n(Class::F32, nregs);
        let zero = self.reg(Class::F32);
        emit!(self, "mov.f32 {zero}, {}", f32_imm(0.0));
        // A fresh fragment per k-step and tile, unless the mmas chain on the accumulator.
        let fresh = (p.precision == DotPrecision::Tf32x3).then_some(zero);
        match kgroup {
            // Group 0 starts from the accumulator, the others from zero.
            Some(g) => {
                let first = self.reg(Class::Pred);
                emit!(self, "setp.eq.u32 {first}, {g}, 0");
                for (d, x) in c.iter().zip(&racc) {
                    emit!(self, "selp.f32 {d}, {x}, {zero}, {first}");
                }
            }
            None => {
                for (d, x) in c.iter().zip(&racc) {
                    emit!(self, "mov.f32 {d}, {x}");
                }
            }
        }
        if p.in_regs {
            self.register_k_steps(
                p,
                (&ra, la),
                (&rb, lb),
                (&tiles, &tile_regs),
                &c,
                fresh,
                (round_a, round_b),
            );
            return Ok(match kgroup {
                Some(_) => self.sum_k_groups(&c, &rep, threads),
                None => c,
            });
        }
        // Per-thread fragment addresses at k = 0.
        let (sa, sb) = (p.a.elem.bytes(), p.b.elem.bytes());
        let [(oa, base_a), (ob, base_b)] = origin.map(|o| o.expect("a staged dot's operands have an origin"));
        let (pa, pb) = match p.kind {
            MmaKind::Tf32 => {
                // With K permuted, lane t's fragment columns (A) and rows (B) t and t + 4 are 2t
                // and 2t + 1, adjacent.
                let t_bit = u32::from(p.interleaved());
                let ar = [lane_bits(2..5, 0), warp(0)].concat();
                let pa = self.frag_addr((oa, base_a), &ar, &lane_bits(0..2, t_bit), p.a.pitch, sa);
                // Lane g of the fragment reads the column of the tile's position g.
                let positions = n_position_bits(&layout, p.interleaved());
                let bc = [(2..5).zip(positions).collect::<Vec<_>>(), warp(1)].concat();
                let pb = self.frag_addr((ob, base_b), &lane_bits(0..2, t_bit), &bc, p.b.pitch, sb);
                (pa, pb)
            }
            MmaKind::Bf16 | MmaKind::F16 => {
                let ar = [lane_bits(0..4, 0), warp(0)].concat();
                let pa = self.frag_addr((oa, base_a), &ar, &[(4, 3)], p.a.pitch, sa);
                let mut bc = warp(1);
                if let Some(d) = pair {
                    bc.push((4, d.trailing_zeros()));
                }
                let pb = self.frag_addr((ob, base_b), &lane_bits(0..4, 0), &bc, p.b.pitch, sb);
                (pa, pb)
            }
        };

        if let Some(g) = kgroup {
            emit!(self, "mad.lo.s32 {pa}, {g}, {}, {pa}", steps * ks * sa);
            emit!(self, "mad.lo.s32 {pb}, {g}, {}, {pb}", steps * ks * p.b.pitch * sb);
        }
        let words = rows.len() * 4 * (1 + usize::from(split_a)) + cols.len() * 2 * (1 + usize::from(split_b));
        let mut unroll = 1;
        while steps.is_multiple_of(2 * unroll) && 2 * unroll * words <= FRAG_WORDS && 2 * unroll <= MAX_UNROLL {
            unroll *= 2;
        }

        let iters = steps / unroll;
        let (kk, top) = (self.reg(Class::B32), self.label());
        if iters > 1 {
            emit!(self, "mov.u32 {kk}, 0");
            self.place(&top);
        }
        for u in 0..unroll {
            let afr: Vec<Frag> = rows
                .iter()
                .map(|&m0| self.a_frag(p, pa, (m0 * p.a.pitch + u * ks) * sa, round_a))
                .collect();
            let bfr: Vec<Frag> = self.b_frags(p, pb, u * ks * p.b.pitch * sb, &cols, pair, round_b);
            for (q, (m0, n0)) in tiles.iter().enumerate() {
                let fa = &afr[rows.binary_search(m0).expect("row tile")];
                let fb = &bfr[cols.binary_search(n0).expect("column tile")];
                let tile = tile_regs[q].map(|r| c[r]);
                self.mma_terms(p, &tile, fa, fb, fresh);
            }
        }
        if iters > 1 {
            let pr = self.reg(Class::Pred);
            emit!(self, "add.s32 {pa}, {pa}, {}", unroll * ks * sa);
            emit!(self, "add.s32 {pb}, {pb}, {}", unroll * ks * p.b.pitch * sb);
            emit!(self, "add.s32 {kk}, {kk}, 1");
            emit!(self, "setp.lt.u32 {pr}, {kk}, {iters}");
            emit!(self, "@{pr} bra {top}");
        }
        if kgroup.is_some() {
            return Ok(self.sum_k_groups(&c, &rep, threads));
        }
        Ok(c)
    }

    /// Every k-step of this warp's k-group from the operands' registers (`a` and `b` in their
    /// [`crate::backend::mma::register_operands`] layouts): `c += a · b` for the m16n8 tiles
    /// `tiles` (row and column offsets from the accumulator's register bits).
    #[allow(clippy::too_many_arguments)]
    fn register_k_steps(
        &mut self,
        p: MmaPlan,
        (ra, la): (&[Reg], LayoutId),
        (rb, lb): (&[Reg], LayoutId),
        (tiles, tile_regs): (&[(usize, usize)], &[[usize; 4]]),
        c: &[Reg],
        fresh: Option<Reg>,
        (round_a, round_b): (Tf32Words, Tf32Words),
    ) {
        let (fa, fb) = (self.asg.layout(la).clone(), self.asg.layout(lb).clone());
        // The register holding each (row, column) of the register bits.
        let reg_of = |l: &crate::backend::layout::Layout| -> std::collections::HashMap<(usize, usize), usize> {
            (0..l.num_regs())
                .map(|r| ((l.reg_coord(r, 0), l.reg_coord(r, 1)), r))
                .collect()
        };
        let (at, bt) = (reg_of(&fa), reg_of(&fb));
        let (mut rows, mut cols): (Vec<usize>, Vec<usize>) = tiles.iter().copied().unzip();
        for v in [&mut rows, &mut cols] {
            v.sort_unstable();
            v.dedup();
        }
        // The K coordinates of the k-steps: A's K register bits but bit 0 (the `t + 4` half).
        let kbits: Vec<u8> = (fa.regs.iter())
            .filter(|b| b.dim == 1 && b.bit > 0)
            .map(|b| b.bit)
            .collect();
        for step in 0..1usize << kbits.len() {
            let k0: usize = (kbits.iter().enumerate()).map(|(j, b)| ((step >> j) & 1) << b).sum();
            let afr: Vec<Frag> = (rows.iter())
                .map(|&m0| {
                    let w = [(m0, k0), (m0 + 8, k0), (m0, k0 + 1), (m0 + 8, k0 + 1)].map(|rc| self.bits(ra[at[&rc]]));
                    self.tf32_frag(&w, round_a)
                })
                .collect();
            let bfr: Vec<Frag> = (cols.iter())
                .map(|&n0| {
                    let w = [(k0, n0), (k0 + 1, n0)].map(|rc| self.bits(rb[bt[&rc]]));
                    self.tf32_frag(&w, round_b)
                })
                .collect();
            for (q, (m0, n0)) in tiles.iter().enumerate() {
                let fa = &afr[rows.binary_search(m0).expect("row tile")];
                let fb = &bfr[cols.binary_search(n0).expect("column tile")];
                let tile = tile_regs[q].map(|r| c[r]);
                self.mma_terms(p, &tile, fa, fb, fresh);
            }
        }
    }

    /// `tile += a · b` for one m16n8 tile and k-step: one chained `mma` at precision `Tf32`;
    /// else the terms of the 3xTF32 split (the low parts' first), chained on `tile`, or with
    /// `fresh` (a zero register) summed from zero into a fresh fragment that is then added to
    /// `tile`.
    fn mma_terms(&mut self, p: MmaPlan, tile: &[Reg], fa: &Frag, fb: &Frag, fresh: Option<Reg>) {
        if p.precision == DotPrecision::Tf32 {
            self.mma(p.kind, tile, &fa.hi, &fb.hi, tile);
            return;
        }
        let mut terms: Vec<(&[Reg], &[Reg])> = Vec::with_capacity(3);
        if let Some(lo) = &fa.lo {
            terms.push((lo, &fb.hi));
        }
        if let Some(lo) = &fb.lo {
            terms.push((&fa.hi, lo));
        }
        terms.push((&fa.hi, &fb.hi));
        let Some(zero) = fresh else {
            for (x, y) in terms {
                self.mma(p.kind, tile, x, y, tile);
            }
            return;
        };
        let t = self.regs_n(Class::F32, 4);
        let mut from = [zero; 4];
        for (x, y) in terms {
            self.mma(p.kind, &t, x, y, &from);
            from.copy_from_slice(&t);
        }
        for (d, x) in tile.iter().zip(&t) {
            emit!(self, "add.rn.f32 {d}, {d}, {x}");
        }
    }

    /// The sums over the k-groups of the partial accumulators `c` (thread-id bits `rep` number
    /// the groups), through shared memory: every thread stores its words, then adds those of
    /// the threads that differ from it only in `rep`, in group order — so every replica of a
    /// result word holds the same value.
    fn sum_k_groups(&mut self, c: &[Reg], rep: &[u32], threads: usize) -> Vec<Reg> {
        let bytes = c.len() * 4;
        self.smem_begin(threads * bytes);
        let (sm, tid) = (self.smem_base(), self.tid());
        let own = self.reg(Class::B32);
        emit!(self, "mad.lo.s32 {own}, {tid}, {bytes}, {sm}");
        for (q, w) in c.chunks(4).enumerate() {
            let names: Vec<String> = w.iter().map(Reg::to_string).collect();
            emit!(
                self,
                "st.shared.v{}.f32 [{own}+{}], {{{}}}",
                w.len(),
                16 * q,
                names.join(", ")
            );
        }
        emit!(self, "bar.sync 0");
        let mask: u32 = rep.iter().map(|t| 1u32 << t).sum();
        let first = self.reg(Class::B32);
        emit!(self, "and.b32 {first}, {tid}, 0x{:08x}", !mask);
        emit!(self, "mad.lo.s32 {first}, {first}, {bytes}, {sm}");
        let sum: Vec<Reg> = self.regs_n(Class::F32, c.len());
        for g in 0..1usize << rep.len() {
            // The thread of group g: g's bits deposited on the bits `rep`.
            let t: usize = (rep.iter().enumerate()).map(|(j, &b)| ((g >> j) & 1) << b).sum();
            let part: Vec<Reg> = if g == 0 {
                sum.clone()
            } else {
                self.regs_n(Class::F32, c.len())
            };
            for (q, w) in part.chunks(4).enumerate() {
                let names: Vec<String> = w.iter().map(Reg::to_string).collect();
                let off = t * bytes + 16 * q;
                emit!(
                    self,
                    "ld.shared.v{}.f32 {{{}}}, [{first}+{off}]",
                    w.len(),
                    names.join(", ")
                );
            }
            if g > 0 {
                for (d, x) in sum.iter().zip(&part) {
                    emit!(self, "add.rn.f32 {d}, {d}, {x}");
                }
            }
        }
        sum
    }

    /// Writes a 2-D tile held in layout `l` to shared memory at byte `base`, row-major with a
    /// row pitch of `pitch` elements.
    fn stage(&mut self, regs: &[Reg], dtype: DType, l: LayoutId, base: usize, pitch: usize) {
        let s = mem_bytes(dtype);
        let layout = self.asg.layout(l).clone();
        let sm = self.smem_base();
        let addr = self.reg(Class::B32);
        match self.thread_coord(l, 0) {
            Some(t) => emit!(self, "mad.lo.s32 {addr}, {t}, {}, {sm}", pitch * s),
            None => emit!(self, "mov.u32 {addr}, {sm}"),
        }
        if let Some(t) = self.thread_coord(l, 1) {
            emit!(self, "mad.lo.s32 {addr}, {t}, {s}, {addr}");
        }
        let vw = stage_vector(&layout, s);
        let t = mem_type(dtype);
        for g in (0..regs.len()).step_by(vw) {
            let off = base + (layout.reg_coord(g, 0) * pitch + layout.reg_coord(g, 1)) * s;
            let names: Vec<String> = regs[g..g + vw].iter().map(Reg::to_string).collect();
            if vw == 1 {
                emit!(self, "st.shared.{t} [{addr}+{off}], {}", names[0]);
            } else {
                emit!(self, "st.shared.v{vw}.{t} [{addr}+{off}], {{{}}}", names.join(", "));
            }
        }
    }

    /// `p` with the row pitches of its staged tf32-dot operands (A in layout `la`, B in `lb`,
    /// the result in `lc`) chosen for the fewest shared-memory wavefronts over their staging
    /// stores and fragment loads (the stores of a transposed tile conflict at the planned pitch,
    /// which keeps the fragment loads conflict-free), within the planned bytes.
    fn staging_pitches(&self, p: MmaPlan, (la, lb): (LayoutId, LayoutId), lc: LayoutId) -> MmaPlan {
        if p.kind != MmaKind::Tf32 {
            return p;
        }
        let acc = self.asg.layout(lc);
        let steps = (p.k / p.kind.k_step()) >> k_group_warps(acc, p.k, p.kind).len();
        // The thread's m16 row tiles and n8 column tiles (each loads its fragments per k-step).
        let distinct = |dim: usize| -> usize {
            let first_regs = (0..acc.num_regs()).step_by(4);
            first_regs.map(|q| acc.reg_coord(q, dim)).collect::<BTreeSet<_>>().len()
        };
        let (m_tiles, n_tiles) = (distinct(0), distinct(1));
        // Fragment loads per thread and k-step: A's lane (g, t) at (g, t) and (g, t + 4) (8 rows
        // below too); with K permuted at (g, 2t) and (g, 2t + 1), in one load where the pitch
        // is even. B's at (k = t and t + 4, or 2t and 2t + 1, n = the column of position g),
        // one load for both n-tiles where they are paired (the pitch even).
        let permuted = p.interleaved();
        let a_loads = m_tiles * steps * 2;
        let a_pairs = a_fragment_cells(permuted);
        let gap = k_pair_gap(permuted);
        let a_next: Vec<(usize, usize)> = a_pairs.iter().map(|&(r, c)| (r, c + gap)).collect();
        let a_cost = |pitch: usize, s: usize| {
            let at = |lanes: &[(usize, usize)], width: usize| {
                StagedAccess {
                    lanes,
                    width,
                    count: a_loads,
                }
                .wavefronts(pitch, s)
            };
            if permuted && pitch.is_multiple_of(2) {
                at(&a_pairs, 2 * s)
            } else {
                at(&a_pairs, s) + at(&a_next, s)
            }
        };
        let positions = n_position_bits(acc, p.interleaved());
        let b_frag = b_fragment_cells(positions, permuted);
        let paired = paired_n_tiles(positions);
        let b_per_load = 1 + usize::from(paired);
        let b_cost = |pitch: usize, s: usize| {
            StagedAccess {
                lanes: &b_frag,
                width: b_per_load * s,
                count: n_tiles * steps * 2 / b_per_load,
            }
            .wavefronts(pitch, s)
        };
        // The pitch in `len ..= planned` (rows `align`-element aligned and aligned for the
        // staging stores' vectors) with the fewest wavefronts over those stores and the
        // fragment loads.
        let pitch = |st: Staged, l: LayoutId, len: usize, align: usize, loads: &dyn Fn(usize, usize) -> usize| {
            let layout = self.asg.layout(l);
            let s = st.elem.bytes();
            let vw = stage_vector(layout, s);
            let lanes = lane_coords(layout);
            let stores = StagedAccess {
                lanes: &lanes,
                width: vw * s,
                count: layout.num_regs() / vw,
            };
            staging_pitch(len, st.pitch, vw.max(align), |pitch| {
                stores.wavefronts(pitch, s) + loads(pitch, s)
            })
        };
        // An operand read from a buffer has the buffer's pitch.
        let a = Staged {
            pitch: match p.a.buffer {
                Some((buffer, _)) => self.buffer_pitch(buffer),
                None => pitch(p.a, la, p.k, 1, &a_cost),
            },
            ..p.a
        };
        let b = Staged {
            pitch: match p.b.buffer {
                Some((buffer, _)) => self.buffer_pitch(buffer),
                None => pitch(p.b, lb, p.n, b_per_load, &b_cost),
            },
            ..p.b
        };
        MmaPlan { a, b, ..p }
    }

    /// `origin + base + (row · pitch + col) · s` where `row` and `col` gather thread-id bits.
    fn frag_addr(
        &mut self,
        (sm, base): (Reg, usize),
        row: &[(u32, u32)],
        col: &[(u32, u32)],
        pitch: usize,
        s: usize,
    ) -> Reg {
        let (tr, tc) = (self.gather(row), self.gather(col));
        let addr = self.reg(Class::B32);
        match tr {
            Some(t) => emit!(self, "mad.lo.s32 {addr}, {t}, {}, {sm}", pitch * s),
            None => emit!(self, "mov.u32 {addr}, {sm}"),
        }
        if let Some(t) = tc {
            emit!(self, "mad.lo.s32 {addr}, {t}, {s}, {addr}");
        }
        if base > 0 {
            emit!(self, "add.s32 {addr}, {addr}, {base}");
        }
        addr
    }

    /// The A fragment of one m16 tile and k-step at byte `off` from the thread's address.
    fn a_frag(&mut self, p: MmaPlan, pa: Reg, off: usize, words: Tf32Words) -> Frag {
        match p.kind {
            MmaKind::Tf32 => {
                // a0, a2: (g, t), (g, t + 4) — with K permuted (g, 2t), (g, 2t + 1), in one load
                // where the pitch keeps them aligned; a1, a3 the same 8 rows below.
                let s = p.a.elem.bytes();
                let (down, gap) = (8 * p.a.pitch * s, k_pair_gap(p.interleaved()));
                if gap == 1 && p.a.pitch.is_multiple_of(2) {
                    let [a0, a2] = self.ld_tf32_pair(p.a.elem, pa, off);
                    let [a1, a3] = self.ld_tf32_pair(p.a.elem, pa, off + down);
                    return self.tf32_frag(&[a0, a1, a2, a3], words);
                }
                let right = gap * s;
                let offs = [off, off + down, off + right, off + down + right];
                let loaded = offs.map(|o| self.ld_tf32(p.a.elem, pa, o));
                self.tf32_frag(&loaded, words)
            }
            MmaKind::Bf16 | MmaKind::F16 => {
                let w = self.regs_n(Class::B32, 4);
                emit!(
                    self,
                    "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{}, {}, {}, {}}}, [{pa}+{off}]",
                    w[0],
                    w[1],
                    w[2],
                    w[3]
                );
                Frag { hi: w, lo: None }
            }
        }
    }

    /// The B fragments of the n8 tiles `cols` for one k-step at byte `off` from the thread's
    /// address (tiles loaded two at a time `pair` columns apart: by `ldmatrix`, or for tf32 the
    /// interleaved pairs of [`crate::backend::mma::acc_layout`]).
    fn b_frags(
        &mut self,
        p: MmaPlan,
        pb: Reg,
        off: usize,
        cols: &[usize],
        pair: Option<usize>,
        words: Tf32Words,
    ) -> Vec<Frag> {
        let s = p.b.elem.bytes();
        match (p.kind, pair) {
            // Interleaved pairs of n-tiles (columns n0 and n0 + 1, K permuted): b0 of both tiles
            // in one load at (k = 2t, n = n0 + the column of position g), b1 a row below.
            (MmaKind::Tf32, Some(_)) => {
                let mut out = Vec::with_capacity(cols.len());
                for c in cols.chunks(2) {
                    assert!(c.len() == 2 && c[1] == c[0] + 1, "paired n-tiles at columns {c:?}");
                    let o = off + c[0] * s;
                    let [b0, b0n] = self.ld_tf32_pair(p.b.elem, pb, o);
                    let [b1, b1n] = self.ld_tf32_pair(p.b.elem, pb, o + p.b.pitch * s);
                    out.push(self.tf32_frag(&[b0, b1], words));
                    out.push(self.tf32_frag(&[b0n, b1n], words));
                }
                out
            }
            (MmaKind::Tf32, None) => cols
                .iter()
                .map(|&n0| {
                    // b0: (k = t, n = g), b1: (t + 4, g) (K permuted: 2t, 2t + 1).
                    let o = off + n0 * s;
                    let gap = k_pair_gap(p.interleaved());
                    let loaded = [o, o + gap * p.b.pitch * s].map(|o| self.ld_tf32(p.b.elem, pb, o));
                    self.tf32_frag(&loaded, words)
                })
                .collect(),
            (_, Some(_)) => {
                let mut out = Vec::with_capacity(cols.len());
                for c in cols.chunks(2) {
                    let w = self.regs_n(Class::B32, 4);
                    emit!(
                        self,
                        "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{{}, {}, {}, {}}}, [{pb}+{}]",
                        w[0],
                        w[1],
                        w[2],
                        w[3],
                        off + c[0] * s
                    );
                    out.push(Frag {
                        hi: w[..2].to_vec(),
                        lo: None,
                    });
                    out.push(Frag {
                        hi: w[2..].to_vec(),
                        lo: None,
                    });
                }
                out
            }
            (_, None) => cols
                .iter()
                .map(|&n0| {
                    let w = self.regs_n(Class::B32, 2);
                    emit!(
                        self,
                        "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {{{}, {}}}, [{pb}+{}]",
                        w[0],
                        w[1],
                        off + n0 * s
                    );
                    Frag { hi: w, lo: None }
                })
                .collect(),
        }
    }

    /// Two adjacent staged elements of type `e` from shared memory, in one load, as f32 words.
    fn ld_tf32_pair(&mut self, e: Elem, addr: Reg, off: usize) -> [Reg; 2] {
        let w = [self.reg(Class::B32), self.reg(Class::B32)];
        match e {
            Elem::BF16 => {
                let x = self.reg(Class::B32);
                emit!(self, "ld.shared.b32 {x}, [{addr}+{off}]");
                emit!(self, "shl.b32 {}, {x}, 16", w[0]);
                emit!(self, "and.b32 {}, {x}, 0xffff0000", w[1]);
            }
            Elem::F16 => {
                let x = self.reg(Class::B32);
                let h = [self.reg(Class::B16), self.reg(Class::B16)];
                emit!(self, "ld.shared.b32 {x}, [{addr}+{off}]");
                emit!(self, "mov.b32 {{{}, {}}}, {x}", h[0], h[1]);
                emit!(self, "cvt.f32.f16 {}, {}", w[0], h[0]);
                emit!(self, "cvt.f32.f16 {}, {}", w[1], h[1]);
            }
            _ => emit!(self, "ld.shared.v2.b32 {{{}, {}}}, [{addr}+{off}]", w[0], w[1]),
        }
        w
    }

    /// One staged element of type `e` from shared memory as an f32 word.
    fn ld_tf32(&mut self, e: Elem, addr: Reg, off: usize) -> Reg {
        let w = self.reg(Class::B32);
        match e {
            Elem::BF16 => {
                let x = self.reg(Class::B32);
                emit!(self, "ld.shared.u16 {x}, [{addr}+{off}]");
                emit!(self, "shl.b32 {w}, {x}, 16");
            }
            Elem::F16 => {
                let h = self.reg(Class::B16);
                emit!(self, "ld.shared.b16 {h}, [{addr}+{off}]");
                emit!(self, "cvt.f32.f16 {w}, {h}");
            }
            _ => emit!(self, "ld.shared.b32 {w}, [{addr}+{off}]"),
        }
        w
    }

    /// A tf32 fragment of f32 words: the words themselves when exact, rounded once, or their
    /// 3xTF32 split `hi = tf32(x)`, `lo = x − hi` (exact; the tensor cores read its top 19
    /// bits, truncating it: `|lo| ≤ 2⁻¹¹|x|`, so the split's error stays below `2⁻²¹|x|`, one
    /// instruction per element less than rounding `lo` too).
    fn tf32_frag(&mut self, words: &[Reg], how: Tf32Words) -> Frag {
        let (mut hi, mut lo) = (Vec::new(), Vec::new());
        for x in words {
            if how == Tf32Words::Exact {
                hi.push(*x);
                continue;
            }
            if how == Tf32Words::Rounded {
                let h = self.reg(Class::B32);
                emit!(self, "cvt.rna.tf32.f32 {h}, {x}");
                hi.push(h);
                continue;
            }
            let h = self.round_tf32_bits(*x);
            let d = self.reg(Class::B32);
            emit!(self, "sub.f32 {d}, {x}, {h}");
            hi.push(h);
            lo.push(d);
        }
        let lo = (how == Tf32Words::Split).then_some(lo);
        Frag { hi, lo }
    }

    /// `x` rounded to tf32, to nearest with ties away from zero as `cvt.rna.tf32.f32` does, on
    /// its bits: add half a tf32 unit, clear the 13 low bits (two integer operations; a carry
    /// moves into the exponent as rounding up should, and infinities and quiet NaNs keep their
    /// class). ptxas expands `cvt.rna` into four instructions on sm_90, with a test for
    /// infinities that the 3xTF32 split does not need: `hi` of an infinity is that infinity and
    /// its `lo` a NaN either way.
    fn round_tf32_bits(&mut self, x: Reg) -> Reg {
        let (t, r) = (self.reg(Class::B32), self.reg(Class::B32));
        emit!(self, "add.s32 {t}, {x}, 4096");
        emit!(self, "and.b32 {r}, {t}, 0xffffe000");
        r
    }

    /// The bits of an f32 register in a b32 register (the class of mma operands).
    fn bits(&mut self, r: Reg) -> Reg {
        if r.class != Class::F32 {
            return r;
        }
        let w = self.reg(Class::B32);
        emit!(self, "mov.b32 {w}, {r}");
        w
    }

    /// `d = a · b + c` for one m16n8 tile.
    fn mma(&mut self, kind: MmaKind, d: &[Reg], a: &[Reg], b: &[Reg], c: &[Reg]) {
        let list = |rs: &[Reg]| rs.iter().map(Reg::to_string).collect::<Vec<_>>().join(", ");
        let (d, a, b, c) = (list(d), list(a), list(b), list(c));
        emit!(self, "{} {{{d}}}, {{{a}}}, {{{b}}}, {{{c}}}", kind.instruction());
    }
}

/// Elements per shared-memory access of a 2-D tile held in `layout` (elements of `s` bytes,
/// rows contiguous: a staging store, a shared buffer's read): the registers contiguous along
/// the row, at most 16 bytes.
pub(super) fn stage_vector(layout: &Layout, s: usize) -> usize {
    layout.contiguous_regs().min(16 / s).min(4)
}

/// The `(row, column)` offset of each lane of a warp in a 2-D `layout` (warp bits left out).
fn lane_coords(layout: &Layout) -> Vec<(usize, usize)> {
    (0..32)
        .map(|lane| (layout.lane_coord(lane, 0), layout.lane_coord(lane, 1)))
        .collect()
}
