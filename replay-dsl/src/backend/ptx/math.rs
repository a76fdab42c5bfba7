//! Accurate f32 math (relative error ≲ 2e-6 away from cancellation) built from the approximate
//! hardware units.

use super::regs::{f32_imm, Class, Reg};
use super::Emitter;

const LOG2E_HI: f32 = std::f32::consts::LOG2_E;
const LOG2E_LO: f32 = 1.925_963e-8;
const LN2: f32 = std::f32::consts::LN_2;

impl Emitter<'_> {
    fn f32_op(&mut self, inst: &str, args: &[&dyn std::fmt::Display]) -> Reg {
        let d = self.reg(Class::F32);
        let a: Vec<String> = args.iter().map(|x| x.to_string()).collect();
        emit!(self, "{inst} {d}, {}", a.join(", "));
        d
    }

    /// e^x: `2^(x·log2 e)` with the rounding error of the product folded back in
    /// (`2^(h+l) ≈ 2^h·(1 + l·ln 2)`), exact at ±inf and NaN.
    pub(super) fn exp_f32(&mut self, x: Reg) -> Reg {
        let (hi, lo, ln2) = (f32_imm(LOG2E_HI), f32_imm(LOG2E_LO), f32_imm(LN2));
        let th = self.f32_op("mul.rn.f32", &[&x, &hi]);
        let nth = self.f32_op("neg.f32", &[&th]);
        let tl = self.f32_op("fma.rn.f32", &[&x, &hi, &nth]);
        let tl = self.f32_op("fma.rn.f32", &[&x, &lo, &tl]);
        let e = self.f32_op("ex2.approx.f32", &[&th]);
        let tl = self.f32_op("mul.rn.f32", &[&tl, &ln2]);
        let r = self.f32_op("fma.rn.f32", &[&e, &tl, &e]);
        let (p, q) = (self.reg(Class::Pred), self.reg(Class::Pred));
        emit!(self, "testp.finite.f32 {p}, {th}");
        emit!(self, "testp.finite.f32 {q}, {e}");
        emit!(self, "and.pred {p}, {p}, {q}");
        self.f32_op("selp.f32", &[&r, &e, &p])
    }

    /// ln x = log2(x)·ln 2.
    pub(super) fn log_f32(&mut self, x: Reg) -> Reg {
        let l = self.f32_op("lg2.approx.f32", &[&x]);
        self.f32_op("mul.rn.f32", &[&l, &f32_imm(LN2)])
    }

    /// 1 / (1 + e^-x).
    pub(super) fn sigmoid_f32(&mut self, x: Reg) -> Reg {
        let n = self.f32_op("neg.f32", &[&x]);
        let e = self.exp_f32(n);
        let d = self.f32_op("add.rn.f32", &[&e, &f32_imm(1.0)]);
        self.f32_op("div.rn.f32", &[&f32_imm(1.0), &d])
    }

    /// max(x, 0) + log1p(e^-|x|), with log1p(u) = 2·atanh(u / (2 + u)) as a series in
    /// s = u/(2+u) ≤ 1/3 (accurate for tiny u, where log(1+u) would cancel).
    pub(super) fn softplus_f32(&mut self, x: Reg) -> Reg {
        let a = self.f32_op("abs.f32", &[&x]);
        let na = self.f32_op("neg.f32", &[&a]);
        let u = self.exp_f32(na);
        let t = self.f32_op("add.rn.f32", &[&u, &f32_imm(2.0)]);
        let s = self.f32_op("div.rn.f32", &[&u, &t]);
        let s2 = self.f32_op("mul.rn.f32", &[&s, &s]);
        // P(z) = Σ z^k / (2k+1), k = 0..8, in Horner form.
        let mut p = self.f32_op("mov.f32", &[&f32_imm(1.0 / 17.0)]);
        for k in (0..8).rev() {
            p = self.f32_op("fma.rn.f32", &[&p, &s2, &f32_imm(1.0 / (2 * k + 1) as f32)]);
        }
        let s2x = self.f32_op("add.rn.f32", &[&s, &s]);
        let l = self.f32_op("mul.rn.f32", &[&s2x, &p]);
        let m = self.f32_op("max.f32", &[&x, &f32_imm(0.0)]);
        self.f32_op("add.rn.f32", &[&m, &l])
    }

    /// tanh x: an odd polynomial for |x| < 0.625 (Cephes tanhf), else
    /// sign(x)·(1 − 2/(e^{2|x|} + 1)). (`tanh.approx.f32` is not accurate enough.)
    pub(super) fn tanh_f32(&mut self, x: Reg) -> Reg {
        let a = self.f32_op("abs.f32", &[&x]);
        let a2 = self.f32_op("add.rn.f32", &[&a, &a]);
        let e = self.exp_f32(a2);
        let e1 = self.f32_op("add.rn.f32", &[&e, &f32_imm(1.0)]);
        let q = self.f32_op("div.rn.f32", &[&f32_imm(2.0), &e1]);
        let big = self.f32_op("sub.rn.f32", &[&f32_imm(1.0), &q]);
        let big = self.f32_op("copysign.f32", &[&x, &big]);
        let z = self.f32_op("mul.rn.f32", &[&x, &x]);
        let mut p = self.f32_op("mov.f32", &[&f32_imm(-0.005_704_988_7)]);
        for c in [0.020_639_088, -0.053_739_715, 0.133_314_42, -0.333_332_8] {
            p = self.f32_op("fma.rn.f32", &[&p, &z, &f32_imm(c)]);
        }
        let pz = self.f32_op("mul.rn.f32", &[&p, &z]);
        let small = self.f32_op("fma.rn.f32", &[&pz, &x, &x]);
        let ps = self.reg(Class::Pred);
        emit!(self, "setp.lt.f32 {ps}, {a}, {}", f32_imm(0.625));
        self.f32_op("selp.f32", &[&small, &big, &ps])
    }
}
