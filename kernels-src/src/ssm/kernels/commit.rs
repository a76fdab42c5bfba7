//! The device-side counter rule: [`advance_counters`] (shared by [`mamba2_commit`] and the
//! counter block of [`super::replay::mamba2_replay_step`], so the rule is written once) and the
//! commit kernel that applies it in place after a verification. No host round trip in the
//! decode loop.

use replay_dsl::prelude::*;

/// A slot's counters after a launch: what [`advance_counters`] computes.
pub struct Counters {
    /// `meta[s][META_START]`: ring position of the first committed record.
    pub start: Tile<i32>,
    /// `meta[s][META_H]`: committed records.
    pub h: Tile<i32>,
    /// `meta[s][META_FLUSH]`: the flush flag of the next launch.
    pub flag: Tile<bool>,
}

/// The counters `(start, h, flush)` of a slot after the launch that read them, and the flush
/// flag of the next launch (elementwise: scalars in the step kernel, `[BLOCK]` rows in the
/// commit kernel).
///
/// - `verified == None` (after a decode step, [`super::replay::mamba2_replay_step`]): a row
///   that flushed starts an empty window (`h ← 0`), any other row committed this step's record
///   (`h ← h + 1`); `start` is unchanged.
/// - `verified == Some((after_verify, accepted))` (the commit kernel, whose mode is a runtime
///   scalar): where `after_verify`, a flushed row drops its folded records
///   (`start ← (start + h) % cap`, `h ← 0`), then `h ← h + accepted` (a pointer move: rejected
///   drafts are overwritten later); elsewhere the decode rule above.
/// - The flag of the next launch (the host mirror is [`super::initial_flush_flag`]): a decode
///   step (`next_drafts == 0`) flushes when `h + 1 ≥ L`, a verification of `next_drafts`
///   drafts when `h + next_drafts > L`.
#[kernel_fn]
#[allow(clippy::too_many_arguments)]
pub fn advance_counters(
    start: Tile<i32>,
    h: Tile<i32>,
    flushed: Tile<bool>,
    verified: Option<(Tile<bool>, Tile<i32>)>,
    next_drafts: Tile<i32>,
    window: usize,
    cap: usize,
) -> Counters {
    let decoded = select(flushed, 0, h + 1);
    let (new_start, new_h) = match verified {
        None => (start, decoded),
        Some((after_verify, accepted)) => (
            select(after_verify & flushed, (start + h) % cap, start),
            select(after_verify, select(flushed, 0, h) + accepted, decoded),
        ),
    };
    let flag = select(next_drafts == 0, new_h + 1 >= window, new_h + next_drafts > window);
    Counters {
        start: new_start,
        h: new_h,
        flag,
    }
}

/// Advances the counters `meta[slot] = (start, h, flush, ·)` of every non-padding row in place
/// by [`advance_counters`], and computes the flush flag of the next launch. `BLOCK` rows per
/// program.
///
/// - `after_verify != 0` (after [`super::verify::mamba2_verify`], the usual use): a flushed row
///   drops its folded records, then `h ← h + accepted[row]`.
/// - `after_verify == 0` (`accepted` is not read): the decode-step rule (`h ← h + 1`, or `0`
///   after a flush). [`super::replay::mamba2_replay_step`] applies that rule itself (it writes
///   the advanced counters into its second counter buffer), so the decode loop does not launch
///   this kernel after a decode step; the mode stays for tests and for a loop that keeps one
///   counter buffer.
/// - The flag for the next launch: `next_drafts == 0` (a decode step) `h + 1 ≥ L`, else (a
///   verification of `next_drafts` drafts) `h + next_drafts > L`.
///
/// Launch it once per model step (all layers share `meta`).
#[kernel]
pub fn mamba2_commit(
    #[extent(batch)] slot_idx: Ptr<i32>,
    #[extent(batch)] accepted: Ptr<i32>,
    #[extent(slots * 4)] meta: Ptr<i32>,
    batch: i32,
    slots: i32,
    after_verify: i32,
    next_drafts: i32,
    #[constexpr(default = 16)] L: usize,
    #[constexpr(default = 4)] T: usize,
    #[constexpr(default = 128)] BLOCK: usize,
) {
    let rows = program_id(0) * BLOCK + arange(BLOCK);
    let in_batch = rows < batch;
    let slot = load(slot_idx + rows, in_batch);
    let live = in_batch & (slot != 0);
    let mrow = meta + slot * 4;
    let start = load(mrow, live);
    let h = load(mrow + 1, live);
    let flushed = load(mrow + 2, live) != 0;
    let verified = after_verify != 0;
    let acc = load(accepted + rows, live & verified);
    let c = advance_counters(start, h, flushed, Some((verified, acc)), next_drafts, L, L + T);
    store(mrow, c.start, live);
    store(mrow + 1, c.h, live);
    store(mrow + 2, c.flag.cast::<i32>(), live);
}
