//! Typed launches: arguments checked by the Rust compiler against the kernel's parameter
//! types, and at run time against its declared extents, before anything runs; and checked
//! launches of already traced IR with type-erased arguments ([`traced`]).

pub mod args;
pub mod check;
pub mod emu;
pub mod grid;
pub mod host_copy;
pub mod interp;
pub mod kernel;
pub mod traced;
