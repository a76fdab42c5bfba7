use replay_dsl::prelude::*;
use replay_macros::kernel;

#[kernel(num_warps = 3)]
fn not_a_power_of_two(x: Ptr<f32>) {
    store(x + arange(32), 1.0, true);
}

#[kernel(num_warps = 64)]
fn too_many(x: Ptr<f32>) {
    store(x + arange(32), 1.0, true);
}

#[kernel(num_warps = 4, num_warps = 8)]
fn twice(x: Ptr<f32>) {
    store(x + arange(32), 1.0, true);
}

#[kernel(num_warps = "8")]
fn not_an_integer(x: Ptr<f32>) {
    store(x + arange(32), 1.0, true);
}

fn main() {}
