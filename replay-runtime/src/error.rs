//! The runtime's error values. Every GPU path reports one of these; none panics.

use crate::launch::check::LaunchError;
use replay_dsl::CompileError;
use std::path::PathBuf;
use thiserror::Error;

/// Anything that can go wrong while opening a device, moving data, loading or launching a
/// kernel, or tuning.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// No CUDA driver library could be loaded (no NVIDIA driver on this machine).
    #[error("no CUDA driver: could not load any of {tried:?} ({reason})")]
    NoDriver {
        /// The library names tried.
        tried: Vec<String>,
        /// The loader's message for the last name tried.
        reason: String,
    },
    /// The driver is present but the requested device is not.
    #[error("no CUDA device with ordinal {ordinal} ({count} device(s) found)")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the driver reports.
        count: usize,
    },
    /// A GPU whose compute capability has no code generation target.
    #[error("unsupported GPU `{name}` (compute capability {}.{}): replay targets sm_90a (9.x) and sm_100a (10.0)", cc.0, cc.1)]
    UnsupportedGpu {
        /// The device name.
        name: String,
        /// Compute capability (major, minor).
        cc: (u32, u32),
    },
    /// `REPLAY_JIT` asks for a compiler this process cannot use (an unknown value, or
    /// `ptxas` with none found).
    #[error("{message}")]
    JitSetting {
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A CUDA driver call failed.
    #[error("CUDA driver call `{call}` failed: {message}")]
    Driver {
        /// The operation that failed.
        call: &'static str,
        /// The driver's description of the error.
        message: String,
    },
    /// Tracing or compiling a kernel failed.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// The driver refused a compiled module (PTX JIT error, missing entry, too many resources).
    #[error("kernel `{kernel}`: loading entry `{entry}` failed: {message}")]
    Load {
        /// Kernel name.
        kernel: String,
        /// The `.entry` name.
        entry: String,
        /// The driver's message.
        message: String,
    },
    /// A launch refused before running: bad argument, short buffer, bad grid.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// An object of one device (or backend) used with another.
    #[error("device mismatch: {0}")]
    DeviceMismatch(String),
    /// An operation the selected backend cannot perform.
    #[error("unsupported on the {backend} backend: {what}")]
    Unsupported {
        /// `"cuda"`, `"interpreter"` or `"emulator"`.
        backend: &'static str,
        /// The operation.
        what: String,
    },
    /// The CPU interpreter failed while running a kernel.
    #[error("kernel `{kernel}`: interpreter: {message}")]
    Interpreter {
        /// Kernel name.
        kernel: String,
        /// What the interpreter reported.
        message: String,
    },
    /// The PTX emulator refused a kernel or failed while running it (a memcheck error, a
    /// diverged warp collective, an instruction it does not implement).
    #[error("kernel `{kernel}`: emulator: {message}")]
    Emulator {
        /// Kernel name.
        kernel: String,
        /// What the emulator reported.
        message: String,
    },
    /// Host data of the wrong size for a buffer.
    #[error("size mismatch: {0}")]
    Size(String),
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Tuning could not produce a result.
    #[error("tuning `{kernel}`: {message}")]
    Tune {
        /// Kernel or scheme name.
        kernel: String,
        /// Why.
        message: String,
    },
}

impl RuntimeError {
    /// Wraps a driver error with the name of the failing operation.
    pub(crate) fn driver(call: &'static str, err: cudarc::driver::DriverError) -> RuntimeError {
        let message = match (err.error_name(), err.error_string()) {
            (Ok(n), Ok(s)) => format!("{} ({})", n.to_string_lossy(), s.to_string_lossy()),
            _ => format!("{:?}", err.0),
        };
        RuntimeError::Driver { call, message }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
