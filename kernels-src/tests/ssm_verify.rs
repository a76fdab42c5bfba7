//! Speculative decoding with `mamba2_verify` + `mamba2_commit` on the interpreter: random draft
//! counts and random accepted counts over many steps against the float64 plain recurrence on
//! the accepted tokens only (outputs of every draft, logical states) and the float64
//! `ReplayCache` (checkpoints, counters, flush flags); optionally interleaved with standard
//! decode steps (`mamba2_replay_step`). Also the conventional baseline `mamba2_spec_baseline`.

mod ssm_util;

use replay_kernels::ssm::kernels::initial_flush_flag;
use replay_kernels::ssm::kernels::verify::{draft_columns, half_record_rows};
use replay_kernels::ssm::reference::replay::ReplayCache;
use replay_kernels::ssm::reference::{recurrent_step, Mamba2Params, SlotStates, StepInput};
use replay_kernels::ssm::shapes::{ModelShape, CPU_TEST};
use replay_runtime::ArgValue;
use ssm_util::*;

struct Case {
    shape: ModelShape,
    l: usize,
    t_max: usize,
    steps: usize,
    /// Probability of a standard decode step instead of a verification.
    p_decode: f64,
    gated: bool,
    bv: usize,
    hb: usize,
    warps: u32,
    /// Key columns per flush block (`FC`) of both kernels.
    fc: usize,
    /// The verification's `PREFETCH`.
    prefetch: bool,
    /// The verification's `SHARED_WEIGHTS`.
    shared_weights: bool,
    /// The verification's `ASYNC`.
    async_copy: bool,
    /// The verification's `TIERS` (half-size record tiles where the records fit).
    tiers: bool,
    /// `TAIL` of the verification and the fold (the last value block in a tile of its rows).
    tail: bool,
    /// The fold's `RELOAD_KEYS` (the keys loaded with each head's tiles; `fc` ≥ `dk`).
    reload_keys: bool,
    /// The verification's `CHAINED` (its products chained on their accumulators).
    chained: bool,
    /// The decode step's `EARLY` (its checkpoint load before the counters).
    early: bool,
    /// Two state precisions (`LP` of every kernel): the verification reads the f16 checkpoint.
    lp: bool,
    /// The fold verifies the rows it folds (its `VERIFY`, the verification's `FOLD_VERIFIES`).
    fold_verifies: bool,
    seed: u64,
}

impl Case {
    /// A case of `shape` drawing from `seed`: window 16, up to 4 drafts, 60 steps of which a
    /// fifth are decode steps, gated, `BV = 8` with 2 heads per program and 4 warps, `FC = 8`,
    /// and every option off but `SHARED_WEIGHTS`.
    fn new(shape: ModelShape, seed: u64) -> Case {
        Case {
            shape,
            l: 16,
            t_max: 4,
            steps: 60,
            p_decode: 0.2,
            gated: true,
            bv: 8,
            hb: 2,
            warps: 4,
            fc: 8,
            prefetch: false,
            shared_weights: true,
            async_copy: false,
            tiers: false,
            tail: false,
            reload_keys: false,
            chained: false,
            early: false,
            lp: false,
            fold_verifies: false,
            seed,
        }
    }
}

/// Truth for one verification: outputs `[row][s][head][dv]` of the drafts from the recurrence
/// (each draft sees the committed state and the drafts before it).
fn truth_verify(
    params: &Mamba2Params,
    truth: &SlotStates,
    slots: &[usize],
    drafts: &[Vec<StepInput>],
    n: usize,
) -> Vec<f64> {
    let shape = truth.shape();
    let per_tok = shape.heads * shape.dv;
    let mut tmp = truth.clone();
    let mut out = vec![0.0; slots.len() * n * per_tok];
    for s in 0..n {
        let inputs: Vec<StepInput> = drafts.iter().map(|d| d[s].clone()).collect();
        let mut o = vec![0.0; slots.len() * per_tok];
        recurrent_step(params, &mut tmp, slots, &inputs, &mut o);
        for r in 0..slots.len() {
            out[(r * n + s) * per_tok..(r * n + s + 1) * per_tok].copy_from_slice(&o[r * per_tok..(r + 1) * per_tok]);
        }
    }
    out
}

/// Applies the first `accepted[r]` drafts of each row to `truth`.
fn truth_accept(
    params: &Mamba2Params,
    truth: &mut SlotStates,
    slots: &[usize],
    drafts: &[Vec<StepInput>],
    accepted: &[usize],
) {
    let shape = truth.shape();
    let max = accepted.iter().copied().max().unwrap_or(0);
    for s in 0..max {
        let sl: Vec<usize> = slots
            .iter()
            .zip(accepted)
            .map(|(&x, &a)| if s < a { x } else { 0 })
            .collect();
        let inputs: Vec<StepInput> = drafts.iter().map(|d| d[s].clone()).collect();
        let mut o = vec![0.0; slots.len() * shape.heads * shape.dv];
        recurrent_step(params, truth, &sl, &inputs, &mut o);
    }
}

fn run(case: Case) {
    let Case {
        shape,
        l,
        t_max,
        steps,
        p_decode,
        gated,
        bv,
        hb,
        warps,
        fc,
        prefetch,
        shared_weights,
        async_copy,
        tiers,
        tail,
        reload_keys,
        chained,
        early,
        lp,
        fold_verifies,
        seed,
    } = case;
    let mut rng = Rng(seed);
    let (dev, s) = device();
    let n_slots = 6;
    let batch = 5usize;
    let join = [usize::MAX, 0, 1, 2, 4];
    let mut slot_of = vec![1usize, 2, 3, 4];
    rng.shuffle(&mut slot_of);
    slot_of.insert(0, 0);
    let cap = l + t_max;

    let params = random_params(&mut rng, shape);
    let states = random_states(&mut rng, shape, n_slots);
    // The ReplayCache follows only pure speculative runs (its decode rule assumes h < L).
    let mut rc = (p_decode == 0.0).then(|| ReplayCache::new(states.clone(), l, t_max));
    let mut truth = states.clone();
    // Step kinds: None = decode step, Some(n) = verification of n drafts.
    let mut kinds: Vec<Option<usize>> = (0..=steps)
        .map(|_| {
            if rng.uniform() < p_decode {
                None
            } else {
                Some(rng.int(1, t_max))
            }
        })
        .collect();
    kinds[0] = Some(t_max);
    let next_drafts = |k: Option<usize>| k.unwrap_or(0);
    let ring = Ring::new(&s, shape, &states, cap, initial_flush_flag(0, next_drafts(kinds[0]), l));
    let slot0 = ring.slot0_bits(&s, shape);
    let par = param_bufs(&s, &params);
    let config = ReplayConfig {
        fc,
        prefetch,
        shared_weights,
        async_copy,
        tiers,
        tail,
        reload_keys,
        chained,
        early,
        lp,
        fold_verifies,
        ..ReplayConfig::new(shape, l, t_max, gated, bv, hb, warps)
    };
    let verify_k = config.verify(&dev);
    let fold_k = config.fold(&dev);
    let step_k = config.step(&dev);
    let commit_k = commit_kernel(&dev, l, t_max, 8, 1);
    let per_tok = shape.heads * shape.dv;
    let grid = config.grid(batch);

    let (mut flushes, mut verifies, mut wraps) = (0, 0, 0);
    // Verified rows by record tile (with TIERS: half the record rows, all of them).
    let tq = draft_columns(t_max);
    let half_rows = half_record_rows(l, t_max);
    let mut tiles_taken = [0usize; 2];
    for t in 0..steps {
        let slots: Vec<usize> = (0..batch)
            .map(|r| if r > 0 && t >= join[r] { slot_of[r] } else { 0 })
            .collect();
        let live: Vec<bool> = slots.iter().map(|&x| x != 0).collect();
        let slot_idx = buf(&s, &slots.iter().map(|&x| x as i32).collect::<Vec<_>>());
        let what = format!("L={l} T={t_max} step {t} ({:?})", kinds[t]);
        for &sl in slots.iter().filter(|&&x| x != 0) {
            flushes += ring.meta_of(&s, sl).2 as usize;
        }
        let n_next = next_drafts(kinds[t + 1]);
        let mut accepted = vec![0usize; batch];
        match kinds[t] {
            Some(n) => {
                verifies += 1;
                for &sl in slots.iter().filter(|&&x| x != 0) {
                    let fits = half_rows.is_some_and(|half| ring.meta_of(&s, sl).1 + tq <= half);
                    tiles_taken[!fits as usize] += 1;
                }
                let drafts: Vec<Vec<StepInput>> = (0..batch)
                    .map(|_| (0..n).map(|_| random_input(&mut rng, shape, gated)).collect())
                    .collect();
                let tokens = input_bufs(&s, &pack(shape, &live_drafts(&drafts, &live)));
                let out = poisoned_out(&s, batch * n * per_tok);
                let mut args = token_args(&tokens, &par, &slot_idx);
                args.extend(ring.args());
                args.extend([
                    arg(&out),
                    ArgValue::I32(batch as i32),
                    ArgValue::I32(n_slots as i32),
                    ArgValue::I32(n as i32),
                ]);
                // With LP the verification reads the f16 checkpoints: their rounding bounds the
                // outputs' extra error.
                let ckpt_before = lp.then(|| host(&s, &ring.ckpt));
                launch(&verify_k, &s, grid, &args);
                // The pre-flush, for the rows whose flag is set (with the verification's
                // arguments: with `fold_verifies` it verifies those rows).
                launch(&fold_k, &s, grid, &args);
                let want = truth_verify(&params, &truth, &slots, &drafts, n);
                let extra: Vec<f64> = match &ckpt_before {
                    Some(c) => (0..batch)
                        .flat_map(|r| {
                            let slot = slots[r];
                            drafts[r]
                                .iter()
                                .flat_map(move |tok| f16_checkpoint_bound(shape, c, slot, tok))
                        })
                        .collect(),
                    None => vec![],
                };
                check_outputs_within(&format!("{what} y"), &host(&s, &out), &want, &live, n * per_tok, &extra);
                if let Some(rc) = rc.as_mut() {
                    let mut o = vec![0.0; batch * n * per_tok];
                    rc.verify(&params, &slots, &drafts, &mut o);
                }
                for (r, &lv) in live.iter().enumerate() {
                    if lv {
                        accepted[r] = rng.int(0, n);
                    }
                }
                truth_accept(&params, &mut truth, &slots, &drafts, &accepted);
            }
            None => {
                let inputs: Vec<StepInput> = (0..batch).map(|_| random_input(&mut rng, shape, gated)).collect();
                let tokens = input_bufs(&s, &pack(shape, &live_tokens(&inputs, &live)));
                let out = poisoned_out(&s, batch * per_tok);
                let mut args = token_args(&tokens, &par, &slot_idx);
                // The step's own counter output (`meta_out`) is left aside: the commit below
                // advances `meta` in place, the one-buffer form of the same rule.
                args.extend(ring.step_args());
                args.extend([
                    arg(&out),
                    ArgValue::I32(batch as i32),
                    ArgValue::I32(n_slots as i32),
                    ArgValue::I32(n_next as i32),
                ]);
                // With LP a step that does not flush reads the f16 checkpoints, as the
                // verification does: their rounding bounds the outputs' extra error.
                let extra: Vec<f64> = match lp.then(|| host(&s, &ring.ckpt)) {
                    Some(c) => (0..batch)
                        .flat_map(|r| f16_checkpoint_bound(shape, &c, slots[r], &inputs[r]))
                        .collect(),
                    None => vec![],
                };
                launch(&step_k, &s, config.step_grid(batch), &args);
                let mut want = vec![0.0; batch * per_tok];
                recurrent_step(&params, &mut truth, &slots, &inputs, &mut want);
                check_outputs_within(&format!("{what} y"), &host(&s, &out), &want, &live, per_tok, &extra);
            }
        }
        let starts: Vec<usize> = slots
            .iter()
            .map(|&sl| if sl != 0 { ring.meta_of(&s, sl).0 } else { 0 })
            .collect();
        let acc_buf = buf(&s, &accepted.iter().map(|&x| x as i32).collect::<Vec<_>>());
        let commit = commit_args(
            &slot_idx,
            &acc_buf,
            &ring.meta,
            (batch, n_slots),
            kinds[t].is_some(),
            n_next,
        );
        launch(&commit_k, &s, (1, 1, 1), &commit);
        if lp {
            // Every flush (the fold, a decode step's) wrote both checkpoints.
            ring.check_lp(&s, shape, &(1..n_slots).collect::<Vec<_>>(), &what);
        }
        if let Some(rc) = rc.as_mut() {
            rc.commit(&slots, &accepted, n_next);
        }
        for (r, &sl) in slots.iter().enumerate() {
            if sl == 0 {
                continue;
            }
            let (start, h, flag) = ring.meta_of(&s, sl);
            wraps += (start < starts[r]) as usize;
            assert!(h <= l, "{what}: h = {h} > L");
            assert_eq!(flag, initial_flush_flag(h, n_next, l), "{what}: flag of slot {sl}");
            if let Some(rc) = rc.as_ref() {
                assert_eq!(h, rc.committed(sl), "{what}: h of slot {sl}");
                assert_eq!(flag, rc.flush_pending(sl), "{what}: flag of slot {sl}");
                check_state(
                    &format!("{what} ckpt slot {sl}"),
                    &ring.ckpt_of(&s, shape, sl),
                    rc.checkpoints().slot(sl),
                );
            }
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
    assert!(flushes >= 3 * 4, "only {flushes} flushes");
    assert!(verifies >= steps / 2);
    assert!(wraps >= 1, "the ring never wrapped");
    if tiers {
        assert!(half_rows.is_some(), "L={l} T={t_max}: no half-size record tile");
        assert!(
            tiles_taken.iter().all(|&n| n > 0),
            "L={l} T={t_max}: rows by record tile {tiles_taken:?}, both wanted"
        );
    }
}

#[test]
fn speculative_window_4_drafts_3() {
    run(Case {
        l: 4,
        t_max: 3,
        steps: 30,
        p_decode: 0.0,
        bv: 4,
        hb: 3,
        fc: 32,
        prefetch: true,
        shared_weights: false,
        ..Case::new(CPU_TEST, 11)
    });
}

/// Two warps on 32 value rows: one m16 row tile each, no K split across warps (the per-warp
/// shape of Super's tile that Nano's 80 rows could take), with Nano's options (record tiers,
/// each head's weights in its iteration), with ASYNC in both state precisions and without it
/// in two (Nano's tuned two-precision tile at B = 256, T = 8).
#[test]
fn two_warps_take_one_row_tile_each() {
    for (i, (async_copy, lp)) in [(true, false), (true, true), (false, true)].into_iter().enumerate() {
        run(Case {
            bv: 32,
            warps: 2,
            fc: 32,
            shared_weights: false,
            async_copy,
            tiers: true,
            lp,
            ..Case::new(TUNING, 300 + i as u64)
        });
    }
}

#[test]
fn speculative_window_16_drafts_4_one_head_per_program() {
    run(Case {
        steps: 40,
        p_decode: 0.0,
        gated: false,
        hb: 1,
        async_copy: true,
        ..Case::new(CPU_TEST, 12)
    });
}

/// Shapes whose value rows `BV` does not divide (one group of 4 heads; 4 · 20 and 8 · 19 value
/// rows per group, which the replay step's `BV = 8` and `16` divide).
const DV_20: ModelShape = ModelShape {
    name: "dv-20",
    dv: 20,
    heads: 4,
    groups: 1,
    ..CPU_TEST
};
const DV_19: ModelShape = ModelShape {
    name: "dv-19",
    dv: 19,
    heads: 8,
    groups: 1,
    ..CPU_TEST
};

/// Value rows that `BV` does not divide (Nano's 80 at BV32: 32 + 32 + 16): the last value block
/// of the verification and of its fold masked, or with `TAIL` in a smaller tile, of exactly its
/// rows (20 at BV8: 8 + 8 + 4; at BV16: 16 + 4) or masked (19 at BV8: 8 + 8 + 3 in a tile of 4);
/// with `PREFETCH` or `ASYNC` (the tail tile's rows through a buffer overlaying the others'),
/// tiers and two precisions, with decode steps between verifications.
#[test]
fn the_last_value_block_is_masked_or_takes_a_smaller_tile() {
    // (shape, BV, ASYNC, TIERS, LP, TAIL)
    let cases = [
        (DV_20, 8, false, false, false, true),
        (DV_20, 16, true, true, true, true),
        (DV_19, 8, true, true, false, true),
        (DV_19, 8, false, false, true, true),
        (DV_20, 16, true, false, false, false),
        (DV_19, 8, false, true, true, false),
    ];
    for (i, (shape, bv, async_copy, tiers, lp, tail)) in cases.into_iter().enumerate() {
        run(Case {
            gated: i % 2 == 0,
            bv,
            prefetch: !async_copy,
            shared_weights: i % 2 == 1,
            async_copy,
            tiers,
            tail,
            lp,
            ..Case::new(shape, 500 + i as u64)
        });
    }
}

/// The fold's `RELOAD_KEYS`: the group's keys loaded with each head's tiles (one block of all
/// key columns, `FC = DK`) instead of once before the heads; plain and `PREFETCH` head loops,
/// masked last value blocks and tail tiles, one and two precisions.
#[test]
fn the_fold_reloads_its_keys_per_head() {
    // (shape, BV, HB, PREFETCH, TAIL, LP)
    let cases = [
        (CPU_TEST, 8, 3, false, false, false),
        (CPU_TEST, 4, 1, true, false, true),
        (DV_20, 8, 2, false, true, true),
        (DV_19, 8, 4, true, false, false),
    ];
    for (i, (shape, bv, hb, prefetch, tail, lp)) in cases.into_iter().enumerate() {
        run(Case {
            gated: i % 2 == 0,
            bv,
            hb,
            fc: shape.dk,
            prefetch,
            tail,
            reload_keys: true,
            lp,
            ..Case::new(shape, 900 + i as u64)
        });
    }
}

/// `TIERS`: rows whose records fit half the record rows take a half-size tile, the others the
/// full one, both within one launch (rows at different `h`); plain, `ASYNC` and two-precision
/// head loops, weights shared or per head, with decode steps between verifications. The run
/// asserts that both tiles were taken.
#[test]
fn record_tiers_match_the_recurrence() {
    let cases = [
        (16, 4, false, true, false),
        (24, 8, true, false, false),
        (16, 3, true, true, true),
    ];
    for (i, (l, t_max, async_copy, shared_weights, lp)) in cases.into_iter().enumerate() {
        run(Case {
            l,
            t_max,
            steps: 48,
            gated: i % 2 == 0,
            hb: 1,
            shared_weights,
            async_copy,
            tiers: true,
            lp,
            ..Case::new(CPU_TEST, 40 + i as u64)
        });
    }
}

/// `VERIFY` / `FOLD_VERIFIES`: the rows whose flag is set are verified by the fold from their
/// folded checkpoints (the verification leaves them), with rows at different `h` in one launch:
/// one and two precisions, all key columns at once and in blocks (`FC` < `dk`: the products
/// with the queries summed over the blocks), gated and not, a tail tile, heads' loads issued a
/// head ahead (`PREFETCH`, the drafts' per-head inputs with them) and not, with decode steps
/// between verifications.
#[test]
fn the_fold_verifies_the_rows_it_folds() {
    let cases = [
        // (L, T, FC, lp, tail, gated)
        (16, 4, 32, false, false, true),
        (8, 8, 8, false, false, false),
        (16, 3, 16, true, false, true),
        (12, 4, 32, false, true, true),
    ];
    for (i, (l, t_max, fc, lp, tail, gated)) in cases.into_iter().enumerate() {
        let shape = if tail { DV_20 } else { CPU_TEST };
        run(Case {
            l,
            t_max,
            fc,
            lp,
            tail,
            gated,
            hb: if tail { 2 } else { 3 },
            fold_verifies: true,
            async_copy: i % 2 == 1,
            prefetch: i % 2 == 0,
            tiers: i == 0,
            ..Case::new(shape, 70 + i as u64)
        });
    }
}

/// `CHAINED`: the products (`S_ckpt Q`, `Kᵀ Q`, `V (W ⊙ Kᵀ Q)`) chained on their accumulators
/// (`DotPrecision::Tf32x3Chained`), one and two precisions, with and without record tiers, at a
/// shape whose products fit the tensor cores (`BV` 16, `dk` 32) where kernels run compiled.
#[test]
fn chained_products_match_the_recurrence() {
    for (i, (lp, tiers)) in [(false, true), (true, false)].into_iter().enumerate() {
        run(Case {
            bv: 16,
            chained: true,
            tiers,
            lp,
            ..Case::new(TUNING, 70 + i as u64)
        });
    }
}

#[test]
fn two_precisions_verify_from_the_f16_checkpoint() {
    // LP: every flush (decode steps' and the fold) writes the f16 checkpoint with the f32 one,
    // the verification reads it (plain, PREFETCH and ASYNC head loops); outputs stay within the
    // bf16 tolerance of the recurrence, the f16 copy equal to the f16 of the checkpoint.
    for (i, (prefetch, async_copy)) in [(false, false), (true, false), (false, true)].into_iter().enumerate() {
        run(Case {
            l: 8,
            steps: 30,
            p_decode: 0.3,
            gated: i != 1,
            hb: 3,
            prefetch,
            shared_weights: false,
            async_copy,
            lp: true,
            ..Case::new(CPU_TEST, 40 + i as u64)
        });
    }
}

#[test]
fn speculative_window_8_drafts_8_mixed_with_decode_steps() {
    run(Case {
        l: 8,
        t_max: 8,
        steps: 40,
        p_decode: 0.3,
        hb: 3,
        fc: 4,
        prefetch: true,
        shared_weights: false,
        early: true,
        ..Case::new(CPU_TEST, 13)
    });
}

/// The snapshot-per-draft baseline on `CPU_TEST` (whole heads per program) and on `STRADDLE`
/// (programs straddling heads).
#[test]
fn spec_baseline_snapshots_every_draft() {
    spec_baseline_case(CPU_TEST, 4, 21);
    spec_baseline_case(STRADDLE, 4, 22);
}

fn spec_baseline_case(shape: ModelShape, bv: usize, seed: u64) {
    let mut rng = Rng(seed);
    let (dev, s) = device();
    let batch = 3usize;
    let n_slots = 1 + 2 * 5; // padding + per row (1 source + 4 snapshot slots); row 1 is padding
    let params = random_params(&mut rng, shape);
    let mut truth = random_states(&mut rng, shape, n_slots);
    let par = param_bufs(&s, &params);
    let nst = shape.heads * shape.state_elems();
    let mut state_host: Vec<f32> = (0..n_slots)
        .flat_map(|sl| truth.slot(sl).iter().map(|&v| v as f32))
        .collect();
    state_host[..nst].fill(f32::NAN);
    let mut state = buf(&s, &state_host);
    let per_tok = shape.heads * shape.dv;
    for gated in [true, false] {
        let config = DecodeConfig {
            shape,
            gated,
            bv,
            num_warps: 4,
        };
        let k = config.spec_baseline(&dev);
        for _ in 0..3 {
            let n = rng.int(1, 4);
            // Row 0 → slots 1 (source), 2..; row 2 → slots 6, 7..; row 1 is padding.
            let src = [1usize, 0, 6];
            let mut snaps = vec![0i32; batch * n];
            for r in [0usize, 2] {
                for t in 0..n {
                    snaps[r * n + t] = (src[r] + 1 + t) as i32;
                }
            }
            let live = [true, false, true];
            let drafts: Vec<Vec<StepInput>> = (0..batch)
                .map(|_| (0..n).map(|_| random_input(&mut rng, shape, gated)).collect())
                .collect();
            let tokens = input_bufs(&s, &pack(shape, &live_drafts(&drafts, &live)));
            let slot_idx = buf(&s, &src.iter().map(|&x| x as i32).collect::<Vec<_>>());
            let snap_idx = buf(&s, &snaps);
            let out = poisoned_out(&s, batch * n * per_tok);
            let mut args = token_args(&tokens, &par, &slot_idx);
            args.extend([
                arg(&snap_idx),
                arg(&state),
                arg(&out),
                ArgValue::I32(batch as i32),
                ArgValue::I32(n_slots as i32),
                ArgValue::I32(n as i32),
            ]);
            launch(&k, &s, config.grid(batch), &args);
            let want = truth_verify(&params, &truth, &src, &drafts, n);
            check_outputs("baseline y", &host(&s, &out), &want, &live, n * per_tok);
            let got = host(&s, &state);
            assert!(got[..nst].iter().all(|v| v.is_nan()), "padding slot touched");
            // Snapshot t of row r equals the recurrence after drafts 0..=t.
            let mut tmp = truth.clone();
            for t in 0..n {
                let inputs: Vec<StepInput> = drafts.iter().map(|d| d[t].clone()).collect();
                let mut o = vec![0.0; batch * per_tok];
                recurrent_step(&params, &mut tmp, &src, &inputs, &mut o);
                for r in [0usize, 2] {
                    let sl = snaps[r * n + t] as usize;
                    check_state(
                        &format!("snapshot {t} of row {r}"),
                        &slot_f64(&got, sl, nst),
                        tmp.slot(src[r]),
                    );
                }
            }
            // The source states are unchanged; accept a random count and move on from there.
            for r in [0usize, 2] {
                assert_eq!(
                    slot_f64(&got, src[r], nst),
                    truth.slot(src[r]),
                    "source state of row {r} changed"
                );
            }
            let accepted: Vec<usize> = (0..batch).map(|_| rng.int(1, n)).collect();
            truth_accept(&params, &mut truth, &src, &drafts, &accepted);
            // The state manager would swap slot indices; here copy the accepted snapshot back.
            let mut h = host(&s, &state);
            for r in [0usize, 2] {
                let sl = snaps[r * n + accepted[r] - 1] as usize;
                let snap: Vec<f32> = h[sl * nst..(sl + 1) * nst].to_vec();
                h[src[r] * nst..(src[r] + 1) * nst].copy_from_slice(&snap);
                // Keep truth in the kernel's f32 values so that errors do not compound.
                truth
                    .slot_mut(src[r])
                    .iter_mut()
                    .zip(&snap)
                    .for_each(|(t, &v)| *t = v as f64);
            }
            state.copy_from_host(&s, &h).unwrap();
        }
    }
}

/// Every point of the tuner's verification search space (`BV`, `HB`, `num_warps`, `FC`,
/// `PREFETCH`, `SHARED_WEIGHTS`, `ASYNC`) verifies correctly on the emulator or a GPU, where the tiles
/// choose layouts, tensor-core plans and PTX; on the interpreter, one point per axis value.
#[test]
fn every_tuning_point_matches_the_recurrence() {
    let fallback = vec![
        (16, 1, 4, (16, false, true, false)),
        (32, 2, 8, (32, true, false, true)),
        (64, 4, 4, (16, true, true, false)),
    ];
    let flags = [
        (16, false, true, false),
        (16, true, false, false),
        (32, false, false, true),
        (16, false, true, true),
    ];
    let points = tuning_points(&flags, |_, _| true, fallback);
    for (i, (bv, hb, warps, (fc, prefetch, shared_weights, async_copy))) in points.into_iter().enumerate() {
        run(Case {
            l: 8,
            t_max: 8,
            steps: 24,
            gated: i % 2 == 0,
            bv,
            hb,
            warps,
            fc,
            prefetch,
            shared_weights,
            async_copy,
            early: i % 3 == 1,
            ..Case::new(TUNING, 200 + i as u64)
        });
    }
}
