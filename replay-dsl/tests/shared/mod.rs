//! Helpers shared by the interpreter tests (`interp_util.rs`) and the property tests
//! (`prop_util.rs`): one SplitMix64 generator and the IR parameter constructors.

use replay_dsl::host::HostElem;
use replay_dsl::ir::Param;
use replay_dsl::{DType, Elem};

/// A small SplitMix64 generator.
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed` (property tests: proptest draws the seed, so a failing
    /// case replays with the same data).
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }
    /// A generator freshly seeded per run, the seed printed with `test`'s name (set
    /// `REPLAY_SEED` to reproduce).
    pub fn for_test(test: &str) -> SplitMix64 {
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
        SplitMix64(seed)
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
    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
    /// Uniform f32 in [lo, hi).
    pub fn f32(&mut self, lo: f64, hi: f64) -> f32 {
        self.range(lo, hi) as f32
    }
    /// Uniform integer in lo..hi.
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % (hi - lo) as u64) as i64
    }
    /// An "interesting" i32: small, large, or a boundary value.
    pub fn i32_any(&mut self) -> i32 {
        match self.int(0, 8) {
            0 => [0, 1, -1, i32::MIN, i32::MAX, 31, 32, 33][self.int(0, 8) as usize],
            1..=4 => self.int(-100, 100) as i32,
            _ => self.u32() as i32,
        }
    }
    /// `n` values of `T` uniform in [lo, hi), rounded to `T`.
    pub fn vec<T: HostElem>(&mut self, n: usize, lo: f64, hi: f64) -> Vec<T> {
        (0..n).map(|_| T::from_f64(self.range(lo, hi))).collect()
    }
}

/// A pointer parameter (divisibility 16).
pub fn ptr(name: &str, e: Elem) -> Param {
    Param {
        name: name.into(),
        dtype: DType::Ptr(e),
        divisibility: 16,
    }
}

/// A scalar parameter.
pub fn val(name: &str, e: Elem) -> Param {
    Param {
        name: name.into(),
        dtype: DType::Val(e),
        divisibility: 1,
    }
}
