//! Devices: a CUDA GPU opened through the driver API, or a CPU stand-in for one (the tile-IR
//! interpreter, or the PTX emulator). All expose the same streams, events, buffers and
//! launches.

use super::module::ModuleCache;
use super::probe::ensure_driver;
use super::ptxas::Jit;
use crate::error::{Result, RuntimeError};
use cudarc::driver::{result, sys, CudaContext};
use replay_dsl::Target;
use std::fmt;
use std::sync::Arc;

/// Which engine runs kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// An NVIDIA GPU through the CUDA driver (PTX compiled by ptxas processes or the driver's
    /// JIT, as `REPLAY_JIT` says).
    Cuda,
    /// The CPU interpreter of the tile IR (like `TRITON_INTERPRET=1`).
    Interpreter,
    /// The CPU emulator of the generated PTX (`replay-ptx-emu`): the backend's sm_90a code,
    /// run thread by thread with memory bounds checks.
    Emulator,
}

impl Backend {
    /// `"cuda"`, `"interpreter"` or `"emulator"`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cuda => "cuda",
            Backend::Interpreter => "interpreter",
            Backend::Emulator => "emulator",
        }
    }
}

/// Whether `REPLAY_INTERPRET` (or `REPLAY_EMULATE`) asks for the interpreter (emulator):
/// `1`, `true`, `yes`, `on` (any case).
pub fn interpret_requested(value: Option<&str>) -> bool {
    value.is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

/// What a device is and what it can hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The backend.
    pub backend: Backend,
    /// Device name as the driver reports it (e.g. `NVIDIA H200`).
    pub name: String,
    /// Compute capability (major, minor); `(0, 0)` for the interpreter, the emulated target's
    /// for the emulator.
    pub compute_capability: (u32, u32),
    /// The code generation target; `None` for the interpreter.
    pub target: Option<Target>,
    /// Global memory in bytes.
    pub total_memory: u64,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// L2 cache in bytes.
    pub l2_bytes: u64,
    /// Most shared memory one block may use (opt-in limit), in bytes.
    pub max_shared_per_block: u32,
    /// Driver API version (major, minor), e.g. `(13, 0)`; `(0, 0)` for the interpreter.
    pub driver_version: (u32, u32),
}

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (ma, mi) = self.compute_capability;
        let (da, di) = self.driver_version;
        write!(
            f,
            "{} (cc {ma}.{mi}, driver {da}.{di}, {} SMs, L2 {} KiB)",
            self.name,
            self.sm_count,
            self.l2_bytes / 1024
        )
    }
}

pub(crate) enum DeviceKind {
    /// A GPU, and how it compiles the PTX it loads.
    Cuda(Arc<CudaContext>, Jit),
    Interpreter,
    Emulator,
}

pub(crate) struct DeviceInner {
    pub(crate) kind: DeviceKind,
    pub(crate) info: DeviceInfo,
    pub(crate) modules: ModuleCache,
    /// The graph conditions kernels set on a CPU backend, in order.
    pub(crate) conditions: std::sync::Mutex<Vec<(i64, bool)>>,
    /// Graph conditions made by captures in progress that no conditional node reads yet.
    pub(crate) open_conditions: std::sync::Mutex<Vec<crate::driver::graph::GraphCondition>>,
}

/// A device that runs kernels. Cheap to clone (a shared handle).
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device").field("info", &self.inner.info).finish()
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}
impl Eq for Device {}

fn attr(dev: sys::CUdevice, a: sys::CUdevice_attribute) -> Result<i32> {
    // SAFETY: `dev` came from cuDeviceGet after cuInit.
    unsafe { result::device::get_attribute(dev, a) }.map_err(|e| RuntimeError::driver("cuDeviceGetAttribute", e))
}

impl Device {
    /// Opens GPU `ordinal`, or the interpreter when `REPLAY_INTERPRET` is set, or the PTX
    /// emulator when `REPLAY_EMULATE` is (see [`interpret_requested`]).
    pub fn open(ordinal: usize) -> Result<Device> {
        let env = |name: &str| interpret_requested(std::env::var(name).ok().as_deref());
        if env("REPLAY_INTERPRET") {
            Ok(Device::interpreter())
        } else if env("REPLAY_EMULATE") {
            Ok(Device::emulator())
        } else {
            Device::cuda(ordinal)
        }
    }

    /// Opens GPU `ordinal` through the CUDA driver, whatever `REPLAY_INTERPRET` and
    /// `REPLAY_EMULATE` say, compiling PTX as `REPLAY_JIT` asks ([`Jit::from_env`]: by
    /// default ptxas processes where a ptxas is found, else the driver's JIT).
    ///
    /// Errors: [`RuntimeError::NoDriver`] without a driver library, [`RuntimeError::NoDevice`]
    /// when there is no such GPU, [`RuntimeError::UnsupportedGpu`] for compute capabilities
    /// other than 9.x and 10.0, [`RuntimeError::JitSetting`] for a `REPLAY_JIT` it cannot follow.
    pub fn cuda(ordinal: usize) -> Result<Device> {
        // Without a driver that is the error, whatever REPLAY_JIT says.
        ensure_driver()?;
        let jit =
            Jit::from_env(|name| std::env::var_os(name)).map_err(|message| RuntimeError::JitSetting { message })?;
        Device::cuda_with(ordinal, jit)
    }

    /// Opens GPU `ordinal` through the CUDA driver, compiling the PTX it loads with `jit`.
    /// Errors as [`Device::cuda`].
    pub fn cuda_with(ordinal: usize, jit: Jit) -> Result<Device> {
        ensure_driver()?;
        match result::init() {
            Ok(()) => {}
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE => {
                return Err(RuntimeError::NoDevice { ordinal, count: 0 })
            }
            Err(e) => return Err(RuntimeError::driver("cuInit", e)),
        }
        let count = result::device::get_count().map_err(|e| RuntimeError::driver("cuDeviceGetCount", e))?;
        let count = usize::try_from(count).unwrap_or(0);
        if ordinal >= count {
            return Err(RuntimeError::NoDevice { ordinal, count });
        }
        let dev = result::device::get(ordinal as i32).map_err(|e| RuntimeError::driver("cuDeviceGet", e))?;
        let name = result::device::get_name(dev).map_err(|e| RuntimeError::driver("cuDeviceGetName", e))?;
        use sys::CUdevice_attribute as A;
        let cc = (
            attr(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? as u32,
            attr(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)? as u32,
        );
        let target = Target::from_compute_capability(cc.0, cc.1)
            .ok_or_else(|| RuntimeError::UnsupportedGpu { name: name.clone(), cc })?;
        // SAFETY: `dev` is a valid device handle.
        let total_memory =
            unsafe { result::device::total_mem(dev) }.map_err(|e| RuntimeError::driver("cuDeviceTotalMem", e))? as u64;
        let mut version = 0i32;
        // SAFETY: writes one int.
        unsafe { sys::cuDriverGetVersion(&mut version) }
            .result()
            .map_err(|e| RuntimeError::driver("cuDriverGetVersion", e))?;
        let info = DeviceInfo {
            backend: Backend::Cuda,
            name,
            compute_capability: cc,
            target: Some(target),
            total_memory,
            sm_count: attr(dev, A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            l2_bytes: attr(dev, A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64,
            max_shared_per_block: attr(dev, A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as u32,
            driver_version: (version as u32 / 1000, (version as u32 % 1000) / 10),
        };
        let ctx = CudaContext::new(ordinal).map_err(|e| RuntimeError::driver("cuDevicePrimaryCtxRetain", e))?;
        // SAFETY: this crate orders work explicitly (stream synchronisation, events); cudarc's
        // per-buffer event tracking would add hidden syncs and break stream capture.
        unsafe { ctx.disable_event_tracking() };
        Ok(Device {
            inner: Arc::new(DeviceInner {
                kind: DeviceKind::Cuda(ctx, jit),
                info,
                modules: ModuleCache::default(),
                conditions: Default::default(),
                open_conditions: Default::default(),
            }),
        })
    }

    /// The CPU interpreter as a device: buffers live in host memory, launches run the tile IR
    /// on the CPU, events measure wall-clock time. Its limits mimic an H100/H200 (228 KiB of
    /// shared memory per block) so that search spaces prune alike.
    pub fn interpreter() -> Device {
        Device::host(
            DeviceKind::Interpreter,
            Backend::Interpreter,
            "replay interpreter (CPU)",
            None,
        )
    }

    /// GPU 0 for a test that needs one, or `None` after printing "skipped: no CUDA GPU (…)"
    /// when this machine has no CUDA driver or no GPU: the only reasons a GPU test may skip.
    /// Any other failure to open it panics, and so does a missing GPU with
    /// `REPLAY_REQUIRE_GPU=1`.
    pub fn gpu_for_test() -> Option<Device> {
        match Device::cuda(0) {
            Ok(d) => Some(d),
            Err(e @ (RuntimeError::NoDriver { .. } | RuntimeError::NoDevice { .. })) => {
                if std::env::var_os("REPLAY_REQUIRE_GPU").is_some_and(|v| v == "1") {
                    panic!("REPLAY_REQUIRE_GPU=1 but there is no CUDA GPU: {e}");
                }
                println!("skipped: no CUDA GPU ({e})");
                None
            }
            Err(e) => panic!("opening the GPU failed: {e}"),
        }
    }

    /// The PTX emulator as a device: kernels are compiled for sm_90a like for an H100/H200 and
    /// the PTX runs on the CPU (`replay-ptx-emu`), block after block, with every memory access
    /// bounds-checked; buffers live in host memory, events measure wall-clock time (CPU
    /// times, meaningless for tuning). Its limits are the interpreter's (228 KiB of shared
    /// memory per block); it reports compute capability 9.0 and no memory, L2 or driver.
    pub fn emulator() -> Device {
        let name = "replay PTX emulator (CPU, sm_90a)";
        Device::host(DeviceKind::Emulator, Backend::Emulator, name, Some(Target::Sm90))
    }

    /// A CPU device (interpreter or emulator) compiling for `target`: host buffers, no memory,
    /// L2 or driver, the shared-memory limit of an H100/H200.
    fn host(kind: DeviceKind, backend: Backend, name: &str, target: Option<Target>) -> Device {
        let info = DeviceInfo {
            backend,
            name: name.to_string(),
            compute_capability: if target.is_some() { (9, 0) } else { (0, 0) },
            target,
            total_memory: 0,
            sm_count: 1,
            l2_bytes: 0,
            max_shared_per_block: 232_448,
            driver_version: (0, 0),
        };
        Device {
            inner: Arc::new(DeviceInner {
                kind,
                info,
                modules: ModuleCache::default(),
                conditions: Default::default(),
                open_conditions: Default::default(),
            }),
        }
    }

    /// Name, compute capability, target, sizes and driver version.
    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    /// The backend of this device.
    pub fn backend(&self) -> Backend {
        self.inner.info.backend
    }

    /// The graph conditions (`set_graph_condition`) kernels have set on this device, `(handle,
    /// value)` in order, taken out of the log — on the CPU backends, which run no graphs (always
    /// empty on a GPU, where conditional nodes read them).
    pub fn take_graph_conditions(&self) -> Vec<(i64, bool)> {
        std::mem::take(&mut *self.inner.conditions.lock().expect("condition log"))
    }

    /// Graph conditions of captures in progress that no conditional node reads yet.
    pub(crate) fn open_conditions(&self) -> std::sync::MutexGuard<'_, Vec<crate::driver::graph::GraphCondition>> {
        self.inner.open_conditions.lock().expect("open graph conditions")
    }

    /// Appends conditions a kernel set on a CPU backend to the log.
    pub(crate) fn log_graph_conditions(&self, set: impl IntoIterator<Item = (i64, bool)>) {
        self.inner.conditions.lock().expect("condition log").extend(set);
    }

    /// Waits for all work on the device.
    pub fn synchronize(&self) -> Result<()> {
        match &self.inner.kind {
            DeviceKind::Cuda(ctx, _) => ctx
                .synchronize()
                .map_err(|e| RuntimeError::driver("cuCtxSynchronize", e)),
            DeviceKind::Interpreter | DeviceKind::Emulator => Ok(()),
        }
    }

    /// Number of modules loaded so far (one per kernel × config × specialization × target).
    pub fn loaded_modules(&self) -> usize {
        self.inner.modules.len()
    }

    /// What the device is, as benchmarks print it: [`DeviceInfo`]'s line, and which ptxas
    /// compiles its kernels when not the driver's JIT (and whether it has given way to the
    /// driver's JIT after a failure).
    pub fn summary(&self) -> String {
        match self.jit().and_then(Jit::ptxas) {
            Some(path) if self.inner.modules.ptxas_failed() => format!(
                "{}, PTX compiled by the driver's JIT after {} failed",
                self.inner.info,
                path.display()
            ),
            Some(path) => format!("{}, PTX compiled by {}", self.inner.info, path.display()),
            None => self.inner.info.to_string(),
        }
    }

    /// How this GPU compiles the PTX it loads (`None` on the CPU backends).
    pub fn jit(&self) -> Option<&Jit> {
        match &self.inner.kind {
            DeviceKind::Cuda(_, jit) => Some(jit),
            DeviceKind::Interpreter | DeviceKind::Emulator => None,
        }
    }

    pub(crate) fn cuda_ctx(&self) -> Option<&Arc<CudaContext>> {
        match &self.inner.kind {
            DeviceKind::Cuda(ctx, _) => Some(ctx),
            DeviceKind::Interpreter | DeviceKind::Emulator => None,
        }
    }

    /// Binds the CUDA context to the calling thread (a no-op on the CPU backends).
    pub(crate) fn bind(&self) -> Result<()> {
        match &self.inner.kind {
            DeviceKind::Cuda(ctx, _) => ctx
                .bind_to_thread()
                .map_err(|e| RuntimeError::driver("cuCtxSetCurrent", e)),
            DeviceKind::Interpreter | DeviceKind::Emulator => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_driver_is_a_typed_error() {
        // This machine has no NVIDIA driver: opening must fail cleanly, never panic.
        if crate::driver::probe::probe(crate::driver::probe::DRIVER_LIBRARY_NAMES).is_ok() {
            return; // a GPU machine: nothing to check here
        }
        match Device::cuda(0) {
            Err(RuntimeError::NoDriver { tried, .. }) => {
                assert!(tried.iter().any(|t| t.contains("cuda")))
            }
            other => panic!("expected NoDriver, got {other:?}"),
        }
        // A second call takes the cached probe result.
        assert!(matches!(Device::cuda(3), Err(RuntimeError::NoDriver { .. })));
    }

    #[test]
    fn interpret_env_values() {
        for v in ["1", "true", "ON", " yes "] {
            assert!(interpret_requested(Some(v)), "{v}");
        }
        for v in ["0", "", "off", "no"] {
            assert!(!interpret_requested(Some(v)), "{v}");
        }
        assert!(!interpret_requested(None));
    }

    #[test]
    fn interpreter_device() {
        let d = Device::interpreter();
        assert_eq!(d.backend(), Backend::Interpreter);
        assert_eq!(d.info().target, None);
        assert_eq!(d.clone(), d);
        assert_ne!(Device::interpreter(), d);
        assert!(d.synchronize().is_ok());
    }

    #[test]
    fn emulator_device() {
        let d = Device::emulator();
        assert_eq!(d.backend(), Backend::Emulator);
        assert_eq!(d.backend().name(), "emulator");
        assert_eq!(d.info().target, Some(Target::Sm90));
        assert!(d.info().name.contains("emulator"));
        assert!(d.synchronize().is_ok());
    }
}
