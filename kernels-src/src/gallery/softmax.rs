//! Fused row softmax: one program per row, masked tail columns.

use replay_dsl::prelude::*;

/// `out[r, :] = softmax(x[r, :n_cols])` for every row `r` of a row-major matrix with row stride
/// `stride`; one program per row, `BLOCK ≥ n_cols`.
#[kernel]
pub fn softmax(
    #[extent(n_rows * stride)] x: Ptr<f32>,
    #[extent(n_rows * stride)] out: Ptr<f32>,
    n_rows: i32,
    n_cols: i32,
    stride: i32,
    #[constexpr(default = 1024)] BLOCK: usize,
) {
    let _ = n_rows;
    let cols = arange(BLOCK);
    let mask = cols < n_cols;
    let base = program_id(0) * stride;
    let v = load_or(x + base + cols, mask, f32::NEG_INFINITY);
    let e = exp(v - max(v, 0));
    store(out + base + cols, e / sum(e, 0), mask);
}

/// Float64 reference of [`softmax`] over the first `n_cols` columns of each row.
pub fn reference(x: &[f32], n_rows: usize, n_cols: usize, stride: usize) -> Vec<f64> {
    let mut out = vec![0.0; n_rows * stride];
    for r in 0..n_rows {
        let row = &x[r * stride..r * stride + n_cols];
        let m = row.iter().map(|v| *v as f64).fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|v| (*v as f64 - m).exp()).sum();
        for c in 0..n_cols {
            out[r * stride + c] = (row[c] as f64 - m).exp() / s;
        }
    }
    out
}
