//! A `#[kernel_fn]` helper generic over the state dtype, shared by two kernels (one with a
//! default `num_warps`), compiles without warnings.
#![deny(warnings)]

use replay_dsl::prelude::*;

/// Decays `h` by `a` where `-a < h < a`, `n` times, then halves it when `n > 4`.
#[kernel_fn]
pub fn decay<T: Float>(h: Tile<T>, a: Tile<T>, n: Tile<i32>) -> Tile<T> {
    let mut s = h.cast::<f32>();
    let keep = a > h && h > -a;
    for _ in range(0, n) {
        s = select(keep, s * a.cast::<f32>(), s);
    }
    if n > 4 {
        s = s * 0.5;
    }
    s.cast::<T>()
}

/// f32 state.
#[kernel]
fn decay_f32(h: Ptr<f32>, a: Ptr<f32>, n: i32, #[constexpr(default = 64)] B: usize) {
    let o = arange(B);
    store(h + o, decay(load(h + o, true), load(a + o, true), n), true);
}

/// bf16 state, eight warps by default.
#[kernel(num_warps = 8)]
fn decay_bf16(h: Ptr<bf16>, a: Ptr<bf16>, n: i32, #[constexpr(default = 64)] B: usize) {
    let o = arange(B);
    store(h + o, decay(load(h + o, true), load(a + o, true), n), true);
}

fn main() {
    assert!(decay_f32::trace(&decay_f32::Config::default()).is_ok());
    let cfg = decay_bf16::Config::default();
    assert_eq!(cfg.num_warps, 8);
    assert_eq!(decay_bf16::trace(&cfg).unwrap().num_warps, 8);
}
