use replay_dsl::prelude::*;
use replay_macros::kernel;

#[kernel]
fn bad_extents(
    #[extent(m)] x: Ptr<f32>,
    #[extent(rows * y)] y: Ptr<f32>,
    #[extent(rows)] rows: i32,
    scale: f32,
    #[extent(rows * scale)] z: Ptr<f32>,
) {
}

fn main() {}
