//! `mamba2_commit` on the interpreter: the counter logic of both modes against a host model
//! and the reference `commit_rule`, with rows spread over several programs, padding rows and
//! slots outside the batch untouched.

mod ssm_util;

use replay_kernels::ssm::kernels::{initial_flush_flag, META_WORDS};
use replay_kernels::ssm::reference::replay::commit_rule;
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
