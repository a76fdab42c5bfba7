//! Warp collectives, run once all 32 lanes have reached them: `shfl.sync`, `mma.sync` and
//! `ldmatrix`, with the PTX ISA's lane mappings. `regs` is the warp's register file: lane
//! `l`'s registers at `l * n ..`.

use crate::inst::{Addr, MmaKind, Reg, ShflMode, Src};
use crate::memory::{read_le, Shared};

#[inline(always)]
fn rd(regs: &[u64], n: usize, lane: usize, s: Src) -> u64 {
    match s {
        Src::Reg(r) => regs[lane * n + r as usize],
        Src::Imm(v) => v,
    }
}

/// `shfl.sync.mode.b32 d[|dp], a, b, c, 0xffffffff` (PTX ISA pseudo-code: `c` packs the
/// segment mask in bits 8–12 and the clamp lane in bits 0–4).
#[allow(clippy::too_many_arguments)]
pub(crate) fn shfl(regs: &mut [u64], n: usize, mode: ShflMode, d: Reg, dp: Option<Reg>, a: Src, b: Src, c: Src) {
    let mut out = [(0u64, false); 32];
    for (lane, o) in out.iter_mut().enumerate() {
        let l = lane as i64;
        let bval = (rd(regs, n, lane, b) & 0x1F) as i64;
        let cv = rd(regs, n, lane, c);
        let (cval, seg) = ((cv & 0x1F) as i64, ((cv >> 8) & 0x1F) as i64);
        let max_lane = (l & seg) | (cval & !seg);
        let min_lane = l & seg;
        let (j, ok) = match mode {
            ShflMode::Up => (l - bval, l - bval >= max_lane),
            ShflMode::Down => (l + bval, l + bval <= max_lane),
            ShflMode::Bfly => (l ^ bval, (l ^ bval) <= max_lane),
            ShflMode::Idx => {
                let j = min_lane | (bval & !seg);
                (j, j <= max_lane)
            }
        };
        let src = if ok { j as usize } else { lane };
        *o = (rd(regs, n, src, a) & 0xFFFF_FFFF, ok);
    }
    for (lane, (v, ok)) in out.into_iter().enumerate() {
        regs[lane * n + d as usize] = v;
        if let Some(p) = dp {
            regs[lane * n + p as usize] = ok as u64;
        }
    }
}

/// `mma.sync.aligned.{m16n8k8,m16n8k16}.row.col.f32.{tf32,bf16,f16}…f32`: `D = A·B + C`
/// with exact products summed in f64 and rounded once to f32 toward zero, as the tensor cores
/// round their sums (tf32 operands: the top 19 bits of each `.b32`). Fragments as the PTX ISA
/// lays them out, with `g = lane / 4`, `t = lane % 4`:
/// tf32 A `a0:(g,t) a1:(g+8,t) a2:(g,t+4) a3:(g+8,t+4)`, B `b0:(t,g) b1:(t+4,g)`;
/// 16-bit A register `r` holds `(g + 8(r%2), 2t + 8(r/2) + {0,1})`, B register `r` holds
/// `(2t + 8r + {0,1}, g)`; C/D `c_i:(g + 8(i/2), 2t + i%2)`.
pub(crate) fn mma(regs: &mut [u64], n: usize, kind: MmaKind, d: [Reg; 4], a: [Src; 4], b: [Src; 2], c: [Src; 4]) {
    let kk = if kind == MmaKind::Tf32 { 8 } else { 16 };
    let mut am = [[0f64; 16]; 16];
    let mut bm = [[0f64; 8]; 16];
    let mut cm = [[0f64; 8]; 16];
    let half = |bits: u64| -> f64 {
        match kind {
            MmaKind::Bf16 => half::bf16::from_bits(bits as u16).to_f64(),
            _ => half::f16::from_bits(bits as u16).to_f64(),
        }
    };
    for lane in 0..32 {
        let (g, t) = (lane / 4, lane % 4);
        for (i, s) in c.iter().enumerate() {
            cm[g + 8 * (i / 2)][2 * t + i % 2] = f32::from_bits(rd(regs, n, lane, *s) as u32) as f64;
        }
        if kind == MmaKind::Tf32 {
            let tf = |v: u64| f32::from_bits(v as u32 & 0xFFFF_E000) as f64;
            for (i, s) in a.iter().enumerate() {
                am[g + 8 * (i % 2)][t + 4 * (i / 2)] = tf(rd(regs, n, lane, *s));
            }
            for (i, s) in b.iter().enumerate() {
                bm[t + 4 * i][g] = tf(rd(regs, n, lane, *s));
            }
        } else {
            for (r, s) in a.iter().enumerate() {
                let v = rd(regs, n, lane, *s);
                for h in 0..2 {
                    am[g + 8 * (r % 2)][2 * t + 8 * (r / 2) + h] = half(v >> (16 * h));
                }
            }
            for (r, s) in b.iter().enumerate() {
                let v = rd(regs, n, lane, *s);
                for h in 0..2 {
                    bm[2 * t + 8 * r + h][g] = half(v >> (16 * h));
                }
            }
        }
    }
    for lane in 0..32 {
        let (g, t) = (lane / 4, lane % 4);
        for (i, r) in d.iter().enumerate() {
            let (row, col) = (g + 8 * (i / 2), 2 * t + i % 2);
            let mut acc = cm[row][col];
            for k in 0..kk {
                acc += am[row][k] * bm[k][col];
            }
            let v = f32_toward_zero(acc);
            regs[lane * n + *r as usize] = if v.is_nan() { 0x7FFF_FFFF } else { v.to_bits() as u64 };
        }
    }
}

/// `x` rounded to f32 toward zero (an overflow stays infinite).
fn f32_toward_zero(x: f64) -> f32 {
    let v = x as f32;
    if v.is_finite() && f64::from(v).abs() > x.abs() {
        // Rounded away from zero: the next f32 toward zero (sign and magnitude bits).
        f32::from_bits(v.to_bits() - 1)
    } else {
        v
    }
}

/// `ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16`: lane `8m + r` gives the address
/// of row `r` of matrix `m` (16 bytes); lane `l` receives in `d[m]` the pair of elements
/// `(l/4, 2(l%4) + {0,1})` of matrix `m`, or with `.trans` `(2(l%4) + {0,1}, l/4)`. An error
/// names the lane, the address and why it is not addressable (or a `cp.async` still writes it).
pub(crate) fn ldmatrix(
    regs: &mut [u64],
    n: usize,
    shared: &Shared,
    count: u8,
    trans: bool,
    d: [Reg; 4],
    addr: Addr,
) -> Result<(), (usize, u64, String)> {
    let mut mats = [[[0u16; 8]; 8]; 4];
    for (m, mat) in mats.iter_mut().enumerate().take(count as usize) {
        for (r, row) in mat.iter_mut().enumerate() {
            let lane = 8 * m + r;
            let at = rd(regs, n, lane, addr.base).wrapping_add(addr.offset as u64);
            let bytes = shared.read(at, 16).map_err(|e| (lane, at, e))?;
            for (c, e) in row.iter_mut().enumerate() {
                *e = read_le(&bytes[2 * c..2 * c + 2]) as u16;
            }
        }
    }
    for lane in 0..32 {
        let (q, p) = (lane / 4, 2 * (lane % 4));
        for (m, mat) in mats.iter().enumerate().take(count as usize) {
            let (lo, hi) = if trans {
                (mat[p][q], mat[p + 1][q])
            } else {
                (mat[q][p], mat[q][p + 1])
            };
            regs[lane * n + d[m] as usize] = lo as u64 | (hi as u64) << 16;
        }
    }
    Ok(())
}
