//! Source lines: every traced instruction carries the kernel source line of its tile operation
//! (through the front end's `#[track_caller]` functions, loops and branches included), and the
//! PTX carries them as `.file` / `.loc` when asked — the same code, which ptxas assembles with
//! `-lineinfo` and the emulator runs.

#[path = "prop_util.rs"]
mod util;

use replay_dsl::front::builder::trace;
use replay_dsl::front::tile::Tile;
use replay_dsl::ir::{walk_insts, CmpOp, Kernel, Op, Param};
use replay_dsl::prelude::*;
use replay_dsl::{compile_with_lines, DType, Elem, Target};
use replay_runtime::Device;

/// The traced kernel and the source lines its body spans.
fn traced() -> (Kernel, std::ops::RangeInclusive<u32>) {
    let ptr = |name: &str| Param {
        name: name.into(),
        dtype: DType::Ptr(Elem::F32),
        divisibility: 16,
    };
    let n = Param {
        name: "n".into(),
        dtype: DType::Val(Elem::I32),
        divisibility: 1,
    };
    let first = line!();
    let k = trace("lines", vec![ptr("x"), ptr("out"), n], vec![], 4, |a| {
        let x = Tile::<Ptr<f32>>::from_value(a[0]);
        let out = Tile::<Ptr<f32>>::from_value(a[1]);
        let n = Tile::<i32>::from_value(a[2]);
        let cols = arange(128);
        let mask = cols.compare(CmpOp::Lt, n);
        let v = load_or(x + cols, mask, 0.0);
        let acc = for_range(range(0, n), zeros::<f32>([128]), |_, acc| acc + v * 2.0);
        let y = acc + sum(v, 0);
        store(out + cols, exp(y), mask);
    })
    .expect("traces");
    (k, first..=line!())
}

#[test]
fn every_instruction_has_its_kernel_line() {
    let (k, lines) = traced();
    let mut all = Vec::new();
    walk_insts(&k.body, &mut |i| all.push(i));
    assert!(
        all.iter().any(|i| matches!(i.op, Op::For { .. })),
        "the kernel has a loop"
    );
    for inst in all {
        match (&inst.op, inst.loc) {
            (Op::Param(_) | Op::Yield(_), loc) => assert_eq!(loc, None, "{:?}", inst.op),
            (op, Some(loc)) => {
                assert!(loc.file.ends_with("line_info.rs"), "{op:?} at {loc:?}");
                assert!(
                    lines.contains(&loc.line),
                    "{op:?} at line {} outside {lines:?}",
                    loc.line
                );
            }
            (op, None) => panic!("{op:?} has no source line"),
        }
    }
}

#[test]
fn ptx_carries_the_lines_when_asked_and_the_code_is_the_same() {
    let (k, lines) = traced();
    for target in Target::ALL {
        let plain = compile_with_lines(&k, target, false).expect("compiles");
        assert!(!plain.line_info && !plain.ptx.contains(".loc") && !plain.ptx.contains(".file"));
        let with = compile_with_lines(&k, target, true).expect("compiles");
        assert!(with.line_info);
        let files: Vec<&str> = with.ptx.lines().filter(|l| l.starts_with(".file")).collect();
        assert_eq!(files.len(), 1, "{files:?}");
        assert!(
            files[0].starts_with(".file 1 \"") && files[0].ends_with("line_info.rs\""),
            "{files:?}"
        );
        let locs: Vec<u32> = (with.ptx.lines())
            .filter_map(|l| l.trim().strip_prefix(".loc 1 "))
            .map(|rest| {
                rest.split(' ')
                    .next()
                    .and_then(|l| l.parse().ok())
                    .expect("a line number")
            })
            .collect();
        assert!(locs.len() >= 5, "{locs:?}");
        assert!(locs.iter().all(|l| lines.contains(l)), "{locs:?} outside {lines:?}");
        // Without the directives (and blank lines) the two modules are the same text.
        let code = |ptx: &str| -> Vec<String> {
            (ptx.lines())
                .filter(|l| !l.trim().is_empty() && !l.starts_with(".file") && !l.trim().starts_with(".loc "))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(code(&with.ptx), code(&plain.ptx));
        // ptxas takes them (its own -lineinfo is not needed to assemble), the emulator too.
        let log = util::assemble_verbose("lines", target, &with.ptx).unwrap_or_else(|e| panic!("{e}"));
        util::registers_without_spills("lines", &log);
    }
    let with = compile_with_lines(&k, Target::Sm90, true).expect("compiles");
    Device::emulator()
        .load_ptx(&with.ptx, &with.entry, with.num_threads)
        .expect("the emulator parses .file and .loc");
}
