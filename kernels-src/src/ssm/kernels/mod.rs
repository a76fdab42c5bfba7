//! The Mamba-2 decode kernels of ReplaySSM, written in the tile language, and the memory layout
//! they share with the state manager.
//!
//! | kernel | what one launch does | grid |
//! |---|---|---|
//! | [`decode::mamba2_decode`] | conventional step, fp32 state: read `S`, `S ← αS + v kᵀ`, `y = S q + D x` (· silu z), write `S` | `(HEADS·DV/BV, batch, 1)` |
//! | [`decode::mamba2_decode_f16`] | the same on an fp16 state, written with stochastic rounding (`SR`) or round-to-nearest | `(HEADS·DV/BV, batch, 1)` |
//! | [`replay::mamba2_replay_step`] | one replay decode step for the batch: non-flush rows read the checkpoint and the ring and append the step's record; flush rows fold the window into the checkpoint; the advanced counters go to the second counter buffer | `(batch, HEADS·DV/BV, 1)` |
//! | [`verify::mamba2_verify`] | output-only verification of `n_drafts ≤ T` drafts (the checkpoint read, never written) | `(⌈DV/BV⌉, HEADS/HB, batch)` |
//! | [`fold::mamba2_fold`] | a verification's pre-flush: the committed records of the rows whose flag is set folded into their checkpoints (with `VERIFY`, those rows' drafts verified from the folded rows) | `(⌈DV/BV⌉, HEADS/HB, batch)` |
//! | [`commit::mamba2_commit`] | after a verification: advances `h` by the accepted counts (in place) and computes the next flush flags | `⌈batch/BLOCK⌉` |
//! | [`spec_baseline::mamba2_spec_baseline`] | conventional speculative decoding: one state snapshot written per draft | `(HEADS·DV/BV, batch, 1)` |
//!
//! The conventional kernels and the replay step tile a slot's state by flat rows (`HEADS·DV`
//! rows of `DK`, `BV` rows per program, `BV` dividing `(HEADS/GROUPS)·DV`: see [`decode`]); the
//! verification and its fold by `HB` heads and `BV` value rows (when `BV` does not divide `DV`,
//! the last value block masked, or with `TAIL` in a smaller tile of its own rows). The grids order
//! programs as measured fastest (H200, B = 256): a slot's tiles first for the kernels that
//! stream the state (the conventional ones 90 → 96 % of copy bandwidth, the verification cycle
//! −7 % on nemotron3-nano-4b), the batch rows first for the replay step (3 % faster than a
//! slot's tiles first there).
//!
//! # Memory layout
//!
//! Shapes are constexprs (`HEADS`, `GROUPS`, `DK`, `DV`, `L`, `T`, `HAS_Z`) so the compiler sees
//! static shapes; `batch`, `slots` and `n_drafts` are runtime. Value head `hd` reads group
//! `hd / (HEADS / GROUPS)`. All arrays are dense, row-major, C order.
//!
//! **Per-step inputs** (bf16 activations, as the serving engine produces them). One decode step:
//! `dt [batch, HEADS]`, `x [batch, HEADS, DV]`, `B [batch, GROUPS, DK]`, `C [batch, GROUPS, DK]`,
//! `z [batch, HEADS, DV]` (read only when `HAS_Z`), output `y [batch, HEADS, DV]` (bf16).
//! Speculative kernels take `n_drafts` tokens per row, token-major inside a row:
//! `dt [batch, n_drafts, HEADS]`, `x, z, y [batch, n_drafts, HEADS, DV]`,
//! `B, C [batch, n_drafts, GROUPS, DK]`.
//! Parameters (f32): `A [HEADS]` (`A < 0`), `D [HEADS]`, `dt_bias [HEADS]`.
//! Row → slot: `slot_idx: i32 [batch]`; slot 0 is the padding slot: a row whose slot is 0 reads
//! no input and writes nothing (its output rows keep whatever they held), and nothing ever
//! reads or writes slot 0's state, ring or counters. Non-zero slots of one launch are distinct.
//!
//! **State** (conventional kernels) and **checkpoint** (replay kernels): `[slots, HEADS, DV, DK]`,
//! f32 (or f16 for [`decode::mamba2_decode_f16`]) — the serving engines' SSM-cache layout.
//!
//! **Record ring** per slot, capacity `CAP = L + T` (`T` = the most drafts one verification may
//! carry; `T = 0` for pure decoding), one record per token and all heads:
//! - `rec_dt: f32 [slots, CAP, HEADS]` — `dt' = softplus(dt + dt_bias)`,
//! - `rec_x: bf16 [slots, CAP, HEADS, DV]` — `x` as given (`v = dt'·x` is formed on read),
//! - `rec_b: bf16 [slots, CAP, GROUPS, DK]` — `B` (`k = B`), once per group.
//!
//! **Counters** `meta: i32 [slots, 4]` (one 16-byte line per slot, shared by every layer of the
//! model, since all layers advance together), kept twice (`meta` and `meta_out` of
//! [`replay::mamba2_replay_step`], see the decode loop below):
//! - `meta[s][0]` (`META_START`) — ring position of the first committed record;
//! - `meta[s][1]` (`META_H`) — `h`, the number of committed records after the checkpoint
//!   (record `j` of the window, `0 ≤ j < h`, lives at position `(start + j) % CAP`);
//! - `meta[s][2]` (`META_FLUSH`) — the flush flag of the *next* launch, computed by the
//!   launch before it ([`replay::mamba2_replay_step`] or [`commit::mamba2_commit`], by the one
//!   rule [`commit::advance_counters`]): for a decode step `h + 1 ≥ L`, for a verification
//!   of `n` drafts `h + n > L`;
//! - `meta[s][3]` — reserved, 0 (a decode step carries it over).
//!
//! **Low-precision checkpoint** (kernels' `LP`, optional): `ckpt_lp: f16 [slots, HEADS, DV,
//! DK]`, always the round-to-nearest f16 of `ckpt` (ReplaySSM's two state precisions): every
//! kernel that writes `ckpt` (a flush, the fold) writes both, the recurrence reads only `ckpt`,
//! and the non-flush steps and the output-only verification read `ckpt_lp` (half the bytes;
//! the verification's `S Q` product one f16 tensor-core term instead of three tf32 ones), so
//! its error never accumulates.
//!
//! The logical state of slot `s` is `S_h = γ_h S_ckpt + Σ_{j<h} γ_{j+1:h} v_j k_jᵀ`.
//! A fresh slot holds its initial state as checkpoint, `start = 0`, `h = 0` and the flag for
//! its first launch ([`initial_flush_flag`]).
//!
//! # The decode loop (no host synchronisation)
//! The counters are kept in two buffers, `A` and `B`; one is *current*. Every program of a
//! launch reads the current counters, so no launch may update them in place while it runs.
//!
//! - **Decode step** — one launch per SSM layer, nothing else: each layer launches
//!   [`replay::mamba2_replay_step`] with `meta` = the current buffer and `meta_out` = the
//!   other one, and `next_drafts` = the next step's kind (`0`: a decode step; `n`: a
//!   verification of `n` drafts). One program per row (`program_id(1) == 0`) writes the row's
//!   advanced counters to `meta_out` (`h + 1`, or `0` after a flush, `start` kept, the next
//!   flag), which commits the record the step appended;
//!   padding rows write nothing. Every layer of the step reads the same current buffer and
//!   writes the same values to the other, so the layers of a model may share both. After the
//!   step (all layers) the other buffer becomes current.
//! - **Verification** — [`verify::mamba2_verify`] then [`fold::mamba2_fold`] per layer read
//!   the current buffer (the fold acts on the rows whose flag says so); after the sampler,
//!   **one** [`commit::mamba2_commit`] for the whole model (`after_verify = 1`, the accepted
//!   counts in device memory) advances the current buffer in place and sets the flags for the
//!   next step's kind. Which buffer is current does not change.
//! - Admitting a sequence writes its counters into the current buffer; nothing needs the
//!   other buffer's stale line of that slot, which the next decode step overwrites.
//!
//! Both kernels apply [`commit::advance_counters`], so the rule is written once;
//! [`commit::mamba2_commit`] with `after_verify = 0` applies the decode rule in place (for a
//! loop that keeps a single buffer, at the cost of a second launch per step). A CUDA graph
//! bakes the buffers into its launches: a graph of decode steps must hold an even number of
//! them, so that every replay leaves the same buffer current.
//!
//! # Numerics
//! Decay products are `exp(A · Σ dt')` with every sum a plain running sum of the positive
//! `dt'` over exactly its range (a `cumsum` over records ordered newest-first, shifted by one
//! record), never a ratio of prefix products nor a difference of prefix sums. All state
//! arithmetic is f32 (products `k_jᵀ q` and `S_ckpt q` in f32 from bf16 inputs); outputs are
//! rounded to bf16 once.

pub mod commit;
pub mod decode;
mod drafts;
pub mod fold;
mod head_loop;
pub mod replay;
pub mod spec_baseline;
pub mod value_blocks;
pub mod verify;

use replay_dsl::prelude::*;

/// Slot `slot`'s record ring and checkpoint: the first element of each (layout above).
pub(super) struct SlotBuffers {
    /// `rec_dt` of the slot, `[CAP, HEADS]`.
    pub dt: Tile<Ptr<f32>>,
    /// `rec_x` of the slot, `[CAP, HEADS, DV]`.
    pub x: Tile<Ptr<bf16>>,
    /// `rec_b` of the slot, `[CAP, GROUPS, DK]`.
    pub b: Tile<Ptr<bf16>>,
    /// The slot's checkpoint, `[HEADS, DV, DK]`.
    pub ckpt: Tile<Ptr<f32>>,
    /// The slot's low-precision checkpoint, `[HEADS, DV, DK]` (used only with `LP`).
    pub ckpt_lp: Tile<Ptr<f16>>,
}

/// [`SlotBuffers`] of `slot` (offsets in 64 bits; `cap = L + T`, then the shape's
/// `HEADS`, `GROUPS`, `DK`, `DV`).
#[kernel_fn]
#[allow(clippy::too_many_arguments)]
pub(super) fn slot_buffers(
    slot: Tile<i32>,
    rec_dt: Tile<Ptr<f32>>,
    rec_x: Tile<Ptr<bf16>>,
    rec_b: Tile<Ptr<bf16>>,
    ckpt: Tile<Ptr<f32>>,
    ckpt_lp: Tile<Ptr<f16>>,
    cap: usize,
    heads: usize,
    groups: usize,
    dk: usize,
    dv: usize,
) -> SlotBuffers {
    let s = slot.cast::<i64>();
    SlotBuffers {
        dt: rec_dt + s * (cap * heads),
        x: rec_x + s * (cap * heads * dv),
        b: rec_b + s * (cap * groups * dk),
        ckpt: ckpt + s * (heads * dv * dk),
        ckpt_lp: ckpt_lp + s * (heads * dv * dk),
    }
}

/// `meta[s][META_START]`: ring position of the first committed record of slot `s`.
pub const META_START: usize = 0;
/// `meta[s][META_H]`: committed records `h` of slot `s`.
pub const META_H: usize = 1;
/// `meta[s][META_FLUSH]`: the flush flag of the next launch touching slot `s` (0 or 1).
pub const META_FLUSH: usize = 2;
/// `i32`s per slot in `meta`.
pub const META_WORDS: usize = 4;

/// The flush flag of a slot with `h` committed records, for a next launch that is a decode
/// step (`next_drafts = 0`: the window folds when the current token fills it, `h + 1 ≥ L`) or a
/// verification of `next_drafts` drafts (`h + next_drafts > L`). [`commit::mamba2_commit`]
/// computes exactly this on the device.
pub fn initial_flush_flag(h: usize, next_drafts: usize, window: usize) -> bool {
    if next_drafts == 0 {
        h + 1 >= window
    } else {
        h + next_drafts > window
    }
}

/// Ring position `p % cap` of an offset `p < 2·cap` from a slot's ring start (one wrap).
#[kernel_fn]
pub(super) fn ring_position(p: Tile<i32>, cap: usize) -> Tile<i32> {
    select(p >= cap as i32, p - cap as i32, p)
}

/// Rows of the record tiles: a power of two ≥ `cap` (and ≥ 4, the least `K` of `dot`).
pub const fn record_rows(cap: usize) -> usize {
    let r = cap.next_power_of_two();
    if r < 4 {
        4
    } else {
        r
    }
}

/// `lowbias32` (C. Wellons): a 32-bit integer bijection with good avalanche, in the DSL.
pub fn mix32(x: Tile<u32>) -> Tile<u32> {
    let x = x ^ (x >> 16u32);
    let x = x * 0x21f0_aaadu32;
    let x = x ^ (x >> 15u32);
    let x = x * 0x735a_2d97u32;
    x ^ (x >> 15u32)
}

/// The per-launch key of the stochastic-rounding bits: `mix32(seed ^ mix32(step ^ 0x9e3779b9))`.
pub fn sr_key(seed: Tile<u32>, step: Tile<u32>) -> Tile<u32> {
    mix32(seed ^ mix32(step ^ 0x9e37_79b9u32))
}

/// Host mirror of [`mix32`].
pub fn mix32_host(x: u32) -> u32 {
    let x = x ^ (x >> 16);
    let x = x.wrapping_mul(0x21f0_aaad);
    let x = x ^ (x >> 15);
    let x = x.wrapping_mul(0x735a_2d97);
    x ^ (x >> 15)
}

/// Host mirror of the random bits [`decode::mamba2_decode_f16`] uses for the state element at
/// flat index `index` of the state buffer: `mix32(index ^ sr_key(seed, step))`.
pub fn sr_bits_host(seed: u32, step: u32, index: u64) -> u32 {
    let key = mix32_host(seed ^ mix32_host(step ^ 0x9e37_79b9));
    mix32_host(index as u32 ^ key)
}
