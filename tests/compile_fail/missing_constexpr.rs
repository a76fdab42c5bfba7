use replay_dsl::prelude::*;
use replay_macros::kernel;

#[kernel]
fn scale(x: Ptr<f32>, #[constexpr] BLOCK: usize, #[constexpr(default = 4)] UNROLL: usize) {
    let offs = arange(BLOCK * UNROLL);
    store(x + offs, load(x + offs, true) * 2.0, true);
}

fn main() {
    // BLOCK has no default, so it must be given.
    let _ = scale::trace(&scale::Config { UNROLL: 2, num_warps: 4, min_blocks: 1 });
    // And `Config` has no `Default`.
    let _ = scale::Config::default();
}
