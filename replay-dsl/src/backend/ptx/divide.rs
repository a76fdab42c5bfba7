//! Signed 32-bit division and remainder by a constant without a division instruction.
//!
//! ptxas 13.0 lowers `div.s32` / `rem.s32` to its generic reciprocal sequence even when the
//! divisor is an immediate (an `I2F` and `MUFU.RCP` of the constant, then a dozen dependent
//! integer instructions per use; H200 SASS of the SSM kernels), so for a constant divisor
//! `d ≥ 2` the emitter does what a C compiler would (Hacker's Delight, ch. 10): shifts for a
//! power of two, else a multiply by a magic number and shifts. Both round toward zero like
//! `div.s32`, for every `a`; a dividend known to be ≥ 0 (a program id) divides by a power of
//! two with one shift or `and`.

use super::regs::{Class, Reg};
use super::Emitter;

/// How `a / d` is computed for a constant `d ≥ 2`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plan {
    /// `d = 2^k`: `(a + (a < 0 ? d − 1 : 0)) >> k`.
    Shift(u32),
    /// `q = mulhi(a, m) (+ a when m < 0) >> s`, plus one when that is negative.
    Magic { m: i32, s: u32 },
}

/// The plan for divisor `d`, or `None` when `d < 2`.
fn plan(d: i32) -> Option<Plan> {
    if d < 2 {
        return None;
    }
    if d & (d - 1) == 0 {
        return Some(Plan::Shift(d.trailing_zeros()));
    }
    let (m, s) = magic(d);
    Some(Plan::Magic { m, s })
}

/// The magic multiplier and shift of signed division by `d ≥ 2` that is not a power of two
/// (Hacker's Delight, figure 10–1).
fn magic(d: i32) -> (i32, u32) {
    const TWO31: u32 = 1 << 31;
    let ad = d as u32;
    let anc = TWO31 - 1 - TWO31 % ad;
    let (mut q1, mut r1) = (TWO31 / anc, TWO31 % anc);
    let (mut q2, mut r2) = (TWO31 / ad, TWO31 % ad);
    let mut p = 31;
    loop {
        p += 1;
        q1 = q1.wrapping_mul(2);
        r1 = r1.wrapping_mul(2);
        if r1 >= anc {
            q1 = q1.wrapping_add(1);
            r1 = r1.wrapping_sub(anc);
        }
        q2 = q2.wrapping_mul(2);
        r2 = r2.wrapping_mul(2);
        if r2 >= ad {
            q2 = q2.wrapping_add(1);
            r2 = r2.wrapping_sub(ad);
        }
        let delta = ad - r2;
        if !(q1 < delta || (q1 == delta && r1 == 0)) {
            break;
        }
    }
    (q2.wrapping_add(1) as i32, p - 32)
}

impl Emitter<'_> {
    /// `a / d` (or `a % d` with `rem`) for an i32 register `a` and a constant `d`, without a
    /// division instruction; `None` when `d < 2` (the caller divides).
    pub(super) fn div_by_constant_i32(&mut self, rem: bool, a: Reg, d: i64) -> Option<Reg> {
        let plan = plan(i32::try_from(d).ok()?)?;
        let r = |s: &mut Self| s.reg(Class::B32);
        if let (Plan::Shift(k), true) = (plan, self.non_negative.contains(&a)) {
            // A dividend ≥ 0 (a program id, say) needs no rounding toward zero.
            let out = r(self);
            match rem {
                true => emit!(self, "and.b32 {out}, {a}, {}", d - 1),
                false => emit!(self, "shr.u32 {out}, {a}, {k}"),
            }
            self.non_negative.insert(out);
            return Some(out);
        }
        let q = match plan {
            Plan::Shift(k) => {
                // (a >> 31) >>> (32 − k) is d − 1 for a negative a, else 0.
                let (sign, bias, t) = (r(self), r(self), r(self));
                emit!(self, "shr.s32 {sign}, {a}, 31");
                emit!(self, "shr.u32 {bias}, {sign}, {}", 32 - k);
                emit!(self, "add.s32 {t}, {a}, {bias}");
                if rem {
                    let (whole, out) = (r(self), r(self));
                    emit!(self, "and.b32 {whole}, {t}, {}", -d);
                    emit!(self, "sub.s32 {out}, {a}, {whole}");
                    return Some(out);
                }
                let q = r(self);
                emit!(self, "shr.s32 {q}, {t}, {k}");
                q
            }
            Plan::Magic { m, s } => {
                let hi = r(self);
                emit!(self, "mul.hi.s32 {hi}, {a}, {m}");
                let mut t = hi;
                if m < 0 {
                    let u = r(self);
                    emit!(self, "add.s32 {u}, {t}, {a}");
                    t = u;
                }
                if s > 0 {
                    let u = r(self);
                    emit!(self, "shr.s32 {u}, {t}, {s}");
                    t = u;
                }
                let (neg, q) = (r(self), r(self));
                emit!(self, "shr.u32 {neg}, {t}, 31");
                emit!(self, "add.s32 {q}, {t}, {neg}");
                q
            }
        };
        if !rem {
            return Some(q);
        }
        let (whole, out) = (r(self), r(self));
        emit!(self, "mul.lo.s32 {whole}, {q}, {d}");
        emit!(self, "sub.s32 {out}, {a}, {whole}");
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan evaluated on the host, instruction by instruction as emitted.
    fn divide(a: i32, d: i32) -> i32 {
        match plan(d).unwrap() {
            Plan::Shift(k) => {
                let bias = ((a >> 31) as u32 >> (32 - k)) as i32;
                a.wrapping_add(bias) >> k
            }
            Plan::Magic { m, s } => {
                let mut t = ((a as i64 * m as i64) >> 32) as i32;
                if m < 0 {
                    t = t.wrapping_add(a);
                }
                t >>= s;
                t.wrapping_add((t as u32 >> 31) as i32)
            }
        }
    }

    #[test]
    fn quotients_round_toward_zero_for_every_divisor_kind() {
        let mut divisors: Vec<i32> = (2..=300).collect();
        divisors.extend([641, 1000, 4096, 6700417, 1 << 30, (1 << 30) + 1, i32::MAX - 1, i32::MAX]);
        let mut xs: Vec<i32> = (-2000..=2000).collect();
        xs.extend([i32::MIN, i32::MIN + 1, i32::MAX, i32::MAX - 1, 1 << 30, -(1 << 30)]);
        let mut seed = 0x9e3779b97f4a7c15u64;
        for _ in 0..4000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            xs.push(seed as i32);
        }
        for &d in &divisors {
            for &a in &xs {
                assert_eq!(divide(a, d), a / d, "{a} / {d} ({:?})", plan(d));
            }
        }
    }

    #[test]
    fn divisors_below_two_have_no_plan() {
        for d in [i32::MIN, -7, -2, -1, 0, 1] {
            assert_eq!(plan(d), None);
        }
        assert_eq!(plan(64), Some(Plan::Shift(6)));
        assert_eq!(plan(7), Some(Plan::Magic { m: -1840700269, s: 2 }));
    }
}
