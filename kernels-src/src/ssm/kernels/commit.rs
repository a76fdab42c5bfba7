//! The device-side commit of the replay counters: no host round trip in the decode loop.

use replay_dsl::prelude::*;

/// Advances the counters `meta[slot] = (start, h, flush, ·)` of every non-padding row after a
/// replay launch, and computes the flush flag of the next one. `BLOCK` rows per program.
///
/// - `after_verify == 0` (after [`super::replay::mamba2_replay_step`]; `accepted` is not read):
///   a flushed row starts an empty window (`h ← 0`), any other row committed this step's
///   record (`h ← h + 1`).
/// - `after_verify != 0` (after [`super::verify::mamba2_verify`]): a flushed row drops its
///   folded records (`start ← (start + h) % (L+T)`, `h ← 0`); then `h ← h + accepted[row]`
///   (a pointer move: rejected drafts are overwritten later).
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
    let cap = L + T;
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
    let new_start = select(verified & flushed, (start + h) % cap, start);
    let kept = select(flushed, 0, h);
    let new_h = select(verified, kept + acc, select(flushed, 0, h + 1));
    let flag = select(next_drafts == 0, new_h + 1 >= L, new_h + next_drafts > L);
    store(mrow, new_start, live);
    store(mrow + 1, new_h, live);
    store(mrow + 2, flag.cast::<i32>(), live);
}
