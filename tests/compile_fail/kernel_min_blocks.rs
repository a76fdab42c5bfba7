use replay_dsl::prelude::*;
use replay_macros::kernel;

#[kernel(min_blocks_per_sm = 0)]
fn zero(x: Ptr<f32>) {
    store(x + arange(32), 1.0, true);
}

#[kernel(num_warps = 8, min_blocks_per_sm = 9)]
fn too_many_threads(x: Ptr<f32>) {
    store(x + arange(32), 1.0, true);
}

#[kernel(min_blocks_per_sm = 2, min_blocks_per_sm = 2)]
fn twice(x: Ptr<f32>) {
    store(x + arange(32), 1.0, true);
}

#[kernel(num_warps = 4, min_blocks_per_sm = 4)]
fn fine(x: Ptr<f32>) {
    store(x + arange(32), 1.0, true);
}

fn main() {
    let _ = fine::Config::default();
}
