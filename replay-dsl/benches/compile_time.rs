//! Compile-time benchmark: trace + passes + PTX (no ptxas, no driver) for representative kernel
//! configurations, for both targets.
//!
//! `cargo bench -p replay-dsl --bench compile_time` prints a table (median and min over
//! `RUNS` runs after `WARMUP` warm-up runs) and writes it as JSON to
//! `bench/results/compile_time.json` (relative to the workspace root). The goal is < 5 ms per
//! configuration. Pass a substring as the first argument to run only matching kernels.
//!
//! Kernels are traced with `front::builder::trace` directly (not `#[kernel]`).

use half::f16;
use replay_dsl::front::builder::trace;
use replay_dsl::front::tile::Tile;
use replay_dsl::ir::{CmpOp, Kernel, Param};
use replay_dsl::prelude::*;
use replay_dsl::{compile, CompileError, DType, Elem, Target};
use std::fmt::Write as _;
use std::hint::black_box;
use std::time::{Duration, Instant};

const WARMUP: usize = 5;
const RUNS: usize = 60;

fn ptr(name: &str, e: Elem) -> Param {
    Param {
        name: name.into(),
        dtype: DType::Ptr(e),
        divisibility: 16,
    }
}

fn val(name: &str, e: Elem) -> Param {
    Param {
        name: name.into(),
        dtype: DType::Val(e),
        divisibility: 1,
    }
}

fn cx(pairs: &[(&str, usize)]) -> Vec<(String, i64)> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v as i64)).collect()
}

fn vector_add(block: usize, warps: u32) -> Result<Kernel, CompileError> {
    let params = vec![
        ptr("x", Elem::F32),
        ptr("y", Elem::F32),
        ptr("out", Elem::F32),
        val("n", Elem::I32),
    ];
    trace("vector_add", params, cx(&[("BLOCK", block)]), warps, |a| {
        let (x, y, out) = (
            Tile::<Ptr<f32>>::from_value(a[0]),
            Tile::<Ptr<f32>>::from_value(a[1]),
            Tile::<Ptr<f32>>::from_value(a[2]),
        );
        let n = Tile::<i32>::from_value(a[3]);
        let offs = program_id(0) * block + arange(block);
        let mask = offs.compare(CmpOp::Lt, n);
        store(out + offs, load(x + offs, mask) + load(y + offs, mask), mask);
    })
}

fn softmax(block: usize, warps: u32) -> Result<Kernel, CompileError> {
    let params = vec![
        ptr("x", Elem::F32),
        ptr("out", Elem::F32),
        val("stride", Elem::I32),
        val("n", Elem::I32),
    ];
    trace("softmax", params, cx(&[("BLOCK", block)]), warps, |a| {
        let (x, out) = (Tile::<Ptr<f32>>::from_value(a[0]), Tile::<Ptr<f32>>::from_value(a[1]));
        let (stride, n) = (Tile::<i32>::from_value(a[2]), Tile::<i32>::from_value(a[3]));
        let row = program_id(0) * stride;
        let cols = arange(block);
        let mask = cols.compare(CmpOp::Lt, n);
        let v = load_or(x + row + cols, mask, f32::NEG_INFINITY);
        let e = exp(v - max(v, 0));
        store(out + row + cols, e / sum(e, 0), mask);
    })
}

fn rmsnorm(rows: usize, block: usize, warps: u32) -> Result<Kernel, CompileError> {
    let params = vec![
        ptr("x", Elem::F16),
        ptr("w", Elem::F16),
        ptr("out", Elem::F16),
        val("m", Elem::I32),
        val("n", Elem::I32),
        val("eps", Elem::F32),
    ];
    trace("rmsnorm", params, cx(&[("ROWS", rows), ("BLOCK", block)]), warps, |a| {
        let (x, w, out) = (
            Tile::<Ptr<f16>>::from_value(a[0]),
            Tile::<Ptr<f16>>::from_value(a[1]),
            Tile::<Ptr<f16>>::from_value(a[2]),
        );
        let (m, n) = (Tile::<i32>::from_value(a[3]), Tile::<i32>::from_value(a[4]));
        let eps = Tile::<f32>::from_value(a[5]);
        let r = (program_id(0) * rows + arange(rows)).expand_dims(1);
        let c = arange(block);
        let cmask = c.compare(CmpOp::Lt, n);
        let c2 = c.expand_dims(0);
        let mask = r.compare(CmpOp::Lt, m).and(c2.compare(CmpOp::Lt, n));
        let offs = r * n + c2;
        let v = load(x + offs, mask).cast::<f32>();
        let ms = sum(v * v, 1) / n.cast::<f32>();
        let inv = rsqrt(ms + eps).expand_dims(1);
        let wt = load(w + c, cmask).cast::<f32>();
        store(out + offs, (v * inv * wt).cast::<f16>(), mask);
    })
}

fn row_scan(block: usize, warps: u32, prod: bool) -> Result<Kernel, CompileError> {
    let params = vec![ptr("x", Elem::F32), ptr("out", Elem::F32), val("n", Elem::I32)];
    let name = if prod { "row_cumprod" } else { "row_cumsum" };
    trace(name, params, cx(&[("BLOCK", block)]), warps, |a| {
        let (x, out) = (Tile::<Ptr<f32>>::from_value(a[0]), Tile::<Ptr<f32>>::from_value(a[1]));
        let n = Tile::<i32>::from_value(a[2]);
        let row = program_id(0) * n;
        let cols = arange(block);
        let mask = cols.compare(CmpOp::Lt, n);
        let v = load_or(x + row + cols, mask, if prod { 1.0 } else { 0.0 });
        let s = if prod { cumprod(v, 0) } else { cumsum(v, 0) };
        store(out + row + cols, s, mask);
    })
}

fn matmul(bm: usize, bn: usize, bk: usize, warps: u32) -> Result<Kernel, CompileError> {
    let params = vec![
        ptr("a", Elem::F16),
        ptr("b", Elem::F16),
        ptr("c", Elem::F32),
        val("M", Elem::I32),
        val("N", Elem::I32),
        val("K", Elem::I32),
    ];
    trace(
        "matmul",
        params,
        cx(&[("BM", bm), ("BN", bn), ("BK", bk)]),
        warps,
        |p| {
            let (a, b) = (Tile::<Ptr<f16>>::from_value(p[0]), Tile::<Ptr<f16>>::from_value(p[1]));
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
                let ta = load(
                    a + (rm * k + ka),
                    rm.compare(CmpOp::Lt, m).and(ka.compare(CmpOp::Lt, k)),
                );
                let tb = load(
                    b + (kb * n + rn),
                    kb.compare(CmpOp::Lt, k).and(rn.compare(CmpOp::Lt, n)),
                );
                dot_acc(ta, tb, acc)
            });
            store(
                c + (rm * n + rn),
                acc,
                rm.compare(CmpOp::Lt, m).and(rn.compare(CmpOp::Lt, n)),
            );
        },
    )
}

fn histogram(block: usize, bins: usize, warps: u32) -> Result<Kernel, CompileError> {
    let params = vec![ptr("x", Elem::I32), ptr("hist", Elem::I32), val("n", Elem::I32)];
    trace(
        "histogram",
        params,
        cx(&[("BLOCK", block), ("BINS", bins)]),
        warps,
        |a| {
            let (x, hist) = (Tile::<Ptr<i32>>::from_value(a[0]), Tile::<Ptr<i32>>::from_value(a[1]));
            let n = Tile::<i32>::from_value(a[2]);
            let offs = program_id(0) * block + arange(block);
            let mask = offs.compare(CmpOp::Lt, n);
            let v = load(x + offs, mask);
            let bin = v & (bins as i32 - 1);
            atomic_add(hist + bin, 1, mask);
        },
    )
}

pub struct Config {
    pub kernel: &'static str,
    pub config: String,
    pub build: Box<dyn Fn() -> Result<Kernel, CompileError>>,
}

pub fn configs() -> Vec<Config> {
    let mut v: Vec<Config> = vec![];
    let mut add = |kernel: &'static str, config: String, build: Box<dyn Fn() -> Result<Kernel, CompileError>>| {
        v.push(Config { kernel, config, build })
    };
    add("vector_add", "BLOCK=1024 w4".into(), Box::new(|| vector_add(1024, 4)));
    for block in [1024, 4096] {
        for w in [4, 8] {
            add(
                "softmax",
                format!("BLOCK={block} w{w}"),
                Box::new(move || softmax(block, w)),
            );
        }
    }
    add(
        "rmsnorm",
        "ROWS=4 BLOCK=1024 f16 w4".into(),
        Box::new(|| rmsnorm(4, 1024, 4)),
    );
    add(
        "row_cumsum",
        "BLOCK=1024 w4".into(),
        Box::new(|| row_scan(1024, 4, false)),
    );
    add(
        "row_cumprod",
        "BLOCK=1024 w4".into(),
        Box::new(|| row_scan(1024, 4, true)),
    );
    add(
        "matmul",
        "64x64x32 f16 K-loop w4".into(),
        Box::new(|| matmul(64, 64, 32, 4)),
    );
    add(
        "histogram",
        "BLOCK=1024 BINS=256 w4".into(),
        Box::new(|| histogram(1024, 256, 4)),
    );
    v
}

struct Row {
    kernel: &'static str,
    config: String,
    target: Target,
    median_ms: f64,
    min_ms: f64,
    trace_ms: f64,
    ptx_bytes: usize,
    error: Option<String>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One run: (total, trace part, PTX bytes).
fn once(c: &Config, target: Target) -> Result<(Duration, Duration, usize), String> {
    let t0 = Instant::now();
    let kernel = (c.build)().map_err(|e| e.to_string())?;
    let t1 = Instant::now();
    let compiled = compile(black_box(&kernel), target).map_err(|e| e.to_string())?;
    let t2 = Instant::now();
    Ok((t2 - t0, t1 - t0, black_box(compiled).ptx.len()))
}

fn measure(c: &Config, target: Target) -> Row {
    let mut row = Row {
        kernel: c.kernel,
        config: c.config.clone(),
        target,
        median_ms: f64::NAN,
        min_ms: f64::NAN,
        trace_ms: f64::NAN,
        ptx_bytes: 0,
        error: None,
    };
    for _ in 0..WARMUP {
        if let Err(e) = once(c, target) {
            row.error = Some(e);
            return row;
        }
    }
    let (mut total, mut traced) = (Vec::with_capacity(RUNS), Vec::with_capacity(RUNS));
    for _ in 0..RUNS {
        match once(c, target) {
            Ok((t, tr, bytes)) => {
                total.push(ms(t));
                traced.push(ms(tr));
                row.ptx_bytes = bytes;
            }
            Err(e) => {
                row.error = Some(e);
                return row;
            }
        }
    }
    row.min_ms = total.iter().cloned().fold(f64::INFINITY, f64::min);
    row.median_ms = median(total);
    row.trace_ms = median(traced);
    row
}

fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn json_num(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.4}")
    } else {
        "null".into()
    }
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument filters kernels by substring.
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    // Under `cargo test` (no `--bench`) the bench runs as a smoke test and records nothing.
    let benching = std::env::args().any(|a| a == "--bench");
    let mut rows = vec![];
    for c in configs() {
        if filter.as_deref().is_some_and(|f| !c.kernel.contains(f)) {
            continue;
        }
        for target in Target::ALL {
            rows.push(measure(&c, target));
        }
    }

    println!("compile time: trace + passes + PTX, median / min over {RUNS} runs after {WARMUP} warm-up runs");
    println!(
        "{:<12} {:<26} {:<8} {:>10} {:>8} {:>9} {:>10}",
        "kernel", "config", "target", "median ms", "min ms", "trace ms", "PTX bytes"
    );
    let mut over = 0;
    for r in &rows {
        match &r.error {
            None => {
                if r.median_ms >= 5.0 {
                    over += 1;
                }
                println!(
                    "{:<12} {:<26} {:<8} {:>10.3} {:>8.3} {:>9.3} {:>10}{}",
                    r.kernel,
                    r.config,
                    r.target.arch(),
                    r.median_ms,
                    r.min_ms,
                    r.trace_ms,
                    r.ptx_bytes,
                    if r.median_ms >= 5.0 {
                        "  (over the 5 ms goal)"
                    } else {
                        ""
                    }
                );
            }
            Some(e) => {
                over += 1;
                println!(
                    "{:<12} {:<26} {:<8} error: {}",
                    r.kernel,
                    r.config,
                    r.target.arch(),
                    e.lines().next().unwrap_or("")
                );
            }
        }
    }
    println!(
        "{} of {} configurations within the 5 ms goal",
        rows.len() - over,
        rows.len()
    );

    let mut json = String::from("{\n");
    let _ = writeln!(
        json,
        "  \"what\": \"trace + passes + PTX (no ptxas, no driver), milliseconds\","
    );
    let _ = writeln!(
        json,
        "  \"runs\": {RUNS},\n  \"warmup\": {WARMUP},\n  \"goal_ms\": 5.0,\n  \"results\": ["
    );
    for (i, r) in rows.iter().enumerate() {
        let _ = write!(
            json,
            "    {{\"kernel\": {}, \"config\": {}, \"target\": {}, \"median_ms\": {}, \"min_ms\": {}, \"trace_ms\": {}, \"ptx_bytes\": {}, \"error\": {}}}",
            json_str(r.kernel),
            json_str(&r.config),
            json_str(r.target.arch()),
            json_num(r.median_ms),
            json_num(r.min_ms),
            json_num(r.trace_ms),
            r.ptx_bytes,
            r.error.as_deref().map_or("null".into(), json_str)
        );
        json.push_str(if i + 1 < rows.len() { ",\n" } else { "\n" });
    }
    json.push_str("  ]\n}\n");
    if !benching || filter.is_some() {
        println!("results not recorded (record them with a full `cargo bench` run)");
        return;
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/results");
    let path = dir.join("compile_time.json");
    match std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, json)) {
        Ok(()) => println!("wrote {}", path.canonicalize().unwrap_or(path).display()),
        Err(e) => eprintln!("could not write {}: {e}", path.display()),
    }
}
