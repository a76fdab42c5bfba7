//! The replay decode step (ReplaySSM algorithm 1) for a whole batch in one launch.

use super::record_rows;
use replay_dsl::prelude::*;

/// Key columns per chunk of the state tile: one `[BV, DKC]` chunk of `S_ckpt` is live at a time.
pub const DKC: usize = 32;

/// One standard decode step of the replay form for every row of the batch.
///
/// Program `(row, hb, vb)` handles the `HB` value heads `hb·HB ..` (all in one group `g`) and
/// the value rows `vb·BV ..` of their states. With `h` committed records, this step's record is
/// record `h` (0-based) of the window and, per head,
/// `y = γ_{0:h} (S_ckpt q) + Σ_{j≤h} γ_{j+1:h} dt'_j (k_jᵀ q) x_j + D x`, times `silu(z)` when
/// `HAS_Z`, where `γ_{a:b} = exp(A Σ_{l=a..b} dt'_l)`.
///
/// - The group's keys `k_j` (the ring's `B` rows and this step's `B`) and the products `k_jᵀ q`
///   are loaded/computed once per program and reused by its `HB` heads (`HB = HEADS/GROUPS`
///   computes them once per group; a smaller `HB` trades that for more programs at small batch).
/// - Records are held newest-first: tile row `i` is record `j = h − i`; then the exclusive
///   suffix sums `Σ_{l=j+1..h} dt'_l` are an inclusive `cumsum` of the `dt'` of record `j+1`.
/// - **Non-flush** rows (`meta[slot][2] == 0`): read `S_ckpt` and the records, write `y` and
///   append this step's record at ring position `(start + h) % (L+T)`; the checkpoint is not
///   written.
/// - **Flush** rows: additionally `S_ckpt ← γ_{0:h} S_ckpt + Σ_{j≤h} γ_{j+1:h} dt'_j x_j k_jᵀ`
///   (one `dot` over the records), written once; this step's record is not stored (the window
///   is empty afterwards). [`super::commit::mamba2_commit`] then moves `h`.
/// - Padding rows (slot 0) do nothing.
///
/// Contract: the flag is [`super::initial_flush_flag`]`(h, 0, L)` as the commit kernel sets it
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
    #[extent(slots * HEADS * DV * DK)] ckpt: Ptr<f32>,
    #[extent(slots * (L + T) * HEADS)] rec_dt: Ptr<f32>,
    #[extent(slots * (L + T) * HEADS * DV)] rec_x: Ptr<bf16>,
    #[extent(slots * (L + T) * GROUPS * DK)] rec_b: Ptr<bf16>,
    #[extent(batch * HEADS * DV)] out: Ptr<bf16>,
    batch: i32,
    slots: i32,
    #[constexpr(default = 128)] HEADS: usize,
    #[constexpr(default = 8)] GROUPS: usize,
    #[constexpr(default = 128)] DK: usize,
    #[constexpr(default = 64)] DV: usize,
    #[constexpr(default = 16)] L: usize,
    #[constexpr(default = 0)] T: usize,
    #[constexpr(default = true)] HAS_Z: bool,
    #[constexpr(default = 16)] BV: usize,
    #[constexpr(default = 4)] HB: usize,
) {
    static_assert(GROUPS > 0 && HEADS % GROUPS == 0, "HEADS must be a multiple of GROUPS");
    static_assert(HB > 0 && (HEADS / GROUPS) % HB == 0, "HB must divide HEADS / GROUPS");
    static_assert(L >= 1, "the window L must be at least 1");
    static_assert(DK % DK.min(DKC) == 0, "DK must be a multiple of DKC (or smaller)");
    let hpg = HEADS / GROUPS;
    let cap = L + T;
    let nr = record_rows(cap);

    let row = program_id(0);
    let head0 = program_id(1) * HB;
    let g = head0 / hpg;
    let v = program_id(2) * BV + arange(BV);
    let vmask = v < DV;
    // Column chunks of the keys and the state tile.
    let dkc = DK.min(DKC);
    let nc = DK / dkc;
    let cols: Vec<Tile<i32>> = (0..nc).map(|c| arange(dkc) + c * dkc).collect();
    let slot = load(slot_idx + row, true);
    if slot != 0 {
        let mrow = meta + slot * 4;
        let start = load(mrow, true);
        let h = load(mrow + 1, true);
        let flush = load(mrow + 2, true) != 0;
        let slot64 = slot.cast::<i64>();
        let ring_dt = rec_dt + slot64 * (cap * HEADS);
        let ring_x = rec_x + slot64 * (cap * HEADS * DV);
        let ring_b = rec_b + slot64 * (cap * GROUPS * DK);
        // Tile row i holds record j = h - i (row 0: this step's record).
        let i = arange(nr);
        let valid = i <= h;
        let in_ring = valid & (i >= 1);
        let pos = (start + h - i + cap) % cap;
        // Ring position of record j + 1 (row i - 1), for rows i >= 2.
        let pos_next = (start + h - i + 1 + cap) % cap;
        let next_in_ring = valid & (i >= 2);
        let pos_cur = (start + h) % cap;

        // The group's query and keys, and k_j . q once for the HB heads, in column chunks of DKC
        // (the state tile is processed chunk by chunk below, so one chunk of it is live at once).
        let q_b: Vec<Tile<bf16>> = cols
            .iter()
            .map(|&kc| load(cmat + (row * GROUPS + g) * DK + kc, true))
            .collect();
        let q_c: Vec<Tile<f32>> = q_b.iter().map(|q| q.cast::<f32>()).collect();
        let k_cur: Vec<Tile<bf16>> = cols
            .iter()
            .map(|&kc| load(bmat + (row * GROUPS + g) * DK + kc, true))
            .collect();
        let keys: Vec<Tile<bf16>> = cols
            .iter()
            .zip(&k_cur)
            .map(|(&kc, &kcur)| {
                let k_ring = load(
                    ring_b + (pos * (GROUPS * DK) + g * DK).expand_dims(1) + kc.expand_dims(0),
                    in_ring.expand_dims(1),
                );
                select((i == 0).expand_dims(1), kcur.expand_dims(0), k_ring)
            })
            .collect();
        let mut kq = sum(dot(keys[0], q_b[0].expand_dims(1)), 1);
        for c in 1..nc {
            kq = kq + sum(dot(keys[c], q_b[c].expand_dims(1)), 1);
        }

        for hh in range(0, HB) {
            let head = head0 + hh;
            let a_h = load(a + head, true);
            let dt_cur = softplus(load(dt + row * HEADS + head, true).cast::<f32>() + load(dt_bias + head, true));
            // dt' of record j (row i) and of record j + 1 (row i - 1; 0 on row 0).
            let dt_rec = select(i == 0, dt_cur, load(ring_dt + pos * HEADS + head, in_ring));
            let dt_next = select(
                (i == 1) & valid,
                dt_cur,
                load(ring_dt + pos_next * HEADS + head, next_in_ring),
            );
            // w_j = γ_{j+1:h} dt'_j (0 past the window), γ = γ_{0:h}.
            let decay = exp(a_h * cumsum(dt_next, 0));
            let w = decay * dt_rec;
            let gamma = exp(a_h * sum(dt_rec, 0));

            let xoff = (row * HEADS + head) * DV + v;
            let x_cur_raw = load(x + xoff, vmask);
            let x_cur = x_cur_raw.cast::<f32>();
            let x_ring = load(
                ring_x + (pos * (HEADS * DV) + head * DV).expand_dims(1) + v.expand_dims(0),
                in_ring.expand_dims(1) & vmask.expand_dims(0),
            );
            let xs = select((i == 0).expand_dims(1), x_cur.expand_dims(0), x_ring.cast::<f32>());

            // S_ckpt q chunk by chunk; flush rows fold each chunk right after reading it:
            // S_ckpt <- γ S_ckpt + Σ_j w_j x_j k_jᵀ, written once per window.
            let srow = ckpt + (slot64 * HEADS + head.cast::<i64>()) * (DV * DK);
            let mut sq = zeros::<f32>([BV]);
            for c in 0..nc {
                let sptr = srow + (v * DK).expand_dims(1) + cols[c].expand_dims(0);
                let s = load(sptr, vmask.expand_dims(1));
                sq = sq + sum(s * q_c[c].expand_dims(0), 1);
                if flush {
                    let upd = dot_acc((xs * w.expand_dims(1)).trans(), keys[c].cast::<f32>(), s * gamma);
                    store(sptr, upd, vmask.expand_dims(1));
                }
            }
            let y_rec = sum(xs * (w * kq).expand_dims(1), 0);
            let mut y = gamma * sq + y_rec + load(d + head, true) * x_cur;
            if HAS_Z {
                y = y * silu(load(z + xoff, vmask).cast::<f32>());
            }
            store(out + xoff, y.cast::<bf16>(), vmask);

            if !flush {
                store(ring_x + pos_cur * (HEADS * DV) + head * DV + v, x_cur_raw, vmask);
                if program_id(2) == 0 {
                    store(ring_dt + pos_cur * HEADS + head, dt_cur, true);
                }
            }
        }
        // The group's key of this step, once per group.
        if (!flush) & (program_id(2) == 0) & (head0 % hpg == 0) {
            for c in 0..nc {
                store(ring_b + pos_cur * (GROUPS * DK) + g * DK + cols[c], k_cur[c], true);
            }
        }
    }
}
