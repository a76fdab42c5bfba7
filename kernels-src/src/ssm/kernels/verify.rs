//! Output-only speculative verification (ReplaySSM algorithm 2) for a whole batch.

use super::head_loop::{head_loop, HeadLoads, HeadRows};
use super::value_blocks::{by_value_block, last_tile_rows, value_rows};
use super::{record_rows, ring_position, slot_buffers};
use replay_dsl::prelude::*;

/// Fewest draft columns of the verification's matrix products: `T` is padded up to this many
/// (extra columns masked), the `N` of a tensor-core tile.
pub const MIN_DRAFT_COLUMNS: usize = 8;

/// Draft columns `tq` of the verification's products for up to `t` drafts: `t` rounded up to a
/// power of two, at least [`MIN_DRAFT_COLUMNS`].
pub const fn draft_columns(t: usize) -> usize {
    let tq = t.next_power_of_two();
    if tq < MIN_DRAFT_COLUMNS {
        MIN_DRAFT_COLUMNS
    } else {
        tq
    }
}

/// Record rows of `TIERS`' half-size tile at window `l` and up to `t` drafts (half of
/// `record_rows(l + tq)`), when it holds more rows than the drafts' `tq`: a row with `h`
/// committed records takes it where `h + tq` fits.
pub const fn half_record_rows(l: usize, t: usize) -> Option<usize> {
    let tq = draft_columns(t);
    let half = record_rows(l + tq) / 2;
    if half > tq {
        Some(half)
    } else {
        None
    }
}

/// The slice of `t` (first axis: head lanes) at the lane where the one-hot `[HBP]` mask `lane`
/// is set, as a select and a sum over the lanes (in registers when that axis is).
fn head_lane(t: Tile<f32>, lane: Tile<bool>) -> Tile<f32> {
    let mut m = lane;
    for axis in 1..t.rank() {
        m = m.expand_dims(axis);
    }
    sum(select(m, t, 0.0), 0)
}

/// `ASYNC`'s two-stage shared buffers of checkpoint rows `[rows, DK]`: one of `BV` rows, and
/// one of the last value block's tail tile where that is smaller, in the same bytes (a program
/// uses one of them).
#[derive(Clone, Copy)]
struct AsyncStages<T: Scalar> {
    full: Option<Shared<T>>,
    tail: Option<Shared<T>>,
}

impl<T: Scalar> AsyncStages<T> {
    /// The buffers (none unless `on`) for value blocks of `bv` rows, the last one's tile `tail`.
    fn declare(on: bool, bv: usize, tail: usize, dk: usize) -> Self {
        let full = on.then(|| shared::<T>(2, &[bv, dk]));
        AsyncStages {
            full,
            tail: full.filter(|_| tail < bv).map(|f| f.overlay(2, &[tail, dk])),
        }
    }

    /// The buffer of a tile of `rows` rows (`bv`, or the tail's).
    fn of(self, rows: usize, bv: usize) -> Option<Shared<T>> {
        if rows == bv {
            self.full
        } else {
            self.tail
        }
    }
}

/// `y · silu(z)` with `z` (`y` without): `y · z / (1 + e^-z)`, the reciprocal as `rsqrt²` (no
/// division).
pub(super) fn gated(y: Tile<f32>, z: Option<Tile<bf16>>) -> Tile<f32> {
    match z {
        Some(z) => {
            let zf = z.cast::<f32>();
            let r = rsqrt(1.0 + exp2(zf * -std::f32::consts::LOG2_E));
            y * zf * (r * r)
        }
        None => y,
    }
}

/// Verifies `n_drafts` (`1 ≤ n_drafts ≤ T`) draft tokens per row without materialising any state:
/// `O = S_ckpt Q D + V (W ⊙ (Kᵀ Q))` plus `D x` (times `silu(z)` when `HAS_Z`), with
/// `D = diag(γ_{0:h+s})`, `W_{js} = γ_{j+1:h+s}` for `j ≤ h+s` (else 0) and `V = [dt'_j x_j]`.
///
/// Program `(vb, hb, row)` of the `(⌈DV/BV⌉, HEADS/HB, batch)` grid handles the `HB` value heads
/// `hb·HB ..` (one group `g`) and value rows `vb·BV ..` of batch row `row` (a slot's programs
/// are launched one after the other: its state is read in address order). Where `BV` does not
/// divide `DV`, the last value block is masked, or with `TAIL` (a tuning axis) its rows take a
/// tile of the next power of two (Nano's 80 rows at BV32: 32 + 32 + 16, not 32 + 32 + 32 half
/// masked), with `ASYNC` through a buffer of its own rows overlaying the others. Every product
/// is a `dot`:
///
/// - **Records**: `nr = record_rows(L + tq)` rows (`tq` = `T` rounded up to a power of two, at
///   least [`MIN_DRAFT_COLUMNS`]): the drafts first (row `s` is draft `s`), then the `h`
///   committed records newest first (row `tq + i` is record `h - 1 - i`).
/// - **Once per program**: the group's keys `K` `[nr, DK]` and queries `Qᵀ` `[DK, tq]` (draft
///   column `s` reads token `min(s, n - 1)`, in bounds; columns past `n` are never written), and
///   `Kᵀ Q = dot(K, Qᵀ)` `[nr, tq]`, shared by the heads.
/// - **Once per program, for its `HB` heads** (a head axis first, `HB` rounded up to a power of
///   two, extra lanes masked): the records' and drafts' `dt'` (one `softplus` per draft), the
///   decay sums, `γ_{0:h+s}` `[HB, tq]` and, with `SHARED_WEIGHTS` (a tuning axis), the
///   weights `W` `[HB, nr, tq]` (the drafts' `dt'` appended to the ring by the programs with
///   `vb = 0`).
/// - **Per head**: its weights (a select and sum over the head axis of `W`, or computed from
///   the head's vectors without `SHARED_WEIGHTS`: fewer registers) `⊙ Kᵀ Q` `[nr, tq]`;
///   `S_ckpt Q = dot(S, Qᵀ)` and `V (W ⊙ Kᵀ Q) = dot(X, W ⊙ Kᵀ Q)` `[BV, tq]` with `X` the
///   records' `x` (loaded as `Xᵀ` `[nr, BV]`: contiguous value rows) and the records' `dt'`
///   folded into `W`; the outputs, and the drafts' `x` appended to the ring at positions
///   `(start + h + s) % (L + T)` (`h` unchanged; the keys by one program per group).
/// - **Numerics**: every decay is `exp2((A log2 e) · Σ dt')` over a plain sum of the positive
///   `dt'` of exactly its range: committed `w_j = γ_{j+1:h-1} dt'_j` from an exclusive running sum
///   down the rows, `C = Σ_j dt'_j`, the drafts' inclusive running sum `cs_s`, and for draft row
///   `s'` in column `s` a running sum along the columns of the drafts `s' < s'' ≤ s`. No ratios
///   or differences of prefix sums.
///
/// The heads run one after the other in a loop, each head's loads issued before its products;
/// with `PREFETCH` (a tuning axis) each iteration first issues the next head's loads, so that
/// they are in flight while this head's products run (two heads' tiles live: more registers);
/// with `ASYNC` (another, exclusive with it) the next head's checkpoint rows are copied into a
/// two-stage shared buffer while this head computes, and read right before their product (no
/// registers held for them in the meantime), and its drafts' `x` and `z` loaded into registers.
///
/// With `LP` (two state precisions) the checkpoint rows come from the f16 copy `ckpt_lp`.
///
/// With `TIERS` (a tuning axis) a row whose records fit half the record rows (`h + tq ≤ nr/2`)
/// takes a tile of that many: the records' work (keys, `Kᵀ Q`, weights, their product) follows
/// the window's fill rather than its capacity, for twice the code (H200, a T=8 cycle at
/// `L = 56`: Super 0.528 → 0.510 ms, Nano 0.609 → 0.574).
///
/// With `CHAINED` (a tuning axis) the three products chain their mmas on the accumulator
/// ([`DotPrecision::Tf32x3Chained`]: within 6.7e-6 of their scale at `K = 128`, for bf16
/// outputs) instead of adding each k-step's products apart: fewer instructions, a different
/// schedule (H200, `bench/NOTES.md` session 27: Nano's two-precision tile 0.997 → 0.959 steps).
///
/// The checkpoint is only read: the pre-flush of the committed records, when the row's flag
/// says so (`h + n > L`), is [`super::fold::mamba2_fold`], launched after this kernel. With
/// `FOLD_VERIFIES` (a plan choice, with the fold's `VERIFY`) such a row is left to the fold,
/// which verifies it from the checkpoint it folds: its checkpoint is read once per cycle, not
/// twice (H200, B = 256, T = 8: the cycle −3.5 % in both models and precisions, `bench/NOTES.md`
/// session 34).
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
    #[extent(slots * HEADS * DV * DK * LP)] ckpt_lp: Ptr<f16>,
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
    #[constexpr(default = 16)] BV: usize,
    #[constexpr(default = 4)] HB: usize,
    #[constexpr(default = false)] PREFETCH: bool,
    #[constexpr(default = true)] SHARED_WEIGHTS: bool,
    #[constexpr(default = false)] ASYNC: bool,
    #[constexpr(default = false)] LP: bool,
    #[constexpr(default = false)] TIERS: bool,
    #[constexpr(default = false)] TAIL: bool,
    #[constexpr(default = false)] CHAINED: bool,
    #[constexpr(default = false)] FOLD_VERIFIES: bool,
) {
    static_assert(GROUPS > 0 && HEADS % GROUPS == 0, "HEADS must be a multiple of GROUPS");
    static_assert(HB > 0 && (HEADS / GROUPS) % HB == 0, "HB must divide HEADS / GROUPS");
    static_assert(L >= 1 && T >= 1 && T <= L, "1 ≤ T ≤ L");
    let dots = match CHAINED {
        true => DotPrecision::Tf32x3Chained,
        false => DotPrecision::Tf32x3,
    };
    let _ = (batch, slots);
    let hpg = HEADS / GROUPS;
    let cap = L + T;
    let tq = draft_columns(T);
    let nr_all = record_rows(L + tq);

    let row = program_id(2);
    let head0 = program_id(1) * HB;
    let g = head0 / hpg;
    let first = program_id(0) == 0;
    let n = n_drafts;
    let slot = load(slot_idx + row, true);
    if slot != 0 {
        let mrow = meta + slot * 4;
        let start = load(mrow, true);
        let h = load(mrow + 1, true);
        // The two-stage buffers of ASYNC's checkpoint rows, declared once for both tiers.
        let last = last_tile_rows(DV, BV, TAIL);
        let stages_f32 = AsyncStages::<f32>::declare(ASYNC && !LP, BV, last, DK);
        let stages_f16 = AsyncStages::<f16>::declare(ASYNC && LP, BV, last, DK);
        // The verification over `nr` record rows (the drafts' and the committed ones) and `bv`
        // value rows (`BV`, or the last value block's tail tile).
        let verify_rows = |nr: usize, bv: usize| {
            let ring = slot_buffers(slot, rec_dt, rec_x, rec_b, ckpt, ckpt_lp, cap, HEADS, GROUPS, DK, DV);
            let (ring_dt, ring_x, ring_b, state) = (ring.dt, ring.x, ring.b, ring.ckpt);
            // The row's first token in the inputs; ring positions (start + j < cap + L: one wrap).
            let tok0 = row * n;

            // Record rows i: draft i (i < tq, live if i < n), then committed record h-1-(i-tq).
            let i = arange(nr);
            let is_draft = i < tq as i32;
            let draft_row = i < n;
            let committed = (i >= tq as i32) & (i < h + tq as i32);
            let pos = ring_position(start + h - 1 - (i - tq as i32), cap);
            // Draft columns s: the token each reads, and their ring positions.
            let s = arange(tq);
            let live = s < n;
            let tok_s = tok0 + minimum(n - 1, s);
            let pos_d = ring_position(start + h + s, cap);
            let kk = arange(DK);

            // The group's keys of rows `r` in a [tokens, GROUPS, DK] buffer, [len r, DK].
            let krow =
                |base: Tile<Ptr<bf16>>, r: Tile<i32>| base + (r * GROUPS + g).expand_dims(1) * DK + kk.expand_dims(0);
            // The group's queries Qᵀ [DK, tq], keys of the records [nr, DK] and Kᵀ Q [nr, tq].
            let q_bf = load(
                cmat + ((tok_s * GROUPS + g) * DK).expand_dims(0) + kk.expand_dims(1),
                true,
            );
            let k_draft = load(krow(bmat, tok0 + i), draft_row.expand_dims(1));
            let keys = load_or(krow(ring_b, pos), committed.expand_dims(1), k_draft);
            let kq = dot_in(keys, q_bf, dots); // bf16 products are exact in f32
            let q_t = q_bf.cast::<f32>();
            let q_lp = q_t.cast::<f16>();

            // Which record rows weigh on which draft column: the committed ones on all, draft s' on
            // the columns s ≥ s'; and for draft rows, which drafts' decays lie between s' and s.
            let ii = i.expand_dims(1);
            let ss = s.expand_dims(0);
            let weighs = committed.expand_dims(1) | (is_draft.expand_dims(1) & (ii <= ss));
            let after_row = ii < ss;

            let (v, vmask) = value_rows(DV, BV, bv, TAIL);
            let vm = vmask.expand_dims(1);
            // Element offsets of (value row, token r) of a head in a [tokens, HEADS, DV] buffer:
            // [BV, len r], and transposed, [len r, BV] (value rows contiguous: vector loads).
            let xoff = |head: Tile<i32>, r: Tile<i32>| (r * (HEADS * DV) + head * DV).expand_dims(0) + v.expand_dims(1);
            let xoff_t =
                |head: Tile<i32>, r: Tile<i32>| (r * (HEADS * DV) + head * DV).expand_dims(1) + v.expand_dims(0);
            // A head's checkpoint rows [BV, DK] (element offsets), of `ckpt` or, with LP, of
            // `ckpt_lp`, whose product with the queries is one f16 term (the bf16 queries are
            // exact in f16).
            let soff_of = |head: Tile<i32>| ((head * DV + v) * DK).expand_dims(1) + kk.expand_dims(0);
            let sptr_of = |head: Tile<i32>| state + soff_of(head);
            let lp_of = |head: Tile<i32>| ring.ckpt_lp + soff_of(head);
            // A head's loads besides its checkpoint rows [BV, DK] (none where `m` is false): the
            // records' x of the value rows [nr, BV] and the drafts' x and z [BV, tq] (z only
            // with HAS_Z); `head_loop` issues them before the head's products (the drafts' a
            // head ahead with ASYNC).
            let records_x = |head: Tile<i32>, m: Tile<bool>| {
                let vmr = vmask.expand_dims(0) & m;
                let x_draft = load(x + xoff_t(head, tok0 + i), draft_row.expand_dims(1) & vmr);
                load_or(ring_x + xoff_t(head, pos), committed.expand_dims(1) & vmr, x_draft)
            };
            let drafts_xz = |head: Tile<i32>, m: Tile<bool>| {
                let xo = xoff(head, tok_s);
                let x_s = load(x + xo, vm & m);
                let z_s = HAS_Z.then(|| load(z + xo, vm & m));
                (x_s, z_s)
            };
            let loads = || HeadLoads {
                own: &records_x,
                ahead: &drafts_xz,
            };
            // The per-head vectors of all HB heads at once, before the head loop, with the head
            // axis first (HB rounded up to a power of two, the extra lanes masked off).
            let hh = arange(HB.next_power_of_two());
            let hmask = hh < HB as i32;
            let heads = head0 + hh;
            let hm = hmask.expand_dims(1);
            let a_hb = load(a + heads, hmask) * std::f32::consts::LOG2_E;
            let d_hb = load(d + heads, hmask);
            let bias = load(dt_bias + heads, hmask).expand_dims(1);
            let softplus_dt = |tok: Tile<i32>, m: Tile<bool>| {
                let m = hm & m.expand_dims(0);
                let raw = load(dt + heads.expand_dims(1) + (tok * HEADS).expand_dims(0), m);
                select(m, softplus(raw.cast::<f32>() + bias), 0.0)
            };
            // dt' of the records [HB, nr] (committed from the ring, drafts from the inputs) and of
            // the draft columns [HB, tq] (0 past n).
            let dt_c = load(
                ring_dt + heads.expand_dims(1) + (pos * HEADS).expand_dims(0),
                hm & committed.expand_dims(0),
            );
            let dt_d = softplus_dt(tok0 + s, live);
            // The drafts' rows take their dt' from the columns (the diagonal; 0 on the other rows).
            let diag = (ii == ss).expand_dims(0);
            let dt_i = sum(select(diag, dt_d.expand_dims(1), 0.0), 2);
            let a2 = a_hb.expand_dims(1);
            // w_j = γ_{j+1:h-1} dt'_j (the later committed records are the rows above), C = Σ dt'.
            let w = exp2(a2 * cumsum_exclusive(dt_c, 1)) * dt_c;
            let c_all = sum(dt_c, 1);
            let cs = cumsum(dt_d, 1);
            // γ_{0:h+s} [HB, tq]: the checkpoint's decay up to draft s.
            let gam = exp2(a2 * (c_all.expand_dims(1) + cs));
            // Record row i in column s [nr, tq]: committed γ_{h:h+s} w_j; draft s' ≤ s
            // γ_{h+s'+1:h+s} dt'_{h+s'} (`fac` [HB, nr]: w_j or dt'_{h+s'}). The exponents are
            // running sums along the columns: of every draft for the committed rows, of the drafts
            // after s' for draft row s'. Of the heads with lanes `lane` (`[HB, nr, tq]` for all of
            // them, `[nr, tq]` for one).
            let fac = select(is_draft.expand_dims(0), dt_i, w);
            let summed = committed.expand_dims(1) | after_row;
            let weights = |lane: Option<Tile<bool>>| match lane {
                None => {
                    let expo = cumsum(select(summed.expand_dims(0), dt_d.expand_dims(1), 0.0), 2);
                    let decay = exp2(a2.expand_dims(2) * expo);
                    select(weighs.expand_dims(0), decay * fac.expand_dims(2), 0.0)
                }
                Some(l) => {
                    let expo = cumsum(select(summed, head_lane(dt_d, l).expand_dims(0), 0.0), 1);
                    let decay = exp2(head_lane(a_hb, l) * expo);
                    select(weighs, decay * head_lane(fac, l).expand_dims(1), 0.0)
                }
            };
            // SHARED_WEIGHTS: the weights of all HB heads at once, before the head loop (more
            // registers held through it); else each head's in its iteration.
            let wt = SHARED_WEIGHTS.then(|| weights(None));
            // The drafts' keys appended at ring positions start + h + s, by one program per group,
            // before the head loop (nothing held through it for them; this launch reads the drafts'
            // keys from `bmat`, never from those positions).
            let bmask = (live & first & (head0 % hpg == 0)).expand_dims(1);
            store(krow(ring_b, pos_d), load(krow(bmat, tok0 + s), bmask), bmask);
            // The drafts' dt' appended at ring positions start + h + s (by the programs with vb = 0).
            store(
                ring_dt + heads.expand_dims(1) + (pos_d * HEADS).expand_dims(0),
                dt_d,
                hm & (live & first).expand_dims(0),
            );

            // One head's outputs and records, from its tiles (`sq` gives the checkpoint rows times
            // the queries, called right before their use); `hc` is its head lane.
            let per_head = |hc: Tile<i32>,
                            sq: &dyn Fn() -> Tile<f32>,
                            x_rec: Tile<bf16>,
                            (x_s, z_s): (Tile<bf16>, Option<Tile<bf16>>)| {
                let head = head0 + hc;
                let lane = hh == hc;
                let wt_h = match wt {
                    Some(wt) => head_lane(wt, lane),
                    None => weights(Some(lane)),
                };
                let wkq = wt_h * kq;
                let gam_h = head_lane(gam, lane);
                let d_h = head_lane(d_hb, lane);

                let x_rec = x_rec.cast::<f32>(); // [nr, BV]

                // The drafts' outputs [BV, tq]: γ_{0:h+s} S_ckpt q_s + Σ_i W_is (k_i·q_s) x_i + D x_s.
                let xo = xoff(head, tok_s); // x, z, y of (value row, draft)
                let y = gam_h.expand_dims(0) * sq() + dot_in(x_rec.trans(), wkq, dots) + d_h * x_s.cast::<f32>();
                let y = gated(y, z_s);
                let omask = vm & live.expand_dims(0);
                store(out + xo, y.cast::<bf16>(), omask);
                // Append the drafts' x at ring positions start + h + s.
                store(ring_x + xoff(head, pos_d), x_s, omask);
            };
            if LP {
                let rows = HeadRows {
                    ptr: &lp_of,
                    mask: vm,
                    q: q_lp,
                    stages: stages_f16.of(bv, BV),
                    precision: dots,
                };
                head_loop(head0, HB, PREFETCH, rows, loads(), &per_head);
            } else {
                let rows = HeadRows {
                    ptr: &sptr_of,
                    mask: vm,
                    q: q_t,
                    stages: stages_f32.of(bv, BV),
                    precision: dots,
                };
                head_loop(head0, HB, PREFETCH, rows, loads(), &per_head);
            }
        };
        // With TAIL, the last value block in a tile of its own rows where smaller than BV.
        let by_block = |nr: usize| by_value_block(DV, BV, TAIL, &|bv| verify_rows(nr, bv));
        // The verification of this row (none where the fold verifies it).
        let verify_row = || {
            // Rows whose records fit half the rows (`h + tq ≤ nr_all / 2`) take a half-size tile:
            // the records' work follows the window's fill, not its capacity.
            if let (true, Some(nr_half)) = (TIERS, half_record_rows(L, T)) {
                if h + tq as i32 <= nr_half as i32 {
                    by_block(nr_half);
                } else {
                    by_block(nr_all);
                }
            } else {
                by_block(nr_all);
            }
        };
        if FOLD_VERIFIES {
            // A row whose flag is set is verified by the fold, from its folded checkpoint
            // (`mamba2_fold` with `VERIFY`): its checkpoint is read once, by the fold.
            if load(mrow + 2, true) == 0 {
                verify_row();
            }
        } else {
            verify_row();
        }
    }
}
