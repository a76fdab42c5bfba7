//! Dot kernels shared by the backend tests (`backend_mma.rs`) and the GPU differential test
//! (`gpu_dot.rs`): one `[M, K] @ [K, N]` product per program, with the operands in one of
//! several element-type combinations.
#![allow(dead_code)]

use replay_dsl::front::builder::trace;
use replay_dsl::front::tile::Tile;
use replay_dsl::ir::{Kernel, Param, Value};
use replay_dsl::prelude::*;
use replay_dsl::{DType, Elem};

/// The operand types of a dot case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operands {
    /// f32 @ f32.
    F32,
    /// f32 @ (bf16 cast to f32): B exact in tf32.
    F32Bf16Cast,
    /// (f16 cast to f32) @ f32: A exact in tf32.
    F16CastF32,
    /// bf16 @ bf16.
    Bf16,
    /// f16 @ f16.
    F16,
    /// (bf16 cast to f32) @ (bf16 cast to f32): runs as bf16 × bf16.
    Bf16Casts,
}

impl Operands {
    /// Every combination.
    pub const ALL: [Operands; 6] = [
        Operands::F32,
        Operands::F32Bf16Cast,
        Operands::F16CastF32,
        Operands::Bf16,
        Operands::F16,
        Operands::Bf16Casts,
    ];

    /// The element types of A and B in memory.
    pub fn elems(self) -> (Elem, Elem) {
        match self {
            Operands::F32 => (Elem::F32, Elem::F32),
            Operands::F32Bf16Cast => (Elem::F32, Elem::BF16),
            Operands::F16CastF32 => (Elem::F16, Elem::F32),
            Operands::Bf16 => (Elem::BF16, Elem::BF16),
            Operands::F16 => (Elem::F16, Elem::F16),
            Operands::Bf16Casts => (Elem::BF16, Elem::BF16),
        }
    }
}

/// One dot kernel configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DotCase {
    /// Rows of A and C.
    pub m: usize,
    /// Columns of B and C.
    pub n: usize,
    /// The reduced extent.
    pub k: usize,
    /// Warps per program.
    pub warps: u32,
    /// Operand types.
    pub ops: Operands,
    /// `dot_acc` with a loaded accumulator (else `dot`).
    pub acc: bool,
    /// The engines allowed.
    pub precision: DotPrecision,
    /// B stored K-contiguous (`[N, K]` row-major in memory): with f32 A, a tf32 dot that reads
    /// both operands from registers.
    pub b_k_major: bool,
    /// A stored M-contiguous (`[K, M]` row-major in memory), loaded as such and transposed: a
    /// staged operand whose registers run down its columns.
    pub a_m_major: bool,
    /// B copied into a shared buffer (`copy_async`, `wait_async`) and read from it: a staged
    /// tf32 dot loads its fragments from the buffer itself.
    pub b_shared: bool,
}

fn param(name: &str, e: Elem) -> Param {
    Param {
        name: name.into(),
        dtype: DType::Ptr(e),
        divisibility: 16,
    }
}

fn tile_ptr<T: Scalar>(v: Value) -> Tile<Ptr<T>> {
    Tile::from_value(v)
}

/// Row-major offsets `[rows, cols]` of program `pid`'s matrix.
fn offsets(rows: usize, cols: usize) -> Tile<i32> {
    program_id(0) * (rows * cols) as i32 + (arange(rows) * cols as i32).expand_dims(1) + arange(cols).expand_dims(0)
}

/// A `[m, k]` of program `pid` from `a`: row-major, or with `a_m_major` a `[k, m]` tile
/// loaded as such and transposed.
fn a_tile<T: Scalar>(a: Value, c: DotCase) -> Tile<T> {
    if c.a_m_major {
        load(tile_ptr::<T>(a) + offsets(c.k, c.m), true).trans()
    } else {
        load(tile_ptr::<T>(a) + offsets(c.m, c.k), true)
    }
}

/// B `[k, n]` of program `pid` at element offsets `bo` from `b`: loaded, or with `b_shared`
/// copied into a one-stage shared buffer and read from it.
fn b_tile<T: Scalar>(b: Value, bo: Tile<i32>, c: DotCase) -> Tile<T> {
    let ptr = tile_ptr::<T>(b) + bo;
    if c.b_shared {
        let buf = shared::<T>(1, &[c.k, c.n]);
        buf.copy_async(0, ptr, true);
        wait_async(0);
        buf.read(0)
    } else {
        load(ptr, true)
    }
}

/// `out = acc + a @ b` (or `a @ b`) per program, with parameters `a`, `b`, `acc`, `out`.
pub fn kernel(c: DotCase) -> Kernel {
    let (ea, eb) = c.ops.elems();
    let params = vec![
        param("a", ea),
        param("b", eb),
        param("acc", Elem::F32),
        param("out", Elem::F32),
    ];
    let name = format!("dot_{}x{}x{}_{:?}", c.m, c.n, c.k, c.ops).to_lowercase();
    trace(&name, params, vec![], c.warps, |p| {
        let co = offsets(c.m, c.n);
        let bo = if c.b_k_major {
            program_id(0) * (c.k * c.n) as i32 + arange(c.k).expand_dims(1) + (arange(c.n) * c.k as i32).expand_dims(0)
        } else {
            offsets(c.k, c.n)
        };
        let acc = if c.acc {
            load(tile_ptr::<f32>(p[2]) + co, true)
        } else {
            zeros::<f32>([c.m, c.n])
        };
        let r = match c.ops {
            Operands::F32 => dot_acc_in(a_tile::<f32>(p[0], c), b_tile::<f32>(p[1], bo, c), acc, c.precision),
            Operands::F32Bf16Cast => dot_acc_in(
                a_tile::<f32>(p[0], c),
                b_tile::<bf16>(p[1], bo, c).cast::<f32>(),
                acc,
                c.precision,
            ),
            Operands::F16CastF32 => dot_acc_in(
                a_tile::<f16>(p[0], c).cast::<f32>(),
                b_tile::<f32>(p[1], bo, c),
                acc,
                c.precision,
            ),
            Operands::Bf16 => dot_acc_in(a_tile::<bf16>(p[0], c), b_tile::<bf16>(p[1], bo, c), acc, c.precision),
            Operands::F16 => dot_acc_in(a_tile::<f16>(p[0], c), b_tile::<f16>(p[1], bo, c), acc, c.precision),
            Operands::Bf16Casts => dot_acc_in(
                a_tile::<bf16>(p[0], c).cast::<f32>(),
                b_tile::<bf16>(p[1], bo, c).cast::<f32>(),
                acc,
                c.precision,
            ),
        };
        store(tile_ptr::<f32>(p[3]) + co, r, true);
    })
    .unwrap_or_else(|e| panic!("tracing {c:?}: {e}"))
}

/// A software-pipelined product: `out = Σ_i a_i @ b` over `iters` row-major `[m, k]` tiles
/// `a_i` and one K-major `b` (`[n, k]` in memory), each iteration issuing the load of the next
/// tile before its dot and carrying it through the loop; with `same`, the loop carries `a_0`
/// unchanged instead (`out = iters · a_0 @ b`). Parameters `a`, `b`, `out`.
pub fn pipelined_kernel(m: usize, n: usize, k: usize, iters: usize, warps: u32, same: bool) -> Kernel {
    let params = vec![param("a", Elem::F32), param("b", Elem::F32), param("out", Elem::F32)];
    trace(&format!("pipelined_{m}x{n}x{k}"), params, vec![], warps, |p| {
        let (pa, pb, po) = (tile_ptr::<f32>(p[0]), tile_ptr::<f32>(p[1]), tile_ptr::<f32>(p[2]));
        let a_tile = |i: Tile<i32>| {
            load(
                pa + i * (m * k) as i32 + (arange(m) * k as i32).expand_dims(1) + arange(k).expand_dims(0),
                true,
            )
        };
        let b = load(
            pb + arange(k).expand_dims(1) + (arange(n) * k as i32).expand_dims(0),
            true,
        );
        let first = a_tile(full([], 0));
        let last = iters as i32 - 1;
        let (acc, _) = for_range(
            range(0, iters as i32),
            (zeros::<f32>([m, n]), first),
            |i, (acc, cur)| {
                let next = if same { cur } else { a_tile(minimum(i + 1, last)) };
                (dot_acc(cur, b, acc), next)
            },
        );
        store(
            po + (arange(m) * n as i32).expand_dims(1) + arange(n).expand_dims(0),
            acc,
            true,
        );
    })
    .unwrap_or_else(|e| panic!("tracing the pipelined product: {e}"))
}

/// `out = (a @ b) @ q` per program: `a [m, k]` row-major, `b [k, n1]` and `q [n1, n2]` stored
/// K-contiguous, so that the first product's accumulator is the second's A (parameters `a`,
/// `b`, `q`, `out`).
pub fn chained_kernel(m: usize, n1: usize, k: usize, n2: usize, warps: u32) -> Kernel {
    let params = vec![
        param("a", Elem::F32),
        param("b", Elem::F32),
        param("q", Elem::F32),
        param("out", Elem::F32),
    ];
    trace(&format!("chained_{m}x{n1}x{k}x{n2}"), params, vec![], warps, |p| {
        let ptr = |i: usize| tile_ptr::<f32>(p[i]);
        // `[rows, cols]` of program `pid`'s matrix stored `[cols, rows]` (rows contiguous).
        let k_major = |rows: usize, cols: usize| {
            program_id(0) * (rows * cols) as i32
                + arange(rows).expand_dims(1)
                + (arange(cols) * rows as i32).expand_dims(0)
        };
        let a = load(ptr(0) + offsets(m, k), true);
        let b = load(ptr(1) + k_major(k, n1), true);
        let q = load(ptr(2) + k_major(n1, n2), true);
        store(ptr(3) + offsets(m, n2), dot(dot(a, b), q), true);
    })
    .unwrap_or_else(|e| panic!("tracing the chained product: {e}"))
}
