use replay_dsl::prelude::*;
use replay_macros::kernel;

#[kernel]
fn bad_shapes(out: Ptr<i32>) {
    let s = arange(64) + arange(128);
    let t = (arange(32) * 2) < arange(16);
    store(out + arange(64), s, true);
    let _ = t;
}

fn main() {}
