//! The autotuner: picks the fastest correct configuration of a kernel for a problem on a
//! device, remembering every timing in the [`TuneCache`].

use super::bench::{compare, rotation_sets, time_runs_within, uniform, BenchSettings};
use super::cache::{CandidateRecord, Outcome, TuneCache, TuneRecord, Values};
use super::key::TuneKey;
use super::mode::TuneMode;
use super::space::{values_of, PruneContext, SearchSpace};
use crate::driver::buffer::{encode_f64, RawBuffer};
use crate::driver::device::Device;
use crate::driver::stream::Stream;
use crate::error::{Result, RuntimeError};
use crate::launch::args::ArgValue;
use crate::launch::grid::Grid;
use crate::launch::kernel::{CompiledKernel, Engine};
use indicatif::{ProgressBar, ProgressStyle};
use replay_dsl::{ConfigValues, DType, Elem, KernelDef, Specialization};
use std::sync::Arc;

/// The most threads compiling and loading candidates at once.
const PRELOAD_THREADS: usize = 16;

/// A scalar argument value given for tuning.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScalarArg {
    /// `i32`.
    I32(i32),
    /// `i64`.
    I64(i64),
    /// `u32`.
    U32(u32),
    /// `f32`.
    F32(f32),
    /// `bool`.
    Bool(bool),
}

impl ScalarArg {
    fn value(self) -> ArgValue<'static> {
        match self {
            ScalarArg::I32(v) => ArgValue::I32(v),
            ScalarArg::I64(v) => ArgValue::I64(v),
            ScalarArg::U32(v) => ArgValue::U32(v),
            ScalarArg::F32(v) => ArgValue::F32(v),
            ScalarArg::Bool(v) => ArgValue::Bool(v),
        }
    }
}

macro_rules! scalar_from {
    ($t:ty, $v:ident) => {
        impl From<$t> for ScalarArg {
            fn from(x: $t) -> ScalarArg {
                ScalarArg::$v(x)
            }
        }
    };
}
scalar_from!(i32, I32);
scalar_from!(i64, I64);
scalar_from!(u32, U32);
scalar_from!(f32, F32);
scalar_from!(bool, Bool);

/// How a generated input buffer is filled.
#[derive(Clone, Debug, PartialEq)]
pub enum Fill {
    /// Uniform pseudo-random values in `[lo, hi)` (a different seed per input set).
    Uniform(f64, f64),
    /// Every element the same.
    Constant(f64),
    /// These values, repeated to the buffer's length.
    Values(Vec<f64>),
}

/// The problem a kernel is tuned for: the scalar arguments, the sizes that key the cache,
/// the grid as a function of the configuration, and how to make the buffers.
pub struct Problem<C> {
    scalars: Vec<(String, ScalarArg)>,
    sizes: Vec<(String, i64)>,
    exact: Vec<(String, i64)>,
    grid: Arc<dyn Fn(&C) -> Grid + Send + Sync>,
    fills: Vec<(String, Fill)>,
    lens: Vec<(String, u64)>,
}

impl<C> std::fmt::Debug for Problem<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Problem")
            .field("scalars", &self.scalars)
            .field("sizes", &self.sizes)
            .field("exact", &self.exact)
            .finish()
    }
}

impl<C> Problem<C> {
    /// A problem launched over `grid(config)`.
    pub fn new(grid: impl Fn(&C) -> Grid + Send + Sync + 'static) -> Self {
        Problem {
            scalars: Vec::new(),
            sizes: Vec::new(),
            exact: Vec::new(),
            grid: Arc::new(grid),
            fills: Vec::new(),
            lens: Vec::new(),
        }
    }

    /// The value of scalar parameter `name`.
    pub fn scalar(mut self, name: &str, value: impl Into<ScalarArg>) -> Self {
        self.scalars.push((name.to_string(), value.into()));
        self
    }

    /// A problem size for the cache key (bucketed to a power of two). Without any, the
    /// integer scalars are the sizes.
    pub fn size(mut self, name: &str, value: i64) -> Self {
        self.sizes.push((name.to_string(), value));
        self
    }

    /// A problem size for the cache key as it is (not bucketed): a dimension the kernel is
    /// specialized on (a constexpr), so that problems differing in it never share a result.
    pub fn exact_size(mut self, name: &str, value: i64) -> Self {
        self.exact.push((name.to_string(), value));
        self
    }

    /// How to fill buffer parameter `name` (default: uniform in `[-1, 1)` for floats, zeros
    /// for integers and bools).
    pub fn fill(mut self, name: &str, fill: Fill) -> Self {
        self.fills.push((name.to_string(), fill));
        self
    }

    /// The length of buffer parameter `name`, for parameters without a declared extent (or to
    /// allocate more than it).
    pub fn buffer_len(mut self, name: &str, len: u64) -> Self {
        self.lens.push((name.to_string(), len));
        self
    }
}

/// Where a tuned configuration came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TuneSource {
    /// `REPLAY_TUNE=off`: the first valid candidate, nothing timed.
    Default,
    /// A cache hit.
    Cache,
    /// Timed just now.
    Tuned,
}

/// The tuner's answer.
#[derive(Clone, Debug)]
pub struct Tuned<C> {
    /// The chosen configuration (or scheme setting).
    pub config: C,
    /// Where it came from.
    pub source: TuneSource,
    /// The timings behind it (`None` for [`TuneSource::Default`]).
    pub record: Option<TuneRecord>,
}

/// Tunes kernels and schemes on one device, with a cache.
pub struct Autotuner {
    pub(crate) device: Device,
    pub(crate) stream: Stream,
    pub(crate) cache: TuneCache,
    pub(crate) mode: TuneMode,
    pub(crate) settings: BenchSettings,
    pub(crate) progress: bool,
    /// Keys tuned by this tuner: [`TuneMode::Force`] tunes each once, then reuses the result.
    pub(crate) tuned: std::collections::HashSet<TuneKey>,
}

impl std::fmt::Debug for Autotuner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Autotuner")
            .field("device", &self.device.info().name)
            .field("mode", &self.mode)
            .finish()
    }
}

/// The least median (per unit) among the timed candidates of `records`.
pub(crate) fn fastest_median(records: &[CandidateRecord]) -> Option<f64> {
    records
        .iter()
        .filter_map(CandidateRecord::timed_median)
        .min_by(f64::total_cmp)
}

/// Values per buffer compared between candidates (all of a smaller buffer; 64 evenly spaced
/// runs of a larger one, see [`RawBuffer::read_f64_sample`]). Read, decoded and compared for
/// every buffer of every candidate: at 2²⁰, a verification candidate at B = 256 (17 buffers)
/// spent ~0.26 s outside its timed runs (H200 machine: 1017 candidates in 266 s, 29 s of them
/// timed runs); decoding and comparing that many values alone takes ~0.28 s on the build
/// machine.
const CHECK_SAMPLE: usize = 1 << 16;

impl Autotuner {
    /// A tuner on `device` with the default cache file, `REPLAY_TUNE` mode and settings.
    pub fn new(device: &Device) -> Result<Autotuner> {
        Ok(Autotuner {
            device: device.clone(),
            stream: device.new_stream()?,
            cache: TuneCache::open_default(),
            mode: TuneMode::from_env(),
            settings: BenchSettings::default(),
            progress: true,
            tuned: Default::default(),
        })
    }

    /// Uses `cache` instead of the default file.
    pub fn with_cache(mut self, cache: TuneCache) -> Self {
        self.cache = cache;
        self
    }

    /// Overrides `REPLAY_TUNE`.
    pub fn with_mode(mut self, mode: TuneMode) -> Self {
        self.mode = mode;
        self
    }

    /// Timing and comparison settings.
    pub fn with_settings(mut self, settings: BenchSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Shows (default) or hides the progress bar (hidden anyway when stderr is no terminal).
    pub fn with_progress(mut self, show: bool) -> Self {
        self.progress = show;
        self
    }

    /// The cache.
    pub fn cache(&self) -> &TuneCache {
        &self.cache
    }

    /// The stream tuning runs on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    pub(crate) fn progress_bar(&self, label: &str, len: usize) -> ProgressBar {
        if !self.progress {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::new(len as u64);
        if let Ok(style) = ProgressStyle::with_template("tuning {prefix} [{bar:30}] {pos}/{len} {msg}") {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(label.to_string());
        bar
    }

    /// Compares `output` with the reference (the first correct candidate's output, set here
    /// when there is none yet), then times `run` (`units` per run), stopping early when its
    /// first runs are [`BenchSettings::give_up_ratio`] times slower than `best_so_far` (per
    /// unit). Returns the candidate's outcome.
    pub(crate) fn evaluate(
        &self,
        reference: &mut Option<Vec<f64>>,
        output: Result<Vec<f64>>,
        run: impl FnMut(usize) -> Result<()>,
        units: f64,
        best_so_far: Option<f64>,
    ) -> Outcome {
        let output = match output {
            Ok(o) => o,
            Err(e) => return Outcome::Failed { reason: e.to_string() },
        };
        match reference {
            None => *reference = Some(output),
            Some(r) => {
                if let Err(m) = compare(r, &output, self.settings.rtol, self.settings.atol) {
                    return Outcome::Mismatch {
                        max_rel_err: m.max_rel_err,
                        first_bad: m.first_bad,
                    };
                }
            }
        }
        let give_up = best_so_far.map(|b| b * units * self.settings.give_up_ratio);
        match time_runs_within(&self.stream, &self.settings, run, give_up) {
            Ok(t) => Outcome::Timed {
                median_ms: t.median_ms / units,
                min_ms: t.min_ms / units,
                samples: t.samples,
            },
            Err(e) => Outcome::Failed { reason: e.to_string() },
        }
    }

    /// Picks the fastest timed candidate, stores the record and saves the cache (a failed save
    /// is a warning: the result is still good for this process).
    pub(crate) fn finish(&mut self, key: TuneKey, candidates: Vec<CandidateRecord>) -> TuneRecord {
        let tuned_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut record = TuneRecord {
            key,
            best: None,
            candidates,
            tuned_at,
        };
        record.best = record.fastest(1).first().map(|v| (*v).clone());
        self.tuned.insert(record.key.clone());
        self.cache.insert(record.clone());
        if let Err(e) = self.cache.save() {
            eprintln!("replay: warning: could not save the tuning cache: {e}");
        }
        record
    }

    /// The cached best values for `key`, unless the mode says to re-tune: `Off` never reads
    /// the cache, `Force` only what this tuner tuned (a problem asked twice in one run is
    /// tuned once).
    pub(crate) fn cached(&self, key: &TuneKey) -> Option<(Values, TuneRecord)> {
        let fresh = self.mode == TuneMode::Force && self.tuned.contains(key);
        if self.mode != TuneMode::Cached && !fresh {
            return None;
        }
        let rec = self.cache.get(key)?;
        Some((rec.best.clone()?, rec.clone()))
    }

    /// Compiles and loads the candidates `configs` on several threads (on a GPU, where the
    /// compilation of the PTX dominates a tuning's time: in parallel with ptxas, one module at
    /// a time with the driver's JIT); the device caches the loaded modules, so the timing loop
    /// finds them. Errors are left for that loop to report.
    fn preload<K: KernelDef>(&self, configs: &[K::Config], spec: &Specialization) {
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(PRELOAD_THREADS);
        if self.device.backend() != crate::Backend::Cuda || threads < 2 || configs.len() < 2 {
            return;
        }
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    while let Some(c) = configs.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                        let _ = self.device.load::<K>(c, spec);
                    }
                });
            }
        });
    }

    /// Tunes kernel `K` over `space` for `problem`: the fastest configuration whose output
    /// matches the first correct candidate's, from the cache when there (see [`TuneMode`]).
    pub fn tune<K: KernelDef>(
        &mut self,
        space: &SearchSpace<K::Config>,
        problem: &Problem<K::Config>,
    ) -> Result<Tuned<K::Config>> {
        let params = K::params();
        let index = |name: &str| params.iter().position(|p| p.name == name);
        let named = problem
            .scalars
            .iter()
            .map(|(n, _)| n)
            .chain(problem.fills.iter().map(|(n, _)| n));
        for n in named.chain(problem.lens.iter().map(|(n, _)| n)) {
            if index(n).is_none() {
                return Err(RuntimeError::Tune {
                    kernel: K::NAME.into(),
                    message: format!("no parameter named `{n}`"),
                });
            }
        }
        // Scalar arguments in parameter order.
        let mut scalars: Vec<Option<ScalarArg>> = vec![None; params.len()];
        for (n, v) in &problem.scalars {
            scalars[index(n).expect("checked above")] = Some(*v);
        }
        for (i, p) in params.iter().enumerate() {
            if !p.dtype.is_ptr() && scalars[i].is_none() {
                return Err(RuntimeError::Tune {
                    kernel: K::NAME.into(),
                    message: format!("no value for scalar `{}`", p.name),
                });
            }
        }
        let ints: Vec<Option<i64>> = scalars.iter().map(|s| s.and_then(|s| s.value().int())).collect();
        let sizes: Vec<(&str, i64)> = if problem.sizes.is_empty() {
            params
                .iter()
                .zip(&ints)
                .filter_map(|(p, v)| v.map(|v| (p.name, v)))
                .collect()
        } else {
            problem.sizes.iter().map(|(n, v)| (n.as_str(), *v)).collect()
        };
        let exact: Vec<(&str, i64)> = problem.exact.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        // Constraints see every size, bucketed or exact.
        let known: Vec<(&str, i64)> = sizes.iter().chain(&exact).copied().collect();
        let info = self.device.info().clone();
        let ctx = PruneContext {
            device: &info,
            sizes: &known,
        };
        let cands = space.candidates(&ctx);
        let Some(first) = cands.valid.first().cloned() else {
            let why: Vec<String> = cands.pruned.iter().map(|(v, r)| format!("{v:?}: {r}")).collect();
            return Err(RuntimeError::Tune {
                kernel: K::NAME.into(),
                message: format!("no valid candidate ({})", why.join("; ")),
            });
        };
        if self.mode == TuneMode::Off {
            return Ok(Tuned {
                config: first,
                source: TuneSource::Default,
                record: None,
            });
        }
        let key = TuneKey::new(K::NAME, K::SOURCE, &info, &sizes).with_exact(&exact);
        if let Some((best, record)) = self.cached(&key).filter(|(best, _)| space.admits(best)) {
            let named: Vec<(&str, i64)> = best.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            if let Ok(config) = K::Config::from_values(&named) {
                return Ok(Tuned {
                    config,
                    source: TuneSource::Cache,
                    record: Some(record),
                });
            }
        }

        // Buffers: as long as the longest extent over all candidates (or as given).
        let mut lens: Vec<Option<u64>> = vec![None; params.len()];
        for c in &cands.valid {
            for (i, e) in K::extents(c, &ints).into_iter().enumerate().take(params.len()) {
                if let Some(e) = e {
                    lens[i] = Some(lens[i].map_or(e, |l: u64| l.max(e)));
                }
            }
        }
        for (n, l) in &problem.lens {
            let i = index(n).expect("checked above");
            lens[i] = Some(lens[i].map_or(*l, |e| e.max(*l)));
        }
        let mut pointer_params: Vec<(usize, Elem, usize, Fill)> = Vec::new();
        for (i, p) in params.iter().enumerate() {
            if let DType::Ptr(e) = p.dtype {
                let len = lens[i].ok_or_else(|| RuntimeError::Tune {
                    kernel: K::NAME.into(),
                    message: format!(
                        "parameter `{}` has no declared extent: give Problem::buffer_len",
                        p.name
                    ),
                })?;
                let fill = problem
                    .fills
                    .iter()
                    .find(|(n, _)| n == p.name)
                    .map(|(_, f)| f.clone())
                    .unwrap_or(if e.is_float() {
                        Fill::Uniform(-1.0, 1.0)
                    } else {
                        Fill::Constant(0.0)
                    });
                pointer_params.push((i, e, len as usize, fill));
            }
        }
        let set_bytes: u64 = pointer_params.iter().map(|(_, e, l, _)| (*l * e.bytes()) as u64).sum();
        let nsets = rotation_sets(info.l2_bytes, set_bytes, info.total_memory, &self.settings);
        // Every buffer of every set, filled once; set 0 is reset before each check run.
        let mut sets: Vec<Vec<RawBuffer>> = Vec::with_capacity(nsets);
        for s in 0..nsets {
            let mut bufs = Vec::new();
            for (i, e, len, fill) in &pointer_params {
                let values = match fill {
                    Fill::Uniform(lo, hi) => uniform((s as u64) << 32 | *i as u64, *len, *lo, *hi),
                    Fill::Constant(v) => vec![*v; *len],
                    Fill::Values(v) if !v.is_empty() => v.iter().copied().cycle().take(*len).collect(),
                    Fill::Values(_) => vec![0.0; *len],
                };
                let b = RawBuffer::zeros(&self.stream, *e, *len)?;
                b.write_bytes(&self.stream, &encode_f64(*e, &values))?;
                bufs.push(b);
            }
            sets.push(bufs);
        }
        // A device copy of set 0's initial contents: each candidate's check run starts from it
        // (a device-to-device copy, not a host upload of gigabytes per candidate).
        let pristine: Vec<RawBuffer> = sets[0]
            .iter()
            .map(|b| {
                let p = RawBuffer::zeros(&self.stream, b.elem(), b.len())?;
                p.copy_from(&self.stream, b)?;
                Ok(p)
            })
            .collect::<Result<_>>()?;
        fn args_for<'b>(
            params: &[replay_dsl::ParamSpec],
            scalars: &[Option<ScalarArg>],
            set: &'b [RawBuffer],
        ) -> Vec<ArgValue<'b>> {
            let mut next = set.iter();
            params
                .iter()
                .zip(scalars)
                .map(|(p, s)| match s {
                    Some(s) if !p.dtype.is_ptr() => s.value(),
                    _ => ArgValue::Buffer(next.next().expect("one buffer per pointer parameter")),
                })
                .collect()
        }
        let spec = Specialization::from_ints(&ints);

        let mut records: Vec<CandidateRecord> = cands
            .pruned
            .iter()
            .map(|(v, r)| CandidateRecord {
                values: v.clone(),
                outcome: Outcome::Pruned { reason: r.clone() },
            })
            .collect();
        self.preload::<K>(&cands.valid, &spec);
        let bar = self.progress_bar(K::NAME, cands.valid.len());
        let mut reference: Option<Vec<f64>> = None;
        for c in &cands.valid {
            let values = values_of(c);
            bar.set_message(format!("{values:?}"));
            let kernel = CompiledKernel::<K>::lazy(&self.device, c.clone());
            let grid = (problem.grid)(c);
            let outcome = match kernel.load(&spec) {
                Err(e) => Outcome::Failed { reason: e.to_string() },
                Ok(loaded) => match space.check_loaded(c, &loaded.info, &info) {
                    Err(reason) => Outcome::Pruned { reason },
                    Ok(()) => {
                        let output = (|| {
                            for (b, p) in sets[0].iter().zip(&pristine) {
                                b.copy_from(&self.stream, p)?;
                            }
                            kernel.launch_values(
                                &self.stream,
                                grid,
                                &args_for(&params, &scalars, &sets[0]),
                                Engine::Device,
                            )?;
                            let mut out = Vec::new();
                            for b in &sets[0] {
                                out.extend(b.read_f64_sample(&self.stream, CHECK_SAMPLE)?);
                            }
                            Ok(out)
                        })();
                        let run = |i: usize| {
                            kernel.launch_values(
                                &self.stream,
                                grid,
                                &args_for(&params, &scalars, &sets[i % nsets]),
                                Engine::Device,
                            )
                        };
                        self.evaluate(&mut reference, output, run, 1.0, fastest_median(&records))
                    }
                },
            };
            records.push(CandidateRecord { values, outcome });
            bar.inc(1);
        }
        bar.finish_and_clear();
        let record = self.finish(key, records);
        match &record.best {
            Some(best) => {
                let named: Vec<(&str, i64)> = best.iter().map(|(k, v)| (k.as_str(), *v)).collect();
                let config = K::Config::from_values(&named)?;
                Ok(Tuned {
                    config,
                    source: TuneSource::Tuned,
                    record: Some(record),
                })
            }
            None => {
                let why: Vec<String> = record
                    .candidates
                    .iter()
                    .map(|c| format!("{:?}: {:?}", c.values, c.outcome))
                    .collect();
                Err(RuntimeError::Tune {
                    kernel: K::NAME.into(),
                    message: format!("no candidate ran correctly: {}", why.join("; ")),
                })
            }
        }
    }
}
