//! The interpreter backend: runs a launch's tile IR on the CPU through
//! [`replay_dsl::interp`], with buffers copied into the interpreter's memory and back.

use super::args::ArgValue;
use super::grid::Grid;
use super::host_copy::{copy_in, HostArgs};
use crate::driver::module::LoadedKernel;
use crate::driver::stream::Stream;
use crate::error::{Result, RuntimeError};
use replay_dsl::interp::{self, Arg, Memory};

/// Runs `loaded.ir` over `grid`. Works on any device: buffers are read into host memory
/// (ordered after the work already queued on `stream`), the kernel is interpreted, and every
/// buffer is written back (so writes through shared references land, as on a GPU).
pub fn run(stream: &Stream, loaded: &LoadedKernel, grid: Grid, args: &[ArgValue<'_>]) -> Result<()> {
    let Some(ir) = loaded.ir.as_ref() else {
        return Err(RuntimeError::Unsupported {
            backend: "interpreter",
            what: "a kernel without tile IR".into(),
        });
    };
    let mut mem = Memory::new();
    let HostArgs { buffers, params } = copy_in(
        stream,
        args,
        |b, bytes| mem.alloc_bytes(b.elem(), bytes),
        |a| match a {
            Ok(id) => Arg::ptr(id),
            Err(ArgValue::I32(v)) => Arg::I32(*v),
            Err(ArgValue::I64(v)) => Arg::I64(*v),
            Err(ArgValue::U32(v)) => Arg::U32(*v),
            Err(ArgValue::F32(v)) => Arg::F32(*v),
            Err(ArgValue::Bool(v)) => Arg::Bool(*v),
            Err(ArgValue::Buffer(_)) => unreachable!("buffers come as ids"),
        },
    )?;
    let result = interp::run(ir, [grid.x, grid.y, grid.z], &params, &mut mem);
    stream
        .device()
        .log_graph_conditions(mem.graph_conditions().iter().copied());
    // Programs that ran before a fault keep their effects, as on a GPU.
    for (b, id) in &buffers {
        b.write_bytes(stream, mem.bytes(*id))?;
    }
    result.map_err(|e| RuntimeError::Interpreter {
        kernel: loaded.key.kernel.clone(),
        message: e.to_string(),
    })
}
