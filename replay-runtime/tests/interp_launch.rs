//! The typed launch path on the interpreter backend: results, pre-launch refusals, the
//! module cache, and the no-driver error.

mod common;

use common::{Add, AddConfig};
use replay_runtime::prelude::*;
use replay_runtime::LaunchError;

fn setup() -> (Device, Stream) {
    let d = Device::interpreter();
    let s = d.new_stream().unwrap();
    (d, s)
}

fn inputs(n: usize) -> (Vec<f32>, Vec<f32>) {
    (
        (0..n).map(|i| i as f32).collect(),
        (0..n).map(|i| 0.5 * i as f32).collect(),
    )
}

#[test]
fn typed_launch_adds() {
    let (d, s) = setup();
    let n = 1000usize;
    let (xs, ys) = inputs(n);
    let x = DeviceBuffer::from_host(&s, &xs).unwrap();
    let y = DeviceBuffer::from_host(&s, &ys).unwrap();
    let mut out = DeviceBuffer::<f32>::zeros(&s, n).unwrap();
    out.poison(&s).unwrap();
    let cfg = AddConfig {
        block: 128,
        ..Default::default()
    };
    let k = Add::compile(&d, cfg).unwrap();
    k.launch(&s, Grid::cdiv(n as u64, 128), (&x, &y, &mut out, 1000))
        .unwrap();
    let got = out.to_host(&s).unwrap();
    for i in 0..n {
        assert_eq!(got[i], xs[i] + ys[i], "element {i}");
    }
    // Per-launch interpreter selection takes the same path.
    out.poison(&s).unwrap();
    k.launch_interpreted(&s, Grid::cdiv(n as u64, 128), (&x, &y, &mut out, 1000))
        .unwrap();
    assert_eq!(out.to_host(&s).unwrap()[999], xs[999] + ys[999]);
}

#[test]
fn short_buffers_are_refused_before_running() {
    let (d, s) = setup();
    let (xs, ys) = inputs(100);
    let x = DeviceBuffer::from_host(&s, &xs).unwrap();
    let y = DeviceBuffer::from_host(&s, &ys).unwrap();
    let mut out = DeviceBuffer::<f32>::zeros(&s, 99).unwrap();
    out.poison(&s).unwrap();
    let k = Add::compile(&d, AddConfig::default()).unwrap();
    let err = k.launch(&s, Grid::cdiv(100, 64), (&x, &y, &mut out, 100)).unwrap_err();
    match &err {
        RuntimeError::Launch(LaunchError::BufferTooShort {
            kernel,
            param,
            len,
            needed,
        }) => {
            assert_eq!(
                (kernel.as_str(), param.as_str(), *len, *needed),
                ("add", "out", 99, 100)
            );
        }
        other => panic!("expected BufferTooShort, got {other:?}"),
    }
    assert!(err.to_string().contains("`out`"));
    // Nothing ran: the output is still poisoned.
    assert!(out.to_host(&s).unwrap().iter().all(|v| v.is_nan()));
    // `check` reports the same without launching, and the specialization otherwise.
    assert!(k.check(Grid::cdiv(100, 64), (&x, &y, &mut out, 100)).is_err());
    let spec = k.check(Grid::cdiv(96, 64), (&x, &y, &mut out, 96)).unwrap();
    assert_eq!(spec.divisibility, vec![1, 1, 1, 16]);
}

#[test]
fn bad_grids_and_foreign_buffers_are_refused() {
    let (d, s) = setup();
    let x = DeviceBuffer::from_host(&s, &[1.0f32; 16]).unwrap();
    let mut out = DeviceBuffer::<f32>::zeros(&s, 16).unwrap();
    let k = Add::compile(&d, AddConfig::default()).unwrap();
    let err = k.launch(&s, (1, 70_000), (&x, &x, &mut out, 16)).unwrap_err();
    assert!(matches!(err, RuntimeError::Launch(LaunchError::Grid { .. })));
    // An empty grid runs nothing and is fine.
    k.launch(&s, 0, (&x, &x, &mut out, 16)).unwrap();
    let other = Device::interpreter().new_stream().unwrap();
    let foreign = DeviceBuffer::from_host(&other, &[1.0f32; 16]).unwrap();
    let err = k.launch(&s, 1, (&x, &foreign, &mut out, 16)).unwrap_err();
    assert!(matches!(err, RuntimeError::DeviceMismatch(_)));
}

#[test]
fn modules_are_cached_per_specialization() {
    let (d, s) = setup();
    let x = DeviceBuffer::from_host(&s, &[1.0f32; 64]).unwrap();
    let mut out = DeviceBuffer::<f32>::zeros(&s, 64).unwrap();
    let k = Add::compile(&d, AddConfig::default()).unwrap();
    assert_eq!(d.loaded_modules(), 1);
    k.launch(&s, 1, (&x, &x, &mut out, 50)).unwrap(); // n % 16 != 0: the compiled one
    assert_eq!(d.loaded_modules(), 1);
    k.launch(&s, 1, (&x, &x, &mut out, 48)).unwrap(); // divisible by 16: a new specialization
    k.launch(&s, 1, (&x, &x, &mut out, 64)).unwrap();
    assert_eq!(d.loaded_modules(), 2);
    Add::compile(
        &d,
        AddConfig {
            block: 32,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(d.loaded_modules(), 3);
    assert_eq!(out.to_host(&s).unwrap(), vec![2.0; 64]);
}

#[test]
fn compile_errors_and_interpreter_faults_are_typed() {
    let (d, s) = setup();
    let err = Add::compile(
        &d,
        AddConfig {
            num_warps: 3,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(matches!(err, RuntimeError::Compile(_)), "{err:?}");
    // A grid larger than the extents cover is the kernel's business: masked, no fault.
    let x = DeviceBuffer::from_host(&s, &[1.0f32; 8]).unwrap();
    let mut out = DeviceBuffer::<f32>::zeros(&s, 8).unwrap();
    Add::compile(&d, AddConfig::default())
        .unwrap()
        .launch(&s, 4, (&x, &x, &mut out, 8))
        .unwrap();
    // An unmasked store past the buffer is an interpreter fault naming the kernel.
    let k = Add::compile(
        &d,
        AddConfig {
            bug: 2,
            ..Default::default()
        },
    )
    .unwrap();
    match k.launch(&s, 1, (&x, &x, &mut out, 8)).unwrap_err() {
        RuntimeError::Interpreter { kernel, message } => {
            assert_eq!(kernel, "add");
            assert!(!message.is_empty());
        }
        other => panic!("expected an interpreter fault, got {other:?}"),
    }
}

#[test]
fn no_driver_means_an_error_not_a_panic() {
    if replay_runtime::driver::probe::probe(replay_runtime::driver::probe::DRIVER_LIBRARY_NAMES).is_ok() {
        return; // a machine with a driver
    }
    assert!(matches!(Device::cuda(0), Err(RuntimeError::NoDriver { .. })));
}
