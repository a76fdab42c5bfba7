//! Fingerprints the compiler's sources (`REPLAY_DSL_FINGERPRINT`): tuning results are valid only
//! for the code generator that produced them, so the tuning cache keys on it.

use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// FNV-1a, 64 bits.
fn fnv(hash: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(hash, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

fn main() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    println!("cargo:rerun-if-changed={}", src.display());
    let mut paths = Vec::new();
    files(&src, &mut paths);
    paths.sort();
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for p in &paths {
        let rel = p.strip_prefix(&src).unwrap_or(p);
        h = fnv(h, rel.to_string_lossy().as_bytes());
        h = fnv(h, &std::fs::read(p).unwrap_or_default());
    }
    println!("cargo:rustc-env=REPLAY_DSL_FINGERPRINT={h:016x}");
}
