use replay_dsl::prelude::*;
use replay_macros::kernel;

#[kernel]
fn total(x: Ptr<f32>, #[constexpr] BLOCK: usize) {
    let v = load(x + arange(BLOCK), true);
    return sum(v, 0);
}

#[kernel]
fn with_output(x: Ptr<f32>) -> f32 {
    let _ = x;
}

fn main() {}
