//! A row's drafts verified by its fold ([`super::fold::mamba2_fold`] with `VERIFY`): once the
//! committed records are folded, the checkpoint is the state after them, and the drafts'
//! outputs are those of a verification with no committed record — from the folded rows, which
//! the fold holds, instead of a second read of the old checkpoint by the verification.

use super::ring_position;
use super::verify::{draft_columns, gated};
use replay_dsl::ir::Value;
use replay_dsl::prelude::*;

/// The verification's inputs the fold reads for its drafts.
#[derive(Clone, Copy)]
pub(super) struct DraftArgs {
    /// `dt [batch, n_drafts, HEADS]`.
    pub dt: Tile<Ptr<bf16>>,
    /// `x [batch, n_drafts, HEADS, DV]`.
    pub x: Tile<Ptr<bf16>>,
    /// `B [batch, n_drafts, GROUPS, DK]`.
    pub bmat: Tile<Ptr<bf16>>,
    /// `C [batch, n_drafts, GROUPS, DK]`.
    pub cmat: Tile<Ptr<bf16>>,
    /// `z [batch, n_drafts, HEADS, DV]`, read where `Some`.
    pub z: Option<Tile<Ptr<bf16>>>,
    /// `D [HEADS]`.
    pub d: Tile<Ptr<f32>>,
    /// `dt_bias [HEADS]`.
    pub dt_bias: Tile<Ptr<f32>>,
}

/// Where a head's drafts' outputs and records go: `y [batch, n_drafts, HEADS, DV]`, and the
/// slot's ring of `x` and `dt'`.
#[derive(Clone, Copy)]
pub(super) struct DraftOutputs {
    /// The verification's outputs.
    pub out: Tile<Ptr<bf16>>,
    /// The slot's ring `x` `[CAP, HEADS, DV]`.
    pub ring_x: Tile<Ptr<bf16>>,
    /// The slot's ring `dt'` `[CAP, HEADS]`.
    pub ring_dt: Tile<Ptr<f32>>,
}

/// One row's drafts in a program of group `g`: draft column `s` (`tq` of them, `T` rounded up
/// as the verification does) reads token `min(s, n - 1)`; columns past `n` are never written.
#[derive(Clone, Copy)]
pub(super) struct Drafts {
    args: DraftArgs,
    g: Tile<i32>,
    groups: usize,
    dk: usize,
    /// Draft columns (`T` rounded up).
    tq: usize,
    /// Draft columns `s` `[tq]`.
    s: Tile<i32>,
    /// Which columns are drafts (`s < n`).
    pub live: Tile<bool>,
    /// The token each column reads.
    tok: Tile<i32>,
    /// Their keys `[tq, DK]` (0 past `n`).
    pub keys: Tile<bf16>,
    /// Their queries `Qᵀ` `[DK, tq]` (exact bf16 values).
    pub queries: Tile<f32>,
    /// `Kᵀ Q` among them `[tq, tq]`.
    kq: Tile<f32>,
}

/// Two-stage shared buffers `[tq, rows]` that a head's drafts' `x` and `z` are copied into
/// ([`Drafts::inputs`]) ahead of their use, through no registers: stage `head & 1`.
#[derive(Clone, Copy)]
pub(super) struct DraftStages {
    x: Shared<bf16>,
    z: Option<Shared<bf16>>,
}

/// One head's inputs of its drafts from [`Drafts::inputs`]: its per-head scalars in registers
/// (their `x` and `z` in the [`DraftStages`]).
#[derive(Clone, Copy)]
pub(super) struct DraftInputs {
    /// The drafts' `dt` (raw, 0 past `n`) `[tq]`.
    dt: Tile<bf16>,
    /// The head's `dt_bias` and `D`.
    bias_d: (Tile<f32>, Tile<f32>),
}

/// A head's inputs are carried across the fold's heads (its `PREFETCH`).
impl Carry for DraftInputs {
    fn flatten(&self, out: &mut Vec<Value>) {
        (self.dt, self.bias_d).flatten(out)
    }

    fn rebuild(&self, vals: &mut dyn Iterator<Item = Value>) -> Self {
        let (dt, bias_d) = (self.dt, self.bias_d).rebuild(vals);
        DraftInputs { dt, bias_d }
    }
}

impl Drafts {
    /// The drafts of batch row `row` (`n` of them, at most `t`) of group `g`.
    #[kernel_fn]
    pub fn of(
        args: DraftArgs,
        (row, n, g): (Tile<i32>, Tile<i32>, Tile<i32>),
        t: usize,
        groups: usize,
        dk: usize,
    ) -> Drafts {
        let tq = draft_columns(t);
        let s = arange(tq);
        let live = s < n;
        let tok = row * n + minimum(n - 1, s);
        let kk = arange(dk);
        let base = (tok * groups as i32 + g) * dk as i32;
        let keys = load(args.bmat + base.expand_dims(1) + kk.expand_dims(0), live.expand_dims(1));
        // Qᵀ [DK, tq], contiguous along DK (the products with it read it in registers).
        let q_bf = load(args.cmat + base.expand_dims(0) + kk.expand_dims(1), true);
        Drafts {
            args,
            g,
            groups,
            dk,
            tq,
            s,
            live,
            tok,
            keys,
            queries: q_bf.cast::<f32>(),
            kq: dot(keys, q_bf), // bf16 products are exact in f32
        }
    }

    /// Ring positions `(base + s) % cap` of the drafts (`base < cap + L`: one wrap).
    #[kernel_fn]
    pub fn ring_positions(&self, base: Tile<i32>, cap: usize) -> Tile<i32> {
        ring_position(base + self.s, cap)
    }

    /// The queries' rows `kc` (key columns) `[len kc, tq]`.
    #[kernel_fn]
    pub fn query_rows(&self, kc: Tile<i32>) -> Tile<f32> {
        let base = (self.tok * self.groups as i32 + self.g) * self.dk as i32;
        load(self.args.cmat + base.expand_dims(0) + kc.expand_dims(1), true).cast::<f32>()
    }

    /// The shared buffers for the drafts' `x` and `z` of `rows` value rows (`z` where the kernel
    /// has one).
    #[kernel_fn]
    pub fn stages(&self, rows: usize) -> DraftStages {
        DraftStages {
            x: shared::<bf16>(2, &[self.tq, rows]),
            z: self.args.z.map(|_| shared::<bf16>(2, &[self.tq, rows])),
        }
    }

    /// Copy groups each [`Drafts::inputs`] issues: one per staged tensor.
    pub fn copy_groups(&self) -> usize {
        1 + usize::from(self.args.z.is_some())
    }

    /// Starts head `head`'s inputs of the drafts for its value rows `v` (which exist where
    /// `vmask`): its `x` and `z` copied into stage `head & 1` of `st` (one copy group each),
    /// its `dt`, `dt_bias` and `D` loaded. Nothing is read where `m` is false.
    #[kernel_fn]
    pub fn inputs(
        &self,
        st: DraftStages,
        head: Tile<i32>,
        (v, vmask): (Tile<i32>, Tile<bool>),
        m: Tile<bool>,
        (heads, dv): (usize, usize),
    ) -> DraftInputs {
        let args = self.args;
        // [tq, rows]: each draft's value rows are contiguous.
        let at = (self.tok * (heads * dv) as i32 + head * dv as i32).expand_dims(1) + v.expand_dims(0);
        let mask = self.live.expand_dims(1) & vmask.expand_dims(0) & m;
        st.x.copy_async(head & 1, args.x + at, mask);
        if let (Some(zb), Some(z)) = (st.z, args.z) {
            zb.copy_async(head & 1, z + at, mask);
        }
        DraftInputs {
            dt: load(args.dt + self.tok * heads as i32 + head, self.live & m),
            bias_d: (load(args.dt_bias + head, m), load(args.d + head, m)),
        }
    }

    /// Head `head`'s outputs for its value rows `v` (which exist where `vmask`), from its
    /// [`Drafts::inputs`] (`inp`, and `x` and `z` in `st` once at most `pending` copy groups are
    /// in flight: the next heads') and `sq`, its folded checkpoint rows times the queries
    /// `[rows, tq]`: `γ_{h+1:h+s} (S Q)_s + Σ_{s' ≤ s} γ_{h+s'+1:h+s} dt'_{s'} (k_{s'}·q_s)
    /// x_{s'} + D x_s` (times `silu(z_s)` with `z`), `γ` from `a_h` (`A log2 e`) and the
    /// drafts' `dt'`, each a plain sum of its range as in the verification. The drafts' `x`
    /// and (by the programs of the first value block) `dt'` are appended to the ring at `pos`
    /// (the drafts' positions).
    #[kernel_fn]
    #[allow(clippy::too_many_arguments)]
    pub fn outputs(
        &self,
        (head, a_h): (Tile<i32>, Tile<f32>),
        (inp, st, pending): (DraftInputs, DraftStages, usize),
        (v, vmask): (Tile<i32>, Tile<bool>),
        sq: Tile<f32>,
        pos: Tile<i32>,
        to: DraftOutputs,
        (heads, dv): (usize, usize),
    ) {
        let live = self.live;
        let (bias, d_h) = inp.bias_d;
        let dt_d = select(live, softplus(inp.dt.cast::<f32>() + bias), 0.0);
        // γ_{h+1:h+s} [tq], and the drafts' weights [tq (s'), tq (s)]: draft s' weighs on the
        // columns s ≥ s', decayed over the drafts after it (a running sum along the columns).
        let gam = exp2(a_h * cumsum(dt_d, 0));
        let ii = self.s.expand_dims(1);
        let ss = self.s.expand_dims(0);
        let expo = cumsum(select(ii < ss, dt_d.expand_dims(0), 0.0), 1);
        let w = select(ii <= ss, exp2(a_h * expo) * dt_d.expand_dims(1), 0.0);
        // x, z, y of (value row, draft) [rows, tq].
        wait_async(pending);
        let x_s = st.x.read(head & 1).trans();
        let z_s = st.z.map(|zb| zb.read(head & 1).trans());
        let xo = (self.tok * (heads * dv) as i32 + head * dv as i32).expand_dims(0) + v.expand_dims(1);
        let m = vmask.expand_dims(1) & live.expand_dims(0);
        let xf = x_s.cast::<f32>();
        let y = gam.expand_dims(0) * sq + dot(xf, w * self.kq) + d_h * xf;
        store(to.out + xo, gated(y, z_s).cast::<bf16>(), m);
        let at = (pos * (heads * dv) as i32 + head * dv as i32).expand_dims(0) + v.expand_dims(1);
        store(to.ring_x + at, x_s, m);
        store(
            to.ring_dt + pos * heads as i32 + head,
            dt_d,
            live & (program_id(0) == 0),
        );
    }
}
