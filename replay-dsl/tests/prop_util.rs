//! Helpers shared by the property tests (included with `#[path]`; no tests of its own).
#![allow(dead_code)]

use proptest::test_runner::Config;
use replay_dsl::ir::{Kernel, Param};
use replay_dsl::{compile, DType, Elem, Target};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// A proptest configuration with `cases` cases and bounded shrinking (so that a failing
/// property reports in seconds, not minutes, on a small machine). `PROPTEST_CASES` overrides
/// the number of cases.
pub fn config(cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(cases);
    Config {
        cases,
        max_shrink_iters: 400,
        max_shrink_time: 15_000,
        // Integration tests have no `lib.rs`/`main.rs` next to them to anchor a regressions
        // directory; the failing seed is printed instead.
        failure_persistence: None,
        ..Config::default()
    }
}

/// A small SplitMix64 generator, seeded by proptest (so every case draws fresh data and a
/// failing case replays with the same data).
pub struct Rand(u64);

impl Rand {
    pub fn new(seed: u64) -> Rand {
        Rand(seed)
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
    /// Uniform f32 in [lo, hi).
    pub fn f32(&mut self, lo: f64, hi: f64) -> f32 {
        (lo + (hi - lo) * self.unit()) as f32
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
}

pub fn ptr(name: &str, e: Elem) -> Param {
    Param { name: name.into(), dtype: DType::Ptr(e), divisibility: 16 }
}

pub fn val(name: &str, e: Elem) -> Param {
    Param { name: name.into(), dtype: DType::Val(e), divisibility: 1 }
}

/// `|got − want| ≤ tol · scale`, with NaN matching NaN and infinities matching exactly.
pub fn close(got: f32, want: f64, scale: f64, tol: f64) -> bool {
    if want.is_nan() || got.is_nan() {
        return want.is_nan() && got.is_nan();
    }
    if want.is_infinite() || got.is_infinite() {
        return got as f64 == want;
    }
    (got as f64 - want).abs() <= tol * scale
}

/// Compiles `kernel` for both targets; the error names the target.
pub fn compile_both(kernel: &Kernel) -> Result<Vec<(Target, String)>, String> {
    Target::ALL
        .iter()
        .map(|&t| compile(kernel, t).map(|c| (t, c.ptx)).map_err(|e| format!("compile for {t}: {e}\n{kernel}")))
        .collect()
}

/// The ptxas binary: `$REPLAY_PTXAS`, else what `scripts/install-ptxas.sh` prints.
pub fn ptxas() -> &'static PathBuf {
    static PTXAS: OnceLock<PathBuf> = OnceLock::new();
    PTXAS.get_or_init(|| {
        if let Some(p) = std::env::var_os("REPLAY_PTXAS").filter(|p| !p.is_empty()) {
            return PathBuf::from(p);
        }
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/install-ptxas.sh");
        let out = Command::new("bash").arg(&script).output().expect("run scripts/install-ptxas.sh");
        assert!(out.status.success(), "install-ptxas.sh failed: {}", String::from_utf8_lossy(&out.stderr));
        let path = String::from_utf8(out.stdout).expect("utf-8 path");
        PathBuf::from(path.lines().last().expect("install-ptxas.sh prints the path").trim())
    })
}

/// Assembles `ptx` with ptxas for `target`; the error carries ptxas's message and the PTX.
pub fn assemble(name: &str, target: Target, ptx: &str) -> Result<(), String> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("prop_ptxas");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let file = dir.join(format!("{name}_{}_{}.ptx", target.arch(), std::process::id()));
    std::fs::write(&file, ptx).map_err(|e| e.to_string())?;
    let cubin = file.with_extension("cubin");
    let out = Command::new(ptxas())
        .arg(format!("-arch={}", target.arch()))
        .arg("-o")
        .arg(&cubin)
        .arg(&file)
        .output()
        .map_err(|e| format!("running ptxas: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ptxas -arch={} rejected {} ({}):\n{}\n--- PTX ---\n{ptx}",
            target.arch(),
            name,
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&cubin);
    Ok(())
}
