//! Running a launch: blocks one after another; in a block, each thread interprets
//! instructions with its own PC until it reaches a warp collective, a barrier or its end.
//! A collective runs once every lane of its warp waits at it; a barrier releases once every
//! live thread of the block waits at one.
//!
//! `cp.async` copies queue per thread, in groups, and happen (reading global memory then)
//! only when a `cp.async.wait_group`/`wait_all` of that thread completes their group; neither
//! `bar.sync` nor the thread's exit performs them (an exited thread's pending copies never
//! land). Until then their shared bytes are in flight, and any thread of the block reading
//! them is an error.

use crate::error::EmuError;
use crate::float;
use crate::inst::*;
use crate::memory::{read_le, write_le, Global, Shared};
use crate::parse::Function;
use crate::warp;
use std::collections::VecDeque;

/// Where a thread stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    /// Runnable.
    Ready,
    /// Waiting at a warp collective (its PC points at it).
    Coll,
    /// Waiting at `bar.sync` (its PC points at it).
    Bar,
    /// Done.
    Exit,
}

/// A `cp.async` issued and not yet performed.
struct AsyncCopy {
    /// Shared destination of `bytes` bytes.
    dst: u64,
    /// Global source of `src_bytes` bytes (the rest of `bytes` is zero-filled).
    src: u64,
    bytes: u32,
    src_bytes: u32,
    /// The `cp.async` instruction's index, for errors.
    pc: usize,
}

/// A thread's pending `cp.async` copies.
#[derive(Default)]
struct Copies {
    /// Issued since the last commit.
    open: Vec<AsyncCopy>,
    /// Committed groups, oldest first.
    groups: VecDeque<Vec<AsyncCopy>>,
}

/// One launch's fixed inputs.
pub(crate) struct Launch<'a> {
    pub f: &'a Function,
    pub params: &'a [u64],
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Bytes of dynamic shared memory (behind an `.extern .shared` array).
    pub dynamic_shared: u32,
    /// The graph conditions this launch set, and the thread that set each.
    pub condition_setters: std::cell::RefCell<std::collections::HashMap<u64, Setter>>,
}

/// The thread that set a graph condition: `%ctaid`, `%tid`.
pub(crate) type Setter = ([u32; 3], [u32; 3]);

/// A block's mutable state.
struct Cta {
    ctaid: [u32; 3],
    regs: Vec<u64>,
    pcs: Vec<u32>,
    st: Vec<St>,
    shared: Shared,
    /// Each thread's pending `cp.async` copies.
    copies: Vec<Copies>,
    nregs: usize,
    /// Times each instruction ran, summed over threads (by instruction index).
    hits: Vec<u64>,
}

#[inline(always)]
fn rd(regs: &[u64], s: Src) -> u64 {
    match s {
        Src::Reg(r) => regs[r as usize],
        Src::Imm(v) => v,
    }
}

/// The `len` bytes at `at` in `space`, or why they are out of bounds.
#[inline(always)]
fn space_slice<'m>(
    space: Space,
    global: &'m mut Global,
    shared: &'m mut Shared,
    at: u64,
    len: u32,
) -> Result<&'m mut [u8], String> {
    match space {
        Space::Global => global.slice(at, len),
        Space::Shared => shared.slice(at, len),
    }
}

/// `%tid` of linear thread `t` in a block of shape `b`.
pub(crate) fn tid_of(t: usize, b: [u32; 3]) -> [u32; 3] {
    let t = t as u32;
    [t % b[0], (t / b[0]) % b[1], t / (b[0] * b[1])]
}

impl Launch<'_> {
    /// Runs every block; returns how many times each instruction ran, summed over threads (by
    /// instruction index).
    pub(crate) fn run(&self, global: &mut Global) -> Result<Vec<u64>, EmuError> {
        let nthreads = self.block.iter().product::<u32>() as usize;
        let nwarps = nthreads.div_ceil(32);
        let nregs = self.f.nregs as usize;
        let mut cta = Cta {
            ctaid: [0; 3],
            regs: vec![0; nwarps * 32 * nregs],
            pcs: vec![0; nwarps * 32],
            st: vec![St::Ready; nwarps * 32],
            shared: Shared::new(self.f.shared_bytes + self.dynamic_shared),
            copies: (0..nwarps * 32).map(|_| Copies::default()).collect(),
            nregs,
            hits: vec![0; self.f.insts.len()],
        };
        for z in 0..self.grid[2] {
            for y in 0..self.grid[1] {
                for x in 0..self.grid[0] {
                    cta.ctaid = [x, y, z];
                    cta.regs.fill(0);
                    cta.pcs.fill(0);
                    for (t, s) in cta.st.iter_mut().enumerate() {
                        *s = if t < nthreads { St::Ready } else { St::Exit };
                    }
                    if x + y + z > 0 {
                        cta.shared.reset();
                        cta.copies.fill_with(Copies::default);
                    }
                    self.run_cta(&mut cta, global)?;
                }
            }
        }
        Ok(cta.hits)
    }

    fn sync_err(&self, cta: &Cta, pc: u32, message: String) -> EmuError {
        EmuError::Sync {
            line: self.f.lines[pc as usize],
            inst: self.f.texts[pc as usize].clone(),
            block: cta.ctaid,
            message,
        }
    }

    fn run_cta(&self, cta: &mut Cta, global: &mut Global) -> Result<(), EmuError> {
        let nwarps = cta.st.len() / 32;
        loop {
            for w in 0..nwarps {
                self.run_warp(cta, w, global)?;
            }
            let waiting: Vec<usize> = (0..cta.st.len()).filter(|&t| cta.st[t] == St::Bar).collect();
            if waiting.is_empty() {
                return Ok(());
            }
            for t in waiting {
                cta.st[t] = St::Ready;
                cta.pcs[t] += 1;
            }
        }
    }

    /// Runs warp `w` until all its threads wait at a barrier or have exited.
    fn run_warp(&self, cta: &mut Cta, w: usize, global: &mut Global) -> Result<(), EmuError> {
        loop {
            for t in w * 32..(w + 1) * 32 {
                if cta.st[t] == St::Ready {
                    cta.st[t] = self.run_thread(cta, t, global)?;
                }
            }
            let lanes = &cta.st[w * 32..(w + 1) * 32];
            let Some(first) = lanes.iter().position(|&s| s == St::Coll) else {
                return Ok(());
            };
            let pc = cta.pcs[w * 32 + first];
            if let Some(l) = (0..32).find(|&l| lanes[l] != St::Coll || cta.pcs[w * 32 + l] != pc) {
                let why = match lanes[l] {
                    St::Exit => "has exited".to_string(),
                    St::Bar => format!(
                        "waits at bar.sync (line {})",
                        self.f.lines[cta.pcs[w * 32 + l] as usize]
                    ),
                    _ => format!(
                        "waits at another collective (line {})",
                        self.f.lines[cta.pcs[w * 32 + l] as usize]
                    ),
                };
                return Err(self.sync_err(
                    cta,
                    pc,
                    format!(
                        "warp {w} diverged at a warp collective: lane {first} waits here, lane {l} {why} (all 32 lanes must execute it together)"
                    ),
                ));
            }
            self.collective(cta, w, pc, global)?;
            for t in w * 32..(w + 1) * 32 {
                cta.st[t] = St::Ready;
                cta.pcs[t] = pc + 1;
            }
        }
    }

    fn collective(&self, cta: &mut Cta, w: usize, pc: u32, _global: &mut Global) -> Result<(), EmuError> {
        let n = cta.nregs;
        let regs = &mut cta.regs[w * 32 * n..(w + 1) * 32 * n];
        match self.f.insts[pc as usize].op {
            Op::Shfl {
                mode,
                d,
                dp,
                a,
                b,
                c,
                mask,
            } => {
                if let Some(l) = (0..32).find(|&l| rd(&regs[l * n..], mask) as u32 != u32::MAX) {
                    return Err(self.sync_err(
                        cta,
                        pc,
                        format!("lane {l}: only the full member mask 0xffffffff is supported"),
                    ));
                }
                warp::shfl(regs, n, mode, d, dp, a, b, c);
                Ok(())
            }
            Op::Mma { kind, d, a, b, c } => {
                warp::mma(regs, n, kind, d, a, b, c);
                Ok(())
            }
            Op::Ldmatrix { n: m, trans, d, addr } => {
                warp::ldmatrix(regs, n, &cta.shared, m, trans, d, addr).map_err(|(lane, at, detail)| {
                    let t = w * 32 + lane;
                    self.mem_err(cta.ctaid, t, pc as usize, "shared", at, 16, detail)
                })
            }
            _ => unreachable!("not a collective"),
        }
    }

    #[allow(clippy::too_many_arguments)]
    #[cold]
    fn mem_err(
        &self,
        ctaid: [u32; 3],
        t: usize,
        pc: usize,
        space: &'static str,
        addr: u64,
        bytes: u32,
        detail: String,
    ) -> EmuError {
        EmuError::Memory {
            line: self.f.lines[pc],
            inst: self.f.texts[pc].clone(),
            space,
            addr,
            bytes,
            detail,
            block: ctaid,
            thread: tid_of(t, self.block),
        }
    }

    /// Performs thread `t`'s copies of a `cp.async` group, in issue order: reads their global
    /// bytes now and writes shared memory.
    fn land(
        &self,
        ctaid: [u32; 3],
        t: usize,
        group: Vec<AsyncCopy>,
        global: &mut Global,
        shared: &mut Shared,
    ) -> Result<(), EmuError> {
        for c in group {
            let mut data = [0u8; 16];
            if c.src_bytes > 0 {
                let m = global
                    .slice_aligned(c.src, c.src_bytes, c.bytes)
                    .map_err(|e| self.mem_err(ctaid, t, c.pc, "global", c.src, c.src_bytes, e))?;
                data[..m.len()].copy_from_slice(m);
            }
            shared.land(c.dst, &data[..c.bytes as usize]);
        }
        Ok(())
    }

    /// Interprets thread `t` from its PC to its next stop (counting each instruction in the
    /// block's hits); returns the stop.
    fn run_thread(&self, cta: &mut Cta, t: usize, global: &mut Global) -> Result<St, EmuError> {
        let n = cta.nregs;
        let ctaid = cta.ctaid;
        let regs = &mut cta.regs[t * n..(t + 1) * n];
        let shared = &mut cta.shared;
        let copies = &mut cta.copies[t];
        let insts = &self.f.insts[..];
        let hits = &mut cta.hits;
        let mut pc = cta.pcs[t] as usize;
        let stop = loop {
            let inst = &insts[pc];
            hits[pc] += 1;
            if let Some((p, neg)) = inst.guard {
                if (regs[p as usize] != 0) == neg {
                    pc += 1;
                    continue;
                }
            }
            match inst.op {
                Op::Mov { d, a, bits } => {
                    let v = rd(regs, a);
                    regs[d as usize] = if bits >= 64 { v } else { v & ((1u64 << bits) - 1) };
                }
                Op::Pack { d, parts, n: k, part } => {
                    let m = (1u64 << part) - 1;
                    let mut v = 0;
                    for (i, s) in parts.iter().take(k as usize).enumerate() {
                        v |= (rd(regs, *s) & m) << (part * i as u32);
                    }
                    regs[d as usize] = v;
                }
                Op::Unpack { d, a, n: k, part } => {
                    let (v, m) = (rd(regs, a), (1u64 << part) - 1);
                    for (i, r) in d.iter().take(k as usize).enumerate() {
                        regs[*r as usize] = (v >> (part * i as u32)) & m;
                    }
                }
                Op::Sreg { d, s } => {
                    let tid = tid_of(t, self.block);
                    regs[d as usize] = match s {
                        Sreg::Tid(i) => tid[i as usize],
                        Sreg::Ntid(i) => self.block[i as usize],
                        Sreg::Ctaid(i) => ctaid[i as usize],
                        Sreg::Nctaid(i) => self.grid[i as usize],
                        Sreg::Laneid => (t % 32) as u32,
                        Sreg::Warpid => (t / 32) as u32,
                    } as u64;
                }
                Op::Int { op, ty, d, a, b } => regs[d as usize] = int_op(op, ty, rd(regs, a), rd(regs, b)),
                Op::IntUn { op, ty, d, a } => regs[d as usize] = int_un(op, ty, rd(regs, a)),
                Op::MadLo { ty, d, a, b, c } => {
                    regs[d as usize] = ty.trunc(rd(regs, a).wrapping_mul(rd(regs, b)).wrapping_add(rd(regs, c)))
                }
                Op::MulWide { ty, d, a, b } => regs[d as usize] = mul_wide(ty, rd(regs, a), rd(regs, b)),
                Op::MadWide { ty, d, a, b, c } => {
                    let wide = Int {
                        bits: ty.bits * 2,
                        signed: ty.signed,
                    };
                    regs[d as usize] = wide.trunc(mul_wide(ty, rd(regs, a), rd(regs, b)).wrapping_add(rd(regs, c)))
                }
                Op::Bfe { ty, d, a, b, c } => regs[d as usize] = bfe(ty, rd(regs, a), rd(regs, b), rd(regs, c)),
                Op::PredNot { d, a } => regs[d as usize] = (rd(regs, a) == 0) as u64,
                Op::PredBin { op, d, a, b } => {
                    regs[d as usize] = bool_op(op, rd(regs, a) != 0, rd(regs, b) != 0) as u64
                }
                Op::F32 { op, ftz, d, a, b } => regs[d as usize] = float::f32_bin(op, ftz, rd(regs, a), rd(regs, b)),
                Op::F32Un { op, ftz, d, a } => regs[d as usize] = float::f32_un(op, ftz, rd(regs, a)),
                Op::F32Fma { ftz, d, a, b, c } => {
                    regs[d as usize] = float::f32_fma(ftz, rd(regs, a), rd(regs, b), rd(regs, c))
                }
                Op::F64 { op, d, a, b } => regs[d as usize] = float::f64_bin(op, rd(regs, a), rd(regs, b)),
                Op::F64Un { op, d, a } => regs[d as usize] = float::f64_un(op, rd(regs, a)),
                Op::F64Fma { d, a, b, c } => regs[d as usize] = float::f64_fma(rd(regs, a), rd(regs, b), rd(regs, c)),
                Op::Setp {
                    cmp,
                    ty,
                    ftz,
                    d,
                    dn,
                    a,
                    b,
                    comb,
                } => {
                    let (x, y) = (rd(regs, a), rd(regs, b));
                    let r = match ty {
                        CmpTy::Int(i) if i.signed => float::compare(cmp, i.ext(x), i.ext(y), false),
                        CmpTy::Int(i) => float::compare(cmp, i.trunc(x), i.trunc(y), false),
                        CmpTy::F32 => {
                            let (x, y) = (float::f32_value(x, ftz), float::f32_value(y, ftz));
                            float::compare(cmp, x, y, x.is_nan() || y.is_nan())
                        }
                        CmpTy::F64 => {
                            let (x, y) = (f64::from_bits(x), f64::from_bits(y));
                            float::compare(cmp, x, y, x.is_nan() || y.is_nan())
                        }
                    };
                    let (r, rn) = match comb {
                        Some((op, c, neg)) => {
                            let c = (rd(regs, c) != 0) ^ neg;
                            (bool_op(op, r, c), bool_op(op, !r, c))
                        }
                        None => (r, !r),
                    };
                    regs[d as usize] = r as u64;
                    if let Some(dn) = dn {
                        regs[dn as usize] = rn as u64;
                    }
                }
                Op::Selp { bits, d, a, b, p } => {
                    let v = if rd(regs, p) != 0 { rd(regs, a) } else { rd(regs, b) };
                    regs[d as usize] = if bits >= 64 { v } else { v & ((1u64 << bits) - 1) };
                }
                Op::Testp { op, f64, d, a } => {
                    let v = rd(regs, a);
                    let x = if f64 {
                        f64::from_bits(v)
                    } else {
                        f32::from_bits(v as u32) as f64
                    };
                    let sub = if f64 {
                        x.is_subnormal()
                    } else {
                        f32::from_bits(v as u32).is_subnormal()
                    };
                    regs[d as usize] = match op {
                        TestOp::Finite => x.is_finite(),
                        TestOp::Infinite => x.is_infinite(),
                        TestOp::Number => !x.is_nan(),
                        TestOp::NotANumber => x.is_nan(),
                        TestOp::Normal => x.is_finite() && x != 0.0 && !sub,
                        TestOp::Subnormal => sub,
                    } as u64;
                }
                Op::Cvt { conv, d, a } => regs[d as usize] = float::convert(conv, rd(regs, a)),
                Op::CvtPack {
                    to,
                    rnd,
                    sat,
                    relu,
                    d,
                    a,
                    b,
                } => regs[d as usize] = float::cvt_pack(to, rnd, sat, relu, rd(regs, a), rd(regs, b)),
                Op::CvtRs {
                    to,
                    relu,
                    sat,
                    d,
                    xs,
                    rbits,
                } => {
                    let xs = xs.map(|s| rd(regs, s));
                    regs[d as usize] = float::cvt_rs(to, relu, sat, xs, rd(regs, rbits));
                }
                Op::CvtUnpackE4m3 { d, a } => regs[d as usize] = float::e4m3x2_to_f16x2(rd(regs, a)),
                Op::LdParam { d, param, bytes } => {
                    let v = self.params[param as usize];
                    regs[d as usize] = if bytes >= 8 { v } else { v & ((1u64 << (8 * bytes)) - 1) };
                }
                Op::Ld {
                    space,
                    bytes,
                    n: k,
                    d,
                    addr,
                } => {
                    let at = rd(regs, addr.base).wrapping_add(addr.offset as u64);
                    let len = bytes * k as u32;
                    let m = match space {
                        Space::Global => global.slice(at, len).map(|m| &*m),
                        Space::Shared => shared.read(at, len),
                    };
                    match m {
                        Ok(m) => {
                            for i in 0..k as usize {
                                regs[d[i] as usize] = read_le(&m[i * bytes as usize..(i + 1) * bytes as usize]);
                            }
                        }
                        Err(e) => return Err(self.mem_err(ctaid, t, pc, space_name(space), at, len, e)),
                    }
                }
                Op::SetCondition { handle, value } => {
                    let (h, v) = (regs[handle as usize], regs[value as usize] as u32 != 0);
                    let me = (ctaid, tid_of(t, self.block));
                    if let Some(&(first_block, first_thread)) = self.condition_setters.borrow().get(&h) {
                        if (first_block, first_thread) != me {
                            return Err(EmuError::ConditionRace {
                                line: self.f.lines[pc],
                                inst: self.f.texts[pc].clone(),
                                handle: h,
                                block: me.0,
                                thread: me.1,
                                first_block,
                                first_thread,
                            });
                        }
                    }
                    self.condition_setters.borrow_mut().insert(h, me);
                    global.set_condition(h, v);
                }
                Op::Prefetch { addr } => {
                    let at = rd(regs, addr.base).wrapping_add(addr.offset as u64);
                    if let Err(e) = global.slice(at, 1) {
                        return Err(self.mem_err(ctaid, t, pc, "global", at, 1, e));
                    }
                }
                Op::CpAsync {
                    bytes,
                    dst,
                    src,
                    src_bytes,
                } => {
                    let to = rd(regs, dst.base).wrapping_add(dst.offset as u64);
                    let from = rd(regs, src.base).wrapping_add(src.offset as u64);
                    let src_bytes = src_bytes.map_or(bytes, |s| rd(regs, s) as u32);
                    if src_bytes > bytes {
                        let e = format!("src-size {src_bytes} exceeds the cp-size {bytes}");
                        return Err(self.mem_err(ctaid, t, pc, "global", from, src_bytes, e));
                    }
                    if src_bytes > 0 {
                        if let Err(e) = global.slice_aligned(from, src_bytes, bytes) {
                            return Err(self.mem_err(ctaid, t, pc, "global", from, src_bytes, e));
                        }
                    }
                    if let Err(e) = shared.issue(to, bytes, self.f.lines[pc]) {
                        return Err(self.mem_err(ctaid, t, pc, "shared", to, bytes, e));
                    }
                    copies.open.push(AsyncCopy {
                        dst: to,
                        src: from,
                        bytes,
                        src_bytes,
                        pc,
                    });
                }
                Op::CpAsyncCommit => copies.groups.push_back(std::mem::take(&mut copies.open)),
                Op::CpAsyncWait { n } => {
                    while copies.groups.len() > n as usize {
                        let group = copies.groups.pop_front().unwrap_or_default();
                        self.land(ctaid, t, group, global, shared)?;
                    }
                }
                Op::CpAsyncWaitAll => {
                    copies.groups.push_back(std::mem::take(&mut copies.open));
                    for group in std::mem::take(&mut copies.groups) {
                        self.land(ctaid, t, group, global, shared)?;
                    }
                }
                Op::St {
                    space,
                    bytes,
                    n: k,
                    s,
                    addr,
                } => {
                    let at = rd(regs, addr.base).wrapping_add(addr.offset as u64);
                    let len = bytes * k as u32;
                    match space_slice(space, global, shared, at, len) {
                        Ok(m) => {
                            for i in 0..k as usize {
                                write_le(&mut m[i * bytes as usize..(i + 1) * bytes as usize], rd(regs, s[i]));
                            }
                        }
                        Err(e) => return Err(self.mem_err(ctaid, t, pc, space_name(space), at, len, e)),
                    }
                }
                Op::Atom { op, d, addr, b, c } => {
                    let at = rd(regs, addr.base).wrapping_add(addr.offset as u64);
                    let len = match op {
                        AtomOp::AddF32 => 4,
                        AtomOp::Add(i)
                        | AtomOp::Min(i)
                        | AtomOp::Max(i)
                        | AtomOp::Exch(i)
                        | AtomOp::And(i)
                        | AtomOp::Or(i)
                        | AtomOp::Xor(i)
                        | AtomOp::Cas(i) => i.bits / 8,
                    };
                    let (b, c) = (rd(regs, b), rd(regs, c));
                    match global.slice(at, len) {
                        Ok(m) => {
                            let old = read_le(m);
                            write_le(m, atom(op, old, b, c));
                            regs[d as usize] = old;
                        }
                        Err(e) => return Err(self.mem_err(ctaid, t, pc, "global", at, len, e)),
                    }
                }
                Op::Cvta { d, a } => regs[d as usize] = rd(regs, a),
                Op::Bra { target } => {
                    pc = target as usize;
                    continue;
                }
                Op::Exit => break St::Exit,
                Op::Bar => break St::Bar,
                Op::Shfl { .. } | Op::Mma { .. } | Op::Ldmatrix { .. } => break St::Coll,
            }
            pc += 1;
        };
        cta.pcs[t] = pc as u32;
        Ok(stop)
    }
}

fn space_name(s: Space) -> &'static str {
    match s {
        Space::Global => "global",
        Space::Shared => "shared",
    }
}

#[inline(always)]
fn bool_op(op: BoolOp, a: bool, b: bool) -> bool {
    match op {
        BoolOp::And => a & b,
        BoolOp::Or => a | b,
        BoolOp::Xor => a ^ b,
    }
}

#[inline(always)]
fn int_op(op: IntOp, ty: Int, a: u64, b: u64) -> u64 {
    let bits = ty.bits;
    let r = match op {
        IntOp::Add => a.wrapping_add(b),
        IntOp::Sub => a.wrapping_sub(b),
        IntOp::MulLo => a.wrapping_mul(b),
        IntOp::MulHi if ty.signed => ((ty.ext(a) as i128 * ty.ext(b) as i128) >> bits) as u64,
        IntOp::MulHi => ((ty.trunc(a) as u128 * ty.trunc(b) as u128) >> bits) as u64,
        IntOp::Div if ty.trunc(b) == 0 => u64::MAX,
        IntOp::Div if ty.signed => ty.ext(a).wrapping_div(ty.ext(b)) as u64,
        IntOp::Div => ty.trunc(a) / ty.trunc(b),
        IntOp::Rem if ty.trunc(b) == 0 => a,
        IntOp::Rem if ty.signed => ty.ext(a).wrapping_rem(ty.ext(b)) as u64,
        IntOp::Rem => ty.trunc(a) % ty.trunc(b),
        IntOp::Min if ty.signed => ty.ext(a).min(ty.ext(b)) as u64,
        IntOp::Min => ty.trunc(a).min(ty.trunc(b)),
        IntOp::Max if ty.signed => ty.ext(a).max(ty.ext(b)) as u64,
        IntOp::Max => ty.trunc(a).max(ty.trunc(b)),
        IntOp::And => a & b,
        IntOp::Or => a | b,
        IntOp::Xor => a ^ b,
        IntOp::Shl => {
            let s = b as u32;
            if s >= bits {
                0
            } else {
                a << s
            }
        }
        IntOp::Shr if ty.signed => (ty.ext(a) >> (b as u32).min(bits - 1)) as u64,
        IntOp::Shr => {
            let s = b as u32;
            if s >= bits {
                0
            } else {
                ty.trunc(a) >> s
            }
        }
    };
    ty.trunc(r)
}

fn int_un(op: IntUnOp, ty: Int, a: u64) -> u64 {
    let r = match op {
        IntUnOp::Neg => a.wrapping_neg(),
        IntUnOp::Abs => ty.ext(a).wrapping_abs() as u64,
        IntUnOp::Not => !a,
        IntUnOp::Popc => return ty.trunc(a).count_ones() as u64,
        IntUnOp::Clz => return (ty.trunc(a).leading_zeros() - (64 - ty.bits)) as u64,
        IntUnOp::Brev => ty.trunc(a).reverse_bits() >> (64 - ty.bits),
    };
    ty.trunc(r)
}

/// The double-width product of `mul.wide`/`mad.wide` (`ty`: the operands' type).
#[inline(always)]
fn mul_wide(ty: Int, a: u64, b: u64) -> u64 {
    if ty.signed {
        (ty.ext(a) as i128 * ty.ext(b) as i128) as u64
    } else {
        ty.trunc(a).wrapping_mul(ty.trunc(b))
    }
}

/// `bfe` as the PTX ISA's pseudo-code defines it.
fn bfe(ty: Int, a: u64, b: u64, c: u64) -> u64 {
    let (bits, a) = (ty.bits as u64, ty.trunc(a));
    let msb = bits - 1;
    let (pos, len) = (b & 0xFF, c & 0xFF);
    let sbit = if !ty.signed || len == 0 {
        0
    } else {
        (a >> (pos + len - 1).min(msb)) & 1
    };
    let copied = if pos > msb { 0 } else { len.min(bits - pos) };
    let field = if copied == 0 { 0 } else { a >> pos };
    let keep = if copied >= 64 { u64::MAX } else { (1u64 << copied) - 1 };
    let d = (field & keep) | if sbit == 1 { !keep } else { 0 };
    ty.trunc(d)
}

fn atom(op: AtomOp, old: u64, b: u64, c: u64) -> u64 {
    match op {
        AtomOp::AddF32 => float::f32_bin(FOp::Add, true, old, b),
        AtomOp::Add(i) => i.trunc(old.wrapping_add(b)),
        AtomOp::Min(i) => int_op(IntOp::Min, i, old, b),
        AtomOp::Max(i) => int_op(IntOp::Max, i, old, b),
        AtomOp::Exch(i) => i.trunc(b),
        AtomOp::And(i) => i.trunc(old & b),
        AtomOp::Or(i) => i.trunc(old | b),
        AtomOp::Xor(i) => i.trunc(old ^ b),
        AtomOp::Cas(i) if i.trunc(old) == i.trunc(b) => i.trunc(c),
        AtomOp::Cas(_) => old,
    }
}
