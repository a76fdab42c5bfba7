//! Source lines in the PTX (`.file` / `.loc`), for profilers: each instruction's code is
//! preceded by the kernel source line that traced it, so that Nsight Compute attributes SASS to
//! the kernel's Rust lines (the driver must be asked for line tables when it loads the module).

use crate::ir::{walk_insts, Inst, Kernel, Loc};
use std::fmt::Write;

/// The source files of a kernel's instructions, numbered for `.file` from 1 in the order met,
/// and the last line emitted.
#[derive(Default)]
pub(super) struct LineTable {
    files: Vec<&'static str>,
    last: Option<Loc>,
}

impl LineTable {
    /// The files of every instruction of `kernel`, nested blocks included.
    pub(super) fn of(kernel: &Kernel) -> LineTable {
        let mut files = Vec::new();
        walk_insts(&kernel.body, &mut |inst| {
            if let Some(l) = inst.loc.filter(|l| !files.contains(&l.file)) {
                files.push(l.file);
            }
        });
        LineTable { files, last: None }
    }

    /// The `.file` directives (module scope).
    pub(super) fn header(&self) -> String {
        let mut s = String::new();
        for (i, f) in self.files.iter().enumerate() {
            let _ = writeln!(s, ".file {} \"{}\"", i + 1, f.replace('\\', "/").replace('"', "'"));
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
        let file = self.files.iter().position(|f| *f == l.file)? + 1;
        Some(format!(".loc {file} {} {}", l.line, l.column))
    }
}
