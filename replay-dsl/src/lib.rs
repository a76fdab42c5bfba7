//! # replay-dsl
//!
//! The compiler of the replay tile language: a kernel body written in Rust (usually under
//! `#[kernel]`) is *traced* into a tile IR ([`ir`]), optimised by [`passes`], lowered to PTX for
//! sm_90a or sm_100a by [`backend::ptx`], or executed on the CPU by [`interp`].

pub mod error;
pub mod front;
pub mod ir;
pub mod types;

pub use error::{CompileError, ErrorKind};
pub use types::{DType, Elem, Ty};

/// Everything a kernel body needs in scope.
pub mod prelude {
    pub use crate::front::control::{for_range, range, range_step, Carry, Cond};
    pub use crate::front::ops::{
        abs, arange, atomic_add, atomic_cas, atomic_max, cumprod, cumprod_exclusive, cumprod_reverse,
        cumprod_reverse_exclusive, cumsum, cumsum_exclusive, cumsum_reverse, cumsum_reverse_exclusive, dot, dot_acc,
        dot_acc_in, dot_in, exp, exp2, load, load_or, log, log2, max, max_all, maximum, min, min_all, minimum,
        num_programs, prefetch, program_id, rsqrt, select, set_graph_condition, sigmoid, silu, softplus, sqrt,
        static_assert, store, sum, sum_all, tanh, Compare, Logic, MaskArg,
    };
    pub use crate::front::shared::{shared, wait_async, Shared};
    pub use crate::front::tile::{constant, full, zeros, Element, Float, Int, Num, Operand, Ptr, Scalar, Tile};
    pub use crate::ir::DotPrecision;
    pub use float8::F8E4M3;
    pub use half::{bf16, f16};
    pub use replay_macros::{kernel, kernel_fn};
}
pub mod spec;
pub use spec::{ConfigValues, KernelDef, KernelEntry, ParamSpec, Specialization};
pub mod backend;
pub mod compile;
pub mod passes;
pub use compile::{compile, compile_with_lines, line_info_requested, Compiled, Target};
pub mod host;
pub mod interp;

/// A fingerprint of this compiler's sources (16 hex digits): what a kernel compiles to depends on
/// it, so tuning results are keyed on it as well as on the kernel's source.
pub const COMPILER_FINGERPRINT: &str = env!("REPLAY_DSL_FINGERPRINT");
