//! Conventional Mamba-2 decode: one launch per step, the state read and written every step.

use super::{mix32, sr_key};
use replay_dsl::prelude::*;

/// One conventional decode step for the batch on an fp32 state: per row, head and value block
/// `S ← α S + (dt'·x) Bᵀ` with `dt' = softplus(dt + dt_bias)`, `α = exp(dt'·A)`, then
/// `y = S C + D x` (times `silu(z)` when `HAS_Z`), `S` written back in place. Program
/// `(row, head, vb)` owns rows `vb·BV ..` of one head's state. Padding rows (slot 0) do nothing.
#[kernel]
pub fn mamba2_decode(
    #[extent(batch * HEADS)] dt: Ptr<bf16>,
    #[extent(batch * HEADS * DV)] x: Ptr<bf16>,
    #[extent(batch * GROUPS * DK)] bmat: Ptr<bf16>,
    #[extent(batch * GROUPS * DK)] cmat: Ptr<bf16>,
    #[extent(batch * HEADS * DV * HAS_Z)] z: Ptr<bf16>,
    #[extent(HEADS)] a: Ptr<f32>,
    #[extent(HEADS)] d: Ptr<f32>,
    #[extent(HEADS)] dt_bias: Ptr<f32>,
    #[extent(batch)] slot_idx: Ptr<i32>,
    #[extent(slots * HEADS * DV * DK)] state: Ptr<f32>,
    #[extent(batch * HEADS * DV)] out: Ptr<bf16>,
    batch: i32,
    slots: i32,
    #[constexpr(default = 128)] HEADS: usize,
    #[constexpr(default = 8)] GROUPS: usize,
    #[constexpr(default = 128)] DK: usize,
    #[constexpr(default = 64)] DV: usize,
    #[constexpr(default = true)] HAS_Z: bool,
    #[constexpr(default = 32)] BV: usize,
) {
    static_assert(GROUPS > 0 && HEADS % GROUPS == 0, "HEADS must be a multiple of GROUPS");
    let row = program_id(0);
    let head = program_id(1);
    let g = head / (HEADS / GROUPS);
    let v = program_id(2) * BV + arange(BV);
    let vmask = v < DV;
    let kk = arange(DK);
    let slot = load(slot_idx + row, true);
    if slot != 0 {
        let dtp = softplus(load(dt + row * HEADS + head, true).cast::<f32>() + load(dt_bias + head, true));
        let alpha = exp(dtp * load(a + head, true));
        let xoff = (row * HEADS + head) * DV + v;
        let xv = load(x + xoff, vmask).cast::<f32>();
        let k = load(bmat + (row * GROUPS + g) * DK + kk, true).cast::<f32>();
        let q = load(cmat + (row * GROUPS + g) * DK + kk, true).cast::<f32>();
        let sptr = state
            + (slot.cast::<i64>() * HEADS + head.cast::<i64>()) * (DV * DK)
            + (v * DK).expand_dims(1)
            + kk.expand_dims(0);
        let smask = vmask.expand_dims(1);
        let s = alpha * load(sptr, smask) + (dtp * xv).expand_dims(1) * k.expand_dims(0);
        let mut y = sum(s * q.expand_dims(0), 1) + load(d + head, true) * xv;
        if HAS_Z {
            y = y * silu(load(z + xoff, vmask).cast::<f32>());
        }
        store(out + xoff, y.cast::<bf16>(), vmask);
        store(sptr, s, smask);
    }
}

/// [`mamba2_decode`] on an fp16 state. The update and the output are computed in f32 from the
/// loaded state; the new state is written with stochastic rounding when `SR` (else
/// round-to-nearest). The random bits of the element at flat index `e` of `state` are
/// `mix32(e ^ sr_key(seed, step))` (a 32-bit hash of seed, step and element index, see
/// [`super::sr_bits_host`]): pass a different `step` every decode step.
#[kernel]
pub fn mamba2_decode_f16(
    #[extent(batch * HEADS)] dt: Ptr<bf16>,
    #[extent(batch * HEADS * DV)] x: Ptr<bf16>,
    #[extent(batch * GROUPS * DK)] bmat: Ptr<bf16>,
    #[extent(batch * GROUPS * DK)] cmat: Ptr<bf16>,
    #[extent(batch * HEADS * DV * HAS_Z)] z: Ptr<bf16>,
    #[extent(HEADS)] a: Ptr<f32>,
    #[extent(HEADS)] d: Ptr<f32>,
    #[extent(HEADS)] dt_bias: Ptr<f32>,
    #[extent(batch)] slot_idx: Ptr<i32>,
    #[extent(slots * HEADS * DV * DK)] state: Ptr<f16>,
    #[extent(batch * HEADS * DV)] out: Ptr<bf16>,
    batch: i32,
    slots: i32,
    seed: u32,
    step: u32,
    #[constexpr(default = 128)] HEADS: usize,
    #[constexpr(default = 8)] GROUPS: usize,
    #[constexpr(default = 128)] DK: usize,
    #[constexpr(default = 64)] DV: usize,
    #[constexpr(default = true)] HAS_Z: bool,
    #[constexpr(default = true)] SR: bool,
    #[constexpr(default = 32)] BV: usize,
) {
    static_assert(GROUPS > 0 && HEADS % GROUPS == 0, "HEADS must be a multiple of GROUPS");
    let row = program_id(0);
    let head = program_id(1);
    let g = head / (HEADS / GROUPS);
    let v = program_id(2) * BV + arange(BV);
    let vmask = v < DV;
    let kk = arange(DK);
    let slot = load(slot_idx + row, true);
    if slot != 0 {
        let dtp = softplus(load(dt + row * HEADS + head, true).cast::<f32>() + load(dt_bias + head, true));
        let alpha = exp(dtp * load(a + head, true));
        let xoff = (row * HEADS + head) * DV + v;
        let xv = load(x + xoff, vmask).cast::<f32>();
        let k = load(bmat + (row * GROUPS + g) * DK + kk, true).cast::<f32>();
        let q = load(cmat + (row * GROUPS + g) * DK + kk, true).cast::<f32>();
        let base = (slot.cast::<i64>() * HEADS + head.cast::<i64>()) * (DV * DK);
        let elem = (v * DK).expand_dims(1) + kk.expand_dims(0);
        let sptr = state + base + elem;
        let smask = vmask.expand_dims(1);
        let s = alpha * load(sptr, smask).cast::<f32>() + (dtp * xv).expand_dims(1) * k.expand_dims(0);
        let mut y = sum(s * q.expand_dims(0), 1) + load(d + head, true) * xv;
        if HAS_Z {
            y = y * silu(load(z + xoff, vmask).cast::<f32>());
        }
        store(out + xoff, y.cast::<bf16>(), vmask);
        if SR {
            let index = base.cast::<u32>() + elem.cast::<u32>();
            let bits = mix32(index ^ sr_key(seed, step));
            store(sptr, s.cast_stochastic::<f16>(bits), smask);
        } else {
            store(sptr, s.cast::<f16>(), smask);
        }
    }
}
