//! Constants and elementwise ops. f16, bf16 and f8e4m3 arithmetic runs in f32 and rounds back
//! after every op.

use super::regs::{f32_imm, Class, Reg};
use super::Emitter;
use crate::backend::layout::LayoutId;
use crate::error::{CompileError, ErrorKind};
use crate::ir::{BinaryOp, CmpOp, Const, Inst, Op, UnaryOp, Value};
use crate::types::{DType, Elem};

/// The PTX type suffix of integer arithmetic on `e`.
pub(super) fn int_type(e: Elem) -> &'static str {
    match e {
        Elem::I32 => "s32",
        Elem::U32 => "u32",
        _ => "s64",
    }
}

/// The PTX bit-type suffix of integer `e`.
fn bit_type(e: Elem) -> &'static str {
    if e == Elem::I64 {
        "b64"
    } else {
        "b32"
    }
}

impl Emitter<'_> {
    /// A register holding constant `c` of type `dtype`.
    pub(super) fn constant(&mut self, c: Const, dtype: DType) -> Result<Reg, CompileError> {
        let e = dtype.val().ok_or_else(|| self.internal("const", "pointer constant"))?;
        let d = self.reg(Class::of_elem(e));
        let (f, i) = match c {
            Const::Bool(b) => (b as i64 as f64, b as i64),
            Const::Int(i) => (i as f64, i),
            Const::Float(f) => (f, f as i64),
        };
        match e {
            Elem::Bool => emit!(self, "mov.pred {d}, {}", (i != 0) as u8),
            Elem::I32 | Elem::U32 => emit!(self, "mov.b32 {d}, 0x{:08X}", i as u32),
            Elem::I64 => emit!(self, "mov.b64 {d}, 0x{:016X}", i as u64),
            _ => {}
        }
        if let Const::Int(i) = c {
            self.note_constant(e, d, i);
        }
        match e {
            Elem::Bool | Elem::I32 | Elem::U32 | Elem::I64 => {}
            Elem::F32 => emit!(self, "mov.f32 {d}, {}", f32_imm(f as f32)),
            Elem::F16 => emit!(self, "mov.b16 {d}, 0x{:04X}", half::f16::from_f64(f).to_bits()),
            Elem::BF16 => emit!(self, "mov.b16 {d}, 0x{:04X}", half::bf16::from_f64(f).to_bits()),
            Elem::F8E4M3 => emit!(self, "mov.b16 {d}, 0x{:04X}", float8::F8E4M3::from_f64(f).to_bits()),
        }
        Ok(d)
    }

    /// `x` (of float type `e`) widened to f32.
    pub(super) fn widen_f32(&mut self, e: Elem, x: Reg) -> Reg {
        if e == Elem::F32 {
            return x;
        }
        let d = self.reg(Class::F32);
        match e {
            Elem::F16 => emit!(self, "cvt.f32.f16 {d}, {x}"),
            Elem::BF16 => emit!(self, "cvt.f32.bf16 {d}, {x}"),
            _ => {
                let (w, lo, hi) = (self.reg(Class::B32), self.reg(Class::B16), self.reg(Class::B16));
                emit!(self, "cvt.rn.f16x2.e4m3x2 {w}, {x}");
                emit!(self, "mov.b32 {{{lo}, {hi}}}, {w}");
                emit!(self, "cvt.f32.f16 {d}, {lo}");
            }
        }
        d
    }

    /// f32 `x` rounded to float type `e` (nearest even; f8e4m3 saturates).
    pub(super) fn round_from_f32(&mut self, e: Elem, x: Reg) -> Reg {
        if e == Elem::F32 {
            return x;
        }
        let d = self.reg(Class::B16);
        match e {
            Elem::F16 => emit!(self, "cvt.rn.f16.f32 {d}, {x}"),
            Elem::BF16 => emit!(self, "cvt.rn.bf16.f32 {d}, {x}"),
            _ => emit!(self, "cvt.rn.satfinite.e4m3x2.f32 {d}, {x}, {x}"),
        }
        d
    }

    /// An elementwise op's result in layout `l`.
    pub(super) fn elementwise(&mut self, inst: &Inst, r: Value, l: LayoutId) -> Result<Vec<Reg>, CompileError> {
        let ops: Vec<Vec<Reg>> = inst
            .op
            .operands()
            .into_iter()
            .map(|o| self.operand(o, l))
            .collect::<Result<_, _>>()?;
        let n = self.asg.layout(l).num_regs();
        self.new_op_bases();
        let out_ty = self.ty(r).dtype;
        let in_ty = self.ty(inst.op.operands()[0]).dtype;
        let mut out = Vec::with_capacity(n);
        for (i, &x) in ops[0].iter().enumerate().take(n) {
            let v = match &inst.op {
                Op::Unary(u, _) => self.unary(*u, elem(out_ty), x)?,
                Op::Binary(b, _, _) => self.binary(*b, elem(out_ty), x, ops[1][i])?,
                Op::Cmp(c, _, _) => self.cmp(*c, elem(in_ty), x, ops[1][i]),
                Op::Select(..) => self.select(Class::of(out_ty), x, ops[1][i], ops[2][i]),
                Op::Cast(_, crate::ir::Rounding::Nearest) => self.cast(elem(in_ty), elem(out_ty), x),
                Op::Cast(_, crate::ir::Rounding::Stochastic(_)) => self.cast_stochastic(elem(out_ty), x, ops[1][i]),
                Op::AddPtr(..) => self.addptr(out_ty, x, ops[1][i], elem(self.ty(inst.op.operands()[1]).dtype)),
                op => return Err(self.internal(&op.mnemonic(), "not elementwise")),
            };
            out.push(v);
        }
        Ok(out)
    }

    fn unsupported(&self, what: String) -> CompileError {
        self.err("elementwise", ErrorKind::Unsupported(what))
    }

    fn unary(&mut self, op: UnaryOp, e: Elem, x: Reg) -> Result<Reg, CompileError> {
        if e.is_float() {
            let f = self.widen_f32(e, x);
            let d = match op {
                UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Exp2 | UnaryOp::Log2 | UnaryOp::Sqrt | UnaryOp::Rsqrt => {
                    let d = self.reg(Class::F32);
                    let inst = match op {
                        UnaryOp::Neg => "neg.f32",
                        UnaryOp::Abs => "abs.f32",
                        UnaryOp::Exp2 => "ex2.approx.f32",
                        UnaryOp::Log2 => "lg2.approx.f32",
                        UnaryOp::Sqrt => "sqrt.rn.f32",
                        _ => "rsqrt.approx.f32",
                    };
                    emit!(self, "{inst} {d}, {f}");
                    d
                }
                UnaryOp::Exp => self.exp_f32(f),
                UnaryOp::Log => self.log_f32(f),
                UnaryOp::Softplus => self.softplus_f32(f),
                UnaryOp::Sigmoid => self.sigmoid_f32(f),
                UnaryOp::Silu => {
                    let s = self.sigmoid_f32(f);
                    let d = self.reg(Class::F32);
                    emit!(self, "mul.rn.f32 {d}, {f}, {s}");
                    d
                }
                UnaryOp::Tanh => self.tanh_f32(f),
                UnaryOp::Not => return Err(self.unsupported(format!("not on {e}"))),
            };
            return Ok(self.round_from_f32(e, d));
        }
        let d = self.reg(x.class);
        match (op, e) {
            (UnaryOp::Not, Elem::Bool) => emit!(self, "not.pred {d}, {x}"),
            (UnaryOp::Not, _) if e.is_int() => emit!(self, "not.{} {d}, {x}", bit_type(e)),
            (UnaryOp::Neg, Elem::I64) => emit!(self, "neg.s64 {d}, {x}"),
            (UnaryOp::Neg, _) if e.is_int() => {
                // `-x` as `~x + 1`: ptxas 13.0 (sm_90a) folds a `neg.s32` (or `sub.s32 0, x`)
                // feeding a chain of two `max.s32` / `min.s32` into one three-way `VIMNMX3` and
                // drops the negation (`max(a, max(b, -c))` gives `max(a, b, c)`).
                let t = self.reg(x.class);
                emit!(self, "not.b32 {t}, {x}");
                emit!(self, "add.s32 {d}, {t}, 1");
            }
            (UnaryOp::Abs, Elem::U32) => return Ok(x),
            (UnaryOp::Abs, _) if e.is_int() => emit!(self, "abs.{} {d}, {x}", int_type(e)),
            _ => return Err(self.unsupported(format!("{op:?} on {e}"))),
        }
        Ok(d)
    }

    fn binary(&mut self, op: BinaryOp, e: Elem, a: Reg, b: Reg) -> Result<Reg, CompileError> {
        if e.is_float() {
            let (x, y) = (self.widen_f32(e, a), self.widen_f32(e, b));
            let inst = match op {
                BinaryOp::Add => "add.rn.f32",
                BinaryOp::Sub => "sub.rn.f32",
                BinaryOp::Mul => "mul.rn.f32",
                BinaryOp::Div => "div.rn.f32",
                BinaryOp::Min => "min.NaN.f32",
                BinaryOp::Max => "max.NaN.f32",
                _ => return Err(self.unsupported(format!("{op:?} on {e}"))),
            };
            let d = self.reg(Class::F32);
            emit!(self, "{inst} {d}, {x}, {y}");
            return Ok(self.round_from_f32(e, d));
        }
        if matches!(op, BinaryOp::Div | BinaryOp::Rem) && e == Elem::I32 {
            // By a constant ≥ 2 without a division instruction (see `divide`).
            let rem = op == BinaryOp::Rem;
            if let Some(q) = self.constant_of(b).and_then(|c| self.div_by_constant_i32(rem, a, c)) {
                return Ok(q);
            }
        }
        let d = self.reg(a.class);
        if e == Elem::Bool {
            let inst = match op {
                BinaryOp::And => "and",
                BinaryOp::Or => "or",
                BinaryOp::Xor => "xor",
                _ => return Err(self.unsupported(format!("{op:?} on bool"))),
            };
            emit!(self, "{inst}.pred {d}, {a}, {b}");
            return Ok(d);
        }
        let (t, bt) = (int_type(e), bit_type(e));
        match op {
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul => {
                let name = match op {
                    BinaryOp::Add => "add",
                    BinaryOp::Sub => "sub",
                    _ => "mul.lo",
                };
                emit!(self, "{name}.{t} {d}, {a}, {b}");
                self.note_binary(op, e, a, b, d);
            }
            BinaryOp::Div | BinaryOp::Rem => {
                // A constant divisor (of a type `divide` leaves alone) as an immediate.
                let name = if op == BinaryOp::Rem { "rem" } else { "div" };
                match self.constant_of(b).filter(|&c| c != 0) {
                    Some(c) => emit!(self, "{name}.{t} {d}, {a}, {c}"),
                    None => emit!(self, "{name}.{t} {d}, {a}, {b}"),
                }
            }
            BinaryOp::Min => emit!(self, "min.{t} {d}, {a}, {b}"),
            BinaryOp::Max => emit!(self, "max.{t} {d}, {a}, {b}"),
            BinaryOp::And => emit!(self, "and.{bt} {d}, {a}, {b}"),
            BinaryOp::Or => emit!(self, "or.{bt} {d}, {a}, {b}"),
            BinaryOp::Xor => emit!(self, "xor.{bt} {d}, {a}, {b}"),
            BinaryOp::Shl | BinaryOp::Shr => {
                // Shift amounts are .u32 and clamp at the width; clamp 64-bit amounts first.
                let amount = if e == Elem::I64 {
                    let (c, s) = (self.reg(Class::B64), self.reg(Class::B32));
                    emit!(self, "min.u64 {c}, {b}, 64");
                    emit!(self, "cvt.u32.u64 {s}, {c}");
                    s
                } else {
                    b
                };
                let inst = if op == BinaryOp::Shl {
                    format!("shl.{bt}")
                } else {
                    format!("shr.{t}")
                };
                emit!(self, "{inst} {d}, {a}, {amount}");
            }
        }
        Ok(d)
    }

    fn cmp(&mut self, op: CmpOp, e: Elem, a: Reg, b: Reg) -> Reg {
        let d = self.reg(Class::Pred);
        let name = |ne: &'static str| match op {
            CmpOp::Eq => "eq",
            CmpOp::Ne => ne,
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        };
        if e.is_float() {
            let (x, y) = (self.widen_f32(e, a), self.widen_f32(e, b));
            emit!(self, "setp.{}.f32 {d}, {x}, {y}", name("neu"));
        } else if e == Elem::Bool {
            let (x, y) = (self.reg(Class::B32), self.reg(Class::B32));
            emit!(self, "selp.u32 {x}, 1, 0, {a}");
            emit!(self, "selp.u32 {y}, 1, 0, {b}");
            emit!(self, "setp.{}.u32 {d}, {x}, {y}", name("ne"));
        } else {
            emit!(self, "setp.{}.{} {d}, {a}, {b}", name("ne"), int_type(e));
        }
        d
    }

    /// `c ? a : b` on registers of class `class`.
    pub(super) fn select(&mut self, class: Class, c: Reg, a: Reg, b: Reg) -> Reg {
        let d = self.reg(class);
        if class == Class::Pred {
            let (t, u) = (self.reg(Class::Pred), self.reg(Class::Pred));
            emit!(self, "and.pred {t}, {c}, {a}");
            emit!(self, "not.pred {u}, {c}");
            emit!(self, "and.pred {u}, {u}, {b}");
            emit!(self, "or.pred {d}, {t}, {u}");
        } else {
            emit!(self, "selp.{} {d}, {a}, {b}, {c}", class.mov_type());
        }
        d
    }

    fn addptr(&mut self, ptr_ty: DType, p: Reg, o: Reg, off: Elem) -> Reg {
        let s = ptr_ty.pointee().map_or(1, Elem::bytes);
        let d = self.reg(Class::B64);
        match off {
            Elem::I64 => emit!(self, "mad.lo.s64 {d}, {o}, {s}, {p}"),
            Elem::U32 => emit!(self, "mad.wide.u32 {d}, {o}, {s}, {p}"),
            _ => emit!(self, "mad.wide.s32 {d}, {o}, {s}, {p}"),
        }
        self.note_addptr(s, off, p, o, d);
        d
    }
}

/// The element type of a value type (pointers never reach the arithmetic paths).
pub(super) fn elem(dtype: DType) -> Elem {
    match dtype {
        DType::Val(e) => e,
        DType::Ptr(_) => Elem::I64,
    }
}
