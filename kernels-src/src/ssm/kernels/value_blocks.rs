//! The value blocks of the head-tiled kernels (the verification and its fold): axis 0 of their
//! `(⌈DV/BV⌉, HEADS/HB, batch)` grids, `BV` value rows each. Where `BV` does not divide `DV`,
//! the last block is masked, or with the kernels' `TAIL` (a tuning axis) its rows take a tile
//! of the next power of two (Nano's 80 rows at BV32: 32 + 32 + 16, not a half-masked third 32;
//! H200, a T=8 cycle at Nano's v29 tile: 0.5602 ms masked, 0.5695 with the tail).

use replay_dsl::prelude::*;

/// Rows of the last value block, `1..=bv`.
const fn last_rows(dv: usize, bv: usize) -> usize {
    dv - (dv.div_ceil(bv) - 1) * bv
}

/// Rows of the last block's tile with a tail tile: the next power of two of its rows where that
/// is smaller than `bv`, else `bv` (the block's tile then masked).
pub const fn tail_rows(dv: usize, bv: usize) -> usize {
    let t = last_rows(dv, bv).next_power_of_two();
    if t < bv {
        t
    } else {
        bv
    }
}

/// Rows of the last block's tile: [`tail_rows`] with a tail tile (`tail`), else `bv`.
pub(super) const fn last_tile_rows(dv: usize, bv: usize, tail: bool) -> usize {
    if tail {
        tail_rows(dv, bv)
    } else {
        bv
    }
}

/// Runs `body` with the rows of this program's value tile: `bv`, or [`last_tile_rows`] in the
/// last block where smaller (the body traced once per size, one branch per program).
#[kernel_fn]
pub(super) fn by_value_block(dv: usize, bv: usize, tail: bool, body: &dyn Fn(usize)) {
    let tail = last_tile_rows(dv, bv, tail);
    if tail < bv {
        if program_id(0) == (dv.div_ceil(bv) - 1) as i32 {
            body(tail);
        } else {
            body(bv);
        }
    } else {
        body(bv);
    }
}

/// The value rows of this program's block in a tile of `rows` rows (`bv`, or the last block's
/// with a tail tile, `tail`), and which of them exist (a constant true where none lies past
/// `dv`).
#[kernel_fn]
pub(super) fn value_rows(dv: usize, bv: usize, rows: usize, tail: bool) -> (Tile<i32>, Tile<bool>) {
    let v = program_id(0) * bv + arange(rows);
    let exact = if rows == bv {
        dv % bv == 0 || last_tile_rows(dv, bv, tail) < bv
    } else {
        last_rows(dv, bv) == rows
    };
    let mask = if exact { full([rows], true) } else { v < dv };
    (v, mask)
}

#[cfg(test)]
mod tests {
    use super::tail_rows;

    #[test]
    fn the_last_block_takes_a_smaller_tile_only_where_one_fits_its_rows() {
        // (dv, bv, tile of the last block)
        let cases = [
            (80, 32, 16), // Nano: 32 + 32 + 16
            (80, 64, 16),
            (80, 16, 16), // divides: every block whole
            (64, 64, 64),
            (19, 8, 4), // 8 + 8 + 3 in a masked tile of 4
            (22, 16, 8),
            (50, 32, 32), // 18 rows left: no smaller power of two holds them
        ];
        for (dv, bv, want) in cases {
            assert_eq!(tail_rows(dv, bv), want, "dv {dv}, bv {bv}");
        }
    }
}
