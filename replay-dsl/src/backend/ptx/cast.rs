//! Casts between element types, including stochastic rounding of f32 to f16/bf16/f8e4m3.

use super::elementwise::int_type;
use super::regs::{f32_imm, f64_imm, Class, Reg};
use super::Emitter;
use crate::compile::Target;
use crate::types::Elem;

impl Emitter<'_> {
    /// `x: from` converted to `to` with round-to-nearest (float→int truncates and saturates,
    /// NaN→0; int→int wraps; anything→bool is `x != 0`).
    pub(super) fn cast(&mut self, from: Elem, to: Elem, x: Reg) -> Reg {
        if from == to {
            return x;
        }
        match (from, to) {
            (Elem::Bool, t) if t.is_float() => {
                let f = self.reg(Class::F32);
                emit!(self, "selp.f32 {f}, {}, {}, {x}", f32_imm(1.0), f32_imm(0.0));
                self.round_from_f32(t, f)
            }
            (Elem::Bool, t) => {
                let d = self.reg(Class::of_elem(t));
                emit!(
                    self,
                    "selp.{} {d}, 1, 0, {x}",
                    if t == Elem::I64 { "b64" } else { "b32" }
                );
                d
            }
            (f, Elem::Bool) => {
                let d = self.reg(Class::Pred);
                if f.is_float() {
                    let y = self.widen_f32(f, x);
                    emit!(self, "setp.neu.f32 {d}, {y}, {}", f32_imm(0.0));
                } else {
                    emit!(self, "setp.ne.{} {d}, {x}, 0", int_type(f));
                }
                d
            }
            (f, t) if f.is_float() && t.is_float() => {
                let y = self.widen_f32(f, x);
                self.round_from_f32(t, y)
            }
            (f, t) if f.is_int() && t.is_float() => {
                if t == Elem::F8E4M3 {
                    let y = self.cast(f, Elem::F32, x);
                    return self.round_from_f32(t, y);
                }
                let d = self.reg(Class::of_elem(t));
                let tn = match t {
                    Elem::F32 => "f32",
                    Elem::F16 => "f16",
                    _ => "bf16",
                };
                emit!(self, "cvt.rn.{tn}.{} {d}, {x}", int_type(f));
                d
            }
            (f, t) if f.is_float() => {
                let y = self.widen_f32(f, x);
                let d = self.reg(Class::of_elem(t));
                emit!(self, "cvt.rzi.{}.f32 {d}, {y}", int_type(t));
                d
            }
            (Elem::I32 | Elem::U32, Elem::I32 | Elem::U32) => x,
            (f, Elem::I64) => {
                let d = self.reg(Class::B64);
                emit!(
                    self,
                    "cvt.{}.{} {d}, {x}",
                    if f == Elem::I32 { "s64" } else { "u64" },
                    int_type(f)
                );
                d
            }
            _ => {
                let d = self.reg(Class::B32);
                emit!(self, "cvt.u32.u64 {d}, {x}");
                d
            }
        }
    }

    /// f32 `x` rounded stochastically to `to` (f16, bf16 or f8e4m3) with random bits `bits`.
    pub(super) fn cast_stochastic(&mut self, to: Elem, x: Reg, bits: Reg) -> Reg {
        if self.target == Target::Sm100 {
            self.need_version((8, 7));
            let w = self.reg(Class::B32);
            let d = self.reg(Class::B16);
            if to == Elem::F8E4M3 {
                emit!(self, "cvt.rs.satfinite.e4m3x4.f32 {w}, {{{x}, {x}, {x}, {x}}}, {bits}");
                emit!(self, "cvt.u16.u32 {d}, {w}");
            } else {
                let hi = self.reg(Class::B16);
                emit!(
                    self,
                    "cvt.rs.{}x2.f32 {w}, {x}, {x}, {bits}",
                    if to == Elem::F16 { "f16" } else { "bf16" }
                );
                emit!(self, "mov.b32 {{{d}, {hi}}}, {w}");
            }
            return d;
        }
        self.stochastic_software(to, x, bits)
    }

    /// The exact algorithm of SEMANTICS.md: `lo` = |x| rounded toward zero, `hi` the next
    /// value away from zero, `p = floor((|x|−lo)/(hi−lo)·2^32)`, result `hi` iff `bits < p`.
    fn stochastic_software(&mut self, to: Elem, x: Reg, bits: Reg) -> Reg {
        let a = self.reg(Class::F32);
        emit!(self, "abs.f32 {a}, {x}");
        let (lo, hi) = (self.reg(Class::F32), self.reg(Class::F32));
        match to {
            Elem::F16 => {
                let (lh, hh) = (self.reg(Class::B16), self.reg(Class::B16));
                emit!(self, "cvt.rz.f16.f32 {lh}, {a}");
                emit!(self, "add.u16 {hh}, {lh}, 1");
                emit!(self, "cvt.f32.f16 {lo}, {lh}");
                emit!(self, "cvt.f32.f16 {hi}, {hh}");
            }
            Elem::BF16 => {
                let (ab, lb, hb) = (self.reg(Class::B32), self.reg(Class::B32), self.reg(Class::B32));
                emit!(self, "mov.b32 {ab}, {a}");
                emit!(self, "and.b32 {lb}, {ab}, 0xFFFF0000");
                emit!(self, "add.u32 {hb}, {lb}, 0x10000");
                emit!(self, "mov.b32 {lo}, {lb}");
                emit!(self, "mov.b32 {hi}, {hb}");
            }
            _ => {
                // e4m3: ulp = 2^(max(e, -6) - 3); values saturate at 448.
                let (ab, e, ub) = (self.reg(Class::B32), self.reg(Class::B32), self.reg(Class::B32));
                let (ulp, q) = (self.reg(Class::F32), self.reg(Class::F32));
                emit!(self, "mov.b32 {ab}, {a}");
                emit!(self, "shr.u32 {e}, {ab}, 23");
                emit!(self, "sub.s32 {e}, {e}, 127");
                emit!(self, "max.s32 {e}, {e}, -6");
                emit!(self, "add.s32 {ub}, {e}, 124");
                emit!(self, "shl.b32 {ub}, {ub}, 23");
                emit!(self, "mov.b32 {ulp}, {ub}");
                emit!(self, "div.rn.f32 {q}, {a}, {ulp}");
                emit!(self, "cvt.rzi.f32.f32 {q}, {q}");
                emit!(self, "mul.rn.f32 {lo}, {q}, {ulp}");
                emit!(self, "min.f32 {lo}, {lo}, {}", f32_imm(448.0));
                emit!(self, "add.rn.f32 {hi}, {lo}, {ulp}");
                emit!(self, "min.f32 {hi}, {hi}, {}", f32_imm(448.0));
            }
        }
        let (diff, gap) = (self.reg(Class::F32), self.reg(Class::F32));
        emit!(self, "sub.rn.f32 {diff}, {a}, {lo}");
        emit!(self, "sub.rn.f32 {gap}, {hi}, {lo}");
        let (dd, gd, rd) = (self.reg(Class::F64), self.reg(Class::F64), self.reg(Class::F64));
        emit!(self, "cvt.f64.f32 {dd}, {diff}");
        emit!(self, "cvt.f64.f32 {gd}, {gap}");
        emit!(self, "div.rn.f64 {dd}, {dd}, {gd}");
        emit!(self, "mul.rn.f64 {dd}, {dd}, {}", f64_imm(4294967296.0));
        emit!(self, "cvt.rmi.f64.f64 {dd}, {dd}");
        emit!(self, "cvt.rn.f64.u32 {rd}, {bits}");
        let (up, exact, fin) = (self.reg(Class::Pred), self.reg(Class::Pred), self.reg(Class::Pred));
        emit!(self, "setp.lt.f64 {up}, {rd}, {dd}");
        let m = self.select(Class::F32, up, hi, lo);
        let s = self.reg(Class::F32);
        emit!(self, "copysign.f32 {s}, {x}, {m}");
        let sr = self.round_from_f32(to, s);
        let rn = self.round_from_f32(to, x);
        emit!(self, "setp.eq.f32 {exact}, {lo}, {a}");
        emit!(self, "testp.finite.f32 {fin}, {x}");
        emit!(self, "not.pred {fin}, {fin}");
        emit!(self, "or.pred {exact}, {exact}, {fin}");
        self.select(Class::B16, exact, rn, sr)
    }
}
