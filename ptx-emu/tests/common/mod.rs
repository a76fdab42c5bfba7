//! Helpers of the end-to-end tests: one DSL kernel run on the interpreter and, compiled for
//! sm_90a, on the emulator, with the same arguments.
#![allow(dead_code)]

use replay_dsl::ir::Kernel;
use replay_dsl::{compile, DType, Elem, Target};
use replay_ptx_emu::{Global, Module, Param};

/// One argument: a buffer (element type, initial bytes) or a scalar.
#[derive(Clone, Debug)]
pub enum Arg {
    Buf(Elem, Vec<u8>),
    I32(i32),
    F32(f32),
}

impl Arg {
    /// A buffer holding `data`.
    pub fn buf<T: replay_dsl::host::HostElem>(data: &[T]) -> Arg {
        Arg::Buf(T::ELEM, replay_dsl::host::slice_to_bytes(data))
    }
    /// `len` elements of `elem`, every byte 0xFF (NaN for floats).
    pub fn poisoned(elem: Elem, len: usize) -> Arg {
        Arg::Buf(elem, vec![0xFF; len * elem.bytes()])
    }
}

/// Every buffer's final bytes after running `kernel` on the interpreter.
pub fn run_interp(kernel: &Kernel, grid: [u32; 3], args: &[Arg]) -> Result<Vec<Vec<u8>>, String> {
    use replay_dsl::interp::{run, Arg as IArg, Memory};
    let mut mem = Memory::new();
    let iargs: Vec<IArg> = args
        .iter()
        .map(|a| match a {
            Arg::Buf(e, b) => IArg::ptr(mem.alloc_bytes(*e, b.clone())),
            Arg::I32(v) => IArg::I32(*v),
            Arg::F32(v) => IArg::F32(*v),
        })
        .collect();
    run(kernel, grid, &iargs, &mut mem).map_err(|e| format!("interpreter: {e}"))?;
    Ok(iargs
        .iter()
        .map(|a| match a {
            IArg::Ptr { buffer, .. } => mem.bytes(*buffer).to_vec(),
            _ => vec![],
        })
        .collect())
}

/// Every buffer's final bytes after running `kernel`, compiled for sm_90a, on the emulator;
/// also the thread-instructions it executed.
pub fn run_emu(kernel: &Kernel, grid: [u32; 3], args: &[Arg]) -> Result<(Vec<Vec<u8>>, u64), String> {
    let c = compile(kernel, Target::Sm90).map_err(|e| format!("compile: {e}"))?;
    let module = Module::parse(&c.ptx).map_err(|e| format!("parse: {e}"))?;
    let mut global = Global::new();
    let mut ids = vec![];
    let params: Vec<Param> = args
        .iter()
        .zip(&kernel.params)
        .map(|(a, p)| match (a, p.dtype) {
            (Arg::Buf(_, b), DType::Ptr(_)) => {
                let id = global.alloc(b.clone());
                ids.push(Some(id));
                Param::Ptr(id)
            }
            (Arg::I32(v), _) => {
                ids.push(None);
                Param::I32(*v)
            }
            (Arg::F32(v), _) => {
                ids.push(None);
                Param::F32(*v)
            }
            (a, t) => panic!("argument {a:?} for a parameter of type {t:?}"),
        })
        .collect();
    let stats = module
        .launch(&c.entry, grid, [c.num_threads, 1, 1], &params, &mut global)
        .map_err(|e| format!("emulator: {e}"))?;
    let out = ids
        .iter()
        .map(|id| id.map(|id| global.bytes(id).to_vec()).unwrap_or_default())
        .collect();
    Ok((out, stats.thread_instructions))
}

/// f32 values of little-endian bytes.
pub fn f32s(b: &[u8]) -> Vec<f32> {
    replay_dsl::host::slice_from_bytes(b)
}

/// A seed: `REPLAY_SEED`, else fresh (printed with `test`'s name).
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("REPLAY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("{test}: REPLAY_SEED={seed}");
    seed
}
