//! The interpreter proper: runs program instances op by op on whole tiles.

use super::error::InterpError;
use super::memory::Memory;
use super::value::{
    decode_f, decode_i, encode_f, encode_i, fma_f32, fmax, fmin, round_slice, round_tf32, rounder, wrap, Data, PtrVal,
};
use super::Arg;
use crate::host::{int_to_float, stochastic_round};
use crate::ir::{
    AtomicKind, BinaryOp, Block, CmpOp, Const, DotPrecision, Inst, Kernel, Op, ReduceKind, Rounding, ScanKind, UnaryOp,
    Value,
};
use crate::types::{DType, Elem};
use std::rc::Rc;

/// A run-time fault, before it is tagged with the kernel, op and program.
enum Fault {
    OutOfBounds {
        buffer: u32,
        offset: i64,
        len: usize,
    },
    ElemMismatch {
        buffer: u32,
        offset: i64,
        pointer: Elem,
        buffer_elem: Elem,
    },
    DivZero,
    BadStep(i64),
    Shared(String),
    ConditionRace {
        handle: i64,
        first: [u32; 3],
    },
    Unsupported(String),
    /// An error already tagged (from a nested block).
    Tagged(Box<InterpError>),
}

type R<T> = Result<T, Fault>;

fn unsupported<T>(msg: impl Into<String>) -> R<T> {
    Err(Fault::Unsupported(msg.into()))
}

/// The lanes of a mask tile fetched by `Exec::bools`.
fn lanes(mask: Option<&Data>) -> Option<&[bool]> {
    mask.map(|d| match d {
        Data::B(b) => &b[..],
        _ => unreachable!("a mask is a bool tile"),
    })
}

/// Runs `kernel` over `grid` with `args`, reading and writing `mem`.
///
/// Program instances run sequentially in row-major order over the grid (axis 2 fastest). The
/// arguments are checked against the kernel's parameters first (count, types, and for pointers
/// that the buffer exists and holds the pointee type). On a fault the launch stops at once;
/// programs that ran before it keep their effects.
pub fn run(kernel: &Kernel, grid: [u32; 3], args: &[Arg], mem: &mut Memory) -> Result<(), InterpError> {
    let params = check_args(kernel, args, mem)?;
    if grid.iter().any(|&g| g > i32::MAX as u32) {
        return Err(InterpError::Grid {
            kernel: kernel.name.clone(),
            grid,
        });
    }
    let mut ex = Exec {
        k: kernel,
        mem,
        params,
        grid,
        pid: [0; 3],
        env: vec![None; kernel.values.len()],
        stages: Vec::new(),
        in_flight: Default::default(),
        conditions_set: Default::default(),
    };
    for x in 0..grid[0] {
        for y in 0..grid[1] {
            for z in 0..grid[2] {
                ex.pid = [x, y, z];
                ex.stages = kernel.shared.iter().map(|b| vec![None; b.stages]).collect();
                ex.in_flight.clear();
                ex.block(&kernel.body)?;
            }
        }
    }
    Ok(())
}

fn check_args(k: &Kernel, args: &[Arg], mem: &Memory) -> Result<Vec<Rc<Data>>, InterpError> {
    if args.len() != k.params.len() {
        return Err(InterpError::ArgCount {
            kernel: k.name.clone(),
            expected: k.params.len(),
            got: args.len(),
        });
    }
    let mut out = Vec::with_capacity(args.len());
    for (i, (p, a)) in k.params.iter().zip(args).enumerate() {
        let bad = |got: String| InterpError::ArgType {
            kernel: k.name.clone(),
            index: i,
            param: p.name.clone(),
            expected: p.dtype,
            got,
        };
        if !a.fits(p.dtype) {
            return Err(bad(a.describe()));
        }
        let d = match *a {
            Arg::Ptr { buffer, offset } => {
                if !mem.contains(buffer) {
                    return Err(bad(format!("{} (no such buffer)", a.describe())));
                }
                let want = p.dtype.pointee().expect("pointer parameter");
                if mem.elem(buffer) != want {
                    return Err(bad(format!("{} (a buffer of {})", a.describe(), mem.elem(buffer))));
                }
                Data::P(vec![PtrVal {
                    buf: buffer.0,
                    off: offset,
                }])
            }
            Arg::Bool(x) => Data::B(vec![x]),
            Arg::I32(x) => Data::I(vec![x as i64]),
            Arg::I64(x) => Data::I(vec![x]),
            Arg::U32(x) => Data::I(vec![x as i64]),
            Arg::F32(x) => Data::F(vec![x as f64]),
            Arg::F16(x) => Data::F(vec![x.to_f64()]),
            Arg::BF16(x) => Data::F(vec![x.to_f64()]),
            Arg::F8E4M3(x) => Data::F(vec![x.to_f64()]),
        };
        out.push(Rc::new(d));
    }
    Ok(out)
}

struct Exec<'a> {
    k: &'a Kernel,
    mem: &'a mut Memory,
    params: Vec<Rc<Data>>,
    grid: [u32; 3],
    pid: [u32; 3],
    /// The current value of every SSA value (indexed by `Value`).
    env: Vec<Option<Rc<Data>>>,
    /// Every shared buffer's stages as their last completed copies left them.
    stages: Vec<Vec<Option<Rc<Data>>>>,
    /// Copy groups in flight, oldest first: (buffer, stage, the copied tile).
    in_flight: std::collections::VecDeque<(usize, usize, Rc<Data>)>,
    /// The graph conditions this launch set, and the program that set each.
    conditions_set: std::collections::HashMap<i64, [u32; 3]>,
}

impl<'a> Exec<'a> {
    fn tag(&self, inst: &Inst, f: Fault) -> InterpError {
        let kernel = self.k.name.clone();
        let op = inst.op.mnemonic();
        let program = self.pid;
        match f {
            Fault::OutOfBounds { buffer, offset, len } => InterpError::OutOfBounds {
                kernel,
                op,
                program,
                buffer,
                offset,
                len,
            },
            Fault::ElemMismatch {
                buffer,
                offset,
                pointer,
                buffer_elem,
            } => InterpError::ElemMismatch {
                kernel,
                op,
                program,
                buffer,
                offset,
                pointer,
                buffer_elem,
            },
            Fault::DivZero => InterpError::DivisionByZero { kernel, op, program },
            Fault::BadStep(step) => InterpError::BadStep {
                kernel,
                op,
                program,
                step,
            },
            Fault::Shared(message) => InterpError::SharedBuffer {
                kernel,
                op,
                program,
                message,
            },
            Fault::ConditionRace { handle, first } => InterpError::ConditionRace {
                kernel,
                op,
                program,
                handle,
                first,
            },
            Fault::Unsupported(message) => InterpError::Unsupported {
                kernel,
                op,
                program,
                message,
            },
            Fault::Tagged(e) => *e,
        }
    }

    /// Executes a block; returns the values of its `Yield`, if it has one.
    fn block(&mut self, b: &'a Block) -> Result<Option<Vec<Rc<Data>>>, InterpError> {
        for inst in &b.insts {
            if let Op::Yield(vs) = &inst.op {
                let vals = vs
                    .iter()
                    .map(|v| self.get(*v))
                    .collect::<R<Vec<_>>>()
                    .map_err(|f| self.tag(inst, f))?;
                return Ok(Some(vals));
            }
            self.inst(inst).map_err(|f| self.tag(inst, f))?;
        }
        Ok(None)
    }

    fn get(&self, v: Value) -> R<Rc<Data>> {
        match self.env.get(v.0 as usize) {
            Some(Some(d)) => Ok(d.clone()),
            _ => unsupported(format!("value %{} is used before it is defined", v.0)),
        }
    }

    fn set(&mut self, v: Value, d: Data) -> R<()> {
        self.set_rc(v, Rc::new(d))
    }

    fn set_rc(&mut self, v: Value, d: Rc<Data>) -> R<()> {
        let n = self.k.ty(v).numel();
        if d.len() != n {
            return unsupported(format!(
                "value %{} has {} elements, its type {} has {n}",
                v.0,
                d.len(),
                self.k.ty(v)
            ));
        }
        self.env[v.0 as usize] = Some(d);
        Ok(())
    }

    fn result(inst: &Inst) -> R<Value> {
        inst.results
            .first()
            .copied()
            .map_or_else(|| unsupported("op without a result"), Ok)
    }

    fn val_elem(&self, v: Value) -> R<Elem> {
        match self.k.ty(v).dtype {
            DType::Val(e) => Ok(e),
            DType::Ptr(_) => unsupported(format!("%{} is a pointer where a value is expected", v.0)),
        }
    }

    fn scalar_int(&self, v: Value) -> R<i64> {
        match &*self.get(v)? {
            Data::I(x) if x.len() == 1 => Ok(x[0]),
            d => unsupported(format!(
                "%{} should be an integer scalar, is a {} tile of {}",
                v.0,
                d.kind(),
                d.len()
            )),
        }
    }

    fn bools(&self, v: Value) -> R<Rc<Data>> {
        let d = self.get(v)?;
        match &*d {
            Data::B(_) => Ok(d),
            other => unsupported(format!("%{} should be a bool tile, is a {} tile", v.0, other.kind())),
        }
    }

    fn inst(&mut self, inst: &'a Inst) -> R<()> {
        let k = self.k;
        match &inst.op {
            Op::Param(i) => {
                let d = self
                    .params
                    .get(*i)
                    .cloned()
                    .map_or_else(|| unsupported(format!("no parameter #{i}")), Ok)?;
                self.set_rc(Self::result(inst)?, d)
            }
            Op::Const(c) => {
                let r = Self::result(inst)?;
                let ty = k.ty(r);
                let n = ty.numel();
                let d = match (ty.dtype, c) {
                    (DType::Val(Elem::Bool), Const::Bool(b)) => Data::B(vec![*b; n]),
                    (DType::Val(Elem::Bool), Const::Int(i)) => Data::B(vec![*i != 0; n]),
                    (DType::Val(e), Const::Int(i)) if e.is_int() => Data::I(vec![wrap(e, *i); n]),
                    (DType::Val(e), Const::Int(i)) if e.is_float() => {
                        Data::F(vec![int_to_float(e, *i).expect("float"); n])
                    }
                    (DType::Val(e), Const::Float(x)) if e.is_float() => Data::F(vec![rounder(e)(*x); n]),
                    (DType::Val(e), Const::Float(x)) if e.is_int() => Data::I(vec![float_to_int(e, *x); n]),
                    (dt, c) => return unsupported(format!("constant {c:?} of type {dt}")),
                };
                self.set(r, d)
            }
            Op::ProgramId(a) | Op::NumPrograms(a) => {
                let a = *a as usize;
                if a > 2 {
                    return unsupported(format!("grid axis {a}"));
                }
                let x = if matches!(inst.op, Op::ProgramId(_)) {
                    self.pid[a]
                } else {
                    self.grid[a]
                };
                self.set(Self::result(inst)?, Data::I(vec![x as i64]))
            }
            Op::Arange => {
                let r = Self::result(inst)?;
                let n = k.ty(r).numel();
                self.set(r, Data::I((0..n as i64).collect()))
            }
            Op::Splat(a) => {
                let r = Self::result(inst)?;
                let d = self.get(*a)?;
                if d.len() != 1 {
                    return unsupported(format!("splat of a tile of {} elements", d.len()));
                }
                self.set(r, d.splat(k.ty(r).numel()))
            }
            Op::Broadcast(a) => {
                let r = Self::result(inst)?;
                let d = self.get(*a)?;
                let (si, so) = (&k.ty(*a).shape, &k.ty(r).shape);
                if si == so {
                    return self.set_rc(r, d);
                }
                let idx = broadcast_index(si, so)
                    .map_or_else(|| unsupported(format!("cannot broadcast {si:?} to {so:?}")), Ok)?;
                self.set(r, d.gather(&idx))
            }
            Op::ExpandDims(a, _) | Op::Reshape(a) => {
                let d = self.get(*a)?;
                self.set_rc(Self::result(inst)?, d)
            }
            Op::Trans(a) => {
                let r = Self::result(inst)?;
                let d = self.get(*a)?;
                let s = &k.ty(*a).shape;
                if s.len() != 2 {
                    return unsupported(format!("trans of shape {s:?}"));
                }
                let (m, n) = (s[0], s[1]);
                let mut idx = Vec::with_capacity(m * n);
                for j in 0..n {
                    for i in 0..m {
                        idx.push(i * n + j);
                    }
                }
                self.set(r, d.gather(&idx))
            }
            Op::Unary(op, a) => {
                let r = Self::result(inst)?;
                let e = self.val_elem(*a)?;
                let d = self.get(*a)?;
                let out = unary(*op, e, &d)?;
                self.set(r, out)
            }
            Op::Binary(op, a, b) => {
                let r = Self::result(inst)?;
                let e = self.val_elem(*a)?;
                let (da, db) = (self.get(*a)?, self.get(*b)?);
                if da.len() != db.len() {
                    return unsupported(format!("operands of {} and {} elements", da.len(), db.len()));
                }
                let out = match (&*da, &*db) {
                    (Data::F(x), Data::F(y)) => Data::F(binary_f(*op, e, x, y)?),
                    (Data::I(x), Data::I(y)) => Data::I(binary_i(*op, e, x, y)?),
                    (Data::B(x), Data::B(y)) => Data::B(binary_b(*op, x, y)?),
                    (x, y) => return unsupported(format!("{op:?} of {} and {} tiles", x.kind(), y.kind())),
                };
                self.set(r, out)
            }
            Op::Cmp(op, a, b) => {
                let r = Self::result(inst)?;
                let (da, db) = (self.get(*a)?, self.get(*b)?);
                if da.len() != db.len() {
                    return unsupported(format!("operands of {} and {} elements", da.len(), db.len()));
                }
                let out = match (&*da, &*db) {
                    (Data::F(x), Data::F(y)) => cmp(*op, x, y),
                    (Data::I(x), Data::I(y)) => cmp(*op, x, y),
                    (Data::B(x), Data::B(y)) => cmp(*op, x, y),
                    (Data::P(x), Data::P(y)) => cmp(*op, x, y),
                    (x, y) => return unsupported(format!("comparison of {} and {} tiles", x.kind(), y.kind())),
                };
                self.set(r, Data::B(out))
            }
            Op::Select(c, a, b) => {
                let r = Self::result(inst)?;
                let dc = self.bools(*c)?;
                let Data::B(cv) = &*dc else { unreachable!() };
                let (da, db) = (self.get(*a)?, self.get(*b)?);
                if cv.len() != da.len() || da.len() != db.len() {
                    return unsupported("select operands differ in size");
                }
                let out = Data::select(cv, &da, &db).map_or_else(|| unsupported("select of different kinds"), Ok)?;
                self.set(r, out)
            }
            Op::Cast(a, rounding) => {
                let r = Self::result(inst)?;
                let src = k.ty(*a).dtype;
                let dst = k.ty(r).dtype;
                let d = self.get(*a)?;
                let out = match rounding {
                    Rounding::Nearest => cast(&d, src, dst)?,
                    Rounding::Stochastic(bits) => {
                        let bd = self.get(*bits)?;
                        cast_stochastic(&d, &bd, src, dst)?
                    }
                };
                self.set(r, out)
            }
            Op::AddPtr(p, o) => {
                let r = Self::result(inst)?;
                let (dp, d_o) = (self.get(*p)?, self.get(*o)?);
                let out = match (&*dp, &*d_o) {
                    (Data::P(ps), Data::I(os)) if ps.len() == os.len() => Data::P(
                        ps.iter()
                            .zip(os)
                            .map(|(p, &o)| PtrVal {
                                buf: p.buf,
                                off: p.off.wrapping_add(o),
                            })
                            .collect(),
                    ),
                    (x, y) => return unsupported(format!("addptr of a {} tile and a {} tile", x.kind(), y.kind())),
                };
                self.set(r, out)
            }
            Op::Load { ptr, mask, other } => {
                let r = Self::result(inst)?;
                let e = self.val_elem(r)?;
                let dp = self.get(*ptr)?;
                let Data::P(ps) = &*dp else {
                    return unsupported("load through a non-pointer tile");
                };
                let dm = mask.map(|m| self.bools(m)).transpose()?;
                let mv = lanes(dm.as_deref());
                let dother = other.map(|o| self.get(o)).transpose()?;
                let out = self.load(e, ps, mv, dother.as_deref())?;
                self.set(r, out)
            }
            Op::Store { ptr, value, mask } => {
                let dp = self.get(*ptr)?;
                let Data::P(ps) = &*dp else {
                    return unsupported("store through a non-pointer tile");
                };
                let e = self.val_elem(*value)?;
                let pe = k.ty(*ptr).dtype.pointee();
                if pe != Some(e) {
                    return unsupported(format!("store of {e} through {}", k.ty(*ptr).dtype));
                }
                let dv = self.get(*value)?;
                let dm = mask.map(|m| self.bools(m)).transpose()?;
                let mv = lanes(dm.as_deref());
                self.store(e, ps, &dv, mv)
            }
            Op::Prefetch { ptr, mask } => {
                let dp = self.get(*ptr)?;
                let Data::P(ps) = &*dp else {
                    return unsupported("prefetch through a non-pointer tile");
                };
                let e = k.ty(*ptr).dtype.pointee().expect("a pointer tile");
                let dm = mask.map(|m| self.bools(m)).transpose()?;
                // Nothing is read; every fetched lane must still be in bounds.
                for (i, &p) in ps.iter().enumerate() {
                    if dm.as_deref().is_none_or(|d| matches!(d, Data::B(b) if b[i])) {
                        Self::check(self.mem, e, p)?;
                    }
                }
                Ok(())
            }
            Op::SetCondition { handle, value } => {
                let handle = self.scalar_int(*handle)?;
                let value = match &*self.bools(*value)? {
                    Data::B(b) if b.len() == 1 => b[0],
                    _ => return unsupported("a graph condition's value must be a bool scalar"),
                };
                let first = *self.conditions_set.entry(handle).or_insert(self.pid);
                if first != self.pid {
                    return Err(Fault::ConditionRace { handle, first });
                }
                self.mem.conditions.push((handle, value));
                Ok(())
            }
            Op::CopyAsync {
                buffer,
                stage,
                ptr,
                mask,
            } => {
                let s = self.stage_index(*buffer, *stage)?;
                if self.in_flight.iter().any(|(b, t, _)| (*b, *t) == (*buffer, s)) {
                    return Err(Fault::Shared(format!(
                        "copy into stage {s} of shared{buffer} while an earlier copy into it is in flight"
                    )));
                }
                let dp = self.get(*ptr)?;
                let Data::P(ps) = &*dp else {
                    return unsupported("copy_async through a non-pointer tile");
                };
                let e = k.ty(*ptr).dtype.pointee().expect("a pointer tile");
                let dm = mask.map(|m| self.bools(m)).transpose()?;
                let mv = lanes(dm.as_deref());
                let data = self.load(e, ps, mv, None)?;
                self.in_flight.push_back((*buffer, s, Rc::new(data)));
                Ok(())
            }
            Op::WaitAsync(pending) => {
                while self.in_flight.len() > *pending {
                    let (b, s, data) = self.in_flight.pop_front().expect("a copy in flight");
                    // The buffers sharing its bytes hold nothing readable any more.
                    let region = k.shared[b].region(b);
                    for (c, other) in k.shared.iter().enumerate() {
                        if c != b && other.region(c) == region {
                            self.stages[c].iter_mut().for_each(|st| *st = None);
                        }
                    }
                    self.stages[b][s] = Some(data);
                }
                Ok(())
            }
            Op::SharedRead { buffer, stage } => {
                let r = Self::result(inst)?;
                let s = self.stage_index(*buffer, *stage)?;
                if self.in_flight.iter().any(|(b, t, _)| (*b, *t) == (*buffer, s)) {
                    return Err(Fault::Shared(format!(
                        "read of stage {s} of shared{buffer} while a copy into it is in flight (wait_async first)"
                    )));
                }
                let Some(data) = self.stages[*buffer][s].clone() else {
                    return Err(Fault::Shared(format!(
                        "read of stage {s} of shared{buffer}, which no completed copy has written"
                    )));
                };
                self.env[r.0 as usize] = Some(data);
                Ok(())
            }
            Op::Atomic {
                kind,
                ptr,
                value,
                cmp,
                mask,
            } => {
                let r = Self::result(inst)?;
                let e = self.val_elem(*value)?;
                let dp = self.get(*ptr)?;
                let Data::P(ps) = &*dp else {
                    return unsupported("atomic through a non-pointer tile");
                };
                let dv = self.get(*value)?;
                let dc = cmp.map(|c| self.get(c)).transpose()?;
                let dm = mask.map(|m| self.bools(m)).transpose()?;
                let mv = lanes(dm.as_deref());
                let out = self.atomic(*kind, e, ps, &dv, dc.as_deref(), mv)?;
                self.set(r, out)
            }
            Op::Reduce { value, axis, kind } => {
                let r = Self::result(inst)?;
                let e = self.val_elem(*value)?;
                let d = self.get(*value)?;
                let (outer, n, inner) = split_axis(&k.ty(*value).shape, *axis)?;
                let out = match &*d {
                    Data::F(x) => {
                        let rd = rounder(e);
                        let f: fn(f64, f64) -> f64 = match kind {
                            ReduceKind::Sum => |a, b| a + b,
                            ReduceKind::Max => fmax,
                            ReduceKind::Min => fmin,
                        };
                        Data::F(reduce(x, outer, n, inner, |a, b| rd(f(a, b))))
                    }
                    Data::I(x) => Data::I(match kind {
                        ReduceKind::Sum => reduce(x, outer, n, inner, |a, b| wrap(e, a.wrapping_add(b))),
                        ReduceKind::Max => reduce(x, outer, n, inner, |a: i64, b| a.max(b)),
                        ReduceKind::Min => reduce(x, outer, n, inner, |a: i64, b| a.min(b)),
                    }),
                    other => return unsupported(format!("reduction of a {} tile", other.kind())),
                };
                self.set(r, out)
            }
            Op::Scan {
                value,
                axis,
                kind,
                reverse,
                exclusive,
            } => {
                let r = Self::result(inst)?;
                let e = self.val_elem(*value)?;
                let d = self.get(*value)?;
                let (outer, n, inner) = split_axis(&k.ty(*value).shape, *axis)?;
                let dir = ScanDir {
                    outer,
                    n,
                    inner,
                    reverse: *reverse,
                    exclusive: *exclusive,
                };
                let out = match &*d {
                    Data::F(x) => {
                        let rd = rounder(e);
                        Data::F(match kind {
                            ScanKind::Sum => dir.scan(x, 0.0, |a, b| rd(a + b)),
                            ScanKind::Prod => dir.scan(x, 1.0, |a, b| rd(a * b)),
                        })
                    }
                    Data::I(x) => Data::I(match kind {
                        ScanKind::Sum => dir.scan(x, 0, |a, b| wrap(e, a.wrapping_add(b))),
                        ScanKind::Prod => dir.scan(x, 1, |a, b| wrap(e, a.wrapping_mul(b))),
                    }),
                    other => return unsupported(format!("scan of a {} tile", other.kind())),
                };
                self.set(r, out)
            }
            Op::Dot { a, b, acc, precision } => {
                let r = Self::result(inst)?;
                let (sa, sb, sc) = (&k.ty(*a).shape, &k.ty(*b).shape, &k.ty(*acc).shape);
                if sa.len() != 2 || sb.len() != 2 || sa[1] != sb[0] || sc[..] != [sa[0], sb[1]] {
                    return unsupported(format!("dot of {sa:?} @ {sb:?} into {sc:?}"));
                }
                let (m, kk, n) = (sa[0], sa[1], sb[1]);
                let (da, db, dc) = (self.get(*a)?, self.get(*b)?, self.get(*acc)?);
                let (Data::F(av), Data::F(bv), Data::F(cv)) = (&*da, &*db, &*dc) else {
                    return unsupported("dot of non-float tiles");
                };
                // `Tf32` rounds the operands first (as the tensor cores see them).
                let operand = |x: f64| match precision {
                    DotPrecision::Tf32 => round_tf32(x as f32),
                    DotPrecision::Tf32x3 | DotPrecision::Tf32x3Chained | DotPrecision::Ieee => x as f32,
                };
                let af: Vec<f32> = av.iter().map(|&x| operand(x)).collect();
                let bf: Vec<f32> = bv.iter().map(|&x| operand(x)).collect();
                let mut out: Vec<f32> = cv.iter().map(|&x| x as f32).collect();
                for i in 0..m {
                    let row = &mut out[i * n..(i + 1) * n];
                    for kx in 0..kk {
                        let aik = af[i * kk + kx];
                        let brow = &bf[kx * n..(kx + 1) * n];
                        for (o, &bkj) in row.iter_mut().zip(brow) {
                            *o = fma_f32(aik, bkj, *o);
                        }
                    }
                }
                self.set(r, Data::F(out.into_iter().map(|x| x as f64).collect()))
            }
            Op::For {
                lo,
                hi,
                step,
                init,
                body,
            } => {
                let (lo, hi, step) = (self.scalar_int(*lo)?, self.scalar_int(*hi)?, self.scalar_int(*step)?);
                if step <= 0 {
                    return Err(Fault::BadStep(step));
                }
                if body.args.len() != init.len() + 1 || inst.results.len() != init.len() {
                    return unsupported("loop arity mismatch");
                }
                let mut carried = init.iter().map(|v| self.get(*v)).collect::<R<Vec<_>>>()?;
                let mut iv = lo;
                while iv < hi {
                    self.set(body.args[0], Data::I(vec![iv]))?;
                    for (a, c) in body.args[1..].iter().zip(carried) {
                        self.set_rc(*a, c)?;
                    }
                    carried = match self.block(body).map_err(|e| Fault::Tagged(Box::new(e)))? {
                        Some(v) if v.len() == init.len() => v,
                        _ => return unsupported("loop body does not yield its carried values"),
                    };
                    iv += step;
                }
                for (r, c) in inst.results.iter().zip(carried) {
                    self.set_rc(*r, c)?;
                }
                Ok(())
            }
            Op::If {
                cond,
                then_block,
                else_block,
            } => {
                let dc = self.bools(*cond)?;
                let Data::B(c) = &*dc else { unreachable!() };
                if c.len() != 1 {
                    return unsupported("`if` on a non-scalar condition");
                }
                let blk = if c[0] { then_block } else { else_block };
                let vals = self
                    .block(blk)
                    .map_err(|e| Fault::Tagged(Box::new(e)))?
                    .unwrap_or_default();
                if vals.len() != inst.results.len() {
                    return unsupported("branch does not yield the `if`'s results");
                }
                for (r, v) in inst.results.iter().zip(vals) {
                    self.set_rc(*r, v)?;
                }
                Ok(())
            }
            Op::Yield(_) => unsupported("yield outside a block end"),
        }
    }

    /// Checks one access; returns the byte offset into the buffer.
    #[inline]
    fn check(mem: &Memory, e: Elem, p: PtrVal) -> R<usize> {
        let Some(b) = mem.bufs.get(p.buf as usize) else {
            return Err(Fault::OutOfBounds {
                buffer: p.buf,
                offset: p.off,
                len: 0,
            });
        };
        if b.elem != e {
            return Err(Fault::ElemMismatch {
                buffer: p.buf,
                offset: p.off,
                pointer: e,
                buffer_elem: b.elem,
            });
        }
        if p.off < 0 || p.off as u64 >= b.len as u64 {
            return Err(Fault::OutOfBounds {
                buffer: p.buf,
                offset: p.off,
                len: b.len,
            });
        }
        Ok(p.off as usize * e.bytes())
    }

    /// The stage index `stage` of shared buffer `buffer`, checked against its stages.
    fn stage_index(&self, buffer: usize, stage: Value) -> R<usize> {
        let stages = self.k.shared[buffer].stages;
        let s = match &*self.get(stage)? {
            Data::I(v) if v.len() == 1 => v[0],
            d => {
                return unsupported(format!(
                    "a stage index must be an integer scalar, got a {} tile",
                    d.kind()
                ))
            }
        };
        if s < 0 || s as usize >= stages {
            return Err(Fault::Shared(format!(
                "stage {s} of shared{buffer}, which has {stages} stages"
            )));
        }
        Ok(s as usize)
    }

    fn load(&self, e: Elem, ps: &[PtrVal], mask: Option<&[bool]>, other: Option<&Data>) -> R<Data> {
        let n = ps.len();
        let on = |i: usize| mask.is_none_or(|m| m[i]);
        let mem = &*self.mem;
        if mask.is_some_and(|m| m.len() != n) || other.is_some_and(|o| o.len() != n) {
            return unsupported("load operands differ in size");
        }
        Ok(match (e.is_float(), e.is_int(), other) {
            (true, _, Some(Data::F(v))) => Data::F(Self::gather(mem, e, ps, &on, Some(v), |b| decode_f(e, b))?),
            (true, _, None) => Data::F(Self::gather(mem, e, ps, &on, None, |b| decode_f(e, b))?),
            (false, true, Some(Data::I(v))) => Data::I(Self::gather(mem, e, ps, &on, Some(v), |b| decode_i(e, b))?),
            (false, true, None) => Data::I(Self::gather(mem, e, ps, &on, None, |b| decode_i(e, b))?),
            (false, false, Some(Data::B(v))) => Data::B(Self::gather(mem, e, ps, &on, Some(v), |b| b[0] != 0)?),
            (false, false, None) => Data::B(Self::gather(mem, e, ps, &on, None, |b| b[0] != 0)?),
            (_, _, Some(d)) => return unsupported(format!("`other` is a {} tile", d.kind())),
        })
    }

    /// Reads one element per lane where `on(lane)`; masked-off lanes take `other[lane]` (or the
    /// type's default, i.e. zero / false).
    fn gather<T: Copy + Default>(
        mem: &Memory,
        e: Elem,
        ps: &[PtrVal],
        on: &dyn Fn(usize) -> bool,
        other: Option<&Vec<T>>,
        read: impl Fn(&[u8]) -> T,
    ) -> R<Vec<T>> {
        let mut out = Vec::with_capacity(ps.len());
        for (i, &p) in ps.iter().enumerate() {
            out.push(if on(i) {
                let o = Self::check(mem, e, p)?;
                read(&mem.bufs[p.buf as usize].bytes[o..])
            } else {
                other.map_or_else(T::default, |v| v[i])
            });
        }
        Ok(out)
    }

    fn store(&mut self, e: Elem, ps: &[PtrVal], v: &Data, mask: Option<&[bool]>) -> R<()> {
        let n = ps.len();
        if v.len() != n || mask.is_some_and(|m| m.len() != n) {
            return unsupported("store operands differ in size");
        }
        let on = |i: usize| mask.is_none_or(|m| m[i]);
        // Check every lane first: a faulting store writes nothing.
        for (i, &p) in ps.iter().enumerate() {
            if on(i) {
                Self::check(self.mem, e, p)?;
            }
        }
        let sz = e.bytes();
        let bufs = &mut self.mem.bufs;
        match v {
            Data::F(xs) if e.is_float() => {
                for (i, (&p, &x)) in ps.iter().zip(xs).enumerate() {
                    if on(i) {
                        let o = p.off as usize * sz;
                        encode_f(e, x, &mut bufs[p.buf as usize].bytes[o..o + sz]);
                    }
                }
            }
            Data::I(xs) if e.is_int() => {
                for (i, (&p, &x)) in ps.iter().zip(xs).enumerate() {
                    if on(i) {
                        let o = p.off as usize * sz;
                        encode_i(e, x, &mut bufs[p.buf as usize].bytes[o..o + sz]);
                    }
                }
            }
            Data::B(xs) if e == Elem::Bool => {
                for (i, (&p, &x)) in ps.iter().zip(xs).enumerate() {
                    if on(i) {
                        bufs[p.buf as usize].bytes[p.off as usize] = x as u8;
                    }
                }
            }
            d => return unsupported(format!("store of a {} tile to {e}", d.kind())),
        }
        Ok(())
    }

    fn atomic(
        &mut self,
        kind: AtomicKind,
        e: Elem,
        ps: &[PtrVal],
        v: &Data,
        cmp: Option<&Data>,
        mask: Option<&[bool]>,
    ) -> R<Data> {
        let n = ps.len();
        if v.len() != n || mask.is_some_and(|m| m.len() != n) || cmp.is_some_and(|c| c.len() != n) {
            return unsupported("atomic operands differ in size");
        }
        if kind == AtomicKind::Cas && cmp.is_none() {
            return unsupported("atomic cas without a compare value");
        }
        let on = |i: usize| mask.is_none_or(|m| m[i]);
        for (i, &p) in ps.iter().enumerate() {
            if on(i) {
                Self::check(self.mem, e, p)?;
            }
        }
        let sz = e.bytes();
        let bufs = &mut self.mem.bufs;
        match (v, cmp) {
            (Data::F(xs), c) if e.is_float() => {
                let cs = match c {
                    Some(Data::F(c)) => Some(c),
                    None => None,
                    Some(_) => return unsupported("atomic compare value of another kind"),
                };
                let rd = rounder(e);
                let mut old = vec![0.0; n];
                for i in 0..n {
                    if !on(i) {
                        continue;
                    }
                    let p = ps[i];
                    let bytes = &mut bufs[p.buf as usize].bytes[p.off as usize * sz..(p.off as usize + 1) * sz];
                    let o = decode_f(e, bytes);
                    let new = match kind {
                        AtomicKind::Add => Some(rd(o + xs[i])),
                        AtomicKind::Max => Some(fmax(o, xs[i])),
                        AtomicKind::Cas => (o == cs.expect("cas")[i]).then_some(xs[i]),
                    };
                    if let Some(nv) = new {
                        encode_f(e, nv, bytes);
                    }
                    old[i] = o;
                }
                Ok(Data::F(old))
            }
            (Data::I(xs), c) if e.is_int() => {
                let cs = match c {
                    Some(Data::I(c)) => Some(c),
                    None => None,
                    Some(_) => return unsupported("atomic compare value of another kind"),
                };
                let mut old = vec![0i64; n];
                for i in 0..n {
                    if !on(i) {
                        continue;
                    }
                    let p = ps[i];
                    let bytes = &mut bufs[p.buf as usize].bytes[p.off as usize * sz..(p.off as usize + 1) * sz];
                    let o = decode_i(e, bytes);
                    let new = match kind {
                        AtomicKind::Add => Some(wrap(e, o.wrapping_add(xs[i]))),
                        AtomicKind::Max => Some(o.max(xs[i])),
                        AtomicKind::Cas => (o == cs.expect("cas")[i]).then_some(xs[i]),
                    };
                    if let Some(nv) = new {
                        encode_i(e, nv, bytes);
                    }
                    old[i] = o;
                }
                Ok(Data::I(old))
            }
            (d, _) => unsupported(format!("atomic {kind:?} of a {} tile on {e}", d.kind())),
        }
    }
}

/// For each element of `out` (row-major), the index of its source in a tile of shape `inp`
/// (same rank, size-1 dimensions expanded).
fn broadcast_index(inp: &[usize], out: &[usize]) -> Option<Vec<usize>> {
    if inp.len() != out.len() {
        return None;
    }
    let rank = out.len();
    let mut stride = vec![0usize; rank];
    let mut s = 1;
    for d in (0..rank).rev() {
        if inp[d] == out[d] {
            stride[d] = s;
        } else if inp[d] == 1 {
            stride[d] = 0;
        } else {
            return None;
        }
        s *= inp[d];
    }
    let n: usize = out.iter().product();
    let mut idx = Vec::with_capacity(n);
    let mut pos = vec![0usize; rank];
    for _ in 0..n {
        idx.push(pos.iter().zip(&stride).map(|(p, s)| p * s).sum());
        for d in (0..rank).rev() {
            pos[d] += 1;
            if pos[d] < out[d] {
                break;
            }
            pos[d] = 0;
        }
    }
    Some(idx)
}

/// `(outer, n, inner)`: the extents before, at and after `axis`.
fn split_axis(shape: &[usize], axis: usize) -> R<(usize, usize, usize)> {
    if axis >= shape.len() {
        return unsupported(format!("axis {axis} of shape {shape:?}"));
    }
    Ok((
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    ))
}

/// Sequential reduction along the middle axis of `[outer, n, inner]`, index ascending.
fn reduce<T: Copy>(x: &[T], outer: usize, n: usize, inner: usize, f: impl Fn(T, T) -> T) -> Vec<T> {
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        let base = o * n * inner;
        let start = out.len();
        out.extend_from_slice(&x[base..base + inner]);
        for j in 1..n {
            let row = &x[base + j * inner..base + (j + 1) * inner];
            for (acc, &v) in out[start..].iter_mut().zip(row) {
                *acc = f(*acc, v);
            }
        }
    }
    out
}

/// Inclusive sequential scan along the middle axis of `[outer, n, inner]`.
/// The shape of a scan: `outer × n × inner` elements scanned along `n`, and its direction.
struct ScanDir {
    outer: usize,
    n: usize,
    inner: usize,
    reverse: bool,
    exclusive: bool,
}

impl ScanDir {
    /// Combines with `f` in scan order, left to right; `ident` is the empty combination.
    fn scan<T: Copy>(&self, x: &[T], ident: T, f: impl Fn(T, T) -> T) -> Vec<T> {
        let (n, inner) = (self.n, self.inner);
        let mut out = x.to_vec();
        for o in 0..self.outer {
            for i in 0..inner {
                let mut run: Option<T> = None;
                for s in 0..n {
                    let j = if self.reverse { n - 1 - s } else { s };
                    let at = (o * n + j) * inner + i;
                    let next = match run {
                        None => x[at],
                        Some(a) => f(a, x[at]),
                    };
                    out[at] = if self.exclusive { run.unwrap_or(ident) } else { next };
                    run = Some(next);
                }
            }
        }
        out
    }
}

fn cmp<T: PartialOrd>(op: CmpOp, a: &[T], b: &[T]) -> Vec<bool> {
    let z = a.iter().zip(b);
    match op {
        CmpOp::Eq => z.map(|(a, b)| a == b).collect(),
        CmpOp::Ne => z.map(|(a, b)| a != b).collect(),
        CmpOp::Lt => z.map(|(a, b)| a < b).collect(),
        CmpOp::Le => z.map(|(a, b)| a <= b).collect(),
        CmpOp::Gt => z.map(|(a, b)| a > b).collect(),
        CmpOp::Ge => z.map(|(a, b)| a >= b).collect(),
    }
}

fn softplus(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

fn unary(op: UnaryOp, e: Elem, d: &Data) -> R<Data> {
    match d {
        Data::F(x) => {
            let f: fn(f64) -> f64 = match op {
                UnaryOp::Neg => |x| -x,
                UnaryOp::Abs => f64::abs,
                UnaryOp::Exp => f64::exp,
                UnaryOp::Exp2 => f64::exp2,
                UnaryOp::Log => f64::ln,
                UnaryOp::Log2 => f64::log2,
                UnaryOp::Sqrt => f64::sqrt,
                UnaryOp::Rsqrt => |x| 1.0 / x.sqrt(),
                UnaryOp::Softplus => |x| if x.is_nan() { x } else { softplus(x) },
                UnaryOp::Sigmoid => |x| 1.0 / (1.0 + (-x).exp()),
                UnaryOp::Silu => |x| x / (1.0 + (-x).exp()),
                UnaryOp::Tanh => f64::tanh,
                UnaryOp::Not => return unsupported(format!("`not` on {e}")),
            };
            let mut out: Vec<f64> = x.iter().map(|&v| f(v)).collect();
            round_slice(e, &mut out);
            Ok(Data::F(out))
        }
        Data::I(x) => {
            let out = match op {
                UnaryOp::Neg => x.iter().map(|&v| wrap(e, v.wrapping_neg())).collect(),
                UnaryOp::Abs => x.iter().map(|&v| wrap(e, v.wrapping_abs())).collect(),
                UnaryOp::Not => x.iter().map(|&v| wrap(e, !v)).collect(),
                _ => return unsupported(format!("{op:?} on {e}")),
            };
            Ok(Data::I(out))
        }
        Data::B(x) => match op {
            UnaryOp::Not => Ok(Data::B(x.iter().map(|&v| !v).collect())),
            _ => unsupported(format!("{op:?} on bool")),
        },
        Data::P(_) => unsupported(format!("{op:?} on pointers")),
    }
}

fn binary_f(op: BinaryOp, e: Elem, x: &[f64], y: &[f64]) -> R<Vec<f64>> {
    let z = x.iter().zip(y);
    let mut out: Vec<f64> = match op {
        BinaryOp::Add => z.map(|(a, b)| a + b).collect(),
        BinaryOp::Sub => z.map(|(a, b)| a - b).collect(),
        BinaryOp::Mul => z.map(|(a, b)| a * b).collect(),
        BinaryOp::Div => z.map(|(a, b)| a / b).collect(),
        BinaryOp::Min => return Ok(z.map(|(&a, &b)| fmin(a, b)).collect()),
        BinaryOp::Max => return Ok(z.map(|(&a, &b)| fmax(a, b)).collect()),
        _ => return unsupported(format!("{op:?} on {e}")),
    };
    round_slice(e, &mut out);
    Ok(out)
}

fn binary_i(op: BinaryOp, e: Elem, x: &[i64], y: &[i64]) -> R<Vec<i64>> {
    let z = x.iter().zip(y);
    let width: u64 = if e == Elem::I64 { 64 } else { 32 };
    let signed = e.is_signed_int();
    // The shift amount as an unsigned integer of the type's width.
    let amount = |b: i64| if width == 64 { b as u64 } else { b as u32 as u64 };
    if matches!(op, BinaryOp::Div | BinaryOp::Rem) && y.contains(&0) {
        return Err(Fault::DivZero);
    }
    Ok(match op {
        BinaryOp::Add => z.map(|(&a, &b)| wrap(e, a.wrapping_add(b))).collect(),
        BinaryOp::Sub => z.map(|(&a, &b)| wrap(e, a.wrapping_sub(b))).collect(),
        BinaryOp::Mul => z.map(|(&a, &b)| wrap(e, a.wrapping_mul(b))).collect(),
        BinaryOp::Div => z.map(|(&a, &b)| wrap(e, a.wrapping_div(b))).collect(),
        BinaryOp::Rem => z.map(|(&a, &b)| wrap(e, a.wrapping_rem(b))).collect(),
        BinaryOp::Min => z.map(|(&a, &b)| a.min(b)).collect(),
        BinaryOp::Max => z.map(|(&a, &b)| a.max(b)).collect(),
        BinaryOp::And => z.map(|(&a, &b)| wrap(e, a & b)).collect(),
        BinaryOp::Or => z.map(|(&a, &b)| wrap(e, a | b)).collect(),
        BinaryOp::Xor => z.map(|(&a, &b)| wrap(e, a ^ b)).collect(),
        BinaryOp::Shl => z
            .map(|(&a, &b)| {
                let s = amount(b);
                if s >= width {
                    0
                } else {
                    wrap(e, a.wrapping_shl(s as u32))
                }
            })
            .collect(),
        BinaryOp::Shr => z
            .map(|(&a, &b)| {
                let s = amount(b);
                // Values are held sign-extended (signed) or zero-extended (u32) in i64, so an
                // i64 arithmetic shift is the type's arithmetic / logical shift.
                if s >= width {
                    if signed && a < 0 {
                        -1
                    } else {
                        0
                    }
                } else {
                    a >> s
                }
            })
            .collect(),
    })
}

fn binary_b(op: BinaryOp, x: &[bool], y: &[bool]) -> R<Vec<bool>> {
    let z = x.iter().zip(y);
    Ok(match op {
        BinaryOp::And => z.map(|(&a, &b)| a & b).collect(),
        BinaryOp::Or => z.map(|(&a, &b)| a | b).collect(),
        BinaryOp::Xor => z.map(|(&a, &b)| a ^ b).collect(),
        BinaryOp::Min => z.map(|(&a, &b)| a & b).collect(),
        BinaryOp::Max => z.map(|(&a, &b)| a | b).collect(),
        _ => return unsupported(format!("{op:?} on bool")),
    })
}

/// Float → int: truncate toward zero, saturate, NaN → 0 (Rust `as`).
fn float_to_int(e: Elem, x: f64) -> i64 {
    match e {
        Elem::I32 => x as i32 as i64,
        Elem::U32 => x as u32 as i64,
        Elem::I64 => x as i64,
        Elem::Bool => (x != 0.0) as i64,
        _ => unreachable!("float_to_int to {e}"),
    }
}

fn cast(d: &Data, src: DType, dst: DType) -> R<Data> {
    let (DType::Val(s), DType::Val(t)) = (src, dst) else {
        return unsupported(format!("cast from {src} to {dst}"));
    };
    Ok(match d {
        Data::F(x) => {
            if t.is_float() {
                let mut out = x.clone();
                round_slice(t, &mut out);
                Data::F(out)
            } else if t.is_int() {
                Data::I(x.iter().map(|&v| float_to_int(t, v)).collect())
            } else {
                Data::B(x.iter().map(|&v| v != 0.0).collect())
            }
        }
        Data::I(x) => {
            if t.is_float() {
                Data::F(x.iter().map(|&v| int_to_float(t, v).expect("float")).collect())
            } else if t.is_int() {
                Data::I(x.iter().map(|&v| wrap(t, v)).collect())
            } else {
                Data::B(x.iter().map(|&v| v != 0).collect())
            }
        }
        Data::B(x) => {
            if t.is_float() {
                Data::F(x.iter().map(|&v| v as u8 as f64).collect())
            } else if t.is_int() {
                Data::I(x.iter().map(|&v| v as i64).collect())
            } else {
                Data::B(x.clone())
            }
        }
        Data::P(_) => return unsupported(format!("cast from {s} pointers")),
    })
}

fn cast_stochastic(d: &Data, bits: &Data, src: DType, dst: DType) -> R<Data> {
    let (Data::F(x), Data::I(r)) = (d, bits) else {
        return unsupported("stochastic cast needs a float tile and a u32 tile");
    };
    if src != DType::Val(Elem::F32) || !matches!(dst, DType::Val(Elem::F16 | Elem::BF16 | Elem::F8E4M3)) {
        return unsupported(format!("stochastic cast from {src} to {dst}"));
    }
    if x.len() != r.len() {
        return unsupported("stochastic cast bits differ in size");
    }
    let t = dst.val().expect("value");
    Ok(Data::F(
        x.iter()
            .zip(r)
            .map(|(&v, &b)| stochastic_round(v as f32, b as u32, t))
            .collect(),
    ))
}
