//! Helpers shared by the property tests (included with `#[path]`; no tests of its own).
#![allow(dead_code, unused_imports)]

use proptest::test_runner::Config;
use replay_dsl::ir::Kernel;
use replay_dsl::{compile, Elem, Target};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

#[path = "shared/mod.rs"]
mod shared;

pub use shared::{ptr, val, SplitMix64 as Rand};

/// A proptest configuration with `cases` cases and bounded shrinking (so that a failing
/// property reports in seconds, not minutes, on a small machine). `PROPTEST_CASES` overrides
/// the number of cases.
pub fn config(cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(cases);
    Config {
        cases,
        max_shrink_iters: 400,
        max_shrink_time: 15_000,
        // Integration tests have no `lib.rs`/`main.rs` next to them to anchor a regressions
        // directory; the failing seed is printed instead.
        failure_persistence: None,
        ..Config::default()
    }
}

/// `|got − want| ≤ tol · scale`, with NaN matching NaN and infinities matching exactly.
pub fn close(got: f32, want: f64, scale: f64, tol: f64) -> bool {
    if want.is_nan() || got.is_nan() {
        return want.is_nan() && got.is_nan();
    }
    if want.is_infinite() || got.is_infinite() {
        return got as f64 == want;
    }
    (got as f64 - want).abs() <= tol * scale
}

/// Compiles `kernel` for both targets; the error names the target.
pub fn compile_both(kernel: &Kernel) -> Result<Vec<(Target, String)>, String> {
    Target::ALL
        .iter()
        .map(|&t| {
            compile(kernel, t)
                .map(|c| (t, c.ptx))
                .map_err(|e| format!("compile for {t}: {e}\n{kernel}"))
        })
        .collect()
}

/// The ptxas binary: `$REPLAY_PTXAS`, else what `scripts/install-ptxas.sh` installs.
pub fn ptxas() -> &'static PathBuf {
    static PTXAS: OnceLock<PathBuf> = OnceLock::new();
    PTXAS.get_or_init(|| {
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        replay_runtime::driver::ptxas::repo_ptxas(&repo).unwrap_or_else(|e| panic!("{e}"))
    })
}

/// Assembles `ptx` with ptxas for `target`; the error carries ptxas's message and the PTX.
pub fn assemble(name: &str, target: Target, ptx: &str) -> Result<(), String> {
    assemble_verbose(name, target, ptx).map(|_| ())
}

/// Assembles `ptx` with `ptxas -v` for `target`; returns ptxas's log (registers, spills). The
/// error carries ptxas's message and the PTX.
pub fn assemble_verbose(name: &str, target: Target, ptx: &str) -> Result<String, String> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("prop_ptxas");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    // Unique per call: tests of one binary assemble kernels of the same name in parallel, and a
    // shared file could be truncated by one test while ptxas reads it for another.
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file = dir.join(format!("{name}_{}_{}_{call}.ptx", target.arch(), std::process::id()));
    std::fs::write(&file, ptx).map_err(|e| e.to_string())?;
    let cubin = file.with_extension("cubin");
    let out = Command::new(ptxas())
        .arg(format!("-arch={}", target.arch()))
        .arg("-v")
        .arg("-o")
        .arg(&cubin)
        .arg(&file)
        .output()
        .map_err(|e| format!("running ptxas: {e}"))?;
    let log = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "ptxas -arch={} rejected {} ({}):\n{log}\n--- PTX ---\n{}",
            target.arch(),
            name,
            file.display(),
            numbered(ptx)
        ));
    }
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&cubin);
    Ok(log)
}

/// `ptx` with line numbers, to match ptxas's messages.
pub fn numbered(ptx: &str) -> String {
    ptx.lines()
        .enumerate()
        .map(|(i, l)| format!("{:5} {l}\n", i + 1))
        .collect()
}

/// The registers `ptxas -v` reports in `log`, after checking that nothing spills.
pub fn registers_without_spills(name: &str, log: &str) -> u32 {
    assert!(
        log.contains("0 bytes spill stores, 0 bytes spill loads"),
        "{name} spills:\n{log}"
    );
    log.split("Used ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no register count for {name}:\n{log}"))
}

// ---------------------------------------------------------------------------------------------
// Differential runs: the same kernel and arguments on the interpreter and on a GPU
// ---------------------------------------------------------------------------------------------

/// One argument of a differential run: a buffer (element type and initial contents as
/// little-endian bytes) or a scalar.
#[derive(Clone, Debug)]
pub enum HArg {
    Buf(Elem, Vec<u8>),
    I32(i32),
    U32(u32),
    I64(i64),
    F32(f32),
    Bool(bool),
}

impl HArg {
    /// A buffer holding `data`.
    pub fn buf<T: replay_dsl::host::HostElem>(data: &[T]) -> HArg {
        HArg::Buf(T::ELEM, replay_dsl::host::slice_to_bytes(data))
    }
    /// A buffer of `len` elements of `elem` with every byte `0xFF` (NaN for floats, −1 for
    /// integers, an invalid bool), so that elements nobody writes stand out.
    pub fn poisoned(elem: Elem, len: usize) -> HArg {
        HArg::Buf(elem, vec![0xFF; len * elem.bytes()])
    }
}

/// Runs `kernel` over `grid` in the interpreter; returns every buffer's final bytes (empty for
/// scalar arguments), in argument order.
pub fn run_interp(kernel: &Kernel, grid: [u32; 3], args: &[HArg]) -> Result<Vec<Vec<u8>>, String> {
    use replay_dsl::interp::{run, Arg, Memory};
    let mut mem = Memory::new();
    let iargs: Vec<Arg> = args
        .iter()
        .map(|a| match a {
            HArg::Buf(e, bytes) => Arg::ptr(mem.alloc_bytes(*e, bytes.clone())),
            HArg::I32(v) => Arg::I32(*v),
            HArg::U32(v) => Arg::U32(*v),
            HArg::I64(v) => Arg::I64(*v),
            HArg::F32(v) => Arg::F32(*v),
            HArg::Bool(v) => Arg::Bool(*v),
        })
        .collect();
    run(kernel, grid, &iargs, &mut mem).map_err(|e| format!("interpreter error: {e}"))?;
    Ok(iargs
        .iter()
        .map(|a| match a {
            Arg::Ptr { buffer, .. } => mem.bytes(*buffer).to_vec(),
            _ => vec![],
        })
        .collect())
}

/// The GPU of a differential test: device 0 and a stream on it.
pub struct Gpu {
    pub device: replay_runtime::Device,
    pub stream: replay_runtime::Stream,
}

/// GPU 0, or `None` after printing "skipped: no CUDA GPU" when this machine has no CUDA
/// driver or no GPU (the only reason a GPU test may skip; any other failure to open it fails;
/// with `REPLAY_REQUIRE_GPU=1` no GPU fails too).
///
/// `REPLAY_GPU_TESTS_ON_INTERPRETER=1` runs the GPU tests on the interpreter device instead:
/// a self-test of the harness (the interpreter compared with itself), not of the backend.
/// `REPLAY_GPU_TESTS_ON_EMULATOR=1` runs them on the PTX emulator: the backend's sm_90a PTX
/// executed on the CPU against the interpreter.
pub fn gpu() -> Option<Gpu> {
    use replay_runtime::Device;
    if std::env::var_os("REPLAY_GPU_TESTS_ON_EMULATOR").is_some_and(|v| v == "1") {
        let device = Device::emulator();
        eprintln!("REPLAY_GPU_TESTS_ON_EMULATOR=1: the GPU tests run on the PTX emulator");
        let stream = device.new_stream().unwrap();
        return Some(Gpu { device, stream });
    }
    if std::env::var_os("REPLAY_GPU_TESTS_ON_INTERPRETER").is_some_and(|v| v == "1") {
        let device = Device::interpreter();
        eprintln!("REPLAY_GPU_TESTS_ON_INTERPRETER=1: the GPU tests run on the interpreter (harness self-test)");
        let stream = device.new_stream().unwrap();
        return Some(Gpu { device, stream });
    }
    let device = Device::gpu_for_test()?;
    eprintln!("GPU: {}", device.info());
    let stream = device.new_stream().unwrap_or_else(|e| panic!("creating a stream: {e}"));
    Some(Gpu { device, stream })
}

impl Gpu {
    /// The device's code generation target (`None` on the interpreter).
    pub fn target(&self) -> Option<Target> {
        self.device.info().target
    }

    /// The device's name and target, for messages.
    pub fn name(&self) -> String {
        let info = self.device.info();
        match info.target {
            Some(t) => format!("{} ({t})", info.name),
            None => info.name.clone(),
        }
    }

    /// Runs `kernel` over `grid` on the GPU (compiled for its target, JIT-loaded, launched with
    /// the checks of `LoadedKernel::launch_traced`); returns every buffer's final bytes (empty
    /// for scalar arguments), in argument order.
    pub fn run(&self, kernel: &Kernel, grid: [u32; 3], args: &[HArg]) -> Result<Vec<Vec<u8>>, String> {
        use replay_runtime::{ArgValue, Grid, RawBuffer};
        let s = &self.stream;
        if self.target().is_none() {
            // Harness self-test on the interpreter: at least check that the kernel compiles.
            compile_both(kernel)?;
        }
        let loaded = self
            .device
            .load_traced(kernel)
            .map_err(|e| format!("loading on the GPU: {e}"))?;
        let mut bufs: Vec<Option<RawBuffer>> = vec![];
        for a in args {
            bufs.push(match a {
                HArg::Buf(e, bytes) => {
                    let b = RawBuffer::zeros(s, *e, bytes.len() / e.bytes()).map_err(|e| e.to_string())?;
                    b.write_bytes(s, bytes).map_err(|e| e.to_string())?;
                    Some(b)
                }
                _ => None,
            });
        }
        let values: Vec<ArgValue<'_>> = args
            .iter()
            .zip(&bufs)
            .map(|(a, b)| match (a, b) {
                (_, Some(b)) => ArgValue::Buffer(b),
                (HArg::I32(v), _) => ArgValue::I32(*v),
                (HArg::U32(v), _) => ArgValue::U32(*v),
                (HArg::I64(v), _) => ArgValue::I64(*v),
                (HArg::F32(v), _) => ArgValue::F32(*v),
                (HArg::Bool(v), _) => ArgValue::Bool(*v),
                (HArg::Buf(..), None) => unreachable!(),
            })
            .collect();
        loaded
            .launch_traced(s, Grid::new(grid[0], grid[1], grid[2]), &values)
            .map_err(|e| format!("launch: {e}"))?;
        s.synchronize().map_err(|e| format!("running on the GPU: {e}"))?;
        bufs.iter()
            .map(|b| match b {
                Some(b) => b.read_bytes(s).map_err(|e| format!("reading back: {e}")),
                None => Ok(vec![]),
            })
            .collect()
    }
}

/// The f32 values of little-endian bytes.
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    replay_dsl::host::slice_from_bytes(bytes)
}

/// The i32 values of little-endian bytes.
pub fn i32s(bytes: &[u8]) -> Vec<i32> {
    replay_dsl::host::slice_from_bytes(bytes)
}

/// A short description of a differential run's arguments (buffers: length and the first
/// values), for failure messages: with the IR it is a reproducer.
pub fn describe_args(args: &[HArg], kernel: &Kernel) -> String {
    const SHOWN: usize = 256;
    let mut s = String::new();
    for (a, p) in args.iter().zip(&kernel.params) {
        let d = match a {
            HArg::Buf(e, bytes) => {
                let vals = replay_runtime::driver::buffer::decode_f64(*e, bytes);
                let n = vals.len();
                let shown: Vec<String> = vals
                    .iter()
                    .take(SHOWN)
                    .map(|&v| {
                        if e.is_float() {
                            format!("{:?}", v as f32)
                        } else {
                            format!("{v}")
                        }
                    })
                    .collect();
                format!(
                    "{e}[{n}] = [{}{}]",
                    shown.join(", "),
                    if n > SHOWN { ", …" } else { "" }
                )
            }
            other => format!("{other:?}"),
        };
        s.push_str(&format!("  {}: {d}\n", p.name));
    }
    s
}
