//! Conventional decode kernels on the interpreter: `mamba2_decode` (fp32 state) against the
//! float64 recurrence over several steps; `mamba2_decode_f16` with round-to-nearest and with
//! stochastic rounding (every result one of the two f16 neighbours of the exact update,
//! unbiased over many steps, the documented hash of seed, step and element index). Each on
//! whole heads per program and on programs straddling heads (flat row tiling); a `BV` that
//! does not divide a group's state rows is refused.

mod ssm_util;

use half::{bf16, f16};
use replay_dsl::host::stochastic_round;
use replay_dsl::Elem;
use replay_kernels::ssm::kernels::decode::{mamba2_decode, mamba2_decode_f16};
use replay_kernels::ssm::kernels::sr_bits_host;
use replay_kernels::ssm::reference::{recurrent_step, softplus, Mamba2Params, SlotStates, StepInput};
use replay_kernels::ssm::shapes::{ModelShape, CPU_TEST};
use replay_runtime::prelude::*;
use replay_runtime::ArgValue;
use ssm_util::*;

const SHAPE: ModelShape = CPU_TEST;

/// On `CPU_TEST` (whole heads per program) and on `STRADDLE` (programs straddling heads).
#[test]
fn fp32_decode_follows_the_recurrence() {
    fp32_case(SHAPE, 4, 4, 31);
    fp32_case(STRADDLE, 4, 4, 32);
    // The latency-bound batches' warp counts.
    fp32_case(SHAPE, 4, 1, 33);
    fp32_case(STRADDLE, 4, 2, 34);
}

fn fp32_case(shape: ModelShape, bv: usize, num_warps: u32, seed: u64) {
    let mut rng = Rng(seed);
    let (dev, s) = device();
    let batch = 4usize;
    let n_slots = 5;
    let slots = [3usize, 0, 1, 4];
    let live: Vec<bool> = slots.iter().map(|&x| x != 0).collect();
    let params = random_params(&mut rng, shape);
    let mut truth = random_states(&mut rng, shape, n_slots);
    let nst = shape.heads * shape.state_elems();
    let mut init: Vec<f32> = (0..n_slots)
        .flat_map(|sl| truth.slot(sl).iter().map(|&v| v as f32))
        .collect();
    init[..nst].fill(f32::NAN);
    let state = buf(&s, &init);
    let par = param_bufs(&s, &params);
    let slot_idx = buf(&s, &slots.iter().map(|&x| x as i32).collect::<Vec<_>>());
    let per_row = shape.heads * shape.dv;
    for (step, gated) in [true, false, true, false, true, true].into_iter().enumerate() {
        let config = DecodeConfig {
            shape,
            gated,
            bv,
            num_warps,
        };
        let k = config.decode(&dev);
        let inputs: Vec<StepInput> = (0..batch).map(|_| random_input(&mut rng, shape, gated)).collect();
        let tokens = input_bufs(&s, &pack(shape, &live_tokens(&inputs, &live)));
        let out = poisoned_out(&s, batch * per_row);
        let mut args = token_args(&tokens, &par, &slot_idx);
        args.extend([
            arg(&state),
            arg(&out),
            ArgValue::I32(batch as i32),
            ArgValue::I32(n_slots as i32),
        ]);
        launch(&k, &s, config.grid(batch), &args);
        let mut want = vec![0.0; batch * per_row];
        recurrent_step(&params, &mut truth, &slots, &inputs, &mut want);
        check_outputs(&format!("step {step} y"), &host(&s, &out), &want, &live, per_row);
        let got = host(&s, &state);
        assert!(got[..nst].iter().all(|v| v.is_nan()), "padding slot touched");
        for &sl in slots.iter().filter(|&&x| x != 0) {
            check_state(
                &format!("step {step} state slot {sl}"),
                &slot_f64(&got, sl, nst),
                truth.slot(sl),
            );
        }
        // Slot 2 is in no row: untouched.
        assert_eq!(slot_f64(&got, 2, nst), truth.slot(2));
    }
}

/// The f16-state kernel (`BV = bv`) on `shape` with one row (slot 1) and padding row 0.
struct F16Setup {
    shape: ModelShape,
    bv: usize,
    dev: Device,
    s: Stream,
    params: Mamba2Params,
    bufs: [DeviceBuffer<f32>; 3],
    slot_idx: DeviceBuffer<i32>,
    state: DeviceBuffer<f16>,
}

fn f16_setup(rng: &mut Rng, shape: ModelShape, bv: usize) -> F16Setup {
    let (dev, s) = device();
    let params = random_params(rng, shape);
    let nst = shape.heads * shape.state_elems();
    let mut init = vec![f16::NAN; nst];
    init.extend((0..nst).map(|_| f16::from_f64(rng.normal())));
    let bufs = param_bufs(&s, &params);
    let slot_idx = buf(&s, &[0i32, 1]);
    let state = buf(&s, &init);
    F16Setup {
        shape,
        bv,
        dev,
        s,
        params,
        bufs,
        slot_idx,
        state,
    }
}

/// Launches the f16 kernel for rows (padding, `input`) and returns the bf16 outputs of row 1.
fn f16_launch(st: &F16Setup, sr: bool, input: &StepInput, seed: u32, step: u32) -> Vec<bf16> {
    let shape = st.shape;
    let k = mamba2_decode_f16::Kernel::compile(
        &st.dev,
        mamba2_decode_f16::Config {
            HEADS: shape.heads,
            GROUPS: shape.groups,
            DK: shape.dk,
            DV: shape.dv,
            HAS_Z: input.z.is_some(),
            SR: sr,
            BV: st.bv,
            num_warps: 4,
            min_blocks: 1,
        },
    )
    .unwrap();
    let tokens = input_bufs(&st.s, &pack(shape, &[None, Some(input)]));
    let per_row = shape.heads * shape.dv;
    let out = poisoned_out(&st.s, 2 * per_row);
    let mut args = token_args(&tokens, &st.bufs, &st.slot_idx);
    args.extend([
        arg(&st.state),
        arg(&out),
        ArgValue::I32(2),
        ArgValue::I32(2),
        ArgValue::U32(seed),
        ArgValue::U32(step),
    ]);
    launch(&k, &st.s, flat_grid(shape, st.bv, 2), &args);
    let o = host(&st.s, &out);
    assert!(o[..per_row].iter().all(|v| v.is_nan()), "padding row written");
    o[per_row..].to_vec()
}

/// The exact (f64) update of slot 1 from the f16 state `prev`, a bound on the f32 rounding
/// error of the kernel's update (`2^-22 (|α s| + |v k|)`, cancellation included), and the
/// outputs.
fn exact_update(
    shape: ModelShape,
    params: &Mamba2Params,
    prev: &[f16],
    input: &StepInput,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let nst = shape.heads * shape.state_elems();
    let mut states = SlotStates::zeros(shape, 2);
    states
        .slot_mut(1)
        .iter_mut()
        .zip(&prev[nst..])
        .for_each(|(d, s)| *d = s.to_f64());
    let mut out = vec![0.0; 2 * shape.heads * shape.dv];
    recurrent_step(params, &mut states, &[0, 1], &[input.clone(), input.clone()], &mut out);
    let mut err = vec![0.0; nst];
    for hd in 0..shape.heads {
        let dtp = softplus(input.dt[hd] + params.dt_bias[hd]);
        let alpha = (dtp * params.a[hd]).exp();
        for i in 0..shape.dv {
            for c in 0..shape.dk {
                let e = (hd * shape.dv + i) * shape.dk + c;
                let vk = dtp * input.x[hd * shape.dv + i] * input.b[shape.group_of(hd) * shape.dk + c];
                err[e] = 2f64.powi(-22) * ((alpha * prev[nst + e].to_f64()).abs() + vk.abs());
            }
        }
    }
    (states.slot(1).to_vec(), err, out[shape.heads * shape.dv..].to_vec())
}

/// The kernel's f32 update lies within `err` of the exact one: SR must give an f16 value
/// between the lower neighbour of `x − err` and the upper neighbour of `x + err` (the two
/// neighbours of `x` when `x` is not near an f16 value); RTN the nearest f16 of a point of
/// `[x − err, x + err]`.
fn check_f16_step(what: &str, got: &[f16], exact: &[f64], err: &[f64], sr: bool) {
    let nst = exact.len();
    assert!(got[..nst].iter().all(|v| v.is_nan()), "{what}: padding slot touched");
    for (e, (g, &x)) in got[nst..].iter().zip(exact).enumerate() {
        let g = g.to_f64();
        let (lo, hi) = (f16_neighbours(x - err[e]).0, f16_neighbours(x + err[e]).1);
        if sr {
            assert!(
                lo <= g && g <= hi,
                "{what}[{e}]: SR gave {g}, not in [{lo}, {hi}] around {x}"
            );
        } else {
            let (a, b) = (f16::from_f64(x - err[e]).to_f64(), f16::from_f64(x + err[e]).to_f64());
            assert!(a <= g && g <= b, "{what}[{e}]: RTN gave {g} for {x} (±{:e})", err[e]);
        }
    }
}

/// The f16 kernel's shapes and tiles: `CPU_TEST` with one value head per program and
/// `STRADDLE` with programs straddling heads.
const F16_CASES: [(ModelShape, usize); 2] = [(SHAPE, 8), (STRADDLE, 4)];

#[test]
fn fp16_state_round_to_nearest_and_stochastic_over_steps() {
    let mut rng = Rng(41);
    for (shape, bv) in F16_CASES {
        for sr in [false, true] {
            fp16_steps(&mut rng, shape, bv, sr);
        }
    }
}

fn fp16_steps(rng: &mut Rng, shape: ModelShape, bv: usize, sr: bool) {
    let st = f16_setup(rng, shape, bv);
    for step in 0..4u32 {
        let input = random_input(rng, shape, step % 2 == 0);
        let prev = host(&st.s, &st.state);
        let (exact, err, want) = exact_update(shape, &st.params, &prev, &input);
        let y = f16_launch(&st, sr, &input, 1234, step);
        let what = format!("{} sr={sr} step {step}", shape.name);
        let yg: Vec<f64> = y.iter().map(|v| v.to_f64()).collect();
        check_close(&format!("{what} y"), &yg, &want, OUT_RTOL, OUT_ATOL_REL * rms(&want));
        check_f16_step(&what, &host(&st.s, &st.state), &exact, &err, sr);
    }
}

#[test]
fn stochastic_rounding_is_unbiased_and_uses_the_documented_hash() {
    let mut rng = Rng(51);
    for (shape, bv) in F16_CASES {
        stochastic_rounding_case(&mut rng, shape, bv);
    }
}

fn stochastic_rounding_case(rng: &mut Rng, shape: ModelShape, bv: usize) {
    let mut st = f16_setup(rng, shape, bv);
    let input = random_input(rng, shape, false);
    let init = host(&st.s, &st.state);
    let nst = shape.heads * shape.state_elems();
    let (exact, err, _) = exact_update(shape, &st.params, &init, &input);
    let runs = 256u32;
    let seed = 0xdead_beefu32;
    let mut ups = vec![0u32; nst];
    let mut mirror_hits = 0usize;
    let mut first = Vec::new();
    for step in 0..runs {
        st.state.copy_from_host(&st.s, &init).unwrap();
        f16_launch(&st, true, &input, seed, step);
        let got = host(&st.s, &st.state);
        check_f16_step(&format!("run {step}"), &got, &exact, &err, true);
        if step == 0 {
            first = got.clone();
        }
        for e in 0..nst {
            let g = got[nst + e].to_f64();
            let (lo, hi) = f16_neighbours(exact[e]);
            ups[e] += (g.abs() > lo.abs().min(hi.abs())) as u32;
            // The documented bits reproduce the kernel's choice (x rounded to f32 on the host
            // may differ from the kernel's f32 value by an ulp, which flips a choice with
            // probability ~2^-13).
            let bits = sr_bits_host(seed, step, (nst + e) as u64);
            if stochastic_round(exact[e] as f32, bits, Elem::F16) == g {
                mirror_hits += 1;
            }
        }
    }
    assert!(
        mirror_hits as f64 >= 0.995 * (runs as usize * nst) as f64,
        "hash mirror matched only {mirror_hits} of {}",
        runs as usize * nst
    );
    // Same seed and step: identical bits; another seed: different choices somewhere.
    st.state.copy_from_host(&st.s, &init).unwrap();
    f16_launch(&st, true, &input, seed, 0);
    assert_eq!(
        host(&st.s, &st.state).iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        first.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    st.state.copy_from_host(&st.s, &init).unwrap();
    f16_launch(&st, true, &input, seed ^ 1, 0);
    assert_ne!(
        host(&st.s, &st.state).iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        first.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    // Unbiasedness: P(round away from zero) = (|x| - |lo|) / ulp per element.
    let (mut dev_sum, mut var_sum, mut random_elems) = (0.0, 0.0, 0);
    for e in 0..nst {
        let x = exact[e];
        let (lo, hi) = f16_neighbours(x);
        if lo == hi {
            continue;
        }
        let (alo, ahi) = (lo.abs().min(hi.abs()), lo.abs().max(hi.abs()));
        let p = (x.abs() - alo) / (ahi - alo);
        let n = runs as f64;
        let var = n * p * (1.0 - p);
        let dev = ups[e] as f64 - n * p;
        assert!(
            dev.abs() <= 6.0 * var.sqrt() + 1.0,
            "element {e}: {} ups of {runs}, p = {p}",
            ups[e]
        );
        dev_sum += dev;
        var_sum += var;
        random_elems += (ups[e] > 0 && ups[e] < runs) as usize;
    }
    let z = dev_sum / var_sum.sqrt();
    assert!(z.abs() < 5.0, "biased stochastic rounding: z = {z}");
    assert!(random_elems > nst / 2, "only {random_elems} elements rounded both ways");
}

#[test]
fn a_block_that_does_not_divide_the_rows_of_a_group_is_refused() {
    let (dev, _s) = device();
    // CPU_TEST has 3 heads of 8 rows per group: BV = 16 would mix groups.
    let Err(err) = mamba2_decode::Kernel::compile(
        &dev,
        mamba2_decode::Config {
            HEADS: SHAPE.heads,
            GROUPS: SHAPE.groups,
            DK: SHAPE.dk,
            DV: SHAPE.dv,
            HAS_Z: true,
            BV: 16,
            num_warps: 4,
            min_blocks: 1,
        },
    ) else {
        panic!("BV = 16 compiled");
    };
    assert!(err.to_string().contains("BV must divide"), "{err}");
}
