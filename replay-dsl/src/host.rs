//! Host-side element types: the Rust types that hold each [`Elem`] in memory, their
//! little-endian byte encoding, and exact rounding of `f64` values to the narrow float types
//! (including the stochastic rounding of `docs/SEMANTICS.md`).
//!
//! Both the CPU interpreter ([`crate::interp`]) and the GPU runtime use these.
//!
//! | `Elem`   | host type          | bytes |
//! |----------|--------------------|-------|
//! | `Bool`   | `bool` (0 / 1)     | 1     |
//! | `I32`    | `i32`              | 4     |
//! | `I64`    | `i64`              | 8     |
//! | `U32`    | `u32`              | 4     |
//! | `F16`    | `half::f16`        | 2     |
//! | `BF16`   | `half::bf16`       | 2     |
//! | `F32`    | `f32`              | 4     |
//! | `F8E4M3` | `float8::F8E4M3`   | 1     |

use crate::types::Elem;
use float8::F8E4M3;
use half::{bf16, f16};

/// A Rust type that holds one element of an [`Elem`] on the host.
pub trait HostElem: Copy + Send + Sync + std::fmt::Debug + 'static {
    /// The IR element type.
    const ELEM: Elem;
    /// Size in bytes (equals `ELEM.bytes()`).
    const SIZE: usize;
    /// Writes the little-endian encoding into `out[..SIZE]` (panics if `out` is shorter).
    fn to_bytes(self, out: &mut [u8]);
    /// Reads a value from the little-endian encoding in `bytes[..SIZE]` (bool: any non-zero byte
    /// is `true`).
    fn from_bytes(bytes: &[u8]) -> Self;
    /// The value as an `f64` (bool: 0 / 1; `i64` beyond 2^53 rounds to nearest).
    fn to_f64(self) -> f64;
    /// The nearest value to `x`: floats round to nearest even (f16/bf16 overflow to ±inf, f8e4m3
    /// saturates to ±448, NaN stays NaN); integers round to nearest even, saturate at the type's
    /// range, NaN → 0; bool is `x != 0`.
    fn from_f64(x: f64) -> Self;
}

impl HostElem for f32 {
    const ELEM: Elem = Elem::F32;
    const SIZE: usize = 4;
    fn to_bytes(self, out: &mut [u8]) {
        out[..4].copy_from_slice(&self.to_le_bytes())
    }
    fn from_bytes(b: &[u8]) -> Self {
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(x: f64) -> Self {
        x as f32
    }
}

impl HostElem for f16 {
    const ELEM: Elem = Elem::F16;
    const SIZE: usize = 2;
    fn to_bytes(self, out: &mut [u8]) {
        out[..2].copy_from_slice(&self.to_bits().to_le_bytes())
    }
    fn from_bytes(b: &[u8]) -> Self {
        f16::from_bits(u16::from_le_bytes([b[0], b[1]]))
    }
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    fn from_f64(x: f64) -> Self {
        // Round exactly first: `half`'s own f64 conversion may round twice (via f32).
        f16::from_f64(round_f16(x))
    }
}

impl HostElem for bf16 {
    const ELEM: Elem = Elem::BF16;
    const SIZE: usize = 2;
    fn to_bytes(self, out: &mut [u8]) {
        out[..2].copy_from_slice(&self.to_bits().to_le_bytes())
    }
    fn from_bytes(b: &[u8]) -> Self {
        bf16::from_bits(u16::from_le_bytes([b[0], b[1]]))
    }
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
    fn from_f64(x: f64) -> Self {
        bf16::from_f64(round_bf16(x))
    }
}

impl HostElem for F8E4M3 {
    const ELEM: Elem = Elem::F8E4M3;
    const SIZE: usize = 1;
    fn to_bytes(self, out: &mut [u8]) {
        out[0] = self.to_bits()
    }
    fn from_bytes(b: &[u8]) -> Self {
        F8E4M3::from_bits(b[0])
    }
    fn to_f64(self) -> f64 {
        F8E4M3::to_f64(&self)
    }
    fn from_f64(x: f64) -> Self {
        F8E4M3::from_f64(round_e4m3(x))
    }
}

impl HostElem for i32 {
    const ELEM: Elem = Elem::I32;
    const SIZE: usize = 4;
    fn to_bytes(self, out: &mut [u8]) {
        out[..4].copy_from_slice(&self.to_le_bytes())
    }
    fn from_bytes(b: &[u8]) -> Self {
        i32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(x: f64) -> Self {
        x.round_ties_even() as i32
    }
}

impl HostElem for i64 {
    const ELEM: Elem = Elem::I64;
    const SIZE: usize = 8;
    fn to_bytes(self, out: &mut [u8]) {
        out[..8].copy_from_slice(&self.to_le_bytes())
    }
    fn from_bytes(b: &[u8]) -> Self {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        i64::from_le_bytes(a)
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(x: f64) -> Self {
        x.round_ties_even() as i64
    }
}

impl HostElem for u32 {
    const ELEM: Elem = Elem::U32;
    const SIZE: usize = 4;
    fn to_bytes(self, out: &mut [u8]) {
        out[..4].copy_from_slice(&self.to_le_bytes())
    }
    fn from_bytes(b: &[u8]) -> Self {
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(x: f64) -> Self {
        x.round_ties_even() as u32
    }
}

impl HostElem for bool {
    const ELEM: Elem = Elem::Bool;
    const SIZE: usize = 1;
    fn to_bytes(self, out: &mut [u8]) {
        out[0] = self as u8
    }
    fn from_bytes(b: &[u8]) -> Self {
        b[0] != 0
    }
    fn to_f64(self) -> f64 {
        if self {
            1.0
        } else {
            0.0
        }
    }
    fn from_f64(x: f64) -> Self {
        x != 0.0
    }
}

/// The little-endian encoding of a slice of elements.
pub fn slice_to_bytes<T: HostElem>(data: &[T]) -> Vec<u8> {
    let mut out = vec![0u8; data.len() * T::SIZE];
    for (x, chunk) in data.iter().zip(out.chunks_exact_mut(T::SIZE)) {
        x.to_bytes(chunk);
    }
    out
}

/// Decodes a little-endian byte slice (its length must be a multiple of `T::SIZE`).
pub fn slice_from_bytes<T: HostElem>(bytes: &[u8]) -> Vec<T> {
    assert!(
        bytes.len().is_multiple_of(T::SIZE),
        "byte length {} is not a multiple of {}",
        bytes.len(),
        T::SIZE
    );
    bytes.chunks_exact(T::SIZE).map(T::from_bytes).collect()
}

// ---------------------------------------------------------------------------------------------
// Exact rounding of f64 values to narrow float formats.
// ---------------------------------------------------------------------------------------------

/// A binary floating-point format: `p` significand bits (with the implicit one), smallest normal
/// exponent `emin`, largest finite value `max`, and whether overflow saturates (f8e4m3) or goes
/// to infinity.
#[derive(Clone, Copy, Debug)]
struct Format {
    p: i32,
    emin: i32,
    max: f64,
    saturating: bool,
}

const F16_FMT: Format = Format {
    p: 11,
    emin: -14,
    max: 65504.0,
    saturating: false,
};
const BF16_FMT: Format = Format {
    p: 8,
    emin: -126,
    max: 3.3895313892515355e38,
    saturating: false,
};
const F32_FMT: Format = Format {
    p: 24,
    emin: -126,
    max: f32::MAX as f64,
    saturating: false,
};
const E4M3_FMT: Format = Format {
    p: 4,
    emin: -6,
    max: 448.0,
    saturating: true,
};

fn format_of(elem: Elem) -> Option<Format> {
    match elem {
        Elem::F16 => Some(F16_FMT),
        Elem::BF16 => Some(BF16_FMT),
        Elem::F32 => Some(F32_FMT),
        Elem::F8E4M3 => Some(E4M3_FMT),
        _ => None,
    }
}

/// 2^e as an f64 (for e in the normal f64 range).
fn pow2(e: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&e));
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// The exponent of a finite non-zero f64 (floor(log2|x|)), also for subnormals.
fn exponent(x: f64) -> i32 {
    let bits = x.abs().to_bits();
    let e = (bits >> 52) as i32;
    if e == 0 {
        // Subnormal f64: far below every target's subnormal range; any exponent ≤ -1023 works.
        -1023
    } else {
        e - 1023
    }
}

/// The spacing of format values around `|x|` (finite, non-zero): 2^(max(e, emin) − p + 1).
fn quantum(fmt: Format, x: f64) -> f64 {
    pow2(exponent(x).max(fmt.emin) - fmt.p + 1)
}

fn round_format(fmt: Format, x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x.is_infinite() {
        return if fmt.saturating { fmt.max.copysign(x) } else { x };
    }
    if x == 0.0 {
        return x;
    }
    let q = quantum(fmt, x);
    // x / q is an exact scaling by a power of two, as is the product.
    let r = (x / q).round_ties_even() * q;
    if r.abs() > fmt.max {
        if fmt.saturating {
            fmt.max.copysign(x)
        } else {
            f64::INFINITY.copysign(x)
        }
    } else if r == 0.0 {
        0.0f64.copysign(x)
    } else {
        r
    }
}

/// `x` rounded to the nearest f16 (ties to even; ±inf past the largest finite), as an f64.
/// Exact for every f64 input (no double rounding).
pub fn round_f16(x: f64) -> f64 {
    round_format(F16_FMT, x)
}

/// `x` rounded to the nearest bf16 (ties to even; ±inf past the largest finite), as an f64.
pub fn round_bf16(x: f64) -> f64 {
    round_format(BF16_FMT, x)
}

/// `x` rounded to the nearest f8e4m3 (ties to even; saturating to ±448, also for ±inf; NaN stays
/// NaN), as an f64.
pub fn round_e4m3(x: f64) -> f64 {
    round_format(E4M3_FMT, x)
}

/// `x` rounded to the nearest f32, as an f64.
pub fn round_f32(x: f64) -> f64 {
    x as f32 as f64
}

/// `x` rounded to the float type `elem` (round to nearest even, see [`round_f16`],
/// [`round_bf16`], [`round_e4m3`]); `None` if `elem` is not a float type.
pub fn round_to(elem: Elem, x: f64) -> Option<f64> {
    Some(match elem {
        Elem::F32 => round_f32(x),
        Elem::F16 => round_f16(x),
        Elem::BF16 => round_bf16(x),
        Elem::F8E4M3 => round_e4m3(x),
        _ => return None,
    })
}

/// The stochastic rounding of `docs/SEMANTICS.md`: `x` converted to `to` (f16, bf16 or f8e4m3;
/// panics otherwise) with the random bits `r`.
///
/// Let `lo` be `x` rounded toward zero in the target type and `hi` the next target value away
/// from zero (f16/bf16: infinity past the largest finite; f8e4m3: `hi = lo = ±448` at and past
/// 448). If `x` is exactly representable, NaN or infinite, the result is `x` rounded normally.
/// Otherwise `p = floor((|x| − |lo|) / (|hi| − |lo|) · 2^32)` (exact in f64) and the result is
/// `hi` when `r < p`, else `lo`. The probability of `hi` over uniform `r` is thus `p / 2^32`.
pub fn stochastic_round(x: f32, r: u32, to: Elem) -> f64 {
    let fmt = match to {
        Elem::F16 | Elem::BF16 | Elem::F8E4M3 => format_of(to).expect("float format"),
        _ => panic!("stochastic rounding converts to f16, bf16 or f8e4m3, not {to}"),
    };
    let x = x as f64;
    if !x.is_finite() || x == 0.0 {
        return round_format(fmt, x);
    }
    let (lo, hi) = bracket(fmt, x.abs());
    if lo == x.abs() {
        return x; // exactly representable
    }
    if hi == lo {
        return lo.copysign(x); // saturated (f8e4m3)
    }
    let p = if hi.is_infinite() {
        0.0
    } else {
        ((x.abs() - lo) / (hi - lo) * 4294967296.0).floor()
    };
    let m = if (r as f64) < p { hi } else { lo };
    m.copysign(x)
}

/// For finite positive `a`: the largest format value ≤ `a` (clamped to the largest finite) and
/// the next value above it (±inf or, when saturating, the largest finite again).
fn bracket(fmt: Format, a: f64) -> (f64, f64) {
    if a >= fmt.max {
        let hi = if fmt.saturating { fmt.max } else { f64::INFINITY };
        return (fmt.max, hi);
    }
    let q = quantum(fmt, a);
    let lo = (a / q).floor() * q;
    // lo + q is the next value up (at a binade boundary it is the power of two itself).
    let hi = lo + q;
    let hi = if hi > fmt.max {
        if fmt.saturating {
            fmt.max
        } else {
            f64::INFINITY
        }
    } else {
        hi
    };
    (lo, hi)
}

/// Converts an i64 to f64 rounding to odd (truncate, then set the last bit if inexact), so that
/// a later rounding to a format of ≤ 51 significand bits is correctly rounded.
pub(crate) fn i64_to_f64_odd(x: i64) -> f64 {
    let f = x as f64;
    // Compare exactly in i128 (f is an integer-valued f64 with |f| ≤ 2^63).
    let back = f as i128;
    let xi = x as i128;
    if back == xi {
        return f;
    }
    // Truncate toward zero: step f back toward zero if rounding went away from zero.
    let t = if (back > xi && x > 0) || (back < xi && x < 0) {
        f64::from_bits(f.to_bits() - 1)
    } else {
        f
    };
    f64::from_bits(t.to_bits() | 1)
}

/// An integer converted to the float type `elem` with round-to-nearest-even (exact for every
/// i64, no double rounding); `None` if `elem` is not a float type.
pub fn int_to_float(elem: Elem, x: i64) -> Option<f64> {
    if elem == Elem::F32 {
        return Some(x as f32 as f64);
    }
    round_to(elem, i64_to_f64_odd(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_rounding_matches_half_on_f32_inputs() {
        let mut s = 0x1234_5678_9abc_def0u64;
        for _ in 0..200_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let x = f32::from_bits((s >> 32) as u32);
            if x.is_nan() {
                continue;
            }
            let a = round_f16(x as f64);
            let b = f16::from_f32(x).to_f64();
            assert!(a == b || (a.is_nan() && b.is_nan()), "{x:e}: {a} vs {b}");
            let a = round_bf16(x as f64);
            let b = bf16::from_f32(x).to_f64();
            assert!(a == b || (a.is_nan() && b.is_nan()), "{x:e}: {a} vs {b}");
        }
    }

    #[test]
    fn e4m3_rounding_matches_float8() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..200_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            // Mostly values in e4m3's range, plus some wild ones.
            let x = if i % 4 == 0 {
                f32::from_bits((s >> 32) as u32) as f64
            } else {
                ((s >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 1100.0 / (1 << (i % 12)) as f64
            };
            if x.is_nan() {
                continue;
            }
            let a = round_e4m3(x);
            let b = F8E4M3::from_f64(x).to_f64();
            assert!(a == b, "{x:e}: {a} vs {b}");
        }
        assert_eq!(round_e4m3(f64::INFINITY), 448.0);
        assert_eq!(round_e4m3(-1e9), -448.0);
        assert!(round_e4m3(f64::NAN).is_nan());
        assert!(F8E4M3::from_f64(f64::NAN).is_nan());
    }

    #[test]
    fn no_double_rounding_from_f64() {
        // 1 + 2^-11 + 2^-40 is just above the f16 tie between 1 and 1+2^-10: rounds up.
        let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(round_f16(x), 1.0 + 2f64.powi(-10));
        assert_eq!(round_f16(65520.0), f64::INFINITY);
        assert_eq!(round_f16(65519.99), 65504.0);
        assert_eq!(round_f16(2f64.powi(-25)), 0.0);
        assert_eq!(round_f16(2f64.powi(-25) * 1.0001), 2f64.powi(-24));
        assert_eq!(<f16 as HostElem>::from_f64(x).to_f64(), 1.0 + 2f64.powi(-10));
    }

    #[test]
    fn int_to_float_is_exact() {
        // 2^60 + 2^36 + 1 → bf16: the tie at 2^60 + 2^52 is not hit; rounds to 2^60.
        let x = (1i64 << 60) + (1 << 36) + 1;
        assert_eq!(int_to_float(Elem::BF16, x), Some(2f64.powi(60)));
        // 2^60 + 2^52 + 1 is just past the tie: rounds up (double rounding via f64 would tie).
        let x = (1i64 << 60) + (1 << 52) + 1;
        assert_eq!(int_to_float(Elem::BF16, x), Some(2f64.powi(60) + 2f64.powi(53)));
        assert_eq!(int_to_float(Elem::F32, 16_777_217), Some(16_777_216.0));
        assert_eq!(int_to_float(Elem::F16, -3), Some(-3.0));
        assert_eq!(int_to_float(Elem::F8E4M3, 1000), Some(448.0));
    }

    #[test]
    fn bytes_round_trip() {
        let v = [1.5f32, -0.0, f32::INFINITY];
        assert_eq!(slice_from_bytes::<f32>(&slice_to_bytes(&v)), v);
        let v = [i64::MIN, 7, -1];
        assert_eq!(slice_from_bytes::<i64>(&slice_to_bytes(&v)), v);
        let v = [true, false];
        assert_eq!(slice_to_bytes(&v), vec![1, 0]);
        assert_eq!(slice_from_bytes::<bool>(&slice_to_bytes(&v)), v);
        let v = [f16::from_f32(0.1), f16::MAX];
        assert_eq!(slice_from_bytes::<f16>(&slice_to_bytes(&v)), v);
        assert_eq!(slice_to_bytes(&[f16::ONE]), vec![0x00, 0x3c]);
        assert_eq!(<u32 as HostElem>::from_f64(-5.0), 0);
        assert_eq!(<i32 as HostElem>::from_f64(2.5), 2);
        assert_eq!(<i32 as HostElem>::from_f64(f64::NAN), 0);
        assert_eq!(<i32 as HostElem>::from_f64(1e20), i32::MAX);
    }
}
