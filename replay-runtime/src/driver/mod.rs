//! The driver layer: devices, streams, events, buffers, modules and graphs, over the CUDA
//! driver API (loaded at run time through cudarc) or the CPU interpreter.

pub mod buffer;
pub mod device;
pub mod graph;
pub mod module;
pub mod probe;
pub mod ptxas;
pub mod stream;
