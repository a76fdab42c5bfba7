//! The loop over a program's value heads of the verification: each head's checkpoint rows
//! times the queries, and its other inputs, pipelined across heads.

use replay_dsl::prelude::*;

/// How the head loop loads a head's inputs besides its checkpoint rows (none where the mask is
/// false), in two parts that it may issue at different times: `own` in the head's own
/// iteration, `ahead` a head ahead with `ASYNC` (loaded in their own iteration, their latency
/// stalled the first use of every head), copied into shared memory as `copied` says.
pub(super) struct HeadLoads<'a, R, E> {
    /// The part loaded in the head's own iteration.
    pub own: &'a dyn Fn(Tile<i32>, Tile<bool>) -> R,
    /// The part loaded with the head's own or (`prefetch`) with the previous head's.
    pub ahead: &'a dyn Fn(Tile<i32>, Tile<bool>) -> E,
    /// The `ahead` part copied into two-stage shared buffers a head ahead, with `ASYNC` (no
    /// register and no scoreboard held for it through the iteration: ptxas gave the loads'
    /// scoreboard to short operations, which then waited for the memory).
    pub copied: Option<CopiedInputs<'a, E>>,
}

/// A head's `ahead` inputs copied into two-stage shared buffers: `copy(head, stage, mask)`
/// starts the copies (`groups` copy groups), `read(stage)` reads them once they are complete.
pub(super) struct CopiedInputs<'a, E> {
    /// Starts copying a head's inputs into a stage.
    pub copy: &'a dyn Fn(Tile<i32>, Tile<i32>, Tile<bool>),
    /// The copy groups `copy` starts.
    pub groups: usize,
    /// The inputs of a stage whose copies completed.
    pub read: &'a dyn Fn(Tile<i32>) -> E,
}

/// One head's work, given its lane, its checkpoint rows times the queries (computed when asked)
/// and its two parts of inputs (the `ahead` part when asked, after the rows' product: with
/// copied inputs, that product waits for their copies).
pub(super) type PerHead<'a, R, E> = dyn Fn(Tile<i32>, &dyn Fn() -> Tile<f32>, R, &dyn Fn() -> E) + 'a;

/// Where the head loop reads each head's checkpoint rows (element type `T`: the f32
/// checkpoint, or its f16 copy) and the queries it multiplies them with.
pub(super) struct HeadRows<'a, T: Float> {
    /// The rows `[BV, DK]` of a head.
    pub ptr: &'a dyn Fn(Tile<i32>) -> Tile<Ptr<T>>,
    /// Which of them exist.
    pub mask: Tile<bool>,
    /// The queries `Qᵀ` `[DK, tq]` in `T` (exact: bf16 values).
    pub q: Tile<T>,
    /// With `ASYNC`, the two-stage shared buffer `[BV, DK]` the rows are copied into.
    pub stages: Option<Shared<T>>,
    /// The precision of their product.
    pub precision: DotPrecision,
}

/// The loop over the program's `hb` heads from `head0`: each head's inputs (`loads`) and
/// checkpoint rows (`rows`) loaded, then `per_head` given its rows times the queries (computed
/// when it asks, right before their use). With `ASYNC` (`stages`) the rows are double-buffered
/// in shared memory (the next head's copied while this head computes, no registers held for
/// them), and the next head's `ahead` inputs with them (`loads.copied`); with `prefetch` all of
/// the next head's loads are issued before this head's products (two heads' tiles live: more
/// registers).
#[kernel_fn]
pub(super) fn head_loop<T: Float, R: Carry, E: Carry + Copy>(
    head0: Tile<i32>,
    hb: usize,
    prefetch: bool,
    rows: HeadRows<'_, T>,
    loads: HeadLoads<'_, R, E>,
    per_head: &PerHead<'_, R, E>,
) {
    let both = |head: Tile<i32>, m: Tile<bool>| ((loads.own)(head, m), (loads.ahead)(head, m));
    let HeadRows {
        ptr,
        mask,
        q,
        stages,
        precision,
    } = rows;
    if let Some(buf) = stages {
        let copied = loads.copied.as_ref().expect("ASYNC copies the `ahead` inputs too");
        // The rows and the inputs of a head copied a head ahead, one after the other (their
        // copies share a barrier), waited for together.
        buf.copy_async(0, ptr(head0), mask);
        (copied.copy)(head0, full([], 0), full([], true));
        for hc in range(0, hb as i32) {
            let next = hc + 1 < hb as i32;
            buf.copy_async((hc + 1) & 1, ptr(head0 + hc + 1), mask & next);
            (copied.copy)(head0 + hc + 1, (hc + 1) & 1, next);
            let own = (loads.own)(head0 + hc, full([], true));
            let sq = || {
                wait_async(1 + copied.groups);
                dot_in(buf.read(hc & 1), q, precision)
            };
            per_head(hc, &sq, own, &|| (copied.read)(hc & 1));
        }
    } else if prefetch {
        let tiles = |head: Tile<i32>, m: Tile<bool>| (both(head, m), load(ptr(head), mask & m));
        let mut next = tiles(head0, full([], true));
        for hc in range(0, hb as i32) {
            let ((own, this), st) = next;
            next = tiles(head0 + hc + 1, hc + 1 < hb as i32);
            per_head(hc, &|| dot_in(st, q, precision), own, &|| this);
        }
    } else {
        for hc in range(0, hb as i32) {
            let (own, this) = both(head0 + hc, full([], true));
            let st = load(ptr(head0 + hc), mask);
            per_head(hc, &|| dot_in(st, q, precision), own, &|| this);
        }
    }
}
