//! Errors of interpreted launches.

use crate::types::{DType, Elem};
use thiserror::Error;

/// Why an interpreted launch failed. Every variant names the kernel; run-time faults also name
/// the op (its IR mnemonic, e.g. `load`, `atomic.add`) and the program id `[x, y, z]`.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum InterpError {
    /// The number of arguments differs from the kernel's parameters.
    #[error("kernel `{kernel}`: expected {expected} arguments, got {got}")]
    ArgCount {
        /// Kernel name.
        kernel: String,
        /// Number of parameters.
        expected: usize,
        /// Number of arguments given.
        got: usize,
    },
    /// An argument does not match its parameter's type (or points into a buffer of another
    /// element type, or into no buffer).
    #[error("kernel `{kernel}`, parameter #{index} `{param}`: expected {expected}, got {got}")]
    ArgType {
        /// Kernel name.
        kernel: String,
        /// Parameter index.
        index: usize,
        /// Parameter name.
        param: String,
        /// Declared type.
        expected: DType,
        /// What was passed.
        got: String,
    },
    /// A grid extent beyond `i32::MAX`.
    #[error("kernel `{kernel}`: grid {grid:?} has an extent beyond i32::MAX")]
    Grid {
        /// Kernel name.
        kernel: String,
        /// The grid.
        grid: [u32; 3],
    },
    /// A memory access outside its buffer (or through a pointer to no buffer, `len` = 0).
    #[error("kernel `{kernel}`, op `{op}`, program {program:?}: offset {offset} is out of bounds of buffer #{buffer} ({len} elements)")]
    OutOfBounds {
        /// Kernel name.
        kernel: String,
        /// Op mnemonic.
        op: String,
        /// Program id.
        program: [u32; 3],
        /// Buffer index.
        buffer: u32,
        /// Offending element offset.
        offset: i64,
        /// Buffer length in elements.
        len: usize,
    },
    /// An access through a pointer whose element type differs from the buffer's.
    #[error("kernel `{kernel}`, op `{op}`, program {program:?}: {pointer} access at offset {offset} of buffer #{buffer}, which holds {buffer_elem}")]
    ElemMismatch {
        /// Kernel name.
        kernel: String,
        /// Op mnemonic.
        op: String,
        /// Program id.
        program: [u32; 3],
        /// Buffer index.
        buffer: u32,
        /// Offending element offset.
        offset: i64,
        /// Element type of the pointer.
        pointer: Elem,
        /// Element type of the buffer.
        buffer_elem: Elem,
    },
    /// Integer division or remainder by zero.
    #[error("kernel `{kernel}`, op `{op}`, program {program:?}: integer division by zero")]
    DivisionByZero {
        /// Kernel name.
        kernel: String,
        /// Op mnemonic.
        op: String,
        /// Program id.
        program: [u32; 3],
    },
    /// A `for` loop with a step ≤ 0.
    #[error("kernel `{kernel}`, op `{op}`, program {program:?}: loop step {step} is not positive")]
    BadStep {
        /// Kernel name.
        kernel: String,
        /// Op mnemonic.
        op: String,
        /// Program id.
        program: [u32; 3],
        /// The step.
        step: i64,
    },
    /// A shared buffer used out of order: a stage read while a copy into it is in flight or
    /// before any copy completed, a second copy into a stage still being copied, or a stage
    /// index out of range.
    #[error("kernel `{kernel}`, op `{op}`, program {program:?}: {message}")]
    SharedBuffer {
        /// Kernel name.
        kernel: String,
        /// Op mnemonic.
        op: String,
        /// Program id.
        program: [u32; 3],
        /// What is wrong.
        message: String,
    },
    /// Two programs of one launch set the same graph condition: on a GPU they race.
    #[error(
        "kernel `{kernel}`, op `{op}`, program {program:?}: sets graph condition {handle}, which program \
         {first:?} of the same launch set (two programs setting one condition race)"
    )]
    ConditionRace {
        /// Kernel name.
        kernel: String,
        /// Op mnemonic.
        op: String,
        /// Program id.
        program: [u32; 3],
        /// The condition's handle.
        handle: i64,
        /// The program that set it first.
        first: [u32; 3],
    },
    /// IR the interpreter cannot execute (ill-typed or malformed; normally a front-end bug).
    #[error("kernel `{kernel}`, op `{op}`, program {program:?}: {message}")]
    Unsupported {
        /// Kernel name.
        kernel: String,
        /// Op mnemonic.
        op: String,
        /// Program id.
        program: [u32; 3],
        /// What is wrong.
        message: String,
    },
}

impl InterpError {
    /// The kernel the error is about.
    pub fn kernel(&self) -> &str {
        match self {
            InterpError::ArgCount { kernel, .. }
            | InterpError::ArgType { kernel, .. }
            | InterpError::Grid { kernel, .. }
            | InterpError::OutOfBounds { kernel, .. }
            | InterpError::ElemMismatch { kernel, .. }
            | InterpError::DivisionByZero { kernel, .. }
            | InterpError::BadStep { kernel, .. }
            | InterpError::SharedBuffer { kernel, .. }
            | InterpError::ConditionRace { kernel, .. }
            | InterpError::Unsupported { kernel, .. } => kernel,
        }
    }
    /// The op at fault, for run-time faults.
    pub fn op(&self) -> Option<&str> {
        match self {
            InterpError::OutOfBounds { op, .. }
            | InterpError::ElemMismatch { op, .. }
            | InterpError::DivisionByZero { op, .. }
            | InterpError::BadStep { op, .. }
            | InterpError::SharedBuffer { op, .. }
            | InterpError::ConditionRace { op, .. }
            | InterpError::Unsupported { op, .. } => Some(op),
            _ => None,
        }
    }
    /// The program id, for run-time faults.
    pub fn program(&self) -> Option<[u32; 3]> {
        match self {
            InterpError::OutOfBounds { program, .. }
            | InterpError::ElemMismatch { program, .. }
            | InterpError::DivisionByZero { program, .. }
            | InterpError::BadStep { program, .. }
            | InterpError::SharedBuffer { program, .. }
            | InterpError::ConditionRace { program, .. }
            | InterpError::Unsupported { program, .. } => Some(*program),
            _ => None,
        }
    }
}
