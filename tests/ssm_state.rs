//! The decode state managers (`replay::ssm::state`) on the interpreter at the reduced
//! `CPU_TEST` shape against the float64 recurrence: decode over ≥ 3 windows with staggered
//! rows, rows joining (into recycled slots too) and leaving, padding rows and `z` on and off,
//! for the replay state and the conventional baseline through the same `DecodeLayer`
//! interface; speculative verification with random draft lengths and accepted counts against
//! the recurrence run on the accepted tokens only.

mod ssm_support;

use replay::ssm::state::{
    ConventionalPlan, DecodeLayer, Mamba2ConventionalState, Mamba2ReplayState, Next, ReplayPlan, StepIo,
};
use replay_kernels::ssm::reference::{SlotStates, StepInput};
use replay_kernels::ssm::shapes::CPU_TEST;
use replay_runtime::{Device, Stream};
use ssm_support::*;

const BATCH: usize = 4;
const SLOTS: usize = 6;

/// Steps at which rows join (`+row`) or leave (`-row`), over `3L + 4` steps: rows join at
/// steps 0, 1 and 3 (so they sit at different `h`), row 3 stays padding until `L + 2`, row 2
/// leaves at `2L + 1` and a new sequence takes its row (and the freed slot) at `2L + 3`.
fn events(l: usize, t: usize) -> Vec<(bool, usize)> {
    let mut e = Vec::new();
    for (row, at) in [(0, 0), (1, 1), (2, 3), (3, l + 2), (2, 2 * l + 3)] {
        if t == at {
            e.push((true, row));
        }
    }
    if t == 2 * l + 1 {
        e.push((false, 2));
    }
    e
}

/// Admits a sequence with a random initial state into `row` (ready for `next`) and puts the
/// same state into `truth`'s slot; returns the slot.
fn admit(
    layer: &mut dyn DecodeLayer,
    s: &Stream,
    truth: &mut SlotStates,
    rng: &mut Rng,
    row: usize,
    next: Next,
) -> usize {
    let init = initial_state(rng, truth.shape());
    let slot = layer.admit(s, row, Some(&init), next).unwrap();
    truth
        .slot_mut(slot)
        .iter_mut()
        .zip(&init)
        .for_each(|(t, &v)| *t = v as f64);
    slot
}

fn decode(layer: &mut dyn DecodeLayer, s: &Stream, l: usize, gated: bool, seed: u64) {
    let shape = CPU_TEST;
    let mut rng = Rng(seed);
    let p = random_params(&mut rng, shape);
    let mut truth = SlotStates::zeros(shape, SLOTS);
    let mut io = StepIo::new(s, shape, BATCH, 1, gated).unwrap();
    let per_row = shape.heads * shape.dv;
    let mut used_slots = Vec::new();
    for t in 0..3 * l + 4 {
        for (join, row) in events(l, t) {
            if join {
                used_slots.push(admit(layer, s, &mut truth, &mut rng, row, Next::Decode));
            } else {
                layer.release(s, row).unwrap();
            }
        }
        let slots: Vec<usize> = layer.slots().iter().map(|&x| x as usize).collect();
        let inputs: Vec<Option<Vec<StepInput>>> = slots
            .iter()
            .map(|&sl| (sl != 0).then(|| vec![random_input(&mut rng, shape, gated)]))
            .collect();
        let rows: Vec<Option<&[StepInput]>> = inputs.iter().map(|r| r.as_deref()).collect();
        io.upload(s, &rows).unwrap();
        io.out.poison(s).unwrap();
        layer.step(s, &io).unwrap();
        let got = io.outputs(s, 1).unwrap();
        let what = format!("{} L={l} z={gated} step {t}", layer.method());
        for (r, &sl) in slots.iter().enumerate() {
            let g = &got[r * per_row..(r + 1) * per_row];
            if sl == 0 {
                assert!(g.iter().all(|v| v.is_nan()), "{what}: padding row {r} written");
                continue;
            }
            let want = recur(&p, &mut truth, sl, &inputs[r].as_ref().unwrap()[0]);
            close(&format!("{what} y row {r}"), g, &want, OUT.0, OUT.1);
            let st = layer.logical_state(s, &p, sl).unwrap();
            close(
                &format!("{what} state slot {sl}"),
                &st,
                truth.slot(sl),
                STATE.0,
                STATE.1,
            );
        }
    }
    // The freed slot of row 2 was reused, with a fresh initial state.
    assert_eq!(used_slots.len(), 5);
    assert!(used_slots[..4].contains(&used_slots[4]), "{used_slots:?}");
}

fn interp() -> (Device, Stream) {
    let d = Device::interpreter();
    let s = d.new_stream().unwrap();
    (d, s)
}

fn replay_decode(l: usize, gated: bool, seed: u64) {
    let (_d, s) = interp();
    let p = random_params(&mut Rng(seed), CPU_TEST);
    let plan = ReplayPlan::default_for(&CPU_TEST, l, 0);
    let mut st = Mamba2ReplayState::new(&s, CPU_TEST, &p, BATCH, SLOTS, gated, plan).unwrap();
    decode(&mut st, &s, l, gated, seed);
    // Counters of the padding slot are never touched.
    assert_eq!(st.counters(&s).unwrap()[0], (0, 0, false));
}

#[test]
fn replay_decode_window_4_gated() {
    replay_decode(4, true, 11);
}

#[test]
fn replay_decode_window_3_ungated() {
    replay_decode(3, false, 12);
}

#[test]
fn replay_decode_window_1_is_conventional() {
    replay_decode(1, true, 13);
}

#[test]
fn conventional_decode_same_interface() {
    let (_d, s) = interp();
    let p = random_params(&mut Rng(14), CPU_TEST);
    let plan = ConventionalPlan::default_for(&CPU_TEST, 0);
    let mut st = Mamba2ConventionalState::new(&s, CPU_TEST, &p, BATCH, SLOTS, true, plan).unwrap();
    decode(&mut st, &s, 4, true, 14);
}

/// Random mixes of decode steps and verifications of random draft counts with random
/// accepted counts per row; every output equals the recurrence on the accepted history.
fn speculative(l: usize, t_max: usize, gated: bool, iters: usize, seed: u64) {
    let (_d, s) = interp();
    let shape = CPU_TEST;
    let mut rng = Rng(seed);
    let p = random_params(&mut rng, shape);
    let plan = ReplayPlan::default_for(&shape, l, t_max);
    let batch = 3;
    let mut st = Mamba2ReplayState::new(&s, shape, &p, batch, 5, gated, plan).unwrap();
    let mut truth = SlotStates::zeros(shape, 5);
    let mut io = StepIo::new(&s, shape, batch, t_max, gated).unwrap();
    let per_tok = shape.heads * shape.dv;
    // Kind of each iteration: 0 = decode step, n > 0 = verify n drafts.
    let mut kinds: Vec<usize> = (0..=iters)
        .map(|_| if rng.uniform() < 0.3 { 0 } else { rng.int(1, t_max) })
        .collect();
    kinds[0] = t_max;
    let next_of = |k: usize| if k == 0 { Next::Decode } else { Next::Verify(k) };
    // Rows 0 and 1 start now; row 2 is padding until iteration 3.
    for row in 0..2 {
        admit(&mut st, &s, &mut truth, &mut rng, row, next_of(kinds[0]));
    }
    let (mut verified, mut flushes) = (0, 0);
    for it in 0..iters {
        if it == 3 {
            admit(&mut st, &s, &mut truth, &mut rng, 2, next_of(kinds[it]));
        }
        let slots: Vec<usize> = st.slots().iter().map(|&x| x as usize).collect();
        let n = kinds[it].max(1);
        let inputs: Vec<Option<Vec<StepInput>>> = slots
            .iter()
            .map(|&sl| (sl != 0).then(|| (0..n).map(|_| random_input(&mut rng, shape, gated)).collect()))
            .collect();
        let rows: Vec<Option<&[StepInput]>> = inputs.iter().map(|r| r.as_deref()).collect();
        io.upload(&s, &rows).unwrap();
        io.out.poison(&s).unwrap();
        let counters = st.counters(&s).unwrap();
        let what = format!("L={l} T={t_max} iter {it} kind {}", kinds[it]);
        if kinds[it] == 0 {
            st.step_then(&s, &io, next_of(kinds[it + 1])).unwrap();
        } else {
            st.verify(&s, &io, n).unwrap();
        }
        let got = io.outputs(&s, n).unwrap();
        let mut accepted = vec![0i32; batch];
        for (r, &sl) in slots.iter().enumerate() {
            if sl == 0 {
                continue;
            }
            flushes += counters[sl].2 as usize;
            // Outputs of every draft: the recurrence from the committed state.
            let mut scratch = truth.clone();
            let toks = inputs[r].as_ref().unwrap();
            for (k, tok) in toks.iter().enumerate() {
                let want = recur(&p, &mut scratch, sl, tok);
                let g = &got[(r * n + k) * per_tok..(r * n + k + 1) * per_tok];
                close(&format!("{what} y row {r} draft {k}"), g, &want, OUT.0, OUT.1);
            }
            let a = if kinds[it] == 0 { 1 } else { rng.int(0, n) };
            accepted[r] = a as i32;
            for tok in &toks[..a] {
                recur(&p, &mut truth, sl, tok);
            }
        }
        if kinds[it] > 0 {
            verified += 1;
            st.accepted.copy_from_host(&s, &accepted).unwrap();
            st.commit(&s, next_of(kinds[it + 1])).unwrap();
        }
        let after = st.counters(&s).unwrap();
        for &sl in slots.iter().filter(|&&x| x != 0) {
            let (_, h, flag) = after[sl];
            let next = kinds[it + 1];
            let want_flag = if next == 0 { h + 1 >= l } else { h + next > l };
            assert_eq!(flag, want_flag, "{what}: flag of slot {sl} (h {h})");
            let got = st.logical_state(&s, &p, sl).unwrap();
            close(
                &format!("{what} state slot {sl}"),
                &got,
                truth.slot(sl),
                STATE.0,
                STATE.1,
            );
        }
    }
    assert!(verified >= iters / 2, "{verified} verifications");
    assert!(flushes >= 3, "only {flushes} flushes");
}

#[test]
fn speculative_random_drafts_and_acceptance() {
    speculative(6, 4, true, 18, 21);
}

#[test]
fn speculative_ungated_t_equals_l() {
    speculative(3, 3, false, 12, 22);
}

#[test]
fn replay_decode_window_16_gated() {
    replay_decode(16, true, 15);
}

#[test]
fn replay_decode_window_32_ungated() {
    replay_decode(32, false, 16);
}
