//! Tuning a *scheme*: several launches timed together as one unit (e.g. a whole replay
//! window of L−1 cheap steps and one flush), over candidate settings (e.g. the window L).

use super::cache::{CandidateRecord, Outcome, Values};
use super::key::TuneKey;
use super::mode::TuneMode;
use super::tuner::{fastest_median, Autotuner, TuneSource, Tuned};
use crate::driver::stream::Stream;
use crate::error::{Result, RuntimeError};

type RunFn<'a> = Box<dyn FnMut(&Values, &Stream, usize) -> Result<()> + 'a>;
type OutputFn<'a> = Box<dyn FnMut(&Values, &Stream) -> Result<Vec<f64>> + 'a>;
type UnitsFn<'a> = Box<dyn Fn(&Values) -> f64 + 'a>;

/// A unit of work to tune: `run(setting, stream, i)` enqueues one unit (its `i`-th run,
/// for rotating inputs) for candidate `setting`.
pub struct Scheme<'a> {
    name: String,
    source: String,
    sizes: Vec<(String, i64)>,
    exact: Vec<(String, i64)>,
    candidates: Vec<Values>,
    run: RunFn<'a>,
    output: Option<OutputFn<'a>>,
    units: Option<UnitsFn<'a>>,
}

impl std::fmt::Debug for Scheme<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheme")
            .field("name", &self.name)
            .field("candidates", &self.candidates)
            .finish()
    }
}

impl<'a> Scheme<'a> {
    /// A scheme called `name`; `source` is hashed into the cache key (pass the sources of the
    /// kernels it launches, so editing any of them re-tunes).
    pub fn new(name: &str, source: &str, run: impl FnMut(&Values, &Stream, usize) -> Result<()> + 'a) -> Self {
        Scheme {
            name: name.to_string(),
            source: source.to_string(),
            sizes: Vec::new(),
            exact: Vec::new(),
            candidates: Vec::new(),
            run: Box::new(run),
            output: None,
            units: None,
        }
    }

    /// Adds a candidate setting, e.g. `[("L", 8)]`.
    pub fn candidate<'n>(mut self, values: impl IntoIterator<Item = (&'n str, i64)>) -> Self {
        self.candidates
            .push(values.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
        self
    }

    /// A problem size for the cache key (bucketed to a power of two).
    pub fn size(mut self, name: &str, value: i64) -> Self {
        self.sizes.push((name.to_string(), value));
        self
    }

    /// A problem size for the cache key as it is (not bucketed): a dimension the scheme's
    /// kernels are specialized on.
    pub fn exact_size(mut self, name: &str, value: i64) -> Self {
        self.exact.push((name.to_string(), value));
        self
    }

    /// How to get a candidate's output (from fresh inputs) for the comparison with the
    /// first candidate's; without it outputs are not compared.
    pub fn output(mut self, output: impl FnMut(&Values, &Stream) -> Result<Vec<f64>> + 'a) -> Self {
        self.output = Some(Box::new(output));
        self
    }

    /// The number of units of useful work one run does (e.g. L tokens per window): times are
    /// divided by it before comparing candidates.
    pub fn units(mut self, units: impl Fn(&Values) -> f64 + 'a) -> Self {
        self.units = Some(Box::new(units));
        self
    }
}

impl Autotuner {
    /// Tunes a scheme: each candidate's output is compared with the first's, then its run is
    /// timed (warm-up, median of event timings) and divided by its units; the fastest wins.
    /// Cached like kernels under (scheme name, source hash, GPU, size buckets).
    pub fn tune_scheme(&mut self, mut scheme: Scheme<'_>) -> Result<Tuned<Values>> {
        let Some(first) = scheme.candidates.first().cloned() else {
            return Err(RuntimeError::Tune {
                kernel: scheme.name,
                message: "no candidate".into(),
            });
        };
        if self.mode == TuneMode::Off {
            return Ok(Tuned {
                config: first,
                source: TuneSource::Default,
                record: None,
            });
        }
        let sizes: Vec<(&str, i64)> = scheme.sizes.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let exact: Vec<(&str, i64)> = scheme.exact.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let key = TuneKey::new(&scheme.name, &scheme.source, self.device.info(), &sizes).with_exact(&exact);
        if let Some((best, record)) = self.cached(&key) {
            return Ok(Tuned {
                config: best,
                source: TuneSource::Cache,
                record: Some(record),
            });
        }
        let bar = self.progress_bar(&scheme.name, scheme.candidates.len());
        let mut reference = None;
        let mut records = Vec::new();
        for values in &scheme.candidates {
            bar.set_message(format!("{values:?}"));
            let output = match scheme.output.as_mut() {
                Some(f) => f(values, &self.stream),
                None => Ok(Vec::new()),
            };
            let units = scheme.units.as_ref().map_or(1.0, |u| u(values)).max(f64::MIN_POSITIVE);
            let run = &mut scheme.run;
            let best = fastest_median(&records);
            let outcome = self.evaluate(&mut reference, output, |i| run(values, &self.stream, i), units, best);
            records.push(CandidateRecord {
                values: values.clone(),
                outcome,
            });
            bar.inc(1);
        }
        bar.finish_and_clear();
        let record = self.finish(key, records);
        match record.best.clone() {
            Some(best) => Ok(Tuned {
                config: best,
                source: TuneSource::Tuned,
                record: Some(record),
            }),
            None => {
                let why: Vec<String> = record
                    .candidates
                    .iter()
                    .filter_map(|c| match &c.outcome {
                        Outcome::Timed { .. } => None,
                        o => Some(format!("{:?}: {o:?}", c.values)),
                    })
                    .collect();
                Err(RuntimeError::Tune {
                    kernel: scheme.name,
                    message: format!("no candidate ran correctly: {}", why.join("; ")),
                })
            }
        }
    }
}
