//! A kernel that uses every feature of the macro compiles without warnings.
#![deny(warnings)]

use replay_dsl::prelude::*;
use replay_macros::kernel;

/// out[i] = x[i] + y[i]
#[kernel]
pub fn add(
    #[extent(n)] x: Ptr<f32>,
    #[extent(n)] y: Ptr<f32>,
    #[extent(n)] out: Ptr<f32>,
    n: i32,
    #[constexpr(default = 1024)] BLOCK: usize,
) {
    let offs = program_id(0) * BLOCK + arange(BLOCK);
    let mask = offs < n;
    store(out + offs, load(x + offs, mask) + load(y + offs, mask), mask);
}

/// A running sum with a runtime loop, a runtime branch and compile-time control flow.
#[kernel]
fn running(x: Ptr<f32>, out: Ptr<f32>, n: i32, limit: f32, #[constexpr] BLOCK: usize, #[constexpr(default = false)] TWICE: bool) {
    let mut acc = zeros::<f32>([BLOCK]);
    let mut p = x + arange(BLOCK);
    for _ in range(0, n) {
        let v = load(p, true);
        if sum(v, 0) < limit && max(v, 0) > 0.0 {
            acc += v;
        }
        p += BLOCK;
    }
    let k = if TWICE { 2.0f32 } else { 1.0f32 };
    for _ in 0..2 {
        if TWICE || BLOCK > 64 {
            acc = acc * k;
        }
    }
    store(out + arange(BLOCK), acc, true);
}

fn main() {
    let k = add::trace(&add::Config::default()).unwrap();
    assert_eq!(k.name, "add");
    let cfg = running::Config { BLOCK: 32, TWICE: true, num_warps: 1, min_blocks: 1 };
    assert!(running::trace(&cfg).is_ok());
}
