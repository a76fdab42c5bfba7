//! State-space-model decode (ReplaySSM, arXiv 2610.13778): model shapes, float64 CPU references
//! of the Mamba-2 recurrence and of its replay / speculative-verify forms, and the HBM traffic
//! model that the GPU kernels are judged against.
//!
//! - [`shapes`]: the benchmark models' head layouts and a reduced shape for CPU tests.
//! - [`reference`](mod@reference): the plain recurrence, the replay form (checkpoint plus a ring
//!   of input records) and output-only speculative verification, all in `f64`.
//! - [`kernels`]: the decode kernels in the tile language (conventional, replay step, verify,
//!   commit, conventional speculative baseline) and their memory layout.
//! - [`traffic`]: bytes moved per decode step and per window, the byte-ceiling speedup and the
//!   best replay window `L*`.

pub mod kernels;
pub mod reference;
pub mod shapes;
pub mod traffic;
