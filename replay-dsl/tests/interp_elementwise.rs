//! Interpreter: masked elementwise kernels with tails, in every float type.

#[path = "interp_util.rs"]
mod util;

use float8::F8E4M3;
use half::{bf16, f16};
use replay_dsl::front::builder::trace;
use replay_dsl::front::tile::Tile;
use replay_dsl::host::HostElem;
use replay_dsl::interp::{run, Arg, Memory};
use replay_dsl::ir::{CmpOp, Kernel};
use replay_dsl::prelude::*;
use replay_dsl::Elem;
use util::*;

/// out[i] = x[i] + y[i] * alpha for i < n, BLOCK elements per program.
fn axpy_kernel<T: Float + HostElem>(block: usize) -> Kernel {
    let e = <T as HostElem>::ELEM;
    let params = vec![ptr("x", e), ptr("y", e), ptr("out", e), val("n", Elem::I32)];
    trace("axpy", params, vec![("BLOCK".into(), block as i64)], 4, |a| {
        let x = Tile::<Ptr<T>>::from_value(a[0]);
        let y = Tile::<Ptr<T>>::from_value(a[1]);
        let out = Tile::<Ptr<T>>::from_value(a[2]);
        let n = Tile::<i32>::from_value(a[3]);
        let offs = program_id(0) * block + arange(block);
        let mask = offs.compare(CmpOp::Lt, n);
        let vx = load(x + offs, mask);
        let vy = load(y + offs, mask);
        // alpha = 3 in T: exact in every type.
        let alpha = full([block], T::from_f64(3.0));
        store(out + offs, vx + vy * alpha, mask);
    })
    .unwrap()
}

fn check_axpy<T: Float + HostElem>(rng: &mut Rng, lo: f64, hi: f64) {
    let e = <T as HostElem>::ELEM;
    let block = 128;
    let k = axpy_kernel::<T>(block);
    for _ in 0..3 {
        let n = rng.int(1, 2000) as usize;
        let n = if n.is_multiple_of(block) { n + 1 } else { n };
        let x: Vec<T> = rng.vec(n, lo, hi);
        let y: Vec<T> = rng.vec(n, lo, hi);
        let mut mem = Memory::new();
        let (bx, by) = (mem.alloc(&x), mem.alloc(&y));
        // Output with 5 guard elements past n: masked lanes must leave them alone.
        let bo = mem.alloc(&poison::<T>(n + 5));
        let grid = n.div_ceil(block) as u32;
        run(
            &k,
            [grid, 1, 1],
            &[Arg::ptr(bx), Arg::ptr(by), Arg::ptr(bo), Arg::I32(n as i32)],
            &mut mem,
        )
        .unwrap();
        let out: Vec<T> = mem.read(bo);
        for i in 0..n {
            // Two roundings to T: y*3, then x + that; both exact in f64 before rounding.
            let r = T::from_f64(x[i].to_f64() + T::from_f64(y[i].to_f64() * 3.0).to_f64());
            assert_eq!(
                out[i].to_f64(),
                r.to_f64(),
                "{e} axpy[{i}] of {n}: x={:?} y={:?}",
                x[i],
                y[i]
            );
        }
        for (i, g) in out[n..].iter().enumerate() {
            assert!(g.to_f64().is_nan(), "{e}: guard element {i} past n={n} was written");
        }
        // And against the f64 reference within the type's precision.
        let want: Vec<f64> = (0..n).map(|i| x[i].to_f64() + 3.0 * y[i].to_f64()).collect();
        let rtol = match e {
            Elem::F32 => 1e-6,
            Elem::F16 => 2e-3,
            Elem::BF16 => 1.6e-2,
            _ => 0.13,
        };
        let scale: Vec<f64> = (0..n)
            .map(|i| x[i].to_f64().abs() + 3.0 * y[i].to_f64().abs())
            .collect();
        assert_close_scaled(&format!("axpy {e}"), &to_f64(&out[..n]), &want, Some(&scale), rtol, 0.0);
    }
}

#[test]
fn masked_axpy_with_tails_in_every_float_type() {
    let mut rng = Rng::for_test("axpy");
    check_axpy::<f32>(&mut rng, -10.0, 10.0);
    check_axpy::<f16>(&mut rng, -10.0, 10.0);
    check_axpy::<bf16>(&mut rng, -10.0, 10.0);
    check_axpy::<F8E4M3>(&mut rng, -20.0, 20.0);
}

#[test]
fn pointer_arguments_with_offsets() {
    let mut rng = Rng::for_test("offsets");
    let k = axpy_kernel::<f32>(64);
    let x: Vec<f32> = rng.vec(300, 1.0, 2.0);
    let mut mem = Memory::new();
    let bx = mem.alloc(&x);
    let bo = mem.alloc(&poison::<f32>(100));
    // out[i] = x[10 + i] + 3 * x[150 + i] for i < 100.
    run(
        &k,
        [2, 1, 1],
        &[Arg::ptr_at(bx, 10), Arg::ptr_at(bx, 150), Arg::ptr(bo), Arg::I32(100)],
        &mut mem,
    )
    .unwrap();
    let out: Vec<f32> = mem.read(bo);
    for i in 0..100 {
        assert_eq!(out[i], x[10 + i] + x[150 + i] * 3.0);
    }
}

/// Math functions on f32 and f16 against f64 references.
#[test]
fn math_functions() {
    fn kernel<T: Float + HostElem>() -> Kernel {
        let e = <T as HostElem>::ELEM;
        let params = vec![ptr("x", e), ptr("out", e)];
        trace("math", params, vec![], 4, |a| {
            let x = Tile::<Ptr<T>>::from_value(a[0]);
            let out = Tile::<Ptr<T>>::from_value(a[1]);
            let offs = arange(256);
            let v = load(x + offs, true);
            let results = [
                exp(v),
                log(abs(v)),
                sqrt(abs(v)),
                rsqrt(abs(v)),
                tanh(v),
                sigmoid(v),
                silu(v),
                softplus(v),
                exp2(v),
                log2(abs(v)),
                maximum(v, -v),
                minimum(v, v * full([256], T::from_f64(0.5))),
            ];
            let _ = &results;
            for (i, r) in results.iter().enumerate() {
                store(out + offs + (256 * i), *r, true);
            }
        })
        .unwrap()
    }
    fn check<T: Float + HostElem>(rng: &mut Rng, rtol: f64) {
        let e = <T as HostElem>::ELEM;
        let k = kernel::<T>();
        let x: Vec<T> = rng.vec(256, -6.0, 6.0);
        let mut mem = Memory::new();
        let bx = mem.alloc(&x);
        let bo = mem.alloc(&poison::<T>(256 * 12));
        run(&k, [1, 1, 1], &[Arg::ptr(bx), Arg::ptr(bo)], &mut mem).unwrap();
        let out = to_f64(&mem.read::<T>(bo));
        let xs = to_f64(&x);
        let fs: [fn(f64) -> f64; 12] = [
            f64::exp,
            |v| v.abs().ln(),
            |v| v.abs().sqrt(),
            |v| 1.0 / v.abs().sqrt(),
            f64::tanh,
            |v| 1.0 / (1.0 + (-v).exp()),
            |v| v / (1.0 + (-v).exp()),
            |v| (1.0 + v.exp()).ln(),
            f64::exp2,
            |v| v.abs().log2(),
            |v| v.abs(),
            |v| v.min(0.5 * v),
        ];
        for (j, f) in fs.iter().enumerate() {
            let want: Vec<f64> = xs.iter().map(|&v| f(v)).collect();
            assert_close_scaled(
                &format!("{e} math #{j}"),
                &out[j * 256..(j + 1) * 256],
                &want,
                None,
                rtol,
                1e-30,
            );
        }
    }
    let mut rng = Rng::for_test("math");
    check::<f32>(&mut rng, 2e-6);
    check::<f16>(&mut rng, 1e-3);
}
