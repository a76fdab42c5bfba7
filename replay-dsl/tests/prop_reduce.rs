//! Property tests: random reductions (sum / max / min along a random axis, and over all
//! elements) and scans (cumsum, cumprod on values near ±1; forward or reverse, inclusive or
//! exclusive) of f32 and i32 tiles of random
//! power-of-two shapes (rank 1 to 3), optionally on masked loads (masked lanes read the
//! combining function's identity) and optionally followed by `x - r.expand_dims(axis)` (the
//! softmax pattern: the reduced tile broadcast back).
//!
//! - `interp_matches_reference`: the interpreter (traced IR and IR after the passes) against a
//!   direct CPU evaluation: integers exactly (wrapping), max/min exactly, float sums and products
//!   within `max(1e-5, γ_{n-1})` relative to `Σ|x|` resp. `|Π x|` (γ_k = k·2⁻²⁴/(1−k·2⁻²⁴),
//!   the bound for any combining order).
//! - `compiles_for_both_targets`: `compile` succeeds for sm_90a and sm_100a.
//! - `ptx_assembles`: a few kernels' PTX assembles with ptxas for both targets.
//! - `scan_variants_assemble`: forward / reverse, inclusive / exclusive scans in layouts whose
//!   axis spans registers, lanes and warps match the reference in the interpreter and assemble
//!   with ptxas for both targets.

#[path = "prop_util.rs"]
mod util;

use proptest::prelude::*;
use replay_dsl::front::builder::trace;
use replay_dsl::front::tile::Tile;
use replay_dsl::interp::{run, Arg, Memory};
use replay_dsl::ir::{CmpOp, Kernel, Param, Value};
use replay_dsl::prelude::*;
use replay_dsl::Elem;
use util::*;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Sum,
    Max,
    Min,
    CumSum,
    CumProd,
}

impl Kind {
    fn is_scan(self) -> bool {
        matches!(self, Kind::CumSum | Kind::CumProd)
    }
}

#[derive(Clone, Debug)]
struct Case {
    float: bool,
    shape: Vec<usize>,
    kind: Kind,
    /// `None`: over all elements (reductions only).
    axis: Option<usize>,
    /// Scans only: from the last element to the first.
    reverse: bool,
    /// Scans only: each element's own value left out.
    exclusive: bool,
    /// The load is masked by `local index < lim`, masked lanes reading the identity.
    masked: bool,
    /// Store `x - r.expand_dims(axis)` instead of `r` (reductions along an axis only).
    normalize: bool,
    grid: u32,
    num_warps: u32,
}

fn numel(s: &[usize]) -> usize {
    s.iter().product()
}

const MAX_NUMEL: usize = 4096;

fn case() -> impl Strategy<Value = Case> {
    let shape = prop::collection::vec(0u32..=8, 1..=3).prop_map(|logs| {
        let mut s: Vec<usize> = logs.iter().map(|&l| 1usize << l).collect();
        while numel(&s) > MAX_NUMEL {
            let i = (0..s.len()).max_by_key(|&i| s[i]).unwrap();
            s[i] /= 2;
        }
        s
    });
    (
        any::<bool>(),
        shape,
        prop_oneof![
            Just(Kind::Sum),
            Just(Kind::Max),
            Just(Kind::Min),
            Just(Kind::CumSum),
            Just(Kind::CumProd)
        ],
        any::<prop::sample::Index>(),
        any::<bool>(),
        any::<bool>(),
        1u32..=2,
        prop_oneof![Just(4u32), Just(1), Just(2), Just(8)],
        (any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |(float, shape, kind, axis, masked, normalize, grid, num_warps, (reverse, exclusive))| {
                // Reductions: one of `rank` axes, or all (index `rank`); scans: one of the axes.
                let n_axes = shape.len() + usize::from(!kind.is_scan());
                let a = axis.index(n_axes);
                let axis = (a < shape.len()).then_some(a);
                let normalize = normalize && !kind.is_scan() && axis.is_some();
                Case {
                    float,
                    shape,
                    kind,
                    axis,
                    reverse: reverse && kind.is_scan(),
                    exclusive: exclusive && kind.is_scan(),
                    masked,
                    normalize,
                    grid,
                    num_warps,
                }
            },
        )
}

// ---------------------------------------------------------------------------------------------
// Tracing
// ---------------------------------------------------------------------------------------------

/// Row-major offsets of a tile of `shape` (rank ≥ 1).
fn local_offsets(shape: &[usize]) -> Tile<i32> {
    let r = shape.len();
    let mut offs: Option<Tile<i32>> = None;
    for d in 0..r {
        let stride: usize = shape[d + 1..].iter().product();
        let mut t = arange(shape[d]);
        for _ in 0..d {
            t = t.expand_dims(0);
        }
        for _ in d + 1..r {
            t = t.expand_dims(t.rank());
        }
        let t = t * stride;
        offs = Some(match offs {
            None => t,
            Some(o) => o + t,
        });
    }
    offs.expect("rank ≥ 1")
}

fn identity_f(kind: Kind) -> f32 {
    match kind {
        Kind::Sum | Kind::CumSum => 0.0,
        Kind::CumProd => 1.0,
        Kind::Max => f32::NEG_INFINITY,
        Kind::Min => f32::INFINITY,
    }
}

fn identity_i(kind: Kind) -> i32 {
    match kind {
        Kind::Sum | Kind::CumSum => 0,
        Kind::CumProd => 1,
        Kind::Max => i32::MIN,
        Kind::Min => i32::MAX,
    }
}

trait El: Num {
    fn identity(kind: Kind) -> Self;
}
impl El for f32 {
    fn identity(kind: Kind) -> f32 {
        identity_f(kind)
    }
}
impl El for i32 {
    fn identity(kind: Kind) -> i32 {
        identity_i(kind)
    }
}

/// The result's shape (per program).
fn result_shape(c: &Case) -> Vec<usize> {
    match (c.kind.is_scan() || c.normalize, c.axis) {
        (true, _) => c.shape.clone(),
        (false, Some(a)) => {
            let mut s = c.shape.clone();
            s.remove(a);
            s
        }
        (false, None) => vec![],
    }
}

fn body<T: El>(c: &Case, a: &[Value]) {
    let x = Tile::<Ptr<T>>::from_value(a[0]);
    let out = Tile::<Ptr<T>>::from_value(a[1]);
    let local = local_offsets(&c.shape);
    let p = x + (program_id(0) * numel(&c.shape) + local);
    let v: Tile<T> = if c.masked {
        let lim = Tile::<i32>::from_value(a[2]);
        load_or(p, local.compare(CmpOp::Lt, lim), constant(T::identity(c.kind)))
    } else {
        load(p, true)
    };
    let r = match (c.kind, c.axis) {
        (Kind::Sum, Some(ax)) => sum(v, ax),
        (Kind::Max, Some(ax)) => max(v, ax),
        (Kind::Min, Some(ax)) => min(v, ax),
        (Kind::Sum, None) => sum_all(v),
        (Kind::Max, None) => max_all(v),
        (Kind::Min, None) => min_all(v),
        (Kind::CumSum, Some(ax)) => match (c.reverse, c.exclusive) {
            (false, false) => cumsum(v, ax),
            (false, true) => cumsum_exclusive(v, ax),
            (true, false) => cumsum_reverse(v, ax),
            (true, true) => cumsum_reverse_exclusive(v, ax),
        },
        (Kind::CumProd, Some(ax)) => match (c.reverse, c.exclusive) {
            (false, false) => cumprod(v, ax),
            (false, true) => cumprod_exclusive(v, ax),
            (true, false) => cumprod_reverse(v, ax),
            (true, true) => cumprod_reverse_exclusive(v, ax),
        },
        _ => unreachable!(),
    };
    let r = if c.normalize {
        v - r.expand_dims(c.axis.unwrap())
    } else {
        r
    };
    let rs = result_shape(c);
    let base = out + program_id(0) * numel(&rs);
    if rs.is_empty() {
        store(base, r, true);
    } else {
        store(base + local_offsets(&rs), r, true);
    }
}

fn trace_case(c: &Case) -> Kernel {
    let e = if c.float { Elem::F32 } else { Elem::I32 };
    let mut params: Vec<Param> = vec![ptr("x", e), ptr("out", e)];
    if c.masked {
        params.push(val("lim", Elem::I32));
    }
    let name = format!("prop_{:?}", c.kind).to_lowercase();
    trace(&name, params, vec![], c.num_warps, |a| {
        if c.float {
            body::<f32>(c, a)
        } else {
            body::<i32>(c, a)
        }
    })
    .unwrap_or_else(|e| panic!("trace failed: {e}\n{c:?}"))
}

// ---------------------------------------------------------------------------------------------
// Reference
// ---------------------------------------------------------------------------------------------

/// γ_k = k·u / (1 − k·u) for f32 (u = 2⁻²⁴), at least 1e-5.
fn gamma(k: usize) -> f64 {
    let ku = k as f64 * 2f64.powi(-24);
    (ku / (1.0 - ku)).max(1e-5)
}

fn strides(shape: &[usize]) -> Vec<usize> {
    (0..shape.len()).map(|d| shape[d + 1..].iter().product()).collect()
}

/// The lanes combined for each output element, in axis order: for a reduction along `axis`
/// the output index maps to a line of the input; over all, every element; for scans the part of
/// the line through the element that the scan combines (before or after it, with or without it).
fn lines(c: &Case) -> Vec<Vec<usize>> {
    let n = numel(&c.shape);
    let st = strides(&c.shape);
    let Some(ax) = c.axis else {
        return vec![(0..n).collect()];
    };
    let len = c.shape[ax];
    let line_of = |flat: usize| -> (usize, usize) {
        // (start of the line through `flat`, position of `flat` on it)
        let pos = flat / st[ax] % len;
        (flat - pos * st[ax], pos)
    };
    if c.kind.is_scan() || c.normalize {
        (0..n)
            .map(|flat| {
                let (start, pos) = line_of(flat);
                let range = match (c.kind.is_scan(), c.reverse, c.exclusive) {
                    (false, _, _) => 0..len,
                    (true, false, false) => 0..pos + 1,
                    (true, false, true) => 0..pos,
                    (true, true, false) => pos..len,
                    (true, true, true) => pos + 1..len,
                };
                range.map(|k| start + k * st[ax]).collect()
            })
            .collect()
    } else {
        // Output elements in row-major order of the shape without `ax`.
        (0..n)
            .filter(|&flat| line_of(flat).1 == 0)
            .map(|start| (0..len).map(|k| start + k * st[ax]).collect())
            .collect()
    }
}

enum Want {
    /// Value, allowed absolute error.
    F(f64, f64),
    I(i32),
}

fn reference(c: &Case, xf: &[f32], xi: &[i32], lim: i32) -> Vec<Want> {
    let n = numel(&c.shape);
    let ls = lines(c);
    let mut out = vec![];
    for pid in 0..c.grid as usize {
        let masked = |k: usize| c.masked && k as i64 >= lim as i64;
        for (o, line) in ls.iter().enumerate() {
            if c.float {
                let get = |k: usize| {
                    if masked(k) {
                        identity_f(c.kind) as f64
                    } else {
                        xf[pid * n + k] as f64
                    }
                };
                let vals: Vec<f64> = line.iter().map(|&k| get(k)).collect();
                let m = vals.len().saturating_sub(1);
                let (w, err) = match c.kind {
                    Kind::Sum | Kind::CumSum => {
                        let s: f64 = vals.iter().sum();
                        (s, gamma(m) * vals.iter().map(|v| v.abs()).sum::<f64>())
                    }
                    Kind::CumProd => {
                        let p: f64 = vals.iter().product();
                        (p, gamma(m) * p.abs())
                    }
                    Kind::Max => (vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max), 0.0),
                    Kind::Min => (vals.iter().cloned().fold(f64::INFINITY, f64::min), 0.0),
                };
                out.push(if c.normalize {
                    let x = get(o);
                    let d = x - w;
                    Want::F(d, err + 1e-5 * d.abs())
                } else {
                    Want::F(w, err)
                });
            } else {
                let get = |k: usize| if masked(k) { identity_i(c.kind) } else { xi[pid * n + k] };
                let it = line.iter().map(|&k| get(k));
                let w = match c.kind {
                    Kind::Sum | Kind::CumSum => it.fold(0i32, i32::wrapping_add),
                    Kind::CumProd => it.fold(1i32, i32::wrapping_mul),
                    Kind::Max => it.max().unwrap(),
                    Kind::Min => it.min().unwrap(),
                };
                out.push(Want::I(if c.normalize { get(o).wrapping_sub(w) } else { w }));
            }
        }
    }
    out
}

struct Data {
    xf: Vec<f32>,
    xi: Vec<i32>,
    lim: i32,
}

fn make_data(c: &Case, seed: u64) -> Data {
    let mut rng = Rand::new(seed);
    let total = c.grid as usize * numel(&c.shape);
    let xf = (0..total)
        .map(|_| match c.kind {
            // Near ±1, so that products of up to 256 factors stay in range.
            Kind::CumProd => {
                let m = rng.f32(0.9, 1.1);
                if rng.u32() & 1 == 1 {
                    m
                } else {
                    -m
                }
            }
            // Some repeated values, so that ties in max/min happen.
            _ if rng.int(0, 8) == 0 => rng.int(-4, 4) as f32,
            _ => rng.f32(-4.0, 4.0),
        })
        .collect();
    let xi = (0..total)
        .map(|_| match c.kind {
            Kind::Max | Kind::Min if rng.int(0, 2) == 0 => rng.int(-50, 50) as i32,
            _ => rng.i32_any(),
        })
        .collect();
    let n = numel(&c.shape) as i64;
    let lim = rng.int(0, n + 2) as i32;
    Data { xf, xi, lim }
}

fn interpret(kernel: &Kernel, c: &Case, d: &Data) -> Result<(Vec<f32>, Vec<i32>), String> {
    let out_len = c.grid as usize * numel(&result_shape(c));
    let mut mem = Memory::new();
    let (x, out) = if c.float {
        (mem.alloc(&d.xf), mem.alloc(&vec![f32::NAN; out_len]))
    } else {
        (mem.alloc(&d.xi), mem.alloc(&vec![-12345i32; out_len]))
    };
    let mut args = vec![Arg::ptr(x), Arg::ptr(out)];
    if c.masked {
        args.push(Arg::I32(d.lim));
    }
    run(kernel, [c.grid, 1, 1], &args, &mut mem).map_err(|e| format!("interpreter error: {e}\n{c:?}"))?;
    Ok(if c.float {
        (mem.read(out), vec![])
    } else {
        (vec![], mem.read(out))
    })
}

fn compare(what: &str, c: &Case, d: &Data, got: &(Vec<f32>, Vec<i32>), want: &[Want]) -> Result<(), String> {
    for (i, w) in want.iter().enumerate() {
        let bad = match *w {
            Want::F(w, err) => (!close(got.0[i], w, 1.0, err)).then(|| format!("got {}, want {w} ± {err:e}", got.0[i])),
            Want::I(w) => (got.1[i] != w).then(|| format!("got {}, want {w}", got.1[i])),
        };
        if let Some(msg) = bad {
            return Err(format!("{what}: element {i}: {msg}\n{c:?}, lim {}", d.lim));
        }
    }
    Ok(())
}

fn check_interp(c: &Case, seed: u64) -> Result<(), String> {
    let kernel = trace_case(c);
    let d = make_data(c, seed);
    let want = reference(c, &d.xf, &d.xi, d.lim);
    let got = interpret(&kernel, c, &d)?;
    compare("interpreter (traced IR)", c, &d, &got, &want).map_err(|e| format!("{e}\n{kernel}"))?;
    let optimized = replay_dsl::passes::run_all(kernel.clone(), &mut vec![])
        .map_err(|e| format!("passes failed: {e}\n{kernel}"))?;
    let got = interpret(&optimized, c, &d)?;
    compare("interpreter (IR after passes)", c, &d, &got, &want).map_err(|e| format!("{e}\n{optimized}"))
}

proptest! {
    #![proptest_config(config(512))]

    /// (a) interpreter == direct CPU evaluation, before and after the passes.
    #[test]
    fn interp_matches_reference(c in case(), seed in any::<u64>()) {
        check_interp(&c, seed).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// (b) `compile` succeeds for sm_90a and sm_100a.
    #[test]
    fn compiles_for_both_targets(c in case()) {
        let kernel = trace_case(&c);
        let ptx = compile_both(&kernel).map_err(|e| TestCaseError::fail(format!("{e}\n{c:?}")))?;
        for (t, text) in ptx {
            prop_assert!(text.contains(t.arch()), "PTX for {} does not name its target", t);
        }
    }
}

proptest! {
    #![proptest_config(config(8))]

    /// (c) the PTX of a few random kernels assembles with ptxas for sm_90a and sm_100a.
    #[test]
    fn ptx_assembles(c in case()) {
        let kernel = trace_case(&c);
        let ptx = compile_both(&kernel).map_err(|e| TestCaseError::fail(format!("{e}\n{c:?}")))?;
        for (t, text) in ptx {
            assemble(&kernel.name, t, &text).map_err(|e| TestCaseError::fail(format!("{e}\n{c:?}")))?;
        }
    }
}

/// Every scan direction, on shapes and warp counts that put the scanned axis in registers only,
/// across lanes, and across warps.
#[test]
fn scan_variants_assemble() {
    let mut n = 0;
    for (shape, axis, num_warps) in [
        (vec![4], 0, 1),
        (vec![256], 0, 4),
        (vec![1024], 0, 8),
        (vec![64, 32], 0, 4),
        (vec![64, 32], 1, 4),
        (vec![8, 4, 64], 2, 2),
        (vec![8, 4, 64], 0, 8),
    ] {
        for (kind, float) in [(Kind::CumSum, true), (Kind::CumProd, true), (Kind::CumSum, false)] {
            for (reverse, exclusive) in [(false, true), (true, false), (true, true)] {
                let c = Case {
                    float,
                    shape: shape.clone(),
                    kind,
                    axis: Some(axis),
                    reverse,
                    exclusive,
                    masked: n % 2 == 0,
                    normalize: false,
                    grid: 2,
                    num_warps,
                };
                n += 1;
                check_interp(&c, n).unwrap_or_else(|e| panic!("{e}"));
                let kernel = trace_case(&c);
                let ptx = compile_both(&kernel).unwrap_or_else(|e| panic!("{e}\n{c:?}"));
                for (t, text) in ptx {
                    assemble(&kernel.name, t, &text).unwrap_or_else(|e| panic!("{e}\n{c:?}"));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// (d) The GPU against the interpreter
// ---------------------------------------------------------------------------------------------

/// Runs the case on the GPU and in the interpreter with the same inputs and a poisoned (`0xFF`)
/// output. Integers and float max/min must equal the interpreter's exactly; float sums and
/// products must lie within the CPU test's order-independent bound of the exact value (the bound
/// the interpreter is held to, so the two differ by at most twice it). NaN matches NaN only.
fn check_gpu(gpu: &Gpu, c: &Case, seed: u64) -> Result<(), String> {
    let kernel = trace_case(c);
    let d = make_data(c, seed);
    let want = reference(c, &d.xf, &d.xi, d.lim);
    let out_len = c.grid as usize * numel(&result_shape(c));
    let (elem, x) = if c.float {
        (Elem::F32, HArg::buf(&d.xf))
    } else {
        (Elem::I32, HArg::buf(&d.xi))
    };
    let mut args = vec![x, HArg::poisoned(elem, out_len)];
    if c.masked {
        args.push(HArg::I32(d.lim));
    }
    let grid = [c.grid, 1, 1];
    let interp = run_interp(&kernel, grid, &args)
        .map_err(|e| format!("{e}\n{c:?}"))?
        .swap_remove(1);
    let got = gpu
        .run(&kernel, grid, &args)
        .map_err(|e| format!("{e}\n{c:?}\n{kernel}"))?
        .swap_remove(1);
    let (gf, itf, gi, iti) = if c.float {
        (f32s(&got), f32s(&interp), vec![], vec![])
    } else {
        (vec![], vec![], i32s(&got), i32s(&interp))
    };
    let mut bad = vec![];
    for (i, w) in want.iter().enumerate() {
        let msg = match *w {
            Want::F(exact, err) => {
                let (g, it) = (gf[i], itf[i]);
                let exact_only = matches!(c.kind, Kind::Max | Kind::Min) && !c.normalize;
                let ok = if exact_only {
                    g.to_bits() == it.to_bits() || (g.is_nan() && it.is_nan())
                } else {
                    close(g, exact, 1.0, err)
                };
                (!ok).then(|| format!("GPU {g:?}, interpreter {it:?}, exact {exact} ± {err:e}"))
            }
            Want::I(_) => {
                let (g, it) = (gi[i], iti[i]);
                (g != it).then(|| format!("GPU {g}, interpreter {it}"))
            }
        };
        if let Some(m) = msg {
            bad.push(format!("  element {i}: {m}"));
        }
    }
    if !bad.is_empty() {
        let n = bad.len();
        bad.truncate(8);
        return Err(format!(
            "{} differs from the interpreter in {n} of {out_len} elements:\n{}\n{c:?}, lim {}\n--- kernel ---\n{kernel}\n--- arguments ---\n{}",
            gpu.name(),
            bad.join("\n"),
            d.lim,
            describe_args(&args, &kernel)
        ));
    }
    Ok(())
}

/// (d) On a GPU: a few hundred generated reductions and scans, compiled for the GPU's target and
/// run on it with fresh random inputs, agree with the interpreter (see [`check_gpu`]). Without a
/// CUDA GPU: prints "skipped: no CUDA GPU" and passes.
#[test]
fn gpu_matches_interpreter() {
    let Some(gpu) = gpu() else { return };
    let count = std::cell::Cell::new(0usize);
    let mut runner = proptest::test_runner::TestRunner::new(config(300));
    let result = runner.run(&(case(), any::<u64>()), |(c, seed)| {
        check_gpu(&gpu, &c, seed).map_err(TestCaseError::fail)?;
        count.set(count.get() + 1);
        Ok(())
    });
    eprintln!("{} kernels agreed on {}", count.get(), gpu.name());
    if let Err(e) = result {
        panic!("{e}");
    }
}
