//! PTX backend: kernels compiled for sm_90a and sm_100a, each checked with ptxas (success and no
//! spills). ptxas comes from `scripts/install-ptxas.sh`; if it cannot be installed the tests fail.

use replay_dsl::front::builder::trace;
use replay_dsl::front::tile::Tile;
use replay_dsl::ir::{CmpOp, Kernel, Param};
use replay_dsl::prelude::*;
use replay_dsl::{compile, Compiled, DType, Elem, Target};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

fn ptxas() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let out = Command::new("bash").arg(root.join("scripts/install-ptxas.sh")).output().expect("run install-ptxas.sh");
        assert!(out.status.success(), "install-ptxas.sh failed: {}", String::from_utf8_lossy(&out.stderr));
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

/// Compiles `k` for both targets, assembles each PTX with ptxas, asserts no spills; returns the
/// compiled kernels (sm_90a first).
fn check(k: &Kernel) -> Vec<Compiled> {
    let mut out = Vec::new();
    for target in Target::ALL {
        let c = compile(k, target).unwrap_or_else(|e| panic!("{e}\n{k}"));
        let dir = std::env::temp_dir().join(format!("replay-backend-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}_{}.ptx", c.entry, target.arch()));
        std::fs::write(&path, &c.ptx).unwrap();
        let res = Command::new(ptxas()).args(["-arch", target.arch(), "-v", "-o", "/dev/null"]).arg(&path).output().unwrap();
        let log = String::from_utf8_lossy(&res.stderr).to_string() + &String::from_utf8_lossy(&res.stdout);
        assert!(res.status.success(), "ptxas failed for {} on {}:\n{log}\n{}", c.entry, target.arch(), numbered(&c.ptx));
        assert!(log.contains("0 bytes spill stores, 0 bytes spill loads"), "spills in {}:\n{log}", c.entry);
        let regs = log.split("Used ").nth(1).and_then(|s| s.split(' ').next()).unwrap_or("?");
        println!("{} {}: {regs} registers, {} bytes smem", c.entry, target.arch(), c.shared_bytes);
        out.push(c);
    }
    out
}

fn numbered(s: &str) -> String {
    s.lines().enumerate().map(|(i, l)| format!("{:5} {l}\n", i + 1)).collect()
}

fn param(name: &str, dtype: DType, divisibility: u32) -> Param {
    Param { name: name.into(), dtype, divisibility }
}
fn ptr(name: &str, e: Elem) -> Param {
    param(name, DType::Ptr(e), 16)
}
fn int(name: &str, div: u32) -> Param {
    param(name, DType::Val(Elem::I32), div)
}

fn vector_add(div: u32, warps: u32) -> Kernel {
    trace("add", vec![ptr("x", Elem::F32), ptr("y", Elem::F32), ptr("out", Elem::F32), int("n", div)], vec![("BLOCK".into(), 1024)], warps, |a| {
        let (x, y, o) = (Tile::<Ptr<f32>>::from_value(a[0]), Tile::<Ptr<f32>>::from_value(a[1]), Tile::<Ptr<f32>>::from_value(a[2]));
        let n = Tile::<i32>::from_value(a[3]);
        let offs = program_id(0) * 1024 + arange(1024);
        let mask = offs.compare(CmpOp::Lt, n);
        let s = load(x + offs, mask) + load(y + offs, mask);
        store(o + offs, s, mask);
    })
    .unwrap()
}

#[test]
fn vector_add_masked_tail() {
    for warps in [1, 4, 8] {
        let c = check(&vector_add(1, warps));
        assert!(!c[0].ptx.contains("ld.global.v4.f32"), "n not divisible: no vector loads");
        let c = check(&vector_add(16, warps));
        assert!(c[0].ptx.contains("ld.global.v4.f32"), "{}", c[0].ptx);
        assert!(c[0].ptx.contains("st.global.v4.f32"));
    }
}

fn row_softmax(block: usize, warps: u32) -> Kernel {
    trace("softmax", vec![ptr("x", Elem::F32), ptr("out", Elem::F32), int("n", 1)], vec![("BLOCK".into(), block as i64)], warps, |a| {
        let (x, o) = (Tile::<Ptr<f32>>::from_value(a[0]), Tile::<Ptr<f32>>::from_value(a[1]));
        let n = Tile::<i32>::from_value(a[2]);
        let cols = arange(block);
        let mask = cols.compare(CmpOp::Lt, n);
        let row = program_id(0) * n;
        let v = load_or(x + row + cols, mask, f32::NEG_INFINITY);
        let e = exp(v - max(v, 0));
        store(o + row + cols, e / sum(e, 0), mask);
    })
    .unwrap()
}

#[test]
fn softmax_rows() {
    for (block, warps) in [(1024, 4), (128, 1), (4096, 8), (32, 4)] {
        let c = check(&row_softmax(block, warps));
        let layout = c[0].stage("layout").unwrap();
        assert!(!layout.contains("convert"), "softmax needs no layout conversion:\n{layout}");
    }
}

/// RMSNorm over a [ROWS, N] tile: y = x * rsqrt(mean(x²) + eps) * w.
fn rmsnorm(rows: usize, n: usize, warps: u32) -> Kernel {
    trace("rmsnorm", vec![ptr("x", Elem::F32), ptr("w", Elem::F32), ptr("y", Elem::F32), int("stride", 16)], vec![("ROWS".into(), rows as i64), ("N".into(), n as i64)], warps, |a| {
        let (x, w, y) = (Tile::<Ptr<f32>>::from_value(a[0]), Tile::<Ptr<f32>>::from_value(a[1]), Tile::<Ptr<f32>>::from_value(a[2]));
        let stride = Tile::<i32>::from_value(a[3]);
        let r = program_id(0) * rows + arange(rows);
        let c = arange(n);
        let offs = (r * stride).expand_dims(1) + c.expand_dims(0);
        let xv = load(x + offs, true);
        let ms = sum(xv * xv, 1) / (n as f32);
        let inv = rsqrt(ms + 1e-6f32);
        let wv = load(w + c, true);
        store(y + offs, xv * inv.expand_dims(1) * wv.expand_dims(0), true);
    })
    .unwrap()
}

#[test]
fn rmsnorm_2d() {
    for (rows, n, warps) in [(4, 256, 4), (16, 64, 4), (2, 1024, 8), (8, 32, 1)] {
        let c = check(&rmsnorm(rows, n, warps));
        let layout = c[0].stage("layout").unwrap();
        assert!(!layout.contains("convert"), "rmsnorm needs no layout conversion:\n{layout}");
        assert!(c[0].ptx.contains("shfl.sync.bfly"));
    }
}

/// `sum(x * q[None, :], 1)` and the outer product `v[:, None] * k[None, :]`.
#[test]
fn matvec_and_outer_product() {
    let k = trace("matvec", vec![ptr("x", Elem::F32), ptr("q", Elem::F32), ptr("v", Elem::F32), ptr("out", Elem::F32), ptr("outer", Elem::F32)], vec![], 4, |a| {
        let t = |i: usize| Tile::<Ptr<f32>>::from_value(a[i]);
        let (r, c) = (arange(32), arange(64));
        let offs = (r * 64).expand_dims(1) + c.expand_dims(0);
        let xv = load(t(0) + offs, true);
        let qv = load(t(1) + c, true);
        store(t(3) + r, sum(xv * qv.expand_dims(0), 1), true);
        let vv = load(t(2) + r, true);
        store(t(4) + offs, vv.expand_dims(1) * qv.expand_dims(0), true);
    })
    .unwrap();
    let c = check(&k);
    println!("{}", c[0].stage("layout").unwrap());
}

fn scan_kernel(axis: usize, prod: bool, rows: usize, cols: usize, warps: u32) -> Kernel {
    let name = if prod { "cumprod" } else { "cumsum" };
    trace(name, vec![ptr("x", Elem::F32), ptr("y", Elem::F32), ptr("xi", Elem::I32), ptr("yi", Elem::I32)], vec![("AXIS".into(), axis as i64), ("R".into(), rows as i64), ("C".into(), cols as i64)], warps, |a| {
        let offs = (arange(rows) * cols).expand_dims(1) + arange(cols).expand_dims(0);
        let x = load(Tile::<Ptr<f32>>::from_value(a[0]) + offs, true);
        let xi = load(Tile::<Ptr<i32>>::from_value(a[2]) + offs, true);
        let (y, yi) = if prod { (cumprod(x, axis), cumprod(xi, axis)) } else { (cumsum(x, axis), cumsum(xi, axis)) };
        store(Tile::<Ptr<f32>>::from_value(a[1]) + offs, y, true);
        store(Tile::<Ptr<i32>>::from_value(a[3]) + offs, yi, true);
    })
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
    let k = trace("cumsum1d", vec![ptr("x", Elem::F32), ptr("y", Elem::F32)], vec![], 4, |a| {
        let c = arange(2048);
        store(Tile::<Ptr<f32>>::from_value(a[1]) + c, cumsum(load(Tile::<Ptr<f32>>::from_value(a[0]) + c, true), 0), true);
    })
    .unwrap();
    check(&k);
}

fn matmul(bm: usize, bn: usize, bk: usize, warps: u32, half_inputs: bool) -> Kernel {
    let e = if half_inputs { Elem::F16 } else { Elem::F32 };
    trace("matmul", vec![ptr("a", e), ptr("b", e), ptr("c", Elem::F32), int("M", 16), int("N", 16), int("K", 16)], vec![("BM".into(), bm as i64), ("BN".into(), bn as i64), ("BK".into(), bk as i64)], warps, |p| {
        let (m, n, kk) = (Tile::<i32>::from_value(p[3]), Tile::<i32>::from_value(p[4]), Tile::<i32>::from_value(p[5]));
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
    })
    .unwrap()
}

#[test]
fn matmul_dot_in_loop() {
    for (bm, bn, bk, w, h) in [(64, 64, 32, 4, false), (32, 32, 16, 4, true), (64, 64, 16, 8, true), (16, 16, 8, 1, false)] {
        let c = check(&matmul(bm, bn, bk, w, h));
        assert!(c[0].ptx.contains("fma.rn.f32"));
    }
}
