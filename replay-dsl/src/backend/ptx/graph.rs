//! Graph conditions ([`Op::SetCondition`](crate::ir::Op::SetCondition)): a call of the device
//! runtime's `cudaGraphSetConditional` by the program's first thread. ptxas resolves the call
//! itself (as it does `vprintf`): the module only declares the function.

use super::regs::Class;
use super::Emitter;
use crate::error::CompileError;
use crate::ir::Value;

/// The declaration of the device runtime's function, emitted once in a module that calls it.
pub(super) const DECLARATION: &str =
    ".extern .func cudaGraphSetConditional (.param .b64 cudaGraphSetConditional_handle, .param .b32 cudaGraphSetConditional_value);";

/// The call's argument variables, declared once in the entry's body.
const HANDLE_ARG: &str = "replay_condition_handle";
const VALUE_ARG: &str = "replay_condition_value";

impl Emitter<'_> {
    /// `cudaGraphSetConditional(handle, value)` from the program's first thread.
    pub(super) fn set_condition(&mut self, handle: Value, value: Value) -> Result<(), CompileError> {
        let scalar = self.asg.scalar();
        let h = self.get(handle, scalar)?[0];
        let v = self.get(value, scalar)?[0];
        if !self.sets_conditions {
            self.sets_conditions = true;
            use std::fmt::Write as _;
            let _ = writeln!(self.prologue, "\t.param .b64 {HANDLE_ARG};\n\t.param .b32 {VALUE_ARG};");
        }
        let word = self.reg(Class::B32);
        emit!(self, "selp.u32 {word}, 1, 0, {v}");
        let skip = self.label();
        if let Some(first) = self.owner(scalar) {
            emit!(self, "@!{first} bra {skip}");
        }
        emit!(self, "st.param.b64 [{HANDLE_ARG}], {h}");
        emit!(self, "st.param.b32 [{VALUE_ARG}], {word}");
        emit!(self, "call cudaGraphSetConditional, ({HANDLE_ARG}, {VALUE_ARG})");
        self.place(&skip);
        Ok(())
    }
}
