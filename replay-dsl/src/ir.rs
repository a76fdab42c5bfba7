//! The tile IR: SSA values, operations and structured control flow.
//!
//! A [`Kernel`] owns every value's type in one table and a body [`Block`]. Control flow is
//! structured: [`Op::For`] and [`Op::If`] hold nested blocks that end in [`Op::Yield`].
//! Shapes are static; every operand of an elementwise op has exactly the result's shape (the
//! front end inserts explicit [`Op::Broadcast`]s).

use crate::types::{DType, Elem, Ty};
use std::fmt::{self, Write};

/// An SSA value: an index into [`Kernel::values`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value(pub u32);

/// A constant element.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Const {
    /// Boolean constant.
    Bool(bool),
    /// Integer constant (any integer type; wrapped to its width).
    Int(i64),
    /// Floating-point constant, already rounded to the value's type.
    Float(f64),
}

/// Elementwise unary operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// Arithmetic negation.
    Neg,
    /// Logical not (bool) or bitwise not (integers).
    Not,
    /// e^x.
    Exp,
    /// 2^x.
    Exp2,
    /// Natural logarithm.
    Log,
    /// Base-2 logarithm.
    Log2,
    /// Square root.
    Sqrt,
    /// 1/sqrt(x).
    Rsqrt,
    /// Absolute value.
    Abs,
    /// log(1 + e^x).
    Softplus,
    /// 1 / (1 + e^-x).
    Sigmoid,
    /// x * sigmoid(x).
    Silu,
    /// Hyperbolic tangent.
    Tanh,
}

/// Elementwise binary operations (both operands and result share one type).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// a + b (wrapping for integers).
    Add,
    /// a - b (wrapping for integers).
    Sub,
    /// a * b (wrapping for integers).
    Mul,
    /// a / b; integers truncate toward zero (Rust semantics).
    Div,
    /// Remainder with the sign of the dividend (Rust semantics); integers only.
    Rem,
    /// Minimum (for floats, NaN if either operand is NaN).
    Min,
    /// Maximum (for floats, NaN if either operand is NaN).
    Max,
    /// Bitwise / logical and.
    And,
    /// Bitwise / logical or.
    Or,
    /// Bitwise / logical xor.
    Xor,
    /// Shift left (integers).
    Shl,
    /// Shift right (arithmetic for signed, logical for unsigned).
    Shr,
}

/// Comparison predicates; the result is a bool tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// a == b
    Eq,
    /// a != b
    Ne,
    /// a < b
    Lt,
    /// a <= b
    Le,
    /// a > b
    Gt,
    /// a >= b
    Ge,
}

/// How a cast rounds when the destination cannot represent the source exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rounding {
    /// Round to nearest, ties to even (float→float, int→float); toward zero, saturating, NaN→0
    /// for float→int (Rust `as` semantics).
    Nearest,
    /// Stochastic rounding driven by caller-supplied random bits (a `u32` tile of the same shape).
    Stochastic(Value),
}

/// The combining function of a reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    /// Sum.
    Sum,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
}

/// The combining function of a scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScanKind {
    /// Running sum.
    Sum,
    /// Running product.
    Prod,
}

/// Atomic read-modify-write operations; each returns the old value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicKind {
    /// *p += v
    Add,
    /// *p = max(*p, v)
    Max,
    /// if *p == cmp { *p = v }
    Cas,
}

/// One operation. Results are listed in the owning [`Inst`].
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// The kernel parameter with this index (a scalar or a pointer).
    Param(usize),
    /// A constant splatted to the result shape.
    Const(Const),
    /// The program index along an axis (0..3), an `i32` scalar.
    ProgramId(u8),
    /// The number of programs along an axis (0..3), an `i32` scalar.
    NumPrograms(u8),
    /// `[0, 1, ..., n-1]` as an `i32` tile of shape `[n]`.
    Arange,
    /// A scalar repeated to the result shape.
    Splat(Value),
    /// Size-1 dimensions expanded to the result shape (same rank).
    Broadcast(Value),
    /// A new size-1 dimension inserted at the given axis.
    ExpandDims(Value, usize),
    /// The same elements in row-major order with another shape.
    Reshape(Value),
    /// A 2-D transpose.
    Trans(Value),
    /// Elementwise unary operation.
    Unary(UnaryOp, Value),
    /// Elementwise binary operation.
    Binary(BinaryOp, Value, Value),
    /// Elementwise comparison.
    Cmp(CmpOp, Value, Value),
    /// Elementwise `cond ? a : b`.
    Select(Value, Value, Value),
    /// Elementwise conversion to the result's element type.
    Cast(Value, Rounding),
    /// Pointer tile plus an integer offset tile, in elements.
    AddPtr(Value, Value),
    /// Load through a pointer tile; masked-off lanes produce `other` (zero when absent).
    Load {
        /// Pointers.
        ptr: Value,
        /// Which lanes are loaded.
        mask: Option<Value>,
        /// Value for masked-off lanes.
        other: Option<Value>,
    },
    /// Store through a pointer tile; masked-off lanes are not written.
    Store {
        /// Pointers.
        ptr: Value,
        /// Values stored.
        value: Value,
        /// Which lanes are stored.
        mask: Option<Value>,
    },
    /// A hint that the memory behind a pointer tile is read soon: asks the L2 cache to fetch it
    /// now (no registers held, nothing waits for it). Masked-off lanes are not fetched; every
    /// fetched lane must be in bounds, as for a load.
    Prefetch {
        /// Pointers.
        ptr: Value,
        /// Which lanes are fetched.
        mask: Option<Value>,
    },
    /// Starts copying the memory behind a pointer tile into stage `stage` of shared buffer
    /// `buffer` (whose tiles have the pointer tile's shape), asynchronously: one copy group.
    /// Masked-off lanes are filled with zero (and not read); every copied lane must be in
    /// bounds, as for a load. The copy starts after every earlier read of the buffer by the
    /// program; its data may be read once a [`Op::WaitAsync`] has completed its group.
    CopyAsync {
        /// Index into [`Kernel::shared`].
        buffer: usize,
        /// The stage written (an i32 scalar, `0 ≤ stage < stages`).
        stage: Value,
        /// Pointers.
        ptr: Value,
        /// Which lanes are copied.
        mask: Option<Value>,
    },
    /// Waits until at most `pending` of the program's copy groups ([`Op::CopyAsync`]) are still
    /// in flight, the newest ones; the completed copies are then visible to the whole program.
    WaitAsync(usize),
    /// Stage `stage` of shared buffer `buffer` as a tile (its copy must have completed).
    SharedRead {
        /// Index into [`Kernel::shared`].
        buffer: usize,
        /// The stage read (an i32 scalar).
        stage: Value,
    },
    /// Reduction along one axis; the axis is removed from the shape.
    Reduce {
        /// Input tile.
        value: Value,
        /// Reduced axis.
        axis: usize,
        /// Combining function.
        kind: ReduceKind,
    },
    /// Scan along one axis; the shape is unchanged. With `n` elements along the axis, element
    /// `j` of the result combines the inputs at positions `l ≤ j` (inclusive, forward),
    /// `l < j` (exclusive), `l ≥ j` (inclusive, reverse) or `l > j` (exclusive, reverse); an
    /// empty combination is the identity (0 for sums, 1 for products).
    Scan {
        /// Input tile.
        value: Value,
        /// Scanned axis.
        axis: usize,
        /// Combining function.
        kind: ScanKind,
        /// Runs from the last element to the first.
        reverse: bool,
        /// Leaves out the element itself.
        exclusive: bool,
    },
    /// `acc + a @ b` for 2-D tiles, accumulated in f32.
    Dot {
        /// `[M, K]` operand.
        a: Value,
        /// `[K, N]` operand.
        b: Value,
        /// `[M, N]` f32 accumulator.
        acc: Value,
        /// Which engine may compute it.
        precision: DotPrecision,
    },
    /// Atomic read-modify-write through a pointer tile; returns the old values.
    Atomic {
        /// Operation.
        kind: AtomicKind,
        /// Pointers.
        ptr: Value,
        /// Operand (new value for `Cas`).
        value: Value,
        /// Expected value for `Cas`.
        cmp: Option<Value>,
        /// Which lanes take part.
        mask: Option<Value>,
    },
    /// Sets the condition of a CUDA graph's conditional node: `handle` (an `i64` scalar, the
    /// node's handle as the runtime's capture made it) to `value` (a `bool` scalar). One thread
    /// of the program sets it; two programs (or launches running at once) setting one handle
    /// race, which is undefined.
    SetCondition {
        /// The conditional node's handle.
        handle: Value,
        /// Whether the node runs its body.
        value: Value,
    },
    /// A runtime loop `for iv in (lo..hi).step_by(step)` over i32 scalars. `body.args` are
    /// `[iv, carried...]`; the body ends in a `Yield` of the next carried values; the results
    /// are the carried values after the last iteration (the initial ones if it never runs).
    For {
        /// Lower bound (inclusive).
        lo: Value,
        /// Upper bound (exclusive).
        hi: Value,
        /// Positive step.
        step: Value,
        /// Initial carried values.
        init: Vec<Value>,
        /// Loop body.
        body: Block,
    },
    /// A runtime branch on a bool scalar; each block ends in a `Yield` of the results.
    If {
        /// Condition.
        cond: Value,
        /// Taken when `cond` is true.
        then_block: Block,
        /// Taken otherwise.
        else_block: Block,
    },
    /// Ends a nested block, passing values to the enclosing `For` or `If`.
    Yield(Vec<Value>),
}

/// An operation with its result values.
#[derive(Clone, Debug, PartialEq)]
pub struct Inst {
    /// The operation.
    pub op: Op,
    /// Values it defines.
    pub results: Vec<Value>,
    /// Where the kernel's source traced it (the call of the tile operation).
    pub loc: Option<Loc>,
}

/// A line of a kernel's Rust source: where a tile operation was called.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Loc {
    /// The source file, as the Rust compiler names it (relative to the workspace for its crates).
    pub file: &'static str,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

impl Loc {
    /// The location of the caller (through `#[track_caller]` functions).
    #[track_caller]
    pub fn caller() -> Loc {
        let l = std::panic::Location::caller();
        Loc {
            file: l.file(),
            line: l.line(),
            column: l.column(),
        }
    }
}

/// A straight-line list of instructions with block arguments.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Block {
    /// Values bound on entry (loop induction variable and carried values).
    pub args: Vec<Value>,
    /// Instructions in order.
    pub insts: Vec<Inst>,
}

/// A kernel parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    /// Name as written in the source.
    pub name: String,
    /// Scalar or pointer type (rank 0).
    pub dtype: DType,
    /// Known power-of-two divisor of an integer argument (1 = nothing known); pointers are
    /// assumed 16-byte aligned.
    pub divisibility: u32,
}

/// How a `Dot` may be computed (Triton's `input_precision`); see docs/SEMANTICS.md.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DotPrecision {
    /// Tensor cores where the shapes allow: 16-bit operands exactly, f32 operands split into
    /// three TF32 products (within ~1e-6 of Σ|a||b|); CUDA cores otherwise.
    #[default]
    Tf32x3,
    /// As [`DotPrecision::Tf32x3`], but on tensor cores every k-step's products accumulate in
    /// the accumulator itself (CUTLASS's 3xTF32) instead of being summed apart and added with
    /// one rounding: one `add` per accumulator word and k-step fewer, within ~3K/8 · 2⁻²³ of
    /// `|acc| + Σ|a||b|` (2.9e-6 at K = 64). For short K whose result is mostly `acc`.
    Tf32x3Chained,
    /// Tensor cores where the shapes allow, f32 operands rounded once to TF32 (one product per
    /// pair; within ~1e-3 of Σ|a||b|, Triton's default `tf32`): for results that end in 16-bit
    /// floats. CUDA cores otherwise.
    Tf32,
    /// CUDA cores only: one f32 fused multiply-add per product.
    Ieee,
}

/// A traced kernel specialization.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    /// Kernel name.
    pub name: String,
    /// Runtime parameters in order.
    pub params: Vec<Param>,
    /// Constexpr values this specialization was traced with, for naming and caching.
    pub constexprs: Vec<(String, i64)>,
    /// Warps per program.
    pub num_warps: u32,
    /// Occupancy hint: the programs that should fit on one SM at once (`.minnctapersm`, which
    /// makes ptxas cap the registers per thread accordingly); 1 is no hint.
    pub min_blocks: u32,
    /// Type of every value, indexed by [`Value`].
    pub values: Vec<Ty>,
    /// Shared-memory buffers the body copies into and reads ([`Op::CopyAsync`],
    /// [`Op::SharedRead`]).
    pub shared: Vec<SharedBuffer>,
    /// Kernel body.
    pub body: Block,
}

/// A buffer in shared memory: `stages` tiles of `shape`, each written by asynchronous copies
/// and read whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedBuffer {
    /// Element type.
    pub dtype: DType,
    /// The shape of one stage's tile.
    pub shape: Vec<usize>,
    /// Number of stages (tiles).
    pub stages: usize,
    /// The earlier buffer whose bytes this one shares ([`crate::front::shared::Shared::overlay`]; it overlays
    /// none itself), or none: a region of its own.
    pub overlays: Option<usize>,
}

impl SharedBuffer {
    /// The buffer whose region this one lies in: the one it overlays, else itself (`id`).
    pub fn region(&self, id: usize) -> usize {
        self.overlays.unwrap_or(id)
    }
}

impl Kernel {
    /// The type of a value.
    pub fn ty(&self, v: Value) -> &Ty {
        &self.values[v.0 as usize]
    }
    /// Defines a new value of the given type.
    pub fn new_value(&mut self, ty: Ty) -> Value {
        self.values.push(ty);
        Value(self.values.len() as u32 - 1)
    }
    /// The mangled specialization name used as the PTX entry, e.g. `add_BLOCK1024_w4` (with a
    /// `_b2` suffix for an occupancy hint of two programs per SM).
    pub fn entry_name(&self) -> String {
        let mut s = self.name.clone();
        for (k, v) in &self.constexprs {
            let _ = write!(s, "_{k}{}", if *v < 0 { format!("m{}", -v) } else { v.to_string() });
        }
        let _ = write!(s, "_w{}", self.num_warps);
        if self.min_blocks > 1 {
            let _ = write!(s, "_b{}", self.min_blocks);
        }
        s
    }
}

impl Op {
    /// Values this op reads directly (not those inside nested blocks).
    pub fn operands(&self) -> Vec<Value> {
        match self {
            Op::Param(_) | Op::Const(_) | Op::ProgramId(_) | Op::NumPrograms(_) | Op::Arange => vec![],
            Op::Splat(a) | Op::Broadcast(a) | Op::ExpandDims(a, _) | Op::Reshape(a) | Op::Trans(a) => vec![*a],
            Op::Unary(_, a) => vec![*a],
            Op::Binary(_, a, b) | Op::Cmp(_, a, b) | Op::AddPtr(a, b) => vec![*a, *b],
            Op::Select(c, a, b) => vec![*c, *a, *b],
            Op::Cast(a, r) => match r {
                Rounding::Nearest => vec![*a],
                Rounding::Stochastic(bits) => vec![*a, *bits],
            },
            Op::Load { ptr, mask, other } => [Some(*ptr), *mask, *other].into_iter().flatten().collect(),
            Op::Store { ptr, value, mask } => [Some(*ptr), Some(*value), *mask].into_iter().flatten().collect(),
            Op::Prefetch { ptr, mask } => [Some(*ptr), *mask].into_iter().flatten().collect(),
            Op::CopyAsync { stage, ptr, mask, .. } => [Some(*stage), Some(*ptr), *mask].into_iter().flatten().collect(),
            Op::WaitAsync(_) => vec![],
            Op::SharedRead { stage, .. } => vec![*stage],
            Op::Reduce { value, .. } | Op::Scan { value, .. } => vec![*value],
            Op::Dot { a, b, acc, .. } => vec![*a, *b, *acc],
            Op::Atomic {
                ptr, value, cmp, mask, ..
            } => [Some(*ptr), Some(*value), *cmp, *mask].into_iter().flatten().collect(),
            Op::SetCondition { handle, value } => vec![*handle, *value],
            Op::For { lo, hi, step, init, .. } => {
                let mut v = vec![*lo, *hi, *step];
                v.extend(init);
                v
            }
            Op::If { cond, .. } => vec![*cond],
            Op::Yield(vs) => vs.clone(),
        }
    }

    /// True if the op writes memory or otherwise must not be removed or merged.
    pub fn has_side_effects(&self) -> bool {
        matches!(
            self,
            Op::Store { .. }
                | Op::Prefetch { .. }
                | Op::CopyAsync { .. }
                | Op::WaitAsync(_)
                | Op::Atomic { .. }
                | Op::SetCondition { .. }
                | Op::Yield(_)
        )
    }

    /// Nested blocks of control-flow ops.
    pub fn blocks(&self) -> Vec<&Block> {
        match self {
            Op::For { body, .. } => vec![body],
            Op::If {
                then_block, else_block, ..
            } => vec![then_block, else_block],
            _ => vec![],
        }
    }

    /// Nested blocks of control-flow ops, mutably.
    pub fn blocks_mut(&mut self) -> Vec<&mut Block> {
        match self {
            Op::For { body, .. } => vec![body],
            Op::If {
                then_block, else_block, ..
            } => vec![then_block, else_block],
            _ => vec![],
        }
    }

    /// Rewrites every operand (not inside nested blocks) through `f`.
    pub fn map_operands(&mut self, mut f: impl FnMut(Value) -> Value) {
        let mut g = |v: &mut Value| *v = f(*v);
        match self {
            Op::Param(_) | Op::Const(_) | Op::ProgramId(_) | Op::NumPrograms(_) | Op::Arange => {}
            Op::Splat(a) | Op::Broadcast(a) | Op::ExpandDims(a, _) | Op::Reshape(a) | Op::Trans(a) => g(a),
            Op::Unary(_, a) => g(a),
            Op::Binary(_, a, b) | Op::Cmp(_, a, b) | Op::AddPtr(a, b) => {
                g(a);
                g(b)
            }
            Op::Select(c, a, b) => {
                g(c);
                g(a);
                g(b)
            }
            Op::Cast(a, r) => {
                g(a);
                if let Rounding::Stochastic(bits) = r {
                    g(bits)
                }
            }
            Op::Load { ptr, mask, other } => {
                g(ptr);
                mask.iter_mut().for_each(&mut g);
                other.iter_mut().for_each(&mut g);
            }
            Op::Store { ptr, value, mask } => {
                g(ptr);
                g(value);
                mask.iter_mut().for_each(&mut g);
            }
            Op::Prefetch { ptr, mask } => {
                g(ptr);
                mask.iter_mut().for_each(&mut g);
            }
            Op::CopyAsync { stage, ptr, mask, .. } => {
                g(stage);
                g(ptr);
                mask.iter_mut().for_each(&mut g);
            }
            Op::WaitAsync(_) => {}
            Op::SharedRead { stage, .. } => g(stage),
            Op::Reduce { value, .. } | Op::Scan { value, .. } => g(value),
            Op::Dot { a, b, acc, .. } => {
                g(a);
                g(b);
                g(acc)
            }
            Op::Atomic {
                ptr, value, cmp, mask, ..
            } => {
                g(ptr);
                g(value);
                cmp.iter_mut().for_each(&mut g);
                mask.iter_mut().for_each(&mut g);
            }
            Op::SetCondition { handle, value } => {
                g(handle);
                g(value)
            }
            Op::For { lo, hi, step, init, .. } => {
                g(lo);
                g(hi);
                g(step);
                init.iter_mut().for_each(&mut g);
            }
            Op::If { cond, .. } => g(cond),
            Op::Yield(vs) => vs.iter_mut().for_each(&mut g),
        }
    }

    /// Short mnemonic used in IR text and error messages.
    pub fn mnemonic(&self) -> String {
        match self {
            Op::Param(i) => format!("param {i}"),
            Op::Const(c) => match c {
                Const::Bool(b) => format!("const {b}"),
                Const::Int(i) => format!("const {i}"),
                Const::Float(x) => format!("const {x:?}"),
            },
            Op::ProgramId(a) => format!("program_id {a}"),
            Op::NumPrograms(a) => format!("num_programs {a}"),
            Op::Arange => "arange".into(),
            Op::Splat(_) => "splat".into(),
            Op::Broadcast(_) => "broadcast".into(),
            Op::ExpandDims(_, a) => format!("expand_dims axis={a}"),
            Op::Reshape(_) => "reshape".into(),
            Op::Trans(_) => "trans".into(),
            Op::Unary(u, _) => format!("{u:?}").to_lowercase(),
            Op::Binary(b, _, _) => format!("{b:?}").to_lowercase(),
            Op::Cmp(c, _, _) => format!("cmp.{}", format!("{c:?}").to_lowercase()),
            Op::Select(..) => "select".into(),
            Op::Cast(_, Rounding::Nearest) => "cast".into(),
            Op::Cast(_, Rounding::Stochastic(_)) => "cast.rs".into(),
            Op::AddPtr(..) => "addptr".into(),
            Op::Load { .. } => "load".into(),
            Op::Store { .. } => "store".into(),
            Op::Prefetch { .. } => "prefetch".into(),
            Op::CopyAsync { buffer, .. } => format!("copy_async shared{buffer}"),
            Op::WaitAsync(n) => format!("wait_async {n}"),
            Op::SharedRead { buffer, .. } => format!("shared_read shared{buffer}"),
            Op::Reduce { axis, kind, .. } => format!("reduce.{} axis={axis}", format!("{kind:?}").to_lowercase()),
            Op::Scan {
                axis,
                kind,
                reverse,
                exclusive,
                ..
            } => format!(
                "scan.{}{}{} axis={axis}",
                format!("{kind:?}").to_lowercase(),
                if *reverse { ".rev" } else { "" },
                if *exclusive { ".excl" } else { "" }
            ),
            Op::Dot { precision, .. } => match precision {
                DotPrecision::Tf32x3 => "dot".into(),
                DotPrecision::Tf32x3Chained => "dot.chained".into(),
                DotPrecision::Tf32 => "dot.tf32".into(),
                DotPrecision::Ieee => "dot.ieee".into(),
            },
            Op::Atomic { kind, .. } => format!("atomic.{}", format!("{kind:?}").to_lowercase()),
            Op::SetCondition { .. } => "set_condition".into(),
            Op::For { .. } => "for".into(),
            Op::If { .. } => "if".into(),
            Op::Yield(_) => "yield".into(),
        }
    }
}

/// Walks every instruction of a block and its nested blocks, in program order.
pub fn walk_insts<'a>(block: &'a Block, f: &mut impl FnMut(&'a Inst)) {
    for inst in &block.insts {
        f(inst);
        for b in inst.op.blocks() {
            walk_insts(b, f);
        }
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let params: Vec<String> = self.params.iter().map(|p| format!("{}: {}", p.name, p.dtype)).collect();
        let consts: Vec<String> = self.constexprs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let hint = if self.min_blocks > 1 {
            format!(" min_blocks={}", self.min_blocks)
        } else {
            String::new()
        };
        writeln!(
            f,
            "kernel {}({}) [{}] num_warps={}{hint} {{",
            self.name,
            params.join(", "),
            consts.join(", "),
            self.num_warps
        )?;
        for (i, b) in self.shared.iter().enumerate() {
            let over = b.overlays.map(|o| format!(" over shared{o}")).unwrap_or_default();
            writeln!(f, "  shared{i}: {}[{}x{:?}]{over}", b.dtype, b.stages, b.shape)?;
        }
        self.fmt_block(f, &self.body, 1)?;
        writeln!(f, "}}")
    }
}

impl Kernel {
    fn fmt_block(&self, f: &mut fmt::Formatter<'_>, block: &Block, depth: usize) -> fmt::Result {
        let pad = "  ".repeat(depth);
        for inst in &block.insts {
            write!(f, "{pad}")?;
            if !inst.results.is_empty() {
                let rs: Vec<String> = inst
                    .results
                    .iter()
                    .map(|r| format!("%{}: {}", r.0, self.ty(*r)))
                    .collect();
                write!(f, "{} = ", rs.join(", "))?;
            }
            write!(f, "{}", inst.op.mnemonic())?;
            let ops = inst.op.operands();
            if !ops.is_empty() {
                let os: Vec<String> = ops.iter().map(|o| format!("%{}", o.0)).collect();
                write!(f, " {}", os.join(", "))?;
            }
            let blocks = inst.op.blocks();
            if blocks.is_empty() {
                writeln!(f)?;
            } else {
                for (i, b) in blocks.iter().enumerate() {
                    let args: Vec<String> = b.args.iter().map(|a| format!("%{}", a.0)).collect();
                    let sep = if i == 0 { " " } else { "" };
                    writeln!(f, "{sep}({}) {{", args.join(", "))?;
                    self.fmt_block(f, b, depth + 1)?;
                    write!(f, "{pad}}}")?;
                    if i + 1 < blocks.len() {
                        write!(f, " else ")?;
                    }
                }
                writeln!(f)?;
            }
        }
        Ok(())
    }
}

/// The `i32` scalar type, used for indices.
pub fn i32_scalar() -> Ty {
    Ty::scalar(DType::Val(Elem::I32))
}
