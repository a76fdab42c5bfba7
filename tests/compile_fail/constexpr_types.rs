use replay_dsl::prelude::*;
use replay_macros::kernel;

#[kernel]
fn bad_constexprs(
    x: Ptr<f32>,
    #[constexpr] SCALE: f32,
    #[constexpr(default = "big")] BLOCK: usize,
    #[constexpr(default = -1)] N: u32,
    #[constexpr(default = 1)] FLAG: bool,
    #[constexpr(fast)] K: usize,
) {
    let _ = x;
}

fn main() {}
