//! GPU smoke tests of the driver layer, launches, graphs and tuning. On a machine without a
//! CUDA driver each test says it is skipped and passes; on a GPU it must pass for real.

mod common;

use common::{Add, AddConfig};
use replay_runtime::prelude::*;
use replay_runtime::tune::{Autotuner, BenchSettings, Problem, Scheme, SearchSpace, TuneCache, TuneMode, TuneSource};
use replay_runtime::{ArgValue, Engine, LoadedKernel};
use std::sync::Arc;

const ADD_PTX: &str = include_str!("ptx/add_f32.ptx");

fn add_ptx(d: &Device, threads: u32) -> Arc<LoadedKernel> {
    d.load_ptx(ADD_PTX, "add_f32", threads).unwrap()
}

fn launch_add(
    k: &LoadedKernel,
    s: &Stream,
    x: &DeviceBuffer<f32>,
    y: &DeviceBuffer<f32>,
    out: &DeviceBuffer<f32>,
    n: usize,
) {
    let args = [
        ArgValue::Buffer(x.raw()),
        ArgValue::Buffer(y.raw()),
        ArgValue::Buffer(out.raw()),
        ArgValue::I32(n as i32),
    ];
    let grid = Grid::cdiv(n as u64, k.info.num_threads as u64);
    // SAFETY: add_f32 takes (f32*, f32*, f32*, i32) and touches n elements of each buffer.
    unsafe { k.launch_unchecked(s, grid, &args) }.unwrap();
}

#[test]
fn device_info_and_errors() {
    let Some(d) = Device::gpu_for_test() else { return };
    let info = d.info();
    eprintln!("{info}");
    assert!(info.target.is_some());
    assert!(info.sm_count > 0 && info.l2_bytes > 0 && info.total_memory > 0);
    assert!(info.driver_version.0 >= 12);
    assert!(matches!(
        Device::cuda(999),
        Err(RuntimeError::NoDevice { ordinal: 999, .. })
    ));
}

#[test]
fn buffers_round_trip() {
    let Some(d) = Device::gpu_for_test() else { return };
    let s = d.new_stream().unwrap();
    let data: Vec<f32> = (0..1 << 20).map(|i| i as f32 * 0.25).collect();
    let mut b = DeviceBuffer::from_host(&s, &data).unwrap();
    assert_eq!(b.device_ptr() % 256, 0);
    assert_eq!(b.to_host(&s).unwrap(), data);
    let c = DeviceBuffer::<f32>::zeros(&s, data.len()).unwrap();
    assert!(c.to_host(&s).unwrap().iter().all(|&v| v == 0.0));
    c.raw().copy_from(&s, b.raw()).unwrap();
    assert_eq!(c.to_host(&s).unwrap(), data);
    b.poison(&s).unwrap();
    assert!(b.to_host(&s).unwrap().iter().all(|v| v.is_nan()));
    let e = DeviceBuffer::<f32>::zeros(&s, 0).unwrap();
    assert!(e.to_host(&s).unwrap().is_empty());
    let h = DeviceBuffer::from_host(&s, &[half::f16::from_f32(1.5); 3]).unwrap();
    assert_eq!(h.to_host(&s).unwrap()[2], half::f16::from_f32(1.5));
}

#[test]
fn ptx_launch_events_and_graphs() {
    let Some(d) = Device::gpu_for_test() else { return };
    let s = d.new_stream().unwrap();
    let n = 1_000_003usize;
    let xs: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let ys: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let x = DeviceBuffer::from_host(&s, &xs).unwrap();
    let y = DeviceBuffer::from_host(&s, &ys).unwrap();
    let mut out = DeviceBuffer::<f32>::zeros(&s, n).unwrap();
    let mut out2 = DeviceBuffer::<f32>::zeros(&s, n).unwrap();
    let k = add_ptx(&d, 256);
    eprintln!("add_f32: {:?}", k.info);
    assert!(k.info.num_regs.unwrap() > 0);

    let (start, end) = (d.new_event().unwrap(), d.new_event().unwrap());
    start.record(&s).unwrap();
    launch_add(&k, &s, &x, &y, &out, n);
    end.record(&s).unwrap();
    let ms = start.elapsed_ms(&end).unwrap();
    eprintln!("add_f32 over {n} elements: {ms:.4} ms");
    assert!(ms > 0.0);
    let got = out.to_host(&s).unwrap();
    assert!((0..n).all(|i| got[i] == xs[i] + ys[i]));

    // A graph of two dependent launches, replayed twice.
    let graph = s
        .capture(|s| {
            launch_add(&k, s, &x, &y, &out, n);
            launch_add(&k, s, &out, &y, &out2, n);
            Ok(())
        })
        .unwrap();
    graph.upload().unwrap();
    for _ in 0..2 {
        out.poison(&s).unwrap();
        out2.poison(&s).unwrap();
        graph.launch().unwrap();
        let got = out2.to_host(&s).unwrap();
        assert!((0..n).all(|i| got[i] == xs[i] + 2.0 * ys[i]));
    }
    // A failed capture leaves the stream usable.
    let err = s.capture(|_| Err(RuntimeError::Size("on purpose".into()))).unwrap_err();
    assert!(matches!(err, RuntimeError::Size(_)));
    launch_add(&k, &s, &x, &y, &out, n);
    s.synchronize().unwrap();
    // Bad PTX is a typed load error.
    assert!(matches!(
        d.load_ptx("not ptx", "add_f32", 32),
        Err(RuntimeError::Load { .. })
    ));
}

#[test]
fn typed_launch_and_tuning_of_a_compiled_kernel() {
    let Some(d) = Device::gpu_for_test() else { return };
    let s = d.new_stream().unwrap();
    match Add::compile(&d, AddConfig::default()) {
        Err(RuntimeError::Compile(e)) => {
            eprintln!("code generation not available yet ({e}): checking refusal paths only");
            let x = DeviceBuffer::from_host(&s, &[1.0f32; 64]).unwrap();
            let mut out = DeviceBuffer::<f32>::zeros(&s, 63).unwrap();
            let k = CompiledKernel::<Add>::lazy(&d, AddConfig::default());
            let err = k.launch(&s, 1, (&x, &x, &mut out, 64)).unwrap_err();
            assert!(matches!(err, RuntimeError::Launch(_)), "{err:?}");
            // The same kernel through the interpreter, with GPU buffers.
            let mut out = DeviceBuffer::<f32>::zeros(&s, 64).unwrap();
            k.launch_interpreted(&s, 1, (&x, &x, &mut out, 64)).unwrap();
            assert_eq!(out.to_host(&s).unwrap(), vec![2.0; 64]);
        }
        Err(e) => panic!("{e}"),
        Ok(k) => {
            let n = 100_000usize;
            let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let x = DeviceBuffer::from_host(&s, &xs).unwrap();
            let mut out = DeviceBuffer::<f32>::zeros(&s, n).unwrap();
            let reference = DeviceBuffer::<f32>::zeros(&s, n).unwrap();
            let grid = Grid::cdiv(n as u64, 64);
            k.launch(&s, grid, (&x, &x, &mut out, n as i32)).unwrap();
            k.launch_values(
                &s,
                grid,
                &[
                    ArgValue::Buffer(x.raw()),
                    ArgValue::Buffer(x.raw()),
                    ArgValue::Buffer(reference.raw()),
                    ArgValue::I32(n as i32),
                ],
                Engine::Interpreter,
            )
            .unwrap();
            assert_eq!(out.to_host(&s).unwrap(), reference.to_host(&s).unwrap());
            let dir = tempfile::tempdir().unwrap();
            let mut t = Autotuner::new(&d)
                .unwrap()
                .with_cache(TuneCache::open(dir.path().join("t.json")))
                .with_mode(TuneMode::Cached);
            let space = SearchSpace::new()
                .axis("BLOCK", [128, 256, 512, 1024])
                .axis("num_warps", [4, 8])
                .register_limit();
            let tuned = t
                .tune::<Add>(
                    &space,
                    &Problem::new(move |c: &AddConfig| Grid::cdiv(n as u64, c.block as u64)).scalar("n", n as i32),
                )
                .unwrap();
            eprintln!("tuned add: {:?}", tuned.record.as_ref().map(|r| r.best.clone()));
        }
    }
}

#[test]
fn scheme_tuning_on_the_gpu() {
    let Some(d) = Device::gpu_for_test() else { return };
    let s = d.new_stream().unwrap();
    let n = 1 << 22;
    let x = DeviceBuffer::from_host(&s, &vec![1.0f32; n]).unwrap();
    let out = DeviceBuffer::<f32>::zeros(&s, n).unwrap();
    let kernels: Vec<(i64, Arc<LoadedKernel>)> = [64u32, 128, 256, 512, 1024]
        .iter()
        .map(|&t| (t as i64, add_ptx(&d, t)))
        .collect();
    let pick = |v: &replay_runtime::tune::Values| kernels.iter().find(|(t, _)| *t == v["threads"]).unwrap().1.clone();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tune-v1.json");
    let settings = BenchSettings {
        warmup: 3,
        reps: 20,
        ..Default::default()
    };
    let mut scheme = Scheme::new("add_f32 window", ADD_PTX, |v, stream, _| {
        let k = pick(v);
        for _ in 0..4 {
            launch_add(&k, stream, &x, &x, &out, n);
        }
        Ok(())
    })
    .size("n", n as i64)
    .output(|v, stream| {
        launch_add(&pick(v), stream, &x, &x, &out, n);
        Ok(out.to_host(stream)?.iter().map(|&e| e as f64).collect())
    })
    .units(|_| 4.0);
    for t in [64, 128, 256, 512, 1024] {
        scheme = scheme.candidate([("threads", t)]);
    }
    let mut t = Autotuner::new(&d)
        .unwrap()
        .with_cache(TuneCache::open(&path))
        .with_settings(settings)
        .with_mode(TuneMode::Cached);
    let tuned = t.tune_scheme(scheme).unwrap();
    assert_eq!(tuned.source, TuneSource::Tuned);
    for c in &tuned.record.as_ref().unwrap().candidates {
        eprintln!("{:?}: {:?}", c.values, c.outcome);
    }
    // Cache hit, in milliseconds.
    let t0 = std::time::Instant::now();
    let mut t2 = Autotuner::new(&d).unwrap().with_cache(TuneCache::open(&path));
    let hit = t2
        .tune_scheme(
            Scheme::new("add_f32 window", ADD_PTX, |_, _, _| Ok(()))
                .candidate([("threads", 64)])
                .size("n", n as i64)
                .units(|_| 4.0),
        )
        .unwrap();
    let hit_ms = t0.elapsed().as_secs_f64() * 1e3;
    eprintln!("cache hit in {hit_ms:.2} ms");
    assert_eq!(hit.source, TuneSource::Cache);
    assert_eq!(hit.config, tuned.config);
}
