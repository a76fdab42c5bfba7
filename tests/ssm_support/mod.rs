//! Helpers of the root package's `ssm_*` tests: random inputs rounded to what the kernels
//! read, the float64 recurrence of one row, tolerant comparisons that NaN never passes.
#![allow(dead_code)]

use half::bf16;
use replay_kernels::ssm::reference::{recurrent_step, Mamba2Params, SlotStates, StepInput};
use replay_kernels::ssm::shapes::ModelShape;

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
        (lo + (self.uniform() * (hi - lo + 1) as f64) as usize).min(hi)
    }
    pub fn normal(&mut self) -> f64 {
        let u = 1.0 - self.uniform();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.uniform()).cos()
    }
}

pub fn to_bf16(x: f64) -> f64 {
    bf16::from_f64(x).to_f64()
}

/// f32-valued parameters: `A ∈ [−8, −0.5]`, `D ~ N(0,1)`, `dt_bias ∈ [−4, −1]`.
pub fn params(rng: &mut Rng, shape: ModelShape) -> Mamba2Params {
    let h = shape.heads;
    let f = |x: f64| x as f32 as f64;
    Mamba2Params {
        a: (0..h).map(|_| f(rng.range(-8.0, -0.5))).collect(),
        d: (0..h).map(|_| f(rng.normal())).collect(),
        dt_bias: (0..h).map(|_| f(rng.range(-4.0, -1.0))).collect(),
    }
}

/// One token's inputs `~ N(0, 1)`, rounded to bf16 (what the kernels read).
pub fn input(rng: &mut Rng, shape: ModelShape, gated: bool) -> StepInput {
    let mut v = |n: usize| (0..n).map(|_| to_bf16(rng.normal())).collect::<Vec<_>>();
    StepInput {
        dt: v(shape.heads),
        x: v(shape.heads * shape.dv),
        b: v(shape.groups * shape.dk),
        c: v(shape.groups * shape.dk),
        z: if gated { Some(v(shape.heads * shape.dv)) } else { None },
    }
}

/// A random f32-valued initial state of one slot.
pub fn initial_state(rng: &mut Rng, shape: ModelShape) -> Vec<f32> {
    (0..shape.heads * shape.state_elems())
        .map(|_| rng.normal() as f32)
        .collect()
}

/// One token of the plain f64 recurrence on `slot` of `truth`; returns `[heads][dv]`.
pub fn recur(params: &Mamba2Params, truth: &mut SlotStates, slot: usize, tok: &StepInput) -> Vec<f64> {
    let s = truth.shape();
    let mut y = vec![0.0; s.heads * s.dv];
    recurrent_step(params, truth, &[slot], std::slice::from_ref(tok), &mut y);
    y
}

pub fn rms(v: &[f64]) -> f64 {
    (v.iter().map(|x| x * x).sum::<f64>() / v.len().max(1) as f64).sqrt()
}

/// Fails unless every `|got − want| ≤ rtol·|want| + atol_rel·rms(want)` (NaN never passes).
pub fn close(what: &str, got: &[f64], want: &[f64], rtol: f64, atol_rel: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let atol = atol_rel * rms(want).max(1e-30);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let tol = rtol * w.abs() + atol;
        assert!((g - w).abs() <= tol, "{what}[{i}]: got {g}, want {w} (tol {tol:e})");
    }
}

/// bf16 outputs (one rounding of an f32 result).
pub const OUT: (f64, f64) = (1.0 / 128.0, 2e-3);
/// f32 state arithmetic over a few windows.
pub const STATE: (f64, f64) = (1e-4, 1e-4);
