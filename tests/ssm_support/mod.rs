//! Helpers of the root package's `ssm_*` tests, on top of `replay_kernels::testing` (the
//! generator, random parameters and inputs shared with the kernel tests): random initial
//! states, the float64 recurrence of one row, tolerant comparisons that NaN never passes.
#![allow(dead_code)]

use replay_kernels::ssm::reference::{recurrent_step, Mamba2Params, SlotStates, StepInput};
use replay_kernels::ssm::shapes::ModelShape;
use replay_kernels::testing::{check_close, check_close_within, rms};
pub use replay_kernels::testing::{random_input, random_params, Rng};

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

/// Fails unless every `|got − want| ≤ rtol·|want| + atol_rel·rms(want)` (NaN never passes).
pub fn close(what: &str, got: &[f64], want: &[f64], rtol: f64, atol_rel: f64) {
    check_close(what, got, want, rtol, atol_rel * rms(want).max(1e-30));
}

/// [`close`] with a known error bound per element added to its tolerance (`extra`).
pub fn close_within(what: &str, got: &[f64], want: &[f64], (rtol, atol_rel): (f64, f64), extra: &[f64]) {
    check_close_within(what, got, want, rtol, atol_rel * rms(want).max(1e-30), extra);
}

/// bf16 outputs (one rounding of an f32 result).
pub const OUT: (f64, f64) = (1.0 / 128.0, 2e-3);
/// f32 state arithmetic over a few windows.
pub const STATE: (f64, f64) = (1e-4, 1e-4);
