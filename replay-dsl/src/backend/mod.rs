//! The PTX backend: layouts, memory-access analysis, shared-memory planning and PTX text.
//!
//! # Execution model
//! One program is one CTA of `32 × num_warps` threads. Every tile value is distributed over the
//! CTA's threads by a [`layout::Layout`]; each thread keeps its elements in virtual registers,
//! fully unrolled (shapes are static powers of two). Scalars are replicated in every thread.
//!
//! # Layouts
//! A layout assigns every register bit, lane bit and warp bit to one coordinate bit of the tile
//! (or, for lanes and warps, to nothing: replication). The thread-dependent part of each
//! coordinate is computed once at kernel entry from `%tid.x`; the register part is a constant.
//! Shape ops are relabelings: `expand_dims` inserts a dimension without bits, `broadcast` drops
//! the broadcast dimensions' bits from the source (a source register is a compile-time function
//! of the destination's), `reshape` renames bits through the row-major flat index, `trans`
//! swaps dimensions. A reduction along `d` combines `d`'s register bits in the thread, its lane
//! bits with butterfly shuffles and its warp bits through shared memory; its result layout is the
//! input's without `d`'s bits, so `expand_dims` + `broadcast` of it is free again.
//!
//! # Pipeline
//! [`axis`] (contiguity/divisibility/constancy) → [`assign`] (which layout each value is
//! computed in; conversions; [`mma`] decides which dots run on tensor cores and their result
//! layout) → [`ptx`] (the emitter, which plans shared memory with [`smem`]).

pub mod assign;
pub mod axis;
pub mod layout;
pub mod mma;
pub mod ptx;
pub mod smem;

use crate::compile::Target;
use crate::error::CompileError;
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
pub fn generate(kernel: &Kernel, target: Target, line_info: bool) -> Result<Generated, CompileError> {
    let axis = axis::AxisTable::analyze(kernel);
    let asg = assign::Assignment::new(kernel, &axis);
    let layout_text = asg.describe();
    let out = ptx::emit_kernel(kernel, asg, &axis, target, line_info)?;
    Ok(Generated {
        ptx: out.ptx,
        shared_bytes: out.shared_bytes,
        stages: vec![("layout".into(), layout_text), ("emitted".into(), out.emitted)],
    })
}
