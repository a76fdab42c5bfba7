use replay_dsl::prelude::*;
use replay_macros::kernel;

#[kernel]
fn in_range(x: Ptr<f32>, lo: i32, hi: i32, #[constexpr] BLOCK: usize) {
    let offs = arange(BLOCK);
    let mask = lo <= offs < hi;
    store(x + offs, 0.0, mask);
}

fn main() {}
