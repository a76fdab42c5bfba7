//! The autotuner end to end on the interpreter: candidates timed, failures and wrong outputs
//! recorded and skipped, results cached on disk, `REPLAY_TUNE` modes, and scheme tuning.

mod common;

use common::{Add, AddConfig};
use replay_runtime::prelude::*;
use replay_runtime::tune::{
    Autotuner, BenchSettings, Outcome, Problem, Scheme, SearchSpace, TuneCache, TuneMode, TuneSource,
};
use std::path::Path;

fn tuner(d: &Device, cache: &Path, mode: TuneMode) -> Autotuner {
    Autotuner::new(d)
        .unwrap()
        .with_cache(TuneCache::open(cache))
        .with_mode(mode)
        .with_progress(false)
        .with_settings(BenchSettings {
            warmup: 1,
            reps: 3,
            ..Default::default()
        })
}

fn space() -> SearchSpace<AddConfig> {
    // The first candidate is the reference every other output is compared with.
    SearchSpace::new()
        .config(AddConfig {
            block: 32,
            bug: 0,
            num_warps: 4,
        })
        .axis("BLOCK", [32, 64, 128])
        .axis("num_warps", [4])
        .config(AddConfig {
            block: 64,
            bug: 1,
            num_warps: 4,
        })
        // num_warps = 3 is not a power of two: tracing fails, recorded as such.
        .config(AddConfig {
            block: 16,
            bug: 0,
            num_warps: 3,
        })
        .constraint("BLOCK ≤ 64 or n large", |c, ctx| {
            c.block <= 64 || ctx.size("n").unwrap_or(0) >= 256
        })
}

fn problem(n: i32) -> Problem<AddConfig> {
    Problem::new(move |c: &AddConfig| Grid::cdiv(n as u64, c.block as u64)).scalar("n", n)
}

#[test]
fn tunes_records_and_caches() {
    let d = Device::interpreter();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tune-v1.json");
    let mut t = tuner(&d, &path, TuneMode::Cached);
    let tuned = t.tune::<Add>(&space(), &problem(200)).unwrap();
    assert_eq!(tuned.source, TuneSource::Tuned);
    assert_eq!(tuned.config.bug, 0, "the wrong candidate never wins");
    let rec = tuned.record.unwrap();
    let outcome = |block: i64, bug: i64| {
        rec.candidates
            .iter()
            .find(|c| c.values["BLOCK"] == block && c.values["BUG"] == bug)
            .map(|c| c.outcome.clone())
            .unwrap()
    };
    assert!(
        matches!(outcome(64, 1), Outcome::Mismatch { .. }),
        "{:?}",
        outcome(64, 1)
    );
    assert!(matches!(outcome(16, 0), Outcome::Failed { .. }));
    assert!(matches!(outcome(128, 0), Outcome::Pruned { .. }));
    assert!(matches!(outcome(32, 0), Outcome::Timed { samples: 3, .. }));
    assert!(rec.best_ms().is_some());
    assert!(path.exists());

    // A second tuner (another process) hits the file.
    let mut t2 = tuner(&d, &path, TuneMode::Cached);
    let again = t2.tune::<Add>(&space(), &problem(200)).unwrap();
    assert_eq!(again.source, TuneSource::Cache);
    assert_eq!(again.config, tuned.config);
    // Same power-of-two bucket: same entry; another bucket tunes again.
    assert_eq!(
        t2.tune::<Add>(&space(), &problem(250)).unwrap().source,
        TuneSource::Cache
    );
    assert_eq!(
        t2.tune::<Add>(&space(), &problem(300)).unwrap().source,
        TuneSource::Tuned
    );
    assert_eq!(TuneCache::open(&path).len(), 2);
    // The same key with a space that no longer contains the cached best (another shape of the
    // same bucket would bring other shape constexprs): tuned again, never the cached values.
    let other = if tuned.config.block == 32 { 64 } else { 32 };
    let narrower = SearchSpace::new().axis("BLOCK", [other]).axis("num_warps", [4]);
    let retuned = t2.tune::<Add>(&narrower, &problem(200)).unwrap();
    assert_eq!(retuned.source, TuneSource::Tuned);
    assert_eq!(retuned.config.block, other);

    // force re-tunes, once per tuner (the same problem asked again reuses that result); off
    // takes the first valid candidate without timing.
    let mut forced = tuner(&d, &path, TuneMode::Force);
    let fresh = forced.tune::<Add>(&space(), &problem(200)).unwrap();
    assert_eq!(fresh.source, TuneSource::Tuned);
    let again = forced.tune::<Add>(&space(), &problem(200)).unwrap();
    assert_eq!((again.source, again.config), (TuneSource::Cache, fresh.config));
    assert_eq!(
        tuner(&d, &path, TuneMode::Force)
            .tune::<Add>(&space(), &problem(200))
            .unwrap()
            .source,
        TuneSource::Tuned
    );
    let mut off = tuner(&d, &path, TuneMode::Off);
    let first = off.tune::<Add>(&space(), &problem(200)).unwrap();
    assert_eq!(first.source, TuneSource::Default);
    assert_eq!(
        first.config,
        AddConfig {
            block: 32,
            bug: 0,
            num_warps: 4
        }
    );
}

#[test]
fn corrupt_cache_is_rebuilt_by_the_tuner() {
    let d = Device::interpreter();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tune-v1.json");
    std::fs::write(&path, "garbage").unwrap();
    let mut t = tuner(&d, &path, TuneMode::Cached);
    assert!(t.cache().warning().is_some());
    t.tune::<Add>(&space(), &problem(64)).unwrap();
    let reopened = TuneCache::open(&path);
    assert!(reopened.warning().is_none());
    assert_eq!(reopened.len(), 1);
}

#[test]
fn problems_are_validated() {
    let d = Device::interpreter();
    let dir = tempfile::tempdir().unwrap();
    let mut t = tuner(&d, &dir.path().join("c.json"), TuneMode::Cached);
    let no_n = Problem::new(|_: &AddConfig| Grid::from(1));
    assert!(t.tune::<Add>(&space(), &no_n).unwrap_err().to_string().contains("`n`"));
    let typo = problem(64).scalar("m", 3);
    assert!(t.tune::<Add>(&space(), &typo).unwrap_err().to_string().contains("`m`"));
    let empty = SearchSpace::new().axis("BLOCK", [64]).constraint("never", |_, _| false);
    assert!(t
        .tune::<Add>(&empty, &problem(64))
        .unwrap_err()
        .to_string()
        .contains("never"));
}

#[test]
fn schemes_time_windows_as_one_unit() {
    let d = Device::interpreter();
    let s = d.new_stream().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tune-v1.json");
    let n = 256usize;
    let x = DeviceBuffer::from_host(&s, &vec![1.0f32; n]).unwrap();
    let out = std::cell::RefCell::new(DeviceBuffer::<f32>::zeros(&s, n).unwrap());
    let k = Add::compile(&d, AddConfig::default()).unwrap();
    let launches = std::cell::Cell::new(0usize);
    // One "window" of L steps: L launches; the window with L = 3 computes a wrong output.
    let window = |l: i64, stream: &Stream| -> Result<(), RuntimeError> {
        for _ in 0..l {
            k.launch(
                stream,
                Grid::cdiv(n as u64, 64),
                (&x, &x, &mut *out.borrow_mut(), n as i32),
            )?;
            launches.set(launches.get() + 1);
        }
        Ok(())
    };
    let mut t = tuner(&d, &path, TuneMode::Cached);
    let scheme = Scheme::new("window", "add window", |v, stream, _| window(v["L"], stream))
        .candidate([("L", 1)])
        .candidate([("L", 2)])
        .candidate([("L", 3)])
        .size("n", n as i64)
        .output(|v, stream| {
            window(v["L"], stream)?;
            let o = out.borrow().to_host(stream)?;
            Ok(o.iter()
                .map(|&e| e as f64 + if v["L"] == 3 { 1.0 } else { 0.0 })
                .collect())
        })
        .units(|v| v["L"] as f64);
    let tuned = t.tune_scheme(scheme).unwrap();
    assert_eq!(tuned.source, TuneSource::Tuned);
    assert_ne!(tuned.config["L"], 3);
    let rec = tuned.record.unwrap();
    assert!(matches!(rec.candidates[2].outcome, Outcome::Mismatch { .. }));
    assert!(launches.get() > 0);
    // Cached next time.
    let mut t2 = tuner(&d, &path, TuneMode::Cached);
    let again = t2
        .tune_scheme(
            Scheme::new("window", "add window", |_, _, _| Ok(()))
                .candidate([("L", 1)])
                .size("n", n as i64),
        )
        .unwrap();
    assert_eq!(again.source, TuneSource::Cache);
    assert_eq!(again.config, tuned.config);
}

#[test]
fn exact_sizes_key_the_cache_as_they_are() {
    let d = Device::interpreter();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tune-v1.json");
    let mut t = tuner(&d, &path, TuneMode::Cached);
    // `heads` 96 and 112 share the power-of-two bucket 128: as sizes one entry serves both, as
    // exact sizes (a dimension the kernel is specialized on) each has its own.
    let with = |heads: i64, exact: bool| {
        let p = problem(200);
        if exact {
            p.exact_size("heads", heads)
        } else {
            p.size("n", 200).size("heads", heads)
        }
    };
    let sources: Vec<TuneSource> = [(96, false), (112, false), (96, true), (112, true), (96, true)]
        .into_iter()
        .map(|(heads, exact)| t.tune::<Add>(&space(), &with(heads, exact)).unwrap().source)
        .collect();
    use TuneSource::{Cache, Tuned};
    assert_eq!(sources, [Tuned, Cache, Tuned, Tuned, Cache]);
    assert_eq!(TuneCache::open(&path).len(), 3);
    // Constraints see exact sizes too.
    let wide = SearchSpace::new()
        .axis("BLOCK", [32, 64])
        .axis("num_warps", [4])
        .constraint("BLOCK below heads", |c: &AddConfig, ctx| {
            ctx.size("heads").is_some_and(|h| c.block < h)
        });
    let tuned = t.tune::<Add>(&wide, &problem(200).exact_size("heads", 48)).unwrap();
    assert_eq!(tuned.config.block, 32, "BLOCK 64 ≥ heads 48 is pruned");

    // Schemes alike.
    let scheme = |heads: i64| {
        Scheme::new("exact", "exact sizes", |_, _, _| Ok(()))
            .candidate([("L", 1)])
            .size("n", 200)
            .exact_size("heads", heads)
    };
    assert_eq!(t.tune_scheme(scheme(96)).unwrap().source, TuneSource::Tuned);
    assert_eq!(t.tune_scheme(scheme(112)).unwrap().source, TuneSource::Tuned);
    assert_eq!(t.tune_scheme(scheme(96)).unwrap().source, TuneSource::Cache);
}

#[test]
fn a_candidate_far_slower_than_the_best_so_far_is_timed_less() {
    let d = Device::interpreter();
    let dir = tempfile::tempdir().unwrap();
    let mut t = tuner(&d, &dir.path().join("tune-v1.json"), TuneMode::Cached).with_settings(BenchSettings {
        warmup: 1,
        reps: 8,
        probe: 3,
        ..Default::default()
    });
    // Each candidate's run sleeps `us` microseconds: 1 ms first (the best so far), then 6 ms
    // (past twice it: its probe of 3 runs only) and 1.5 ms (within: every run).
    let scheme = Scheme::new("sleeps", "sleeps", |v, _, _| {
        std::thread::sleep(std::time::Duration::from_micros(v["us"] as u64));
        Ok(())
    })
    .candidate([("us", 1000)])
    .candidate([("us", 6000)])
    .candidate([("us", 1500)]);
    let tuned = t.tune_scheme(scheme).unwrap();
    assert_eq!(tuned.config["us"], 1000);
    let samples: Vec<usize> = tuned
        .record
        .unwrap()
        .candidates
        .iter()
        .map(|c| match c.outcome {
            Outcome::Timed { samples, .. } => samples,
            ref o => panic!("{o:?}"),
        })
        .collect();
    assert_eq!(samples, vec![8, 3, 8]);
}
