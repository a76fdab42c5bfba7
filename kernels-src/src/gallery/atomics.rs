//! Reductions across programs with atomics: a histogram and a global maximum.

use replay_dsl::prelude::*;

/// `hist[b] += |{i < n : clamp(x[i], 0, BINS-1) = b}|`; `hist` must start zeroed.
#[kernel]
pub fn histogram(
    #[extent(n)] x: Ptr<i32>,
    #[extent(BINS)] hist: Ptr<i32>,
    n: i32,
    #[constexpr(default = 1024)] BLOCK: usize,
    #[constexpr(default = 64)] BINS: usize,
) {
    let offs = program_id(0) * BLOCK + arange(BLOCK);
    let mask = offs < n;
    let bin = minimum(maximum(load(x + offs, mask), 0), BINS - 1);
    atomic_add(hist + bin, 1, mask);
}

/// `result[0] = max(result[0], max_i x[i])` across all programs, with one atomic per program.
#[kernel]
pub fn global_max(
    #[extent(n)] x: Ptr<i32>,
    #[extent(1)] result: Ptr<i32>,
    n: i32,
    #[constexpr(default = 1024)] BLOCK: usize,
) {
    let offs = program_id(0) * BLOCK + arange(BLOCK);
    let mask = offs < n;
    let m = max_all(load_or(x + offs, mask, i32::MIN));
    atomic_max(result, m, true);
}

/// Reference of [`histogram`].
pub fn histogram_reference(x: &[i32], bins: usize) -> Vec<i64> {
    let mut h = vec![0i64; bins];
    for v in x {
        h[(*v).clamp(0, bins as i32 - 1) as usize] += 1;
    }
    h
}
