//! Conditional graph nodes on the GPU: a kernel's `set_graph_condition` decides, in every
//! replay of a captured graph, whether the body of the `Stream::capture_if` node after it
//! runs; a condition no kernel sets keeps its default; one condition serves one node; a
//! condition no node reads does not break the capture. Skips without a GPU; on the CPU
//! backends the conditions kernels set are logged.

use replay_dsl::prelude::*;
use replay_macros::kernel;
use replay_runtime::launch::kernel::Engine;
use replay_runtime::{ArgValue, Device, DeviceBuffer, Grid, KernelExt, Stream};

/// Sets `condition` to `x[at] > 0` (with `set != 0`; nothing otherwise).
#[kernel]
pub fn set_if_positive(#[extent(at + 1)] x: Ptr<i32>, at: i32, condition: i64, set: i32) {
    let v = load(x + at, true);
    if set != 0 {
        set_graph_condition(condition, v > 0);
    }
}

/// `out[at] = value`.
#[kernel]
pub fn mark(#[extent(at + 1)] out: Ptr<i32>, at: i32, value: i32) {
    store(out + at, value, true);
}

fn gpu_stream() -> Option<Stream> {
    Some(Device::gpu_for_test()?.new_stream().unwrap())
}

#[test]
fn conditional_nodes_follow_the_condition_a_kernel_sets_gpu() {
    let Some(s) = gpu_stream() else { return };
    let dev = s.device().clone();
    let body = dev.new_stream().unwrap();
    let setter = set_if_positive::Kernel::compile(&dev, set_if_positive::Config::default()).unwrap();
    let marker = mark::Kernel::compile(&dev, mark::Config::default()).unwrap();
    let mut x = DeviceBuffer::<i32>::zeros(&s, 2).unwrap();
    let mut out = DeviceBuffer::<i32>::zeros(&s, 4).unwrap();
    let one = Grid::new(1, 1, 1);
    let set = |s: &Stream, at: i32, c: i64, on: bool| {
        let args = [
            ArgValue::Buffer(x.raw()),
            ArgValue::I32(at),
            ArgValue::I64(c),
            ArgValue::I32(on as i32),
        ];
        setter.launch_values(s, one, &args, Engine::Device)
    };
    let mark_at = |s: &Stream, at: i32| {
        let args = [ArgValue::Buffer(out.raw()), ArgValue::I32(at), ArgValue::I32(7)];
        marker.launch_values(s, one, &args, Engine::Device)
    };
    // Load both kernels before capturing (no condition set outside a graph).
    set(&s, 0, 0, false).unwrap();
    mark_at(&s, 0).unwrap();
    let graph = s
        .capture(|s| {
            // Defaults: true runs the body, false does not.
            let c0 = s.new_graph_condition(true)?;
            assert_eq!(s.capture_id()?, Some(c0.capture()));
            s.capture_if(c0, &body, |b| mark_at(b, 0))?;
            let c1 = s.new_graph_condition(false)?;
            s.capture_if(c1, &body, |b| mark_at(b, 1))?;
            // Set by a kernel before the node.
            let c2 = s.new_graph_condition(false)?;
            set(s, 0, c2.handle(), true)?;
            s.capture_if(c2, &body, |b| mark_at(b, 2))?;
            let c3 = s.new_graph_condition(true)?;
            set(s, 1, c3.handle(), true)?;
            s.capture_if(c3, &body, |b| mark_at(b, 3))?;
            // A condition serves one node.
            assert!(s.capture_if(c2, &body, |b| mark_at(b, 0)).is_err());
            // Set, but read by no node: the capture closes it.
            let c4 = s.new_graph_condition(true)?;
            set(s, 0, c4.handle(), true)
        })
        .unwrap();
    assert_eq!(s.capture_id().unwrap(), None);
    for (xs, want) in [
        ([5, -3], [7, -1, 7, -1]),
        ([-1, 2], [7, -1, -1, 7]),
        ([0, 0], [7, -1, -1, -1]),
        ([9, 9], [7, -1, 7, 7]),
    ] {
        x.copy_from_host(&s, &xs).unwrap();
        // A body that does not run leaves the poison.
        out.copy_from_host(&s, &[-1; 4]).unwrap();
        graph.launch().unwrap();
        assert_eq!(out.to_host(&s).unwrap(), want, "x = {xs:?}");
    }
}

#[test]
fn the_cpu_backends_log_the_conditions_kernels_set() {
    for dev in [Device::interpreter(), Device::emulator()] {
        let s = dev.new_stream().unwrap();
        let setter = set_if_positive::Kernel::compile(&dev, set_if_positive::Config::default()).unwrap();
        let mut x = DeviceBuffer::<i32>::zeros(&s, 2).unwrap();
        x.copy_from_host(&s, &[5, -3]).unwrap();
        for (at, handle, on) in [(0, 7, true), (1, 9, true), (0, 11, false)] {
            let args = [
                ArgValue::Buffer(x.raw()),
                ArgValue::I32(at),
                ArgValue::I64(handle),
                ArgValue::I32(on as i32),
            ];
            setter
                .launch_values(&s, Grid::new(1, 1, 1), &args, Engine::Device)
                .unwrap();
        }
        let backend = dev.backend().name();
        // The third launch sets nothing; the log is taken out.
        assert_eq!(dev.take_graph_conditions(), [(7, true), (9, false)], "{backend}");
        assert_eq!(dev.take_graph_conditions(), [], "{backend}");
    }
}

#[test]
fn graph_conditions_need_a_capture() {
    for dev in [Device::interpreter(), Device::emulator()] {
        let s = dev.new_stream().unwrap();
        assert_eq!(s.capture_id().unwrap(), None);
        assert!(s.new_graph_condition(true).is_err());
    }
    let Some(s) = gpu_stream() else { return };
    assert_eq!(s.capture_id().unwrap(), None);
    let err = s.new_graph_condition(true).unwrap_err();
    assert!(err.to_string().contains("outside a CUDA graph capture"), "{err}");
}
