//! Where the decode plans come from: a shortlist of tile shapes (and occupancy hints) from the
//! kernels' search spaces (the usual kernel autotuner, on generated inputs whose counters spread
//! the rows over the states of one whole window, flushes included — with fewer rows than states
//! a single launch sees only some of them, so its ranking only shortlists), then the replay
//! window `L` and the tiles chosen together from the amortised time of a whole window — `L − 1`
//! non-flush steps and one flush, one launch each, captured as one CUDA graph (two windows when
//! `L` is odd: a replay graph holds an even number of steps) and timed as one unit by the scheme
//! API — over windows pruned around the traffic model's `L* = sqrt(2 ā (M_S/r − T))` times the
//! shortlisted tiles. The speculative plan's window and verification tiles are chosen the same
//! way on the time per verification cycle (verify + commit, flushes included) around its own
//! `L*`. Everything is cached like every other tuning result (`REPLAY_TUNE=off|cached|force`).

use super::state::{
    flat_row_grid, head_block_grid, ConventionalPlan, DecodeLayer, Mamba2ReplayState, Next, ReplayPlan, StepIo, Tiles,
    DEFAULT_FLUSH_COLUMNS,
};
use replay_dsl::KernelDef;
use replay_kernels::ssm::kernels::commit::mamba2_commit;
use replay_kernels::ssm::kernels::decode::mamba2_decode;
use replay_kernels::ssm::kernels::fold::mamba2_fold;
use replay_kernels::ssm::kernels::record_rows;
use replay_kernels::ssm::kernels::replay::mamba2_replay_step;
use replay_kernels::ssm::kernels::verify::{mamba2_verify, MIN_DRAFT_COLUMNS};
use replay_kernels::ssm::reference::Mamba2Params;
use replay_kernels::ssm::shapes::ModelShape;
use replay_kernels::ssm::traffic::{RecordLayout, TrafficModel};
use replay_runtime::tune::space::{value_of, values_of};
use replay_runtime::tune::PruneContext;
use replay_runtime::tune::{Autotuner, Fill, Problem, Scheme, SearchSpace, TuneSource, Tuned, Values};
use replay_runtime::{Backend, Graph, RuntimeError, Stream};
use serde::{Deserialize, Serialize};

type Result<T> = std::result::Result<T, RuntimeError>;

/// The traffic model of one layer of `shape` at `batch` with an fp32 state and our records.
pub fn traffic(shape: ModelShape, batch: usize) -> TrafficModel {
    TrafficModel {
        shape: ModelShape { layers: 1, ..shape },
        batch,
        state_elem_bytes: 4.0,
        layout: RecordLayout::KeyPerGroup,
    }
}

/// `L*` for standard decoding (`ā = T = 1`) or for verifying `drafts` drafts with `accepted`
/// accepted on average, and the candidates searched: `L*·{½, ¾, 1, 4/3, 2}` and 16, rounded,
/// at least `max(T, 2)` and at most 64; for verification also, for each, the largest window
/// with the same record rows (`record_rows(L + tq)`, `tq` the padded draft columns): the
/// verification works on all its record rows whatever `h`, so that window costs the same per
/// non-flush verification and flushes less often.
pub fn window_candidates(shape: ModelShape, drafts: usize, accepted: f64) -> (f64, Vec<usize>) {
    let t = traffic(shape, 1);
    let star = if drafts == 0 {
        t.best_window(1.0, 1.0)
    } else {
        t.best_window(accepted, drafts as f64)
    };
    let lo = drafts.max(2);
    let mut c: Vec<usize> = [0.5, 0.75, 1.0, 4.0 / 3.0, 2.0]
        .iter()
        .map(|f| (star * f).round() as usize)
        .chain([16])
        .map(|l| l.clamp(lo, 64))
        .collect();
    if drafts > 0 {
        let tq = drafts.next_power_of_two().max(MIN_DRAFT_COLUMNS);
        let widest: Vec<usize> = c.iter().map(|&l| record_rows(l + tq) - tq).collect();
        c.extend(widest.into_iter().filter(|l| (lo..=64).contains(l)));
    }
    c.sort_unstable();
    c.dedup();
    // The rounded L* first: it is the default when tuning is off.
    let best = (star.round() as usize).clamp(lo, 64);
    c.retain(|&l| l != best);
    c.insert(0, best);
    (star, c)
}

/// How a plan was chosen (for the report).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Choice {
    /// What was chosen (`conventional tiles`, `replay tile shortlist`, `replay window L and
    /// tiles`, …).
    pub what: String,
    /// The chosen values.
    pub value: String,
    /// `tuned`, `cache`, `default`, or `file` (`bench-ssm --plans`).
    pub source: String,
    /// Candidates considered.
    pub candidates: usize,
}

fn source_name(s: TuneSource) -> String {
    match s {
        TuneSource::Tuned => "tuned",
        TuneSource::Cache => "cache",
        TuneSource::Default => "default",
    }
    .into()
}

/// The plans of one model and batch.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SsmPlans {
    /// The conventional kernel's tiles.
    pub conventional: ConventionalPlan,
    /// The replay decode plan (`T = 0`).
    pub replay: ReplayPlan,
    /// The speculative plan (`T` = the most drafts verified).
    pub verify: ReplayPlan,
    /// `L*` of standard decoding.
    pub l_star: f64,
    /// `L*` of the speculative plan.
    pub l_star_verify: f64,
    /// How each part was chosen.
    pub choices: Vec<Choice>,
}

fn shape_sizes(shape: &ModelShape, batch: usize, gated: bool) -> Vec<(&'static str, i64)> {
    vec![
        ("batch", batch as i64),
        ("heads", shape.heads as i64),
        ("groups", shape.groups as i64),
        ("dv", shape.dv as i64),
        ("dk", shape.dk as i64),
        ("gated", gated as i64),
    ]
}

fn bv_values(shape: &ModelShape) -> Vec<i64> {
    let top = shape.dv.next_power_of_two() as i64;
    [8, 16, 32, 64].into_iter().filter(|&b| b <= top).collect()
}

/// `BV` of the conventional kernels: the values of [`bv_values`] dividing the state rows of a
/// group (`heads/groups · dv`), as their flat row tiling requires.
fn bv_values_conventional(shape: &ModelShape) -> Vec<i64> {
    let group_rows = (shape.heads_per_group() * shape.dv) as i64;
    bv_values(shape).into_iter().filter(|&b| group_rows % b == 0).collect()
}

/// `BV` of the verification kernels (their record tiles make `BV = 8` pointless).
fn bv_values_replay(shape: &ModelShape) -> Vec<i64> {
    bv_values(shape).into_iter().filter(|&b| b >= 16).collect()
}

/// `BV` of the replay step, flat rows like the conventional kernels: 16 to 128 rows (up to
/// two heads of 64) dividing the state rows of a group.
fn bv_values_step(shape: &ModelShape) -> Vec<i64> {
    let group_rows = (shape.heads_per_group() * shape.dv) as i64;
    [16, 32, 64, 128].into_iter().filter(|&b| group_rows % b == 0).collect()
}

/// Key columns per flush block of the replay step searched (`FC`) at `batch`: ptxas allocates
/// registers for the larger of the step's two branches, and the fold's block sets its branch's
/// count (tile by tile, either value can be the smaller one). Small batches keep the larger
/// block: their flush step is a latency chain, one fold per block, and the single-launch
/// shortlist never times it (its rows are all non-flush).
fn flush_column_values(batch: usize) -> Vec<i64> {
    if batch <= LATENCY_BOUND_BATCH {
        vec![DEFAULT_FLUSH_COLUMNS as i64]
    } else {
        vec![16, DEFAULT_FLUSH_COLUMNS as i64]
    }
}

/// The replay step's shortlisted tiles for the window timing: at latency-bound batches each
/// also with all `dk` key columns in one flush block (every load of the flush issued at once).
/// The shortlist's single launches never flush there; the window's flush step does (H200,
/// Nano B = 1: one block 0.957× the conventional step, blocks of 32 0.93×; Super prefers 32).
pub fn with_whole_flush_blocks(tiles: &[Tiles], batch: usize, dk: usize) -> Vec<Tiles> {
    let mut all = tiles.to_vec();
    if batch <= LATENCY_BOUND_BATCH {
        for t in tiles {
            let whole = Tiles {
                flush_columns: dk,
                ..*t
            };
            if !all.contains(&whole) {
                all.push(whole);
            }
        }
    }
    all
}

/// Batches up to this size are latency-bound, larger ones bandwidth-bound: they also try the
/// replay step's early checkpoint load (`EARLY`, which elsewhere only costs registers) and
/// keep its larger flush block (`FC`).
const LATENCY_BOUND_BATCH: usize = 16;

/// `EARLY` values searched at `batch`.
fn early_values(batch: usize) -> Vec<i64> {
    if batch <= LATENCY_BOUND_BATCH {
        vec![0, 1]
    } else {
        vec![0]
    }
}

/// Occupancy hints on the `min_blocks` axis: ptxas caps the registers to fit that many
/// programs per SM; hints that make it spill are pruned by [`SearchSpace::register_limit`].
/// [`useful_occupancy_hint`] keeps two per warp count ([`OCCUPANCY_HINTS`]), which keeps a
/// tuning run of both models and five batches within minutes (each point is a module load and
/// a timing).
const MIN_BLOCKS: [i64; 3] = [1, 2, 4];
/// The `min_blocks` values kept per warp count: none, and the one capping registers at 128.
const OCCUPANCY_HINTS: usize = 2;

/// Keeps the occupancy hints that change something: none (`min_blocks = 1`), or as many
/// programs as make 16 warps per SM, which caps ptxas at 128 registers per thread (4 programs
/// of 4 warps, 2 of 8; 2 programs of 4 warps would allow all 255).
fn useful_occupancy_hint<C: replay_dsl::ConfigValues>(c: &C, _: &PruneContext<'_>) -> bool {
    let get = |name| value_of(c, name).unwrap_or(1);
    get("min_blocks") == 1 || get("min_blocks") * get("num_warps") == 16
}

/// The `min_blocks` axis of a search space, its useless hints pruned.
trait OccupancyHints {
    /// Adds the axis ([`MIN_BLOCKS`]) and [`useful_occupancy_hint`].
    fn occupancy_hints(self) -> Self;
}

impl<C: replay_dsl::ConfigValues + 'static> OccupancyHints for SearchSpace<C> {
    fn occupancy_hints(self) -> Self {
        self.axis("min_blocks", MIN_BLOCKS)
            .constraint("useful occupancy hint", useful_occupancy_hint)
    }
}

/// Warps searched for the flat-row kernels (the conventional kernel and the replay step) at
/// `batch`: 4 and 8, and at latency-bound batches also 1 and 2 (fewer cross-warp reductions
/// on a launch's critical path; H200, Nano B = 1: the step at BV32 w2 0.98× the conventional
/// step, at w4 0.92×).
fn flat_row_warps(batch: usize) -> Vec<i64> {
    if batch <= LATENCY_BOUND_BATCH {
        vec![1, 2, 4, 8]
    } else {
        vec![4, 8]
    }
}

/// Drafts accepted on average per verification of `drafts` drafts (¾ of them, at least 1): what
/// the speculative plan is tuned for and what `bench-ssm` commits.
pub fn accepted_drafts(drafts: usize) -> usize {
    ((0.75 * drafts as f64).round() as usize).max(1)
}

/// Heads per verification program: every divisor of the heads per group (a program loops over
/// its heads, so any divisor works; more heads share the group's keys and `Kᵀ Q`, fewer make
/// more programs for small batches).
fn verify_hb_values(shape: &ModelShape) -> Vec<i64> {
    let hpg = shape.heads_per_group() as i64;
    (1..=hpg).filter(|h| hpg % h == 0).collect()
}

/// The shape's constexprs (`HEADS`, `GROUPS`, `DK`, `DV`) as one-value axes.
fn shape_axes<C: replay_dsl::ConfigValues>(space: SearchSpace<C>, shape: &ModelShape) -> SearchSpace<C> {
    space
        .axis("HEADS", [shape.heads as i64])
        .axis("GROUPS", [shape.groups as i64])
        .axis("DK", [shape.dk as i64])
        .axis("DV", [shape.dv as i64])
}

/// [`shape_axes`] and the gate (`HAS_Z`).
fn fixed_axes<C: replay_dsl::ConfigValues>(space: SearchSpace<C>, shape: &ModelShape, gated: bool) -> SearchSpace<C> {
    shape_axes(space, shape).axis("HAS_Z", [gated as i64])
}

/// The tiles named in a kernel configuration's or a window candidate's values.
fn tiles_of(values: &Values) -> Tiles {
    let get = |name: &str, default: i64| values.get(name).copied().unwrap_or(default);
    Tiles {
        bv: get("BV", 32) as usize,
        hb: get("HB", 1) as usize,
        num_warps: get("num_warps", 4) as u32,
        min_blocks: get("min_blocks", 1) as u32,
        early: get("EARLY", 0) != 0,
        prefetch: get("PREFETCH", 0) != 0,
        shared_weights: get("SHARED_WEIGHTS", 1) != 0,
        flush_columns: get("FC", DEFAULT_FLUSH_COLUMNS as i64) as usize,
        async_copy: get("ASYNC", 0) != 0,
    }
}

/// Tile candidates a kernel-level tuning passes on to the whole-window timing, which chooses
/// among them jointly with the window `L` ([`tune_window`], [`tune_verify_window`]): a single
/// launch times the counter states its rows hold — at small batches not every state of a
/// window, flushes included — and near-equal candidates swap places from run to run, so its
/// ranking only shortlists.
pub const TILE_SHORTLIST: usize = 4;

/// Tile candidates of the replay step passed on at `batch`: twice [`TILE_SHORTLIST`] at
/// latency-bound batches, whose launches of a few µs rank least reliably and whose windows
/// are cheap to time.
pub fn replay_shortlist(batch: usize) -> usize {
    if batch <= LATENCY_BOUND_BATCH {
        2 * TILE_SHORTLIST
    } else {
        TILE_SHORTLIST
    }
}

/// The tiles a kernel-level tuning shortlisted.
#[derive(Clone, Debug, PartialEq)]
pub struct Shortlist {
    /// Up to [`TILE_SHORTLIST`] tiles (or as many as asked), the fastest single launch first
    /// (the default tiles alone when tuning is off).
    pub tiles: Vec<Tiles>,
    /// Where the kernel-level timings came from.
    pub source: TuneSource,
    /// Points of the search space.
    pub points: usize,
}

impl Shortlist {
    fn of<C: replay_dsl::ConfigValues>(tuned: &Tuned<C>, points: usize, len: usize) -> Shortlist {
        let tiles = match &tuned.record {
            Some(r) => r.fastest(len).into_iter().map(tiles_of).collect(),
            None => vec![tiles_of(&values_of(&tuned.config))],
        };
        Shortlist {
            tiles,
            source: tuned.source,
            points,
        }
    }

    /// The tiles, `; `-separated.
    pub fn show(&self) -> String {
        self.tiles.iter().map(Tiles::show).collect::<Vec<_>>().join("; ")
    }
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

/// Tiles of the conventional kernel (`BV × num_warps`).
pub fn tune_conventional(
    tuner: &mut Autotuner,
    shape: &ModelShape,
    batch: usize,
    gated: bool,
) -> Result<(Tiles, TuneSource, usize)> {
    let space = fixed_axes(
        SearchSpace::<<mamba2_decode::Kernel as KernelDef>::Config>::new(),
        shape,
        gated,
    )
    .axis("BV", bv_values_conventional(shape))
    .axis("num_warps", flat_row_warps(batch))
    .occupancy_hints()
    .register_limit();
    let grid_shape = *shape;
    let mut problem =
        Problem::new(move |c: &<mamba2_decode::Kernel as KernelDef>::Config| flat_row_grid(&grid_shape, batch, c.BV))
            .scalar("batch", batch as i32)
            .scalar("slots", batch as i32 + 1);
    for (n, f) in param_fills(batch) {
        problem = problem.fill(n, f);
    }
    for (n, v) in shape_sizes(shape, batch, gated) {
        problem = problem.size(n, v);
    }
    let points = bv_values_conventional(shape).len() * flat_row_warps(batch).len() * OCCUPANCY_HINTS;
    let t = tuner.tune::<mamba2_decode::Kernel>(&space, &problem)?;
    Ok((tiles_of(&values_of(&t.config)), t.source, points))
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
fn verify_states(window: usize, drafts: usize, accepted: usize) -> Vec<(usize, bool)> {
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
/// window runs them.
/// The counters a step reads (`meta`) never change between the timed launches; the counters it
/// writes (`meta_out`, one line per row) go to a buffer of their own, for a next decode step.
pub fn tune_replay_tiles(
    tuner: &mut Autotuner,
    shape: &ModelShape,
    batch: usize,
    gated: bool,
    window: usize,
) -> Result<Shortlist> {
    type C = <mamba2_replay_step::Kernel as KernelDef>::Config;
    let space = fixed_axes(SearchSpace::<C>::new(), shape, gated)
        .axis("L", [window as i64])
        .axis("T", [0])
        .axis("BV", bv_values_step(shape))
        .axis("num_warps", flat_row_warps(batch))
        .occupancy_hints()
        .axis("EARLY", early_values(batch))
        .axis("FC", flush_column_values(batch))
        .register_limit();
    let grid_shape = *shape;
    let mut problem = Problem::new(move |c: &C| flat_row_grid(&grid_shape, batch, c.BV))
        .scalar("batch", batch as i32)
        .scalar("slots", batch as i32 + 1)
        .scalar("next_drafts", 0)
        .fill("meta", cycle_meta(window_states(window)))
        .fill("meta_out", Fill::Constant(0.0));
    for (n, f) in param_fills(batch).into_iter().chain(ring_fills()) {
        problem = problem.fill(n, f);
    }
    for (n, v) in shape_sizes(shape, batch, gated) {
        problem = problem.size(n, v);
    }
    // `cycle`: the counters span the window (results tuned mid-window only are not reused).
    problem = problem.size("L", window as i64).size("cycle", 1);
    let points = bv_values_step(shape).len()
        * flat_row_warps(batch).len()
        * OCCUPANCY_HINTS
        * early_values(batch).len()
        * flush_column_values(batch).len();
    let t = tuner.tune::<mamba2_replay_step::Kernel>(&space, &problem)?;
    Ok(Shortlist::of(&t, points, replay_shortlist(batch)))
}

/// The [`Shortlist`] of tiles of the verification kernel for `drafts` drafts (`T = drafts`,
/// each verification carrying all of them) at window `window`, timed on rows spread over the
/// states of the verify–commit cycle with `accepted` drafts accepted each time (flushes
/// included).
#[allow(clippy::too_many_arguments)]
pub fn tune_verify_tiles(
    tuner: &mut Autotuner,
    shape: &ModelShape,
    batch: usize,
    gated: bool,
    window: usize,
    drafts: usize,
    accepted: usize,
) -> Result<Shortlist> {
    type C = <mamba2_verify::Kernel as KernelDef>::Config;
    let space = fixed_axes(SearchSpace::<C>::new(), shape, gated)
        .axis("L", [window as i64])
        .axis("T", [drafts as i64])
        .axis("BV", bv_values_replay(shape))
        .axis("HB", verify_hb_values(shape))
        .axis("num_warps", [4, 8])
        .occupancy_hints()
        .axis("PREFETCH", [0, 1])
        .axis("SHARED_WEIGHTS", [0, 1])
        .axis("ASYNC", [0, 1])
        .constraint(
            "the next head's checkpoint rows either prefetched or copied",
            |c: &C, _| !(c.PREFETCH && c.ASYNC),
        )
        .register_limit();
    let grid_shape = *shape;
    let mut problem = Problem::new(move |c: &C| head_block_grid(&grid_shape, batch, c.HB, c.BV))
        .scalar("batch", batch as i32)
        .scalar("slots", batch as i32 + 1)
        .scalar("n_drafts", drafts as i32)
        .fill("meta", cycle_meta(verify_states(window, drafts, accepted)));
    for (n, f) in param_fills(batch).into_iter().chain(ring_fills()) {
        problem = problem.fill(n, f);
    }
    for (n, v) in shape_sizes(shape, batch, gated) {
        problem = problem.size(n, v);
    }
    problem = problem
        .size("L", window as i64)
        .size("T", drafts as i64)
        .size("accepted", accepted as i64)
        .size("cycle", 1);
    // × num_warps, (PREFETCH, ASYNC) but not both, SHARED_WEIGHTS.
    let points = bv_values_replay(shape).len() * verify_hb_values(shape).len() * OCCUPANCY_HINTS * 12;
    let t = tuner.tune::<mamba2_verify::Kernel>(&space, &problem)?;
    Ok(Shortlist::of(&t, points, TILE_SHORTLIST))
}

/// Tiles of the verification's pre-flush (`BV × HB × num_warps × min_blocks × FC`) at window
/// `window`, timed on rows spread over the verifications of a cycle (one in its length folding
/// the `h` records of the flushing verification, `h + T > L`; the others idle), as a cycle of
/// launches runs it: an idle launch of one-head programs costs ~40 µs at B = 256 (Super), a
/// flushing one ~0.93 ms. Its tiles do not change the verification's.
pub fn tune_fold_tiles(
    tuner: &mut Autotuner,
    shape: &ModelShape,
    batch: usize,
    window: usize,
    drafts: usize,
    accepted: usize,
) -> Result<(Tiles, TuneSource, usize)> {
    type C = <mamba2_fold::Kernel as KernelDef>::Config;
    let space = shape_axes(SearchSpace::<C>::new(), shape)
        .axis("L", [window as i64])
        .axis("T", [drafts as i64])
        .axis("BV", bv_values_replay(shape))
        .axis("HB", verify_hb_values(shape))
        .axis("num_warps", [4, 8])
        .occupancy_hints()
        .axis("FC", [16, 32, 64, 128])
        .register_limit();
    let cycle = verify_states(window, drafts, accepted);
    let grid_shape = *shape;
    let mut problem = Problem::new(move |c: &C| head_block_grid(&grid_shape, batch, c.HB, c.BV))
        .scalar("batch", batch as i32)
        .scalar("slots", batch as i32 + 1)
        .fill("meta", cycle_meta(cycle));
    // The fold reads A and the slots, not dt_bias.
    for (n, f) in param_fills(batch)
        .into_iter()
        .chain(ring_fills())
        .filter(|(n, _)| *n != "dt_bias")
    {
        problem = problem.fill(n, f);
    }
    for (n, v) in shape_sizes(shape, batch, false) {
        problem = problem.size(n, v);
    }
    problem = problem
        .size("L", window as i64)
        .size("T", drafts as i64)
        .size("accepted", accepted as i64);
    // × num_warps, FC.
    let points = bv_values_replay(shape).len() * verify_hb_values(shape).len() * OCCUPANCY_HINTS * 8;
    let t = tuner.tune::<mamba2_fold::Kernel>(&space, &problem)?;
    Ok((tiles_of(&values_of(&t.config)), t.source, points))
}

/// Decode steps per run of a [`WindowRunner`] at window `window`: one window, or two when
/// `window` is odd (a replay graph captures an even number of steps, see
/// [`Mamba2ReplayState`]). Every step is one launch.
pub fn window_run_steps(window: usize) -> usize {
    if window.is_multiple_of(2) {
        window
    } else {
        2 * window
    }
}

/// A replay state with every row live, its step buffers and (on a GPU) a graph of one whole
/// window of `L` steps (`L − 1` non-flush steps and one flush, `L` launches), or of two
/// windows when `L` is odd ([`window_run_steps`]).
pub struct WindowRunner {
    /// The state.
    pub state: Mamba2ReplayState,
    /// The step buffers (random inputs).
    pub io: StepIo,
    graph: Option<Graph>,
    steps: usize,
}

impl WindowRunner {
    /// Builds the state for `plan`, fills every row and captures the window on a GPU.
    pub fn new(
        stream: &Stream,
        shape: ModelShape,
        params: &Mamba2Params,
        batch: usize,
        gated: bool,
        plan: ReplayPlan,
    ) -> Result<WindowRunner> {
        let mut state = Mamba2ReplayState::new(stream, shape, params, batch, batch + 1, gated, plan)?;
        state.fill(stream, Next::Decode)?;
        let mut io = StepIo::new(stream, shape, batch, 1, gated)?;
        io.randomize(stream, 0x55d ^ batch as u64)?;
        let steps = window_run_steps(plan.window);
        let graph = if stream.device().backend() == Backend::Cuda {
            let g = state.capture_steps(stream, &io, steps)?;
            g.upload()?;
            Some(g)
        } else {
            None
        };
        Ok(WindowRunner {
            state,
            io,
            graph,
            steps,
        })
    }

    /// Decode steps (launches) per [`Self::run`].
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// Enqueues one whole window (two when `L` is odd: [`Self::steps`] steps).
    pub fn run(&self, stream: &Stream) -> Result<()> {
        match &self.graph {
            Some(g) => g.launch(),
            None => {
                for _ in 0..self.steps {
                    self.state.step(stream, &self.io)?;
                }
                Ok(())
            }
        }
    }
}

/// Verification cycles (verify `T` drafts, then commit) per timed run of a [`VerifyRunner`]:
/// enough for the flushes of the longest candidate window to recur within one run.
pub const VERIFY_CYCLES: usize = 16;

/// A replay state with every row live and ready to verify `T` drafts, its token buffers and
/// (on a GPU) a graph of [`VERIFY_CYCLES`] verification cycles (`verify` + `commit` with the
/// accepted counts in device memory): successive runs continue the rows' windows, flushes
/// included, as speculative decoding runs them.
pub struct VerifyRunner {
    state: Mamba2ReplayState,
    io: StepIo,
    drafts: usize,
    graph: Option<Graph>,
}

impl VerifyRunner {
    /// Builds the state for `plan` (`plan.max_drafts` drafts per verification, `accepted` of
    /// them accepted each time), fills every row and captures the cycles on a GPU.
    pub fn new(
        stream: &Stream,
        shape: ModelShape,
        params: &Mamba2Params,
        batch: usize,
        gated: bool,
        plan: ReplayPlan,
        accepted: usize,
    ) -> Result<VerifyRunner> {
        let drafts = plan.max_drafts;
        let mut state = Mamba2ReplayState::new(stream, shape, params, batch, batch + 1, gated, plan)?;
        state.fill(stream, Next::Verify(drafts))?;
        state.accepted.copy_from_host(stream, &vec![accepted as i32; batch])?;
        let mut io = StepIo::new(stream, shape, batch, drafts, gated)?;
        io.randomize(stream, 0x7e5 ^ batch as u64)?;
        state.prepare_verify(&io, drafts)?;
        let mut runner = VerifyRunner {
            state,
            io,
            drafts,
            graph: None,
        };
        if stream.device().backend() == Backend::Cuda {
            let g = stream.capture(|s| runner.cycles(s))?;
            g.upload()?;
            runner.graph = Some(g);
        }
        Ok(runner)
    }

    fn cycles(&self, stream: &Stream) -> Result<()> {
        for _ in 0..VERIFY_CYCLES {
            self.state.verify(stream, &self.io, self.drafts)?;
            self.state.commit(stream, Next::Verify(self.drafts))?;
        }
        Ok(())
    }

    /// Enqueues [`VERIFY_CYCLES`] verification cycles.
    pub fn run(&self, stream: &Stream) -> Result<()> {
        match &self.graph {
            Some(g) => g.launch(),
            None => self.cycles(stream),
        }
    }
}

/// A window `L` and tiles chosen together by whole-window timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowChoice {
    /// The window `L`.
    pub window: usize,
    /// The tiles.
    pub tiles: Tiles,
    /// Where the choice came from.
    pub source: TuneSource,
}

/// A window candidate's values: `L` and the tiles.
fn window_values(window: usize, tiles: &Tiles) -> Values {
    [
        ("L", window as i64),
        ("BV", tiles.bv as i64),
        ("HB", tiles.hb as i64),
        ("num_warps", tiles.num_warps as i64),
        ("min_blocks", tiles.min_blocks as i64),
        ("EARLY", tiles.early as i64),
        ("PREFETCH", tiles.prefetch as i64),
        ("SHARED_WEIGHTS", tiles.shared_weights as i64),
        ("FC", tiles.flush_columns as i64),
        ("ASYNC", tiles.async_copy as i64),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect()
}

/// The window and tiles of a candidate's values.
fn window_of(values: &Values) -> (usize, Tiles) {
    (*values.get("L").expect("candidate L") as usize, tiles_of(values))
}

/// Tunes the window `L` and the tiles together over `windows × tiles` (the first window with
/// the first tiles first: the choice when tuning is off): each candidate gets a runner from
/// `build(stream, L, tiles)` (the previous candidate's is dropped first, freeing its buffers),
/// timed by `run`, `units(L)` steps per run. `sizes` key the cache, and so do the candidates
/// (hashed with `source`): a cached choice is reused only for the same windows and tiles.
#[allow(clippy::too_many_arguments)]
fn tune_window_scheme<R>(
    tuner: &mut Autotuner,
    name: &str,
    source: &str,
    windows: &[usize],
    tiles: &[Tiles],
    sizes: Vec<(&str, i64)>,
    units: impl Fn(usize) -> f64,
    mut build: impl FnMut(&Stream, usize, Tiles) -> Result<R>,
    run: impl Fn(&R, &Stream) -> Result<()>,
) -> Result<WindowChoice> {
    let candidates: Vec<Values> = tiles
        .iter()
        .flat_map(|t| windows.iter().map(move |&l| window_values(l, t)))
        .collect();
    let keyed_source = format!("{source}\n// candidates: {candidates:?}");
    let mut current: Option<(Values, R)> = None;
    let mut scheme = Scheme::new(name, &keyed_source, move |v, s: &Stream, _i| {
        if current.as_ref().map(|c| &c.0) != Some(v) {
            current = None;
            let (l, t) = window_of(v);
            current = Some((v.clone(), build(s, l, t)?));
        }
        run(&current.as_ref().expect("built").1, s)
    })
    .units(move |v| units(window_of(v).0));
    for v in &candidates {
        scheme = scheme.candidate(v.iter().map(|(n, x)| (n.as_str(), *x)));
    }
    for (n, v) in sizes {
        scheme = scheme.size(n, v);
    }
    let t = tuner.tune_scheme(scheme)?;
    let (window, tiles) = window_of(&t.config);
    Ok(WindowChoice {
        window,
        tiles,
        source: t.source,
    })
}

/// The source that keys a window scheme's cache entry: the timed kernel's, then those of the
/// commit and admit kernels every window also runs.
fn window_scheme_source(kernel: &str) -> String {
    format!(
        "{kernel}{}{}",
        mamba2_commit::Kernel::SOURCE,
        super::admit::mamba2_admit::Kernel::SOURCE
    )
}

/// The window `L` of the speculative plan among `windows` and its verification tiles among
/// `tiles`, chosen together: the least time per verification cycle (verify + commit, flushes
/// included) with `plan.max_drafts` drafts and `accepted` accepted per cycle.
#[allow(clippy::too_many_arguments)]
pub fn tune_verify_window(
    tuner: &mut Autotuner,
    shape: ModelShape,
    params: &Mamba2Params,
    batch: usize,
    gated: bool,
    plan: ReplayPlan,
    accepted: usize,
    tiles: &[Tiles],
    windows: &[usize],
) -> Result<WindowChoice> {
    let source = window_scheme_source(mamba2_verify::Kernel::SOURCE);
    let mut sizes = shape_sizes(&shape, batch, gated);
    sizes.extend([("T", plan.max_drafts as i64), ("accepted", accepted as i64)]);
    tune_window_scheme(
        tuner,
        "mamba2_verify_window",
        &source,
        windows,
        tiles,
        sizes,
        |_| VERIFY_CYCLES as f64,
        |s, window, verify| {
            VerifyRunner::new(
                s,
                shape,
                params,
                batch,
                gated,
                ReplayPlan { window, verify, ..plan },
                accepted,
            )
        },
        VerifyRunner::run,
    )
}

/// The window `L` among `windows` and the replay tiles among `tiles`, chosen together: the
/// least amortised time per step of a whole window (each candidate's window — two when `L` is
/// odd — captured as one graph, timed as one unit, divided by its steps).
#[allow(clippy::too_many_arguments)]
pub fn tune_window(
    tuner: &mut Autotuner,
    shape: ModelShape,
    params: &Mamba2Params,
    batch: usize,
    gated: bool,
    tiles: &[Tiles],
    windows: &[usize],
) -> Result<WindowChoice> {
    let source = window_scheme_source(mamba2_replay_step::Kernel::SOURCE);
    let plan = |window, tiles| ReplayPlan {
        window,
        max_drafts: 0,
        step: tiles,
        verify: tiles,
        fold: tiles,
    };
    tune_window_scheme(
        tuner,
        "mamba2_replay_window",
        &source,
        windows,
        tiles,
        shape_sizes(&shape, batch, gated),
        |l| window_run_steps(l) as f64,
        |s, l, t| WindowRunner::new(s, shape, params, batch, gated, plan(l, t)),
        WindowRunner::run,
    )
}

/// `L=.. BV=.. HB=.. w=.. (L* = ..)`: a window and its tiles, for the notes.
fn show_window(window: usize, tiles: &Tiles, star: f64) -> String {
    format!("L={window} {} (L* = {star:.1})", tiles.show())
}

/// The note of a joint choice: [`show_window`], then the windows and the number of tiles
/// searched; where it came from; how many candidates.
fn joint_note(choice: &WindowChoice, star: f64, windows: &[usize], tiles: usize) -> (String, TuneSource, usize) {
    let chosen = show_window(choice.window, &choice.tiles, star);
    let value = format!("{chosen}; L in {windows:?} × {tiles} shortlisted tiles");
    (value, choice.source, windows.len() * tiles)
}

/// The plans for `shape` at `batch`: with a tuner, tile shortlists from the kernels' tuning,
/// then each plan's window and tiles together by whole-window timing (cache first); else the
/// defaults (window `round(L*)`, default tiles). `verify_drafts` is the `T` of the speculative
/// plan.
pub fn plans(
    tuner: Option<&mut Autotuner>,
    shape: ModelShape,
    params: &Mamba2Params,
    batch: usize,
    gated: bool,
    verify_drafts: usize,
) -> Result<SsmPlans> {
    let (l_star, cands) = window_candidates(shape, 0, 1.0);
    let (l_star_v, cands_v) = window_candidates(shape, verify_drafts, (0.75 * verify_drafts as f64).max(1.0));
    let accepted = accepted_drafts(verify_drafts);
    let mut conventional = ConventionalPlan::default_for(&shape, verify_drafts);
    let mut replay = ReplayPlan::default_for(&shape, cands[0], 0);
    let mut verify = ReplayPlan::default_for(&shape, cands_v[0], verify_drafts);
    let mut choices = Vec::new();
    let mut note = |what: &str, value: String, source: TuneSource, n: usize| {
        choices.push(Choice {
            what: what.into(),
            value,
            source: source_name(source),
            candidates: n,
        })
    };
    match tuner {
        None => {
            note("conventional tiles", conventional.decode.show(), TuneSource::Default, 1);
            let replay_value = show_window(replay.window, &replay.step, l_star);
            note("replay window L and tiles", replay_value, TuneSource::Default, 1);
            let verify_value = show_window(verify.window, &verify.verify, l_star_v);
            note("verify window L and tiles", verify_value, TuneSource::Default, 1);
        }
        Some(tuner) => {
            let (t, s, n) = tune_conventional(tuner, &shape, batch, gated)?;
            conventional.decode = t;
            conventional.spec = t;
            note("conventional tiles", t.show(), s, n);
            let short = tune_replay_tiles(tuner, &shape, batch, gated, replay.window)?;
            note("replay tile shortlist", short.show(), short.source, short.points);
            let tiles = with_whole_flush_blocks(&short.tiles, batch, shape.dk);
            let c = tune_window(tuner, shape, params, batch, gated, &tiles, &cands)?;
            replay.window = c.window;
            replay.step = c.tiles;
            replay.verify = c.tiles;
            let (value, source, n) = joint_note(&c, l_star, &cands, tiles.len());
            note("replay window L and tiles", value, source, n);
            if verify_drafts > 0 {
                let short = tune_verify_tiles(tuner, &shape, batch, gated, verify.window, verify_drafts, accepted)?;
                note("verify tile shortlist", short.show(), short.source, short.points);
                verify.step = replay.step;
                let c = tune_verify_window(
                    tuner,
                    shape,
                    params,
                    batch,
                    gated,
                    verify,
                    accepted,
                    &short.tiles,
                    &cands_v,
                )?;
                verify.window = c.window;
                verify.verify = c.tiles;
                let (value, source, n) = joint_note(&c, l_star_v, &cands_v, short.tiles.len());
                note("verify window L and tiles", value, source, n);
                let (t, s, n) = tune_fold_tiles(tuner, &shape, batch, verify.window, verify_drafts, accepted)?;
                verify.fold = t;
                note("fold tiles", t.show(), s, n);
            }
        }
    }
    Ok(SsmPlans {
        conventional,
        replay,
        verify,
        l_star,
        l_star_verify: l_star_v,
        choices,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use replay_kernels::ssm::shapes::NEMOTRON3_SUPER_120B;

    /// Verification windows come with the largest window of the same record rows (Super,
    /// T = 8: 16 → 24, 25/38/51 → 56; 64 has 128 rows, whose 120 is past the limit);
    /// decoding windows are not widened. The rounded `L*` stays first.
    /// Latency-bound batches time each shortlisted tile also with one whole flush block, once;
    /// larger batches only the shortlist.
    #[test]
    fn small_batches_also_time_whole_flush_blocks() {
        let shape = NEMOTRON3_SUPER_120B;
        let plan = ReplayPlan::default_for(&shape, 16, 0).step;
        let a = Tiles {
            flush_columns: 32,
            ..plan
        };
        let b = Tiles {
            bv: 32,
            flush_columns: 128,
            ..plan
        };
        let small = with_whole_flush_blocks(&[a, b], 1, shape.dk);
        assert_eq!(
            small,
            vec![
                a,
                b,
                Tiles {
                    flush_columns: 128,
                    ..a
                }
            ]
        );
        assert_eq!(with_whole_flush_blocks(&[a, b], 256, shape.dk), vec![a, b]);
    }

    #[test]
    fn verification_windows_include_the_widest_of_each_row_count() {
        let (star, c) = window_candidates(NEMOTRON3_SUPER_120B, 8, 6.0);
        assert_eq!(c[0], star.round() as usize);
        assert!(c.iter().all(|&l| (8..=64).contains(&l)), "{c:?}");
        for &l in &c {
            let widest = record_rows(l + 8) - 8;
            assert!(widest > 64 || c.contains(&widest), "{l} without {widest}: {c:?}");
        }
        assert!(c.contains(&24) && c.contains(&56), "{c:?}");
        let (_, d) = window_candidates(NEMOTRON3_SUPER_120B, 0, 1.0);
        assert!(!d.contains(&32) && !d.contains(&24), "{d:?}");
    }
}
