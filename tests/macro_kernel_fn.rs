//! `#[kernel_fn]` helpers (kernel syntax in plain functions, generic over the dtype) and
//! `#[kernel(num_warps = N)]`, checked through the traced IR and the interpreter.

use half::f16;
use replay_dsl::interp::{run, Arg, Memory};
use replay_dsl::ir::{walk_insts, Kernel, Op};
use replay_dsl::prelude::*;
use replay_dsl::ConfigValues;

/// One update of a state tile of any float dtype, in f32: where `-a < h < a`, `s = 2·s + x`,
/// elsewhere `s = s + x`, `n` times (a runtime loop); then `s - 1` when `n > 2` (a runtime
/// branch); rounded back to `T`.
#[kernel_fn]
fn step<T: Float>(h: Tile<T>, a: Tile<T>, x: Tile<f32>, n: Tile<i32>) -> Tile<T> {
    let mut s = h.cast::<f32>();
    let grow = a > h && h > -a;
    for _ in range(0, n) {
        s = select(grow, s * 2.0, s) + x;
    }
    if n > 2 {
        s -= 1.0;
    }
    s.cast::<T>()
}

/// `1` where `lo <= v`, else `0`, or the reverse when `flip` (a value-producing `if` on a
/// compile-time `bool`, and `||` on tiles).
#[kernel_fn]
fn indicator(v: Tile<f32>, lo: f32, flip: bool) -> Tile<f32> {
    let inside = v >= lo || v != v;
    let one = if flip {
        select(inside, 0.0, 1.0)
    } else {
        select(inside, 1.0, 0.0)
    };
    one
}

/// `step` on an f32 state.
#[kernel]
fn step_f32(
    h: Ptr<f32>,
    a: Ptr<f32>,
    x: Ptr<f32>,
    out: Ptr<f32>,
    ind: Ptr<f32>,
    n: i32,
    #[constexpr(default = 16)] B: usize,
) {
    let o = arange(B);
    let r = step(load(h + o, true), load(a + o, true), load(x + o, true), n);
    store(out + o, r, true);
    store(ind + o, indicator(r, 0.0, false), true);
}

/// `step` on an f16 state, with two warps by default.
#[kernel(num_warps = 2)]
fn step_f16(h: Ptr<f16>, a: Ptr<f16>, x: Ptr<f32>, out: Ptr<f16>, n: i32, #[constexpr(default = 16)] B: usize) {
    let o = arange(B);
    store(
        out + o,
        step(load(h + o, true), load(a + o, true), load(x + o, true), n),
        true,
    );
}

/// A kernel without constexpr defaults (no `Default` config) and a default `num_warps`.
#[kernel(num_warps = 16)]
fn wide(out: Ptr<f32>, #[constexpr] B: usize) {
    let o = arange(B);
    store(out + o, indicator(o.cast::<f32>(), 2.0, true), true);
}

fn reference(h: f32, a: f32, x: f32, n: i32) -> f32 {
    let mut s = h;
    for _ in 0..n {
        s = if -a < h && h < a { 2.0 * s } else { s } + x;
    }
    if n > 2 {
        s -= 1.0;
    }
    s
}

/// Inputs whose results are exact in f16: h, a ∈ {-2, …, 2} / 2, x ∈ {0.5, 1}.
fn inputs(b: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let h = (0..b).map(|i| ((i * 7) % 9) as f32 / 2.0 - 2.0).collect();
    let a = (0..b).map(|i| ((i * 5) % 9) as f32 / 2.0 - 2.0).collect();
    let x = (0..b).map(|i| if i % 3 == 0 { 0.5 } else { 1.0 }).collect();
    (h, a, x)
}

fn ops(k: &Kernel, pred: impl Fn(&Op) -> bool) -> usize {
    let mut n = 0;
    walk_insts(&k.body, &mut |i| n += usize::from(pred(&i.op)));
    n
}

#[test]
fn helper_rewrites_control_flow_and_comparisons() {
    let k = step_f32::trace(&step_f32::Config::default()).unwrap();
    assert_eq!(ops(&k, |o| matches!(o, Op::For { .. })), 1, "{k}");
    assert_eq!(ops(&k, |o| matches!(o, Op::If { .. })), 1, "{k}");
    // a > h, h > -a, n > 2 (in the helper); v >= lo, v != v (in `indicator`).
    assert_eq!(ops(&k, |o| matches!(o, Op::Cmp(..))), 5, "{k}");
    assert_eq!(k.num_warps, 4);
}

#[test]
fn helper_runs_in_f32_and_f16() {
    let b = 16;
    let (h, a, x) = inputs(b);
    for n in [0, 1, 3] {
        let want: Vec<f32> = (0..b).map(|i| reference(h[i], a[i], x[i], n)).collect();
        // f32
        let k = step_f32::trace(&step_f32::Config::default()).unwrap();
        let mut mem = Memory::new();
        let bufs = [mem.alloc(&h), mem.alloc(&a), mem.alloc(&x)];
        let (out, ind) = (mem.alloc(&vec![f32::NAN; b]), mem.alloc(&vec![f32::NAN; b]));
        let mut args: Vec<Arg> = bufs.iter().map(|&p| Arg::ptr(p)).collect();
        args.extend([Arg::ptr(out), Arg::ptr(ind), Arg::I32(n)]);
        run(&k, [1, 1, 1], &args, &mut mem).unwrap();
        assert_eq!(mem.read::<f32>(out), want, "f32, n = {n}");
        let ind_want: Vec<f32> = want.iter().map(|&v| if v >= 0.0 { 1.0 } else { 0.0 }).collect();
        assert_eq!(mem.read::<f32>(ind), ind_want, "indicator, n = {n}");
        // f16
        let k = step_f16::trace(&step_f16::Config::default()).unwrap();
        let f = |v: &[f32]| v.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>();
        let mut mem = Memory::new();
        let (hb, ab, xb) = (mem.alloc(&f(&h)), mem.alloc(&f(&a)), mem.alloc(&x));
        let out = mem.alloc(&vec![f16::NAN; b]);
        let args = [Arg::ptr(hb), Arg::ptr(ab), Arg::ptr(xb), Arg::ptr(out), Arg::I32(n)];
        run(&k, [1, 1, 1], &args, &mut mem).unwrap();
        assert_eq!(mem.read::<f16>(out), f(&want), "f16, n = {n}");
    }
}

#[test]
fn kernel_option_sets_the_default_num_warps() {
    let cfg = step_f16::Config::default();
    assert_eq!(cfg.num_warps, 2);
    assert_eq!(step_f16::trace(&cfg).unwrap().num_warps, 2);
    // Names left out of `from_values` take the defaults, `num_warps` included.
    assert_eq!(step_f16::Config::from_values(&[("B", 32)]).unwrap().num_warps, 2);
    assert_eq!(
        step_f16::Config::from_values(&[("num_warps", 8)]).unwrap(),
        step_f16::Config {
            B: 16,
            num_warps: 8,
            min_blocks: 1
        }
    );
    assert_eq!(
        step_f16::Config::default().values(),
        vec![("B", 16), ("num_warps", 2), ("min_blocks", 1)]
    );
    // Without a `Default` config.
    let w = wide::Config::from_values(&[("B", 64)]).unwrap();
    assert_eq!(w.num_warps, 16);
    assert_eq!(wide::trace(&w).unwrap().num_warps, 16);
    assert_eq!(step_f32::Config::default().num_warps, 4);
}
