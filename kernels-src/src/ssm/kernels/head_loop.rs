//! The loop over a program's value heads of the verification: each head's checkpoint rows
//! times the queries, and its other inputs, pipelined across heads.

use replay_dsl::prelude::*;

/// How the head loop loads a head's inputs besides its checkpoint rows (none where the mask is
/// false), in two parts that it may issue at different times: `own` in the head's own
/// iteration, `ahead` a head ahead with `ASYNC` (a few registers; loaded in their own
/// iteration, their latency stalled the first use of every head).
pub(super) struct HeadLoads<'a, R, E> {
    /// The part loaded in the head's own iteration.
    pub own: &'a dyn Fn(Tile<i32>, Tile<bool>) -> R,
    /// The part loaded a head ahead with `ASYNC`.
    pub ahead: &'a dyn Fn(Tile<i32>, Tile<bool>) -> E,
}

/// One head's work, given its lane, its checkpoint rows times the queries (computed when asked)
/// and its two parts of inputs.
pub(super) type PerHead<'a, R, E> = dyn Fn(Tile<i32>, &dyn Fn() -> Tile<f32>, R, E) + 'a;

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
/// them) and the next head's `ahead` inputs are loaded into registers before this head's
/// products; with `prefetch` all of the next head's loads are issued before this head's
/// products (two heads' tiles live: more registers).
#[kernel_fn]
pub(super) fn head_loop<T: Float, R: Carry, E: Carry>(
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
        buf.copy_async(0, ptr(head0), mask);
        let mut ahead = (loads.ahead)(head0, full([], true));
        for hc in range(0, hb as i32) {
            let next = hc + 1 < hb as i32;
            buf.copy_async((hc + 1) & 1, ptr(head0 + hc + 1), mask & next);
            let this = ahead;
            ahead = (loads.ahead)(head0 + hc + 1, next);
            let own = (loads.own)(head0 + hc, full([], true));
            let sq = || {
                wait_async(1);
                dot_in(buf.read(hc & 1), q, precision)
            };
            per_head(hc, &sq, own, this);
        }
    } else if prefetch {
        let tiles = |head: Tile<i32>, m: Tile<bool>| (both(head, m), load(ptr(head), mask & m));
        let mut next = tiles(head0, full([], true));
        for hc in range(0, hb as i32) {
            let ((own, this), st) = next;
            next = tiles(head0 + hc + 1, hc + 1 < hb as i32);
            per_head(hc, &|| dot_in(st, q, precision), own, this);
        }
    } else {
        for hc in range(0, hb as i32) {
            let (own, this) = both(head0 + hc, full([], true));
            let st = load(ptr(head0 + hc), mask);
            per_head(hc, &|| dot_in(st, q, precision), own, this);
        }
    }
}
