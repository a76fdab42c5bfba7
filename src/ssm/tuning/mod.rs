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
//!
//! `space` holds the kernels' search spaces and the shortlist, `kernels` their kernel-level
//! tuning, `windows` the whole-window timing and the window candidates; [`plans`] puts them
//! together.

mod kernels;
mod space;
mod windows;

pub use kernels::{tune_conventional, tune_fold_tiles, tune_replay_tiles, tune_verify_tiles};
pub use space::{replay_shortlist, with_flush_variants, Shortlist, TILE_SHORTLIST};
pub use windows::{
    accepted_drafts, traffic, tune_verify_window, tune_window, window_candidates, window_run_steps, VerifyRunner,
    WindowChoice, WindowRunner, VERIFY_CYCLES,
};

use super::state::{ConventionalPlan, ReplayPlan, Tiles};
use replay_kernels::ssm::reference::Mamba2Params;
use replay_kernels::ssm::shapes::ModelShape;
use replay_runtime::tune::{Autotuner, TuneSource};
use replay_runtime::RuntimeError;
use serde::{Deserialize, Serialize};

type Result<T> = std::result::Result<T, RuntimeError>;

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
            let tiles = with_flush_variants(&short.tiles, batch);
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
