//! GPU special cases the PTX backend must get right on hardware, independent of the kernel
//! gallery. Each kernel runs on the GPU and in the interpreter on the same inputs with poisoned
//! (`0xFF`) outputs, and every buffer must come back bit-identical (a NaN matching any NaN of the
//! same type), except where the GPU may legitimately choose (the lane order of atomics: checked
//! by invariants; stochastic rounding on sm_100a, where `cvt.rs` uses the bits differently: one
//! of the two neighbours).
//!
//! - `casts_round_to_nearest`: f32 → f16 / bf16 / f8e4m3 / i32, f16 → bf16 / f8e4m3, bf16 → f16,
//!   i32 → f16 / bf16 / f8e4m3 / f32, on random bit patterns, exact ties and their neighbours,
//!   subnormals, overflow thresholds, ±inf and NaN; every `num_warps` from 1 to 16.
//! - `stochastic_casts`: f32 → f16 / bf16 / f8e4m3 with random bits, including the bits right at
//!   each element's threshold; bit-exact against the interpreter on sm_90a (docs/SEMANTICS.md).
//! - `integer_division_remainder_and_shifts`: i32 and u32 `/`, `%` with negative operands,
//!   `i32::MIN / -1`, shifts by negative amounts and amounts ≥ 32.
//! - `negations_in_min_max_chains`: `max(a, max(b, -c))` and the like on i32 extremes (a
//!   ptxas 13.0 fold drops a `neg.s32` inside a three-way min / max).
//! - `atomics_with_duplicate_addresses`: add (i32, f32), max and cas from lanes of several
//!   programs hitting the same addresses (all lanes on one address, 13 addresses, none shared).
//! - `masked_loads_falling_back_to_loads`: `load_or` whose fallback is another load (the
//!   backend selects after the load instead of loading over it), f32, bf16 (packed 16-bit
//!   words) and i32, vector widths 1 to 4 (contiguous rows of 1 to 64 elements), every
//!   `num_warps`, random complementary and overlapping masks.
//! - `runtime_loops_and_branches`: `for` with zero, negative and many trips, nested loops, a tile
//!   carried through a loop, per-program trip counts, runtime `if` (nested, carrying state).
//! - `prefetched_tile_loop`: a loop over `[R, C]` tiles (f32 and bf16) that prefetches the next
//!   tile into L2 (the last iteration's prefetch masked off) before loading and summing this
//!   one: the results of a plain loop, every `num_warps`; the PTX holds `prefetch.global.L2`.
//! - `async_copied_tile_loop`: the same loop double-buffered through shared memory: tile `i + 1`
//!   copied asynchronously into one stage while tile `i` is read from the other (`copy_async`,
//!   `wait_async(1)`, `read`), f32 and bf16, with the last column masked off (zero-filled; narrow
//!   copies) or not, every `num_warps`: the results of a plain loop; the PTX holds `cp.async`,
//!   and tiles of 128 × 128 f32 take dynamic shared memory (an `.extern` array).
//! - `layout_conversions`: `x + x.trans()` on square tiles and `x.trans()` on rectangular ones.
//! - `reductions_on_each_axis`: sum / max / min / cumsum along every axis of 2-D and 3-D tiles
//!   and over all elements, f32 (values exact in any order) and i32; cumsum and cumprod also
//!   exclusive, reverse, and reverse exclusive (products of ±1 and ±2, exact in any order).
//!
//! Without a CUDA GPU every test prints "skipped: no CUDA GPU" and passes.

#[path = "prop_util.rs"]
mod util;

use half::{bf16, f16};
use replay_dsl::front::builder::trace;
use replay_dsl::front::tile::Tile;
use replay_dsl::host::stochastic_round;
use replay_dsl::ir::{CmpOp, Kernel, Param, Value};
use replay_dsl::prelude::*;
use replay_dsl::{DType, Elem, Target};
use replay_runtime::driver::buffer::decode_f64;
use util::*;

/// Every supported `num_warps`.
const WARPS: [u32; 5] = [1, 2, 4, 8, 16];

// ---------------------------------------------------------------------------------------------
// Running one kernel on both engines
// ---------------------------------------------------------------------------------------------

/// One kernel run on the GPU and in the interpreter with the same arguments.
struct Run<'a> {
    what: String,
    kernel: &'a Kernel,
    args: &'a [HArg],
    interp: Vec<Vec<u8>>,
    gpu: Vec<Vec<u8>>,
}

fn run_both<'a>(gpu: &Gpu, what: String, kernel: &'a Kernel, grid: [u32; 3], args: &'a [HArg]) -> Run<'a> {
    let interp = run_interp(kernel, grid, args).unwrap_or_else(|e| panic!("{what}: {e}\n{kernel}"));
    let out = gpu
        .run(kernel, grid, args)
        .unwrap_or_else(|e| panic!("{what} on {}: {e}\n{kernel}", gpu.name()));
    Run {
        what,
        kernel,
        args,
        interp,
        gpu: out,
    }
}

fn elem_of(kernel: &Kernel, i: usize) -> Elem {
    match kernel.params[i].dtype {
        DType::Ptr(e) => e,
        DType::Val(e) => e,
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().rev().map(|x| format!("{x:02x}")).collect()
}

impl Run<'_> {
    /// Fails with the message, the kernel and its arguments (a reproducer).
    fn fail(&self, msg: &str) -> ! {
        panic!(
            "{}: {msg}\n--- kernel ---\n{}\n--- arguments ---\n{}",
            self.what,
            self.kernel,
            describe_args(self.args, self.kernel)
        )
    }

    /// Element `k` of buffer argument `b` as the GPU left it, for messages.
    fn show(&self, out: &[Vec<u8>], b: usize, k: usize) -> String {
        let e = elem_of(self.kernel, b);
        let bytes = &out[b][k * e.bytes()..(k + 1) * e.bytes()];
        format!("{} (0x{})", decode_f64(e, bytes)[0], hex(bytes))
    }

    /// Every buffer argument bit-identical on both engines.
    fn assert_same(&self) {
        let bufs: Vec<usize> = (0..self.args.len())
            .filter(|&i| matches!(self.args[i], HArg::Buf(..)))
            .collect();
        self.assert_same_in(&bufs);
    }

    /// The buffer arguments `bufs` bit-identical on both engines (floats: NaN matches NaN).
    fn assert_same_in(&self, bufs: &[usize]) {
        let (mut n, mut bad) = (0, vec![]);
        for &b in bufs {
            let e = elem_of(self.kernel, b);
            let size = e.bytes();
            let (gv, iv) = (decode_f64(e, &self.gpu[b]), decode_f64(e, &self.interp[b]));
            for k in 0..gv.len() {
                let (gb, ib) = (
                    &self.gpu[b][k * size..(k + 1) * size],
                    &self.interp[b][k * size..(k + 1) * size],
                );
                if gb == ib || (e.is_float() && gv[k].is_nan() && iv[k].is_nan()) {
                    continue;
                }
                n += 1;
                if bad.len() < 12 {
                    // The other buffers' elements at the same index (the inputs, for elementwise kernels).
                    let at_k: Vec<String> = (0..self.args.len())
                        .filter(|&o| {
                            o != b && matches!(&self.args[o], HArg::Buf(eo, bytes) if bytes.len() / eo.bytes() > k)
                        })
                        .map(|o| format!("{} = {}", self.kernel.params[o].name, self.show(&self.interp, o, k)))
                        .collect();
                    bad.push(format!(
                        "  {}[{k}]: GPU {}, interpreter {}   [interpreter at {k}: {}]",
                        self.kernel.params[b].name,
                        self.show(&self.gpu, b, k),
                        self.show(&self.interp, b, k),
                        at_k.join(", ")
                    ));
                }
            }
        }
        if n > 0 {
            self.fail(&format!(
                "{n} elements differ between the GPU and the interpreter:\n{}",
                bad.join("\n")
            ));
        }
    }

    fn gpu_i32(&self, b: usize) -> Vec<i32> {
        i32s(&self.gpu[b])
    }
}

fn ptrs(names: &[(&str, Elem)]) -> Vec<Param> {
    names.iter().map(|&(n, e)| ptr(n, e)).collect()
}

fn ptr_of<T: Scalar>(a: &[Value], i: usize) -> Tile<Ptr<T>> {
    Tile::from_value(a[i])
}

fn scalar<T: Scalar>(a: &[Value], i: usize) -> Tile<T> {
    Tile::from_value(a[i])
}

/// `1 + ceil(n / block)` programs: the last one entirely masked off.
fn grid_for(n: usize, block: usize) -> [u32; 3] {
    [(n.div_ceil(block) + 1) as u32, 1, 1]
}

// ---------------------------------------------------------------------------------------------
// Round-to-nearest casts
// ---------------------------------------------------------------------------------------------

fn next_up(x: f32) -> f32 {
    if x.is_nan() || x == f32::INFINITY {
        return x;
    }
    if x == 0.0 {
        return f32::from_bits(1);
    }
    f32::from_bits(if x > 0.0 { x.to_bits() + 1 } else { x.to_bits() - 1 })
}

fn next_down(x: f32) -> f32 {
    -next_up(-x)
}

/// `x` and its two f32 neighbours.
fn around(out: &mut Vec<f32>, x: f32) {
    out.extend([x, next_down(x), next_up(x)]);
}

/// f32 inputs for the casts: random bit patterns, exact ties of f16 / bf16 / f8e4m3 (the
/// midpoint of two neighbours) with their f32 neighbours, subnormals, overflow thresholds and
/// specials, each also negated.
fn cast_inputs_f32(rng: &mut Rand, n: usize) -> Vec<f32> {
    let mut v = vec![];
    for x in [
        0.0f32,
        1.0,
        65504.0,
        65520.0,
        65536.0,
        1e5,
        448.0,
        464.0,
        480.0,
        1e4,
        f32::MAX,
        f32::MIN_POSITIVE,
    ] {
        around(&mut v, x);
        around(&mut v, -x);
    }
    v.extend([
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        -0.0,
        f32::from_bits(1),
        3e38,
    ]);
    // e4m3: every pair of neighbouring finite values (0x00..=0x7E), both signs.
    for b in 0u8..0x7E {
        let (lo, hi) = (
            float8::F8E4M3::from_bits(b).to_f32(),
            float8::F8E4M3::from_bits(b + 1).to_f32(),
        );
        around(&mut v, (lo + hi) / 2.0);
        around(&mut v, -(lo + hi) / 2.0);
    }
    while v.len() < n {
        match rng.int(0, 5) {
            0 => v.push(f32::from_bits(rng.u32())),
            1 => {
                // an f16 tie: finite f16 bits (subnormals included) and the next value up
                let b = (rng.u32() % 0x7BFF) as u16;
                let (lo, hi) = (f16::from_bits(b).to_f32(), f16::from_bits(b + 1).to_f32());
                let s = if rng.u32() & 1 == 1 { -1.0 } else { 1.0 };
                around(&mut v, s * (lo + hi) / 2.0);
            }
            2 => {
                // a bf16 tie: the low 16 bits exactly 0x8000
                let b = rng.u32() & 0xFFFF_0000;
                if f32::from_bits(b).is_finite() {
                    around(&mut v, f32::from_bits(b | 0x8000));
                }
            }
            3 => v.push(rng.f32(-600.0, 600.0)),
            _ => v.push(rng.f32(-1.0, 1.0) * 2f32.powi(rng.int(-30, 20) as i32)),
        }
    }
    v.truncate(n);
    v
}

/// i32 inputs for the casts: random, ties of f32 (above 2^24), f16, bf16 and f8e4m3 integer
/// grids, overflow of f16 and saturation of f8e4m3.
fn cast_inputs_i32(rng: &mut Rand, n: usize) -> Vec<i32> {
    let mut v = vec![
        0,
        1,
        -1,
        i32::MIN,
        i32::MAX,
        i32::MIN + 1,
        65504,
        65519,
        65520,
        65536,
        70000,
        448,
        464,
        480,
        1 << 30,
    ];
    for base in [
        2049,
        4099,
        257,
        259,
        17,
        19,
        (1 << 24) + 1,
        (1 << 24) + 3,
        (1 << 25) + 2,
        (1 << 25) + 6,
    ] {
        v.extend([base - 1, base, base + 1, -base]);
    }
    // Just off a bf16 tie above 2^24, where a detour through f32 rounds onto the tie (double
    // rounding): 2^k + 2^(k-8) ± 1 must round as the exact integer does.
    for k in 25..31 {
        let tie = (1i32 << k) + (1 << (k - 8));
        v.extend([tie + 1, tie - 1, -(tie + 1), -(tie - 1), tie + 3]);
    }
    while v.len() < n {
        v.push(match rng.int(0, 3) {
            0 => rng.u32() as i32,
            1 => rng.int(-5000, 5000) as i32,
            _ => ((rng.int(1 << 24, 1 << 27) as i32) | 1) * if rng.u32() & 1 == 1 { -1 } else { 1 },
        });
    }
    v.truncate(n);
    v
}

#[test]
fn casts_round_to_nearest() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rand::new(0xca57);
    let n = 4096;
    let (xs, is) = (cast_inputs_f32(&mut rng, n), cast_inputs_i32(&mut rng, n));
    let block = 256usize;
    let outs = [
        ("f32_f16", Elem::F16),
        ("f32_bf16", Elem::BF16),
        ("f32_e4m3", Elem::F8E4M3),
        ("f32_i32", Elem::I32),
        ("f16_bf16", Elem::BF16),
        ("f16_e4m3", Elem::F8E4M3),
        ("bf16_f16", Elem::F16),
        ("i32_f16", Elem::F16),
        ("i32_bf16", Elem::BF16),
        ("i32_e4m3", Elem::F8E4M3),
        ("i32_f32", Elem::F32),
    ];
    for w in WARPS {
        let mut params = ptrs(&[("x", Elem::F32), ("i", Elem::I32)]);
        params.extend(outs.iter().map(|&(name, e)| ptr(name, e)));
        params.push(val("n", Elem::I32));
        let kernel = trace("casts_rn", params, vec![], w, |a| {
            let offs = program_id(0) * block + arange(block);
            let m = offs.compare(CmpOp::Lt, scalar::<i32>(a, 13));
            let x: Tile<f32> = load(ptr_of::<f32>(a, 0) + offs, m);
            let i: Tile<i32> = load(ptr_of::<i32>(a, 1) + offs, m);
            let h = x.cast::<f16>();
            let b = x.cast::<bf16>();
            store(ptr_of::<f16>(a, 2) + offs, h, m);
            store(ptr_of::<bf16>(a, 3) + offs, b, m);
            store(ptr_of::<F8E4M3>(a, 4) + offs, x.cast::<F8E4M3>(), m);
            store(ptr_of::<i32>(a, 5) + offs, x.cast::<i32>(), m);
            store(ptr_of::<bf16>(a, 6) + offs, h.cast::<bf16>(), m);
            store(ptr_of::<F8E4M3>(a, 7) + offs, h.cast::<F8E4M3>(), m);
            store(ptr_of::<f16>(a, 8) + offs, b.cast::<f16>(), m);
            store(ptr_of::<f16>(a, 9) + offs, i.cast::<f16>(), m);
            store(ptr_of::<bf16>(a, 10) + offs, i.cast::<bf16>(), m);
            store(ptr_of::<F8E4M3>(a, 11) + offs, i.cast::<F8E4M3>(), m);
            store(ptr_of::<f32>(a, 12) + offs, i.cast::<f32>(), m);
        })
        .unwrap();
        // The last 3 elements are masked off: they must stay poisoned.
        let live = n - 3;
        let mut args = vec![HArg::buf(&xs), HArg::buf(&is)];
        args.extend(outs.iter().map(|&(_, e)| HArg::poisoned(e, n)));
        args.push(HArg::I32(live as i32));
        run_both(
            &gpu,
            format!("casts, num_warps {w}"),
            &kernel,
            grid_for(live, block),
            &args,
        )
        .assert_same();
    }
}

// ---------------------------------------------------------------------------------------------
// Stochastic casts
// ---------------------------------------------------------------------------------------------

/// The threshold `p` of stochastic rounding for `x` (the result is the value away from zero
/// exactly when `r < p`), found by bisection on the host implementation.
fn threshold(x: f32, to: Elem) -> u64 {
    let away = stochastic_round(x, 0, to);
    let (mut lo, mut hi) = (0u64, 1u64 << 32); // invariant: result(lo) == away or lo == 0; result(hi) != away or hi == 2^32
    if away.is_nan() || stochastic_round(x, u32::MAX, to) == away {
        return 0;
    }
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if stochastic_round(x, mid as u32, to) == away {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

#[test]
fn stochastic_casts() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rand::new(0x5eed);
    let n = 4096;
    let xs: Vec<f32> = (0..n)
        .map(|k| match k % 8 {
            0 => f32::from_bits(rng.u32()),
            1 => rng.f32(-1.0, 1.0) * 2f32.powi(rng.int(-26, -10) as i32), // f16 subnormals, e4m3 underflow
            2 => rng.f32(60000.0, 70000.0) * if k % 16 == 2 { 1.0 } else { -1.0 }, // f16 overflow
            3 => rng.f32(400.0, 500.0),                                    // f8e4m3 saturation
            4 => [0.0, -0.0, 1.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 0.5, 448.0][rng.int(0, 8) as usize],
            _ => rng.f32(-8.0, 8.0),
        })
        .collect();
    let elems = [Elem::F16, Elem::BF16, Elem::F8E4M3];
    let rs: Vec<u32> = xs
        .iter()
        .enumerate()
        .map(|(k, &x)| match k % 5 {
            // right at the threshold of one of the three conversions, or just below it
            0 | 1 => {
                let p = threshold(x, elems[(k / 5) % 3]);
                (if k % 5 == 0 { p } else { p.saturating_sub(1) }).min(u32::MAX as u64) as u32
            }
            2 => [0, 1, u32::MAX, u32::MAX - 1, 1 << 31][rng.int(0, 5) as usize],
            _ => rng.u32(),
        })
        .collect();
    let block = 512usize;
    for w in [1, 4, 16] {
        let params = ptrs(&[
            ("x", Elem::F32),
            ("r", Elem::U32),
            ("f16", Elem::F16),
            ("bf16", Elem::BF16),
            ("e4m3", Elem::F8E4M3),
        ]);
        let kernel = trace(
            "casts_sr",
            [params, vec![val("n", Elem::I32)]].concat(),
            vec![],
            w,
            |a| {
                let offs = program_id(0) * block + arange(block);
                let m = offs.compare(CmpOp::Lt, scalar::<i32>(a, 5));
                let x: Tile<f32> = load(ptr_of::<f32>(a, 0) + offs, m);
                let r: Tile<u32> = load(ptr_of::<u32>(a, 1) + offs, m);
                store(ptr_of::<f16>(a, 2) + offs, x.cast_stochastic::<f16>(r), m);
                store(ptr_of::<bf16>(a, 3) + offs, x.cast_stochastic::<bf16>(r), m);
                store(ptr_of::<F8E4M3>(a, 4) + offs, x.cast_stochastic::<F8E4M3>(r), m);
            },
        )
        .unwrap();
        let live = n - 5;
        let mut args = vec![HArg::buf(&xs), HArg::buf(&rs)];
        args.extend(elems.iter().map(|&e| HArg::poisoned(e, n)));
        args.push(HArg::I32(live as i32));
        let run = run_both(
            &gpu,
            format!("stochastic casts, num_warps {w}"),
            &kernel,
            grid_for(live, block),
            &args,
        );
        if gpu.target() != Some(Target::Sm100) {
            // sm_90a (and the harness self-test): the documented algorithm, bit for bit.
            run.assert_same();
            continue;
        }
        // sm_100a: `cvt.rs` uses the random bits its own way; the result must still be one of
        // the two neighbours of x (or x rounded normally when it is representable or not finite).
        run.assert_same_in(&[0, 1]);
        for (b, &e) in elems.iter().enumerate() {
            let got = decode_f64(e, &run.gpu[2 + b]);
            for k in 0..n {
                let (toward, away) = (stochastic_round(xs[k], u32::MAX, e), stochastic_round(xs[k], 0, e));
                let ok = if k >= live {
                    run.gpu[2 + b][k * e.bytes()..(k + 1) * e.bytes()]
                        .iter()
                        .all(|&x| x == 0xFF)
                } else {
                    got[k] == toward || got[k] == away || (got[k].is_nan() && toward.is_nan())
                };
                if !ok {
                    run.fail(&format!(
                        "{e}[{k}]: x = {:?}, got {}, want {toward} or {away}",
                        xs[k], got[k]
                    ));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Integer division, remainder and shifts
// ---------------------------------------------------------------------------------------------

#[test]
fn integer_division_remainder_and_shifts() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rand::new(0xd1f);
    let n = 4096;
    let interesting = [
        0,
        1,
        -1,
        2,
        -2,
        7,
        -7,
        31,
        32,
        33,
        -31,
        -32,
        i32::MIN,
        i32::MAX,
        i32::MIN + 1,
    ];
    let pick = |rng: &mut Rand| match rng.int(0, 4) {
        0 => interesting[rng.int(0, interesting.len() as i64) as usize],
        1 => rng.int(-100, 100) as i32,
        _ => rng.u32() as i32,
    };
    let mut a: Vec<i32> = (0..n).map(|_| pick(&mut rng)).collect();
    let mut b: Vec<i32> = (0..n)
        .map(|_| pick(&mut rng))
        .map(|x| if x == 0 { -3 } else { x })
        .collect();
    // i32::MIN / -1 and i32::MIN % -1 (wrap: MIN and 0), and every sign combination of 7 and 2.
    a[..6].copy_from_slice(&[i32::MIN, i32::MIN, 7, -7, 7, -7]);
    b[..6].copy_from_slice(&[-1, 1, 2, 2, -2, -2]);
    let s: Vec<i32> = (0..n)
        .map(|k| match k % 4 {
            0 => rng.int(0, 32) as i32,
            1 => rng.int(32, 100) as i32,
            2 => rng.int(-40, 0) as i32,
            _ => [31, 32, 33, 63, 64, -1, i32::MIN, i32::MAX][rng.int(0, 8) as usize],
        })
        .collect();
    let au: Vec<u32> = (0..n).map(|_| pick(&mut rng) as u32).collect();
    let bu: Vec<u32> = (0..n)
        .map(|_| pick(&mut rng) as u32)
        .map(|x| if x == 0 { 5 } else { x })
        .collect();
    let block = 256usize;
    let ins = [
        ("a", Elem::I32),
        ("b", Elem::I32),
        ("s", Elem::I32),
        ("au", Elem::U32),
        ("bu", Elem::U32),
    ];
    let outs = [
        ("div", Elem::I32),
        ("rem", Elem::I32),
        ("shl", Elem::I32),
        ("shr", Elem::I32),
        ("divu", Elem::U32),
        ("remu", Elem::U32),
        ("shlu", Elem::U32),
        ("shru", Elem::U32),
    ];
    for w in [1, 4, 16] {
        let params = [ptrs(&ins), ptrs(&outs), vec![val("n", Elem::I32)]].concat();
        let kernel = trace("int_ops", params, vec![], w, |v| {
            let offs = program_id(0) * block + arange(block);
            let m = offs.compare(CmpOp::Lt, scalar::<i32>(v, 13));
            let a: Tile<i32> = load(ptr_of::<i32>(v, 0) + offs, m);
            // masked-off lanes divide by 1, not by 0
            let b: Tile<i32> = load_or(ptr_of::<i32>(v, 1) + offs, m, constant(1i32));
            let s: Tile<i32> = load(ptr_of::<i32>(v, 2) + offs, m);
            let au: Tile<u32> = load(ptr_of::<u32>(v, 3) + offs, m);
            let bu: Tile<u32> = load_or(ptr_of::<u32>(v, 4) + offs, m, constant(1u32));
            let su = s.cast::<u32>();
            store(ptr_of::<i32>(v, 5) + offs, a / b, m);
            store(ptr_of::<i32>(v, 6) + offs, a % b, m);
            store(ptr_of::<i32>(v, 7) + offs, a << s, m);
            store(ptr_of::<i32>(v, 8) + offs, a >> s, m);
            store(ptr_of::<u32>(v, 9) + offs, au / bu, m);
            store(ptr_of::<u32>(v, 10) + offs, au % bu, m);
            store(ptr_of::<u32>(v, 11) + offs, au << su, m);
            store(ptr_of::<u32>(v, 12) + offs, au >> su, m);
        })
        .unwrap();
        let live = n - 7;
        let mut args = vec![
            HArg::buf(&a),
            HArg::buf(&b),
            HArg::buf(&s),
            HArg::buf(&au),
            HArg::buf(&bu),
        ];
        args.extend(outs.iter().map(|&(_, e)| HArg::poisoned(e, n)));
        args.push(HArg::I32(live as i32));
        run_both(
            &gpu,
            format!("integer ops, num_warps {w}"),
            &kernel,
            grid_for(live, block),
            &args,
        )
        .assert_same();
    }
}

/// Integer negations feeding chains of `max` / `min` (ptxas 13.0 folds `max(a, max(b, -c))` into
/// one three-way instruction and drops the negation unless the backend writes `-c` as
/// `~c + 1`): random i32 with their extremes, every result against the interpreter.
#[test]
fn negations_in_min_max_chains() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rand::for_test("negations_in_min_max_chains");
    let n = 2048;
    let pick = |rng: &mut Rand| match rng.int(0, 4) {
        0 => [0, 1, -1, -3, i32::MIN, i32::MAX, i32::MIN + 1][rng.int(0, 7) as usize],
        1 => rng.int(-100, 100) as i32,
        _ => rng.u32() as i32,
    };
    let inputs: Vec<Vec<i32>> = (0..3).map(|_| (0..n).map(|_| pick(&mut rng)).collect()).collect();
    let block = 256usize;
    let outs = [
        ("max3", Elem::I32),
        ("min3", Elem::I32),
        ("max_or", Elem::I32),
        ("mixed", Elem::I32),
    ];
    for w in [1, 4] {
        let ins = [("a", Elem::I32), ("b", Elem::I32), ("c", Elem::I32)];
        let kernel = trace("neg_minmax", [ptrs(&ins), ptrs(&outs)].concat(), vec![], w, |v| {
            let offs = program_id(0) * block + arange(block);
            let a: Tile<i32> = load(ptr_of::<i32>(v, 0) + offs, true);
            let b: Tile<i32> = load(ptr_of::<i32>(v, 1) + offs, true);
            let c: Tile<i32> = load(ptr_of::<i32>(v, 2) + offs, true);
            store(ptr_of::<i32>(v, 3) + offs, maximum(a, maximum(b, -c)), true);
            store(ptr_of::<i32>(v, 4) + offs, minimum(minimum(-a, b), c), true);
            store(ptr_of::<i32>(v, 5) + offs, maximum(a, maximum(b | 1000, -c)), true);
            store(ptr_of::<i32>(v, 6) + offs, minimum(-a, maximum(-b, c)), true);
        })
        .unwrap();
        let mut args: Vec<HArg> = inputs.iter().map(|x| HArg::buf(x)).collect();
        args.extend(outs.iter().map(|&(_, e)| HArg::poisoned(e, n)));
        let grid = [(n / block) as u32, 1, 1];
        run_both(&gpu, format!("negations, num_warps {w}"), &kernel, grid, &args).assert_same();
    }
}

/// Division and remainder by constants (the backend divides i32 by shifts or a magic multiply,
/// other types with an immediate divisor), every sign of the dividend, against the interpreter.
#[test]
fn integer_division_by_constants() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rand::new(0xc0d);
    let n = 2048;
    let edges = [
        0,
        1,
        -1,
        2,
        -2,
        6,
        -6,
        7,
        -7,
        i32::MIN,
        i32::MIN + 1,
        i32::MAX,
        i32::MAX - 1,
    ];
    let mut a: Vec<i32> = (0..n).map(|_| rng.u32() as i32).collect();
    a[..edges.len()].copy_from_slice(&edges);
    for (k, x) in a.iter_mut().enumerate().skip(edges.len()).take(400) {
        *x = k as i32 - 200;
    }
    let l: Vec<i64> = a.iter().map(|&x| x as i64 * 3_000_000_007).collect();
    let divisors = [1, 2, 3, 7, 12, 16, 20, 59, 64, 641, 1 << 30, i32::MAX, -1, -4, -7];
    let block = 256usize;
    let params = [
        ptrs(&[("a", Elem::I32), ("l", Elem::I64), ("q", Elem::I32), ("r", Elem::I32)]),
        ptrs(&[("ql", Elem::I64), ("rl", Elem::I64)]),
    ]
    .concat();
    let kernel = trace("div_const", params, vec![], 4, |v| {
        let offs = program_id(0) * block + arange(block);
        let a: Tile<i32> = load(ptr_of::<i32>(v, 0) + offs, true);
        let l: Tile<i64> = load(ptr_of::<i64>(v, 1) + offs, true);
        for (j, &d) in divisors.iter().enumerate() {
            let at = offs + (j * n) as i32;
            store(ptr_of::<i32>(v, 2) + at, a / d, true);
            store(ptr_of::<i32>(v, 3) + at, a % d, true);
            store(ptr_of::<i64>(v, 4) + at, l / d as i64, true);
            store(ptr_of::<i64>(v, 5) + at, l % d as i64, true);
        }
    })
    .unwrap();
    let m = n * divisors.len();
    let args = vec![
        HArg::buf(&a),
        HArg::buf(&l),
        HArg::poisoned(Elem::I32, m),
        HArg::poisoned(Elem::I32, m),
        HArg::poisoned(Elem::I64, m),
        HArg::poisoned(Elem::I64, m),
    ];
    let run = run_both(
        &gpu,
        "division by constants".into(),
        &kernel,
        [(n / block) as u32, 1, 1],
        &args,
    );
    run.assert_same();
    // And both equal Rust's (wrapping: MIN / -1 = MIN), so neither engine is wrong alike.
    let q = run.gpu_i32(2);
    let r = run.gpu_i32(3);
    for (j, &d) in divisors.iter().enumerate() {
        for (k, &x) in a.iter().enumerate() {
            assert_eq!(q[j * n + k], x.wrapping_div(d), "{x} / {d}");
            assert_eq!(r[j * n + k], x.wrapping_rem(d), "{x} % {d}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Atomics with duplicate addresses
// ---------------------------------------------------------------------------------------------

#[test]
fn atomics_with_duplicate_addresses() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rand::new(0xa70);
    let (block, programs) = (256usize, 4usize);
    let n = block * programs;
    let buckets = 1024usize;
    // Positive addends (so the old values of one address increase strictly in the GPU's order),
    // f32 addends that are small integers (sums exact in any order), max operands of any sign.
    let add: Vec<i32> = (0..n).map(|_| rng.int(1, 1000) as i32).collect();
    let fadd: Vec<f32> = (0..n).map(|_| rng.int(-64, 64) as f32).collect();
    let maxv: Vec<i32> = (0..n).map(|_| rng.i32_any()).collect();
    let init_add: Vec<i32> = (0..buckets).map(|_| rng.int(-1000, 1000) as i32).collect();
    let init_fadd: Vec<f32> = (0..buckets).map(|_| rng.int(-64, 64) as f32).collect();
    let init_max: Vec<i32> = (0..buckets).map(|_| rng.int(-1 << 30, 1 << 30) as i32).collect();
    let names = [
        ("add", Elem::I32),
        ("fadd", Elem::F32),
        ("maxv", Elem::I32),
        ("acc_add", Elem::I32),
        ("acc_fadd", Elem::F32),
        ("acc_max", Elem::I32),
        ("acc_cas", Elem::I32),
        ("old_add", Elem::I32),
        ("old_max", Elem::I32),
        ("old_cas", Elem::I32),
    ];
    for w in [1, 4, 16] {
        let params = [ptrs(&names), vec![val("m", Elem::I32), val("limit", Elem::I32)]].concat();
        let kernel = trace("atomics", params, vec![], w, |a| {
            let gid = program_id(0) * block + arange(block);
            let active = gid.compare(CmpOp::Lt, scalar::<i32>(a, 11));
            let addr = (gid * 7) % scalar::<i32>(a, 10);
            let v_add: Tile<i32> = load(ptr_of::<i32>(a, 0) + gid, active);
            let v_fadd: Tile<f32> = load(ptr_of::<f32>(a, 1) + gid, active);
            let v_max: Tile<i32> = load(ptr_of::<i32>(a, 2) + gid, active);
            let old_add = atomic_add(ptr_of::<i32>(a, 3) + addr, v_add, active);
            atomic_add(ptr_of::<f32>(a, 4) + addr, v_fadd, active);
            let old_max = atomic_max(ptr_of::<i32>(a, 5) + addr, v_max, active);
            let old_cas = atomic_cas(ptr_of::<i32>(a, 6) + addr, 0i32, gid + 1, active);
            store(ptr_of::<i32>(a, 7) + gid, old_add, active);
            store(ptr_of::<i32>(a, 8) + gid, old_max, active);
            store(ptr_of::<i32>(a, 9) + gid, old_cas, active);
        })
        .unwrap();
        for (m, limit) in [(1, n), (13, n), (13, n - 37), (buckets, n - 100)] {
            let args = vec![
                HArg::buf(&add),
                HArg::buf(&fadd),
                HArg::buf(&maxv),
                HArg::buf(&init_add),
                HArg::buf(&init_fadd),
                HArg::buf(&init_max),
                HArg::buf(&vec![0i32; buckets]),
                HArg::poisoned(Elem::I32, n),
                HArg::poisoned(Elem::I32, n),
                HArg::poisoned(Elem::I32, n),
                HArg::I32(m as i32),
                HArg::I32(limit as i32),
            ];
            let what = format!("atomics, num_warps {w}, {m} addresses, {limit} active lanes");
            let run = run_both(&gpu, what, &kernel, [programs as u32 + 1, 1, 1], &args);
            // Order-independent results: exactly the interpreter's.
            run.assert_same_in(&[0, 1, 2, 3, 4, 5]);
            // Order-dependent ones: invariants of some order of the lanes.
            let (acc_add, acc_max, acc_cas) = (run.gpu_i32(3), run.gpu_i32(5), run.gpu_i32(6));
            let (old_add, old_max, old_cas) = (run.gpu_i32(7), run.gpu_i32(8), run.gpu_i32(9));
            for (g, old) in [&old_add, &old_max, &old_cas].iter().enumerate() {
                if let Some(k) = (limit..n).find(|&k| old[k] != -1) {
                    run.fail(&format!(
                        "old values #{g}: masked-off lane {k} was written ({})",
                        old[k]
                    ));
                }
            }
            for bucket in 0..m {
                let lanes: Vec<usize> = (0..limit).filter(|&k| (k * 7) % m == bucket).collect();
                // add: the old values are the partial sums of the addends in some order
                let mut seen: Vec<(i32, i32)> = lanes.iter().map(|&k| (old_add[k], add[k])).collect();
                seen.sort();
                let mut sum = init_add[bucket];
                for &(old, v) in &seen {
                    if old != sum {
                        run.fail(&format!(
                            "atomic_add, address {bucket}: old values {seen:?} are not partial sums from {}",
                            init_add[bucket]
                        ));
                    }
                    sum = sum.wrapping_add(v);
                }
                assert_eq!(sum, acc_add[bucket]);
                // max: every old value is the initial value or one of the operands, at most the final
                for &k in &lanes {
                    let o = old_max[k];
                    if o > acc_max[bucket] || (o != init_max[bucket] && !lanes.iter().any(|&j| maxv[j] == o)) {
                        run.fail(&format!(
                            "atomic_max, address {bucket}, lane {k}: old value {o} impossible"
                        ));
                    }
                }
                // cas: exactly one lane saw 0 and wrote its id + 1; the others saw that
                let winners: Vec<usize> = lanes.iter().copied().filter(|&k| old_cas[k] == 0).collect();
                let want_final = match winners.as_slice() {
                    [] if lanes.is_empty() => 0,
                    [k] => *k as i32 + 1,
                    _ => run.fail(&format!("atomic_cas, address {bucket}: lanes {winners:?} all saw 0")),
                };
                if acc_cas[bucket] != want_final || lanes.iter().any(|&k| k != winners[0] && old_cas[k] != want_final) {
                    run.fail(&format!(
                        "atomic_cas, address {bucket}: final {} (want {want_final}), lanes {lanes:?}",
                        acc_cas[bucket]
                    ));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Runtime control flow
// ---------------------------------------------------------------------------------------------

/// `out = load_or(a, m, load(b, n))` on rows of `size` elements (element type `T`).
fn fallback_kernel<T: Scalar>(e: Elem, size: usize, w: u32) -> Kernel {
    let params = ptrs(&[("a", e), ("b", e), ("m", Elem::I32), ("out", e)]);
    trace("load_or_load", params, vec![], w, |p| {
        let offs = program_id(0) * size as i32 + arange(size);
        let flags: Tile<i32> = load(ptr_of::<i32>(p, 2) + offs, true);
        let fallback: Tile<T> = load(ptr_of::<T>(p, 1) + offs, (flags & 2).compare(CmpOp::Ne, constant(0i32)));
        let v: Tile<T> = load_or(
            ptr_of::<T>(p, 0) + offs,
            (flags & 1).compare(CmpOp::Ne, constant(0i32)),
            fallback,
        );
        store(ptr_of::<T>(p, 3) + offs, v, true);
    })
    .unwrap()
}

#[test]
fn masked_loads_falling_back_to_loads() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rand::new(0x10ad);
    for size in [1usize, 2, 4, 8, 16, 64] {
        for w in WARPS {
            let g = 3;
            let n = g * size;
            // Bit 0: load a; bit 1: load b (where a is not loaded, the result is b or 0).
            let m: Vec<i32> = (0..n).map(|_| rng.int(0, 3) as i32).collect();
            let cases: Vec<(Kernel, Vec<HArg>)> = vec![
                (
                    fallback_kernel::<f32>(Elem::F32, size, w),
                    vec![
                        HArg::buf(&rng.vec::<f32>(n, -8.0, 8.0)),
                        HArg::buf(&rng.vec::<f32>(n, -8.0, 8.0)),
                    ],
                ),
                (
                    fallback_kernel::<bf16>(Elem::BF16, size, w),
                    vec![
                        HArg::buf(&rng.vec::<bf16>(n, -8.0, 8.0)),
                        HArg::buf(&rng.vec::<bf16>(n, -8.0, 8.0)),
                    ],
                ),
                (
                    fallback_kernel::<i32>(Elem::I32, size, w),
                    vec![
                        HArg::buf(&(0..n).map(|_| rng.i32_any()).collect::<Vec<_>>()),
                        HArg::buf(&(0..n).map(|_| rng.i32_any()).collect::<Vec<_>>()),
                    ],
                ),
            ];
            for (kernel, mut args) in cases {
                let e = elem_of(&kernel, 0);
                args.push(HArg::buf(&m));
                args.push(HArg::poisoned(e, n));
                run_both(
                    &gpu,
                    format!("load_or over a load, {e:?}, rows of {size}, num_warps {w}"),
                    &kernel,
                    [g as u32, 1, 1],
                    &args,
                )
                .assert_same();
            }
        }
    }
}

#[test]
fn runtime_loops_and_branches() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rand::new(0xf0);
    // Loops: zero trips, negative ranges, steps, nesting, carried tuples and a carried tile.
    for w in [1, 4, 16] {
        let params = vec![
            ptr("out", Elem::I32),
            val("lo", Elem::I32),
            val("hi", Elem::I32),
            val("step", Elem::I32),
        ];
        let kernel = trace("loops", params, vec![], w, |a| {
            let out = ptr_of::<i32>(a, 0);
            let (lo, hi, step) = (scalar::<i32>(a, 1), scalar::<i32>(a, 2), scalar::<i32>(a, 3));
            let init = (constant(0i32), constant(0i32), constant(0i32));
            let (count, sum, nested) = for_range(range_step(lo, hi, step), init, |i, (c, s, n)| {
                let inner = for_range(range(0, i), n, |j, n| n + i * j);
                (c + 1, s + i, inner)
            });
            store(out, count, true);
            store(out + 1, sum, true);
            store(out + 2, nested, true);
            let t = for_range(range(lo, hi), arange(64), |i, t| t * 3 + i);
            store(out + 3 + arange(64), t, true);
        })
        .unwrap();
        for (lo, hi, step) in [
            (0, 0, 1),
            (5, 2, 1),
            (-3, -3, 2),
            (-3, 20, 4),
            (0, 1, 100),
            (7, 8, 1),
            (rng.int(-10, 10) as i32, rng.int(-10, 40) as i32, rng.int(1, 6) as i32),
        ] {
            let args = vec![
                HArg::poisoned(Elem::I32, 67),
                HArg::I32(lo),
                HArg::I32(hi),
                HArg::I32(step),
            ];
            run_both(
                &gpu,
                format!("loops {lo}..{hi} step {step}, num_warps {w}"),
                &kernel,
                [1, 1, 1],
                &args,
            )
            .assert_same();
        }
    }
    // Per-program trip counts (program 0: none) accumulating f32 tiles, and runtime `if`:
    // even programs double, odd ones add `bias`; programs past `limit` take a nested branch.
    let block = 128usize;
    let programs = 9usize;
    for w in [1, 2, 4, 8, 16] {
        let params = vec![
            ptr("x", Elem::F32),
            ptr("out", Elem::F32),
            val("bias", Elem::F32),
            val("limit", Elem::I32),
        ];
        let kernel = trace("branchy", params, vec![], w, |a| {
            let (x, out) = (ptr_of::<f32>(a, 0), ptr_of::<f32>(a, 1));
            let (bias, limit) = (scalar::<f32>(a, 2), scalar::<i32>(a, 3));
            let pid = program_id(0);
            let offs = pid * block + arange(block);
            let acc = for_range(range(0, pid), load(x + offs, true), |i, acc| {
                acc * 0.5f32 + load(x + i * block + arange(block), true)
            });
            let even = (pid % 2).compare(CmpOp::Eq, 0);
            let v = even.branch(acc, |v| v * 2.0f32, |v| v + bias);
            let late = (pid * block).compare(CmpOp::Ge, limit);
            let (v, flag) = late.branch((v, constant(0i32)), |(v, _)| (-v, constant(1i32)), |s| s);
            store(out + offs, v + flag.cast::<f32>() * 1000.0f32, true);
        })
        .unwrap();
        let xs: Vec<f32> = (0..programs * block).map(|_| rng.f32(-3.0, 3.0)).collect();
        for limit in [0, 5 * block as i32, 100_000] {
            let args = vec![
                HArg::buf(&xs),
                HArg::poisoned(Elem::F32, programs * block),
                HArg::F32(rng.f32(1.0, 2.0)),
                HArg::I32(limit),
            ];
            run_both(
                &gpu,
                format!("branches, limit {limit}, num_warps {w}"),
                &kernel,
                [programs as u32, 1, 1],
                &args,
            )
            .assert_same();
        }
    }
}

/// A run of a tile-loop kernel: `programs` programs, each summing the rows of its `n` tiles
/// `[rows, cols]` (the last `drop` columns masked off).
#[derive(Clone, Copy)]
struct TileLoop {
    programs: usize,
    n: usize,
    rows: usize,
    cols: usize,
    drop: usize,
}

/// Runs a tile-loop kernel `(x, out, n)` on both engines (`xs`: the values of `x` as f32) and
/// checks that they agree bit for bit and equal the row sums.
fn check_row_sums(gpu: &Gpu, what: String, kernel: &Kernel, x: HArg, xs: &[f32], t: TileLoop) {
    let TileLoop {
        programs,
        n,
        rows,
        cols,
        drop,
    } = t;
    let args = vec![x, HArg::poisoned(Elem::F32, programs * rows), HArg::I32(n as i32)];
    let run = run_both(gpu, what, kernel, [programs as u32, 1, 1], &args);
    run.assert_same();
    let expect: Vec<f32> = (0..programs * rows)
        .map(|r| {
            let (p, row) = (r / rows, r % rows);
            (0..n)
                .flat_map(|i| (0..cols - drop).map(move |c| ((p * n + i) * rows + row) * cols + c))
                .map(|j| xs[j])
                .sum()
        })
        .collect();
    let got: Vec<f32> = run.gpu[1]
        .chunks(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    if got != expect {
        run.fail(&format!("row sums {got:?}, expected {expect:?}"));
    }
}

/// Program `p` sums the rows of the `n` tiles `[rows, cols]` at `x + (p·n + i)·rows·cols` into
/// `out[p·rows ..]`, prefetching tile `i + 1` (masked off at the last) before loading tile `i`.
fn prefetch_loop_kernel<T: Scalar>(e: Elem, rows: usize, cols: usize, w: u32) -> Kernel {
    let params = vec![ptr("x", e), ptr("out", Elem::F32), val("n", Elem::I32)];
    trace("prefetch_loop", params, vec![], w, |a| {
        let (x, out, n) = (ptr_of::<T>(a, 0), ptr_of::<f32>(a, 1), scalar::<i32>(a, 2));
        let size = (rows * cols) as i32;
        let local = (arange(rows) * cols as i32).expand_dims(1) + arange(cols).expand_dims(0);
        let first = program_id(0) * n;
        let acc = for_range(range(0, n), zeros::<f32>([rows]), |i, acc| {
            let next = x + (first + i + 1) * size + local;
            prefetch(next, (i + 1).compare(CmpOp::Lt, n));
            let t: Tile<T> = load(x + (first + i) * size + local, true);
            acc + sum(t.cast::<f32>(), 1)
        });
        store(out + program_id(0) * rows as i32 + arange(rows), acc, true);
    })
    .unwrap()
}

#[test]
fn prefetched_tile_loop() {
    for target in Target::ALL {
        let k = prefetch_loop_kernel::<f32>(Elem::F32, 16, 64, 4);
        let c = replay_dsl::compile(&k, target).unwrap();
        assert!(c.ptx.contains("prefetch.global.L2 ["), "{}", c.ptx);
    }
    let Some(gpu) = gpu() else { return };
    let mut rng = Rand::new(0x9f);
    let (programs, n) = (3usize, 5usize);
    for (rows, cols) in [(16usize, 64usize), (8, 8), (32, 128)] {
        for w in WARPS {
            let len = programs * n * rows * cols;
            // Small integers: every sum is exact, in any order.
            let xs: Vec<f32> = (0..len).map(|_| rng.int(-8, 8) as f32).collect();
            let xb: Vec<bf16> = xs.iter().map(|&v| bf16::from_f32(v)).collect();
            let cases = [
                (prefetch_loop_kernel::<f32>(Elem::F32, rows, cols, w), HArg::buf(&xs)),
                (prefetch_loop_kernel::<bf16>(Elem::BF16, rows, cols, w), HArg::buf(&xb)),
            ];
            for (kernel, x) in cases {
                let what = format!("prefetched loop, tiles {rows}x{cols}, num_warps {w}");
                let t = TileLoop {
                    programs,
                    n,
                    rows,
                    cols,
                    drop: 0,
                };
                check_row_sums(&gpu, what, &kernel, x, &xs, t);
            }
        }
    }
}

/// Program `p` sums the rows of the `n` tiles `[rows, cols]` at `x + (p·n + i)·rows·cols` into
/// `out[p·rows ..]` (columns `≥ cols − drop` masked off), each tile copied into one stage of a
/// two-stage shared buffer while the previous one is read from the other.
fn async_copy_loop_kernel<T: Scalar>(e: Elem, rows: usize, cols: usize, drop: usize, w: u32) -> Kernel {
    let params = vec![ptr("x", e), ptr("out", Elem::F32), val("n", Elem::I32)];
    trace("async_copy_loop", params, vec![], w, |a| {
        let (x, out, n) = (ptr_of::<T>(a, 0), ptr_of::<f32>(a, 1), scalar::<i32>(a, 2));
        let size = (rows * cols) as i32;
        let local = (arange(rows) * cols as i32).expand_dims(1) + arange(cols).expand_dims(0);
        let keep = arange(cols).compare(CmpOp::Lt, (cols - drop) as i32);
        let first = program_id(0) * n;
        let tiles = shared::<T>(2, &[rows, cols]);
        tiles.copy_async(0, x + first * size + local, keep);
        let acc = for_range(range(0, n), zeros::<f32>([rows]), |i, acc| {
            let next = x + (first + i + 1) * size + local;
            tiles.copy_async((i + 1) % 2, next, keep & (i + 1).compare(CmpOp::Lt, n));
            wait_async(1);
            let t: Tile<T> = tiles.read(i % 2);
            acc + sum(t.cast::<f32>(), 1)
        });
        store(out + program_id(0) * rows as i32 + arange(rows), acc, true);
    })
    .unwrap()
}

#[test]
fn async_copied_tile_loop() {
    for target in Target::ALL {
        let k = async_copy_loop_kernel::<f32>(Elem::F32, 16, 64, 0, 4);
        let c = replay_dsl::compile(&k, target).unwrap();
        assert!(c.ptx.contains("cp.async.cg.shared.global ["), "{}", c.ptx);
        assert!(c.ptx.contains("cp.async.wait_group 1"), "{}", c.ptx);
        // A tile of fewer 16-byte vectors than threads ([8, 16] bf16: 16 vectors, 128 threads)
        // is still copied 16 bytes at a time, by 16 threads, not an element per thread loaded
        // and stored at once.
        let small = replay_dsl::compile(&async_copy_loop_kernel::<bf16>(Elem::BF16, 8, 16, 0, 4), target).unwrap();
        assert!(small.ptx.contains("], 16"), "{}", small.ptx);
        assert!(!small.ptx.contains("st.shared.b16"), "{}", small.ptx);
    }
    // Two stages of 64 KiB: beyond the static 48 KiB, a dynamic `.extern` array.
    let big = replay_dsl::compile(
        &async_copy_loop_kernel::<f32>(Elem::F32, 128, 128, 0, 4),
        Target::ALL[0],
    )
    .unwrap();
    assert!(
        big.ptx.contains(".extern .shared .align 16 .b8 replay_smem[];"),
        "{}",
        big.ptx
    );
    assert!(big.shared_bytes >= 2 * 65536 && big.dynamic_shared_bytes() == big.shared_bytes);
    let Some(gpu) = gpu() else { return };
    let mut rng = Rand::new(0xa5);
    let (programs, n) = (3usize, 5usize);
    for (rows, cols) in [(16usize, 64usize), (8, 8), (8, 16), (32, 128), (128, 128)] {
        for (w, drop) in WARPS.into_iter().flat_map(|w| [(w, 0usize), (w, 1)]) {
            let len = (programs * n + 1) * rows * cols;
            // Small integers: every sum is exact, in any order.
            let xs: Vec<f32> = (0..len).map(|_| rng.int(-8, 8) as f32).collect();
            let xb: Vec<bf16> = xs.iter().map(|&v| bf16::from_f32(v)).collect();
            let cases = [
                (
                    async_copy_loop_kernel::<f32>(Elem::F32, rows, cols, drop, w),
                    HArg::buf(&xs),
                ),
                (
                    async_copy_loop_kernel::<bf16>(Elem::BF16, rows, cols, drop, w),
                    HArg::buf(&xb),
                ),
            ];
            for (kernel, x) in cases {
                let what = format!("async-copied loop, tiles {rows}x{cols}, {drop} column(s) masked, num_warps {w}");
                let t = TileLoop {
                    programs,
                    n,
                    rows,
                    cols,
                    drop,
                };
                check_row_sums(&gpu, what, &kernel, x, &xs, t);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Layout conversions
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

#[test]
fn layout_conversions() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rand::new(0x1a7);
    for size in [1usize, 2, 4, 8, 16, 32, 64] {
        for w in WARPS {
            let (sq, rect) = ([size, size], [size, 2 * size]);
            let params = ptrs(&[
                ("x", Elem::F32),
                ("y", Elem::I32),
                ("sym", Elem::F32),
                ("yt", Elem::I32),
            ]);
            let kernel = trace("layouts", params, vec![], w, |a| {
                let nsq = (size * size) as i32;
                let nrect = (2 * size * size) as i32;
                let pid = program_id(0);
                let x: Tile<f32> = load(ptr_of::<f32>(a, 0) + (pid * nsq + local_offsets(&sq)), true);
                let y: Tile<i32> = load(ptr_of::<i32>(a, 1) + (pid * nrect + local_offsets(&rect)), true);
                store(
                    ptr_of::<f32>(a, 2) + (pid * nsq + local_offsets(&sq)),
                    x + x.trans(),
                    true,
                );
                store(
                    ptr_of::<i32>(a, 3) + (pid * nrect + local_offsets(&[2 * size, size])),
                    y.trans() * 3 + y.trans(),
                    true,
                );
            })
            .unwrap();
            let g = 2;
            let x: Vec<f32> = (0..g * size * size).map(|_| rng.f32(-4.0, 4.0)).collect();
            let y: Vec<i32> = (0..g * 2 * size * size).map(|_| rng.i32_any()).collect();
            let args = vec![
                HArg::buf(&x),
                HArg::buf(&y),
                HArg::poisoned(Elem::F32, x.len()),
                HArg::poisoned(Elem::I32, y.len()),
            ];
            run_both(
                &gpu,
                format!("layouts {size}x{size}, num_warps {w}"),
                &kernel,
                [g as u32, 1, 1],
                &args,
            )
            .assert_same();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reductions and scans along every axis
// ---------------------------------------------------------------------------------------------

fn reduce_body<T: Num>(shape: &[usize], axis: usize, a: &[Value]) {
    let n = shape.iter().product::<usize>() as i32;
    let pid = program_id(0);
    let offs = pid * n + local_offsets(shape);
    let x: Tile<T> = load(ptr_of::<T>(a, 0) + offs, true);
    let y: Tile<T> = load(ptr_of::<T>(a, 1) + offs, true);
    let mut rs = shape.to_vec();
    rs.remove(axis);
    let (rn, ro) = (rs.iter().product::<usize>() as i32, local_offsets(&rs));
    store(ptr_of::<T>(a, 2) + (pid * rn + ro), sum(x, axis), true);
    store(ptr_of::<T>(a, 3) + (pid * rn + ro), max(x, axis), true);
    store(ptr_of::<T>(a, 4) + (pid * rn + ro), min(x, axis), true);
    let s = sum_all(x);
    store(ptr_of::<T>(a, 5) + pid, s, true);
    let scans = [
        cumsum(x, axis),
        cumsum_exclusive(x, axis),
        cumsum_reverse(x, axis),
        cumsum_reverse_exclusive(x, axis),
        cumprod(y, axis),
        cumprod_exclusive(y, axis),
        cumprod_reverse(y, axis),
        cumprod_reverse_exclusive(y, axis),
    ];
    for (i, r) in scans.into_iter().enumerate() {
        store(ptr_of::<T>(a, 6 + i) + offs, r, true);
    }
}

#[test]
fn reductions_on_each_axis() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rand::new(0x2ed);
    let shapes: [&[usize]; 10] = [
        &[1, 64],
        &[8, 32],
        &[64, 16],
        &[32, 128],
        &[2, 2],
        &[2, 4, 8],
        &[4, 16, 32],
        &[8, 1, 64],
        &[16, 16, 16],
        &[1, 32, 2],
    ];
    let g = 2usize;
    for shape in shapes {
        let n: usize = shape.iter().product();
        for axis in 0..shape.len() {
            let rn = n / shape[axis];
            for float in [true, false] {
                let e = if float { Elem::F32 } else { Elem::I32 };
                for w in WARPS {
                    let params = ptrs(&[
                        ("x", e),
                        ("y", e),
                        ("sum", e),
                        ("max", e),
                        ("min", e),
                        ("sum_all", e),
                        ("cumsum", e),
                        ("cumsum_excl", e),
                        ("cumsum_rev", e),
                        ("cumsum_rev_excl", e),
                        ("cumprod", e),
                        ("cumprod_excl", e),
                        ("cumprod_rev", e),
                        ("cumprod_rev_excl", e),
                    ]);
                    let kernel = trace("reduce_axes", params, vec![], w, |a| {
                        if float {
                            reduce_body::<f32>(shape, axis, a)
                        } else {
                            reduce_body::<i32>(shape, axis, a)
                        }
                    })
                    .unwrap();
                    // f32: quarters of small integers, so that sums are exact in any order.
                    let x = if float {
                        HArg::buf(&(0..g * n).map(|_| rng.int(-64, 64) as f32 / 4.0).collect::<Vec<_>>())
                    } else {
                        HArg::buf(&(0..g * n).map(|_| rng.i32_any()).collect::<Vec<_>>())
                    };
                    // f32 products: ±1, and ±2 one time in eight (exact in any order, no overflow).
                    let y = if float {
                        let f = |r: &mut Rand| {
                            let m = if r.int(0, 8) == 0 { 2.0 } else { 1.0 };
                            if r.u32() & 1 == 1 {
                                m
                            } else {
                                -m
                            }
                        };
                        HArg::buf(&(0..g * n).map(|_| f(&mut rng)).collect::<Vec<f32>>())
                    } else {
                        HArg::buf(&(0..g * n).map(|_| rng.i32_any()).collect::<Vec<_>>())
                    };
                    let mut args = vec![
                        x,
                        y,
                        HArg::poisoned(e, g * rn),
                        HArg::poisoned(e, g * rn),
                        HArg::poisoned(e, g * rn),
                        HArg::poisoned(e, g),
                    ];
                    args.extend((0..8).map(|_| HArg::poisoned(e, g * n)));
                    let what = format!("{e} reductions of {shape:?} along axis {axis}, num_warps {w}");
                    run_both(&gpu, what, &kernel, [g as u32, 1, 1], &args).assert_same();
                }
            }
        }
    }
}
