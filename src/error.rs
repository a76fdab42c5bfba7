//! The command's errors: each is printed as one line on stderr and exits non-zero.

use replay_dsl::CompileError;
use replay_runtime::RuntimeError;
use std::path::PathBuf;
use thiserror::Error;

/// Anything a `replay` command can fail with.
#[derive(Debug, Error)]
pub enum CliError {
    /// No kernel of that name in the registry.
    #[error("unknown kernel `{name}` (known kernels: {known})")]
    UnknownKernel {
        /// The name given.
        name: String,
        /// The registry's names, comma-separated.
        known: String,
    },
    /// A `--set` naming no constexpr of the kernel.
    #[error("kernel `{kernel}` has no constexpr `{name}` (constexprs: {known})")]
    UnknownConstexpr {
        /// The kernel.
        kernel: String,
        /// The name given.
        name: String,
        /// The kernel's constexprs, comma-separated.
        known: String,
    },
    /// A `--stage` that the compiler does not produce.
    #[error("kernel `{kernel}` has no stage `{name}` (stages: {known})")]
    UnknownStage {
        /// The kernel.
        kernel: String,
        /// The name given.
        name: String,
        /// The stage names, comma-separated.
        known: String,
    },
    /// A malformed argument.
    #[error("{0}")]
    Usage(String),
    /// Tracing or compiling failed.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// The runtime failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// A file could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Checks failed (the table says which).
    #[error("{0}")]
    Failed(String),
}
