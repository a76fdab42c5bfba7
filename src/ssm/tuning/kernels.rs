//! Kernel-level tuning of the decode kernels: single launches over each kernel's search space
//! ([`super::space`]) on generated inputs whose counters spread the rows over the states of a
//! window or of a verification cycle, flushes included.

use super::space::{
    bv_values_conventional, bv_values_replay, bv_values_step, early_values, fixed_axes, flat_row_warps,
    flush_row_values, replay_shortlist, shape_axes, shape_dims, step_prefetch_values, verify_hb_values, OccupancyHints,
    Shortlist, FLAT_ROW_WARPS_PER_SM, FOLD_WARPS_PER_SM, HEAD_BLOCK_WARPS_PER_SM, TILE_SHORTLIST,
};
use super::Result;
use crate::ssm::state::{flat_row_grid, head_block_grid, step_grid};
use replay_dsl::KernelDef;
use replay_kernels::ssm::kernels::decode::mamba2_decode;
use replay_kernels::ssm::kernels::fold::mamba2_fold;
use replay_kernels::ssm::kernels::replay::mamba2_replay_step;
use replay_kernels::ssm::kernels::value_blocks::tail_rows;
use replay_kernels::ssm::kernels::verify::{half_record_rows, mamba2_verify};
use replay_kernels::ssm::shapes::ModelShape;
use replay_runtime::tune::{Autotuner, Fill, Problem, SearchSpace};

/// The verification's and the fold's `TAIL` constraint: a tail tile only where the last value
/// block's tile would be smaller (else `TAIL` changes nothing).
const TAIL_WHERE: &str = "a tail tile only where the last value block's is smaller";

/// `problem` with its buffers filled by `fills` and the cache-key sizes `sizes` (in order).
fn with_inputs<C>(
    problem: Problem<C>,
    fills: impl IntoIterator<Item = (&'static str, Fill)>,
    batch: usize,
    dims: impl IntoIterator<Item = (&'static str, i64)>,
) -> Problem<C> {
    let problem = fills.into_iter().fold(problem, |p, (n, f)| p.fill(n, f));
    let problem = problem.size("batch", batch as i64);
    dims.into_iter().fold(problem, |p, (n, v)| p.exact_size(n, v))
}

fn param_fills(batch: usize) -> Vec<(&'static str, Fill)> {
    vec![
        ("a", Fill::Uniform(-8.0, -0.5)),
        ("dt_bias", Fill::Uniform(-4.0, -1.0)),
        ("slot_idx", Fill::Values((1..=batch).map(|s| s as f64).collect())),
    ]
}

/// The record ring's `dt'`: softplus outputs (positive, as the kernels write them). The
/// default fill, uniform in ±1, would put negative `dt'` in the ring, whose decays then grow
/// without bound and make correct tilings disagree (the tuner compares every candidate's
/// outputs with the first one's).
fn ring_fills() -> Vec<(&'static str, Fill)> {
    vec![("rec_dt", Fill::Uniform(0.01, 0.7))]
}

/// The tile axes of the kernels that tile heads (the verification's, the fold): `BV`, `HB`,
/// 2, 4 or 8 warps and the occupancy hints for `warps_per_sm` warps per SM (2 warps: H200,
/// Nano's two-precision verification at BV32 HB12, 0.548 → 0.532 ms per T=8 cycle; its f32
/// one 0.563 → 0.584).
fn head_block_axes<C: replay_dsl::ConfigValues + 'static>(
    space: SearchSpace<C>,
    shape: &ModelShape,
    warps_per_sm: &'static [i64],
) -> SearchSpace<C> {
    space
        .axis("BV", bv_values_replay(shape))
        .axis("HB", verify_hb_values(shape))
        .axis("num_warps", [2, 4, 8])
        .occupancy_hints(warps_per_sm)
}

/// The [`Shortlist`] of tiles of the conventional kernel (`BV × num_warps × min_blocks`), as
/// many as the replay step's at `batch` ([`replay_shortlist`]).
pub fn tune_conventional(tuner: &mut Autotuner, shape: &ModelShape, batch: usize, gated: bool) -> Result<Shortlist> {
    let space = fixed_axes(
        SearchSpace::<<mamba2_decode::Kernel as KernelDef>::Config>::new(),
        shape,
        gated,
    )
    .axis("BV", bv_values_conventional(shape))
    .axis("num_warps", flat_row_warps(batch))
    .occupancy_hints(FLAT_ROW_WARPS_PER_SM)
    .register_limit();
    let grid_shape = *shape;
    let problem =
        Problem::new(move |c: &<mamba2_decode::Kernel as KernelDef>::Config| flat_row_grid(&grid_shape, batch, c.BV))
            .scalar("batch", batch as i32)
            .scalar("slots", batch as i32 + 1);
    let problem = with_inputs(problem, param_fills(batch), batch, shape_dims(shape, gated));
    let t = tuner.tune::<mamba2_decode::Kernel>(&space, &problem)?;
    Ok(Shortlist::of(&t, replay_shortlist(batch)))
}

/// Counters `(start, h, flush, ·)` spreading the slots over `(h, flush)` states (repeated over
/// the slots), so that one tuning launch does the work of one launch of the cycle averaged.
fn cycle_meta(states: impl IntoIterator<Item = (usize, bool)>) -> Fill {
    Fill::Values(
        states
            .into_iter()
            .flat_map(|(h, flush)| [0.0, h as f64, flush as u8 as f64, 0.0])
            .collect(),
    )
}

/// The states of the decode steps of one window of `window`: `h = 0 .. L − 1`, the last one
/// flushing (`h + 1 ≥ L`).
fn window_states(window: usize) -> Vec<(usize, bool)> {
    (0..window).map(|h| (h, h + 1 >= window)).collect()
}

/// The states of the verifications of `drafts` drafts, `accepted` accepted, at window `window`
/// in steady state (what `verify` + `commit` cycle through): `h = a, 2a, …` up to the first
/// `h` with `h + T > L`, which flushes (and the next verification starts from `h = a`).
pub(super) fn verify_states(window: usize, drafts: usize, accepted: usize) -> Vec<(usize, bool)> {
    let a = accepted.max(1);
    let mut states = Vec::new();
    let mut h = a;
    loop {
        let flush = h + drafts > window;
        states.push((h, flush));
        if flush {
            return states;
        }
        h += a;
    }
}

/// The [`Shortlist`] of tiles of the replay step (`BV × num_warps × min_blocks × EARLY × FC`) at window
/// `window`, timed on rows spread over the `L` steps of a window (one in `L` flushing), as the
/// window runs them; with `lp`, for two state precisions (`LP`: non-flush steps read the f16
/// checkpoint, a flush writes it too).
/// The counters a step reads (`meta`) never change between the timed launches; the counters it
/// writes (`meta_out`, one line per row) go to a buffer of their own, for a next decode step.
pub fn tune_replay_tiles(
    tuner: &mut Autotuner,
    shape: &ModelShape,
    batch: usize,
    gated: bool,
    window: usize,
    lp: bool,
) -> Result<Shortlist> {
    type C = <mamba2_replay_step::Kernel as KernelDef>::Config;
    let space = fixed_axes(SearchSpace::<C>::new(), shape, gated)
        .axis("L", [window as i64])
        .axis("T", [0])
        .axis("LP", [lp as i64])
        .axis("BV", bv_values_step(shape))
        .axis("num_warps", flat_row_warps(batch))
        .occupancy_hints(FLAT_ROW_WARPS_PER_SM)
        .axis("EARLY", early_values(batch))
        .axis("PREFETCH", step_prefetch_values(batch))
        .axis("FR", flush_row_values(batch))
        .register_limit();
    let grid_shape = *shape;
    let problem = Problem::new(move |c: &C| step_grid(&grid_shape, batch, c.BV))
        .scalar("batch", batch as i32)
        .scalar("slots", batch as i32 + 1)
        .scalar("next_drafts", 0)
        .fill("meta", cycle_meta(window_states(window)))
        .fill("meta_out", Fill::Constant(0.0));
    // `cycle`: the counters span the window (results tuned mid-window only are not reused).
    let dims = shape_dims(shape, gated)
        .into_iter()
        .chain([("L", window as i64), ("cycle", 1), ("lp", lp as i64)]);
    let problem = with_inputs(problem, param_fills(batch).into_iter().chain(ring_fills()), batch, dims);
    let t = tuner.tune::<mamba2_replay_step::Kernel>(&space, &problem)?;
    Ok(Shortlist::of(&t, replay_shortlist(batch)))
}

/// The [`Shortlist`] of tiles of the verification kernel for `drafts` drafts (`T = drafts`,
/// each verification carrying all of them) at window `window`, timed on rows spread over the
/// states of the verify–commit cycle with `accepted` drafts accepted each time (flushes
/// included); with `lp`, reading the f16 checkpoint (two state precisions).
#[allow(clippy::too_many_arguments)]
pub fn tune_verify_tiles(
    tuner: &mut Autotuner,
    shape: &ModelShape,
    batch: usize,
    gated: bool,
    window: usize,
    drafts: usize,
    accepted: usize,
    lp: bool,
) -> Result<Shortlist> {
    type C = <mamba2_verify::Kernel as KernelDef>::Config;
    let space = fixed_axes(SearchSpace::<C>::new(), shape, gated)
        .axis("L", [window as i64])
        .axis("T", [drafts as i64])
        .axis("LP", [lp as i64]);
    let space = head_block_axes(space, shape, HEAD_BLOCK_WARPS_PER_SM)
        .axis("PREFETCH", [0, 1])
        .axis("SHARED_WEIGHTS", [0, 1])
        .axis("ASYNC", [0, 1])
        .axis("TIERS", [0, 1])
        .axis("TAIL", [0, 1])
        .constraint(
            "the next head's checkpoint rows either prefetched or copied",
            |c: &C, _| !(c.PREFETCH && c.ASYNC),
        )
        .constraint(
            "record tiers only where half the record rows hold more than the drafts",
            |c: &C, _| !c.TIERS || half_record_rows(c.L, c.T).is_some(),
        )
        .constraint(TAIL_WHERE, |c: &C, _| !c.TAIL || tail_rows(c.DV, c.BV) < c.BV)
        .register_limit();
    let grid_shape = *shape;
    let problem = Problem::new(move |c: &C| head_block_grid(&grid_shape, batch, c.HB, c.BV))
        .scalar("batch", batch as i32)
        .scalar("slots", batch as i32 + 1)
        .scalar("n_drafts", drafts as i32)
        .fill("meta", cycle_meta(verify_states(window, drafts, accepted)));
    let dims = shape_dims(shape, gated).into_iter().chain([
        ("L", window as i64),
        ("T", drafts as i64),
        ("accepted", accepted as i64),
        ("cycle", 1),
        ("lp", lp as i64),
    ]);
    let problem = with_inputs(problem, param_fills(batch).into_iter().chain(ring_fills()), batch, dims);
    let t = tuner.tune::<mamba2_verify::Kernel>(&space, &problem)?;
    Ok(Shortlist::of(&t, TILE_SHORTLIST))
}

/// A shortlist of tiles of the verification's pre-flush (`BV × HB × num_warps × min_blocks ×
/// FC × PREFETCH × TAIL × RELOAD_KEYS`) at window `window`, timed on rows spread over the
/// verifications of a cycle (one in its length folding the `h` records of the flushing
/// verification, `h + T > L`; the others idle): an idle launch of one-head programs costs
/// ~40 µs at B = 256 (Super), a flushing one ~0.93 ms. With `lp` it writes the f16 checkpoint
/// too (H200, Nano B = 256 at v29's f32 tile: a flush 1073 µs against 859). Its tiles do not
/// change the verification's; whole cycles choose among them
/// ([`super::VerifyCycles::tune_fold`]).
pub fn tune_fold_tiles(
    tuner: &mut Autotuner,
    shape: &ModelShape,
    batch: usize,
    window: usize,
    drafts: usize,
    accepted: usize,
    lp: bool,
) -> Result<Shortlist> {
    type C = <mamba2_fold::Kernel as KernelDef>::Config;
    let space = shape_axes(SearchSpace::<C>::new(), shape)
        .axis("L", [window as i64])
        .axis("T", [drafts as i64])
        .axis("LP", [lp as i64]);
    let space = head_block_axes(space, shape, FOLD_WARPS_PER_SM)
        .axis("FC", [16, 32, 64, 128])
        .axis("PREFETCH", [0, 1])
        .axis("TAIL", [0, 1])
        .axis("RELOAD_KEYS", [0, 1])
        .constraint(TAIL_WHERE, |c: &C, _| !c.TAIL || tail_rows(c.DV, c.BV) < c.BV)
        .constraint("keys reloaded only with one block of all key columns", |c: &C, _| {
            !c.RELOAD_KEYS || c.FC >= c.DK
        })
        .register_limit();
    let cycle = verify_states(window, drafts, accepted);
    let grid_shape = *shape;
    let problem = Problem::new(move |c: &C| head_block_grid(&grid_shape, batch, c.HB, c.BV))
        .scalar("batch", batch as i32)
        .scalar("slots", batch as i32 + 1)
        .scalar("n_drafts", drafts as i32)
        .fill("meta", cycle_meta(cycle));
    let fills = param_fills(batch).into_iter().chain(ring_fills());
    let dims = shape_dims(shape, false).into_iter().chain([
        ("L", window as i64),
        ("T", drafts as i64),
        ("accepted", accepted as i64),
        ("lp", lp as i64),
    ]);
    let problem = with_inputs(problem, fills, batch, dims);
    let t = tuner.tune::<mamba2_fold::Kernel>(&space, &problem)?;
    Ok(Shortlist::of(&t, TILE_SHORTLIST))
}
