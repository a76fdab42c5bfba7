//! The decode state managers (`replay::ssm::state`) on the interpreter (or, with
//! `REPLAY_SSM_DEVICE=emulator`, the decode and verification tests on the PTX emulator) at the reduced
//! `CPU_TEST` shape against the float64 recurrence: decode over ≥ 3 windows with staggered
//! rows, rows joining (into recycled slots too) and leaving, padding rows and `z` on and off,
//! for the replay state and the conventional baseline through the same `DecodeLayer`
//! interface; speculative verification with random draft lengths and accepted counts (mixed
//! with decode steps, rows joining and leaving) against the recurrence run on the accepted
//! tokens only. For the replay state, after every launch: the counters of every live slot
//! against a host model of the rule (`h`, ring start, flag), the counter-buffer parity (a
//! decode step — one launch — flips it, a verification and its commit do not), the buffer a
//! step writes poisoned before the step and every live slot found written (idle slots not),
//! and the padding slot's counters in both buffers never written. Graph captures of an odd
//! number of steps are refused, the replay tuning problems run on the interpreter, and the
//! tuned plans choose each window jointly with tiles from the kernel-level shortlist. On a GPU
//! or the emulator the decode and speculative checks also run at both benchmark models'
//! shapes.

mod ssm_support;

use replay::ssm::state::{
    ConventionalPlan, DecodeLayer, Mamba2ConventionalState, Mamba2ReplayState, Next, ReplayPlan, StepIo, Tiles,
};
use replay_kernels::ssm::kernels::{initial_flush_flag, META_WORDS};
use replay_kernels::ssm::reference::{SlotStates, StepInput};
use replay_kernels::ssm::shapes::{ModelShape, CPU_TEST, NEMOTRON3_NANO_4B, NEMOTRON3_SUPER_120B};
use replay_kernels::testing::f16_checkpoint_bound;
use replay_runtime::{Device, RuntimeError, Stream};
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

/// Decode over `3L + 4` steps with the join/leave [`events`]; `around_step(layer, before)` is
/// called right before each step (`before = true`) and right after it.
#[allow(clippy::too_many_arguments)]
fn decode<L: DecodeLayer>(
    layer: &mut L,
    s: &Stream,
    shape: ModelShape,
    l: usize,
    gated: bool,
    seed: u64,
    mut around_step: impl FnMut(&L, bool),
) {
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
        around_step(layer, true);
        layer.step(s, &io).unwrap();
        around_step(layer, false);
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

/// The device of the decode and verification tests: the interpreter, GPU 0 with
/// `REPLAY_SSM_DEVICE=cuda`, or the PTX emulator with `REPLAY_SSM_DEVICE=emulator` (the same
/// checks on the backend's sm_90a PTX).
fn device() -> (Device, Stream) {
    let d = match std::env::var("REPLAY_SSM_DEVICE").as_deref() {
        Ok("cuda") => Device::cuda(0).expect("REPLAY_SSM_DEVICE=cuda but no GPU"),
        Ok("emulator") => Device::emulator(),
        Ok("") | Ok("interpreter") | Err(_) => Device::interpreter(),
        Ok(other) => panic!("REPLAY_SSM_DEVICE={other}: expected cuda, emulator or interpreter"),
    };
    let s = d.new_stream().unwrap();
    (d, s)
}

/// Host bookkeeping of the replay counters and checks of the manager's two counter buffers.
struct CounterModel {
    window: usize,
    cap: usize,
    /// `(start, h)` of every slot, as the rule says they must be.
    want: Vec<(usize, usize)>,
    /// The parity the manager must be at.
    parity: usize,
    /// Counters before the launch being checked (the buffer the launch reads).
    read_before: Vec<i32>,
}

/// What a counter word that a step must write holds before the step.
const POISON: i32 = -555;
/// What the padding slot's counters hold in both buffers, from the start.
const SLOT0: i32 = -777;

fn words(s: &Stream, b: &replay_runtime::DeviceBuffer<i32>) -> Vec<i32> {
    b.to_host(s).unwrap()
}

fn write_words(s: &Stream, b: &replay_runtime::DeviceBuffer<i32>, w: &[i32]) {
    let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
    b.raw().write_bytes(s, &bytes).unwrap();
}

impl CounterModel {
    /// Poisons the padding slot's counters in both buffers (they must never change).
    fn new(st: &Mamba2ReplayState, s: &Stream, slots: usize) -> CounterModel {
        for b in st.meta_buffers() {
            let mut w = words(s, b);
            w[..META_WORDS].fill(SLOT0);
            write_words(s, b, &w);
        }
        CounterModel {
            window: st.plan().window,
            cap: st.plan().window + st.plan().max_drafts,
            want: vec![(0, 0); slots],
            parity: st.parity(),
            read_before: Vec::new(),
        }
    }

    fn admitted(&mut self, slot: usize) {
        self.want[slot] = (0, 0);
    }

    /// Before a launch: remembers the current buffer; before a decode step, also poisons every
    /// slot but the padding slot in the buffer the step writes.
    fn before(&mut self, st: &Mamba2ReplayState, s: &Stream, decode: bool) {
        assert_eq!(st.parity(), self.parity, "parity");
        self.read_before = words(s, st.meta());
        if decode {
            let next = st.meta_buffers()[1 - st.parity()];
            let mut w = vec![POISON; next.len()];
            w[..META_WORDS].fill(SLOT0);
            write_words(s, next, &w);
        }
    }

    /// After a decode step (`accepted == None`) or a verification's commit: the parity, the
    /// counters of the `live` slots against the rule (flags for `next` drafts), the buffers.
    fn after(
        &mut self,
        st: &Mamba2ReplayState,
        s: &Stream,
        live: &[usize],
        accepted: Option<&[usize]>,
        next: usize,
        what: &str,
    ) {
        let (l, cap) = (self.window, self.cap);
        let got = st.counters(s).unwrap();
        for (i, &sl) in live.iter().enumerate() {
            let w = &self.read_before[sl * META_WORDS..(sl + 1) * META_WORDS];
            let flushed = w[2] != 0;
            let (start, h) = self.want[sl];
            assert_eq!(
                (w[0] as usize, w[1] as usize),
                (start, h),
                "{what}: counters read, slot {sl}"
            );
            self.want[sl] = match accepted {
                None => (start, if flushed { 0 } else { h + 1 }),
                Some(a) if flushed => ((start + h) % cap, a[i]),
                Some(a) => (start, h + a[i]),
            };
            let (start, h) = self.want[sl];
            assert_eq!(
                got[sl],
                (start, h, initial_flush_flag(h, next, l)),
                "{what}: counters of slot {sl} (read {w:?})"
            );
            assert!(h <= l, "{what}: h = {h} > L");
        }
        let [b0, b1] = st.meta_buffers();
        let (m0, m1) = (words(s, b0), words(s, b1));
        assert_eq!(
            m0[..META_WORDS],
            [SLOT0; META_WORDS],
            "{what}: padding counters written (buffer 0)"
        );
        assert_eq!(
            m1[..META_WORDS],
            [SLOT0; META_WORDS],
            "{what}: padding counters written (buffer 1)"
        );
        if accepted.is_none() {
            // A decode step: one launch wrote the other buffer, which is now current; the
            // buffer it read is unchanged; every live slot written, no idle slot.
            self.parity = 1 - self.parity;
            assert_eq!(st.parity(), self.parity, "{what}: a decode step flips the parity");
            let read = if self.parity == 0 { &m1 } else { &m0 };
            let written = if self.parity == 0 { &m0 } else { &m1 };
            assert_eq!(read, &self.read_before, "{what}: the step wrote the counters it read");
            for sl in 1..written.len() / META_WORDS {
                let w = &written[sl * META_WORDS..(sl + 1) * META_WORDS];
                if live.contains(&sl) {
                    assert!(!w.contains(&POISON), "{what}: slot {sl} not written: {w:?}");
                    assert_eq!(w[3], 0, "{what}: reserved word of slot {sl}");
                } else {
                    assert_eq!(w, [POISON; META_WORDS], "{what}: idle slot {sl} written");
                }
            }
        } else {
            assert_eq!(st.parity(), self.parity, "{what}: a verification keeps the parity");
        }
    }
}

fn replay_decode(shape: ModelShape, l: usize, gated: bool, seed: u64) {
    let (_d, s) = device();
    let p = random_params(&mut Rng(seed), shape);
    let plan = ReplayPlan::default_for(&shape, BATCH, l, 0);
    let mut st = Mamba2ReplayState::new(&s, shape, &p, BATCH, SLOTS, gated, plan).unwrap();
    let mut model = CounterModel::new(&st, &s, SLOTS);
    let (mut step, mut live_before) = (0, Vec::new());
    decode(&mut st, &s, shape, l, gated, seed, |st, before| {
        let m = &mut model;
        let live: Vec<usize> = st.slots().iter().filter(|&&x| x != 0).map(|&x| x as usize).collect();
        if before {
            // Slots admitted since the last step (a released slot is never live in between).
            for &sl in live.iter().filter(|sl| !live_before.contains(*sl)) {
                m.admitted(sl);
            }
            live_before = live;
            m.before(st, &s, true);
        } else {
            m.after(st, &s, &live, None, 0, &format!("L={l} step {step}"));
            step += 1;
        }
    });
    // One launch per step: the parity flipped at every step.
    assert_eq!(st.parity(), step % 2);
    assert_eq!(step, 3 * l + 4);
}

#[test]
fn replay_decode_window_4_gated() {
    replay_decode(CPU_TEST, 4, true, 11);
}

#[test]
fn replay_decode_window_3_ungated() {
    replay_decode(CPU_TEST, 3, false, 12);
}

#[test]
fn replay_decode_window_1_is_conventional() {
    replay_decode(CPU_TEST, 1, true, 13);
}

#[test]
fn conventional_decode_same_interface() {
    let (_d, s) = device();
    let p = random_params(&mut Rng(14), CPU_TEST);
    let plan = ConventionalPlan::default_for(&CPU_TEST, 0);
    let mut st = Mamba2ConventionalState::new(&s, CPU_TEST, &p, BATCH, SLOTS, true, plan).unwrap();
    decode(&mut st, &s, CPU_TEST, 4, true, 14, |_, _| {});
}

/// Random mixes of decode steps and verifications of random draft counts with random
/// accepted counts per row; every output equals the recurrence on the accepted history, and
/// the counters follow the host model after every launch. Row 2 joins at iteration 3; row 1
/// leaves at `iters / 2` and a new sequence takes its row (and slot) two iterations later.
/// `(lp, tiers)`: two state precisions; the verification's record tiers.
fn speculative(
    shape: ModelShape,
    l: usize,
    t_max: usize,
    gated: bool,
    iters: usize,
    seed: u64,
    (lp, tiers): (bool, bool),
) {
    let (_d, s) = device();
    let mut rng = Rng(seed);
    let p = random_params(&mut rng, shape);
    // The default tiles of a large batch: several heads per program.
    let default = ReplayPlan::default_for(&shape, 256, l, t_max);
    let plan = ReplayPlan {
        lp,
        verify: Tiles {
            record_tiers: tiers,
            ..default.verify
        },
        ..default
    };
    let batch = 3;
    let mut st = Mamba2ReplayState::new(&s, shape, &p, batch, 5, gated, plan).unwrap();
    let mut model = CounterModel::new(&st, &s, 5);
    let mut truth = SlotStates::zeros(shape, 5);
    let mut io = StepIo::new(&s, shape, batch, t_max, gated).unwrap();
    let per_tok = shape.heads * shape.dv;
    // Kind of each iteration: 0 = decode step, n > 0 = verify n drafts.
    let mut kinds: Vec<usize> = (0..=iters)
        .map(|_| if rng.uniform() < 0.3 { 0 } else { rng.int(1, t_max) })
        .collect();
    let (leave, rejoin) = (iters / 2, iters / 2 + 2);
    // One decode step before iteration 3 (row 2 is admitted into buffer 1) and one right
    // after the rejoin.
    kinds[0] = t_max;
    kinds[1] = 1;
    kinds[2] = 0;
    kinds[rejoin] = 0;
    let next_of = |k: usize| if k == 0 { Next::Decode } else { Next::Verify(k) };
    // Rows 0 and 1 start now; row 2 is padding until iteration 3.
    for row in 0..2 {
        let slot = admit(&mut st, &s, &mut truth, &mut rng, row, next_of(kinds[0]));
        model.admitted(slot);
    }
    let (mut verified, mut decoded, mut flushes, mut left) = (0, 0, 0, None);
    for it in 0..iters {
        if it == leave {
            left = st.release(&s, 1).unwrap();
        }
        if it == 3 || it == rejoin {
            let row = if it == 3 { 2 } else { 1 };
            if it == 3 {
                assert_eq!(st.parity(), 1, "admission into the second counter buffer");
            }
            let slot = admit(&mut st, &s, &mut truth, &mut rng, row, next_of(kinds[it]));
            model.admitted(slot);
            if it == rejoin {
                assert_eq!(Some(slot), left, "the freed slot is reused");
            }
        }
        let slots: Vec<usize> = st.slots().iter().map(|&x| x as usize).collect();
        let live: Vec<usize> = slots.iter().copied().filter(|&x| x != 0).collect();
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
        model.before(&st, &s, kinds[it] == 0);
        // With two precisions non-flush steps and verifications read the f16 checkpoints:
        // their rounding bounds the outputs' extra error.
        let ckpt_before = lp.then(|| st.ckpt.to_host(&s).unwrap());
        if kinds[it] == 0 {
            decoded += 1;
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
                let extra = ckpt_before
                    .as_ref()
                    .map_or(vec![], |c| f16_checkpoint_bound(shape, c, sl, tok));
                close_within(&format!("{what} y row {r} draft {k}"), g, &want, OUT, &extra);
            }
            let a = if kinds[it] == 0 { 1 } else { rng.int(0, n) };
            accepted[r] = a as i32;
            for tok in &toks[..a] {
                recur(&p, &mut truth, sl, tok);
            }
        }
        let live_accepted: Vec<usize> = slots
            .iter()
            .zip(&accepted)
            .filter(|(&sl, _)| sl != 0)
            .map(|(_, &a)| a as usize)
            .collect();
        if kinds[it] > 0 {
            verified += 1;
            st.accepted.copy_from_host(&s, &accepted).unwrap();
            st.commit(&s, next_of(kinds[it + 1])).unwrap();
            model.after(&st, &s, &live, Some(&live_accepted), kinds[it + 1], &what);
        } else {
            model.after(&st, &s, &live, None, kinds[it + 1], &what);
        }
        let after = st.counters(&s).unwrap();
        for &sl in &live {
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
        if lp {
            // Admission and every flush keep the f16 checkpoints the f16 of the f32 ones.
            let (hp, lo) = (st.ckpt.to_host(&s).unwrap(), st.ckpt_lp.to_host(&s).unwrap());
            let n = shape.heads * shape.state_elems();
            for &sl in &live {
                for e in sl * n..(sl + 1) * n {
                    assert_eq!(
                        lo[e].to_bits(),
                        half::f16::from_f32(hp[e]).to_bits(),
                        "{what}: slot {sl} f16 checkpoint"
                    );
                }
            }
        }
    }
    assert!(verified >= iters / 2, "{verified} verifications");
    assert!(decoded >= 2, "{decoded} decode steps");
    assert!(flushes >= 3, "only {flushes} flushes");
    assert_eq!(
        st.parity(),
        decoded % 2,
        "one parity flip per decode step, none per verification"
    );
}

#[test]
fn speculative_random_drafts_and_acceptance() {
    speculative(CPU_TEST, 6, 4, true, 18, 21, (false, false));
}

#[test]
fn speculative_two_precisions() {
    speculative(CPU_TEST, 6, 4, true, 18, 24, (true, false));
}

#[test]
fn speculative_ungated_t_equals_l() {
    speculative(CPU_TEST, 3, 3, false, 12, 22, (false, false));
}

#[test]
fn replay_decode_window_16_gated() {
    replay_decode(CPU_TEST, 16, true, 15);
}

#[test]
fn replay_decode_window_32_ungated() {
    replay_decode(CPU_TEST, 32, false, 16);
}

/// Whether the model-shape tests run: on a GPU (`REPLAY_SSM_DEVICE=cuda`) or the PTX emulator
/// (`REPLAY_SSM_DEVICE=emulator`, about 2.5 minutes for both); the interpreter would take
/// hours at these shapes.
fn model_shapes_run() -> bool {
    let on = matches!(std::env::var("REPLAY_SSM_DEVICE").as_deref(), Ok("cuda" | "emulator"));
    if !on {
        println!("skipped: the model shapes run on a GPU or the emulator (REPLAY_SSM_DEVICE)");
    }
    on
}

/// Replay decoding at both benchmark models' shapes (default plans) against the float64
/// recurrence: ≥ 3 windows, staggered rows, rows leaving and joining, `z` on and off.
#[test]
fn replay_decode_model_shapes() {
    if model_shapes_run() {
        replay_decode(NEMOTRON3_SUPER_120B, 16, true, 51);
        replay_decode(NEMOTRON3_NANO_4B, 16, false, 52);
    }
}

/// Speculative verification at both benchmark models' shapes (default plans, `T = 8`; Super
/// with record tiers, Nano with two state precisions): random draft and accepted counts mixed
/// with decode steps, against the recurrence on the accepted tokens only.
#[test]
fn speculative_model_shapes() {
    if model_shapes_run() {
        speculative(NEMOTRON3_SUPER_120B, 16, 8, true, 24, 53, (false, true));
        speculative(NEMOTRON3_NANO_4B, 16, 8, true, 24, 54, (true, false));
    }
}

/// A replay graph must hold an even number of decode steps (each flips the current counter
/// buffer, and a graph bakes its buffers in): odd counts are refused before anything is
/// recorded; an even count gets to the capture itself (which the interpreter does not have),
/// and neither changes the parity.
#[test]
fn replay_graphs_hold_an_even_number_of_steps() {
    let (_d, s) = interp();
    let p = random_params(&mut Rng(31), CPU_TEST);
    let plan = ReplayPlan::default_for(&CPU_TEST, 2, 4, 0);
    let mut st = Mamba2ReplayState::new(&s, CPU_TEST, &p, 2, 3, true, plan).unwrap();
    st.fill(&s, Next::Decode).unwrap();
    let io = StepIo::new(&s, CPU_TEST, 2, 1, true).unwrap();
    st.step(&s, &io).unwrap();
    assert_eq!(st.parity(), 1);
    for steps in [1, 3, 7] {
        match st.capture_steps(&s, &io, steps) {
            Err(RuntimeError::Size(m)) => assert!(m.contains("even number"), "{m}"),
            Err(e) => panic!("{steps} steps: {e}"),
            Ok(_) => panic!("{steps} steps captured"),
        }
        assert_eq!(st.parity(), 1);
    }
    match st.capture_steps(&s, &io, 4) {
        Err(RuntimeError::Unsupported { .. }) => {}
        Err(e) => panic!("4 steps: {e}"),
        Ok(_) => panic!("a graph on the interpreter"),
    }
    assert_eq!(st.parity(), 1);
    // Two more steps bring the parity back, and the counters went on by three steps.
    st.step(&s, &io).unwrap();
    st.step(&s, &io).unwrap();
    assert_eq!(st.parity(), 1);
    for &slot in st.slots() {
        assert_eq!(st.counters(&s).unwrap()[slot as usize], (0, 3, true));
    }
}

/// A shape for the tuning tests: `BV ≥ 16` is searched, so `dv = 16`; two heads in one group
/// give `HB ∈ {1, 2}`.
const TUNE: ModelShape = ModelShape {
    name: "tune-test",
    dv: 16,
    dk: 16,
    heads: 2,
    groups: 1,
    ..CPU_TEST
};

/// A tuner on the interpreter with a private cache file in `dir`, in `mode`, timing each
/// candidate once.
fn tuner_in(
    d: &Device,
    dir: &std::path::Path,
    mode: replay_runtime::tune::TuneMode,
) -> replay_runtime::tune::Autotuner {
    use replay_runtime::tune::{Autotuner, BenchSettings, TuneCache};
    Autotuner::new(d)
        .unwrap()
        .with_cache(TuneCache::open(dir.join("tune.json")))
        .with_mode(mode)
        .with_progress(false)
        .with_settings(BenchSettings {
            warmup: 0,
            reps: 1,
            ..Default::default()
        })
}

/// The replay tuning problems on the interpreter (with `REPLAY_TUNE=force` semantics and a
/// private cache): the step's tile problem gives every pointer a buffer and every scalar a
/// value (the second counter buffer and the next launch's drafts included) and shortlists its
/// fastest tiles; the window scheme runs whole windows (two for an odd `L`) of every window ×
/// shortlisted tiles and the speculative window scheme runs verification cycles. A cached
/// window choice is reused for the same candidates only.
#[test]
fn replay_tuning_problems_run_on_the_interpreter() {
    use replay::ssm::tuning::{
        replay_shortlist, tune_fold_tiles, tune_replay_tiles, tune_window, window_run_steps, with_fold_verification,
        with_head_blocks, VerifyCycles, TILE_SHORTLIST,
    };
    use replay_runtime::tune::{TuneMode, TuneSource};
    let (d, _s) = interp();
    let dir = std::env::temp_dir().join(format!("replay-ssm-tune-{}", std::process::id()));
    let mut tuner = tuner_in(&d, &dir, TuneMode::Force);
    let short = tune_replay_tiles(&mut tuner, &TUNE, 2, true, 3, false).unwrap();
    assert_eq!(short.source, TuneSource::Tuned);
    // Batch 2 is latency-bound: twice the shortlist.
    assert_eq!(replay_shortlist(2), 2 * TILE_SHORTLIST);
    assert!(short.candidates > replay_shortlist(2));
    assert_eq!(short.tiles.len(), replay_shortlist(2));
    // Flat rows: BV divides the group's 32 state rows (one head or both).
    assert!(short.tiles.iter().all(|t| [16, 32].contains(&t.bv) && t.hb == 1));
    let p = random_params(&mut Rng(32), TUNE);
    let c = tune_window(&mut tuner, TUNE, &p, 2, true, &short.tiles, &[3, 4], false).unwrap();
    assert_eq!(c.source, TuneSource::Tuned);
    assert!([3, 4].contains(&c.window));
    assert!(short.tiles.contains(&c.tiles));
    assert_eq!((window_run_steps(3), window_run_steps(4)), (6, 4));
    // The speculative plan's window and verification tiles: verification cycles of 2 drafts
    // (1 accepted) at L = 3 or 4.
    let plan = ReplayPlan {
        window: 3,
        max_drafts: 2,
        step: c.tiles,
        verify: c.tiles,
        fold: c.tiles,
        lp: false,
    };
    let cycles = VerifyCycles {
        shape: TUNE,
        params: &p,
        batch: 2,
        gated: true,
        accepted: 1,
    };
    let v = cycles
        .tune_window(&mut tuner, plan, &short.tiles[..2], &[3, 4])
        .unwrap();
    assert_eq!(v.source, TuneSource::Tuned);
    assert!([3, 4].contains(&v.window));
    assert!(short.tiles[..2].contains(&v.tiles));
    // The fold's tiles: a shortlist from single launches on rows spread over a verification
    // cycle (one in its length folding), then whole cycles over it and its first tile at every
    // number of heads per program (TUNE: 1 and 2), each also verifying the rows it folds.
    let f = tune_fold_tiles(&mut tuner, &TUNE, 2, 3, 2, 1, false).unwrap();
    assert_eq!(f.source, TuneSource::Tuned);
    assert!(f.candidates > f.tiles.len() && f.tiles.len() == TILE_SHORTLIST, "{f:?}");
    assert!(
        f.tiles.iter().all(|t| [16, 32, 64, 128].contains(&t.flush_columns)),
        "{f:?}"
    );
    let fold_tiles = with_fold_verification(&with_head_blocks(&f.tiles, &TUNE));
    for (hb, verifies) in [(1, false), (2, false), (1, true), (2, true)] {
        let t = Tiles {
            hb,
            verifies,
            ..f.tiles[0]
        };
        assert!(fold_tiles.contains(&t), "{fold_tiles:?}");
    }
    let plan = ReplayPlan {
        window: v.window,
        verify: v.tiles,
        ..plan
    };
    let fc = cycles.tune_fold(&mut tuner, plan, &fold_tiles).unwrap();
    assert_eq!((fc.source, fc.window), (TuneSource::Tuned, v.window));
    assert!(fold_tiles.contains(&fc.tiles), "{:?}", fc.tiles);
    // From the cache: the same candidates reuse the choice, other tiles are tuned.
    let mut cached = tuner_in(&d, &dir, TuneMode::Cached);
    let again = tune_window(&mut cached, TUNE, &p, 2, true, &short.tiles, &[3, 4], false).unwrap();
    assert_eq!(
        (again.window, again.tiles, again.source),
        (c.window, c.tiles, TuneSource::Cache)
    );
    let other = tune_window(&mut cached, TUNE, &p, 2, true, &short.tiles[1..], &[3, 4], false).unwrap();
    assert_eq!(other.source, TuneSource::Tuned);
    assert!(short.tiles[1..].contains(&other.tiles));
    // Two state precisions are tuning problems of their own (kernel and window), cached apart.
    let short_lp = tune_replay_tiles(&mut cached, &TUNE, 2, true, 3, true).unwrap();
    assert_eq!(short_lp.source, TuneSource::Tuned);
    let lp = tune_window(&mut cached, TUNE, &p, 2, true, &short.tiles, &[3, 4], true).unwrap();
    assert_eq!(lp.source, TuneSource::Tuned);
    let lp_again = tune_window(&mut cached, TUNE, &p, 2, true, &short.tiles, &[3, 4], true).unwrap();
    assert_eq!(
        (lp_again.window, lp_again.tiles, lp_again.source),
        (lp.window, lp.tiles, TuneSource::Cache)
    );
    assert_eq!(
        tune_window(&mut cached, TUNE, &p, 2, true, &short.tiles, &[3, 4], false)
            .unwrap()
            .source,
        TuneSource::Cache
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `plans()` with a tuner on the interpreter: each plan's tiles are among its kernel's
/// shortlist and its window among the candidates, chosen jointly over every window × tile
/// (the notes say so); a second call from the cache file gives the same plans from the cache
/// alone (no new entry).
#[test]
fn tuned_plans_choose_windows_and_tiles_from_the_shortlists() {
    use replay::ssm::tuning::{
        accepted_drafts, plans, tune_conventional, tune_fold_tiles, tune_replay_tiles, tune_verify_tiles,
        window_candidates, with_chained_dots, with_flush_variants, with_fold_verification, with_head_blocks,
    };
    use replay_runtime::tune::{TuneMode, TuneSource};
    let (d, _s) = interp();
    let dir = std::env::temp_dir().join(format!("replay-ssm-plans-{}", std::process::id()));
    let p = random_params(&mut Rng(33), TUNE);
    let (batch, drafts) = (2, 2);
    let mut tuner = tuner_in(&d, &dir, TuneMode::Force);
    let first = plans(Some(&mut tuner), TUNE, &p, batch, true, drafts).unwrap();
    assert!(first.choices.iter().all(|c| c.source == "tuned"), "{:?}", first.choices);
    // Each choice carries its time: the stages ran candidates, so the total is not zero.
    assert!(first.choices.iter().all(|c| c.seconds.is_finite() && c.seconds >= 0.0));
    assert!(
        first.choices.iter().map(|c| c.seconds).sum::<f64>() > 0.0,
        "{:?}",
        first.choices
    );
    let entries = tuner.cache().len();

    let mut cached = tuner_in(&d, &dir, TuneMode::Cached);
    let again = plans(Some(&mut cached), TUNE, &p, batch, true, drafts).unwrap();
    assert!(again.choices.iter().all(|c| c.source == "cache"), "{:?}", again.choices);
    assert_eq!(cached.cache().len(), entries);
    assert_eq!(
        (again.conventional, again.replay, again.verify),
        (first.conventional, first.replay, first.verify)
    );
    assert_eq!(
        (again.replay_two, again.verify_two),
        (first.replay_two, first.verify_two)
    );

    let joint = |what: &str| {
        first
            .choices
            .iter()
            .find(|c| c.what == what)
            .unwrap_or_else(|| panic!("no note `{what}`"))
            .candidates
    };
    // The conventional tiles: a kernel-level shortlist, then graphs of steps.
    let short = tune_conventional(&mut cached, &TUNE, batch, true).unwrap();
    assert_eq!(short.source, TuneSource::Cache);
    assert!(short.tiles.len() > 1 && short.tiles.contains(&first.conventional.decode));
    assert_eq!(joint("conventional tiles"), short.tiles.len());

    let (_, windows) = window_candidates(TUNE, 0, 1.0);
    let short = tune_replay_tiles(&mut cached, &TUNE, batch, true, windows[0], false).unwrap();
    assert_eq!(short.source, TuneSource::Cache);
    assert!(short.tiles.len() > 1);
    // Batch 2 is latency-bound: the windows also time each tile with one whole flush block.
    let timed = with_flush_variants(&short.tiles, batch);
    assert!(timed.len() > short.tiles.len());
    assert!(windows.contains(&first.replay.window));
    assert!(timed.contains(&first.replay.step));
    assert_eq!(first.replay.verify, first.replay.step);
    assert_eq!(joint("replay window L and tiles"), windows.len() * timed.len());

    let accepted = accepted_drafts(drafts);
    let (_, windows) = window_candidates(TUNE, drafts, 0.75 * drafts as f64);
    let short = tune_verify_tiles(&mut cached, &TUNE, batch, true, windows[0], drafts, accepted, false).unwrap();
    assert_eq!(short.source, TuneSource::Cache);
    assert!(windows.contains(&first.verify.window));
    // A shortlisted tile, then at its window every shortlisted tile with its products chained
    // and not.
    let unchained = |t: Tiles| Tiles {
        chained_dots: false,
        ..t
    };
    assert!(short.tiles.contains(&unchained(first.verify.verify)));
    assert_eq!(first.verify.step, first.replay.step);
    assert_eq!(joint("verify window L and tiles"), windows.len() * short.tiles.len());
    let chained = with_chained_dots(first.verify.verify, &short.tiles);
    assert_eq!(joint("verify products chained"), chained.len());
    assert_eq!(chained.len(), 2 * short.tiles.len());
    // The fold's tiles: whole cycles over its shortlist and the first tile's head blocks, each
    // also verifying the rows it folds, after the verification and beside it.
    let f = tune_fold_tiles(&mut cached, &TUNE, batch, first.verify.window, drafts, accepted, false).unwrap();
    assert_eq!(f.source, TuneSource::Cache);
    let fold_tiles = with_fold_verification(&with_head_blocks(&f.tiles, &TUNE));
    assert_eq!(fold_tiles.len(), 3 * with_head_blocks(&f.tiles, &TUNE).len());
    assert!(fold_tiles.contains(&first.verify.fold), "{:?}", first.verify.fold);
    assert_eq!(joint("fold tiles"), fold_tiles.len());

    // Two state precisions: plans of their own, tuned the same way from the one-precision
    // plans' windows (their kernels read and write the f16 checkpoint), the one-precision
    // tiles timed beside their shortlists.
    let (replay_lp, verify_lp) = (first.replay_lp(), first.verify_lp());
    assert!(replay_lp.lp && verify_lp.lp && !first.replay.lp && !first.verify.lp);
    assert_eq!(Some(replay_lp), first.replay_two);
    let (_, decode_windows) = window_candidates(TUNE, 0, 1.0);
    let short = tune_replay_tiles(&mut cached, &TUNE, batch, true, first.replay.window, true).unwrap();
    assert_eq!(short.source, TuneSource::Cache);
    assert!(decode_windows.contains(&replay_lp.window));
    let mut timed = with_flush_variants(&short.tiles, batch);
    timed.push(first.replay.step);
    assert!(timed.contains(&replay_lp.step));
    let short = tune_verify_tiles(
        &mut cached,
        &TUNE,
        batch,
        true,
        first.verify.window,
        drafts,
        accepted,
        true,
    )
    .unwrap();
    assert_eq!(short.source, TuneSource::Cache);
    assert!(
        short.tiles.contains(&unchained(verify_lp.verify))
            || unchained(verify_lp.verify) == unchained(first.verify.verify)
    );
    let mut timed = short.tiles.clone();
    if !timed.contains(&first.verify.verify) {
        timed.push(first.verify.verify);
    }
    assert_eq!(
        joint("verify products chained (two precisions)"),
        with_chained_dots(verify_lp.verify, &timed).len()
    );
    assert_eq!(verify_lp.step, replay_lp.step);
    assert!(joint("verify window L and tiles (two precisions)") > 0);
    // The fold's tiles of their own (it writes the f16 copy too): its shortlist's head blocks
    // and the one-precision fold's tiles.
    let f = tune_fold_tiles(&mut cached, &TUNE, batch, verify_lp.window, drafts, accepted, true).unwrap();
    assert_eq!(f.source, TuneSource::Cache);
    let mut fold_tiles = with_fold_verification(&with_head_blocks(&f.tiles, &TUNE));
    if !fold_tiles.contains(&first.verify.fold) {
        fold_tiles.push(first.verify.fold);
    }
    assert!(fold_tiles.contains(&verify_lp.fold), "{:?}", verify_lp.fold);
    assert_eq!(joint("fold tiles (two precisions)"), fold_tiles.len());
    let _ = std::fs::remove_dir_all(dir);
}

/// A stream on GPU 0, or `None` after printing why the test is skipped.
fn gpu_stream() -> Option<Stream> {
    Some(Device::gpu_for_test()?.new_stream().unwrap())
}

/// The bits of the outputs in `io`.
fn output_bits(io: &StepIo, s: &Stream) -> Vec<u16> {
    io.out.to_host(s).unwrap().into_iter().map(|v| v.to_bits()).collect()
}

/// `g` and `h` hold the same counters, checkpoints and rings, bit for bit.
fn assert_same_state(g: &Mamba2ReplayState, h: &Mamba2ReplayState, s: &Stream, what: &str) {
    assert_eq!(g.counters(s).unwrap(), h.counters(s).unwrap(), "{what}: counters");
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    assert_eq!(
        bits(g.ckpt.to_host(s).unwrap()),
        bits(h.ckpt.to_host(s).unwrap()),
        "{what}: checkpoints"
    );
    assert_eq!(
        bits(g.rec_dt.to_host(s).unwrap()),
        bits(h.rec_dt.to_host(s).unwrap()),
        "{what}: ring dt'"
    );
    assert_eq!(
        g.rec_x.to_host(s).unwrap(),
        h.rec_x.to_host(s).unwrap(),
        "{what}: ring x"
    );
    assert_eq!(
        g.rec_b.to_host(s).unwrap(),
        h.rec_b.to_host(s).unwrap(),
        "{what}: ring B"
    );
}

/// On a GPU (skipped elsewhere): a graph of two decode steps replayed `3L` times, with a row
/// released and another admitted between replays, leaves exactly the counters, checkpoints,
/// rings and outputs of the same steps launched one by one — the graph bakes both counter
/// buffers in, and every replay returns to the parity it was captured at. Run it on a GPU
/// machine with `cargo test --release --test ssm_state -- gpu`.
#[test]
fn replay_graph_replays_match_host_steps_gpu() {
    let Some(s) = gpu_stream() else { return };
    let (shape, l, batch, slots) = (CPU_TEST, 5, 3, 5);
    let mut rng = Rng(41);
    let p = random_params(&mut rng, shape);
    let plan = ReplayPlan::default_for(&shape, batch, l, 0);
    let inits: Vec<Vec<f32>> = (0..3).map(|_| initial_state(&mut rng, shape)).collect();
    let mut states = Vec::new();
    let mut ios = Vec::new();
    for _ in 0..2 {
        let mut st = Mamba2ReplayState::new(&s, shape, &p, batch, slots, true, plan).unwrap();
        for (row, init) in inits[..2].iter().enumerate() {
            st.admit(&s, row, Some(init), Next::Decode).unwrap();
        }
        let mut io = StepIo::new(&s, shape, batch, 1, true).unwrap();
        io.randomize(&s, 43).unwrap();
        states.push(st);
        ios.push(io);
    }
    let graph = states[0].capture_steps(&s, &ios[0], 2).unwrap();
    assert_eq!(states[0].parity(), 0);
    for rep in 0..3 * l {
        if rep == l {
            for st in &mut states {
                st.release(&s, 1).unwrap();
                st.admit(&s, 2, Some(&inits[2]), Next::Decode).unwrap();
            }
        }
        graph.launch().unwrap();
        states[1].step(&s, &ios[1]).unwrap();
        states[1].step(&s, &ios[1]).unwrap();
        s.synchronize().unwrap();
        let (g, h) = (&states[0], &states[1]);
        let what = format!("replay {rep}");
        assert_eq!((g.parity(), h.parity()), (0, 0), "{what}");
        assert_same_state(g, h, &s, &what);
        assert_eq!(output_bits(&ios[0], &s), output_bits(&ios[1], &s), "{what}: outputs");
        // Two steps a replay: h went on by two, modulo the flushes.
        let (_, h0, _) = g.counters(&s).unwrap()[g.slots()[0] as usize];
        assert_eq!(h0, (2 * rep + 2) % l, "{what}: h of row 0");
    }
}

/// On a GPU (skipped elsewhere): a graph of two verification cycles (verify, commit) replayed
/// `2L` times, its fold beside the verification (two branches of the graph), leaves exactly
/// the counters, checkpoints, rings and outputs of the same cycles launched one by one with
/// the fold after the verification. The rows accept different counts, so folding and
/// verifying rows meet in one launch. Run it with `cargo test --release --test ssm_state -- gpu`.
#[test]
fn verification_graphs_match_host_cycles_gpu() {
    let Some(s) = gpu_stream() else { return };
    let (shape, l, t, batch, slots) = (CPU_TEST, 6, 4, 3, 5);
    let mut rng = Rng(45);
    let p = random_params(&mut rng, shape);
    let plan = ReplayPlan::default_for(&shape, batch, l, t);
    assert!(plan.fold.verifies, "the fold verifies the rows it folds");
    let inits: Vec<Vec<f32>> = (0..batch).map(|_| initial_state(&mut rng, shape)).collect();
    let mut states = Vec::new();
    let mut ios = Vec::new();
    for beside in [true, false] {
        let fold = Tiles { beside, ..plan.fold };
        let mut st = Mamba2ReplayState::new(&s, shape, &p, batch, slots, true, ReplayPlan { fold, ..plan }).unwrap();
        for (row, init) in inits.iter().enumerate() {
            st.admit(&s, row, Some(init), Next::Verify(t)).unwrap();
        }
        st.accepted.copy_from_host(&s, &[1, 3, 4]).unwrap();
        let mut io = StepIo::new(&s, shape, batch, t, true).unwrap();
        io.randomize(&s, 46).unwrap();
        st.prepare_verify(&io, t).unwrap();
        states.push(st);
        ios.push(io);
    }
    let cycles = |st: &Mamba2ReplayState, io: &StepIo, s: &Stream| {
        for _ in 0..2 {
            st.verify(s, io, t)?;
            st.commit(s, Next::Verify(t))?;
        }
        Ok(())
    };
    let graph = s.capture(|s| cycles(&states[0], &ios[0], s)).unwrap();
    let mut flushed = 0;
    for rep in 0..2 * l {
        for io in &mut ios {
            io.out.poison(&s).unwrap();
        }
        flushed += states[1].counters(&s).unwrap().iter().filter(|c| c.2).count();
        graph.launch().unwrap();
        cycles(&states[1], &ios[1], &s).unwrap();
        s.synchronize().unwrap();
        let (g, h) = (&states[0], &states[1]);
        let what = format!("replay {rep}");
        assert_same_state(g, h, &s, &what);
        let written = ios[0].out.to_host(&s).unwrap();
        assert!(
            written.iter().all(|v| v.to_f32().is_finite()),
            "{what}: every output written"
        );
        assert_eq!(output_bits(&ios[0], &s), output_bits(&ios[1], &s), "{what}: outputs");
    }
    assert!(flushed > 0, "some cycle folded");
}

/// `stagger_rows` on the interpreter: rows at `h = 0` end one flush period's states apart
/// (`h = a (1 + r mod P)`), none folds while they spread, and every verification after it folds
/// exactly the rows of one residue `r mod P`, each residue once per period.
#[test]
fn staggered_rows_fold_one_residue_per_cycle() {
    use replay::ssm::tuning::{stagger_rows, verify_period};
    let (_d, s) = interp();
    let (window, drafts, accepted, batch) = (8, 4, 1, 7);
    let period = verify_period(window, drafts, accepted);
    assert_eq!(period, 5, "h = 1..=5, the fifth folds");
    let p = random_params(&mut Rng(63), CPU_TEST);
    let plan = ReplayPlan::default_for(&CPU_TEST, batch, window, drafts);
    let mut st = Mamba2ReplayState::new(&s, CPU_TEST, &p, batch, batch + 1, true, plan).unwrap();
    st.fill(&s, Next::Verify(drafts)).unwrap();
    let mut io = StepIo::new(&s, CPU_TEST, batch, drafts, true).unwrap();
    io.randomize(&s, 64).unwrap();
    stagger_rows(&mut st, &s, &io, drafts, accepted).unwrap();
    assert_eq!(st.accepted.to_host(&s).unwrap(), vec![accepted as i32; batch]);
    let row_counters = |st: &Mamba2ReplayState| {
        let c = st.counters(&s).unwrap();
        st.slots().iter().map(|&slot| c[slot as usize]).collect::<Vec<_>>()
    };
    for (r, &(start, h, flag)) in row_counters(&st).iter().enumerate() {
        assert_eq!(
            (start, h),
            (0, accepted * (1 + r % period)),
            "row {r}: no fold while spreading"
        );
        assert_eq!(flag, r % period == period - 1, "row {r}");
    }
    let mut folded = vec![0; batch];
    for cycle in 0..2 * period {
        let flags: Vec<bool> = row_counters(&st).iter().map(|c| c.2).collect();
        let residue = (period - 1 + period - cycle % period) % period;
        for (r, &f) in flags.iter().enumerate() {
            assert_eq!(f, r % period == residue, "cycle {cycle}, row {r}");
            folded[r] += usize::from(f);
        }
        st.verify(&s, &io, drafts).unwrap();
        st.commit(&s, Next::Verify(drafts)).unwrap();
    }
    assert!(folded.iter().all(|&n| n == 2), "{folded:?}");
}

/// The verification runs' length (`verify_run_cycles`) against the real counters on the
/// interpreter: cycles of verify + commit with `T = 4` drafts, 1 accepted, at `L = 8` fold
/// every 5 verifications in steady state, so every run of `verify_run_cycles(8, 4, 1)`
/// consecutive cycles (20; 16 would not be a whole number of periods) holds the same number of
/// folds, whatever cycle it starts at.
#[test]
fn verification_runs_hold_the_same_number_of_folds() {
    use replay::ssm::tuning::verify_run_cycles;
    let (_d, s) = interp();
    let (window, drafts, accepted, batch) = (8, 4, 1, 2);
    let p = random_params(&mut Rng(61), CPU_TEST);
    let plan = ReplayPlan::default_for(&CPU_TEST, batch, window, drafts);
    let mut st = Mamba2ReplayState::new(&s, CPU_TEST, &p, batch, batch + 1, true, plan).unwrap();
    st.fill(&s, Next::Verify(drafts)).unwrap();
    st.accepted.copy_from_host(&s, &vec![accepted as i32; batch]).unwrap();
    let mut io = StepIo::new(&s, CPU_TEST, batch, drafts, true).unwrap();
    io.randomize(&s, 62).unwrap();
    let run = verify_run_cycles(window, drafts, accepted);
    assert_eq!(run, 20);
    // The flush flag each verification runs with (every live row the same), 4 runs' worth.
    let mut flags = Vec::new();
    for _ in 0..4 * run {
        let c = st.counters(&s).unwrap();
        let live: Vec<bool> = c[1..=batch].iter().map(|&(_, _, f)| f).collect();
        assert!(live.iter().all(|&f| f == live[0]), "{c:?}");
        flags.push(live[0]);
        st.verify(&s, &io, drafts).unwrap();
        st.commit(&s, Next::Verify(drafts)).unwrap();
    }
    let first = flags.iter().position(|&f| f).expect("no fold");
    let folds: Vec<usize> = (first..first + 2 * run)
        .map(|start| flags[start..start + run].iter().filter(|&&f| f).count())
        .collect();
    assert!(folds.iter().all(|&n| n == folds[0]) && folds[0] == run / 5, "{folds:?}");
    // Runs of 16 do not: some hold one fold more than others.
    let sixteen: Vec<usize> = (first..first + 2 * run)
        .map(|start| flags[start..start + 16].iter().filter(|&&f| f).count())
        .collect();
    assert!(sixteen.iter().min() != sixteen.iter().max(), "{sixteen:?}");
}
