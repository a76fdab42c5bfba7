//! Axis analysis (Triton's AxisInfo): per integer, pointer and bool value and per dimension,
//! the contiguity, divisibility and constancy of its elements. Loads and stores use it to pick
//! vector widths.
//!
//! Along a dimension of extent `n` split into aligned chunks:
//! - *contiguity* `c`: each aligned chunk of `c` elements holds consecutive values (`x, x+1, …`);
//! - *divisibility* `d`: the first element of each contiguous chunk is a multiple of `d`
//!   (elements for integers, bytes for pointers);
//! - *constancy* `k`: each aligned chunk of `k` elements holds one value.
//!
//! All three are powers of two. Scalars are described as rank-1 values of extent 1.

use crate::ir::{BinaryOp, Block, CmpOp, Const, Kernel, Op, Value};
use crate::types::{DType, Elem};

/// Divisibility recorded for the constant 0 (and other "very divisible" values).
pub const MAX_DIV: u64 = 1 << 30;

/// What the analysis knows about one value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AxisInfo {
    /// Contiguity per dimension.
    pub contig: Vec<u64>,
    /// Divisibility per dimension (elements for integers, bytes for pointers).
    pub div: Vec<u64>,
    /// Constancy per dimension.
    pub constancy: Vec<u64>,
}

impl AxisInfo {
    /// Nothing known about a value of `rank` dimensions.
    pub fn unknown(rank: usize) -> AxisInfo {
        let r = rank.max(1);
        AxisInfo {
            contig: vec![1; r],
            div: vec![1; r],
            constancy: vec![1; r],
        }
    }
    /// A value equal in every element of `shape`, divisible by `div`.
    pub fn uniform(shape: &[usize], div: u64) -> AxisInfo {
        let ext: Vec<u64> = if shape.is_empty() {
            vec![1]
        } else {
            shape.iter().map(|&e| e as u64).collect()
        };
        AxisInfo {
            contig: vec![1; ext.len()],
            div: vec![div; ext.len()],
            constancy: ext,
        }
    }
}

/// Divisibility of the elements starting aligned chunks of `c` elements along `d`.
fn div_at(a: &AxisInfo, d: usize, c: u64) -> u64 {
    if c >= a.contig[d] {
        a.div[d]
    } else {
        a.div[d].min(c)
    }
}

fn pow2_divisor(x: i64) -> u64 {
    if x == 0 {
        MAX_DIV
    } else {
        (1u64 << x.unsigned_abs().trailing_zeros()).min(MAX_DIV)
    }
}

/// The analysis result for a kernel.
#[derive(Clone, Debug)]
pub struct AxisTable {
    info: Vec<Option<AxisInfo>>,
}

impl AxisTable {
    /// Analyses every value of `kernel`.
    pub fn analyze(kernel: &Kernel) -> AxisTable {
        let mut t = AxisTable {
            info: vec![None; kernel.values.len()],
        };
        t.block(kernel, &kernel.body);
        t
    }

    /// What is known about `v` (nothing, if it was not analysed).
    pub fn get(&self, kernel: &Kernel, v: Value) -> AxisInfo {
        self.info[v.0 as usize]
            .clone()
            .unwrap_or_else(|| AxisInfo::unknown(kernel.ty(v).rank()))
    }

    /// The longest run (in elements, a power of two ≤ `max_bytes`) of consecutive addresses
    /// through `ptr` along the last dimension, uniformly masked, alignment aside: one cache
    /// line's worth for a prefetch.
    pub fn contiguous_run(&self, kernel: &Kernel, ptr: Value, mask: Option<Value>, max_bytes: u64) -> usize {
        let ty = kernel.ty(ptr);
        let Some(elem) = ty.dtype.pointee() else { return 1 };
        if ty.rank() == 0 {
            return 1;
        }
        let last = ty.rank() - 1;
        let mut v = self.get(kernel, ptr).contig[last].min(max_bytes / elem.bytes() as u64);
        if let Some(m) = mask {
            v = v.min(self.get(kernel, m).constancy[last]);
        }
        crate::backend::layout::prev_pow2(v.max(1) as usize)
    }

    /// The widest vector (in elements, a power of two ≤ 16 bytes) that an access through `ptr`
    /// with `mask` may use along the last dimension: a [`Self::contiguous_run`] that is also
    /// aligned.
    pub fn access_vec(&self, kernel: &Kernel, ptr: Value, mask: Option<Value>) -> usize {
        let run = self.contiguous_run(kernel, ptr, mask, 16);
        let ty = kernel.ty(ptr);
        let (Some(elem), Some(last)) = (ty.dtype.pointee(), ty.rank().checked_sub(1)) else {
            return run;
        };
        let aligned = self.get(kernel, ptr).div[last] / elem.bytes() as u64;
        crate::backend::layout::prev_pow2(run.min(aligned.max(1) as usize))
    }

    fn set(&mut self, v: Value, info: AxisInfo) {
        self.info[v.0 as usize] = Some(info);
    }

    fn block(&mut self, k: &Kernel, block: &Block) {
        for inst in &block.insts {
            match &inst.op {
                Op::For { lo, step, body, .. } => {
                    let div = self.get(k, *lo).div[0].min(self.get(k, *step).div[0]);
                    self.set(body.args[0], AxisInfo::uniform(&[], div));
                    self.block(k, body);
                }
                Op::If {
                    then_block, else_block, ..
                } => {
                    self.block(k, then_block);
                    self.block(k, else_block);
                }
                op => {
                    if let [r] = inst.results[..] {
                        let info = self.infer(k, op, r);
                        self.set(r, info);
                    }
                }
            }
        }
    }

    fn infer(&self, k: &Kernel, op: &Op, r: Value) -> AxisInfo {
        let ty = k.ty(r);
        let shape = &ty.shape;
        let rank = shape.len();
        let g = |v: &Value| self.get(k, *v);
        let min_const = |vs: &[Value]| -> AxisInfo {
            let mut out = AxisInfo::unknown(rank);
            out.constancy = vs
                .iter()
                .map(|v| g(v).constancy)
                .reduce(|a, b| a.iter().zip(&b).map(|(x, y)| *x.min(y)).collect())
                .unwrap_or(out.constancy);
            out
        };
        match op {
            Op::Param(i) => {
                let p = &k.params[*i];
                let div = match p.dtype {
                    DType::Ptr(_) => 16,
                    DType::Val(e) if e.is_int() => p.divisibility.max(1) as u64,
                    DType::Val(_) => 1,
                };
                AxisInfo::uniform(&[], div)
            }
            Op::Const(c) => AxisInfo::uniform(shape, if let Const::Int(i) = c { pow2_divisor(*i) } else { 1 }),
            Op::Arange => AxisInfo {
                contig: vec![shape[0] as u64],
                div: vec![MAX_DIV],
                constancy: vec![1],
            },
            Op::Splat(s) => AxisInfo::uniform(shape, g(s).div[0]),
            Op::Broadcast(x) => {
                let src = k.ty(*x).shape.clone();
                let mut a = g(x);
                for d in 0..rank {
                    if src[d] == 1 && shape[d] > 1 {
                        a.contig[d] = 1;
                        a.constancy[d] = shape[d] as u64;
                    }
                }
                a
            }
            Op::ExpandDims(x, axis) => {
                let a = g(x);
                if k.ty(*x).rank() == 0 {
                    return a;
                }
                let div = if a.contig.iter().all(|&c| c == 1) {
                    a.div.iter().copied().min().unwrap_or(1)
                } else {
                    1
                };
                let mut out = a;
                out.contig.insert(*axis, 1);
                out.div.insert(*axis, div);
                out.constancy.insert(*axis, 1);
                out
            }
            Op::Trans(x) => {
                let mut a = g(x);
                a.contig.swap(0, 1);
                a.div.swap(0, 1);
                a.constancy.swap(0, 1);
                a
            }
            Op::Reshape(x) => {
                let a = g(x);
                let mut out = AxisInfo::unknown(rank);
                let src = &k.ty(*x).shape;
                if rank > 0 && !src.is_empty() && src[src.len() - 1] == shape[rank - 1] {
                    out.contig[rank - 1] = a.contig[src.len() - 1];
                    out.div[rank - 1] = a.div[src.len() - 1];
                    out.constancy[rank - 1] = a.constancy[src.len() - 1];
                }
                out
            }
            Op::Binary(bop, a, b) if ty.dtype.is_int() => {
                let (x, y) = (g(a), g(b));
                let mut out = min_const(&[*a, *b]);
                for d in 0..out.contig.len() {
                    match bop {
                        BinaryOp::Add | BinaryOp::Sub => {
                            let c = x.contig[d].min(y.constancy[d]);
                            out.contig[d] = if *bop == BinaryOp::Add {
                                c.max(x.constancy[d].min(y.contig[d]))
                            } else {
                                c
                            };
                            out.div[d] = div_at(&x, d, out.contig[d]).min(div_at(&y, d, out.contig[d]));
                        }
                        BinaryOp::Mul => out.div[d] = div_at(&x, d, 1).saturating_mul(div_at(&y, d, 1)).min(MAX_DIV),
                        _ => {}
                    }
                }
                out
            }
            Op::AddPtr(p, o) => {
                let s = ty.dtype.pointee().map_or(1, Elem::bytes) as u64;
                let (x, y) = (g(p), g(o));
                let mut out = min_const(&[*p, *o]);
                for d in 0..out.contig.len() {
                    out.contig[d] = x.contig[d].min(y.constancy[d]).max(x.constancy[d].min(y.contig[d]));
                    let c = out.contig[d];
                    out.div[d] = div_at(&x, d, c).min(div_at(&y, d, c).saturating_mul(s)).min(MAX_DIV);
                }
                out
            }
            Op::Cmp(cop, a, b) => {
                let (x, y) = (g(a), g(b));
                let mut out = min_const(&[*a, *b]);
                for d in 0..out.contig.len() {
                    // `offs < n` flips only at multiples of n's divisibility: constant over
                    // aligned runs of min(contiguity, divisibilities, constancy of n).
                    let run =
                        |c: &AxisInfo, n: &AxisInfo| c.contig[d].min(c.div[d]).min(div_at(n, d, 1)).min(n.constancy[d]);
                    let extra = match cop {
                        CmpOp::Lt | CmpOp::Ge if x.contig[d] > 1 => run(&x, &y),
                        CmpOp::Gt | CmpOp::Le if y.contig[d] > 1 => run(&y, &x),
                        _ => 1,
                    };
                    out.constancy[d] = out.constancy[d].max(extra);
                }
                out
            }
            Op::Cast(x, _) if ty.dtype.is_int() && k.ty(*x).dtype.is_int() => g(x),
            Op::Binary(_, a, b) => min_const(&[*a, *b]),
            Op::Unary(_, a) | Op::Cast(a, _) => min_const(&[*a]),
            Op::Select(c, a, b) => {
                let mut out = min_const(&[*c, *a, *b]);
                let (x, y) = (g(a), g(b));
                for d in 0..out.div.len() {
                    out.div[d] = div_at(&x, d, 1).min(div_at(&y, d, 1));
                }
                out
            }
            _ => AxisInfo::unknown(rank),
        }
    }
}
