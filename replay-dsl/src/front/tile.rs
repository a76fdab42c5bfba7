//! `Tile<T>`: a handle to a traced tile value, with Rust operators overloaded on it.

use super::builder::{fail, push1, ty};
use crate::error::ErrorKind;
use crate::ir::{BinaryOp, Const, Op, UnaryOp, Value};
use crate::types::{DType, Elem, Shape, Ty};
use std::marker::PhantomData;

/// Marker for a global-memory pointer to `T`, used as a kernel parameter type (`x: Ptr<f32>`)
/// and as the element type of pointer tiles (`Tile<Ptr<f32>>`).
pub struct Ptr<T>(PhantomData<T>);

impl<T> Clone for Ptr<T> {
    #[track_caller]
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Ptr<T> {}

/// An element type a tile can hold.
pub trait Element: Copy + 'static {
    /// The IR element type.
    const DTYPE: DType;
}

/// A scalar (non-pointer) element type.
pub trait Scalar: Element {
    /// The IR scalar type.
    const ELEM: Elem;
    /// This value as an IR constant.
    fn to_const(self) -> Const;
}

/// Numeric scalar types (arithmetic is defined on them).
pub trait Num: Scalar {}
/// Floating-point scalar types (math functions are defined on them).
pub trait Float: Num {}
/// Integer scalar types.
pub trait Int: Num {}

macro_rules! scalar {
    ($t:ty, $e:ident, $conv:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::Val(Elem::$e);
        }
        impl Scalar for $t {
            const ELEM: Elem = Elem::$e;
            #[track_caller]
            fn to_const(self) -> Const {
                #[allow(clippy::redundant_closure_call)]
                ($conv)(self)
            }
        }
    };
}
scalar!(bool, Bool, Const::Bool);
scalar!(i32, I32, |x: i32| Const::Int(x as i64));
scalar!(i64, I64, Const::Int);
scalar!(u32, U32, |x: u32| Const::Int(x as i64));
scalar!(f32, F32, |x: f32| Const::Float(x as f64));
scalar!(half::f16, F16, |x: half::f16| Const::Float(x.to_f64()));
scalar!(half::bf16, BF16, |x: half::bf16| Const::Float(x.to_f64()));
scalar!(float8::F8E4M3, F8E4M3, |x: float8::F8E4M3| Const::Float(x.to_f64()));
impl Num for i32 {}
impl Num for i64 {}
impl Num for u32 {}
impl Num for f32 {}
impl Num for half::f16 {}
impl Num for half::bf16 {}
impl Num for float8::F8E4M3 {}
impl Int for i32 {}
impl Int for i64 {}
impl Int for u32 {}
impl Float for f32 {}
impl Float for half::f16 {}
impl Float for half::bf16 {}
impl Float for float8::F8E4M3 {}

impl<T: Scalar> Element for Ptr<T> {
    const DTYPE: DType = DType::Ptr(T::ELEM);
}

/// A traced tile of `T` (rank 0 for scalars). Tiles are cheap `Copy` handles; shapes are known
/// at trace time and checked there.
pub struct Tile<T: Element> {
    /// The IR value this handle names.
    pub value: Value,
    _t: PhantomData<T>,
}

impl<T: Element> Clone for Tile<T> {
    #[track_caller]
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Element> Copy for Tile<T> {}

impl<T: Element> std::fmt::Debug for Tile<T> {
    #[track_caller]
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tile(%{})", self.value.0)
    }
}

impl<T: Element> Tile<T> {
    /// Wraps an IR value (its type must be `T`).
    #[track_caller]
    pub fn from_value(value: Value) -> Self {
        Tile { value, _t: PhantomData }
    }
    /// The tile's shape.
    #[track_caller]
    pub fn shape(&self) -> Shape {
        ty(self.value).shape
    }
    /// The tile's rank (0 for scalars).
    #[track_caller]
    pub fn rank(&self) -> usize {
        self.shape().len()
    }
    /// Inserts a size-1 dimension at `axis` (Triton's `x[None, :]` is `x.expand_dims(0)`).
    #[track_caller]
    pub fn expand_dims(self, axis: usize) -> Tile<T> {
        let mut shape = self.shape();
        if axis > shape.len() {
            fail(
                "expand_dims",
                ErrorKind::Axis(format!("axis {axis} for a tile of shape {shape:?}")),
            );
            return self;
        }
        shape.insert(axis, 1);
        Tile::from_value(push1(Op::ExpandDims(self.value, axis), Ty::new(T::DTYPE, shape)))
    }
    /// The same elements (row-major order) in another shape with the same number of elements.
    #[track_caller]
    pub fn reshape(self, shape: impl AsRef<[usize]>) -> Tile<T> {
        let shape = shape.as_ref().to_vec();
        let old = self.shape();
        if shape.iter().product::<usize>() != old.iter().product::<usize>() {
            fail(
                "reshape",
                ErrorKind::Shape(format!("cannot reshape {old:?} into {shape:?}")),
            );
            return self;
        }
        if shape == old {
            return self;
        }
        Tile::from_value(push1(Op::Reshape(self.value), Ty::new(T::DTYPE, shape)))
    }
    /// The transpose of a 2-D tile.
    #[track_caller]
    pub fn trans(self) -> Tile<T> {
        let shape = self.shape();
        if shape.len() != 2 {
            fail(
                "trans",
                ErrorKind::Shape(format!("trans needs a 2-D tile, got {shape:?}")),
            );
            return self;
        }
        Tile::from_value(push1(
            Op::Trans(self.value),
            Ty::new(T::DTYPE, vec![shape[1], shape[0]]),
        ))
    }
    /// Broadcasts to `shape` (numpy rules: missing leading dimensions and size-1 dimensions
    /// expand).
    #[track_caller]
    pub fn broadcast_to(self, shape: impl AsRef<[usize]>) -> Tile<T> {
        broadcast_value(self.value, shape.as_ref(), "broadcast_to")
            .map(Tile::from_value)
            .unwrap_or(self)
    }
}

/// A constant tile of `shape` holding `x`.
#[track_caller]
pub fn full<T: Scalar>(shape: impl AsRef<[usize]>, x: T) -> Tile<T> {
    let shape = shape.as_ref().to_vec();
    check_extents(&shape, "full");
    Tile::from_value(push1(Op::Const(x.to_const()), Ty::new(T::DTYPE, shape)))
}

/// A tile of `shape` holding zeros of type `T`.
#[track_caller]
pub fn zeros<T: Num>(shape: impl AsRef<[usize]>) -> Tile<T> {
    let shape = shape.as_ref().to_vec();
    check_extents(&shape, "zeros");
    let c = if T::ELEM.is_float() {
        Const::Float(0.0)
    } else {
        Const::Int(0)
    };
    Tile::from_value(push1(Op::Const(c), Ty::new(T::DTYPE, shape)))
}

/// Records an error unless every extent is a power of two.
#[track_caller]
pub(crate) fn check_extents(shape: &[usize], op: &str) -> bool {
    if shape.len() > 3 {
        fail(
            op,
            ErrorKind::Extent(format!("tiles have at most 3 dimensions, got {shape:?}")),
        );
        return false;
    }
    if let Some(d) = shape.iter().find(|d| !d.is_power_of_two()) {
        fail(
            op,
            ErrorKind::Extent(format!("extent {d} of shape {shape:?} is not a power of two")),
        );
        return false;
    }
    true
}

/// The numpy broadcast of two shapes.
#[track_caller]
pub(crate) fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Shape> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i + a.len() >= rank { a[i + a.len() - rank] } else { 1 };
        let db = if i + b.len() >= rank { b[i + b.len() - rank] } else { 1 };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// Emits the ops that broadcast `v` to `shape`; records an error and returns `None` if it cannot.
#[track_caller]
pub(crate) fn broadcast_value(v: Value, shape: &[usize], op: &str) -> Option<Value> {
    let t = ty(v);
    if t.shape == shape {
        return Some(v);
    }
    if broadcast_shapes(&t.shape, shape).as_deref() != Some(shape) {
        fail(
            op,
            ErrorKind::Shape(format!("cannot broadcast {:?} to {:?}", t.shape, shape)),
        );
        return None;
    }
    if t.shape.is_empty() {
        return Some(push1(Op::Splat(v), Ty::new(t.dtype, shape.to_vec())));
    }
    let mut cur = v;
    let mut cur_shape = t.shape.clone();
    while cur_shape.len() < shape.len() {
        cur = push1(Op::ExpandDims(cur, 0), {
            cur_shape.insert(0, 1);
            Ty::new(t.dtype, cur_shape.clone())
        });
    }
    if cur_shape != shape {
        cur = push1(Op::Broadcast(cur), Ty::new(t.dtype, shape.to_vec()));
    }
    Some(cur)
}

/// Broadcasts two values to their common shape.
#[track_caller]
pub(crate) fn broadcast_pair(a: Value, b: Value, op: &str) -> (Value, Value) {
    let (ta, tb) = (ty(a), ty(b));
    match broadcast_shapes(&ta.shape, &tb.shape) {
        Some(s) => (
            broadcast_value(a, &s, op).unwrap_or(a),
            broadcast_value(b, &s, op).unwrap_or(b),
        ),
        None => {
            fail(
                op,
                ErrorKind::Shape(format!(
                    "operands of shapes {:?} and {:?} do not broadcast",
                    ta.shape, tb.shape
                )),
            );
            (a, a)
        }
    }
}

/// A scalar constant of type `T` as a rank-0 tile.
#[track_caller]
pub fn constant<T: Scalar>(x: T) -> Tile<T> {
    Tile::from_value(push1(Op::Const(x.to_const()), Ty::scalar(T::DTYPE)))
}

/// Something usable as a `Tile<T>` operand: a tile, or a Rust literal of a matching type.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an operand of a `Tile<{T}>` operation",
    label = "expected a `Tile<{T}>` or a literal of a matching type",
    note = "operands must have the same element type; convert tiles with `.cast::<{T}>()`"
)]
pub trait Operand<T: Element> {
    /// The operand as a traced value.
    fn value(self) -> Value;
}
impl<T: Element> Operand<T> for Tile<T> {
    #[track_caller]
    fn value(self) -> Value {
        self.value
    }
}
macro_rules! literal_operand {
    ($tile:ty, $lit:ty, $conv:expr) => {
        impl Operand<$tile> for $lit {
            #[track_caller]
            fn value(self) -> Value {
                #[allow(clippy::redundant_closure_call)]
                constant::<$tile>(($conv)(self)).value
            }
        }
    };
}
literal_operand!(f32, f32, |x| x);
literal_operand!(half::f16, f32, half::f16::from_f32);
literal_operand!(half::bf16, f32, half::bf16::from_f32);
literal_operand!(float8::F8E4M3, f32, float8::F8E4M3::from_f32);
literal_operand!(i32, i32, |x| x);
literal_operand!(i32, usize, usize_to_i32);
literal_operand!(i64, i64, |x| x);
literal_operand!(i64, usize, |x: usize| x as i64);
literal_operand!(u32, u32, |x| x);
literal_operand!(bool, bool, |x| x);

#[track_caller]
fn usize_to_i32(x: usize) -> i32 {
    i32::try_from(x).unwrap_or_else(|_| {
        fail(
            "constant",
            ErrorKind::Type(format!("constexpr {x} does not fit in i32")),
        );
        0
    })
}

/// Emits an elementwise binary op after broadcasting; both operands have type `T`.
#[track_caller]
pub(crate) fn binary<T: Element>(op: BinaryOp, a: Value, b: Value) -> Tile<T> {
    let name = format!("{op:?}").to_lowercase();
    let (a, b) = broadcast_pair(a, b, &name);
    let t = ty(a);
    let ok = match op {
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Min | BinaryOp::Max => {
            t.dtype.is_float() || t.dtype.is_int()
        }
        BinaryOp::Rem | BinaryOp::Shl | BinaryOp::Shr => t.dtype.is_int(),
        BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => t.dtype.is_int() || t.dtype.is_bool(),
    };
    if !ok {
        fail(
            &name,
            ErrorKind::Type(format!("`{name}` is not defined on {}", t.dtype)),
        );
    }
    Tile::from_value(push1(Op::Binary(op, a, b), t))
}

/// Emits an elementwise unary op.
#[track_caller]
pub(crate) fn unary<T: Element>(op: UnaryOp, a: Value) -> Tile<T> {
    let t = ty(a);
    let ok = match op {
        UnaryOp::Neg | UnaryOp::Abs => t.dtype.is_float() || t.dtype.is_int(),
        UnaryOp::Not => t.dtype.is_int() || t.dtype.is_bool(),
        _ => t.dtype.is_float(),
    };
    if !ok {
        let name = format!("{op:?}").to_lowercase();
        fail(
            &name,
            ErrorKind::Type(format!("`{name}` is not defined on {}", t.dtype)),
        );
    }
    Tile::from_value(push1(Op::Unary(op, a), t))
}

macro_rules! arith_op {
    ($tr:ident, $m:ident, $op:ident, $bound:ident) => {
        impl<T: $bound, R: Operand<T>> std::ops::$tr<R> for Tile<T> {
            type Output = Tile<T>;
            #[track_caller]
            fn $m(self, rhs: R) -> Tile<T> {
                binary(BinaryOp::$op, self.value, rhs.value())
            }
        }
    };
}
arith_op!(Add, add, Add, Num);
arith_op!(Sub, sub, Sub, Num);
arith_op!(Mul, mul, Mul, Num);
arith_op!(Div, div, Div, Num);
arith_op!(Rem, rem, Rem, Int);
arith_op!(Shl, shl, Shl, Int);
arith_op!(Shr, shr, Shr, Int);
arith_op!(BitAnd, bitand, And, Scalar);
arith_op!(BitOr, bitor, Or, Scalar);
arith_op!(BitXor, bitxor, Xor, Scalar);

macro_rules! literal_lhs {
    ($lit:ty => $($t:ty),*) => {$(
        impl std::ops::Add<Tile<$t>> for $lit { type Output = Tile<$t>;
            #[track_caller]
            fn add(self, r: Tile<$t>) -> Tile<$t> { binary(BinaryOp::Add, Operand::<$t>::value(self), r.value) } }
        impl std::ops::Sub<Tile<$t>> for $lit { type Output = Tile<$t>;
            #[track_caller]
            fn sub(self, r: Tile<$t>) -> Tile<$t> { binary(BinaryOp::Sub, Operand::<$t>::value(self), r.value) } }
        impl std::ops::Mul<Tile<$t>> for $lit { type Output = Tile<$t>;
            #[track_caller]
            fn mul(self, r: Tile<$t>) -> Tile<$t> { binary(BinaryOp::Mul, Operand::<$t>::value(self), r.value) } }
        impl std::ops::Div<Tile<$t>> for $lit { type Output = Tile<$t>;
            #[track_caller]
            fn div(self, r: Tile<$t>) -> Tile<$t> { binary(BinaryOp::Div, Operand::<$t>::value(self), r.value) } }
    )*};
}
literal_lhs!(f32 => f32, half::f16, half::bf16);
literal_lhs!(i32 => i32);
literal_lhs!(usize => i32, i64);
literal_lhs!(i64 => i64);
literal_lhs!(u32 => u32);

impl<T: Num> std::ops::Neg for Tile<T> {
    type Output = Tile<T>;
    #[track_caller]
    fn neg(self) -> Tile<T> {
        unary(UnaryOp::Neg, self.value)
    }
}

impl<T: Scalar> std::ops::Not for Tile<T> {
    type Output = Tile<T>;
    #[track_caller]
    fn not(self) -> Tile<T> {
        unary(UnaryOp::Not, self.value)
    }
}

/// Pointer arithmetic: a pointer tile (or scalar pointer) plus an integer offset tile, in
/// elements; the result has the broadcast shape.
impl<T: Scalar, O: Operand<i32>> std::ops::Add<O> for Tile<Ptr<T>> {
    type Output = Tile<Ptr<T>>;
    #[track_caller]
    fn add(self, rhs: O) -> Tile<Ptr<T>> {
        let (p, o) = broadcast_pair(self.value, rhs.value(), "addptr");
        let t = ty(p);
        Tile::from_value(push1(Op::AddPtr(p, o), t))
    }
}

/// Pointer arithmetic with 64-bit offsets.
impl<T: Scalar> std::ops::Add<Tile<i64>> for Tile<Ptr<T>> {
    type Output = Tile<Ptr<T>>;
    #[track_caller]
    fn add(self, rhs: Tile<i64>) -> Tile<Ptr<T>> {
        let (p, o) = broadcast_pair(self.value, rhs.value, "addptr");
        let t = ty(p);
        Tile::from_value(push1(Op::AddPtr(p, o), t))
    }
}

macro_rules! assign_op {
    ($tr:ident, $m:ident, $op:ident, $bound:ident) => {
        impl<T: $bound, R: Operand<T>> std::ops::$tr<R> for Tile<T> {
            #[track_caller]
            fn $m(&mut self, rhs: R) {
                *self = binary(BinaryOp::$op, self.value, rhs.value());
            }
        }
    };
}
assign_op!(AddAssign, add_assign, Add, Num);
assign_op!(SubAssign, sub_assign, Sub, Num);
assign_op!(MulAssign, mul_assign, Mul, Num);
assign_op!(DivAssign, div_assign, Div, Num);
assign_op!(RemAssign, rem_assign, Rem, Int);
assign_op!(BitAndAssign, bitand_assign, And, Scalar);
assign_op!(BitOrAssign, bitor_assign, Or, Scalar);
assign_op!(BitXorAssign, bitxor_assign, Xor, Scalar);

/// `ptr += offset` on pointer tiles.
impl<T: Scalar, O: Operand<i32>> std::ops::AddAssign<O> for Tile<Ptr<T>> {
    #[track_caller]
    fn add_assign(&mut self, rhs: O) {
        *self = *self + rhs;
    }
}
