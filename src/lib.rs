//! # replay
//!
//! The `replay` command and its GPU check / benchmark harness, as a library so that tests can
//! call the pieces:
//!
//! - [`cli`]: the command line (`devices`, `kernels`, `ptx`, `check`, `bench`, `tune`);
//! - [`gallery`]: for every gallery kernel, its check cases (sizes with tails), benchmark
//!   shapes, fixed configurations, inputs and float64 expectations;
//! - [`harness`]: runs one problem instance on a device (fresh random inputs, poisoned
//!   outputs, launch, read back) and compares it with the expectation;
//! - [`check`], [`bench`](mod@bench), [`tune`]: the three measuring commands;
//! - [`table`]: plain-text tables;
//! - [`ssm`]: ReplaySSM decoding: the Mamba-2 decode state managers, their tuning, `bench-ssm`
//!   and the `decode` demo.

pub mod bench;
pub mod check;
pub mod cli;
pub mod devices;
pub mod error;
pub mod gallery;
pub mod harness;
pub mod kernels;
pub mod ptx;
pub mod ssm;
pub mod table;
pub mod tune;

pub use error::CliError;
