//! Tile shapes and the plans of the two managers, and what the next counter-touching launch is.

use replay_kernels::ssm::shapes::ModelShape;
use replay_runtime::Grid;
use serde::{Deserialize, Serialize};

/// The grid of the conventional kernels, which tile flat rows: one program per `bv` of the
/// `heads · dv` state rows and batch row, `(heads·dv / bv, batch, 1)` (`bv` divides the rows
/// of a group, so it divides `heads · dv`; a slot's programs are launched one after the other).
pub fn flat_row_grid(shape: &ModelShape, batch: usize, bv: usize) -> Grid {
    Grid::new((shape.heads * shape.dv / bv) as u32, batch as u32, 1)
}

/// The replay step's grid: [`flat_row_grid`] with the batch rows first, `(batch, heads·dv / bv,
/// 1)`.
pub fn step_grid(shape: &ModelShape, batch: usize, bv: usize) -> Grid {
    Grid::new(batch as u32, (shape.heads * shape.dv / bv) as u32, 1)
}

/// The grid of a kernel tiling heads (the verification and its fold): one program per `bv`
/// value rows, `hb` value heads and batch row, `(⌈dv / bv⌉, heads / hb, batch)`.
pub fn head_block_grid(shape: &ModelShape, batch: usize, hb: usize, bv: usize) -> Grid {
    Grid::new(shape.dv.div_ceil(bv) as u32, (shape.heads / hb) as u32, batch as u32)
}

/// The largest power of two up to `most` (a power of two) dividing the state rows of a group
/// (`heads/groups · dv`): a flat-row tile whose programs each stay in one group.
fn group_row_tile(shape: &ModelShape, most: usize) -> usize {
    let group_rows = shape.heads_per_group() * shape.dv;
    let mut bv = most;
    while !group_rows.is_multiple_of(bv) {
        bv /= 2;
    }
    bv
}

/// The fold's default key columns per flush block (`FC`) where none is tuned.
pub const DEFAULT_FLUSH_COLUMNS: usize = 32;

/// The replay step's default state rows per flush block (`FR`).
pub const DEFAULT_FLUSH_ROWS: usize = 8;

fn default_flush_rows() -> usize {
    DEFAULT_FLUSH_ROWS
}

/// Tile shape of one kernel: value rows per program `BV`, value heads per program `HB`
/// (verification and fold only; 1 elsewhere), warps and the occupancy hint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tiles {
    /// Value rows of the state per program (the conventional kernels and the replay step: flat
    /// rows of the `heads · dv` rows of a slot, a divisor of the rows of one group).
    pub bv: usize,
    /// Value heads per program of the verification and its fold (shares the group's keys and
    /// `kᵀq` products; 1 elsewhere: the step and the conventional kernels tile flat rows).
    pub hb: usize,
    /// Warps per program.
    pub num_warps: u32,
    /// Programs that should fit on one SM at once (the kernel's `min_blocks`; 1 is no hint).
    pub min_blocks: u32,
    /// The replay step issues its checkpoint load before reading the counters (its `EARLY`;
    /// other kernels ignore it).
    pub early: bool,
    /// The verification issues the next head's loads before this head's products; the replay
    /// step's flush asks L2 for its whole checkpoint tile before folding it block by block
    /// (their `PREFETCH`; other kernels ignore it).
    pub prefetch: bool,
    /// The verification computes the weights of all its heads once, not per head (its
    /// `SHARED_WEIGHTS`; other kernels ignore it).
    pub shared_weights: bool,
    /// Key columns per flush block of the fold (its `FC`; other kernels ignore it).
    pub flush_columns: usize,
    /// State rows per flush block of the replay step (its `FR`; other kernels ignore it).
    #[serde(default = "default_flush_rows")]
    pub flush_rows: usize,
    /// The verification copies the next head's checkpoint rows into shared memory while this
    /// head computes (its `ASYNC`; other kernels ignore it).
    #[serde(default)]
    pub async_copy: bool,
    /// The verification takes a tile of half the record rows where a row's records fit it
    /// (its `TIERS`; other kernels ignore it).
    #[serde(default)]
    pub record_tiers: bool,
    /// Where `bv` does not divide the value rows, the verification's and the fold's last value
    /// block takes a tile of its own rows instead of a masked one (their `TAIL`; other kernels
    /// ignore it).
    #[serde(default)]
    pub tail_tiles: bool,
    /// The fold loads the group's keys with each head's tiles instead of holding them through
    /// its head loop (its `RELOAD_KEYS`: fewer registers; other kernels ignore it).
    #[serde(default)]
    pub reload_keys: bool,
    /// The verification's products chain their mmas on their accumulators
    /// (`DotPrecision::Tf32x3Chained`, its `CHAINED`; other kernels ignore it).
    #[serde(default)]
    pub chained_dots: bool,
    /// The fold verifies the rows it folds from their folded checkpoints, and the verification
    /// leaves them to it (the fold's `VERIFY`, the verification's `FOLD_VERIFIES`; read from
    /// the fold's tiles): a flushing row's checkpoint is read once per cycle instead of twice.
    #[serde(default)]
    pub verifies: bool,
    /// With `verifies`, the fold runs beside the verification instead of after it: on a
    /// stream of its own, forked from the caller's and joined back (in a graph, two branches;
    /// the two launches touch disjoint rows). Its programs of rows without the flag then fill
    /// the verification's last wave instead of a launch of their own (H200, B = 256, T = 8:
    /// the cycle −1.3 to −1.6 % with two state precisions, +2.7 % for Nano's f32 plan;
    /// `bench/NOTES.md` session 36). Read from the fold's tiles.
    #[serde(default)]
    pub beside: bool,
}

impl Tiles {
    /// `BV=.. HB=.. w=..`, then `b=..` with an occupancy hint, `early` with an early
    /// checkpoint load, `prefetch` with the next head's loads (the step: its flush's tile)
    /// first, `wph` with weights per head, `async` with the next head's checkpoint rows copied
    /// into shared memory, `tiers` with half-size record tiles where they fit, `tail` with the
    /// last value block in a tile of its own rows, `reload` with the keys loaded per head,
    /// `chained` with the verification's products chained on their accumulators, `verifies`
    /// with the fold verifying the rows it folds, `beside` with it running beside the
    /// verification, `fc=..` with
    /// other than [`DEFAULT_FLUSH_COLUMNS`] and `fr=..` with other than [`DEFAULT_FLUSH_ROWS`].
    pub fn show(&self) -> String {
        let hint = if self.min_blocks > 1 {
            format!(" b={}", self.min_blocks)
        } else {
            String::new()
        };
        let early = if self.early { " early" } else { "" };
        let prefetch = if self.prefetch { " prefetch" } else { "" };
        let wph = if self.shared_weights { "" } else { " wph" };
        let copy = if self.async_copy { " async" } else { "" };
        let tiers = if self.record_tiers { " tiers" } else { "" };
        let tail = if self.tail_tiles { " tail" } else { "" };
        let reload = if self.reload_keys { " reload" } else { "" };
        let chained = if self.chained_dots { " chained" } else { "" };
        let verifies = if self.verifies { " verifies" } else { "" };
        let beside = if self.beside { " beside" } else { "" };
        let fc = if self.flush_columns != DEFAULT_FLUSH_COLUMNS {
            format!(" fc={}", self.flush_columns)
        } else {
            String::new()
        };
        let fr = if self.flush_rows != DEFAULT_FLUSH_ROWS {
            format!(" fr={}", self.flush_rows)
        } else {
            String::new()
        };
        format!(
            "BV={} HB={} w={}{hint}{early}{prefetch}{wph}{copy}{tiers}{tail}{reload}{chained}{verifies}{beside}{fc}{fr}",
            self.bv, self.hb, self.num_warps
        )
    }
}

/// What the next launch touching the counters is: the commit kernel computes the flush flags
/// for it (`h + 1 ≥ L` before a decode step, `h + n > L` before verifying `n` drafts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// A decode step.
    Decode,
    /// A verification of this many drafts.
    Verify(usize),
}

impl Next {
    /// Drafts the launch verifies (0 for a decode step).
    pub(super) fn drafts(self) -> usize {
        match self {
            Next::Decode => 0,
            Next::Verify(n) => n,
        }
    }
}

/// How a [`super::Mamba2ReplayState`] runs: window `L`, most drafts per verification `T` (0 for pure
/// decoding; ring capacity `L + T`) and the kernels' tile shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayPlan {
    /// The replay window `L` (a flush every `L` decode steps).
    pub window: usize,
    /// Most drafts one verification carries, `T ≤ L` (0: no speculative decoding).
    pub max_drafts: usize,
    /// Tiles of `mamba2_replay_step`.
    pub step: Tiles,
    /// Tiles of `mamba2_verify` (unused when `max_drafts == 0`).
    pub verify: Tiles,
    /// Tiles of `mamba2_fold`, the verification's pre-flush (unused when `max_drafts == 0`).
    pub fold: Tiles,
    /// Two state precisions: an f16 copy of every checkpoint (written with it by every flush,
    /// read by non-flush steps and the verification instead of the f32 one; the recurrence
    /// stays f32).
    #[serde(default)]
    pub lp: bool,
}

impl ReplayPlan {
    /// A plan with default tiles for `shape` (before tuning), what tuning picks on an H200 at
    /// batch 256 (`bench/NOTES.md`, v14 and v15): 4 warps; for the step `BV` the largest power of two
    /// up to 64 dividing the state rows of a group (its flat row tiling), no occupancy hint; for
    /// the verification `BV = min(32, dv)` rounded to a power of two, `HB` the largest divisor
    /// of the heads per group up to 16 that still gives `batch` rows [`HEAD_BLOCK_PROGRAMS`]
    /// programs (else 1), each head's weights in its iteration, and 4 programs per SM (128
    /// registers); for the fold the same `BV`, `HB` likewise up to 4 (its launches are idle
    /// for most verifications: fewer programs), all key columns at once, and verifying the rows
    /// it folds (H200, T = 8: faster at every batch but Nano's B = 1, `bench/NOTES.md`
    /// session 34).
    pub fn default_for(shape: &ModelShape, batch: usize, window: usize, max_drafts: usize) -> ReplayPlan {
        let hpg = shape.heads_per_group();
        let head_bv = 32usize.min(shape.dv.next_power_of_two());
        let programs = |hb: usize| head_block_grid(shape, batch, hb, head_bv).programs();
        let hb_up_to = |most: usize| {
            (1..=most)
                .rev()
                .find(|&h| hpg.is_multiple_of(h) && programs(h) >= HEAD_BLOCK_PROGRAMS)
                .unwrap_or(1)
        };
        let step_bv = group_row_tile(shape, 64);
        let tiles = |bv, hb| Tiles {
            bv,
            hb,
            num_warps: 4,
            min_blocks: 1,
            early: false,
            prefetch: false,
            shared_weights: true,
            flush_columns: DEFAULT_FLUSH_COLUMNS,
            flush_rows: DEFAULT_FLUSH_ROWS,
            async_copy: false,
            record_tiers: false,
            tail_tiles: false,
            reload_keys: false,
            chained_dots: false,
            verifies: false,
            beside: false,
        };
        ReplayPlan {
            window,
            max_drafts,
            step: tiles(step_bv, 1),
            verify: Tiles {
                min_blocks: 4,
                shared_weights: false,
                ..tiles(head_bv, hb_up_to(16))
            },
            // The fold: one block of all key columns (its loads issued at once), verifying the
            // rows it folds.
            fold: Tiles {
                flush_columns: shape.dk,
                verifies: true,
                ..tiles(head_bv, hb_up_to(4))
            },
            lp: false,
        }
    }
}

/// Programs a launch of the verification or its fold should have at least by default (two per
/// SM of a 132-SM GPU): heads per program shrink at small batches (H200, `bench/NOTES.md`
/// session 30: Nano B = 1, T = 8, one head per program instead of 12 and 4, a cycle 0.024 →
/// 0.009 ms; Super 0.030 → 0.008).
pub const HEAD_BLOCK_PROGRAMS: u64 = 264;

/// How a [`super::Mamba2ConventionalState`] runs: tiles of the decode kernel and of the
/// snapshot-per-draft verification baseline, and the most drafts per verification.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConventionalPlan {
    /// Tiles of `mamba2_decode` (`hb` unused).
    pub decode: Tiles,
    /// Tiles of `mamba2_spec_baseline` (`hb` unused).
    pub spec: Tiles,
    /// Most drafts per verification (snapshot slots reserved per row).
    pub max_drafts: usize,
}

impl ConventionalPlan {
    /// Default tiles: `BV` the largest power of two up to `min(32, dv)` (rounded up to a
    /// power of two) dividing the state rows of a group (`heads/groups · dv`), 4 warps.
    pub fn default_for(shape: &ModelShape, max_drafts: usize) -> ConventionalPlan {
        let bv = group_row_tile(shape, 32usize.min(shape.dv.next_power_of_two()));
        let t = Tiles {
            bv,
            hb: 1,
            num_warps: 4,
            min_blocks: 1,
            early: false,
            prefetch: false,
            shared_weights: true,
            flush_columns: DEFAULT_FLUSH_COLUMNS,
            flush_rows: DEFAULT_FLUSH_ROWS,
            async_copy: false,
            record_tiers: false,
            tail_tiles: false,
            reload_keys: false,
            chained_dots: false,
            verifies: false,
            beside: false,
        };
        ConventionalPlan {
            decode: t,
            spec: t,
            max_drafts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use replay_kernels::ssm::shapes::{NEMOTRON3_NANO_4B, NEMOTRON3_SUPER_120B};

    /// The default heads per program of the verification and its fold: as many as the group
    /// holds (up to 16 and 4) at large batches, one per program where fewer programs would run
    /// than [`HEAD_BLOCK_PROGRAMS`] (Nano: 3 value blocks × 96 heads at batch 1).
    #[test]
    fn default_head_blocks_follow_the_batch() {
        let hb = |shape: &ModelShape, batch| {
            let p = ReplayPlan::default_for(shape, batch, 56, 8);
            (p.verify.hb, p.fold.hb)
        };
        assert_eq!(hb(&NEMOTRON3_NANO_4B, 1), (1, 1));
        assert_eq!(hb(&NEMOTRON3_NANO_4B, 4), (4, 4));
        assert_eq!(hb(&NEMOTRON3_NANO_4B, 16), (12, 4));
        assert_eq!(hb(&NEMOTRON3_NANO_4B, 256), (12, 4));
        assert_eq!(hb(&NEMOTRON3_SUPER_120B, 1), (1, 1));
        assert_eq!(hb(&NEMOTRON3_SUPER_120B, 2), (1, 1));
        assert_eq!(hb(&NEMOTRON3_SUPER_120B, 16), (8, 4));
        assert_eq!(hb(&NEMOTRON3_SUPER_120B, 256), (16, 4));
    }
}
