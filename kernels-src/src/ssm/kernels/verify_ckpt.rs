//! The other two launches of a split verification: the checkpoint's product `S_ckpt Q`
//! streamed (concurrently with the records' launch), then the outputs combined.

use super::head_loop::{group_queries, head_loop, HeadLoads, HeadRows};
use super::verify::{draft_columns, gated};
use replay_dsl::prelude::*;

/// The checkpoint's part of a split verification: `y_ckpt = S_ckpt q_s` (f32) for every draft
/// `s < n_drafts` of every live row. It reads no counters and no records, and nothing that
/// [`super::verify::mamba2_verify`] with `SPLIT` (the records' part) writes, so the two
/// launches may run concurrently; [`mamba2_verify_combine`] then forms the outputs.
///
/// Program `(vb, hb, row)` of the `(⌈DV/BV⌉, HEADS/HB, batch)` grid handles the `HB` value heads
/// `hb·HB ..` (one group) and value rows `vb·BV ..` of batch row `row`; padding rows (slot 0)
/// do nothing. One `dot(S, Qᵀ)` `[BV, tq]` per head (`tq` = `T` rounded up, columns past
/// `n_drafts` masked), the queries loaded once per program; `PREFETCH` and `ASYNC` pipeline the
/// heads as in the fused verification; with `LP` the rows come from the f16 copy `ckpt_lp` (one
/// f16 tensor-core term).
#[kernel]
pub fn mamba2_verify_ckpt(
    #[extent(batch * n_drafts * GROUPS * DK)] cmat: Ptr<bf16>,
    #[extent(batch)] slot_idx: Ptr<i32>,
    #[extent(slots * HEADS * DV * DK)] ckpt: Ptr<f32>,
    #[extent(slots * HEADS * DV * DK * LP)] ckpt_lp: Ptr<f16>,
    #[extent(batch * n_drafts * HEADS * DV)] y_ckpt: Ptr<f32>,
    batch: i32,
    slots: i32,
    n_drafts: i32,
    #[constexpr(default = 128)] HEADS: usize,
    #[constexpr(default = 8)] GROUPS: usize,
    #[constexpr(default = 128)] DK: usize,
    #[constexpr(default = 64)] DV: usize,
    #[constexpr(default = 4)] T: usize,
    #[constexpr(default = 16)] BV: usize,
    #[constexpr(default = 4)] HB: usize,
    #[constexpr(default = false)] PREFETCH: bool,
    #[constexpr(default = false)] ASYNC: bool,
    #[constexpr(default = false)] LP: bool,
) {
    static_assert(GROUPS > 0 && HEADS % GROUPS == 0, "HEADS must be a multiple of GROUPS");
    static_assert(HB > 0 && (HEADS / GROUPS) % HB == 0, "HB must divide HEADS / GROUPS");
    static_assert(T >= 1, "at least one draft");
    let _ = (batch, slots);
    let tq = draft_columns(T);
    let row = program_id(2);
    let head0 = program_id(1) * HB;
    let g = head0 / (HEADS / GROUPS);
    let n = n_drafts;
    let slot = load(slot_idx + row, true);
    if slot != 0 {
        let stages_f32 = (ASYNC && !LP).then(|| shared::<f32>(2, &[BV, DK]));
        let stages_f16 = (ASYNC && LP).then(|| shared::<f16>(2, &[BV, DK]));
        let slot_elems = slot.cast::<i64>() * (HEADS * DV * DK);
        // Draft columns s: the token each reads (in bounds past n, never stored).
        let s = arange(tq);
        let live = s < n;
        let tok_s = row * n + minimum(n - 1, s);
        let kk = arange(DK);
        let q_bf = group_queries(cmat, tok_s, g, (GROUPS, DK), kk);
        let v = program_id(0) * BV + arange(BV);
        let vmask = if DV % BV == 0 { full([BV], true) } else { v < DV };
        let vm = vmask.expand_dims(1);
        // Element offsets of (value row, draft) of a head in a [tokens, HEADS, DV] buffer.
        let xoff = |head: Tile<i32>| (tok_s * (HEADS * DV) + head * DV).expand_dims(0) + v.expand_dims(1);
        let soff_of = |head: Tile<i32>| ((head * DV + v) * DK).expand_dims(1) + kk.expand_dims(0);
        let (state, state_lp) = (ckpt + slot_elems, ckpt_lp + slot_elems);
        let sptr_of = |head: Tile<i32>| state + soff_of(head);
        let lp_of = |head: Tile<i32>| state_lp + soff_of(head);
        let nothing = |_: Tile<i32>, _: Tile<bool>| {};
        let loads = || HeadLoads {
            own: &nothing,
            ahead: &nothing,
        };
        let per_head = |hc: Tile<i32>, sq: Option<&dyn Fn() -> Tile<f32>>, _: (), _: ()| {
            let sq = sq.expect("the checkpoint's head loop has rows");
            store(y_ckpt + xoff(head0 + hc), sq(), vm & live.expand_dims(0));
        };
        if LP {
            let rows = HeadRows {
                ptr: &lp_of,
                mask: vm,
                q: q_bf.cast::<f32>().cast::<f16>(),
                stages: stages_f16,
            };
            head_loop(head0, HB, PREFETCH, Some(rows), loads(), &per_head);
        } else {
            let rows = HeadRows {
                ptr: &sptr_of,
                mask: vm,
                q: q_bf.cast::<f32>(),
                stages: stages_f32,
            };
            head_loop(head0, HB, PREFETCH, Some(rows), loads(), &per_head);
        }
    }
}

/// The last launch of a split verification: `out = (γ_{0:h+s} · y_ckpt + y_part)` (times
/// `silu(z)` when `HAS_Z`) in bf16, elementwise over the `[n_drafts, HEADS, DV]` outputs of each
/// live row (`gamma` and `y_part` from the records' launch, `y_ckpt` from
/// [`mamba2_verify_ckpt`]); padding rows (slot 0) are not written. Program `(b, row)` of the
/// `(⌈T·HEADS·DV/BLOCK⌉, batch)` grid takes `BLOCK` consecutive outputs of row `row`.
#[kernel]
pub fn mamba2_verify_combine(
    #[extent(batch * n_drafts * HEADS * DV * HAS_Z)] z: Ptr<bf16>,
    #[extent(batch)] slot_idx: Ptr<i32>,
    #[extent(batch * n_drafts * HEADS * DV)] y_ckpt: Ptr<f32>,
    #[extent(batch * n_drafts * HEADS * DV)] y_part: Ptr<f32>,
    #[extent(batch * n_drafts * HEADS)] gamma: Ptr<f32>,
    #[extent(batch * n_drafts * HEADS * DV)] out: Ptr<bf16>,
    batch: i32,
    n_drafts: i32,
    #[constexpr(default = 128)] HEADS: usize,
    #[constexpr(default = 64)] DV: usize,
    #[constexpr(default = true)] HAS_Z: bool,
    #[constexpr(default = 1024)] BLOCK: usize,
) {
    let _ = batch;
    let row = program_id(1);
    let slot = load(slot_idx + row, true);
    if slot != 0 {
        let per_row = n_drafts * (HEADS * DV) as i32;
        let idx = program_id(0) * BLOCK + arange(BLOCK);
        let m = idx < per_row;
        // Output (row, s, head, v) at flat offset ((row·n + s)·HEADS + head)·DV + v.
        let off = row * per_row + idx;
        let gam = load(gamma + off / DV as i32, m);
        let y = gam * load(y_ckpt + off, m) + load(y_part + off, m);
        let z_s = HAS_Z.then(|| load(z + off, m));
        store(out + off, gated(y, z_s).cast::<bf16>(), m);
    }
}
