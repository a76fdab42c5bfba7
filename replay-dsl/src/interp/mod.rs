//! A CPU interpreter of the tile IR, with dtype-faithful rounding (like Triton's interpreter
//! mode), so kernels can be tested without a GPU.
//!
//! ```ignore
//! let mut mem = Memory::new();
//! let x = mem.alloc(&[1.0f32, 2.0, 3.0]);
//! let out = mem.alloc_zeroed::<f32>(3);
//! interp::run(&kernel, [1, 1, 1], &[Arg::ptr(x), Arg::ptr(out), Arg::I32(3)], &mut mem)?;
//! let y: Vec<f32> = mem.read(out);
//! ```
//!
//! # Execution model
//! - Program instances run sequentially in row-major order over the grid `[g0, g1, g2]`
//!   (axis 2 varies fastest, like Triton's interpreter).
//! - Each instance executes the IR tile-at-a-time: every value is a whole tile. Floats are held
//!   as `f64` already rounded to their type, integers as `i64` wrapped to their width (`u32` as
//!   0..2^32), bools as `bool`, pointers as (buffer, element offset).
//! - Numerics follow `docs/SEMANTICS.md`. Choices the document leaves open:
//!   - add/sub/mul/div/sqrt are computed in f64 and rounded once to the type (identical to f32
//!     arithmetic rounded to the type, as f64 has more than 2p+2 bits for every type);
//!   - math functions (`exp`, `log`, `tanh`, `softplus`, …) are computed in f64 and rounded
//!     once to the type;
//!   - reductions combine sequentially, index ascending along the axis
//!     (`((x0 ⊕ x1) ⊕ x2) ⊕ …`), rounding to the element type after each step; scans likewise;
//!   - `Dot` computes, for each output `[i, j]`, `r = acc[i, j]` then for `k` ascending
//!     `r = fma_f32(a[i, k], b[k, j], r)` (one f32 rounding per multiply-add);
//!   - a masked-off lane of an atomic returns 0.
//! - Every memory access is checked: a lane outside its buffer, or whose pointer element type
//!   differs from the buffer's, is an [`InterpError`] naming the kernel, op, program and
//!   offset. A faulting store or atomic writes none of its lanes.

mod error;
mod exec;
mod memory;
mod value;

pub use error::InterpError;
pub use exec::run;
pub use memory::{BufferId, Memory};

use crate::types::{DType, Elem};
use float8::F8E4M3;
use half::{bf16, f16};

/// A launch argument.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    /// A pointer `offset` elements into `buffer` (for `Ptr<T>` parameters; the buffer must hold
    /// `T`).
    Ptr {
        /// The buffer.
        buffer: BufferId,
        /// Element offset (may be anything; accesses are checked).
        offset: i64,
    },
    /// A `bool` scalar.
    Bool(bool),
    /// An `i32` scalar.
    I32(i32),
    /// An `i64` scalar.
    I64(i64),
    /// A `u32` scalar.
    U32(u32),
    /// An `f32` scalar.
    F32(f32),
    /// An `f16` scalar.
    F16(f16),
    /// A `bf16` scalar.
    BF16(bf16),
    /// An `f8e4m3` scalar.
    F8E4M3(F8E4M3),
}

impl Arg {
    /// A pointer to the start of `buffer`.
    pub fn ptr(buffer: BufferId) -> Arg {
        Arg::Ptr { buffer, offset: 0 }
    }
    /// A pointer `offset` elements into `buffer`.
    pub fn ptr_at(buffer: BufferId, offset: i64) -> Arg {
        Arg::Ptr { buffer, offset }
    }
    /// The scalar type of a scalar argument (`None` for pointers).
    pub fn elem(&self) -> Option<Elem> {
        Some(match self {
            Arg::Ptr { .. } => return None,
            Arg::Bool(_) => Elem::Bool,
            Arg::I32(_) => Elem::I32,
            Arg::I64(_) => Elem::I64,
            Arg::U32(_) => Elem::U32,
            Arg::F32(_) => Elem::F32,
            Arg::F16(_) => Elem::F16,
            Arg::BF16(_) => Elem::BF16,
            Arg::F8E4M3(_) => Elem::F8E4M3,
        })
    }
    /// A description for error messages: `i32 5`, `pointer into buffer #2`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Arg::Ptr { buffer, offset } => format!("a pointer to buffer {buffer} + {offset}"),
            Arg::Bool(x) => format!("bool {x}"),
            Arg::I32(x) => format!("i32 {x}"),
            Arg::I64(x) => format!("i64 {x}"),
            Arg::U32(x) => format!("u32 {x}"),
            Arg::F32(x) => format!("f32 {x}"),
            Arg::F16(x) => format!("f16 {x}"),
            Arg::BF16(x) => format!("bf16 {x}"),
            Arg::F8E4M3(x) => format!("f8e4m3 {x}"),
        }
    }
    /// True if this argument fits a parameter of type `dtype` (pointers: any buffer; the
    /// buffer's element type is checked by [`run`]).
    pub fn fits(&self, dtype: DType) -> bool {
        match (self, dtype) {
            (Arg::Ptr { .. }, DType::Ptr(_)) => true,
            (a, DType::Val(e)) => a.elem() == Some(e),
            _ => false,
        }
    }
}

impl From<BufferId> for Arg {
    fn from(b: BufferId) -> Arg {
        Arg::ptr(b)
    }
}
impl From<bool> for Arg {
    fn from(x: bool) -> Arg {
        Arg::Bool(x)
    }
}
impl From<i32> for Arg {
    fn from(x: i32) -> Arg {
        Arg::I32(x)
    }
}
impl From<i64> for Arg {
    fn from(x: i64) -> Arg {
        Arg::I64(x)
    }
}
impl From<u32> for Arg {
    fn from(x: u32) -> Arg {
        Arg::U32(x)
    }
}
impl From<f32> for Arg {
    fn from(x: f32) -> Arg {
        Arg::F32(x)
    }
}
impl From<f16> for Arg {
    fn from(x: f16) -> Arg {
        Arg::F16(x)
    }
}
impl From<bf16> for Arg {
    fn from(x: bf16) -> Arg {
        Arg::BF16(x)
    }
}
impl From<F8E4M3> for Arg {
    fn from(x: F8E4M3) -> Arg {
        Arg::F8E4M3(x)
    }
}
