//! A CPU emulator for the PTX that the replay backend emits, so that generated kernels can be
//! run, and checked, without a GPU.
//!
//! [`Module::parse`] decodes PTX text once (an instruction or modifier it does not implement
//! is an error naming it and its line); [`Module::launch`] runs an entry over a grid, block
//! after block, each thread with its own PC, warp collectives (`shfl.sync`, `mma.sync`,
//! `ldmatrix`) once all 32 lanes of the warp reach them, and `bar.sync` once every live thread
//! of the block does. Every global or shared access is bounds- and alignment-checked.
//! `cp.async` copies happen when their thread's `cp.async.wait_group`/`wait_all` completes
//! their group; a shared read of bytes one still writes is an error.
//!
//! ```
//! use replay_ptx_emu::{Global, Module, Param};
//! let ptx = "
//! .version 8.0
//! .target sm_90a
//! .address_size 64
//! .visible .entry twice(
//!     .param .u64 out
//! )
//! {
//!     .reg .b32 %r<3>;
//!     .reg .b64 %rd<4>;
//!     ld.param.u64 %rd1, [out];
//!     cvta.to.global.u64 %rd2, %rd1;
//!     mov.u32 %r1, %tid.x;
//!     shl.b32 %r2, %r1, 1;
//!     mad.wide.u32 %rd3, %r1, 4, %rd2;
//!     st.global.u32 [%rd3], %r2;
//!     ret;
//! }
//! ";
//! let module = Module::parse(ptx).unwrap();
//! let mut global = Global::new();
//! let out = global.alloc(vec![0; 4 * 32]);
//! module.launch("twice", [1, 1, 1], [32, 1, 1], &[Param::Ptr(out)], &mut global).unwrap();
//! assert_eq!(global.bytes(out)[4 * 5], 10);
//! ```

mod error;
mod exec;
mod float;
mod inst;
mod memory;
mod parse;
mod warp;

pub use error::EmuError;
pub use memory::{BufferId, Global};

use parse::{Function, Program};

/// A kernel argument.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Param {
    /// A pointer to the first byte of a [`Global`] buffer.
    Ptr(BufferId),
    /// `.u8` (bools are 0 or 1).
    U8(u8),
    /// `.b16` (f16/bf16 bits).
    B16(u16),
    /// `.u32`.
    U32(u32),
    /// `.s32`.
    I32(i32),
    /// `.u64`.
    U64(u64),
    /// `.s64`.
    I64(i64),
    /// `.f32`.
    F32(f32),
}

impl Param {
    /// Size in bytes and raw bits.
    fn encode(self) -> (u32, u64) {
        match self {
            Param::Ptr(b) => (8, b.address()),
            Param::U8(v) => (1, v as u64),
            Param::B16(v) => (2, v as u64),
            Param::U32(v) => (4, v as u64),
            Param::I32(v) => (4, v as u32 as u64),
            Param::U64(v) => (8, v),
            Param::I64(v) => (8, v as u64),
            Param::F32(v) => (4, v.to_bits() as u64),
        }
    }
}

/// What a launch did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaunchStats {
    /// Instructions executed, summed over threads (guarded-off ones included).
    pub thread_instructions: u64,
    /// `(PTX line, times it ran summed over threads)` of every instruction, in program order.
    pub per_line: Vec<(usize, u64)>,
}

/// A parsed PTX module, ready to launch any number of times.
#[derive(Clone, Debug)]
pub struct Module {
    program: Program,
}

impl Module {
    /// Parses and decodes PTX text.
    pub fn parse(ptx: &str) -> Result<Module, EmuError> {
        Ok(Module {
            program: parse::parse(ptx)?,
        })
    }

    /// The names of the module's entries.
    pub fn entries(&self) -> impl Iterator<Item = &str> {
        self.program.functions.iter().map(|f| f.name.as_str())
    }

    /// Bytes of static shared memory one block of `entry` uses.
    pub fn shared_bytes(&self, entry: &str) -> Result<u32, EmuError> {
        Ok(self.function(entry)?.shared_bytes)
    }

    fn function(&self, entry: &str) -> Result<&Function, EmuError> {
        self.program
            .functions
            .iter()
            .find(|f| f.name == entry)
            .ok_or_else(|| EmuError::NoEntry {
                name: entry.to_string(),
                entries: self.entries().collect::<Vec<_>>().join(", "),
            })
    }

    /// Runs `entry` over `grid` blocks of `block` threads with `params`, on `global`'s
    /// buffers. Blocks run one after another; effects of blocks that ran before an error
    /// stay, as on a GPU.
    pub fn launch(
        &self,
        entry: &str,
        grid: [u32; 3],
        block: [u32; 3],
        params: &[Param],
        global: &mut Global,
    ) -> Result<LaunchStats, EmuError> {
        self.launch_with_shared(entry, grid, block, 0, params, global)
    }

    /// [`Module::launch`] with `dynamic_shared` bytes of dynamic shared memory: the size of
    /// the module's `.extern .shared` array, which starts where the static arrays end.
    pub fn launch_with_shared(
        &self,
        entry: &str,
        grid: [u32; 3],
        block: [u32; 3],
        dynamic_shared: u32,
        params: &[Param],
        global: &mut Global,
    ) -> Result<LaunchStats, EmuError> {
        let f = self.function(entry)?;
        let fail = |message: String| EmuError::Launch {
            entry: entry.to_string(),
            message,
        };
        if params.len() != f.params.len() {
            return Err(fail(format!(
                "{} arguments for {} parameters",
                params.len(),
                f.params.len()
            )));
        }
        let mut bits = Vec::with_capacity(params.len());
        for (i, (p, decl)) in params.iter().zip(&f.params).enumerate() {
            let (bytes, v) = p.encode();
            if bytes != decl.bytes {
                return Err(fail(format!(
                    "argument {i} ({p:?}) has {bytes} bytes, parameter `{}` {}",
                    decl.name, decl.bytes
                )));
            }
            bits.push(v);
        }
        let threads: u64 = block.iter().map(|&b| b as u64).product();
        if grid.contains(&0) || block.contains(&0) || threads > 1024 {
            return Err(fail(format!("grid {grid:?} × block {block:?} is not a valid launch")));
        }
        if let Some(m) = f.maxntid {
            if threads > m.iter().map(|&v| v as u64).product() {
                return Err(fail(format!("block {block:?} exceeds .maxntid {m:?}")));
            }
        }
        let launch = exec::Launch {
            f,
            params: &bits,
            grid,
            block,
            dynamic_shared,
            condition_setters: Default::default(),
        };
        let hits = launch.run(global)?;
        Ok(LaunchStats {
            thread_instructions: hits.iter().sum(),
            per_line: f.lines.iter().copied().zip(hits).collect(),
        })
    }
}
