//! Running the `replay` binary in tests.

#![allow(dead_code)]

use std::process::{Command, Output};

/// Runs `replay args…` with a clean environment for the variables it reads.
pub fn replay(args: &[&str]) -> Output {
    replay_env(args, &[])
}

/// Runs `replay args…` with extra environment variables.
pub fn replay_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_replay"));
    c.args(args).env_remove("REPLAY_INTERPRET").env_remove("REPLAY_TUNE");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("the replay binary runs")
}

/// Standard output as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Standard error as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// True when this machine has a CUDA driver library (the no-GPU tests then skip).
pub fn has_driver() -> bool {
    replay_runtime::driver::probe::probe(replay_runtime::driver::probe::DRIVER_LIBRARY_NAMES).is_ok()
}

/// Asserts success and returns stdout.
pub fn ok(args: &[&str]) -> String {
    let o = replay(args);
    assert!(
        o.status.success(),
        "replay {args:?} failed ({:?}):\n{}\n{}",
        o.status,
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

/// Asserts a non-zero exit and returns stderr.
pub fn fails(args: &[&str]) -> String {
    let o = replay(args);
    assert!(!o.status.success(), "replay {args:?} should fail:\n{}", stdout(&o));
    stderr(&o)
}
