use replay_dsl::prelude::*;
use replay_macros::kernel;

#[kernel]
fn sum_rows(x: Ptr<f32>, out: Ptr<f32>, n: i32, #[constexpr] BLOCK: usize) {
    let mut acc = zeros::<f32>([BLOCK]);
    for i in 0..n {
        acc += load(x + i * BLOCK + arange(BLOCK), true);
    }
    store(out + arange(BLOCK), acc, true);
}

fn main() {}
