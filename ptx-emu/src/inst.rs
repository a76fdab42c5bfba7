//! The decoded program: instructions over register slots and immediates, so that running
//! them needs no string work.

/// A register slot in a thread's register file (every register holds raw bits in a `u64`).
pub type Reg = u32;

/// A source operand: a register or an immediate (raw bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Src {
    /// A register slot.
    Reg(Reg),
    /// Immediate bits (floats as their IEEE bits, integers two's complement).
    Imm(u64),
}

/// An address operand `[base+offset]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Addr {
    /// The base: a register or a symbol's address.
    pub base: Src,
    /// The byte offset added to it.
    pub offset: i64,
}

/// Memory state spaces the emulator implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    /// `.global`: the launch's buffers.
    Global,
    /// `.shared`: the block's shared memory.
    Shared,
}

/// Integer operand types: width in bits and signedness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Int {
    /// 8, 16, 32 or 64.
    pub bits: u32,
    /// `.s*` (as opposed to `.u*`/`.b*`).
    pub signed: bool,
}

impl Int {
    /// The low `bits` of `v`, zero-extended.
    #[inline(always)]
    pub fn trunc(self, v: u64) -> u64 {
        if self.bits == 64 {
            v
        } else {
            v & ((1u64 << self.bits) - 1)
        }
    }
    /// The low `bits` of `v`, sign- or zero-extended to 64 bits by the type's signedness.
    #[inline(always)]
    pub fn ext(self, v: u64) -> i64 {
        let sh = 64 - self.bits;
        if self.signed {
            ((v << sh) as i64) >> sh
        } else {
            (self.trunc(v)) as i64
        }
    }
}

/// Special registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sreg {
    /// `%tid.{x,y,z}`.
    Tid(u8),
    /// `%ntid.{x,y,z}`.
    Ntid(u8),
    /// `%ctaid.{x,y,z}`.
    Ctaid(u8),
    /// `%nctaid.{x,y,z}`.
    Nctaid(u8),
    /// `%laneid`.
    Laneid,
    /// `%warpid` (the warp's index in the block).
    Warpid,
}

/// Two-operand integer operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntOp {
    /// `add`.
    Add,
    /// `sub`.
    Sub,
    /// `mul.lo`.
    MulLo,
    /// `mul.hi`.
    MulHi,
    /// `div` (truncating; by zero gives all ones).
    Div,
    /// `rem` (sign of the dividend; by zero gives the dividend).
    Rem,
    /// `min`.
    Min,
    /// `max`.
    Max,
    /// `and`.
    And,
    /// `or`.
    Or,
    /// `xor`.
    Xor,
    /// `shl` (amounts ≥ width give 0).
    Shl,
    /// `shr` (arithmetic for `.s*`; amounts ≥ width clamp).
    Shr,
}

/// One-operand integer operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntUnOp {
    /// `neg`.
    Neg,
    /// `abs`.
    Abs,
    /// `not` (bitwise).
    Not,
    /// `popc`.
    Popc,
    /// `clz`.
    Clz,
    /// `brev`.
    Brev,
}

/// Two-operand float operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FOp {
    /// `add`.
    Add,
    /// `sub`.
    Sub,
    /// `mul`.
    Mul,
    /// `div` (all variants computed correctly rounded).
    Div,
    /// `min` (NaN operands ignored; −0 < +0).
    Min,
    /// `max` (NaN operands ignored; −0 < +0).
    Max,
    /// `min.NaN` (NaN if either is).
    MinNaN,
    /// `max.NaN` (NaN if either is).
    MaxNaN,
    /// `copysign d, a, b`: `b` with the sign of `a`.
    Copysign,
}

/// One-operand float operations (approximations computed correctly rounded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FUnOp {
    /// `neg` (sign flip, also of NaN).
    Neg,
    /// `abs` (sign clear).
    Abs,
    /// `ex2`.
    Ex2,
    /// `lg2`.
    Lg2,
    /// `rsqrt`.
    Rsqrt,
    /// `sqrt`.
    Sqrt,
    /// `rcp`.
    Rcp,
    /// `sin`.
    Sin,
    /// `cos`.
    Cos,
    /// `tanh`.
    Tanh,
}

/// Comparison operators of `setp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    /// `eq`.
    Eq,
    /// `ne`.
    Ne,
    /// `lt`.
    Lt,
    /// `le`.
    Le,
    /// `gt`.
    Gt,
    /// `ge`.
    Ge,
    /// `equ` (unordered or equal).
    Equ,
    /// `neu`.
    Neu,
    /// `ltu`.
    Ltu,
    /// `leu`.
    Leu,
    /// `gtu`.
    Gtu,
    /// `geu`.
    Geu,
    /// `num` (neither NaN).
    Num,
    /// `nan` (either NaN).
    Nan,
}

/// What a comparison compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpTy {
    /// Integers.
    Int(Int),
    /// `.f32`.
    F32,
    /// `.f64`.
    F64,
}

/// Predicate combination of `setp.cmp.bool` and the `.pred` logic ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoolOp {
    /// `and`.
    And,
    /// `or`.
    Or,
    /// `xor`.
    Xor,
}

/// `testp` properties.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestOp {
    /// `finite`.
    Finite,
    /// `infinite`.
    Infinite,
    /// `number` (not NaN).
    Number,
    /// `notanumber`.
    NotANumber,
    /// `normal`.
    Normal,
    /// `subnormal`.
    Subnormal,
}

/// Number formats of `cvt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Num {
    /// An integer type.
    Int(Int),
    /// `.f16`.
    F16,
    /// `.bf16`.
    Bf16,
    /// `.tf32` (an f32 with the low 13 mantissa bits zero).
    Tf32,
    /// `.f32`.
    F32,
    /// `.f64`.
    F64,
}

/// Rounding modifiers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rnd {
    /// None given (exact conversions, or the default of the conversion).
    Default,
    /// `.rn`: nearest even.
    Rn,
    /// `.rna`: nearest, ties away from zero.
    Rna,
    /// `.rz`: toward zero.
    Rz,
    /// `.rm`: toward −∞.
    Rm,
    /// `.rp`: toward +∞.
    Rp,
    /// `.rni`: to an integer, nearest even.
    Rni,
    /// `.rzi`: to an integer, toward zero.
    Rzi,
    /// `.rmi`: to an integer, toward −∞.
    Rmi,
    /// `.rpi`: to an integer, toward +∞.
    Rpi,
}

/// A scalar `cvt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv {
    /// Destination format.
    pub to: Num,
    /// Source format.
    pub from: Num,
    /// Rounding.
    pub rnd: Rnd,
    /// `.sat` / `.satfinite`.
    pub sat: bool,
    /// `.ftz`.
    pub ftz: bool,
}

/// Packed narrow float formats of the two-element and four-element `cvt`s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packed {
    /// `.f16x2`.
    F16x2,
    /// `.bf16x2`.
    Bf16x2,
    /// `.e4m3x2`.
    E4m3x2,
    /// `.e4m3x4`.
    E4m3x4,
}

/// Atomic operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomOp {
    /// `add` on an integer type.
    Add(Int),
    /// `add.f32`.
    AddF32,
    /// `min`.
    Min(Int),
    /// `max`.
    Max(Int),
    /// `exch`.
    Exch(Int),
    /// `and`.
    And(Int),
    /// `or`.
    Or(Int),
    /// `xor`.
    Xor(Int),
    /// `cas`: store `c` if the old value equals `b`.
    Cas(Int),
}

/// `shfl.sync` modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShflMode {
    /// `up`.
    Up,
    /// `down`.
    Down,
    /// `bfly`.
    Bfly,
    /// `idx`.
    Idx,
}

/// The `mma.sync` shapes and operand types implemented (all `.row.col`, f32 accumulators).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmaKind {
    /// `m16n8k8 … .tf32.tf32`.
    Tf32,
    /// `m16n8k16 … .bf16.bf16`.
    Bf16,
    /// `m16n8k16 … .f16.f16`.
    F16,
}

/// One decoded operation.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `call cudaGraphSetConditional, (handle, value)`: sets a graph condition (its arguments
    /// in the registers that stand for the call's `.param` variables).
    SetCondition { handle: Reg, value: Reg },
    /// `mov`: copy the low `bits` of `a`.
    Mov { d: Reg, a: Src, bits: u32 },
    /// `mov.b32 d, {lo, hi}` / `mov.b64 d, {…}`: pack `n` parts of `part` bits.
    Pack { d: Reg, parts: [Src; 4], n: u8, part: u32 },
    /// `mov.b32 {lo, hi}, a`: unpack.
    Unpack { d: [Reg; 4], a: Src, n: u8, part: u32 },
    /// `mov d, %special`.
    Sreg { d: Reg, s: Sreg },
    /// Two-operand integer arithmetic or logic.
    Int { op: IntOp, ty: Int, d: Reg, a: Src, b: Src },
    /// One-operand integer operation.
    IntUn { op: IntUnOp, ty: Int, d: Reg, a: Src },
    /// `mad.lo`.
    MadLo { ty: Int, d: Reg, a: Src, b: Src, c: Src },
    /// `mul.wide`: the double-width product.
    MulWide { ty: Int, d: Reg, a: Src, b: Src },
    /// `mad.wide`: the double-width product plus `c`.
    MadWide { ty: Int, d: Reg, a: Src, b: Src, c: Src },
    /// `bfe`.
    Bfe { ty: Int, d: Reg, a: Src, b: Src, c: Src },
    /// `not.pred`.
    PredNot { d: Reg, a: Src },
    /// `and/or/xor.pred`.
    PredBin { op: BoolOp, d: Reg, a: Src, b: Src },
    /// Two-operand f32 operation.
    F32 { op: FOp, ftz: bool, d: Reg, a: Src, b: Src },
    /// One-operand f32 operation.
    F32Un { op: FUnOp, ftz: bool, d: Reg, a: Src },
    /// `fma.rn.f32`.
    F32Fma { ftz: bool, d: Reg, a: Src, b: Src, c: Src },
    /// Two-operand f64 operation.
    F64 { op: FOp, d: Reg, a: Src, b: Src },
    /// One-operand f64 operation.
    F64Un { op: FUnOp, d: Reg, a: Src },
    /// `fma.rn.f64`.
    F64Fma { d: Reg, a: Src, b: Src, c: Src },
    /// `setp.cmp[.bool]`: `d = (a cmp b) bool c`, `dn = !(a cmp b) bool c`.
    Setp {
        cmp: Cmp,
        ty: CmpTy,
        ftz: bool,
        d: Reg,
        dn: Option<Reg>,
        a: Src,
        b: Src,
        comb: Option<(BoolOp, Src, bool)>,
    },
    /// `selp`: `d = p ? a : b`.
    Selp { bits: u32, d: Reg, a: Src, b: Src, p: Src },
    /// `testp`.
    Testp { op: TestOp, f64: bool, d: Reg, a: Src },
    /// A scalar `cvt`.
    Cvt { conv: Conv, d: Reg, a: Src },
    /// `cvt.rn[.satfinite][.relu].{f16x2,bf16x2,e4m3x2}.f32 d, a, b`: `a` to the upper part.
    CvtPack {
        to: Packed,
        rnd: Rnd,
        sat: bool,
        relu: bool,
        d: Reg,
        a: Src,
        b: Src,
    },
    /// `cvt.rs[.relu][.satfinite].{f16x2,bf16x2}.f32 d, a, b, rbits` and
    /// `cvt.rs.satfinite.e4m3x4.f32 d, {a, b, c, e}, rbits`: stochastic rounding.
    CvtRs {
        to: Packed,
        relu: bool,
        sat: bool,
        d: Reg,
        xs: [Src; 4],
        rbits: Src,
    },
    /// `cvt.rn.f16x2.e4m3x2 d, a`: unpack two e4m3 bytes to f16s.
    CvtUnpackE4m3 { d: Reg, a: Src },
    /// `ld.param`: `bytes` of parameter `param`.
    LdParam { d: Reg, param: u32, bytes: u32 },
    /// `ld.{global,shared}[.vN]`: `n` elements of `bytes` each.
    Ld {
        space: Space,
        bytes: u32,
        n: u8,
        d: [Reg; 4],
        addr: Addr,
    },
    /// `prefetch.global.L2`: no effect, but the address must lie in an allocation.
    Prefetch { addr: Addr },
    /// `cp.async.{ca,cg}.shared.global [dst], [src], bytes[, src_bytes]`: queue a copy of
    /// `bytes` (4, 8 or 16) into shared memory, of which the first `src_bytes` (all when absent)
    /// come from global memory and the rest are zero.
    CpAsync {
        bytes: u32,
        dst: Addr,
        src: Addr,
        src_bytes: Option<Src>,
    },
    /// `cp.async.commit_group`: the thread's copies queued since the last commit become a group.
    CpAsyncCommit,
    /// `cp.async.wait_group n`: perform all but the newest `n` of the thread's groups.
    CpAsyncWait { n: u32 },
    /// `cp.async.wait_all`: commit, then perform all of the thread's groups.
    CpAsyncWaitAll,
    /// `st.{global,shared}[.vN]`.
    St {
        space: Space,
        bytes: u32,
        n: u8,
        s: [Src; 4],
        addr: Addr,
    },
    /// `atom.global d, [addr], b` (`cas`: `d, [addr], b, c`).
    Atom {
        op: AtomOp,
        d: Reg,
        addr: Addr,
        b: Src,
        c: Src,
    },
    /// `cvta.to.global.u64` (global addresses are generic addresses here).
    Cvta { d: Reg, a: Src },
    /// `bra` to instruction index `target`.
    Bra { target: u32 },
    /// `ret` / `exit`.
    Exit,
    /// `bar.sync` / `barrier.sync` (the id is checked, not used: one barrier per block).
    Bar,
    /// `shfl.sync`.
    Shfl {
        mode: ShflMode,
        d: Reg,
        dp: Option<Reg>,
        a: Src,
        b: Src,
        c: Src,
        mask: Src,
    },
    /// `mma.sync.aligned`.
    Mma {
        kind: MmaKind,
        d: [Reg; 4],
        a: [Src; 4],
        b: [Src; 2],
        c: [Src; 4],
    },
    /// `ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared.b16`.
    Ldmatrix {
        n: u8,
        trans: bool,
        d: [Reg; 4],
        addr: Addr,
    },
}

/// An instruction: its operation, its guard predicate and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Inst {
    /// `@%p` / `@!%p`: the predicate register and whether it is negated.
    pub guard: Option<(Reg, bool)>,
    /// The operation.
    pub op: Op,
}
