//! Launching a kernel that was traced directly — a [`replay_dsl::ir::Kernel`] built with
//! `replay_dsl::front::builder::trace`, with no `KernelDef` behind it (generated kernels,
//! differential tests, tools). Arguments are type-erased [`ArgValue`]s, checked at run time
//! against the IR's parameters:
//!
//! ```ignore
//! let loaded = device.load_traced(&kernel)?;          // compiled for the device, cached
//! loaded.launch_traced(&stream, Grid::from(4), &[ArgValue::Buffer(x.raw()), ArgValue::I32(n)])?;
//! ```
//!
//! The checks are those of a typed launch whose extents are unknown (the IR declares none):
//! argument count and types, pointer alignment, the divisibility the IR promises for integer
//! parameters, and the grid. Buffer lengths are not checked.

use super::args::ArgValue;
use super::check::{check_grid, LaunchError, POINTER_ALIGNMENT};
use super::grid::Grid;
use crate::driver::device::Device;
use crate::driver::module::{LoadedKernel, ModuleKey};
use crate::driver::stream::Stream;
use crate::error::{Result, RuntimeError};
use replay_dsl::ir::Kernel;
use replay_dsl::{DType, Specialization};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// The module-cache key of a traced kernel: its name, constexprs and `num_warps`, the
/// divisibility of its parameters, the device's target, and a digest of the whole IR (two
/// kernels traced under one name with different bodies load separately).
pub fn traced_key(kernel: &Kernel, target: Option<replay_dsl::Target>) -> ModuleKey {
    let digest = Sha256::digest(format!("{kernel:?}").as_bytes());
    let ir = i64::from_le_bytes(digest[..8].try_into().expect("8 bytes"));
    let mut config = kernel.constexprs.clone();
    config.push(("num_warps".to_string(), kernel.num_warps as i64));
    config.push(("ir".to_string(), ir));
    ModuleKey {
        kernel: kernel.name.clone(),
        config,
        specialization: Specialization {
            divisibility: kernel.params.iter().map(|p| p.divisibility).collect(),
        },
        target,
    }
}

/// Checks `args` against the parameters of `kernel`: count, types, 16-byte alignment of
/// buffers, and integer arguments divisible by what `Param::divisibility` promises.
pub fn check_traced_args(kernel: &Kernel, args: &[ArgValue<'_>]) -> Result<(), LaunchError> {
    if kernel.params.len() != args.len() {
        return Err(LaunchError::ArgCount {
            kernel: kernel.name.clone(),
            expected: kernel.params.len(),
            got: args.len(),
        });
    }
    for (p, a) in kernel.params.iter().zip(args) {
        let info = a.info();
        if p.dtype != info.dtype {
            return Err(LaunchError::ArgType {
                kernel: kernel.name.clone(),
                param: p.name.clone(),
                expected: p.dtype,
                got: info.dtype,
            });
        }
        if let Some(addr) = info.addr {
            if addr % POINTER_ALIGNMENT != 0 {
                return Err(LaunchError::Misaligned {
                    kernel: kernel.name.clone(),
                    param: p.name.clone(),
                    addr,
                });
            }
        }
        if let (DType::Val(_), Some(v)) = (p.dtype, info.int) {
            if p.divisibility > 1 && v % p.divisibility as i64 != 0 {
                return Err(LaunchError::NotDivisible {
                    kernel: kernel.name.clone(),
                    param: p.name.clone(),
                    value: v,
                    divisor: p.divisibility,
                });
            }
        }
    }
    Ok(())
}

impl Device {
    /// The loaded module of an already traced `kernel`: compiled for this device's target and
    /// JIT-loaded on a CUDA device, kept as IR on the interpreter. Cached per device by
    /// [`traced_key`], so loading the same IR again is free.
    pub fn load_traced(&self, kernel: &Kernel) -> Result<Arc<LoadedKernel>> {
        self.load_with(traced_key(kernel, self.info().target), || Ok(kernel.clone()))
    }
}

impl LoadedKernel {
    /// Launches a kernel loaded with its tile IR (e.g. by [`Device::load_traced`]) over `grid`
    /// on the stream's backend, after checking the arguments against the IR's parameters (see
    /// [`check_traced_args`]; buffer lengths are not checked) and the grid.
    pub fn launch_traced(&self, stream: &Stream, grid: Grid, args: &[ArgValue<'_>]) -> Result<()> {
        let Some(ir) = self.ir.as_ref() else {
            return Err(RuntimeError::Unsupported {
                backend: stream.device().backend().name(),
                what: format!("a checked launch of `{}`, which has no tile IR", self.key.kernel),
            });
        };
        for a in args {
            if let ArgValue::Buffer(b) = a {
                stream.same_device(b.device(), "buffer")?;
            }
        }
        check_traced_args(ir, args)?;
        check_grid(&ir.name, grid)?;
        // SAFETY: the arguments match the kernel's parameters in number and type (checked
        // above); what the kernel accesses through them is the caller's contract, as for a
        // typed launch of a kernel whose extents are unknown.
        unsafe { self.launch_unchecked(stream, grid, args) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::buffer::DeviceBuffer;
    use replay_dsl::front::builder::trace;
    use replay_dsl::front::tile::Tile;
    use replay_dsl::ir::Param;
    use replay_dsl::prelude::*;
    use replay_dsl::Elem;

    fn scale(factor: f32) -> Kernel {
        let params = vec![
            Param {
                name: "x".into(),
                dtype: DType::Ptr(Elem::F32),
                divisibility: 16,
            },
            Param {
                name: "n".into(),
                dtype: DType::Val(Elem::I32),
                divisibility: 16,
            },
        ];
        trace("scale", params, vec![], 1, |a| {
            let x = Tile::<Ptr<f32>>::from_value(a[0]);
            let n = Tile::<i32>::from_value(a[1]);
            let offs = program_id(0) * 32 + arange(32);
            let p = x + offs;
            let m = offs.compare(replay_dsl::ir::CmpOp::Lt, n);
            store(p, load(p, m) * factor, m);
        })
        .unwrap()
    }

    #[test]
    fn traced_kernels_load_once_per_body_and_launch_checked() {
        let d = Device::interpreter();
        let s = d.new_stream().unwrap();
        let (k2, k3) = (scale(2.0), scale(3.0));
        let l2 = d.load_traced(&k2).unwrap();
        assert!(Arc::ptr_eq(&l2, &d.load_traced(&k2).unwrap()));
        let l3 = d.load_traced(&k3).unwrap();
        assert!(!Arc::ptr_eq(&l2, &l3), "same name, different body: separate modules");
        assert_eq!(d.loaded_modules(), 2);

        let x = DeviceBuffer::from_host(&s, &[1.0f32; 64]).unwrap();
        let args = [ArgValue::Buffer(x.raw()), ArgValue::I32(48)];
        l3.launch_traced(&s, Grid::from(2), &args).unwrap();
        let got = x.to_host(&s).unwrap();
        assert!(got[..48].iter().all(|&v| v == 3.0) && got[48..].iter().all(|&v| v == 1.0));

        let err = |args: &[ArgValue<'_>]| match l3.launch_traced(&s, Grid::from(1), args) {
            Err(RuntimeError::Launch(e)) => e,
            other => panic!("expected a launch error, got {other:?}"),
        };
        assert!(matches!(
            err(&args[..1]),
            LaunchError::ArgCount {
                expected: 2,
                got: 1,
                ..
            }
        ));
        assert!(matches!(
            err(&[args[0], ArgValue::U32(48)]),
            LaunchError::ArgType { ref param, .. } if param == "n"
        ));
        assert!(matches!(
            err(&[args[0], ArgValue::I32(50)]),
            LaunchError::NotDivisible {
                value: 50,
                divisor: 16,
                ..
            }
        ));
    }
}
