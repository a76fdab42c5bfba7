//! Interpreter: row softmax (reductions) and cumsum / cumprod on 2-D tiles.

#[path = "interp_util.rs"]
mod util;

use half::{bf16, f16};
use replay_dsl::front::builder::trace;
use replay_dsl::front::tile::Tile;
use replay_dsl::host::HostElem;
use replay_dsl::interp::{run, Arg, Memory};
use replay_dsl::ir::{CmpOp, Kernel};
use replay_dsl::prelude::*;
use replay_dsl::Elem;
use util::*;

/// Softmax of each row of an `[m, n]` matrix (row stride `n`), `ROWS` rows per program as a
/// `[ROWS, BLOCK]` tile, computed in f32 and stored as `T`.
fn softmax_kernel<T: Float + HostElem>(rows: usize, block: usize) -> Kernel {
    let e = <T as HostElem>::ELEM;
    let params = vec![ptr("x", e), ptr("out", e), val("m", Elem::I32), val("n", Elem::I32)];
    let cx = vec![("ROWS".into(), rows as i64), ("BLOCK".into(), block as i64)];
    trace("softmax", params, cx, 4, |a| {
        let x = Tile::<Ptr<T>>::from_value(a[0]);
        let out = Tile::<Ptr<T>>::from_value(a[1]);
        let m = Tile::<i32>::from_value(a[2]);
        let n = Tile::<i32>::from_value(a[3]);
        let r = (program_id(0) * rows + arange(rows)).expand_dims(1); // [ROWS, 1]
        let c = arange(block).expand_dims(0); // [1, BLOCK]
        let mask = r.compare(CmpOp::Lt, m).and(c.compare(CmpOp::Lt, n));
        let offs = r * n + c;
        let v = load_or(x + offs, mask, full([rows, block], T::from_f64(f64::NEG_INFINITY))).cast::<f32>();
        let mx = max(v, 1).expand_dims(1);
        let ex = exp(v - mx);
        let s = sum(ex, 1).expand_dims(1);
        store(out + offs, (ex / s).cast::<T>(), mask);
    })
    .unwrap()
}

fn check_softmax<T: Float + HostElem>(rng: &mut Rng, rtol: f64, atol: f64) {
    let e = <T as HostElem>::ELEM;
    let (rows, block) = (4, 128);
    let k = softmax_kernel::<T>(rows, block);
    let m = rng.int(200, 400) as usize;
    let n = rng.int(65, 128) as usize;
    let x: Vec<T> = rng.vec(m * n, -8.0, 8.0);
    let mut mem = Memory::new();
    let bx = mem.alloc(&x);
    let bo = mem.alloc(&poison::<T>(m * n));
    let grid = m.div_ceil(rows) as u32;
    run(
        &k,
        [grid, 1, 1],
        &[Arg::ptr(bx), Arg::ptr(bo), Arg::I32(m as i32), Arg::I32(n as i32)],
        &mut mem,
    )
    .unwrap();
    let out = to_f64(&mem.read::<T>(bo));
    let xs = to_f64(&x);
    let mut want = vec![0.0; m * n];
    for i in 0..m {
        let row = &xs[i * n..(i + 1) * n];
        let mx = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|v| (v - mx).exp()).sum();
        for j in 0..n {
            want[i * n + j] = (row[j] - mx).exp() / s;
        }
    }
    // atol: the spacing of T's subnormals, where outputs lose relative precision.
    assert_close_scaled(&format!("softmax {e} [{m}x{n}]"), &out, &want, None, rtol, atol);
    for i in 0..m {
        let s: f64 = out[i * n..(i + 1) * n].iter().sum();
        assert!((s - 1.0).abs() < rtol * 10.0, "row {i} sums to {s}");
    }
}

#[test]
fn row_softmax() {
    let mut rng = Rng::for_test("softmax");
    check_softmax::<f32>(&mut rng, 1e-5, 0.0);
    check_softmax::<f16>(&mut rng, 1e-3, 2f64.powi(-24));
    check_softmax::<bf16>(&mut rng, 8e-3, 0.0);
}

/// Reductions over both axes of a 2-D tile, in f32 and i32, with max/min/sum.
#[test]
fn reductions_on_both_axes() {
    let (r, c) = (8usize, 16usize);
    let params = vec![
        ptr("x", Elem::F32),
        ptr("xi", Elem::I32),
        ptr("out", Elem::F32),
        ptr("outi", Elem::I32),
    ];
    let k = trace("reductions", params, vec![], 4, |a| {
        let x = Tile::<Ptr<f32>>::from_value(a[0]);
        let xi = Tile::<Ptr<i32>>::from_value(a[1]);
        let out = Tile::<Ptr<f32>>::from_value(a[2]);
        let outi = Tile::<Ptr<i32>>::from_value(a[3]);
        let offs = arange(r).expand_dims(1) * c + arange(c).expand_dims(0);
        let v = load(x + offs, true);
        let vi = load(xi + offs, true);
        store(out + arange(c), sum(v, 0), true);
        store(out + (c + arange(r)), sum(v, 1), true);
        store(out + (c + r + arange(c)), max(v, 0), true);
        store(out + (2 * c + r + arange(r)), min(v, 1), true);
        store(out + (2 * c + 2 * r), sum_all(v), true);
        store(outi + arange(c), sum(vi, 0), true);
        store(outi + (c + arange(r)), max(vi, 1), true);
        store(outi + (c + r), min_all(vi), true);
    })
    .unwrap();
    let mut rng = Rng::for_test("reductions");
    let x: Vec<f32> = rng.vec(r * c, -5.0, 5.0);
    let xi: Vec<i32> = (0..r * c).map(|_| rng.int(-1_000_000, 1_000_000) as i32).collect();
    let mut mem = Memory::new();
    let (bx, bxi) = (mem.alloc(&x), mem.alloc(&xi));
    let bo = mem.alloc(&poison::<f32>(2 * c + 2 * r + 1));
    let boi = mem.alloc(&vec![i32::MIN; c + r + 1]);
    run(
        &k,
        [1, 1, 1],
        &[Arg::ptr(bx), Arg::ptr(bxi), Arg::ptr(bo), Arg::ptr(boi)],
        &mut mem,
    )
    .unwrap();
    let out = to_f64(&mem.read::<f32>(bo));
    let outi = mem.read::<i32>(boi);
    let at = |i: usize, j: usize| x[i * c + j] as f64;
    let mut want = vec![];
    let mut scale = vec![];
    for j in 0..c {
        want.push((0..r).map(|i| at(i, j)).sum::<f64>());
        scale.push((0..r).map(|i| at(i, j).abs()).sum::<f64>());
    }
    for i in 0..r {
        want.push((0..c).map(|j| at(i, j)).sum::<f64>());
        scale.push((0..c).map(|j| at(i, j).abs()).sum::<f64>());
    }
    for j in 0..c {
        want.push((0..r).map(|i| at(i, j)).fold(f64::NEG_INFINITY, f64::max));
        scale.push(1.0);
    }
    for i in 0..r {
        want.push((0..c).map(|j| at(i, j)).fold(f64::INFINITY, f64::min));
        scale.push(1.0);
    }
    want.push(x.iter().map(|&v| v as f64).sum());
    scale.push(x.iter().map(|&v| (v as f64).abs()).sum());
    assert_close_scaled("f32 reductions", &out, &want, Some(&scale), 1e-6, 0.0);
    for j in 0..c {
        assert_eq!(outi[j], (0..r).map(|i| xi[i * c + j]).sum::<i32>());
    }
    for i in 0..r {
        assert_eq!(outi[c + i], *xi[i * c..(i + 1) * c].iter().max().unwrap());
    }
    assert_eq!(outi[c + r], *xi.iter().min().unwrap());
}

/// cumsum and cumprod along both axes of `[R, C]` tiles; program `p` handles rows
/// `p*R..(p+1)*R` of an `[G*R, C]` matrix. With `in_f32` the scans run in f32 (as a real kernel
/// on half types would), else in `T` itself.
fn scan_kernel<T: Float + HostElem>(r: usize, c: usize, in_f32: bool) -> Kernel {
    let e = <T as HostElem>::ELEM;
    let params = vec![ptr("x", e), ptr("out", e), val("total", Elem::I32)];
    trace("scans", params, vec![("F32".into(), in_f32 as i64)], 4, |a| {
        let x = Tile::<Ptr<T>>::from_value(a[0]);
        let out = Tile::<Ptr<T>>::from_value(a[1]);
        let total = Tile::<i32>::from_value(a[2]);
        let rows = (program_id(0) * r + arange(r)).expand_dims(1);
        let offs = rows * c + arange(c).expand_dims(0);
        let v = load(x + offs, true);
        let scans = if in_f32 {
            let v = v.cast::<f32>();
            [cumsum(v, 0), cumsum(v, 1), cumprod(v, 0), cumprod(v, 1)].map(|t| t.cast::<T>())
        } else {
            [cumsum(v, 0), cumsum(v, 1), cumprod(v, 0), cumprod(v, 1)]
        };
        for (i, t) in scans.into_iter().enumerate() {
            store(out + total * (i as i32) + offs, t, true);
        }
    })
    .unwrap()
}

fn check_scans<T: Float + HostElem>(rng: &mut Rng, rtol: f64) {
    let e = <T as HostElem>::ELEM;
    let (r, c, g) = (16, 32, 37);
    let total = g * r * c;
    // Values near ±1 keep products in range; signs mix so sums cancel.
    let x: Vec<T> = (0..total)
        .map(|_| {
            let m = rng.range(0.8, 1.25);
            T::from_f64(if rng.u32().is_multiple_of(2) { m } else { -m })
        })
        .collect();
    let xs = to_f64(&x);
    let launch = |in_f32: bool| {
        let k = scan_kernel::<T>(r, c, in_f32);
        let mut mem = Memory::new();
        let bx = mem.alloc(&x);
        let bo = mem.alloc(&poison::<T>(4 * total));
        run(
            &k,
            [g as u32, 1, 1],
            &[Arg::ptr(bx), Arg::ptr(bo), Arg::I32(total as i32)],
            &mut mem,
        )
        .unwrap();
        to_f64(&mem.read::<T>(bo))
    };
    // f64 reference (want, with scale Σ|x| resp. |Π x|) and the documented sequential order
    // emulated with rounding to T after every step (emu).
    let round = |v: f64| T::from_f64(v).to_f64();
    let (mut want, mut scale, mut emu) = (vec![0.0; 4 * total], vec![0.0; 4 * total], vec![0.0; 4 * total]);
    for p in 0..g {
        let idx = |i: usize, j: usize| (p * r + i) * c + j;
        let mut walk = |cells: Vec<usize>, sum_at: usize, prod_at: usize| {
            let (mut s, mut sa, mut pr) = (0.0, 0.0, 1.0);
            let (mut es, mut ep) = (0.0, 1.0);
            for (n, &q) in cells.iter().enumerate() {
                s += xs[q];
                sa += xs[q].abs();
                pr *= xs[q];
                (es, ep) = if n == 0 {
                    (xs[q], xs[q])
                } else {
                    (round(es + xs[q]), round(ep * xs[q]))
                };
                (want[sum_at + q], scale[sum_at + q], emu[sum_at + q]) = (s, sa, es);
                (want[prod_at + q], scale[prod_at + q], emu[prod_at + q]) = (pr, pr.abs(), ep);
            }
        };
        for j in 0..c {
            walk((0..r).map(|i| idx(i, j)).collect(), 0, 2 * total);
        }
        for i in 0..r {
            walk((0..c).map(|j| idx(i, j)).collect(), total, 3 * total);
        }
    }
    let out = launch(true);
    assert_close_scaled(
        &format!("{e} cumsum/cumprod in f32"),
        &out,
        &want,
        Some(&scale),
        rtol,
        0.0,
    );
    let native = launch(false);
    for i in 0..4 * total {
        assert_eq!(
            native[i], emu[i],
            "{e} native scan element {i}: not the sequential order"
        );
    }
}

#[test]
fn cumsum_and_cumprod_on_2d_tiles() {
    let mut rng = Rng::for_test("scans");
    check_scans::<f32>(&mut rng, 1e-5);
    check_scans::<f16>(&mut rng, 1e-3);
    check_scans::<bf16>(&mut rng, 8e-3);
}

#[test]
fn integer_cumsum_wraps() {
    let k = trace(
        "iscan",
        vec![ptr("x", Elem::I32), ptr("out", Elem::I32)],
        vec![],
        4,
        |a| {
            let x = Tile::<Ptr<i32>>::from_value(a[0]);
            let out = Tile::<Ptr<i32>>::from_value(a[1]);
            let offs = arange(4).expand_dims(1) * 8 + arange(8).expand_dims(0);
            let v = load(x + offs, true);
            store(out + offs, cumsum(v, 1), true);
            store(out + (offs + 32), cumprod(v, 0), true);
        },
    )
    .unwrap();
    let mut rng = Rng::for_test("iscan");
    let x: Vec<i32> = (0..32).map(|_| rng.int(-2_000_000_000, 2_000_000_000) as i32).collect();
    let mut mem = Memory::new();
    let bx = mem.alloc(&x);
    let bo = mem.alloc_zeroed::<i32>(64);
    run(&k, [1, 1, 1], &[Arg::ptr(bx), Arg::ptr(bo)], &mut mem).unwrap();
    let out = mem.read::<i32>(bo);
    for i in 0..4 {
        let mut s = 0i32;
        for j in 0..8 {
            s = s.wrapping_add(x[i * 8 + j]);
            assert_eq!(out[i * 8 + j], s);
        }
    }
    for j in 0..8 {
        let mut p = 1i32;
        for i in 0..4 {
            p = p.wrapping_mul(x[i * 8 + j]);
            assert_eq!(out[32 + i * 8 + j], p);
        }
    }
}
