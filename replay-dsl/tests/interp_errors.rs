//! Interpreter: argument checking and memory faults are typed errors, never panics or
//! out-of-bounds writes.

#[path = "interp_util.rs"]
mod util;

use half::f16;
use replay_dsl::front::builder::trace;
use replay_dsl::front::tile::Tile;
use replay_dsl::interp::{run, Arg, BufferId, InterpError, Memory};
use replay_dsl::ir::{CmpOp, Kernel};
use replay_dsl::prelude::*;
use replay_dsl::{DType, Elem};
use util::*;

/// out[i] = x[i] * 2 for i < n (masked), BLOCK = 64 per program.
fn scale_kernel() -> Kernel {
    let params = vec![ptr("x", Elem::F32), ptr("out", Elem::F32), val("n", Elem::I32)];
    trace("scale", params, vec![], 4, |a| {
        let x = Tile::<Ptr<f32>>::from_value(a[0]);
        let out = Tile::<Ptr<f32>>::from_value(a[1]);
        let n = Tile::<i32>::from_value(a[2]);
        let offs = program_id(0) * 64 + arange(64);
        let mask = offs.compare(CmpOp::Lt, n);
        store(out + offs, load(x + offs, mask) * 2.0f32, mask);
    })
    .unwrap()
}

#[test]
fn out_of_bounds_load_names_kernel_op_program_and_offset() {
    let k = scale_kernel();
    let mut mem = Memory::new();
    let x = mem.alloc(&[1.0f32; 100]);
    let out = mem.alloc(&[0.0f32; 200]);
    // n = 150 exceeds x (100 elements): program 1 (offsets 64..128) reads x[100].
    let err = run(&k, [3, 1, 1], &[Arg::ptr(x), Arg::ptr(out), Arg::I32(150)], &mut mem).unwrap_err();
    match &err {
        InterpError::OutOfBounds {
            kernel,
            op,
            program,
            buffer,
            offset,
            len,
        } => {
            assert_eq!((kernel.as_str(), op.as_str(), *program), ("scale", "load", [1, 0, 0]));
            assert_eq!((*buffer, *offset, *len), (x.0, 100, 100));
        }
        e => panic!("unexpected {e}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("scale") && msg.contains("load") && msg.contains("100"),
        "{msg}"
    );
    // Program 0 completed before the fault; program 1 stored nothing.
    let o = mem.read::<f32>(out);
    assert!(o[..64].iter().all(|&v| v == 2.0));
    assert!(o[64..].iter().all(|&v| v == 0.0));
}

#[test]
fn out_of_bounds_prefetch_is_an_error_unless_masked_off() {
    // Prefetches the next program's block, masked to `i < n`, then loads its own.
    let params = vec![ptr("x", Elem::F32), ptr("out", Elem::F32), val("n", Elem::I32)];
    let k = trace("ahead", params, vec![], 4, |a| {
        let x = Tile::<Ptr<f32>>::from_value(a[0]);
        let out = Tile::<Ptr<f32>>::from_value(a[1]);
        let n = Tile::<i32>::from_value(a[2]);
        let offs = program_id(0) * 64 + arange(64);
        prefetch(x + offs + 64, (offs + 64).compare(CmpOp::Lt, n));
        store(out + offs, load(x + offs, true), true);
    })
    .unwrap();
    let mut mem = Memory::new();
    let x = mem.alloc(&[1.5f32; 128]);
    let out = mem.alloc(&[0.0f32; 128]);
    run(&k, [2, 1, 1], &[Arg::ptr(x), Arg::ptr(out), Arg::I32(128)], &mut mem).unwrap();
    assert!(mem.read::<f32>(out).iter().all(|&v| v == 1.5));
    // n past the buffer: program 1 prefetches x[128..].
    let err = run(&k, [2, 1, 1], &[Arg::ptr(x), Arg::ptr(out), Arg::I32(200)], &mut mem).unwrap_err();
    assert!(
        matches!(&err, InterpError::OutOfBounds { op, program: [1, 0, 0], offset: 128, .. } if op == "prefetch"),
        "{err}"
    );
}

/// Copies `x[0..64]` into stage 0 of a two-stage shared buffer and stores stage `read` to
/// `out`, waiting with `wait_async(pending)` in between (no wait when `None`).
fn shared_buffer_kernel(pending: Option<usize>, read: i32) -> Kernel {
    let params = vec![ptr("x", Elem::F32), ptr("out", Elem::F32)];
    trace("staged", params, vec![], 4, |a| {
        let x = Tile::<Ptr<f32>>::from_value(a[0]);
        let out = Tile::<Ptr<f32>>::from_value(a[1]);
        let buf = shared::<f32>(2, &[64]);
        buf.copy_async(0, x + arange(64), true);
        if let Some(p) = pending {
            wait_async(p);
        }
        store(out + arange(64), buf.read(read), true);
    })
    .unwrap()
}

#[test]
fn shared_buffers_are_read_only_after_their_copy_completes() {
    let mut mem = Memory::new();
    let xs: Vec<f32> = (0..64).map(|i| i as f32 * 0.5 - 3.0).collect();
    let x = mem.alloc(&xs);
    let out = mem.alloc(&[f32::NAN; 64]);
    run(
        &shared_buffer_kernel(Some(0), 0),
        [1, 1, 1],
        &[Arg::ptr(x), Arg::ptr(out)],
        &mut mem,
    )
    .unwrap();
    assert_eq!(mem.read::<f32>(out), xs);
    let cases = [
        (shared_buffer_kernel(None, 0), "in flight"),
        (shared_buffer_kernel(Some(1), 0), "in flight"),
        (shared_buffer_kernel(Some(0), 1), "no completed copy"),
        (shared_buffer_kernel(Some(0), 2), "has 2 stages"),
    ];
    for (k, why) in cases {
        let out = mem.alloc(&[f32::NAN; 64]);
        let err = run(&k, [1, 1, 1], &[Arg::ptr(x), Arg::ptr(out)], &mut mem).unwrap_err();
        assert!(
            matches!(&err, InterpError::SharedBuffer { kernel, op, .. } if kernel == "staged" && op == "shared_read shared0"),
            "{err}"
        );
        assert!(err.to_string().contains(why), "{err}");
        assert!(
            mem.read::<f32>(out).iter().all(|v| v.is_nan()),
            "nothing stored after the fault"
        );
    }
}

#[test]
fn copy_async_checks_bounds_unless_masked_off() {
    let params = vec![ptr("x", Elem::F32), ptr("out", Elem::F32), val("n", Elem::I32)];
    let k = trace("staged_tail", params, vec![], 4, |a| {
        let x = Tile::<Ptr<f32>>::from_value(a[0]);
        let out = Tile::<Ptr<f32>>::from_value(a[1]);
        let n = Tile::<i32>::from_value(a[2]);
        let buf = shared::<f32>(1, &[64]);
        let offs = arange(64);
        buf.copy_async(0, x + offs, offs.compare(CmpOp::Lt, n));
        wait_async(0);
        store(out + offs, buf.read(0), true);
    })
    .unwrap();
    let mut mem = Memory::new();
    let x = mem.alloc(&[2.5f32; 40]);
    let out = mem.alloc(&[f32::NAN; 64]);
    run(&k, [1, 1, 1], &[Arg::ptr(x), Arg::ptr(out), Arg::I32(40)], &mut mem).unwrap();
    let o = mem.read::<f32>(out);
    assert!(
        o[..40].iter().all(|&v| v == 2.5) && o[40..].iter().all(|&v| v == 0.0),
        "{o:?}"
    );
    let err = run(&k, [1, 1, 1], &[Arg::ptr(x), Arg::ptr(out), Arg::I32(41)], &mut mem).unwrap_err();
    assert!(
        matches!(&err, InterpError::OutOfBounds { op, offset: 40, .. } if op == "copy_async shared0"),
        "{err}"
    );
}

#[test]
fn out_of_bounds_store_writes_nothing() {
    let k = scale_kernel();
    let mut mem = Memory::new();
    let x = mem.alloc(&[1.0f32; 128]);
    let out = mem.alloc(&[0.0f32; 100]);
    let err = run(&k, [2, 1, 1], &[Arg::ptr(x), Arg::ptr(out), Arg::I32(128)], &mut mem).unwrap_err();
    assert!(
        matches!(&err, InterpError::OutOfBounds { op, program: [1, 0, 0], offset: 100, len: 100, .. } if op == "store"),
        "{err}"
    );
    let o = mem.read::<f32>(out);
    assert!(o[..64].iter().all(|&v| v == 2.0));
    assert!(o[64..].iter().all(|&v| v == 0.0), "a faulting store wrote some lanes");
}

#[test]
fn negative_offsets_and_masked_lanes() {
    let k = scale_kernel();
    let mut mem = Memory::new();
    let x = mem.alloc(&[1.0f32; 64]);
    let out = mem.alloc(&[0.0f32; 64]);
    let err = run(
        &k,
        [1, 1, 1],
        &[Arg::ptr_at(x, -1), Arg::ptr(out), Arg::I32(64)],
        &mut mem,
    )
    .unwrap_err();
    assert!(matches!(&err, InterpError::OutOfBounds { offset: -1, .. }), "{err}");
    // Masked-off lanes may point anywhere: n = 1 with x shifted to its last element is fine.
    run(
        &k,
        [1, 1, 1],
        &[Arg::ptr_at(x, 63), Arg::ptr_at(out, 63), Arg::I32(1)],
        &mut mem,
    )
    .unwrap();
    assert_eq!(mem.read::<f32>(out)[63], 2.0);
    // Pointers far outside every buffer.
    let err = run(
        &k,
        [1, 1, 1],
        &[Arg::ptr_at(x, i64::MAX - 10), Arg::ptr(out), Arg::I32(64)],
        &mut mem,
    )
    .unwrap_err();
    assert!(matches!(&err, InterpError::OutOfBounds { .. }), "{err}");
}

#[test]
fn wrong_argument_count_and_types() {
    let k = scale_kernel();
    let mut mem = Memory::new();
    let x = mem.alloc(&[1.0f32; 64]);
    let h = mem.alloc(&[f16::ONE; 64]);
    let err = run(&k, [1, 1, 1], &[Arg::ptr(x), Arg::ptr(x)], &mut mem).unwrap_err();
    assert_eq!(
        err,
        InterpError::ArgCount {
            kernel: "scale".into(),
            expected: 3,
            got: 2
        }
    );
    let err = run(&k, [1, 1, 1], &[Arg::ptr(x), Arg::ptr(x), Arg::F32(1.0)], &mut mem).unwrap_err();
    assert!(
        matches!(&err, InterpError::ArgType { kernel, index: 2, param, expected: DType::Val(Elem::I32), .. } if kernel == "scale" && param == "n"),
        "{err}"
    );
    assert!(err.to_string().contains("`n`"), "{err}");
    let err = run(&k, [1, 1, 1], &[Arg::I32(0), Arg::ptr(x), Arg::I32(1)], &mut mem).unwrap_err();
    assert!(matches!(&err, InterpError::ArgType { index: 0, .. }), "{err}");
    // A pointer into a buffer of another element type.
    let err = run(&k, [1, 1, 1], &[Arg::ptr(h), Arg::ptr(x), Arg::I32(1)], &mut mem).unwrap_err();
    assert!(
        matches!(&err, InterpError::ArgType { index: 0, param, .. } if param == "x"),
        "{err}"
    );
    assert!(err.to_string().contains("f16"), "{err}");
    // A buffer that does not exist.
    let err = run(
        &k,
        [1, 1, 1],
        &[Arg::ptr(BufferId(99)), Arg::ptr(x), Arg::I32(1)],
        &mut mem,
    )
    .unwrap_err();
    assert!(matches!(&err, InterpError::ArgType { index: 0, .. }), "{err}");
}

#[test]
fn loop_step_must_be_positive() {
    let params = vec![ptr("out", Elem::I32), val("step", Elem::I32)];
    let k = trace("steps", params, vec![], 4, |a| {
        let out = Tile::<Ptr<i32>>::from_value(a[0]);
        let step = Tile::<i32>::from_value(a[1]);
        let count = for_range(range_step(0, 10, step), constant(0i32), |_, c| c + 1);
        store(out, count, true);
    })
    .unwrap();
    let mut mem = Memory::new();
    let out = mem.alloc(&[-1i32]);
    run(&k, [1, 1, 1], &[Arg::ptr(out), Arg::I32(3)], &mut mem).unwrap();
    assert_eq!(mem.read::<i32>(out), vec![4]);
    for step in [0, -2] {
        let err = run(&k, [1, 1, 1], &[Arg::ptr(out), Arg::I32(step)], &mut mem).unwrap_err();
        assert!(
            matches!(&err, InterpError::BadStep { op, step: s, .. } if op == "for" && *s == step as i64),
            "{err}"
        );
    }
}

#[test]
fn faults_inside_loops_and_branches_are_reported() {
    let params = vec![ptr("x", Elem::F32), ptr("out", Elem::F32), val("n", Elem::I32)];
    let k = trace("loopfault", params, vec![], 4, |a| {
        let x = Tile::<Ptr<f32>>::from_value(a[0]);
        let out = Tile::<Ptr<f32>>::from_value(a[1]);
        let n = Tile::<i32>::from_value(a[2]);
        let acc = for_range(range_step(0, n, 16), zeros::<f32>([16]), |i, acc| {
            acc + load(x + i + arange(16), true)
        });
        store(out + arange(16), acc, true);
    })
    .unwrap();
    let mut mem = Memory::new();
    let x = mem.alloc(&[1.0f32; 40]);
    let out = mem.alloc(&[0.0f32; 16]);
    let err = run(&k, [1, 1, 1], &[Arg::ptr(x), Arg::ptr(out), Arg::I32(48)], &mut mem).unwrap_err();
    assert!(
        matches!(&err, InterpError::OutOfBounds { op, offset: 40, .. } if op == "load"),
        "{err}"
    );
    assert_eq!(err.kernel(), "loopfault");
    assert_eq!(err.program(), Some([0, 0, 0]));
}

/// An access whose pointer element type differs from the buffer's (only reachable with
/// ill-typed IR, since launches check pointer arguments) is a typed error too.
#[test]
fn element_type_mismatch_is_an_error() {
    let mut k = scale_kernel();
    // Claim the parameter is an f16 pointer so the launch accepts an f16 buffer; the load
    // inside still reads f32.
    k.params[0].dtype = DType::Ptr(Elem::F16);
    let mut mem = Memory::new();
    let h = mem.alloc(&[f16::ONE; 64]);
    let out = mem.alloc(&[0.0f32; 64]);
    let err = run(&k, [1, 1, 1], &[Arg::ptr(h), Arg::ptr(out), Arg::I32(64)], &mut mem).unwrap_err();
    assert!(
        matches!(&err, InterpError::ElemMismatch { op, pointer: Elem::F32, buffer_elem: Elem::F16, offset: 0, .. } if op == "load"),
        "{err}"
    );
}

/// Copies `x[0..64]` into a shared buffer, `x[64..96]` into a buffer overlaying it, in the
/// order `overlay_first` says, then stores what each holds (the overlay's to `out[64..96]`).
fn overlaid_kernel(overlay_first: bool) -> Kernel {
    let params = vec![ptr("x", Elem::F32), ptr("out", Elem::F32)];
    trace("overlaid", params, vec![], 4, |a| {
        let x = Tile::<Ptr<f32>>::from_value(a[0]);
        let out = Tile::<Ptr<f32>>::from_value(a[1]);
        let buf = shared::<f32>(1, &[64]);
        let tail = buf.overlay(1, &[32]);
        let copy_buf = || buf.copy_async(0, x + arange(64), true);
        let copy_tail = || tail.copy_async(0, x + 64 + arange(32), true);
        if overlay_first {
            copy_tail();
            wait_async(0);
            copy_buf();
        } else {
            copy_buf();
            wait_async(0);
            copy_tail();
        }
        wait_async(0);
        store(out + 64 + arange(32), tail.read(0), true);
        store(out + arange(64), buf.read(0), true);
    })
    .unwrap()
}

#[test]
fn a_copy_into_an_overlaid_buffer_forgets_the_other() {
    let mut mem = Memory::new();
    let xs: Vec<f32> = (0..96).map(|i| i as f32 * 0.5 - 7.0).collect();
    let x = mem.alloc(&xs);
    // Runs the kernel on a poisoned output; the fault must be the read of `buffer`'s stage,
    // which no completed copy holds any more. Returns the output.
    let mut faulting_read = |overlay_first: bool, buffer: &str| {
        let out = mem.alloc(&[f32::NAN; 96]);
        let args = [Arg::ptr(x), Arg::ptr(out)];
        let err = run(&overlaid_kernel(overlay_first), [1, 1, 1], &args, &mut mem).unwrap_err();
        assert!(
            matches!(&err, InterpError::SharedBuffer { op, .. } if *op == format!("shared_read {buffer}")),
            "{err}"
        );
        assert!(err.to_string().contains("no completed copy"), "{err}");
        mem.read::<f32>(out)
    };
    // The overlay copied last: its values read back; the buffer's were overwritten.
    let out = faulting_read(false, "shared0");
    assert_eq!(out[64..], xs[64..], "the overlay's stage read back");
    // The buffer copied last: reading the overlay fails before anything is stored.
    let out = faulting_read(true, "shared1");
    assert!(out.iter().all(|v| v.is_nan()), "nothing stored after the fault");
}
