//! The emulator backend: runs a launch's PTX (compiled for the device's target, parsed once
//! per module) on the CPU through [`replay_ptx_emu`], with buffers copied into its memory and
//! back. Every access outside a buffer is an error naming the PTX instruction.

use super::args::ArgValue;
use super::grid::Grid;
use crate::driver::buffer::RawBuffer;
use crate::driver::module::LoadedKernel;
use crate::driver::stream::Stream;
use crate::error::{Result, RuntimeError};
use replay_ptx_emu::{BufferId, Global, Param};

/// Runs `loaded`'s PTX over `grid` with `loaded.info.num_threads` threads per block. Buffers
/// are read into host memory (ordered after the work already queued on `stream`), the kernel
/// is emulated, and every buffer is written back (so writes through shared references land,
/// as on a GPU).
pub fn run(stream: &Stream, loaded: &LoadedKernel, grid: Grid, args: &[ArgValue<'_>]) -> Result<()> {
    let (Some(module), Some(compiled)) = (loaded.emu.as_ref(), loaded.compiled.as_ref()) else {
        return Err(RuntimeError::DeviceMismatch(format!(
            "`{}` was not loaded for the emulator",
            loaded.key.kernel
        )));
    };
    let mut global = Global::new();
    let mut buffers: Vec<(&RawBuffer, BufferId)> = Vec::new();
    let mut params = Vec::with_capacity(args.len());
    for a in args {
        params.push(match *a {
            ArgValue::Buffer(b) => {
                // The same buffer passed twice aliases one emulator buffer.
                let id = match buffers.iter().find(|(r, _)| std::ptr::eq(*r, b)) {
                    Some((_, id)) => *id,
                    None => {
                        let id = global.alloc(b.read_bytes(stream)?);
                        buffers.push((b, id));
                        id
                    }
                };
                Param::Ptr(id)
            }
            ArgValue::I32(v) => Param::I32(v),
            ArgValue::I64(v) => Param::I64(v),
            ArgValue::U32(v) => Param::U32(v),
            ArgValue::F32(v) => Param::F32(v),
            ArgValue::Bool(v) => Param::U8(v as u8),
        });
    }
    let result = module.launch(
        &compiled.entry,
        [grid.x, grid.y, grid.z],
        [loaded.info.num_threads, 1, 1],
        &params,
        &mut global,
    );
    // Blocks that ran before a fault keep their effects, as on a GPU.
    for (b, id) in &buffers {
        b.write_bytes(stream, global.bytes(*id))?;
    }
    result.map(|_| ()).map_err(|e| RuntimeError::Emulator {
        kernel: loaded.key.kernel.clone(),
        message: e.to_string(),
    })
}
