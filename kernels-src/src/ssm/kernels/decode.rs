//! Conventional Mamba-2 decode: one launch per step, the state read and written every step.
//!
//! A slot's state `[HEADS, DV, DK]` is tiled by *flat rows*: viewed as `HEADS·DV` rows of `DK`,
//! program `(blk, row)` of the `(HEADS·DV / BV, batch, 1)` grid owns rows
//! `r = blk·BV + [0, BV)`, row `r` being value row `r % DV` of head `r / DV`. `BV` divides
//! `(HEADS/GROUPS)·DV`, so a program's rows lie in one group (one `B` and one `C` vector) and
//! no row is masked, whatever `DV`. The tile index is the grid's first axis, so programs
//! launched one after the other stream one slot's state in address order (H200, B = 256:
//! 90 % → 96 % of copy bandwidth against batch rows first).
//!
//! The per-program computation is written once, in `#[kernel_fn]` helpers shared by the two
//! decode kernels and by [`super::spec_baseline::mamba2_spec_baseline`]: `program` (the
//! program's coordinates and slot), `state_elems` (its state tile's offsets in a slot),
//! `token_inputs` (one token's `x`, `k`, `q`), `decode_inputs` (`dt'`, `α` and the token inputs
//! of a decode step), `update` (the new state tile) and `emit_output` (`y`, stored).

use super::{mix32, sr_key};
use replay_dsl::prelude::*;

/// The coordinates of program `(blk, row)` of a `(HEADS·DV / BV, batch, 1)` grid, its slot and
/// the shapes it works with.
pub(super) struct Program {
    /// Batch row.
    pub row: Tile<i32>,
    /// The program's flat state rows `r = blk·BV + [0, BV)` (`[BV]`, `r < HEADS·DV`).
    pub r: Tile<i32>,
    /// Value head of each row, `r / DV` (`[BV]`); a scalar, the program's one head, when `BV`
    /// divides `DV` (per-head values are then loaded once, not per row).
    pub head: Tile<i32>,
    /// Group of the program's rows (`head / (HEADS / GROUPS)`, the same for all of them).
    pub g: Tile<i32>,
    /// `[0, DK)`.
    pub kk: Tile<i32>,
    /// `slot_idx[row]` (0: a padding row).
    pub slot: Tile<i32>,
    /// `HEADS`.
    pub heads: usize,
    /// `GROUPS`.
    pub groups: usize,
    /// `DK`.
    pub dk: usize,
    /// `DV`.
    pub dv: usize,
}

/// This program's [`Program`] (`heads` … `bv`: the kernel's `HEADS` … `BV`); checks that
/// `HEADS` is a multiple of `GROUPS` and that `BV` divides `(HEADS/GROUPS)·DV`.
#[kernel_fn]
pub(super) fn program(
    slot_idx: Tile<Ptr<i32>>,
    heads: usize,
    groups: usize,
    dk: usize,
    dv: usize,
    bv: usize,
) -> Program {
    static_assert(groups > 0 && heads % groups == 0, "HEADS must be a multiple of GROUPS");
    let group_rows = heads / groups * dv;
    static_assert(
        bv > 0 && group_rows % bv == 0,
        "BV must divide (HEADS/GROUPS)·DV (the state rows of one group), so that a program's \
         flat rows lie in one group and none is masked",
    );
    let row = program_id(1);
    let blk = program_id(0);
    let r = blk * bv + arange(bv);
    let head = if dv % bv == 0 { blk / (dv / bv) } else { r / dv };
    let g = blk / (group_rows / bv);
    let kk = arange(dk);
    let slot = load(slot_idx + row, true);
    Program {
        row,
        r,
        head,
        g,
        kk,
        slot,
        heads,
        groups,
        dk,
        dv,
    }
}

/// The offset of program `p`'s state tile in a slot, `r·DK + kk` (`[BV, DK]`), `r·DK + c`
/// being the flat index of element `c` of state row `r`.
#[kernel_fn]
pub(super) fn state_elems(p: &Program) -> Tile<i32> {
    (p.r * p.dk).expand_dims(1) + p.kk.expand_dims(0)
}

/// The inputs of token `tok` (a row of the token-major inputs) for program `p`.
pub(super) struct Token {
    /// `dt' = softplus(dt + dt_bias)` of the token and each row's head (`[BV]`, or a scalar:
    /// see [`Program::head`]).
    pub dtp: Tile<f32>,
    /// Offset of the program's rows in `x`, `z` and `y`, `tok·HEADS·DV + r`.
    pub xoff: Tile<i32>,
    /// `x` of the rows, in f32.
    pub xv: Tile<f32>,
    /// `k = B` of the program's group, in f32.
    pub k: Tile<f32>,
    /// `q = C` of the program's group, in f32.
    pub q: Tile<f32>,
}

/// Loads `x`, `B` and `C` of token `tok` for program `p`, given the token's `dtp`.
#[kernel_fn]
pub(super) fn token_inputs(
    p: &Program,
    tok: Tile<i32>,
    dtp: Tile<f32>,
    x: Tile<Ptr<bf16>>,
    bmat: Tile<Ptr<bf16>>,
    cmat: Tile<Ptr<bf16>>,
) -> Token {
    let xoff = tok * (p.heads * p.dv) + p.r;
    let xv = load(x + xoff, true).cast::<f32>();
    let k = load(bmat + (tok * p.groups + p.g) * p.dk + p.kk, true).cast::<f32>();
    let q = load(cmat + (tok * p.groups + p.g) * p.dk + p.kk, true).cast::<f32>();
    Token { dtp, xoff, xv, k, q }
}

/// The inputs of one decode step for program `p`: `α = exp(dt'·A)` of each row's head (shaped
/// as [`Program::head`]) and the token of row `p.row`.
#[kernel_fn]
pub(super) fn decode_inputs(
    p: &Program,
    dt: Tile<Ptr<bf16>>,
    x: Tile<Ptr<bf16>>,
    bmat: Tile<Ptr<bf16>>,
    cmat: Tile<Ptr<bf16>>,
    a: Tile<Ptr<f32>>,
    dt_bias: Tile<Ptr<f32>>,
) -> (Tile<f32>, Token) {
    let dtp = softplus(load(dt + p.row * p.heads + p.head, true).cast::<f32>() + load(dt_bias + p.head, true));
    let alpha = exp(dtp * load(a + p.head, true));
    (alpha, token_inputs(p, p.row, dtp, x, bmat, cmat))
}

/// The new state tile `α S + (dt'·x) kᵀ` from the previous one `prev` (f32, `[BV, DK]`; `α`
/// per row or a scalar).
#[kernel_fn]
pub(super) fn update(t: &Token, alpha: Tile<f32>, prev: Tile<f32>) -> Tile<f32> {
    per_row(alpha) * prev + (t.dtp * t.xv).expand_dims(1) * t.k.expand_dims(0)
}

/// A per-row value (`[BV]`) as a column of `[BV, DK]` tiles; a scalar as it is.
fn per_row(v: Tile<f32>) -> Tile<f32> {
    if v.rank() == 0 {
        v
    } else {
        v.expand_dims(1)
    }
}

/// `y = S q + D x` (times `silu(z)` when `has_z`) of the state tile `s`, stored to `out` as bf16.
/// `d` gives `D` of each row's head; it is called after `S q`, where a kernel may load it.
#[kernel_fn]
pub(super) fn emit_output<D: FnOnce() -> Tile<f32>>(
    t: &Token,
    s: Tile<f32>,
    d: D,
    z: Tile<Ptr<bf16>>,
    out: Tile<Ptr<bf16>>,
    has_z: bool,
) {
    let mut y = sum(s * t.q.expand_dims(0), 1) + d() * t.xv;
    if has_z {
        y *= silu(load(z + t.xoff, true).cast::<f32>());
    }
    store(out + t.xoff, y.cast::<bf16>(), true);
}

/// One conventional decode step for the batch on an fp32 state: per row and state row
/// `S ← α S + (dt'·x) Bᵀ` with `dt' = softplus(dt + dt_bias)`, `α = exp(dt'·A)` of the row's
/// head, then `y = S C + D x` (times `silu(z)` when `HAS_Z`), `S` written back in place.
/// Program `(blk, row)` of the `(HEADS·DV / BV, batch, 1)` grid owns the flat state rows
/// `blk·BV ..` (`BV` must divide `(HEADS/GROUPS)·DV`). Padding rows (slot 0) do nothing.
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
    let p = program(slot_idx, HEADS, GROUPS, DK, DV, BV);
    if p.slot != 0 {
        let (alpha, t) = decode_inputs(&p, dt, x, bmat, cmat, a, dt_bias);
        let sptr = state + p.slot.cast::<i64>() * (HEADS * DV * DK) + state_elems(&p);
        let s = update(&t, alpha, load(sptr, true));
        emit_output(&t, s, || load(d + p.head, true), z, out, HAS_Z);
        store(sptr, s, true);
    }
}

/// [`mamba2_decode`] on an fp16 state. The update and the output are computed in f32 from the
/// loaded state; the new state is written with stochastic rounding when `SR` (else
/// round-to-nearest). The random bits of the element at flat index `e` of `state` are
/// `mix32(e ^ sr_key(seed, step))` (a 32-bit hash of seed, step and element index, see
/// [`super::sr_bits_host`]): pass a different `step` every decode step. `BV` is 16 by default:
/// ptxas 13.0 holds the 32-row program at 64 registers on sm_100a and spills.
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
    #[constexpr(default = 16)] BV: usize,
) {
    let p = program(slot_idx, HEADS, GROUPS, DK, DV, BV);
    if p.slot != 0 {
        let (alpha, t) = decode_inputs(&p, dt, x, bmat, cmat, a, dt_bias);
        let key = sr_key(seed, step);
        let base = p.slot.cast::<i64>() * (HEADS * DV * DK);
        let elem = state_elems(&p);
        let sptr = state + base + elem;
        let s = update(&t, alpha, load(sptr, true).cast::<f32>());
        emit_output(&t, s, || load(d + p.head, true), z, out, HAS_Z);
        if SR {
            let index = base.cast::<u32>() + elem.cast::<u32>();
            let bits = mix32(index ^ key);
            store(sptr, s.cast_stochastic::<f16>(bits), true);
        } else {
            store(sptr, s.cast::<f16>(), true);
        }
    }
}
