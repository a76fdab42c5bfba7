//! Checks run before every launch, on any backend: argument types, buffer lengths against the
//! kernel's declared extents, pointer alignment and grid limits. Pure functions, so they are
//! tested without a device.

use super::grid::Grid;
use replay_dsl::{DType, ParamSpec};
use thiserror::Error;

/// Pointers passed to kernels must be aligned to this many bytes (the compiler assumes it).
pub const POINTER_ALIGNMENT: u64 = 16;

/// A launch refused before anything ran.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum LaunchError {
    /// Wrong number of arguments.
    #[error("kernel `{kernel}`: {got} arguments for {expected} parameters")]
    ArgCount {
        /// Kernel name.
        kernel: String,
        /// Parameters declared.
        expected: usize,
        /// Arguments given.
        got: usize,
    },
    /// An argument of the wrong type.
    #[error("kernel `{kernel}`, parameter `{param}`: expected {expected}, got {got}")]
    ArgType {
        /// Kernel name.
        kernel: String,
        /// Parameter name.
        param: String,
        /// Declared type.
        expected: DType,
        /// Type of the argument.
        got: DType,
    },
    /// A buffer shorter than the kernel may access.
    #[error("kernel `{kernel}`, parameter `{param}`: buffer holds {len} elements, the kernel may access {needed}")]
    BufferTooShort {
        /// Kernel name.
        kernel: String,
        /// Parameter name.
        param: String,
        /// Elements in the buffer.
        len: u64,
        /// Elements the kernel's extent declares.
        needed: u64,
    },
    /// A pointer that is not 16-byte aligned.
    #[error("kernel `{kernel}`, parameter `{param}`: address {addr:#x} is not {POINTER_ALIGNMENT}-byte aligned")]
    Misaligned {
        /// Kernel name.
        kernel: String,
        /// Parameter name.
        param: String,
        /// The address.
        addr: u64,
    },
    /// An integer argument that is not a multiple of what the kernel was specialized for.
    #[error("kernel `{kernel}`, parameter `{param}`: {value} is not a multiple of {divisor}, as the kernel assumes")]
    NotDivisible {
        /// Kernel name.
        kernel: String,
        /// Parameter name.
        param: String,
        /// The argument.
        value: i64,
        /// The divisor the kernel relies on.
        divisor: u32,
    },
    /// A grid the hardware cannot launch.
    #[error("kernel `{kernel}`: grid {grid} exceeds the limits (x < 2^31, y and z ≤ 65535)")]
    Grid {
        /// Kernel name.
        kernel: String,
        /// The grid asked for.
        grid: Grid,
    },
}

/// What the checks need to know about one argument.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ArgInfo {
    /// Its type (a pointer type for buffers).
    pub dtype: DType,
    /// For buffers: the number of elements.
    pub len: Option<u64>,
    /// For buffers: the device address.
    pub addr: Option<u64>,
    /// For integer scalars: the value.
    pub int: Option<i64>,
}

/// The integer-scalar values of `args` (`None` for pointers and non-integers), as
/// [`replay_dsl::KernelDef::extents`] and [`replay_dsl::Specialization::from_ints`] take them.
pub fn scalar_ints(args: &[ArgInfo]) -> Vec<Option<i64>> {
    args.iter().map(|a| a.int).collect()
}

/// Checks `args` against the kernel's parameters and its extents (one per parameter, `None`
/// when unknown; a shorter list means unknown for the rest).
pub fn check_args(
    kernel: &str,
    params: &[ParamSpec],
    extents: &[Option<u64>],
    args: &[ArgInfo],
) -> Result<(), LaunchError> {
    if params.len() != args.len() {
        return Err(LaunchError::ArgCount {
            kernel: kernel.into(),
            expected: params.len(),
            got: args.len(),
        });
    }
    for (i, (p, a)) in params.iter().zip(args).enumerate() {
        if p.dtype != a.dtype {
            return Err(LaunchError::ArgType {
                kernel: kernel.into(),
                param: p.name.into(),
                expected: p.dtype,
                got: a.dtype,
            });
        }
        if let (Some(len), Some(Some(needed))) = (a.len, extents.get(i)) {
            if len < *needed {
                return Err(LaunchError::BufferTooShort {
                    kernel: kernel.into(),
                    param: p.name.into(),
                    len,
                    needed: *needed,
                });
            }
        }
        if let Some(addr) = a.addr {
            if addr % POINTER_ALIGNMENT != 0 {
                return Err(LaunchError::Misaligned {
                    kernel: kernel.into(),
                    param: p.name.into(),
                    addr,
                });
            }
        }
    }
    Ok(())
}

/// Checks a grid against the hardware limits.
pub fn check_grid(kernel: &str, grid: Grid) -> Result<(), LaunchError> {
    if grid.x > i32::MAX as u32 || grid.y > 65535 || grid.z > 65535 {
        return Err(LaunchError::Grid {
            kernel: kernel.into(),
            grid,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use replay_dsl::Elem;

    fn params() -> Vec<ParamSpec> {
        vec![
            ParamSpec {
                name: "x",
                dtype: DType::Ptr(Elem::F32),
            },
            ParamSpec {
                name: "out",
                dtype: DType::Ptr(Elem::F32),
            },
            ParamSpec {
                name: "n",
                dtype: DType::Val(Elem::I32),
            },
        ]
    }
    fn buf(len: u64, addr: u64) -> ArgInfo {
        ArgInfo {
            dtype: DType::Ptr(Elem::F32),
            len: Some(len),
            addr: Some(addr),
            int: None,
        }
    }
    fn int(v: i64) -> ArgInfo {
        ArgInfo {
            dtype: DType::Val(Elem::I32),
            len: None,
            addr: None,
            int: Some(v),
        }
    }

    #[test]
    fn accepts_good_arguments() {
        let args = [buf(100, 256), buf(128, 512), int(100)];
        assert_eq!(scalar_ints(&args), vec![None, None, Some(100)]);
        check_args("k", &params(), &[Some(100), Some(100), None], &args).unwrap();
        // Unknown extents check nothing.
        check_args("k", &params(), &[], &args).unwrap();
    }

    #[test]
    fn refuses_short_buffers_naming_kernel_and_parameter() {
        let args = [buf(100, 256), buf(99, 512), int(100)];
        let err = check_args("add", &params(), &[Some(100), Some(100), None], &args).unwrap_err();
        assert_eq!(
            err,
            LaunchError::BufferTooShort {
                kernel: "add".into(),
                param: "out".into(),
                len: 99,
                needed: 100
            }
        );
        assert!(err.to_string().contains("`add`") && err.to_string().contains("`out`"));
    }

    #[test]
    fn refuses_misaligned_pointers() {
        let args = [buf(100, 256 + 4), buf(100, 512), int(100)];
        let err = check_args("add", &params(), &[], &args).unwrap_err();
        assert!(matches!(err, LaunchError::Misaligned { ref param, addr: 260, .. } if param == "x"));
    }

    #[test]
    fn refuses_wrong_types_and_counts() {
        let args = [buf(100, 0), int(3), int(100)];
        assert!(
            matches!(check_args("k", &params(), &[], &args), Err(LaunchError::ArgType { ref param, .. }) if param == "out")
        );
        assert!(matches!(
            check_args("k", &params(), &[], &args[..2]),
            Err(LaunchError::ArgCount {
                expected: 3,
                got: 2,
                ..
            })
        ));
    }

    #[test]
    fn grid_limits() {
        check_grid("k", Grid::new(1 << 30, 65535, 1)).unwrap();
        assert!(check_grid("k", Grid::new(1, 65536, 1)).is_err());
        assert!(check_grid("k", Grid::new(u32::MAX, 1, 1)).is_err());
    }
}
