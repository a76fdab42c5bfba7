//! The compilation pipeline: traced IR → passes → PTX text for a target, keeping the text of
//! every stage for snapshots and for users.

use crate::error::CompileError;
use crate::ir::Kernel;
use std::fmt;

/// A GPU target: one PTX module per target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// Hopper (compute capability 9.0): `.target sm_90a`.
    Sm90,
    /// Blackwell B200 (compute capability 10.0): `.target sm_100a`.
    Sm100,
}

impl Target {
    /// The `.target` name, also the `ptxas -arch` value.
    pub fn arch(self) -> &'static str {
        match self {
            Target::Sm90 => "sm_90a",
            Target::Sm100 => "sm_100a",
        }
    }
    /// The lowest PTX ISA version (major, minor) that accepts this target.
    pub fn min_ptx_version(self) -> (u32, u32) {
        match self {
            Target::Sm90 => (8, 0),
            Target::Sm100 => (8, 6),
        }
    }
    /// The target for a compute capability, if supported (9.x → Sm90, 10.0 → Sm100).
    pub fn from_compute_capability(major: u32, minor: u32) -> Option<Target> {
        match (major, minor) {
            (9, _) => Some(Target::Sm90),
            (10, 0) => Some(Target::Sm100),
            _ => None,
        }
    }
    /// Parses `sm_90`, `sm_90a`, `sm_100`, `sm_100a` (also `90` / `100`).
    pub fn parse(s: &str) -> Option<Target> {
        match s.trim_start_matches("sm_").trim_end_matches('a') {
            "90" => Some(Target::Sm90),
            "100" => Some(Target::Sm100),
            _ => None,
        }
    }
    /// Every supported target.
    pub const ALL: [Target; 2] = [Target::Sm90, Target::Sm100];
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.arch())
    }
}

/// A compiled kernel specialization.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The `.entry` name.
    pub entry: String,
    /// The target it was compiled for.
    pub target: Target,
    /// PTX module text.
    pub ptx: String,
    /// Threads per program (`32 × num_warps`).
    pub num_threads: u32,
    /// The occupancy hint: programs per SM ptxas must fit (registers capped), or 1 for none.
    pub min_blocks: u32,
    /// Shared memory the kernel uses, in bytes: a static array, or beyond
    /// [`crate::backend::smem::STATIC_LIMIT`] an `.extern` one launched with this much dynamic
    /// shared memory ([`Compiled::dynamic_shared_bytes`]).
    pub shared_bytes: u32,
    /// `(stage name, text)` for every stage: the IR after each pass, the layouts, the PTX.
    pub stages: Vec<(String, String)>,
    /// Whether the PTX carries the kernel's source lines (`.file` / `.loc`), which the driver
    /// turns into line tables when asked.
    pub line_info: bool,
}

impl Compiled {
    /// The text of one stage (e.g. `"trace"`, `"dce"`, `"layout"`, `"ptx"`).
    pub fn stage(&self, name: &str) -> Option<&str> {
        self.stages.iter().find(|(n, _)| n == name).map(|(_, t)| t.as_str())
    }
    /// The names of the stages, in order.
    pub fn stage_names(&self) -> Vec<&str> {
        self.stages.iter().map(|(n, _)| n.as_str()).collect()
    }
}

/// Runs the passes and the PTX backend on a traced kernel.
///
/// With `REPLAY_LINEINFO=1` in the environment the PTX carries the kernel's source lines, for
/// profilers ([`compile_with_lines`]).
pub fn compile(kernel: &Kernel, target: Target) -> Result<Compiled, CompileError> {
    compile_with_lines(kernel, target, line_info_requested())
}

/// True when `REPLAY_LINEINFO=1`: compiled kernels carry their source lines.
pub fn line_info_requested() -> bool {
    std::env::var("REPLAY_LINEINFO").is_ok_and(|v| v == "1")
}

/// [`compile`], the PTX carrying the kernel's source lines or not: each instruction's code is
/// preceded by a `.loc` of the Rust line whose tile operation traced it (`.file` per source
/// file), so that a profiler shows the kernel's lines beside the SASS; the code is the same.
pub fn compile_with_lines(kernel: &Kernel, target: Target, line_info: bool) -> Result<Compiled, CompileError> {
    let mut stages = vec![("trace".to_string(), kernel.to_string())];
    let optimized = crate::passes::run_all(kernel.clone(), &mut stages)?;
    let generated = crate::backend::generate(&optimized, target, line_info)?;
    stages.extend(generated.stages);
    stages.push(("ptx".to_string(), generated.ptx.clone()));
    Ok(Compiled {
        entry: optimized.entry_name(),
        target,
        ptx: generated.ptx,
        num_threads: optimized.num_warps * 32,
        min_blocks: optimized.min_blocks,
        shared_bytes: generated.shared_bytes,
        stages,
        line_info,
    })
}

impl Compiled {
    /// The dynamic shared memory a launch must pass: all of [`Compiled::shared_bytes`] when the
    /// kernel declares its shared array `.extern` (beyond the static limit), else 0.
    pub fn dynamic_shared_bytes(&self) -> u32 {
        if self.shared_bytes as usize > crate::backend::smem::STATIC_LIMIT {
            self.shared_bytes
        } else {
            0
        }
    }
}
