//! Tile values of the interpreter and the scalar numerics shared by its ops.

use crate::host::{round_bf16, round_e4m3, round_f16};
use crate::types::Elem;
use float8::F8E4M3;
use half::{bf16, f16};

/// A pointer: a buffer index and an element offset into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct PtrVal {
    pub(crate) buf: u32,
    pub(crate) off: i64,
}

/// The elements of a tile in row-major order. The shape is the value's IR type.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Data {
    /// Floats, each already rounded to the value's element type.
    F(Vec<f64>),
    /// Integers wrapped to the element type's width (`u32` as 0..2^32).
    I(Vec<i64>),
    /// Bools.
    B(Vec<bool>),
    /// Pointers.
    P(Vec<PtrVal>),
}

impl Data {
    pub(crate) fn len(&self) -> usize {
        match self {
            Data::F(v) => v.len(),
            Data::I(v) => v.len(),
            Data::B(v) => v.len(),
            Data::P(v) => v.len(),
        }
    }

    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Data::F(_) => "float",
            Data::I(_) => "integer",
            Data::B(_) => "bool",
            Data::P(_) => "pointer",
        }
    }

    /// `out[i] = self[idx[i]]`.
    pub(crate) fn gather(&self, idx: &[usize]) -> Data {
        fn g<T: Copy>(v: &[T], idx: &[usize]) -> Vec<T> {
            idx.iter().map(|&i| v[i]).collect()
        }
        match self {
            Data::F(v) => Data::F(g(v, idx)),
            Data::I(v) => Data::I(g(v, idx)),
            Data::B(v) => Data::B(g(v, idx)),
            Data::P(v) => Data::P(g(v, idx)),
        }
    }

    /// The first element repeated `n` times.
    pub(crate) fn splat(&self, n: usize) -> Data {
        match self {
            Data::F(v) => Data::F(vec![v[0]; n]),
            Data::I(v) => Data::I(vec![v[0]; n]),
            Data::B(v) => Data::B(vec![v[0]; n]),
            Data::P(v) => Data::P(vec![v[0]; n]),
        }
    }

    /// `c ? a : b` elementwise; `None` if `a` and `b` differ in kind.
    pub(crate) fn select(c: &[bool], a: &Data, b: &Data) -> Option<Data> {
        fn s<T: Copy>(c: &[bool], a: &[T], b: &[T]) -> Vec<T> {
            c.iter()
                .zip(a.iter().zip(b))
                .map(|(&c, (&a, &b))| if c { a } else { b })
                .collect()
        }
        Some(match (a, b) {
            (Data::F(a), Data::F(b)) => Data::F(s(c, a, b)),
            (Data::I(a), Data::I(b)) => Data::I(s(c, a, b)),
            (Data::B(a), Data::B(b)) => Data::B(s(c, a, b)),
            (Data::P(a), Data::P(b)) => Data::P(s(c, a, b)),
            _ => return None,
        })
    }
}

/// Rounds every element to the float type `e` (no-op for non-float types).
pub(crate) fn round_slice(e: Elem, xs: &mut [f64]) {
    match e {
        Elem::F32 => xs.iter_mut().for_each(|x| *x = *x as f32 as f64),
        Elem::F16 => xs.iter_mut().for_each(|x| *x = round_f16(*x)),
        Elem::BF16 => xs.iter_mut().for_each(|x| *x = round_bf16(*x)),
        Elem::F8E4M3 => xs.iter_mut().for_each(|x| *x = round_e4m3(*x)),
        _ => {}
    }
}

/// The rounding function of a float type (identity for non-floats).
pub(crate) fn rounder(e: Elem) -> fn(f64) -> f64 {
    fn f32r(x: f64) -> f64 {
        x as f32 as f64
    }
    fn id(x: f64) -> f64 {
        x
    }
    match e {
        Elem::F32 => f32r,
        Elem::F16 => round_f16,
        Elem::BF16 => round_bf16,
        Elem::F8E4M3 => round_e4m3,
        _ => id,
    }
}

/// Wraps an integer to the width of `e` (two's complement; `u32` as 0..2^32; bool as 0/1).
#[inline]
pub(crate) fn wrap(e: Elem, x: i64) -> i64 {
    match e {
        Elem::I32 => x as i32 as i64,
        Elem::U32 => x as u32 as i64,
        Elem::Bool => (x != 0) as i64,
        _ => x,
    }
}

/// Float minimum: NaN if either operand is NaN; `-0 < +0`.
#[inline]
pub(crate) fn fmin(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a < b || (a == b && a.is_sign_negative()) {
        a
    } else {
        b
    }
}

/// Float maximum: NaN if either operand is NaN; `+0 > -0`.
#[inline]
pub(crate) fn fmax(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a > b || (a == b && a.is_sign_positive()) {
        a
    } else {
        b
    }
}

/// `x` rounded to TF32 (10 mantissa bits, to nearest, ties away from zero), as
/// `cvt.rna.tf32.f32`: the low 13 bits of the result are zero. NaN and infinities pass.
pub(crate) fn round_tf32(x: f32) -> f32 {
    if !x.is_finite() {
        return x;
    }
    // Adding half a TF32 ulp to the magnitude bits and truncating rounds ties away from zero
    // (a carry into the exponent is the correct rounding, up to infinity).
    f32::from_bits((x.to_bits() + 0x1000) & !0x1fff)
}

/// `a * b + c` rounded once to f32 (a fused multiply-add), computed in f64: the product of two
/// f32 is exact in f64, and the sum is made round-to-odd before the final rounding.
#[inline]
pub(crate) fn fma_f32(a: f32, b: f32, c: f32) -> f32 {
    let p = a as f64 * b as f64;
    let c = c as f64;
    let s = p + c;
    if !s.is_finite() {
        return s as f32;
    }
    // TwoSum: s + err == p + c exactly.
    let bb = s - p;
    let err = (p - (s - bb)) + (c - bb);
    if err != 0.0 && s.to_bits() & 1 == 0 {
        // Move s one f64 ulp toward the exact value: round-to-odd, then one final rounding.
        let toward_larger_magnitude = (err > 0.0) == (s > 0.0);
        let bits = if toward_larger_magnitude {
            s.to_bits() + 1
        } else {
            s.to_bits() - 1
        };
        return f64::from_bits(bits) as f32;
    }
    s as f32
}

/// Decodes a float element of type `e` from little-endian bytes.
#[inline]
pub(crate) fn decode_f(e: Elem, b: &[u8]) -> f64 {
    match e {
        Elem::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
        Elem::F16 => f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64(),
        Elem::BF16 => bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64(),
        Elem::F8E4M3 => F8E4M3::from_bits(b[0]).to_f64(),
        _ => unreachable!("decode_f on {e}"),
    }
}

/// Encodes a float element of type `e` (already representable) as little-endian bytes.
#[inline]
pub(crate) fn encode_f(e: Elem, x: f64, out: &mut [u8]) {
    match e {
        Elem::F32 => out[..4].copy_from_slice(&(x as f32).to_le_bytes()),
        Elem::F16 => out[..2].copy_from_slice(&f16::from_f64(round_f16(x)).to_bits().to_le_bytes()),
        Elem::BF16 => out[..2].copy_from_slice(&bf16::from_f64(round_bf16(x)).to_bits().to_le_bytes()),
        Elem::F8E4M3 => out[0] = F8E4M3::from_f64(round_e4m3(x)).to_bits(),
        _ => unreachable!("encode_f on {e}"),
    }
}

/// Decodes an integer (or bool, as 0/1) element of type `e`.
#[inline]
pub(crate) fn decode_i(e: Elem, b: &[u8]) -> i64 {
    match e {
        Elem::I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64,
        Elem::U32 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64,
        Elem::I64 => i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
        Elem::Bool => (b[0] != 0) as i64,
        _ => unreachable!("decode_i on {e}"),
    }
}

/// Encodes an integer (or bool) element of type `e`.
#[inline]
pub(crate) fn encode_i(e: Elem, x: i64, out: &mut [u8]) {
    match e {
        Elem::I32 => out[..4].copy_from_slice(&(x as i32).to_le_bytes()),
        Elem::U32 => out[..4].copy_from_slice(&(x as u32).to_le_bytes()),
        Elem::I64 => out[..8].copy_from_slice(&x.to_le_bytes()),
        Elem::Bool => out[0] = (x != 0) as u8,
        _ => unreachable!("encode_i on {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tf32_rounds_to_nearest_ties_away() {
        let ulp = 2f32.powi(-10);
        for (x, want) in [
            (1.0 + ulp / 2.0, 1.0 + ulp),          // tie: away from zero
            (-(1.0 + ulp / 2.0), -(1.0 + ulp)),    // tie, negative
            (1.0 + ulp / 2.0 - f32::EPSILON, 1.0), // below the tie
            (1.0 + 1.5 * ulp, 1.0 + 2.0 * ulp),    // tie at an odd ulp: still away
            (2.0 - ulp / 4.0, 2.0),                // carry into the exponent
            (f32::INFINITY, f32::INFINITY),
        ] {
            assert_eq!(round_tf32(x), want, "{x}");
            assert_eq!(round_tf32(x).to_bits() & 0x1fff, 0);
        }
        assert!(round_tf32(f32::NAN).is_nan());
    }

    #[test]
    fn fma_matches_hardware_fma() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for i in 0..300_000 {
            let r = next();
            let (a, b, c) = if i % 2 == 0 {
                // Random bit patterns.
                (
                    f32::from_bits(r as u32),
                    f32::from_bits((r >> 32) as u32),
                    f32::from_bits(next() as u32),
                )
            } else {
                // Near-cancelling values with nearby exponents, where double rounding bites.
                let a = 1.0 + (r as u32 >> 9) as f32 * f32::EPSILON;
                let b = 1.0 + ((r >> 32) as u32 >> 9) as f32 * f32::EPSILON;
                let c = -(a * b) * if next() % 2 == 0 { 1.0 } else { 0.5 };
                (a, b, c)
            };
            let want = a.mul_add(b, c);
            let got = fma_f32(a, b, c);
            assert!(
                want.to_bits() == got.to_bits() || (want.is_nan() && got.is_nan()),
                "{a:e} {b:e} {c:e}: {want:e} vs {got:e}"
            );
        }
        // A case where naive f64 evaluation double-rounds: a*b = 1 + 2^-24 + 2^-60-ish.
        let a = 1.0 + f32::EPSILON; // 1 + 2^-23
        let b = 1.0 - f32::EPSILON / 2.0; // 1 - 2^-24
        let c = 2f32.powi(-24);
        assert_eq!(fma_f32(a, b, c).to_bits(), a.mul_add(b, c).to_bits());
    }

    #[test]
    fn min_max_nan_and_zero() {
        assert!(fmin(f64::NAN, 1.0).is_nan());
        assert!(fmax(1.0, f64::NAN).is_nan());
        assert!(fmin(0.0, -0.0).is_sign_negative());
        assert!(fmax(-0.0, 0.0).is_sign_positive());
        assert_eq!(fmax(2.0, 3.0), 3.0);
    }
}
