//! Output-only speculative verification (ReplaySSM algorithm 2) for a whole batch.

use super::record_rows;
use replay_dsl::front::builder::num_warps;
use replay_dsl::prelude::*;

/// How one program's tiles are cut (from the constexprs and the number of warps).
struct Geometry {
    /// Heads per chunk (a power of two ≤ `HBP`); the program runs `HBP / hbc` chunks.
    hbc: usize,
    /// Lane bits given to the reduced (minor) axes: `DK` of the checkpoint and the keys, and
    /// the record index. The other lanes and the warps hold the tile rows (value rows of the
    /// chunk's heads), so that no per-draft reduction crosses warps; 4 (16 lanes), or 5 when
    /// the rows cannot fill the other lanes and the warps.
    mb: usize,
}

/// A chunk keeps its checkpoint tile (`rows·DK` f32), the group's keys (`nr·DK`) and the records'
/// `x` (`nr·rows`) in registers for all drafts: at most 160 values per thread (64 of them the
/// checkpoint), else the program's `HB·BV` rows run as chunks of heads.
fn geometry(hbp: usize, bv: usize, dk: usize, nr: usize, warps: usize) -> Geometry {
    let threads = 32 * warps;
    let mut hbc = hbp;
    while hbc > 1 && (hbc * bv * dk > 64 * threads || hbc * bv * dk + nr * dk + nr * hbc * bv > 160 * threads) {
        hbc /= 2;
    }
    let row_bits = (hbc * bv).trailing_zeros() as usize;
    let thread_bits = 5 + warps.trailing_zeros() as usize;
    let mb = thread_bits.saturating_sub(row_bits).clamp(4, 5);
    Geometry { hbc, mb }
}

/// Columns of the checkpoint folded per `dot` by a flush (all the chunk's heads at once: operand A
/// `(w_j x_j)ᵀ` is `[rows, nr]`, B the keys `[nr, kc]`, both staged in at most 48 KiB of shared
/// memory); 0 when even 16 columns do not fit (the fold then goes head by head).
fn fold_columns(rows: usize, nr: usize, dk: usize) -> usize {
    let mut kc = dk;
    while kc >= 16 && 4 * (rows * nr + nr * kc) > 48 * 1024 {
        kc /= 2;
    }
    if kc >= 16 {
        kc
    } else {
        0
    }
}

/// Verifies `n_drafts` (`1 ≤ n_drafts ≤ T`) draft tokens per row without materialising any state:
/// `O = S_ckpt Q D + V (W ⊙ (Kᵀ Q))` plus `D x` (times `silu(z)` when `HAS_Z`), with
/// `D = diag(γ_{0:h+s})`, `W_{js} = γ_{j+1:h+s}` for `j ≤ h+s` (else 0) and `V = [dt'_j x_j]`.
///
/// Program `(row, hb, vb)` handles the `HB` value heads `hb·HB ..` (one group `g`) and value
/// rows `vb·BV ..`. Heads are tile lanes `[HBP]` (`HBP = HB.next_power_of_two()`, extra lanes
/// masked), so `HB` need not be a power of two. The group's keys and `Kᵀ Q` are shared by the
/// heads.
///
/// - **Records**: one record tile of `nr = record_rows(L + T')` rows (`T' = T.next_power_of_two()`),
///   the drafts first (row `s` is draft `s`), then the `h` committed records newest first (row
///   `T' + i` is record `h - 1 - i`). One gather of `dt'` per committed
///   record and head (`[nr, HBP]`); their weights `w_j = γ_{j+1:h-1} dt'_j` from an exclusive
///   running sum down the rows and `C = Σ_j dt'_j`; the drafts' `dt'` once (`[T', HBP]`).
/// - **Numerics**: every decay is `exp2((A log2 e) · Σ dt')` over a plain running sum of the
///   positive `dt'` of exactly its range: `γ_{0:h+s}` from `C` plus a `cumsum` over the drafts,
///   and per draft `s` one running sum per record row (committed: `Σ_{s' ≤ s} dt'_{h+s'}`, on
///   top of the `w_j` folded into the records' `x`; draft `s' ≤ s`: `Σ_{s'' = s'+1..s}`),
///   advanced draft by draft. No ratios or differences of prefix sums.
/// - **Loads first**: the group's keys of the records, the checkpoint tile of the heads
///   (`[HBP·BV, DK]`, read once for all drafts), the records' `x` (`[nr, HBP·BV]` as vectors of
///   `vl` consecutive values, times `w_j`) and the drafts' `dt'` are all loaded before the first
///   reduction. The tiles are shaped `[DK/kl, rows, kl]`, `[nr/rl · rows/vl, rl, vl]` so that the
///   tile rows (head fastest, then value row; `vl` value rows in registers) lie in lanes, warps
///   and registers in the same places, and the reduced axes in registers and 16 lanes.
/// - **`Kᵀ q_s` for every draft** (reduced over the keys' registers and lanes), each converted
///   once to the records' layout: the kernel's barriers are there, and the keys die after it.
/// - **Then a static loop over the `T` drafts**, registers and in-warp shuffles only:
///   `S_ckpt q_s` and `Σ_i f_i (k_i·q_s) x_i` (every head and row, reduced over the registers,
///   then together over the lanes), `+ D x`, the gate, the draft's outputs and its record `x`
///   appended to the ring. A draft past `n` reads the inputs of draft `n - 1` and writes nothing.
/// - A program whose tiles would not fit in registers (see `geometry`) runs the above for
///   chunks of its heads in turn.
///
/// The drafts' records are appended at ring positions `(start + h + s) % (L+T)` (`h`
/// unchanged; `dt'` by the programs with `vb = 0`, the keys by one program per group). If the
/// row's flush flag is set (`h + n > L`, computed by [`super::commit::mamba2_commit`]), the `h`
/// committed records are then folded into the checkpoint, after the outputs (which use it as it
/// was) and in a branch of their own: `S_ckpt ← γ_{0:h-1} S_ckpt + Σ_{j<h} w_j x_j k_jᵀ`, written
/// once, as one `dot` for all the heads of the tile (`(w_j x_j)ᵀ` `[rows, nr]` times the keys,
/// by column blocks that fit 48 KiB of shared memory; head by head when even that does not fit).
/// [`super::commit::mamba2_commit`] (with `after_verify = 1`) then moves `start` past the folded
/// records and sets `h` to the accepted count. Padding rows (slot 0) do nothing.
///
/// Contract: `h ≤ L` (as the commit kernel keeps it), so `h + n ≤ L + T` records fit the tile.
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
    let _ = (batch, slots);
    let hpg = HEADS / GROUPS;
    let cap = L + T;
    let tp = T.next_power_of_two();
    let nr = record_rows(L + tp);
    let hbp = HB.next_power_of_two();
    let geo = geometry(hbp, BV, DK, nr, num_warps() as usize);
    let hbc = geo.hbc;
    let nch = hbp / hbc;
    let rows = hbc * BV;
    let kl = (4usize << geo.mb).min(DK); // checkpoint (f32): k = kh_i · kl + kl_i, 4 in registers
    let kh = DK / kl;
    let kl2 = (8usize << geo.mb).min(DK); // keys (bf16): k = kh2_i · kl2 + kl2_i, 8 in registers
    let kh2 = DK / kl2;
    let rl = (1usize << geo.mb).min(nr); // records: row i = rl_i · rh + rh_i, rl_i in lanes
    let rh = nr / rl;
    // Value rows: v = vh_i · vl + vl_i, vl_i in registers (the records' x are loaded as vectors of
    // vl values), as many as leave vh·hbc rows for the other lanes and the warps and for at least
    // one register bit (so that the records' tile keeps the plain bit order of the checkpoint's
    // rows: lanes, then warps, then registers). Tile row r = (vl_i · vh + vh_i) · hbc + head (the head
    // fastest: a thread's rows are of one head).
    let wide = rows >> (6 - geo.mb + num_warps().trailing_zeros() as usize);
    let vl = wide.clamp(1, 8).min(BV);
    let vh = BV / vl;
    let rows1 = rows / vl; // rows of one register: (vh_i, head)

    let row = program_id(0);
    let head0 = program_id(1) * HB;
    let g = head0 / hpg;
    let first = program_id(2) == 0;
    let n = n_drafts;
    // [X, hbc] → [X, rows]: a per-head value on every tile row of its head.
    let on_rows = |t: Tile<f32>| {
        let x0 = t.shape()[0];
        t.expand_dims(1).broadcast_to([x0, BV, hbc]).reshape([x0, rows])
    };
    // [nr, hbc] (record row i = rl_i · rh + rh_i) → [rh, hbc, rl].
    let rec3 = |t: Tile<f32>| t.reshape([rl, rh * hbc]).trans().reshape([rh, hbc, rl]);
    // [rh, hbc, rl] → [rh · rows1, rl, 1], the records' tile (rh_i, vh_i, head) × rl_i × vl_i.
    let on_rec = |t: Tile<f32>| {
        t.reshape([rh, 1, hbc * rl])
            .broadcast_to([rh, vh, hbc * rl])
            .reshape([rh * rows1, rl])
            .expand_dims(2)
    };
    // An index tile over (a, vh, hbc) (`pick` chooses which of them) as [a · vh · hbc].
    let idx3 = |a: usize, pick: usize| {
        let t = match pick {
            0 => arange(a).expand_dims(1).expand_dims(2),
            1 => arange(vh).expand_dims(0).expand_dims(2),
            _ => arange(hbc).expand_dims(0).expand_dims(0),
        };
        t.broadcast_to([a, vh, hbc]).reshape([a * vh * hbc])
    };
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
        // The row's first token in the inputs; ring positions (start + j < cap + L: one wrap).
        let tok0 = row * n;
        let wrap = |p: Tile<i32>| select(p >= cap as i32, p - cap as i32, p);

        // Record rows i: draft i (i < tp, live if i < n), then committed record j = h-1-(i-tp).
        let i = arange(nr);
        let is_draft = i < tp;
        let committed = (i >= tp) & (i < h + tp);
        let pos = wrap(start + h - 1 - (i - tp));
        let s = arange(tp);
        let pos_d = wrap(start + h + s); // the drafts' ring positions

        // The group's keys of the records, [kh2, nr, kl2] (element k = kh2_i · kl2 + kl2_i).
        let koff2 = (arange(kh2).expand_dims(1) * kl2 + arange(kl2).expand_dims(0)).expand_dims(1);
        let i3 = i.expand_dims(0).expand_dims(2);
        let k_draft = load(bmat + ((tok0 + i3) * GROUPS + g) * DK + koff2, i3 < n);
        let keys = load_or(
            ring_b + (pos * GROUPS + g).expand_dims(0).expand_dims(2) * DK + koff2,
            committed.expand_dims(0).expand_dims(2),
            k_draft,
        )
        .cast::<f32>();
        // k_i · q_s of every record (drafts and committed) for every draft, first: [rh, 1, rl]
        // each, in the records' layout (the conversions' barriers all here, the keys dead after).
        // A draft's inputs are read at token min(s, n - 1) (in bounds; drafts past n are not
        // written).
        let tok_of = |sc: usize| tok0 + minimum(n - 1, constant(sc as i32));
        let kq3s: Vec<Tile<f32>> = (0..T)
            .map(|sc| {
                let qrow = cmat + (tok_of(sc) * GROUPS + g) * DK;
                let kq = sum(sum(keys * load(qrow + koff2, true).cast::<f32>(), 0), 1);
                kq.reshape([rl, rh]).trans().expand_dims(1)
            })
            .collect();
        // The checkpoint tile's element offsets, [kh, 1, kl] (element k = kh_i · kl + kl_i).
        let koff = (arange(kh).expand_dims(1) * kl + arange(kl).expand_dims(0)).expand_dims(1);

        // The drafts' outputs and records for the heads head0 + c·hbc ..
        let chunk = |c: Tile<i32>| {
            let hc0 = head0 + c * hbc;
            let hh = arange(hbc);
            // Head lanes past HB and value rows past DV are masked (statically all-true masks when
            // HB is a power of two and BV divides DV, which the compiler then drops).
            let hmask = if HB == hbp {
                full([hbc], true)
            } else {
                hh + c * hbc < HB
            };
            let heads = hc0 + hh;
            // Per tile row r = (vl_i · vh + vh_i) · hbc + head: its head and value row.
            let r_hb = idx3(vl, 2);
            let r_head = hc0 + r_hb;
            let r_v = program_id(2) * BV + idx3(vl, 1) * vl + idx3(vl, 0);
            let xmask = if HB == hbp && DV % BV == 0 {
                full([rows], true)
            } else {
                (r_hb + c * hbc < HB) & (r_v < DV)
            };
            let xoff = r_head * DV + r_v; // offset of x, z, y in a token's [HEADS, DV]
            let d_rows = load(d + r_head, xmask);

            // Decays are exp2 of (A log2 e) times a running sum of dt'.
            let a_h = load(a + heads, hmask) * std::f32::consts::LOG2_E;
            let bias = load(dt_bias + heads, hmask);
            let hm = hmask.expand_dims(0);
            // dt' of the committed records, one gather: [nr, hbc] (0 on the drafts' rows).
            let dt_c = load(
                ring_dt + (pos * HEADS + hc0).expand_dims(1) + hh.expand_dims(0),
                committed.expand_dims(1) & hm,
            );
            // w_j = γ_{j+1:h-1} dt'_j (the later committed records are the rows above), C = Σ dt'.
            let w = exp2(a_h.expand_dims(0) * cumsum_exclusive(dt_c, 0)) * dt_c;
            let c_all = sum(dt_c, 0);
            // dt' of the drafts, [tp, hbc] (0 past n).
            let dmask = (s < n).expand_dims(1) & hm;
            let dt_tp = select(
                dmask,
                softplus(
                    load(dt + (tok0 + s).expand_dims(1) * HEADS + heads.expand_dims(0), dmask).cast::<f32>()
                        + bias.expand_dims(0),
                ),
                0.0,
            );
            store(
                ring_dt + (pos_d * HEADS).expand_dims(1) + heads.expand_dims(0),
                dt_tp,
                dmask & first,
            );

            // The checkpoint tile, [kh, rows, kl].
            let srow = ckpt + slot64 * (HEADS * DV * DK) + (r_head * DV + r_v) * DK; // [rows]
            let st = load(
                srow.expand_dims(0).expand_dims(2) + koff,
                xmask.expand_dims(0).expand_dims(2),
            );
            // The records' x, [rh · rows1, rl, vl]: (rh_i, vh_i, head) × rl_i × vl_i, record row
            // i = rl_i · rh + rh_i, value row vh_i · vl + vl_i (vl contiguous values per load);
            // the committed records carry their weight w_j, the drafts' depends on the draft.
            let e_hb = idx3(rh, 2).expand_dims(1).expand_dims(2);
            let e_v = (program_id(2) * BV + idx3(rh, 1) * vl).expand_dims(1).expand_dims(2)
                + arange(vl).expand_dims(0).expand_dims(0);
            let ri = arange(rl).expand_dims(0).expand_dims(2) * rh + idx3(rh, 0).expand_dims(1).expand_dims(2);
            let xm3 = if HB == hbp && DV % BV == 0 {
                full([rh * rows1, 1, vl], true)
            } else {
                (e_hb + c * hbc < HB) & (e_v < DV)
            };
            let xo3 = (hc0 + e_hb) * DV + e_v;
            let x_draft = load(x + (tok0 + ri) * (HEADS * DV) + xo3, (ri < n) & xm3);
            let rpos = wrap(start + h - 1 - (ri - tp));
            let x_rec = load_or(
                ring_x + rpos * (HEADS * DV) + xo3,
                (ri >= tp) & (ri < h + tp) & xm3,
                x_draft,
            )
            .cast::<f32>()
                * on_rec(rec3(select(is_draft.expand_dims(1), 1.0, w)));

            // γ_{0:h+s} = exp(A (C + Σ_{s' ≤ s} dt'_{h+s'})) of every draft on the rows: [tp, rows].
            let gam_all = exp2(a_h.expand_dims(0) * (c_all.expand_dims(0) + cumsum(dt_tp, 0)));
            let gam_rows = on_rows(gam_all);
            // Per record row, the decay sum from its record to draft s and its own dt' (1 for
            // committed rows, whose w_j is in x_rec; 0 for drafts after s).
            let ii = i.expand_dims(1);
            let mut fsum = zeros::<f32>([nr, hbc]);
            let mut fdt = select(ii >= tp as i32, 1.0, zeros::<f32>([nr, hbc]));
            let mut pd = wrap(start + h); // ring position of draft s
            for sc in 0..T {
                let live = n > sc as i32;
                let tok = tok_of(sc);
                let at_s = s.expand_dims(1) == sc as i32;
                let dt_s = sum(select(at_s, dt_tp, 0.0), 0).expand_dims(0); // [1, hbc]
                fsum = fsum + select((ii < sc as i32) | (ii >= tp as i32), dt_s, 0.0);
                fdt = fdt + select(ii == sc as i32, dt_s, 0.0);
                // The records' weights for draft s beyond those in x_rec: committed γ_{h:h+s},
                // drafts s' ≤ s γ_{h+s'+1:h+s} dt'_{h+s'}.
                let f_s = exp2(a_h.expand_dims(0) * fsum) * fdt;
                let qrow = cmat + (tok * GROUPS + g) * DK;

                // S_ckpt q_s for every row, reduced over the registers of kh.
                let sq = sum(st * load(qrow + koff, true).cast::<f32>(), 0);
                // Σ_i f_i (k_i·q_s) x_i reduced over the registers: [rows, rl].
                let y_rec = sum((x_rec * on_rec(kq3s[sc] * rec3(f_s))).reshape([rh, rows1 * rl * vl]), 0)
                    .reshape([rows1 * rl, vl])
                    .trans()
                    .reshape([rows, rl]);
                // One reduction over the lanes for both: γ_{0:h+s} S_ckpt q_s + Σ_i (…) x_i.
                let gam = sum(select(s.expand_dims(1) == sc as i32, gam_rows, 0.0), 0);
                let y_sum = if kl % rl == 0 {
                    // kl = (kl/rl registers) · (rl lanes), the records' lanes: reduce the registers,
                    // then both over the lanes at once.
                    sum(sum(sq.reshape([rows, rl, kl / rl]), 2) * gam.expand_dims(1) + y_rec, 1)
                } else {
                    sum(sq, 1) * gam + sum(y_rec, 1)
                };

                let xo = tok * (HEADS * DV) + xoff; // [rows]
                let tmask = xmask & live;
                let x_raw = load(x + xo, xmask);
                let mut y = y_sum + d_rows * x_raw.cast::<f32>();
                if HAS_Z {
                    // y · silu(z) = y · z / (1 + e^-z), the reciprocal as rsqrt² (no division).
                    let zf = load(z + xo, xmask).cast::<f32>();
                    let r = rsqrt(1.0 + exp2(zf * -std::f32::consts::LOG2_E));
                    y = y * zf * (r * r);
                }
                store(out + xo, y.cast::<bf16>(), tmask);
                // Append the draft's x at ring position start + h + s (h unchanged).
                store(ring_x + pd * (HEADS * DV) + xoff, x_raw, tmask);
                pd = select(pd + 1 == cap as i32, 0, pd + 1);
            }

            if flush {
                // Fold the h committed records into the chunk's checkpoint rows, written once:
                // S_ckpt ← γ_{0:h-1} S_ckpt + Σ_j w_j x_j k_jᵀ (the outputs above used it as it was).
                let g_rows = on_rows(exp2(a_h * c_all).expand_dims(0)).reshape([rows]);
                let kc = fold_columns(rows, nr, DK);
                let smask = xmask.expand_dims(1);
                if kc > 0 {
                    // All heads in one dot per kc columns: A = (w_j x_j)ᵀ [rows, nr], B = k [nr, kc].
                    let x_f = load(
                        ring_x + (pos * (HEADS * DV)).expand_dims(0) + xoff.expand_dims(1),
                        smask & committed.expand_dims(0),
                    )
                    .cast::<f32>();
                    let w_rows = on_rows(w).trans();
                    let a_t = x_f * w_rows;
                    for c2 in 0..DK / kc {
                        let kcol = arange(kc) + (c2 * kc) as i32;
                        let sptr = srow.expand_dims(1) + kcol.expand_dims(0); // [rows, kc]
                        let k_f = load(
                            ring_b + ((pos * GROUPS + g) * DK).expand_dims(1) + kcol.expand_dims(0),
                            committed.expand_dims(1),
                        )
                        .cast::<f32>();
                        let upd = dot_acc(a_t, k_f, g_rows.expand_dims(1) * load(sptr, smask));
                        store(sptr, upd, smask);
                    }
                } else {
                    // Head by head: A = (w_j x_j)ᵀ [BV, nr], B = k [nr, DK].
                    let kk = arange(DK);
                    let k_f = load(
                        ring_b + (pos * GROUPS + g).expand_dims(1) * DK + kk.expand_dims(0),
                        committed.expand_dims(1),
                    )
                    .cast::<f32>();
                    let v = program_id(2) * BV + arange(BV);
                    let vmask = v < DV;
                    for hc in range(0, hbc as i32) {
                        let head = hc0 + hc;
                        let col = (hh == hc).expand_dims(0);
                        let w_h = sum(select(col, w, 0.0), 1);
                        let g_h = exp2(sum(select(hh == hc, a_h * c_all, 0.0), 0));
                        let x_h = load(
                            ring_x + (pos * (HEADS * DV) + head * DV).expand_dims(1) + v.expand_dims(0),
                            committed.expand_dims(1) & vmask.expand_dims(0) & (head < head0 + HB),
                        )
                        .cast::<f32>();
                        let sptr = ckpt
                            + (slot64 * HEADS + head.cast::<i64>()) * (DV * DK)
                            + (v * DK).expand_dims(1)
                            + kk.expand_dims(0);
                        let hmask2 = vmask.expand_dims(1) & (head < head0 + HB);
                        let upd = dot_acc((x_h * w_h.expand_dims(1)).trans(), k_f, g_h * load(sptr, hmask2));
                        store(sptr, upd, hmask2);
                    }
                }
            }
        };
        if nch == 1 {
            chunk(constant(0i32));
        } else {
            for c in range(0, nch as i32) {
                chunk(c);
            }
        }
        // The drafts' keys, by one program per group.
        let kk = arange(DK);
        let bmask = ((s < n) & first & (head0 % hpg == 0)).expand_dims(1);
        store(
            ring_b + ((pos_d * GROUPS + g) * DK).expand_dims(1) + kk.expand_dims(0),
            load(
                bmat + ((tok0 + s) * GROUPS + g).expand_dims(1) * DK + kk.expand_dims(0),
                bmask,
            ),
            bmask,
        );
    }
}
