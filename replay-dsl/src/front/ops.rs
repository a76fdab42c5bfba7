//! The tile language's free functions: indexing, memory, math, reductions, scans, dot, atomics.

use super::builder::{fail, push1, ty};
use super::tile::{
    binary, broadcast_pair, broadcast_value, check_extents, unary, Element, Float, Num, Operand, Ptr, Scalar, Tile,
};
use crate::error::ErrorKind;
use crate::ir::{AtomicKind, BinaryOp, CmpOp, DotPrecision, Op, ReduceKind, Rounding, ScanKind, UnaryOp, Value};
use crate::types::{DType, Elem, Ty};

/// The index of this program along `axis` (0, 1 or 2) of the launch grid.
#[track_caller]
pub fn program_id(axis: u8) -> Tile<i32> {
    if axis > 2 {
        fail("program_id", ErrorKind::Axis(format!("grid axis {axis} (0..=2)")));
    }
    Tile::from_value(push1(Op::ProgramId(axis.min(2)), Ty::scalar(i32::DTYPE)))
}

/// The number of programs along `axis` (0, 1 or 2) of the launch grid.
#[track_caller]
pub fn num_programs(axis: u8) -> Tile<i32> {
    if axis > 2 {
        fail("num_programs", ErrorKind::Axis(format!("grid axis {axis} (0..=2)")));
    }
    Tile::from_value(push1(Op::NumPrograms(axis.min(2)), Ty::scalar(i32::DTYPE)))
}

/// `[0, 1, …, n-1]` as an `i32` tile; `n` must be a power of two.
#[track_caller]
pub fn arange(n: usize) -> Tile<i32> {
    check_extents(&[n], "arange");
    Tile::from_value(push1(Op::Arange, Ty::new(i32::DTYPE, vec![n])))
}

/// A mask argument: a bool tile, or `true` for "every lane".
pub trait MaskArg {
    /// The mask value, `None` for all lanes.
    fn mask(self) -> Option<Value>;
}
impl MaskArg for Tile<bool> {
    #[track_caller]
    fn mask(self) -> Option<Value> {
        Some(self.value)
    }
}
impl MaskArg for bool {
    #[track_caller]
    fn mask(self) -> Option<Value> {
        if !self {
            fail(
                "mask",
                ErrorKind::Type("a constant `false` mask disables the access; remove it instead".into()),
            );
        }
        None
    }
}

#[track_caller]
pub(super) fn mask_for(ptr: Value, mask: Option<Value>, op: &str) -> (Value, Option<Value>) {
    match mask {
        None => (ptr, None),
        Some(m) => {
            let (p, m) = broadcast_pair(ptr, m, op);
            (p, Some(m))
        }
    }
}

/// Loads through a tile of pointers; lanes where `mask` is false read 0.
#[track_caller]
pub fn load<T: Scalar>(ptr: Tile<Ptr<T>>, mask: impl MaskArg) -> Tile<T> {
    let (p, m) = mask_for(ptr.value, mask.mask(), "load");
    let t = ty(p).with_dtype(T::DTYPE);
    Tile::from_value(push1(
        Op::Load {
            ptr: p,
            mask: m,
            other: None,
        },
        t,
    ))
}

/// Loads through a tile of pointers; lanes where `mask` is false read `other`.
#[track_caller]
pub fn load_or<T: Scalar>(ptr: Tile<Ptr<T>>, mask: Tile<bool>, other: impl Operand<T>) -> Tile<T> {
    let (p, m) = broadcast_pair(ptr.value, mask.value, "load");
    let shape = ty(p).shape;
    let o = broadcast_value(other.value(), &shape, "load").unwrap_or(p);
    Tile::from_value(push1(
        Op::Load {
            ptr: p,
            mask: Some(m),
            other: Some(o),
        },
        Ty::new(T::DTYPE, shape),
    ))
}

/// Asks the L2 cache to fetch, now, the memory behind a tile of pointers where `mask` is true:
/// a hint for data a later `load` reads (say, the next loop iteration's tile), which holds no
/// registers and is waited for by nothing. Fetched lanes must be in bounds, as for a load.
#[track_caller]
pub fn prefetch<T: Scalar>(ptr: Tile<Ptr<T>>, mask: impl MaskArg) {
    let (p, m) = mask_for(ptr.value, mask.mask(), "prefetch");
    super::builder::push(Op::Prefetch { ptr: p, mask: m }, vec![]);
}

/// Sets the condition of a CUDA graph's conditional node to `value` (a `bool` scalar): the
/// node runs its body when the last value set before it is true. `handle` (an `i64` scalar) is
/// the node's handle, an argument the runtime's graph capture supplies. The program's first
/// thread sets it; set it from one program per launch (say, under `if program_id(0) == 0`):
/// two programs setting one condition race (the interpreter reports it).
#[track_caller]
pub fn set_graph_condition(handle: impl Operand<i64>, value: impl Operand<bool>) {
    let (h, v) = (handle.value(), value.value());
    for (what, x) in [("handle", h), ("value", v)] {
        if ty(x).rank() != 0 {
            fail(
                "set_graph_condition",
                ErrorKind::Shape(format!(
                    "the condition's {what} must be a scalar, got shape {:?}",
                    ty(x).shape
                )),
            );
        }
    }
    super::builder::push(Op::SetCondition { handle: h, value: v }, vec![]);
}

/// Stores `value` through a tile of pointers where `mask` is true.
#[track_caller]
pub fn store<T: Scalar>(ptr: Tile<Ptr<T>>, value: impl Operand<T>, mask: impl MaskArg) {
    let (p, m) = mask_for(ptr.value, mask.mask(), "store");
    let shape = ty(p).shape;
    let v = value.value();
    let vshape = ty(v).shape;
    if super::tile::broadcast_shapes(&vshape, &shape).as_deref() != Some(&shape[..]) {
        fail(
            "store",
            ErrorKind::Shape(format!(
                "value of shape {vshape:?} stored through pointers of shape {shape:?}"
            )),
        );
        return;
    }
    let v = broadcast_value(v, &shape, "store").unwrap_or(v);
    super::builder::push(
        Op::Store {
            ptr: p,
            value: v,
            mask: m,
        },
        vec![],
    );
}

/// Elementwise `cond ? a : b` (Triton's `where`).
#[track_caller]
pub fn select<T: Scalar>(cond: Tile<bool>, a: impl Operand<T>, b: impl Operand<T>) -> Tile<T> {
    let (a, b) = broadcast_pair(a.value(), b.value(), "select");
    let (c, a) = broadcast_pair(cond.value, a, "select");
    let (a, b) = broadcast_pair(a, b, "select");
    let (c, _) = broadcast_pair(c, a, "select");
    let t = ty(a);
    Tile::from_value(push1(Op::Select(c, a, b), t))
}

/// Elementwise minimum.
#[track_caller]
pub fn minimum<T: Num>(a: Tile<T>, b: impl Operand<T>) -> Tile<T> {
    binary(BinaryOp::Min, a.value, b.value())
}
/// Elementwise maximum.
#[track_caller]
pub fn maximum<T: Num>(a: Tile<T>, b: impl Operand<T>) -> Tile<T> {
    binary(BinaryOp::Max, a.value, b.value())
}

macro_rules! float_unary {
    ($($(#[$doc:meta])* $name:ident => $op:ident),*) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name<T: Float>(x: Tile<T>) -> Tile<T> {
            unary(UnaryOp::$op, x.value)
        }
    )*};
}
float_unary!(
    /// e^x.
    exp => Exp,
    /// 2^x.
    exp2 => Exp2,
    /// Natural logarithm.
    log => Log,
    /// Base-2 logarithm.
    log2 => Log2,
    /// Square root.
    sqrt => Sqrt,
    /// 1/sqrt(x).
    rsqrt => Rsqrt,
    /// log(1 + e^x), computed without overflow.
    softplus => Softplus,
    /// 1 / (1 + e^-x).
    sigmoid => Sigmoid,
    /// x · sigmoid(x).
    silu => Silu,
    /// Hyperbolic tangent.
    tanh => Tanh
);

/// Absolute value.
#[track_caller]
pub fn abs<T: Num>(x: Tile<T>) -> Tile<T> {
    unary(UnaryOp::Abs, x.value)
}

#[track_caller]
fn reduce<T: Num>(x: Tile<T>, axis: usize, kind: ReduceKind, name: &str) -> Tile<T> {
    let t = ty(x.value);
    if axis >= t.rank() {
        fail(
            name,
            ErrorKind::Axis(format!("axis {axis} of a tile of shape {:?}", t.shape)),
        );
        return x;
    }
    let mut shape = t.shape.clone();
    shape.remove(axis);
    Tile::from_value(push1(
        Op::Reduce {
            value: x.value,
            axis,
            kind,
        },
        Ty::new(t.dtype, shape),
    ))
}

#[track_caller]
fn reduce_all<T: Num>(x: Tile<T>, kind: ReduceKind, name: &str) -> Tile<T> {
    let n = x.shape().iter().product::<usize>();
    if x.rank() == 0 {
        return x;
    }
    reduce(x.reshape([n]), 0, kind, name)
}

/// Sum along `axis` (the axis is removed).
#[track_caller]
pub fn sum<T: Num>(x: Tile<T>, axis: usize) -> Tile<T> {
    reduce(x, axis, ReduceKind::Sum, "sum")
}
/// Maximum along `axis` (the axis is removed).
#[track_caller]
pub fn max<T: Num>(x: Tile<T>, axis: usize) -> Tile<T> {
    reduce(x, axis, ReduceKind::Max, "max")
}
/// Minimum along `axis` (the axis is removed).
#[track_caller]
pub fn min<T: Num>(x: Tile<T>, axis: usize) -> Tile<T> {
    reduce(x, axis, ReduceKind::Min, "min")
}
/// Sum of every element, as a scalar.
#[track_caller]
pub fn sum_all<T: Num>(x: Tile<T>) -> Tile<T> {
    reduce_all(x, ReduceKind::Sum, "sum")
}
/// Maximum of every element, as a scalar.
#[track_caller]
pub fn max_all<T: Num>(x: Tile<T>) -> Tile<T> {
    reduce_all(x, ReduceKind::Max, "max")
}
/// Minimum of every element, as a scalar.
#[track_caller]
pub fn min_all<T: Num>(x: Tile<T>) -> Tile<T> {
    reduce_all(x, ReduceKind::Min, "min")
}

#[track_caller]
fn scan<T: Num>(x: Tile<T>, axis: usize, kind: ScanKind, reverse: bool, exclusive: bool, name: &str) -> Tile<T> {
    let t = ty(x.value);
    if axis >= t.rank() {
        fail(
            name,
            ErrorKind::Axis(format!("axis {axis} of a tile of shape {:?}", t.shape)),
        );
        return x;
    }
    Tile::from_value(push1(
        Op::Scan {
            value: x.value,
            axis,
            kind,
            reverse,
            exclusive,
        },
        t,
    ))
}
/// Inclusive running sum along `axis`: `y[j] = Σ_{l ≤ j} x[l]`.
#[track_caller]
pub fn cumsum<T: Num>(x: Tile<T>, axis: usize) -> Tile<T> {
    scan(x, axis, ScanKind::Sum, false, false, "cumsum")
}
/// Inclusive running product along `axis`: `y[j] = Π_{l ≤ j} x[l]`.
#[track_caller]
pub fn cumprod<T: Num>(x: Tile<T>, axis: usize) -> Tile<T> {
    scan(x, axis, ScanKind::Prod, false, false, "cumprod")
}
/// Exclusive running sum along `axis`: `y[j] = Σ_{l < j} x[l]` (`y[0] = 0`).
#[track_caller]
pub fn cumsum_exclusive<T: Num>(x: Tile<T>, axis: usize) -> Tile<T> {
    scan(x, axis, ScanKind::Sum, false, true, "cumsum_exclusive")
}
/// Exclusive running product along `axis`: `y[j] = Π_{l < j} x[l]` (`y[0] = 1`).
#[track_caller]
pub fn cumprod_exclusive<T: Num>(x: Tile<T>, axis: usize) -> Tile<T> {
    scan(x, axis, ScanKind::Prod, false, true, "cumprod_exclusive")
}
/// Inclusive running sum from the end of `axis`: `y[j] = Σ_{l ≥ j} x[l]`.
#[track_caller]
pub fn cumsum_reverse<T: Num>(x: Tile<T>, axis: usize) -> Tile<T> {
    scan(x, axis, ScanKind::Sum, true, false, "cumsum_reverse")
}
/// Inclusive running product from the end of `axis`: `y[j] = Π_{l ≥ j} x[l]`.
#[track_caller]
pub fn cumprod_reverse<T: Num>(x: Tile<T>, axis: usize) -> Tile<T> {
    scan(x, axis, ScanKind::Prod, true, false, "cumprod_reverse")
}
/// Exclusive running sum from the end of `axis`: `y[j] = Σ_{l > j} x[l]` (`y[n-1] = 0`).
#[track_caller]
pub fn cumsum_reverse_exclusive<T: Num>(x: Tile<T>, axis: usize) -> Tile<T> {
    scan(x, axis, ScanKind::Sum, true, true, "cumsum_reverse_exclusive")
}
/// Exclusive running product from the end of `axis`: `y[j] = Π_{l > j} x[l]` (`y[n-1] = 1`).
#[track_caller]
pub fn cumprod_reverse_exclusive<T: Num>(x: Tile<T>, axis: usize) -> Tile<T> {
    scan(x, axis, ScanKind::Prod, true, true, "cumprod_reverse_exclusive")
}

/// `a @ b` for `[M, K]` and `[K, N]` tiles, accumulated in f32.
#[track_caller]
pub fn dot<T: Float>(a: Tile<T>, b: Tile<T>) -> Tile<f32> {
    dot_in(a, b, DotPrecision::Tf32x3)
}

/// [`dot`] computed as `precision` says (e.g. [`DotPrecision::Tf32`] for a product whose
/// result ends in a 16-bit float).
#[track_caller]
pub fn dot_in<T: Float>(a: Tile<T>, b: Tile<T>, precision: DotPrecision) -> Tile<f32> {
    let (sa, sb) = (a.shape(), b.shape());
    let m = sa.first().copied().unwrap_or(1);
    let n = sb.get(1).copied().unwrap_or(1);
    let acc = super::tile::zeros::<f32>([m, n]);
    dot_acc_in(a, b, acc, precision)
}

/// `acc + a @ b` for `[M, K]`, `[K, N]` and `[M, N]` f32 tiles.
#[track_caller]
pub fn dot_acc<T: Float>(a: Tile<T>, b: Tile<T>, acc: Tile<f32>) -> Tile<f32> {
    dot_acc_in(a, b, acc, DotPrecision::Tf32x3)
}

/// [`dot_acc`] computed as `precision` says (e.g. [`DotPrecision::Ieee`] keeps it on CUDA
/// cores: no operand staging for tensor cores, whose fragments may cost more registers than
/// a small product saves).
#[track_caller]
pub fn dot_acc_in<T: Float>(a: Tile<T>, b: Tile<T>, acc: Tile<f32>, precision: DotPrecision) -> Tile<f32> {
    let (sa, sb, sc) = (a.shape(), b.shape(), acc.shape());
    if sa.len() != 2 || sb.len() != 2 || sa[1] != sb[0] || sc != [sa[0], sb[1]] {
        fail("dot", ErrorKind::Shape(format!("dot of {sa:?} @ {sb:?} into {sc:?}")));
        return acc;
    }
    if sa[1] < 4 {
        fail("dot", ErrorKind::Shape(format!("dot needs K ≥ 4, got {sa:?} @ {sb:?}")));
        return acc;
    }
    Tile::from_value(push1(
        Op::Dot {
            a: a.value,
            b: b.value,
            acc: acc.value,
            precision,
        },
        ty(acc.value),
    ))
}

#[track_caller]
fn atomic<T: Num>(
    kind: AtomicKind,
    ptr: Tile<Ptr<T>>,
    value: Value,
    cmp: Option<Value>,
    mask: Option<Value>,
) -> Tile<T> {
    let name = format!("atomic_{kind:?}").to_lowercase();
    let mut shape = ty(ptr.value).shape;
    for v in [Some(value), cmp, mask].into_iter().flatten() {
        match super::tile::broadcast_shapes(&shape, &ty(v).shape) {
            Some(s) => shape = s,
            None => fail(
                &name,
                ErrorKind::Shape(format!("operands do not broadcast with {shape:?}")),
            ),
        }
    }
    let ok = matches!(
        (kind, T::ELEM),
        (AtomicKind::Add, Elem::I32 | Elem::U32 | Elem::F32 | Elem::I64)
            | (AtomicKind::Max | AtomicKind::Cas, Elem::I32 | Elem::U32 | Elem::I64)
    );
    if !ok {
        fail(
            &name,
            ErrorKind::Type(format!("{name} is not supported on {}", T::ELEM)),
        );
    }
    // Each operand broadcast to the common shape (not in a closure: the broadcast's location is
    // the caller's, through `#[track_caller]`).
    let mut operands = [Some(ptr.value), Some(value), cmp, mask];
    for v in operands.iter_mut().flatten() {
        *v = broadcast_value(*v, &shape, &name).unwrap_or(*v);
    }
    let [ptr, value, cmp, mask] = operands;
    let op = Op::Atomic {
        kind,
        ptr: ptr.expect("present"),
        value: value.expect("present"),
        cmp,
        mask,
    };
    Tile::from_value(push1(op, Ty::new(T::DTYPE, shape)))
}

/// Atomically adds `value` at each pointer where `mask` holds; returns the old values.
#[track_caller]
pub fn atomic_add<T: Num>(ptr: Tile<Ptr<T>>, value: impl Operand<T>, mask: impl MaskArg) -> Tile<T> {
    atomic(AtomicKind::Add, ptr, value.value(), None, mask.mask())
}
/// Atomically takes the maximum with `value` at each pointer where `mask` holds; returns the
/// old values.
#[track_caller]
pub fn atomic_max<T: Num>(ptr: Tile<Ptr<T>>, value: impl Operand<T>, mask: impl MaskArg) -> Tile<T> {
    atomic(AtomicKind::Max, ptr, value.value(), None, mask.mask())
}
/// Atomically replaces `cmp` by `value` at each pointer where `mask` holds; returns the old
/// values.
#[track_caller]
pub fn atomic_cas<T: Num>(
    ptr: Tile<Ptr<T>>,
    cmp: impl Operand<T>,
    value: impl Operand<T>,
    mask: impl MaskArg,
) -> Tile<T> {
    atomic(AtomicKind::Cas, ptr, value.value(), Some(cmp.value()), mask.mask())
}

impl<T: Scalar> Tile<T> {
    /// Converts to `U`, rounding to nearest (float→int truncates and saturates, NaN→0).
    #[track_caller]
    pub fn cast<U: Scalar>(self) -> Tile<U> {
        if T::ELEM == U::ELEM {
            return Tile::from_value(self.value);
        }
        let t = ty(self.value).with_dtype(U::DTYPE);
        Tile::from_value(push1(Op::Cast(self.value, Rounding::Nearest), t))
    }
    /// Converts a float tile to a narrower float type with stochastic rounding, using one random
    /// `u32` per element (the same bits give the same result on every target).
    #[track_caller]
    pub fn cast_stochastic<U: Float>(self, random_bits: Tile<u32>) -> Tile<U> {
        let t = ty(self.value);
        if !(T::ELEM == Elem::F32 && matches!(U::ELEM, Elem::F16 | Elem::BF16 | Elem::F8E4M3)) {
            fail(
                "cast.rs",
                ErrorKind::Type(format!(
                    "stochastic rounding converts f32 to f16/bf16/f8e4m3, not {} to {}",
                    T::ELEM,
                    U::ELEM
                )),
            );
        }
        let bits = broadcast_value(random_bits.value, &t.shape, "cast.rs").unwrap_or(random_bits.value);
        Tile::from_value(push1(
            Op::Cast(self.value, Rounding::Stochastic(bits)),
            t.with_dtype(U::DTYPE),
        ))
    }
}

/// Records a compile error with `message` unless `cond` holds (for constexpr checks).
#[track_caller]
pub fn static_assert(cond: bool, message: &str) {
    if !cond {
        fail("static_assert", ErrorKind::StaticAssert(message.to_string()));
    }
}

#[track_caller]
fn compare(op: CmpOp, a: Value, b: Value) -> Tile<bool> {
    let name = format!("cmp.{op:?}").to_lowercase();
    let (a, b) = broadcast_pair(a, b, &name);
    let t = ty(a);
    if t.dtype.is_ptr() {
        fail(&name, ErrorKind::Type("pointers cannot be compared".into()));
    }
    Tile::from_value(push1(Op::Cmp(op, a, b), t.with_dtype(DType::Val(Elem::Bool))))
}

/// Comparison that the `#[kernel]` macro substitutes for `<`, `<=`, `>`, `>=`, `==`, `!=`: on
/// tiles it traces a bool tile, on plain Rust values it is the ordinary comparison.
pub trait Compare<Rhs> {
    /// `bool` for Rust values, `Tile<bool>` for tiles.
    type Output;
    /// The comparison `self op rhs`.
    fn compare(self, op: CmpOp, rhs: Rhs) -> Self::Output;
}

impl<T: Scalar, R: Operand<T>> Compare<R> for Tile<T> {
    type Output = Tile<bool>;
    #[track_caller]
    fn compare(self, op: CmpOp, rhs: R) -> Tile<bool> {
        compare(op, self.value, rhs.value())
    }
}

macro_rules! compare_lit {
    ($($lit:ty => $t:ty),*) => {$(
        impl Compare<Tile<$t>> for $lit {
            type Output = Tile<bool>;
            #[track_caller]
            fn compare(self, op: CmpOp, rhs: Tile<$t>) -> Tile<bool> {
                compare(op, Operand::<$t>::value(self), rhs.value)
            }
        }
    )*};
}
compare_lit!(i32 => i32, f32 => f32, i64 => i64, u32 => u32);

macro_rules! compare_plain {
    ($($t:ty),*) => {$(
        impl Compare<$t> for $t {
            type Output = bool;
            #[track_caller]
            fn compare(self, op: CmpOp, rhs: $t) -> bool {
                match op {
                    CmpOp::Eq => self == rhs,
                    CmpOp::Ne => self != rhs,
                    CmpOp::Lt => self < rhs,
                    CmpOp::Le => self <= rhs,
                    CmpOp::Gt => self > rhs,
                    CmpOp::Ge => self >= rhs,
                }
            }
        }
    )*};
}
compare_plain!(usize, isize, u8, u16, u32, u64, i8, i16, i64, f64, bool, char);
// i32 and f32 compare with each other as plain values too.
impl Compare<i32> for i32 {
    type Output = bool;
    #[track_caller]
    fn compare(self, op: CmpOp, rhs: i32) -> bool {
        (self as i64).compare(op, rhs as i64)
    }
}
impl Compare<f32> for f32 {
    type Output = bool;
    #[track_caller]
    fn compare(self, op: CmpOp, rhs: f32) -> bool {
        (self as f64).compare(op, rhs as f64)
    }
}
impl<'a> Compare<&'a str> for &'a str {
    type Output = bool;
    #[track_caller]
    fn compare(self, op: CmpOp, rhs: &'a str) -> bool {
        match op {
            CmpOp::Eq => self == rhs,
            CmpOp::Ne => self != rhs,
            CmpOp::Lt => self < rhs,
            CmpOp::Le => self <= rhs,
            CmpOp::Gt => self > rhs,
            CmpOp::Ge => self >= rhs,
        }
    }
}

/// Logical `&&` / `||` that the `#[kernel]` macro substitutes: short-circuit on `bool`,
/// elementwise on bool tiles.
pub trait Logic<Rhs> {
    /// `bool` or `Tile<bool>`.
    type Output;
    /// `self && rhs`.
    fn and(self, rhs: Rhs) -> Self::Output;
    /// `self || rhs`.
    fn or(self, rhs: Rhs) -> Self::Output;
    /// `self && rhs()`, which the `#[kernel]` macro emits for `&&`: `rhs` is evaluated only when
    /// needed on `bool` (short-circuit), always on tiles.
    #[track_caller]
    fn and_then(self, rhs: impl FnOnce() -> Rhs) -> Self::Output
    where
        Self: Sized,
    {
        self.and(rhs())
    }
    /// `self || rhs()`, which the `#[kernel]` macro emits for `||` (short-circuit on `bool`).
    #[track_caller]
    fn or_else(self, rhs: impl FnOnce() -> Rhs) -> Self::Output
    where
        Self: Sized,
    {
        self.or(rhs())
    }
}
impl Logic<bool> for bool {
    type Output = bool;
    #[track_caller]
    fn and(self, rhs: bool) -> bool {
        self && rhs
    }
    #[track_caller]
    fn or(self, rhs: bool) -> bool {
        self || rhs
    }
    #[track_caller]
    fn and_then(self, rhs: impl FnOnce() -> bool) -> bool {
        self && rhs()
    }
    #[track_caller]
    fn or_else(self, rhs: impl FnOnce() -> bool) -> bool {
        self || rhs()
    }
}
impl<R: Operand<bool>> Logic<R> for Tile<bool> {
    type Output = Tile<bool>;
    #[track_caller]
    fn and(self, rhs: R) -> Tile<bool> {
        binary(BinaryOp::And, self.value, rhs.value())
    }
    #[track_caller]
    fn or(self, rhs: R) -> Tile<bool> {
        binary(BinaryOp::Or, self.value, rhs.value())
    }
}
