//! Typed launches: arguments checked by the Rust compiler against the kernel's parameter
//! types, and at run time against its declared extents, before anything runs.

pub mod args;
pub mod check;
pub mod grid;
pub mod interp;
pub mod kernel;
