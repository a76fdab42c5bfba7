//! The replay decode step (ReplaySSM algorithm 1) for a whole batch in one launch.

use super::commit::advance_counters;
use super::{record_rows, slot_buffers};
use replay_dsl::prelude::*;

/// The most value heads `BV` consecutive flat state rows (starting at a multiple of `BV`) touch
/// when a head has `DV` rows: the program's head lanes.
pub const fn head_lanes(bv: usize, dv: usize) -> usize {
    if dv.is_multiple_of(bv) {
        1
    } else if bv.is_multiple_of(dv) {
        bv / dv
    } else {
        (bv + dv - 2) / dv + 1
    }
}

/// `load`'s tile, issued now when `now` (every call then returns that tile), else at each call:
/// a load placed early or where first used, by a constexpr.
fn issued<T: Copy>(now: bool, load: impl Fn() -> T) -> impl Fn() -> T {
    let ready = now.then(&load);
    move || ready.unwrap_or_else(&load)
}

/// One standard decode step of the replay form for every row of the batch.
///
/// A slot's checkpoint `[HEADS, DV, DK]` is tiled by *flat rows*, as the conventional kernels
/// tile their state ([`super::decode`]), but with the batch rows first in the grid (measured
/// faster for this kernel): program `(row, blk)` of the `(batch, HEADS·DV / BV, 1)` grid owns
/// the state rows `r = blk·BV + [0, BV)`, row `r` being value row `r % DV` of head
/// `r / DV`. `BV` divides `(HEADS/GROUPS)·DV`, so a program's rows lie in one group `g` and none
/// is masked, whatever `DV` (`DV = 80`: 64-row programs straddle two heads). With `h`
/// committed records, this step's record is record `h` (0-based) of the window and, per row,
/// `y = γ_{0:h} (S_ckpt q) + Σ_{j≤h} γ_{j+1:h} dt'_j (k_jᵀ q) x_j + D x`, times `silu(z)` when
/// `HAS_Z`, where `γ_{a:b} = exp(A Σ_{l=a..b} dt'_l)` of the row's head.
///
/// - The group's keys `k_j` (the ring's `B` rows and this step's `B`) and the products `k_jᵀ q`
///   are loaded/computed once per program.
/// - Per-head values (`dt'` of every record, the weights `w_j = γ_{j+1:h} dt'_j`, `γ_{0:h}`,
///   `D`) are computed for the program's head lanes ([`head_lanes`]: the heads its rows touch)
///   and then given to each row by its lane (one select per lane past the first).
/// - Records are held newest-first: tile row `i` is record `j = h − i`, so the decay sums
///   `Σ_{l=j+1..h} dt'_l` are exclusive prefix sums down the rows.
/// - **Non-flush** rows (`meta[slot][2] == 0`): one `[BV, DK]` tile of `S_ckpt`, every load of
///   the step in flight before the first reduction; `y` is written and this step's record
///   appended at ring position `(start + h) % (L+T)` (`dt'` by the program holding the head's
///   first row, the keys by the group's first program); the checkpoint is neither
///   materialised nor written.
/// - **Flush** rows, `FR` whole state rows at a time (contiguous blocks of the checkpoint; a
///   tuning axis: ptxas allocates registers for the larger branch, and the block size sets
///   this one's; `PREFETCH` first asks L2 for all the blocks, whose loads otherwise each wait
///   on DRAM after the previous block's product):
///   `S_ckpt ← γ_{0:h} S_ckpt + Σ_{j≤h} γ_{j+1:h} dt'_j x_j k_jᵀ` (one `dot` over the records
///   per block), written once, and `y = S_ckpt q + D x` from it; this step's record is not
///   stored (the window is empty afterwards). With `LP` the low-precision checkpoint is
///   written too, and the non-flush branch reads it instead of the f32 one.
/// - **Counters**: every program reads `meta`, none writes it; program `(row, 0)` writes
///   the row's advanced counters to `meta_out[slot]` (`(start, h + 1, flag, ·)`, or `h = 0`
///   after a flush, with the flag of a next launch of `next_drafts` drafts, 0 = a decode
///   step), by [`super::commit::advance_counters`] — what [`super::commit::mamba2_commit`]
///   computes after a decode step, so a decode step is this one launch. The caller swaps the
///   two counter buffers after the launch; `meta_out` must not alias `meta`.
/// - The window's records (`x`, `dt'`, keys) are loaded together right after the counters.
///   `EARLY` (for latency-bound small batches; the tuner decides) also issues the non-flush
///   checkpoint load right after the slot, before the counters (one dependent memory access
///   less; its registers are held longer, and a flush folds that tile when `FR ≥ BV`, else
///   reads its blocks again), and the step's own inputs (`x`, `z`, the query and key, the
///   heads' `A`, `dt`, `dt_bias`, `D`) beside the counters: loaded where first used, each
///   would add a memory latency to the launch (measured: B=1 3.4 → 2.9 µs at Nano). Without
///   `EARLY` they stay where first used, which holds fewer registers (faster at B=256).
/// - Padding rows (slot 0) do nothing.
///
/// Contract: the flag is [`super::initial_flush_flag`]`(h, 0, L)` as the previous launch set it
/// (so `h + 1 ≤ L + T` records fit).
#[kernel]
pub fn mamba2_replay_step(
    #[extent(batch * HEADS)] dt: Ptr<bf16>,
    #[extent(batch * HEADS * DV)] x: Ptr<bf16>,
    #[extent(batch * GROUPS * DK)] bmat: Ptr<bf16>,
    #[extent(batch * GROUPS * DK)] cmat: Ptr<bf16>,
    #[extent(batch * HEADS * DV * HAS_Z)] z: Ptr<bf16>,
    #[extent(HEADS)] a: Ptr<f32>,
    #[extent(HEADS)] d: Ptr<f32>,
    #[extent(HEADS)] dt_bias: Ptr<f32>,
    #[extent(batch)] slot_idx: Ptr<i32>,
    #[extent(slots * 4)] meta: Ptr<i32>,
    #[extent(slots * 4)] meta_out: Ptr<i32>,
    #[extent(slots * HEADS * DV * DK)] ckpt: Ptr<f32>,
    #[extent(slots * HEADS * DV * DK * LP)] ckpt_lp: Ptr<f16>,
    #[extent(slots * (L + T) * HEADS)] rec_dt: Ptr<f32>,
    #[extent(slots * (L + T) * HEADS * DV)] rec_x: Ptr<bf16>,
    #[extent(slots * (L + T) * GROUPS * DK)] rec_b: Ptr<bf16>,
    #[extent(batch * HEADS * DV)] out: Ptr<bf16>,
    batch: i32,
    slots: i32,
    next_drafts: i32,
    #[constexpr(default = 128)] HEADS: usize,
    #[constexpr(default = 8)] GROUPS: usize,
    #[constexpr(default = 128)] DK: usize,
    #[constexpr(default = 64)] DV: usize,
    #[constexpr(default = 16)] L: usize,
    #[constexpr(default = 0)] T: usize,
    #[constexpr(default = true)] HAS_Z: bool,
    #[constexpr(default = 64)] BV: usize,
    #[constexpr(default = false)] EARLY: bool,
    #[constexpr(default = false)] PREFETCH: bool,
    #[constexpr(default = 8)] FR: usize,
    #[constexpr(default = false)] LP: bool,
) {
    static_assert(GROUPS > 0 && HEADS % GROUPS == 0, "HEADS must be a multiple of GROUPS");
    let hpg = HEADS / GROUPS;
    static_assert(
        BV > 0 && (hpg * DV) % BV == 0,
        "BV must divide (HEADS/GROUPS)·DV (the state rows of one group), so that a program's \
         flat rows lie in one group and none is masked",
    );
    static_assert(L >= 1, "the window L must be at least 1");
    static_assert(FR.is_power_of_two(), "FR must be a power of two");
    let cap = L + T;
    let nr = record_rows(cap);
    let lanes = head_lanes(BV, DV);

    let row = program_id(0);
    let blk = program_id(1);
    let r0 = blk * BV;
    let r = r0 + arange(BV);
    let g = blk / (hpg * DV / BV);
    // Head lanes: the heads the rows touch (lanes rounded up to a power of two; lanes whose
    // head has no row here masked off), and each row's lane.
    let head0 = r0 / DV;
    let hh = arange(lanes.next_power_of_two());
    let heads = head0 + hh;
    let hmask = (hh < lanes as i32) & (heads * DV < r0 + BV as i32);
    let lane_of_row = r / DV - head0;
    // Per-head values `t` (head lanes last) given to each row (`[.., BV]`; with one lane, the
    // lane axis broadcasts).
    let by_rows = |t: Tile<f32>, rows_lane: Tile<i32>| -> Tile<f32> {
        let last = t.rank() - 1;
        let mut lane_mask = hh;
        let mut row_lane = rows_lane;
        for _ in 0..last {
            lane_mask = lane_mask.expand_dims(0);
            row_lane = row_lane.expand_dims(0);
        }
        let lane = |l: i32| sum(select(lane_mask == l, t, 0.0), last).expand_dims(last);
        let mut per_row = if lanes == 1 { t } else { lane(0) };
        for l in 1..lanes as i32 {
            per_row = select(row_lane == l, lane(l), per_row);
        }
        per_row
    };
    let by_row = |t: Tile<f32>| by_rows(t, lane_of_row);
    let kk = arange(DK);
    let slot = load(slot_idx + row, true);
    if slot != 0 {
        let ring = slot_buffers(slot, rec_dt, rec_x, rec_b, ckpt, ckpt_lp, cap, HEADS, GROUPS, DK, DV);
        let (ring_dt, ring_x, ring_b) = (ring.dt, ring.x, ring.b);
        // The checkpoint tile of the non-flush branch, [BV, DK].
        let srow = ring.ckpt + (r * DK).expand_dims(1);
        // With LP the non-flush branch reads the f16 checkpoint (half the bytes).
        let load_state = || {
            if LP {
                load(ring.ckpt_lp + (r * DK).expand_dims(1) + kk.expand_dims(0), true).cast::<f32>()
            } else {
                load(srow + kk.expand_dims(0), true)
            }
        };
        // EARLY: issued before the counters are read (one memory latency less per step; a
        // flush reads it again unless it folds all rows in one block, `FR ≥ BV`).
        let early = EARLY.then(load_state);
        let mrow = meta + slot * 4;
        let start = load(mrow, true);
        let h = load(mrow + 1, true);
        let flush = load(mrow + 2, true) != 0;
        // The step's own inputs, none of which depends on the counters: x and z of the rows
        // [BV], the group's query and key [DK], the head lanes' A, dt, dt_bias and D. With
        // EARLY issued here, beside the counters; else each where first used.
        let row_elems = || row * (HEADS * DV) + r;
        let x_cur_raw = issued(EARLY, || load(x + row_elems(), true));
        let z_cur = issued(EARLY, || HAS_Z.then(|| load(z + row_elems(), true)));
        let q = issued(EARLY, || load(cmat + (row * GROUPS + g) * DK + kk, true));
        let k_cur = issued(EARLY, || load(bmat + (row * GROUPS + g) * DK + kk, true));
        let a_h = issued(EARLY, || load(a + heads, hmask));
        let dt_raw = issued(EARLY, || load(dt + row * HEADS + heads, hmask));
        let bias = issued(EARLY, || load(dt_bias + heads, hmask));
        let d_h = issued(EARLY, || load(d + heads, hmask));
        // Tile row i holds record h - i (row 0: this step's record, not in the ring yet; the
        // window's records newest first), at ring position `pos`.
        let i = arange(nr);
        let current = (i == 0).expand_dims(1);
        let in_ring = (i <= h) & (i >= 1);
        let pos = (start + h - i + cap) % cap;
        // The window's records, loaded right after the counters: x of the rows [nr, BV], dt' of
        // the head lanes [nr, lanes], the group's keys [nr, DK].
        let ring_mask = in_ring.expand_dims(1);
        // The records' x of state rows `rows`, [nr, rows].
        let ring_x_of = |rows: Tile<i32>| {
            load(
                ring_x + (pos * (HEADS * DV)).expand_dims(1) + rows.expand_dims(0),
                ring_mask,
            )
            .cast::<f32>()
        };
        let x_ring = ring_x_of(r);
        let dt_ring = load(
            ring_dt + (pos * HEADS + head0).expand_dims(1) + hh.expand_dims(0),
            ring_mask & hmask.expand_dims(0),
        );
        let k_ring = load(
            ring_b + (pos * (GROUPS * DK) + g * DK).expand_dims(1) + kk.expand_dims(0),
            ring_mask,
        )
        .cast::<f32>();
        let pos_cur = (start + h) % cap;

        // Per head lane (columns): dt' of every record, newest first (0 past the window); the
        // weights w_j = γ_{j+1:h} dt'_j, whose decay sums are exclusive prefix sums of the
        // rows above; γ = γ_{0:h}.
        let a_h = a_h();
        let dt_cur = softplus(dt_raw().cast::<f32>() + bias());
        let dt_rec = select(current, dt_cur.expand_dims(0), dt_ring);
        let w = exp(a_h.expand_dims(0) * cumsum_exclusive(dt_rec, 0)) * dt_rec;
        let decay = exp(a_h * sum(dt_rec, 0));
        let gamma = by_row(decay);
        let d_h = d_h();
        let d_r = by_row(d_h);

        // The group's keys (ring and this step's B) and query, and k_j · q once per program.
        let (q, k_cur) = (q(), k_cur());
        let keys = select(current, k_cur.cast::<f32>().expand_dims(0), k_ring);
        let qf = q.cast::<f32>();
        let kq = sum(keys * qf.expand_dims(0), 1);

        // This step's x of the rows, [BV].
        let xoff = row_elems();
        let x_cur_raw = x_cur_raw();
        let x_cur = x_cur_raw.cast::<f32>();
        // y times silu(z) given z (with HAS_Z).
        let gate = |y: Tile<f32>, zt: Option<Tile<bf16>>| -> Tile<f32> {
            match zt {
                Some(zt) => y * silu(zt.cast::<f32>()),
                None => y,
            }
        };

        if !flush {
            // y = γ (S_ckpt q) + Σ_j w_j (k_j·q) x_j + D x: every load of the step is issued
            // before the first reduction.
            let s = early.unwrap_or_else(load_state);
            let coef = w * kq.expand_dims(1); // [nr, lanes]; row 0 is this step's record
            let y_ring = sum(x_ring * by_row(coef), 0);
            let sq = sum(s * qf.expand_dims(0), 1);
            let coef_cur = by_row(sum(select(current, coef, 0.0), 0));
            let y = gamma * sq + y_ring + (coef_cur + d_r) * x_cur;
            store(out + xoff, gate(y, z_cur()).cast::<bf16>(), true);

            // Append this step's record at ring position start + h: x of the rows, dt' of the
            // heads whose first row is here, the keys by the group's first program.
            store(ring_x + pos_cur * (HEADS * DV) + r, x_cur_raw, true);
            store(ring_dt + pos_cur * HEADS + heads, dt_cur, hmask & (heads * DV >= r0));
            if r0 % (hpg * DV) as i32 == 0 {
                store(ring_b + pos_cur * (GROUPS * DK) + g * DK + kk, k_cur, true);
            }
        } else {
            // Fold the window into the checkpoint, FR whole state rows at a time (contiguous
            // in memory): S_ckpt ← γ S_ckpt + Σ_j w_j x_j k_jᵀ, written once, and y = S_ckpt q
            // + D x of those rows. Only an [FR, DK] block of the state is live, so this branch
            // can need fewer registers than the non-flush one (ptxas allocates for the larger
            // of the two: FR sets the step's occupancy as much as BV does). The product stays
            // on CUDA cores (`Ieee`): its tensor-core fragments cost registers for a product of
            // L rows (measured slower, `bench/NOTES.md`).
            let fr = BV.min(FR);
            if PREFETCH && fr < BV && !EARLY {
                prefetch(srow + kk.expand_dims(0), true);
            }
            for b in range(0, BV / fr) {
                let rows = r0 + b * fr + arange(fr);
                let lane = rows / DV - head0;
                let xoff_b = row * (HEADS * DV) + rows;
                let x_b = load(x + xoff_b, true).cast::<f32>();
                let wx = (select(current, x_b.expand_dims(0), ring_x_of(rows)) * by_rows(w, lane)).trans();
                let soff = (rows * DK).expand_dims(1) + kk.expand_dims(0);
                let sptr = ring.ckpt + soff;
                // With one block of all rows, EARLY's tile is this block: read once (not with
                // LP: that tile is the f16 copy, a flush folds the f32 checkpoint).
                let s_b = match early {
                    Some(s) if fr == BV && !LP => s,
                    _ => load(sptr, true),
                };
                let upd = dot_acc_in(wx, keys, by_rows(decay, lane).expand_dims(1) * s_b, DotPrecision::Ieee);
                store(sptr, upd, true);
                if LP {
                    store(ring.ckpt_lp + soff, upd.cast::<f16>(), true);
                }
                let y = sum(upd * qf.expand_dims(0), 1) + by_rows(d_h, lane) * x_b;
                let y = gate(y, HAS_Z.then(|| load(z + xoff_b, true)));
                store(out + xoff_b, y.cast::<bf16>(), true);
            }
        }

        // The row's counters after this step, written once per row to the other buffer.
        if blk == 0 {
            let c = advance_counters(start, h, flush, None, next_drafts, L, cap);
            let w = arange(4);
            let line = select(
                w == 0,
                c.start,
                select(w == 1, c.h, select(w == 2, c.flag.cast::<i32>(), load(mrow + 3, true))),
            );
            store(meta_out + slot * 4 + w, line, true);
        }
    }
}
