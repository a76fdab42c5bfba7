//! The autotuner: search spaces declared with the kernel, timing with events (warm-up,
//! median, inputs rotated past L2), output checks against the first candidate, and a
//! persistent JSON cache keyed by (kernel, source hash, GPU + driver, shape bucket).
//! `REPLAY_TUNE=off|cached|force` selects whether it runs.

pub mod bench;
pub mod cache;
pub mod key;
pub mod mode;
pub mod scheme;
pub mod space;
pub mod tuner;

pub use bench::BenchSettings;
pub use cache::{CandidateRecord, Outcome, TuneCache, TuneRecord, Values};
pub use key::TuneKey;
pub use mode::TuneMode;
pub use scheme::Scheme;
pub use space::{PruneContext, SearchSpace};
pub use tuner::{Autotuner, Fill, Problem, ScalarArg, TuneSource, Tuned};
