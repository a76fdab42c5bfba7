//! The emulator's errors: every one names the PTX line it comes from where there is one.

use thiserror::Error;

/// What went wrong parsing or running PTX.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EmuError {
    /// The text is not PTX this emulator understands (malformed, or an unsupported directive,
    /// operand or modifier).
    #[error("PTX line {line}: {message}")]
    Parse {
        /// 1-based line of the PTX text.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// An instruction the emulator does not implement (never skipped silently).
    #[error("PTX line {line}: unknown instruction `{opcode}`")]
    UnknownOpcode {
        /// 1-based line of the PTX text.
        line: usize,
        /// The full opcode with its modifiers, e.g. `tex.2d.v4.f32.f32`.
        opcode: String,
    },
    /// The module has no `.entry` of that name.
    #[error("no entry `{name}` in the module (entries: {entries})")]
    NoEntry {
        /// The name asked for.
        name: String,
        /// The entries there are, comma-separated.
        entries: String,
    },
    /// Two threads of one launch set the same graph condition (`cudaGraphSetConditional`): on
    /// a GPU they race.
    #[error(
        "PTX line {line} (`{inst}`), block {block:?} thread {thread:?}: sets graph condition {handle:#x}, which \
         block {first_block:?} thread {first_thread:?} of the same launch set"
    )]
    ConditionRace {
        /// 1-based line of the PTX text.
        line: usize,
        /// The instruction text.
        inst: String,
        /// The condition's handle.
        handle: u64,
        /// `%ctaid` of the second setter.
        block: [u32; 3],
        /// `%tid` of the second setter.
        thread: [u32; 3],
        /// `%ctaid` of the first setter.
        first_block: [u32; 3],
        /// `%tid` of the first setter.
        first_thread: [u32; 3],
    },
    /// The launch does not fit the entry (parameters, block size).
    #[error("launch of `{entry}`: {message}")]
    Launch {
        /// The entry launched.
        entry: String,
        /// What does not fit.
        message: String,
    },
    /// A load, store or atomic outside its buffer or the declared shared memory, or
    /// misaligned: a CPU memcheck.
    #[error(
        "PTX line {line} (`{inst}`), block {block:?} thread {thread:?}: {space} access of {bytes} bytes at \
         {addr:#x}: {detail}"
    )]
    Memory {
        /// 1-based line of the PTX text.
        line: usize,
        /// The instruction text.
        inst: String,
        /// `global`, `shared` or `param`.
        space: &'static str,
        /// The address accessed.
        addr: u64,
        /// Bytes accessed.
        bytes: u32,
        /// Why it is invalid (out of bounds of which buffer, misaligned, …).
        detail: String,
        /// `%ctaid` of the faulting thread.
        block: [u32; 3],
        /// `%tid` of the faulting thread.
        thread: [u32; 3],
    },
    /// A warp collective (`shfl.sync`, `mma.sync`, `ldmatrix`) or barrier that the threads
    /// cannot complete: a diverged warp, an exited thread, a deadlock.
    #[error("PTX line {line} (`{inst}`), block {block:?}: {message}")]
    Sync {
        /// 1-based line of the PTX text.
        line: usize,
        /// The instruction text.
        inst: String,
        /// `%ctaid` of the block.
        block: [u32; 3],
        /// What happened.
        message: String,
    },
}
