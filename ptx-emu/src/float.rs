//! Floating-point semantics: f32/f64 arithmetic as PTX defines it (canonical NaNs, `.ftz`,
//! `min`/`max` NaN rules) and every `cvt` rounding to f16, bf16, tf32, f32 and e4m3.

use crate::inst::{Cmp, Conv, FOp, FUnOp, Int, Num, Packed, Rnd};

/// The canonical f32 NaN PTX arithmetic produces.
const NAN32: u32 = 0x7FFF_FFFF;
/// The canonical f64 NaN.
const NAN64: u64 = 0x7FFF_FFFF_FFFF_FFFF;

#[inline(always)]
fn flush32(x: f32, ftz: bool) -> f32 {
    if ftz && x.is_subnormal() {
        0.0f32.copysign(x)
    } else {
        x
    }
}

#[inline(always)]
fn out32(r: f32, ftz: bool) -> u64 {
    if r.is_nan() {
        NAN32 as u64
    } else {
        flush32(r, ftz).to_bits() as u64
    }
}

/// `min` as PTX defines it: a NaN operand is ignored, −0 is below +0.
#[inline(always)]
fn fmin<T: PartialOrd + Copy>(x: T, y: T, nan: impl Fn(T) -> bool, neg: impl Fn(T) -> bool) -> T {
    if nan(x) {
        y
    } else if nan(y) || x < y || (x == y && neg(x)) {
        x
    } else {
        y
    }
}

#[inline(always)]
fn fmax<T: PartialOrd + Copy>(x: T, y: T, nan: impl Fn(T) -> bool, neg: impl Fn(T) -> bool) -> T {
    if nan(x) {
        y
    } else if nan(y) || x > y || (x == y && !neg(x)) {
        x
    } else {
        y
    }
}

/// A two-operand f32 operation on raw bits.
#[inline(always)]
pub(crate) fn f32_bin(op: FOp, ftz: bool, a: u64, b: u64) -> u64 {
    let (x, y) = (
        flush32(f32::from_bits(a as u32), ftz),
        flush32(f32::from_bits(b as u32), ftz),
    );
    let r = match op {
        FOp::Add => x + y,
        FOp::Sub => x - y,
        FOp::Mul => x * y,
        FOp::Div => x / y,
        FOp::Min => fmin(x, y, f32::is_nan, f32::is_sign_negative),
        FOp::Max => fmax(x, y, f32::is_nan, f32::is_sign_negative),
        FOp::MinNaN if x.is_nan() || y.is_nan() => f32::NAN,
        FOp::MaxNaN if x.is_nan() || y.is_nan() => f32::NAN,
        FOp::MinNaN => fmin(x, y, f32::is_nan, f32::is_sign_negative),
        FOp::MaxNaN => fmax(x, y, f32::is_nan, f32::is_sign_negative),
        FOp::Copysign => return (b as u32 & 0x7FFF_FFFF | a as u32 & 0x8000_0000) as u64,
    };
    out32(r, ftz)
}

/// A one-operand f32 operation on raw bits (approximations computed correctly rounded).
#[inline(always)]
pub(crate) fn f32_un(op: FUnOp, ftz: bool, a: u64) -> u64 {
    let a = a as u32;
    let x = flush32(f32::from_bits(a), ftz);
    let r = match op {
        FUnOp::Neg => return flush32(f32::from_bits(x.to_bits() ^ 0x8000_0000), ftz).to_bits() as u64,
        FUnOp::Abs => return flush32(f32::from_bits(x.to_bits() & 0x7FFF_FFFF), ftz).to_bits() as u64,
        FUnOp::Sqrt => x.sqrt(),
        FUnOp::Rcp => 1.0 / x,
        op => f64_un_value(op, x as f64) as f32,
    };
    out32(r, ftz)
}

fn f64_un_value(op: FUnOp, x: f64) -> f64 {
    match op {
        FUnOp::Neg => -x,
        FUnOp::Abs => x.abs(),
        FUnOp::Ex2 => x.exp2(),
        FUnOp::Lg2 => x.log2(),
        FUnOp::Rsqrt => 1.0 / x.sqrt(),
        FUnOp::Sqrt => x.sqrt(),
        FUnOp::Rcp => 1.0 / x,
        FUnOp::Sin => x.sin(),
        FUnOp::Cos => x.cos(),
        FUnOp::Tanh => x.tanh(),
    }
}

#[inline(always)]
fn out64(r: f64) -> u64 {
    if r.is_nan() {
        NAN64
    } else {
        r.to_bits()
    }
}

/// A two-operand f64 operation on raw bits.
pub(crate) fn f64_bin(op: FOp, a: u64, b: u64) -> u64 {
    let (x, y) = (f64::from_bits(a), f64::from_bits(b));
    let r = match op {
        FOp::Add => x + y,
        FOp::Sub => x - y,
        FOp::Mul => x * y,
        FOp::Div => x / y,
        FOp::Min => fmin(x, y, f64::is_nan, f64::is_sign_negative),
        FOp::Max => fmax(x, y, f64::is_nan, f64::is_sign_negative),
        FOp::MinNaN | FOp::MaxNaN if x.is_nan() || y.is_nan() => f64::NAN,
        FOp::MinNaN => fmin(x, y, f64::is_nan, f64::is_sign_negative),
        FOp::MaxNaN => fmax(x, y, f64::is_nan, f64::is_sign_negative),
        FOp::Copysign => return b & !(1 << 63) | a & (1 << 63),
    };
    out64(r)
}

/// A one-operand f64 operation on raw bits.
pub(crate) fn f64_un(op: FUnOp, a: u64) -> u64 {
    match op {
        FUnOp::Neg => a ^ (1 << 63),
        FUnOp::Abs => a & !(1 << 63),
        op => out64(f64_un_value(op, f64::from_bits(a))),
    }
}

/// `fma.rn.f32`.
#[inline(always)]
pub(crate) fn f32_fma(ftz: bool, a: u64, b: u64, c: u64) -> u64 {
    let f = |v: u64| flush32(f32::from_bits(v as u32), ftz);
    out32(f(a).mul_add(f(b), f(c)), ftz)
}

/// `fma.rn.f64`.
pub(crate) fn f64_fma(a: u64, b: u64, c: u64) -> u64 {
    out64(f64::from_bits(a).mul_add(f64::from_bits(b), f64::from_bits(c)))
}

/// A float comparison of `setp` (ordered comparisons are false on NaN, unordered true).
#[inline(always)]
pub(crate) fn compare<T: PartialOrd>(cmp: Cmp, x: T, y: T, unordered: bool) -> bool {
    let u = unordered;
    match cmp {
        Cmp::Eq => !u && x == y,
        Cmp::Ne => !u && x != y,
        Cmp::Lt => !u && x < y,
        Cmp::Le => !u && x <= y,
        Cmp::Gt => !u && x > y,
        Cmp::Ge => !u && x >= y,
        Cmp::Equ => u || x == y,
        Cmp::Neu => u || x != y,
        Cmp::Ltu => u || x < y,
        Cmp::Leu => u || x <= y,
        Cmp::Gtu => u || x > y,
        Cmp::Geu => u || x >= y,
        Cmp::Num => !u,
        Cmp::Nan => u,
    }
}

/// f32 `setp` operands as f32 (flushed with `.ftz`).
pub(crate) fn f32_value(a: u64, ftz: bool) -> f32 {
    flush32(f32::from_bits(a as u32), ftz)
}

/// A binary float format: mantissa bits, smallest normal exponent, largest finite value,
/// whether it has infinities.
#[derive(Clone, Copy)]
struct Fmt {
    man: i32,
    emin: i32,
    max: f64,
    inf: bool,
}

const F16: Fmt = Fmt {
    man: 10,
    emin: -14,
    max: 65504.0,
    inf: true,
};
const BF16: Fmt = Fmt {
    man: 7,
    emin: -126,
    max: 3.3895313892515355e38,
    inf: true,
};
const TF32: Fmt = Fmt {
    man: 10,
    emin: -126,
    max: 3.4011621342146535e38,
    inf: true,
};
const F32: Fmt = Fmt {
    man: 23,
    emin: -126,
    max: f32::MAX as f64,
    inf: true,
};
const E4M3: Fmt = Fmt {
    man: 3,
    emin: -6,
    max: 448.0,
    inf: false,
};

/// The spacing of `fmt`'s values around finite nonzero `x`.
fn quantum(x: f64, fmt: Fmt) -> f64 {
    let e = (((x.to_bits() >> 52) & 0x7FF) as i32 - 1023).max(fmt.emin);
    2f64.powi(e - fmt.man)
}

/// `x` rounded to `fmt` by `rnd` (`sat`: overflow to the largest finite value); exact for
/// any `x` that is an f32, f16, bf16 or integer below 2^53.
fn round_to(x: f64, fmt: Fmt, rnd: Rnd, sat: bool) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x.is_infinite() {
        return if sat {
            fmt.max.copysign(x)
        } else if fmt.inf {
            x
        } else {
            f64::NAN
        };
    }
    if x == 0.0 {
        return x;
    }
    let q = quantum(x, fmt);
    let r = x / q;
    let ri = match rnd {
        Rnd::Rna => r.round(),
        Rnd::Rz => r.trunc(),
        Rnd::Rm => r.floor(),
        Rnd::Rp => r.ceil(),
        _ => r.round_ties_even(),
    };
    let y = ri * q;
    if y.abs() <= fmt.max {
        return y;
    }
    let to_max = sat
        || match rnd {
            Rnd::Rz => true,
            Rnd::Rm => y > 0.0,
            Rnd::Rp => y < 0.0,
            _ => false,
        };
    if to_max {
        fmt.max.copysign(y)
    } else if fmt.inf {
        f64::INFINITY.copysign(y)
    } else {
        f64::NAN
    }
}

fn e4m3_bits(y: f64) -> u64 {
    let sign = if y.is_sign_negative() { 0x80 } else { 0 };
    let a = y.abs();
    if a.is_nan() {
        return 0x7F | sign;
    }
    if a == 0.0 {
        return sign;
    }
    let e = ((a.to_bits() >> 52) & 0x7FF) as i32 - 1023;
    let b = if e < -6 {
        (a / 2f64.powi(-9)) as u64
    } else {
        (((e + 7) as u64) << 3) | ((a / 2f64.powi(e) - 1.0) * 8.0) as u64
    };
    b | sign
}

fn e4m3_value(b: u64) -> f64 {
    let (s, e, m) = ((b >> 7) & 1, ((b >> 3) & 0xF) as i32, (b & 7) as f64);
    let v = if e == 15 && m == 7.0 {
        f64::NAN
    } else if e == 0 {
        m * 2f64.powi(-9)
    } else {
        (1.0 + m / 8.0) * 2f64.powi(e - 7)
    };
    if s == 1 {
        -v
    } else {
        v
    }
}

/// The bits of `y` (already representable) in format `to`, NaNs canonical.
fn float_bits(y: f64, to: Num) -> u64 {
    match to {
        Num::F16 if y.is_nan() => 0x7FFF,
        Num::Bf16 if y.is_nan() => 0x7FFF,
        Num::F16 => half::f16::from_f64(y).to_bits() as u64,
        Num::Bf16 => half::bf16::from_f64(y).to_bits() as u64,
        Num::F32 | Num::Tf32 if y.is_nan() => NAN32 as u64,
        Num::F32 | Num::Tf32 => (y as f32).to_bits() as u64,
        Num::F64 => out64(y),
        Num::Int(_) => unreachable!("an integer is not a float format"),
    }
}

fn fmt_of(n: Num) -> Fmt {
    match n {
        Num::F16 => F16,
        Num::Bf16 => BF16,
        Num::Tf32 => TF32,
        _ => F32,
    }
}

fn is_int_rounding(r: Rnd) -> bool {
    matches!(r, Rnd::Rni | Rnd::Rzi | Rnd::Rmi | Rnd::Rpi)
}

fn float_width(n: Num) -> u32 {
    match n {
        Num::F16 | Num::Bf16 => 16,
        Num::F32 | Num::Tf32 => 32,
        Num::F64 => 64,
        Num::Int(i) => i.bits,
    }
}

/// Whether the emulator implements conversion `c` (checked when parsing).
pub(crate) fn check_conv(c: Conv) -> Result<(), String> {
    let ok = match (c.to, c.from) {
        (Num::Int(_), Num::Int(_)) => c.rnd == Rnd::Default && !c.ftz,
        (Num::Int(_), _) => is_int_rounding(c.rnd) && !c.sat,
        (to, Num::Int(i)) => {
            matches!(c.rnd, Rnd::Rn | Rnd::Rz | Rnd::Rm | Rnd::Rp)
                && to != Num::Tf32
                && (i.bits < 64 || (c.rnd == Rnd::Rn && matches!(to, Num::F32 | Num::F64)))
                && !c.sat
        }
        (Num::Tf32, Num::F32) => matches!(c.rnd, Rnd::Rna | Rnd::Rn | Rnd::Rz),
        (_, Num::Tf32) | (Num::Tf32, _) => false,
        (to, from) if to == from => is_int_rounding(c.rnd) || (c.rnd == Rnd::Default && c.ftz),
        (to, from) if float_width(to) > float_width(from) => c.rnd == Rnd::Default && !c.sat,
        (Num::Bf16, Num::F16) | (Num::F16, Num::Bf16) => false,
        // Narrowing float to float.
        _ => matches!(c.rnd, Rnd::Rn | Rnd::Rz | Rnd::Rm | Rnd::Rp) && !(c.from == Num::F64 && c.to != Num::F32),
    };
    if ok {
        Ok(())
    } else {
        Err("unsupported conversion".into())
    }
}

fn int_range(i: Int) -> (i128, i128) {
    if i.signed {
        (-(1i128 << (i.bits - 1)), (1i128 << (i.bits - 1)) - 1)
    } else {
        (0, (1i128 << i.bits) - 1)
    }
}

fn to_int_rounding(r: Rnd) -> Rnd {
    match r {
        Rnd::Rni => Rnd::Rn,
        Rnd::Rzi => Rnd::Rz,
        Rnd::Rmi => Rnd::Rm,
        Rnd::Rpi => Rnd::Rp,
        r => r,
    }
}

fn round_int(x: f64, r: Rnd) -> f64 {
    match r {
        Rnd::Rni => x.round_ties_even(),
        Rnd::Rzi => x.trunc(),
        Rnd::Rmi => x.floor(),
        _ => x.ceil(),
    }
}

/// Source bits of format `from` as a float value (flushed with `.ftz` for f32).
fn float_value(a: u64, from: Num, ftz: bool) -> f64 {
    match from {
        Num::F16 => half::f16::from_bits(a as u16).to_f64(),
        Num::Bf16 => half::bf16::from_bits(a as u16).to_f64(),
        Num::F32 | Num::Tf32 => flush32(f32::from_bits(a as u32), ftz) as f64,
        Num::F64 => f64::from_bits(a),
        Num::Int(_) => unreachable!("an integer is not a float format"),
    }
}

/// A scalar `cvt` (checked by [`check_conv`]) on raw bits.
pub(crate) fn convert(c: Conv, a: u64) -> u64 {
    match (c.to, c.from) {
        (Num::Int(to), Num::Int(from)) => {
            let v = if from.signed {
                from.ext(a) as i128
            } else {
                from.trunc(a) as i128
            };
            let v = if c.sat {
                let (lo, hi) = int_range(to);
                v.clamp(lo, hi)
            } else {
                v
            };
            to.trunc(v as u64)
        }
        (Num::Int(to), from) => {
            let x = float_value(a, from, c.ftz);
            if x.is_nan() {
                return 0;
            }
            let (lo, hi) = int_range(to);
            let r = round_int(x, c.rnd);
            let v = if r <= lo as f64 {
                lo
            } else if r >= hi as f64 {
                hi
            } else {
                r as i128
            };
            to.trunc(v as u64)
        }
        (to, Num::Int(from)) => {
            let v = if from.signed {
                from.ext(a) as i128
            } else {
                from.trunc(a) as i128
            };
            if from.bits == 64 {
                // Only `.rn` to f32/f64 (check_conv): Rust's conversions round to nearest even.
                return match (to, from.signed) {
                    (Num::F32, true) => ((v as i64) as f32).to_bits() as u64,
                    (Num::F32, false) => ((v as u64) as f32).to_bits() as u64,
                    (_, true) => ((v as i64) as f64).to_bits(),
                    (_, false) => ((v as u64) as f64).to_bits(),
                };
            }
            let x = v as f64;
            if to == Num::F64 {
                return x.to_bits();
            }
            float_bits(round_to(x, fmt_of(to), c.rnd, false), to)
        }
        (to, from) => {
            let x = float_value(a, from, c.ftz);
            let y = if is_int_rounding(c.rnd) {
                round_int(x, c.rnd)
            } else if to == Num::F64 || float_width(to) > float_width(from) {
                x
            } else {
                round_to(x, fmt_of(to), to_int_rounding(c.rnd), c.sat)
            };
            let y = if c.ftz && to == Num::F32 {
                flush32(y as f32, true) as f64
            } else {
                y
            };
            float_bits(y, to)
        }
    }
}

/// Bits of one element of a packed conversion of f32 `x` (`relu`: negatives to zero).
fn packed_elem(to: Packed, x: f32, rnd: Rnd, sat: bool, relu: bool) -> u64 {
    let x = if relu && x < 0.0 { 0.0 } else { x as f64 };
    match to {
        Packed::F16x2 => float_bits(round_to(x, F16, rnd, sat), Num::F16),
        Packed::Bf16x2 => float_bits(round_to(x, BF16, rnd, sat), Num::Bf16),
        Packed::E4m3x2 | Packed::E4m3x4 => e4m3_bits(round_to(x, E4M3, rnd, sat)),
    }
}

/// Element width in bits of a packed format.
fn packed_width(to: Packed) -> u32 {
    match to {
        Packed::F16x2 | Packed::Bf16x2 => 16,
        Packed::E4m3x2 | Packed::E4m3x4 => 8,
    }
}

/// `cvt.{rn,rz}[.satfinite][.relu].{f16x2,bf16x2,e4m3x2}.f32 d, a, b`: `a` in the upper part.
pub(crate) fn cvt_pack(to: Packed, rnd: Rnd, sat: bool, relu: bool, a: u64, b: u64) -> u64 {
    let w = packed_width(to);
    let e = |v: u64| packed_elem(to, f32::from_bits(v as u32), rnd, sat, relu);
    (e(a) << w) | e(b)
}

/// Stochastic rounding (`cvt.rs`) of `xs` (the first in the most significant part) with
/// random bits `rbits`.
///
/// Each element takes its own field of `rbits` (the first element the most significant
/// field: 16 bits each for x2 formats, 8 for e4m3x4), uses as many of that field's low bits
/// as the conversion drops (capped by the field: f16 13, bf16 16, e4m3 8) as `r`, adds `r` to
/// the dropped bits and truncates: the result rounds away from zero iff
/// `r + floor(frac · 2^k) ≥ 2^k`, `frac` being `x`'s position between its neighbours.
pub(crate) fn cvt_rs(to: Packed, relu: bool, sat: bool, xs: [u64; 4], rbits: u64) -> u64 {
    let (n, fmt, k) = match to {
        Packed::F16x2 => (2, F16, 13),
        Packed::Bf16x2 => (2, BF16, 16),
        _ => (4, E4M3, 8),
    };
    let w = packed_width(to);
    let mut out = 0u64;
    for (i, &bits) in xs.iter().take(n).enumerate() {
        let field = (rbits >> (w * (n - 1 - i) as u32)) & ((1 << w) - 1);
        let r = field & ((1 << k) - 1);
        let x = f32::from_bits(bits as u32) as f64;
        let x = if relu && x < 0.0 { 0.0 } else { x };
        let lo = round_to(x, fmt, Rnd::Rz, false);
        let y = if !x.is_finite() || lo == x {
            round_to(x, fmt, Rnd::Rn, sat)
        } else {
            let q = quantum(x, fmt);
            let frac = ((x - lo) / q).abs();
            let up = r + (frac * (1u64 << k) as f64).floor() as u64 >= 1 << k;
            let mode = if !up {
                Rnd::Rz
            } else if x > 0.0 {
                Rnd::Rp
            } else {
                Rnd::Rm
            };
            round_to(x, fmt, mode, sat)
        };
        let e = match to {
            Packed::F16x2 => float_bits(y, Num::F16),
            Packed::Bf16x2 => float_bits(y, Num::Bf16),
            _ => e4m3_bits(y),
        };
        out |= e << (w * (n - 1 - i) as u32);
    }
    out
}

/// `cvt.rn.f16x2.e4m3x2 d, a`: the two bytes of `a` (low byte to the low half) as f16s.
pub(crate) fn e4m3x2_to_f16x2(a: u64) -> u64 {
    let h = |b: u64| float_bits(e4m3_value(b & 0xFF), Num::F16);
    (h(a >> 8) << 16) | h(a)
}
