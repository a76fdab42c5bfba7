//! Constant offsets of integer and pointer registers.
//!
//! The emitter unrolls a tile into one register per element, so a `[BV, DK]` tile of pointers
//! is `BV·DK/threads` 64-bit addresses, each computed on its own. Most of them differ from one
//! another by a compile-time constant (the register bits of the layout only add constants), so
//! the emitter records facts `reg = base + offset` while it emits integer arithmetic and
//! pointer offsets, and prints addresses as `[base+offset]`: a tile's accesses then share a
//! handful of base registers instead of holding one 64-bit address per access live.
//!
//! Facts are exact in two's-complement arithmetic for `add`, `sub` and `mul` by a constant;
//! widening an i32 offset to 64 bits (`mad.wide.s32`) is exact as long as the offset does not
//! overflow i32, which docs/SEMANTICS.md requires of pointer offsets. The base instructions
//! are emitted beside the ordinary ones (the same computation when the offset is 0); ptxas
//! merges duplicates and drops whichever ends up unused.

use super::elementwise::int_type;
use super::regs::{Class, Reg};
use super::Emitter;
use crate::ir::BinaryOp;
use crate::types::Elem;

/// `reg = base + offset` (elements for integers, bytes for pointers); `base: None` is the
/// constant `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Affine {
    base: Option<Reg>,
    offset: i64,
}

/// A base register derived from others, shared by the elements of one op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum BaseKey {
    /// `a + b`.
    Add(Reg, Reg),
    /// `a − b`.
    Sub(Reg, Reg),
    /// `a · k`.
    Mul(Reg, i64),
    /// `p + o · bytes` (a pointer plus an i32 or i64 offset).
    Ptr(Reg, Reg, usize),
}

/// Offsets kept must fit an address immediate (and keep i64 arithmetic far from overflow).
const LIMIT: i64 = 1 << 31;

fn fits(x: i64) -> bool {
    (-LIMIT..LIMIT).contains(&x)
}

impl Emitter<'_> {
    /// What is known of `r`: a recorded fact, else `r + 0`.
    fn affine(&self, r: Reg) -> Affine {
        self.offsets.get(&r).copied().unwrap_or(Affine {
            base: Some(r),
            offset: 0,
        })
    }

    fn record(&mut self, d: Reg, base: Option<Reg>, offset: i64) {
        if fits(offset) {
            self.offsets.insert(d, Affine { base, offset });
        }
    }

    /// Forgets the derived bases of the previous op (each op emits its own, so a base is
    /// always defined where it is used).
    pub(super) fn new_op_bases(&mut self) {
        self.bases.clear();
    }

    /// The register of a derived base, emitting it (`emit` writes `d`) the first time.
    fn derived(&mut self, key: BaseKey, class: Class, emit: impl FnOnce(&mut Self, Reg)) -> Reg {
        if let Some(&r) = self.bases.get(&key) {
            return r;
        }
        let d = self.reg(class);
        emit(self, d);
        self.bases.insert(key, d);
        d
    }

    /// The constant integer register `r` holds, when known.
    pub(super) fn constant_of(&self, r: Reg) -> Option<i64> {
        match self.offsets.get(&r) {
            Some(Affine { base: None, offset }) => Some(*offset),
            _ => None,
        }
    }

    /// Records that integer register `d` holds the constant `c`.
    pub(super) fn note_constant(&mut self, e: Elem, d: Reg, c: i64) {
        if matches!(e, Elem::I32 | Elem::I64) {
            self.record(d, None, c);
        }
    }

    /// Records `d = base + c` for an i32 register `d` emitted as exactly that.
    pub(super) fn note_offset(&mut self, d: Reg, base: Reg, c: i64) {
        self.record(d, Some(base), c);
    }

    /// Records what integer op `d = a op b` (type `e`) keeps of its operands' offsets.
    pub(super) fn note_binary(&mut self, op: BinaryOp, e: Elem, a: Reg, b: Reg, d: Reg) {
        if !matches!(e, Elem::I32 | Elem::I64) {
            return;
        }
        let (x, y) = (self.affine(a), self.affine(b));
        let t = int_type(e);
        let class = a.class;
        let fact = match op {
            BinaryOp::Add => {
                let base = match (x.base, y.base) {
                    (None, None) => None,
                    (Some(r), None) | (None, Some(r)) => Some(r),
                    (Some(p), Some(q)) => {
                        let (p, q) = if p.n <= q.n { (p, q) } else { (q, p) };
                        Some(self.derived(BaseKey::Add(p, q), class, |s, r| emit!(s, "add.{t} {r}, {p}, {q}")))
                    }
                };
                (base, x.offset + y.offset)
            }
            BinaryOp::Sub => {
                let base = match (x.base, y.base) {
                    (None, None) => None,
                    (Some(r), None) => Some(r),
                    (Some(p), Some(q)) => {
                        Some(self.derived(BaseKey::Sub(p, q), class, |s, r| emit!(s, "sub.{t} {r}, {p}, {q}")))
                    }
                    (None, Some(_)) => return,
                };
                (base, x.offset - y.offset)
            }
            BinaryOp::Mul => {
                let (v, k) = match (x.base, y.base) {
                    (_, None) => (x, y.offset),
                    (None, _) => (y, x.offset),
                    _ => return,
                };
                if !fits(k) {
                    return;
                }
                let base = v
                    .base
                    .map(|p| self.derived(BaseKey::Mul(p, k), class, |s, r| emit!(s, "mul.lo.{t} {r}, {p}, {k}")));
                (base, v.offset * k)
            }
            _ => return,
        };
        self.record(d, fact.0, fact.1);
    }

    /// Records what `d = p + o · bytes` keeps of its operands' offsets (`off`: the offset's
    /// type; u32 offsets are left alone).
    pub(super) fn note_addptr(&mut self, bytes: usize, off: Elem, p: Reg, o: Reg, d: Reg) {
        let (x, y) = (self.affine(p), self.affine(o));
        let Some(pb) = x.base else { return };
        if !matches!(off, Elem::I32 | Elem::I64) {
            return;
        }
        let base = match y.base {
            None => pb,
            Some(ob) => self.derived(BaseKey::Ptr(pb, ob, bytes), Class::B64, |s, r| match off {
                Elem::I64 => emit!(s, "mad.lo.s64 {r}, {ob}, {bytes}, {pb}"),
                _ => emit!(s, "mad.wide.s32 {r}, {ob}, {bytes}, {pb}"),
            }),
        };
        self.record(d, Some(base), x.offset + y.offset * bytes as i64);
    }

    /// The address operand (inside `[..]`) of pointer register `p`: its base and immediate
    /// offset when known.
    pub(super) fn address(&self, p: Reg) -> String {
        match self.offsets.get(&p) {
            Some(Affine {
                base: Some(b),
                offset: 0,
            }) => b.to_string(),
            Some(Affine { base: Some(b), offset }) => format!("{b}+{offset}"),
            _ => p.to_string(),
        }
    }
}
