//! Compiled kernel handles and the launch path shared by all backends:
//! check arguments → specialize → fetch or compile the module → run.

use super::args::{ArgValue, LaunchArgs};
use super::check::{check_args, check_grid, scalar_ints, ArgInfo};
use super::grid::Grid;
use crate::driver::device::{Backend, Device};
use crate::driver::module::LoadedKernel;
use crate::driver::stream::Stream;
use crate::error::{Result, RuntimeError};
use cudarc::driver::result;
use replay_dsl::{ConfigValues, KernelDef, Specialization};
use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::Arc;

/// Which engine runs one launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Engine {
    /// The device's own backend (the GPU, the interpreter or the emulator).
    #[default]
    Device,
    /// The CPU interpreter, whatever the device: buffers are copied to the host and back.
    Interpreter,
}

/// Kernel `K` with a fixed configuration, ready to launch on one device. Specializations
/// (from integer arguments divisible by 16) are compiled on first use and cached.
pub struct CompiledKernel<K: KernelDef> {
    device: Device,
    config: K::Config,
    _k: PhantomData<fn() -> K>,
}

impl<K: KernelDef> std::fmt::Debug for CompiledKernel<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledKernel")
            .field("kernel", &K::NAME)
            .field("config", &self.config)
            .finish()
    }
}

impl<K: KernelDef> Clone for CompiledKernel<K> {
    fn clone(&self) -> Self {
        CompiledKernel {
            device: self.device.clone(),
            config: self.config.clone(),
            _k: PhantomData,
        }
    }
}

/// Compiles kernel `K` with `config` for `device` (the generic specialization, so errors show
/// now rather than at the first launch; launches with integers divisible by 16 compile their
/// own specialization on first use).
pub fn compile<K: KernelDef>(device: &Device, config: K::Config) -> Result<CompiledKernel<K>> {
    let k = CompiledKernel::<K>::lazy(device, config);
    // The specialization of arguments with no known divisibility (what `from_ints` gives for
    // integers not divisible by 16), so a later launch with such arguments hits the cache.
    k.load(&Specialization::from_ints(&vec![None; K::params().len()]))?;
    Ok(k)
}

impl<K: KernelDef> CompiledKernel<K> {
    /// A handle that compiles nothing until a launch (or [`Self::load`]) needs it.
    pub fn lazy(device: &Device, config: K::Config) -> Self {
        CompiledKernel {
            device: device.clone(),
            config,
            _k: PhantomData,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &K::Config {
        &self.config
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The loaded specialization `spec` (compiled and loaded on first use).
    pub fn load(&self, spec: &Specialization) -> Result<Arc<LoadedKernel>> {
        self.device.load::<K>(&self.config, spec)
    }

    /// Launches over `grid` with typed arguments, on the device's backend.
    pub fn launch<A: LaunchArgs<K::Params>>(&self, stream: &Stream, grid: impl Into<Grid>, args: A) -> Result<()> {
        self.launch_values(stream, grid.into(), &args.values(), Engine::Device)
    }

    /// Launches over `grid` on the CPU interpreter, whatever the device.
    pub fn launch_interpreted<A: LaunchArgs<K::Params>>(
        &self,
        stream: &Stream,
        grid: impl Into<Grid>,
        args: A,
    ) -> Result<()> {
        self.launch_values(stream, grid.into(), &args.values(), Engine::Interpreter)
    }

    /// The checks a launch with these arguments would run, without launching: the
    /// specialization it would use, or the error it would report.
    pub fn check<A: LaunchArgs<K::Params>>(&self, grid: impl Into<Grid>, args: A) -> Result<Specialization> {
        self.check_values(grid.into(), &args.values())
    }

    fn check_values(&self, grid: Grid, args: &[ArgValue<'_>]) -> Result<Specialization> {
        let infos: Vec<ArgInfo> = args.iter().map(ArgValue::info).collect();
        let ints = scalar_ints(&infos);
        let extents = K::extents(&self.config, &ints);
        check_args(K::NAME, &K::params(), &extents, &infos)?;
        check_grid(K::NAME, grid)?;
        Ok(Specialization::from_ints(&ints))
    }

    /// Launches with type-erased arguments (checked at run time against `K::params()`).
    pub fn launch_values(&self, stream: &Stream, grid: Grid, args: &[ArgValue<'_>], engine: Engine) -> Result<()> {
        stream.same_device(&self.device, "kernel")?;
        for a in args {
            if let ArgValue::Buffer(b) = a {
                stream.same_device(b.device(), "buffer")?;
            }
        }
        let spec = self.check_values(grid, args)?;
        if grid.is_empty() {
            return Ok(());
        }
        match (engine, self.device.backend()) {
            (Engine::Interpreter, Backend::Cuda | Backend::Emulator) => {
                let key = crate::driver::module::ModuleKey {
                    kernel: K::NAME.to_string(),
                    config: self
                        .config
                        .values()
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect(),
                    specialization: spec.clone(),
                    target: None,
                };
                let ir = K::trace(&self.config, &spec)?;
                let loaded = LoadedKernel {
                    info: crate::driver::module::LoadInfo {
                        num_threads: ir.num_warps * 32,
                        ..Default::default()
                    },
                    key,
                    ir: Some(ir),
                    compiled: None,
                    cuda: None,
                    emu: None,
                };
                super::interp::run(stream, &loaded, grid, args)
            }
            (_, Backend::Interpreter) => super::interp::run(stream, &*self.load(&spec)?, grid, args),
            (Engine::Device, Backend::Emulator) => super::emu::run(stream, &*self.load(&spec)?, grid, args),
            (Engine::Device, Backend::Cuda) => launch_cuda(stream, &*self.load(&spec)?, grid, args),
        }
    }
}

impl LoadedKernel {
    /// Launches with `num_threads` threads per block over `grid`, on the stream's backend,
    /// without any argument check.
    ///
    /// # Safety
    /// The arguments must match the kernel's parameters in number and type, and every buffer
    /// must be long enough for what the kernel accesses: nothing checks it.
    pub unsafe fn launch_unchecked(&self, stream: &Stream, grid: Grid, args: &[ArgValue<'_>]) -> Result<()> {
        if grid.is_empty() {
            return Ok(());
        }
        match stream.device().backend() {
            Backend::Cuda => launch_cuda(stream, self, grid, args),
            Backend::Interpreter => super::interp::run(stream, self, grid, args),
            Backend::Emulator => super::emu::run(stream, self, grid, args),
        }
    }
}

/// Enqueues one launch of a loaded kernel on a CUDA stream.
fn launch_cuda(stream: &Stream, loaded: &LoadedKernel, grid: Grid, args: &[ArgValue<'_>]) -> Result<()> {
    let (Some(func), Some(s)) = (loaded.cuda.as_ref(), stream.cu_stream()) else {
        return Err(RuntimeError::DeviceMismatch(
            "a CUDA launch without a CUDA stream or module".into(),
        ));
    };
    // One 8-byte slot per argument; the driver reads each parameter's size from the slot's start
    // (little-endian, so narrower values sit in the low bytes).
    let mut slots: Vec<u64> = args
        .iter()
        .map(|a| match *a {
            ArgValue::Buffer(b) => b.device_ptr(),
            ArgValue::I32(v) => v as u32 as u64,
            ArgValue::I64(v) => v as u64,
            ArgValue::U32(v) => v as u64,
            ArgValue::F32(v) => v.to_bits() as u64,
            ArgValue::Bool(v) => v as u64,
        })
        .collect();
    let mut params: Vec<*mut c_void> = slots.iter_mut().map(|v| (v as *mut u64).cast()).collect();
    stream.device().bind()?;
    // SAFETY: `func` is loaded in this device's context; the argument types were checked
    // against the kernel's parameters and every buffer against its extent; `slots` outlives
    // the call (the driver copies parameters at launch).
    unsafe {
        result::launch_kernel(
            func.func,
            (grid.x, grid.y, grid.z),
            (loaded.info.num_threads, 1, 1),
            loaded.info.dynamic_shared_bytes,
            s.cu_stream(),
            &mut params,
        )
    }
    .map_err(|e| RuntimeError::driver("cuLaunchKernel", e))
}

/// `K::compile(&device, config)` and friends, for every kernel.
pub trait KernelExt: KernelDef + Sized {
    /// Compiles the kernel with `config` for `device`.
    fn compile(device: &Device, config: Self::Config) -> Result<CompiledKernel<Self>> {
        compile::<Self>(device, config)
    }
}

impl<K: KernelDef> KernelExt for K {}
