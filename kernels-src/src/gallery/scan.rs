//! Row-wise cumulative sums and products (the decay products of SSM kernels are such scans).

use replay_dsl::prelude::*;

/// `sums[r, c] = Σ_{j≤c} x[r, j]` and `prods[r, c] = Π_{j≤c} x[r, j]` for `c < n_cols`,
/// `ROWS` rows per program.
#[kernel]
pub fn row_scan(
    #[extent(n_rows * stride)] x: Ptr<f32>,
    #[extent(n_rows * stride)] sums: Ptr<f32>,
    #[extent(n_rows * stride)] prods: Ptr<f32>,
    n_rows: i32,
    n_cols: i32,
    stride: i32,
    #[constexpr(default = 4)] ROWS: usize,
    #[constexpr(default = 128)] BLOCK: usize,
) {
    let rows = program_id(0) * ROWS + arange(ROWS);
    let cols = arange(BLOCK);
    let mask = (rows < n_rows).expand_dims(1) & (cols < n_cols).expand_dims(0);
    let offs = (rows * stride).expand_dims(1) + cols.expand_dims(0);
    let v = load_or(x + offs, mask, 1.0);
    store(sums + offs, cumsum(v, 1), mask);
    store(prods + offs, cumprod(v, 1), mask);
}

/// Float64 reference of [`row_scan`]: `(sums, prods)`.
pub fn reference(x: &[f32], n_rows: usize, n_cols: usize, stride: usize) -> (Vec<f64>, Vec<f64>) {
    let mut sums = vec![0.0; n_rows * stride];
    let mut prods = vec![0.0; n_rows * stride];
    for r in 0..n_rows {
        let (mut s, mut p) = (0.0, 1.0);
        for c in 0..n_cols {
            s += x[r * stride + c] as f64;
            p *= x[r * stride + c] as f64;
            sums[r * stride + c] = s;
            prods[r * stride + c] = p;
        }
    }
    (sums, prods)
}
