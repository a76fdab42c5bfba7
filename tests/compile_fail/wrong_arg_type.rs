use replay_dsl::prelude::*;
use replay_macros::kernel;

#[kernel]
fn mixed(x: Ptr<f32>, idx: Ptr<i32>, out: Ptr<f32>, #[constexpr] BLOCK: usize) {
    let offs = arange(BLOCK);
    let a = load(x + offs, true);
    let b = load(idx + offs, true);
    store(out + offs, a + b, true);
}

fn main() {}
