//! Kernels written under `#[kernel]`, checked through the IR they trace.

use replay_dsl::ir::{walk_insts, Inst, Kernel, Op, ReduceKind};
use replay_dsl::prelude::*;
use replay_dsl::{ConfigValues, DType, Elem, ErrorKind, KernelDef, ParamSpec, Specialization};
use replay_macros::kernel;

/// out[i] = x[i] + y[i]
#[kernel]
pub fn add(
    #[extent(n)] x: Ptr<f32>,
    #[extent(n)] y: Ptr<f32>,
    #[extent(n)] out: Ptr<f32>,
    n: i32,
    #[constexpr(default = 1024)] BLOCK: usize,
) {
    let offs = program_id(0) * BLOCK + arange(BLOCK);
    let mask = offs < n;
    store(out + offs, load(x + offs, mask) + load(y + offs, mask), mask);
}

/// Row softmax, one program per row; the tail of a row is masked.
#[kernel]
pub fn softmax(
    #[extent(rows * stride)] x: Ptr<f32>,
    #[extent(rows * stride)] out: Ptr<f32>,
    rows: i32,
    stride: i32,
    n_cols: i32,
    #[constexpr] BLOCK: usize,
) {
    let cols = arange(BLOCK);
    let mask = cols < n_cols;
    let row = program_id(0) * stride;
    let v = load_or(x + row + cols, mask, f32::NEG_INFINITY);
    let e = exp(v - max(v, 0));
    store(out + row + cols, e / sum(e, 0), mask);
}

/// Sum and maximum of a row, one block of columns per runtime iteration.
#[kernel]
fn row_stats(x: Ptr<f32>, sums: Ptr<f32>, maxes: Ptr<f32>, n_cols: i32, #[constexpr(default = 128)] BLOCK: usize) {
    let row = program_id(0) * n_cols;
    let mut acc = zeros::<f32>([BLOCK]);
    let mut best = full([BLOCK], f32::NEG_INFINITY);
    for start in range_step(0, n_cols, BLOCK) {
        let cols = start + arange(BLOCK);
        let mask = cols < n_cols;
        let v = load_or(x + row + cols, mask, f32::NEG_INFINITY);
        acc += select(mask, v, 0.0);
        best = maximum(best, v);
    }
    store(sums + program_id(0), sum(acc, 0), true);
    store(maxes + program_id(0), max(best, 0), true);
}

/// A runtime `if` on a scalar: programs past `limit` write zeros.
#[kernel]
fn clamp_rows(x: Ptr<f32>, out: Ptr<f32>, limit: i32, #[constexpr(default = 64)] BLOCK: usize) {
    let pid = program_id(0);
    let offs = pid * BLOCK + arange(BLOCK);
    let mut v = load(x + offs, true);
    if pid >= limit {
        v = zeros::<f32>([BLOCK]);
    }
    // A runtime `if` used as a value.
    let scale = if pid == 0 { constant(2.0f32) } else { constant(1.0f32) };
    store(out + offs, v * scale, true);
}

/// Compile-time control flow on constexprs: unrolled loops, branches, `static_assert`.
#[kernel]
fn unrolled(
    x: Ptr<f32>,
    bias: Ptr<f32>,
    out: Ptr<f32>,
    #[constexpr(default = 64)] BLOCK: usize,
    #[constexpr(default = 4)] UNROLL: usize,
    #[constexpr(default = true)] HAS_BIAS: bool,
    #[constexpr(default = 0)] MODE: i32,
) {
    static_assert(BLOCK % 16 == 0, "BLOCK must be a multiple of 16");
    static_assert(UNROLL > 0 && BLOCK / UNROLL >= 1, "UNROLL must divide BLOCK");
    let base = program_id(0) * (BLOCK * UNROLL);
    let mut acc = zeros::<f32>([BLOCK]);
    for u in 0..UNROLL {
        let offs = base + u * BLOCK + arange(BLOCK);
        acc += load(x + offs, true);
        if u == UNROLL - 1 && UNROLL > 2 {
            acc = acc * 0.5;
        }
    }
    if HAS_BIAS {
        acc = acc + load(bias + arange(BLOCK), true);
    }
    let act = if MODE == 1 {
        exp(acc)
    } else if MODE == 2 {
        sigmoid(acc)
    } else {
        acc
    };
    // `&&` short-circuits on constexprs: this does not divide by zero when UNROLL is 0.
    let many = UNROLL > 0 && 64 / UNROLL > 8;
    let mut skipped = 0usize;
    for i in 0..8usize {
        if i >= 2 {
            break;
        }
        skipped += 1;
    }
    static_assert(skipped == 2, "compile-time break");
    let scale = if many { 2.0f32 } else { 1.0f32 };
    store(out + program_id(0) * BLOCK + arange(BLOCK), act * scale, true);
}

/// Two constexpr shapes that disagree are a trace error naming the kernel and the op.
#[kernel]
fn mismatch(out: Ptr<i32>, #[constexpr] A: usize, #[constexpr] B: usize) {
    let s = arange(A) + arange(B);
    store(out + arange(A), s, true);
}

/// A runtime `if` that assigns two tiles inside a runtime loop, plus nested carried state.
#[kernel]
fn nested(x: Ptr<f32>, out: Ptr<f32>, n: i32, threshold: f32, #[constexpr(default = 32)] BLOCK: usize) {
    let mut lo = zeros::<f32>([BLOCK]);
    let mut hi = zeros::<f32>([BLOCK]);
    let mut p = x + arange(BLOCK);
    for _ in range(0, n) {
        let v = load(p, true);
        let s = sum(v, 0);
        if s > threshold {
            hi += v;
        } else {
            lo += v;
        }
        p += BLOCK;
    }
    store(out + arange(BLOCK), hi - lo, true);
}

fn insts(k: &Kernel) -> Vec<&Inst> {
    let mut v = Vec::new();
    walk_insts(&k.body, &mut |i| v.push(i));
    v
}

fn count(k: &Kernel, pred: impl Fn(&Op) -> bool) -> usize {
    insts(k).iter().filter(|i| pred(&i.op)).count()
}

fn top_level(k: &Kernel, pred: impl Fn(&Op) -> bool) -> Vec<&Inst> {
    k.body.insts.iter().filter(|i| pred(&i.op)).collect()
}

#[test]
fn vector_add_traces() {
    let cfg = add::Config::default();
    assert_eq!(
        cfg,
        add::Config {
            BLOCK: 1024,
            num_warps: 4,
            min_blocks: 1
        }
    );
    let k = add::trace(&cfg).unwrap();
    assert_eq!(k.name, "add");
    assert_eq!(k.constexprs, vec![("BLOCK".to_string(), 1024)]);
    assert_eq!(k.entry_name(), "add_BLOCK1024_w4");
    assert_eq!(count(&k, |o| matches!(o, Op::Load { .. })), 2);
    assert_eq!(count(&k, |o| matches!(o, Op::Store { .. })), 1);
    assert_eq!(count(&k, |o| matches!(o, Op::Cmp(..))), 1);
    assert_eq!(count(&k, |o| matches!(o, Op::Arange)), 1);
    let load = insts(&k).into_iter().find(|i| matches!(i.op, Op::Load { .. })).unwrap();
    assert_eq!(k.ty(load.results[0]).shape, vec![1024]);
    assert_eq!(k.ty(load.results[0]).dtype, DType::Val(Elem::F32));
}

#[test]
fn kernel_def_describes_the_signature() {
    assert_eq!(<add::Kernel as KernelDef>::NAME, "add");
    println!("{}", <add::Kernel as KernelDef>::SOURCE);
    assert!(<add::Kernel as KernelDef>::SOURCE.contains("pub fn add("));
    assert_eq!(
        add::Kernel::params(),
        vec![
            ParamSpec {
                name: "x",
                dtype: DType::Ptr(Elem::F32)
            },
            ParamSpec {
                name: "y",
                dtype: DType::Ptr(Elem::F32)
            },
            ParamSpec {
                name: "out",
                dtype: DType::Ptr(Elem::F32)
            },
            ParamSpec {
                name: "n",
                dtype: DType::Val(Elem::I32)
            },
        ]
    );
    let cfg = add::Config::default();
    assert_eq!(
        add::Kernel::extents(&cfg, &[None, None, None, Some(5000)]),
        vec![Some(5000), Some(5000), Some(5000), None]
    );
    // Unknown scalars give unknown extents.
    assert_eq!(add::Kernel::extents(&cfg, &[]), vec![None, None, None, None]);
    let scfg = softmax::Config {
        BLOCK: 256,
        num_warps: 8,
        min_blocks: 1,
    };
    assert_eq!(
        softmax::Kernel::extents(&scfg, &[None, None, Some(3), Some(300), Some(250)]),
        vec![Some(900), Some(900), None, None, None]
    );
    // The specialization reaches the parameters.
    let spec = Specialization::from_ints(&[None, None, None, Some(4096)]);
    let k = add::Kernel::trace(&cfg, &spec).unwrap();
    assert_eq!(
        k.params.iter().map(|p| p.divisibility).collect::<Vec<_>>(),
        vec![1, 1, 1, 16]
    );
}

#[test]
fn config_values_round_trip() {
    let cfg = unrolled::Config {
        BLOCK: 32,
        UNROLL: 2,
        HAS_BIAS: false,
        MODE: -1,
        num_warps: 2,
        min_blocks: 1,
    };
    let vals = cfg.values();
    assert_eq!(
        vals,
        vec![
            ("BLOCK", 32),
            ("UNROLL", 2),
            ("HAS_BIAS", 0),
            ("MODE", -1),
            ("num_warps", 2),
            ("min_blocks", 1)
        ]
    );
    assert_eq!(unrolled::Config::from_values(&vals).unwrap(), cfg);
    // The occupancy hint round-trips and keeps the entry names apart.
    let hinted = unrolled::Config {
        min_blocks: 3,
        ..cfg.clone()
    };
    assert_eq!(unrolled::Config::from_values(&hinted.values()).unwrap(), hinted);
    let plain = unrolled::trace(&cfg).unwrap();
    let k = unrolled::trace(&hinted).unwrap();
    assert_eq!(k.min_blocks, 3);
    assert_eq!(k.entry_name(), format!("{}_b3", plain.entry_name()));
    for bad in [0, -1] {
        let err = unrolled::Config::from_values(&[("min_blocks", bad)]).unwrap_err();
        assert!(err.to_string().contains("`min_blocks` is out of range"), "{err}");
    }
    // Missing names take defaults.
    assert_eq!(unrolled::Config::from_values(&[]).unwrap(), unrolled::Config::default());
    assert_eq!(unrolled::Config::from_values(&[("BLOCK", 16)]).unwrap().BLOCK, 16);

    let err = unrolled::Config::from_values(&[("BLOK", 16)]).unwrap_err();
    assert_eq!(err.kernel, "unrolled");
    assert!(
        matches!(&err.kind, ErrorKind::Constexpr(m) if m.contains("unknown constexpr `BLOK`")),
        "{err}"
    );
    let err = unrolled::Config::from_values(&[("HAS_BIAS", 2)]).unwrap_err();
    assert!(err.to_string().contains("HAS_BIAS"), "{err}");
    let err = unrolled::Config::from_values(&[("BLOCK", -16)]).unwrap_err();
    assert!(err.to_string().contains("out of range for usize"), "{err}");
    // A constexpr without default must be given.
    let err = softmax::Config::from_values(&[("num_warps", 4)]).unwrap_err();
    assert_eq!(err.kernel, "softmax");
    assert!(err.to_string().contains("missing value for constexpr `BLOCK`"), "{err}");
    assert_eq!(
        softmax::Config::from_values(&[("BLOCK", 64)]).unwrap(),
        softmax::Config {
            BLOCK: 64,
            num_warps: 4,
            min_blocks: 1
        }
    );
}

#[test]
fn softmax_traces_reductions() {
    let k = softmax::trace(&softmax::Config {
        BLOCK: 256,
        num_warps: 8,
        min_blocks: 1,
    })
    .unwrap();
    assert_eq!(k.num_warps, 8);
    let reduces: Vec<ReduceKind> = insts(&k)
        .iter()
        .filter_map(|i| match &i.op {
            Op::Reduce { kind, .. } => Some(*kind),
            _ => None,
        })
        .collect();
    assert_eq!(reduces, vec![ReduceKind::Max, ReduceKind::Sum]);
    let load = insts(&k).into_iter().find(|i| matches!(i.op, Op::Load { .. })).unwrap();
    assert!(matches!(
        load.op,
        Op::Load {
            mask: Some(_),
            other: Some(_),
            ..
        }
    ));
    assert_eq!(k.ty(load.results[0]).shape, vec![256]);
}

#[test]
fn runtime_loop_carries_two_tiles() {
    let k = row_stats::trace(&row_stats::Config::default()).unwrap();
    let fors = top_level(&k, |o| matches!(o, Op::For { .. }));
    assert_eq!(fors.len(), 1, "{k}");
    let Op::For { init, body, .. } = &fors[0].op else {
        unreachable!()
    };
    assert_eq!(init.len(), 2);
    assert_eq!(fors[0].results.len(), 2);
    assert_eq!(body.args.len(), 3); // induction variable + two carried tiles
    for r in &fors[0].results {
        assert_eq!(k.ty(*r).shape, vec![128]);
    }
    // The loads happen inside the loop, the stores after it.
    assert_eq!(count(&k, |o| matches!(o, Op::Load { .. })), 1);
    assert!(body.insts.iter().any(|i| matches!(i.op, Op::Load { .. })));
    assert_eq!(top_level(&k, |o| matches!(o, Op::Store { .. })).len(), 2);
}

#[test]
fn runtime_if_on_a_scalar() {
    let k = clamp_rows::trace(&clamp_rows::Config::default()).unwrap();
    let ifs = top_level(&k, |o| matches!(o, Op::If { .. }));
    assert_eq!(ifs.len(), 2, "{k}");
    // The statement `if` carries `v`; the value `if` yields the scale.
    assert_eq!(ifs[0].results.len(), 1);
    assert_eq!(k.ty(ifs[0].results[0]).shape, vec![64]);
    assert_eq!(ifs[1].results.len(), 1);
    assert_eq!(k.ty(ifs[1].results[0]).shape, Vec::<usize>::new());
    let Op::If { cond, .. } = &ifs[0].op else {
        unreachable!()
    };
    assert_eq!(k.ty(*cond).dtype, DType::Val(Elem::Bool));
}

#[test]
fn runtime_if_inside_runtime_loop() {
    let k = nested::trace(&nested::Config::default()).unwrap();
    let fors = top_level(&k, |o| matches!(o, Op::For { .. }));
    assert_eq!(fors.len(), 1);
    // lo, hi and the pointer tile p are carried.
    assert_eq!(fors[0].results.len(), 3, "{k}");
    let Op::For { body, .. } = &fors[0].op else {
        unreachable!()
    };
    let ifs: Vec<&Inst> = body.insts.iter().filter(|i| matches!(i.op, Op::If { .. })).collect();
    assert_eq!(ifs.len(), 1);
    assert_eq!(ifs[0].results.len(), 2); // hi and lo
}

#[test]
fn compile_time_control_flow_unrolls() {
    let k = unrolled::trace(&unrolled::Config::default()).unwrap();
    assert_eq!(count(&k, |o| matches!(o, Op::For { .. } | Op::If { .. })), 0, "{k}");
    assert_eq!(count(&k, |o| matches!(o, Op::Load { .. })), 5); // 4 unrolled + bias
    let cfg = unrolled::Config {
        HAS_BIAS: false,
        MODE: 2,
        ..unrolled::Config::default()
    };
    let k = unrolled::trace(&cfg).unwrap();
    assert_eq!(count(&k, |o| matches!(o, Op::Load { .. })), 4);
    assert_eq!(
        count(&k, |o| matches!(o, Op::Unary(replay_dsl::ir::UnaryOp::Sigmoid, _))),
        1
    );
    assert_eq!(
        count(&k, |o| matches!(o, Op::Unary(replay_dsl::ir::UnaryOp::Exp, _))),
        0
    );
    // `UNROLL > 0 && 64 / UNROLL > 8` short-circuits: no division by zero.
    let err = unrolled::trace(&unrolled::Config {
        UNROLL: 0,
        ..unrolled::Config::default()
    })
    .unwrap_err();
    assert!(
        matches!(&err.kind, ErrorKind::StaticAssert(m) if m == "UNROLL must divide BLOCK"),
        "{err}"
    );
}

#[test]
fn static_assert_fails_with_a_typed_error() {
    let err = unrolled::trace(&unrolled::Config {
        BLOCK: 8,
        ..unrolled::Config::default()
    })
    .unwrap_err();
    assert_eq!(err.kernel, "unrolled");
    assert_eq!(err.op, "static_assert");
    assert!(matches!(&err.kind, ErrorKind::StaticAssert(m) if m.contains("multiple of 16")));
}

#[test]
fn shape_mismatch_names_kernel_and_op() {
    assert!(mismatch::trace(&mismatch::Config {
        A: 64,
        B: 64,
        num_warps: 4,
        min_blocks: 1
    })
    .is_ok());
    let err = mismatch::trace(&mismatch::Config {
        A: 64,
        B: 128,
        num_warps: 4,
        min_blocks: 1,
    })
    .unwrap_err();
    assert_eq!(err.kernel, "mismatch");
    assert_eq!(err.op, "add");
    assert!(matches!(err.kind, ErrorKind::Shape(_)), "{err}");
    let err = mismatch::trace(&mismatch::Config {
        A: 64,
        B: 64,
        num_warps: 3,
        min_blocks: 1,
    })
    .unwrap_err();
    assert_eq!(err.op, "num_warps");
}

/// Nested runtime loops and a runtime `else if` chain used as a value.
#[kernel]
fn nested_loops(x: Ptr<f32>, out: Ptr<f32>, n: i32, m: i32, #[constexpr(default = 16)] BLOCK: usize) {
    let mut total = zeros::<f32>([BLOCK]);
    let mut count = constant(0i32);
    for i in range(0, n) {
        let mut row = zeros::<f32>([BLOCK]);
        for j in range(0, m) {
            row += load(x + (i * m + j) * BLOCK + arange(BLOCK), true);
            count += 1;
        }
        total += row;
    }
    let w = if count > 100 {
        constant(1.0f32)
    } else if count > 10 {
        constant(2.0f32)
    } else {
        constant(3.0f32)
    };
    store(out + arange(BLOCK), total * w, true);
}

#[test]
fn nested_runtime_loops_and_else_if() {
    let k = nested_loops::trace(&nested_loops::Config::default()).unwrap();
    let fors = top_level(&k, |o| matches!(o, Op::For { .. }));
    assert_eq!(fors.len(), 1, "{k}");
    // The outer loop carries `total` and `count` (the inner `row` is local to the body).
    assert_eq!(fors[0].results.len(), 2);
    let Op::For { body, .. } = &fors[0].op else {
        unreachable!()
    };
    let inner: Vec<&Inst> = body.insts.iter().filter(|i| matches!(i.op, Op::For { .. })).collect();
    assert_eq!(inner.len(), 1);
    assert_eq!(inner[0].results.len(), 2); // `row` and `count`
                                           // `if … else if … else` as a value: an `If` whose else block holds another `If`.
    let ifs = top_level(&k, |o| matches!(o, Op::If { .. }));
    assert_eq!(ifs.len(), 1);
    assert_eq!(ifs[0].results.len(), 1);
    let Op::If { else_block, .. } = &ifs[0].op else {
        unreachable!()
    };
    assert_eq!(
        else_block
            .insts
            .iter()
            .filter(|i| matches!(i.op, Op::If { .. }))
            .count(),
        1
    );
}

#[test]
fn kernels_register_as_entries() {
    let e = replay_dsl::spec::KernelEntry::of::<add::Kernel>();
    assert_eq!(e.name, "add");
    assert_eq!(
        (e.defaults)(),
        vec![("BLOCK", 1024), ("num_warps", 4), ("min_blocks", 1)]
    );
    let k = (e.trace)(&[("BLOCK", 256)], &Specialization::default()).unwrap();
    assert_eq!(k.constexprs, vec![("BLOCK".to_string(), 256)]);
    let err = (e.trace)(&[("BLCK", 256)], &Specialization::default()).unwrap_err();
    assert_eq!(err.kernel, "add");
    // `compile` exists with the decided signature.
    let _: fn(&add::Config, replay_dsl::Target) -> Result<replay_dsl::Compiled, replay_dsl::CompileError> =
        add::compile;
}
