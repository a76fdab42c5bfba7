//! Graph conditions (`set_graph_condition`): the value one program computes reaches the
//! condition log on the interpreter and on the PTX emulator (the backend's sm_90a PTX, which
//! ptxas assembles for both targets); two programs setting one condition are reported as a
//! race; a tile where a scalar belongs is a compile error naming the op.

#[path = "prop_util.rs"]
mod util;

use replay_dsl::front::builder::trace;
use replay_dsl::front::tile::Tile;
use replay_dsl::interp::{run, Arg, InterpError, Memory};
use replay_dsl::ir::{CmpOp, Kernel};
use replay_dsl::prelude::*;
use replay_dsl::{compile, Elem, Target};
use replay_ptx_emu::{EmuError, Global, Module, Param};
use util::{assemble, ptr, val, Rand};

const BLOCK: usize = 64;
const WARPS: u32 = 4;

/// `set_graph_condition(handle, any(x[i] > 0 for i < n))` from program 0, the rows in blocks
/// of `BLOCK` through a runtime loop; with `every_program`, every program sets it.
fn any_positive(every_program: bool) -> Kernel {
    let params = vec![ptr("x", Elem::F32), val("n", Elem::I32), val("handle", Elem::I64)];
    trace("any_positive", params, vec![], WARPS, |a| {
        let x = Tile::<Ptr<f32>>::from_value(a[0]);
        let n = Tile::<i32>::from_value(a[1]);
        let handle = Tile::<i64>::from_value(a[2]);
        let found = for_range(range_step(0, n, BLOCK as i32), constant(0i32), |i, found| {
            let rows = i + arange(BLOCK);
            let inside = rows.compare(CmpOp::Lt, n);
            let positive = load(x + rows, inside).compare(CmpOp::Gt, 0.0f32) & inside;
            maximum(found, max_all(positive.cast::<i32>()))
        });
        let setter = if every_program {
            constant(true)
        } else {
            program_id(0).compare(CmpOp::Eq, 0)
        };
        setter.branch(
            (),
            |()| set_graph_condition(handle, found.compare(CmpOp::Gt, 0)),
            |()| (),
        );
    })
    .unwrap()
}

/// Inputs of `n` elements: all ≤ 0, or with one positive element at a random place.
fn inputs(rng: &mut Rand, n: usize, positive: bool) -> Vec<f32> {
    let mut x: Vec<f32> = (0..n).map(|_| rng.f32(-1.0, -0.01)).collect();
    if positive {
        let at = (rng.next_u64() % n as u64) as usize;
        x[at] = rng.f32(0.01, 1.0);
    }
    x
}

#[test]
fn one_program_sets_the_condition_on_the_interpreter() {
    let k = any_positive(false);
    let mut rng = Rand::new(7);
    let mut mem = Memory::new();
    let mut want = vec![];
    for (round, n) in [1usize, 63, 64, 65, 200, 1000].into_iter().enumerate() {
        for positive in [false, true] {
            let handle = 0x5eed_0000 + round as i64 * 2 + positive as i64;
            let x = mem.alloc(&inputs(&mut rng, n, positive));
            // Several programs: only program 0 sets it.
            run(
                &k,
                [3, 1, 1],
                &[Arg::ptr(x), Arg::I32(n as i32), Arg::I64(handle)],
                &mut mem,
            )
            .unwrap();
            want.push((handle, positive));
        }
    }
    assert_eq!(mem.graph_conditions(), &want[..]);
}

#[test]
fn two_programs_setting_one_condition_race_on_the_interpreter() {
    let k = any_positive(true);
    let mut mem = Memory::new();
    let x = mem.alloc(&[1.0f32; 10]);
    let err = run(&k, [2, 1, 1], &[Arg::ptr(x), Arg::I32(10), Arg::I64(42)], &mut mem).unwrap_err();
    match err {
        InterpError::ConditionRace {
            handle, first, program, ..
        } => assert_eq!((handle, first, program), (42, [0, 0, 0], [1, 0, 0])),
        e => panic!("expected a condition race, got {e}"),
    }
}

#[test]
fn the_ptx_sets_the_condition_once_per_launch_on_the_emulator() {
    let k = any_positive(false);
    let ptx = compile(&k, Target::Sm90).unwrap().ptx;
    for t in Target::ALL {
        assemble("any_positive", t, &compile(&k, t).unwrap().ptx).unwrap();
    }
    let module = Module::parse(&ptx).unwrap();
    let entry = k.entry_name();
    let mut rng = Rand::new(11);
    let mut global = Global::new();
    let mut want = vec![];
    for (round, n) in [1usize, 64, 130, 700].into_iter().enumerate() {
        for positive in [false, true] {
            let handle = 0xc0de_0000_0000 + round as u64 * 2 + positive as u64;
            let x = inputs(&mut rng, n, positive);
            let xb = global.alloc(x.iter().flat_map(|v| v.to_le_bytes()).collect());
            let params = [Param::Ptr(xb), Param::I32(n as i32), Param::I64(handle as i64)];
            module
                .launch(&entry, [2, 1, 1], [WARPS * 32, 1, 1], &params, &mut global)
                .unwrap();
            want.push((handle, positive));
        }
    }
    // One set per launch: program 0's first thread.
    assert_eq!(global.graph_conditions(), &want[..]);
}

#[test]
fn two_programs_setting_one_condition_race_on_the_emulator() {
    let k = any_positive(true);
    let module = Module::parse(&compile(&k, Target::Sm90).unwrap().ptx).unwrap();
    let mut global = Global::new();
    let xb = global.alloc(1.0f32.to_le_bytes().repeat(10));
    let params = [Param::Ptr(xb), Param::I32(10), Param::I64(42)];
    let err = module
        .launch(&k.entry_name(), [2, 1, 1], [WARPS * 32, 1, 1], &params, &mut global)
        .unwrap_err();
    assert!(
        matches!(
            err,
            EmuError::ConditionRace {
                handle: 42,
                block: [1, 0, 0],
                thread: [0, 0, 0],
                first_block: [0, 0, 0],
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_condition_must_be_a_scalar() {
    let params = vec![val("handle", Elem::I64)];
    let err = trace("tile_condition", params, vec![], 1, |a| {
        let handle = Tile::<i64>::from_value(a[0]);
        set_graph_condition(handle, arange(4).compare(CmpOp::Gt, 1));
    })
    .unwrap_err();
    assert_eq!(err.op, "set_graph_condition", "{err}");
    assert!(err.to_string().contains("must be a scalar"), "{err}");
}
