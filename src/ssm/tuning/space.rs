//! The decode kernels' search spaces: each axis's values per shape and batch, the occupancy
//! hints, and the shortlist a kernel-level tuning passes on to whole-window timing.

use crate::ssm::state::{Tiles, DEFAULT_FLUSH_COLUMNS, DEFAULT_FLUSH_ROWS};
use replay_kernels::ssm::shapes::ModelShape;
use replay_runtime::tune::space::{value_of, values_of};
use replay_runtime::tune::{CandidateRecord, Outcome, PruneContext, SearchSpace, TuneSource, Tuned, Values};

/// A model shape's dimensions (and whether `z` gates), by which the SSM tunings are keyed as
/// they are, not bucketed (the kernels are specialized on them; the batch is the one bucketed
/// size).
pub(super) fn shape_dims(shape: &ModelShape, gated: bool) -> Vec<(&'static str, i64)> {
    vec![
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
pub(super) fn bv_values_conventional(shape: &ModelShape) -> Vec<i64> {
    let group_rows = (shape.heads_per_group() * shape.dv) as i64;
    bv_values(shape).into_iter().filter(|&b| group_rows % b == 0).collect()
}

/// `BV` of the verification kernels (their record tiles make `BV = 8` pointless).
pub(super) fn bv_values_replay(shape: &ModelShape) -> Vec<i64> {
    bv_values(shape).into_iter().filter(|&b| b >= 16).collect()
}

/// `BV` of the replay step, flat rows like the conventional kernels: 16 to 128 rows (up to
/// two heads of 64) dividing the state rows of a group.
pub(super) fn bv_values_step(shape: &ModelShape) -> Vec<i64> {
    let group_rows = (shape.heads_per_group() * shape.dv) as i64;
    [16, 32, 64, 128].into_iter().filter(|&b| group_rows % b == 0).collect()
}

/// State rows per flush block of the replay step searched (`FR`) at `batch`: ptxas allocates
/// registers for the larger of the step's two branches, and the flush block sets its branch's
/// count (H200, Nano `BV = 64`: 8 rows 80 registers, 16 rows 104, the non-flush branch 80).
/// Small batches keep the default; their flush step is a latency chain, one fold per block,
/// and the window timing also tries one block of all rows ([`with_flush_variants`]).
pub(super) fn flush_row_values(batch: usize) -> Vec<i64> {
    if batch <= LATENCY_BOUND_BATCH {
        vec![DEFAULT_FLUSH_ROWS as i64]
    } else {
        vec![DEFAULT_FLUSH_ROWS as i64, 16]
    }
}

/// The replay step's `PREFETCH` values searched at `batch` (its flush's whole tile asked of
/// L2 first): only where the step is bandwidth-bound (small batches load the tile early
/// instead, `EARLY`).
pub(super) fn step_prefetch_values(batch: usize) -> Vec<i64> {
    if batch <= LATENCY_BOUND_BATCH {
        vec![0]
    } else {
        vec![0, 1]
    }
}

/// The replay step's shortlisted tiles for the window timing, each also with the other flush
/// options, which only the window's flush step exercises: at latency-bound batches all its
/// rows in one flush block (every load of the flush issued at once; H200, Nano B = 1: one
/// block 0.957× the conventional step, blocks of 32 key columns 0.93×; Super prefers the
/// blocks), at larger batches every `FR` and `PREFETCH` searched (single launches, whose rows
/// flush in a 1/L share, ranked 16-row blocks first at Super B = 256, where 8-row blocks time
/// 1.70× against 1.63× over windows).
pub fn with_flush_variants(tiles: &[Tiles], batch: usize) -> Vec<Tiles> {
    let mut all = tiles.to_vec();
    let mut add = |t: Tiles| {
        if !all.contains(&t) {
            all.push(t);
        }
    };
    for t in tiles {
        if batch <= LATENCY_BOUND_BATCH {
            add(Tiles { flush_rows: t.bv, ..*t });
        } else {
            for fr in flush_row_values(batch) {
                for pf in step_prefetch_values(batch) {
                    add(Tiles {
                        flush_rows: fr as usize,
                        prefetch: pf != 0,
                        ..*t
                    });
                }
            }
        }
    }
    all
}

/// The verification's chosen tile `chosen`, then each of `tiles` (its window stage's
/// candidates) with its products chained on their accumulators and not (each once): a
/// precision choice that changes registers and schedule, so that another tile may win with it
/// (static, Nano's verification tiles: chained head loops 6–13 % shorter, some spilling).
pub fn with_chained_dots(chosen: Tiles, tiles: &[Tiles]) -> Vec<Tiles> {
    both_ways(&[chosen], tiles, |t, chained_dots| Tiles { chained_dots, ..t })
}

/// `first`, then each of `tiles` with an option `set` off and on (each tile once).
fn both_ways(first: &[Tiles], tiles: &[Tiles], set: impl Fn(Tiles, bool) -> Tiles) -> Vec<Tiles> {
    let mut all = first.to_vec();
    for t in tiles {
        for on in [false, true] {
            let t = set(*t, on);
            if !all.contains(&t) {
                all.push(t);
            }
        }
    }
    all
}

/// The fold's tiles `tiles`, each also verifying the rows it folds (the fold's `VERIFY`), after
/// the verification and beside it ([`Tiles::beside`]), each once: a flushing row's checkpoint
/// read once per cycle, for a longer fold at its own registers (H200, B = 256, T = 8: the
/// cycle −3.5 % in both models, `bench/NOTES.md` session 34).
pub fn with_fold_verification(tiles: &[Tiles]) -> Vec<Tiles> {
    let verifying = both_ways(&[], tiles, |t, verifies| Tiles {
        verifies,
        beside: false,
        ..t
    });
    both_ways(&[], &verifying, |t, beside| Tiles {
        beside: beside && t.verifies,
        ..t
    })
}

/// The fold's shortlisted tiles for the cycle timing, then the first of them with every other
/// number of heads per program (each once): how many programs an idle fold launch runs, which
/// single launches of rows spread over a cycle rank otherwise than whole cycles do (H200, Nano
/// B = 256: single launches ranked 4 heads first, cycles 12).
pub fn with_head_blocks(tiles: &[Tiles], shape: &ModelShape) -> Vec<Tiles> {
    let mut all = tiles.to_vec();
    if let Some(&best) = tiles.first() {
        for hb in verify_hb_values(shape) {
            let t = Tiles {
                hb: hb as usize,
                ..best
            };
            if !all.contains(&t) {
                all.push(t);
            }
        }
    }
    all
}

/// Batches up to this size are latency-bound, larger ones bandwidth-bound: they also try the
/// replay step's early checkpoint load (`EARLY`, which elsewhere only costs registers); larger
/// ones its flush's prefetch (`PREFETCH`) and a second flush block (`FR`).
const LATENCY_BOUND_BATCH: usize = 16;

/// `EARLY` values searched at `batch`.
pub(super) fn early_values(batch: usize) -> Vec<i64> {
    if batch <= LATENCY_BOUND_BATCH {
        vec![0, 1]
    } else {
        vec![0]
    }
}

/// Occupancy hints on the `min_blocks` axis: ptxas caps the registers to fit that many
/// programs per SM; hints that make it spill are pruned by [`SearchSpace::register_limit`].
/// [`OccupancyHints::occupancy_hints`] keeps those that change something.
const MIN_BLOCKS: [i64; 8] = [1, 2, 3, 4, 5, 6, 8, 10];

/// Warps per SM the flat-row kernels' hints aim at: 16, which caps ptxas at 128 registers
/// per thread (4 programs of 4 warps, 2 of 8; fewer warps would allow all 255).
pub(super) const FLAT_ROW_WARPS_PER_SM: &[i64] = &[16];

/// Warps per SM the head-block kernels' hints aim at: 12 (170 registers) or 16 (128). H200,
/// Super's two-precision verification at 3 programs of 4 warps: 0.4785 → 0.4627 ms per T=8
/// cycle against 4 programs.
pub(super) const HEAD_BLOCK_WARPS_PER_SM: &[i64] = &[12, 16];

/// Warps per SM the fold's hints aim at: the head-block kernels' and 20 (102 registers: with
/// `RELOAD_KEYS`, Nano's BV32 HB12 fold fits 5 programs of 4 warps without spilling).
pub(super) const FOLD_WARPS_PER_SM: &[i64] = &[12, 16, 20];

/// The `min_blocks` axis of a search space, its useless hints pruned.
pub(super) trait OccupancyHints {
    /// Adds the axis ([`MIN_BLOCKS`]), keeping no hint (`min_blocks = 1`) and the hints that
    /// make one of `warps_per_sm` warps per SM.
    fn occupancy_hints(self, warps_per_sm: &'static [i64]) -> Self;
}

impl<C: replay_dsl::ConfigValues + 'static> OccupancyHints for SearchSpace<C> {
    fn occupancy_hints(self, warps_per_sm: &'static [i64]) -> Self {
        self.axis("min_blocks", MIN_BLOCKS)
            .constraint("useful occupancy hint", move |c: &C, _: &PruneContext<'_>| {
                let get = |name| value_of(c, name).unwrap_or(1);
                get("min_blocks") == 1 || warps_per_sm.contains(&(get("min_blocks") * get("num_warps")))
            })
    }
}

/// Warps searched for the flat-row kernels (the conventional kernel and the replay step) at
/// `batch`: 4 and 8, and at latency-bound batches also 1 and 2 (fewer cross-warp reductions
/// on a launch's critical path; H200, Nano B = 1: the step at BV32 w2 0.98× the conventional
/// step, at w4 0.92×).
pub(super) fn flat_row_warps(batch: usize) -> Vec<i64> {
    if batch <= LATENCY_BOUND_BATCH {
        vec![1, 2, 4, 8]
    } else {
        vec![4, 8]
    }
}

/// Heads per verification program: every divisor of the heads per group (a program loops over
/// its heads, so any divisor works; more heads share the group's keys and `Kᵀ Q`, fewer make
/// more programs for small batches).
pub(super) fn verify_hb_values(shape: &ModelShape) -> Vec<i64> {
    let hpg = shape.heads_per_group() as i64;
    (1..=hpg).filter(|h| hpg % h == 0).collect()
}

/// The shape's constexprs (`HEADS`, `GROUPS`, `DK`, `DV`) as one-value axes.
pub(super) fn shape_axes<C: replay_dsl::ConfigValues>(space: SearchSpace<C>, shape: &ModelShape) -> SearchSpace<C> {
    space
        .axis("HEADS", [shape.heads as i64])
        .axis("GROUPS", [shape.groups as i64])
        .axis("DK", [shape.dk as i64])
        .axis("DV", [shape.dv as i64])
}

/// [`shape_axes`] and the gate (`HAS_Z`).
pub(super) fn fixed_axes<C: replay_dsl::ConfigValues>(
    space: SearchSpace<C>,
    shape: &ModelShape,
    gated: bool,
) -> SearchSpace<C> {
    shape_axes(space, shape).axis("HAS_Z", [gated as i64])
}

/// The tiles named in a kernel configuration's or a window candidate's values.
pub(super) fn tiles_of(values: &Values) -> Tiles {
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
        flush_rows: get("FR", DEFAULT_FLUSH_ROWS as i64) as usize,
        async_copy: get("ASYNC", 0) != 0,
        record_tiers: get("TIERS", 0) != 0,
        tail_tiles: get("TAIL", 0) != 0,
        reload_keys: get("RELOAD_KEYS", 0) != 0,
        chained_dots: get("CHAINED", 0) != 0,
        verifies: get("VERIFY", 0) != 0,
        beside: get("BESIDE", 0) != 0,
    }
}

/// Tile candidates a kernel-level tuning passes on to the whole-window timing, which chooses
/// among them jointly with the window `L` ([`super::tune_window`],
/// [`super::VerifyCycles::tune_window`]): a single launch times the counter states its rows hold —
/// at small batches not every state of a window, flushes included — and near-equal
/// candidates swap places from run to run, so its ranking only shortlists.
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
    /// Candidates the tuner ran (those its constraints pruned not counted; 1 when tuning is
    /// off).
    pub candidates: usize,
}

impl Shortlist {
    pub(super) fn of<C: replay_dsl::ConfigValues>(tuned: &Tuned<C>, len: usize) -> Shortlist {
        let tiles = match &tuned.record {
            Some(r) => r.fastest(len).into_iter().map(tiles_of).collect(),
            None => vec![tiles_of(&values_of(&tuned.config))],
        };
        Shortlist {
            tiles,
            source: tuned.source,
            candidates: tuned.record.as_ref().map_or(1, |r| {
                let pruned = |c: &&CandidateRecord| matches!(c.outcome, Outcome::Pruned { .. });
                r.candidates.iter().filter(|c| !pruned(c)).count()
            }),
        }
    }

    /// The tiles, `; `-separated.
    pub fn show(&self) -> String {
        self.tiles.iter().map(Tiles::show).collect::<Vec<_>>().join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ssm::state::ReplayPlan;
    use replay_kernels::ssm::shapes::NEMOTRON3_SUPER_120B;

    /// The chosen verification tile first, then every candidate tile with its products chained
    /// and not, each once.
    #[test]
    fn the_chained_stage_times_every_tile_both_ways() {
        let plan = ReplayPlan::default_for(&NEMOTRON3_SUPER_120B, 256, 56, 8).verify;
        let (a, b) = (plan, Tiles { hb: 8, ..plan });
        let on = |t: Tiles| Tiles {
            chained_dots: true,
            ..t
        };
        assert_eq!(with_chained_dots(b, &[a, b]), vec![b, a, on(a), on(b)]);
        assert_eq!(with_chained_dots(on(a), &[a, on(a)]), vec![on(a), a]);
    }

    /// The fold's tiles each without verifying the rows it folds, verifying after the
    /// verification and beside it, each once, in order.
    #[test]
    fn the_fold_stage_times_every_tile_verifying_and_not() {
        let plan = ReplayPlan::default_for(&NEMOTRON3_SUPER_120B, 256, 56, 8).fold;
        let off = Tiles {
            verifies: false,
            ..plan
        };
        let (a, b) = (off, Tiles { hb: 8, ..off });
        let on = |t: Tiles| Tiles { verifies: true, ..t };
        let beside = |t: Tiles| Tiles { beside: true, ..on(t) };
        assert_eq!(
            with_fold_verification(&[a, b]),
            vec![a, on(a), beside(a), b, on(b), beside(b)]
        );
        assert_eq!(with_fold_verification(&[beside(a), a]), vec![a, on(a), beside(a)]);
    }

    /// Latency-bound batches time each shortlisted tile also with one whole flush block, once;
    /// larger batches each with every flush block and prefetch choice, once.
    #[test]
    fn windows_time_the_flush_variants_of_the_shortlist() {
        let shape = NEMOTRON3_SUPER_120B;
        let plan = ReplayPlan::default_for(&shape, 256, 16, 0).step;
        let a = Tiles {
            bv: 64,
            flush_rows: 8,
            ..plan
        };
        let b = Tiles {
            bv: 32,
            flush_rows: 32,
            ..plan
        };
        let small = with_flush_variants(&[a, b], 1);
        assert_eq!(small, vec![a, b, Tiles { flush_rows: 64, ..a }]);
        let large = with_flush_variants(&[a, b], 256);
        let variants = |t: Tiles| {
            [(8, false), (8, true), (16, false), (16, true)].map(|(flush_rows, prefetch)| Tiles {
                flush_rows,
                prefetch,
                ..t
            })
        };
        let mut want = vec![a, b];
        for t in variants(a).into_iter().chain(variants(b)) {
            if !want.contains(&t) {
                want.push(t);
            }
        }
        assert_eq!(large, want);
        assert_eq!(large.len(), 2 + 3 + 4);
    }

    /// The fold's cycle candidates: the shortlist in order, then its first tile at every other
    /// divisor of the heads per group (Super: 16 heads per group), none twice.
    #[test]
    fn fold_cycles_time_every_head_block_of_the_first_tile() {
        let shape = NEMOTRON3_SUPER_120B;
        let fold = ReplayPlan::default_for(&shape, 256, 56, 8).fold;
        let a = Tiles { bv: 32, hb: 4, ..fold };
        let b = Tiles { bv: 64, hb: 2, ..fold };
        let got = with_head_blocks(&[a, b], &shape);
        let mut want = vec![a, b];
        want.extend([1, 2, 8, 16].map(|hb| Tiles { hb, ..a }));
        assert_eq!(got, want);
        assert!(with_head_blocks(&[], &shape).is_empty());
    }
}
