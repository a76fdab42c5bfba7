//! Interpreter: atomics (old values, row-major lane order, masks) and the grid order.

#[path = "interp_util.rs"]
mod util;

use replay_dsl::front::builder::trace;
use replay_dsl::front::tile::Tile;
use replay_dsl::interp::{run, Arg, Memory};
use replay_dsl::ir::CmpOp;
use replay_dsl::prelude::*;
use replay_dsl::Elem;
use util::*;

/// Each program takes a ticket from a counter; programs run in row-major grid order, so the
/// ticket equals the linear program index.
#[test]
fn ticket_counter_follows_row_major_grid_order() {
    let params = vec![ptr("counter", Elem::I32), ptr("out", Elem::I32)];
    let k = trace("tickets", params, vec![], 4, |a| {
        let counter = Tile::<Ptr<i32>>::from_value(a[0]);
        let out = Tile::<Ptr<i32>>::from_value(a[1]);
        let lin = (program_id(0) * num_programs(1) + program_id(1)) * num_programs(2) + program_id(2);
        let old = atomic_add(counter, 1, true);
        store(out + lin, old, true);
    })
    .unwrap();
    let mut mem = Memory::new();
    let counter = mem.alloc(&[100i32]);
    let out = mem.alloc(&vec![-1i32; 60]);
    run(&k, [3, 4, 5], &[Arg::ptr(counter), Arg::ptr(out)], &mut mem).unwrap();
    assert_eq!(mem.read::<i32>(counter), vec![160]);
    assert_eq!(mem.read::<i32>(out), (100..160).collect::<Vec<i32>>());
}

/// A masked histogram: lanes of one atomic hitting the same bin all count; masked lanes don't.
#[test]
fn histogram_and_float_sum() {
    let block = 64usize;
    let params = vec![
        ptr("x", Elem::I32),
        ptr("w", Elem::F32),
        ptr("hist", Elem::I32),
        ptr("total", Elem::F32),
        ptr("old", Elem::F32),
        val("n", Elem::I32),
    ];
    let k = trace("hist", params, vec![], 4, |a| {
        let x = Tile::<Ptr<i32>>::from_value(a[0]);
        let w = Tile::<Ptr<f32>>::from_value(a[1]);
        let hist = Tile::<Ptr<i32>>::from_value(a[2]);
        let total = Tile::<Ptr<f32>>::from_value(a[3]);
        let old = Tile::<Ptr<f32>>::from_value(a[4]);
        let n = Tile::<i32>::from_value(a[5]);
        let offs = program_id(0) * block + arange(block);
        let mask = offs.compare(CmpOp::Lt, n);
        let bins = load(x + offs, mask);
        atomic_add(hist + bins, 1, mask);
        let vals = load(w + offs, mask);
        // Every lane adds into the same word; each gets the running total before it.
        let before = atomic_add(total + zeros::<i32>([block]), vals, mask);
        store(old + offs, before, mask);
    })
    .unwrap();
    let mut rng = Rng::for_test("hist");
    let n = rng.int(500, 1000) as usize;
    let x: Vec<i32> = (0..n).map(|_| rng.int(0, 16) as i32).collect();
    let w: Vec<f32> = rng.vec(n, 0.5, 2.0);
    let mut mem = Memory::new();
    let (bx, bw) = (mem.alloc(&x), mem.alloc(&w));
    let bh = mem.alloc_zeroed::<i32>(16);
    let bt = mem.alloc(&[0.0f32]);
    let bo = mem.alloc(&poison::<f32>(n));
    let grid = n.div_ceil(block) as u32;
    run(
        &k,
        [grid, 1, 1],
        &[
            Arg::ptr(bx),
            Arg::ptr(bw),
            Arg::ptr(bh),
            Arg::ptr(bt),
            Arg::ptr(bo),
            Arg::I32(n as i32),
        ],
        &mut mem,
    )
    .unwrap();
    let hist = mem.read::<i32>(bh);
    for (b, &h) in hist.iter().enumerate() {
        assert_eq!(h, x.iter().filter(|&&v| v == b as i32).count() as i32, "bin {b}");
    }
    // Lanes apply in order: old values are the f32 prefix sums.
    let old = mem.read::<f32>(bo);
    let mut s = 0.0f32;
    for i in 0..n {
        assert_eq!(old[i], s, "lane {i}");
        s += w[i];
    }
    let total = mem.read::<f32>(bt)[0];
    assert_eq!(total, s);
    let exact: f64 = w.iter().map(|&v| v as f64).sum();
    assert_close("atomic f32 sum", &[total as f64], &[exact], 1e-5);
}

#[test]
fn atomic_max_and_cas() {
    let block = 32usize;
    let params = vec![
        ptr("x", Elem::I32),
        ptr("best", Elem::I32),
        ptr("lock", Elem::I32),
        ptr("seen", Elem::I32),
    ];
    let k = trace("maxcas", params, vec![], 4, |a| {
        let x = Tile::<Ptr<i32>>::from_value(a[0]);
        let best = Tile::<Ptr<i32>>::from_value(a[1]);
        let lock = Tile::<Ptr<i32>>::from_value(a[2]);
        let seen = Tile::<Ptr<i32>>::from_value(a[3]);
        let pid = program_id(0);
        let v = load(x + (pid * block + arange(block)), true);
        atomic_max(best + zeros::<i32>([block]), v, true);
        // Only the first program to arrive takes the lock (0 → pid + 1).
        let prev = atomic_cas(lock, 0, pid + 1, true);
        store(seen + pid, prev, true);
        // Masked lanes of an atomic do nothing: only even lanes add.
        let even = (arange(block) % 2).compare(CmpOp::Eq, 0);
        atomic_add(best + (zeros::<i32>([block]) + 1), 1, even);
    })
    .unwrap();
    let mut rng = Rng::for_test("maxcas");
    let g = 9;
    let x: Vec<i32> = (0..g * block).map(|_| rng.int(-1_000_000, 1_000_000) as i32).collect();
    let mut mem = Memory::new();
    let bx = mem.alloc(&x);
    let best = mem.alloc(&[i32::MIN, 0]);
    let lock = mem.alloc(&[0i32]);
    let seen = mem.alloc(&vec![-7i32; g]);
    run(
        &k,
        [g as u32, 1, 1],
        &[Arg::ptr(bx), Arg::ptr(best), Arg::ptr(lock), Arg::ptr(seen)],
        &mut mem,
    )
    .unwrap();
    assert_eq!(
        mem.read::<i32>(best),
        vec![*x.iter().max().unwrap(), (g * block / 2) as i32]
    );
    assert_eq!(mem.read::<i32>(lock), vec![1]);
    let mut want = vec![1i32; g];
    want[0] = 0;
    assert_eq!(mem.read::<i32>(seen), want);
}

/// Stores from several lanes to one address: the last lane in row-major order wins.
#[test]
fn last_lane_wins_on_conflicting_stores() {
    let k = trace("conflict", vec![ptr("out", Elem::I32)], vec![], 4, |a| {
        let out = Tile::<Ptr<i32>>::from_value(a[0]);
        let r = arange(4).expand_dims(1);
        let c = arange(8).expand_dims(0);
        // Address r (per row); value r*8 + c: the last lane of row r is c = 7.
        store(out + (r + zeros::<i32>([1, 8])), r * 8 + c, true);
    })
    .unwrap();
    let mut mem = Memory::new();
    let out = mem.alloc_zeroed::<i32>(4);
    run(&k, [1, 1, 1], &[Arg::ptr(out)], &mut mem).unwrap();
    assert_eq!(mem.read::<i32>(out), vec![7, 15, 23, 31]);
}
