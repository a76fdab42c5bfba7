use replay_dsl::prelude::*;
use replay_macros::kernel;

#[kernel]
fn copy(x: Ptr<f32>, out: Ptr<f32>, n: i32) {
    let offs = arange(n);
    let acc = zeros::<f32>([n]);
    store(out + offs, load(x + offs, true) + acc, true);
}

fn main() {}
