//! Whole-window timing: the window candidates around the traffic model's `L*`, runners that
//! capture one window of decode steps (or a run of verification cycles) as one graph, and the
//! window `L` and tiles chosen together by timing them.

use super::kernels::verify_states;
use super::space::{shape_dims, tiles_of};
use super::Result;
use crate::ssm::state::{
    ConventionalPlan, DecodeLayer, Mamba2ConventionalState, Mamba2ReplayState, Next, ReplayPlan, StepIo, Tiles,
};
use replay_dsl::KernelDef;
use replay_kernels::ssm::kernels::commit::mamba2_commit;
use replay_kernels::ssm::kernels::decode::mamba2_decode;
use replay_kernels::ssm::kernels::fold::mamba2_fold;
use replay_kernels::ssm::kernels::record_rows;
use replay_kernels::ssm::kernels::replay::mamba2_replay_step;
use replay_kernels::ssm::kernels::verify::{draft_columns, mamba2_verify};
use replay_kernels::ssm::reference::Mamba2Params;
use replay_kernels::ssm::shapes::ModelShape;
use replay_kernels::ssm::traffic::{RecordLayout, TrafficModel};
use replay_runtime::tune::{Autotuner, Scheme, TuneSource, Values};
use replay_runtime::{Backend, Graph, Stream};

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
/// non-flush verification and flushes less often; and the largest window with the same rows of
/// the fold's tile (`record_rows(L)`: a power of two), whose flush costs less than the next
/// wider one's (H200, Nano B=256 T=8: L = 32, whose fold has 32 record rows and whose
/// verifications all take the half tier, 0.98 steps against 1.02–1.05 at the tuned 56).
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
        let tq = draft_columns(drafts);
        let widest: Vec<usize> = (c.iter())
            .flat_map(|&l| [record_rows(l + tq) - tq, record_rows(l)])
            .collect();
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

/// Drafts accepted on average per verification of `drafts` drafts (¾ of them, at least 1): what
/// the speculative plan is tuned for and what `bench-ssm` commits.
pub fn accepted_drafts(drafts: usize) -> usize {
    ((0.75 * drafts as f64).round() as usize).max(1)
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
        launch_or_run(&self.graph, stream, |s| {
            (0..self.steps).try_for_each(|_| self.state.step(s, &self.io))
        })
    }
}

/// `work` captured as one CUDA graph (uploaded) on a GPU; `None` elsewhere, where
/// [`launch_or_run`] runs it directly.
pub fn capture_on_gpu(stream: &Stream, work: impl Fn(&Stream) -> Result<()>) -> Result<Option<Graph>> {
    if stream.device().backend() != Backend::Cuda {
        return Ok(None);
    }
    let g = stream.capture(|s| work(s))?;
    g.upload()?;
    Ok(Some(g))
}

/// Launches `graph`, or runs `work` where there is none ([`capture_on_gpu`]).
pub fn launch_or_run(graph: &Option<Graph>, stream: &Stream, work: impl Fn(&Stream) -> Result<()>) -> Result<()> {
    match graph {
        Some(g) => g.launch(),
        None => work(stream),
    }
}

/// Decode steps per run of a [`ConventionalRunner`] (and per graph of `bench-ssm`'s
/// conventional timing).
pub const CONVENTIONAL_RUN_STEPS: usize = 16;

/// A conventional state with every row live, its step buffers and (on a GPU) a graph of
/// [`CONVENTIONAL_RUN_STEPS`] decode steps.
pub struct ConventionalRunner {
    state: Mamba2ConventionalState,
    io: StepIo,
    graph: Option<Graph>,
}

impl ConventionalRunner {
    /// Builds the state with decode tiles `tiles` (no drafts), fills every row and captures
    /// the steps on a GPU.
    pub fn new(
        stream: &Stream,
        shape: ModelShape,
        params: &Mamba2Params,
        batch: usize,
        gated: bool,
        tiles: Tiles,
    ) -> Result<ConventionalRunner> {
        let plan = ConventionalPlan {
            decode: tiles,
            spec: tiles,
            max_drafts: 0,
        };
        let mut state = Mamba2ConventionalState::new(stream, shape, params, batch, batch + 1, gated, plan)?;
        state.fill(stream)?;
        let mut io = StepIo::new(stream, shape, batch, 1, gated)?;
        io.randomize(stream, 7)?;
        state.prepare(&io)?;
        let mut runner = ConventionalRunner { state, io, graph: None };
        runner.graph = capture_on_gpu(stream, |s| runner.steps(s))?;
        Ok(runner)
    }

    fn steps(&self, stream: &Stream) -> Result<()> {
        for _ in 0..CONVENTIONAL_RUN_STEPS {
            self.state.step(stream, &self.io)?;
        }
        Ok(())
    }

    /// Enqueues [`CONVENTIONAL_RUN_STEPS`] decode steps.
    pub fn run(&self, stream: &Stream) -> Result<()> {
        launch_or_run(&self.graph, stream, |s| self.steps(s))
    }
}

/// The fewest verification cycles (verify `T` drafts, then commit) per timed run: enough for
/// the flushes of the longest candidate window to recur within one run.
pub const VERIFY_CYCLES: usize = 16;

/// Verification cycles per timed run at window `window` with `drafts` drafts, `accepted` of
/// them accepted: whole flush periods (the verifications from one fold to the next), the fewest
/// reaching [`VERIFY_CYCLES`]. Every run then holds a long decode's share of folds; a run of
/// 16 cycles with a period of 9 (Super, `L = 56`, T = 8) holds 2 folds in 7 runs of 9, and the
/// median of the runs counted `2/16` folds per cycle for the true `1/9`.
pub fn verify_run_cycles(window: usize, drafts: usize, accepted: usize) -> usize {
    let period = verify_period(window, drafts, accepted);
    VERIFY_CYCLES.div_ceil(period) * period
}

/// Verification cycles from one fold of a row to its next in steady state (`h = a, 2a, …` up
/// to the first `h` with `h + T > L`, which folds).
pub fn verify_period(window: usize, drafts: usize, accepted: usize) -> usize {
    verify_states(window, drafts, accepted).len()
}

/// Spreads `state`'s rows (all at `h = 0`, ready to verify `drafts` drafts) evenly over a flush
/// period `P` of `accepted` per cycle: `P` cycles (verify, commit) in which row `r` accepts
/// `accepted` drafts in the first `1 + r mod P` of them and none after, so that row `r` ends at
/// `h = accepted · (1 + r mod P)` and every later cycle folds the rows of one residue — about
/// `batch / P` of them, as in continuous batching, where sequences start at different times.
/// No row folds during the spreading. Leaves every row accepting `accepted`.
pub fn stagger_rows(
    state: &mut Mamba2ReplayState,
    stream: &Stream,
    io: &StepIo,
    drafts: usize,
    accepted: usize,
) -> Result<()> {
    let period = verify_period(state.plan().window, drafts, accepted);
    let batch = state.accepted.len();
    for c in 0..period {
        let counts: Vec<i32> = (0..batch)
            .map(|r| if c <= r % period { accepted as i32 } else { 0 })
            .collect();
        state.accepted.copy_from_host(stream, &counts)?;
        state.verify(stream, io, drafts)?;
        state.commit(stream, Next::Verify(drafts))?;
    }
    state.accepted.copy_from_host(stream, &vec![accepted as i32; batch])
}

/// A replay state with every row live and ready to verify `T` drafts, its token buffers and
/// (on a GPU) a graph of [`verify_run_cycles`] verification cycles (`verify` + `commit` with
/// the accepted counts in device memory): successive runs continue the rows' windows, flushes
/// included, as speculative decoding runs them.
pub struct VerifyRunner {
    state: Mamba2ReplayState,
    io: StepIo,
    drafts: usize,
    cycles: usize,
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
            cycles: verify_run_cycles(plan.window, drafts, accepted),
            graph: None,
        };
        runner.graph = capture_on_gpu(stream, |s| runner.cycles(s))?;
        Ok(runner)
    }

    fn cycles(&self, stream: &Stream) -> Result<()> {
        for _ in 0..self.cycles {
            self.state.verify(stream, &self.io, self.drafts)?;
            self.state.commit(stream, Next::Verify(self.drafts))?;
        }
        Ok(())
    }

    /// Enqueues [`verify_run_cycles`] verification cycles.
    pub fn run(&self, stream: &Stream) -> Result<()> {
        launch_or_run(&self.graph, stream, |s| self.cycles(s))
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
        ("FR", tiles.flush_rows as i64),
        ("ASYNC", tiles.async_copy as i64),
        ("TIERS", tiles.record_tiers as i64),
        ("TAIL", tiles.tail_tiles as i64),
        ("RELOAD_KEYS", tiles.reload_keys as i64),
        ("CHAINED", tiles.chained_dots as i64),
        ("VERIFY", tiles.verifies as i64),
        ("BESIDE", tiles.beside as i64),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect()
}

/// The window and tiles of a candidate's values.
fn window_of(values: &Values) -> (usize, Tiles) {
    (*values.get("L").expect("candidate L") as usize, tiles_of(values))
}

/// The candidates `windows × tiles`, the windows inner (the first window with the first tiles
/// first).
fn grid_values(windows: &[usize], tiles: &[Tiles]) -> Vec<Values> {
    tiles
        .iter()
        .flat_map(|t| windows.iter().map(move |&l| window_values(l, t)))
        .collect()
}

/// Tunes the window `L` and the tiles together over `windows × tiles` (the first window with
/// the first tiles first: the choice when tuning is off): each candidate gets a runner from
/// `build(stream, L, tiles)` (the previous candidate's is dropped first, freeing its buffers),
/// timed by `run`, `units(L)` steps per run. The batch (bucketed) and `dims` (as they are) key
/// the cache, and so do the candidates (hashed with `source`): a cached choice is reused only
/// for the same windows and tiles.
#[allow(clippy::too_many_arguments)]
fn tune_window_scheme<R>(
    tuner: &mut Autotuner,
    name: &str,
    source: &str,
    windows: &[usize],
    tiles: &[Tiles],
    (batch, dims): (usize, Vec<(&str, i64)>),
    units: impl Fn(usize) -> f64,
    mut build: impl FnMut(&Stream, usize, Tiles) -> Result<R>,
    run: impl Fn(&R, &Stream) -> Result<()>,
) -> Result<WindowChoice> {
    tune_values(
        tuner,
        name,
        source,
        &grid_values(windows, tiles),
        (batch, dims),
        move |v| units(window_of(v).0),
        |s, v| {
            let (l, t) = window_of(v);
            build(s, l, t)
        },
        run,
    )
}

/// Tunes over `candidates` ([`window_values`]; the first one first: the choice when tuning is
/// off), each timed by `run` on a runner from `build(stream, values)` (the previous
/// candidate's dropped first), `units(values)` per run; the batch (bucketed), `dims` (as they
/// are), `source` and the candidates key the cache.
#[allow(clippy::too_many_arguments)]
fn tune_values<R>(
    tuner: &mut Autotuner,
    name: &str,
    source: &str,
    candidates: &[Values],
    (batch, dims): (usize, Vec<(&str, i64)>),
    units: impl Fn(&Values) -> f64,
    mut build: impl FnMut(&Stream, &Values) -> Result<R>,
    run: impl Fn(&R, &Stream) -> Result<()>,
) -> Result<WindowChoice> {
    let keyed_source = format!("{source}\n// candidates: {candidates:?}");
    let mut current: Option<(Values, R)> = None;
    let mut scheme = Scheme::new(name, &keyed_source, move |v, s: &Stream, _i| {
        if current.as_ref().map(|c| &c.0) != Some(v) {
            current = None;
            current = Some((v.clone(), build(s, v)?));
        }
        run(&current.as_ref().expect("built").1, s)
    })
    .units(units);
    for v in candidates {
        scheme = scheme.candidate(v.iter().map(|(n, x)| (n.as_str(), *x)));
    }
    scheme = scheme.size("batch", batch as i64);
    for (n, v) in dims {
        scheme = scheme.exact_size(n, v);
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
        crate::ssm::admit::mamba2_admit::Kernel::SOURCE
    )
}

/// Whole verification cycles (verify `T` drafts, the fold, commit; [`VerifyRunner`]) of one
/// model shape and batch with `accepted` drafts accepted per cycle: the unit by which the
/// speculative plan's window and verification tiles and its fold's tiles are chosen.
pub struct VerifyCycles<'a> {
    /// The model shape.
    pub shape: ModelShape,
    /// Its parameters.
    pub params: &'a Mamba2Params,
    /// Rows.
    pub batch: usize,
    /// With `z`.
    pub gated: bool,
    /// Drafts accepted per cycle.
    pub accepted: usize,
}

impl VerifyCycles<'_> {
    /// The window `L` of `plan` among `windows` and its verification tiles among `tiles`,
    /// chosen together: the least time per cycle with `plan.max_drafts` drafts.
    pub fn tune_window(
        &self,
        tuner: &mut Autotuner,
        plan: ReplayPlan,
        tiles: &[Tiles],
        windows: &[usize],
    ) -> Result<WindowChoice> {
        let source = mamba2_verify::Kernel::SOURCE;
        self.tune(tuner, plan, "mamba2_verify_window", source, (windows, tiles), |p, v| {
            let (window, verify) = window_of(v);
            ReplayPlan { window, verify, ..p }
        })
    }

    /// The fold's tiles of `plan` (its window and verification chosen) among `tiles`. The
    /// kernel-level ranking ([`super::tune_fold_tiles`]) times one launch whose rows are spread
    /// over a cycle's states; rows admitted together fold together instead, and then the idle
    /// launches between folds cost per program (H200, Nano B = 256, `bench/NOTES.md` session
    /// 22: 22 µs with 4 heads per program, 10 µs with 12; the fold itself 874 and 854 µs; the
    /// cycle 0.574–0.578 → 0.558–0.570 ms).
    pub fn tune_fold(&self, tuner: &mut Autotuner, plan: ReplayPlan, tiles: &[Tiles]) -> Result<WindowChoice> {
        // The cycles' verification tiles key the choice too (with the kernels' sources).
        let kernels = format!(
            "{}{}\n// verification: {}",
            mamba2_fold::Kernel::SOURCE,
            mamba2_verify::Kernel::SOURCE,
            plan.verify.show()
        );
        self.tune(
            tuner,
            plan,
            "mamba2_fold_cycles",
            &kernels,
            (&[plan.window], tiles),
            |p, v| {
                let (window, fold) = window_of(v);
                ReplayPlan { window, fold, ..p }
            },
        )
    }

    /// The window and tiles among `windows × tiles` with the least time per cycle, each
    /// candidate put into `plan` by `place(plan, values)`; `kernels` (with the commit and admit
    /// kernels') keys the cache under `name`.
    fn tune(
        &self,
        tuner: &mut Autotuner,
        plan: ReplayPlan,
        name: &str,
        kernels: &str,
        (windows, tiles): (&[usize], &[Tiles]),
        place: impl Fn(ReplayPlan, &Values) -> ReplayPlan,
    ) -> Result<WindowChoice> {
        let Self {
            shape,
            params,
            batch,
            gated,
            accepted,
        } = *self;
        let mut dims = shape_dims(&shape, gated);
        dims.extend([
            ("T", plan.max_drafts as i64),
            ("accepted", accepted as i64),
            ("lp", plan.lp as i64),
        ]);
        tune_values(
            tuner,
            name,
            &window_scheme_source(kernels),
            &grid_values(windows, tiles),
            (batch, dims),
            move |v| verify_run_cycles(window_of(v).0, plan.max_drafts, accepted) as f64,
            |s, v| VerifyRunner::new(s, shape, params, batch, gated, place(plan, v), accepted),
            VerifyRunner::run,
        )
    }
}

/// The conventional kernel's tiles among `tiles` (a kernel-level shortlist) by the time per
/// step of a graph of [`CONVENTIONAL_RUN_STEPS`] steps, as `bench-ssm` times it: single
/// launches of a few µs rank unreliably at latency-bound batches (H200, Nano B = 1: a tile
/// ranked first alone took 3.9 µs per step in graphs, another 3.0 µs).
pub fn tune_conventional_steps(
    tuner: &mut Autotuner,
    shape: ModelShape,
    params: &Mamba2Params,
    batch: usize,
    gated: bool,
    tiles: &[Tiles],
) -> Result<(Tiles, TuneSource)> {
    let source = format!(
        "{}{}",
        mamba2_decode::Kernel::SOURCE,
        crate::ssm::admit::mamba2_admit::Kernel::SOURCE
    );
    // The kernel has no window: its one "window" is the steps of a run.
    let steps = CONVENTIONAL_RUN_STEPS;
    let c = tune_window_scheme(
        tuner,
        "mamba2_decode_steps",
        &source,
        &[steps],
        tiles,
        (batch, shape_dims(&shape, gated)),
        |_| steps as f64,
        |s, _, t| ConventionalRunner::new(s, shape, params, batch, gated, t),
        ConventionalRunner::run,
    )?;
    Ok((c.tiles, c.source))
}

/// The window `L` among `windows` and the replay tiles among `tiles`, chosen together: the
/// least amortised time per step of a whole window (each candidate's window — two when `L` is
/// odd — captured as one graph, timed as one unit, divided by its steps), with one state
/// precision or, with `lp`, two.
#[allow(clippy::too_many_arguments)]
pub fn tune_window(
    tuner: &mut Autotuner,
    shape: ModelShape,
    params: &Mamba2Params,
    batch: usize,
    gated: bool,
    tiles: &[Tiles],
    windows: &[usize],
    lp: bool,
) -> Result<WindowChoice> {
    let source = window_scheme_source(mamba2_replay_step::Kernel::SOURCE);
    let plan = |window, tiles| ReplayPlan {
        window,
        max_drafts: 0,
        step: tiles,
        verify: tiles,
        fold: tiles,
        lp,
    };
    let mut dims = shape_dims(&shape, gated);
    dims.push(("lp", lp as i64));
    tune_window_scheme(
        tuner,
        "mamba2_replay_window",
        &source,
        windows,
        tiles,
        (batch, dims),
        |l| window_run_steps(l) as f64,
        |s, l, t| WindowRunner::new(s, shape, params, batch, gated, plan(l, t)),
        WindowRunner::run,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use replay_kernels::ssm::shapes::NEMOTRON3_SUPER_120B;

    /// Verification windows come with the largest window of the same record rows (Super,
    /// T = 8: 16 → 24, 25/38/51 → 56; 64 has 128 rows, whose 120 is past the limit) and of
    /// the same fold rows (24/25 → 32); decoding windows are not widened. The rounded `L*`
    /// stays first.
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
        // The widest window of each row count of the fold's tile: 25 and 24 fold 32 rows, so
        // 32 is searched.
        for &l in &c {
            assert!(
                c.contains(&record_rows(l).min(64)),
                "{l} without {}: {c:?}",
                record_rows(l)
            );
        }
        assert!(c.contains(&32), "{c:?}");
        let (_, d) = window_candidates(NEMOTRON3_SUPER_120B, 0, 1.0);
        assert!(!d.contains(&32) && !d.contains(&24), "{d:?}");
    }

    /// A window candidate's values name every field of its tiles: the tiles read back from
    /// them are the tiles (each option on, and each off), with the window.
    #[test]
    fn window_candidates_round_trip_their_tiles() {
        let plan = crate::ssm::state::ReplayPlan::default_for(&NEMOTRON3_SUPER_120B, 256, 56, 8);
        let on = Tiles {
            bv: 64,
            hb: 8,
            num_warps: 2,
            min_blocks: 3,
            early: true,
            prefetch: true,
            shared_weights: false,
            flush_columns: 64,
            flush_rows: 16,
            async_copy: true,
            record_tiers: true,
            tail_tiles: true,
            reload_keys: true,
            chained_dots: true,
            verifies: true,
            beside: true,
        };
        for tiles in [on, plan.verify, plan.fold, plan.step] {
            assert_eq!(window_of(&window_values(51, &tiles)), (51, tiles));
        }
    }

    /// A timed run of verifications holds whole flush periods: Super's T = 8 (6 accepted)
    /// folds every 8 verifications at L = 51 and every 9 at L = 56; T = 2 (2 accepted) at
    /// L = 51 every 25.
    #[test]
    fn verification_runs_hold_whole_flush_periods() {
        assert_eq!(verify_run_cycles(51, 8, 6), 16);
        assert_eq!(verify_run_cycles(56, 8, 6), 18);
        assert_eq!(verify_run_cycles(51, 2, 2), 25);
        for (l, t, a) in [(16, 4, 3), (24, 8, 6), (64, 8, 8), (10, 8, 1)] {
            let n = verify_run_cycles(l, t, a);
            let period = verify_states(l, t, a).len();
            assert!(
                n >= VERIFY_CYCLES && n.is_multiple_of(period) && n < VERIFY_CYCLES + period,
                "{l} {t} {a}: {n}"
            );
        }
    }
}
