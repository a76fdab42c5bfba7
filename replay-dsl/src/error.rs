//! Errors reported while tracing and compiling a kernel.

use thiserror::Error;

/// What went wrong while tracing or compiling a kernel specialization.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ErrorKind {
    /// Operand shapes that cannot be broadcast together or do not fit the op.
    #[error("shape mismatch: {0}")]
    Shape(String),
    /// Operand element types that do not fit the op.
    #[error("type mismatch: {0}")]
    Type(String),
    /// An axis outside the tile's rank.
    #[error("bad axis: {0}")]
    Axis(String),
    /// A tile extent that is not a power of two, or zero.
    #[error("bad extent: {0}")]
    Extent(String),
    /// A `static_assert` that failed.
    #[error("static assertion failed: {0}")]
    StaticAssert(String),
    /// A constexpr parameter without a value, or with an invalid one.
    #[error("constexpr: {0}")]
    Constexpr(String),
    /// A construct the compiler does not support (yet).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A failure inside a compiler pass or backend (a compiler bug).
    #[error("internal compiler error: {0}")]
    Internal(String),
}

/// A compile error naming the kernel and the op that failed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("kernel `{kernel}`, op `{op}`: {kind}")]
pub struct CompileError {
    /// Kernel name.
    pub kernel: String,
    /// Op (or stage) at fault.
    pub op: String,
    /// What happened.
    pub kind: ErrorKind,
}

impl CompileError {
    /// A new error.
    pub fn new(kernel: impl Into<String>, op: impl Into<String>, kind: ErrorKind) -> Self {
        CompileError {
            kernel: kernel.into(),
            op: op.into(),
            kind,
        }
    }
}
