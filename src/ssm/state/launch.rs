//! Kernel compilation and launch helpers shared by the managers, and the admit kernel.

use super::Result;
use crate::ssm::admit::mamba2_admit;
use replay_dsl::{KernelDef, Specialization};
use replay_kernels::ssm::shapes::ModelShape;
use replay_runtime::launch::check::scalar_ints;
use replay_runtime::launch::kernel::Engine;
use replay_runtime::{ArgValue, CompiledKernel, DeviceBuffer, Grid, KernelExt, RuntimeError, Stream};

/// Compiles the layer kernel `$kernel` (a module with `Kernel` and `Config`) for `$shape` and
/// `$tiles` (`BV`, warps), plus its other `Config` fields (`HAS_Z`, `L`, `T`, `HB`, …).
macro_rules! compile_layer_kernel {
    ($kernel:ident, $device:expr, $shape:expr, $tiles:expr $(, $field:ident: $value:expr)* $(,)?) => {
        $kernel::Kernel::compile(
            $device,
            $kernel::Config {
                HEADS: $shape.heads,
                GROUPS: $shape.groups,
                DK: $shape.dk,
                DV: $shape.dv,
                BV: $tiles.bv,
                num_warps: $tiles.num_warps,
                min_blocks: $tiles.min_blocks,
                $($field: $value,)*
            },
        )
    };
}
pub(super) use compile_layer_kernel;

/// Launches `k` with type-erased arguments.
pub(super) fn go<K: KernelDef>(k: &CompiledKernel<K>, s: &Stream, grid: Grid, args: &[ArgValue<'_>]) -> Result<()> {
    k.launch_values(s, grid, args, Engine::Device)
}

/// Loads the specialization these arguments use (so that capturing launches loads nothing).
pub(super) fn preload<K: KernelDef>(k: &CompiledKernel<K>, args: &[ArgValue<'_>]) -> Result<()> {
    preload_job(k, args)()
}

/// A kernel's load, to run with others in [`preload_all`].
pub(super) type Preload<'k> = Box<dyn FnOnce() -> Result<()> + Send + 'k>;

/// The load of the specialization these arguments use, to run later.
pub(super) fn preload_job<'k, K: KernelDef>(k: &'k CompiledKernel<K>, args: &[ArgValue<'_>]) -> Preload<'k>
where
    K::Config: Sync,
{
    let infos: Vec<_> = args.iter().map(ArgValue::info).collect();
    let spec = Specialization::from_ints(&scalar_ints(&infos));
    Box::new(move || k.load(&spec).map(|_| ()))
}

/// Runs `jobs` at once, a thread each: a load that compiles runs ptxas, and ptxas processes run
/// in parallel (a verification cycle's four kernels: the time of the slowest, not the sum).
pub(super) fn preload_all(jobs: Vec<Preload<'_>>) -> Result<()> {
    std::thread::scope(|s| {
        let running: Vec<_> = jobs.into_iter().map(|job| s.spawn(job)).collect();
        running
            .into_iter()
            .try_for_each(|r| r.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    })
}

/// `b` as a launch argument.
pub(super) fn buf<T: replay_runtime::HostElem>(b: &DeviceBuffer<T>) -> ArgValue<'_> {
    ArgValue::Buffer(b.raw())
}

/// `mamba2_admit` compiled for one slot's state (`[heads, dv, dk]`).
pub(super) struct AdmitKernel {
    k: CompiledKernel<mamba2_admit::Kernel>,
    state_elems: usize,
    /// The `state_lp` argument of a kernel compiled without `LP` (read by nothing).
    no_lp: DeviceBuffer<half::f16>,
}

impl AdmitKernel {
    /// Compiles the kernel; `with_meta` makes it reset the slot's counters too, `lp` write the
    /// low-precision checkpoint too.
    pub(super) fn new(stream: &Stream, shape: &ModelShape, with_meta: bool, lp: bool) -> Result<AdmitKernel> {
        let device = stream.device();
        let state_elems = shape.heads * shape.state_elems();
        let k = mamba2_admit::Kernel::compile(
            device,
            mamba2_admit::Config {
                STATE: state_elems,
                WITH_META: with_meta,
                BLOCK: 1024,
                LP: lp,
                num_warps: 4,
                min_blocks: 1,
            },
        )?;
        Ok(AdmitKernel {
            k,
            state_elems,
            no_lp: DeviceBuffer::zeros(stream, 1)?,
        })
    }

    /// Copies `initial` (zeros when `None`) into `slot` of `state` (`slots` slots) and of
    /// `state_lp` (its f16, when compiled with `lp`) and resets the slot's counters in `meta`
    /// with flush flag `flag`; waits for the copy.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run(
        &self,
        stream: &Stream,
        slot: usize,
        initial: Option<&[f32]>,
        state: &DeviceBuffer<f32>,
        state_lp: Option<&DeviceBuffer<half::f16>>,
        meta: &DeviceBuffer<i32>,
        slots: usize,
        flag: bool,
    ) -> Result<()> {
        let init = match initial {
            Some(v) => {
                if v.len() != self.state_elems {
                    return Err(RuntimeError::Size(format!(
                        "initial state has {} elements, a slot {}",
                        v.len(),
                        self.state_elems
                    )));
                }
                DeviceBuffer::from_host(stream, v)?
            }
            None => DeviceBuffer::zeros(stream, self.state_elems)?,
        };
        let which = DeviceBuffer::from_host(stream, &[slot as i32])?;
        go(
            &self.k,
            stream,
            Grid::new(1, self.state_elems.div_ceil(1024) as u32, 1),
            &[
                buf(&which),
                buf(&init),
                buf(state),
                buf(state_lp.unwrap_or(&self.no_lp)),
                buf(meta),
                ArgValue::I32(1),
                ArgValue::I32(slots as i32),
                ArgValue::I32(flag as i32),
            ],
        )?;
        // The temporaries must outlive the copy.
        stream.synchronize()
    }
}

#[cfg(test)]
mod tests {
    use super::{preload_all, Preload};
    use replay_runtime::RuntimeError;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_preload_runs_and_a_failure_is_returned() {
        let ran = AtomicUsize::new(0);
        let job = |fail: bool| -> Preload<'_> {
            let ran = &ran;
            Box::new(move || {
                ran.fetch_add(1, Ordering::Relaxed);
                if fail {
                    Err(RuntimeError::Size("this load failed".into()))
                } else {
                    Ok(())
                }
            })
        };
        preload_all(vec![job(false), job(false)]).unwrap();
        let err = preload_all(vec![job(false), job(true), job(false)]).unwrap_err();
        assert!(err.to_string().contains("this load failed"), "{err}");
        assert_eq!(ran.load(Ordering::Relaxed), 5);
    }
}
