//! Vector addition: the "hello world" of tile kernels.

use replay_dsl::prelude::*;

/// `out[i] = x[i] + y[i]` for `i < n`, one `BLOCK`-wide tile per program.
#[kernel]
pub fn vector_add(
    #[extent(n)] x: Ptr<f32>,
    #[extent(n)] y: Ptr<f32>,
    #[extent(n)] out: Ptr<f32>,
    n: i32,
    #[constexpr(default = 1024)] BLOCK: usize,
) {
    let offs = program_id(0) * BLOCK + arange(BLOCK);
    let mask = offs < n;
    store(out + offs, load(x + offs, mask) + load(y + offs, mask), mask);
}

/// Float64 reference of [`vector_add`].
pub fn reference(x: &[f32], y: &[f32]) -> Vec<f64> {
    x.iter().zip(y).map(|(a, b)| *a as f64 + *b as f64).collect()
}
