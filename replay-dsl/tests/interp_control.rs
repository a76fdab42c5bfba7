//! Interpreter: runtime loops (zero trips, steps, nesting, carried tuples) and runtime `if`.

#[path = "interp_util.rs"]
mod util;

use replay_dsl::front::builder::trace;
use replay_dsl::front::tile::Tile;
use replay_dsl::interp::{run, Arg, Memory};
use replay_dsl::ir::CmpOp;
use replay_dsl::prelude::*;
use replay_dsl::Elem;
use util::*;

/// Even programs double their block, odd ones add `bias`; programs whose block starts past
/// `limit` take a nested branch that negates.
#[test]
fn runtime_if_per_program() {
    let block = 32usize;
    let params = vec![
        ptr("x", Elem::F32),
        ptr("out", Elem::F32),
        val("bias", Elem::F32),
        val("limit", Elem::I32),
    ];
    let k = trace("branchy", params, vec![], 4, |a| {
        let x = Tile::<Ptr<f32>>::from_value(a[0]);
        let out = Tile::<Ptr<f32>>::from_value(a[1]);
        let bias = Tile::<f32>::from_value(a[2]);
        let limit = Tile::<i32>::from_value(a[3]);
        let pid = program_id(0);
        let offs = pid * block + arange(block);
        let v = load(x + offs, true);
        let even = (pid % 2).compare(CmpOp::Eq, 0);
        let v = even.branch(v, |v| v * 2.0f32, |v| v + bias);
        let late = (pid * block).compare(CmpOp::Ge, limit);
        let (v, flag) = late.branch((v, constant(0i32)), |(v, _)| (-v, constant(1i32)), |s| s);
        store(out + offs, v + flag.cast::<f32>() * 1000.0f32, true);
    })
    .unwrap();
    let mut rng = Rng::for_test("branchy");
    let g = 10;
    let x: Vec<f32> = rng.vec(g * block, -3.0, 3.0);
    let bias = rng.range(1.0, 2.0) as f32;
    let limit = 7 * block as i32;
    let mut mem = Memory::new();
    let bx = mem.alloc(&x);
    let bo = mem.alloc(&poison::<f32>(g * block));
    run(
        &k,
        [g as u32, 1, 1],
        &[Arg::ptr(bx), Arg::ptr(bo), Arg::F32(bias), Arg::I32(limit)],
        &mut mem,
    )
    .unwrap();
    let out = mem.read::<f32>(bo);
    for i in 0..g * block {
        let p = i / block;
        let mut v = if p.is_multiple_of(2) { x[i] * 2.0 } else { x[i] + bias };
        if (p * block) as i32 >= limit {
            v = -v + 1000.0;
        }
        assert_eq!(out[i], v, "element {i}");
    }
}

#[test]
fn loops_with_zero_trips_steps_nesting_and_tuples() {
    let params = vec![
        ptr("out", Elem::I32),
        val("lo", Elem::I32),
        val("hi", Elem::I32),
        val("step", Elem::I32),
    ];
    let k = trace("loops", params, vec![], 4, |a| {
        let out = Tile::<Ptr<i32>>::from_value(a[0]);
        let (lo, hi, step) = (
            Tile::<i32>::from_value(a[1]),
            Tile::<i32>::from_value(a[2]),
            Tile::<i32>::from_value(a[3]),
        );
        // (count, sum of i, sum over a nested loop of i*j for j in 0..i)
        let init = (constant(0i32), constant(0i32), constant(0i32));
        let (count, sum, nested) = for_range(range_step(lo, hi, step), init, |i, (c, s, n)| {
            let inner = for_range(range(0, i), n, |j, n| n + i * j);
            (c + 1, s + i, inner)
        });
        store(out, count, true);
        store(out + 1, sum, true);
        store(out + 2, nested, true);
        // A tile carried through a loop.
        let t = for_range(range(0, 3), arange(8), |_, t| t * 2 + 1);
        store(out + 3 + arange(8), t, true);
    })
    .unwrap();
    let mut rng = Rng::for_test("loops");
    for (lo, hi, step) in [
        (0, 0, 1),
        (5, 2, 1),
        (-3, 20, 4),
        (0, 1, 100),
        (rng.int(-10, 10) as i32, rng.int(-10, 40) as i32, rng.int(1, 6) as i32),
    ] {
        let mut mem = Memory::new();
        let out = mem.alloc(&[-99i32; 11]);
        run(
            &k,
            [1, 1, 1],
            &[Arg::ptr(out), Arg::I32(lo), Arg::I32(hi), Arg::I32(step)],
            &mut mem,
        )
        .unwrap();
        let got = mem.read::<i32>(out);
        let (mut c, mut s, mut n) = (0, 0, 0);
        let mut i = lo;
        while i < hi {
            c += 1;
            s += i;
            for j in 0..i.max(0) {
                n += i * j;
            }
            i += step;
        }
        assert_eq!(&got[..3], &[c, s, n], "lo={lo} hi={hi} step={step}");
        let t: Vec<i32> = (0..8).map(|v| ((v * 2 + 1) * 2 + 1) * 2 + 1).collect();
        assert_eq!(&got[3..], &t[..]);
    }
}

/// Control flow that constants decide — a loop of one trip, a loop of none, branches on
/// constant conditions — is replaced by what runs (the `fold` pass), with the same results as
/// the traced kernel; a loop with runtime bounds stays.
#[test]
fn constant_control_flow_is_folded_away() {
    let block = 16usize;
    let params = vec![ptr("x", Elem::F32), ptr("out", Elem::F32), val("n", Elem::I32)];
    let k = trace("decided", params, vec![], 4, |a| {
        let x = Tile::<Ptr<f32>>::from_value(a[0]);
        let out = Tile::<Ptr<f32>>::from_value(a[1]);
        let n = Tile::<i32>::from_value(a[2]);
        let offs = arange(block);
        // One trip: i = 3, the carried tile read from row 3.
        let once = for_range(range(3, 4), load(x + offs, true), |i, t| {
            t + load(x + i * block + offs, true)
        });
        // No trip: the initial values.
        let (never, count) = for_range(range(5, 5), (once, constant(7i32)), |_, (t, c)| (t * 100.0f32, c + 1));
        let taken = constant(true).branch(never, |t| t * 2.0f32, |t| t - 1.0f32);
        let (v, flag) = constant(false).branch((taken, constant(0i32)), |(t, _)| (-t, constant(1i32)), |s| s);
        // Runtime bounds: a loop that stays.
        let kept = for_range(range(0, n), v, |_, t| t + 1.0f32);
        store(out + offs, kept + (flag + count).cast::<f32>() * 1000.0f32, true);
    })
    .unwrap();
    let traced = k.to_string();
    assert_eq!(
        (traced.matches("for").count(), traced.matches(" if").count()),
        (3, 2),
        "{traced}"
    );
    let mut stages = vec![];
    let folded = replay_dsl::passes::run_all(k.clone(), &mut stages).unwrap();
    let ir = folded.to_string();
    assert_eq!(ir.matches("for").count(), 1, "one loop should remain:\n{ir}");
    assert!(!ir.contains(" if"), "no branch should remain:\n{ir}");
    let mut rng = Rng::for_test("decided");
    let x: Vec<f32> = rng.vec(4 * block, -3.0, 3.0);
    let n = rng.int(1, 5) as i32;
    for kernel in [&k, &folded] {
        let mut mem = Memory::new();
        let bx = mem.alloc(&x);
        let bo = mem.alloc(&poison::<f32>(block));
        run(kernel, [1, 1, 1], &[Arg::ptr(bx), Arg::ptr(bo), Arg::I32(n)], &mut mem).unwrap();
        let got = mem.read::<f32>(bo);
        for (j, g) in got.iter().enumerate() {
            let want = (x[j] + x[3 * block + j]) * 2.0 + n as f32 + 7000.0;
            assert_eq!(*g, want, "element {j}");
        }
    }
}
