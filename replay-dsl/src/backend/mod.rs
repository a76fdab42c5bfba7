//! The PTX backend: layouts, memory-access analysis, shared-memory planning and PTX text.

use crate::compile::Target;
use crate::error::{CompileError, ErrorKind};
use crate::ir::Kernel;

/// What the backend produces for one kernel specialization.
#[derive(Clone, Debug)]
pub struct Generated {
    /// PTX module text.
    pub ptx: String,
    /// Static shared memory in bytes.
    pub shared_bytes: u32,
    /// Extra stage texts (e.g. the IR annotated with layouts), in order.
    pub stages: Vec<(String, String)>,
}

/// Lowers optimised IR to PTX for `target`.
pub fn generate(kernel: &Kernel, target: Target) -> Result<Generated, CompileError> {
    let _ = target;
    Err(CompileError::new(&kernel.name, "backend", ErrorKind::Unsupported("the PTX backend is being written".into())))
}
