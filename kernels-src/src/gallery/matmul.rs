//! Tiled matrix product with `dot` and a runtime loop over K.

use replay_dsl::prelude::*;

/// `c = a @ b` for row-major `a: [m, k]`, `b: [k, n]`, `c: [m, n]`; program `(i, j)` computes the
/// `BM × BN` tile `(i, j)` of `c`, stepping through K in `BK` slices.
#[kernel]
pub fn matmul(
    #[extent(m * k)] a: Ptr<f32>,
    #[extent(k * n)] b: Ptr<f32>,
    #[extent(m * n)] c: Ptr<f32>,
    m: i32,
    n: i32,
    k: i32,
    #[constexpr(default = 32)] BM: usize,
    #[constexpr(default = 32)] BN: usize,
    #[constexpr(default = 16)] BK: usize,
) {
    let rm = program_id(0) * BM + arange(BM);
    let rn = program_id(1) * BN + arange(BN);
    let rk = arange(BK);
    let row_ok = (rm < m).expand_dims(1);
    let col_ok = (rn < n).expand_dims(0);
    let mut acc = zeros::<f32>([BM, BN]);
    for k0 in range_step(0, k, BK) {
        let kk = k0 + rk;
        let a_tile = load(
            a + (rm * k).expand_dims(1) + kk.expand_dims(0),
            row_ok & (kk < k).expand_dims(0),
        );
        let b_tile = load(
            b + (kk * n).expand_dims(1) + rn.expand_dims(0),
            (kk < k).expand_dims(1) & col_ok,
        );
        acc = dot_acc(a_tile, b_tile, acc);
    }
    store(c + (rm * n).expand_dims(1) + rn.expand_dims(0), acc, row_ok & col_ok);
}

/// Float64 reference of [`matmul`].
pub fn reference(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|l| a[i * k + l] as f64 * b[l * n + j] as f64).sum();
        }
    }
    c
}
