//! `mamba2_commit` on the interpreter: the counter logic of both modes against a host model
//! and the reference `commit_rule`, with rows spread over several programs, padding rows and
//! slots outside the batch untouched. And the counter block of `mamba2_replay_step` (the
//! same rule, `advance_counters`, written into the second counter buffer): equal to the
//! commit after a decode step for every kind of next launch, every live row written exactly
//! once per step, nothing else.

mod ssm_util;

use replay_kernels::ssm::kernels::{initial_flush_flag, META_WORDS};
use replay_kernels::ssm::reference::replay::commit_rule;
use replay_kernels::ssm::shapes::CPU_TEST;
use replay_runtime::ArgValue;
use ssm_util::*;

#[test]
fn commit_counters_and_flags() {
    let mut rng = Rng(61);
    let (dev, s) = device();
    for (l, t) in [(16usize, 4usize), (1, 1), (5, 3), (8, 0)] {
        let cap = l + t;
        let k = commit_kernel(&dev, l, t, 16, 1);
        for round in 0..6 {
            let after_verify = t > 0 && round % 2 == 1;
            let next = if t == 0 || rng.uniform() < 0.3 {
                0
            } else {
                rng.int(1, t)
            };
            let batch = 37usize;
            let n_slots = 50usize;
            // Rows take distinct random slots; about one in five is padding.
            let mut pool: Vec<usize> = (1..n_slots).collect();
            rng.shuffle(&mut pool);
            let slots: Vec<usize> = (0..batch)
                .map(|r| if rng.uniform() < 0.2 { 0 } else { pool[r] })
                .collect();
            let mut meta = vec![0i32; n_slots * META_WORDS];
            for sl in 0..n_slots {
                let h = rng.int(0, l);
                let w = &mut meta[sl * META_WORDS..(sl + 1) * META_WORDS];
                w[0] = rng.int(0, cap - 1) as i32;
                w[1] = h as i32;
                w[2] = (rng.uniform() < 0.5) as i32;
                w[3] = 0;
            }
            meta[..META_WORDS].fill(META_POISON);
            let accepted: Vec<i32> = (0..batch).map(|_| rng.int(0, t.max(1)) as i32).collect();
            let meta_buf = buf(&s, &meta);
            let slot_idx = buf(&s, &slots.iter().map(|&x| x as i32).collect::<Vec<_>>());
            let accepted_buf = buf(&s, &accepted);
            let args = commit_args(
                &slot_idx,
                &accepted_buf,
                &meta_buf,
                (batch, n_slots),
                after_verify,
                next,
            );
            launch(&k, &s, (batch.div_ceil(16) as u32, 1, 1), &args);
            let got = host(&s, &meta_buf);
            let mut want = meta.clone();
            for (r, &sl) in slots.iter().enumerate() {
                if sl == 0 {
                    continue;
                }
                let w = &mut want[sl * META_WORDS..(sl + 1) * META_WORDS];
                let (start, h, flush) = (w[0] as usize, w[1] as usize, w[2] != 0);
                let (start, h) = if after_verify {
                    let (start, kept) = if flush { ((start + h) % cap, 0) } else { (start, h) };
                    let a = accepted[r] as usize;
                    if next > 0 {
                        // The reference rule: h + a, flush when h + a + T_next > L.
                        assert_eq!(
                            commit_rule(kept, a, next, l),
                            (kept + a, initial_flush_flag(kept + a, next, l))
                        );
                    }
                    (start, kept + a)
                } else if flush {
                    (start, 0)
                } else {
                    (start, h + 1)
                };
                w[0] = start as i32;
                w[1] = h as i32;
                w[2] = initial_flush_flag(h, next, l) as i32;
            }
            assert_eq!(
                got, want,
                "L={l} T={t} round {round} after_verify={after_verify} next={next}"
            );
        }
    }
}

/// `mamba2_replay_step` on random counters (any `h` of a window, either flag, a random
/// reserved word) and a random kind of next launch: `meta_out` (poisoned before) holds, for
/// every live row, exactly what `mamba2_commit` computes in place after a decode step (the
/// reserved word passed through), `meta` is not written, and the slots of padding rows and of
/// slots outside the batch keep their poison in `meta_out`.
#[test]
fn step_counters_equal_commit_after_decode() {
    let mut rng = Rng(62);
    let (dev, s) = device();
    let shape = CPU_TEST;
    let gated = true;
    for (l, t) in [(4usize, 0usize), (6, 3), (1, 1), (5, 5)] {
        let cap = l + t;
        let config = ReplayConfig::new(shape, l, t, gated, 4, 1, 4);
        let step_k = config.step(&dev);
        let commit_k = commit_kernel(&dev, l, t, 4, 1);
        let (batch, n_slots) = (9usize, 12usize);
        let params = random_params(&mut rng, shape);
        let par = param_bufs(&s, &params);
        let states = random_states(&mut rng, shape, n_slots);
        for round in 0..4 {
            let next = if t == 0 || round == 0 { 0 } else { rng.int(1, t) };
            let mut pool: Vec<usize> = (1..n_slots).collect();
            rng.shuffle(&mut pool);
            let slots: Vec<usize> = (0..batch)
                .map(|r| if r == 0 || rng.uniform() < 0.2 { 0 } else { pool[r] })
                .collect();
            let live: Vec<bool> = slots.iter().map(|&x| x != 0).collect();
            let mut meta = vec![0i32; n_slots * META_WORDS];
            for sl in 1..n_slots {
                // A decode step runs with h ≤ L − 1 (the flag of h = L − 1 is set).
                let h = rng.int(0, l - 1);
                let w = &mut meta[sl * META_WORDS..(sl + 1) * META_WORDS];
                w.copy_from_slice(&[
                    rng.int(0, cap - 1) as i32,
                    h as i32,
                    (h + 1 >= l || rng.uniform() < 0.3) as i32,
                    rng.int(0, 1000) as i32,
                ]);
            }
            meta[..META_WORDS].fill(META_POISON);
            let mut ring = Ring::new(&s, shape, &states, cap, false);
            ring.meta.copy_from_host(&s, &meta).unwrap();
            ring.poison_meta_out(&s);
            let poisoned = host(&s, &ring.meta_out);
            let inputs: Vec<_> = (0..batch).map(|_| random_input(&mut rng, shape, gated)).collect();
            let tokens = input_bufs(&s, &pack(shape, &live_tokens(&inputs, &live)));
            let slot_idx = buf(&s, &slots.iter().map(|&x| x as i32).collect::<Vec<_>>());
            let out = poisoned_out(&s, batch * shape.heads * shape.dv);
            let mut args = token_args(&tokens, &par, &slot_idx);
            args.extend(ring.step_args());
            args.extend([
                arg(&out),
                ArgValue::I32(batch as i32),
                ArgValue::I32(n_slots as i32),
                ArgValue::I32(next as i32),
            ]);
            launch(&step_k, &s, config.step_grid(batch), &args);
            let what = format!("L={l} T={t} round {round} next={next}");
            assert_eq!(
                host(&s, &ring.meta),
                meta,
                "{what}: the step wrote the counters it reads"
            );
            let stepped = host(&s, &ring.meta_out);
            // The commit after a decode step, in place on a copy of the same counters.
            let committed_buf = buf(&s, &meta);
            let accepted = buf(&s, &vec![-1i32; batch]);
            let cargs = commit_args(&slot_idx, &accepted, &committed_buf, (batch, n_slots), false, next);
            launch(&commit_k, &s, (batch.div_ceil(4) as u32, 1, 1), &cargs);
            let committed = host(&s, &committed_buf);
            for sl in 0..n_slots {
                let range = sl * META_WORDS..(sl + 1) * META_WORDS;
                if slots.contains(&sl) && sl != 0 {
                    assert_eq!(stepped[range.clone()], committed[range.clone()], "{what}: slot {sl}");
                    let (before, after) = (&meta[range.clone()], &stepped[range]);
                    let h = if before[2] != 0 { 0 } else { before[1] + 1 };
                    assert_eq!(
                        after,
                        [before[0], h, initial_flush_flag(h as usize, next, l) as i32, before[3]],
                        "{what}: slot {sl}"
                    );
                } else {
                    assert_eq!(stepped[range.clone()], poisoned[range], "{what}: slot {sl} written");
                }
            }
        }
    }
}
