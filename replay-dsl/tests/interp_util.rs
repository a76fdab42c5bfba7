//! Helpers shared by the interpreter tests (included with `#[path]`; no tests of its own).
#![allow(dead_code)]

use replay_dsl::host::HostElem;
use replay_dsl::ir::Param;
use replay_dsl::{DType, Elem};

/// A small SplitMix64 generator, freshly seeded per run (set `REPLAY_SEED` to reproduce).
pub struct Rng(u64);

impl Rng {
    pub fn new(test: &str) -> Rng {
        let seed = std::env::var("REPLAY_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap();
                t.as_nanos() as u64 ^ (std::process::id() as u64).rotate_left(32)
            });
        eprintln!("{test}: REPLAY_SEED={seed}");
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
    /// Uniform integer in lo..hi.
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % (hi - lo) as u64) as i64
    }
    /// `n` values of `T` uniform in [lo, hi), rounded to `T`.
    pub fn vec<T: HostElem>(&mut self, n: usize, lo: f64, hi: f64) -> Vec<T> {
        (0..n).map(|_| T::from_f64(self.range(lo, hi))).collect()
    }
}

pub fn ptr(name: &str, e: Elem) -> Param {
    Param {
        name: name.into(),
        dtype: DType::Ptr(e),
        divisibility: 16,
    }
}

pub fn val(name: &str, e: Elem) -> Param {
    Param {
        name: name.into(),
        dtype: DType::Val(e),
        divisibility: 1,
    }
}

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
