//! Conventional speculative decoding, as serving engines do it today: the recurrence runs over
//! the drafts and writes one full state snapshot per draft token.

use super::decode::{emit_output, program, state_elems, token_inputs, update};
use replay_dsl::prelude::*;

/// Verifies `n_drafts` draft tokens per row with the plain recurrence: the state of slot
/// `slot_idx[row]` is read once, and after draft `s` (`S ← α_s S + v_s k_sᵀ`,
/// `y_s = S q_s + D x_s`, times `silu(z_s)` when `HAS_Z`) the whole state is written to slot
/// `snap_idx[row, s]` — `1` read and `n_drafts` writes of the state. Accepting `a` drafts then
/// makes `snap_idx[row, a-1]` the row's state (a slot-index move by the state manager).
/// Padding rows (`slot_idx[row] == 0`) do nothing; snapshot slots must be distinct and non-zero.
/// Programs tile the state as the decode kernels do (see [`super::decode`]): program
/// `(blk, row)` of the `(HEADS·DV / BV, batch, 1)` grid owns the flat state rows `blk·BV ..`
/// (`BV` must divide `(HEADS/GROUPS)·DV`).
#[kernel]
pub fn mamba2_spec_baseline(
    #[extent(batch * n_drafts * HEADS)] dt: Ptr<bf16>,
    #[extent(batch * n_drafts * HEADS * DV)] x: Ptr<bf16>,
    #[extent(batch * n_drafts * GROUPS * DK)] bmat: Ptr<bf16>,
    #[extent(batch * n_drafts * GROUPS * DK)] cmat: Ptr<bf16>,
    #[extent(batch * n_drafts * HEADS * DV * HAS_Z)] z: Ptr<bf16>,
    #[extent(HEADS)] a: Ptr<f32>,
    #[extent(HEADS)] d: Ptr<f32>,
    #[extent(HEADS)] dt_bias: Ptr<f32>,
    #[extent(batch)] slot_idx: Ptr<i32>,
    #[extent(batch * n_drafts)] snap_idx: Ptr<i32>,
    #[extent(slots * HEADS * DV * DK)] state: Ptr<f32>,
    #[extent(batch * n_drafts * HEADS * DV)] out: Ptr<bf16>,
    batch: i32,
    slots: i32,
    n_drafts: i32,
    #[constexpr(default = 128)] HEADS: usize,
    #[constexpr(default = 8)] GROUPS: usize,
    #[constexpr(default = 128)] DK: usize,
    #[constexpr(default = 64)] DV: usize,
    #[constexpr(default = true)] HAS_Z: bool,
    #[constexpr(default = 32)] BV: usize,
) {
    let p = program(slot_idx, HEADS, GROUPS, DK, DV, BV);
    if p.slot != 0 {
        let elem = state_elems(&p);
        let mut s = load(state + p.slot.cast::<i64>() * (HEADS * DV * DK) + elem, true);
        for t in range(0, n_drafts) {
            let tok = p.row * n_drafts + t;
            let dtp = softplus(load(dt + tok * HEADS + p.head, true).cast::<f32>() + load(dt_bias + p.head, true));
            let tk = token_inputs(&p, tok, dtp, x, bmat, cmat);
            s = update(&tk, exp(dtp * load(a + p.head, true)), s);
            emit_output(&tk, s, || load(d + p.head, true), z, out, HAS_Z);
            let snap = load(snap_idx + tok, true).cast::<i64>();
            store(state + snap * (HEADS * DV * DK) + elem, s, true);
        }
    }
}
