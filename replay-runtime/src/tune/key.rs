//! Tuning-cache keys: (kernel, hash of its source and of the compiler's, GPU name + compute
//! capability + driver, shape bucket). The same inputs always give the same key string.

use crate::driver::device::DeviceInfo;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;

/// The first 16 hex digits of the SHA-256 of `source` (stable across runs and platforms).
pub fn source_hash(source: &str) -> String {
    let digest = Sha256::digest(source.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The power-of-two bucket of a problem size: the smallest power of two ≥ `n` (0 for n ≤ 0).
pub fn bucket(n: i64) -> u64 {
    if n <= 0 {
        0
    } else {
        (n as u64).next_power_of_two()
    }
}

/// What one tuning result is valid for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TuneKey {
    /// Kernel (or scheme) name.
    pub kernel: String,
    /// [`source_hash`] of its source and [`replay_dsl::COMPILER_FINGERPRINT`]: editing the
    /// kernel or the compiler invalidates old results.
    pub source_hash: String,
    /// GPU name.
    pub gpu: String,
    /// Compute capability.
    pub cc: (u32, u32),
    /// Driver version (its JIT compiles the PTX).
    pub driver: (u32, u32),
    /// Problem sizes by name, bucketed to powers of two, sorted by name.
    pub shape: Vec<(String, u64)>,
    /// Problem sizes keyed as they are, sorted by name: the dimensions a kernel is
    /// specialized on (two models whose head counts share a bucket must not share results).
    #[serde(default)]
    pub exact: Vec<(String, i64)>,
}

impl TuneKey {
    /// The key for `kernel` with `source` on `device` and problem `sizes` (order of the sizes
    /// does not matter; each is bucketed with [`bucket`]).
    pub fn new(kernel: &str, source: &str, device: &DeviceInfo, sizes: &[(&str, i64)]) -> TuneKey {
        let mut shape: Vec<(String, u64)> = sizes.iter().map(|(n, v)| (n.to_string(), bucket(*v))).collect();
        shape.sort();
        TuneKey {
            kernel: kernel.to_string(),
            source_hash: source_hash(&format!("{source}\n{}", replay_dsl::COMPILER_FINGERPRINT)),
            gpu: device.name.clone(),
            cc: device.compute_capability,
            driver: device.driver_version,
            shape,
            exact: Vec::new(),
        }
    }

    /// The key with the sizes `exact` keyed as they are, not bucketed (order does not matter).
    pub fn with_exact(mut self, exact: &[(&str, i64)]) -> TuneKey {
        self.exact = exact.iter().map(|(n, v)| (n.to_string(), *v)).collect();
        self.exact.sort();
        self
    }
}

impl fmt::Display for TuneKey {
    /// `kernel|hash|gpu|sm90|drv13.0|n=1024,m=64`, then `|heads=96,…` with exact sizes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}|{}|{}|sm{}{}|drv{}.{}|",
            self.kernel, self.source_hash, self.gpu, self.cc.0, self.cc.1, self.driver.0, self.driver.1
        )?;
        for (i, (n, v)) in self.shape.iter().enumerate() {
            write!(f, "{}{n}={v}", if i > 0 { "," } else { "" })?;
        }
        for (i, (n, v)) in self.exact.iter().enumerate() {
            write!(f, "{}{n}={v}", if i > 0 { "," } else { "|" })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;

    fn info() -> DeviceInfo {
        let mut i = Device::interpreter().info().clone();
        i.name = "NVIDIA H200".into();
        i.compute_capability = (9, 0);
        i.driver_version = (13, 0);
        i
    }

    #[test]
    fn buckets() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(-5), 0);
        assert_eq!(bucket(1), 1);
        assert_eq!(bucket(1000), 1024);
        assert_eq!(bucket(1024), 1024);
        assert_eq!(bucket(1025), 2048);
    }

    #[test]
    fn keys_are_stable() {
        let a = TuneKey::new("add", "fn add() {}", &info(), &[("n", 1000), ("m", 3)]);
        let b = TuneKey::new("add", "fn add() {}", &info(), &[("m", 4), ("n", 1024)]);
        assert_eq!(a, b);
        assert_eq!(a.to_string(), b.to_string());
        // The kernel's source and the compiler's fingerprint, hashed together.
        let hash = source_hash(&format!("fn add() {{}}\n{}", replay_dsl::COMPILER_FINGERPRINT));
        assert_eq!(a.to_string(), format!("add|{hash}|NVIDIA H200|sm90|drv13.0|m=4,n=1024"));
        assert_eq!(replay_dsl::COMPILER_FINGERPRINT.len(), 16);
        // The hash is fixed forever (cache files depend on it).
        assert_eq!(source_hash(""), "e3b0c44298fc1c14");
    }

    #[test]
    fn keys_change_with_their_inputs() {
        let base = TuneKey::new("add", "src", &info(), &[("n", 1000)]);
        assert_ne!(
            base.to_string(),
            TuneKey::new("add", "src2", &info(), &[("n", 1000)]).to_string()
        );
        assert_ne!(
            base.to_string(),
            TuneKey::new("add", "src", &info(), &[("n", 2000)]).to_string()
        );
        assert_ne!(
            base.to_string(),
            TuneKey::new("mul", "src", &info(), &[("n", 1000)]).to_string()
        );
        let mut other = info();
        other.driver_version = (12, 8);
        assert_ne!(
            base.to_string(),
            TuneKey::new("add", "src", &other, &[("n", 1000)]).to_string()
        );
        other = info();
        other.name = "NVIDIA B200".into();
        assert_ne!(
            base.to_string(),
            TuneKey::new("add", "src", &other, &[("n", 1000)]).to_string()
        );
    }

    #[test]
    fn exact_sizes_are_keyed_as_they_are() {
        let key = |heads: i64| {
            TuneKey::new("k", "src", &info(), &[("batch", 200)]).with_exact(&[("heads", heads), ("dv", 80)])
        };
        // 96 and 112 share a bucket (128) as sizes, not as exact sizes.
        assert_eq!(
            TuneKey::new("k", "src", &info(), &[("heads", 96)]),
            TuneKey::new("k", "src", &info(), &[("heads", 112)])
        );
        assert_ne!(key(96).to_string(), key(112).to_string());
        assert_eq!(key(96), key(96));
        assert!(
            key(96).to_string().ends_with("|batch=256|dv=80,heads=96"),
            "{}",
            key(96)
        );
    }
}
