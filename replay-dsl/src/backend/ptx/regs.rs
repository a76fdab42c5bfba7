//! Typed PTX virtual registers.

use crate::types::{DType, Elem};
use std::fmt;

/// A register class, one `.reg` declaration each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// `.pred` (`%p`): booleans.
    Pred,
    /// `.b16` (`%h`): f16, bf16 and f8e4m3 (in the low byte).
    B16,
    /// `.b32` (`%r`): i32 and u32.
    B32,
    /// `.f32` (`%f`).
    F32,
    /// `.b64` (`%rd`): i64 and pointers.
    B64,
    /// `.f64` (`%fd`): exact intermediate arithmetic.
    F64,
}

const CLASSES: [Class; 6] = [Class::Pred, Class::B16, Class::B32, Class::F32, Class::B64, Class::F64];

impl Class {
    fn prefix(self) -> &'static str {
        match self {
            Class::Pred => "%p",
            Class::B16 => "%h",
            Class::B32 => "%r",
            Class::F32 => "%f",
            Class::B64 => "%rd",
            Class::F64 => "%fd",
        }
    }
    fn decl(self) -> &'static str {
        match self {
            Class::Pred => ".pred",
            Class::B16 => ".b16",
            Class::B32 => ".b32",
            Class::F32 => ".f32",
            Class::B64 => ".b64",
            Class::F64 => ".f64",
        }
    }
    /// The type suffix of `mov`/`selp` for this class.
    pub fn mov_type(self) -> &'static str {
        match self {
            Class::Pred => "pred",
            Class::B16 => "b16",
            Class::B32 => "b32",
            Class::F32 => "f32",
            Class::B64 => "b64",
            Class::F64 => "f64",
        }
    }
    /// The register class holding an element type.
    pub fn of_elem(e: Elem) -> Class {
        match e {
            Elem::Bool => Class::Pred,
            Elem::I32 | Elem::U32 => Class::B32,
            Elem::I64 => Class::B64,
            Elem::F32 => Class::F32,
            Elem::F16 | Elem::BF16 | Elem::F8E4M3 => Class::B16,
        }
    }
    /// The register class holding a tile element type (pointers are `.b64`).
    pub fn of(dtype: DType) -> Class {
        match dtype {
            DType::Ptr(_) => Class::B64,
            DType::Val(e) => Class::of_elem(e),
        }
    }
}

/// A virtual register.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reg {
    /// Its class.
    pub class: Class,
    /// Its number within the class.
    pub n: u32,
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.class.prefix(), self.n)
    }
}

/// Hands out fresh registers and declares them.
#[derive(Clone, Debug, Default)]
pub struct RegAlloc {
    counts: [u32; 6],
}

impl RegAlloc {
    /// A fresh register of class `c`.
    pub fn fresh(&mut self, c: Class) -> Reg {
        let i = CLASSES.iter().position(|x| *x == c).expect("known class");
        self.counts[i] += 1;
        Reg {
            class: c,
            n: self.counts[i],
        }
    }
    /// The `.reg` declarations of every register handed out.
    pub fn declarations(&self) -> String {
        let mut s = String::new();
        for (c, n) in CLASSES.iter().zip(self.counts) {
            if n > 0 {
                s.push_str(&format!("\t.reg {} {}<{}>;\n", c.decl(), c.prefix(), n + 1));
            }
        }
        s
    }
}

/// A `.f32` immediate.
pub fn f32_imm(x: f32) -> String {
    format!("0f{:08X}", x.to_bits())
}

/// A `.f64` immediate.
pub fn f64_imm(x: f64) -> String {
    format!("0d{:016X}", x.to_bits())
}
