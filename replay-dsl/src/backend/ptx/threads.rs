//! Thread-dependent parts of coordinates, computed once at kernel entry from `%tid.x`.

use super::regs::{Class, Reg};
use super::{Emitter, SMEM};
use crate::backend::layout::LayoutId;
use std::fmt::Write;

impl Emitter<'_> {
    /// `%tid.x`, read once in the prologue.
    pub(super) fn tid(&mut self) -> Reg {
        if let Some(t) = self.tid {
            return t;
        }
        let t = self.reg(Class::B32);
        let _ = writeln!(self.prologue, "\tmov.u32 {t}, %tid.x;");
        self.tid = Some(t);
        t
    }

    /// The address of the current shared-memory use's range (set by `smem_begin`).
    pub(super) fn smem_base(&self) -> Reg {
        self.smem_use.expect("shared memory addressed outside a use")
    }

    /// The staging scratch's address (the shared array's, past its buffers), read once in the
    /// prologue.
    pub(super) fn scratch_root(&mut self) -> Reg {
        if let Some(b) = self.scratch_root {
            return b;
        }
        let b = self.reg(Class::B32);
        let _ = writeln!(self.prologue, "\tmov.u32 {b}, {SMEM};");
        if self.scratch_base > 0 {
            let _ = writeln!(self.prologue, "\tadd.s32 {b}, {b}, {};", self.scratch_base);
        }
        self.scratch_root = Some(b);
        b
    }

    /// The shared array's address (where the shared buffers begin), read once in the prologue.
    pub(super) fn shared_array(&mut self) -> Reg {
        if let Some(b) = self.shared_array {
            return b;
        }
        let b = self.reg(Class::B32);
        let _ = writeln!(self.prologue, "\tmov.u32 {b}, {SMEM};");
        self.shared_array = Some(b);
        b
    }

    /// A `.b32` register whose bit `dst` is bit `src` of the thread id, for each `(src, dst)`;
    /// `None` if `pairs` is empty (the value is 0). Emitted in the prologue and cached.
    pub(super) fn gather(&mut self, pairs: &[(u32, u32)]) -> Option<Reg> {
        if pairs.is_empty() {
            return None;
        }
        let mut key = pairs.to_vec();
        key.sort_unstable();
        if let Some(r) = self.gathers.get(&key) {
            return Some(*r);
        }
        let tid = self.tid();
        // Runs of consecutive source bits that land on consecutive destination bits.
        let mut runs: Vec<(u32, u32, u32)> = Vec::new();
        for &(s, d) in &key {
            match runs.last_mut() {
                Some((s0, d0, len)) if *s0 + *len == s && *d0 + *len == d => *len += 1,
                _ => runs.push((s, d, 1)),
            }
        }
        let mut acc: Option<Reg> = None;
        for (s, d, len) in runs {
            let t = self.reg(Class::B32);
            if s == d {
                let _ = writeln!(self.prologue, "\tand.b32 {t}, {tid}, {};", ((1u64 << len) - 1) << s);
            } else {
                let _ = writeln!(self.prologue, "\tbfe.u32 {t}, {tid}, {s}, {len};");
                if d > 0 {
                    let _ = writeln!(self.prologue, "\tshl.b32 {t}, {t}, {d};");
                }
            }
            acc = Some(match acc {
                None => t,
                Some(a) => {
                    let o = self.reg(Class::B32);
                    let _ = writeln!(self.prologue, "\tor.b32 {o}, {a}, {t};");
                    o
                }
            });
        }
        let r = acc.expect("at least one run");
        self.gathers.insert(key, r);
        Some(r)
    }

    /// The thread-dependent part of the coordinate along `dim` in layout `l`.
    pub(super) fn thread_coord(&mut self, l: LayoutId, dim: usize) -> Option<Reg> {
        let pairs: Vec<(u32, u32)> = self
            .asg
            .layout(l)
            .thread_bits()
            .into_iter()
            .filter(|(_, b)| b.dim as usize == dim)
            .map(|(t, b)| (t, b.bit as u32))
            .collect();
        self.gather(&pairs)
    }

    /// The thread-dependent part of the row-major flat index in layout `l`, shifted left by
    /// `shift` bits.
    pub(super) fn thread_flat(&mut self, l: LayoutId, shift: u32) -> Option<Reg> {
        let layout = self.asg.layout(l);
        let pairs: Vec<(u32, u32)> = layout
            .thread_bits()
            .into_iter()
            .map(|(t, b)| (t, layout.flat_shift(b) + shift))
            .collect();
        self.gather(&pairs)
    }

    /// A predicate true in the threads owning the canonical copy of their elements in `l`
    /// (`None` when nothing replicates).
    pub(super) fn owner(&mut self, l: LayoutId) -> Option<Reg> {
        if let Some(p) = self.owners.get(&l) {
            return *p;
        }
        let mask = self.asg.layout(l).replicated_tid_mask() & ((self.k.num_warps * 32) - 1);
        let p = (mask != 0).then(|| {
            let tid = self.tid();
            let (t, p) = (self.reg(Class::B32), self.reg(Class::Pred));
            let _ = writeln!(
                self.prologue,
                "\tand.b32 {t}, {tid}, {mask};\n\tsetp.eq.u32 {p}, {t}, 0;"
            );
            p
        });
        self.owners.insert(l, p);
        p
    }

    /// The byte address `smem + base + (thread flat index << shift)` for layout `l`.
    pub(super) fn smem_addr(&mut self, l: LayoutId, shift: u32, base: usize) -> Reg {
        let b = self.smem_base();
        let a = self.reg(Class::B32);
        match self.thread_flat(l, shift) {
            Some(t) => emit!(self, "add.s32 {a}, {t}, {b}"),
            None => emit!(self, "mov.u32 {a}, {b}"),
        }
        if base > 0 {
            emit!(self, "add.s32 {a}, {a}, {base}");
        }
        a
    }

    /// `arange(n)` in layout `l`.
    pub(super) fn arange(&mut self, l: LayoutId) -> Vec<Reg> {
        let tp = self.thread_coord(l, 0);
        let n = self.asg.layout(l).num_regs();
        (0..n)
            .map(|r| {
                let c = self.asg.layout(l).reg_coord(r, 0);
                match (tp, c) {
                    (Some(t), 0) => t,
                    (Some(t), c) => {
                        let d = self.reg(Class::B32);
                        emit!(self, "add.s32 {d}, {t}, {c}");
                        self.note_offset(d, t, c as i64);
                        d
                    }
                    (None, c) => {
                        let d = self.reg(Class::B32);
                        emit!(self, "mov.b32 {d}, {c}");
                        self.note_constant(crate::types::Elem::I32, d, c as i64);
                        d
                    }
                }
            })
            .collect()
    }
}
