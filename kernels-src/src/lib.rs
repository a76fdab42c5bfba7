//! # replay-kernels
//!
//! Kernels written in the replay tile language, each with a float64 CPU reference:
//! the [`gallery`] (vector add, softmax, RMSNorm, scans, matmul, atomics), and the float64
//! references and traffic model of the ReplaySSM decode kernels ([`ssm`]).

pub mod gallery;
pub mod ssm;
pub mod testing;

use replay_dsl::KernelEntry;

/// Every kernel of this crate, for the command line, checks and benchmarks.
pub fn registry() -> Vec<KernelEntry> {
    use gallery::*;
    vec![
        KernelEntry::of::<vector_add::vector_add::Kernel>(),
        KernelEntry::of::<softmax::softmax::Kernel>(),
        KernelEntry::of::<rmsnorm::rmsnorm::Kernel>(),
        KernelEntry::of::<scan::row_scan::Kernel>(),
        KernelEntry::of::<matmul::matmul::Kernel>(),
        KernelEntry::of::<atomics::histogram::Kernel>(),
        KernelEntry::of::<atomics::global_max::Kernel>(),
        KernelEntry::of::<ssm::kernels::decode::mamba2_decode::Kernel>(),
        KernelEntry::of::<ssm::kernels::decode::mamba2_decode_f16::Kernel>(),
        KernelEntry::of::<ssm::kernels::replay::mamba2_replay_step::Kernel>(),
        KernelEntry::of::<ssm::kernels::verify::mamba2_verify::Kernel>(),
        KernelEntry::of::<ssm::kernels::fold::mamba2_fold::Kernel>(),
        KernelEntry::of::<ssm::kernels::commit::mamba2_commit::Kernel>(),
        KernelEntry::of::<ssm::kernels::spec_baseline::mamba2_spec_baseline::Kernel>(),
    ]
}

/// The kernel named `name`, if any.
pub fn find(name: &str) -> Option<KernelEntry> {
    registry().into_iter().find(|k| k.name == name)
}
