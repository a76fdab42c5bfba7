//! The pre-flush of a verification: the committed records folded into the checkpoints.

use super::drafts::{DraftArgs, DraftInputs, DraftOutputs, Drafts};
use super::value_blocks::{by_value_block, value_rows};
use super::verify::draft_columns;
use super::{record_rows, ring_position, slot_buffers};
use replay_dsl::prelude::*;

/// The fold's product accumulates on the decayed checkpoint rows, which are most of the
/// result, over one k-step per 8 record rows: the tensor cores' mmas chain on them (within
/// 3·2⁻²³ of the result's scale per k-step: 2.9e-6 at 64 record rows) instead of each
/// k-step's products being summed apart and added with one rounding (32 adds per k-step and
/// warp at Nano's tile).
const CHAINED: DotPrecision = DotPrecision::Tf32x3Chained;

/// The precision of `VERIFY`'s products (the verification's, without `CHAINED`).
const VERIFY_DOTS: DotPrecision = DotPrecision::Tf32x3;

/// A head's tiles as the fold loads them: its checkpoint rows (when one block holds every key
/// column), `A`, its records' `dt'` and `x`, and with `VERIFY` its drafts' inputs.
type HeadTiles = (Option<Tile<f32>>, Tile<f32>, Tile<f32>, Tile<bf16>, Option<DraftInputs>);

/// Folds, for every row whose flush flag is set (`h + n > L` before a verification of `n`
/// drafts), its `h` committed records into its checkpoint, written once:
/// `S_ckpt ← γ_{0:h-1} S_ckpt + Σ_j w_j x_j k_jᵀ` with `w_j = γ_{j+1:h-1} dt'_j`. Rows without
/// the flag and padding rows (slot 0) do nothing. Launched after
/// [`super::verify::mamba2_verify`] (whose outputs use the checkpoint as it was) and before
/// [`super::commit::mamba2_commit`] (which moves `start` past the folded records): a kernel of
/// its own, so that its registers and tiles do not weigh on every verification.
///
/// Program `(vb, hb, row)` of the `(⌈DV/BV⌉, HEADS/HB, batch)` grid handles the `HB` value
/// heads `hb·HB ..` (one group `g`) and the value rows `vb·BV ..` of batch row `row` (a slot's
/// programs one after the other: its state streamed in address order; where `BV` does not
/// divide `DV`, the last value block masked, or with `TAIL` in a tile of the next power of two
/// of its rows, as in the verification), head by head, `FC` key columns at a time: one
/// `dot_acc` over all record rows per block (with `FC ≥ DK`, one block whose loads are all
/// issued first, the keys copied once per program into shared memory, where every head's
/// product reads them in place: no registers hold them, nothing restages them; Nano's BV32
/// HB12 tile 125 → 80 registers). Programs of rows without
/// the flag exit after two loads, so a launch in which few rows fold costs about its number
/// of programs: larger `HB` for such cycles (the tuner times whole cycles). Records are held
/// newest first (tile row `i` is record `h - 1 - i`), so the decay sums are exclusive prefix
/// sums of the positive `dt'` down the rows.
///
/// With `PREFETCH` (a tuning axis) each head's iteration first issues the next head's loads, so
/// that they are in flight while this head's product runs (two heads' tiles live: more
/// registers).
///
/// With `RELOAD_KEYS` (a tuning axis; one block of all key columns only) the group's keys are
/// loaded again for each head's product (from L1 or L2 after the first head) and staged,
/// instead of copied once into shared memory: 16 KB more read per head, no shared buffer.
///
/// With `LP` the low-precision checkpoint is written too (the f16 of every element written).
///
/// With `VERIFY` (the verification's arguments: it is the pre-flush of a verification of
/// `n_drafts` drafts, launched with `mamba2_verify`'s `FOLD_VERIFIES`, which leaves these rows
/// to it) each folded head's drafts are verified from its folded rows: `S_new Q` reads the
/// product's accumulator as its A in registers (no staging), the drafts' own terms are a
/// verification's with no committed record (`drafts::Drafts::outputs`), and the
/// drafts' records are appended as the verification appends them. A head's drafts' inputs are
/// issued with its other loads (a head ahead with `PREFETCH`): `x` and `z` copied into shared
/// memory (no registers held), `dt`, `dt_bias` and `D` loaded, so that the epilogue waits on
/// none of them (H200, Nano B=256 T=8: the fold's share 0.120 → 0.114 ms per cycle).
///
/// Contract: `h ≤ L` (as the commit kernel keeps it).
#[kernel]
pub fn mamba2_fold(
    #[extent(batch * n_drafts * HEADS * VERIFY)] dt: Ptr<bf16>,
    #[extent(batch * n_drafts * HEADS * DV * VERIFY)] x: Ptr<bf16>,
    #[extent(batch * n_drafts * GROUPS * DK * VERIFY)] bmat: Ptr<bf16>,
    #[extent(batch * n_drafts * GROUPS * DK * VERIFY)] cmat: Ptr<bf16>,
    #[extent(batch * n_drafts * HEADS * DV * HAS_Z * VERIFY)] z: Ptr<bf16>,
    #[extent(HEADS)] a: Ptr<f32>,
    #[extent(HEADS * VERIFY)] d: Ptr<f32>,
    #[extent(HEADS * VERIFY)] dt_bias: Ptr<f32>,
    #[extent(batch)] slot_idx: Ptr<i32>,
    #[extent(slots * 4)] meta: Ptr<i32>,
    #[extent(slots * HEADS * DV * DK)] ckpt: Ptr<f32>,
    #[extent(slots * HEADS * DV * DK * LP)] ckpt_lp: Ptr<f16>,
    #[extent(slots * (L + T) * HEADS)] rec_dt: Ptr<f32>,
    #[extent(slots * (L + T) * HEADS * DV)] rec_x: Ptr<bf16>,
    #[extent(slots * (L + T) * GROUPS * DK)] rec_b: Ptr<bf16>,
    #[extent(batch * n_drafts * HEADS * DV * VERIFY)] out: Ptr<bf16>,
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
    #[constexpr(default = 32)] FC: usize,
    #[constexpr(default = false)] PREFETCH: bool,
    #[constexpr(default = false)] LP: bool,
    #[constexpr(default = false)] TAIL: bool,
    #[constexpr(default = false)] RELOAD_KEYS: bool,
    #[constexpr(default = false)] VERIFY: bool,
) {
    static_assert(GROUPS > 0 && HEADS % GROUPS == 0, "HEADS must be a multiple of GROUPS");
    static_assert(HB > 0 && (HEADS / GROUPS) % HB == 0, "HB must divide HEADS / GROUPS");
    static_assert(L >= 1, "the window L must be at least 1");
    static_assert(FC.is_power_of_two(), "FC must be a power of two");
    static_assert(
        !RELOAD_KEYS || FC >= DK,
        "RELOAD_KEYS needs one block of all key columns (FC ≥ DK)",
    );
    let _ = (batch, slots);
    let cap = L + T;
    let nr = record_rows(L);
    let hpg = HEADS / GROUPS;
    let fc = DK.min(FC);

    let row = program_id(2);
    let head0 = program_id(1) * HB;
    let g = head0 / hpg;
    let slot = load(slot_idx + row, true);
    if slot != 0 {
        let mrow = meta + slot * 4;
        let flush = load(mrow + 2, true) != 0;
        if flush {
            let start = load(mrow, true);
            let h = load(mrow + 1, true);
            let ring = slot_buffers(slot, rec_dt, rec_x, rec_b, ckpt, ckpt_lp, cap, HEADS, GROUPS, DK, DV);
            let (ring_dt, ring_x, ring_b, state) = (ring.dt, ring.x, ring.b, ring.ckpt);
            let to = DraftOutputs { out, ring_x, ring_dt };
            // Row i: record h - 1 - i at ring position start + h - 1 - i (< 2·cap: one wrap).
            let i = arange(nr);
            let committed = i < h;
            let p = start + h - 1 - i;
            let pos = ring_position(p, cap);
            let cols = arange(fc);
            let keys_of = |kc: Tile<i32>| {
                let kptr = ring_b + (pos * GROUPS + g).expand_dims(1) * DK + kc.expand_dims(0);
                load(kptr, committed.expand_dims(1))
            };
            // One block of all record rows: with one block of columns too (FC ≥ DK), the
            // group's keys are copied once into shared memory, before the heads, where each
            // head's product reads them (none held in registers; loaded again for each head's
            // product with RELOAD_KEYS), and each head's checkpoint rows are loaded before its
            // weights are computed: every load of a head is in flight at once.
            let key_stage = (fc == DK && !RELOAD_KEYS).then(|| {
                let buffer = shared::<bf16>(1, &[nr, DK]);
                let kptr = ring_b + (pos * GROUPS + g).expand_dims(1) * DK + cols.expand_dims(0);
                buffer.copy_async(0, kptr, committed.expand_dims(1));
                buffer
            });
            // With VERIFY, the drafts this row verifies from its folded checkpoint: their
            // queries, and their keys' products with them (once per program).
            let drafts = VERIFY.then(|| {
                let args = DraftArgs {
                    dt,
                    x,
                    bmat,
                    cmat,
                    z: HAS_Z.then_some(z),
                    d,
                    dt_bias,
                };
                let dr = Drafts::of(args, (row, n_drafts, g), T, GROUPS, DK);
                // The drafts' keys appended at ring positions start + h + s, by one program per
                // group (this launch reads only the committed records' positions).
                let pos_d = dr.ring_positions(start + h, cap);
                let first = (program_id(0) == 0) & (head0 % hpg as i32 == 0);
                let m = (dr.live & first).expand_dims(1);
                store(
                    ring_b + (pos_d * GROUPS + g).expand_dims(1) * DK + arange(DK).expand_dims(0),
                    dr.keys,
                    m,
                );
                (dr, pos_d)
            });
            // The fold of `bv` value rows (`BV`, or the last value block's tail tile).
            let fold_rows = |bv: usize| {
                if key_stage.is_some() {
                    wait_async(0);
                }
                let (v, vmask) = value_rows(DV, BV, bv, TAIL);
                let vm = vmask.expand_dims(1);
                // With VERIFY, the drafts' x and z copied a head ahead of their use, and the
                // copy groups still in flight when a head uses its own (the next head's).
                let stages = drafts.map(|(dr, _)| dr.stages(bv));
                let pending = drafts.map_or(0, |(dr, _)| if PREFETCH { dr.copy_groups() } else { 0 });
                // Both checkpoints of the elements at `offs` (element offsets from the slot's).
                let write = |offs: Tile<i32>, s_new: Tile<f32>| {
                    store(state + offs, s_new, vm);
                    if LP {
                        store(ring.ckpt_lp + offs, s_new.cast::<f16>(), vm);
                    }
                };
                // A head's loads (none where `m` is false): its checkpoint rows (with one block
                // of all key columns), `A`, its records' `dt'` and `x`, and its drafts' inputs
                // (in flight behind the fold's product).
                let loads = |head: Tile<i32>, m: Tile<bool>| {
                    let soff = ((head * DV + v) * DK).expand_dims(1);
                    let s_all = (fc == DK).then(|| load(state + soff + cols.expand_dims(0), vm & m));
                    let a_h = load(a + head, m);
                    let dt_c = load(ring_dt + pos * HEADS + head, committed & m);
                    let x_rec = load(
                        ring_x + (pos * (HEADS * DV) + head * DV).expand_dims(1) + v.expand_dims(0),
                        committed.expand_dims(1) & vmask.expand_dims(0) & m,
                    );
                    let inputs = drafts
                        .zip(stages)
                        .map(|((dr, _), st)| dr.inputs(st, head, (v, vmask), m, (HEADS, DV)));
                    (s_all, a_h, dt_c, x_rec, inputs)
                };
                // One head's fold, from its loads.
                let fold_head = |head: Tile<i32>, (s_all, a_h, dt_c, x_rec, inputs): HeadTiles| {
                    let soff = ((head * DV + v) * DK).expand_dims(1);
                    let a_h = a_h * std::f32::consts::LOG2_E;
                    let w = exp2(a_h * cumsum_exclusive(dt_c, 0)) * dt_c;
                    let gam = exp2(a_h * sum(dt_c, 0));
                    let wx = (x_rec.cast::<f32>() * w.expand_dims(1)).trans();
                    match s_all {
                        Some(s_h) => {
                            let keys = match key_stage {
                                Some(buffer) => buffer.read(0),
                                None => keys_of(cols),
                            };
                            let s_new = dot_acc_in(wx, keys.cast::<f32>(), gam * s_h, CHAINED);
                            write(soff + cols.expand_dims(0), s_new);
                            if let (Some((dr, pos_d)), Some(inp), Some(st)) = (drafts, inputs, stages) {
                                let sq = dot_in(s_new, dr.queries, VERIFY_DOTS);
                                dr.outputs((head, a_h), (inp, st, pending), (v, vmask), sq, pos_d, to, (HEADS, DV));
                            }
                        }
                        _ => {
                            // One block of key columns: its rows folded and written.
                            let fold_block = |c: Tile<i32>| {
                                let kc = c * fc as i32 + cols;
                                let offs = soff + kc.expand_dims(0);
                                let s_new =
                                    dot_acc_in(wx, keys_of(kc).cast::<f32>(), gam * load(state + offs, vm), CHAINED);
                                write(offs, s_new);
                                (kc, s_new)
                            };
                            match drafts.zip(inputs).zip(stages) {
                                None => {
                                    for c in range(0, DK / fc) {
                                        fold_block(c);
                                    }
                                }
                                // With VERIFY, S_new Q summed over the blocks.
                                Some((((dr, pos_d), inp), st)) => {
                                    let sq0 = full([bv, draft_columns(T)], 0.0f32);
                                    let sq = for_range(range(0, (DK / fc) as i32), sq0, |c, sq| {
                                        let (kc, s_new) = fold_block(c);
                                        dot_acc_in(s_new, dr.query_rows(kc), sq, VERIFY_DOTS)
                                    });
                                    dr.outputs((head, a_h), (inp, st, pending), (v, vmask), sq, pos_d, to, (HEADS, DV));
                                }
                            }
                        }
                    }
                };
                if PREFETCH {
                    // The next head's loads issued before this head's fold (two heads' tiles live).
                    let mut next = loads(head0, full([], true));
                    for hc in range(0, HB as i32) {
                        let this = next;
                        next = loads(head0 + hc + 1, hc + 1 < HB as i32);
                        fold_head(head0 + hc, this);
                    }
                } else {
                    for hc in range(0, HB as i32) {
                        fold_head(head0 + hc, loads(head0 + hc, full([], true)));
                    }
                }
            };
            by_value_block(DV, BV, TAIL, &fold_rows);
        }
    }
}
