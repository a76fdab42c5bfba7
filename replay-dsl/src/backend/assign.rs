//! Layout assignment: which layout every value is computed in, and which conversions it needs.
//!
//! Values fall in three kinds ([`Kind`]):
//! - **real** values are computed once, in their *natural* layout: loads, reductions, scans,
//!   dots, atomics, loop and branch results, scalars, and elementwise ops with a real operand
//!   (they take the natural layout of their first operand that has one);
//! - **remat** values (constants, `arange`, splats, elementwise ops of remat values) have no
//!   layout of their own: they are emitted at their definition once per layout their users
//!   request (Triton's rematerialisation) — except the costly ones (`costly`: softplus,
//!   sigmoid, silu, tanh), which are real in the default layout of their shape, so that a
//!   `[T]` softplus broadcast into a `[H, R, T]` tile runs once per element of `[T]`, not of
//!   the tile;
//! - **views** (`broadcast`, `expand_dims`, `reshape`, `trans`) are free relabelings: a view in
//!   layout `L` is its source in a translated layout, with no instructions.
//!
//! Requests flow backwards from every real op to its operands; a real value requested in a layout
//! other than its natural one gets a conversion (register selection when every thread already
//! holds what it needs, else through shared memory), emitted right after its definition.
//!
//! Layouts are chosen backwards from the consumers (Triton's layout propagation / removal of
//! conversions), by repeating the forward and request passes until nothing changes:
//! - **small loads** (at most [`SMALL_LOAD_BYTES`]) whose address and mask are themselves remat are
//!   remat: they are issued directly in every layout their users request (the address tile is
//!   recomputed in that layout; the L1 serves the repeats), so `x[BV]` next to
//!   `sum(S * q[None, :], 1)` is loaded in the sliced layout of `S` and `k[None, :]` in `S`'s
//!   layout without dimension 0;
//! - **large loads** are anchors with a coalesced, vectorised default layout; one whose users all
//!   ask for one other layout adopts it if its accesses stay as wide and as coalesced;
//! - a real **elementwise** op whose users all ask for one other layout adopts it (its operands
//!   are then requested there, so the request travels back to the loads);
//! - a **reduction** of a remat value whose users all ask for one layout `O` of its result reads
//!   its input in `O` with the reduced axis inserted into `O`'s replicated lanes (then registers,
//!   then warps), so the result is produced in `O` (e.g. `sum(xs * w[:, None], 0)` added to a
//!   row reduction of the state tile);
//! - a **dot** that runs on tensor cores produces the mma accumulator layout
//!   ([`super::mma::acc_layout`]) and reads its accumulator operand there; another dot keeps its
//!   accumulator's layout. A tf32 dot whose operands are loads contiguous along K asks for them
//!   in its fragment layouts ([`super::mma::register_operands`]); such a load adopts the
//!   request, and so do the initial and next loads of an operand a loop carries (a
//!   software-pipelined load).

use super::axis::AxisTable;
use super::layout::{Bit, Layout, LayoutId, LayoutTable};
use crate::ir::{Block, DotPrecision, Inst, Kernel, Op, UnaryOp, Value};
use crate::types::{DType, Ty};
use std::collections::{HashMap, HashSet};
use std::fmt::Write;

/// How a value obtains its registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Computed once in its natural layout, converted for users that need another.
    Real,
    /// Recomputed at its definition in every layout its users request.
    Remat,
    /// A relabeling of its source's registers.
    View,
}

/// The layout decisions for one kernel.
pub struct Assignment<'k> {
    kernel: &'k Kernel,
    axis: &'k AxisTable,
    /// Interned layouts.
    pub table: LayoutTable,
    defs: Vec<Option<&'k Inst>>,
    kind: Vec<Kind>,
    natural: Vec<Option<LayoutId>>,
    emit: Vec<Vec<LayoutId>>,
    used: Vec<bool>,
    /// Layouts adopted backwards by real loads and elementwise ops.
    pref: HashMap<Value, LayoutId>,
    /// Result layouts wanted by the users of reductions of remat values.
    red_pref: HashMap<Value, LayoutId>,
    /// The layout each reduction reads its input in (by result).
    red_in: HashMap<Value, LayoutId>,
    /// Every layout each real tile value was requested in during the last request pass.
    requests: HashMap<Value, Vec<LayoutId>>,
    adopted: HashSet<Value>,
    /// Small loads made real again because their users want them in several layouts.
    no_remat: HashSet<Value>,
    visited: HashSet<(Value, LayoutId)>,
    /// Reductions whose result (through elementwise ops) is expanded back along the reduced
    /// axis: they keep the replicated [`Layout::slice`] that broadcasts without a conversion.
    broadcast_back: HashSet<Value>,
    /// The layouts mma dots read register operands in.
    operand_regs: HashSet<LayoutId>,
    /// The accumulator layouts of mma dots.
    mma_acc: HashSet<LayoutId>,
    /// Each loop-carried value (a `For` body argument past the index): its initial value and
    /// the value yielded for the next iteration.
    carried: HashMap<Value, (Value, Value)>,
    /// Shared-buffer reads that an mma dot loads its fragments from directly: the read's
    /// value → its buffer and stage ([`Self::find_fused_reads`]).
    fused_reads: HashMap<Value, (usize, Value)>,
    /// The values a dot's direct buffer reads replace (the reads and their casts): not emitted.
    fused: HashSet<Value>,
    scalar: LayoutId,
}

/// Loads of at most this many bytes are rematerialised in every requested layout.
pub const SMALL_LOAD_BYTES: usize = 2048;

/// The bytes one prefetch asks for: an L2 cache line.
pub const PREFETCH_LINE: u64 = 128;
/// Remat loads of more than this many bytes wanted in several layouts are loaded once instead
/// (each layout would hold its own registers).
pub const MULTI_LAYOUT_LOAD_BYTES: usize = 1024;
/// ... or of more than this many elements per thread.
pub const MULTI_LAYOUT_LOAD_ELEMS: usize = 8;

/// True for the elementwise ops too costly to recompute in every layout a user requests (tens of
/// instructions, a division): computed once, in their own layout, and converted instead.
fn costly(op: &Op) -> bool {
    matches!(
        op,
        Op::Unary(UnaryOp::Softplus | UnaryOp::Sigmoid | UnaryOp::Silu | UnaryOp::Tanh, _)
    )
}

/// Bytes of one element of `dtype` in registers-to-memory terms (pointers are 8 bytes).
pub fn dtype_bytes(dtype: DType) -> usize {
    match dtype {
        DType::Ptr(_) => 8,
        DType::Val(e) => e.bytes(),
    }
}

impl<'k> Assignment<'k> {
    /// Assigns layouts to every value of `kernel`.
    pub fn new(kernel: &'k Kernel, axis: &'k AxisTable) -> Assignment<'k> {
        let n = kernel.values.len();
        let mut table = LayoutTable::default();
        let scalar = table.intern(Layout::scalar(kernel.num_warps));
        let mut a = Assignment {
            kernel,
            axis,
            table,
            defs: vec![None; n],
            kind: vec![Kind::Real; n],
            natural: vec![None; n],
            emit: vec![Vec::new(); n],
            used: vec![false; n],
            pref: HashMap::new(),
            red_pref: HashMap::new(),
            red_in: HashMap::new(),
            requests: HashMap::new(),
            adopted: HashSet::new(),
            no_remat: HashSet::new(),
            visited: HashSet::new(),
            broadcast_back: HashSet::new(),
            operand_regs: HashSet::new(),
            mma_acc: HashSet::new(),
            carried: HashMap::new(),
            fused_reads: HashMap::new(),
            fused: HashSet::new(),
            scalar,
        };
        crate::ir::walk_insts(&kernel.body, &mut |inst: &'k Inst| {
            for r in &inst.results {
                a.defs[r.0 as usize] = Some(inst);
            }
            if let Op::For { init, body, .. } = &inst.op {
                for ((arg, i), y) in body.args[1..].iter().zip(init).zip(yields(body)) {
                    a.carried.insert(*arg, (*i, y));
                }
            }
            for o in inst.op.operands() {
                a.used[o.0 as usize] = true;
            }
        });
        a.find_broadcast_back();
        a.find_fused_reads();
        for round in 0.. {
            a.natural.iter_mut().for_each(|x| *x = None);
            a.emit.iter_mut().for_each(Vec::clear);
            a.visited.clear();
            a.requests.clear();
            a.red_in.clear();
            a.forward(&kernel.body);
            a.request_block(&kernel.body, &[]);
            if round == 31 || !a.adopt() {
                break;
            }
        }
        a
    }

    /// Fills `broadcast_back`: for every `expand_dims(x, axis)`, the reductions along `axis`
    /// that `x` is computed from by elementwise ops.
    fn find_broadcast_back(&mut self) {
        let mut found = HashSet::new();
        crate::ir::walk_insts(&self.kernel.body, &mut |inst: &'k Inst| {
            let Op::ExpandDims(x, axis) = inst.op else { return };
            let mut stack = vec![x];
            let mut seen = HashSet::new();
            while let Some(v) = stack.pop() {
                if !seen.insert(v) {
                    continue;
                }
                match self.defs[v.0 as usize].map(|d| &d.op) {
                    Some(Op::Reduce { axis: a, .. }) if *a == axis => {
                        found.insert(v);
                    }
                    Some(op @ (Op::Unary(..) | Op::Binary(..) | Op::Cmp(..) | Op::Select(..) | Op::Cast(..))) => {
                        stack.extend(op.operands());
                    }
                    _ => {}
                }
            }
        });
        self.broadcast_back = found;
    }

    /// Fills `fused_reads` and `fused`: every staged operand of a tf32 mma dot that is a
    /// 2-D shared-buffer read of the operand's shape (or a cast of one to f32), used by that dot
    /// alone, read earlier in the same block with no copy into the buffer's region in between:
    /// the dot then loads its fragments from the buffer where the read would have loaded its
    /// registers, and the read and its cast are not emitted.
    fn find_fused_reads(&mut self) {
        let mut uses: HashMap<Value, usize> = HashMap::new();
        crate::ir::walk_insts(&self.kernel.body, &mut |inst: &'k Inst| {
            for o in inst.op.operands() {
                *uses.entry(o).or_default() += 1;
            }
        });
        let mut found = Vec::new();
        self.fused_reads_in(&self.kernel.body, &uses, &mut found);
        for (operand, read, at) in found {
            self.fused_reads.insert(read, at);
            self.fused.extend([operand, read]);
        }
    }

    /// [`Self::find_fused_reads`] in `block` and the blocks nested in it: `(operand, read,
    /// (buffer, stage))` of each fusable dot operand.
    fn fused_reads_in(
        &self,
        block: &'k Block,
        uses: &HashMap<Value, usize>,
        found: &mut Vec<(Value, Value, (usize, Value))>,
    ) {
        for (j, inst) in block.insts.iter().enumerate() {
            for b in inst.op.blocks() {
                self.fused_reads_in(b, uses, found);
            }
            let Op::Dot { a, b, precision, .. } = inst.op else {
                continue;
            };
            let Some(p) = self.mma_plan(a, b, precision) else {
                continue;
            };
            if p.kind != super::mma::MmaKind::Tf32 || p.in_regs {
                continue;
            }
            for (operand, read, shape) in [(a, p.a.value, [p.m, p.k]), (b, p.b.value, [p.k, p.n])] {
                let Some(Op::SharedRead { buffer, stage }) = self.def(read).map(|d| &d.op) else {
                    continue;
                };
                let single = |v: Value| uses.get(&v).copied() == Some(1);
                let cast_of_read =
                    operand == read || matches!(self.def(operand).map(|d| &d.op), Some(Op::Cast(x, _)) if *x == read);
                let here = block.insts[..j].iter().position(|i| i.results.first() == Some(&read));
                let buf = &self.kernel.shared[*buffer];
                let ok = buf.shape == shape
                    && single(read)
                    && single(operand)
                    && cast_of_read
                    && here.is_some_and(|i| !self.copies_into(&block.insts[i + 1..j], buf.region(*buffer)));
                if ok {
                    found.push((operand, read, (*buffer, *stage)));
                }
            }
        }
    }

    /// True if one of `insts` (or an instruction nested in them) copies into shared region
    /// `region`.
    fn copies_into(&self, insts: &[Inst], region: usize) -> bool {
        insts.iter().any(|i| match &i.op {
            Op::CopyAsync { buffer, .. } => self.kernel.shared[*buffer].region(*buffer) == region,
            op => op.blocks().iter().any(|b| self.copies_into(&b.insts, region)),
        })
    }

    /// True if `v` is a shared-buffer read, or its cast, that an mma dot loads from the buffer
    /// directly: it has no registers and emits nothing.
    pub fn is_fused(&self, v: Value) -> bool {
        self.fused.contains(&v)
    }

    /// The scalar layout.
    pub fn scalar(&self) -> LayoutId {
        self.scalar
    }
    /// How `v` obtains its registers.
    pub fn kind(&self, v: Value) -> Kind {
        self.kind[v.0 as usize]
    }
    /// The layout a real value is computed in.
    pub fn natural(&self, v: Value) -> Option<LayoutId> {
        self.natural[v.0 as usize]
    }
    /// The layouts to produce at the definition of `v`: for a real value its natural layout
    /// first, then its conversions; for a remat value every requested layout.
    pub fn emitted(&self, v: Value) -> &[LayoutId] {
        &self.emit[v.0 as usize]
    }
    /// True if some op reads `v`.
    pub fn is_used(&self, v: Value) -> bool {
        self.used[v.0 as usize]
    }
    /// The instruction defining `v` (none for block arguments).
    pub fn def(&self, v: Value) -> Option<&'k Inst> {
        self.defs[v.0 as usize]
    }
    /// The layout with this id.
    pub fn layout(&self, id: LayoutId) -> &Layout {
        self.table.get(id)
    }

    fn ty(&self, v: Value) -> &'k Ty {
        self.kernel.ty(v)
    }

    /// The default layout for a value of type `ty`.
    pub fn default_layout(&mut self, ty: &Ty) -> LayoutId {
        if ty.rank() == 0 {
            return self.scalar;
        }
        self.table.intern(Layout::default_for(
            &ty.shape,
            dtype_bytes(ty.dtype),
            self.kernel.num_warps,
            16,
        ))
    }

    fn anchor(&mut self, ptr: Value, mask: Option<Value>, max_vec: usize) -> LayoutId {
        let ty = self.ty(ptr);
        if ty.rank() == 0 {
            return self.scalar;
        }
        let vec = self.axis.access_vec(self.kernel, ptr, mask).min(max_vec);
        let bytes = ty.dtype.pointee().map_or(8, |e| e.bytes());
        self.table
            .intern(Layout::default_with(&ty.shape, bytes, self.kernel.num_warps, vec, true))
    }

    fn natural_or_default(&mut self, v: Value) -> LayoutId {
        match self.natural(v) {
            Some(l) => l,
            None => self.default_layout(self.ty(v)),
        }
    }

    /// The layout a staged dot operand `v` is read in: its natural one, else the default for
    /// its shape, but for the transpose of a remat load (or of its casts) the transpose of the
    /// coalesced layout that load would be anchored in, so that it is issued in vectors (the
    /// staging stores take any layout): the default of the transposed shape runs across memory
    /// rows (H200: the verification's `[32, 32]` bf16 record tile took 16 two-byte loads per
    /// thread, and its launches were up to 11 % slower).
    fn staged_layout(&mut self, v: Value) -> LayoutId {
        if let Some(l) = self.natural(v) {
            return l;
        }
        let op = |x: Value| self.def(x).map(|d| &d.op);
        if let (Kind::View, Some(Op::Trans(src))) = (self.kind(v), op(v)) {
            // The load under the transpose, through remat casts (`x.cast::<f32>().trans()`).
            let mut src = *src;
            while let (Kind::Remat, Some(Op::Cast(x, _))) = (self.kind(src), op(src)) {
                src = *x;
            }
            if let (Kind::Remat, Some(Op::Load { ptr, mask, .. })) = (self.kind(src), op(src)) {
                let l = self.anchor(*ptr, *mask, 16);
                return self.table.intern(self.table.get(l).transposed());
            }
        }
        self.default_layout(self.ty(v))
    }

    /// The layout the reduction with result `r` reads its input in.
    pub fn reduce_input(&self, r: Value) -> LayoutId {
        self.red_in[&r]
    }

    /// True if `v` is a scalar or obtains its registers without a real tile (remat values and
    /// views of them): requesting it in any layout costs no conversion.
    fn is_cheap(&self, v: Value) -> bool {
        if self.ty(v).rank() == 0 {
            return true;
        }
        match self.kind(v) {
            Kind::Real => false,
            Kind::Remat => true,
            Kind::View => self.is_cheap(self.defs[v.0 as usize].expect("view has a definition").op.operands()[0]),
        }
    }

    /// True if the load `r` of `ptr` (with `mask`, `other`) is small and its operands are cheap.
    fn is_remat_load(&self, r: Value, ops: &[Value]) -> bool {
        let ty = self.ty(r);
        ty.rank() > 0
            && !self.no_remat.contains(&r)
            && ty.numel() * dtype_bytes(ty.dtype) <= SMALL_LOAD_BYTES
            && ops.iter().all(|o| self.is_cheap(*o))
    }

    /// Number of consecutive elements along the last dimension covered by the contiguous
    /// registers and then consecutive lanes of `l` (log2): how coalesced a warp's access is.
    fn coalesced_bits(l: &Layout) -> usize {
        let Some(last) = l.shape.len().checked_sub(1) else {
            return 0;
        };
        let k = l.contiguous_regs().trailing_zeros() as usize;
        k + l
            .lanes
            .iter()
            .enumerate()
            .take_while(|(j, b)| {
                **b == Some(Bit {
                    dim: last as u8,
                    bit: (k + j) as u8,
                })
            })
            .count()
    }

    /// The input layout of a reduction along `axis` of a value of shape `shape` whose result is
    /// wanted in `out`: `out` with the axis inserted, its low bits in registers when it is the
    /// contiguous dimension (up to 16 bytes), then in `out`'s replicated lanes, then in
    /// registers (up to 16 per thread for the tile), then in replicated warps, then registers.
    fn lift(&self, out: LayoutId, axis: usize, shape: &[usize], elem_bytes: usize) -> Layout {
        let o = self.table.get(out);
        let shift = |b: Bit| Bit {
            dim: if b.dim as usize >= axis { b.dim + 1 } else { b.dim },
            bit: b.bit,
        };
        let n = shape[axis].trailing_zeros() as usize;
        let mut axis_bits = (0..n).map(|b| Bit {
            dim: axis as u8,
            bit: b as u8,
        });
        let nvec = if axis + 1 == shape.len() {
            ((16 / elem_bytes.max(1)).max(1).trailing_zeros() as usize).min(n)
        } else {
            0
        };
        let mut regs: Vec<Bit> = axis_bits.by_ref().take(nvec).collect();
        regs.extend(o.regs.iter().map(|b| shift(*b)));
        let mut lanes: Vec<Option<Bit>> = o.lanes.iter().map(|b| b.map(shift)).collect();
        let mut warps: Vec<Option<Bit>> = o.warps.iter().map(|b| b.map(shift)).collect();
        for slot in lanes.iter_mut().filter(|s| s.is_none()) {
            *slot = axis_bits.next();
        }
        while regs.len() < 4 {
            match axis_bits.next() {
                Some(b) => regs.push(b),
                None => break,
            }
        }
        for slot in warps.iter_mut().filter(|s| s.is_none()) {
            *slot = axis_bits.next();
        }
        regs.extend(axis_bits);
        Layout {
            shape: shape.to_vec(),
            regs,
            lanes,
            warps,
        }
    }

    /// The tensor-core plan of the dot `a @ b`, if it runs on tensor cores. Its operands are
    /// read from registers ([`super::mma::register_operands`]) when both are tf32 loads (or
    /// casts of loads) contiguous along K, or A is another dot's accumulator that holds them
    /// (`holds_fragments`): then each thread has its own fragments (loaded in 16-byte
    /// runs), and the dot needs no staging and no barrier. Otherwise a staged operand
    /// that is a shared-buffer read ([`Self::is_fused`]) is loaded from its buffer.
    pub fn mma_plan(&self, a: Value, b: Value, precision: DotPrecision) -> Option<super::mma::MmaPlan> {
        let mut p = super::mma::plan_of(self.kernel, &|v| self.def(v), a, b, precision)?;
        if p.kind == super::mma::MmaKind::Tf32 && self.loaded_along(b, 0) {
            // A loaded along K, or an accumulator that holds the fragments (and which K bits
            // its warps hold).
            let a_bits = match self.loaded_along(a, 1) {
                true => Some(0),
                false => self.holds_fragments(a, (p.m, p.n, p.k)),
            };
            if let Some(bits) = a_bits {
                p.in_regs = super::mma::register_operands(p.m, p.n, p.k, self.kernel.num_warps, bits).is_some();
                p.k_warp_bits = if p.in_regs { bits } else { 0 };
            }
        }
        if !p.in_regs {
            let at = |st: super::mma::Staged| self.fused_reads.get(&st.value).copied();
            p = p.reading_buffers(at(p.a), at(p.b));
        }
        Some(p)
    }

    /// If `v` is the result of a tf32 tensor-core dot whose accumulator layout gives each thread
    /// the A fragments of the dot `[m, k] @ [k, n]` in registers (a
    /// [`super::mma::register_operands`] layout, up to the order of the registers), the K bits
    /// its warps hold there (`register_operands`' `k_warp_bits`): the accumulator is then the
    /// next product's A with no staging (its K permuted within each k-step as the register
    /// operands permute it, B the same way), as attention chains its two products.
    fn holds_fragments(&self, v: Value, (m, n, k): (usize, usize, usize)) -> Option<u32> {
        let Some(Op::Dot { a, b, precision, .. }) = self.def(v).map(|d| &d.op) else {
            return None;
        };
        let p = self
            .mma_plan(*a, *b, *precision)
            .filter(|p| p.kind == super::mma::MmaKind::Tf32)?;
        let nw = self.kernel.num_warps;
        let acc = p.acc_layout(nw);
        // The K bits the accumulator's warps hold where the next dot splits K over warps.
        let next = super::mma::acc_layout(m, n, nw, super::mma::MmaKind::Tf32, false);
        let mut bits = 0u32;
        for w in super::mma::k_group_warps(&next, k, super::mma::MmaKind::Tf32) {
            match acc.warps.get(w).copied().flatten() {
                Some(b) if b.dim == 1 => bits |= 1 << b.bit,
                _ => return None,
            }
        }
        let (la, _) = super::mma::register_operands(m, n, k, nw, bits)?;
        super::layout::in_warp_plan(&acc, &la).filter(|w| w.local).map(|_| bits)
    }

    /// True if `v` is a load, or a cast of one, whose addresses run on in steps of one element
    /// along dimension `dim` for at least 4 elements; or a loop-carried value whose initial
    /// and next values are (a software-pipelined load).
    fn loaded_along(&self, v: Value, dim: usize) -> bool {
        self.loaded_along_from(v, dim, &mut Vec::new())
    }

    /// [`Self::loaded_along`], with the carried values already followed in `seen` (a loop that
    /// yields a carried value unchanged, or swaps two, adds no other source).
    fn loaded_along_from(&self, v: Value, dim: usize, seen: &mut Vec<Value>) -> bool {
        if let Some(&(init, next)) = self.carried.get(&v) {
            if seen.contains(&v) {
                return true;
            }
            seen.push(v);
            return self.loaded_along_from(init, dim, seen) && self.loaded_along_from(next, dim, seen);
        }
        let src = match self.def(v).map(|d| &d.op) {
            Some(Op::Cast(x, _)) => *x,
            _ => v,
        };
        match self.def(src).map(|d| &d.op) {
            Some(Op::Load { ptr, .. }) => self.axis.get(self.kernel, *ptr).contig[dim] >= 4,
            Some(Op::SharedRead { .. }) => true,
            _ => false,
        }
    }

    /// The layout a scan runs in (its input's, when that one suits scans).
    pub fn scan_input(&mut self, v: Value, axis: usize) -> LayoutId {
        match self.natural(v) {
            Some(l) if self.table.get(l).is_scan_compatible(axis) => l,
            _ => self
                .table
                .intern(Layout::for_scan(&self.ty(v).shape, axis, self.kernel.num_warps)),
        }
    }

    /// The layout a store operates in.
    pub fn store_layout(&mut self, ptr: Value, value: Value, mask: Option<Value>) -> LayoutId {
        match self.natural(value) {
            Some(l) => l,
            None => self.anchor(ptr, mask, 16),
        }
    }

    /// The layout an asynchronous copy operates in: a coalesced load's, but with vectors as
    /// wide as the access allows (up to 16 bytes) even where the tile then has fewer vectors
    /// than the program has threads (the others idle): a `cp.async` copies at least 4 bytes,
    /// and a thread's narrower part would be loaded and stored at once, its load's latency
    /// waited for in line (H200: the fold's drafts' `[8, 16]` bf16 tiles, one element per
    /// thread, held 11 % of its flushing launch's stall samples).
    pub fn copy_layout(&mut self, ptr: Value, mask: Option<Value>) -> LayoutId {
        let ty = self.ty(ptr);
        if ty.rank() == 0 {
            return self.scalar;
        }
        let bytes = ty.dtype.pointee().map_or(8, |e| e.bytes());
        let vec = self.axis.access_vec(self.kernel, ptr, mask).min(16 / bytes).max(1);
        self.table.intern(Layout::blocked_with(
            &ty.shape,
            self.kernel.num_warps,
            crate::backend::layout::prev_pow2(vec),
            true,
        ))
    }

    /// The layout a prefetch operates in: each thread's registers run over up to one
    /// [`PREFETCH_LINE`] of consecutive addresses (one prefetch each).
    pub fn prefetch_layout(&mut self, ptr: Value, mask: Option<Value>) -> LayoutId {
        let ty = self.ty(ptr);
        if ty.rank() == 0 {
            return self.scalar;
        }
        let run = self.axis.contiguous_run(self.kernel, ptr, mask, PREFETCH_LINE);
        let threads = 32 * self.kernel.num_warps as usize;
        let per_thread = (ty.shape.iter().product::<usize>() / threads).max(1);
        let vec = crate::backend::layout::prev_pow2(run.min(per_thread));
        self.table
            .intern(Layout::blocked_with(&ty.shape, self.kernel.num_warps, vec, true))
    }

    /// The layout in which a view's source is read when the view is wanted in `l`.
    pub fn view_source(&mut self, inst: &Inst, l: LayoutId) -> (Value, LayoutId) {
        let layout = self.table.get(l).clone();
        let (src, out) = match &inst.op {
            Op::Broadcast(x) => {
                let src = &self.ty(*x).shape;
                let dims: Vec<usize> = (0..src.len()).filter(|&d| src[d] == 1 && layout.shape[d] > 1).collect();
                (*x, layout.without_dims(&dims, src))
            }
            Op::ExpandDims(x, axis) => (*x, layout.delete_dim(*axis)),
            Op::Trans(x) => (*x, layout.transposed()),
            Op::Reshape(x) => (*x, layout.reshaped(&self.ty(*x).shape)),
            op => unreachable!("{} is not a view", op.mnemonic()),
        };
        (src, self.table.intern(out))
    }

    /// The layout every operand of a real op (or a store, loop or branch) is read in.
    pub fn operand_layouts(&mut self, inst: &Inst) -> Vec<(Value, LayoutId)> {
        let res = inst.results.first().and_then(|r| self.natural(*r));
        let all = |l: LayoutId| inst.op.operands().into_iter().map(|v| (v, l)).collect();
        match &inst.op {
            Op::Unary(..)
            | Op::Binary(..)
            | Op::Cmp(..)
            | Op::Select(..)
            | Op::Cast(..)
            | Op::AddPtr(..)
            | Op::Load { .. }
            | Op::Atomic { .. } => all(res.expect("real op has a layout")),
            Op::Store { ptr, value, mask } => {
                let l = self.store_layout(*ptr, *value, *mask);
                all(l)
            }
            Op::Prefetch { ptr, mask } => {
                let l = self.prefetch_layout(*ptr, *mask);
                all(l)
            }
            Op::CopyAsync { stage, ptr, mask, .. } => {
                let l = self.copy_layout(*ptr, *mask);
                let mut v = vec![(*stage, self.scalar), (*ptr, l)];
                v.extend(mask.map(|m| (m, l)));
                v
            }
            Op::SharedRead { stage, .. } => vec![(*stage, self.scalar)],
            Op::SetCondition { handle, value } => vec![(*handle, self.scalar), (*value, self.scalar)],
            Op::Reduce { value, .. } => vec![(*value, self.reduce_input(inst.results[0]))],
            Op::Scan { value, axis, .. } => vec![(*value, self.scan_input(*value, *axis))],
            Op::Dot { a, b, acc, precision } => {
                // An mma dot reads its operands in registers, or stages the 16-bit sources of
                // operands cast to f32.
                let plan = self.mma_plan(*a, *b, *precision);
                if plan.is_some() {
                    self.mma_acc.extend(res);
                }
                let (a, b) = match plan {
                    // Operands read from a shared buffer need only their stage.
                    Some(p) if p.a.buffer.is_some() || p.b.buffer.is_some() => {
                        let mut want = |st: super::mma::Staged| match st.buffer {
                            Some((_, stage)) => (stage, self.scalar),
                            None => (st.value, self.staged_layout(st.value)),
                        };
                        return vec![want(p.a), want(p.b), (*acc, res.expect("dot has a layout"))];
                    }
                    Some(p) if p.in_regs => {
                        let (la, lb) =
                            super::mma::register_operands(p.m, p.n, p.k, self.kernel.num_warps, p.k_warp_bits)
                                .expect("planned in registers");
                        let (la, lb) = (self.table.intern(la), self.table.intern(lb));
                        self.operand_regs.extend([la, lb]);
                        return vec![(*a, la), (*b, lb), (*acc, res.expect("dot has a layout"))];
                    }
                    Some(p) => (p.a.value, p.b.value),
                    None => (*a, *b),
                };
                let (la, lb) = (self.staged_layout(a), self.staged_layout(b));
                vec![(a, la), (b, lb), (*acc, res.expect("dot has a layout"))]
            }
            Op::For { lo, hi, step, init, .. } => {
                let mut v = vec![(*lo, self.scalar), (*hi, self.scalar), (*step, self.scalar)];
                v.extend(
                    init.iter()
                        .zip(&inst.results)
                        .map(|(i, r)| (*i, self.natural(*r).expect("carried layout"))),
                );
                v
            }
            Op::If { cond, .. } => vec![(*cond, self.scalar)],
            _ => vec![],
        }
    }

    fn set_real(&mut self, v: Value, l: LayoutId) {
        let i = v.0 as usize;
        self.kind[i] = Kind::Real;
        self.natural[i] = Some(l);
        self.emit[i] = vec![l];
    }

    fn forward(&mut self, block: &Block) {
        for inst in &block.insts {
            let r = inst.results.first().copied();
            let rank = r.map_or(0, |r| self.ty(r).rank());
            match &inst.op {
                Op::Param(_) | Op::ProgramId(_) | Op::NumPrograms(_) => self.set_real(r.unwrap(), self.scalar),
                Op::Const(_) | Op::Arange | Op::Splat(_) if rank > 0 => self.kind[r.unwrap().0 as usize] = Kind::Remat,
                Op::Const(_) | Op::Arange | Op::Splat(_) => self.set_real(r.unwrap(), self.scalar),
                Op::Broadcast(_) | Op::ExpandDims(..) | Op::Trans(_) | Op::Reshape(_) => {
                    let r = r.unwrap();
                    self.kind[r.0 as usize] = Kind::View;
                    let src = inst.op.operands()[0];
                    let nat = match (&inst.op, self.natural(src)) {
                        (Op::ExpandDims(_, axis), Some(l)) => Some(self.table.get(l).insert_dim(*axis)),
                        (Op::Trans(_), Some(l)) => Some(self.table.get(l).transposed()),
                        (Op::Reshape(_), Some(l)) => Some(self.table.get(l).reshaped(&self.ty(r).shape)),
                        _ => None,
                    };
                    self.natural[r.0 as usize] = nat.map(|l| self.table.intern(l));
                }
                Op::Unary(..) | Op::Binary(..) | Op::Cmp(..) | Op::Select(..) | Op::Cast(..) | Op::AddPtr(..) => {
                    let r = r.unwrap();
                    if rank == 0 {
                        self.set_real(r, self.scalar);
                    } else if let Some(l) = inst.op.operands().into_iter().find_map(|v| self.natural(v)) {
                        let l = self.pref.get(&r).copied().unwrap_or(l);
                        self.set_real(r, l);
                    } else if costly(&inst.op) {
                        let l = match self.pref.get(&r) {
                            Some(l) => *l,
                            None => self.default_layout(self.ty(r)),
                        };
                        self.set_real(r, l);
                    } else {
                        self.kind[r.0 as usize] = Kind::Remat;
                    }
                }
                Op::Load { ptr, mask, .. } => {
                    let r = r.unwrap();
                    if self.is_remat_load(r, &inst.op.operands()) {
                        self.kind[r.0 as usize] = Kind::Remat;
                        continue;
                    }
                    let l = match self.pref.get(&r) {
                        Some(l) => *l,
                        None => self.anchor(*ptr, *mask, 16),
                    };
                    self.set_real(r, l);
                }
                Op::SharedRead { .. } => {
                    // Shared memory is read in whatever layout the users agree on.
                    let r = r.unwrap();
                    let l = match self.pref.get(&r) {
                        Some(l) => *l,
                        None => self.default_layout(self.ty(r)),
                    };
                    self.set_real(r, l);
                }
                Op::Reduce { value, axis, .. } => {
                    let r0 = r.unwrap();
                    // A result whose layout a consumer asked for is the plain slice of the
                    // lifted input, as is one broadcast back along the axis; otherwise the
                    // reduction scatters its result over the lanes.
                    let (l, scatter) = match (self.natural(*value), self.red_pref.get(&r0).copied()) {
                        (Some(l), _) => (l, !self.broadcast_back.contains(&r0)),
                        (None, Some(o)) => {
                            let ty = self.ty(*value);
                            let lifted = self.lift(o, *axis, &ty.shape, dtype_bytes(ty.dtype));
                            (self.table.intern(lifted), false)
                        }
                        (None, None) => (self.default_layout(self.ty(*value)), !self.broadcast_back.contains(&r0)),
                    };
                    self.red_in.insert(r0, l);
                    let input = self.table.get(l);
                    let out = if scatter {
                        input.scatter_slice(*axis)
                    } else {
                        input.slice(*axis)
                    };
                    let out = self.table.intern(out);
                    self.set_real(r.unwrap(), out);
                }
                Op::Scan { value, axis, .. } => {
                    let l = self.scan_input(*value, *axis);
                    self.set_real(r.unwrap(), l);
                }
                Op::Dot { a, b, acc, precision } => {
                    let l = match self.mma_plan(*a, *b, *precision) {
                        Some(p) => self.table.intern(p.acc_layout(self.kernel.num_warps)),
                        None => self.natural_or_default(*acc),
                    };
                    self.set_real(r.unwrap(), l);
                }
                Op::Atomic { value, .. } => {
                    let r = r.unwrap();
                    let l = match self.natural(*value) {
                        Some(l) => l,
                        None if rank == 0 => self.scalar,
                        None => {
                            let ty = self.ty(r);
                            self.table.intern(Layout::default_for(
                                &ty.shape,
                                dtype_bytes(ty.dtype),
                                self.kernel.num_warps,
                                1,
                            ))
                        }
                    };
                    self.set_real(r, l);
                }
                Op::For { init, body, .. } => {
                    let mut carried: Vec<LayoutId> = init.iter().map(|v| self.natural_or_default(*v)).collect();
                    for pass in 0..2 {
                        self.set_real(body.args[0], self.scalar);
                        for (a, l) in body.args[1..].iter().zip(&carried) {
                            self.set_real(*a, *l);
                        }
                        self.forward(body);
                        let mut changed = false;
                        for (i, y) in yields(body).iter().enumerate() {
                            if let Some(l) = self.natural(*y) {
                                if l != carried[i] && pass == 0 {
                                    carried[i] = l;
                                    changed = true;
                                }
                            }
                        }
                        if !changed {
                            break;
                        }
                    }
                    for (res, l) in inst.results.iter().zip(carried) {
                        self.set_real(*res, l);
                    }
                }
                Op::If {
                    then_block, else_block, ..
                } => {
                    self.forward(then_block);
                    self.forward(else_block);
                    let (ty, ey) = (yields(then_block), yields(else_block));
                    for (i, res) in inst.results.iter().enumerate() {
                        let l = match self.natural(ty[i]).or(self.natural(ey[i])) {
                            Some(l) => l,
                            None => self.default_layout(self.ty(*res)),
                        };
                        self.set_real(*res, l);
                    }
                }
                Op::Store { .. }
                | Op::Prefetch { .. }
                | Op::CopyAsync { .. }
                | Op::WaitAsync(_)
                | Op::SetCondition { .. }
                | Op::Yield(_) => {}
            }
        }
    }

    fn request_block(&mut self, block: &Block, yield_to: &[LayoutId]) {
        for inst in &block.insts {
            if let Some(r) = inst.results.first() {
                if self.kind(*r) != Kind::Real {
                    continue;
                }
            }
            match &inst.op {
                Op::Yield(vs) => {
                    for (v, l) in vs.iter().zip(yield_to) {
                        self.request(*v, *l);
                    }
                    continue;
                }
                Op::For { body, .. } => {
                    let carried: Vec<LayoutId> = inst.results.iter().map(|r| self.natural(*r).unwrap()).collect();
                    self.request_block(body, &carried);
                }
                Op::If {
                    then_block, else_block, ..
                } => {
                    let res: Vec<LayoutId> = inst.results.iter().map(|r| self.natural(*r).unwrap()).collect();
                    self.request_block(then_block, &res);
                    self.request_block(else_block, &res);
                }
                _ => {}
            }
            for (v, l) in self.operand_layouts(inst) {
                self.request(v, l);
            }
        }
    }

    fn request(&mut self, v: Value, l: LayoutId) {
        let mut stack = vec![(v, l)];
        while let Some((v, l)) = stack.pop() {
            if !self.visited.insert((v, l)) {
                continue;
            }
            let i = v.0 as usize;
            match self.kind[i] {
                Kind::Real => {
                    if self.natural[i] != Some(l) {
                        self.emit[i].push(l);
                    }
                    if self.ty(v).rank() > 0 {
                        self.requests.entry(v).or_default().push(l);
                    }
                }
                Kind::Remat => {
                    self.emit[i].push(l);
                    if let Some(Op::Load { .. }) = self.defs[i].map(|d| &d.op) {
                        self.requests.entry(v).or_default().push(l);
                    }
                    let def = self.defs[i].expect("remat value has a definition");
                    for o in def.op.operands() {
                        let ol = if self.ty(o).rank() == 0 { self.scalar } else { l };
                        stack.push((o, ol));
                    }
                }
                Kind::View => {
                    let def = self.defs[i].expect("view has a definition");
                    stack.push(self.view_source(def, l));
                }
            }
        }
    }

    /// Lets real values whose users all request one other layout produce it directly (see the
    /// module doc); true if any decision changed.
    fn adopt(&mut self) -> bool {
        let mut changed = false;
        let mut vals: Vec<(Value, Vec<LayoutId>)> = self.requests.iter().map(|(v, r)| (*v, r.clone())).collect();
        vals.sort_by_key(|(v, _)| *v);
        // Reductions first: their choice changes what their inputs' producers are asked for.
        for (v, reqs) in &vals {
            let want = reqs[0];
            if let Some(Op::Reduce { value, .. }) = self.defs[v.0 as usize].map(|d| &d.op) {
                if self.natural(*value).is_none()
                    && reqs.iter().all(|l| *l == want)
                    && self.natural(*v) != Some(want)
                    && !self.adopted.contains(v)
                {
                    self.adopted.insert(*v);
                    self.red_pref.insert(*v, want);
                    changed = true;
                }
            }
        }
        if changed {
            return true;
        }
        for (v, mut reqs) in vals {
            if self.carried.contains_key(&v) && !self.adopted.contains(&v) {
                // A loop-carried value is also asked for in the layout it is carried in, by the
                // yield that carries it on unchanged: that request follows the others.
                reqs.retain(|l| Some(*l) != self.natural(v));
                if reqs.is_empty() {
                    continue;
                }
            }
            let want = reqs[0];
            let agree = reqs.iter().all(|l| *l == want);
            if self.kind(v) == Kind::Remat {
                let ty = self.ty(v);
                let per_thread = ty.numel() / (32 * self.kernel.num_warps as usize);
                if !agree
                    && (ty.numel() * dtype_bytes(ty.dtype) > MULTI_LAYOUT_LOAD_BYTES
                        || per_thread > MULTI_LAYOUT_LOAD_ELEMS)
                {
                    self.no_remat.insert(v);
                    changed = true;
                }
                continue;
            }
            if !agree || self.natural(v) == Some(want) || self.adopted.contains(&v) {
                continue;
            }
            let Some(def) = self.defs[v.0 as usize] else {
                // A loop-carried value wanted in one other layout: its initial and next values
                // (loads) are asked to produce it, and the loop then carries it.
                if let Some(&(init, next)) = self.carried.get(&v) {
                    for x in [init, next] {
                        if self.is_load_adopting(x, want) && self.pref.insert(x, want) != Some(want) {
                            changed = true;
                        }
                    }
                    self.adopted.insert(v);
                }
                continue;
            };
            let ok = match &def.op {
                Op::Load { .. } => self.is_load_adopting(v, want),
                Op::SharedRead { .. } => true,
                Op::Unary(..) | Op::Binary(..) | Op::Cmp(..) | Op::Select(..) | Op::Cast(..) | Op::AddPtr(..) => {
                    // At most one operand pays a conversion instead of the result.
                    def.op.operands().iter().filter(|o| !self.is_cheap(**o)).count() <= 1
                }
                _ => false,
            };
            if ok {
                self.adopted.insert(v);
                self.pref.insert(v, want);
                changed = true;
            }
        }
        changed
    }

    /// True if the real load `v` may produce layout `want` instead of its natural one: its
    /// accesses stay as wide, and as coalesced (runs of 64 bytes, whole sectors, for the
    /// register operands of mma dots); or `want` is an mma dot's accumulator layout, read in
    /// accesses of at least 8 bytes and runs of whole 32-byte sectors (the same memory
    /// traffic, and no conversion through shared memory).
    fn is_load_adopting(&self, v: Value, want: LayoutId) -> bool {
        let (Some(Op::Load { .. }), Some(nat)) = (self.defs[v.0 as usize].map(|d| &d.op), self.natural(v)) else {
            return false;
        };
        let (nat, new) = (self.table.get(nat), self.table.get(want));
        let bytes = dtype_bytes(self.ty(v).dtype);
        let sector_runs = new.contiguous_regs() * bytes >= 8 && (bytes << Self::coalesced_bits(new)) >= 32;
        (new.contiguous_regs() >= nat.contiguous_regs()
            && (Self::coalesced_bits(new) >= Self::coalesced_bits(nat).min(5) || self.operand_regs.contains(&want)))
            || (self.mma_acc.contains(&want) && sector_runs)
    }

    /// The IR annotated with each value's layout kind, natural layout and conversions, followed
    /// by the layouts used.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        self.describe_block(&mut s, &self.kernel.body, 1);
        s.push_str("layouts:\n");
        for (id, l) in self.table.iter() {
            let _ = writeln!(s, "  #{} = {l}", id.0);
        }
        s
    }

    fn describe_block(&self, s: &mut String, block: &Block, depth: usize) {
        let pad = "  ".repeat(depth);
        for a in &block.args {
            let _ = writeln!(s, "{pad}arg %{}: {} {}", a.0, self.ty(*a), self.describe_value(*a));
        }
        for inst in &block.insts {
            let ops: Vec<String> = inst.op.operands().iter().map(|o| format!("%{}", o.0)).collect();
            let res: Vec<String> = inst
                .results
                .iter()
                .map(|r| format!("%{}: {} {}", r.0, self.ty(*r), self.describe_value(*r)))
                .collect();
            let _ = writeln!(
                s,
                "{pad}{}{} {}",
                if res.is_empty() {
                    String::new()
                } else {
                    format!("{} = ", res.join(", "))
                },
                inst.op.mnemonic(),
                ops.join(", ")
            );
            for b in inst.op.blocks() {
                self.describe_block(s, b, depth + 1);
            }
        }
    }

    fn describe_value(&self, v: Value) -> String {
        let ids = |ls: &[LayoutId]| ls.iter().map(|l| format!("#{}", l.0)).collect::<Vec<_>>().join(",");
        let e = self.emitted(v);
        match self.kind(v) {
            Kind::Real if e.len() > 1 => format!("@#{} convert->{}", e[0].0, ids(&e[1..])),
            Kind::Real => format!("@#{}", e.first().map_or(0, |l| l.0)),
            Kind::Remat => format!("remat@{}", ids(e)),
            Kind::View => "view".to_string(),
        }
    }
}

/// The values a block yields (empty if it ends without a `Yield`).
pub fn yields(block: &Block) -> Vec<Value> {
    match block.insts.last().map(|i| &i.op) {
        Some(Op::Yield(vs)) => vs.clone(),
        _ => vec![],
    }
}
