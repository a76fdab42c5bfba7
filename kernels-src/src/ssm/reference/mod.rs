//! Float64 references of Mamba-2 decoding, in the serving-engine convention.
//!
//! Per row (sequence in the batch) and value head `h` of group `g = h / (heads / groups)`:
//! inputs `x ∈ R^{dv}`, scalar `dt`, optional gate `z ∈ R^{dv}`; per group `B, C ∈ R^{dk}`; per
//! head parameters `A < 0`, `D`, `dt_bias`. Then
//! `dt' = softplus(dt + dt_bias)`, `α = exp(dt'·A)`, `v = dt'·x`, `k = B`, `q = C`,
//! `S ← α S + v kᵀ`, `y = S q + D x`, and with `z`: `y ← y · silu(z)`.
//!
//! Three computations of the same outputs:
//! - [`recurrent_step`]: the plain recurrence on states kept in slots;
//! - [`replay::ReplayCache::decode_step`]: checkpoint plus input records, flushed every `L` steps;
//! - [`replay::ReplayCache::verify`]: output-only verification of `T` speculative drafts.
//!
//! **Slots and padding.** States live in slots addressed by a per-row slot index. Slot 0 is the
//! padding slot: a row whose slot is 0 is a padding row; its state, records and its part of the
//! output buffer are left untouched (whatever the caller put there stays), and its inputs are
//! not read. Non-zero slots of one batch must be distinct.
//!
//! **Layouts.** Per-row inputs are flat, head-major: `dt[heads]`, `x[heads][dv]`,
//! `B[groups][dk]`, `C[groups][dk]`, `z[heads][dv]`. Outputs are `[row][head][dv]` for one decode
//! step and `[row][draft][head][dv]` for verification. A slot's state is `[head][dv][dk]`.

pub mod replay;
#[cfg(test)]
mod tests;

use super::shapes::ModelShape;

/// Per-head parameters of one Mamba-2 layer, each of length `heads`.
#[derive(Clone, Debug, PartialEq)]
pub struct Mamba2Params {
    /// Continuous decay rate `A < 0` (`A = −exp(A_log)`).
    pub a: Vec<f64>,
    /// Skip coefficient `D`.
    pub d: Vec<f64>,
    /// Bias added to `dt` before the softplus.
    pub dt_bias: Vec<f64>,
}

/// One token's inputs for one row (all heads of one layer).
#[derive(Clone, Debug, PartialEq)]
pub struct StepInput {
    /// Raw step size per head (before bias and softplus), `[heads]`.
    pub dt: Vec<f64>,
    /// Input per value head, `[heads][dv]`.
    pub x: Vec<f64>,
    /// Key (`B`) per group, `[groups][dk]`.
    pub b: Vec<f64>,
    /// Query (`C`) per group, `[groups][dk]`.
    pub c: Vec<f64>,
    /// Optional output gate per value head, `[heads][dv]`.
    pub z: Option<Vec<f64>>,
}

/// Per-slot SSM states: `[slot][head][dv][dk]`, slot 0 being the padding slot.
#[derive(Clone, Debug, PartialEq)]
pub struct SlotStates {
    shape: ModelShape,
    data: Vec<f64>,
}

impl SlotStates {
    /// `slots` zero states (slot 0 included) for `shape`.
    pub fn zeros(shape: ModelShape, slots: usize) -> Self {
        SlotStates {
            shape,
            data: vec![0.0; slots * shape.heads * shape.state_elems()],
        }
    }

    /// The head layout.
    pub fn shape(&self) -> ModelShape {
        self.shape
    }

    /// Number of slots, the padding slot included.
    pub fn slots(&self) -> usize {
        self.data.len() / (self.shape.heads * self.shape.state_elems())
    }

    /// All heads of one slot, `[head][dv][dk]`.
    pub fn slot(&self, slot: usize) -> &[f64] {
        let n = self.shape.heads * self.shape.state_elems();
        &self.data[slot * n..(slot + 1) * n]
    }

    /// All heads of one slot, mutable.
    pub fn slot_mut(&mut self, slot: usize) -> &mut [f64] {
        let n = self.shape.heads * self.shape.state_elems();
        &mut self.data[slot * n..(slot + 1) * n]
    }
}

/// `ln(1 + eˣ)`, accurate for large and very negative `x`.
pub fn softplus(x: f64) -> f64 {
    if x > 30.0 {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

/// `x · sigmoid(x)`.
pub fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// One decode step of the plain recurrence for a batch: row `r` updates the state in slot
/// `slots[r]` with `inputs[r]` and writes its `[heads][dv]` outputs to
/// `out[r * heads * dv ..]`. Padding rows (slot 0) are skipped entirely.
pub fn recurrent_step(
    params: &Mamba2Params,
    states: &mut SlotStates,
    slots: &[usize],
    inputs: &[StepInput],
    out: &mut [f64],
) {
    let shape = states.shape();
    let (dv, dk) = (shape.dv, shape.dk);
    check_batch(shape, params, states.slots(), slots, inputs.len(), out.len(), 1);
    for (r, (&slot, input)) in slots.iter().zip(inputs).enumerate() {
        if slot == 0 {
            continue;
        }
        check_input(shape, input);
        let state = states.slot_mut(slot);
        for h in 0..shape.heads {
            let g = shape.group_of(h);
            let dtp = softplus(input.dt[h] + params.dt_bias[h]);
            let alpha = (dtp * params.a[h]).exp();
            let k = &input.b[g * dk..(g + 1) * dk];
            let q = &input.c[g * dk..(g + 1) * dk];
            let s = &mut state[h * dv * dk..(h + 1) * dv * dk];
            let y = &mut out[(r * shape.heads + h) * dv..(r * shape.heads + h + 1) * dv];
            for (i, yi) in y.iter_mut().enumerate() {
                let vi = dtp * input.x[h * dv + i];
                let row = &mut s[i * dk..(i + 1) * dk];
                for (sij, kj) in row.iter_mut().zip(k) {
                    *sij = alpha * *sij + vi * kj;
                }
                *yi = dot(row, q);
            }
            finish_output(y, params, input, h, dv);
        }
    }
}

/// `y ← y + D x`, then `y ← y · silu(z)` when the input has a gate.
fn finish_output(y: &mut [f64], params: &Mamba2Params, input: &StepInput, h: usize, dv: usize) {
    for (i, yi) in y.iter_mut().enumerate() {
        *yi += params.d[h] * input.x[h * dv + i];
        if let Some(z) = &input.z {
            *yi *= silu(z[h * dv + i]);
        }
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Checks the batch-level lengths (`out_per_row` output vectors of `[heads][dv]` per row) and
/// that the non-padding slots are distinct and in range.
fn check_batch(
    shape: ModelShape,
    params: &Mamba2Params,
    n_slots: usize,
    slots: &[usize],
    rows: usize,
    out_len: usize,
    out_per_row: usize,
) {
    assert!(params.a.len() == shape.heads && params.d.len() == shape.heads);
    assert_eq!(params.dt_bias.len(), shape.heads);
    assert_eq!(slots.len(), rows, "one slot index per row");
    assert_eq!(out_len, rows * out_per_row * shape.heads * shape.dv, "output length");
    let mut seen = vec![false; n_slots];
    for &s in slots.iter().filter(|&&s| s != 0) {
        assert!(s < n_slots, "slot {s} out of range");
        assert!(!seen[s], "slot {s} used by two rows");
        seen[s] = true;
    }
}

fn check_input(shape: ModelShape, input: &StepInput) {
    assert_eq!(input.dt.len(), shape.heads);
    assert_eq!(input.x.len(), shape.heads * shape.dv);
    assert_eq!(input.b.len(), shape.groups * shape.dk);
    assert_eq!(input.c.len(), shape.groups * shape.dk);
    if let Some(z) = &input.z {
        assert_eq!(z.len(), shape.heads * shape.dv);
    }
}
