//! The README's tour as a program: row softmax on the GPU (or on the interpreter when there is
//! none, or when `REPLAY_INTERPRET=1`), checked against the float64 reference.

use replay_kernels::gallery::softmax::{reference, softmax};
use replay_runtime::prelude::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("no GPU ({e}); running on the interpreter");
            Device::interpreter()
        }
    };
    let (rows, cols) = (64usize, 1000usize);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ std::process::id() as u64;
    let host_x: Vec<f32> = (0..rows * cols)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 40) as f32 / (1u64 << 24) as f32 * 8.0 - 4.0
        })
        .collect();

    let stream = device.default_stream();
    let x = DeviceBuffer::from_host(&stream, &host_x)?;
    let mut out = DeviceBuffer::<f32>::zeros(&stream, host_x.len())?;
    out.poison(&stream)?;
    softmax::Kernel::compile(
        &device,
        softmax::Config {
            BLOCK: 1024,
            num_warps: 4,
            ..Default::default()
        },
    )?
    .launch(
        &stream,
        rows as u32,
        (&x, &mut out, rows as i32, cols as i32, cols as i32),
    )?;
    let y = out.to_host(&stream)?;

    let want = reference(&host_x, rows, cols, cols);
    let err = y
        .iter()
        .zip(&want)
        .map(|(a, b)| (*a as f64 - b).abs() / b.abs())
        .fold(0.0, f64::max);
    println!(
        "softmax {rows}×{cols} on {}: max relative error {err:.2e}",
        device.info().name
    );
    if err.is_nan() || err > 1e-5 {
        return Err(format!("softmax mismatch: {err}").into());
    }
    Ok(())
}
