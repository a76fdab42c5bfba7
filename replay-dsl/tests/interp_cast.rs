//! Interpreter: casts (nearest and stochastic rounding, saturation, NaN) and integer
//! semantics (division, remainder, shifts, wrapping).

#[path = "interp_util.rs"]
mod util;

use float8::F8E4M3;
use half::{bf16, f16};
use replay_dsl::front::builder::trace;
use replay_dsl::front::tile::Tile;
use replay_dsl::host::{stochastic_round, HostElem};
use replay_dsl::interp::{run, Arg, InterpError, Memory};
use replay_dsl::ir::Kernel;
use replay_dsl::prelude::*;
use util::*;

/// out[i] = (D) x[i] for a block of N elements.
fn cast_kernel<S: Scalar + HostElem, D: Scalar + HostElem>(n: usize) -> Kernel {
    let params = vec![ptr("x", <S as HostElem>::ELEM), ptr("out", <D as HostElem>::ELEM)];
    trace("cast", params, vec![], 4, |a| {
        let x = Tile::<Ptr<S>>::from_value(a[0]);
        let out = Tile::<Ptr<D>>::from_value(a[1]);
        let offs = arange(n);
        store(out + offs, load(x + offs, true).cast::<D>(), true);
    })
    .unwrap()
}

/// Runs the cast kernel on `x` (padded to a power of two with copies of x[0]).
fn cast_all<S: Scalar + HostElem, D: Scalar + HostElem>(x: &[S]) -> Vec<D> {
    let n = x.len().next_power_of_two();
    let mut xs = x.to_vec();
    xs.resize(n, x[0]);
    let k = cast_kernel::<S, D>(n);
    let mut mem = Memory::new();
    let bx = mem.alloc(&xs);
    let bo = mem.alloc_zeroed::<D>(n);
    run(&k, [1, 1, 1], &[Arg::ptr(bx), Arg::ptr(bo)], &mut mem).unwrap();
    let mut out = mem.read::<D>(bo);
    out.truncate(x.len());
    out
}

fn special_f32() -> Vec<f32> {
    vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.1,
        1e-8,
        -1e-8,
        6e-8,
        3e-5,
        2.0e-3,
        0.3,
        448.0,
        449.0,
        464.0,
        464.1,
        480.0,
        -500.0,
        1e6,
        -1e6,
        65504.0,
        65519.9,
        65520.0,
        70000.0,
        1e30,
        -3e38,
        f32::MAX,
        f32::MIN_POSITIVE,
        1e-40,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        2.5,
        3.5,
        -2.5,
        1.0 + f32::EPSILON,
        0.0078125,
        0.00390625,
    ]
}

fn random_f32(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| match i % 3 {
            0 => f32::from_bits(rng.u32()),
            1 => rng.range(-600.0, 600.0) as f32,
            _ => (rng.range(-1.0, 1.0) * 2f64.powi(rng.int(-30, 20) as i32)) as f32,
        })
        .collect()
}

fn same(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn float_to_narrow_float_rounds_to_nearest_even_and_saturates() {
    let mut rng = Rng::for_test("narrow");
    let mut x = special_f32();
    x.extend(random_f32(&mut rng, 4000));
    let h: Vec<f16> = cast_all(&x);
    let b: Vec<bf16> = cast_all(&x);
    let q: Vec<F8E4M3> = cast_all(&x);
    for i in 0..x.len() {
        assert!(
            same(h[i].to_f64(), f16::from_f32(x[i]).to_f64()),
            "f16({:e}) = {}",
            x[i],
            h[i]
        );
        assert!(
            same(b[i].to_f64(), bf16::from_f32(x[i]).to_f64()),
            "bf16({:e}) = {}",
            x[i],
            b[i]
        );
        assert!(
            same(q[i].to_f64(), F8E4M3::from_f32(x[i]).to_f64()),
            "e4m3({:e}) = {}",
            x[i],
            q[i]
        );
        // e4m3 saturates (also infinities); NaN stays NaN.
        let qv = q[i].to_f64();
        if x[i].is_nan() {
            assert!(qv.is_nan());
        } else {
            assert!(qv.abs() <= 448.0, "e4m3({}) = {qv}", x[i]);
            if x[i].abs() >= 464.0 {
                assert_eq!(qv, 448f64.copysign(x[i] as f64));
            }
        }
    }
    // Spot checks of the rules.
    let g = |v: f32| cast_all::<f32, f16>(&[v])[0].to_f64();
    assert_eq!(g(65519.9), 65504.0);
    assert_eq!(g(65520.0), f64::INFINITY);
    assert_eq!(g(1.0 + 2f32.powi(-11)), 1.0); // tie → even
    assert_eq!(g(1.0 + 3.0 * 2f32.powi(-11)), 1.0 + 2f64.powi(-9)); // tie → even (up)
    assert!(g(f32::NAN).is_nan());
    let g8 = |v: f32| cast_all::<f32, F8E4M3>(&[v])[0].to_f64();
    assert_eq!(g8(1e6), 448.0);
    assert_eq!(g8(f32::NEG_INFINITY), -448.0);
    assert_eq!(g8(17.0), 16.0); // tie between 16 and 18 → even mantissa (16)
    assert_eq!(g8(19.0), 20.0); // tie between 18 and 20 → 20
                                // Widening is exact.
    let back: Vec<f32> = cast_all(&h);
    for i in 0..x.len() {
        assert!(same(back[i] as f64, h[i].to_f64()));
    }
    let wide: Vec<f16> = cast_all(&q);
    for i in 0..x.len() {
        assert!(same(wide[i].to_f64(), q[i].to_f64()));
    }
}

#[test]
fn float_to_int_truncates_saturates_and_maps_nan_to_zero() {
    let mut rng = Rng::for_test("f2i");
    let mut x = special_f32();
    x.extend([-0.9, 0.9, -1.5, 2.99, 3e9, -3e9, 5e9, 2147483520.0, -2147483648.0]);
    x.extend(random_f32(&mut rng, 1000));
    let i: Vec<i32> = cast_all(&x);
    let u: Vec<u32> = cast_all(&x);
    let l: Vec<i64> = cast_all(&x);
    let b: Vec<bool> = cast_all(&x);
    for k in 0..x.len() {
        assert_eq!(i[k], x[k] as i32, "i32({:e})", x[k]);
        assert_eq!(u[k], x[k] as u32, "u32({:e})", x[k]);
        assert_eq!(l[k], x[k] as i64, "i64({:e})", x[k]);
        assert_eq!(b[k], x[k] != 0.0, "bool({:e})", x[k]);
    }
}

#[test]
fn int_conversions() {
    let mut rng = Rng::for_test("ints");
    let mut x: Vec<i32> = vec![
        0,
        1,
        -1,
        i32::MAX,
        i32::MIN,
        65504,
        65520,
        70000,
        16_777_217,
        -16_777_219,
        448,
        464,
        465,
        1000,
    ];
    x.extend((0..1000).map(|_| rng.u32() as i32));
    let f: Vec<f32> = cast_all(&x);
    let h: Vec<f16> = cast_all(&x);
    let bf: Vec<bf16> = cast_all(&x);
    let q: Vec<F8E4M3> = cast_all(&x);
    let l: Vec<i64> = cast_all(&x);
    let u: Vec<u32> = cast_all(&x);
    let b: Vec<bool> = cast_all(&x);
    for k in 0..x.len() {
        assert_eq!(f[k], x[k] as f32);
        // i32 → f32 is exact enough here that rounding via f32 is single rounding for f16
        // except at ties; compare with the exactly rounded reference instead.
        assert!(
            same(h[k].to_f64(), <f16 as HostElem>::from_f64(x[k] as f64).to_f64()),
            "f16({})",
            x[k]
        );
        assert!(
            same(bf[k].to_f64(), <bf16 as HostElem>::from_f64(x[k] as f64).to_f64()),
            "bf16({})",
            x[k]
        );
        assert!(
            same(q[k].to_f64(), <F8E4M3 as HostElem>::from_f64(x[k] as f64).to_f64()),
            "e4m3({})",
            x[k]
        );
        assert_eq!(l[k], x[k] as i64);
        assert_eq!(u[k], x[k] as u32);
        assert_eq!(b[k], x[k] != 0);
    }
    assert_eq!(h[5].to_f64(), 65504.0);
    assert_eq!(h[6].to_f64(), f64::INFINITY);
    assert_eq!(q[13].to_f64(), 448.0);
    // Wrapping narrowing and bool → int.
    let big: Vec<i64> = vec![1 << 40, -(1 << 33) - 5, i64::MAX, i64::MIN, 3_000_000_000, -1];
    let narrowed: Vec<i32> = cast_all(&big);
    let as_u: Vec<u32> = cast_all(&big);
    for k in 0..big.len() {
        assert_eq!(narrowed[k], big[k] as i32);
        assert_eq!(as_u[k], big[k] as u32);
    }
    let us: Vec<u32> = vec![u32::MAX, 1 << 31, 5];
    let back: Vec<i32> = cast_all(&us);
    assert_eq!(back, vec![-1, i32::MIN, 5]);
    let wide: Vec<i64> = cast_all(&us);
    assert_eq!(wide, vec![u32::MAX as i64, 1 << 31, 5]);
    let bools = vec![true, false, true, true];
    assert_eq!(cast_all::<bool, i32>(&bools), vec![1, 0, 1, 1]);
    assert_eq!(cast_all::<bool, f32>(&bools), vec![1.0, 0.0, 1.0, 1.0]);
}

/// The stochastic cast in a kernel equals `host::stochastic_round` bit for bit.
#[test]
fn stochastic_cast_in_a_kernel() {
    fn kernel<D: Float + HostElem>(n: usize) -> Kernel {
        let params = vec![
            ptr("x", replay_dsl::Elem::F32),
            ptr("bits", replay_dsl::Elem::U32),
            ptr("out", <D as HostElem>::ELEM),
        ];
        trace("cast_rs", params, vec![], 4, |a| {
            let x = Tile::<Ptr<f32>>::from_value(a[0]);
            let bits = Tile::<Ptr<u32>>::from_value(a[1]);
            let out = Tile::<Ptr<D>>::from_value(a[2]);
            let offs = arange(n);
            let v = load(x + offs, true);
            store(out + offs, v.cast_stochastic::<D>(load(bits + offs, true)), true);
        })
        .unwrap()
    }
    fn check<D: Float + HostElem>(rng: &mut Rng) {
        let n = 2048;
        let mut x = special_f32();
        x.extend(random_f32(rng, n - x.len()));
        let bits: Vec<u32> = (0..n).map(|_| rng.u32()).collect();
        let mut mem = Memory::new();
        let (bx, bb) = (mem.alloc(&x), mem.alloc(&bits));
        let bo = mem.alloc_zeroed::<D>(n);
        run(
            &kernel::<D>(n),
            [1, 1, 1],
            &[Arg::ptr(bx), Arg::ptr(bb), Arg::ptr(bo)],
            &mut mem,
        )
        .unwrap();
        let out = mem.read::<D>(bo);
        for i in 0..n {
            let want = stochastic_round(x[i], bits[i], <D as HostElem>::ELEM);
            assert!(
                same(out[i].to_f64(), want),
                "{:?}: sr({:e}, {}) = {:?}, want {want}",
                <D as HostElem>::ELEM,
                x[i],
                bits[i],
                out[i]
            );
        }
    }
    let mut rng = Rng::for_test("cast_rs");
    check::<f16>(&mut rng);
    check::<bf16>(&mut rng);
    check::<F8E4M3>(&mut rng);
}

/// Integer division truncates toward zero; the remainder has the dividend's sign; both wrap.
#[test]
fn integer_division_and_remainder_with_negative_operands() {
    fn kernel<T: Int + HostElem>(n: usize) -> Kernel {
        let e = <T as HostElem>::ELEM;
        let params = vec![
            ptr("a", e),
            ptr("b", e),
            ptr("q", e),
            ptr("r", e),
            ptr("s", e),
            ptr("ss", e),
        ];
        trace("divrem", params, vec![], 4, |p| {
            let (a, b) = (Tile::<Ptr<T>>::from_value(p[0]), Tile::<Ptr<T>>::from_value(p[1]));
            let (q, r) = (Tile::<Ptr<T>>::from_value(p[2]), Tile::<Ptr<T>>::from_value(p[3]));
            let (s, ss) = (Tile::<Ptr<T>>::from_value(p[4]), Tile::<Ptr<T>>::from_value(p[5]));
            let offs = arange(n);
            let (x, y) = (load(a + offs, true), load(b + offs, true));
            store(q + offs, x / y, true);
            store(r + offs, x % y, true);
            let sh = y & full([n], T::from_f64(63.0)); // shift amounts 0..63, some ≥ the width
            store(s + offs, x << sh, true);
            store(ss + offs, x >> sh, true);
        })
        .unwrap()
    }
    let mut rng = Rng::for_test("divrem");
    let n = 1024;
    // i32, including i32::MIN / -1 (wraps to i32::MIN, remainder 0).
    let mut a: Vec<i32> = vec![7, -7, 7, -7, i32::MIN, i32::MIN, 0, -1];
    let mut b: Vec<i32> = vec![2, 2, -2, -2, -1, 1, 5, 40];
    while a.len() < n {
        a.push(rng.int(-100_000, 100_000) as i32);
        let d = rng.int(-300, 300) as i32;
        b.push(if d == 0 { 3 } else { d });
    }
    let mut mem = Memory::new();
    let (ba, bb) = (mem.alloc(&a), mem.alloc(&b));
    let outs: Vec<_> = (0..4).map(|_| mem.alloc_zeroed::<i32>(n)).collect();
    let args: Vec<Arg> = [ba, bb].iter().chain(&outs).map(|&x| Arg::ptr(x)).collect();
    run(&kernel::<i32>(n), [1, 1, 1], &args, &mut mem).unwrap();
    let (q, r, s, ss) = (
        mem.read::<i32>(outs[0]),
        mem.read::<i32>(outs[1]),
        mem.read::<i32>(outs[2]),
        mem.read::<i32>(outs[3]),
    );
    assert_eq!(&q[..4], &[3, -3, -3, 3]);
    assert_eq!(&r[..4], &[1, -1, 1, -1]);
    assert_eq!((q[4], r[4]), (i32::MIN, 0));
    for i in 0..n {
        assert_eq!(q[i], a[i].wrapping_div(b[i]), "{} / {}", a[i], b[i]);
        assert_eq!(r[i], a[i].wrapping_rem(b[i]), "{} % {}", a[i], b[i]);
        let sh = (b[i] & 63) as u32;
        assert_eq!(s[i], if sh >= 32 { 0 } else { a[i] << sh }, "{} << {sh}", a[i]);
        assert_eq!(
            ss[i],
            if sh >= 32 { a[i] >> 31 } else { a[i] >> sh },
            "{} >> {sh}",
            a[i]
        );
    }
    // i64 and u32 (logical shift right, unsigned division).
    let a64: Vec<i64> = (0..n).map(|_| rng.next_u64() as i64 >> rng.int(0, 40)).collect();
    let b64: Vec<i64> = (0..n).map(|_| (rng.int(-1000, 1000) | 1) << rng.int(0, 20)).collect();
    let mut mem = Memory::new();
    let (ba, bb) = (mem.alloc(&a64), mem.alloc(&b64));
    let outs: Vec<_> = (0..4).map(|_| mem.alloc_zeroed::<i64>(n)).collect();
    let args: Vec<Arg> = [ba, bb].iter().chain(&outs).map(|&x| Arg::ptr(x)).collect();
    run(&kernel::<i64>(n), [1, 1, 1], &args, &mut mem).unwrap();
    let got: Vec<Vec<i64>> = outs.iter().map(|&o| mem.read::<i64>(o)).collect();
    for i in 0..n {
        let sh = (b64[i] & 63) as u32;
        assert_eq!(got[0][i], a64[i].wrapping_div(b64[i]));
        assert_eq!(got[1][i], a64[i].wrapping_rem(b64[i]));
        assert_eq!(got[2][i], a64[i] << sh);
        assert_eq!(got[3][i], a64[i] >> sh);
    }
    let au: Vec<u32> = (0..n).map(|_| rng.u32()).collect();
    let bu: Vec<u32> = (0..n).map(|_| rng.u32() >> rng.int(0, 31) | 1).collect();
    let mut mem = Memory::new();
    let (ba, bb) = (mem.alloc(&au), mem.alloc(&bu));
    let outs: Vec<_> = (0..4).map(|_| mem.alloc_zeroed::<u32>(n)).collect();
    let args: Vec<Arg> = [ba, bb].iter().chain(&outs).map(|&x| Arg::ptr(x)).collect();
    run(&kernel::<u32>(n), [1, 1, 1], &args, &mut mem).unwrap();
    let got: Vec<Vec<u32>> = outs.iter().map(|&o| mem.read::<u32>(o)).collect();
    for i in 0..n {
        let sh = bu[i] & 63;
        assert_eq!(got[0][i], au[i] / bu[i]);
        assert_eq!(got[1][i], au[i] % bu[i]);
        assert_eq!(got[2][i], if sh >= 32 { 0 } else { au[i] << sh });
        assert_eq!(got[3][i], if sh >= 32 { 0 } else { au[i] >> sh });
    }
}

#[test]
fn integer_wrapping_arithmetic() {
    let k = trace(
        "wrap",
        vec![ptr("x", replay_dsl::Elem::I32), ptr("out", replay_dsl::Elem::I32)],
        vec![],
        4,
        |a| {
            let x = Tile::<Ptr<i32>>::from_value(a[0]);
            let out = Tile::<Ptr<i32>>::from_value(a[1]);
            let offs = arange(4);
            let v = load(x + offs, true);
            store(out + offs, v * 3 + 7, true);
            store(out + (offs + 4), -v, true);
            store(out + (offs + 8), abs(v), true);
            store(out + (offs + 12), !v ^ 5, true);
        },
    )
    .unwrap();
    let x = [i32::MAX, i32::MIN, -5, 123456789];
    let mut mem = Memory::new();
    let bx = mem.alloc(&x);
    let bo = mem.alloc_zeroed::<i32>(16);
    run(&k, [1, 1, 1], &[Arg::ptr(bx), Arg::ptr(bo)], &mut mem).unwrap();
    let out = mem.read::<i32>(bo);
    for i in 0..4 {
        assert_eq!(out[i], x[i].wrapping_mul(3).wrapping_add(7));
        assert_eq!(out[4 + i], x[i].wrapping_neg());
        assert_eq!(out[8 + i], x[i].wrapping_abs());
        assert_eq!(out[12 + i], !x[i] ^ 5);
    }
}

#[test]
fn integer_division_by_zero_is_an_error() {
    let k = trace(
        "divzero",
        vec![ptr("a", replay_dsl::Elem::I32), ptr("out", replay_dsl::Elem::I32)],
        vec![],
        4,
        |p| {
            let a = Tile::<Ptr<i32>>::from_value(p[0]);
            let out = Tile::<Ptr<i32>>::from_value(p[1]);
            let offs = arange(8);
            let v = load(a + offs, true);
            store(out + offs, 100 / v, true);
        },
    )
    .unwrap();
    let mut mem = Memory::new();
    let ba = mem.alloc(&[1i32, 2, 3, 4, 5, 0, 7, 8]);
    let bo = mem.alloc_zeroed::<i32>(8);
    let err = run(&k, [1, 1, 1], &[Arg::ptr(ba), Arg::ptr(bo)], &mut mem).unwrap_err();
    assert!(
        matches!(&err, InterpError::DivisionByZero { kernel, op, program: [0, 0, 0] } if kernel == "divzero" && op == "div"),
        "{err}"
    );
    assert_eq!(mem.read::<i32>(bo), vec![0; 8]);
}
