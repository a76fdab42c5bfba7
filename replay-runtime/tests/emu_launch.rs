//! The typed launch path on the emulator backend: the sm_90a PTX runs on the CPU and agrees
//! with the interpreter; hand-written PTX loads; an out-of-bounds access is a typed error
//! naming the PTX instruction.

mod common;

use common::{Add, AddConfig};
use replay_runtime::prelude::*;
use replay_runtime::ArgValue;

#[test]
fn typed_launch_adds_on_the_emulator() {
    let d = Device::emulator();
    let s = d.new_stream().unwrap();
    let n = 1000usize;
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let ys: Vec<f32> = (0..n).map(|i| 0.5 * i as f32).collect();
    let x = DeviceBuffer::from_host(&s, &xs).unwrap();
    let y = DeviceBuffer::from_host(&s, &ys).unwrap();
    let mut out = DeviceBuffer::<f32>::zeros(&s, n).unwrap();
    out.poison(&s).unwrap();
    let k = Add::compile(
        &d,
        AddConfig {
            block: 128,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(k.load(&Default::default()).unwrap().compiled.is_some());
    k.launch(&s, Grid::cdiv(n as u64, 128), (&x, &y, &mut out, 1000))
        .unwrap();
    let got = out.to_host(&s).unwrap();
    for i in 0..n {
        assert_eq!(got[i], xs[i] + ys[i], "element {i}");
    }
}

const STORE_TID: &str = ".version 8.0
.target sm_90a
.address_size 64
.visible .entry store_tid(
	.param .u64 out
)
{
	.reg .b32 %r<2>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [out];
	cvta.to.global.u64 %rd2, %rd1;
	mov.u32 %r1, %tid.x;
	mad.wide.u32 %rd3, %r1, 4, %rd2;
	st.global.u32 [%rd3], %r1;
	ret;
}
";

#[test]
fn hand_written_ptx_and_the_memcheck() {
    let d = Device::emulator();
    let s = d.new_stream().unwrap();
    let k = d.load_ptx(STORE_TID, "store_tid", 64).unwrap();
    let ok = DeviceBuffer::<u32>::zeros(&s, 64).unwrap();
    // SAFETY: one pointer parameter; the emulator checks every access anyway.
    unsafe { k.launch_unchecked(&s, Grid::new(1, 1, 1), &[ArgValue::Buffer(ok.raw())]) }.unwrap();
    assert_eq!(ok.to_host(&s).unwrap(), (0..64).collect::<Vec<u32>>());
    let short = DeviceBuffer::<u32>::zeros(&s, 63).unwrap();
    // SAFETY: as above; the buffer is one element short, which the emulator reports.
    let err = unsafe { k.launch_unchecked(&s, Grid::new(1, 1, 1), &[ArgValue::Buffer(short.raw())]) }.unwrap_err();
    match &err {
        RuntimeError::Emulator { kernel, message } => {
            assert_eq!(kernel, "store_tid");
            assert!(message.contains("st.global.u32 [%rd3], %r1"), "{message}");
            assert!(message.contains("out of bounds of buffer 0 (252 bytes)"), "{message}");
        }
        other => panic!("expected an emulator error, got {other:?}"),
    }
    assert!(Device::interpreter().load_ptx(STORE_TID, "store_tid", 64).is_err());
}
