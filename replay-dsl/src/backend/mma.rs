//! Tensor-core lowering of `dot`: whether a dot runs on `mma.sync`, the layout of its result and
//! how its operands are staged in shared memory (the instructions are emitted by `ptx::mma`).
//!
//! The result of an mma dot is the accumulator fragment of `m16n8` (`c0, c1`: row `lane / 4`,
//! column `2 (lane % 4) + {0, 1}`; `c2, c3`: the same 8 rows below), tiled over the warps along
//! M, then along N (warps beyond the tile replicate), then over registers. As a linear layout:
//! register bit 0 → column bit 0, register bit 1 → row bit 3, lane bits 0, 1 → column bits 1, 2,
//! lane bits 2..4 → row bits 0..2, then the warp bits, then the remaining N and M bits in
//! registers: every group of 4 consecutive registers is one `m16n8` tile. A tf32 dot whose
//! threads hold two n-tiles or more numbers its columns differently, so that every thread
//! holds runs of 4 columns (16-byte loads and stores of the result and of a loaded
//! accumulator, not 8-byte ones): the first register N bit is column bit 1 and the lane bits
//! 0, 1 columns bits 2, 3 ([`acc_layout`]) — or, where B is 16-bit and staged
//! ([`MmaPlan::interleaved`]), that register bit is column bit 0 and the fragment's own column
//! bit 1, so that two n-tiles interleave and one 32-bit B load serves both; a tile's registers
//! are then those of [`tile_regs`], and an n-tile's 8 positions the columns its B fragment
//! loads read ([`n_position_bits`]).
//!
//! A `[M, K]` and B `[K, N]` are staged row-major in shared memory with padded rows, so that
//! the fragment loads of a warp hit distinct banks. A dot of bf16 (or f16) operands, or of casts
//! to f32 from them on both sides, runs `m16n8k16` on the 16-bit values, loaded with
//! `ldmatrix`; other f32 dots run `m16n8k8` on tf32 parts (3xTF32), loaded with `ld.shared`
//! two elements at a time (an operand cast from a 16-bit float is staged as its source and
//! widened): K is permuted within each k-step so that a lane's two A columns and two B rows are
//! adjacent ([`a_fragment_cells`], [`b_fragment_cells`]), and a B load reads two interleaved
//! n-tiles where the accumulator pairs them. An operand that is a shared buffer's read is not
//! staged: its fragments load from the buffer ([`Staged::buffer`]).
//! A tf32 dot whose operands are both loads (or casts of loads) contiguous along K reads them
//! from registers instead ([`register_operands`]): every thread loads its own fragments, K
//! permuted so that they come in 16-byte runs, and nothing is staged.

use super::layout::{Bit, Layout, LANE_BITS};
use super::smem;
use crate::ir::{Const, DotPrecision, Inst, Kernel, Op, UnaryOp, Value};
use crate::types::{DType, Elem};

/// The operand type of an mma dot, which fixes the instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmaKind {
    /// f32 operands: `m16n8k8` on tf32 parts (3xTF32).
    Tf32,
    /// bf16 operands: `m16n8k16`.
    Bf16,
    /// f16 operands: `m16n8k16`.
    F16,
}

impl MmaKind {
    /// K of one instruction.
    pub fn k_step(self) -> usize {
        match self {
            MmaKind::Tf32 => 8,
            MmaKind::Bf16 | MmaKind::F16 => 16,
        }
    }

    /// The `mma.sync` instruction (without operands).
    pub fn instruction(self) -> &'static str {
        match self {
            MmaKind::Tf32 => "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
            MmaKind::Bf16 => "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
            MmaKind::F16 => "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
        }
    }
}

/// What an mma dot stages in shared memory for one operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Staged {
    /// The value staged: the operand, or the 16-bit source of an operand that is its cast to f32.
    pub value: Value,
    /// Its element type.
    pub elem: Elem,
    /// Row pitch in elements (rows padded so that fragment loads avoid bank conflicts; the
    /// emitter may lower it, for tf32 dots, to the pitch with the fewest wavefronts over the
    /// staging stores and fragment loads together: [`staging_pitch`]).
    pub pitch: usize,
    /// The shared buffer and stage (a scalar value) whose read the operand is: its fragments
    /// are loaded from the buffer, at the buffer's pitch, and nothing is staged (set by the
    /// layout assignment, which knows where the read lies: [`MmaPlan::reading_buffers`]).
    pub buffer: Option<(usize, Value)>,
}

/// How one dot `[M, K] @ [K, N]` runs on tensor cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmaPlan {
    /// Instruction kind.
    pub kind: MmaKind,
    /// Rows of A and C.
    pub m: usize,
    /// Columns of B and C.
    pub n: usize,
    /// Columns of A, rows of B.
    pub k: usize,
    /// How f32 operands become tf32: rounded once (`Tf32`) or split in three terms (`Tf32x3`).
    pub precision: DotPrecision,
    /// A, staged at byte 0.
    pub a: Staged,
    /// B, staged at byte `b_base`.
    pub b: Staged,
    /// Byte offset of staged B.
    pub b_base: usize,
    /// Shared-memory bytes of both operands.
    pub bytes: usize,
    /// Both operands are read from registers in [`register_operands`] layouts instead of being
    /// staged (set by the layout assignment, which knows how the operands are loaded).
    pub in_regs: bool,
    /// With `in_regs`, the K bits the warps that split K hold ([`register_operands`]'s
    /// `k_warp_bits`; 0: the top ones).
    pub k_warp_bits: u32,
}

impl MmaPlan {
    /// Whether the result's n-tiles interleave ([`acc_layout`]): a staged tf32 dot whose B is
    /// 16-bit, so that a lane loads its B elements of two tiles as one 32-bit word.
    pub fn interleaved(&self) -> bool {
        self.kind == MmaKind::Tf32 && !self.in_regs && self.b.elem.bytes() == 2
    }

    /// The layout of the result ([`acc_layout`]).
    pub fn acc_layout(&self, num_warps: u32) -> Layout {
        acc_layout(self.m, self.n, num_warps, self.kind, self.interleaved())
    }

    /// This plan with operand A read from stage `a` of a shared buffer (`(buffer, stage)`)
    /// and B from `b`, where given: those operands take no staging bytes.
    pub fn reading_buffers(self, a: Option<(usize, Value)>, b: Option<(usize, Value)>) -> MmaPlan {
        let (a, b) = (
            Staged {
                buffer: a.or(self.a.buffer),
                ..self.a
            },
            Staged {
                buffer: b.or(self.b.buffer),
                ..self.b
            },
        );
        let staged = |st: Staged, rows: usize| match st.buffer {
            Some(_) => 0,
            None => rows * st.pitch * st.elem.bytes(),
        };
        let b_base = staged(a, self.m).div_ceil(16) * 16;
        MmaPlan {
            a,
            b,
            b_base,
            bytes: b_base + staged(b, self.k),
            ..self
        }
    }
}

/// The value staged for operand `v` and its element type: the source of a cast from f16 or bf16
/// to f32 (exact, and half the shared memory), else `v` itself.
fn staged_source<'k>(kernel: &Kernel, def: &dyn Fn(Value) -> Option<&'k Inst>, v: Value) -> (Value, Option<Elem>) {
    let elem = |v: Value| kernel.ty(v).dtype.val();
    match def(v).map(|d| &d.op) {
        Some(Op::Cast(x, _)) if elem(v) == Some(Elem::F32) && matches!(elem(*x), Some(Elem::F16 | Elem::BF16)) => {
            (*x, elem(*x))
        }
        _ => (v, elem(v)),
    }
}

/// The tensor-core plan of the dot `a @ b` of `kernel` at `precision` (`def` finds each value's
/// definition), or `None` when it stays on CUDA cores: precision `Ieee`, operands neither f32
/// nor both bf16 or both f16 (casts to f32 from them count as them), `M` not a multiple of 16,
/// `N` of 8 or `K` of the instruction's K, or staged operands beyond the shared-memory limit.
pub fn plan_of<'k>(
    kernel: &Kernel,
    def: &dyn Fn(Value) -> Option<&'k Inst>,
    a: Value,
    b: Value,
    precision: DotPrecision,
) -> Option<MmaPlan> {
    if precision == DotPrecision::Ieee {
        return None;
    }
    let (ta, tb) = (kernel.ty(a), kernel.ty(b));
    let (m, n, k) = (ta.shape[0], tb.shape[1], ta.shape[1]);
    let ((va, ea), (vb, eb)) = (staged_source(kernel, def, a), staged_source(kernel, def, b));
    let (ea, eb) = (ea?, eb?);
    let kind = match (ea, eb) {
        (Elem::BF16, Elem::BF16) => MmaKind::Bf16,
        (Elem::F16, Elem::F16) => MmaKind::F16,
        _ if ta.dtype == DType::Val(Elem::F32) => MmaKind::Tf32,
        _ => return None,
    };
    if m % 16 != 0 || n % 8 != 0 || k % kind.k_step() != 0 {
        return None;
    }
    let (sa, sb) = (ea.bytes(), eb.bytes());
    // The 8 rows of an A fragment load (4 words or 16 bytes each) fall in distinct banks with
    // a row pitch of an odd number of 16-byte units; so do the 8 rows of 16 bytes of B's
    // `ldmatrix.trans` with a pitch of an odd number of 8 elements. A tf32 B fragment reads 4
    // rows at the columns of the accumulator's positions, which need not be contiguous: its
    // pitch is the bank model's ([`b_fragment_pitch`]).
    let a = Staged {
        value: va,
        elem: ea,
        pitch: odd_multiple(k, 16 / sa),
        buffer: None,
    };
    let b_pitch = match kind {
        MmaKind::Tf32 => {
            let interleaved = eb.bytes() == 2;
            let acc = acc_layout(m, n, kernel.num_warps, kind, interleaved);
            b_fragment_pitch(n, sb, n_position_bits(&acc, interleaved))
        }
        MmaKind::Bf16 | MmaKind::F16 => odd_multiple(n, 8),
    };
    let b = Staged {
        value: vb,
        elem: eb,
        pitch: b_pitch,
        buffer: None,
    };
    let b_base = (m * a.pitch * sa).div_ceil(16) * 16;
    let bytes = b_base + k * b.pitch * sb;
    (bytes <= smem::STATIC_LIMIT).then_some(MmaPlan {
        kind,
        m,
        n,
        k,
        precision,
        a,
        b,
        b_base,
        bytes,
        in_regs: false,
        k_warp_bits: 0,
    })
}

/// The warp bits (indices into the warp id) of an mma dot's accumulator `acc` that split K
/// (`kind`'s k-steps over `k`): its replicated warp bits, as many as the k-steps halve, when
/// the partial sums of the groups fit in shared memory.
pub fn k_group_warps(acc: &Layout, k: usize, kind: MmaKind) -> Vec<usize> {
    let threads = 32usize << acc.warps.len();
    if threads * acc.num_regs() * 4 > smem::STATIC_LIMIT {
        return Vec::new();
    }
    (acc.warps.iter().enumerate())
        .filter(|(_, b)| b.is_none())
        .map(|(i, _)| i)
        .take((k / kind.k_step()).trailing_zeros() as usize)
        .collect()
}

/// The layouts of A `[m, k]` and B `[k, n]` in which a thread holds its own `m16n8k8` tf32
/// fragments, so that the dot reads them from registers: K is permuted, the same way in
/// both, so that a thread's K elements come in runs of four (one 16-byte load of f32):
/// lane bits 0, 1 (the fragment's `t`) → K bits 2, 3; register bit 0 (the `t + 4` half) →
/// K bit 0; the k-steps → K bit 1 and K bits 4 and up. M and N are spread as in the
/// accumulator (lane bits 2..4 → M bits 0..2 or the N bits of the tile's positions
/// ([`n_position_bits`]), A's register bit 2 → M bit 3, the accumulator's warps), and the
/// warps that split K ([`k_group_warps`]) hold its top bits, or with `k_warp_bits` (a mask,
/// 0 for the top bits) those bits, in increasing order (as an accumulator that feeds the dot
/// holds them where its result is the dot's A). `None` when K has too
/// few bits for that (fewer than 16 elements per group) or the mask does not fit the warps.
pub fn register_operands(m: usize, n: usize, k: usize, num_warps: u32, k_warp_bits: u32) -> Option<(Layout, Layout)> {
    let acc = acc_layout(m, n, num_warps, MmaKind::Tf32, false);
    let positions = n_position_bits(&acc, false);
    let groups = k_group_warps(&acc, k, MmaKind::Tf32);
    let kbits = k.trailing_zeros() as usize;
    if kbits < 4 + groups.len() {
        return None;
    }
    let bit = |dim: u8, b: usize| Bit { dim, bit: b as u8 };
    // The k-group warps' K bits, in order: the top ones, or the mask's.
    let in_warps: Vec<usize> = match k_warp_bits {
        0 => (kbits - groups.len()..kbits).collect(),
        mask => (4..kbits).filter(|b| mask >> b & 1 == 1).collect(),
    };
    if in_warps.len() != groups.len() || (k_warp_bits >> kbits) != 0 || k_warp_bits & 0xf != 0 {
        return None;
    }
    let group_bit = |i: usize| groups.iter().position(|&w| w == i).map(|j| in_warps[j]);
    // One operand: K along `kd`, M (A) or N (B) along `od`.
    let operand = |kd: u8, od: u8| {
        let own: [usize; 3] = if od == 0 {
            [0, 1, 2]
        } else {
            positions.map(|b| b as usize)
        };
        let lanes: Vec<Option<Bit>> = [
            bit(kd, 2),
            bit(kd, 3),
            bit(od, own[0]),
            bit(od, own[1]),
            bit(od, own[2]),
        ]
        .into_iter()
        .map(Some)
        .collect();
        let warps: Vec<Option<Bit>> = (acc.warps.iter().enumerate())
            .map(|(i, w)| match w {
                // The accumulator's M bits for A, its N bits for B.
                Some(b) if b.dim == od => Some(*b),
                Some(_) => None,
                None => group_bit(i).map(|kb| bit(kd, kb)),
            })
            .collect();
        let extent = if od == 0 { m } else { n };
        // The bits of M or N held outside the registers below: the lanes', and A's M bit 3.
        let placed: Vec<usize> = if od == 0 { vec![0, 1, 2, 3] } else { own.to_vec() };
        let warped: Vec<u8> = warps.iter().flatten().filter(|b| b.dim == od).map(|b| b.bit).collect();
        let mut regs = vec![bit(kd, 0), bit(kd, 1)];
        if od == 0 {
            regs.push(bit(od, 3));
        }
        regs.extend((4..kbits).filter(|b| !in_warps.contains(b)).map(|b| bit(kd, b)));
        regs.extend(
            (0..extent.trailing_zeros() as usize)
                .filter(|b| !placed.contains(b) && !warped.contains(&(*b as u8)))
                .map(|b| bit(od, b)),
        );
        Layout {
            shape: if od == 0 { vec![m, k] } else { vec![k, n] },
            regs,
            lanes,
            warps,
        }
    };
    Some((operand(1, 0), operand(0, 1)))
}

/// The smallest odd multiple of `unit` that is at least `x` (`x` a multiple of `unit`).
/// Shared-memory wavefronts of one warp-wide access in which lane `i` touches `width` bytes
/// (4, 8 or 16) at byte address `addrs[i]`: the lanes are served in phases of 128 bytes' worth
/// (32 lanes of 4 bytes, 16 of 8, 8 of 16), each taking as many wavefronts as the largest
/// number of distinct 4-byte words that one of the 32 banks holds (lanes on one word share it).
pub fn wavefronts(addrs: &[usize], width: usize) -> usize {
    let width = width.max(4);
    let per_phase = 128 / width;
    addrs
        .chunks(per_phase)
        .map(|phase| {
            let mut words: Vec<usize> = phase
                .iter()
                .flat_map(|a| (0..width / 4).map(move |w| a / 4 + w))
                .collect();
            words.sort_unstable();
            words.dedup();
            let mut per_bank = [0usize; 32];
            for w in words {
                per_bank[w % 32] += 1;
            }
            per_bank.into_iter().max().unwrap_or(1).max(1)
        })
        .sum()
}

/// One side of a staged operand's shared-memory traffic at a row pitch: each lane's `(row,
/// column)` (elements) in one warp instruction, the bytes each lane touches, and how many such
/// instructions a thread issues (every instruction of the side has the same pattern, shifted).
pub struct StagedAccess<'a> {
    /// `(row, column)` of each lane.
    pub lanes: &'a [(usize, usize)],
    /// Bytes per lane.
    pub width: usize,
    /// Instructions per thread.
    pub count: usize,
}

impl StagedAccess<'_> {
    /// Its wavefronts per thread at a row pitch of `pitch` elements of `elem_bytes`.
    pub fn wavefronts(&self, pitch: usize, elem_bytes: usize) -> usize {
        let addrs: Vec<usize> = self.lanes.iter().map(|&(r, c)| (r * pitch + c) * elem_bytes).collect();
        wavefronts(&addrs, self.width) * self.count
    }
}

/// The row pitch in `len ..= max` (rows `align`-element aligned) with the fewest shared-memory
/// wavefronts `cost` (over the stores that stage an operand and the fragment loads that read it
/// back, [`StagedAccess::wavefronts`]); `max` (the planned pitch) on ties.
pub fn staging_pitch(len: usize, max: usize, align: usize, cost: impl Fn(usize) -> usize) -> usize {
    let mut best = (cost(max), max);
    for pitch in (len..max).rev().filter(|p| p % align.max(1) == 0) {
        let c = cost(pitch);
        if c < best.0 {
            best = (c, pitch);
        }
    }
    best.1
}

/// Whether an accumulator whose tiles' positions are `positions` ([`n_position_bits`]) holds
/// its n-tiles in interleaved pairs (column bit 0 picks the tile: [`acc_layout`]'s runs of 4),
/// so that one B fragment load reads the elements of both.
pub fn paired_n_tiles(positions: [u32; 3]) -> bool {
    positions[0] == 1
}

/// The distance in K between a lane's two elements of a tf32 fragment (A's `a0` and `a2`, B's
/// `b0` and `b1`): 1 where K is `permuted` within each k-step so that they are adjacent (the
/// fragment's `t` and `t + 4` are `2t` and `2t + 1`, in both operands: an interleaved dot,
/// [`MmaPlan::interleaved`], whose A loads them at once where its rows allow), else 4.
pub fn k_pair_gap(permuted: bool) -> usize {
    if permuted {
        1
    } else {
        4
    }
}

/// The lanes' `(k, n)` cells of a tf32 B fragment load (`b0`; `b1` is [`k_pair_gap`] rows
/// below): lane `(g, t)` reads row `2t` (`permuted`) or `t` at the column of position `g`
/// (`positions`: [`n_position_bits`]).
pub fn b_fragment_cells(positions: [u32; 3], permuted: bool) -> Vec<(usize, usize)> {
    let column = |g: usize| -> usize { (0..3).map(|i| ((g >> i) & 1) << positions[i]).sum() };
    let row = |t: usize| if permuted { 2 * t } else { t };
    (0..32).map(|l| (row(l & 3), column(l >> 2))).collect()
}

/// The lanes' `(m, k)` cells of a tf32 A fragment load (`a0`; `a2` is [`k_pair_gap`] columns
/// on, in the same load where K is `permuted` and the rows are aligned; `a1`, `a3` are 8 rows
/// below): lane `(g, t)` reads row `g` at column `2t` (`permuted`) or `t`.
pub fn a_fragment_cells(permuted: bool) -> Vec<(usize, usize)> {
    let col = |t: usize| if permuted { 2 * t } else { t };
    (0..32).map(|l| (l >> 2, col(l & 3))).collect()
}

/// The row pitch (elements of `elem_bytes`, rows 16-byte aligned) of a staged tf32 B operand
/// with `n` columns: the smallest, within 128 bytes of padding, whose fragment loads take the
/// fewest shared-memory wavefronts at the columns of `positions` (two elements per load when
/// the tiles are paired).
fn b_fragment_pitch(n: usize, elem_bytes: usize, positions: [u32; 3]) -> usize {
    let cells = b_fragment_cells(positions, paired_n_tiles(positions));
    let load = StagedAccess {
        lanes: &cells,
        width: elem_bytes << usize::from(paired_n_tiles(positions)),
        count: 1,
    };
    (n..n + 128 / elem_bytes)
        .step_by(16 / elem_bytes)
        .min_by_key(|&p| (load.wavefronts(p, elem_bytes), p))
        .expect("a non-empty range of pitches")
}

fn odd_multiple(x: usize, unit: usize) -> usize {
    if (x / unit) % 2 == 1 {
        x
    } else {
        x + unit
    }
}

/// The layout of an mma dot's `[m, n]` result on `kind`'s instruction with `num_warps` warps
/// (see the module doc): a tf32 dot's thread holds runs of 4 columns where it holds two
/// n-tiles or more (registers 0..3 are 4 columns of one row, the lane bits 0, 1 columns bits
/// 2, 3). The fragment's own column bit (`c0`/`c1`) is column bit 0 and the register that
/// selects between two n-tiles column bit 1 — or, `interleaved` ([`MmaPlan::interleaved`]),
/// the other way round: the two tiles' columns interleave, so that one B fragment load of two
/// adjacent 16-bit elements serves both.
pub fn acc_layout(m: usize, n: usize, num_warps: u32, kind: MmaKind, interleaved: bool) -> Layout {
    let l = standard_acc_layout(m, n, num_warps);
    let first_n_reg = l.regs.iter().position(|b| b.dim == 1 && b.bit >= 3);
    match first_n_reg {
        Some(i) if kind == MmaKind::Tf32 => {
            let moved = l.regs[i].bit;
            // Column bits: `moved` ← 1 (0 interleaved), the fragment's 0 ← 0 (1), its lane
            // bits 1, 2 ← 2, 3, and the others ≥ 3 up by one below `moved`.
            let (tile_bit, own_bit) = if interleaved { (0, 1) } else { (1, 0) };
            let renumber = |b: Bit| -> Bit {
                if b.dim != 1 {
                    return b;
                }
                let bit = match b.bit {
                    0 => own_bit,
                    x if x == moved => tile_bit,
                    x if x < moved => x + 1,
                    x => x,
                };
                Bit { dim: 1, bit }
            };
            let mut regs: Vec<Bit> = l.regs.iter().map(|b| renumber(*b)).collect();
            // Registers: column bits 0, 1, then row bit 3, then the rest as they were.
            let tile = regs.remove(i);
            regs.insert(tile_bit as usize, tile);
            Layout {
                shape: l.shape,
                regs,
                lanes: l.lanes.iter().map(|b| b.map(renumber)).collect(),
                warps: l.warps.iter().map(|b| b.map(renumber)).collect(),
            }
        }
        _ => l,
    }
}

/// The register indices of each `m16n8` tile of an accumulator layout `acc` ([`acc_layout`],
/// `interleaved` as it was made), in fragment order `c0, c1, c2, c3`: the register bits of the
/// fragment's column bit (position bit 0, [`n_position_bits`]) and row bit 3 vary within a
/// tile, the others pick it.
pub fn tile_regs(acc: &Layout, interleaved: bool) -> Vec<[usize; 4]> {
    let find = |dim: u8, bit: u32| {
        let i = acc.regs.iter().position(|b| b.dim == dim && b.bit as u32 == bit);
        1usize << i.expect("an accumulator layout holds its c0/c1 column bit and row bit 3 in registers")
    };
    let (col, row) = (find(1, n_position_bits(acc, interleaved)[0]), find(0, 3));
    (0..acc.num_regs())
        .filter(|r| r & (col | row) == 0)
        .map(|r| [r, r | col, r | row, r | col | row])
        .collect()
}

/// The column bits of an `m16n8` tile's 8 positions in accumulator layout `acc` ([`acc_layout`],
/// `interleaved` as it was made): position bits 1, 2 are the columns of lane bits 0, 1, and
/// position bit 0 (`c0`/`c1`) the fragment's own column bit — 1 in an interleaved layout of
/// runs of 4, else 0. A B fragment's lane `g` (lane bits 2..4) reads the column of position `g`.
pub fn n_position_bits(acc: &Layout, interleaved: bool) -> [u32; 3] {
    let lane = |i: usize| {
        acc.lanes[i]
            .filter(|b| b.dim == 1)
            .expect("lane bits 0, 1 are columns")
            .bit as u32
    };
    let runs = lane(0) == 2;
    [u32::from(runs && interleaved), lane(0), lane(1)]
}

/// [`acc_layout`] before a tf32 dot's columns are renumbered.
fn standard_acc_layout(m: usize, n: usize, num_warps: u32) -> Layout {
    let bit = |dim: u8, bit: u32| Bit { dim, bit: bit as u8 };
    let (mb, nb) = (m.trailing_zeros(), n.trailing_zeros());
    let mut lanes = vec![Some(bit(1, 1)), Some(bit(1, 2))];
    lanes.extend((0..3).map(|i| Some(bit(0, i))));
    debug_assert_eq!(lanes.len(), LANE_BITS);
    let mut outer = (4..mb).map(|i| bit(0, i)).chain((3..nb).map(|i| bit(1, i)));
    let warps: Vec<Option<Bit>> = (0..num_warps.trailing_zeros()).map(|_| outer.next()).collect();
    // The remaining N bits, then M bits, in registers: n-tiles vary fastest.
    let mut rest: Vec<Bit> = outer.collect();
    rest.sort_by_key(|b| std::cmp::Reverse(b.dim));
    let mut regs = vec![bit(1, 0), bit(0, 3)];
    regs.extend(rest);
    Layout {
        shape: vec![m, n],
        regs,
        lanes,
        warps,
    }
}

/// True if every element of the f32 tile `v` is exactly a tf32 value (10 mantissa bits), so
/// that its low part in the 3xTF32 split is zero: casts from f16, bf16 and f8e4m3, constants
/// that are, and views, negations, absolute values, splats and selections of such values.
pub fn exact_in_tf32<'k>(kernel: &Kernel, def: &dyn Fn(Value) -> Option<&'k Inst>, v: Value) -> bool {
    let Some(inst) = def(v) else { return false };
    let exact = |x: Value| exact_in_tf32(kernel, def, x);
    match &inst.op {
        Op::Cast(x, _) => match kernel.ty(*x).dtype {
            DType::Val(Elem::F16 | Elem::BF16 | Elem::F8E4M3 | Elem::Bool) => true,
            DType::Val(Elem::F32) => exact(*x),
            _ => false,
        },
        Op::Const(Const::Float(c)) => (*c as f32).to_bits() & 0x1fff == 0,
        Op::Const(_) => false,
        Op::Broadcast(x) | Op::ExpandDims(x, _) | Op::Reshape(x) | Op::Trans(x) | Op::Splat(x) => exact(*x),
        Op::Unary(UnaryOp::Neg | UnaryOp::Abs, x) => exact(*x),
        Op::Select(_, x, y) => exact(*x) && exact(*y),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wavefronts_count_distinct_words_per_bank() {
        let lanes = |f: &dyn Fn(usize) -> usize| (0..32).map(f).collect::<Vec<usize>>();
        // Consecutive words: one wavefront; all lanes on one word: one (a broadcast).
        assert_eq!(wavefronts(&lanes(&|l| 4 * l), 4), 1);
        assert_eq!(wavefronts(&lanes(&|_| 64), 4), 1);
        // A stride of 32 words puts every lane in bank 0: 32 wavefronts; a stride of 2, two.
        assert_eq!(wavefronts(&lanes(&|l| 128 * l), 4), 32);
        assert_eq!(wavefronts(&lanes(&|l| 8 * l), 4), 2);
        // 16-byte accesses: four phases of 8 lanes, each conflict-free when contiguous.
        assert_eq!(wavefronts(&lanes(&|l| 16 * l), 16), 4);
        assert_eq!(wavefronts(&lanes(&|l| 64 * l), 16), 16);
    }

    #[test]
    fn staging_pitch_weighs_stores_against_fragment_loads() {
        // Stores of a transposed tile (4 lanes 8 rows apart, 8 along the row) and tf32 A
        // fragment loads (lane (l / 4, l % 4)), 16 instructions of each per thread.
        let stores: Vec<(usize, usize)> = (0..32).map(|l| ((l % 4) * 8, l / 4)).collect();
        let frags: Vec<(usize, usize)> = (0..32).map(|l| (l / 4, l % 4)).collect();
        let access = |count_st: usize| {
            [
                StagedAccess {
                    lanes: &stores,
                    width: 4,
                    count: count_st,
                },
                StagedAccess {
                    lanes: &frags,
                    width: 4,
                    count: 16,
                },
            ]
        };
        let cost = |stores: usize| move |p: usize| access(stores).iter().map(|a| a.wavefronts(p, 4)).sum();
        // At 68 the stores conflict 4 ways (80 wavefronts), at 67 the loads 2 ways (48).
        assert_eq!(staging_pitch(64, 68, 1, cost(16)), 67);
        // Without stores to weigh, the planned pitch (conflict-free loads) stays.
        assert_eq!(staging_pitch(64, 68, 1, cost(0)), 68);
        // Rows aligned to 4 elements: only 64 and 68, and 64 puts every row in bank 0.
        assert_eq!(staging_pitch(64, 68, 4, cost(16)), 68);
    }

    #[test]
    fn acc_layout_is_the_m16n8_fragment() {
        let l = acc_layout(16, 8, 1, MmaKind::Tf32, false);
        // (register, lane) → (row, col) as in the PTX ISA's m16n8 accumulator figure.
        for lane in 0..32usize {
            for r in 0..4usize {
                let (g, t) = (lane / 4, lane % 4);
                let want = (g + 8 * (r / 2), 2 * t + r % 2);
                let mut got = (l.reg_coord(r, 0), l.reg_coord(r, 1));
                for (i, b) in l.lanes.iter().enumerate() {
                    if lane >> i & 1 == 1 {
                        let b = b.expect("lane bit used");
                        if b.dim == 0 {
                            got.0 |= 1 << b.bit;
                        } else {
                            got.1 |= 1 << b.bit;
                        }
                    }
                }
                assert_eq!(got, want, "lane {lane} register {r}");
            }
        }
    }

    #[test]
    fn warps_split_m_then_n_then_replicate() {
        let l = acc_layout(64, 16, 8, MmaKind::Tf32, false);
        assert_eq!(
            l.warps,
            vec![
                Some(Bit { dim: 0, bit: 4 }),
                Some(Bit { dim: 0, bit: 5 }),
                Some(Bit { dim: 1, bit: 3 })
            ]
        );
        assert_eq!(l.num_regs(), 4);
        let l = acc_layout(16, 8, 4, MmaKind::Tf32, false);
        assert_eq!(l.warps, vec![None, None]);
        let l = acc_layout(64, 128, 4, MmaKind::Bf16, false);
        assert_eq!(l.num_regs(), 64);
        assert_eq!(l.regs[2], Bit { dim: 1, bit: 3 });
    }

    /// The (row, column) of register `r` in lane `lane` of layout `l` (warp 0).
    fn coord(l: &Layout, lane: usize, r: usize) -> (usize, usize) {
        let mut at = (l.reg_coord(r, 0), l.reg_coord(r, 1));
        for (i, b) in l.lanes.iter().enumerate() {
            if let Some(b) = b.filter(|_| lane >> i & 1 == 1) {
                if b.dim == 0 {
                    at.0 |= 1 << b.bit;
                } else {
                    at.1 |= 1 << b.bit;
                }
            }
        }
        at
    }

    #[test]
    fn tf32_accumulators_hold_runs_of_four_columns() {
        // [32, 128] over 4 warps: one m16 tile and 8 n-tiles per warp. Registers 0..3 are 4
        // columns of one row, lanes t = 0..3 the next runs (64 contiguous bytes of f32), with
        // the n-tiles apart or interleaved.
        for interleaved in [false, true] {
            let l = acc_layout(32, 128, 4, MmaKind::Tf32, interleaved);
            assert_eq!(l.contiguous_regs(), 4);
            for lane in 0..32 {
                let (g, t) = (lane / 4, lane % 4);
                for r in 0..4 {
                    assert_eq!(coord(&l, lane, r), (g, 4 * t + r), "lane {lane} register {r}");
                }
            }
            // Every tile is an m16n8 fragment: c0, c1 at positions 2t, 2t + 1, c2, c3 eight
            // rows below; its 8 positions are the columns n_position_bits names, the same for
            // every tile: 0, 1, 4, 5, .. apart, 0, 2, 4, .. interleaved.
            let positions = n_position_bits(&l, interleaved);
            assert_eq!(positions, if interleaved { [1, 2, 3] } else { [0, 2, 3] });
            let tiles = tile_regs(&l, interleaved);
            assert_eq!(tiles.len() * 4, l.num_regs());
            for q in &tiles {
                let (r0, c0) = coord(&l, 0, q[0]);
                for lane in 0..32 {
                    let (g, t) = (lane / 4, lane % 4);
                    for (i, &r) in q.iter().enumerate() {
                        let p = 2 * t + i % 2;
                        let col: usize = (0..3).map(|b| ((p >> b) & 1) << positions[b]).sum();
                        assert_eq!(coord(&l, lane, r), (r0 + g + 8 * (i / 2), c0 + col), "tile {q:?}");
                    }
                }
            }
            // One n-tile per thread, or a 16-bit dot (ldmatrix reads 8 contiguous columns): the
            // fragment's own numbering.
            for l in [
                acc_layout(64, 8, 2, MmaKind::Tf32, interleaved),
                acc_layout(32, 128, 4, MmaKind::Bf16, interleaved),
            ] {
                assert_eq!(l.contiguous_regs(), 2);
                assert_eq!(n_position_bits(&l, interleaved), [0, 1, 2]);
                assert_eq!(tile_regs(&l, interleaved)[1], [4, 5, 6, 7]);
            }
        }
    }

    #[test]
    fn tf32_b_fragments_load_at_the_pitch_with_the_fewest_wavefronts() {
        // (m, n, warps, B element bytes) → pitch, wavefronts of one fragment load, and every
        // smaller pitch costs more. f32 B: one n-tile per thread (contiguous positions) needs
        // no padding at 8 columns; runs of 4 columns (positions at columns 0, 1, 4, 5, 8, ...)
        // take 2 wavefronts at best. 16-bit B (K permuted: a lane reads rows 2t and 2t + 1):
        // one n-tile needs no padding; interleaved pairs of n-tiles (positions at the even
        // columns, two elements per load) put the rows 8 banks apart.
        for (m, n, warps, s, pitch, waves) in [
            (64, 8, 4, 4, 8, 1),
            (64, 8, 4, 2, 8, 1),
            (32, 128, 4, 2, 128 + 8, 1),
            (32, 128, 4, 4, 128 + 8, 2),
            (64, 64, 4, 4, 64 + 8, 2),
        ] {
            let interleaved = s == 2;
            let positions = n_position_bits(&acc_layout(m, n, warps, MmaKind::Tf32, interleaved), interleaved);
            let cells = b_fragment_cells(positions, interleaved);
            let load = StagedAccess {
                lanes: &cells,
                width: s << usize::from(paired_n_tiles(positions)),
                count: 1,
            };
            let cost = |p: usize| load.wavefronts(p, s);
            assert_eq!(b_fragment_pitch(n, s, positions), pitch, "{m}x{n}, {s} bytes");
            assert_eq!(cost(pitch), waves, "{m}x{n}, {s} bytes");
            assert!(
                (n..pitch).step_by(16 / s).all(|p| cost(p) > waves),
                "{m}x{n}, {s} bytes"
            );
        }
    }

    #[test]
    fn pitches_avoid_bank_conflicts() {
        use crate::front::builder::trace;
        use crate::front::tile::{Ptr, Tile};
        use crate::prelude::*;
        // (m, n, k, A bf16?, B cast from bf16?) → (kind, A elem, B elem, pitches).
        for (m, n, k, a16, bcast, want) in [
            (
                64,
                8,
                128,
                false,
                true,
                Some((MmaKind::Tf32, Elem::F32, Elem::BF16, 132, 8)),
            ),
            (
                64,
                64,
                64,
                false,
                false,
                Some((MmaKind::Tf32, Elem::F32, Elem::F32, 68, 72)),
            ),
            (
                64,
                64,
                64,
                true,
                true,
                Some((MmaKind::Bf16, Elem::BF16, Elem::BF16, 72, 72)),
            ),
            (8, 8, 8, false, false, None),
            (16, 8, 8, true, true, None),
            (64, 128, 64, false, false, None),
        ] {
            let param = |name: &str, e: Elem| crate::ir::Param {
                name: name.into(),
                dtype: DType::Ptr(e),
                divisibility: 16,
            };
            let kernel = trace(
                "d",
                vec![param("a", Elem::BF16), param("b", Elem::BF16)],
                vec![],
                4,
                |p| {
                    let pa = Tile::<Ptr<bf16>>::from_value(p[0]);
                    let pb = Tile::<Ptr<bf16>>::from_value(p[1]);
                    let offs = |r: usize, c: usize| (arange(r) * c as i32).expand_dims(1) + arange(c).expand_dims(0);
                    let a = load(pa + offs(m, k), true).cast::<f32>();
                    let a = if a16 { a } else { a * 2.0f32 };
                    let b = load(pb + offs(k, n), true).cast::<f32>();
                    let b = if bcast { b } else { b * 2.0f32 };
                    store(pa + offs(m, n), dot(a, b).cast::<bf16>(), true);
                },
            )
            .unwrap();
            let mut defs = std::collections::HashMap::new();
            crate::ir::walk_insts(&kernel.body, &mut |i: &Inst| {
                for r in &i.results {
                    defs.insert(*r, i.clone());
                }
            });
            let mut got = None;
            crate::ir::walk_insts(&kernel.body, &mut |i: &Inst| {
                if let Op::Dot { a, b, .. } = i.op {
                    let p = plan_of(&kernel, &|v| defs.get(&v), a, b, DotPrecision::Tf32x3);
                    got = Some(p.map(|p| (p.kind, p.a.elem, p.b.elem, p.a.pitch, p.b.pitch)));
                }
            });
            assert_eq!(got, Some(want), "{m}x{n}x{k}");
        }
    }
}
