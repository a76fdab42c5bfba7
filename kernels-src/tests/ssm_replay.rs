//! `mamba2_replay_step` (standard decoding, one launch per step: the step advances the
//! counters itself, into the second counter buffer) on the interpreter against the float64
//! plain recurrence and the float64 replay reference (`ReplayCache`): outputs, checkpoints,
//! counters after every step (against the host rule) and the logical state (checkpoint ⊕
//! ring), over ≥ 3 windows, with rows joining the batch at different steps (so every row is at
//! a different `h`; their counters are admitted into whichever buffer is current), padding
//! rows and the padding slot poisoned in both counter buffers, and the written buffer poisoned
//! before every step (every live row must be written, nothing else).

mod ssm_util;

use replay_kernels::ssm::kernels::{initial_flush_flag, META_WORDS};
use replay_kernels::ssm::reference::replay::ReplayCache;
use replay_kernels::ssm::reference::{recurrent_step, StepInput};
use replay_kernels::ssm::shapes::{ModelShape, CPU_TEST};
use replay_runtime::ArgValue;
use ssm_util::*;

/// A wide `dk` (64 key columns per state row), 2 heads per group.
const WIDE_KEYS: ModelShape = ModelShape {
    name: "wide-keys",
    dv: 8,
    dk: 64,
    heads: 4,
    groups: 2,
    ..CPU_TEST
};

/// A `dv` that is not a power of two: `BV = 4` programs straddle two heads (a group's 12 rows).
const ODD: ModelShape = ModelShape {
    name: "odd",
    dv: 6,
    dk: 8,
    heads: 4,
    groups: 2,
    ..CPU_TEST
};

/// Eight heads of 6 rows in one group (48 rows): `BV = 16` programs touch 3 or 4 heads.
const MANY_HEADS: ModelShape = ModelShape {
    name: "many-heads",
    dv: 6,
    dk: 8,
    heads: 8,
    groups: 1,
    ..CPU_TEST
};

struct Case {
    shape: ModelShape,
    l: usize,
    gated: bool,
    bv: usize,
    early: bool,
    /// The step's `PREFETCH` (a flush's checkpoint tile asked of L2 before its blocks).
    prefetch: bool,
    /// The step's `FR` (state rows per flush block).
    fr: usize,
    /// Two state precisions: a flush writes the f16 checkpoint too.
    lp: bool,
    warps: u32,
    seed: u64,
}

fn run(case: Case) {
    let Case {
        shape,
        l,
        gated,
        bv,
        early,
        prefetch,
        fr,
        lp,
        warps,
        seed,
    } = case;
    let mut rng = Rng(seed);
    let (dev, s) = device();
    // Row 0 is always padding; rows 1..=4 join at different steps into shuffled slots; slot 5
    // (of 0..6) is never used.
    let n_slots = 6;
    let batch = 5usize;
    let join = [usize::MAX, 0, 1, 3, 6];
    let mut slot_of = vec![1usize, 2, 3, 4];
    rng.shuffle(&mut slot_of);
    slot_of.insert(0, 0);
    let steps = 3 * l + 7;

    let params = random_params(&mut rng, shape);
    let states = random_states(&mut rng, shape, n_slots);
    let mut rc = ReplayCache::new(states.clone(), l, 0);
    let mut truth = states.clone();
    let mut ring = Ring::new(&s, shape, &states, l, initial_flush_flag(0, 0, l));
    let slot0 = ring.slot0_bits(&s, shape);
    let unused = ring.ckpt_of(&s, shape, 5);
    let par = param_bufs(&s, &params);

    let config = ReplayConfig {
        early,
        prefetch,
        fr,
        lp,
        ..ReplayConfig::new(shape, l, 0, gated, bv, 1, warps)
    };
    let step_k = config.step(&dev);
    let per_row = shape.heads * shape.dv;

    let mut flushes = 0;
    for t in 0..steps {
        let slots: Vec<usize> = (0..batch)
            .map(|r| if r > 0 && t >= join[r] { slot_of[r] } else { 0 })
            .collect();
        // A row joining now gets fresh counters in the current buffer (what admission does).
        for r in 1..batch {
            if t == join[r] {
                ring.admit(&s, slot_of[r], initial_flush_flag(0, 0, l));
            }
        }
        let live: Vec<bool> = slots.iter().map(|&x| x != 0).collect();
        let inputs: Vec<StepInput> = (0..batch).map(|_| random_input(&mut rng, shape, gated)).collect();
        let tokens = input_bufs(&s, &pack(shape, &live_tokens(&inputs, &live)));
        let slot_idx = buf(&s, &slots.iter().map(|&x| x as i32).collect::<Vec<_>>());
        let out = poisoned_out(&s, batch * per_row);
        let meta_before = host(&s, &ring.meta);
        ring.poison_meta_out(&s);
        let mut args = token_args(&tokens, &par, &slot_idx);
        args.extend(ring.step_args());
        args.extend([
            arg(&out),
            ArgValue::I32(batch as i32),
            ArgValue::I32(n_slots as i32),
            ArgValue::I32(0),
        ]);
        // With LP non-flush rows read the f16 checkpoints: their rounding bounds the outputs'
        // extra error.
        let extra: Vec<f64> = if lp {
            let c = host(&s, &ring.ckpt);
            (0..batch)
                .flat_map(|r| f16_checkpoint_bound(shape, &c, slots[r], &inputs[r]))
                .collect()
        } else {
            vec![]
        };
        launch(&step_k, &s, config.step_grid(batch), &args);
        drop(args);
        let what = format!("L={l} step {t}");
        assert_eq!(
            host(&s, &ring.meta),
            meta_before,
            "{what}: the step wrote the counters it reads"
        );
        // Exactly the live rows' slots were written.
        let written = host(&s, &ring.meta_out);
        for sl in 1..n_slots {
            let w = &written[sl * META_WORDS..(sl + 1) * META_WORDS];
            if slots.contains(&sl) {
                assert!(
                    !w.contains(&META_OUT_POISON),
                    "{what}: counters of slot {sl} not written: {w:?}"
                );
            } else {
                assert_eq!(
                    w, [META_OUT_POISON; META_WORDS],
                    "{what}: counters of idle slot {sl} written"
                );
            }
        }
        ring.swap();
        if lp {
            ring.check_lp(&s, shape, &(1..n_slots).collect::<Vec<_>>(), &what);
        }
        let mut want = vec![0.0; batch * per_row];
        let mut want_replay = vec![0.0; batch * per_row];
        recurrent_step(&params, &mut truth, &slots, &inputs, &mut want);
        rc.decode_step(&params, &slots, &inputs, &mut want_replay);
        check_outputs_within(&format!("{what} y"), &host(&s, &out), &want, &live, per_row, &extra);
        for &sl in slots.iter().filter(|&&x| x != 0) {
            let before = &meta_before[sl * META_WORDS..(sl + 1) * META_WORDS];
            let flushed = before[2] != 0;
            flushes += flushed as usize;
            let h_want = if flushed { 0 } else { before[1] + 1 };
            let after = ring.meta_words(&s, sl);
            assert_eq!(
                after,
                [
                    before[0],
                    h_want,
                    initial_flush_flag(h_want as usize, 0, l) as i32,
                    before[3]
                ],
                "{what}: counters of slot {sl} (before {before:?})"
            );
            assert_eq!(after[1] as usize, rc.committed(sl), "{what}: h of slot {sl}");
            check_state(
                &format!("{what} ckpt slot {sl}"),
                &ring.ckpt_of(&s, shape, sl),
                rc.checkpoints().slot(sl),
            );
            check_state(
                &format!("{what} logical state slot {sl}"),
                &ring.logical_state(&s, shape, &params, sl),
                truth.slot(sl),
            );
        }
        assert_eq!(
            ring.slot0_bits(&s, shape),
            slot0,
            "{what}: the padding slot was touched"
        );
    }
    assert_eq!(
        ring.ckpt_of(&s, shape, 5)
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>(),
        unused.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    // Every live row went through at least 3 flushes.
    assert!(flushes >= 3 * 4, "only {flushes} flushes");
}

#[test]
fn window_1_is_conventional_decoding() {
    run(Case {
        shape: CPU_TEST,
        l: 1,
        gated: true,
        bv: 8,
        early: false,
        prefetch: false,
        fr: 2,
        lp: false,
        warps: 4,
        seed: 1,
    });
}

/// Every step flushes; `EARLY` with all rows in one block (`FR ≥ BV`) folds the tile it
/// loaded before the counters.
#[test]
fn window_1_early_folds_the_early_tile() {
    run(Case {
        shape: CPU_TEST,
        l: 1,
        gated: false,
        bv: 8,
        early: true,
        prefetch: false,
        fr: 8,
        lp: false,
        warps: 2,
        seed: 11,
    });
}

#[test]
fn window_4_without_gate_two_programs_per_head() {
    run(Case {
        shape: CPU_TEST,
        l: 4,
        gated: false,
        bv: 4,
        early: false,
        prefetch: false,
        fr: 2,
        lp: false,
        warps: 4,
        seed: 2,
    });
}

#[test]
fn window_16_one_head_per_program() {
    run(Case {
        shape: CPU_TEST,
        l: 16,
        gated: true,
        bv: 8,
        early: true,
        prefetch: false,
        fr: 4,
        lp: false,
        warps: 4,
        seed: 3,
    });
}

#[test]
fn window_32_without_gate() {
    run(Case {
        shape: CPU_TEST,
        l: 32,
        gated: false,
        bv: 8,
        early: false,
        prefetch: false,
        fr: 8,
        lp: false,
        warps: 4,
        seed: 4,
    });
}

#[test]
fn window_4_programs_straddle_heads() {
    run(Case {
        shape: ODD,
        l: 4,
        gated: true,
        bv: 4,
        early: true,
        prefetch: false,
        fr: 1,
        lp: false,
        warps: 4,
        seed: 5,
    });
}

/// The latency-bound batches' warp counts (1 and 2), over straddling programs with one flush
/// block and over several flush blocks.
#[test]
fn one_and_two_warps() {
    for (i, warps) in [1, 2].into_iter().enumerate() {
        run(Case {
            shape: ODD,
            l: 4,
            gated: i == 0,
            bv: 4,
            early: true,
            prefetch: false,
            fr: 2,
            lp: false,
            warps,
            seed: 40 + i as u64,
        });
        run(Case {
            shape: WIDE_KEYS,
            l: 8,
            gated: i == 1,
            bv: 8,
            early: i == 0,
            prefetch: false,
            fr: 4,
            lp: false,
            warps,
            seed: 42 + i as u64,
        });
    }
}

#[test]
fn window_4_flush_in_several_row_blocks() {
    run(Case {
        shape: WIDE_KEYS,
        l: 4,
        gated: true,
        bv: 8,
        early: false,
        prefetch: false,
        fr: 2,
        lp: false,
        warps: 4,
        seed: 6,
    });
}

#[test]
fn two_precisions_flushes_write_the_f16_checkpoint() {
    // LP: every flush block writes the f16 of the checkpoint rows it folds (several row
    // blocks, and one block of all rows after EARLY loaded the f16 tile); non-flush steps read
    // the f16 checkpoint (outputs within its rounding bound of the recurrence).
    for (i, (early, fr)) in [(false, 2), (true, 8)].into_iter().enumerate() {
        run(Case {
            shape: WIDE_KEYS,
            l: 4,
            gated: true,
            bv: 8,
            early,
            prefetch: false,
            fr,
            lp: true,
            warps: 4,
            seed: 60 + i as u64,
        });
    }
}

#[test]
fn window_8_programs_over_several_heads() {
    run(Case {
        shape: MANY_HEADS,
        l: 8,
        gated: true,
        bv: 16,
        early: false,
        prefetch: false,
        fr: 4,
        lp: false,
        warps: 4,
        seed: 7,
    });
}

/// Every point of the tuner's replay-step search space (`BV`, `num_warps`, `EARLY`,
/// `PREFETCH`, `FR`; `min_blocks` only caps registers) decodes correctly on the emulator or a
/// GPU, where the tiles choose layouts and PTX; on the interpreter, where they only change the
/// trace, one point per axis value. `FR ≥ BV` with `EARLY` folds the early tile.
#[test]
fn every_tuning_point_matches_the_recurrence() {
    // (EARLY, PREFETCH, FR)
    let flags = [
        (false, false, 8),
        (false, false, 16),
        (false, true, 8),
        (true, false, 8),
        (true, false, 128),
    ];
    let points: Vec<(usize, u32, (bool, bool, usize))> = if device().0.backend() == replay_runtime::Backend::Interpreter
    {
        vec![
            (16, 4, (false, false, 8)),
            (32, 8, (true, false, 128)),
            (64, 4, (true, false, 8)),
            (128, 8, (false, true, 16)),
        ]
    } else {
        [16, 32, 64, 128]
            .into_iter()
            .flat_map(|bv| [4, 8].into_iter().flat_map(move |w| flags.map(|f| (bv, w, f))))
            .collect()
    };
    for (i, (bv, warps, (early, prefetch, fr))) in points.into_iter().enumerate() {
        run(Case {
            shape: TUNING,
            l: 4,
            gated: i % 2 == 0,
            bv,
            early,
            prefetch,
            fr,
            lp: false,
            warps,
            seed: 100 + i as u64,
        });
    }
}
