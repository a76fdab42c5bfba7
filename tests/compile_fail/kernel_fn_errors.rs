use replay_dsl::prelude::*;

#[kernel_fn]
fn early_return(x: Tile<f32>, n: Tile<i32>) -> Tile<f32> {
    if n > 0 {
        return x;
    }
    x
}

#[kernel_fn]
fn leaves_runtime_loop(x: Tile<f32>, n: Tile<i32>) -> Tile<f32> {
    let mut s = x;
    for _ in range(0, n) {
        s = s + 1.0;
        break;
    }
    s
}

#[kernel_fn(inline)]
fn with_options(x: Tile<f32>) -> Tile<f32> {
    x
}

#[kernel]
fn uses_them(x: Ptr<f32>, n: i32) {
    let v = load(x + arange(32), true);
    store(x + arange(32), early_return(v, n) + leaves_runtime_loop(v, n) + with_options(v), true);
}

fn main() {}
