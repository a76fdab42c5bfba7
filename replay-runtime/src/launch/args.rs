//! Typed kernel arguments: [`KernelArg<P>`] ties a Rust value to a parameter marker type `P`
//! (`&DeviceBuffer<f32>` to `Ptr<f32>`, `i32` to `i32`, …) and [`LaunchArgs<Params>`] ties a
//! tuple of them to a kernel's parameter tuple, so the compiler checks every launch.

use super::check::ArgInfo;
use crate::driver::buffer::{DeviceBuffer, RawBuffer};
use crate::elem::HostElem;
use replay_dsl::front::tile::Ptr;
use replay_dsl::{DType, Elem};

/// One argument, type-erased, as the launcher passes it on.
#[derive(Clone, Copy, Debug)]
pub enum ArgValue<'a> {
    /// A buffer (the kernel receives its device address).
    Buffer(&'a RawBuffer),
    /// A 32-bit signed integer.
    I32(i32),
    /// A 64-bit signed integer.
    I64(i64),
    /// A 32-bit unsigned integer.
    U32(u32),
    /// A 32-bit float.
    F32(f32),
    /// A boolean (passed as one byte).
    Bool(bool),
}

impl ArgValue<'_> {
    /// The argument's IR type.
    pub fn dtype(&self) -> DType {
        match self {
            ArgValue::Buffer(b) => DType::Ptr(b.elem()),
            ArgValue::I32(_) => DType::Val(Elem::I32),
            ArgValue::I64(_) => DType::Val(Elem::I64),
            ArgValue::U32(_) => DType::Val(Elem::U32),
            ArgValue::F32(_) => DType::Val(Elem::F32),
            ArgValue::Bool(_) => DType::Val(Elem::Bool),
        }
    }

    /// The value of an integer scalar.
    pub fn int(&self) -> Option<i64> {
        match *self {
            ArgValue::I32(v) => Some(v as i64),
            ArgValue::I64(v) => Some(v),
            ArgValue::U32(v) => Some(v as i64),
            _ => None,
        }
    }

    /// What the pre-launch checks look at.
    pub fn info(&self) -> ArgInfo {
        match self {
            ArgValue::Buffer(b) => ArgInfo {
                dtype: self.dtype(),
                len: Some(b.len() as u64),
                addr: Some(b.device_ptr()),
                int: None,
            },
            _ => ArgInfo {
                dtype: self.dtype(),
                len: None,
                addr: None,
                int: self.int(),
            },
        }
    }
}

/// A Rust value that may be passed for a kernel parameter declared with marker type `P`.
pub trait KernelArg<P> {
    /// The argument, type-erased.
    fn arg_value(&self) -> ArgValue<'_>;
}

impl<T: HostElem> KernelArg<Ptr<T>> for &DeviceBuffer<T> {
    fn arg_value(&self) -> ArgValue<'_> {
        ArgValue::Buffer(self.raw())
    }
}

impl<T: HostElem> KernelArg<Ptr<T>> for &mut DeviceBuffer<T> {
    fn arg_value(&self) -> ArgValue<'_> {
        ArgValue::Buffer(self.raw())
    }
}

macro_rules! scalar_arg {
    ($t:ty, $v:ident) => {
        impl KernelArg<$t> for $t {
            fn arg_value(&self) -> ArgValue<'_> {
                ArgValue::$v(*self)
            }
        }
    };
}
scalar_arg!(i32, I32);
scalar_arg!(i64, I64);
scalar_arg!(u32, U32);
scalar_arg!(f32, F32);
scalar_arg!(bool, Bool);

/// A tuple of arguments matching a kernel's parameter tuple `Params` (up to 24 elements).
pub trait LaunchArgs<Params> {
    /// The arguments in order, type-erased.
    fn values(&self) -> Vec<ArgValue<'_>>;
}

impl LaunchArgs<()> for () {
    fn values(&self) -> Vec<ArgValue<'_>> {
        Vec::new()
    }
}

/// `tuple_args!([] (P0, A0, 0) (P1, A1, 1) ...)` implements [`LaunchArgs`] for every non-empty
/// prefix of the list: one `impl` per arity, each linear in its arity.
macro_rules! tuple_args {
    (@impl $(($p:ident, $a:ident, $i:tt))+) => {
        impl<$($p, $a: KernelArg<$p>),+> LaunchArgs<($($p,)+)> for ($($a,)+) {
            fn values(&self) -> Vec<ArgValue<'_>> {
                vec![$(self.$i.arg_value()),+]
            }
        }
    };
    ([$($done:tt)*]) => {};
    ([$($done:tt)*] $next:tt $($rest:tt)*) => {
        tuple_args!(@impl $($done)* $next);
        tuple_args!([$($done)* $next] $($rest)*);
    };
}
tuple_args! {
    []
    (P0, A0, 0) (P1, A1, 1) (P2, A2, 2) (P3, A3, 3) (P4, A4, 4) (P5, A5, 5)
    (P6, A6, 6) (P7, A7, 7) (P8, A8, 8) (P9, A9, 9) (P10, A10, 10) (P11, A11, 11)
    (P12, A12, 12) (P13, A13, 13) (P14, A14, 14) (P15, A15, 15) (P16, A16, 16) (P17, A17, 17)
    (P18, A18, 18) (P19, A19, 19) (P20, A20, 20) (P21, A21, 21) (P22, A22, 22) (P23, A23, 23)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::device::Device;

    fn erase<P, A: LaunchArgs<P>>(args: &A) -> Vec<DType> {
        args.values().iter().map(|v| v.dtype()).collect()
    }

    #[test]
    fn tuples_erase_in_order() {
        let d = Device::interpreter();
        let s = d.new_stream().unwrap();
        let x = DeviceBuffer::from_host(&s, &[1.0f32; 4]).unwrap();
        let mut out = DeviceBuffer::<f32>::zeros(&s, 4).unwrap();
        let args = (&x, &mut out, 4i32, 2u32, true);
        let types = erase::<(Ptr<f32>, Ptr<f32>, i32, u32, bool), _>(&args);
        assert_eq!(
            types,
            vec![
                DType::Ptr(Elem::F32),
                DType::Ptr(Elem::F32),
                DType::Val(Elem::I32),
                DType::Val(Elem::U32),
                DType::Val(Elem::Bool)
            ]
        );
        let v = args.values();
        assert_eq!(v[2].int(), Some(4));
        assert_eq!(v[0].info().len, Some(4));
        // An integer literal infers the parameter's type.
        assert_eq!(erase::<(i64,), _>(&(5,)), vec![DType::Val(Elem::I64)]);
    }

    #[test]
    fn tuples_of_up_to_24_arguments() {
        let d = Device::interpreter();
        let s = d.new_stream().unwrap();
        let x = DeviceBuffer::from_host(&s, &[1.0f32; 4]).unwrap();
        type P18 = (
            Ptr<f32>,
            Ptr<f32>,
            Ptr<f32>,
            Ptr<f32>,
            Ptr<f32>,
            Ptr<f32>,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i64,
            i64,
            u32,
            u32,
            f32,
            bool,
        );
        let a18 = (&x, &x, &x, &x, &x, &x, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0.5f32, true);
        let t = erase::<P18, _>(&a18);
        assert_eq!(t.len(), 18);
        assert_eq!(t[0], DType::Ptr(Elem::F32));
        assert_eq!(t[12], DType::Val(Elem::I64));
        assert_eq!(t[17], DType::Val(Elem::Bool));
        assert_eq!(a18.values()[13].int(), Some(8));
        type P24 = (
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            u32,
        );
        let a24 = (
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23,
        );
        let v: Vec<Option<i64>> = LaunchArgs::<P24>::values(&a24).iter().map(|v| v.int()).collect();
        assert_eq!(v, (0..24).map(Some).collect::<Vec<_>>());
        assert_eq!(erase::<P24, _>(&a24)[23], DType::Val(Elem::U32));
    }
}
