//! Target-independent IR passes: constant folding, common-subexpression elimination and dead
//! code elimination.

mod cse;
mod dce;
mod fold;

use crate::error::CompileError;
use crate::ir::Kernel;

pub use cse::cse;
pub use dce::dce;
pub use fold::fold;

/// Runs fold → CSE → DCE, appending the IR text after each pass to `stages`.
pub fn run_all(mut kernel: Kernel, stages: &mut Vec<(String, String)>) -> Result<Kernel, CompileError> {
    fold(&mut kernel)?;
    stages.push(("fold".into(), kernel.to_string()));
    cse(&mut kernel);
    stages.push(("cse".into(), kernel.to_string()));
    dce(&mut kernel);
    stages.push(("dce".into(), kernel.to_string()));
    Ok(kernel)
}
