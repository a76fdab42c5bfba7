//! RMSNorm forward over a 2-D tile of rows.

use replay_dsl::prelude::*;

/// `out[r, c] = x[r, c] / sqrt(mean_c(x[r, :]²) + eps) · w[c]`, `ROWS` rows per program.
#[kernel]
pub fn rmsnorm(
    #[extent(n_rows * stride)] x: Ptr<f32>,
    #[extent(n_cols)] w: Ptr<f32>,
    #[extent(n_rows * stride)] out: Ptr<f32>,
    n_rows: i32,
    n_cols: i32,
    stride: i32,
    eps: f32,
    #[constexpr(default = 1)] ROWS: usize,
    #[constexpr(default = 1024)] BLOCK: usize,
) {
    let rows = program_id(0) * ROWS + arange(ROWS);
    let cols = arange(BLOCK);
    let col_mask = cols < n_cols;
    let mask = (rows < n_rows).expand_dims(1) & col_mask.expand_dims(0);
    let offs = (rows * stride).expand_dims(1) + cols.expand_dims(0);
    let xv = load(x + offs, mask);
    let mean_sq = sum(xv * xv, 1) / n_cols.cast::<f32>();
    let scale = rsqrt(mean_sq + eps).expand_dims(1);
    let wv = load(w + cols, col_mask).expand_dims(0);
    store(out + offs, xv * scale * wv, mask);
}

/// Float64 reference of [`rmsnorm`].
pub fn reference(x: &[f32], w: &[f32], n_rows: usize, n_cols: usize, stride: usize, eps: f32) -> Vec<f64> {
    let mut out = vec![0.0; n_rows * stride];
    for r in 0..n_rows {
        let row = &x[r * stride..r * stride + n_cols];
        let ms = row.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / n_cols as f64;
        let scale = 1.0 / (ms + eps as f64).sqrt();
        for c in 0..n_cols {
            out[r * stride + c] = row[c] as f64 * scale * w[c] as f64;
        }
    }
    out
}
