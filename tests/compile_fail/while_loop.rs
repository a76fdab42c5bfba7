use replay_dsl::prelude::*;
use replay_macros::kernel;

#[kernel]
fn spin(x: Ptr<i32>, n: i32, #[constexpr] BLOCK: usize) {
    let mut i = 0;
    while i < n {
        i = i + 1;
    }
    loop {
        store(x + arange(BLOCK), i, true);
    }
}

fn main() {}
