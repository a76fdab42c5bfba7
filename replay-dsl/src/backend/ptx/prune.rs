//! Dead-instruction removal over the emitted code: the instructions whose results no
//! instruction reads (a value emitted in a layout its users did not end up reading — an address
//! tile that a vectorized copy rebuilds from one base register, a mask never applied). ptxas
//! removes them as well, so the cubin is the same (`tests/ptx_snapshots.rs` assembles both
//! texts of every kernel and compares the bytes); the PTX is shorter to read and to parse.
//!
//! The analysis is flow-insensitive: an instruction is dead when it has no side effect and no
//! live instruction anywhere in the kernel reads a register it writes. The emitter writes each
//! register once, except loop-carried values, branch results and an op's private accumulators,
//! whose writes are then all kept while any read of the register is. A removal makes the
//! writers of the registers it read dead in turn when nothing else reads them (a worklist).

use std::collections::HashMap;

/// Opcodes (before their first `.`) with no effect but their destination registers.
const PURE: &[&str] = &[
    "abs", "add", "and", "bfe", "bfi", "copysign", "cos", "cvt", "cvta", "div", "ex2", "fma", "ld", "ldmatrix", "lg2",
    "lop3", "mad", "max", "min", "mma", "mov", "mul", "neg", "not", "or", "prmt", "rcp", "rem", "rsqrt", "selp", "set",
    "setp", "shfl", "shl", "shr", "sin", "slct", "sqrt", "sub", "tanh", "testp", "xor",
];

/// One line of code: what it writes and reads, and whether it may be removed.
struct Line<'a> {
    writes: Vec<&'a str>,
    reads: Vec<&'a str>,
    removable: bool,
}

/// The registers named in `s` (`%r12`, `%rd3`, `%p0`, `%f7`, `%fd1`, `%h4`; not special
/// registers such as `%tid.x`).
fn registers(s: &str) -> Vec<&str> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            i += 1;
            continue;
        }
        let letters = b[i + 1..].iter().take_while(|c| c.is_ascii_lowercase()).count();
        let digits = b[i + 1 + letters..].iter().take_while(|c| c.is_ascii_digit()).count();
        let class = &s[i + 1..i + 1 + letters];
        let end = i + 1 + letters + digits;
        if digits > 0 && matches!(class, "p" | "h" | "r" | "f" | "rd" | "fd") {
            out.push(&s[i..end]);
        }
        i = end.max(i + 1);
    }
    out
}

/// The destination operand of `operands` (the first: a register, `{…}` of registers, or
/// `%p|%q`) and the rest.
fn split_destination(operands: &str) -> (&str, &str) {
    let at = if operands.starts_with('{') {
        operands.find('}').map_or(operands.len(), |i| i + 1)
    } else {
        operands.find(',').unwrap_or(operands.len())
    };
    operands.split_at(at)
}

/// Parses one line of code (an instruction, a label or a directive).
fn parse(line: &str) -> Line<'_> {
    let text = line.trim().trim_end_matches(';');
    let (guard, inst) = match text.strip_prefix('@') {
        Some(rest) => rest.split_once(char::is_whitespace).unwrap_or((rest, "")),
        None => ("", text),
    };
    let (opcode, operands) = inst.split_once(char::is_whitespace).unwrap_or((inst, ""));
    let base = opcode.split('.').next().unwrap_or("");
    let ordered = [".volatile", ".acquire", ".relaxed", ".mmio"]
        .iter()
        .any(|q| opcode.contains(q));
    let pure = !opcode.is_empty() && PURE.contains(&base) && !ordered;
    if !pure {
        return Line {
            writes: vec![],
            reads: registers(text),
            removable: false,
        };
    }
    let (dest, rest) = split_destination(operands.trim());
    let mut reads = registers(rest);
    reads.extend(registers(guard));
    let writes = registers(dest);
    Line {
        removable: !writes.is_empty(),
        writes,
        reads,
    }
}

/// `code` (lines of PTX instructions, labels and directives) without its dead instructions.
pub(super) fn without_dead_instructions(code: &str) -> String {
    let lines: Vec<&str> = code.lines().collect();
    let parsed: Vec<Line> = lines.iter().map(|l| parse(l)).collect();
    let mut readers: HashMap<&str, usize> = HashMap::new();
    let mut writers: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, l) in parsed.iter().enumerate() {
        for r in &l.reads {
            *readers.entry(r).or_default() += 1;
        }
        for w in &l.writes {
            writers.entry(w).or_default().push(i);
        }
    }
    let unread =
        |readers: &HashMap<&str, usize>, l: &Line| l.writes.iter().all(|w| readers.get(w).copied().unwrap_or(0) == 0);
    let mut dead = vec![false; lines.len()];
    let mut work: Vec<usize> = (0..parsed.len()).filter(|&i| parsed[i].removable).collect();
    while let Some(i) = work.pop() {
        if dead[i] || !parsed[i].removable || !unread(&readers, &parsed[i]) {
            continue;
        }
        dead[i] = true;
        for r in &parsed[i].reads {
            let n = readers.get_mut(r).expect("a read register is counted");
            *n -= 1;
            if *n == 0 {
                work.extend(writers.get(r).into_iter().flatten().copied());
            }
        }
    }
    let mut out = String::with_capacity(code.len());
    for (line, _) in lines.iter().zip(&dead).filter(|(_, d)| !**d) {
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{registers, without_dead_instructions};

    fn pruned(code: &str) -> String {
        without_dead_instructions(&code.replace("\n    ", "\n\t"))
    }

    #[test]
    fn registers_are_told_from_special_registers() {
        let r = registers("mad.wide.s32 %rd616, %r1404, 4, %rd335; mov.u32 %r1, %tid.x; @%p3 setp %p1|%p2");
        assert_eq!(r, ["%rd616", "%r1404", "%rd335", "%r1", "%p3", "%p1", "%p2"]);
    }

    #[test]
    fn a_chain_that_feeds_nothing_goes_and_what_feeds_a_store_stays() {
        let code = "\tmov.u32 %r1, %tid.x;
    add.s32 %r2, %r1, 4;
    mul.lo.s32 %r3, %r2, %r2;
    mad.wide.s32 %rd2, %r3, 4, %rd1;
    mad.wide.s32 %rd3, %r1, 4, %rd1;
    st.global.f32 [%rd3], %f1;
";
        assert_eq!(
            pruned(code),
            "\tmov.u32 %r1, %tid.x;\n\tmad.wide.s32 %rd3, %r1, 4, %rd1;\n\tst.global.f32 [%rd3], %f1;\n"
        );
    }

    #[test]
    fn side_effects_labels_and_guards_stay() {
        let code = "\tsetp.lt.s32 %p1, %r1, %r2;
    @%p1 bra $L_1;
    bar.sync 0;
    cp.async.cg.shared.global [%r5+0], [%rd7], 16, %r6;
    atom.global.add.f32 %f2, [%rd8], %f3;
$L_1:
    ret;
";
        assert_eq!(pruned(code), code.replace("\n    ", "\n\t"));
    }

    #[test]
    fn a_vector_or_pair_result_stays_while_any_part_is_read() {
        let code = "\tld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1];
    ld.global.v2.f32 {%f5, %f6}, [%rd2];
    setp.eq.s32 %p1|%p2, %r1, 0;
    add.f32 %f7, %f2, %f2;
    st.global.f32 [%rd3], %f7;
    @%p2 st.global.f32 [%rd3], %f7;
";
        let out = pruned(code);
        assert!(out.contains("ld.global.v4.f32") && out.contains("setp.eq.s32"), "{out}");
        assert!(!out.contains("ld.global.v2.f32"), "{out}");
    }

    #[test]
    fn loop_carried_writes_stay_while_the_register_is_read() {
        // %r2 is written before the loop and in it, and read in the loop.
        let code = "\tmov.u32 %r2, 0;
$L_0:
    add.s32 %r3, %r2, 1;
    mov.u32 %r2, %r3;
    setp.lt.s32 %p1, %r2, 8;
    @%p1 bra $L_0;
    add.s32 %r9, %r2, %r2;
";
        let out = pruned(code);
        assert_eq!(out.matches("%r2").count(), 4, "{out}");
        assert!(!out.contains("%r9"), "{out}");
    }
}
