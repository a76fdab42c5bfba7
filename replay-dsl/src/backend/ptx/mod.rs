//! The PTX emitter: walks the IR once, in program order, producing fully unrolled per-thread
//! code on typed virtual registers (see the backend module doc for the layout scheme).
//!
//! Every value lives in registers per layout: `vals[(value, layout)]` holds one register per
//! element the thread owns. Registers are never reassigned once defined, except loop-carried
//! registers, branch results and the private accumulators of one op, so values may alias
//! registers freely (a splat is the scalar's register repeated, a constant one `mov`).

/// Appends one instruction (`format!` arguments, without the trailing `;`) to the body.
macro_rules! emit {
    ($e:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        $e.body.push('\t');
        let _ = write!($e.body, $($arg)*);
        $e.body.push_str(";\n");
    }};
}

mod affine;
mod cast;
mod control;
mod convert;
mod divide;
mod dot;
mod elementwise;
mod graph;
mod lines;
mod math;
mod memory;
mod mma;
mod prune;
mod reduce;
pub mod regs;
mod scan;
mod shared;
mod threads;

use super::assign::{Assignment, Kind};
use super::axis::AxisTable;
use super::layout::LayoutId;
use super::smem::{scratch_budget, SmemPlan};
use crate::compile::Target;
use crate::error::{CompileError, ErrorKind};
use crate::ir::{Block, Inst, Kernel, Op, Value};
use crate::types::DType;
use regs::{Class, Reg, RegAlloc};
use std::collections::HashMap;
use std::fmt::Write;

/// Name of the static shared-memory array.
const SMEM: &str = "replay_smem";

/// Emission state for one kernel.
pub struct Emitter<'k> {
    k: &'k Kernel,
    asg: Assignment<'k>,
    axis: &'k AxisTable,
    target: Target,
    regs: RegAlloc,
    body: String,
    prologue: String,
    vals: HashMap<(Value, LayoutId), Vec<Reg>>,
    gathers: HashMap<Vec<(u32, u32)>, Reg>,
    owners: HashMap<LayoutId, Option<Reg>>,
    tid: Option<Reg>,
    /// The staging scratch's address, read once in the prologue.
    scratch_root: Option<Reg>,
    /// The address of the current shared-memory use's range in the scratch.
    smem_use: Option<Reg>,
    /// The shared array's address (the shared buffers'), read once in the prologue.
    shared_array: Option<Reg>,
    /// Where the shared buffers lie ([`shared`]).
    buffers: Vec<shared::BufferPlan>,
    /// Bytes the shared buffers take; the staging scratch ([`SmemPlan`]) starts there.
    scratch_base: usize,
    smem: SmemPlan,
    labels: u32,
    version: (u32, u32),
    yield_to: Vec<Vec<(LayoutId, Vec<Reg>)>>,
    /// `reg = base + offset` facts of integer and pointer registers (see `affine`).
    offsets: HashMap<Reg, affine::Affine>,
    /// Base registers derived in the current op (see `affine`).
    bases: HashMap<affine::BaseKey, Reg>,
    /// i32 registers known to hold a value ≥ 0 (program ids, and their quotients and
    /// remainders by powers of two: see `divide`).
    non_negative: std::collections::HashSet<Reg>,
    /// Source lines to emit (`.file` / `.loc`), when asked for.
    lines: Option<lines::LineTable>,
    /// Whether the kernel sets graph conditions (and declares the device runtime's function).
    sets_conditions: bool,
}

/// The result of emitting a kernel.
pub struct Emitted {
    /// The PTX module.
    pub ptx: String,
    /// The module as emitted, before its dead instructions are removed (`prune`).
    pub emitted: String,
    /// Bytes of shared memory used (static, or dynamic beyond the static limit).
    pub shared_bytes: u32,
}

/// Emits the PTX module for `kernel` with the given layout assignment.
pub fn emit_kernel<'k>(
    kernel: &'k Kernel,
    asg: Assignment<'k>,
    axis: &'k AxisTable,
    target: Target,
    line_info: bool,
) -> Result<Emitted, CompileError> {
    let mut asg = asg;
    let (buffers, scratch_base) = shared::plan_buffers(kernel, &mut asg);
    let mut e = Emitter {
        k: kernel,
        asg,
        axis,
        target,
        regs: RegAlloc::default(),
        body: String::with_capacity(1 << 16),
        prologue: String::new(),
        vals: HashMap::new(),
        gathers: HashMap::new(),
        owners: HashMap::new(),
        tid: None,
        scratch_root: None,
        smem_use: None,
        shared_array: None,
        buffers,
        scratch_base,
        smem: SmemPlan::new(scratch_budget(
            kernel.num_warps as usize * 32,
            kernel.min_blocks as usize,
            scratch_base,
        )),
        labels: 0,
        version: target.min_ptx_version(),
        yield_to: Vec::new(),
        offsets: HashMap::new(),
        bases: HashMap::new(),
        non_negative: Default::default(),
        lines: line_info.then(|| lines::LineTable::of(kernel)),
        sets_conditions: false,
    };
    e.block(&kernel.body)?;
    if e.shared_bytes() > super::smem::LIMIT {
        return Err(e.err(
            "shared memory",
            ErrorKind::Unsupported(format!(
                "needs {} bytes of shared memory ({} of shared buffers; at most {})",
                e.shared_bytes(),
                e.scratch_base,
                super::smem::LIMIT
            )),
        ));
    }
    Ok(e.finish())
}

impl<'k> Emitter<'k> {
    fn finish(self) -> Emitted {
        let name = self.k.entry_name();
        let mut s = String::with_capacity(self.body.len() + self.prologue.len() + 4096);
        let _ = writeln!(s, "//\n// Generated by replay (PTX backend)\n//\n");
        let _ = writeln!(
            s,
            ".version {}.{}\n.target {}\n.address_size 64\n",
            self.version.0,
            self.version.1,
            self.target.arch()
        );
        if let Some(lines) = &self.lines {
            let _ = writeln!(s, "{}", lines.header());
        }
        if self.sets_conditions {
            let _ = writeln!(s, "{}\n", graph::DECLARATION);
        }
        let shared = self.shared_bytes().div_ceil(16) * 16;
        if shared > super::smem::STATIC_LIMIT {
            let _ = writeln!(s, ".extern .shared .align 16 .b8 {SMEM}[];\n");
        } else if shared > 0 {
            let _ = writeln!(s, ".shared .align 16 .b8 {SMEM}[{shared}];\n");
        }
        let params: Vec<String> = self
            .k
            .params
            .iter()
            .enumerate()
            .map(|(i, p)| format!("\t.param .{} {name}_param_{i}", param_type(p.dtype)))
            .collect();
        // `.minnctapersm` makes ptxas fit the registers to that many programs per SM.
        let hint = if self.k.min_blocks > 1 {
            format!(".minnctapersm {}\n", self.k.min_blocks)
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            ".visible .entry {name}(\n{}\n)\n.maxntid {}, 1, 1\n{hint}{{",
            params.join(",\n"),
            self.k.num_warps * 32
        );
        s.push_str(&self.regs.declarations());
        s.push('\n');
        let code = format!("{}{}", self.prologue, self.body);
        let whole = |code: &str| format!("{s}{code}\tret;\n}}\n");
        Emitted {
            ptx: whole(&prune::without_dead_instructions(&code)),
            emitted: whole(&code),
            shared_bytes: shared as u32,
        }
    }

    /// Bytes of shared memory the kernel declares: its buffers, then the staging scratch.
    fn shared_bytes(&self) -> usize {
        self.scratch_base + self.smem.bytes()
    }

    fn err(&self, op: &str, kind: ErrorKind) -> CompileError {
        CompileError::new(&self.k.name, op, kind)
    }

    fn internal(&self, op: &str, msg: impl Into<String>) -> CompileError {
        self.err(op, ErrorKind::Internal(msg.into()))
    }

    /// Raises the module's `.version` to at least `v`.
    fn need_version(&mut self, v: (u32, u32)) {
        self.version = self.version.max(v);
    }

    /// A fresh register.
    fn reg(&mut self, c: Class) -> Reg {
        self.regs.fresh(c)
    }

    /// `n` fresh registers.
    fn regs_n(&mut self, c: Class, n: usize) -> Vec<Reg> {
        (0..n).map(|_| self.reg(c)).collect()
    }

    /// A fresh label name.
    fn label(&mut self) -> String {
        self.labels += 1;
        format!("$L_{}", self.labels)
    }

    /// Places a label in the body.
    fn place(&mut self, label: &str) {
        let _ = writeln!(self.body, "{label}:");
    }

    fn ty(&self, v: Value) -> &'k crate::types::Ty {
        self.k.ty(v)
    }

    /// The registers of `v` in layout `l` (views resolve to their source's registers).
    fn get(&mut self, v: Value, l: LayoutId) -> Result<Vec<Reg>, CompileError> {
        if let Some(r) = self.vals.get(&(v, l)) {
            return Ok(r.clone());
        }
        if self.asg.kind(v) != Kind::View {
            return Err(self.internal("backend", format!("%{} is not available in layout #{}", v.0, l.0)));
        }
        let def = self.asg.def(v).expect("view has a definition");
        let (src, sl) = self.asg.view_source(def, l);
        let regs = self.get(src, sl)?;
        Ok(match &def.op {
            Op::Broadcast(_) => {
                let src_shape = &self.ty(src).shape;
                let layout = self.asg.layout(l);
                let dims: Vec<usize> = (0..src_shape.len())
                    .filter(|&d| src_shape[d] == 1 && layout.shape[d] > 1)
                    .collect();
                layout.reg_map_dropping(&dims).into_iter().map(|i| regs[i]).collect()
            }
            _ => regs,
        })
    }

    /// The operand `v` in layout `l`, or in the scalar layout if it is a scalar.
    fn operand(&mut self, v: Value, l: LayoutId) -> Result<Vec<Reg>, CompileError> {
        let l = if self.ty(v).rank() == 0 { self.asg.scalar() } else { l };
        self.get(v, l)
    }

    fn define(&mut self, v: Value, l: LayoutId, regs: Vec<Reg>) {
        self.vals.insert((v, l), regs);
    }

    /// Defines a real value in its natural layout and emits its conversions.
    fn define_real(&mut self, v: Value, regs: Vec<Reg>) -> Result<(), CompileError> {
        let ls = self.asg.emitted(v).to_vec();
        self.define(v, ls[0], regs.clone());
        for l in &ls[1..] {
            let out = self.convert(&regs, self.ty(v).dtype, ls[0], *l)?;
            self.define(v, *l, out);
        }
        Ok(())
    }

    fn block(&mut self, block: &'k Block) -> Result<(), CompileError> {
        for inst in &block.insts {
            self.inst(inst)?;
        }
        Ok(())
    }

    fn inst(&mut self, inst: &'k Inst) -> Result<(), CompileError> {
        if let Some(loc) = self.lines.as_mut().and_then(|t| t.loc(inst)) {
            let _ = writeln!(self.body, "\t{loc}");
        }
        match &inst.op {
            Op::For { .. } => return self.emit_for(inst),
            Op::If { .. } => return self.emit_if(inst),
            Op::Yield(vs) => return self.emit_yield(vs),
            Op::Store { ptr, value, mask } => return self.store(*ptr, *value, *mask),
            Op::Prefetch { ptr, mask } => return self.prefetch(*ptr, *mask),
            Op::CopyAsync {
                buffer,
                stage,
                ptr,
                mask,
            } => return self.copy_async(*buffer, *stage, *ptr, *mask),
            Op::WaitAsync(pending) => {
                self.wait_async(*pending);
                return Ok(());
            }
            Op::SetCondition { handle, value } => return self.set_condition(*handle, *value),
            _ => {}
        }
        let r = inst.results[0];
        if self.asg.is_fused(r) {
            // A shared-buffer read (or its cast) that a dot loads from the buffer itself.
            return Ok(());
        }
        match self.asg.kind(r) {
            Kind::View => Ok(()),
            Kind::Remat => {
                for l in self.asg.emitted(r).to_vec() {
                    let regs = self.compute(inst, r, l)?;
                    self.define(r, l, regs);
                }
                Ok(())
            }
            Kind::Real => {
                let l = self.asg.natural(r).expect("real value has a layout");
                let regs = self.compute(inst, r, l)?;
                self.define_real(r, regs)
            }
        }
    }

    /// Computes the single result `r` of `inst` in layout `l`.
    fn compute(&mut self, inst: &Inst, r: Value, l: LayoutId) -> Result<Vec<Reg>, CompileError> {
        let n = self.asg.layout(l).num_regs();
        match &inst.op {
            Op::Param(i) => self.param(*i),
            Op::ProgramId(a) | Op::NumPrograms(a) => {
                let d = self.reg(Class::B32);
                let sreg = if matches!(inst.op, Op::ProgramId(_)) {
                    "ctaid"
                } else {
                    "nctaid"
                };
                emit!(self, "mov.u32 {d}, %{sreg}.{}", ["x", "y", "z"][*a as usize]);
                self.non_negative.insert(d);
                Ok(vec![d])
            }
            Op::Const(c) => {
                let reg = self.constant(*c, self.ty(r).dtype)?;
                Ok(vec![reg; n])
            }
            Op::Arange => Ok(self.arange(l)),
            Op::Splat(s) => {
                let s = self.get(*s, self.asg.scalar())?[0];
                Ok(vec![s; n])
            }
            Op::Unary(..) | Op::Binary(..) | Op::Cmp(..) | Op::Select(..) | Op::Cast(..) | Op::AddPtr(..) => {
                self.elementwise(inst, r, l)
            }
            Op::Load { ptr, mask, other } => self.load(r, l, *ptr, *mask, *other),
            Op::SharedRead { buffer, stage } => self.shared_read(r, l, *buffer, *stage),
            Op::Reduce { value, axis, kind } => self.reduce(r, *value, *axis, *kind),
            Op::Scan {
                value,
                axis,
                kind,
                reverse,
                exclusive,
            } => self.scan(r, *value, *axis, *kind, *reverse, *exclusive),
            Op::Dot { a, b, acc, precision } => match self.asg.mma_plan(*a, *b, *precision) {
                Some(p) => self.dot_mma(r, l, (*a, *b, *acc), p),
                None => self.dot(r, l, *a, *b, *acc, *precision),
            },
            Op::Atomic {
                kind,
                ptr,
                value,
                cmp,
                mask,
            } => self.atomic(r, l, *kind, *ptr, *value, *cmp, *mask),
            op => Err(self.internal(&op.mnemonic(), "not a value-producing op")),
        }
    }
}

/// The `.param` type of a kernel parameter.
fn param_type(dtype: DType) -> &'static str {
    use crate::types::Elem;
    match dtype {
        DType::Ptr(_) => "u64",
        DType::Val(Elem::Bool | Elem::F8E4M3) => "u8",
        DType::Val(Elem::I32) => "s32",
        DType::Val(Elem::U32) => "u32",
        DType::Val(Elem::I64) => "s64",
        DType::Val(Elem::F32) => "f32",
        DType::Val(Elem::F16 | Elem::BF16) => "b16",
    }
}
