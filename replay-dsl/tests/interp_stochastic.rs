//! `host::stochastic_round`: the properties of SEMANTICS.md's stochastic rounding.

#[path = "interp_util.rs"]
mod util;

use float8::F8E4M3;
use half::{bf16, f16};
use replay_dsl::host::stochastic_round;
use replay_dsl::Elem;
use util::*;

/// The two neighbours of `x` in the target type, toward and away from zero, computed
/// independently of the implementation (from `half` / `float8` nearest conversions and bit
/// steps). `None` when `x` is representable.
fn neighbours(x: f32, to: Elem) -> Option<(f64, f64)> {
    let a = (x as f64).abs();
    // Nearest value and its bit pattern (positive).
    let (near, up, down): (f64, f64, f64) = match to {
        Elem::F16 => {
            let n = f16::from_f64(a);
            let b = n.to_bits();
            (
                n.to_f64(),
                f16::from_bits(b + 1).to_f64(),
                if b == 0 { 0.0 } else { f16::from_bits(b - 1).to_f64() },
            )
        }
        Elem::BF16 => {
            let n = bf16::from_f32(a as f32);
            let b = n.to_bits();
            (
                n.to_f64(),
                bf16::from_bits(b + 1).to_f64(),
                if b == 0 { 0.0 } else { bf16::from_bits(b - 1).to_f64() },
            )
        }
        Elem::F8E4M3 => {
            let n = F8E4M3::from_f64(a);
            let b = n.to_bits();
            // 0x7e = 448 is the largest finite; 0x7f is NaN: saturate.
            let up = if b >= 0x7e {
                448.0
            } else {
                F8E4M3::from_bits(b + 1).to_f64()
            };
            (
                n.to_f64(),
                up,
                if b == 0 { 0.0 } else { F8E4M3::from_bits(b - 1).to_f64() },
            )
        }
        _ => unreachable!(),
    };
    if near == a {
        return None;
    }
    Some(if near < a { (near, up) } else { (down, near) })
}

fn sample(rng: &mut Rng, to: Elem) -> f32 {
    let scale = match to {
        Elem::F16 => 2f64.powi(rng.int(-26, 16) as i32),
        Elem::BF16 => 2f64.powi(rng.int(-130, 126) as i32),
        _ => 2f64.powi(rng.int(-10, 9) as i32),
    };
    (rng.range(-1.0, 1.0) * scale) as f32
}

#[test]
fn result_is_one_of_the_two_neighbours() {
    let mut rng = Rng::for_test("neighbours");
    for to in [Elem::F16, Elem::BF16, Elem::F8E4M3] {
        for _ in 0..20_000 {
            let x = sample(&mut rng, to);
            let r = rng.u32();
            let y = stochastic_round(x, r, to);
            match neighbours(x, to) {
                None => assert_eq!(y, x as f64, "{to}: exact {x:e} changed"),
                Some((lo, hi)) => {
                    let hi = if to == Elem::F16 && hi > 65504.0 {
                        f64::INFINITY
                    } else {
                        hi
                    };
                    let (lo, hi) = (lo.copysign(x as f64), hi.copysign(x as f64));
                    assert!(y == lo || y == hi, "{to}: sr({x:e}, {r}) = {y}, not in {{{lo}, {hi}}}");
                }
            }
        }
    }
}

#[test]
fn exact_values_are_unchanged_for_every_bits() {
    let mut rng = Rng::for_test("exact");
    for to in [Elem::F16, Elem::BF16, Elem::F8E4M3] {
        for _ in 0..2000 {
            // A representable value: round a sample to nearest first.
            let x = match to {
                Elem::F16 => f16::from_f32(sample(&mut rng, to)).to_f32(),
                Elem::BF16 => bf16::from_f32(sample(&mut rng, to)).to_f32(),
                _ => F8E4M3::from_f32(sample(&mut rng, to)).to_f32(),
            };
            if !x.is_finite() {
                continue;
            }
            for r in [0, 1, rng.u32(), u32::MAX] {
                assert_eq!(
                    stochastic_round(x, r, to).to_bits(),
                    (x as f64).to_bits(),
                    "{to}: {x:e}, bits {r}"
                );
            }
        }
    }
    assert!(stochastic_round(f32::NAN, 5, Elem::F16).is_nan());
    assert!(stochastic_round(f32::NAN, 5, Elem::F8E4M3).is_nan());
    assert_eq!(stochastic_round(f32::INFINITY, 5, Elem::BF16), f64::INFINITY);
    assert_eq!(stochastic_round(f32::NEG_INFINITY, 5, Elem::F8E4M3), -448.0);
    assert_eq!(stochastic_round(-0.0, 5, Elem::F16).to_bits(), (-0.0f64).to_bits());
}

#[test]
fn probability_is_exactly_p_for_crafted_bits() {
    let mut rng = Rng::for_test("crafted");
    for to in [Elem::F16, Elem::BF16, Elem::F8E4M3] {
        let mut tested = 0;
        while tested < 3000 {
            let x = sample(&mut rng, to);
            let Some((lo, hi)) = neighbours(x, to) else { continue };
            if to == Elem::F16 && hi > 65504.0 || to == Elem::F8E4M3 && lo >= 448.0 {
                continue;
            }
            tested += 1;
            let a = (x as f64).abs();
            let p = ((a - lo) / (hi - lo) * 4294967296.0).floor();
            assert!((1.0..4294967296.0).contains(&p), "{x:e}: p = {p}");
            let p = p as u64;
            let s = |v: f64| v.copysign(x as f64);
            // r < p → hi, r ≥ p → lo: exactly p of the 2^32 bit patterns round up.
            assert_eq!(stochastic_round(x, (p - 1) as u32, to), s(hi), "{to}: {x:e}, p={p}");
            if p < 1 << 32 {
                assert_eq!(stochastic_round(x, p as u32, to), s(lo), "{to}: {x:e}, p={p}");
            }
            assert_eq!(stochastic_round(x, 0, to), s(hi));
            assert_eq!(stochastic_round(x, u32::MAX, to), s(lo));
        }
    }
    // A hand-made case: 1 + 2^-12 in f16 sits a quarter of the way from 1 to 1 + 2^-10.
    let x = 1.0 + 2f32.powi(-12);
    assert_eq!(stochastic_round(x, (1 << 30) - 1, Elem::F16), 1.0 + 2f64.powi(-10));
    assert_eq!(stochastic_round(x, 1 << 30, Elem::F16), 1.0);
}

#[test]
fn mean_is_unbiased() {
    let mut rng = Rng::for_test("mean");
    for to in [Elem::F16, Elem::BF16, Elem::F8E4M3] {
        for _ in 0..20 {
            let x = loop {
                let x = sample(&mut rng, to);
                if let Some((lo, hi)) = neighbours(x, to) {
                    if !(to == Elem::F16 && hi > 65504.0 || to == Elem::F8E4M3 && lo >= 448.0) {
                        break x;
                    }
                }
            };
            let (lo, hi) = neighbours(x, to).unwrap();
            let n = 40_000;
            let mean = (0..n).map(|_| stochastic_round(x, rng.u32(), to)).sum::<f64>() / n as f64;
            let p = ((x as f64).abs() - lo) / (hi - lo);
            let se = (hi - lo) * (p * (1.0 - p) / n as f64).sqrt();
            assert!(
                (mean - x as f64).abs() <= 5.0 * se + (hi - lo) * 1e-9,
                "{to}: x={x:e} mean={mean:e} (p={p}, se={se:e})"
            );
        }
    }
}

#[test]
fn saturation_and_overflow() {
    // f8e4m3: at and past 448 both neighbours are 448.
    for x in [448.5f32, 460.0, 500.0, 1e9] {
        for r in [0, 12345, u32::MAX] {
            assert_eq!(stochastic_round(x, r, Elem::F8E4M3), 448.0);
            assert_eq!(stochastic_round(-x, r, Elem::F8E4M3), -448.0);
        }
    }
    // 416 < x < 448 rounds between 416 and 448.
    let y = stochastic_round(440.0, 0, Elem::F8E4M3);
    assert_eq!(y, 448.0);
    assert_eq!(stochastic_round(440.0, u32::MAX, Elem::F8E4M3), 416.0);
    // f16: past the largest finite, hi is infinity and p = 0: always 65504.
    for r in [0, 1, u32::MAX] {
        assert_eq!(stochastic_round(65519.0, r, Elem::F16), 65504.0);
        assert_eq!(stochastic_round(1e6, r, Elem::F16), 65504.0);
        assert_eq!(stochastic_round(-1e6, r, Elem::F16), -65504.0);
    }
    // f16 subnormals: 2^-25 is halfway between 0 and 2^-24.
    let t = 2f32.powi(-25);
    assert_eq!(stochastic_round(t, (1 << 31) - 1, Elem::F16), 2f64.powi(-24));
    assert_eq!(stochastic_round(t, 1 << 31, Elem::F16), 0.0);
}
