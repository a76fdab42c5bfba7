//! PTX backend: kernels compiled for sm_90a and sm_100a, each checked with ptxas (success and no
//! spills). ptxas comes from `scripts/install-ptxas.sh`; if it cannot be installed the tests fail.

use replay_dsl::front::builder::trace;
use replay_dsl::front::tile::Tile;
use replay_dsl::ir::{CmpOp, Kernel, Param};
use replay_dsl::prelude::*;
use replay_dsl::{compile, Compiled, DType, Elem, Target};

#[path = "prop_util.rs"]
mod util;

/// Compiles `k` for both targets, assembles each PTX with ptxas, asserts no spills; returns the
/// compiled kernels (sm_90a first).
fn check(k: &Kernel) -> Vec<Compiled> {
    let mut out = Vec::new();
    for target in Target::ALL {
        let c = compile(k, target).unwrap_or_else(|e| panic!("{e}\n{k}"));
        let log = util::assemble_verbose(&c.entry, target, &c.ptx).unwrap_or_else(|e| panic!("{e}"));
        let regs = util::registers_without_spills(&format!("{} on {}", c.entry, target.arch()), &log);
        println!(
            "{} {}: {regs} registers, {} bytes smem",
            c.entry,
            target.arch(),
            c.shared_bytes
        );
        out.push(c);
    }
    out
}

fn param(name: &str, dtype: DType, divisibility: u32) -> Param {
    Param {
        name: name.into(),
        dtype,
        divisibility,
    }
}
fn ptr(name: &str, e: Elem) -> Param {
    param(name, DType::Ptr(e), 16)
}
fn int(name: &str, div: u32) -> Param {
    param(name, DType::Val(Elem::I32), div)
}

fn vector_add(div: u32, warps: u32) -> Kernel {
    trace(
        "add",
        vec![
            ptr("x", Elem::F32),
            ptr("y", Elem::F32),
            ptr("out", Elem::F32),
            int("n", div),
        ],
        vec![("BLOCK".into(), 1024)],
        warps,
        |a| {
            let (x, y, o) = (
                Tile::<Ptr<f32>>::from_value(a[0]),
                Tile::<Ptr<f32>>::from_value(a[1]),
                Tile::<Ptr<f32>>::from_value(a[2]),
            );
            let n = Tile::<i32>::from_value(a[3]);
            let offs = program_id(0) * 1024 + arange(1024);
            let mask = offs.compare(CmpOp::Lt, n);
            let s = load(x + offs, mask) + load(y + offs, mask);
            store(o + offs, s, mask);
        },
    )
    .unwrap()
}

#[test]
fn vector_add_masked_tail() {
    for warps in [1, 4, 8] {
        let c = check(&vector_add(1, warps));
        assert!(
            !c[0].ptx.contains("ld.global.v4.f32"),
            "n not divisible: no vector loads"
        );
        let c = check(&vector_add(16, warps));
        assert!(c[0].ptx.contains("ld.global.v4.f32"), "{}", c[0].ptx);
        assert!(c[0].ptx.contains("st.global.v4.f32"));
    }
}

/// `out = x` by blocks of 1024, prefetching the next program's block (masked to `< n`).
fn copy_prefetching_ahead(div: u32, warps: u32) -> Kernel {
    let params = vec![ptr("x", Elem::F32), ptr("out", Elem::F32), int("n", div)];
    trace("copy_ahead", params, vec![], warps, |a| {
        let (x, o) = (Tile::<Ptr<f32>>::from_value(a[0]), Tile::<Ptr<f32>>::from_value(a[1]));
        let n = Tile::<i32>::from_value(a[2]);
        let offs = program_id(0) * 1024 + arange(1024);
        prefetch(x + offs + 1024, (offs + 1024).compare(CmpOp::Lt, n));
        let m = offs.compare(CmpOp::Lt, n);
        store(o + offs, load(x + offs, m), m);
    })
    .unwrap()
}

#[test]
fn prefetch_lowers_to_one_l2_prefetch_per_line() {
    for (div, warps) in [(16, 1), (16, 4), (128, 1), (128, 4)] {
        let c = check(&copy_prefetching_ahead(div, warps));
        // Each thread holds 1024 / (32·warps) consecutive elements and prefetches each run of
        // them that is one cache line (32 f32) at most and uniformly masked (`n` a multiple of
        // `div`: runs of `div` elements).
        let per_thread = 1024 / (32 * warps as usize);
        let run = per_thread.min(32).min(div as usize);
        assert_eq!(
            c[0].ptx.matches("prefetch.global.L2 [").count(),
            per_thread / run,
            "div {div}, {warps} warps: {}",
            c[0].ptx
        );
        assert!(c[0]
            .ptx
            .lines()
            .filter(|l| l.contains("prefetch"))
            .all(|l| l.trim_start().starts_with('@')));
    }
}

/// `out[row] = Σ x` over `n` tiles `[16, 128]` (rows 0..12 copied, the rest masked off),
/// double-buffered through a two-stage shared buffer of 8 KiB per stage.
fn double_buffered_rows(warps: u32) -> Kernel {
    let params = vec![ptr("x", Elem::F32), ptr("out", Elem::F32), int("n", 1)];
    trace("double_buffered", params, vec![], warps, |a| {
        let (x, o) = (Tile::<Ptr<f32>>::from_value(a[0]), Tile::<Ptr<f32>>::from_value(a[1]));
        let n = Tile::<i32>::from_value(a[2]);
        let local = (arange(16) * 128).expand_dims(1) + arange(128).expand_dims(0);
        let rows = arange(16).compare(CmpOp::Lt, 12).expand_dims(1);
        let buf = shared::<f32>(2, &[16, 128]);
        buf.copy_async(0, x + local, rows);
        let acc = for_range(range(0, n), zeros::<f32>([16]), |i, acc| {
            buf.copy_async(
                (i + 1) % 2,
                x + (i + 1) * 2048 + local,
                rows & (i + 1).compare(CmpOp::Lt, n),
            );
            wait_async(1);
            acc + sum(buf.read(i % 2), 1)
        });
        store(o + arange(16), acc, true);
    })
    .unwrap()
}

#[test]
fn async_copies_lower_to_cp_async_into_stages() {
    for warps in [1, 4, 8] {
        let c = check(&double_buffered_rows(warps));
        let ptx = &c[0].ptx;
        // 16-byte copies of 2 × 16 × 128 floats, masked by source size.
        let per_thread = 2 * 16 * 128 / (32 * warps as usize) / 4;
        assert_eq!(ptx.matches("cp.async.cg.shared.global [").count(), per_thread, "{ptx}");
        assert_eq!(ptx.matches("cp.async.commit_group").count(), 2, "{ptx}");
        assert!(ptx.contains("cp.async.wait_group 1;\n\tbar.sync 0;"), "{ptx}");
        // Stages of 16 rows of 512 bytes (row sums read whole rows: no padding needed), then
        // the scratch of the reductions.
        assert!(
            ptx.lines().any(|l| l.contains("mad.lo.s32") && l.contains(", 8192, ")),
            "{ptx}"
        );
        let bytes: usize = (ptx.split("replay_smem[").nth(1))
            .and_then(|t| t.split(']').next())
            .and_then(|t| t.parse().ok())
            .expect("a static shared array");
        assert!(bytes >= 2 * 8192, "{bytes} bytes\n{ptx}");
    }
}

/// `out[row] = Σ x + Σ y` over `n` tiles `[16, 128]` of each, both double-buffered: the two
/// copies of a step issued one after the other.
fn two_double_buffers(warps: u32) -> Kernel {
    let params = vec![
        ptr("x", Elem::F32),
        ptr("y", Elem::F32),
        ptr("out", Elem::F32),
        int("n", 1),
    ];
    trace("two_double_buffers", params, vec![], warps, |a| {
        let (x, y) = (Tile::<Ptr<f32>>::from_value(a[0]), Tile::<Ptr<f32>>::from_value(a[1]));
        let o = Tile::<Ptr<f32>>::from_value(a[2]);
        let n = Tile::<i32>::from_value(a[3]);
        let local = (arange(16) * 128).expand_dims(1) + arange(128).expand_dims(0);
        let (bx, by) = (shared::<f32>(2, &[16, 128]), shared::<f32>(2, &[16, 128]));
        bx.copy_async(0, x + local, true);
        by.copy_async(0, y + local, true);
        let acc = for_range(range(0, n), zeros::<f32>([16]), |i, acc| {
            let next = (i + 1).compare(CmpOp::Lt, n);
            bx.copy_async((i + 1) % 2, x + (i + 1) * 2048 + local, next);
            by.copy_async((i + 1) % 2, y + (i + 1) * 2048 + local, next);
            wait_async(2);
            acc + sum(bx.read(i % 2), 1) + sum(by.read(i % 2), 1)
        });
        store(o + arange(16), acc, true);
    })
    .unwrap()
}

/// A copy waits at a barrier for every thread's earlier shared accesses, except right after
/// another copy: consecutive copies (straight-line code, no shared access between them) share
/// the first one's barrier, while a copy after a label (the loop's top) or a shared read keeps
/// its own.
#[test]
fn consecutive_copies_share_one_barrier() {
    for warps in [1, 4] {
        let ptx = &check(&two_double_buffers(warps))[0].ptx;
        let lines: Vec<&str> = ptx.lines().map(str::trim).collect();
        let commits: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i] == "cp.async.commit_group;")
            .collect();
        assert_eq!(commits.len(), 4, "{ptx}");
        // Each copy's first instruction after the previous copy's commit (or the kernel's
        // top): a barrier between them or not.
        let barrier_before = |from: usize, to: usize| lines[from..to].contains(&"bar.sync 0;");
        let first_copy = |after: usize| {
            (after..lines.len())
                .find(|&i| lines[i].contains("cp.async.cg"))
                .unwrap()
        };
        assert!(barrier_before(0, first_copy(0)), "the first copy's barrier\n{ptx}");
        assert!(!barrier_before(commits[0], first_copy(commits[0])), "{ptx}");
        assert!(
            barrier_before(commits[1], first_copy(commits[1])),
            "the loop's first copy\n{ptx}"
        );
        assert!(!barrier_before(commits[2], first_copy(commits[2])), "{ptx}");
    }
}

/// Sums rows of `x` through a two-stage shared buffer of `[16, 128]` in program 0, and through
/// a buffer of `[2, overlay_rows, 128]` in the other programs: overlaying the first when
/// `overlaid`, a region of its own otherwise.
fn rows_and_tail(overlay_rows: usize, overlaid: bool) -> Kernel {
    let params = vec![ptr("x", Elem::F32), ptr("out", Elem::F32)];
    trace("rows_and_tail", params, vec![], 4, |a| {
        let (x, o) = (Tile::<Ptr<f32>>::from_value(a[0]), Tile::<Ptr<f32>>::from_value(a[1]));
        let buf = shared::<f32>(2, &[16, 128]);
        let tail = if overlaid {
            buf.overlay(2, &[overlay_rows, 128])
        } else {
            shared::<f32>(2, &[overlay_rows, 128])
        };
        let sum_rows = |b: Shared<f32>, rows: usize| {
            let local = (arange(rows) * 128).expand_dims(1) + arange(128).expand_dims(0);
            b.copy_async(1, x + local, true);
            wait_async(0);
            store(o + arange(rows), sum(b.read(1), 1), true);
        };
        program_id(0)
            .compare(CmpOp::Eq, 0)
            .branch((), |()| sum_rows(buf, 16), |()| sum_rows(tail, overlay_rows));
    })
    .unwrap()
}

#[test]
fn an_overlaid_buffer_shares_the_region_of_the_larger() {
    let bytes = |k: &Kernel| check(k)[0].shared_bytes as usize;
    let stage = 16 * 128 * 4;
    for rows in [4, 8] {
        let own = bytes(&rows_and_tail(rows, false));
        let overlaid = bytes(&rows_and_tail(rows, true));
        assert_eq!(
            own - overlaid,
            2 * rows * 128 * 4,
            "{rows} rows: {own} against {overlaid}"
        );
    }
    // An overlay larger than its buffer makes the region its size.
    let own = bytes(&rows_and_tail(32, false));
    let overlaid = bytes(&rows_and_tail(32, true));
    assert_eq!(own - overlaid, 2 * stage, "{own} against {overlaid}");
}

fn row_softmax(block: usize, warps: u32) -> Kernel {
    trace(
        "softmax",
        vec![ptr("x", Elem::F32), ptr("out", Elem::F32), int("n", 1)],
        vec![("BLOCK".into(), block as i64)],
        warps,
        |a| {
            let (x, o) = (Tile::<Ptr<f32>>::from_value(a[0]), Tile::<Ptr<f32>>::from_value(a[1]));
            let n = Tile::<i32>::from_value(a[2]);
            let cols = arange(block);
            let mask = cols.compare(CmpOp::Lt, n);
            let row = program_id(0) * n;
            let v = load_or(x + row + cols, mask, f32::NEG_INFINITY);
            let e = exp(v - max(v, 0));
            store(o + row + cols, e / sum(e, 0), mask);
        },
    )
    .unwrap()
}

#[test]
fn softmax_rows() {
    for (block, warps) in [(1024, 4), (128, 1), (4096, 8), (32, 4)] {
        let c = check(&row_softmax(block, warps));
        let layout = c[0].stage("layout").unwrap();
        assert!(
            !layout.contains("convert"),
            "softmax needs no layout conversion:\n{layout}"
        );
    }
}

/// RMSNorm over a [ROWS, N] tile: y = x * rsqrt(mean(x²) + eps) * w.
fn rmsnorm(rows: usize, n: usize, warps: u32) -> Kernel {
    trace(
        "rmsnorm",
        vec![
            ptr("x", Elem::F32),
            ptr("w", Elem::F32),
            ptr("y", Elem::F32),
            int("stride", 16),
        ],
        vec![("ROWS".into(), rows as i64), ("N".into(), n as i64)],
        warps,
        |a| {
            let (x, w, y) = (
                Tile::<Ptr<f32>>::from_value(a[0]),
                Tile::<Ptr<f32>>::from_value(a[1]),
                Tile::<Ptr<f32>>::from_value(a[2]),
            );
            let stride = Tile::<i32>::from_value(a[3]);
            let r = program_id(0) * rows + arange(rows);
            let c = arange(n);
            let offs = (r * stride).expand_dims(1) + c.expand_dims(0);
            let xv = load(x + offs, true);
            let ms = sum(xv * xv, 1) / (n as f32);
            let inv = rsqrt(ms + 1e-6f32);
            let wv = load(w + c, true);
            store(y + offs, xv * inv.expand_dims(1) * wv.expand_dims(0), true);
        },
    )
    .unwrap()
}

#[test]
fn rmsnorm_2d() {
    for (rows, n, warps) in [(4, 256, 4), (16, 64, 4), (2, 1024, 8), (8, 32, 1)] {
        let c = check(&rmsnorm(rows, n, warps));
        let layout = c[0].stage("layout").unwrap();
        assert!(
            !layout.contains("convert"),
            "rmsnorm needs no layout conversion:\n{layout}"
        );
        assert!(c[0].ptx.contains("shfl.sync.bfly"));
    }
}

/// `sum(x * q[None, :], 1)` and the outer product `v[:, None] * k[None, :]`.
#[test]
fn matvec_and_outer_product() {
    let k = trace(
        "matvec",
        vec![
            ptr("x", Elem::F32),
            ptr("q", Elem::F32),
            ptr("v", Elem::F32),
            ptr("out", Elem::F32),
            ptr("outer", Elem::F32),
        ],
        vec![],
        4,
        |a| {
            let t = |i: usize| Tile::<Ptr<f32>>::from_value(a[i]);
            let (r, c) = (arange(32), arange(64));
            let offs = (r * 64).expand_dims(1) + c.expand_dims(0);
            let xv = load(t(0) + offs, true);
            let qv = load(t(1) + c, true);
            store(t(3) + r, sum(xv * qv.expand_dims(0), 1), true);
            let vv = load(t(2) + r, true);
            store(t(4) + offs, vv.expand_dims(1) * qv.expand_dims(0), true);
        },
    )
    .unwrap();
    let c = check(&k);
    println!("{}", c[0].stage("layout").unwrap());
}

fn scan_kernel(axis: usize, prod: bool, rows: usize, cols: usize, warps: u32) -> Kernel {
    let name = if prod { "cumprod" } else { "cumsum" };
    trace(
        name,
        vec![
            ptr("x", Elem::F32),
            ptr("y", Elem::F32),
            ptr("xi", Elem::I32),
            ptr("yi", Elem::I32),
        ],
        vec![
            ("AXIS".into(), axis as i64),
            ("R".into(), rows as i64),
            ("C".into(), cols as i64),
        ],
        warps,
        |a| {
            let offs = (arange(rows) * cols).expand_dims(1) + arange(cols).expand_dims(0);
            let x = load(Tile::<Ptr<f32>>::from_value(a[0]) + offs, true);
            let xi = load(Tile::<Ptr<i32>>::from_value(a[2]) + offs, true);
            let (y, yi) = if prod {
                (cumprod(x, axis), cumprod(xi, axis))
            } else {
                (cumsum(x, axis), cumsum(xi, axis))
            };
            store(Tile::<Ptr<f32>>::from_value(a[1]) + offs, y, true);
            store(Tile::<Ptr<i32>>::from_value(a[3]) + offs, yi, true);
        },
    )
    .unwrap()
}

#[test]
fn scans_both_axes() {
    for axis in [0, 1] {
        for prod in [false, true] {
            for (r, c, w) in [(32, 64, 4), (64, 16, 8), (4, 1024, 4), (16, 16, 1)] {
                check(&scan_kernel(axis, prod, r, c, w));
            }
        }
    }
    // 1-D cumsum over a long row.
    let k = trace(
        "cumsum1d",
        vec![ptr("x", Elem::F32), ptr("y", Elem::F32)],
        vec![],
        4,
        |a| {
            let c = arange(2048);
            store(
                Tile::<Ptr<f32>>::from_value(a[1]) + c,
                cumsum(load(Tile::<Ptr<f32>>::from_value(a[0]) + c, true), 0),
                true,
            );
        },
    )
    .unwrap();
    check(&k);
}

fn matmul(bm: usize, bn: usize, bk: usize, warps: u32, half_inputs: bool) -> Kernel {
    let e = if half_inputs { Elem::F16 } else { Elem::F32 };
    trace(
        "matmul",
        vec![
            ptr("a", e),
            ptr("b", e),
            ptr("c", Elem::F32),
            int("M", 16),
            int("N", 16),
            int("K", 16),
        ],
        vec![
            ("BM".into(), bm as i64),
            ("BN".into(), bn as i64),
            ("BK".into(), bk as i64),
        ],
        warps,
        |p| {
            let (m, n, kk) = (
                Tile::<i32>::from_value(p[3]),
                Tile::<i32>::from_value(p[4]),
                Tile::<i32>::from_value(p[5]),
            );
            let rm = program_id(0) * bm + arange(bm);
            let rn = program_id(1) * bn + arange(bn);
            let rk = arange(bk);
            let acc = zeros::<f32>([bm, bn]);
            let acc = for_range(range_step(0, kk, bk as i32), acc, |k0, acc| {
                let a_offs = (rm * kk).expand_dims(1) + (rk + k0).expand_dims(0);
                let b_offs = ((rk + k0) * n).expand_dims(1) + rn.expand_dims(0);
                if half_inputs {
                    let a = load(Tile::<Ptr<f16>>::from_value(p[0]) + a_offs, true);
                    let b = load(Tile::<Ptr<f16>>::from_value(p[1]) + b_offs, true);
                    dot_acc(a, b, acc)
                } else {
                    let a = load(Tile::<Ptr<f32>>::from_value(p[0]) + a_offs, true);
                    let b = load(Tile::<Ptr<f32>>::from_value(p[1]) + b_offs, true);
                    dot_acc(a, b, acc)
                }
            });
            let c_offs = (rm * n).expand_dims(1) + rn.expand_dims(0);
            let mask = rm.expand_dims(1).compare(CmpOp::Lt, m) & rn.expand_dims(0).compare(CmpOp::Lt, n);
            store(Tile::<Ptr<f32>>::from_value(p[2]) + c_offs, acc, mask);
        },
    )
    .unwrap()
}

#[test]
fn matmul_dot_in_loop() {
    for (bm, bn, bk, w, h) in [
        (64, 64, 32, 4, false),
        (32, 32, 16, 4, true),
        (64, 64, 16, 8, true),
        (16, 16, 8, 1, false),
    ] {
        // Tiles that fit the tensor cores accumulate with mma (backend_mma.rs covers the rest).
        let c = check(&matmul(bm, bn, bk, w, h));
        assert!(c[0].ptx.contains("mma.sync.aligned"));
    }
}

#[test]
fn atomics() {
    for warps in [1, 4] {
        let k = trace(
            "atomics",
            vec![
                ptr("bins", Elem::I32),
                ptr("hist", Elem::I32),
                ptr("mx", Elem::I32),
                ptr("f", Elem::F32),
                ptr("l", Elem::I64),
                ptr("old", Elem::I32),
                int("n", 1),
            ],
            vec![],
            warps,
            |a| {
                let n = Tile::<i32>::from_value(a[6]);
                let offs = program_id(0) * 256 + arange(256);
                let mask = offs.compare(CmpOp::Lt, n);
                let bins = load(Tile::<Ptr<i32>>::from_value(a[0]) + offs, mask);
                // Histogram (result unused), max and CAS (results used).
                atomic_add(Tile::<Ptr<i32>>::from_value(a[1]) + bins, 1i32, mask);
                let m = atomic_max(Tile::<Ptr<i32>>::from_value(a[2]) + bins, offs, mask);
                let old = atomic_cas(Tile::<Ptr<i32>>::from_value(a[2]) + bins, m, offs + 1, mask);
                store(Tile::<Ptr<i32>>::from_value(a[5]) + offs, old, mask);
                atomic_add(Tile::<Ptr<f32>>::from_value(a[3]) + bins, bins.cast::<f32>(), mask);
                atomic_add(Tile::<Ptr<i64>>::from_value(a[4]) + bins, bins.cast::<i64>(), mask);
                // A small tile (replicated over the CTA) and a scalar atomic whose result is used.
                let few = arange(8);
                let o8 = atomic_add(Tile::<Ptr<i32>>::from_value(a[1]) + few, few, true);
                store(Tile::<Ptr<i32>>::from_value(a[5]) + few, o8, true);
                let s = atomic_add(Tile::<Ptr<i32>>::from_value(a[1]), 1i32, true);
                store(Tile::<Ptr<i32>>::from_value(a[5]), s, true);
            },
        )
        .unwrap();
        let c = check(&k);
        for needle in [
            "atom.global.add.s32",
            "atom.global.max.s32",
            "atom.global.cas.b32",
            "atom.global.add.f32",
            "atom.global.add.u64",
        ] {
            assert!(c[0].ptx.contains(needle), "{needle}");
        }
    }
}

fn typed<T: Scalar>(p: Value) -> Tile<Ptr<T>> {
    Tile::from_value(p)
}
use replay_dsl::ir::Value;

#[test]
fn casts_all_pairs_and_stochastic() {
    let elems = [
        Elem::Bool,
        Elem::I32,
        Elem::I64,
        Elem::U32,
        Elem::F16,
        Elem::BF16,
        Elem::F32,
        Elem::F8E4M3,
    ];
    let params: Vec<Param> = elems
        .iter()
        .map(|e| ptr(e.name(), *e))
        .chain([
            ptr("out", Elem::F32),
            ptr("bits", Elem::U32),
            ptr("h", Elem::F16),
            ptr("bh", Elem::BF16),
            ptr("q", Elem::F8E4M3),
        ])
        .collect();
    let k = trace("casts", params, vec![], 4, |a| {
        let offs = arange(256);
        // Load every type, cast it to every type and back to f32, and sum everything.
        macro_rules! load_as_f32 {
            ($t:ty, $i:expr) => {{
                let x = load(typed::<$t>(a[$i]) + offs, true);
                let mut acc = x.cast::<f32>();
                acc = acc
                    + x.cast::<bool>().cast::<f32>()
                    + x.cast::<i32>().cast::<f32>()
                    + x.cast::<i64>().cast::<f32>();
                acc = acc
                    + x.cast::<u32>().cast::<f32>()
                    + x.cast::<f16>().cast::<f32>()
                    + x.cast::<bf16>().cast::<f32>();
                acc + x.cast::<F8E4M3>().cast::<f32>()
            }};
        }
        let mut total = load_as_f32!(bool, 0);
        total = total + load_as_f32!(i32, 1) + load_as_f32!(i64, 2) + load_as_f32!(u32, 3);
        total = total + load_as_f32!(f16, 4) + load_as_f32!(bf16, 5) + load_as_f32!(f32, 6) + load_as_f32!(F8E4M3, 7);
        let bits = load(typed::<u32>(a[9]) + offs, true);
        store(typed::<f16>(a[10]) + offs, total.cast_stochastic::<f16>(bits), true);
        store(typed::<bf16>(a[11]) + offs, total.cast_stochastic::<bf16>(bits), true);
        store(
            typed::<F8E4M3>(a[12]) + offs,
            total.cast_stochastic::<F8E4M3>(bits),
            true,
        );
        store(typed::<f32>(a[8]) + offs, total, true);
        // Stores of narrow types.
        store(typed::<bool>(a[0]) + offs, total.compare(CmpOp::Gt, 0.0f32), true);
        store(typed::<F8E4M3>(a[7]) + offs, total.cast::<F8E4M3>(), true);
    })
    .unwrap();
    let c = check(&k);
    assert!(!c[0].ptx.contains("cvt.rs"), "sm_90a uses the software algorithm");
    assert!(c[0].ptx.contains(".version 8.0"));
    assert!(
        c[1].ptx.contains("cvt.rs.f16x2.f32")
            && c[1].ptx.contains("cvt.rs.bf16x2.f32")
            && c[1].ptx.contains("cvt.rs.satfinite.e4m3x4.f32")
    );
    assert!(c[1].ptx.contains(".version 8.7"));
    assert!(c[0].ptx.contains("cvt.rn.satfinite.e4m3x2.f32") && c[0].ptx.contains("cvt.rn.f16x2.e4m3x2"));
}

#[test]
fn every_unary_binary_and_cmp_op() {
    let k = trace(
        "ops",
        vec![
            ptr("x", Elem::F32),
            ptr("y", Elem::F32),
            ptr("i", Elem::I32),
            ptr("u", Elem::U32),
            ptr("l", Elem::I64),
            ptr("h", Elem::F16),
            ptr("out", Elem::F32),
            ptr("oi", Elem::I32),
            ptr("ou", Elem::U32),
            ptr("ol", Elem::I64),
            ptr("ob", Elem::Bool),
        ],
        vec![],
        4,
        |a| {
            let offs = arange(128);
            let x = load(typed::<f32>(a[0]) + offs, true);
            let y = load(typed::<f32>(a[1]) + offs, true);
            let mut f = -x + abs(y) + exp(x) + exp2(y) + log(x) + log2(y) + sqrt(x) + rsqrt(y);
            f = f + softplus(x) + sigmoid(y) + silu(x) + tanh(y);
            f = f + (x - y) * (x / y) + minimum(x, y) + maximum(x, y);
            let h = load(typed::<f16>(a[5]) + offs, true);
            let h2 = exp(h) * h + tanh(h) - h / (h + 1.0f32) + minimum(h, h);
            f += h2.cast::<f32>();
            store(typed::<f32>(a[6]) + offs, f, true);
            macro_rules! int_ops {
                ($t:ty, $src:expr, $dst:expr) => {{
                    let i = load(typed::<$t>(a[$src]) + offs, true);
                    let j = i + offs.cast::<$t>();
                    let mut r = -i
                        + abs(j)
                        + !i
                        + (i - j) * j
                        + i / (j | constant::<$t>(1 as $t))
                        + i % (j | constant::<$t>(1 as $t));
                    r = r + minimum(i, j) + maximum(i, j) + (i & j) + (i | j) + (i ^ j) + (i << j) + (i >> j);
                    store(typed::<$t>(a[$dst]) + offs, r, true);
                    i
                }};
            }
            let i = int_ops!(i32, 2, 7);
            let u = int_ops!(u32, 3, 8);
            let l = int_ops!(i64, 4, 9);
            let mut b = x.compare(CmpOp::Eq, y) ^ x.compare(CmpOp::Ne, y);
            for op in [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge] {
                b = b
                    | x.compare(op, y)
                    | i.compare(op, offs)
                    | u.compare(op, 7u32)
                    | l.compare(op, 3i64)
                    | h.compare(op, h2);
                b = b & !(b.compare(op, x.compare(CmpOp::Lt, 0.0f32)));
            }
            let s = select(b, x, y);
            store(typed::<f32>(a[6]) + offs + 128, s, b);
            store(typed::<bool>(a[10]) + offs, b & select(b, b, !b), true);
        },
    )
    .unwrap();
    check(&k);
}

/// Integer division and remainder by a constant: i32 without a division instruction (ptxas
/// divides in full even by an immediate), i64 with the constant as an immediate.
#[test]
fn constant_divisors_need_no_i32_division() {
    let k = trace(
        "divs",
        vec![
            ptr("i", Elem::I32),
            ptr("l", Elem::I64),
            ptr("oi", Elem::I32),
            ptr("ol", Elem::I64),
        ],
        vec![],
        4,
        |a| {
            let offs = arange(128);
            let i = load(typed::<i32>(a[0]) + offs, true);
            let l = load(typed::<i64>(a[1]) + offs, true);
            store(typed::<i32>(a[2]) + offs, i / 12 + i % 7 + i % 2 + i / 64, true);
            store(typed::<i64>(a[3]) + offs, l / 3i64 + l % -5i64, true);
        },
    )
    .unwrap();
    for c in check(&k) {
        let lines = |prefix: &str| c.ptx.lines().filter(|l| l.trim_start().starts_with(prefix)).count();
        assert_eq!(lines("div.s32") + lines("rem.s32"), 0, "{}", c.ptx);
        assert_eq!(lines("mul.hi.s32"), 2, "{}", c.ptx);
        for (inst, imm) in [("div.s64", "3"), ("rem.s64", "-5")] {
            let want = format!(", {imm};");
            assert!(
                c.ptx
                    .lines()
                    .any(|l| l.trim_start().starts_with(inst) && l.ends_with(&want)),
                "no `{inst} .., {imm}` in\n{}",
                c.ptx
            );
        }
    }
}

#[test]
fn if_on_scalar_and_loop_carried_values() {
    for warps in [1, 4, 8] {
        let k = trace(
            "branchy",
            vec![ptr("x", Elem::F32), ptr("out", Elem::F32), int("n", 1), int("flag", 1)],
            vec![],
            warps,
            |a| {
                let x = load(typed::<f32>(a[0]) + arange(512), true);
                let flag = Tile::<i32>::from_value(a[3]);
                let (y, s) = flag.compare(CmpOp::Gt, 0).branch(
                    (x, sum(x, 0)),
                    |(x, s)| (x * 2.0f32, s + 1.0f32),
                    |(x, s)| (x + 1.0f32, max(x, 0) * s),
                );
                let n = Tile::<i32>::from_value(a[2]);
                // Swapping carried values and a cumsum inside a loop.
                let (p, q) = for_range(range(0, n), (y, x), |i, (p, q)| (q + i.cast::<f32>(), cumsum(p, 0)));
                store(typed::<f32>(a[1]) + arange(512), p + q + s, true);
            },
        )
        .unwrap();
        let c = check(&k);
        assert!(c[0].ptx.contains("bra"));
    }
}

/// `x + x.trans()` and a reshape feeding a reduction need layout conversions through shared
/// memory (for every element type class: f32, f16, i64, bool).
#[test]
fn layout_conversions() {
    for warps in [1, 4] {
        let k = trace(
            "convert",
            vec![
                ptr("x", Elem::F32),
                ptr("h", Elem::F16),
                ptr("l", Elem::I64),
                ptr("b", Elem::Bool),
                ptr("out", Elem::F32),
            ],
            vec![],
            warps,
            |a| {
                let offs = (arange(32) * 32).expand_dims(1) + arange(32).expand_dims(0);
                let x = load(typed::<f32>(a[0]) + offs, true);
                let h = load(typed::<f16>(a[1]) + offs, true);
                let l = load(typed::<i64>(a[2]) + offs, true);
                let b = load(typed::<bool>(a[3]) + offs, true);
                let t = x
                    + x.trans()
                    + (h + h.trans()).cast::<f32>()
                    + (l + l.trans()).cast::<f32>()
                    + (b ^ b.trans()).cast::<f32>();
                let r = sum(t.reshape([8, 128]), 1);
                store(typed::<f32>(a[4]) + arange(8), r, true);
                store(typed::<f32>(a[4]) + offs, t, true);
            },
        )
        .unwrap();
        let c = check(&k);
        assert!(c[0].stage("layout").unwrap().contains("convert"));
        assert!(c[0].ptx.contains("st.shared") && c[0].shared_bytes > 0);
    }
}

/// The layout stage has no conversion and the PTX no barrier.
fn assert_no_exchange(c: &Compiled) {
    let layout = c.stage("layout").unwrap();
    assert!(!layout.contains("convert"), "conversion in {}:\n{layout}", c.entry);
    assert!(
        !c.ptx.contains("bar.sync"),
        "barrier in {}:\n{}",
        c.entry,
        util::numbered(&c.ptx)
    );
    assert!(!c.ptx.contains("st.shared"), "shared memory in {}", c.entry);
}

/// A Mamba-2 decode-like step on a `[BV, DK]` state tile: `x[BV]` is loaded next to the row
/// reduction `sum(S * q[None, :], 1)` in its sliced layout, `k[DK]`/`q[DK]` along rows in the
/// state's layout without dimension 0, `x[:, None]` along columns: no conversion, no barrier,
/// and the state keeps 16-byte accesses.
#[test]
fn propagation_sliced_vector_and_row_col_broadcasts() {
    for (bv, dk, warps) in [(32, 128, 4), (16, 128, 4), (64, 64, 8), (8, 32, 1)] {
        let k = trace(
            "decode_like",
            vec![
                ptr("x", Elem::BF16),
                ptr("k", Elem::BF16),
                ptr("q", Elem::BF16),
                ptr("s", Elem::F32),
                ptr("out", Elem::BF16),
                param("dt", DType::Val(Elem::F32), 1),
            ],
            vec![],
            warps,
            |a| {
                let dt = Tile::<f32>::from_value(a[5]);
                let (v, kk) = (arange(bv), arange(dk));
                let xv = load(typed::<bf16>(a[0]) + v, true).cast::<f32>();
                let kv = load(typed::<bf16>(a[1]) + kk, true).cast::<f32>();
                let qv = load(typed::<bf16>(a[2]) + kk, true).cast::<f32>();
                let sptr = typed::<f32>(a[3]) + (v * dk as i32).expand_dims(1) + kk.expand_dims(0);
                let s = load(sptr, true) * dt + (dt * xv).expand_dims(1) * kv.expand_dims(0);
                let y = sum(s * qv.expand_dims(0), 1) + xv * 2.0f32;
                store(typed::<bf16>(a[4]) + v, y.cast::<bf16>(), true);
                store(sptr, s, true);
            },
        )
        .unwrap();
        let c = check(&k);
        assert_no_exchange(&c[0]);
        assert!(c[0].ptx.contains("ld.global.v4.f32") && c[0].ptx.contains("st.global.v4.f32"));
    }
}

/// A scalar reduction of a small vector broadcast over a tile, and a reduction along rows whose
/// result is added to a row reduction of another tile (its input is laid out so that the result
/// lands in the other reduction's layout, and the scan feeding it needs no conversion either).
#[test]
fn propagation_scalar_broadcast_and_lifted_reduction() {
    for (nr, bv, dk) in [(16, 16, 128), (32, 32, 64), (8, 16, 128)] {
        let k = trace(
            "replay_like",
            vec![
                ptr("dt", Elem::F32),
                ptr("xs", Elem::BF16),
                ptr("q", Elem::BF16),
                ptr("s", Elem::F32),
                ptr("out", Elem::F32),
            ],
            vec![],
            4,
            |a| {
                let (i, v, kk) = (arange(nr), arange(bv), arange(dk));
                let dt = load(typed::<f32>(a[0]) + i, true);
                let w = exp(cumsum(dt, 0) * -0.5f32) * dt;
                let gamma = exp(sum(dt, 0));
                let xs = load(
                    typed::<bf16>(a[1]) + (i * bv as i32).expand_dims(1) + v.expand_dims(0),
                    true,
                )
                .cast::<f32>();
                let qv = load(typed::<bf16>(a[2]) + kk, true).cast::<f32>();
                let s = load(
                    typed::<f32>(a[3]) + (v * dk as i32).expand_dims(1) + kk.expand_dims(0),
                    true,
                );
                let y = gamma * sum(s * qv.expand_dims(0), 1) + sum(xs * w.expand_dims(1), 0);
                store(typed::<f32>(a[4]) + v, y, true);
            },
        )
        .unwrap();
        let c = check(&k);
        // The row reduction scatters its result over the lanes; the scan's layout and the one
        // the lifted reduction wants then differ inside warps only (shuffles, no shared memory).
        assert!(!c[0].ptx.contains("bar.sync") && !c[0].ptx.contains("st.shared"));
    }
}

/// A conversion between two layouts that differ only inside warps (a scan's result broadcast
/// along the columns of a large tile) uses shuffles, not shared memory.
#[test]
fn in_warp_conversion_uses_shuffles() {
    for warps in [4, 1] {
        let k = trace(
            "shuffle_convert",
            vec![ptr("dt", Elem::F32), ptr("x", Elem::F32), ptr("out", Elem::F32)],
            vec![],
            warps,
            |a| {
                let (i, c) = (arange(32), arange(64));
                let w = cumsum(load(typed::<f32>(a[0]) + i, true), 0);
                let offs = (i * 64).expand_dims(1) + c.expand_dims(0);
                let x = load(typed::<f32>(a[1]) + offs, true);
                store(typed::<f32>(a[2]) + offs, x * w.expand_dims(1), true);
            },
        )
        .unwrap();
        let c = check(&k);
        let layout = c[0].stage("layout").unwrap();
        assert!(layout.contains("convert"), "{layout}");
        assert!(c[0].ptx.contains("shfl.sync.idx"), "{}", c[0].ptx);
        assert!(!c[0].ptx.contains("st.shared"), "{}", util::numbered(&c[0].ptx));
    }
}

/// A bf16 record tile `[nr, BV]` reduced as `sum(r * w[:, None], 0)` next to a row reduction of
/// an f32 state tile takes a layout lifted from that row reduction's result, which is scattered
/// over the lanes (one register per thread): the record tile is then loaded once, without
/// replication (each thread loads only its own `nr·BV / threads` elements), and nothing goes
/// through shared memory.
#[test]
fn lifted_record_tile_is_loaded_without_replication() {
    let k = trace(
        "lifted_record",
        vec![
            ptr("s", Elem::F32),
            ptr("q", Elem::F32),
            ptr("r", Elem::BF16),
            ptr("w", Elem::F32),
            ptr("out", Elem::F32),
        ],
        vec![],
        4,
        |a| {
            let f = |i: usize| Tile::<Ptr<f32>>::from_value(a[i]);
            let rec = Tile::<Ptr<bf16>>::from_value(a[2]);
            let (v, kk, i) = (arange(16), arange(128), arange(16));
            let s = load(f(0) + (v * 128).expand_dims(1) + kk.expand_dims(0), true);
            let q = load(f(1) + kk, true);
            let sq = sum(s * q.expand_dims(0), 1);
            let r = load(rec + (i * 1024).expand_dims(1) + v.expand_dims(0), true).cast::<f32>();
            let w = load(f(3) + i, true);
            store(f(4) + v, sq + sum(r * w.expand_dims(1), 0), true);
        },
    )
    .unwrap();
    for c in check(&k) {
        let layout = c.stage("layout").unwrap();
        let b16 = c.ptx.matches("ld.global.b16").count();
        let b32 = c.ptx.matches("ld.global.b32").count() + c.ptx.matches("ld.global.v2.b32").count();
        assert!(b16 + 2 * b32 <= 16 * 16 / 128, "{layout}\n{}", c.ptx);
        assert!(!c.ptx.contains("bar.sync") && !c.ptx.contains("st.shared"), "{layout}");
    }
}

#[test]
fn min_blocks_hint_is_emitted_and_assembles() {
    let plain = check(&vector_add(16, 4));
    assert!(!plain[0].ptx.contains(".minnctapersm"), "no hint by default");
    assert_eq!(plain[0].entry, "add_BLOCK1024_w4");
    for m in [2, 3, 4] {
        let mut k = vector_add(16, 4);
        k.min_blocks = m;
        assert!(k.to_string().contains(&format!("num_warps=4 min_blocks={m} {{")), "{k}");
        for c in check(&k) {
            assert_eq!(c.entry, format!("add_BLOCK1024_w4_b{m}"));
            assert!(
                c.ptx.contains(&format!(".maxntid 128, 1, 1\n.minnctapersm {m}\n{{")),
                "{}",
                c.ptx
            );
        }
    }
}

#[test]
fn min_blocks_hint_is_validated() {
    let traced =
        |warps: u32, m: u32| replay_dsl::front::builder::trace_with_min_blocks("k", vec![], vec![], warps, m, |_| {});
    assert_eq!(traced(4, 3).unwrap().min_blocks, 3);
    assert_eq!(traced(32, 2).unwrap().min_blocks, 2);
    for (warps, m) in [(4, 0), (32, 3), (8, 9)] {
        let e = traced(warps, m).unwrap_err().to_string();
        assert!(e.contains("min_blocks must be ≥ 1"), "{warps} warps, {m}: {e}");
    }
}

/// A `[4, 16, 128]` f32 tile whose offsets differ by constants per register is loaded through
/// one base register with immediate offsets (`[%rd+imm]`), not one 64-bit address per access.
#[test]
fn tile_addresses_share_one_base_register() {
    let k = trace(
        "addresses",
        vec![ptr("s", Elem::F32), ptr("out", Elem::F32)],
        vec![],
        4,
        |a| {
            let (h, v, kk) = (arange(4), arange(16), arange(128));
            let base = typed::<f32>(a[0]) + program_id(0) * (4 * 16 * 128);
            let ptrs = base
                + (h * 2048).expand_dims(1).expand_dims(2)
                + (v * 128).expand_dims(0).expand_dims(2)
                + kk.expand_dims(0).expand_dims(0);
            let s = load(ptrs, true);
            store(
                typed::<f32>(a[1]) + program_id(0) * 64 + (h * 16).expand_dims(1) + v.expand_dims(0),
                sum(s, 2),
                true,
            );
        },
    )
    .unwrap();
    for c in check(&k) {
        let loads: Vec<&str> = c.ptx.lines().filter(|l| l.contains("ld.global.v4.f32")).collect();
        assert_eq!(loads.len(), 4 * 16 * 128 / 128 / 4, "{}", c.ptx);
        let bases: std::collections::HashSet<&str> = loads
            .iter()
            .map(|l| l.rsplit('[').next().unwrap().split(['+', ']']).next().unwrap())
            .collect();
        assert_eq!(bases.len(), 1, "one base register:\n{}", loads.join("\n"));
        assert!(loads.iter().filter(|l| l.contains('+')).count() >= loads.len() - 1);
    }
}

/// A row reduction whose rows sit in registers and whose columns sit on lanes scatters its
/// result over those lanes: one shuffle per pair of registers at each lane bit (recursive
/// halving), one register per thread afterwards, instead of a butterfly of every register
/// across every lane.
#[test]
fn row_reduction_scatters_over_lanes() {
    let k = trace(
        "scatter",
        vec![ptr("s", Elem::F32), ptr("out", Elem::F32)],
        vec![],
        4,
        |a| {
            let (h, v, kk) = (arange(4), arange(16), arange(128));
            let ptrs = typed::<f32>(a[0])
                + (h * 2048).expand_dims(1).expand_dims(2)
                + (v * 128).expand_dims(0).expand_dims(2)
                + kk.expand_dims(0).expand_dims(0);
            let y = sum(load(ptrs, true), 2);
            store(typed::<f32>(a[1]) + (h * 16).expand_dims(1) + v.expand_dims(0), y, true);
        },
    )
    .unwrap();
    for c in check(&k) {
        let shuffles = c.ptx.matches("shfl.sync.bfly").count();
        // 16 results per thread before the lanes: 8 + 4 + 2 + 1 halving shuffles, then 1
        // butterfly on the last lane bit (a butterfly of all 16 would take 80).
        assert_eq!(shuffles, 16, "{}", c.ptx);
        assert!(c.ptx.contains("selp.f32"));
        assert!(!c.ptx.contains("bar.sync"));
    }
}

/// A row sum of f32 products accumulates them with `fma` inside each thread (the products'
/// `mul`s are dropped by ptxas).
#[test]
fn sum_of_products_uses_fma() {
    let k = trace(
        "dotrows",
        vec![ptr("s", Elem::F32), ptr("q", Elem::F32), ptr("out", Elem::F32)],
        vec![],
        4,
        |a| {
            let (v, kk) = (arange(16), arange(128));
            let s = load(typed::<f32>(a[0]) + (v * 128).expand_dims(1) + kk.expand_dims(0), true);
            let q = load(typed::<f32>(a[1]) + kk, true);
            store(typed::<f32>(a[2]) + v, sum(s * q.expand_dims(0), 1), true);
        },
    )
    .unwrap();
    for c in check(&k) {
        // 16 elements per thread, 4 consecutive columns of 4 rows: per row one product and
        // 3 fused multiply-adds.
        assert_eq!(c.ptx.matches("fma.rn.f32").count(), 4 * 3, "{}", c.ptx);
    }
}
