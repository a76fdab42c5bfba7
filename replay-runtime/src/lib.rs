//! # replay-runtime
//!
//! Runs kernels of the replay tile language on NVIDIA GPUs, or on the CPU interpreter:
//!
//! - [`driver`]: [`Device`] (opened through the CUDA driver, loaded at run time, or the
//!   interpreter when `REPLAY_INTERPRET=1`), [`Stream`], [`Event`], [`DeviceBuffer`], module
//!   loading with an in-process cache, CUDA graph capture;
//! - [`launch`]: typed launches — `K::compile(&device, config)?.launch(&stream, grid, args)?`
//!   with `args` a tuple checked against the kernel's parameters by the Rust compiler, and
//!   buffer lengths checked against the kernel's extents before the launch;
//! - [`tune`]: the autotuner, its search spaces and its persistent JSON cache.
//!
//! ```ignore
//! use replay_runtime::prelude::*;
//! let device = Device::open(0)?;
//! let stream = device.new_stream()?;
//! let x = DeviceBuffer::from_host(&stream, &xs)?;
//! let y = DeviceBuffer::from_host(&stream, &ys)?;
//! let mut out = DeviceBuffer::<f32>::zeros(&stream, n)?;
//! add::Kernel::compile(&device, add::Config { BLOCK: 1024, num_warps: 4, min_blocks: 1 })?
//!     .launch(&stream, Grid::cdiv(n as u64, 1024), (&x, &y, &mut out, n as i32))?;
//! ```
//!
//! Without a driver every GPU entry point returns [`RuntimeError::NoDriver`]; nothing panics.

pub mod driver;
pub mod elem;
pub mod error;
pub mod launch;
pub mod tune;

pub use driver::buffer::{DeviceBuffer, RawBuffer};
pub use driver::device::{Backend, Device, DeviceInfo};
pub use driver::graph::{Graph, GraphCondition};
pub use driver::module::{LoadInfo, LoadedKernel, ModuleKey};
pub use driver::stream::{Event, Stream};
pub use elem::HostElem;
pub use error::RuntimeError;
pub use launch::args::{ArgValue, KernelArg, LaunchArgs};
pub use launch::check::LaunchError;
pub use launch::grid::Grid;
pub use launch::kernel::{compile, CompiledKernel, Engine, KernelExt};

/// Everything a caller needs in scope to open a device, move data, launch and tune.
pub mod prelude {
    pub use crate::launch::kernel::KernelExt;
    pub use crate::{compile, Backend, CompiledKernel, Device, DeviceBuffer, Event, Grid, RuntimeError, Stream};
}
