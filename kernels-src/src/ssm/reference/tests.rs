//! The replay and verify forms against the plain recurrence.

use super::replay::{commit_rule, ReplayCache};
use super::*;
use crate::ssm::shapes::CPU_TEST;

/// Value that padding rows' outputs and the padding slot's state hold and must keep.
const SENTINEL: f64 = -12345.0;
/// Relative tolerance of every comparison.
const TOL: f64 = 1e-12;

/// SplitMix64 with Box–Muller normals.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.uniform() * n as f64) as usize
    }

    fn normal(&mut self) -> f64 {
        let u = 1.0 - self.uniform();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.uniform()).cos()
    }

    fn normals(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.normal()).collect()
    }
}

/// `A ∈ [−8, −0.5]`, `D ~ N(0, 1)`, `dt_bias ∈ [−4, −1]` (initial `dt'` ≈ 0.02–0.3).
fn random_params(rng: &mut Rng) -> Mamba2Params {
    let h = CPU_TEST.heads;
    Mamba2Params {
        a: (0..h).map(|_| rng.range(-8.0, -0.5)).collect(),
        d: rng.normals(h),
        dt_bias: (0..h).map(|_| rng.range(-4.0, -1.0)).collect(),
    }
}

/// `dt, x, B, C, z ~ N(0, 1)`.
fn random_input(rng: &mut Rng, gated: bool) -> StepInput {
    let s = CPU_TEST;
    StepInput {
        dt: rng.normals(s.heads),
        x: rng.normals(s.heads * s.dv),
        b: rng.normals(s.groups * s.dk),
        c: rng.normals(s.groups * s.dk),
        z: gated.then(|| rng.normals(s.heads * s.dv)),
    }
}

/// Random initial states; the padding slot holds [`SENTINEL`].
fn random_states(rng: &mut Rng, slots: usize) -> SlotStates {
    let mut states = SlotStates::zeros(CPU_TEST, slots);
    states.slot_mut(0).fill(SENTINEL);
    for s in 1..slots {
        states.slot_mut(s).iter_mut().for_each(|v| *v = rng.normal());
    }
    states
}

/// Chunk by chunk (one output vector or one head's state per chunk),
/// `max |got − want| ≤ TOL · max |want|`.
fn assert_close(got: &[f64], want: &[f64], chunk: usize, what: &str) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.chunks(chunk).zip(want.chunks(chunk)).enumerate() {
        let scale = w.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let err = g.iter().zip(w).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            err.is_finite() && err <= TOL * scale,
            "{what}, chunk {i}: error {err:e} at scale {scale:e}"
        );
    }
}

/// Rows of the test batch: row `r < ROWS − 1` owns slot `ROWS − 1 − r` (reversed, so row and
/// slot numbers differ); the last row is always padding. `SLOTS` leaves one slot unused.
const ROWS: usize = 6;
const SLOTS: usize = ROWS + 1;

/// Slots of step `t`: row `r` joins at step `3r` (staggering `h` across rows) and is padding with
/// probability 0.1 afterwards.
fn batch_slots(rng: &mut Rng, t: usize) -> Vec<usize> {
    (0..ROWS)
        .map(|r| {
            if r == ROWS - 1 || t < 3 * r || rng.uniform() < 0.1 {
                0
            } else {
                ROWS - 1 - r
            }
        })
        .collect()
}

fn assert_untouched(replay: &ReplayCache, plain: &SlotStates) {
    assert!(plain.slot(0).iter().all(|&v| v == SENTINEL));
    assert!(replay.checkpoints().slot(0).iter().all(|&v| v == SENTINEL));
    assert_eq!(replay.committed(0), 0);
    let unused = SLOTS - 1;
    assert!(replay.checkpoints().slot(unused) == plain.slot(unused));
}

/// Standard decoding: replay outputs and logical states equal the recurrence at every step.
fn check_decode(window: usize, gated: bool, seed: u64) {
    let mut rng = Rng(seed);
    let shape = CPU_TEST;
    let per_row = shape.heads * shape.dv;
    let params = random_params(&mut rng);
    let mut plain = random_states(&mut rng, SLOTS);
    let mut replay = ReplayCache::new(plain.clone(), window, 0);
    let mut active = [0usize; SLOTS];
    for t in 0..4 * window + 20 {
        let slots = batch_slots(&mut rng, t);
        let inputs: Vec<StepInput> = (0..ROWS).map(|_| random_input(&mut rng, gated)).collect();
        let mut want = vec![SENTINEL; ROWS * per_row];
        let mut got = want.clone();
        recurrent_step(&params, &mut plain, &slots, &inputs, &mut want);
        replay.decode_step(&params, &slots, &inputs, &mut got);
        let what = format!("L = {window}, z = {gated}, step {t}");
        assert_close(&got, &want, shape.dv, &what);
        for (r, &slot) in slots.iter().enumerate() {
            if slot == 0 {
                assert!(got[r * per_row..(r + 1) * per_row].iter().all(|&v| v == SENTINEL));
                continue;
            }
            active[slot] += 1;
            assert_eq!(replay.committed(slot), active[slot] % window, "{what}");
            assert_close(
                &replay.state(&params, slot),
                plain.slot(slot),
                shape.state_elems(),
                &format!("{what}: state"),
            );
        }
    }
    for (slot, &n) in active.iter().enumerate().take(ROWS).skip(1) {
        assert!(n >= 3 * window, "slot {slot}: {n} steps, fewer than 3 windows");
    }
    assert_untouched(&replay, &plain);
}

#[test]
fn decode_matches_recurrence() {
    for (i, window) in [1, 4, 16, 32].into_iter().enumerate() {
        for gated in [false, true] {
            check_decode(window, gated, 17 + 2 * i as u64 + gated as u64);
        }
    }
}

/// Speculative decoding with random draft counts `T ≤ max_drafts` and accepted counts `a ≤ T`:
/// every draft output equals the recurrence continued from the committed tokens, and after the
/// commit the logical state equals the recurrence over the accepted tokens only.
fn check_verify(window: usize, max_drafts: usize, gated: bool, seed: u64) {
    let mut rng = Rng(seed);
    let shape = CPU_TEST;
    let per_row = shape.heads * shape.dv;
    let params = random_params(&mut rng);
    let mut plain = random_states(&mut rng, SLOTS);
    let mut replay = ReplayCache::new(plain.clone(), window, max_drafts);
    let mut flushes = [0usize; SLOTS];
    let mut next_t = 1 + rng.below(max_drafts);
    for step in 0..4 * window + 30 {
        let t = next_t;
        let slots = batch_slots(&mut rng, step);
        let drafts: Vec<Vec<StepInput>> = (0..ROWS)
            .map(|_| (0..t).map(|_| random_input(&mut rng, gated)).collect())
            .collect();
        let what = format!("L = {window}, T = {t}, z = {gated}, step {step}");

        // Reference outputs: the recurrence over all T drafts, on a scratch copy of the states.
        let mut scratch = plain.clone();
        let mut want = vec![SENTINEL; ROWS * t * per_row];
        for s in 0..t {
            let inputs: Vec<StepInput> = drafts.iter().map(|d| d[s].clone()).collect();
            let mut out = vec![SENTINEL; ROWS * per_row];
            recurrent_step(&params, &mut scratch, &slots, &inputs, &mut out);
            for r in 0..ROWS {
                want[(r * t + s) * per_row..(r * t + s + 1) * per_row]
                    .copy_from_slice(&out[r * per_row..(r + 1) * per_row]);
            }
        }
        for &slot in slots.iter().filter(|&&s| s != 0) {
            flushes[slot] += replay.flush_pending(slot) as usize;
        }
        let mut got = vec![SENTINEL; ROWS * t * per_row];
        replay.verify(&params, &slots, &drafts, &mut got);
        assert_close(&got, &want, shape.dv, &what);

        // Accept a prefix of each row's drafts; advance the recurrence over it only.
        let accepted: Vec<usize> = slots
            .iter()
            .map(|&s| if s == 0 { 0 } else { 1 + rng.below(t) })
            .collect();
        for s in 0..t {
            let step_slots: Vec<usize> = slots
                .iter()
                .zip(&accepted)
                .map(|(&slot, &a)| if s < a { slot } else { 0 })
                .collect();
            let inputs: Vec<StepInput> = drafts.iter().map(|d| d[s].clone()).collect();
            recurrent_step(
                &params,
                &mut plain,
                &step_slots,
                &inputs,
                &mut vec![0.0; ROWS * per_row],
            );
        }
        // Commit, recomputing the flags of every live slot (idle ones accept 0) for the next T.
        next_t = 1 + rng.below(max_drafts);
        let live: Vec<usize> = (0..ROWS)
            .map(|r| if r == ROWS - 1 { 0 } else { ROWS - 1 - r })
            .collect();
        let live_accepted: Vec<usize> = live
            .iter()
            .map(|&l| slots.iter().position(|&s| s == l && l != 0).map_or(0, |r| accepted[r]))
            .collect();
        replay.commit(&live, &live_accepted, next_t);
        for &slot in live.iter().filter(|&&s| s != 0) {
            assert!(replay.committed(slot) <= window, "{what}");
            assert_eq!(replay.flush_pending(slot), replay.committed(slot) + next_t > window);
            assert_close(
                &replay.state(&params, slot),
                plain.slot(slot),
                shape.state_elems(),
                &format!("{what}: state"),
            );
        }
    }
    for (slot, &n) in flushes.iter().enumerate().take(ROWS).skip(1) {
        assert!(n >= 3, "slot {slot}: {n} flushes, fewer than 3 windows");
    }
    assert_untouched(&replay, &plain);
}

#[test]
fn verify_matches_recurrence_on_accepted_tokens() {
    for (i, (window, max_drafts)) in [(1, 1), (4, 4), (16, 8), (32, 8)].into_iter().enumerate() {
        for gated in [false, true] {
            check_verify(window, max_drafts, gated, 101 + 2 * i as u64 + gated as u64);
        }
    }
}

/// Decays that underflow to exactly 0 (a huge `dt`) give finite, equal results: decay products
/// are never formed as ratios.
#[test]
fn zero_decay_stays_finite() {
    let mut rng = Rng(7);
    let shape = CPU_TEST;
    let params = random_params(&mut rng);
    let mut plain = random_states(&mut rng, 2);
    let mut replay = ReplayCache::new(plain.clone(), 8, 0);
    for t in 0..40 {
        let mut input = random_input(&mut rng, t % 2 == 0);
        if t % 5 == 2 {
            input.dt.iter_mut().for_each(|d| *d = 1e4); // α = exp(−1e4·|A|) = 0
        }
        let (mut want, mut got) = (vec![0.0; shape.heads * shape.dv], vec![0.0; shape.heads * shape.dv]);
        recurrent_step(&params, &mut plain, &[1], std::slice::from_ref(&input), &mut want);
        replay.decode_step(&params, &[1], std::slice::from_ref(&input), &mut got);
        assert_close(&got, &want, shape.dv, &format!("step {t}"));
    }
}

#[test]
fn commit_rule_and_activations() {
    assert_eq!(commit_rule(0, 3, 4, 16), (3, false));
    assert_eq!(commit_rule(10, 2, 4, 16), (12, false));
    assert_eq!(commit_rule(10, 3, 4, 16), (13, true));
    assert_eq!(commit_rule(1, 0, 1, 1), (1, true));
    assert_eq!(softplus(0.0), std::f64::consts::LN_2);
    assert_eq!(softplus(1e4), 1e4);
    assert!((softplus(-50.0) - (-50.0f64).exp()).abs() < 1e-35);
    assert_eq!(silu(0.0), 0.0);
    assert!((silu(2.0) - 2.0 / (1.0 + (-2.0f64).exp())).abs() < 1e-16);
}
