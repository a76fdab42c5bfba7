//! Dead code elimination: drops pure instructions whose results are never used.

use crate::ir::{Block, Kernel, Op, Value};
use std::collections::HashSet;

/// Removes instructions without side effects whose results are unused, to a fixed point.
pub fn dce(kernel: &mut Kernel) {
    loop {
        let mut used = HashSet::new();
        collect_uses(&kernel.body, &mut used);
        if !sweep(&mut kernel.body, &used) {
            break;
        }
    }
}

fn collect_uses(block: &Block, used: &mut HashSet<Value>) {
    for inst in &block.insts {
        used.extend(inst.op.operands());
        for b in inst.op.blocks() {
            collect_uses(b, used);
        }
    }
}

fn block_has_effects(block: &Block) -> bool {
    block.insts.iter().any(|i| {
        (i.op.has_side_effects() && !matches!(i.op, Op::Yield(_))) || i.op.blocks().into_iter().any(block_has_effects)
    })
}

fn sweep(block: &mut Block, used: &HashSet<Value>) -> bool {
    let mut changed = false;
    for inst in &mut block.insts {
        for b in inst.op.blocks_mut() {
            changed |= sweep(b, used);
        }
    }
    let before = block.insts.len();
    block.insts.retain(|inst| {
        let live_result = inst.results.iter().any(|r| used.contains(r));
        let effects = inst.op.has_side_effects() || inst.op.blocks().into_iter().any(block_has_effects);
        // Parameters stay so that the parameter list and the PTX signature agree.
        live_result || effects || matches!(inst.op, Op::Param(_))
    });
    changed | (block.insts.len() != before)
}
