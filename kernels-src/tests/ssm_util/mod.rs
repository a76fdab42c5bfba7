//! Shared helpers of the `ssm_*` kernel tests: random inputs rounded to the dtypes the kernels
//! see, buffers on the interpreter device, launches, fp comparisons that NaN never passes, and
//! a float64 fold of a slot's checkpoint and ring (its logical state).
#![allow(dead_code)]

use half::{bf16, f16};
use replay_kernels::ssm::kernels::META_WORDS;
use replay_kernels::ssm::reference::{Mamba2Params, SlotStates, StepInput};
use replay_kernels::ssm::shapes::ModelShape;
use replay_runtime::launch::kernel::Engine;
use replay_runtime::prelude::*;
use replay_runtime::{ArgValue, HostElem};

/// SplitMix64 with Box–Muller normals.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }
    /// Uniform in `lo..=hi`.
    pub fn int(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.uniform() * (hi - lo + 1) as f64) as usize
    }
    pub fn normal(&mut self) -> f64 {
        let u = 1.0 - self.uniform();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.uniform()).cos()
    }
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.int(0, i);
            v.swap(i, j);
        }
    }
}

pub fn to_bf16(x: f64) -> f64 {
    bf16::from_f64(x).to_f64()
}
pub fn to_f32(x: f64) -> f64 {
    x as f32 as f64
}

/// `A ∈ [−8, −0.5]`, `D ~ N(0, 1)`, `dt_bias ∈ [−4, −1]`, all f32 values.
pub fn random_params(rng: &mut Rng, shape: ModelShape) -> Mamba2Params {
    let h = shape.heads;
    Mamba2Params {
        a: (0..h).map(|_| to_f32(rng.range(-8.0, -0.5))).collect(),
        d: (0..h).map(|_| to_f32(rng.normal())).collect(),
        dt_bias: (0..h).map(|_| to_f32(rng.range(-4.0, -1.0))).collect(),
    }
}

/// `dt, x, B, C, z ~ N(0, 1)`, rounded to bf16 (what the kernels read).
pub fn random_input(rng: &mut Rng, shape: ModelShape, gated: bool) -> StepInput {
    let mut v = |n: usize| (0..n).map(|_| to_bf16(rng.normal())).collect::<Vec<_>>();
    StepInput {
        dt: v(shape.heads),
        x: v(shape.heads * shape.dv),
        b: v(shape.groups * shape.dk),
        c: v(shape.groups * shape.dk),
        z: if gated { Some(v(shape.heads * shape.dv)) } else { None },
    }
}

/// Random f32-valued states in every slot but the padding slot 0.
pub fn random_states(rng: &mut Rng, shape: ModelShape, slots: usize) -> SlotStates {
    let mut s = SlotStates::zeros(shape, slots);
    for slot in 1..slots {
        s.slot_mut(slot).iter_mut().for_each(|v| *v = to_f32(rng.normal()));
    }
    s
}

/// Token-major concatenation of inputs (rows or drafts), with zeros for missing ones.
pub struct Packed {
    pub dt: Vec<bf16>,
    pub x: Vec<bf16>,
    pub b: Vec<bf16>,
    pub c: Vec<bf16>,
    pub z: Vec<bf16>,
}

pub fn pack(shape: ModelShape, tokens: &[Option<&StepInput>]) -> Packed {
    let mut p = Packed {
        dt: vec![],
        x: vec![],
        b: vec![],
        c: vec![],
        z: vec![],
    };
    let bf = |v: &[f64]| v.iter().map(|&x| bf16::from_f64(x)).collect::<Vec<_>>();
    for t in tokens {
        match t {
            Some(t) => {
                p.dt.extend(bf(&t.dt));
                p.x.extend(bf(&t.x));
                p.b.extend(bf(&t.b));
                p.c.extend(bf(&t.c));
                match &t.z {
                    Some(z) => p.z.extend(bf(z)),
                    None => p.z.extend(vec![bf16::ZERO; shape.heads * shape.dv]),
                }
            }
            None => {
                // Padding rows' inputs: poison, never read.
                p.dt.extend(vec![bf16::NAN; shape.heads]);
                p.x.extend(vec![bf16::NAN; shape.heads * shape.dv]);
                p.b.extend(vec![bf16::NAN; shape.groups * shape.dk]);
                p.c.extend(vec![bf16::NAN; shape.groups * shape.dk]);
                p.z.extend(vec![bf16::NAN; shape.heads * shape.dv]);
            }
        }
    }
    p
}

/// The interpreter, or GPU 0 when `REPLAY_SSM_DEVICE=cuda` (the same checks then run on the
/// GPU: `REPLAY_SSM_DEVICE=cuda cargo test -p replay-kernels --test 'ssm_*'`).
pub fn device() -> (Device, Stream) {
    let d = match std::env::var("REPLAY_SSM_DEVICE").as_deref() {
        Ok("cuda") => Device::cuda(0).expect("REPLAY_SSM_DEVICE=cuda but no GPU"),
        _ => Device::interpreter(),
    };
    let s = d.new_stream().unwrap();
    (d, s)
}

pub fn buf<T: HostElem>(s: &Stream, v: &[T]) -> DeviceBuffer<T> {
    DeviceBuffer::from_host(s, v).unwrap()
}

pub fn host<T: HostElem>(s: &Stream, b: &DeviceBuffer<T>) -> Vec<T> {
    b.to_host(s).unwrap()
}

pub fn arg<T: HostElem>(b: &DeviceBuffer<T>) -> ArgValue<'_> {
    ArgValue::Buffer(b.raw())
}

/// Launches `k` with type-erased arguments on its device.
pub fn launch<K: replay_dsl::KernelDef>(
    k: &CompiledKernel<K>,
    s: &Stream,
    grid: (u32, u32, u32),
    args: &[ArgValue<'_>],
) {
    k.launch_values(s, Grid::new(grid.0, grid.1, grid.2), args, Engine::Device)
        .unwrap_or_else(|e| panic!("{} launch failed: {e}", K::NAME));
}

/// Fails unless every `|got − want| ≤ rtol·|want| + atol` (NaN never passes); returns the
/// largest error relative to `rtol·|want| + atol`.
pub fn check_close(what: &str, got: &[f64], want: &[f64], rtol: f64, atol: f64) -> f64 {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let mut worst: f64 = 0.0;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let tol = rtol * w.abs() + atol;
        let err = (g - w).abs();
        assert!(
            err <= tol,
            "{what}[{i}]: got {g}, want {w} (|err| {err:e} > tol {tol:e})"
        );
        worst = worst.max(err / tol);
    }
    worst
}

/// Root mean square (for an absolute tolerance scale).
pub fn rms(v: &[f64]) -> f64 {
    (v.iter().map(|x| x * x).sum::<f64>() / v.len().max(1) as f64).sqrt()
}

/// Tolerances: bf16 outputs (one rounding to bf16 of an f32 result) and f32 state math.
pub const OUT_RTOL: f64 = 1.0 / 128.0;
pub const OUT_ATOL_REL: f64 = 1e-3;
pub const STATE_RTOL: f64 = 2e-5;
pub const STATE_ATOL_REL: f64 = 2e-5;

/// Compares bf16 outputs `[row][tok][head][dv]` of live rows; padding rows must still hold NaN.
pub fn check_outputs(what: &str, got: &[bf16], want: &[f64], live: &[bool], per_row: usize) {
    let scale = rms(want);
    for (r, &is_live) in live.iter().enumerate() {
        let g = &got[r * per_row..(r + 1) * per_row];
        if is_live {
            let g: Vec<f64> = g.iter().map(|v| v.to_f64()).collect();
            check_close(
                &format!("{what} row {r}"),
                &g,
                &want[r * per_row..(r + 1) * per_row],
                OUT_RTOL,
                OUT_ATOL_REL * scale,
            );
        } else {
            assert!(g.iter().all(|v| v.is_nan()), "{what}: padding row {r} was written");
        }
    }
}

/// The ring and counters of the replay kernels on the device.
pub struct Ring {
    pub cap: usize,
    pub meta: DeviceBuffer<i32>,
    pub rec_dt: DeviceBuffer<f32>,
    pub rec_x: DeviceBuffer<bf16>,
    pub rec_b: DeviceBuffer<bf16>,
    pub ckpt: DeviceBuffer<f32>,
}

/// Poison of slot 0 in the counters.
pub const META_POISON: i32 = -777;

impl Ring {
    /// Checkpoints from `states` (slot 0 poisoned with NaN), empty rings (NaN: never-written
    /// records must never be read), `h = 0` and the given initial flag.
    pub fn new(s: &Stream, shape: ModelShape, states: &SlotStates, cap: usize, flag: bool) -> Ring {
        let slots = states.slots();
        let n = shape.heads * shape.state_elems();
        let mut ckpt: Vec<f32> = (0..slots)
            .flat_map(|sl| states.slot(sl).iter().map(|&v| v as f32))
            .collect();
        ckpt[..n].fill(f32::NAN);
        let mut meta = vec![0i32; slots * META_WORDS];
        for sl in 0..slots {
            meta[sl * META_WORDS + 2] = flag as i32;
        }
        meta[..META_WORDS].fill(META_POISON);
        Ring {
            cap,
            meta: buf(s, &meta),
            rec_dt: buf(s, &vec![f32::NAN; slots * cap * shape.heads]),
            rec_x: buf(s, &vec![bf16::NAN; slots * cap * shape.heads * shape.dv]),
            rec_b: buf(s, &vec![bf16::NAN; slots * cap * shape.groups * shape.dk]),
            ckpt: buf(s, &ckpt),
        }
    }

    /// `(start, h, flag)` of `slot`.
    pub fn meta_of(&self, s: &Stream, slot: usize) -> (usize, usize, bool) {
        let m = host(s, &self.meta);
        let w = &m[slot * META_WORDS..];
        (w[0] as usize, w[1] as usize, w[2] != 0)
    }

    /// The checkpoint of `slot`, `[head][dv][dk]`, as f64.
    pub fn ckpt_of(&self, s: &Stream, shape: ModelShape, slot: usize) -> Vec<f64> {
        let n = shape.heads * shape.state_elems();
        host(s, &self.ckpt)[slot * n..(slot + 1) * n]
            .iter()
            .map(|&v| v as f64)
            .collect()
    }

    /// The logical state of `slot`: its checkpoint with its `h` committed records folded in by
    /// the plain recurrence, in f64.
    pub fn logical_state(&self, s: &Stream, shape: ModelShape, params: &Mamba2Params, slot: usize) -> Vec<f64> {
        let (start, h, _) = self.meta_of(s, slot);
        let (dv, dk, heads, groups, cap) = (shape.dv, shape.dk, shape.heads, shape.groups, self.cap);
        let rdt = host(s, &self.rec_dt);
        let rx = host(s, &self.rec_x);
        let rb = host(s, &self.rec_b);
        let mut st = self.ckpt_of(s, shape, slot);
        for j in 0..h {
            let p = slot * cap + (start + j) % cap;
            for hd in 0..heads {
                let g = shape.group_of(hd);
                let dtp = rdt[p * heads + hd] as f64;
                let alpha = (dtp * params.a[hd]).exp();
                for i in 0..dv {
                    let v = dtp * rx[(p * heads + hd) * dv + i].to_f64();
                    for c in 0..dk {
                        let k = rb[(p * groups + g) * dk + c].to_f64();
                        let e = &mut st[(hd * dv + i) * dk + c];
                        *e = alpha * *e + v * k;
                    }
                }
            }
        }
        st
    }

    /// Bytes of slot 0 in every buffer (to check that padding is never touched).
    pub fn slot0_bits(&self, s: &Stream, shape: ModelShape) -> Vec<u64> {
        let n = shape.heads * shape.state_elems();
        let mut v: Vec<u64> = host(s, &self.ckpt)[..n].iter().map(|x| x.to_bits() as u64).collect();
        v.extend(host(s, &self.meta)[..META_WORDS].iter().map(|&x| x as u32 as u64));
        v.extend(
            host(s, &self.rec_dt)[..self.cap * shape.heads]
                .iter()
                .map(|x| x.to_bits() as u64),
        );
        v.extend(
            host(s, &self.rec_x)[..self.cap * shape.heads * shape.dv]
                .iter()
                .map(|x| x.to_bits() as u64),
        );
        v.extend(
            host(s, &self.rec_b)[..self.cap * shape.groups * shape.dk]
                .iter()
                .map(|x| x.to_bits() as u64),
        );
        v
    }
}

/// Model parameters on the device: `(A, D, dt_bias)`.
pub fn param_bufs(s: &Stream, p: &Mamba2Params) -> [DeviceBuffer<f32>; 3] {
    let f = |v: &[f64]| buf(s, &v.iter().map(|&x| x as f32).collect::<Vec<_>>());
    [f(&p.a), f(&p.d), f(&p.dt_bias)]
}

/// Inputs on the device: `(dt, x, B, C, z)`.
pub fn input_bufs(s: &Stream, p: &Packed) -> [DeviceBuffer<bf16>; 5] {
    [buf(s, &p.dt), buf(s, &p.x), buf(s, &p.b), buf(s, &p.c), buf(s, &p.z)]
}

/// A NaN-poisoned bf16 output buffer.
pub fn poisoned_out(s: &Stream, n: usize) -> DeviceBuffer<bf16> {
    buf(s, &vec![bf16::NAN; n])
}

/// f16 helpers for the fp16-state tests.
pub fn f16_neighbours(x: f64) -> (f64, f64) {
    let n = f16::from_f64(x);
    let nv = n.to_f64();
    if nv == x {
        return (x, x);
    }
    let step = |v: f16, up: bool| -> f64 {
        // next f16 toward +inf (up) or -inf
        let b = v.to_bits();
        let f = v.to_f64();
        let nb = if (f >= 0.0) == up {
            if f == 0.0 && !up {
                0x8001
            } else {
                b + 1
            }
        } else if b & 0x7fff == 0 {
            if up {
                0x0001
            } else {
                0x8001
            }
        } else {
            b - 1
        };
        f16::from_bits(nb).to_f64()
    };
    if nv < x {
        (nv, step(n, true))
    } else {
        (step(n, false), nv)
    }
}
