//! The language front end: kernel bodies run as Rust and trace tile IR.

pub mod builder;
pub mod control;
pub mod ops;
pub mod shared;
pub mod tile;
