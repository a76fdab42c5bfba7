//! Where the decode plans come from: a shortlist of tile shapes (and occupancy hints) from the
//! kernels' search spaces (the usual kernel autotuner, on generated inputs whose counters spread
//! the rows over the states of one whole window, flushes included — with fewer rows than states
//! a single launch sees only some of them, so its ranking only shortlists), then the replay
//! window `L` and the tiles chosen together from the amortised time of a whole window — `L − 1`
//! non-flush steps and one flush, one launch each, captured as one CUDA graph (two windows when
//! `L` is odd: a replay graph holds an even number of steps) and timed as one unit by the scheme
//! API — over windows pruned around the traffic model's `L* = sqrt(2 ā (M_S/r − T))` times the
//! shortlisted tiles. The speculative plan's window and verification tiles are chosen the same
//! way on the time per verification cycle (verify + commit, timed over whole flush periods)
//! around its own `L*`; the conventional kernel's tiles from its shortlist by graphs of steps.
//! The plans with two state precisions are tuned the same way once more. Everything is cached
//! like every other tuning result (`REPLAY_TUNE=off|cached|force`).
//!
//! `space` holds the kernels' search spaces and the shortlist, `kernels` their kernel-level
//! tuning, `windows` the whole-window timing and the window candidates; [`plans`] puts them
//! together.

mod kernels;
mod space;
mod windows;

pub use kernels::{tune_conventional, tune_fold_tiles, tune_replay_tiles, tune_verify_tiles};
pub use space::{
    replay_shortlist, with_chained_dots, with_flush_variants, with_fold_verification, with_head_blocks, Shortlist,
    TILE_SHORTLIST,
};
pub use windows::{
    accepted_drafts, capture_on_gpu, launch_or_run, stagger_rows, traffic, tune_conventional_steps, tune_window,
    verify_period, verify_run_cycles, window_candidates, window_run_steps, ConventionalRunner, VerifyCycles,
    VerifyRunner, WindowChoice, WindowRunner, CONVENTIONAL_RUN_STEPS, VERIFY_CYCLES,
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
    /// Seconds the choice took (compiling and timing its candidates; ~0 from the cache).
    #[serde(default)]
    pub seconds: f64,
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
    /// The replay decode plan with two state precisions, tuned for them (absent in results
    /// written before they were tuned: [`Self::replay_lp`] then reuses `replay`'s tiles).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_two: Option<ReplayPlan>,
    /// The speculative plan with two state precisions, tuned for them (see `replay_two`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_two: Option<ReplayPlan>,
    /// `L*` of standard decoding.
    pub l_star: f64,
    /// `L*` of the speculative plan.
    pub l_star_verify: f64,
    /// How each part was chosen.
    pub choices: Vec<Choice>,
}

impl SsmPlans {
    /// The replay decode plan with two state precisions ([`ReplayPlan::lp`]): tuned for them,
    /// or `replay`'s with them.
    pub fn replay_lp(&self) -> ReplayPlan {
        self.replay_two.unwrap_or(ReplayPlan {
            lp: true,
            ..self.replay
        })
    }

    /// The speculative plan with two state precisions: tuned for them, or `verify`'s with them.
    pub fn verify_lp(&self) -> ReplayPlan {
        self.verify_two.unwrap_or(ReplayPlan {
            lp: true,
            ..self.verify
        })
    }
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
/// then each plan's window and tiles together by whole-window timing (cache first), once for
/// one state precision and then, from those plans, for two (the step's, the verification's and
/// the fold's tiles and the windows; the verification's tiles then with their products
/// chained or not; the fold's chosen on whole verification cycles from its own shortlist, each
/// tile also verifying the rows it folds);
/// else the defaults (window `round(L*)`, default tiles). `verify_drafts` is the `T` of the
/// speculative plan.
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
    let mut conventional = ConventionalPlan::default_for(&shape, verify_drafts);
    let replay = ReplayPlan::default_for(&shape, batch, cands[0], 0);
    let verify = ReplayPlan::default_for(&shape, batch, cands_v[0], verify_drafts);
    let mut choices = Vec::new();
    // Each choice's time: since the previous one (the stages run one after the other).
    let mut since = std::time::Instant::now();
    let mut note = |what: &str, value: String, source: TuneSource, n: usize| {
        let seconds = since.elapsed().as_secs_f64();
        since = std::time::Instant::now();
        if source != TuneSource::Default {
            eprintln!(
                "replay: {what}: {value} ({}, {n} candidates, {seconds:.1} s)",
                source_name(source)
            );
        }
        choices.push(Choice {
            what: what.into(),
            value,
            source: source_name(source),
            candidates: n,
            seconds,
        })
    };
    let (replay, verify, two) = match tuner {
        None => {
            note("conventional tiles", conventional.decode.show(), TuneSource::Default, 1);
            let replay_value = show_window(replay.window, &replay.step, l_star);
            note("replay window L and tiles", replay_value, TuneSource::Default, 1);
            let verify_value = show_window(verify.window, &verify.verify, l_star_v);
            note("verify window L and tiles", verify_value, TuneSource::Default, 1);
            (replay, verify, None)
        }
        Some(tuner) => {
            let short = tune_conventional(tuner, &shape, batch, gated)?;
            note(
                "conventional tile shortlist",
                short.show(),
                short.source,
                short.candidates,
            );
            let (t, s) = tune_conventional_steps(tuner, shape, params, batch, gated, &short.tiles)?;
            conventional.decode = t;
            conventional.spec = t;
            note("conventional tiles", t.show(), s, short.tiles.len());
            let job = TuneJob {
                shape,
                params,
                batch,
                gated,
                windows: (&cands, &cands_v),
                stars: (l_star, l_star_v),
            };
            let one = job.tune(tuner, (replay, verify), false, &mut note)?;
            let two = job.tune(tuner, one, true, &mut note)?;
            (one.0, one.1, Some(two))
        }
    };
    Ok(SsmPlans {
        conventional,
        replay,
        verify,
        replay_two: two.map(|t| t.0),
        verify_two: two.map(|t| t.1),
        l_star,
        l_star_verify: l_star_v,
        choices,
    })
}

/// `tiles`, and for two state precisions also `start` (the one-precision plan's choice; the
/// kernel-level ranking that shortlists can miss it).
fn with_start(mut tiles: Vec<Tiles>, start: Tiles, lp: bool) -> Vec<Tiles> {
    if lp && !tiles.contains(&start) {
        tiles.push(start);
    }
    tiles
}

/// What the window tunings of one model and batch share.
struct TuneJob<'a> {
    shape: ModelShape,
    params: &'a Mamba2Params,
    batch: usize,
    gated: bool,
    /// Window candidates of the decode plan and of the speculative one.
    windows: (&'a [usize], &'a [usize]),
    /// Their `L*`.
    stars: (f64, f64),
}

impl TuneJob<'_> {
    /// Tunes the decode plan and, when it verifies drafts, the speculative plan from `start`
    /// (their windows and tiles so far) for one state precision or, with `lp`, two (the tiles
    /// so far timed beside each shortlist); notes each choice (those of two precisions marked
    /// so).
    fn tune(
        &self,
        tuner: &mut Autotuner,
        (mut replay, mut verify): (ReplayPlan, ReplayPlan),
        lp: bool,
        note: &mut impl FnMut(&str, String, TuneSource, usize),
    ) -> Result<(ReplayPlan, ReplayPlan)> {
        let Self {
            shape,
            params,
            batch,
            gated,
            ..
        } = *self;
        let (cands, cands_v) = self.windows;
        let (l_star, l_star_v) = self.stars;
        let tag = if lp { " (two precisions)" } else { "" };
        let short = tune_replay_tiles(tuner, &shape, batch, gated, replay.window, lp)?;
        note(
            &format!("replay tile shortlist{tag}"),
            short.show(),
            short.source,
            short.candidates,
        );
        let tiles = with_start(with_flush_variants(&short.tiles, batch), replay.step, lp);
        let c = tune_window(tuner, shape, params, batch, gated, &tiles, cands, lp)?;
        replay.window = c.window;
        replay.step = c.tiles;
        replay.verify = c.tiles;
        replay.lp = lp;
        let (value, source, n) = joint_note(&c, l_star, cands, tiles.len());
        note(&format!("replay window L and tiles{tag}"), value, source, n);
        let drafts = verify.max_drafts;
        if drafts > 0 {
            let accepted = accepted_drafts(drafts);
            let short = tune_verify_tiles(tuner, &shape, batch, gated, verify.window, drafts, accepted, lp)?;
            note(
                &format!("verify tile shortlist{tag}"),
                short.show(),
                short.source,
                short.candidates,
            );
            verify.step = replay.step;
            verify.lp = lp;
            let tiles = with_start(short.tiles, verify.verify, lp);
            let cycles = VerifyCycles {
                shape,
                params,
                batch,
                gated,
                accepted,
            };
            let c = cycles.tune_window(tuner, verify, &tiles, cands_v)?;
            verify.window = c.window;
            verify.verify = c.tiles;
            let (value, source, n) = joint_note(&c, l_star_v, cands_v, tiles.len());
            note(&format!("verify window L and tiles{tag}"), value, source, n);
            // At that window, the tiles with their products chained on their accumulators or
            // not (a precision choice within their bound; its own registers and schedule).
            let chained = with_chained_dots(verify.verify, &tiles);
            let c = cycles.tune_window(tuner, verify, &chained, &[verify.window])?;
            verify.verify = c.tiles;
            note(
                &format!("verify products chained{tag}"),
                c.tiles.show(),
                c.source,
                chained.len(),
            );
            // The fold's tiles: a kernel-level shortlist, then whole cycles (with two
            // precisions it writes the f16 copy too; the one-precision choice timed beside).
            let short = tune_fold_tiles(tuner, &shape, batch, verify.window, drafts, accepted, lp)?;
            note(
                &format!("fold tile shortlist{tag}"),
                short.show(),
                short.source,
                short.candidates,
            );
            // Each also verifying the rows it folds (the verification leaving them to it).
            let tiles = with_start(
                with_fold_verification(&with_head_blocks(&short.tiles, &shape)),
                verify.fold,
                lp,
            );
            let c = cycles.tune_fold(tuner, verify, &tiles)?;
            verify.fold = c.tiles;
            note(&format!("fold tiles{tag}"), c.tiles.show(), c.source, tiles.len());
        }
        Ok((replay, verify))
    }
}
