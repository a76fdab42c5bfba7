//! Source lines in the PTX (`.file` / `.loc`), for profilers: each instruction's code is
//! preceded by the kernel source line that traced it, so that Nsight Compute attributes SASS to
//! the kernel's Rust lines (the driver must be asked for line tables when it loads the module).

use crate::ir::{Block, Inst, Kernel, Loc, Op};
use std::collections::BTreeMap;
use std::fmt::Write;

/// The source files of a kernel's instructions, numbered for `.file`, and the last line
/// emitted.
#[derive(Default)]
pub(super) struct LineTable {
    files: BTreeMap<&'static str, usize>,
    last: Option<Loc>,
}

impl LineTable {
    /// The files of every instruction of `kernel`, nested blocks included.
    pub(super) fn of(kernel: &Kernel) -> LineTable {
        fn walk(block: &Block, files: &mut BTreeMap<&'static str, usize>) {
            for inst in &block.insts {
                if let Some(l) = inst.loc {
                    let n = files.len() + 1;
                    files.entry(l.file).or_insert(n);
                }
                match &inst.op {
                    Op::For { body, .. } => walk(body, files),
                    Op::If {
                        then_block, else_block, ..
                    } => {
                        walk(then_block, files);
                        walk(else_block, files);
                    }
                    _ => {}
                }
            }
        }
        let mut files = BTreeMap::new();
        walk(&kernel.body, &mut files);
        LineTable { files, last: None }
    }

    /// The `.file` directives (module scope).
    pub(super) fn header(&self) -> String {
        let mut by_index: Vec<(&usize, &&str)> = self.files.iter().map(|(f, i)| (i, f)).collect();
        by_index.sort();
        let mut s = String::new();
        for (i, f) in by_index {
            let _ = writeln!(s, ".file {i} \"{}\"", f.replace('\\', "/").replace('"', "'"));
        }
        s
    }

    /// The `.loc` directive for `inst`, when its line differs from the last one emitted.
    pub(super) fn loc(&mut self, inst: &Inst) -> Option<String> {
        let l = inst.loc?;
        if self.last == Some(l) {
            return None;
        }
        self.last = Some(l);
        Some(format!(".loc {} {} {}", self.files[l.file], l.line, l.column))
    }
}
