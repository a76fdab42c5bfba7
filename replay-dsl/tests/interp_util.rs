//! Helpers shared by the interpreter tests (included with `#[path]`; no tests of its own).
#![allow(dead_code, unused_imports)]

#[path = "shared/mod.rs"]
mod shared;

use replay_dsl::host::HostElem;
pub use shared::{ptr, val, SplitMix64 as Rng};

/// Checks `|got − want| ≤ rtol·scale + atol` elementwise, where `scale` is `|want|` (or the
/// given per-element scale); NaN in `got` never passes, nor does a NaN/inf mismatch.
pub fn assert_close_scaled(what: &str, got: &[f64], want: &[f64], scale: Option<&[f64]>, rtol: f64, atol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = 0.0f64;
    for i in 0..got.len() {
        let (g, w) = (got[i], want[i]);
        assert!(!g.is_nan(), "{what}[{i}]: got NaN, want {w}");
        if w.is_infinite() || g.is_infinite() {
            assert_eq!(g, w, "{what}[{i}]");
            continue;
        }
        let s = scale.map_or(w.abs(), |s| s[i]);
        let err = (g - w).abs();
        assert!(
            err <= rtol * s + atol,
            "{what}[{i}]: got {g}, want {w} (error {err:e}, bound {:e})",
            rtol * s + atol
        );
        if s > 0.0 && rtol * s >= atol {
            worst = worst.max(err / s);
        }
    }
    eprintln!("{what}: {} values, worst relative error {worst:e}", got.len());
}

pub fn assert_close(what: &str, got: &[f64], want: &[f64], rtol: f64) {
    assert_close_scaled(what, got, want, None, rtol, 0.0)
}

pub fn to_f64<T: HostElem>(v: &[T]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// A buffer of `n` NaNs of `T`, so that unwritten outputs are caught.
pub fn poison<T: HostElem>(n: usize) -> Vec<T> {
    vec![T::from_f64(f64::NAN); n]
}
