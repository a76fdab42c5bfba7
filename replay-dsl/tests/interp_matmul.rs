//! Interpreter: a tiled matmul with a runtime K loop and masked tails.

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

/// `C[M, N] = A[M, K] @ B[K, N]` (row-major, f32 output), `[BM, BN]` output tiles, K in steps
/// of BK with a runtime loop.
fn matmul_kernel<T: Float + HostElem>(bm: usize, bn: usize, bk: usize) -> Kernel {
    let e = <T as HostElem>::ELEM;
    let params = vec![
        ptr("a", e),
        ptr("b", e),
        ptr("c", Elem::F32),
        val("m", Elem::I32),
        val("n", Elem::I32),
        val("k", Elem::I32),
    ];
    let cx = vec![
        ("BM".into(), bm as i64),
        ("BN".into(), bn as i64),
        ("BK".into(), bk as i64),
    ];
    trace("matmul", params, cx, 4, |p| {
        let a = Tile::<Ptr<T>>::from_value(p[0]);
        let b = Tile::<Ptr<T>>::from_value(p[1]);
        let c = Tile::<Ptr<f32>>::from_value(p[2]);
        let (m, n, k) = (
            Tile::<i32>::from_value(p[3]),
            Tile::<i32>::from_value(p[4]),
            Tile::<i32>::from_value(p[5]),
        );
        let rm = (program_id(0) * bm + arange(bm)).expand_dims(1); // [BM, 1]
        let rn = (program_id(1) * bn + arange(bn)).expand_dims(0); // [1, BN]
        let rk = arange(bk);
        let acc = for_range(range_step(0, k, bk as i32), zeros::<f32>([bm, bn]), |k0, acc| {
            let ka = (k0 + rk).expand_dims(0); // [1, BK]
            let kb = (k0 + rk).expand_dims(1); // [BK, 1]
            let at = load(a + rm * k + ka, rm.compare(CmpOp::Lt, m).and(ka.compare(CmpOp::Lt, k)));
            let bt = load(b + kb * n + rn, kb.compare(CmpOp::Lt, k).and(rn.compare(CmpOp::Lt, n)));
            dot_acc(at, bt, acc)
        });
        store(
            c + rm * n + rn,
            acc,
            rm.compare(CmpOp::Lt, m).and(rn.compare(CmpOp::Lt, n)),
        );
    })
    .unwrap()
}

fn check_matmul<T: Float + HostElem>(
    rng: &mut Rng,
    (bm, bn, bk): (usize, usize, usize),
    (m, n, k): (usize, usize, usize),
) {
    let e = <T as HostElem>::ELEM;
    let kern = matmul_kernel::<T>(bm, bn, bk);
    let a: Vec<T> = rng.vec(m * k, -2.0, 2.0);
    let b: Vec<T> = rng.vec(k * n, -2.0, 2.0);
    let mut mem = Memory::new();
    let (ba, bb) = (mem.alloc(&a), mem.alloc(&b));
    let bc = mem.alloc(&poison::<f32>(m * n));
    let grid = [m.div_ceil(bm) as u32, n.div_ceil(bn) as u32, 1];
    let t = std::time::Instant::now();
    let args = [
        Arg::ptr(ba),
        Arg::ptr(bb),
        Arg::ptr(bc),
        Arg::I32(m as i32),
        Arg::I32(n as i32),
        Arg::I32(k as i32),
    ];
    run(&kern, grid, &args, &mut mem).unwrap();
    eprintln!("matmul {e} {m}x{n}x{k} tiles {bm}x{bn}x{bk}: {:?}", t.elapsed());
    let c: Vec<f32> = mem.read(bc);
    let (af, bf) = (to_f64(&a), to_f64(&b));
    let (mut want, mut scale) = (vec![0.0; m * n], vec![0.0; m * n]);
    for i in 0..m {
        for j in 0..n {
            // Exactly the documented order: f32 fused multiply-adds, k ascending.
            let mut r = 0.0f32;
            for kk in 0..k {
                let (x, y) = (af[i * k + kk], bf[kk * n + j]);
                want[i * n + j] += x * y;
                scale[i * n + j] += (x * y).abs();
                r = (x as f32).mul_add(y as f32, r);
            }
            assert_eq!(c[i * n + j], r, "{e} C[{i},{j}]: not k-ascending f32 fma accumulation");
        }
    }
    assert_close_scaled(
        &format!("matmul {e} {m}x{n}x{k}"),
        &to_f64(&c),
        &want,
        Some(&scale),
        1e-5,
        0.0,
    );
}

#[test]
fn tiled_matmul_with_runtime_k_loop_and_tails() {
    let mut rng = Rng::for_test("matmul");
    let (m, n, k) = (
        rng.int(65, 127) as usize,
        rng.int(40, 95) as usize,
        rng.int(33, 80) as usize,
    );
    check_matmul::<f32>(&mut rng, (32, 32, 16), (m, n, k));
    check_matmul::<f16>(&mut rng, (32, 16, 16), (m, n, k));
    check_matmul::<bf16>(&mut rng, (16, 32, 32), (m, n, k));
    // K smaller than one step and K = 0 (the loop never runs: C = 0).
    check_matmul::<f32>(&mut rng, (16, 16, 16), (20, 20, 5));
    check_matmul::<f32>(&mut rng, (16, 16, 16), (20, 20, 0));
}

#[test]
fn large_tiles_run_fast_enough() {
    let mut rng = Rng::for_test("matmul_large");
    check_matmul::<f16>(&mut rng, (64, 128, 32), (256, 512, 128));
}
