//! Constant folding and algebraic simplification.

use crate::error::CompileError;
use crate::ir::{BinaryOp, Block, CmpOp, Const, Inst, Kernel, Op, Rounding, UnaryOp, Value};
use crate::types::{Elem, Ty};
use std::collections::HashMap;

/// Folds operations on constants into constants, removes identities (`x + 0`, `x * 1`, shape
/// ops on constants), and replaces control flow decided by constants with what runs: a loop of
/// constant bounds that runs once by its body, one that never runs by its initial values, a
/// branch on a constant by the block it takes.
pub fn fold(kernel: &mut Kernel) -> Result<(), CompileError> {
    let mut consts: HashMap<Value, Const> = HashMap::new();
    let mut replace: HashMap<Value, Value> = HashMap::new();
    let types = kernel.values.clone();
    run(&mut kernel.body, &types, &mut consts, &mut replace);
    Ok(())
}

fn run(block: &mut Block, types: &[Ty], consts: &mut HashMap<Value, Const>, replace: &mut HashMap<Value, Value>) {
    for mut inst in std::mem::take(&mut block.insts) {
        inst.op.map_operands(|v| *replace.get(&v).unwrap_or(&v));
        if let Some(taken) = decided_flow(&mut inst, consts, replace) {
            if let Some(mut body) = taken {
                run(&mut body, types, consts, replace);
                if let Some(Inst { op: Op::Yield(out), .. }) = body.insts.pop() {
                    for (r, v) in inst.results.iter().zip(out) {
                        replace.insert(*r, v);
                    }
                }
                block.insts.extend(body.insts);
            }
            continue;
        }
        for b in inst.op.blocks_mut() {
            run(b, types, consts, replace);
        }
        block.insts.push(inst);
        let inst = block.insts.last_mut().expect("just pushed");
        if inst.results.len() != 1 {
            continue;
        }
        let r = inst.results[0];
        let ty = &types[r.0 as usize];
        match simplify(&inst.op, ty, types, consts) {
            Some(Folded::Const(c)) => {
                inst.op = Op::Const(c);
                consts.insert(r, c);
            }
            Some(Folded::Same(v)) if types[v.0 as usize] == *ty => {
                replace.insert(r, v);
            }
            _ => {
                if let Op::Const(c) = inst.op {
                    consts.insert(r, c);
                }
            }
        }
    }
}

/// For a loop whose constant bounds make it run at most once, or a branch on a constant: the
/// block that runs in its place (`Some(None)` when none does, the results then being the
/// loop's initial values), its arguments bound in `replace`. `None` when `inst` is not such.
fn decided_flow(
    inst: &mut Inst,
    consts: &HashMap<Value, Const>,
    replace: &mut HashMap<Value, Value>,
) -> Option<Option<Block>> {
    let int = |v: &Value| match consts.get(v) {
        Some(Const::Int(i)) => Some(*i),
        _ => None,
    };
    match &mut inst.op {
        Op::For {
            lo,
            hi,
            step,
            init,
            body,
        } => {
            let (l, h, st) = (int(lo)?, int(hi)?, int(step)?);
            if st <= 0 || h > l.saturating_add(st) {
                return None;
            }
            if h <= l {
                for (r, v) in inst.results.iter().zip(init.iter()) {
                    replace.insert(*r, *v);
                }
                return Some(None);
            }
            let body = std::mem::take(body);
            for (a, v) in body.args.iter().zip(std::iter::once(&*lo).chain(init.iter())) {
                replace.insert(*a, *v);
            }
            Some(Some(Block {
                args: vec![],
                insts: body.insts,
            }))
        }
        Op::If {
            cond,
            then_block,
            else_block,
        } => {
            let taken = match consts.get(cond)? {
                Const::Bool(true) => then_block,
                Const::Bool(false) => else_block,
                _ => return None,
            };
            Some(Some(std::mem::take(taken)))
        }
        _ => None,
    }
}

enum Folded {
    Const(Const),
    Same(Value),
}

fn simplify(op: &Op, ty: &Ty, types: &[Ty], consts: &HashMap<Value, Const>) -> Option<Folded> {
    let c = |v: &Value| consts.get(v).copied();
    let elem = ty.dtype.val();
    match op {
        Op::Splat(a) | Op::Broadcast(a) | Op::ExpandDims(a, _) | Op::Reshape(a) | Op::Trans(a) => {
            c(a).map(Folded::Const)
        }
        Op::Binary(bop, a, b) => {
            let e = elem?;
            match (c(a), c(b)) {
                (Some(x), Some(y)) => fold_binary(*bop, e, x, y).map(Folded::Const),
                (None, Some(y)) if is_identity_rhs(*bop, e, y) => Some(Folded::Same(*a)),
                (Some(x), None) if is_identity_lhs(*bop, e, x) => Some(Folded::Same(*b)),
                _ => None,
            }
        }
        Op::Unary(uop, a) => {
            let e = elem?;
            let x = c(a)?;
            match (uop, x) {
                (UnaryOp::Neg, Const::Int(i)) => Some(Folded::Const(Const::Int(wrap(e, i.wrapping_neg())))),
                (UnaryOp::Neg, Const::Float(f)) => Some(Folded::Const(Const::Float(-f))),
                (UnaryOp::Not, Const::Bool(b)) => Some(Folded::Const(Const::Bool(!b))),
                (UnaryOp::Not, Const::Int(i)) => Some(Folded::Const(Const::Int(wrap(e, !i)))),
                (UnaryOp::Abs, Const::Float(f)) => Some(Folded::Const(Const::Float(f.abs()))),
                _ => None,
            }
        }
        Op::Cmp(cop, a, b) => {
            let (x, y) = (c(a)?, c(b)?);
            let ord = match (x, y) {
                (Const::Int(i), Const::Int(j)) => i.partial_cmp(&j),
                (Const::Float(i), Const::Float(j)) => i.partial_cmp(&j),
                (Const::Bool(i), Const::Bool(j)) => i.partial_cmp(&j),
                _ => None,
            };
            let r = match ord {
                None => *cop == CmpOp::Ne,
                Some(o) => match cop {
                    CmpOp::Eq => o.is_eq(),
                    CmpOp::Ne => o.is_ne(),
                    CmpOp::Lt => o.is_lt(),
                    CmpOp::Le => o.is_le(),
                    CmpOp::Gt => o.is_gt(),
                    CmpOp::Ge => o.is_ge(),
                },
            };
            Some(Folded::Const(Const::Bool(r)))
        }
        Op::Select(cond, a, b) => match c(cond)? {
            Const::Bool(true) => Some(Folded::Same(*a)),
            Const::Bool(false) => Some(Folded::Same(*b)),
            _ => None,
        },
        Op::Cast(a, Rounding::Nearest) => {
            let from = types[a.0 as usize].dtype.val()?;
            let to = elem?;
            let x = c(a)?;
            match (x, to.is_float(), from.is_int() || from == Elem::Bool) {
                (Const::Int(i), true, true) => Some(Folded::Const(Const::Float(round_float(to, i as f64)))),
                (Const::Int(i), false, true) if to.is_int() => Some(Folded::Const(Const::Int(wrap(to, i)))),
                (Const::Float(f), true, false) => Some(Folded::Const(Const::Float(round_float(to, f)))),
                _ => None,
            }
        }
        _ => None,
    }
}

fn is_identity_rhs(op: BinaryOp, e: Elem, y: Const) -> bool {
    match (op, y) {
        (
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Shl | BinaryOp::Shr | BinaryOp::Or | BinaryOp::Xor,
            Const::Int(0),
        ) => e.is_int(),
        (BinaryOp::Mul | BinaryOp::Div, Const::Int(1)) => e.is_int(),
        (BinaryOp::Mul | BinaryOp::Div, Const::Float(f)) => f == 1.0,
        (BinaryOp::Sub, Const::Float(f)) => f == 0.0 && f.is_sign_positive(),
        (BinaryOp::And, Const::Bool(true)) | (BinaryOp::Or, Const::Bool(false)) => true,
        _ => false,
    }
}

fn is_identity_lhs(op: BinaryOp, e: Elem, x: Const) -> bool {
    match (op, x) {
        (BinaryOp::Add | BinaryOp::Or | BinaryOp::Xor, Const::Int(0)) => e.is_int(),
        (BinaryOp::Mul, Const::Int(1)) => e.is_int(),
        (BinaryOp::Mul, Const::Float(f)) => f == 1.0,
        (BinaryOp::And, Const::Bool(true)) | (BinaryOp::Or, Const::Bool(false)) => true,
        _ => false,
    }
}

/// Wraps an integer to the width and signedness of `e`.
pub(crate) fn wrap(e: Elem, i: i64) -> i64 {
    match e {
        Elem::I32 => i as i32 as i64,
        Elem::U32 => i as u32 as i64,
        _ => i,
    }
}

/// Rounds an f64 to the nearest value of float type `e` (ties to even), exactly as the
/// interpreter does.
pub(crate) fn round_float(e: Elem, x: f64) -> f64 {
    crate::host::round_to(e, x).unwrap_or(x)
}

fn fold_binary(op: BinaryOp, e: Elem, x: Const, y: Const) -> Option<Const> {
    match (x, y) {
        (Const::Int(a), Const::Int(b)) => {
            let (a, b) = (wrap(e, a), wrap(e, b));
            let r = match op {
                BinaryOp::Add => a.wrapping_add(b),
                BinaryOp::Sub => a.wrapping_sub(b),
                BinaryOp::Mul => a.wrapping_mul(b),
                BinaryOp::Div if b != 0 => int_div(e, a, b)?,
                BinaryOp::Rem if b != 0 => int_rem(e, a, b)?,
                BinaryOp::Min => a.min(b),
                BinaryOp::Max => a.max(b),
                BinaryOp::And => a & b,
                BinaryOp::Or => a | b,
                BinaryOp::Xor => a ^ b,
                BinaryOp::Shl if (0..bits(e)).contains(&b) => a << b,
                BinaryOp::Shr if (0..bits(e)).contains(&b) => {
                    if e == Elem::U32 {
                        ((a as u32) >> b) as i64
                    } else {
                        a >> b
                    }
                }
                _ => return None,
            };
            Some(Const::Int(wrap(e, r)))
        }
        (Const::Float(a), Const::Float(b)) => {
            let r = match op {
                BinaryOp::Add => a + b,
                BinaryOp::Sub => a - b,
                BinaryOp::Mul => a * b,
                BinaryOp::Div => a / b,
                BinaryOp::Min if !a.is_nan() && !b.is_nan() => a.min(b),
                BinaryOp::Max if !a.is_nan() && !b.is_nan() => a.max(b),
                _ => return None,
            };
            Some(Const::Float(round_float(e, r)))
        }
        (Const::Bool(a), Const::Bool(b)) => match op {
            BinaryOp::And => Some(Const::Bool(a & b)),
            BinaryOp::Or => Some(Const::Bool(a | b)),
            BinaryOp::Xor => Some(Const::Bool(a ^ b)),
            _ => None,
        },
        _ => None,
    }
}

fn bits(e: Elem) -> i64 {
    (e.bytes() * 8) as i64
}

fn int_div(e: Elem, a: i64, b: i64) -> Option<i64> {
    match e {
        Elem::I32 => (a as i32).checked_div(b as i32).map(|x| x as i64),
        Elem::U32 => (a as u32).checked_div(b as u32).map(|x| x as i64),
        _ => a.checked_div(b),
    }
}

fn int_rem(e: Elem, a: i64, b: i64) -> Option<i64> {
    match e {
        Elem::I32 => (a as i32).checked_rem(b as i32).map(|x| x as i64),
        Elem::U32 => (a as u32).checked_rem(b as u32).map(|x| x as i64),
        _ => a.checked_rem(b),
    }
}
