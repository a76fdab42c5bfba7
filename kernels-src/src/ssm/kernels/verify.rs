//! Output-only speculative verification (ReplaySSM algorithm 2) for a whole batch.

use super::record_rows;
use replay_dsl::prelude::*;

/// Verifies `n_drafts` (`1 ≤ n_drafts ≤ T`) draft tokens per row without materialising any state:
/// `O = S_ckpt Q D + V (W ⊙ (Kᵀ Q))` plus `D x` (times `silu(z)` when `HAS_Z`), with
/// `D = diag(γ_{0:h+s})`, `W_{js} = γ_{j+1:h+s}` for `j ≤ h+s` (else 0) and `V = [dt'_j x_j]`.
///
/// Program `(row, hb, vb)` handles the `HB` value heads `hb·HB ..` of group `g` and value rows
/// `vb·BV ..`. Per program, the keys of the `h` committed records (ring) and of the drafts
/// (inputs), the queries `Q` and `Kᵀ Q` (one `dot`) are computed once and shared by the heads.
/// Records are held newest-first (tile row `i` is record `j = h + n − 1 − i`), so every decay
/// sum `Σ_{l=j+1..h+s} dt'_l` is one column of an inclusive `cumsum` of positive terms.
///
/// The drafts' records are appended at ring positions `(start + h + s) % (L+T)` (`h`
/// unchanged). If the row's flush flag is set (`h + n > L`, computed by
/// [`super::commit::mamba2_commit`]), the `h` committed records are then folded into the
/// checkpoint (`S_ckpt ← γ_{0:h-1} S_ckpt + Σ_{j<h} γ_{j+1:h-1} v_j k_jᵀ`, written once); the
/// outputs use the checkpoint as it was. [`super::commit::mamba2_commit`] (with
/// `after_verify = 1`) then moves `start` past the folded records and sets `h` to the
/// accepted count.
#[kernel]
pub fn mamba2_verify(
    #[extent(batch * n_drafts * HEADS)] dt: Ptr<bf16>,
    #[extent(batch * n_drafts * HEADS * DV)] x: Ptr<bf16>,
    #[extent(batch * n_drafts * GROUPS * DK)] bmat: Ptr<bf16>,
    #[extent(batch * n_drafts * GROUPS * DK)] cmat: Ptr<bf16>,
    #[extent(batch * n_drafts * HEADS * DV * HAS_Z)] z: Ptr<bf16>,
    #[extent(HEADS)] a: Ptr<f32>,
    #[extent(HEADS)] d: Ptr<f32>,
    #[extent(HEADS)] dt_bias: Ptr<f32>,
    #[extent(batch)] slot_idx: Ptr<i32>,
    #[extent(slots * 4)] meta: Ptr<i32>,
    #[extent(slots * HEADS * DV * DK)] ckpt: Ptr<f32>,
    #[extent(slots * (L + T) * HEADS)] rec_dt: Ptr<f32>,
    #[extent(slots * (L + T) * HEADS * DV)] rec_x: Ptr<bf16>,
    #[extent(slots * (L + T) * GROUPS * DK)] rec_b: Ptr<bf16>,
    #[extent(batch * n_drafts * HEADS * DV)] out: Ptr<bf16>,
    batch: i32,
    slots: i32,
    n_drafts: i32,
    #[constexpr(default = 128)] HEADS: usize,
    #[constexpr(default = 8)] GROUPS: usize,
    #[constexpr(default = 128)] DK: usize,
    #[constexpr(default = 64)] DV: usize,
    #[constexpr(default = 16)] L: usize,
    #[constexpr(default = 4)] T: usize,
    #[constexpr(default = true)] HAS_Z: bool,
    #[constexpr(default = 32)] BV: usize,
    #[constexpr(default = 4)] HB: usize,
) {
    static_assert(GROUPS > 0 && HEADS % GROUPS == 0, "HEADS must be a multiple of GROUPS");
    static_assert(HB > 0 && (HEADS / GROUPS) % HB == 0, "HB must divide HEADS / GROUPS");
    static_assert(L >= 1 && T >= 1 && T <= L, "1 ≤ T ≤ L");
    let hpg = HEADS / GROUPS;
    let cap = L + T;
    let nr = record_rows(cap);
    let tp = T.next_power_of_two();

    let row = program_id(0);
    let head0 = program_id(1) * HB;
    let g = head0 / hpg;
    let v = program_id(2) * BV + arange(BV);
    let vmask = v < DV;
    let kk = arange(DK);
    let n = n_drafts;
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
        let tok0 = row * n; // first token of this row in the inputs

        // Tile row i holds record j = h + n - 1 - i: drafts (s' = n - 1 - i) for i < n, then
        // committed records from the ring.
        let i = arange(nr);
        let valid = i < h + n;
        let is_draft = i < n;
        let in_ring = valid & (i >= n);
        let pos = (start + h + n - 1 - i + cap) % cap;
        let draft_of_row = n - 1 - i;
        // Draft index s (columns) and ring positions of the drafts' records.
        let s = arange(tp);
        let smask = s < n;
        let pos_draft = (start + h + s) % cap;

        let q = load(
            cmat + ((tok0 + s) * (GROUPS * DK) + g * DK).expand_dims(1) + kk.expand_dims(0),
            smask.expand_dims(1),
        );
        let k_draft = load(
            bmat + ((tok0 + draft_of_row) * (GROUPS * DK) + g * DK).expand_dims(1) + kk.expand_dims(0),
            is_draft.expand_dims(1),
        );
        let k_ring = load(
            ring_b + (pos * (GROUPS * DK) + g * DK).expand_dims(1) + kk.expand_dims(0),
            in_ring.expand_dims(1),
        );
        let keys = select(is_draft.expand_dims(1), k_draft, k_ring);
        // Kᵀ Q once per program: kq[i, s] = k_j · q_s.
        let kq = dot(keys, q.trans());
        let keys = keys.cast::<f32>();
        let q = q.cast::<f32>();
        // Visibility: draft s sees records j ≤ h + s, i.e. rows i ≥ n - 1 - s.
        let ii = i.expand_dims(1);
        let ss = s.expand_dims(0);
        let visible = (ii >= n - 1 - ss) & valid.expand_dims(1) & smask.expand_dims(0);
        // Row i - 1 (record j + 1) enters the decay sums of column s when j + 1 ≤ h + s.
        let next_counts = ii >= n - ss;

        // dt' of the records on tile rows `r` (0 outside 0 ≤ r < h + n).
        let dt_rows = |r: Tile<i32>, head: Tile<i32>, bias: Tile<f32>| -> Tile<f32> {
            let ok = (r >= 0) & (r < h + n);
            let draft = ok & (r < n);
            let ring = ok & (r >= n);
            let p = (start + h + n - 1 - r + cap) % cap;
            let raw = load(dt + (tok0 + n - 1 - r) * HEADS + head, draft).cast::<f32>();
            select(draft, softplus(raw + bias), load(ring_dt + p * HEADS + head, ring))
        };

        for hh in range(0, HB) {
            let head = head0 + hh;
            let a_h = load(a + head, true);
            let bias = load(dt_bias + head, true);
            let dt_rec = dt_rows(i, head, bias);
            let dt_next = dt_rows(i - 1, head, bias);
            let sums = cumsum(select(next_counts, dt_next.expand_dims(1), 0.0), 0);
            let coef = select(visible, exp(a_h * sums), 0.0) * kq * dt_rec.expand_dims(1);
            let gamma = exp(a_h * sum(select(visible, dt_rec.expand_dims(1), 0.0), 0));

            let x_draft = load(
                x + (((tok0 + draft_of_row) * HEADS + head) * DV).expand_dims(1) + v.expand_dims(0),
                is_draft.expand_dims(1) & vmask.expand_dims(0),
            );
            let x_ring = load(
                ring_x + (pos * (HEADS * DV) + head * DV).expand_dims(1) + v.expand_dims(0),
                in_ring.expand_dims(1) & vmask.expand_dims(0),
            );
            let xs = select(is_draft.expand_dims(1), x_draft, x_ring).cast::<f32>();
            // The drafts' own x by draft index, for D x, the gate and the records.
            let tok_off = (((tok0 + s) * HEADS + head) * DV).expand_dims(1) + v.expand_dims(0);
            let tok_mask = smask.expand_dims(1) & vmask.expand_dims(0);
            let x_tok_raw = load(x + tok_off, tok_mask);
            let x_tok = x_tok_raw.cast::<f32>();

            let srow = ckpt + (slot64 * HEADS + head.cast::<i64>()) * (DV * DK);
            let sptr = srow + (v * DK).expand_dims(1) + kk.expand_dims(0);
            let st = load(sptr, vmask.expand_dims(1));
            // [T, BV]: S_ckpt q_s scaled by γ_{0:h+s}, plus Σ_j W_js (k_j·q_s) v_j.
            let sq = dot(q, st.trans());
            let o_rec = dot(coef.trans(), xs);
            let mut y = gamma.expand_dims(1) * sq + o_rec + load(d + head, true) * x_tok;
            if HAS_Z {
                y = y * silu(load(z + tok_off, tok_mask).cast::<f32>());
            }
            store(out + tok_off, y.cast::<bf16>(), tok_mask);

            // Append the drafts' records (h unchanged).
            store(
                ring_x + (pos_draft * (HEADS * DV) + head * DV).expand_dims(1) + v.expand_dims(0),
                x_tok_raw,
                tok_mask,
            );
            if program_id(2) == 0 {
                let dt_tok = softplus(load(dt + (tok0 + s) * HEADS + head, smask).cast::<f32>() + bias);
                store(ring_dt + pos_draft * HEADS + head, dt_tok, smask);
            }

            if flush {
                // Fold the h committed records (rows i ≥ n): weights γ_{j+1:h-1} dt'_j.
                let committed = in_ring;
                let fsums = cumsum(select(i >= n + 1, dt_next, 0.0), 0);
                let wf = select(committed, exp(a_h * fsums) * dt_rec, 0.0);
                let gf = exp(a_h * sum(select(committed, dt_rec, 0.0), 0));
                let upd = dot_acc((xs * wf.expand_dims(1)).trans(), keys, st * gf);
                store(sptr, upd, vmask.expand_dims(1));
            }
        }
        // The drafts' keys, once per group.
        if (program_id(2) == 0) & (head0 % hpg == 0) {
            let b_tok = load(
                bmat + ((tok0 + s) * (GROUPS * DK) + g * DK).expand_dims(1) + kk.expand_dims(0),
                smask.expand_dims(1),
            );
            store(
                ring_b + (pos_draft * (GROUPS * DK) + g * DK).expand_dims(1) + kk.expand_dims(0),
                b_tok,
                smask.expand_dims(1),
            );
        }
    }
}
