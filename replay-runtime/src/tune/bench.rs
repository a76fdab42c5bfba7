//! Measuring: warm-up then the median of event-timed repetitions; how many input sets to
//! rotate through so the working set exceeds L2; comparing outputs; generating inputs.

use crate::driver::stream::Stream;
use crate::error::Result;

/// How candidates are timed and compared.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BenchSettings {
    /// Untimed runs before timing.
    pub warmup: usize,
    /// Timed runs (the median is kept).
    pub reps: usize,
    /// Relative tolerance of the output comparison with the reference candidate.
    pub rtol: f64,
    /// Absolute tolerance of the output comparison.
    pub atol: f64,
    /// The rotated inputs together should be at least this many times the L2 size.
    pub l2_multiple: f64,
    /// Most input sets to rotate through.
    pub max_sets: usize,
    /// Timed runs after which a candidate whose fastest run is already more than
    /// `give_up_ratio` × the best median so far stops (its few samples rank it).
    pub probe: usize,
    /// How much slower than the best so far a candidate's probe must be to stop it.
    pub give_up_ratio: f64,
}

impl Default for BenchSettings {
    fn default() -> Self {
        BenchSettings {
            warmup: 5,
            reps: 25,
            rtol: 1e-2,
            atol: 1e-3,
            l2_multiple: 2.0,
            max_sets: 16,
            probe: 3,
            give_up_ratio: 2.0,
        }
    }
}

/// The result of timing one candidate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    /// Median of the repetitions, in milliseconds.
    pub median_ms: f64,
    /// Fastest repetition.
    pub min_ms: f64,
    /// Number of repetitions.
    pub samples: usize,
}

/// The median (mean of the two middle values for an even count); `None` when empty.
pub fn median(samples: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// Runs `run(i)` `warmup` times untimed, then `reps` times each between two events on
/// `stream`; `i` counts all runs from 0 (callers rotate input sets with it).
pub fn time_runs(stream: &Stream, settings: &BenchSettings, run: impl FnMut(usize) -> Result<()>) -> Result<Timing> {
    time_runs_within(stream, settings, run, None)
}

/// [`time_runs`], stopped after the first [`BenchSettings::probe`] timed runs when even the
/// fastest of them took longer than `give_up_ms`: a candidate that much slower than the best
/// so far needs no more samples to be ranked below it.
pub fn time_runs_within(
    stream: &Stream,
    settings: &BenchSettings,
    mut run: impl FnMut(usize) -> Result<()>,
    give_up_ms: Option<f64>,
) -> Result<Timing> {
    for i in 0..settings.warmup {
        run(i)?;
    }
    stream.synchronize()?;
    let reps = settings.reps.max(1);
    let device = stream.device();
    let mut events = Vec::with_capacity(reps);
    let mut samples = Vec::with_capacity(reps);
    for r in 0..reps {
        let (start, end) = (device.new_event()?, device.new_event()?);
        start.record(stream)?;
        run(settings.warmup + r)?;
        end.record(stream)?;
        events.push((start, end));
        if let Some(limit) = give_up_ms.filter(|_| r + 1 == settings.probe && r + 1 < reps) {
            for (start, end) in events.drain(..) {
                samples.push(start.elapsed_ms(&end)? as f64);
            }
            if samples.iter().all(|&t| t > limit) {
                break;
            }
        }
    }
    for (start, end) in &events {
        samples.push(start.elapsed_ms(end)? as f64);
    }
    let min_ms = samples.iter().copied().fold(f64::INFINITY, f64::min);
    Ok(Timing {
        median_ms: median(&samples).unwrap_or(f64::NAN),
        min_ms,
        samples: samples.len(),
    })
}

/// How many input sets to rotate through so that they span `l2_multiple` × the L2 size
/// (`set_bytes` each), capped at `max_sets` and at a quarter of the device memory.
pub fn rotation_sets(l2_bytes: u64, set_bytes: u64, total_memory: u64, settings: &BenchSettings) -> usize {
    if set_bytes == 0 {
        return 1;
    }
    let want = ((l2_bytes as f64 * settings.l2_multiple) / set_bytes as f64)
        .ceil()
        .max(1.0) as usize;
    let memory_cap = if total_memory == 0 {
        usize::MAX
    } else {
        ((total_memory / 4) / set_bytes).max(1) as usize
    };
    want.min(settings.max_sets.max(1)).min(memory_cap)
}

/// Where two outputs differ beyond tolerance.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mismatch {
    /// Largest relative error over all elements.
    pub max_rel_err: f64,
    /// Index of the first element out of tolerance.
    pub first_bad: usize,
}

/// Compares `got` with `reference`: `|got − ref| ≤ atol + rtol·|ref|` everywhere; NaNs
/// must match NaNs and infinities must match exactly. A length difference fails at the
/// shorter length.
pub fn compare(reference: &[f64], got: &[f64], rtol: f64, atol: f64) -> Result<(), Mismatch> {
    let mut first_bad = None;
    let mut max_rel_err = 0.0f64;
    for (i, (&r, &g)) in reference.iter().zip(got).enumerate() {
        let ok = if r.is_nan() || g.is_nan() {
            r.is_nan() && g.is_nan()
        } else if r.is_infinite() || g.is_infinite() {
            r == g
        } else {
            let err = (g - r).abs();
            max_rel_err = max_rel_err.max(err / r.abs().max(f64::MIN_POSITIVE));
            err <= atol + rtol * r.abs()
        };
        if !ok && first_bad.is_none() {
            first_bad = Some(i);
            if !(r.is_finite() && g.is_finite()) {
                max_rel_err = f64::INFINITY;
            }
        }
    }
    if reference.len() != got.len() && first_bad.is_none() {
        first_bad = Some(reference.len().min(got.len()));
        max_rel_err = f64::INFINITY;
    }
    match first_bad {
        None => Ok(()),
        Some(first_bad) => Err(Mismatch { max_rel_err, first_bad }),
    }
}

/// `n` deterministic pseudo-random values, uniform in `[lo, hi)`, from `seed` (SplitMix64).
pub fn uniform(seed: u64, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            lo + (hi - lo) * ((z >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 1.0]), Some(1.0));
    }

    #[test]
    fn rotation() {
        let s = BenchSettings::default();
        // H200: 60 MiB L2; 8 MiB per set → 15 sets for 120 MiB.
        assert_eq!(rotation_sets(60 << 20, 8 << 20, 141 << 30, &s), 15);
        assert_eq!(rotation_sets(60 << 20, 1 << 20, 141 << 30, &s), s.max_sets);
        assert_eq!(rotation_sets(60 << 20, 1 << 30, 141 << 30, &s), 1);
        assert_eq!(rotation_sets(0, 1 << 20, 0, &s), 1);
        assert_eq!(rotation_sets(60 << 20, 0, 0, &s), 1);
        // Never more than a quarter of device memory.
        assert_eq!(rotation_sets(60 << 20, 4 << 20, 16 << 20, &s), 1);
    }

    #[test]
    fn comparisons() {
        assert!(compare(&[1.0, 2.0], &[1.001, 2.0], 1e-2, 0.0).is_ok());
        let m = compare(&[1.0, 2.0, 3.0], &[1.0, 2.5, 3.0], 1e-2, 0.0).unwrap_err();
        assert_eq!(m.first_bad, 1);
        assert!((m.max_rel_err - 0.25).abs() < 1e-12);
        assert!(compare(&[f64::NAN, f64::INFINITY], &[f64::NAN, f64::INFINITY], 0.0, 0.0).is_ok());
        assert!(compare(&[1.0], &[f64::NAN], 1.0, 1.0).is_err());
        assert!(compare(&[0.0], &[1e-4], 0.0, 1e-3).is_ok());
        assert_eq!(compare(&[1.0, 2.0], &[1.0], 0.1, 0.1).unwrap_err().first_bad, 1);
    }

    #[test]
    fn uniform_is_deterministic_and_in_range() {
        let a = uniform(7, 1000, -1.0, 1.0);
        assert_eq!(a, uniform(7, 1000, -1.0, 1.0));
        assert_ne!(a, uniform(8, 1000, -1.0, 1.0));
        assert!(a.iter().all(|&x| (-1.0..1.0).contains(&x)));
        assert!(a.iter().any(|&x| x < -0.5) && a.iter().any(|&x| x > 0.5));
    }

    #[test]
    fn timing_on_the_interpreter_clock() {
        let d = Device::interpreter();
        let s = d.new_stream().unwrap();
        let mut runs = Vec::new();
        let settings = BenchSettings {
            warmup: 2,
            reps: 3,
            ..Default::default()
        };
        let t = time_runs(&s, &settings, |i| {
            runs.push(i);
            Ok(())
        })
        .unwrap();
        assert_eq!(runs, vec![0, 1, 2, 3, 4]);
        assert_eq!(t.samples, 3);
        assert!(t.median_ms >= 0.0 && t.min_ms <= t.median_ms);
    }

    #[test]
    fn a_candidate_far_slower_than_the_best_stops_after_its_probe() {
        let d = Device::interpreter();
        let s = d.new_stream().unwrap();
        let settings = BenchSettings {
            warmup: 1,
            reps: 10,
            probe: 3,
            ..Default::default()
        };
        let slow = |_| {
            std::thread::sleep(std::time::Duration::from_millis(2));
            Ok(())
        };
        // Slower than the limit: the probe's 3 samples only.
        let t = time_runs_within(&s, &settings, slow, Some(0.5)).unwrap();
        assert_eq!(t.samples, 3);
        assert!(t.min_ms > 0.5, "{t:?}");
        // Within it, or with none: every repetition.
        assert_eq!(time_runs_within(&s, &settings, slow, Some(1e4)).unwrap().samples, 10);
        assert_eq!(time_runs_within(&s, &settings, slow, None).unwrap().samples, 10);
    }
}
