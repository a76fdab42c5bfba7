//! Device buffers a layer reads: its weights and the per-step inputs and outputs of a batch.

use super::Result;
use half::bf16;
use replay_kernels::ssm::reference::{Mamba2Params, StepInput};
use replay_kernels::ssm::shapes::ModelShape;
use replay_runtime::{DeviceBuffer, Stream};

/// One layer's parameters on the device: `A`, `D`, `dt_bias` (f32, `[heads]`).
pub struct Mamba2Weights {
    /// `A < 0`.
    pub a: DeviceBuffer<f32>,
    /// `D`.
    pub d: DeviceBuffer<f32>,
    /// `dt_bias`.
    pub dt_bias: DeviceBuffer<f32>,
}

impl Mamba2Weights {
    /// Uploads `params` (rounded to f32).
    pub fn upload(stream: &Stream, params: &Mamba2Params) -> Result<Mamba2Weights> {
        let f = |v: &[f64]| DeviceBuffer::from_host(stream, &v.iter().map(|&x| x as f32).collect::<Vec<_>>());
        Ok(Mamba2Weights {
            a: f(&params.a)?,
            d: f(&params.d)?,
            dt_bias: f(&params.dt_bias)?,
        })
    }
}

/// The per-step input and output buffers of a batch, token-major within a row
/// (`dt [batch, n, heads]`, `x, z, y [batch, n, heads, dv]`, `B, C [batch, n, groups, dk]`),
/// sized for up to `tokens` tokens per row (1 for decoding, `T` for verification). A model
/// writes them in place between graph replays.
pub struct StepIo {
    pub(super) shape: ModelShape,
    pub(super) batch: usize,
    pub(super) tokens: usize,
    pub(super) gated: bool,
    /// `dt` (bf16).
    pub dt: DeviceBuffer<bf16>,
    /// `x` (bf16).
    pub x: DeviceBuffer<bf16>,
    /// `B` (bf16).
    pub b: DeviceBuffer<bf16>,
    /// `C` (bf16).
    pub c: DeviceBuffer<bf16>,
    /// `z` (bf16; one element when ungated).
    pub z: DeviceBuffer<bf16>,
    /// `y` (bf16).
    pub out: DeviceBuffer<bf16>,
}

impl StepIo {
    /// Zeroed buffers for `batch` rows of up to `tokens` tokens each.
    pub fn new(stream: &Stream, shape: ModelShape, batch: usize, tokens: usize, gated: bool) -> Result<StepIo> {
        let n = batch * tokens;
        let hv = shape.heads * shape.dv;
        let gk = shape.groups * shape.dk;
        Ok(StepIo {
            shape,
            batch,
            tokens,
            gated,
            dt: DeviceBuffer::zeros(stream, n * shape.heads)?,
            x: DeviceBuffer::zeros(stream, n * hv)?,
            b: DeviceBuffer::zeros(stream, n * gk)?,
            c: DeviceBuffer::zeros(stream, n * gk)?,
            z: DeviceBuffer::zeros(stream, if gated { n * hv } else { 1 })?,
            out: DeviceBuffer::zeros(stream, n * hv)?,
        })
    }

    /// Rows of the batch.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Most tokens per row.
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// Whether `z` is read.
    pub fn gated(&self) -> bool {
        self.gated
    }

    /// Uploads `n` tokens per row (`rows[r]` holds row `r`'s tokens, `None` for padding rows,
    /// whose inputs are written as zeros and never read), rounding to bf16. The kernels then
    /// read the first `batch · n` tokens, token-major within a row.
    pub fn upload(&mut self, stream: &Stream, rows: &[Option<&[StepInput]>]) -> Result<usize> {
        let s = self.shape;
        assert_eq!(rows.len(), self.batch, "one entry per row");
        let n = rows.iter().flatten().map(|r| r.len()).max().unwrap_or(1).max(1);
        assert!(n <= self.tokens, "{n} tokens per row, buffers hold {}", self.tokens);
        let bf = |v: &[f64], out: &mut Vec<bf16>| out.extend(v.iter().map(|&x| bf16::from_f64(x)));
        let (mut dt, mut x, mut b, mut c, mut z) = (vec![], vec![], vec![], vec![], vec![]);
        for row in rows {
            for t in 0..n {
                match row {
                    Some(toks) => {
                        let tok = &toks[t];
                        bf(&tok.dt, &mut dt);
                        bf(&tok.x, &mut x);
                        bf(&tok.b, &mut b);
                        bf(&tok.c, &mut c);
                        match &tok.z {
                            Some(v) => bf(v, &mut z),
                            None => z.extend(std::iter::repeat_n(bf16::ZERO, s.heads * s.dv)),
                        }
                    }
                    None => {
                        dt.extend(std::iter::repeat_n(bf16::ZERO, s.heads));
                        x.extend(std::iter::repeat_n(bf16::ZERO, s.heads * s.dv));
                        b.extend(std::iter::repeat_n(bf16::ZERO, s.groups * s.dk));
                        c.extend(std::iter::repeat_n(bf16::ZERO, s.groups * s.dk));
                        z.extend(std::iter::repeat_n(bf16::ZERO, s.heads * s.dv));
                    }
                }
            }
        }
        let pad = |mut v: Vec<bf16>, len: usize| {
            v.resize(len, bf16::ZERO);
            v
        };
        self.dt.copy_from_host(stream, &pad(dt, self.dt.len()))?;
        self.x.copy_from_host(stream, &pad(x, self.x.len()))?;
        self.b.copy_from_host(stream, &pad(b, self.b.len()))?;
        self.c.copy_from_host(stream, &pad(c, self.c.len()))?;
        if self.gated {
            self.z.copy_from_host(stream, &pad(z, self.z.len()))?;
        }
        Ok(n)
    }

    /// Fills every input with pseudo-random values (benchmarks): `dt, x, B, C, z` uniform in
    /// `[-1, 1)` rounded to bf16.
    pub fn randomize(&mut self, stream: &Stream, seed: u64) -> Result<()> {
        use replay_runtime::tune::bench::uniform;
        let r = |i: u64, n: usize| -> Vec<bf16> {
            uniform(seed ^ (i * 0x9e37), n, -1.0, 1.0)
                .into_iter()
                .map(bf16::from_f64)
                .collect()
        };
        let (n1, n2, n3, n4) = (self.dt.len(), self.x.len(), self.b.len(), self.z.len());
        self.dt.copy_from_host(stream, &r(1, n1))?;
        self.x.copy_from_host(stream, &r(2, n2))?;
        self.b.copy_from_host(stream, &r(3, n3))?;
        self.c.copy_from_host(stream, &r(4, n3))?;
        self.z.copy_from_host(stream, &r(5, n4))?;
        Ok(())
    }

    /// The outputs of the first `n` tokens of every row, `[batch][n][heads][dv]`, as f64.
    pub fn outputs(&self, stream: &Stream, n: usize) -> Result<Vec<f64>> {
        let all = self.out.to_host(stream)?;
        let len = self.batch * n * self.shape.heads * self.shape.dv;
        Ok(all[..len].iter().map(|v| v.to_f64()).collect())
    }
}
