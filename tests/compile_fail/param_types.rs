use replay_dsl::prelude::*;
use replay_macros::kernel;

#[kernel]
fn bad_params(x: Ptr<f64>, y: &[f32], n: usize, (a, b): (i32, i32), t: Tile<f32>) {}

#[kernel]
async unsafe fn bad_fn<T>(x: Ptr<f32>) {}

fn main() {}
