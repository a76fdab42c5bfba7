//! ReplaySSM decoding on the runtime: the decode state managers of one Mamba-2 layer, their
//! autotuning, the benchmark against the memory roofline and the decode demo.
//!
//! - [`state`]: [`state::Mamba2ReplayState`] (checkpoints, record rings, device counters;
//!   `step`, `verify`, `commit`; continuous batching; CUDA-graph capture) and
//!   [`state::Mamba2ConventionalState`] (the baseline), both [`state::DecodeLayer`]s;
//! - [`admit`]: the device kernel that puts a sequence into a slot.
//! - [`tuning`]: tile shapes from the kernels' search spaces and the window `L` from the
//!   amortised time of a whole window (scheme API), candidates around `L*`.
//! - [`bench`](mod@bench): `replay bench-ssm`, the table, JSON and plot.
//! - [`demo`]: `replay decode`, the main command.

pub mod admit;
pub mod bench;
pub mod demo;
pub mod state;
pub mod tuning;
