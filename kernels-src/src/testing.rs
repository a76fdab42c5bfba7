//! Test support shared by the `ssm_*` tests of this crate and of the root package (not part of
//! the API): a seeded generator, random parameters and inputs rounded to what the kernels
//! read, and tolerant comparisons that NaN never passes.
#![doc(hidden)]

use crate::ssm::reference::{silu, Mamba2Params, StepInput};
use crate::ssm::shapes::ModelShape;
use half::bf16;

/// SplitMix64 with Box–Muller normals.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `[0, 1)`.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in `[lo, hi)`.
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }
    /// Uniform in `lo..=hi`.
    pub fn int(&mut self, lo: usize, hi: usize) -> usize {
        (lo + (self.uniform() * (hi - lo + 1) as f64) as usize).min(hi)
    }
    /// Standard normal.
    pub fn normal(&mut self) -> f64 {
        let u = 1.0 - self.uniform();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.uniform()).cos()
    }
    /// Fisher–Yates shuffle of `v`.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.int(0, i);
            v.swap(i, j);
        }
    }
}

/// `x` rounded to bf16.
pub fn to_bf16(x: f64) -> f64 {
    bf16::from_f64(x).to_f64()
}

/// `x` rounded to f32.
pub fn to_f32(x: f64) -> f64 {
    x as f32 as f64
}

/// f32-valued parameters: `A ∈ [−8, −0.5]`, `D ~ N(0, 1)`, `dt_bias ∈ [−4, −1]`.
pub fn random_params(rng: &mut Rng, shape: ModelShape) -> Mamba2Params {
    let h = shape.heads;
    Mamba2Params {
        a: (0..h).map(|_| to_f32(rng.range(-8.0, -0.5))).collect(),
        d: (0..h).map(|_| to_f32(rng.normal())).collect(),
        dt_bias: (0..h).map(|_| to_f32(rng.range(-4.0, -1.0))).collect(),
    }
}

/// One token's inputs `dt, x, B, C, z ~ N(0, 1)`, rounded to bf16 (what the kernels read).
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

/// Root mean square (for an absolute tolerance scale).
pub fn rms(v: &[f64]) -> f64 {
    (v.iter().map(|x| x * x).sum::<f64>() / v.len().max(1) as f64).sqrt()
}

/// Fails unless every `|got − want| ≤ rtol·|want| + atol` (NaN never passes); returns the
/// largest error relative to `rtol·|want| + atol`.
pub fn check_close(what: &str, got: &[f64], want: &[f64], rtol: f64, atol: f64) -> f64 {
    check_close_within(what, got, want, rtol, atol, &[])
}

/// [`check_close`] with a known error bound of each element added to its tolerance (`extra`,
/// laid out like `want`; empty: none).
pub fn check_close_within(what: &str, got: &[f64], want: &[f64], rtol: f64, atol: f64, extra: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    assert!(extra.is_empty() || extra.len() == want.len(), "{what}: bounds");
    let mut worst: f64 = 0.0;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let tol = rtol * w.abs() + atol + extra.get(i).copied().unwrap_or(0.0);
        let err = (g - w).abs();
        assert!(
            err <= tol,
            "{what}[{i}]: got {g}, want {w} (|err| {err:e} > tol {tol:e}, of which {atol:e} absolute and {:e} the known bound)",
            extra.get(i).copied().unwrap_or(0.0)
        );
        worst = worst.max(err / tol);
    }
    worst
}

/// How far each output `[heads][dv]` of a token `input` may move when a kernel reads the f16
/// copy of slot `slot`'s checkpoint instead of the f32 one (`ckpt`: every slot's,
/// `[slots][heads][dv][dk]`, as the device holds them): every element rounds by at most 2⁻¹¹
/// of itself and multiplies a decay ≤ 1, so `2⁻¹¹ Σ_j |S_vj| |q_j|`, times `|silu(z)|` with a
/// gate.
pub fn f16_checkpoint_bound(shape: ModelShape, ckpt: &[f32], slot: usize, input: &StepInput) -> Vec<f64> {
    let (dv, dk, hpg) = (shape.dv, shape.dk, shape.heads_per_group());
    let ckpt = &ckpt[slot * shape.heads * dv * dk..(slot + 1) * shape.heads * dv * dk];
    let mut out = vec![0.0; shape.heads * dv];
    for h in 0..shape.heads {
        let q = &input.c[(h / hpg) * dk..(h / hpg + 1) * dk];
        for v in 0..dv {
            let row = &ckpt[(h * dv + v) * dk..(h * dv + v + 1) * dk];
            let dot: f64 = row.iter().zip(q).map(|(&s, q)| (s as f64 * q).abs()).sum();
            let gate = input.z.as_ref().map_or(1.0, |z| silu(z[h * dv + v]).abs());
            out[h * dv + v] = dot * gate / 2048.0;
        }
    }
    out
}
