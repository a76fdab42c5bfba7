//! Loaded kernels: traced, compiled to PTX, JIT-loaded by the driver (`cuModuleLoadData`) or
//! parsed by the PTX emulator, and cached per device by (kernel, config, specialization,
//! target).

use super::device::{Device, DeviceKind};
use super::ptxas::{cached_cubin, default_cubin_dir, Jit};
use crate::error::{Result, RuntimeError};
use cudarc::driver::{result, sys, CudaContext};
use replay_dsl::ir::Kernel;
use replay_dsl::{CompileError, Compiled, Specialization, Target};
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What identifies one loaded module on a device.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ModuleKey {
    /// Kernel name.
    pub kernel: String,
    /// Constexpr values then `num_warps`, as [`replay_dsl::ConfigValues::values`] gives them.
    pub config: Vec<(String, i64)>,
    /// Facts about integer arguments the code relies on.
    pub specialization: Specialization,
    /// Code generation target (`None` on the interpreter).
    pub target: Option<Target>,
}

/// Resource usage the driver reports for a loaded kernel (`cuFuncGetAttribute`); on the
/// CPU backends only `num_threads` and `shared_bytes` are known.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadInfo {
    /// Threads per program (block).
    pub num_threads: u32,
    /// Shared memory in bytes (static, or dynamic: see `dynamic_shared_bytes`).
    pub shared_bytes: u32,
    /// Dynamic shared memory each launch passes, in bytes (kernels needing more than the
    /// static 48 KiB declare their shared array `.extern`; 0 otherwise).
    pub dynamic_shared_bytes: u32,
    /// Registers per thread (`None` on the interpreter).
    pub num_regs: Option<u32>,
    /// Local (spill) memory per thread in bytes (`None` on the interpreter).
    pub local_bytes: Option<u32>,
}

pub(crate) struct CudaFunction {
    module: sys::CUmodule,
    pub(crate) func: sys::CUfunction,
    ctx: Arc<CudaContext>,
}

// SAFETY: module and function handles may be used from any thread once the owning context
// is bound, which every use does first.
unsafe impl Send for CudaFunction {}
// SAFETY: as above; the handles are immutable after loading.
unsafe impl Sync for CudaFunction {}

impl Drop for CudaFunction {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: loaded in `load_cuda`, unloaded only here.
            let _ = unsafe { result::module::unload(self.module) };
        }
    }
}

/// A kernel specialization ready to launch on one device.
pub struct LoadedKernel {
    /// Its cache key.
    pub key: ModuleKey,
    /// The traced tile IR (what the interpreter runs; `None` for hand-written PTX).
    pub ir: Option<Kernel>,
    /// Compilation output (`None` on the interpreter).
    pub compiled: Option<Compiled>,
    /// Resource usage.
    pub info: LoadInfo,
    pub(crate) cuda: Option<CudaFunction>,
    /// The parsed PTX, on the emulator (parsed once per module).
    pub(crate) emu: Option<replay_ptx_emu::Module>,
}

impl std::fmt::Debug for LoadedKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedKernel")
            .field("key", &self.key)
            .field("info", &self.info)
            .finish()
    }
}

/// Per-device cache of loaded kernels.
#[derive(Default)]
pub(crate) struct ModuleCache {
    map: Mutex<HashMap<ModuleKey, Arc<LoadedKernel>>>,
    /// Set when ptxas failed under [`Jit::PtxasOrDriver`]: later modules go to the driver's JIT.
    ptxas_failed: AtomicBool,
}

impl ModuleCache {
    pub(crate) fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether ptxas failed on an earlier module of this device.
    pub(crate) fn ptxas_failed(&self) -> bool {
        self.ptxas_failed.load(Ordering::Relaxed)
    }

    /// Records that ptxas failed; true the first time (the caller warns once).
    fn give_up_ptxas(&self) -> bool {
        !self.ptxas_failed.swap(true, Ordering::Relaxed)
    }
}

fn load_cuda(device: &Device, kernel: &str, compiled: &Compiled) -> Result<CudaFunction> {
    let ctx = device.cuda_ctx().expect("load_cuda on a CUDA device").clone();
    let fail = |message: String| RuntimeError::Load {
        kernel: kernel.to_string(),
        entry: compiled.entry.clone(),
        message,
    };
    let entry = CString::new(compiled.entry.as_str()).map_err(|_| fail("entry name contains a NUL byte".into()))?;
    device.bind()?;
    let ptxas = match device.jit() {
        Some(Jit::Ptxas(path)) => Some((path, false)),
        Some(Jit::PtxasOrDriver(path)) if !device.inner.modules.ptxas_failed() => Some((path, true)),
        _ => None,
    };
    let module = match ptxas.map(|(path, fallback)| (load_cubin(path, compiled), fallback)) {
        Some((Ok(module), _)) => module,
        Some((Err(message), true)) => {
            if device.inner.modules.give_up_ptxas() {
                eprintln!(
                    "replay: warning: {kernel} did not load through ptxas ({}); the driver's JIT \
                     compiles this process's kernels from now on (REPLAY_JIT=driver skips ptxas, REPLAY_JIT=ptxas \
                     makes this an error)",
                    message.lines().next().unwrap_or_default()
                );
            }
            load_ptx(compiled).map_err(fail)?
        }
        Some((Err(message), false)) => return Err(fail(message)),
        None => load_ptx(compiled).map_err(fail)?,
    };
    // SAFETY: `module` was just loaded.
    match unsafe { result::module::get_function(module, entry) } {
        Ok(func) => Ok(CudaFunction { module, func, ctx }),
        Err(e) => {
            // SAFETY: not used after this.
            let _ = unsafe { result::module::unload(module) };
            Err(fail(RuntimeError::driver("cuModuleGetFunction", e).to_string()))
        }
    }
}

/// Compiles `compiled` with the ptxas at `ptxas` (or finds its cubin in the cache) and loads
/// the cubin into the bound context; the error is ptxas's or the driver's message.
fn load_cubin(ptxas: &std::path::Path, compiled: &Compiled) -> std::result::Result<sys::CUmodule, String> {
    let (arch, dir) = (compiled.target.arch(), default_cubin_dir());
    let cubin = cached_cubin(ptxas, &compiled.ptx, arch, compiled.line_info, dir.as_deref())?;
    // SAFETY: `cubin` is a cubin image that outlives the call.
    unsafe { result::module::load_data(cubin.as_ptr().cast()) }
        .map_err(|e| RuntimeError::driver("cuModuleLoadData", e).to_string())
}

/// Loads `compiled`'s PTX into the bound context through the driver's JIT (with line tables
/// when it has line info).
fn load_ptx(compiled: &Compiled) -> std::result::Result<sys::CUmodule, String> {
    let ptx = CString::new(compiled.ptx.as_str()).map_err(|_| "PTX text contains a NUL byte".to_string())?;
    if compiled.line_info {
        load_with_line_tables(&ptx)
    } else {
        // SAFETY: `ptx` is a NUL-terminated PTX image that outlives the call.
        unsafe { result::module::load_data(ptx.as_ptr().cast()) }
    }
    .map_err(|e| RuntimeError::driver("cuModuleLoadData", e).to_string())
}

/// Loads a PTX image asking the driver's compiler for line tables (`-lineinfo`), so that
/// profilers map SASS to the `.loc` lines of the PTX.
fn load_with_line_tables(ptx: &CString) -> std::result::Result<sys::CUmodule, result::DriverError> {
    let mut module = std::mem::MaybeUninit::uninit();
    let mut options = [sys::CUjit_option::CU_JIT_GENERATE_LINE_INFO];
    let mut values = [std::ptr::without_provenance_mut::<std::ffi::c_void>(1)];
    // SAFETY: `ptx` is a NUL-terminated PTX image, and the option arrays hold one option and its
    // value (an int passed by value in the pointer), all outliving the call.
    unsafe {
        sys::cuModuleLoadDataEx(
            module.as_mut_ptr(),
            ptx.as_ptr().cast(),
            options.len() as u32,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
        .result()?;
        Ok(module.assume_init())
    }
}

/// The PTX of `compiled` parsed for the emulator; a parse error (an instruction the emulator
/// does not implement) names the kernel.
fn load_emu(kernel: &str, compiled: &Compiled) -> Result<replay_ptx_emu::Module> {
    replay_ptx_emu::Module::parse(&compiled.ptx).map_err(|e| RuntimeError::Load {
        kernel: kernel.to_string(),
        entry: compiled.entry.clone(),
        message: format!("the PTX emulator cannot run it: {e}"),
    })
}

fn func_attr(f: &CudaFunction, a: sys::CUfunction_attribute) -> Result<u32> {
    // SAFETY: `f.func` belongs to a loaded module.
    unsafe { result::function::get_function_attribute(f.func, a) }
        .map(|v| v.max(0) as u32)
        .map_err(|e| RuntimeError::driver("cuFuncGetAttribute", e))
}

/// Sets a function attribute (`cuFuncSetAttribute`).
fn set_func_attr(f: &CudaFunction, a: sys::CUfunction_attribute, value: u32) -> Result<()> {
    // SAFETY: `f.func` belongs to a loaded module.
    unsafe { result::function::set_function_attribute(f.func, a, value as i32) }
        .map_err(|e| RuntimeError::driver("cuFuncSetAttribute", e))
}

impl Device {
    /// The loaded kernel for `key`, tracing (`trace`), compiling and loading it on a miss.
    /// Errors name the kernel; a failed load is not cached, so it is retried next time.
    pub fn load_with(
        &self,
        key: ModuleKey,
        trace: impl FnOnce() -> std::result::Result<Kernel, CompileError>,
    ) -> Result<Arc<LoadedKernel>> {
        if let Some(hit) = self
            .inner
            .modules
            .map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(hit.clone());
        }
        let ir = trace()?;
        let loaded = match &self.inner.kind {
            DeviceKind::Interpreter => {
                let info = LoadInfo {
                    num_threads: ir.num_warps * 32,
                    ..LoadInfo::default()
                };
                LoadedKernel {
                    key: key.clone(),
                    ir: Some(ir),
                    compiled: None,
                    info,
                    cuda: None,
                    emu: None,
                }
            }
            DeviceKind::Emulator => {
                let target = key.target.or(self.info().target).expect("the emulator has a target");
                let compiled = replay_dsl::compile(&ir, target)?;
                let emu = load_emu(&key.kernel, &compiled)?;
                let info = LoadInfo {
                    num_threads: compiled.num_threads,
                    shared_bytes: compiled.shared_bytes,
                    dynamic_shared_bytes: compiled.dynamic_shared_bytes(),
                    ..LoadInfo::default()
                };
                LoadedKernel {
                    key: key.clone(),
                    ir: Some(ir),
                    compiled: Some(compiled),
                    info,
                    cuda: None,
                    emu: Some(emu),
                }
            }
            DeviceKind::Cuda(..) => {
                let target = key.target.or(self.info().target).expect("a CUDA device has a target");
                let compiled = replay_dsl::compile(&ir, target)?;
                let func = load_cuda(self, &key.kernel, &compiled)?;
                use sys::CUfunction_attribute as A;
                let dynamic = compiled.dynamic_shared_bytes();
                if dynamic > 0 {
                    set_func_attr(&func, A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dynamic)?;
                }
                let info = LoadInfo {
                    num_threads: compiled.num_threads,
                    shared_bytes: compiled.shared_bytes,
                    dynamic_shared_bytes: dynamic,
                    num_regs: Some(func_attr(&func, A::CU_FUNC_ATTRIBUTE_NUM_REGS)?),
                    local_bytes: Some(func_attr(&func, A::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?),
                };
                let max_threads = func_attr(&func, A::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?;
                if compiled.num_threads > max_threads {
                    return Err(RuntimeError::Load {
                        kernel: key.kernel.clone(),
                        entry: compiled.entry.clone(),
                        message: format!(
                            "{} threads per block requested, the driver allows {max_threads} with {} registers per thread",
                            compiled.num_threads,
                            info.num_regs.unwrap_or(0)
                        ),
                    });
                }
                LoadedKernel {
                    key: key.clone(),
                    ir: Some(ir),
                    compiled: Some(compiled),
                    info,
                    cuda: Some(func),
                    emu: None,
                }
            }
        };
        let loaded = Arc::new(loaded);
        let mut map = self.inner.modules.map.lock().unwrap_or_else(|p| p.into_inner());
        Ok(map.entry(key).or_insert(loaded).clone())
    }

    /// Loads hand-written (or foreign) PTX text and its entry `entry`, launched with
    /// `num_threads` threads per block. Not cached; CUDA devices and the emulator only (the
    /// interpreter has no IR to run: [`RuntimeError::Unsupported`]).
    pub fn load_ptx(&self, ptx: &str, entry: &str, num_threads: u32) -> Result<Arc<LoadedKernel>> {
        let Some(target) = self.info().target else {
            return Err(RuntimeError::Unsupported {
                backend: self.backend().name(),
                what: "loading PTX".into(),
            });
        };
        let mut compiled = Compiled {
            entry: entry.to_string(),
            target,
            ptx: ptx.to_string(),
            num_threads,
            min_blocks: 1,
            shared_bytes: 0,
            stages: vec![("ptx".to_string(), ptx.to_string())],
            line_info: ptx.contains("\n.file "),
        };
        let key = ModuleKey {
            kernel: entry.to_string(),
            config: Vec::new(),
            specialization: Specialization::default(),
            target: Some(target),
        };
        if self.cuda_ctx().is_none() {
            let emu = load_emu(entry, &compiled)?;
            compiled.shared_bytes = emu.shared_bytes(entry).map_err(|e| RuntimeError::Load {
                kernel: entry.to_string(),
                entry: entry.to_string(),
                message: e.to_string(),
            })?;
            let info = LoadInfo {
                num_threads,
                shared_bytes: compiled.shared_bytes,
                ..LoadInfo::default()
            };
            return Ok(Arc::new(LoadedKernel {
                key,
                ir: None,
                compiled: Some(compiled),
                info,
                cuda: None,
                emu: Some(emu),
            }));
        }
        let func = load_cuda(self, entry, &compiled)?;
        use sys::CUfunction_attribute as A;
        let info = LoadInfo {
            num_threads,
            shared_bytes: func_attr(&func, A::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
            dynamic_shared_bytes: 0,
            num_regs: Some(func_attr(&func, A::CU_FUNC_ATTRIBUTE_NUM_REGS)?),
            local_bytes: Some(func_attr(&func, A::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?),
        };
        Ok(Arc::new(LoadedKernel {
            key,
            ir: None,
            compiled: Some(compiled),
            info,
            cuda: Some(func),
            emu: None,
        }))
    }

    /// The loaded kernel `K` for a configuration and specialization.
    pub fn load<K: replay_dsl::KernelDef>(
        &self,
        config: &K::Config,
        spec: &Specialization,
    ) -> Result<Arc<LoadedKernel>> {
        use replay_dsl::ConfigValues;
        let key = ModuleKey {
            kernel: K::NAME.to_string(),
            config: config.values().into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            specialization: spec.clone(),
            target: self.info().target,
        };
        self.load_with(key, || K::trace(config, spec))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use replay_dsl::ErrorKind;

    #[test]
    fn interpreter_modules_are_cached_and_failures_are_not() {
        let d = Device::interpreter();
        let key = ModuleKey {
            kernel: "k".into(),
            config: vec![],
            specialization: Specialization::default(),
            target: None,
        };
        let err = d
            .load_with(key.clone(), || {
                Err(CompileError::new("k", "trace", ErrorKind::Unsupported("x".into())))
            })
            .unwrap_err();
        assert!(matches!(err, RuntimeError::Compile(_)));
        assert_eq!(d.loaded_modules(), 0);
    }
}
