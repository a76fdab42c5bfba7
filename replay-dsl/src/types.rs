//! Element types and tile types of the tile IR.

use std::fmt;

/// A scalar element type that a pointer can point to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Elem {
    /// 1-bit boolean, stored as one byte in memory.
    Bool,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// 32-bit unsigned integer.
    U32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    BF16,
    /// IEEE binary32.
    F32,
    /// OCP fp8 E4M3 (finite-only, saturating).
    F8E4M3,
}

/// The type of every element of a tile: a scalar or a pointer to a scalar.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// A scalar value.
    Val(Elem),
    /// A global-memory pointer to elements of the given type.
    Ptr(Elem),
}

impl Elem {
    /// Size of one element in memory, in bytes.
    pub fn bytes(self) -> usize {
        match self {
            Elem::Bool | Elem::F8E4M3 => 1,
            Elem::F16 | Elem::BF16 => 2,
            Elem::I32 | Elem::U32 | Elem::F32 => 4,
            Elem::I64 => 8,
        }
    }
    /// True for the floating-point types.
    pub fn is_float(self) -> bool {
        matches!(self, Elem::F16 | Elem::BF16 | Elem::F32 | Elem::F8E4M3)
    }
    /// True for the integer types (not bool).
    pub fn is_int(self) -> bool {
        matches!(self, Elem::I32 | Elem::I64 | Elem::U32)
    }
    /// True for signed integer types.
    pub fn is_signed_int(self) -> bool {
        matches!(self, Elem::I32 | Elem::I64)
    }
    /// The name used in IR text and error messages.
    pub fn name(self) -> &'static str {
        match self {
            Elem::Bool => "bool",
            Elem::I32 => "i32",
            Elem::I64 => "i64",
            Elem::U32 => "u32",
            Elem::F16 => "f16",
            Elem::BF16 => "bf16",
            Elem::F32 => "f32",
            Elem::F8E4M3 => "f8e4m3",
        }
    }
}

impl DType {
    /// The scalar type of a value, `None` for pointers.
    pub fn val(self) -> Option<Elem> {
        match self {
            DType::Val(e) => Some(e),
            DType::Ptr(_) => None,
        }
    }
    /// The pointee type of a pointer, `None` for values.
    pub fn pointee(self) -> Option<Elem> {
        match self {
            DType::Ptr(e) => Some(e),
            DType::Val(_) => None,
        }
    }
    /// True for pointer types.
    pub fn is_ptr(self) -> bool {
        matches!(self, DType::Ptr(_))
    }
    /// True for floating-point value types.
    pub fn is_float(self) -> bool {
        self.val().is_some_and(Elem::is_float)
    }
    /// True for integer value types (not bool).
    pub fn is_int(self) -> bool {
        self.val().is_some_and(Elem::is_int)
    }
    /// True for `bool`.
    pub fn is_bool(self) -> bool {
        self == DType::Val(Elem::Bool)
    }
}

impl fmt::Display for Elem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DType::Val(e) => write!(f, "{e}"),
            DType::Ptr(e) => write!(f, "*{e}"),
        }
    }
}

/// A tile shape: the extent of each dimension (empty for a scalar).
pub type Shape = Vec<usize>;

/// The type of an IR value: element type and shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ty {
    /// Element type.
    pub dtype: DType,
    /// Extents, outermost first; empty for scalars.
    pub shape: Shape,
}

impl Ty {
    /// A tile type.
    pub fn new(dtype: DType, shape: impl Into<Shape>) -> Ty {
        Ty {
            dtype,
            shape: shape.into(),
        }
    }
    /// A scalar (rank-0) type.
    pub fn scalar(dtype: DType) -> Ty {
        Ty {
            dtype,
            shape: Vec::new(),
        }
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    /// The same shape with another element type.
    pub fn with_dtype(&self, dtype: DType) -> Ty {
        Ty {
            dtype,
            shape: self.shape.clone(),
        }
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.shape.is_empty() {
            write!(f, "{}", self.dtype)
        } else {
            let dims: Vec<String> = self.shape.iter().map(|d| d.to_string()).collect();
            write!(f, "{}[{}]", self.dtype, dims.join("x"))
        }
    }
}
