//! GPU timings of the SSM decode kernels at a benchmark model's shapes (ignored: needs a GPU;
//! `cargo test --release -p replay-kernels --test ssm_gpu -- --ignored --nocapture`).
//! A smoke measurement for choosing configurations, not the benchmark: buffers hold zeros,
//! every row is live, and the counters are fixed (all rows non-flush at `h = L/2`, or all
//! flushing at `h = L − 1`).

mod ssm_util;

use half::bf16;
use replay_kernels::ssm::shapes::{ModelShape, NEMOTRON3_SUPER_120B};
use replay_runtime::prelude::*;
use replay_runtime::ArgValue;
use ssm_util::*;

fn time_ms(s: &Stream, iters: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    s.synchronize().unwrap();
    let (e0, e1) = (s.device().new_event().unwrap(), s.device().new_event().unwrap());
    e0.record(s).unwrap();
    for _ in 0..iters {
        f();
    }
    e1.record(s).unwrap();
    e1.synchronize().unwrap();
    e0.elapsed_ms(&e1).unwrap() as f64 / iters as f64
}

fn zeros<T: replay_runtime::HostElem>(s: &Stream, n: usize) -> DeviceBuffer<T> {
    DeviceBuffer::zeros(s, n).unwrap()
}

#[test]
#[ignore]
fn timings() {
    let Ok(dev) = Device::cuda(0) else {
        eprintln!("no GPU: skipped");
        return;
    };
    let s = dev.new_stream().unwrap();
    let shape: ModelShape = NEMOTRON3_SUPER_120B;
    let (h, g, dk, dv) = (shape.heads, shape.groups, shape.dk, shape.dv);
    let (l, tmax) = (16usize, 8usize);
    let cap = l + tmax;
    let state_bytes = (h * dv * dk * 4) as f64;
    for batch in [1usize, 64, 256] {
        let slots = batch + 1;
        let ckpt = zeros::<f32>(&s, slots * h * dv * dk);
        let rec_dt = zeros::<f32>(&s, slots * cap * h);
        let rec_x = zeros::<bf16>(&s, slots * cap * h * dv);
        let rec_b = zeros::<bf16>(&s, slots * cap * g * dk);
        let par = [zeros::<f32>(&s, h), zeros::<f32>(&s, h), zeros::<f32>(&s, h)];
        let slot_idx = buf(&s, &(1..=batch as i32).collect::<Vec<_>>());
        let ntok = batch * tmax;
        let tokens = [
            zeros::<bf16>(&s, ntok * h),
            zeros::<bf16>(&s, ntok * h * dv),
            zeros::<bf16>(&s, ntok * g * dk),
            zeros::<bf16>(&s, ntok * g * dk),
            zeros::<bf16>(&s, ntok * h * dv),
        ];
        let out = zeros::<bf16>(&s, ntok * h * dv);
        let meta_for = |hh: usize, flag: bool| {
            let mut m = vec![0i32; slots * 4];
            for sl in 1..slots {
                m[sl * 4 + 1] = hh as i32;
                m[sl * 4 + 2] = flag as i32;
            }
            buf(&s, &m)
        };
        let replay_config = |bv, hb, num_warps| ReplayConfig::new(shape, l, tmax, true, bv, hb, num_warps);
        let bw = |ms: f64| state_bytes * batch as f64 * 2.0 / (ms * 1e-3) / 1e12;
        // Conventional decode.
        let mut best_conv = f64::MAX;
        for (bv, nw) in [(16, 4), (32, 4), (32, 8), (64, 8)] {
            let config = DecodeConfig {
                shape,
                gated: true,
                bv,
                num_warps: nw,
            };
            let k = config.decode(&dev);
            let mut args = token_args(&tokens, &par, &slot_idx);
            args.extend([
                arg(&ckpt),
                arg(&out),
                ArgValue::I32(batch as i32),
                ArgValue::I32(slots as i32),
            ]);
            let ms = time_ms(&s, 20, || launch(&k, &s, config.grid(batch), &args));
            println!(
                "B={batch:<4} decode        BV={bv:<3} w{nw}: {:8.1} us  ({:.2} TB/s of state r+w)",
                ms * 1e3,
                bw(ms)
            );
            best_conv = best_conv.min(ms);
        }
        // Replay step: non-flush at h = L/2 and flush at h = L-1.
        for (label, hh, flag) in [("replay-nonflush", l / 2, false), ("replay-flush", l - 1, true)] {
            let meta = meta_for(hh, flag);
            let meta_out = meta_for(0, false);
            for (bv, nw) in [(16, 4), (32, 4), (64, 4), (64, 8), (128, 8)] {
                let config = replay_config(bv, 1, nw);
                let k = config.step(&dev);
                let mut args = token_args(&tokens, &par, &slot_idx);
                args.extend([
                    arg(&meta),
                    arg(&meta_out),
                    arg(&ckpt),
                    arg(&rec_dt),
                    arg(&rec_x),
                    arg(&rec_b),
                ]);
                args.extend([
                    arg(&out),
                    ArgValue::I32(batch as i32),
                    ArgValue::I32(slots as i32),
                    ArgValue::I32(0),
                ]);
                let ms = time_ms(&s, 20, || launch(&k, &s, config.step_grid(batch), &args));
                println!(
                    "B={batch:<4} {label:<15} BV={bv:<3} w{nw}: {:8.1} us  ({:.2}x conventional)",
                    ms * 1e3,
                    best_conv / ms
                );
            }
        }
        // Speculative: verify vs snapshot baseline, T = 4 and 8.
        for t in [4usize, 8] {
            let meta = meta_for(l / 2 - t / 2, false);
            let acc = buf(&s, &vec![t as i32; batch]);
            let commit = commit_kernel(&dev, l, tmax, 128, 4);
            let cmeta = meta_for(l / 2 - t / 2, false);
            let cargs = commit_args(&slot_idx, &acc, &cmeta, (batch, slots), true, t);
            let cms = time_ms(&s, 20, || {
                launch(&commit, &s, (batch.div_ceil(128) as u32, 1, 1), &cargs)
            });
            println!("B={batch:<4} commit: {:8.1} us", cms * 1e3);
            for (bv, hb, nw) in [(16, 4, 4), (32, 4, 4), (32, 16, 8), (64, 16, 8)] {
                let config = replay_config(bv, hb, nw);
                let k = config.verify(&dev);
                let mut args = token_args(&tokens, &par, &slot_idx);
                args.extend([arg(&meta), arg(&ckpt), arg(&rec_dt), arg(&rec_x), arg(&rec_b)]);
                args.extend([
                    arg(&out),
                    ArgValue::I32(batch as i32),
                    ArgValue::I32(slots as i32),
                    ArgValue::I32(t as i32),
                ]);
                let ms = time_ms(&s, 20, || launch(&k, &s, config.grid(batch), &args));
                println!("B={batch:<4} verify T={t}     BV={bv:<3} HB={hb:<2} w{nw}: {:8.1} us  ({:.2}x one conventional step)", ms * 1e3, ms / best_conv);
            }
            {
                let snap_state = zeros::<f32>(&s, (batch * t + slots) * h * dv * dk);
                let snaps = buf(&s, &(0..batch * t).map(|i| (slots + i) as i32).collect::<Vec<_>>());
                for (bv, nw) in [(32, 4), (64, 8)] {
                    let config = DecodeConfig {
                        shape,
                        gated: true,
                        bv,
                        num_warps: nw,
                    };
                    let k = config.spec_baseline(&dev);
                    let mut args = token_args(&tokens, &par, &slot_idx);
                    args.extend([
                        arg(&snaps),
                        arg(&snap_state),
                        arg(&out),
                        ArgValue::I32(batch as i32),
                        ArgValue::I32((batch * t + slots) as i32),
                        ArgValue::I32(t as i32),
                    ]);
                    let ms = time_ms(&s, 10, || launch(&k, &s, config.grid(batch), &args));
                    println!(
                        "B={batch:<4} baseline T={t}   BV={bv:<3} w{nw}: {:8.1} us  ({:.2}x one conventional step)",
                        ms * 1e3,
                        ms / best_conv
                    );
                }
            }
        }
    }
}
