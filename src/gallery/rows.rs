//! What the row-wise kernels (softmax, RMSNorm, row scans) share: a `rows × cols` matrix in a
//! buffer of `stride`-element rows, whose padding columns and trailing slack a correct kernel
//! never writes.

use super::{rows_to_check, with_slack, Case};
use crate::harness::{Arg, Expect, Named};
use replay_runtime::tune::ScalarArg;

/// The shape of a row-matrix case.
#[derive(Clone, Copy, Debug)]
pub(super) struct RowShape {
    /// Rows.
    pub rows: usize,
    /// Columns the kernel reads and writes.
    pub cols: usize,
    /// Elements from one row to the next (`≥ cols`).
    pub stride: usize,
}

impl RowShape {
    /// The `rows`, `cols` and `stride` of `case`.
    pub fn of(case: &Case) -> RowShape {
        let get = |n| case.get(n) as usize;
        RowShape {
            rows: get("rows"),
            cols: get("cols"),
            stride: get("stride"),
        }
    }
    /// `ROWSxCOLS (stride STRIDE)`, for tables.
    pub fn label(&self) -> String {
        format!("{}x{} (stride {})", self.rows, self.cols, self.stride)
    }
    /// Elements of an output buffer (with [`super::SLACK`] trailing elements when `slack`).
    pub fn out_len(&self, slack: bool) -> usize {
        with_slack(self.rows * self.stride, slack)
    }
    /// Row `r` of `x` (all `stride` elements).
    pub fn row<'a>(&self, x: &'a [f32], r: usize) -> &'a [f32] {
        &x[r * self.stride..(r + 1) * self.stride]
    }
    /// The kernels' trailing `n_rows, n_cols, stride` arguments.
    pub fn args(&self) -> [Arg; 3] {
        [
            Arg::I32(self.rows as i32),
            Arg::I32(self.cols as i32),
            Arg::I32(self.stride as i32),
        ]
    }
    /// What an output buffer of `out_len` elements must hold: for each checked row (all, or a
    /// sample), `expect(r)[c]` in its first `cols` columns and its padding columns untouched;
    /// the slack after the last row untouched.
    pub fn entries(
        &self,
        out_len: usize,
        sample: bool,
        mut expect: impl FnMut(usize) -> Vec<Expect>,
    ) -> Vec<(usize, Expect)> {
        let mut entries = Vec::new();
        for r in rows_to_check(self.rows, sample) {
            let row = expect(r);
            entries.extend((0..self.stride).map(|c| {
                let e = if c < self.cols { row[c] } else { Expect::Untouched };
                (r * self.stride + c, e)
            }));
        }
        entries.extend((self.rows * self.stride..out_len).map(|i| (i, Expect::Untouched)));
        entries
    }
}

/// A case of `rows` rows of `cols` columns, `stride` apart.
pub(super) fn row_case(config: &[(&'static str, i64)], rows: i64, cols: i64, stride: i64) -> Case {
    Case::new(config, &[("rows", rows), ("cols", cols), ("stride", stride)])
}

/// The tuning shape of a row kernel's benchmark case and its `n_rows, n_cols, stride`
/// scalars.
pub(super) fn tune_problem(bench: &Case) -> (Named, Vec<(&'static str, ScalarArg)>) {
    let (rows, cols, stride) = (bench.get("rows"), bench.get("cols"), bench.get("stride"));
    let scalars = vec![
        ("n_rows", (rows as i32).into()),
        ("n_cols", (cols as i32).into()),
        ("stride", (stride as i32).into()),
    ];
    (vec![("rows", rows), ("cols", cols), ("stride", stride)], scalars)
}
