use replay_dsl::prelude::*;
use replay_macros::kernel;

#[kernel(tune(BLOCK = [64, 128]))]
fn tuned(x: Ptr<f32>, #[constexpr] BLOCK: usize) {
    store(x + arange(BLOCK), 1.0, true);
}

fn main() {}
