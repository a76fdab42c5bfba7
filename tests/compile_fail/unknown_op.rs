use replay_dsl::prelude::*;
use replay_macros::kernel;

#[kernel]
fn activation(x: Ptr<f32>, out: Ptr<f32>, #[constexpr] BLOCK: usize) {
    let offs = arange(BLOCK);
    store(out + offs, gelu(load(x + offs, true)), true);
}

fn main() {}
