//! Shared helpers of the `ssm_*` kernel tests: random inputs rounded to the dtypes the kernels
//! see, buffers on the interpreter device, launches, fp comparisons that NaN never passes, and
//! a float64 fold of a slot's checkpoint and ring (its logical state).
#![allow(dead_code)]

use half::{bf16, f16};
use replay_kernels::ssm::kernels::commit::mamba2_commit;
use replay_kernels::ssm::kernels::decode::mamba2_decode;
use replay_kernels::ssm::kernels::fold::mamba2_fold;
use replay_kernels::ssm::kernels::replay::mamba2_replay_step;
use replay_kernels::ssm::kernels::spec_baseline::mamba2_spec_baseline;
use replay_kernels::ssm::kernels::verify::mamba2_verify;
use replay_kernels::ssm::kernels::META_WORDS;
use replay_kernels::ssm::reference::{Mamba2Params, SlotStates, StepInput};
use replay_kernels::ssm::shapes::{ModelShape, CPU_TEST};
use replay_runtime::launch::kernel::Engine;
use replay_runtime::prelude::*;
use replay_runtime::{ArgValue, HostElem};

pub use replay_kernels::testing::*;

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
/// GPU: `REPLAY_SSM_DEVICE=cuda cargo test -p replay-kernels --test 'ssm_*'`), or the PTX
/// emulator when `REPLAY_SSM_DEVICE=emulator` (the sm_90a PTX run on the CPU, every access
/// bounds-checked).
pub fn device() -> (Device, Stream) {
    let d = match std::env::var("REPLAY_SSM_DEVICE").as_deref() {
        Ok("cuda") => Device::cuda(0).expect("REPLAY_SSM_DEVICE=cuda but no GPU"),
        Ok("emulator") => Device::emulator(),
        Ok("") | Ok("interpreter") | Err(_) => Device::interpreter(),
        Ok(other) => panic!("REPLAY_SSM_DEVICE={other}: expected cuda, emulator or interpreter"),
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

/// A shape where every tile axis the tuner searches is live: `BV` 16, 32 and 64 (`dv` 64), `HB`
/// 1, 2 and 4 (4 heads per group), `FC` 16 and 32 (`dk` 32: two flush blocks or one).
pub const TUNING: ModelShape = ModelShape {
    name: "tuning",
    dv: 64,
    dk: 32,
    heads: 4,
    groups: 1,
    ..CPU_TEST
};

/// A shape for the conventional kernels' flat row tiling: `BV = 4` divides a group's 12 state
/// rows (`heads/groups · dv`) but not `dv = 6`, so programs straddle heads and their per-row
/// `dt'`, `α` and `D` differ row by row.
pub const STRADDLE: ModelShape = ModelShape {
    name: "straddle",
    dv: 6,
    dk: 8,
    heads: 4,
    groups: 2,
    ..CPU_TEST
};

/// The tiles `(BV, HB, num_warps)` the tuner searches at [`TUNING`], each with every value of
/// `flags` (a kernel's boolean-and-block axes), where `keep` allows: all of them when kernels
/// run compiled (emulator, GPU), else `fallback` (one point per axis value: on the interpreter
/// the tiles only change the trace).
pub fn tuning_points<F: Copy>(
    flags: &[F],
    keep: impl Fn(usize, F) -> bool,
    fallback: Vec<(usize, usize, u32, F)>,
) -> Vec<(usize, usize, u32, F)> {
    if device().0.backend() == replay_runtime::Backend::Interpreter {
        return fallback;
    }
    let mut points = vec![];
    for bv in [16, 32, 64] {
        for hb in [1, 2, 4] {
            for warps in [4, 8] {
                points.extend(flags.iter().filter(|&&f| keep(hb, f)).map(|&f| (bv, hb, warps, f)));
            }
        }
    }
    points
}

/// Tolerances: bf16 outputs (one rounding to bf16 of an f32 result) and f32 state math.
pub const OUT_RTOL: f64 = 1.0 / 128.0;
pub const OUT_ATOL_REL: f64 = 1e-3;
pub const STATE_RTOL: f64 = 2e-5;
pub const STATE_ATOL_REL: f64 = 2e-5;

/// Compares bf16 outputs `[row][tok][head][dv]` of live rows; padding rows must still hold NaN.
pub fn check_outputs(what: &str, got: &[bf16], want: &[f64], live: &[bool], per_row: usize) {
    check_outputs_within(what, got, want, live, per_row, &[]);
}

/// [`check_outputs`] with a known error bound per output added to its tolerance (`extra`,
/// laid out like `want`; empty: none).
pub fn check_outputs_within(what: &str, got: &[bf16], want: &[f64], live: &[bool], per_row: usize, extra: &[f64]) {
    let scale = rms(want);
    for (r, &is_live) in live.iter().enumerate() {
        let g = &got[r * per_row..(r + 1) * per_row];
        if is_live {
            let g: Vec<f64> = g.iter().map(|v| v.to_f64()).collect();
            check_close_within(
                &format!("{what} row {r}"),
                &g,
                &want[r * per_row..(r + 1) * per_row],
                OUT_RTOL,
                OUT_ATOL_REL * scale,
                extra.get(r * per_row..(r + 1) * per_row).unwrap_or(&[]),
            );
        } else {
            assert!(g.iter().all(|v| v.is_nan()), "{what}: padding row {r} was written");
        }
    }
}

/// The ring and counters of the replay kernels on the device. The counters ping-pong: `meta`
/// is the current buffer (read by every kernel, updated in place by `mamba2_commit`),
/// `meta_out` the one `mamba2_replay_step` writes; [`Ring::swap`] after every step.
pub struct Ring {
    pub cap: usize,
    pub meta: DeviceBuffer<i32>,
    pub meta_out: DeviceBuffer<i32>,
    pub rec_dt: DeviceBuffer<f32>,
    pub rec_x: DeviceBuffer<bf16>,
    pub rec_b: DeviceBuffer<bf16>,
    pub ckpt: DeviceBuffer<f32>,
    /// The low-precision checkpoints (the kernels' `LP`): the f16 of `ckpt`, slot 0 NaN too.
    pub ckpt_lp: DeviceBuffer<f16>,
}

/// Poison of slot 0 in the counters.
pub const META_POISON: i32 = -777;
/// Poison of the counters a step has not written yet (`meta_out`).
pub const META_OUT_POISON: i32 = -555;

impl Ring {
    /// Checkpoints from `states` (slot 0 poisoned with NaN), empty rings (NaN: never-written
    /// records must never be read), `h = 0` and the given initial flag in `meta`, and
    /// [`META_OUT_POISON`] everywhere in `meta_out` (slot 0 of both: [`META_POISON`]).
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
        let mut meta_out = vec![META_OUT_POISON; slots * META_WORDS];
        meta_out[..META_WORDS].fill(META_POISON);
        Ring {
            cap,
            meta: buf(s, &meta),
            meta_out: buf(s, &meta_out),
            rec_dt: buf(s, &vec![f32::NAN; slots * cap * shape.heads]),
            rec_x: buf(s, &vec![bf16::NAN; slots * cap * shape.heads * shape.dv]),
            rec_b: buf(s, &vec![bf16::NAN; slots * cap * shape.groups * shape.dk]),
            ckpt_lp: buf(s, &ckpt.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>()),
            ckpt: buf(s, &ckpt),
        }
    }

    /// The ring's arguments of `mamba2_verify`: counters, checkpoints (both), records `dt'`,
    /// `x`, `B`.
    pub fn args(&self) -> [ArgValue<'_>; 6] {
        [
            arg(&self.meta),
            arg(&self.ckpt),
            arg(&self.ckpt_lp),
            arg(&self.rec_dt),
            arg(&self.rec_x),
            arg(&self.rec_b),
        ]
    }

    /// The ring's arguments of `mamba2_replay_step`: counters read, counters written,
    /// checkpoints (both), records `dt'`, `x`, `B`.
    pub fn step_args(&self) -> [ArgValue<'_>; 7] {
        [
            arg(&self.meta),
            arg(&self.meta_out),
            arg(&self.ckpt),
            arg(&self.ckpt_lp),
            arg(&self.rec_dt),
            arg(&self.rec_x),
            arg(&self.rec_b),
        ]
    }

    /// Resets the counters of `slot` in the current buffer to `(0, 0, flag, 0)` (what
    /// admitting a sequence does; the other buffer is the next step's to write).
    pub fn admit(&mut self, s: &Stream, slot: usize, flag: bool) {
        let mut m = host(s, &self.meta);
        m[slot * META_WORDS..(slot + 1) * META_WORDS].copy_from_slice(&[0, 0, flag as i32, 0]);
        self.meta.copy_from_host(s, &m).unwrap();
    }

    /// Makes the counters a step wrote the current ones.
    pub fn swap(&mut self) {
        std::mem::swap(&mut self.meta, &mut self.meta_out);
    }

    /// Fills `meta_out` with [`META_OUT_POISON`] (slot 0 keeps [`META_POISON`]), so that a
    /// step must write every live row's counters.
    pub fn poison_meta_out(&mut self, s: &Stream) {
        let mut m = vec![META_OUT_POISON; self.meta_out.len()];
        m[..META_WORDS].fill(META_POISON);
        self.meta_out.copy_from_host(s, &m).unwrap();
    }

    /// `(start, h, flag)` of `slot` in the current counters.
    pub fn meta_of(&self, s: &Stream, slot: usize) -> (usize, usize, bool) {
        let m = host(s, &self.meta);
        let w = &m[slot * META_WORDS..];
        (w[0] as usize, w[1] as usize, w[2] != 0)
    }

    /// The four words of `slot` in the current counters.
    pub fn meta_words(&self, s: &Stream, slot: usize) -> [i32; META_WORDS] {
        let m = host(s, &self.meta);
        m[slot * META_WORDS..(slot + 1) * META_WORDS].try_into().unwrap()
    }

    /// The checkpoint of `slot`, `[head][dv][dk]`, as f64.
    pub fn ckpt_of(&self, s: &Stream, shape: ModelShape, slot: usize) -> Vec<f64> {
        slot_f64(&host(s, &self.ckpt), slot, shape.heads * shape.state_elems())
    }

    /// Asserts that the low-precision checkpoint of every slot in `slots` is the f16 (round to
    /// nearest) of its checkpoint, element by element (a NaN never matches).
    pub fn check_lp(&self, s: &Stream, shape: ModelShape, slots: &[usize], what: &str) {
        let (hp, lp) = (host(s, &self.ckpt), host(s, &self.ckpt_lp));
        let n = shape.heads * shape.state_elems();
        for &slot in slots {
            for e in slot * n..(slot + 1) * n {
                let want = f16::from_f32(hp[e]);
                assert!(
                    !hp[e].is_nan() && lp[e].to_bits() == want.to_bits(),
                    "{what}: slot {slot} element {}: low-precision {} for checkpoint {}",
                    e - slot * n,
                    lp[e],
                    hp[e]
                );
            }
        }
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

    /// Bytes of slot 0 in every buffer, both counter buffers included (to check that padding
    /// is never touched; the order of the two counter buffers does not matter, both hold
    /// [`META_POISON`] there).
    pub fn slot0_bits(&self, s: &Stream, shape: ModelShape) -> Vec<u64> {
        let n = shape.heads * shape.state_elems();
        let mut v: Vec<u64> = host(s, &self.ckpt)[..n].iter().map(|x| x.to_bits() as u64).collect();
        v.extend(host(s, &self.ckpt_lp)[..n].iter().map(|x| x.to_bits() as u64));
        v.extend(host(s, &self.meta)[..META_WORDS].iter().map(|&x| x as u32 as u64));
        v.extend(host(s, &self.meta_out)[..META_WORDS].iter().map(|&x| x as u32 as u64));
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

/// The tokens of live rows (`None` for padding rows), one per row.
pub fn live_tokens<'a>(inputs: &'a [StepInput], live: &[bool]) -> Vec<Option<&'a StepInput>> {
    inputs.iter().zip(live).map(|(i, &l)| l.then_some(i)).collect()
}

/// The drafts of live rows, row-major (`None` for every draft of a padding row).
pub fn live_drafts<'a>(drafts: &'a [Vec<StepInput>], live: &[bool]) -> Vec<Option<&'a StepInput>> {
    drafts
        .iter()
        .zip(live)
        .flat_map(|(ds, &lv)| ds.iter().map(move |x| lv.then_some(x)))
        .collect()
}

/// The leading arguments of every state-update kernel: inputs `(dt, x, B, C, z)`, parameters
/// `(A, D, dt_bias)` and the row → slot indices.
pub fn token_args<'a>(
    inputs: &'a [DeviceBuffer<bf16>; 5],
    params: &'a [DeviceBuffer<f32>; 3],
    slot_idx: &'a DeviceBuffer<i32>,
) -> Vec<ArgValue<'a>> {
    let mut a: Vec<ArgValue<'a>> = inputs.iter().map(arg).collect();
    a.extend(params.iter().map(arg));
    a.push(arg(slot_idx));
    a
}

/// The tile configuration of `mamba2_replay_step` (flat rows: `hb` unused), `mamba2_verify`
/// and `mamba2_fold`.
#[derive(Clone, Copy)]
pub struct ReplayConfig {
    pub shape: ModelShape,
    pub l: usize,
    pub t: usize,
    pub gated: bool,
    pub bv: usize,
    pub hb: usize,
    pub num_warps: u32,
    /// The replay step's `EARLY` (checkpoint load before the counters).
    pub early: bool,
    /// `PREFETCH`: the replay step's flush's checkpoint tile asked of L2 before its blocks; the
    /// verification's next head's loads first.
    pub prefetch: bool,
    /// The verification's `SHARED_WEIGHTS` (all heads' weights at once).
    pub shared_weights: bool,
    /// The verification's `ASYNC` (checkpoint rows copied into shared memory a head ahead).
    pub async_copy: bool,
    /// The verification's `TIERS` (half-size record tiles where they fit).
    pub tiers: bool,
    /// `TAIL` of the verification and the fold (the last value block in a tile of its rows).
    pub tail: bool,
    /// The fold's `RELOAD_KEYS` (the group's keys loaded with each head's tiles).
    pub reload_keys: bool,
    /// The verification's `CHAINED` (its products chained on their accumulators).
    pub chained: bool,
    /// The fold's `FC` (key columns per flush block).
    pub fc: usize,
    /// The replay step's `FR` (state rows per flush block).
    pub fr: usize,
    /// `LP` of all three: flushes write the f16 checkpoint too, the verification reads it.
    pub lp: bool,
    /// The fold verifies the rows it folds (its `VERIFY`; the verification's `FOLD_VERIFIES`).
    pub fold_verifies: bool,
}

impl ReplayConfig {
    /// The tiles given, with the kernels' options (`EARLY`, `PREFETCH`, `SHARED_WEIGHTS`, `ASYNC`,
    /// `FC`, `FR`) at their defaults.
    pub fn new(shape: ModelShape, l: usize, t: usize, gated: bool, bv: usize, hb: usize, num_warps: u32) -> Self {
        ReplayConfig {
            shape,
            l,
            t,
            gated,
            bv,
            hb,
            num_warps,
            early: false,
            prefetch: false,
            shared_weights: true,
            async_copy: false,
            tiers: false,
            tail: false,
            reload_keys: false,
            chained: false,
            fc: 32,
            fr: 8,
            lp: false,
            fold_verifies: false,
        }
    }

    /// `mamba2_replay_step` compiled with this configuration.
    pub fn step(self, dev: &Device) -> CompiledKernel<mamba2_replay_step::Kernel> {
        let s = self.shape;
        mamba2_replay_step::Kernel::compile(
            dev,
            mamba2_replay_step::Config {
                HEADS: s.heads,
                GROUPS: s.groups,
                DK: s.dk,
                DV: s.dv,
                L: self.l,
                T: self.t,
                HAS_Z: self.gated,
                BV: self.bv,
                EARLY: self.early,
                PREFETCH: self.prefetch,
                FR: self.fr,
                LP: self.lp,
                num_warps: self.num_warps,
                min_blocks: 1,
            },
        )
        .unwrap()
    }

    /// `mamba2_verify` compiled with this configuration.
    pub fn verify(self, dev: &Device) -> CompiledKernel<mamba2_verify::Kernel> {
        let s = self.shape;
        mamba2_verify::Kernel::compile(
            dev,
            mamba2_verify::Config {
                HEADS: s.heads,
                GROUPS: s.groups,
                DK: s.dk,
                DV: s.dv,
                L: self.l,
                T: self.t,
                HAS_Z: self.gated,
                BV: self.bv,
                HB: self.hb,
                PREFETCH: self.prefetch,
                SHARED_WEIGHTS: self.shared_weights,
                ASYNC: self.async_copy,
                LP: self.lp,
                TIERS: self.tiers,
                TAIL: self.tail,
                CHAINED: self.chained,
                FOLD_VERIFIES: self.fold_verifies,
                num_warps: self.num_warps,
                min_blocks: 1,
            },
        )
        .unwrap()
    }

    /// `mamba2_fold` compiled with this configuration's `L`, `T`, tiles and `FC`.
    pub fn fold(self, dev: &Device) -> CompiledKernel<mamba2_fold::Kernel> {
        let s = self.shape;
        mamba2_fold::Kernel::compile(
            dev,
            mamba2_fold::Config {
                HEADS: s.heads,
                GROUPS: s.groups,
                DK: s.dk,
                DV: s.dv,
                L: self.l,
                T: self.t,
                BV: self.bv,
                HB: self.hb,
                FC: self.fc,
                PREFETCH: self.prefetch,
                LP: self.lp,
                TAIL: self.tail,
                RELOAD_KEYS: self.reload_keys,
                HAS_Z: self.gated,
                VERIFY: self.fold_verifies,
                num_warps: self.num_warps,
                min_blocks: 1,
            },
        )
        .unwrap()
    }

    /// The replay step's launch grid for `batch` rows (flat rows): `(batch, heads·dv / BV, 1)`.
    pub fn step_grid(self, batch: usize) -> (u32, u32, u32) {
        (batch as u32, (self.shape.heads * self.shape.dv / self.bv) as u32, 1)
    }

    /// The verification's and the fold's launch grid for `batch` rows:
    /// `(⌈dv / BV⌉, heads / HB, batch)`.
    pub fn grid(self, batch: usize) -> (u32, u32, u32) {
        (
            self.shape.dv.div_ceil(self.bv) as u32,
            (self.shape.heads / self.hb) as u32,
            batch as u32,
        )
    }
}

/// The tile configuration of `mamba2_decode` and `mamba2_spec_baseline` (same parameters).
#[derive(Clone, Copy)]
pub struct DecodeConfig {
    pub shape: ModelShape,
    pub gated: bool,
    pub bv: usize,
    pub num_warps: u32,
}

impl DecodeConfig {
    /// `mamba2_decode` compiled with this configuration.
    pub fn decode(self, dev: &Device) -> CompiledKernel<mamba2_decode::Kernel> {
        let s = self.shape;
        mamba2_decode::Kernel::compile(
            dev,
            mamba2_decode::Config {
                HEADS: s.heads,
                GROUPS: s.groups,
                DK: s.dk,
                DV: s.dv,
                HAS_Z: self.gated,
                BV: self.bv,
                num_warps: self.num_warps,
                min_blocks: 1,
            },
        )
        .unwrap()
    }

    /// The launch grid for `batch` rows (flat row tiling): `(heads·dv / BV, batch, 1)`.
    pub fn grid(self, batch: usize) -> (u32, u32, u32) {
        flat_grid(self.shape, self.bv, batch)
    }

    /// `mamba2_spec_baseline` compiled with this configuration.
    pub fn spec_baseline(self, dev: &Device) -> CompiledKernel<mamba2_spec_baseline::Kernel> {
        let s = self.shape;
        mamba2_spec_baseline::Kernel::compile(
            dev,
            mamba2_spec_baseline::Config {
                HEADS: s.heads,
                GROUPS: s.groups,
                DK: s.dk,
                DV: s.dv,
                HAS_Z: self.gated,
                BV: self.bv,
                num_warps: self.num_warps,
                min_blocks: 1,
            },
        )
        .unwrap()
    }
}

/// The grid of the conventional kernels (flat row tiling) for `batch` rows and `BV = bv`:
/// `(heads·dv / bv, batch, 1)`; `bv` must divide the state rows of a group.
pub fn flat_grid(shape: ModelShape, bv: usize, batch: usize) -> (u32, u32, u32) {
    assert_eq!(
        shape.heads_per_group() * shape.dv % bv,
        0,
        "BV = {bv} does not divide the state rows of a group of {}",
        shape.name
    );
    ((shape.heads * shape.dv / bv) as u32, batch as u32, 1)
}

/// `mamba2_commit` for window `l` and up to `t` drafts, `block` rows per program.
pub fn commit_kernel(
    dev: &Device,
    l: usize,
    t: usize,
    block: usize,
    num_warps: u32,
) -> CompiledKernel<mamba2_commit::Kernel> {
    mamba2_commit::Kernel::compile(
        dev,
        mamba2_commit::Config {
            L: l,
            T: t,
            BLOCK: block,
            num_warps,
            min_blocks: 1,
        },
    )
    .unwrap()
}

/// The arguments of `mamba2_commit`: after a verification (`accepted` drafts per row) or a
/// decode step, with flags for a next launch of `next` drafts (0: a decode step).
pub fn commit_args<'a>(
    slot_idx: &'a DeviceBuffer<i32>,
    accepted: &'a DeviceBuffer<i32>,
    meta: &'a DeviceBuffer<i32>,
    (batch, slots): (usize, usize),
    after_verify: bool,
    next: usize,
) -> [ArgValue<'a>; 7] {
    [
        arg(slot_idx),
        arg(accepted),
        arg(meta),
        ArgValue::I32(batch as i32),
        ArgValue::I32(slots as i32),
        ArgValue::I32(after_verify as i32),
        ArgValue::I32(next as i32),
    ]
}

/// Slot `slot` of a flat f32 state buffer of `n` elements per slot, as f64.
pub fn slot_f64(states: &[f32], slot: usize, n: usize) -> Vec<f64> {
    states[slot * n..(slot + 1) * n].iter().map(|&v| v as f64).collect()
}

/// Fails unless a state matches `want` within the f32 state tolerances.
pub fn check_state(what: &str, got: &[f64], want: &[f64]) {
    check_close(what, got, want, STATE_RTOL, STATE_ATOL_REL * rms(want));
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
