use replay_dsl::prelude::*;
use replay_macros::kernel;

#[kernel]
fn early_exit(x: Ptr<f32>, n: i32, #[constexpr] BLOCK: usize) {
    let mut acc = zeros::<f32>([BLOCK]);
    for i in range(0, n) {
        if i > 10 {
            break;
        }
        acc += load(x + i * BLOCK + arange(BLOCK), true);
    }
    for _ in range(0, n) {
        for j in 0..4 {
            if j == 2 {
                continue; // fine: leaves a compile-time loop
            }
        }
        continue;
    }
    store(x + arange(BLOCK), acc, true);
}

fn main() {}
