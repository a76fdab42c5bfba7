//! Common-subexpression elimination of pure instructions, scoped by block.

use crate::ir::{Block, Kernel, Op, Value};
use crate::types::Ty;
use std::collections::HashMap;

type Scope = HashMap<String, Value>;

/// Replaces each pure instruction that repeats an earlier one (same op, operands and result
/// type, in the same or an enclosing block) by the earlier result.
pub fn cse(kernel: &mut Kernel) {
    let mut replace: HashMap<Value, Value> = HashMap::new();
    let types = kernel.values.clone();
    let mut scopes: Vec<Scope> = Vec::new();
    run(&mut kernel.body, &types, &mut scopes, &mut replace);
}

fn is_pure(op: &Op) -> bool {
    !matches!(
        op,
        Op::Load { .. }
            | Op::Store { .. }
            | Op::Prefetch { .. }
            | Op::CopyAsync { .. }
            | Op::WaitAsync(_)
            | Op::SharedRead { .. }
            | Op::Atomic { .. }
            | Op::SetCondition { .. }
            | Op::For { .. }
            | Op::If { .. }
            | Op::Yield(_)
    )
}

fn key(op: &Op, ty: &Ty) -> String {
    format!("{op:?}|{ty:?}")
}

fn run(block: &mut Block, types: &[Ty], scopes: &mut Vec<Scope>, replace: &mut HashMap<Value, Value>) {
    scopes.push(Scope::new());
    let mut kept = Vec::with_capacity(block.insts.len());
    for mut inst in std::mem::take(&mut block.insts) {
        inst.op.map_operands(|v| *replace.get(&v).unwrap_or(&v));
        for b in inst.op.blocks_mut() {
            run(b, types, scopes, replace);
        }
        if is_pure(&inst.op) && inst.results.len() == 1 {
            let r = inst.results[0];
            let k = key(&inst.op, &types[r.0 as usize]);
            let found = scopes.iter().rev().find_map(|s| s.get(&k).copied());
            if let Some(prev) = found {
                replace.insert(r, prev);
                continue;
            }
            scopes.last_mut().expect("scope").insert(k, r);
        }
        kept.push(inst);
    }
    block.insts = kept;
    scopes.pop();
}
